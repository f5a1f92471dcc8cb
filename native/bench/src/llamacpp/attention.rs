//! llama.cpp's own decode attention, `ggml_flash_attn_ext` on ggml's CPU backend, for
//! timing side by side with lutra's attention in the same process (feature `llamacpp`).
//!
//! [`GgmlAttention`] builds what llama.cpp builds for one decode token with flash
//! attention on (`llm_graph_context::build_attn_mha` over `llama_kv_cache::get_k/get_v`):
//!
//! - the K and V caches are 2-D tensors `[n_kv_heads * head_dim, n_kv]`, position-major
//!   (one row of all KV heads per cached position), K in f16 or q8_0, V in f16, in their
//!   own CPU buffer;
//! - the attention reads them through `ggml_view_4d` as `[head_dim, n_kv_heads, n_kv, 1]`
//!   and `ggml_permute(0, 2, 1, 3)` to `[head_dim, n_kv, n_kv_heads, 1]` (V is not
//!   transposed with flash attention);
//! - the query, f32 `[head_dim, n_heads, 1]`, is permuted the same way to
//!   `[head_dim, 1, n_heads, 1]`;
//! - the mask is f16 `[n_kv, 1, 1, 1]` (flash attention requires f16; this ggml has no
//!   `GGML_KQ_MASK_PAD` any more, so the token dimension is not padded): 0 where a
//!   position is attended, -inf elsewhere;
//! - `ggml_flash_attn_ext(q, k, v, mask, 1/sqrt(head_dim), 0, 0)` with
//!   `ggml_flash_attn_ext_set_n_kv_max(0)` and `ggml_prec_set_acc(GGML_PREC_F32)`, as
//!   llama.cpp sets them; grouped-query attention is ggml's broadcasting (query head `h`
//!   reads KV head `h / (n_heads / n_kv_heads)`).
//!
//! llama.cpp pads the number of cache positions it attends over, `n_kv`, to a multiple
//! of 256 (`llama_kv_cache::get_n_kv`) so that the graph can be reused between tokens;
//! positions past the last filled one are masked with -inf. [`GgmlAttention`] does the
//! same: `ctx` positions filled, `n_kv = ctx` rounded up to 256. The CPU kernel itself
//! has no size requirement; it skips masked positions without reading K or V.
//!
//! What ggml's CPU kernel then does (ggml-cpu/ops.cpp): the query is converted to K's
//! `vec_dot_type` (f16 for f16 keys; **q8_0 for q8_0 keys**), each score is one
//! `vec_dot` with a key row, and the online softmax accumulates `p * v` over positions.
//! For f16 K and V with `n_kv >= 512` the positions are split into one chunk per thread
//! with partial results reduced at the end (f32 accumulators); otherwise (q8_0 keys, or
//! fewer positions) the work is split by query head only and the `p * v` accumulator is
//! **f16**. With q8_0 keys and few query heads, threads beyond `n_heads` therefore idle.
//!
//! Logging: ggml's logger is the one [`super::ggml`] installs (warnings and errors only).

use std::ptr;

use llama_cpp_sys_2 as sys;

use super::ggml::{cpu_backend, new_context};

/// Seed of the query.
const QUERY_SEED: u64 = 0x6c75_7472_612d_6100;
/// Seed of the keys.
const KEY_SEED: u64 = 0x6c75_7472_612d_6200;
/// Seed of the values.
const VALUE_SEED: u64 = 0x6c75_7472_612d_6300;
/// `GGML_MAX_N_THREADS` of ggml.h (a macro, so not in the bindings).
const MAX_THREADS: usize = 512;
/// llama.cpp pads `n_kv` to a multiple of this (`llama_kv_cache::get_n_kv`).
const KV_PAD: usize = 256;
/// At most this many f32 cache values are generated at once per filling thread.
const GEN_CHUNK: usize = 1 << 18;
/// Nodes of the graph (the attention and its views), with room to spare.
const GRAPH_SIZE: usize = 16;

/// One decode token's attention as llama.cpp computes it with flash attention on the
/// CPU: `n_heads` query heads over a cache of `ctx` positions of `n_kv_heads` KV heads,
/// on a persistent ggml threadpool.
pub struct GgmlAttention {
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ctx: usize,
    key_type: sys::ggml_type,
    key_bytes: usize,
    query: Vec<f32>,
    threadpool: *mut sys::ggml_threadpool,
    backend: sys::ggml_backend_t,
    /// Holds the K and V cache tensors (metadata only; data lives in `cache_buf`).
    cache_ctx: *mut sys::ggml_context,
    cache_buf: sys::ggml_backend_buffer_t,
    /// Holds the query, the mask, the views, the output and the graph.
    compute_ctx: *mut sys::ggml_context,
    compute_buf: sys::ggml_backend_buffer_t,
    graph: *mut sys::ggml_cgraph,
    k_cache: *mut sys::ggml_tensor,
    v_cache: *mut sys::ggml_tensor,
    out: *mut sys::ggml_tensor,
}

impl GgmlAttention {
    /// One decode token's attention: `n_heads` query heads, `n_kv_heads` KV heads of
    /// `head_dim`, over `ctx` cached positions; keys of `key_type` ("f16" or "q8_0",
    /// case-insensitive), values f16; scale 1/sqrt(head_dim).
    ///
    /// Query, keys and values are deterministic pseudo-random N(0, 1) values (the same
    /// for every instance of a shape), converted to f16 / quantized to q8_0 with ggml's
    /// own routines. `n_heads` must be a multiple of `n_kv_heads`, `head_dim` a multiple
    /// of 32 for q8_0 keys, `threads` within 1..=512. The cache holds `ctx` rounded up to
    /// a multiple of 256 positions, the extra ones masked out, as in llama.cpp.
    pub fn new(
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        ctx: usize,
        key_type: &str,
        threads: usize,
    ) -> Result<GgmlAttention, String> {
        // Installs ggml.rs's logger (once per process): warnings and errors only.
        let _ = super::ggml::ggml_cpu_features();
        let ty = match key_type.to_ascii_lowercase().as_str() {
            "f16" => sys::GGML_TYPE_F16,
            "q8_0" => sys::GGML_TYPE_Q8_0,
            _ => return Err(format!("key type {key_type} not supported (f16 or q8_0)")),
        };
        if n_heads == 0 || n_kv_heads == 0 || head_dim == 0 || ctx == 0 {
            return Err(format!(
                "empty attention: n_heads {n_heads}, n_kv_heads {n_kv_heads}, head_dim {head_dim}, ctx {ctx} must all be positive"
            ));
        }
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(format!("n_heads {n_heads} not a multiple of n_kv_heads {n_kv_heads}"));
        }
        if threads == 0 || threads > MAX_THREADS {
            return Err(format!("threads {threads} outside 1..={MAX_THREADS}"));
        }
        // SAFETY: ty is a valid ggml type.
        let block = unsafe { sys::ggml_blck_size(ty) } as usize;
        if !head_dim.is_multiple_of(block) {
            return Err(format!("head_dim {head_dim} not a multiple of block size {block} for {key_type} keys"));
        }
        let too_large = || format!("cache of {ctx} positions x {n_kv_heads} heads x {head_dim} too large");
        let n_kv = ctx.checked_next_multiple_of(KV_PAD).filter(|&n| n <= i32::MAX as usize).ok_or_else(too_large)?;
        let n_embd = n_kv_heads.checked_mul(head_dim).ok_or_else(too_large)?;
        // Byte sizes (at most 4 bytes per value) and element counts must fit i64.
        n_embd.checked_mul(n_kv).and_then(|n| n.checked_mul(4)).filter(|&b| i64::try_from(b).is_ok()).ok_or_else(too_large)?;
        n_heads.checked_mul(head_dim).ok_or_else(too_large)?;

        let mut att = GgmlAttention {
            n_heads,
            n_kv_heads,
            head_dim,
            ctx,
            key_type: ty,
            key_bytes: 0,
            query: (0..n_heads * head_dim).map(|i| normal(QUERY_SEED, i)).collect(),
            threadpool: ptr::null_mut(),
            backend: ptr::null_mut(),
            cache_ctx: ptr::null_mut(),
            cache_buf: ptr::null_mut(),
            compute_ctx: ptr::null_mut(),
            compute_buf: ptr::null_mut(),
            graph: ptr::null_mut(),
            k_cache: ptr::null_mut(),
            v_cache: ptr::null_mut(),
            out: ptr::null_mut(),
        };
        // From here on every early return drops `att`, which frees what was made.

        // owned by `att` (freed in Drop); `threads` is within 1..=GGML_MAX_N_THREADS
        (att.backend, att.threadpool) = cpu_backend(threads)?;

        // The caches: metadata in a no_alloc context, data in a CPU buffer, as
        // llama_kv_cache allocates them (one 2-D tensor per cache and layer, n_stream 1).
        // SAFETY: ggml_tensor_overhead has no preconditions.
        let overhead = unsafe { sys::ggml_tensor_overhead() };
        att.cache_ctx = new_context(overhead * 2)?;
        // SAFETY: no preconditions; returns a pointer to a static buffer type.
        let cpu_buft = unsafe { sys::ggml_backend_cpu_buffer_type() };
        // SAFETY: cache_ctx is a live no_alloc context with room for the two tensors,
        // whose sizes were checked to fit i64 above; results are checked for null. The
        // buffer, allocated once both tensors exist, is owned by `att`.
        unsafe {
            att.k_cache = sys::ggml_new_tensor_2d(att.cache_ctx, ty, n_embd as i64, n_kv as i64);
            att.v_cache = sys::ggml_new_tensor_2d(att.cache_ctx, sys::GGML_TYPE_F16, n_embd as i64, n_kv as i64);
            if att.k_cache.is_null() || att.v_cache.is_null() {
                return Err("could not create the ggml K/V cache tensors".into());
            }
            sys::ggml_set_name(att.k_cache, c"cache_k".as_ptr());
            sys::ggml_set_name(att.v_cache, c"cache_v".as_ptr());
            att.cache_buf = sys::ggml_backend_alloc_ctx_tensors_from_buft(att.cache_ctx, cpu_buft);
            if att.cache_buf.is_null() {
                return Err(format!("could not allocate the K/V cache ({n_kv} positions x {n_embd})"));
            }
            sys::ggml_backend_buffer_clear(att.cache_buf, 0);
            att.key_bytes = sys::ggml_nbytes(att.k_cache);
        }
        fill_cache(att.k_cache, ty, n_embd, ctx, KEY_SEED, threads);
        fill_cache(att.v_cache, sys::GGML_TYPE_F16, n_embd, ctx, VALUE_SEED, threads);

        // Query, mask, views, attention and graph.
        // SAFETY: no preconditions.
        let graph_bytes = unsafe { sys::ggml_graph_overhead_custom(GRAPH_SIZE, false) };
        att.compute_ctx = new_context(overhead * GRAPH_SIZE + graph_bytes)?;
        let scale = 1.0 / (head_dim as f32).sqrt();
        // The views describe exactly the caches' n_kv rows of n_kv_heads * head_dim
        // elements (the strides llama_kv_cache::get_k uses); shapes satisfy
        // ggml_flash_attn_ext's asserts (same head_dim for q, k and v, n_heads a multiple
        // of n_kv_heads, f16 contiguous mask); results are checked for null before use.
        // SAFETY: compute_ctx is live with room for the graph and its < GRAPH_SIZE tensors,
        // and every view stays inside its cache tensor (above).
        unsafe {
            let c = att.compute_ctx;
            let q_cur = sys::ggml_new_tensor_3d(c, sys::GGML_TYPE_F32, head_dim as i64, n_heads as i64, 1);
            let mask = sys::ggml_new_tensor_4d(c, sys::GGML_TYPE_F16, n_kv as i64, 1, 1, 1);
            att.graph = sys::ggml_new_graph_custom(c, GRAPH_SIZE, false);
            if q_cur.is_null() || mask.is_null() || att.graph.is_null() {
                return Err("could not create the ggml query, mask or graph".into());
            }
            sys::ggml_set_name(q_cur, c"Qcur".as_ptr());
            sys::ggml_set_name(mask, c"attn_inp_kq_mask".as_ptr());
            sys::ggml_set_input(q_cur);
            sys::ggml_set_input(mask);
            let cache_view = |t: *mut sys::ggml_tensor, ty: sys::ggml_type| {
                sys::ggml_view_4d(
                    c,
                    t,
                    head_dim as i64,
                    n_kv_heads as i64,
                    n_kv as i64,
                    1,
                    sys::ggml_row_size(ty, head_dim as i64),
                    sys::ggml_row_size(ty, n_embd as i64),
                    sys::ggml_row_size(ty, (n_embd * n_kv) as i64),
                    0,
                )
            };
            let k = cache_view(att.k_cache, ty);
            let v = cache_view(att.v_cache, sys::GGML_TYPE_F16);
            if k.is_null() || v.is_null() {
                return Err("could not create the K/V cache views".into());
            }
            let q = sys::ggml_permute(c, q_cur, 0, 2, 1, 3);
            let k = sys::ggml_permute(c, k, 0, 2, 1, 3);
            let v = sys::ggml_permute(c, v, 0, 2, 1, 3);
            if q.is_null() || k.is_null() || v.is_null() {
                return Err("ggml_permute failed".into());
            }
            let fa = sys::ggml_flash_attn_ext(c, q, k, v, mask, scale, 0.0, 0.0);
            if fa.is_null() {
                return Err("ggml_flash_attn_ext failed".into());
            }
            sys::ggml_flash_attn_ext_set_n_kv_max(fa, 0);
            sys::ggml_prec_set_acc(fa, sys::GGML_PREC_F32);
            if !sys::ggml_backend_supports_op(att.backend, fa) {
                return Err(format!("the ggml CPU backend does not support flash attention with {key_type} keys"));
            }
            sys::ggml_build_forward_expand(att.graph, fa);
            att.out = fa;
            att.compute_buf = sys::ggml_backend_alloc_ctx_tensors_from_buft(c, cpu_buft);
            if att.compute_buf.is_null() {
                return Err("could not allocate the ggml query/mask/output buffer".into());
            }
            sys::ggml_backend_buffer_clear(att.compute_buf, 0);
            sys::ggml_backend_tensor_set(q_cur, att.query.as_ptr().cast(), 0, att.query.len() * size_of::<f32>());
            let mask_f32: Vec<f32> = (0..n_kv).map(|i| if i < ctx { 0.0 } else { f32::NEG_INFINITY }).collect();
            let mut mask_f16 = vec![0u16; n_kv];
            sys::ggml_fp32_to_fp16_row(mask_f32.as_ptr(), mask_f16.as_mut_ptr(), n_kv as i64);
            sys::ggml_backend_tensor_set(mask, mask_f16.as_ptr().cast(), 0, n_kv * size_of::<u16>());
        }
        Ok(att)
    }

    /// Evaluates the graph once. This is what the benchmark times.
    pub fn run(&mut self) -> Result<(), String> {
        // SAFETY: backend and graph are live (built in `new`), all graph tensors are
        // allocated, and `&mut self` rules out a concurrent run on the same graph.
        let status = unsafe { sys::ggml_backend_graph_compute(self.backend, self.graph) };
        if status == sys::GGML_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(format!("ggml_backend_graph_compute failed with status {status}"))
        }
    }

    /// The output of the last [`Self::run`], `n_heads x head_dim` f32, head-major; zeros
    /// before any run.
    pub fn output(&self) -> Vec<f32> {
        let mut y = vec![0f32; self.n_heads * self.head_dim];
        // SAFETY: out is an allocated contiguous F32 tensor [head_dim, n_heads, 1, 1] in
        // a CPU buffer, and `y` has room for exactly its bytes.
        unsafe { sys::ggml_backend_tensor_get(self.out, y.as_mut_ptr().cast(), 0, y.len() * size_of::<f32>()) };
        y
    }

    /// Bytes of the K cache tensor as ggml stores it: `n_kv` (ctx rounded up to 256)
    /// positions of `n_kv_heads * head_dim` keys in the key type's row format.
    pub fn key_bytes(&self) -> usize {
        self.key_bytes
    }

    /// Parks the threadpool's worker threads. After each run they busy-poll for new
    /// work for a while (llama.cpp's default, poll = 50), which steals cores from
    /// whatever runs next; call this before timing other code. The next
    /// [`Self::run`] wakes them again.
    pub fn pause(&mut self) {
        // SAFETY: the threadpool is live and no run is in flight (`&mut self`).
        unsafe { sys::ggml_threadpool_pause(self.threadpool) };
    }

    /// The inputs as ggml holds them, in f32, for checking: the query (`n_heads x
    /// head_dim`, head-major), the keys and the values (`ctx x n_kv_heads x head_dim`,
    /// position-major). Keys and values are read back from the cache tensors and
    /// converted with ggml's `to_float` (exact for f16; q8_0 keys dequantized), so a
    /// reference computed from them needs no further rounding. Note that ggml's kernel
    /// also converts the query, to f16 for f16 keys and to q8_0 for q8_0 keys.
    pub fn inputs(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let n = self.ctx * self.n_kv_heads * self.head_dim;
        (self.query.clone(), read_cache(self.k_cache, self.key_type, n), read_cache(self.v_cache, sys::GGML_TYPE_F16, n))
    }
}

impl Drop for GgmlAttention {
    fn drop(&mut self) {
        // SAFETY: each pointer is either null or owned by `self` and freed exactly once
        // here. No run is in flight (`&mut self`). Buffers go before the contexts whose
        // tensors point into them, and the backend before the threadpool it uses.
        unsafe {
            if !self.compute_buf.is_null() {
                sys::ggml_backend_buffer_free(self.compute_buf);
            }
            if !self.cache_buf.is_null() {
                sys::ggml_backend_buffer_free(self.cache_buf);
            }
            if !self.compute_ctx.is_null() {
                sys::ggml_free(self.compute_ctx);
            }
            if !self.cache_ctx.is_null() {
                sys::ggml_free(self.cache_ctx);
            }
            if !self.backend.is_null() {
                sys::ggml_backend_free(self.backend);
            }
            if !self.threadpool.is_null() {
                sys::ggml_threadpool_free(self.threadpool);
            }
        }
    }
}

/// An allocated cache tensor, shared by the threads that fill disjoint rows of it.
#[derive(Clone, Copy)]
struct CacheTensor(*mut sys::ggml_tensor);

// SAFETY: the tensor's data is only written through ggml_backend_tensor_set, a memcpy
// into the CPU buffer, by threads that write disjoint byte ranges while nothing else
// touches the tensor; its metadata is only read.
unsafe impl Send for CacheTensor {}

impl CacheTensor {
    /// The pointer (a method, so that closures capture the whole `Send` wrapper).
    fn get(self) -> *mut sys::ggml_tensor {
        self.0
    }
}

/// Writes the first `ctx` rows (positions) of the 2-D cache tensor `t` of type `ty`,
/// `n_embd` values each: N(0, 1) values of stream `seed` (element `pos * n_embd + j`),
/// converted with `ggml_quantize_chunk`, over `threads` threads; the result does not
/// depend on `threads`.
fn fill_cache(t: *mut sys::ggml_tensor, ty: sys::ggml_type, n_embd: usize, ctx: usize, seed: u64, threads: usize) {
    let t = CacheTensor(t);
    // SAFETY: ty is valid and n_embd a multiple of its block size (checked in `new`).
    let row_bytes = unsafe { sys::ggml_row_size(ty, n_embd as i64) };
    // SAFETY: ty is valid; initializing its quantization tables (if any) up front is
    // idempotent and thread-safe in ggml.
    unsafe { sys::ggml_quantize_init(ty) };
    let rows_per_thread = ctx.div_ceil(threads.max(1));
    let sub = (GEN_CHUNK / n_embd).max(1);
    std::thread::scope(|s| {
        for first in (0..ctx).step_by(rows_per_thread) {
            let last = (first + rows_per_thread).min(ctx);
            s.spawn(move || {
                let mut f = Vec::with_capacity(sub.min(last - first) * n_embd);
                let mut q = vec![0u8; sub.min(last - first) * row_bytes];
                for row0 in (first..last).step_by(sub) {
                    let n = sub.min(last - row0);
                    f.clear();
                    f.extend((row0 * n_embd..(row0 + n) * n_embd).map(|k| normal(seed, k)));
                    let bytes = &mut q[..n * row_bytes];
                    // n_embd is a multiple of the block size and no importance matrix
                    // is needed (f16, q8_0). The tensor has ctx >= row0 + n rows of
                    // row_bytes bytes; this thread alone writes rows first..last (CacheTensor).
                    // SAFETY: `f` holds n rows of n_embd f32 and `bytes` n rows of row_bytes.
                    unsafe {
                        sys::ggml_quantize_chunk(ty, f.as_ptr(), bytes.as_mut_ptr().cast(), 0, n as i64, n_embd as i64, ptr::null());
                        sys::ggml_backend_tensor_set(t.get(), bytes.as_ptr().cast(), row0 * row_bytes, bytes.len());
                    }
                }
            });
        }
    });
}

/// The first `n` values of the cache tensor `t` of type `ty` (f16 or q8_0), in f32.
fn read_cache(t: *mut sys::ggml_tensor, ty: sys::ggml_type, n: usize) -> Vec<f32> {
    // SAFETY: ty is valid and n is whole rows of t, so a multiple of the block size.
    let bytes = unsafe { sys::ggml_row_size(ty, n as i64) };
    let mut raw = vec![0u8; bytes];
    let mut out = vec![0f32; n];
    // SAFETY: t is an allocated tensor of type ty with at least n elements, i.e.
    // `bytes` bytes from offset 0; `raw` holds that many. ggml's type table is static.
    unsafe {
        sys::ggml_backend_tensor_get(t, raw.as_mut_ptr().cast(), 0, bytes);
        let to_float = (*sys::ggml_get_type_traits(ty)).to_float.expect("f16 and q8_0 have to_float");
        to_float(raw.as_ptr().cast(), out.as_mut_ptr(), n as i64);
    }
    out
}

/// Element `k` of the N(0, 1) stream `seed`: Box–Muller on two SplitMix64 uniforms of
/// a counter, so any element can be made independently (and in parallel).
fn normal(seed: u64, k: usize) -> f32 {
    let u1 = ((splitmix(seed, 2 * k) >> 40) as f32 + 1.0) * (1.0 / (1u32 << 24) as f32); // (0, 1]
    let u2 = (splitmix(seed, 2 * k + 1) >> 40) as f32 * (1.0 / (1u32 << 24) as f32); // [0, 1)
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

/// SplitMix64 of counter `k` in stream `seed`.
fn splitmix(seed: u64, k: usize) -> u64 {
    let mut z = seed.wrapping_add((k as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Max abs difference between `y` and an f64 softmax attention of query `q` over the
    /// keys and values of `g.inputs()`.
    fn max_err(g: &GgmlAttention, y: &[f32], q: &[f32]) -> f64 {
        let (_, k, v) = g.inputs();
        let (d, hk, group) = (g.head_dim, g.n_kv_heads, g.n_heads / g.n_kv_heads);
        let scale = 1.0 / (d as f64).sqrt();
        let mut err = 0f64;
        for h in 0..g.n_heads {
            let kv = h / group;
            let qh = &q[h * d..(h + 1) * d];
            let s: Vec<f64> = (0..g.ctx)
                .map(|t| {
                    let kt = &k[(t * hk + kv) * d..(t * hk + kv + 1) * d];
                    scale * qh.iter().zip(kt).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
            let sum: f64 = p.iter().sum();
            for i in 0..d {
                let want: f64 = p.iter().enumerate().map(|(t, &pt)| pt * v[(t * hk + kv) * d + i] as f64).sum::<f64>() / sum;
                err = err.max((y[h * d + i] as f64 - want).abs());
            }
        }
        err
    }

    /// `x` converted to ggml type `ty` and back, as ggml's kernel converts the query to
    /// the keys' `vec_dot_type` (f16 for f16 keys, q8_0 for q8_0 keys).
    fn round_trip(x: &[f32], ty: sys::ggml_type) -> Vec<f32> {
        // SAFETY: ty is F16 or Q8_0 and x.len() a multiple of 32 (head_dim is).
        let bytes = unsafe { sys::ggml_row_size(ty, x.len() as i64) };
        let mut raw = vec![0u8; bytes];
        let mut out = vec![0f32; x.len()];
        // SAFETY: `raw` holds the converted row of x.len() values, `out` x.len() f32;
        // neither type needs an importance matrix; ggml's type table is static.
        unsafe {
            sys::ggml_quantize_chunk(ty, x.as_ptr(), raw.as_mut_ptr().cast(), 0, 1, x.len() as i64, ptr::null());
            let to_float = (*sys::ggml_get_type_traits(ty)).to_float.unwrap();
            to_float(raw.as_ptr().cast(), out.as_mut_ptr(), x.len() as i64);
        }
        out
    }

    #[test]
    fn attention_matches_f64_reference() {
        // (n_heads, n_kv_heads, head_dim, ctx, threads): Gemma 3 270M, Llama-style MHA,
        // and Gemma at ctx 300 (n_kv padded to 512 with a -inf mask tail; f16 takes
        // ggml's split-KV path from 512 positions on). Outputs have an RMS of about 0.1.
        for (nh, nkv, d, ctx, threads) in [(4, 1, 256, 256, 1), (8, 8, 128, 256, 2), (4, 1, 256, 300, 2)] {
            for (key_type, ty) in [("f16", sys::GGML_TYPE_F16), ("q8_0", sys::GGML_TYPE_Q8_0)] {
                let case = format!("{nh}/{nkv} heads x {d}, ctx {ctx}, {key_type} keys");
                let mut g = GgmlAttention::new(nh, nkv, d, ctx, key_type, threads).unwrap();
                g.run().unwrap();
                let y = g.output();
                let q = g.inputs().0;
                // With the query rounded as ggml rounds it, what remains is ggml's f16
                // accumulator of p * v (about 1e-3 relative to the running sum).
                let exact = max_err(&g, &y, &round_trip(&q, ty));
                // Against the f32 query, q8_0 adds the query's rounding: |dq| <= amax/254
                // per block of 32, about 0.005 RMS for N(0, 1), so each score (scaled by
                // 1/sqrt(head_dim), |k| ~ sqrt(head_dim)) moves by about 0.005 RMS and an
                // output by at most that times the spread of v under the softmax (~1):
                // 4 sigma over ~2000 outputs is 2e-2 on top of the f16 part.
                let plain = max_err(&g, &y, &q);
                let bound = if ty == sys::GGML_TYPE_F16 { 2e-2 } else { 4e-2 };
                eprintln!("{case}: max abs err {plain:.2e} (query rounded as ggml does: {exact:.2e})");
                assert!(exact < 1e-2, "{case}: max abs err {exact} with the query rounded");
                assert!(plain < bound, "{case}: max abs err {plain}");
                g.run().unwrap();
                assert_eq!(y, g.output(), "{case}: a second run gives the same result");
                g.pause();
            }
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(GgmlAttention::new(4, 1, 256, 256, "q4_0", 1).err().unwrap().contains("not supported"));
        assert!(GgmlAttention::new(4, 3, 256, 256, "f16", 1).err().unwrap().contains("multiple of n_kv_heads"));
        assert!(GgmlAttention::new(4, 1, 48, 256, "q8_0", 1).err().unwrap().contains("block size 32"));
        assert!(GgmlAttention::new(4, 1, 256, 0, "f16", 1).is_err());
        assert!(GgmlAttention::new(4, 1, 256, 256, "f16", 0).is_err());
    }
}
