//! `lutra-pi`: one packed model, one prompt, text streamed to a writer.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use lutra::{LoadOptions, Model, SessionOptions};
use lutra_core::engine::{Attention, Generation, StopReason};
use lutra_core::sampler::SamplerConfig;

/// What one run needs.
pub struct Options<'a> {
    pub model: &'a Path,
    pub prompt: &'a str,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub threads: usize,
    /// Positions of the session (0: the model's, at most 4096).
    pub context: usize,
}

/// What a run measured.
pub struct Report {
    pub load: Duration,
    pub prompt_tokens: usize,
    pub prefill: Duration,
    pub generated: usize,
    pub generation: Duration,
    pub stop: Option<StopReason>,
    /// Bytes of the buffers the session allocated at start: KV cache and working memory.
    pub kv_cache_bytes: usize,
    /// Bytes of weights read in place from the mapped file.
    pub mapped_weight_bytes: usize,
}

/// Loads a packed `.lutra` model (anything else is refused: pack it first).
pub fn load(path: &Path) -> Result<Model, String> {
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::Read::read_exact(&mut file, &mut magic).map_err(|e| format!("{}: {e}", path.display()))?;
    let refused = || format!("{}: not a packed .lutra model (make one with `lutra pack -m MODEL -o FILE.lutra`)", path.display());
    if magic != *b"GGUF" {
        return Err(refused());
    }
    // refused before anything is imported: the header says what the file is
    let map = lutra::inspect::map_file(path).map_err(|e| e.to_string())?;
    match lutra_core::gguf::Gguf::parse(&map) {
        Ok(g) if lutra_core::pack::is_packed(&g) => {}
        Ok(_) => return Err(refused()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    drop(map);
    let model = Model::load_with(path, &LoadOptions::default()).map_err(|e| e.to_string())?;
    if !model.engine().info().packed {
        return Err(refused());
    }
    Ok(model)
}

/// Runs `opts`, writing the prompt and the generated text to `out` as it comes.
pub fn run(opts: &Options<'_>, out: &mut impl Write) -> Result<Report, String> {
    let t0 = Instant::now();
    let model = load(opts.model)?;
    let load = t0.elapsed();
    let mut session = model
        .session(&SessionOptions { context: opts.context, threads: opts.threads.max(1), attention: Attention::Exact })
        .map_err(|e| e.to_string())?;
    let cache = session.engine().cache_info();
    let kv_cache_bytes = cache.key_bytes + cache.value_bytes;
    let mapped_weight_bytes = model.engine().info().matrix_bytes;
    let prompt = model.engine().encode(opts.prompt, true).map_err(|e| e.to_string())?;
    let t1 = Instant::now();
    let (engine_session, gemv) = session.parts();
    let mut generation = Generation::start(engine_session, &prompt, opts.sampler, opts.max_tokens).map_err(|e| e.to_string())?;
    engine_session.prefill(&gemv).map_err(|e| e.to_string())?;
    let prefill = t1.elapsed();
    write!(out, "{}", opts.prompt).map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    while let Some(token) = generation.step(engine_session, &gemv).map_err(|e| e.to_string())? {
        out.write_all(token.text.as_bytes()).and_then(|_| out.flush()).map_err(|e| e.to_string())?;
    }
    out.write_all(generation.finish_text().as_bytes()).map_err(|e| e.to_string())?;
    let generation_time = t2.elapsed();
    Ok(Report {
        load,
        prompt_tokens: prompt.len(),
        prefill,
        generated: generation.generated(),
        generation: generation_time,
        stop: generation.stop_reason(),
        kv_cache_bytes,
        mapped_weight_bytes,
    })
}

/// Greedy text of `max_tokens` tokens after `prompt`, and how many allocations
/// `allocations()` counted while the tokens were generated (after start: the session,
/// the generation's buffers and the prompt's prefill).
pub fn generate_counting(
    path: &Path,
    threads: usize,
    prompt: &str,
    max_tokens: usize,
    allocations: impl Fn() -> usize,
) -> Result<(String, usize), String> {
    let model = load(path)?;
    let mut session = model.session(&SessionOptions { context: 0, threads, attention: Attention::Exact }).map_err(|e| e.to_string())?;
    let prompt = model.engine().encode(prompt, true).map_err(|e| e.to_string())?;
    let (engine_session, gemv) = session.parts();
    let mut generation = Generation::start(engine_session, &prompt, SamplerConfig::greedy(), max_tokens).map_err(|e| e.to_string())?;
    engine_session.prefill(&gemv).map_err(|e| e.to_string())?;
    let mut text = String::with_capacity(64 * 1024);
    let before = allocations();
    while let Some(token) = generation.step(engine_session, &gemv).map_err(|e| e.to_string())? {
        if text.len() + token.text.len() <= text.capacity() {
            text.push_str(token.text);
        }
    }
    let during = allocations() - before;
    text.push_str(generation.finish_text());
    Ok((text, during))
}
