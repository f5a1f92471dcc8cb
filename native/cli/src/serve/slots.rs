//! The engine thread: `--parallel` sessions ("slots") over one model and one thread pool.
//! Requests wait in a bounded queue; each takes the free slot whose cached tokens share
//! the longest prefix with its prompt, so a conversation's next turn computes only its
//! new tokens. Each step computes one prompt chunk of every slot still reading its
//! prompt, then one token of every generating slot, those together over one pass of the
//! weights (`Session::logits_together`), so a long prompt does not stall the others and
//! N streams cost about one pass of the weights per token, not N. A request whose client
//! has gone (its event receiver dropped) is dropped at the next step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use lutra::core::json::JsonConstraint;
use lutra::engine::{Generation, Session};
use lutra::threads::Pool;
use lutra::{Attention, SamplerConfig, StopReason, ValueFormat};
use tokio::sync::mpsc::UnboundedSender;

use super::stop::StopFilter;

/// Prompt tokens a slot computes per step: a client that goes away mid-prompt is noticed
/// within one chunk, and the generating slots wait at most one chunk per prompt for their
/// next token.
const PREFILL_CHUNK: usize = 64;

/// One generation asked of the engine.
pub struct Job {
    /// The whole prompt (BOS and chat format included); shorter than the context.
    pub prompt: Vec<u32>,
    pub sampler: SamplerConfig,
    /// At least 1; the context may stop the generation earlier.
    pub max_tokens: usize,
    /// Strings that end the text where they first appear (not included in it).
    pub stop: Vec<String>,
    /// The text must be one JSON document of this schema.
    pub json: Option<JsonConstraint>,
    pub events: UnboundedSender<Event>,
}

/// What the engine reports of a job, in order: text, then `Done` or `Failed`.
pub enum Event {
    Text(String),
    Done(Summary),
    Failed(String),
}

/// Why a generation ended, as OpenAI's `finish_reason` says it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Finish {
    /// An end token or a stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Counts and times of a finished job (llama-server's `timings`).
#[derive(Clone, Debug)]
pub struct Summary {
    pub finish: Finish,
    pub prompt_tokens: usize,
    /// Prompt tokens the slot already held, not computed again.
    pub cached_tokens: usize,
    pub prompt_ms: f64,
    /// Tokens whose text was produced (an end token is not counted).
    pub completion_tokens: usize,
    pub predicted_ms: f64,
}

/// The server's handle on the engine thread.
#[derive(Clone)]
pub struct Scheduler {
    queue: SyncSender<Job>,
    busy: Arc<AtomicUsize>,
    slots: usize,
}

/// The queue holds as many jobs as `--queue` allows.
pub struct QueueFull;

impl Scheduler {
    /// Queues `job`, or refuses it at once when the queue is full.
    pub fn submit(&self, job: Job) -> Result<(), QueueFull> {
        self.queue.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) | TrySendError::Disconnected(_) => QueueFull,
        })
    }

    /// (busy, total) slots.
    pub fn slots(&self) -> (usize, usize) {
        (self.busy.load(Ordering::Relaxed), self.slots)
    }
}

/// How the slots are made.
pub struct SlotOptions {
    pub parallel: usize,
    pub context: usize,
    pub threads: usize,
    pub queue: usize,
    pub attention: Attention,
    pub values: ValueFormat,
}

/// Opens the sessions (so a context that does not fit fails before the server binds)
/// and starts the engine thread.
pub fn start(model: &lutra::Model, opts: SlotOptions) -> Result<Scheduler, String> {
    let mut sessions = Vec::with_capacity(opts.parallel);
    for _ in 0..opts.parallel {
        sessions.push(Session::with_values(model.engine(), opts.context, &opts.attention, opts.values).map_err(|e| e.to_string())?);
    }
    let (queue, jobs) = std::sync::mpsc::sync_channel(opts.queue);
    let busy = Arc::new(AtomicUsize::new(0));
    let engine = Engine {
        slots: sessions.into_iter().map(|session| Slot { session, task: None, last_used: 0 }).collect(),
        pool: Pool::new(opts.threads.max(1)),
        logits: Vec::new(),
        busy: busy.clone(),
        clock: 0,
    };
    std::thread::Builder::new()
        .name("lutra-engine".into())
        .spawn(move || engine.run(jobs))
        .map_err(|e| format!("cannot start the engine thread: {e}"))?;
    Ok(Scheduler { queue, busy, slots: opts.parallel })
}

struct Engine {
    slots: Vec<Slot>,
    pool: Pool,
    /// Working memory of the decode steps: every generating slot's logits.
    logits: Vec<f32>,
    busy: Arc<AtomicUsize>,
    /// Counts assignments: the least recently used slot is reused first.
    clock: u64,
}

struct Slot {
    session: Session,
    task: Option<Task>,
    last_used: u64,
}

struct Task {
    job: Job,
    /// Prompt tokens appended so far (the cached ones included).
    fed: usize,
    cached: usize,
    generation: Option<Generation>,
    stop: StopFilter,
    started: Instant,
    prompt_ms: f64,
    decode_started: Option<Instant>,
}

impl Engine {
    fn run(mut self, jobs: Receiver<Job>) {
        loop {
            // fill the free slots; wait for a job only when nothing is running
            while self.slots.iter().any(|s| s.task.is_none()) {
                let job = if self.slots.iter().any(|s| s.task.is_some()) {
                    match jobs.try_recv() {
                        Ok(job) => job,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => return,
                    }
                } else {
                    match jobs.recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    }
                };
                if !job.events.is_closed() {
                    self.assign(job);
                }
            }
            self.drop_abandoned();
            for i in 0..self.slots.len() {
                if self.slots[i].task.as_ref().is_some_and(|t| t.generation.is_none()) {
                    self.prefill_step(i);
                }
            }
            self.decode_step();
            self.busy.store(self.slots.iter().filter(|s| s.task.is_some()).count(), Ordering::Relaxed);
        }
    }

    /// Puts `job` on the free slot that holds the longest prefix of its prompt (the least
    /// recently used among equals) and forgets the rest of that slot's tokens.
    fn assign(&mut self, job: Job) {
        let shared = |s: &Slot| s.session.tokens().iter().zip(&job.prompt).take_while(|(a, b)| a == b).count();
        let Some(i) = (0..self.slots.len())
            .filter(|&i| self.slots[i].task.is_none())
            .min_by_key(|&i| (std::cmp::Reverse(shared(&self.slots[i])), self.slots[i].last_used))
        else {
            return;
        };
        // the last prompt token is always fed again: its logits start the generation
        let cached = shared(&self.slots[i]).min(job.prompt.len() - 1);
        self.clock += 1;
        let slot = &mut self.slots[i];
        slot.last_used = self.clock;
        if let Err(e) = slot.session.truncate(cached) {
            let _ = job.events.send(Event::Failed(e.to_string()));
            return;
        }
        let stop = StopFilter::new(job.stop.clone());
        slot.task =
            Some(Task { job, fed: cached, cached, generation: None, stop, started: Instant::now(), prompt_ms: 0.0, decode_started: None });
    }

    /// Frees the slots whose clients went away: what they computed stays as their cache.
    fn drop_abandoned(&mut self) {
        for slot in &mut self.slots {
            if slot.task.as_ref().is_some_and(|t| t.job.events.is_closed()) {
                slot.task = None;
            }
        }
    }

    /// One prompt chunk of slot `i`; after its last chunk, the prompt's last token is
    /// appended for the next decode step to compute with the others'.
    fn prefill_step(&mut self, i: usize) {
        let gemv = self.pool.split();
        let slot = &mut self.slots[i];
        let Some(task) = slot.task.as_mut() else { return };
        let prompt = &task.job.prompt;
        let last = prompt.len() - 1;
        let end = (task.fed + PREFILL_CHUNK).min(last);
        let result = if task.fed < end {
            slot.session.feed(&gemv, &prompt[task.fed..end]).map(|()| task.fed = end)
        } else {
            Generation::start(&mut slot.session, &prompt[last..], task.job.sampler, task.job.max_tokens).map(|g| {
                task.fed = prompt.len();
                task.generation = Some(match task.job.json.take() {
                    Some(json) => g.with_constraint(Box::new(json)),
                    None => g,
                });
            })
        };
        if let Err(e) = result {
            fail(slot, e.to_string());
        }
    }

    /// One token of every generating slot, their logits computed together over one pass
    /// of the weights.
    fn decode_step(&mut self) {
        let gemv = self.pool.split();
        let decoding = |s: &Slot| s.task.as_ref().is_some_and(|t| t.generation.is_some());
        let mut sessions: Vec<&mut Session> = self.slots.iter_mut().filter(|s| decoding(s)).map(|s| &mut s.session).collect();
        if sessions.is_empty() {
            return;
        }
        if let Err(e) = Session::logits_together(&gemv, &mut sessions, &mut self.logits) {
            for slot in self.slots.iter_mut().filter(|s| decoding(s)) {
                fail(slot, e.to_string());
            }
            return;
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if !decoding(slot) {
                continue;
            }
            let task = slot.task.as_mut().expect("decoding");
            if task.decode_started.is_none() {
                // the prompt's last token was computed in this step, with its logits
                task.prompt_ms = task.started.elapsed().as_secs_f64() * 1e3;
                task.decode_started = Some(Instant::now());
            }
            let generation = task.generation.as_mut().expect("decoding");
            let finish = match generation.next_piece(&mut slot.session, &gemv) {
                Ok(Some(piece)) => {
                    let (text, stopped) = task.stop.push(piece);
                    if !text.is_empty() {
                        let _ = task.job.events.send(Event::Text(text));
                    }
                    stopped.then_some(Finish::Stop)
                }
                Ok(None) => {
                    let (rest, stopped) = task.stop.finish();
                    if !rest.is_empty() {
                        let _ = task.job.events.send(Event::Text(rest));
                    }
                    Some(match generation.stop_reason() {
                        _ if stopped => Finish::Stop,
                        Some(StopReason::EndToken(_)) | Some(StopReason::Cancelled) | None => Finish::Stop,
                        Some(StopReason::MaxTokens) | Some(StopReason::ContextFull) => Finish::Length,
                    })
                }
                Err(e) => {
                    fail(slot, e.to_string());
                    continue;
                }
            };
            if let Some(finish) = finish {
                let task = slot.task.take().expect("decoding");
                let generation = task.generation.as_ref().expect("decoding");
                let completion_tokens = match generation.stop_reason() {
                    Some(StopReason::EndToken(_)) => generation.generated() - 1,
                    _ => generation.generated(),
                };
                let summary = Summary {
                    finish,
                    prompt_tokens: task.job.prompt.len(),
                    cached_tokens: task.cached,
                    prompt_ms: task.prompt_ms,
                    completion_tokens,
                    predicted_ms: task.decode_started.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3),
                };
                eprintln!(
                    "slot {i}: {} prompt tokens ({} cached) in {:.1} ms, {} generated in {:.1} ms, {}",
                    summary.prompt_tokens,
                    summary.cached_tokens,
                    summary.prompt_ms,
                    summary.completion_tokens,
                    summary.predicted_ms,
                    finish.as_str()
                );
                let _ = task.job.events.send(Event::Done(summary));
            }
        }
    }
}

/// Ends the slot's job with `message`; the session may hold tokens never computed, so it
/// starts again empty.
fn fail(slot: &mut Slot, message: String) {
    if let Some(task) = slot.task.take() {
        let _ = task.job.events.send(Event::Failed(message));
    }
    slot.session.reset();
}
