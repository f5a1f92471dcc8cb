//! `lutra-pi`: one packed model, mapped and read in place, one prompt or a conversation,
//! text streamed to a writer; every working buffer comes from the binary's arena before
//! the first token of an answer, and the arena is sealed while tokens are generated.

use std::format;
use std::io::{BufRead, Write};
use std::path::Path;
use std::string::{String, ToString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use std::vec::Vec;

use lutra::{LoadOptions, Model, Session, SessionOptions};
use lutra_core::chat::ChatHistory;
use lutra_core::engine::{default_context, CancelFlag, Error, Generation, Role, StopReason};
use lutra_core::sampler::{scratch_len, SamplerConfig};

use crate::arena::{ArenaStats, Heap};
use crate::packed::{check_fits, check_packed, import_bound, stream, Refusal};

/// What one run needs.
pub struct Options<'a> {
    pub model: &'a Path,
    pub prompt: &'a str,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub threads: usize,
    /// Positions of the session (0: [`default_context`] of the model's, or as many as the arena holds).
    pub context: usize,
}

/// What a run measured.
pub struct Report {
    pub load: Duration,
    /// Positions of the session.
    pub context: usize,
    pub prompt_tokens: usize,
    pub prefill: Duration,
    pub generated: usize,
    pub generation: Duration,
    pub stop: Option<StopReason>,
    /// Bytes of the KV cache (part of `session`).
    pub kv_cache_bytes: usize,
    /// Bytes of weights read in place from the mapped file.
    pub mapped_weight_bytes: usize,
    /// The session's budget (`budget::Dims::session_bytes`).
    pub session_budget: usize,
    /// What the import may take by the file's header (`budget::import_bytes`).
    pub import_bound: Option<usize>,
    /// The arena before loading, once the model was loaded (tokenizer, model
    /// structure), once the session and generation started (prefill done: sealed from
    /// here), and at the end (its peak is the heap's high-water mark).
    pub arena: [ArenaStats; 4],
    pub arena_capacity: usize,
}

impl Report {
    /// Arena bytes the model's import took.
    pub fn model_bytes(&self) -> usize {
        self.arena[1].used - self.arena[0].used
    }
    /// The most arena bytes the import held at once.
    pub fn import_peak(&self) -> usize {
        self.arena[1].peak - self.arena[0].used
    }
    /// Arena bytes the session and generation took.
    pub fn session_bytes(&self) -> usize {
        self.arena[2].used - self.arena[1].used
    }
}

/// Loads a packed `.lutra` model (anything else is refused: pack it first) whose import
/// fits in `free` bytes; with that import's bound from the header
/// ([`crate::packed::import_bound`]).
pub fn load(path: &Path, free: usize) -> Result<(Model, Option<usize>), String> {
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::Read::read_exact(&mut file, &mut magic).map_err(|e| format!("{}: {e}", path.display()))?;
    let refused = || format!("{}: {}", path.display(), Refusal::NotPacked);
    if !lutra_core::formats::gguf::is_gguf(&magic) {
        return Err(refused());
    }
    // refused before anything is imported: the header says what the file is
    let map = lutra::inspect::map_file(path).map_err(|e| e.to_string())?;
    let bound = match lutra_core::formats::gguf::Gguf::parse(&map) {
        Ok(g) => {
            check_packed(&g, free).map_err(|r| format!("{}: {r}", path.display()))?;
            import_bound(&g)
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    drop(map);
    let model = Model::load_with(path, &LoadOptions::default()).map_err(|e| e.to_string())?;
    if !model.engine().info().packed {
        return Err(refused());
    }
    Ok((model, bound))
}

/// A session of `context` positions (0: the model's default, or as many as the arena
/// holds) on `threads` threads, refused with the sizes when it does not fit what is left
/// of `heap`; with its budget.
fn open_session(model: &Model, context: usize, threads: usize, heap: &dyn Heap) -> Result<(Session, usize), String> {
    let most = default_context(model.engine().info().hparams.context_length);
    let context = match context {
        // the longest context that fits what is left of the arena
        0 => fitting_context(model, most, heap.free()).unwrap_or(most),
        n => n,
    };
    let budget = check_fits(model.engine(), context, heap.free()).map_err(|s| Refusal::TooBig(s).to_string())?;
    let session =
        model.session(&SessionOptions { context, threads: threads.max(1), ..SessionOptions::default() }).map_err(|e| e.to_string())?;
    Ok((session, budget))
}

/// Runs `opts` on `heap` (the binary's global allocator), writing the prompt and the
/// generated text to `out` as it comes.
pub fn run(opts: &Options<'_>, heap: &dyn Heap, out: &mut impl Write) -> Result<Report, String> {
    let before = heap.stats();
    let t0 = Instant::now();
    let (model, import_bound) = load(opts.model, heap.free())?;
    let load = t0.elapsed();
    let loaded = heap.stats();
    let (mut session, session_budget) = open_session(&model, opts.context, opts.threads, heap)?;
    let context = session.engine().context();
    let cache = session.engine().cache_info();
    let kv_cache_bytes = cache.key_bytes + cache.value_bytes;
    let mapped_weight_bytes = model.engine().info().matrix_bytes;
    let prompt = model.engine().encode(opts.prompt, true).map_err(|e| e.to_string())?;
    let t1 = Instant::now();
    let (engine_session, gemv) = session.parts();
    let mut generation = Generation::start(engine_session, &prompt, opts.sampler, opts.max_tokens).map_err(|e| e.to_string())?;
    engine_session.prefill(&gemv).map_err(|e| e.to_string())?;
    let prefill = t1.elapsed();
    let started = heap.stats();
    write!(out, "{}", opts.prompt).and_then(|_| out.flush()).map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    let mut written = Ok(());
    let generated = stream(
        &mut generation,
        engine_session,
        &gemv,
        |sealed| if sealed { heap.seal() } else { heap.unseal() },
        |text| {
            if written.is_ok() {
                written = out.write_all(text.as_bytes()).and_then(|_| out.flush());
            }
        },
    )
    .map_err(|e| e.to_string())?;
    written.map_err(|e| e.to_string())?;
    let generation_time = t2.elapsed();
    Ok(Report {
        load,
        context,
        prompt_tokens: prompt.len(),
        prefill,
        generated,
        generation: generation_time,
        stop: generation.stop_reason(),
        kv_cache_bytes,
        mapped_weight_bytes,
        session_budget,
        import_bound,
        arena: [before, loaded, started, heap.stats()],
        arena_capacity: heap.capacity(),
    })
}

/// What a conversation needs.
pub struct ChatOptions<'a> {
    pub model: &'a Path,
    /// A system prompt, placed as the model's template places it.
    pub system: Option<&'a str>,
    /// One of llama.cpp's builtin template names instead of the file's.
    pub chat_template: Option<&'a str>,
    /// Most tokens per answer.
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub threads: usize,
    /// Positions of the whole conversation (0: as for [`Options::context`]).
    pub context: usize,
}

/// One answered turn.
pub struct Turn {
    /// Tokens fed for this turn: only what the session did not hold yet.
    pub prompt_tokens: usize,
    pub generated: usize,
    pub time: Duration,
    /// Positions the conversation holds now.
    pub position: usize,
    pub context: usize,
    pub stop: Option<StopReason>,
    /// The arena after the turn.
    pub arena: ArenaStats,
}

/// Longest text one token can release ([`lutra_core::engine::TextStream`]'s room): an
/// answer of `n` tokens fits in `n` times this, reserved before the arena is sealed.
const PIECE_BYTES: usize = 256 * 3;

/// A conversation on `heap`: one line of `input` per user turn, each answer streamed to
/// `out` and ended by a newline (as `lutra chat` writes it), `on_turn` told after each.
/// Every turn feeds only its new tokens; while an answer is generated the arena is
/// sealed. `cancel` stops the answer being generated (the conversation goes on);
/// `answering` says when one is. A turn that could need more than the arena has left
/// ends the conversation with the sizes, as a full context does.
pub fn chat(
    opts: &ChatOptions<'_>,
    heap: &dyn Heap,
    input: impl BufRead,
    out: &mut impl Write,
    cancel: &CancelFlag,
    answering: &AtomicBool,
    mut on_turn: impl FnMut(&Turn),
) -> Result<(), String> {
    let (mut model, _) = load(opts.model, heap.free())?;
    if let Some(name) = opts.chat_template {
        model = model.with_chat_template(name).map_err(|e| e.to_string())?;
    }
    let info = model.engine().info();
    if !info.chat {
        return Err(Error::NoChatTemplate { architecture: info.architecture }.to_string());
    }
    let (mut session, _) = open_session(&model, opts.context, opts.threads, heap)?;
    let context = session.engine().context();
    let (session, gemv) = session.parts();
    let io = |e: std::io::Error| e.to_string();
    let mut history = ChatHistory::new();
    // the answer's text, kept for the next turn's prompt: room for the longest answer
    // before the first seal, so recording it never allocates
    let mut answer = String::new();
    answer
        .try_reserve_exact(opts.max_tokens.saturating_mul(PIECE_BYTES))
        .map_err(|_| "no room for an answer's text in the arena".to_string())?;
    let scratch = 8 * scratch_len(model.engine().vocab_size());
    for line in input.lines() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let mut turns = Vec::new();
        if let (true, Some(system)) = (history.messages().is_empty(), opts.system) {
            turns.push((Role::System, system));
        }
        turns.push((Role::User, line.as_str()));
        // the formatted conversation (a few copies), its tokens and the sampler's scratch
        let needed = 8 * (history.text().len() + line.len() + opts.system.map_or(0, str::len) + 1024) + scratch + (64 << 10);
        if needed > heap.free() {
            writeln!(out).map_err(io)?;
            return Err(format!(
                "the arena has {} bytes ({:.2} MiB) free and a turn could need {needed}: the conversation ends here",
                heap.free(),
                heap.free() as f64 / (1 << 20) as f64
            ));
        }
        let prompt = history.next_turn(session, &turns).map_err(|e| e.to_string())?;
        cancel.reset();
        let t = Instant::now();
        let mut generation = match Generation::start(session, &prompt.tokens, opts.sampler, opts.max_tokens) {
            Ok(g) => g.with_cancel_flag(cancel.clone()),
            Err(e @ Error::PromptTooLong { .. }) => return Err(format!("{e}: the conversation ends here (-c sets the context)")),
            Err(e) => return Err(e.to_string()),
        };
        session.prefill(&gemv).map_err(|e| e.to_string())?;
        answer.clear();
        answering.store(true, Ordering::SeqCst);
        let mut written = Ok(());
        let generated = stream(
            &mut generation,
            session,
            &gemv,
            |sealed| if sealed { heap.seal() } else { heap.unseal() },
            |piece| {
                // within the room reserved: PIECE_BYTES per token
                if answer.capacity() - answer.len() >= piece.len() {
                    answer.push_str(piece);
                }
                if written.is_ok() {
                    written = out.write_all(piece.as_bytes()).and_then(|_| out.flush());
                }
            },
        );
        answering.store(false, Ordering::SeqCst);
        let generated = generated.map_err(|e| e.to_string())?;
        written.map_err(io)?;
        writeln!(out).and_then(|_| out.flush()).map_err(io)?;
        let stop = generation.stop_reason();
        // freed before the history grows, so the arena's top comes back down past it
        drop(generation);
        history.add_answer(&answer);
        on_turn(&Turn {
            prompt_tokens: prompt.tokens.len(),
            generated,
            time: t.elapsed(),
            position: session.position(),
            context,
            stop,
            arena: heap.stats(),
        });
        if stop == Some(StopReason::ContextFull) {
            return Err(format!("the context is full ({context} positions): the conversation ends here (-c sets the context)"));
        }
    }
    Ok(())
}

/// The most positions, up to `most`, whose session fits in `free` bytes.
fn fitting_context(model: &Model, most: usize, free: usize) -> Option<usize> {
    let dims = model.engine().dims();
    let (mut lo, mut hi) = (1, most);
    if dims.session_bytes(lo) > free {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if dims.session_bytes(mid) <= free {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}
