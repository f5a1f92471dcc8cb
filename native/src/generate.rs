//! `lutra run`: load a model, stream generated text to stdout, timings to stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lutra_core::llama2c::Checkpoint;
use lutra_core::lut::Tables;
use lutra_core::model::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, Parallel};
use lutra_core::model::llama::{Llama, State};
use lutra_core::model::Gemv;
use lutra_core::pq::{Codebooks, PqKvCache};
use lutra_core::sampler::{scratch_len, Candidate, Sampler, SamplerConfig};
use lutra_core::tokenizer::{Llama2cTokenizer, Tokenizer};
use lutra_core::{Error, Isa, PackedMatrix};

use crate::pool::Pool;
use crate::progress::Progress;

/// Matrix-vector products split across a thread pool.
pub struct PoolGemv<'p>(pub &'p Pool);

impl Gemv for PoolGemv<'_> {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        crate::parallel::gemv(self.0, Isa::best_for(m.layout().interleave()), m, tables, y)
    }
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        crate::parallel::gemm(self.0, Isa::best_for(m.layout().interleave()), m, tables, ys)
    }
    fn parallel(&self) -> &dyn Parallel {
        self.0
    }
}

/// How attention reads the key cache: exact f16 keys, or NoMAD product-quantized codes.
#[derive(Clone, Default)]
pub enum Attention {
    #[default]
    Exact,
    /// Codebooks, the first / most recent positions whose keys stay exact, and whether
    /// sliding-window layers keep exact keys (`long_only`).
    Pq { books: Box<Codebooks>, sink: usize, recent: usize, long_only: bool },
}

impl Attention {
    /// `--attention exact|pq` with `--codebooks FILE` (required for pq).
    pub fn from_args(kind: &str, codebooks: Option<&Path>, sink: usize, recent: usize, long_only: bool) -> Result<Attention, String> {
        match (kind, codebooks) {
            ("exact", None) => Ok(Attention::Exact),
            ("exact", Some(_)) => Err("--codebooks is only used with --attention pq".into()),
            ("pq", Some(path)) => {
                let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let books = Codebooks::from_gguf(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(Attention::Pq { books: Box::new(books), sink, recent, long_only })
            }
            ("pq", None) => Err("--attention pq needs --codebooks FILE (make one with `lutra calibrate`)".into()),
            (other, _) => Err(format!("--attention {other:?}: expected exact or pq")),
        }
    }

    /// `windows[l] > 0`: layer `l` attends to its last `windows[l]` positions only.
    fn cache(&self, shape: AttentionShape, arch: &str, windows: &[usize]) -> Result<Box<dyn KvCache>, String> {
        match self {
            Attention::Exact => Ok(Box::new(ExactKvCache::with_windows(shape, KeyPrecision::F16, windows))),
            Attention::Pq { books, sink, recent, long_only } => {
                if books.model() != arch {
                    return Err(format!("the codebooks were calibrated on a {} model, this is {arch}", books.model()));
                }
                if let Some(seen) = books.context().filter(|&c| c < shape.context) {
                    eprintln!(
                        "warning: the codebooks were calibrated on positions below {seen}; keys beyond it carry rotations they never saw and score worse (calibrate with --ctx {} on a text long enough to train on that many positions)",
                        shape.context
                    );
                }
                // sliding-window layers keep rings, of exact keys (long_only) or of codes
                let exact: Vec<bool> = windows.iter().map(|&w| *long_only && w > 0).collect();
                let cache = PqKvCache::new(shape, (**books).clone(), Isa::best())
                    .map_err(|e| e.to_string())?
                    .with_exact_keys(*sink, *recent)
                    .with_layers(&exact, windows);
                Ok(Box::new(cache))
            }
        }
    }
}

pub struct RunOptions {
    pub model: PathBuf,
    pub tokenizer: Option<PathBuf>,
    pub prompt: String,
    pub tokens: usize,
    pub threads: usize,
    pub bits: u8,
    pub sampler: SamplerConfig,
    /// Format the prompt as one user turn of the model's chat template.
    pub chat: bool,
    /// Context length (tokens) for models with a long trained context.
    pub context: usize,
    pub attention: Attention,
}

fn read(path: &Path, what: &str) -> Result<memmap2::Mmap, String> {
    crate::inspect::map_file(path).map_err(|e| format!("{what}: {e}"))
}

/// Generate from a model file (GGUF Gemma 3 or a llama2.c checkpoint), streaming text to
/// stdout and load time and tokens/s to stderr.
pub fn run(opts: &RunOptions) -> Result<(), String> {
    let t_load = Instant::now();
    let loaded = load_showing_progress(&opts.model, opts.tokenizer.as_deref(), opts.bits, true)?;
    let prompt = loaded.encode_prompt(&opts.prompt, opts.chat)?;
    let context = opts.context.min(loaded.max_context());
    if prompt.len() >= context {
        return Err(format!("the prompt is {} tokens; the context is {context} (--ctx, and the model's own)", prompt.len()));
    }
    let total = (prompt.len() + opts.tokens).min(context);
    let mut session = loaded.session(total, &opts.attention)?;
    let mut sampler = Sampler::new(opts.sampler).map_err(|e| e.to_string())?;
    let mut scratch = vec![Candidate::default(); scratch_len(loaded.vocab_size())];
    let pool = Pool::new(opts.threads);
    let gemv = PoolGemv(&pool);
    eprintln!(
        "loaded {} in {:.2} s: {}, {} threads, kernel {}\nKV cache: {}",
        opts.model.display(),
        t_load.elapsed().as_secs_f64(),
        loaded.describe(),
        opts.threads,
        Isa::best().name(),
        session.describe_cache()
    );

    let io = |e: std::io::Error| e.to_string();
    let mut out = std::io::stdout().lock();
    if !opts.chat {
        out.write_all(opts.prompt.as_bytes()).and_then(|_| out.flush()).map_err(io)?;
    }
    let mut tokens = prompt.clone();
    let mut timing = Timing { prompt_s: 0.0, gen_s: 0.0, prompt_tokens: prompt.len(), generated: 0 };
    // the prompt but its last token in batches; the last one's logits start generation
    let t = Instant::now();
    let fed = prompt.len().saturating_sub(1).min(total - 1);
    loaded.feed_batch(&gemv, &mut session, &prompt[..fed], 0)?;
    timing.prompt_s += t.elapsed().as_secs_f64();
    for pos in fed..total - 1 {
        let t = Instant::now();
        let logits = loaded.forward(&gemv, &mut session, tokens[pos], pos)?;
        let next = sampler.sample(logits, &tokens, &mut scratch).map_err(|e| e.to_string())?;
        timing.gen_s += t.elapsed().as_secs_f64();
        timing.generated += 1;
        if loaded.ends_text(next) {
            break;
        }
        out.write_all(loaded.decode_piece(tokens[pos], next)?).and_then(|_| out.flush()).map_err(io)?;
        tokens.push(next);
    }
    writeln!(out).map_err(io)?;
    timing.report();
    Ok(())
}

/// Prompt and generation time of one `run`.
struct Timing {
    prompt_s: f64,
    gen_s: f64,
    prompt_tokens: usize,
    generated: usize,
}

impl Timing {
    fn report(&self) {
        let prefill = self.prompt_tokens.saturating_sub(1);
        eprintln!(
            "prompt: {prefill} tokens at {:.1} tokens/s; generation: {} tokens at {:.1} tokens/s",
            prefill as f64 / self.prompt_s.max(1e-9),
            self.generated,
            self.generated as f64 / self.gen_s.max(1e-9)
        );
    }
}

/// Import a Gemma 3 GGUF, releasing each tensor's file pages once it is imported (the
/// map stays valid; the pages come back from the page cache if touched again), so the
/// mapped file and the imported weights are never both resident in full.
fn import_gemma(
    gguf: &lutra_core::gguf::Gguf<'_>,
    map: &memmap2::Mmap,
    show_progress: bool,
) -> Result<lutra_core::model::gemma3::Gemma3, lutra_core::model::ModelError> {
    let mut bar: Option<Progress> = None;
    let model = lutra_core::model::gemma3::Gemma3::from_gguf_with_progress(gguf, |p| {
        if let Some(info) = gguf.tensor(p.tensor) {
            // a chunk releases what it read; a finished tensor releases all of it
            let range = p.consumed.clone().map(Ok).unwrap_or_else(|| info.byte_size().map(|len| 0..len as usize));
            if let Ok(range) = range {
                // Any later read of the range faults the pages back in from the file with
                // the same contents, so the borrows held by `gguf` stay valid; a failure
                // just leaves the pages resident.
                // SAFETY: `map` is a read-only file mapping; MADV_DONTNEED only drops pages.
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        gguf.data_start() + info.offset as usize + range.start,
                        range.len(),
                    )
                };
            }
        }
        if show_progress && p.consumed.is_none() {
            bar.get_or_insert_with(|| Progress::new("importing tensors", p.total)).update(p.done, p.tensor);
        }
    });
    if let Some(bar) = bar.as_mut() {
        bar.finish();
    }
    model
}

/// A model and its tokenizer, loaded for evaluation: a llama2.c checkpoint or a Gemma 3 GGUF.
pub enum Loaded {
    Llama { model: Box<Llama>, tokenizer: Box<Llama2cTokenizer> },
    Gemma { model: Box<lutra_core::model::gemma3::Gemma3>, tokenizer: Box<lutra_core::spm::SpmTokenizer> },
}

/// One sequence's working memory for a `Loaded` model.
pub enum Session {
    Llama(Box<State>),
    Gemma(Box<lutra_core::model::gemma3::Gemma3State>),
}

impl Session {
    pub fn cache(&self) -> &dyn KvCache {
        match self {
            Session::Llama(s) => s.cache(),
            Session::Gemma(s) => s.cache(),
        }
    }
    /// The KV cache's kind and sizes, for reports.
    pub fn describe_cache(&self) -> String {
        let c = self.cache();
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        format!("{}; {:.1} MiB of keys + {:.1} MiB of f16 values", c.describe(), mib(c.key_bytes()), mib(c.value_bytes()))
    }
}

impl Loaded {
    pub fn vocab_size(&self) -> usize {
        match self {
            Loaded::Llama { model, .. } => model.config.vocab_size,
            Loaded::Gemma { model, .. } => model.config.vocab_size,
        }
    }
    /// The longest context the model supports.
    pub fn max_context(&self) -> usize {
        match self {
            Loaded::Llama { model, .. } => model.config.seq_len,
            Loaded::Gemma { model, .. } => model.config.context,
        }
    }
    pub fn bos(&self) -> u32 {
        match self {
            Loaded::Llama { tokenizer, .. } => tokenizer.bos().unwrap_or(1),
            Loaded::Gemma { tokenizer, .. } => tokenizer.bos().unwrap_or(2),
        }
    }
    pub fn encode(&self, text: &str, bos: bool, out: &mut Vec<u32>) -> Result<(), String> {
        match self {
            Loaded::Llama { tokenizer, .. } => tokenizer.encode(text, bos, out),
            Loaded::Gemma { tokenizer, .. } => tokenizer.encode(text, bos, out),
        }
        .map_err(|e| e.to_string())
    }
    /// The prompt's tokens, with BOS; `chat` wraps it in the model's chat template.
    pub fn encode_prompt(&self, text: &str, chat: bool) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        match self {
            Loaded::Gemma { tokenizer, .. } if chat => {
                tokenizer.encode_llama(&lutra_core::spm::gemma_chat_prompt(text), true, true, &mut out)
            }
            Loaded::Llama { .. } if chat => return Err("--chat: llama2.c checkpoints have no chat template".into()),
            _ => return self.encode(text, true, &mut out).map(|_| out),
        }
        .map_err(|e| e.to_string())?;
        Ok(out)
    }
    /// The bytes `token` adds after `prev`.
    pub fn decode_piece(&self, prev: u32, token: u32) -> Result<&[u8], String> {
        match self {
            Loaded::Llama { tokenizer, .. } => tokenizer.decode_piece(Some(prev), token),
            Loaded::Gemma { tokenizer, .. } => tokenizer.decode_piece(Some(prev), token),
        }
        .map_err(|e| e.to_string())
    }
    /// Whether generating `token` ends the text.
    pub fn ends_text(&self, token: u32) -> bool {
        match self {
            Loaded::Llama { tokenizer, .. } => Some(token) == tokenizer.eos() || Some(token) == tokenizer.bos(),
            Loaded::Gemma { tokenizer, .. } => tokenizer.is_eog(token),
        }
    }
    /// One line about the model for the load report.
    pub fn describe(&self) -> String {
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        match self {
            Loaded::Llama { model, .. } => {
                let c = &model.config;
                format!(
                    "llama, dim {}, {} layers, {} heads, vocab {}, {:.1} MiB of matrices",
                    c.dim,
                    c.n_layers,
                    c.n_heads,
                    c.vocab_size,
                    mib(model.matrix_bytes())
                )
            }
            Loaded::Gemma { model, .. } => {
                let c = &model.config;
                format!(
                    "gemma3, dim {}, {} layers, {} heads / {} KV heads, vocab {}, {:.1} MiB of matrices",
                    c.dim,
                    c.n_layers,
                    c.n_heads,
                    c.n_kv_heads,
                    c.vocab_size,
                    mib(model.matrix_bytes())
                )
            }
        }
    }
    /// `general.architecture` (llama2.c checkpoints: "llama").
    pub fn architecture(&self) -> &'static str {
        match self {
            Loaded::Llama { .. } => "llama",
            Loaded::Gemma { .. } => "gemma3",
        }
    }
    /// The attention shape of a session of `context` positions.
    pub fn attention_shape(&self, context: usize) -> AttentionShape {
        match self {
            Loaded::Llama { model, .. } => model.attention_shape(context),
            Loaded::Gemma { model, .. } => model.attention_shape(context),
        }
    }
    /// A session of `context` positions reading keys as `attention` says.
    pub fn session(&self, context: usize, attention: &Attention) -> Result<Session, String> {
        self.session_with_cache(attention.cache(self.attention_shape(context), self.architecture(), &self.layer_windows())?)
    }
    /// Each layer's sliding window (Gemma 3's local layers), 0 where it attends to everything.
    pub fn layer_windows(&self) -> Vec<usize> {
        match self {
            Loaded::Llama { model, .. } => vec![0; model.config.n_layers],
            Loaded::Gemma { model, .. } => model.config.layer_windows(),
        }
    }
    /// A session over a given KV cache (made for `attention_shape`).
    pub fn session_with_cache(&self, cache: Box<dyn KvCache>) -> Result<Session, String> {
        match self {
            Loaded::Llama { model, .. } => State::with_cache(model, cache).map(|s| Session::Llama(Box::new(s))),
            Loaded::Gemma { model, .. } => {
                lutra_core::model::gemma3::Gemma3State::with_cache(model, cache).map(|s| Session::Gemma(Box::new(s)))
            }
        }
        .map_err(|e| e.to_string())
    }
    pub fn forward<'s>(&self, gemv: &PoolGemv<'_>, s: &'s mut Session, token: u32, pos: usize) -> Result<&'s [f32], String> {
        match (self, s) {
            (Loaded::Llama { model, .. }, Session::Llama(st)) => model.forward(gemv, st, token, pos),
            (Loaded::Gemma { model, .. }, Session::Gemma(st)) => model.forward(gemv, st, token, pos),
            _ => unreachable!("sessions are made by their own model"),
        }
        .map_err(|e| e.to_string())
    }

    /// `feed` for `tokens` at `first_pos..`, in batches over one pass of the weights each
    /// (the same cache, bit for bit).
    pub fn feed_batch(&self, gemv: &PoolGemv<'_>, s: &mut Session, tokens: &[u32], first_pos: usize) -> Result<(), String> {
        match (self, s) {
            (Loaded::Llama { model, .. }, Session::Llama(st)) => model.feed_batch(gemv, st, tokens, first_pos),
            (Loaded::Gemma { model, .. }, Session::Gemma(st)) => model.feed_batch(gemv, st, tokens, first_pos),
            _ => unreachable!("sessions are made by their own model"),
        }
        .map_err(|e| e.to_string())
    }
}

/// Load a model: GGUF (Gemma 3) as stored, a llama2.c checkpoint quantized to `bits`
/// (tokenizer beside it unless given).
pub fn load(model: &Path, tokenizer: Option<&Path>, bits: u8) -> Result<Loaded, String> {
    load_showing_progress(model, tokenizer, bits, false)
}

fn load_showing_progress(model: &Path, tokenizer: Option<&Path>, bits: u8, progress: bool) -> Result<Loaded, String> {
    let bytes = read(model, "model")?;
    if bytes.starts_with(b"GGUF") {
        let gguf = lutra_core::gguf::Gguf::parse(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
        let tokenizer = lutra_core::spm::SpmTokenizer::from_gguf(&gguf).map_err(|e| format!("{}: {e}", model.display()))?;
        let m = import_gemma(&gguf, &bytes, progress).map_err(|e| format!("{}: {e}", model.display()))?;
        return Ok(Loaded::Gemma { model: Box::new(m), tokenizer: Box::new(tokenizer) });
    }
    let ckpt = Checkpoint::parse(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    let tok_path = tokenizer.map(Path::to_path_buf).unwrap_or_else(|| model.parent().unwrap_or(Path::new(".")).join("tokenizer.bin"));
    let tok_bytes = read(&tok_path, "tokenizer (pass --tokenizer FILE)")?;
    let tokenizer =
        Llama2cTokenizer::from_bytes(&tok_bytes, ckpt.config().vocab_size).map_err(|e| format!("{}: {e}", tok_path.display()))?;
    let mut bar: Option<Progress> = None;
    let model = Llama::from_llama2c_with_progress(&ckpt, bits, |done, total| {
        if progress {
            bar.get_or_insert_with(|| Progress::new(format!("quantizing to {bits} bits"), total)).update(done, "matrices");
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(bar) = bar.as_mut() {
        bar.finish();
    }
    Ok(Loaded::Llama { model: Box::new(model), tokenizer: Box::new(tokenizer) })
}

/// Perplexity by llama.cpp's `llama-perplexity` method: the text's tokens (with BOS) cut
/// into non-overlapping chunks of `ctx`, the first token of each chunk set to BOS, and
/// only the second half of each chunk scored.
#[derive(Clone, Debug)]
pub struct Perplexity {
    pub ppl: f64,
    pub chunks: usize,
    pub ctx: usize,
    pub scored: usize,
    /// The key cache's kind and bytes.
    pub keys: String,
    pub key_bytes: usize,
}

pub fn perplexity(loaded: &Loaded, text: &str, ctx: usize, threads: usize, attention: &Attention) -> Result<Perplexity, String> {
    if ctx < 4 || ctx > loaded.max_context() {
        return Err(format!("--ctx {ctx} must be between 4 and the model's context {}", loaded.max_context()));
    }
    let mut tokens = Vec::new();
    loaded.encode(text, true, &mut tokens)?;
    let chunks = tokens.len() / ctx;
    if chunks == 0 {
        return Err(format!("the text is {} tokens, fewer than one chunk of {ctx}", tokens.len()));
    }
    let bos = loaded.bos();
    let pool = Pool::new(threads);
    let gemv = PoolGemv(&pool);
    let mut session = loaded.session(ctx, attention)?;
    let (mut nll, mut scored) = (0.0f64, 0usize);
    for chunk in tokens.chunks_exact(ctx).take(chunks) {
        let first = ctx / 2;
        let mut unscored = chunk[..first].to_vec();
        unscored[0] = bos;
        loaded.feed_batch(&gemv, &mut session, &unscored, 0)?;
        // ctx ≥ 4, so the first scored position is not the BOS slot
        for pos in first..ctx - 1 {
            let logits = loaded.forward(&gemv, &mut session, chunk[pos], pos)?;
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
            nll += max + sum.ln() - logits[chunk[pos + 1] as usize] as f64;
            scored += 1;
        }
    }
    let (keys, key_bytes) = (session.cache().describe(), session.cache().key_bytes());
    Ok(Perplexity { ppl: (nll / scored as f64).exp(), chunks, ctx, scored, keys, key_bytes })
}

/// `lutra bench model`: prompt processing (`pp` tokens, batched, logits for the last only) and generation
/// (`tg` greedy tokens), tokens/s, medians of `runs`, both starting at position `depth`
/// (like `llama-bench -d`): the first `depth` positions are filled once, then every round
/// overwrites the positions after them.
pub fn bench_model(loaded: &Loaded, threads: usize, spec: &ModelBench) -> Result<(f64, f64), String> {
    // pp and tg are capped at the room the context leaves after `depth`
    let room = loaded.max_context().saturating_sub(spec.depth + 1);
    if room == 0 {
        return Err(format!("--depth {} leaves no room in the model's context of {}", spec.depth, loaded.max_context()));
    }
    let (pp, tg) = (spec.pp.min(room), spec.tg.min(room));
    let context = spec.depth + pp.max(tg) + 1;
    let pool = Pool::new(threads);
    let gemv = PoolGemv(&pool);
    let mut session = loaded.session(context, &spec.attention)?;
    fill_depth(loaded, &gemv, &mut session, spec.depth)?;
    let mut pp_tps = Vec::new();
    let mut tg_tps = Vec::new();
    for run in 0..spec.runs.max(5) + 1 {
        let pp_s = lutra_pp(loaded, &gemv, &mut session, spec.depth, pp)?;
        let tg_s = lutra_tg(loaded, &gemv, &mut session, spec.depth, tg)?;
        if run > 0 {
            // the first run warms caches and the pool
            pp_tps.push(pp as f64 / pp_s);
            tg_tps.push(tg as f64 / tg_s);
        }
    }
    Ok((crate::bench::median(pp_tps), crate::bench::median(tg_tps)))
}

/// What `lutra bench model` times.
#[derive(Clone)]
pub struct ModelBench {
    pub pp: usize,
    pub tg: usize,
    pub runs: usize,
    /// Positions filled before timing.
    pub depth: usize,
    pub attention: Attention,
}

/// Feed `depth` tokens, reporting progress on stderr when it takes long.
fn fill_depth(loaded: &Loaded, gemv: &PoolGemv<'_>, session: &mut Session, depth: usize) -> Result<(), String> {
    let vocab = loaded.vocab_size();
    let mut bar = (depth >= 256).then(|| Progress::new(format!("filling the context to depth {depth}"), depth));
    let tokens: Vec<u32> = (0..depth).map(|pos| ((pos * 7919) % vocab) as u32).collect();
    for (i, batch) in tokens.chunks(256).enumerate() {
        loaded.feed_batch(gemv, session, batch, i * 256)?;
        if let Some(bar) = bar.as_mut() {
            bar.update(i * 256 + batch.len(), "tokens");
        }
    }
    if let Some(bar) = bar.as_mut() {
        bar.finish();
    }
    Ok(())
}

/// lutra's prompt processing for `bench model`: `pp` tokens from position `from`, in
/// batches (Gemma), logits for the last one only, as llama.cpp computes them. Returns seconds.
fn lutra_pp(loaded: &Loaded, gemv: &PoolGemv<'_>, session: &mut Session, from: usize, pp: usize) -> Result<f64, String> {
    let vocab = loaded.vocab_size();
    let token = |pos: usize| ((pos * 7919) % vocab) as u32;
    let batch: Vec<u32> = (from..(from + pp).saturating_sub(1)).map(token).collect();
    let t = Instant::now();
    loaded.feed_batch(gemv, session, &batch, from)?;
    if pp > 0 {
        let last = from + pp - 1;
        loaded.forward(gemv, session, token(last), last)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// lutra's generation for `bench model`: `tg` greedy tokens from BOS at position `from`.
/// Returns seconds.
fn lutra_tg(loaded: &Loaded, gemv: &PoolGemv<'_>, session: &mut Session, from: usize, tg: usize) -> Result<f64, String> {
    let t = Instant::now();
    let mut token = loaded.bos();
    for pos in from..from + tg {
        let logits = loaded.forward(gemv, session, token, pos)?;
        token = logits.iter().enumerate().fold(0, |b, (i, &x)| if x > logits[b] { i } else { b }) as u32;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// `lutra bench model --llamacpp`: lutra and llama.cpp on the same GGUF file, tokens/s
/// medians over the same interleaved rounds.
#[derive(Clone, Copy, Debug)]
pub struct VsLlamaCpp {
    pub pp_tps: f64,
    pub tg_tps: f64,
    pub llamacpp_pp_tps: f64,
    pub llamacpp_tg_tps: f64,
    /// Prompt and generated tokens actually timed (capped at the context; pp 0 at a depth).
    pub pp: usize,
    pub tg: usize,
    pub depth: usize,
    /// Timed rounds (the warm-up round excluded).
    pub rounds: usize,
}

/// `lutra bench model --llamacpp`: llama.cpp (`llamacpp_model`) loads `path` once for
/// `threads` threads; then, after one discarded warm-up round, `runs.max(5)` rounds each
/// time lutra's pp and tg and llama.cpp's pp and tg (which engine goes first alternates
/// from round to round; llama.cpp's spinning workers are parked and lutra's idle ones
/// left to park before the other engine is timed). llama.cpp's pp decodes the prompt as
/// one batch, like llama-bench; lutra's feeds it in `PREFILL_BATCH`-token batches.
#[cfg(feature = "llamacpp")]
pub fn bench_model_vs_llamacpp(loaded: &Loaded, path: &Path, threads: usize, spec: &ModelBench) -> Result<VsLlamaCpp, String> {
    use crate::llamacpp_model::LlamaCppModel;
    let (pp, tg, runs, depth) = (spec.pp, spec.tg, spec.runs, spec.depth);
    if !matches!(loaded, Loaded::Gemma { .. }) {
        return Err(format!("{}: --llamacpp needs a GGUF model (llama.cpp cannot read llama2.c checkpoints)", path.display()));
    }
    let context = loaded.max_context().min(depth + pp.max(tg) + 1);
    let (pp, tg) = (pp.min(context - depth), tg.min(context - depth - 1));
    if tg == 0 || (pp == 0 && depth == 0) {
        return Err(format!("--llamacpp needs --tg (and, without --depth, --pp) of at least 1 (got {pp} and {tg})"));
    }
    // at a depth only generation is timed, after a context filled once
    let pp = if depth > 0 { 0 } else { pp };
    let mut llama = LlamaCppModel::load_with_context(path, threads, depth + pp.max(tg))?;
    let pool = Pool::new(threads);
    let gemv = PoolGemv(&pool);
    let mut session = loaded.session(context, &spec.attention)?;
    if depth > 0 {
        fill_depth(loaded, &gemv, &mut session, depth)?;
        llama.fill(depth)?;
        llama.pause();
    }
    let rounds = runs.max(5);
    let (mut pp_tps, mut tg_tps, mut l_pp_tps, mut l_tg_tps) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds + 1 {
        let lutra = |session: &mut Session| -> Result<(f64, f64), String> {
            let pp_s = if pp > 0 { lutra_pp(loaded, &gemv, session, 0, pp)? } else { f64::NAN };
            let r = (pp_s, lutra_tg(loaded, &gemv, session, depth, tg)?);
            // lutra's idle workers spin for at most 200 µs before parking.
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(r)
        };
        let llamacpp = |llama: &mut LlamaCppModel| -> Result<(f64, f64), String> {
            let r = if depth > 0 { (f64::NAN, llama.tg_at(depth, tg)?) } else { (llama.pp(pp)?, llama.tg(tg)?) };
            llama.pause();
            Ok(r)
        };
        let ((a, b), (c, d)) = if round % 2 == 0 {
            let l = lutra(&mut session)?;
            (l, llamacpp(&mut llama)?)
        } else {
            let c = llamacpp(&mut llama)?;
            (lutra(&mut session)?, c)
        };
        if round > 0 {
            // round 0 warms caches, pages and both thread pools
            pp_tps.push(pp as f64 / a);
            tg_tps.push(tg as f64 / b);
            l_pp_tps.push(pp as f64 / c);
            l_tg_tps.push(tg as f64 / d);
        }
    }
    use crate::bench::median;
    Ok(VsLlamaCpp {
        pp_tps: median(pp_tps),
        tg_tps: median(tg_tps),
        llamacpp_pp_tps: median(l_pp_tps),
        llamacpp_tg_tps: median(l_tg_tps),
        pp,
        tg,
        depth,
        rounds,
    })
}

/// Without the `llamacpp` feature there is no llama.cpp to compare with.
#[cfg(not(feature = "llamacpp"))]
pub fn bench_model_vs_llamacpp(_loaded: &Loaded, _path: &Path, _threads: usize, _spec: &ModelBench) -> Result<VsLlamaCpp, String> {
    Err("--llamacpp: this lutra was built without llama.cpp; rebuild with `--features llamacpp` \
         (RUSTFLAGS=\"-C target-cpu=native\" cargo build --release -p lutra --features llamacpp)"
        .into())
}
