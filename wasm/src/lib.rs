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

use lutra_core::engine::{Attention, Generation, Model, Role, Session, SingleThread, StopReason};
use lutra_core::lut::Tables;
use lutra_core::model::kv::Parallel;
use lutra_core::model::Gemv;
use lutra_core::sampler::SamplerConfig;
use lutra_core::{Error, PackedMatrix};
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

/// Who computes the products: the calling thread, or the pool when the page started one.
enum Products {
    Single,
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    Pool(threads::PoolGemv),
}

impl Products {
    fn current() -> Products {
        #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
        if let Some(pool) = threads::pool() {
            return Products::Pool(threads::PoolGemv(pool));
        }
        Products::Single
    }
}

impl Gemv for Products {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        match self {
            Products::Single => SingleThread.gemv(m, tables, y),
            #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
            Products::Pool(p) => p.gemv(m, tables, y),
        }
    }
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        match self {
            Products::Single => SingleThread.gemm(m, tables, ys),
            #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
            Products::Pool(p) => p.gemm(m, tables, ys),
        }
    }
    fn parallel(&self) -> &dyn Parallel {
        match self {
            Products::Single => &SingleThread,
            #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
            Products::Pool(p) => p,
        }
    }
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
/// lookup GEMV integer sums at 1, 2, 3, 4 and 8 bits, and PQ score scans with 16 and
/// 256 centroids, bit for bit. Returns what was checked, or the first mismatch.
#[wasm_bindgen]
pub fn kernel_check() -> Result<String, JsError> {
    use lutra_core::pq::scan::{block_bytes16, block_bytes256};
    use lutra_core::pq::{scan16, scan256, BLOCK_KEYS};
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
    Ok(format!("{}: GEMV at 1, 2, 3, 4, 8 bits and PQ scans (16, 256 centroids) equal scalar", isa.name()))
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

/// A model, one session and the generation in progress.
#[wasm_bindgen]
pub struct Engine {
    model: Model,
    session: Session,
    generation: Option<Generation>,
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
    /// A GGUF file (Gemma 3), with a session of `context` positions (0: the model's, at
    /// most 4096). `progress(done, total)` is called after each imported tensor.
    pub fn from_gguf(file: ModelFile, context: usize, progress: Option<js_sys::Function>) -> Result<Engine, JsError> {
        complete(&file, "GGUF file")?;
        if !file.bytes.starts_with(b"GGUF") {
            return Err(JsError::new("not a GGUF file (it does not start with the GGUF magic)"));
        }
        let model = Model::from_gguf_with_progress(&file.bytes, |p| {
            if let (Some(f), None) = (&progress, &p.consumed) {
                let _ = f.call2(&JsValue::NULL, &JsValue::from(p.done as u32), &JsValue::from(p.total as u32));
            }
        })
        .map_err(js)?;
        drop(file);
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
        let context = if context == 0 { max.min(4096) } else { context.min(max) };
        let session = Session::new(&model, context, &Attention::Exact).map_err(js)?;
        Ok(Engine { model, session, generation: None })
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
    /// sequence; a chat message is appended to the conversation as the next user turn.
    /// Returns the prompt's token count. `seed` is rounded to an integer.
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
        self.generation = None;
        let tokens = if chat {
            let first = self.session.position() == 0;
            self.model.encode_chat(&[(Role::User, prompt)], first).map_err(js)?
        } else {
            self.session.reset();
            self.model.encode(prompt, true).map_err(js)?
        };
        let sampler = SamplerConfig { temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed: seed as u64 };
        self.generation = Some(Generation::start(&mut self.session, &tokens, sampler, max_tokens).map_err(js)?);
        Ok(tokens.len())
    }

    /// Computes the prompt but its last token (the first `next_token` computes that one
    /// with the logits), so prompt and generation speed can be timed apart.
    pub fn prefill(&mut self) -> Result<(), JsError> {
        self.session.prefill(&Products::current()).map_err(js)
    }

    /// The next piece of text (possibly empty while a character is incomplete), or
    /// `undefined` once the generation has stopped.
    pub fn next_token(&mut self) -> Result<Option<String>, JsError> {
        let Some(generation) = self.generation.as_mut() else { return Ok(None) };
        match generation.step(&mut self.session, &Products::current()).map_err(js)? {
            Some(token) => Ok(Some(token.text.to_string())),
            None => {
                let rest = generation.finish_text().to_string();
                Ok((!rest.is_empty()).then_some(rest))
            }
        }
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

    /// The self-check the browser test runs in Chromium, here under node (and natively).
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn kernels_equal_scalar() {
        let report = super::kernel_check().unwrap_or_else(|_| panic!("kernel check failed"));
        assert!(report.ends_with("equal scalar"), "{report}");
    }
}
