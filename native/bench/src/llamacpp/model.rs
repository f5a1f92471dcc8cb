//! A whole model run by llama.cpp (feature `llamacpp`), for `lutra bench model --llamacpp`:
//! the same GGUF file as lutra, timed in the same process the way `llama-bench -p N -n M`
//! times it.
//!
//! What llama-bench does, and this does too (llama-cpp-sys-2, statically linked, CPU only):
//! `llama_model_load_from_file` (no GPU layers), `llama_init_from_model` with llama.cpp's
//! default context parameters (f16 KV cache, flash attention "auto", llama-bench's own
//! default) except n_ctx (≥ 512), n_batch (= n_ctx, so a prompt is one batch), n_ubatch 512
//! and `threads` for both n_threads and n_threads_batch; a persistent ggml threadpool of
//! `threads` threads with ggml's default parameters (poll 50, no CPU mask: llama-bench's
//! defaults) attached with `llama_attach_threadpool`.
//! * [`LlamaCppModel::pp`]: clear the memory (`llama_memory_clear`), then one
//!   `llama_decode` of n tokens (BOS when the vocabulary adds one, then random ids) with
//!   logits only for the last (`llama_batch_get_one`), then `llama_synchronize`.
//! * [`LlamaCppModel::tg`]: clear the memory, then n `llama_decode` calls of one token
//!   each (logits on), each followed by `llama_synchronize`; the first token is BOS, the
//!   next ones random ids, as in llama-bench (no sampling).

use std::ffi::{c_char, c_void, CStr, CString};
use std::io::Write;
use std::path::Path;
use std::ptr;
use std::sync::Once;
use std::time::Instant;

use llama_cpp_sys_2 as sys;

/// Smallest context (tokens) and the micro-batch size (llama-bench's default n_ubatch).
const MIN_CTX: usize = 512;
const N_UBATCH: u32 = 512;
/// `GGML_MAX_N_THREADS` of ggml.h (a macro, so not in the bindings).
const MAX_THREADS: usize = 512;

/// A llama.cpp model, a context over it and its threadpool; all freed on drop.
pub struct LlamaCppModel {
    model: *mut sys::llama_model,
    ctx: *mut sys::llama_context,
    threadpool: *mut sys::ggml_threadpool,
    n_vocab: u32,
    /// BOS id when the vocabulary adds one at the start of a text.
    bos: Option<i32>,
    n_ctx: usize,
    n_batch: usize,
    /// Token buffer handed to `llama_batch_get_one` (llama.cpp reads it during decode).
    tokens: Vec<i32>,
    rng: u64,
}

impl LlamaCppModel {
    /// Load `path` with a context of 512 tokens and `threads` threads.
    pub fn load(path: &Path, threads: usize) -> Result<LlamaCppModel, String> {
        Self::load_with_context(path, threads, MIN_CTX)
    }

    /// Load `path` with a context of at least `n_ctx` tokens (at least 512) and `threads`
    /// threads; a prompt of up to n_ctx tokens is decoded as one batch.
    pub fn load_with_context(path: &Path, threads: usize, n_ctx: usize) -> Result<LlamaCppModel, String> {
        if threads == 0 || threads > MAX_THREADS {
            return Err(format!("llama.cpp: {threads} threads (must be 1..={MAX_THREADS})"));
        }
        let n_ctx = n_ctx.max(MIN_CTX);
        let n_ctx_u32 = u32::try_from(n_ctx).map_err(|_| format!("llama.cpp: context of {n_ctx} tokens is too large"))?;
        let cpath = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| format!("{}: NUL in the path", path.display()))?;
        init_backend();
        let mut m = LlamaCppModel {
            model: ptr::null_mut(),
            ctx: ptr::null_mut(),
            threadpool: ptr::null_mut(),
            n_vocab: 0,
            bos: None,
            n_ctx,
            n_batch: n_ctx,
            tokens: Vec::with_capacity(n_ctx),
            rng: 0x6c75_7472_612d_6c63,
        };
        // Every pointer returned is null-checked and stored in `m` as soon as it exists, so
        // an early return frees exactly what was made (Drop skips null pointers).
        // SAFETY: the parameter structs come from llama.cpp's own default constructors and
        // `cpath` is NUL-terminated and outlives the call.
        unsafe {
            let mut mparams = sys::llama_model_default_params();
            mparams.n_gpu_layers = 0;
            m.model = sys::llama_model_load_from_file(cpath.as_ptr(), mparams);
            if m.model.is_null() {
                return Err(format!("{}: llama.cpp could not load the model (llama_model_load_from_file)", path.display()));
            }
            let mut cparams = sys::llama_context_default_params();
            cparams.n_ctx = n_ctx_u32;
            cparams.n_batch = n_ctx_u32;
            cparams.n_ubatch = N_UBATCH.min(n_ctx_u32);
            cparams.n_threads = threads as i32;
            cparams.n_threads_batch = threads as i32;
            cparams.no_perf = true;
            m.ctx = sys::llama_init_from_model(m.model, cparams);
            if m.ctx.is_null() {
                return Err("llama.cpp: llama_init_from_model failed".into());
            }
            let mut tpp = sys::ggml_threadpool_params_default(threads as i32);
            m.threadpool = sys::ggml_threadpool_new(&mut tpp);
            if m.threadpool.is_null() {
                return Err(format!("llama.cpp: ggml_threadpool_new({threads}) failed"));
            }
            sys::llama_attach_threadpool(m.ctx, m.threadpool, ptr::null_mut());
            let vocab = sys::llama_model_get_vocab(m.model);
            if vocab.is_null() {
                return Err("llama.cpp: the model has no vocabulary".into());
            }
            let n = sys::llama_vocab_n_tokens(vocab);
            m.n_vocab = u32::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| format!("llama.cpp: vocabulary of {n} tokens"))?;
            if sys::llama_vocab_get_add_bos(vocab) {
                m.bos = Some(sys::llama_vocab_bos(vocab)).filter(|&b| b >= 0 && (b as u32) < m.n_vocab);
            }
        }
        Ok(m)
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab as usize
    }

    /// Context length (tokens) the model was loaded with.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Prompt processing: clear the memory, decode `n` tokens as one batch (logits for
    /// the last only). Returns the seconds taken (clearing excluded).
    pub fn pp(&mut self, n: usize) -> Result<f64, String> {
        if n == 0 || n > self.n_batch {
            return Err(format!("llama.cpp pp: {n} tokens (must be 1..={})", self.n_batch));
        }
        self.clear();
        self.tokens.clear();
        for i in 0..n {
            let t = match (i, self.bos) {
                (0, Some(bos)) => bos,
                _ => self.random_token(),
            };
            self.tokens.push(t);
        }
        let t = Instant::now();
        self.decode_buffer()?;
        Ok(t.elapsed().as_secs_f64())
    }

    /// Text generation: clear the memory, then decode `n` tokens one at a time (a batch
    /// of one each, logits on). Returns the seconds taken (clearing excluded).
    pub fn tg(&mut self, n: usize) -> Result<f64, String> {
        if n == 0 || n > self.n_ctx {
            return Err(format!("llama.cpp tg: {n} tokens (must be 1..={})", self.n_ctx));
        }
        self.clear();
        let mut token = self.bos.unwrap_or_else(|| self.random_token());
        let t = Instant::now();
        for _ in 0..n {
            self.tokens.clear();
            self.tokens.push(token);
            self.decode_buffer()?;
            token = self.random_token();
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Clears the memory and decodes `depth` tokens (BOS first) in batches of up to
    /// n_batch, untimed: the context that `tg_at` generates after, like `llama-bench -d`.
    pub fn fill(&mut self, depth: usize) -> Result<(), String> {
        if depth >= self.n_ctx {
            return Err(format!("llama.cpp: depth {depth} does not fit the context of {}", self.n_ctx));
        }
        self.clear();
        let mut done = 0;
        while done < depth {
            let n = (depth - done).min(self.n_batch);
            self.tokens.clear();
            for i in 0..n {
                let t = match (done + i, self.bos) {
                    (0, Some(bos)) => bos,
                    _ => self.random_token(),
                };
                self.tokens.push(t);
            }
            self.decode_buffer()?;
            done += n;
        }
        Ok(())
    }

    /// Text generation after a `fill(depth)`: drops whatever the memory holds past
    /// `depth`, then decodes `n` tokens one at a time. Returns the seconds taken.
    pub fn tg_at(&mut self, depth: usize, n: usize) -> Result<f64, String> {
        if n == 0 || depth + n > self.n_ctx {
            return Err(format!("llama.cpp tg: {n} tokens after {depth} (the context is {})", self.n_ctx));
        }
        // SAFETY: the context is live and no decode is in flight (`&mut self`); removing
        // positions depth.. of sequence 0 only edits the cache's metadata.
        unsafe { sys::llama_memory_seq_rm(sys::llama_get_memory(self.ctx), 0, depth as i32, -1) };
        let mut token = self.random_token();
        let t = Instant::now();
        for _ in 0..n {
            self.tokens.clear();
            self.tokens.push(token);
            self.decode_buffer()?;
            token = self.random_token();
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Teacher forcing: clear the memory, decode `tokens` (positions 0..) as one batch
    /// with logits for every position, and return them, a vocabulary's worth each: the
    /// reference a model's forward pass is compared with.
    pub fn logits_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, String> {
        let n = tokens.len();
        if n == 0 || n > self.n_batch {
            return Err(format!("llama.cpp logits: {n} tokens (must be 1..={})", self.n_batch));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t >= self.n_vocab) {
            return Err(format!("llama.cpp logits: token {t} outside the vocabulary of {}", self.n_vocab));
        }
        self.clear();
        // SAFETY: llama_batch_init allocates room for n tokens with one sequence id each;
        // exactly n entries are written, the batch is decoded and freed once. Each logits
        // pointer is read (n_vocab floats) before the next decode.
        unsafe {
            let mut batch = sys::llama_batch_init(n as i32, 0, 1);
            for (i, &t) in tokens.iter().enumerate() {
                *batch.token.add(i) = t as i32;
                *batch.pos.add(i) = i as i32;
                *batch.n_seq_id.add(i) = 1;
                **batch.seq_id.add(i) = 0;
                *batch.logits.add(i) = 1;
            }
            batch.n_tokens = n as i32;
            let rc = sys::llama_decode(self.ctx, batch);
            sys::llama_synchronize(self.ctx);
            sys::llama_batch_free(batch);
            if rc != 0 {
                return Err(format!("llama.cpp: llama_decode returned {rc}"));
            }
            (0..n)
                .map(|i| {
                    let p = sys::llama_get_logits_ith(self.ctx, i as i32);
                    if p.is_null() {
                        return Err(format!("llama.cpp: no logits for position {i}"));
                    }
                    Ok(std::slice::from_raw_parts(p, self.n_vocab as usize).to_vec())
                })
                .collect()
        }
    }

    /// Parks the threadpool's workers: after a decode they busy-poll for new work for a
    /// while (poll = 50), which would steal cores from whatever is timed next. The next
    /// decode wakes them.
    pub fn pause(&mut self) {
        // SAFETY: the threadpool is live (made in `load_with_context`) and no decode is in
        // flight (`&mut self`).
        unsafe { sys::ggml_threadpool_pause(self.threadpool) };
    }

    /// Empties the KV cache (metadata only, as llama-bench does between tests).
    fn clear(&mut self) {
        // SAFETY: the context is live; its memory handle (possibly null for memoryless
        // models, which llama_memory_clear accepts) belongs to it.
        unsafe { sys::llama_memory_clear(sys::llama_get_memory(self.ctx), false) };
    }

    /// One `llama_decode` of `self.tokens` (positions continue the sequence, sequence 0,
    /// logits for the last token), then `llama_synchronize`.
    fn decode_buffer(&mut self) -> Result<(), String> {
        let n = i32::try_from(self.tokens.len()).map_err(|_| "llama.cpp: batch too large".to_string())?;
        // The batch only records the pointer and length of `self.tokens` and owns nothing,
        // so it is not freed.
        // SAFETY: `self.tokens` stays alive and unmodified until `llama_decode` returns;
        // the context is live, and every id is below n_vocab.
        let rc = unsafe {
            let batch = sys::llama_batch_get_one(self.tokens.as_mut_ptr(), n);
            let rc = sys::llama_decode(self.ctx, batch);
            sys::llama_synchronize(self.ctx);
            rc
        };
        if rc != 0 {
            return Err(format!("llama.cpp: llama_decode returned {rc}"));
        }
        Ok(())
    }

    /// A pseudo-random token id in 0..n_vocab (splitmix64).
    fn random_token(&mut self) -> i32 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 32) % self.n_vocab as u64) as i32
    }
}

impl Drop for LlamaCppModel {
    fn drop(&mut self) {
        // SAFETY: each pointer was returned by llama.cpp/ggml, is freed exactly once and
        // only if it was made; the context goes before the model it was made from, and
        // the threadpool is detached and freed after the context that used it.
        unsafe {
            if !self.ctx.is_null() {
                sys::llama_detach_threadpool(self.ctx);
                sys::llama_free(self.ctx);
            }
            if !self.threadpool.is_null() {
                sys::ggml_threadpool_free(self.threadpool);
            }
            if !self.model.is_null() {
                sys::llama_model_free(self.model);
            }
        }
    }
}

/// Installs the log callback and initializes llama.cpp's backends, once per process
/// (also used by `examples/gemma_golden.rs`).
pub fn init_backend() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the callback is a plain function valid for the whole program and
        // ignores user_data; backend initialization has no preconditions.
        unsafe {
            sys::llama_log_set(Some(log_callback), ptr::null_mut());
            sys::llama_backend_init();
        }
    });
}

thread_local! {
    /// Level of the last message on this thread, for GGML_LOG_LEVEL_CONT continuations.
    static LAST_LEVEL: std::cell::Cell<sys::ggml_log_level> = const { std::cell::Cell::new(sys::GGML_LOG_LEVEL_NONE) };
}

/// llama.cpp/ggml log callback: warnings and errors to stderr, the rest dropped. Never
/// panics (it is called from C).
unsafe extern "C" fn log_callback(level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
    if text.is_null() {
        return;
    }
    let level = if level == sys::GGML_LOG_LEVEL_CONT {
        LAST_LEVEL.with(|l| l.get())
    } else {
        LAST_LEVEL.with(|l| l.set(level));
        level
    };
    if level >= sys::GGML_LOG_LEVEL_WARN {
        // SAFETY: llama.cpp passes a NUL-terminated message that lives for this call.
        let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
        let _ = std::io::stderr().write_all(bytes);
    }
}
