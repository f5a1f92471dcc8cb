//! The engine thread: `--parallel` sessions ("slots") over one model and one thread pool.
//! Requests wait in a bounded queue; each takes the free slot whose cached tokens share
//! the longest prefix with its prompt, so a conversation's next turn computes only its
//! new tokens. The slots that are busy advance in turn, one prompt chunk or one token a
//! step, so a long prompt does not stall the others. A request whose client has gone
//! (its event receiver dropped) is dropped at its slot's next step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use lutra::engine::{Generation, Session};
use lutra::threads::Pool;
use lutra::{Attention, SamplerConfig, StopReason, ValueFormat};
use tokio::sync::mpsc::UnboundedSender;

use super::stop::StopFilter;

/// Prompt tokens a slot computes per step: a client that goes away mid-prompt is noticed
/// within one chunk, and the other slots wait at most one chunk for their next token.
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
    /// Prompt tokens computed so far (the cached ones included).
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
            for i in 0..self.slots.len() {
                if self.slots[i].task.is_some() {
                    self.step(i);
                }
            }
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

    /// One prompt chunk or one token of slot `i`.
    fn step(&mut self, i: usize) {
        let gemv = self.pool.split();
        let slot = &mut self.slots[i];
        let Some(task) = slot.task.as_mut() else { return };
        if task.job.events.is_closed() {
            // the client went away: what the slot computed stays as its cache
            slot.task = None;
            return;
        }
        let session = &mut slot.session;
        let result = (|| -> Result<Option<Finish>, lutra::engine::Error> {
            let Some(generation) = task.generation.as_mut() else {
                let last = task.job.prompt.len() - 1;
                let end = (task.fed + PREFILL_CHUNK).min(last);
                if task.fed < end {
                    session.feed(&gemv, &task.job.prompt[task.fed..end])?;
                    task.fed = end;
                    return Ok(None);
                }
                let generation = Generation::start(session, &task.job.prompt[last..], task.job.sampler, task.job.max_tokens)?;
                session.logits(&gemv)?;
                task.fed = last + 1;
                task.prompt_ms = task.started.elapsed().as_secs_f64() * 1e3;
                task.decode_started = Some(Instant::now());
                task.generation = Some(generation);
                return Ok(None);
            };
            match generation.next_piece(session, &gemv)? {
                Some(piece) => {
                    let (text, stopped) = task.stop.push(piece);
                    if !text.is_empty() {
                        let _ = task.job.events.send(Event::Text(text));
                    }
                    Ok(stopped.then_some(Finish::Stop))
                }
                None => {
                    let (rest, stopped) = task.stop.finish();
                    if !rest.is_empty() {
                        let _ = task.job.events.send(Event::Text(rest));
                    }
                    Ok(Some(match generation.stop_reason() {
                        _ if stopped => Finish::Stop,
                        Some(StopReason::EndToken(_)) | Some(StopReason::Cancelled) | None => Finish::Stop,
                        Some(StopReason::MaxTokens) | Some(StopReason::ContextFull) => Finish::Length,
                    }))
                }
            }
        })();
        match result {
            Ok(None) => {}
            Ok(Some(finish)) => {
                let task = slot.task.take().expect("running");
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
            Err(e) => {
                let task = slot.task.take().expect("running");
                // the session may hold tokens that were never computed
                slot.session.reset();
                let _ = task.job.events.send(Event::Failed(e.to_string()));
            }
        }
    }
}
