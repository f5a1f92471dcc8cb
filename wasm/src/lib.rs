//! lutra in the browser: the engine (`lutra_core::engine`) behind wasm-bindgen, for the
//! page in `www/` (which runs it in a Web Worker), on the simd128 lookup kernels.
//! Single-threaded, except in the threaded build (`+atomics`, shared memory: see
//! the `threads` module), where the page may start a pool of Web Workers.
//!
//! A model file reaches wasm memory through a [`ModelFile`] filled chunk by chunk from a
//! stream (never one giant JS `ArrayBuffer` copied in); an [`Engine`] imports it, drops
//! the file's bytes, and generates token by token (`next_token`), so the worker can
//! yield between tokens and a Stop takes effect before the next one.
//!
//! The crate also builds on the host (wasm-bindgen's macros are inert there), so
//! `cargo build --workspace` and the host tests cover it.

use core::ops::Range;

use lutra_core::chat::ChatHistory;
use lutra_core::engine::{default_context, Attention, Generation, Model, Role, Session, SingleThread, StopReason, TensorSource};
use lutra_core::formats::gguf::{is_gguf, Gguf};
use lutra_core::model::ModelError;
use lutra_core::sampler::SamplerConfig;
use lutra_core::threads::{Split, Workers};
use wasm_bindgen::prelude::*;

#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub mod threads;

/// Whether this build can run threads (the threaded build: `+atomics`, shared memory).
#[wasm_bindgen]
pub fn threads_built() -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "atomics"))
}

/// Threaded build: makes the pool of `threads` threads (the calling engine worker and
/// `threads − 1` Web Workers it starts, each calling [`pool_worker`] with the address
/// returned here). Engines use the pool from then on. One pool per page.
#[wasm_bindgen]
pub fn start_threads(threads: usize) -> Result<usize, JsError> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    return threads::start(threads).map_err(|e| JsError::new(&e));
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    Err(JsError::new(&format!("{threads} threads asked, but this build of lutra-wasm has no threads")))
}

/// Threaded build: a pool worker's loop (never returns); `pool` is [`start_threads`]'s
/// address, `index` the worker's number (1, 2, …).
#[wasm_bindgen]
pub fn pool_worker(pool: usize, index: usize) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    threads::worker(pool, index);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = (pool, index);
}

/// Threaded build: called by a worker's script when [`pool_worker`] trapped, so the
/// engine's job in progress fails instead of waiting for that worker forever.
#[wasm_bindgen]
pub fn pool_worker_failed(pool: usize) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    threads::worker_failed(pool);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = pool;
}

/// Threaded build: products of matrices under `bytes` stay on one thread (default
/// `threads::MIN_SPLIT_BYTES`; a knob for measurements).
#[wasm_bindgen]
pub fn set_min_split_bytes(bytes: usize) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    threads::set_min_split_bytes(bytes);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = bytes;
}

/// Threads the engine's products run on: 1, or the pool's size once started.
#[wasm_bindgen]
pub fn threads() -> usize {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    if let Some(pool) = threads::pool() {
        return pool.threads();
    }
    1
}

/// Who computes the products: the calling thread, or the pool when the page started one
/// (products of matrices under its `MIN_SPLIT_BYTES` stay on the caller).
fn products() -> Split<'static, dyn Workers> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    if let Some(pool) = threads::pool() {
        return Split::new(pool as &dyn Workers).min_split_bytes(threads::min_split_bytes());
    }
    Split::new(&SingleThread as &dyn Workers)
}

/// Name of the kernel `lutra_core` picks in this build ("simd128" on a
/// `+simd128` wasm build, "scalar" without it).
#[wasm_bindgen]
pub fn best_isa() -> String {
    lutra_core::Isa::best().name().into()
}

/// Which wasm SIMD this build's lookups use: "relaxed" (`i8x16.relaxed_swizzle`, a bare
/// `pshufb`/`tbl`) or "baseline" (`i8x16.swizzle`, everywhere simd128 is).
#[wasm_bindgen]
pub fn simd_variant() -> String {
    if cfg!(target_feature = "relaxed-simd") { "relaxed" } else { "baseline" }.into()
}

/// Runs this build's kernels against the scalar reference on pseudo-random data, in
/// whatever runtime loaded the module (the browser page's test calls it in Chromium):
/// lookup GEMV integer sums at 1, 2, 3, 4 and 8 bits, int8 dot products (outputs), and PQ score scans with 16 and
/// 256 centroids, bit for bit. Returns what was checked, or the first mismatch.
#[wasm_bindgen]
pub fn kernel_check() -> Result<String, JsError> {
    use lutra_core::kernels::pq_scan::{block_bytes16, block_bytes256};
    use lutra_core::kernels::pq_scan::{scan16, scan256, BLOCK_KEYS};
    use lutra_core::{gemv_integer, Isa, Offset, OwnedTables, PackedMatrix};

    let isa = Isa::best();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u32
    };
    let (rows, cols, group) = (96, 512, 128);
    for bits in [1u8, 2, 3, 4, 8] {
        let w: Vec<f32> = (0..rows * cols).map(|_| next() as f32 / u32::MAX as f32 - 0.5).collect();
        let x: Vec<f32> = (0..cols).map(|_| next() as f32 / u32::MAX as f32 * 4.0 - 2.0).collect();
        let m = PackedMatrix::quantize(&w, rows, cols, bits, group, Offset::Min).map_err(js)?;
        let mut tables = OwnedTables::new(cols, group).map_err(js)?;
        tables.build(&x).map_err(js)?;
        let n = m.layout().scale_count();
        let (mut fast, mut reference) = (vec![0i32; n], vec![0i32; n]);
        gemv_integer(isa, &m, tables.view(), &mut fast).map_err(js)?;
        gemv_integer(Isa::Scalar, &m, tables.view(), &mut reference).map_err(js)?;
        if let Some(i) = (0..n).find(|&i| fast[i] != reference[i]) {
            return Err(JsError::new(&format!("{}: {bits}-bit GEMV sum {i} is {}, scalar {}", isa.name(), fast[i], reference[i])));
        }
    }
    // int8 dot products (Q8_0 weights), with and without a −128 code (the relaxed build
    // takes its relaxed dot product only without): outputs bit for bit
    for with_minus_128 in [false, true] {
        let (rows, cols) = (12, 640);
        let mut blocks = Vec::new();
        for _ in 0..rows * cols / 32 {
            blocks.extend_from_slice(&0x2400u16.to_le_bytes());
            blocks.extend((0..32).map(|_| next() as u8 | 1));
        }
        if with_minus_128 {
            blocks[2] = 0x80;
        }
        let m = lutra_core::kernels::int8::Int8Matrix::from_q8_0(&blocks, rows, cols).map_err(js)?;
        let mut x = lutra_core::kernels::int8::Int8Activations::new(cols).map_err(js)?;
        x.quantize(&(0..cols).map(|_| next() as f32 / u32::MAX as f32 * 4.0 - 2.0).collect::<Vec<_>>()).map_err(js)?;
        let (mut fast, mut reference) = (vec![0f32; rows], vec![0f32; rows]);
        lutra_core::kernels::int8::gemv_rows(isa, &m, &x, 0..rows, &mut fast).map_err(js)?;
        lutra_core::kernels::int8::gemv_rows(Isa::Scalar, &m, &x, 0..rows, &mut reference).map_err(js)?;
        if fast.iter().zip(&reference).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(JsError::new(&format!("{}: int8 dot product (−128 codes: {with_minus_128}) differs from scalar", isa.name())));
        }
    }
    let (subspaces, blocks) = (16, 5);
    for centroids in [16usize, 256] {
        let block = if centroids == 16 { block_bytes16(subspaces) } else { block_bytes256(subspaces) };
        let codes: Vec<u8> = (0..blocks * block).map(|_| next() as u8).collect();
        let tables: Vec<u8> = (0..subspaces * centroids).map(|_| next() as u8 >> 2).collect();
        let (mut fast, mut reference) = (vec![0u16; blocks * BLOCK_KEYS], vec![0u16; blocks * BLOCK_KEYS]);
        let scan = if centroids == 16 { scan16 } else { scan256 };
        scan(isa, &codes, subspaces, &tables, &mut fast).map_err(js)?;
        scan(Isa::Scalar, &codes, subspaces, &tables, &mut reference).map_err(js)?;
        if fast != reference {
            return Err(JsError::new(&format!("{}: PQ scan with {centroids} centroids differs from scalar", isa.name())));
        }
    }
    Ok(format!("{}: GEMV at 1, 2, 3, 4, 8 bits, int8 dot products and PQ scans (16, 256 centroids) equal scalar", isa.name()))
}

/// Whether a file's first bytes are GGUF's magic (`lutra_core::formats::gguf::is_gguf`): how the
/// page tells a GGUF picked from disk without its extension from a llama2.c checkpoint.
#[wasm_bindgen(js_name = is_gguf)]
pub fn starts_as_gguf(bytes: &[u8]) -> bool {
    is_gguf(bytes)
}

/// The engine's sampler defaults ([`SamplerConfig::default`]) for the page's form, as a
/// plain object the worker can post: `{ temperature, top_k, top_p, min_p, repeat_penalty,
/// repeat_last_n }`. No seed: the page picks its own.
#[wasm_bindgen]
pub fn sampler_defaults() -> Result<js_sys::Object, JsValue> {
    let object = js_sys::Object::new();
    for (name, value) in sampler_default_fields() {
        js_sys::Reflect::set(&object, &name.into(), &value.into())?;
    }
    Ok(object)
}

/// [`sampler_defaults`]' fields. An f32 goes out as the f64 of its shortest decimal form
/// (0.8, not 0.800000011920929): what the form shows, and it rounds back to the same f32.
fn sampler_default_fields() -> [(&'static str, f64); 6] {
    let d = SamplerConfig::default();
    let decimal = |v: f32| v.to_string().parse().unwrap_or(f64::from(v));
    [
        ("temperature", decimal(d.temperature)),
        ("top_k", d.top_k as f64),
        ("top_p", decimal(d.top_p)),
        ("min_p", decimal(d.min_p)),
        ("repeat_penalty", decimal(d.repeat_penalty)),
        ("repeat_last_n", d.repeat_last_n as f64),
    ]
}

/// Bytes of this module's linear memory (it grows and never shrinks: its peak).
#[wasm_bindgen]
pub fn memory_bytes() -> f64 {
    #[cfg(target_arch = "wasm32")]
    return (core::arch::wasm32::memory_size(0) * 65536) as f64;
    #[cfg(not(target_arch = "wasm32"))]
    0.0
}

/// One layer's attention cache of a kind (`lutra_core::attention::synthetic::KINDS`:
/// exact f16 keys or PQ codes, f16 or block values), every position filled, for timing
/// one decode token's attention in wasm — `www/bench/attention.mjs` under node, the
/// native side being `lutra bench attention`.
#[wasm_bindgen]
pub struct AttentionTimer {
    cache: Box<dyn lutra_core::attention::KvCache>,
    q: Vec<f32>,
    out: Vec<f32>,
    scale: f32,
    last: usize,
}

#[wasm_bindgen]
impl AttentionTimer {
    /// `shape`: "gemma3" or "llama7b"; `ctx`: 1 to `synthetic::MAX_CONTEXT` cached positions; `scan`: "best" for this
    /// build's PQ scan kernels, "scalar" for the reference (to time the one against the other).
    #[wasm_bindgen(constructor)]
    pub fn new(kind: &str, shape: &str, ctx: usize, scan: &str) -> Result<AttentionTimer, JsError> {
        use lutra_core::attention::synthetic;
        let isa = match scan {
            "best" => lutra_core::Isa::best(),
            "scalar" => lutra_core::Isa::Scalar,
            other => return Err(JsError::new(&format!("scan {other}: \"best\" or \"scalar\""))),
        };
        if ctx == 0 {
            return Err(JsError::new("ctx must be at least 1"));
        }
        let att = synthetic::shape(shape, ctx).ok_or_else(|| JsError::new(&format!("unknown shape {shape}: gemma3 or llama7b")))?;
        let cache = synthetic::cache(kind, att, isa).map_err(|e| JsError::new(&e))?;
        let q = synthetic::values(att.n_heads * att.head_dim, 3);
        let out = vec![0.0; q.len()];
        Ok(AttentionTimer { cache, q, out, scale: 1.0 / (att.head_dim as f32).sqrt(), last: ctx - 1 })
    }

    /// Attends `tokens` times: each one decode token's queries over every cached position.
    pub fn run(&mut self, tokens: usize) {
        for _ in 0..tokens {
            self.cache.attend(0, 0, self.last, &self.q, self.scale, &mut self.out);
        }
    }

    /// Key and value bytes the cache reads per token.
    pub fn bytes(&self) -> Vec<f64> {
        vec![self.cache.key_bytes() as f64, self.cache.value_bytes() as f64]
    }
}

/// A model file's bytes, received in chunks.
#[wasm_bindgen]
pub struct ModelFile {
    bytes: Vec<u8>,
    expected: usize,
}

#[wasm_bindgen]
impl ModelFile {
    /// Room for a file of `size` bytes, reserved at once: a file that cannot fit in
    /// wasm memory is refused here, before any byte is downloaded.
    #[wasm_bindgen(constructor)]
    pub fn new(size: usize) -> Result<ModelFile, JsError> {
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size)
            .map_err(|_| JsError::new(&format!("out of memory: a model file of {} MiB does not fit in this page's memory", size >> 20)))?;
        Ok(ModelFile { bytes, expected: size })
    }

    /// Appends the next chunk of the file.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsError> {
        if self.bytes.len() + chunk.len() > self.expected {
            return Err(JsError::new(&format!("the file is longer than the {} bytes announced", self.expected)));
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Bytes received so far.
    pub fn received(&self) -> usize {
        self.bytes.len()
    }
}

/// Pieces of a file read through a JS function `(offset, length) → Uint8Array`.
struct JsSource {
    read: js_sys::Function,
    piece: Vec<u8>,
}

impl TensorSource for JsSource {
    fn read(&mut self, range: Range<u64>) -> Result<&[u8], ModelError> {
        let failed = |reason: String| ModelError::Read { start: range.start, end: range.end, reason };
        let len = usize::try_from(range.end - range.start).map_err(|_| failed("too large".into()))?;
        let got = self
            .read
            .call2(&JsValue::NULL, &JsValue::from(range.start as f64), &JsValue::from(len as f64))
            .map_err(|e| failed(e.as_string().or_else(|| js_sys::Error::from(e).message().as_string()).unwrap_or_default()))?;
        let array = got.dyn_into::<js_sys::Uint8Array>().map_err(|_| failed("the reader did not return a Uint8Array".into()))?;
        if array.length() as usize != len {
            return Err(failed(format!("got {} bytes (truncated file?)", array.length())));
        }
        self.piece.clear();
        self.piece.try_reserve(len).map_err(|_| failed(format!("out of memory for a piece of {} MiB", len >> 20)))?;
        self.piece.resize(len, 0);
        array.copy_to(&mut self.piece);
        Ok(&self.piece)
    }
}

/// A model, one session and the generation in progress.
#[wasm_bindgen]
pub struct Engine {
    model: Model,
    session: Session,
    generation: Option<Generation>,
    /// The conversation while `start` is given chat messages (as `lutra chat` keeps it).
    history: ChatHistory,
    /// The answer being generated to the last chat message.
    answer: String,
    chatting: bool,
}

fn js(e: impl core::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn complete(file: &ModelFile, what: &str) -> Result<(), JsError> {
    if file.bytes.len() != file.expected {
        return Err(JsError::new(&format!("{what}: received {} of {} bytes", file.bytes.len(), file.expected)));
    }
    Ok(())
}

#[wasm_bindgen]
impl Engine {
    /// A GGUF file (Gemma 3) of `file_len` bytes, with a session of `context` positions
    /// (0: [`default_context`] of the model's), read a piece at a time through `read(offset, length)
    /// → `Uint8Array` (a worker reads pieces of a `Blob` with `FileReaderSync`): the header
    /// first, then each tensor (Q8_0 in 4096-row pieces), so wasm memory holds the weights
    /// and one piece, never the file. `progress(done, total)` after each imported tensor.
    pub fn from_gguf_blob(
        file_len: f64,
        read: js_sys::Function,
        context: usize,
        progress: Option<js_sys::Function>,
    ) -> Result<Engine, JsError> {
        let file_len = file_len as u64;
        let mut source = JsSource { read, piece: Vec::new() };
        let magic = source.read(0..4.min(file_len)).map_err(js)?;
        if !is_gguf(magic) {
            return Err(JsError::new("not a GGUF file (it does not start with the GGUF magic)"));
        }
        // the header: a prefix doubled until it parses (the whole file at worst, where the
        // parse error is then the file's own)
        let mut len = (1u64 << 20).min(file_len);
        let mut header = Vec::new();
        loop {
            header.clear();
            header.extend_from_slice(source.read(0..len).map_err(js)?);
            if len == file_len || Gguf::parse_prefix(&header, file_len).is_ok() {
                break;
            }
            len = (len * 2).min(file_len);
        }
        let gguf = Gguf::parse_prefix(&header, file_len).map_err(js)?;
        let model = Model::from_gguf_source(&gguf, &mut source, |p| {
            if let (Some(f), None) = (&progress, &p.consumed) {
                let _ = f.call2(&JsValue::NULL, &JsValue::from(p.done as u32), &JsValue::from(p.total as u32));
            }
        })
        .map_err(js)?;
        Engine::new(model, context)
    }

    /// A llama2.c checkpoint and its `tokenizer.bin`, quantized to `bits` (1..=8).
    pub fn from_llama2c(
        checkpoint: ModelFile,
        tokenizer: &[u8],
        bits: u8,
        context: usize,
        progress: Option<js_sys::Function>,
    ) -> Result<Engine, JsError> {
        complete(&checkpoint, "checkpoint")?;
        let model = Model::from_llama2c_with_progress(&checkpoint.bytes, tokenizer, bits, |p| {
            if let Some(f) = &progress {
                let _ = f.call2(&JsValue::NULL, &JsValue::from(p.done as u32), &JsValue::from(p.total as u32));
            }
        })
        .map_err(js)?;
        drop(checkpoint);
        Engine::new(model, context)
    }

    fn new(model: Model, context: usize) -> Result<Engine, JsError> {
        let max = model.info().context_length;
        let context = if context == 0 { default_context(max) } else { context.min(max) };
        let session = Session::new(&model, context, &Attention::Exact).map_err(js)?;
        Ok(Engine { model, session, generation: None, history: ChatHistory::new(), answer: String::new(), chatting: false })
    }

    /// What the model is, one line.
    pub fn summary(&self) -> String {
        self.model.info().summary()
    }

    /// Whether the model has a chat format (`start` with `chat`).
    pub fn has_chat(&self) -> bool {
        self.model.info().chat
    }

    /// Positions the session holds.
    pub fn context(&self) -> usize {
        self.session.context()
    }

    /// Positions the session uses.
    pub fn position(&self) -> usize {
        self.session.position()
    }

    /// Starts a generation of up to `max_tokens`. Plain text (`chat` false) starts a new
    /// sequence; a chat message is the conversation's next user turn, fed as llama.cpp
    /// formats the whole conversation (`ChatHistory`, as `lutra chat` does); a plain run
    /// ends the conversation. Returns the prompt's token count. `seed` is rounded to an
    /// integer.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        prompt: &str,
        chat: bool,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        repeat_last_n: usize,
        seed: f64,
    ) -> Result<usize, JsError> {
        // the last answer, whole or stopped, as the session holds it
        if self.generation.take().is_some() && self.chatting {
            self.history.add_answer(&core::mem::take(&mut self.answer));
        }
        self.answer.clear();
        if !chat && self.chatting {
            self.history = ChatHistory::new();
        }
        self.chatting = chat;
        let tokens = if chat {
            self.history.next_turn(&mut self.session, &[(Role::User, prompt)]).map_err(js)?.tokens
        } else {
            self.session.reset();
            self.model.encode(prompt, true).map_err(js)?
        };
        let sampler = SamplerConfig { temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed: seed as u64 };
        self.generation = Some(Generation::start(&mut self.session, &tokens, sampler, max_tokens).map_err(js)?);
        Ok(tokens.len())
    }

    /// Stops the generation before its next token (the Stop button); its answer so far
    /// stays in the conversation.
    pub fn cancel(&self) {
        if let Some(generation) = &self.generation {
            generation.cancel_flag().cancel();
        }
    }

    /// Computes the prompt but its last token (the first `next_token` computes that one
    /// with the logits), so prompt and generation speed can be timed apart.
    pub fn prefill(&mut self) -> Result<(), JsError> {
        self.session.prefill(&products()).map_err(js)
    }

    /// The next piece of text (possibly empty while a character is incomplete), or
    /// `undefined` once the generation has stopped.
    pub fn next_token(&mut self) -> Result<Option<String>, JsError> {
        let Some(generation) = self.generation.as_mut() else { return Ok(None) };
        let piece = generation.next_piece(&mut self.session, &products()).map_err(js)?;
        if let (Some(piece), true) = (piece, self.chatting) {
            self.answer.push_str(piece);
        }
        Ok(piece.map(String::from))
    }

    /// Why the generation stopped: "end", "max_tokens", "context_full", "cancelled", or
    /// `undefined` while it runs.
    pub fn stop_reason(&self) -> Option<String> {
        let reason = self.generation.as_ref()?.stop_reason()?;
        Some(
            match reason {
                StopReason::EndToken(_) => "end",
                StopReason::MaxTokens => "max_tokens",
                StopReason::ContextFull => "context_full",
                StopReason::Cancelled => "cancelled",
            }
            .into(),
        )
    }

    /// Tokens the generation has sampled.
    pub fn generated(&self) -> usize {
        self.generation.as_ref().map_or(0, |g| g.generated())
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.generation = None;
        self.history = ChatHistory::new();
        self.answer.clear();
        self.session.reset();
    }
}

#[cfg(test)]
mod tests {
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn best_isa_is_a_known_name() {
        let name = super::best_isa();
        assert!(lutra_core::Isa::from_name(&name).is_some(), "{name}");
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        assert_eq!(name, "simd128");
    }

    /// The attention timer `www/bench/attention.mjs` drives: every kind, with this build's
    /// scan and the scalar one, attends to finite, non-zero outputs; bad names and an
    /// empty context are errors (checked on wasm, where a `JsError` can be made).
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn attention_timer_runs_every_kind() {
        for kind in lutra_core::attention::synthetic::KINDS {
            for scan in ["best", "scalar"] {
                let mut timer = super::AttentionTimer::new(kind, "gemma3", 40, scan).unwrap_or_else(|_| panic!("{kind} {scan}"));
                timer.run(2);
                assert!(timer.out.iter().all(|v| v.is_finite()) && timer.out.iter().any(|&v| v != 0.0), "{kind} {scan}");
                assert!(timer.bytes().iter().all(|&b| b > 0.0), "{kind} {scan}");
            }
        }
        #[cfg(target_arch = "wasm32")]
        for (kind, shape, ctx, scan) in [
            ("pq99", "gemma3", 8, "best"),
            ("pq16+q5_1", "gemma3", 8, "best"),
            ("pq16", "gpt2", 8, "best"),
            ("pq16", "gemma3", 0, "best"),
            ("exact_f16", "llama7b", 1 << 30, "best"),
            ("pq16", "gemma3", 8, "fast"),
        ] {
            assert!(super::AttentionTimer::new(kind, shape, ctx, scan).is_err(), "{kind} {shape} {ctx} {scan}");
        }
    }

    /// The page's form gets `SamplerConfig::default()`: each field as written in decimal,
    /// and the same f32 once the page passes it back to `start`.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn sampler_defaults_are_the_engine_defaults() {
        let d = lutra_core::sampler::SamplerConfig::default();
        let fields = super::sampler_default_fields();
        let got = |name: &str| fields.iter().find(|f| f.0 == name).unwrap_or_else(|| panic!("{name}")).1;
        assert_eq!(got("temperature") as f32, d.temperature);
        assert_eq!(got("top_k") as usize, d.top_k);
        assert_eq!(got("top_p") as f32, d.top_p);
        assert_eq!(got("min_p") as f32, d.min_p);
        assert_eq!(got("repeat_penalty") as f32, d.repeat_penalty);
        assert_eq!(got("repeat_last_n") as usize, d.repeat_last_n);
        // the shortest decimal, not the f32's exact binary value
        assert_eq!(got("temperature").to_string(), d.temperature.to_string());
        assert_eq!(got("top_p").to_string(), d.top_p.to_string());
    }

    /// The self-check the browser test runs in Chromium, here under node (and natively).
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn kernels_equal_scalar() {
        let report = super::kernel_check().unwrap_or_else(|_| panic!("kernel check failed"));
        assert!(report.ends_with("equal scalar"), "{report}");
    }
}
