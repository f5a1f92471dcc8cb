//! `lutra-pi`: one packed model, mapped and read in place, one prompt, text streamed to
//! a writer; every working buffer comes from the binary's arena before the first token,
//! and the arena is sealed while tokens are generated.

use std::format;
use std::io::Write;
use std::path::Path;
use std::string::{String, ToString};
use std::time::{Duration, Instant};

use lutra::{LoadOptions, Model, SessionOptions};
use lutra_core::engine::{default_context, Generation, StopReason};
use lutra_core::sampler::SamplerConfig;

use crate::arena::{ArenaStats, Heap};
use crate::packed::{check_fits, check_packed, stream, Refusal};

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
    /// Arena bytes the session and generation took.
    pub fn session_bytes(&self) -> usize {
        self.arena[2].used - self.arena[1].used
    }
}

/// Loads a packed `.lutra` model (anything else is refused: pack it first) whose import
/// fits in `free` bytes.
pub fn load(path: &Path, free: usize) -> Result<Model, String> {
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::Read::read_exact(&mut file, &mut magic).map_err(|e| format!("{}: {e}", path.display()))?;
    let refused = || format!("{}: {}", path.display(), Refusal::NotPacked);
    if !lutra_core::formats::gguf::is_gguf(&magic) {
        return Err(refused());
    }
    // refused before anything is imported: the header says what the file is
    let map = lutra::inspect::map_file(path).map_err(|e| e.to_string())?;
    match lutra_core::formats::gguf::Gguf::parse(&map) {
        Ok(g) => check_packed(&g, free).map_err(|r| format!("{}: {r}", path.display()))?,
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    drop(map);
    let model = Model::load_with(path, &LoadOptions::default()).map_err(|e| e.to_string())?;
    if !model.engine().info().packed {
        return Err(refused());
    }
    Ok(model)
}

/// Runs `opts` on `heap` (the binary's global allocator), writing the prompt and the
/// generated text to `out` as it comes.
pub fn run(opts: &Options<'_>, heap: &dyn Heap, out: &mut impl Write) -> Result<Report, String> {
    let before = heap.stats();
    let t0 = Instant::now();
    let model = load(opts.model, heap.free())?;
    let load = t0.elapsed();
    let loaded = heap.stats();
    let most = default_context(model.engine().info().hparams.context_length);
    let context = match opts.context {
        // the longest context that fits what is left of the arena
        0 => fitting_context(&model, most, heap.free()).unwrap_or(most),
        n => n,
    };
    let session_budget = check_fits(model.engine(), context, heap.free()).map_err(|s| Refusal::TooBig(s).to_string())?;
    let mut session =
        model.session(&SessionOptions { context, threads: opts.threads.max(1), ..SessionOptions::default() }).map_err(|e| e.to_string())?;
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
        arena: [before, loaded, started, heap.stats()],
        arena_capacity: heap.capacity(),
    })
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
