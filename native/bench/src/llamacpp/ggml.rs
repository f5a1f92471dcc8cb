//! llama.cpp's own GEMV kernels, called through ggml, for timing side by side with
//! lutra's kernels in the same process (feature `llamacpp`).
//!
//! ggml is statically linked by `llama-cpp-sys-2`. [`GgmlGemv`] builds what llama.cpp
//! builds for a decode-time matrix-vector product: weights quantized with
//! `ggml_quantize_chunk`, placed in the CPU backend's `CPU_REPACK` extra buffer type when
//! `ggml_backend_dev_supports_op` accepts it (the check llama.cpp's model loader makes),
//! one `ggml_mul_mat` node per weight matrix, evaluated with `ggml_backend_graph_compute`
//! on a persistent ggml threadpool. ggml quantizes the f32 input to the type's
//! `vec_dot_type` (Q8_0/Q8_K for most types) on the fly, exactly as in llama.cpp.
//!
//! Build note: llama-cpp-sys-2 compiles ggml for the Rust target's CPU. Only
//! `-C target-cpu=native` turns on `GGML_NATIVE` (`-march=native`: AVX-512, VNNI, ... where
//! the CPU has them). Without any `target-cpu`, ggml falls back to its portable x86 set
//! (SSE4.2, AVX, AVX2, FMA, F16C, BMI2) with no AVX-512 kernels and no AVX-512 repack for
//! Q2_K. Build with e.g.
//! `CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-cpu=native"` and check
//! [`ggml_cpu_features`].
//!
//! Logging: the first use installs a ggml log callback that forwards warnings and errors
//! to stderr and drops ggml's info/debug chatter (ggml's default prints everything).

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_void, CStr, CString};
use std::io::Write;
use std::ptr;
use std::sync::Once;

use llama_cpp_sys_2 as sys;

/// Weights are uniform in [-WEIGHT_RANGE, WEIGHT_RANGE).
const WEIGHT_RANGE: f32 = 0.05;
/// Seed of the weights (every copy holds the same values).
const WEIGHT_SEED: u64 = 0x6c75_7472_612d_7700;
/// Seed of the input vector.
const INPUT_SEED: u64 = 0x6c75_7472_612d_7800;
/// `GGML_MAX_N_THREADS` of ggml.h (a macro, so not in the bindings).
const MAX_THREADS: usize = 512;
/// Bound on `copies` (one graph node each), far above any useful value.
const MAX_COPIES: usize = 1 << 16;
/// At most this many f32 weights are generated at once per quantizing thread.
const GEN_CHUNK: usize = 1 << 20;

/// One llama.cpp GEMV configuration: `copies` weight matrices of `rows x cols` (same values, distinct memory)
/// quantized to one ggml type, multiplied by one f32 vector each run (a graph of
/// `copies` independent `ggml_mul_mat` nodes), on a persistent ggml threadpool.
///
/// `copies = 1` is the hot regime (the matrix stays in cache when it fits); enough
/// copies to exceed the last-level cache make every run stream weights from DRAM, as
/// in a model forward pass.
pub struct GgmlGemv {
    ty: sys::ggml_type,
    type_name: String,
    rows: usize,
    cols: usize,
    copies: usize,
    threads: usize,
    repacked: bool,
    repack_layout: Option<String>,
    /// Bytes of one quantized copy (in ggml's row format, before any repacking).
    weight_bytes: usize,
    input: Vec<f32>,
    threadpool: *mut sys::ggml_threadpool,
    backend: sys::ggml_backend_t,
    /// Holds the weight tensors (metadata only; data lives in `weight_buf`).
    weight_ctx: *mut sys::ggml_context,
    weight_buf: sys::ggml_backend_buffer_t,
    /// Holds the input, the `copies` outputs and the graph (data lives in `compute_buf`).
    compute_ctx: *mut sys::ggml_context,
    compute_buf: sys::ggml_backend_buffer_t,
    graph: *mut sys::ggml_cgraph,
    out0: *mut sys::ggml_tensor,
}

impl GgmlGemv {
    /// Builds the weights, the input and the graph.
    ///
    /// `type_name` is a ggml type name, case-insensitive: "F16", "Q8_0", "Q6_K", "Q5_0",
    /// "Q4_K", "Q4_0", "IQ4_NL", "Q3_K", "Q2_K", "TQ2_0", "TQ1_0", "Q1_0", and any other
    /// type this ggml can quantize without an importance matrix and has a CPU dot
    /// product for (F32, BF16, Q4_1, Q5_1, Q5_K, IQ4_XS, MXFP4, NVFP4, Q2_0, IQ3_S, ...).
    /// `cols` (the reduction length K) must be a multiple of the type's block size;
    /// `copies` at most 65536; `threads` at most 512 (ggml's limit).
    ///
    /// `repack`: allocate the weights in the `CPU_REPACK` extra buffer type when
    /// `ggml_backend_dev_supports_op` says it supports this matrix product (as
    /// llama.cpp's loader does), else in a plain CPU buffer; see [`Self::repacked`].
    ///
    /// Weights: deterministic pseudo-random uniform values in [-0.05, 0.05), distinct
    /// per copy, quantized with `ggml_quantize_chunk` (on `threads` threads). The input:
    /// deterministic pseudo-random uniform values in [-1, 1).
    pub fn new(type_name: &str, rows: usize, cols: usize, copies: usize, threads: usize, repack: bool) -> Result<GgmlGemv, String> {
        install_logger();
        let ty = lookup_type(type_name)?;
        let canonical = type_label(ty);
        if rows == 0 || cols == 0 || copies == 0 {
            return Err(format!("empty GEMV: rows {rows}, cols {cols}, copies {copies} must all be positive"));
        }
        if copies > MAX_COPIES {
            return Err(format!("copies {copies} above {MAX_COPIES}"));
        }
        if threads == 0 || threads > MAX_THREADS {
            return Err(format!("threads {threads} outside 1..={MAX_THREADS}"));
        }
        let block = type_traits(ty).blck_size as usize;
        if !cols.is_multiple_of(block) {
            return Err(format!("cols {cols} not a multiple of block size {block} for {canonical}"));
        }
        let (rows_i, cols_i) = match (i64::try_from(rows), i64::try_from(cols)) {
            (Ok(r), Ok(c)) if rows.checked_mul(cols).is_some() => (r, c),
            _ => return Err(format!("matrix {rows} x {cols} too large")),
        };
        // SAFETY: `ty` is a valid ggml type and `cols` is a multiple of its block size,
        // the two preconditions of ggml_row_size.
        let row_bytes = unsafe { sys::ggml_row_size(ty, cols_i) };
        let weight_bytes = row_bytes
            .checked_mul(rows)
            .filter(|b| b.checked_mul(copies).is_some())
            .ok_or_else(|| format!("{copies} copies of {rows} x {cols} {canonical} too large"))?;

        let mut gemv = GgmlGemv {
            ty,
            type_name: canonical.clone(),
            rows,
            cols,
            copies,
            threads,
            repacked: false,
            repack_layout: None,
            weight_bytes,
            input: uniform(INPUT_SEED, cols, 1.0),
            threadpool: ptr::null_mut(),
            backend: ptr::null_mut(),
            weight_ctx: ptr::null_mut(),
            weight_buf: ptr::null_mut(),
            compute_ctx: ptr::null_mut(),
            compute_buf: ptr::null_mut(),
            graph: ptr::null_mut(),
            out0: ptr::null_mut(),
        };
        // From here on every early return drops `gemv`, which frees what was made.

        // owned by `gemv` (freed in Drop); `threads` is within 1..=GGML_MAX_N_THREADS
        (gemv.backend, gemv.threadpool) = cpu_backend(threads)?;

        // Weight tensors: metadata in a no_alloc context, data in a backend buffer.
        // SAFETY: ggml_tensor_overhead has no preconditions.
        let overhead = unsafe { sys::ggml_tensor_overhead() };
        gemv.weight_ctx = new_context(overhead * (copies + 1))?;
        let mut weights = Vec::with_capacity(copies);
        for c in 0..copies {
            // SAFETY: weight_ctx is a live context with room for `copies` tensors;
            // the name is a NUL-terminated string that ggml copies.
            let w = unsafe {
                let w = sys::ggml_new_tensor_2d(gemv.weight_ctx, ty, cols_i, rows_i);
                if !w.is_null() {
                    let name = CString::new(format!("w{c}")).expect("no NUL in name");
                    sys::ggml_set_name(w, name.as_ptr());
                }
                w
            };
            if w.is_null() {
                return Err("ggml_new_tensor_2d failed for a weight".into());
            }
            weights.push(w);
        }

        let cpu_buft = {
            // SAFETY: no preconditions; returns a pointer to a static buffer type.
            unsafe { sys::ggml_backend_cpu_buffer_type() }
        };
        let repack_buft = if repack { repack_buffer_type(gemv.backend, weights[0])? } else { None };
        gemv.repacked = repack_buft.is_some();
        let weight_buft = repack_buft.unwrap_or(cpu_buft);
        // SAFETY: weight_ctx holds only unallocated weight tensors; the buffer type
        // is a live static. The returned buffer is owned by `gemv`.
        gemv.weight_buf = unsafe { sys::ggml_backend_alloc_ctx_tensors_from_buft(gemv.weight_ctx, weight_buft) };
        if gemv.weight_buf.is_null() {
            return Err(format!("could not allocate {copies} x {weight_bytes} bytes of {canonical} weights"));
        }
        // SAFETY: weight_buf is a live buffer.
        unsafe { sys::ggml_backend_buffer_set_usage(gemv.weight_buf, sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS) };

        // Copies hold the same values in distinct memory: what the cold regime needs
        // (weights streamed from DRAM), without quantizing 256 MiB per configuration.
        let mut quantized = vec![0u8; weight_bytes];
        quantize_copy(ty, rows, cols, row_bytes, 0, threads, &mut quantized);
        for (c, &w) in weights.iter().enumerate() {
            if c == 0 && gemv.repacked {
                REPACK_CAPTURE.with(|cap| *cap.borrow_mut() = Some(String::new()));
            }
            // SAFETY: `w` is allocated in weight_buf with ggml_nbytes(w) == weight_bytes
            // (rows rows of row_bytes each), and `quantized` holds that many bytes. The
            // repack buffer requires the whole tensor at offset 0, which this is.
            unsafe { sys::ggml_backend_tensor_set(w, quantized.as_ptr().cast(), 0, weight_bytes) };
            if c == 0 && gemv.repacked {
                gemv.repack_layout = REPACK_CAPTURE.with(|cap| cap.borrow_mut().take()).filter(|s| !s.is_empty());
            }
        }
        drop(quantized);

        // Input, outputs and the graph.
        let graph_size = 2 * copies + 16;
        // SAFETY: no preconditions.
        let graph_bytes = unsafe { sys::ggml_graph_overhead_custom(graph_size, false) };
        gemv.compute_ctx = new_context(overhead * (copies + 4) + graph_bytes)?;
        // SAFETY: compute_ctx is live with room for 1 + copies tensors and the graph;
        // every weight is a 2-D tensor of ne0 = cols, the length of `x`; results are
        // checked for null before use.
        unsafe {
            let x = sys::ggml_new_tensor_2d(gemv.compute_ctx, sys::GGML_TYPE_F32, cols_i, 1);
            gemv.graph = sys::ggml_new_graph_custom(gemv.compute_ctx, graph_size, false);
            if x.is_null() || gemv.graph.is_null() {
                return Err("could not create the ggml input or graph".into());
            }
            for &w in &weights {
                let y = sys::ggml_mul_mat(gemv.compute_ctx, w, x);
                if y.is_null() {
                    return Err("ggml_mul_mat failed".into());
                }
                if !sys::ggml_backend_supports_op(gemv.backend, y) {
                    return Err(format!("the ggml CPU backend does not support this {canonical} matrix product"));
                }
                if gemv.out0.is_null() {
                    gemv.out0 = y;
                }
                sys::ggml_build_forward_expand(gemv.graph, y);
            }
            gemv.compute_buf = sys::ggml_backend_alloc_ctx_tensors_from_buft(gemv.compute_ctx, cpu_buft);
            if gemv.compute_buf.is_null() {
                return Err("could not allocate the ggml input/output buffer".into());
            }
            sys::ggml_backend_buffer_clear(gemv.compute_buf, 0);
            sys::ggml_backend_tensor_set(x, gemv.input.as_ptr().cast(), 0, cols * std::mem::size_of::<f32>());
        }
        Ok(gemv)
    }

    /// Whether the weights live in the `CPU_REPACK` buffer type (interleaved at load,
    /// computed by ggml's repacked GEMV kernels) rather than a plain CPU buffer.
    pub fn repacked(&self) -> bool {
        self.repacked
    }

    /// The repacked layout ggml chose, e.g. "q4_K_8x8", when [`Self::repacked`].
    pub fn repack_layout(&self) -> Option<&str> {
        self.repack_layout.as_deref()
    }

    /// ggml's name of the weight type, e.g. "q4_K".
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// Bytes of one quantized weight matrix in ggml's row format (repacking keeps the size).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Number of distinct weight matrices multiplied per run.
    pub fn copies(&self) -> usize {
        self.copies
    }

    /// The f32 input vector (`cols` values) that every run multiplies.
    pub fn input(&self) -> &[f32] {
        &self.input
    }

    /// Evaluates the graph once (all copies). This is what the benchmark times.
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

    /// Parks the threadpool's worker threads. After each run they busy-poll for new
    /// work for a while (llama.cpp's default, poll = 50), which steals cores from
    /// whatever runs next; call this before timing other code. The next
    /// [`Self::run`] wakes them again.
    pub fn pause(&mut self) {
        // SAFETY: the threadpool is live and no run is in flight (`&mut self`).
        unsafe { sys::ggml_threadpool_pause(self.threadpool) };
    }

    /// The output of copy 0 (`rows` values) after [`Self::run`]; zeros before any run.
    pub fn output(&self) -> Vec<f32> {
        let mut y = vec![0f32; self.rows];
        // SAFETY: out0 is an allocated F32 tensor of `rows` elements in a plain CPU
        // buffer, and `y` has room for exactly that many bytes.
        unsafe { sys::ggml_backend_tensor_get(self.out0, y.as_mut_ptr().cast(), 0, self.rows * std::mem::size_of::<f32>()) };
        y
    }

    /// The dequantized weights of copy 0, row-major `rows * cols` f32, via ggml's
    /// `to_float` for the type, for checking [`Self::output`] against an f64 product
    /// with [`Self::input`]. Copy 0 is quantized again (deterministically, so
    /// bit-identical), because repacked weights cannot be read back from ggml.
    pub fn dequantized_weights(&self) -> Vec<f32> {
        // SAFETY: `self.ty` is valid and `cols` a multiple of its block size (checked in new).
        let row_bytes = unsafe { sys::ggml_row_size(self.ty, self.cols as i64) };
        let mut q = vec![0u8; self.weight_bytes];
        quantize_copy(self.ty, self.rows, self.cols, row_bytes, 0, self.threads, &mut q);
        let mut out = vec![0f32; self.rows * self.cols];
        match type_traits(self.ty).to_float {
            Some(to_float) => {
                for (src, dst) in q.chunks_exact(row_bytes).zip(out.chunks_exact_mut(self.cols)) {
                    // SAFETY: `src` is one quantized row of `cols` values (row_bytes bytes)
                    // and `dst` has room for `cols` f32.
                    unsafe { to_float(src.as_ptr().cast(), dst.as_mut_ptr(), self.cols as i64) };
                }
            }
            None => {
                // Only F32 has no to_float (checked in lookup_type): the bytes are the floats.
                for (dst, src) in out.iter_mut().zip(q.chunks_exact(4)) {
                    *dst = f32::from_ne_bytes([src[0], src[1], src[2], src[3]]);
                }
            }
        }
        out
    }
}

impl Drop for GgmlGemv {
    fn drop(&mut self) {
        // SAFETY: each pointer is either null or owned by `self` and freed exactly once
        // here. No run is in flight (`&mut self`). Buffers go before the contexts whose
        // tensors point into them, and the backend before the threadpool it uses.
        unsafe {
            if !self.compute_buf.is_null() {
                sys::ggml_backend_buffer_free(self.compute_buf);
            }
            if !self.weight_buf.is_null() {
                sys::ggml_backend_buffer_free(self.weight_buf);
            }
            if !self.compute_ctx.is_null() {
                sys::ggml_free(self.compute_ctx);
            }
            if !self.weight_ctx.is_null() {
                sys::ggml_free(self.weight_ctx);
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

/// ggml's CPU feature list as compiled into this binary (the CPU backend's
/// `ggml_backend_get_features`, what llama.cpp prints as system info), e.g.
/// "SSE3 SSSE3 AVX AVX2 F16C FMA BMI2 AVX512 AVX512_VBMI AVX512_VNNI ... REPACK".
pub fn ggml_cpu_features() -> String {
    install_logger();
    // SAFETY: ggml_backend_cpu_reg returns the static CPU registry; the symbol looked
    // up has the type ggml_backend_get_features_t (ggml-backend.h); it returns a
    // static array terminated by an entry with a null name, whose strings are static.
    unsafe {
        let reg = sys::ggml_backend_cpu_reg();
        let name = c"ggml_backend_get_features";
        let f = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
        if f.is_null() {
            return "(ggml_backend_get_features unavailable)".into();
        }
        let get: unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *mut sys::ggml_backend_feature = std::mem::transmute(f);
        let mut parts = Vec::new();
        let mut p = get(reg);
        while !p.is_null() && !(*p).name.is_null() {
            let n = CStr::from_ptr((*p).name).to_string_lossy();
            let v = if (*p).value.is_null() { "1".into() } else { CStr::from_ptr((*p).value).to_string_lossy() };
            parts.push(if v == "1" { n.into_owned() } else { format!("{n}={v}") });
            p = p.add(1);
        }
        parts.join(" ")
    }
}

/// The traits (name, block size, to_float) of a valid ggml type.
fn type_traits(ty: sys::ggml_type) -> sys::ggml_type_traits {
    // SAFETY: ty < GGML_TYPE_COUNT; ggml returns a pointer into its static table.
    unsafe { *sys::ggml_get_type_traits(ty) }
}

/// ggml's name of a valid type, or "" for an unnamed slot.
fn type_label(ty: sys::ggml_type) -> String {
    let name = type_traits(ty).type_name;
    if name.is_null() {
        return String::new();
    }
    // SAFETY: non-null type names are static NUL-terminated strings.
    unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
}

/// Resolves a type name (case-insensitive) to a ggml type this module can run.
fn lookup_type(name: &str) -> Result<sys::ggml_type, String> {
    let ty = (0..sys::GGML_TYPE_COUNT)
        .find(|&t| type_traits(t).blck_size > 0 && type_label(t).eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("type {name} unknown to this ggml"))?;
    let traits = type_traits(ty);
    // SAFETY: ty < GGML_TYPE_COUNT; ggml returns a pointer into its static table.
    let cpu = unsafe { *sys::ggml_get_type_traits_cpu(ty) };
    let float = matches!(ty, sys::GGML_TYPE_F32 | sys::GGML_TYPE_F16 | sys::GGML_TYPE_BF16);
    // SAFETY: ty is a valid type.
    if unsafe { sys::ggml_quantize_requires_imatrix(ty) } {
        return Err(format!("type {name} needs an importance matrix to quantize; not supported here"));
    }
    if !(traits.is_quantized || float) || cpu.vec_dot.is_none() || (traits.to_float.is_none() && ty != sys::GGML_TYPE_F32) {
        return Err(format!("type {name} cannot be used as GEMV weights (no quantizer, CPU dot product or to_float)"));
    }
    Ok(ty)
}

/// A CPU backend running on a new threadpool of `threads` (1..=GGML_MAX_N_THREADS):
/// `(backend, threadpool)`, both owned by the caller (free the backend first). On an error
/// nothing is left allocated.
pub(crate) fn cpu_backend(threads: usize) -> Result<(sys::ggml_backend_t, *mut sys::ggml_threadpool), String> {
    // SAFETY: plain constructor calls; results are checked for null before use, and the
    // backend is freed again if the threadpool cannot be made.
    unsafe {
        let backend = sys::ggml_backend_cpu_init();
        if backend.is_null() {
            return Err("ggml_backend_cpu_init failed".into());
        }
        let mut params = sys::ggml_threadpool_params_default(threads as i32);
        let threadpool = sys::ggml_threadpool_new(&mut params);
        if threadpool.is_null() {
            sys::ggml_backend_free(backend);
            return Err(format!("ggml_threadpool_new({threads}) failed"));
        }
        sys::ggml_backend_cpu_set_n_threads(backend, threads as i32);
        sys::ggml_backend_cpu_set_threadpool(backend, threadpool);
        Ok((backend, threadpool))
    }
}

/// A no_alloc ggml context for tensor metadata of at most `bytes`.
pub(crate) fn new_context(bytes: usize) -> Result<*mut sys::ggml_context, String> {
    let params = sys::ggml_init_params { mem_size: bytes, mem_buffer: ptr::null_mut(), no_alloc: true };
    // SAFETY: valid parameters; ggml allocates the metadata arena itself.
    let ctx = unsafe { sys::ggml_init(params) };
    if ctx.is_null() {
        Err("ggml_init failed".into())
    } else {
        Ok(ctx)
    }
}

/// The CPU_REPACK buffer type if the CPU device reports that it supports a matrix
/// product with weight `w` there: llama.cpp's `weight_buft_supported` check (a dummy
/// batch-512 `ggml_mul_mat` whose weight sits in a zero-size buffer of that type).
fn repack_buffer_type(backend: sys::ggml_backend_t, w: *mut sys::ggml_tensor) -> Result<Option<sys::ggml_backend_buffer_type_t>, String> {
    // SAFETY: backend is a live CPU backend. The looked-up symbol has the type
    // ggml_backend_dev_get_extra_bufts_t (ggml-backend.h) and returns a
    // null-terminated array of static buffer types.
    let repack = unsafe {
        let dev = sys::ggml_backend_get_device(backend);
        let reg = sys::ggml_backend_dev_backend_reg(dev);
        let f = sys::ggml_backend_reg_get_proc_address(reg, c"ggml_backend_dev_get_extra_bufts".as_ptr());
        if f.is_null() {
            return Ok(None);
        }
        let get: unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *mut sys::ggml_backend_buffer_type_t = std::mem::transmute(f);
        let mut p = get(dev);
        let mut found = None;
        while !p.is_null() && !(*p).is_null() {
            if CStr::from_ptr(sys::ggml_backend_buft_name(*p)).to_bytes() == b"CPU_REPACK" {
                found = Some(*p);
                break;
            }
            p = p.add(1);
        }
        match found {
            Some(buft) => (dev, buft),
            None => return Ok(None),
        }
    };
    let (dev, buft) = repack;
    // SAFETY: ggml_tensor_overhead has no preconditions.
    let ctx = new_context(unsafe { sys::ggml_tensor_overhead() } * 4)?;
    // `w` gets a zero-size dummy buffer of the candidate type for the check and is
    // restored to null afterwards, exactly as llama.cpp's loader does.
    // SAFETY: ctx is a fresh no_alloc context with room for the two tensors and the op,
    // freed before returning; `w` is an unallocated weight tensor (buffer null).
    let supported = unsafe {
        let b = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, (*w).ne[0], 512);
        let op = if b.is_null() { ptr::null_mut() } else { sys::ggml_mul_mat(ctx, w, b) };
        let mut ok = false;
        if !op.is_null() && (*w).buffer.is_null() {
            let dummy = sys::ggml_backend_buft_alloc_buffer(buft, 0);
            if !dummy.is_null() {
                (*w).buffer = dummy;
                ok = sys::ggml_backend_dev_supports_op(dev, op);
                (*w).buffer = ptr::null_mut();
                sys::ggml_backend_buffer_free(dummy);
            }
        }
        sys::ggml_free(ctx);
        ok
    };
    Ok(supported.then_some(buft))
}

/// Quantizes copy `copy` of the weights into `dst` (`rows * row_bytes` bytes), with
/// the rows split over `threads` threads; the result does not depend on `threads`.
fn quantize_copy(ty: sys::ggml_type, rows: usize, cols: usize, row_bytes: usize, copy: usize, threads: usize, dst: &mut [u8]) {
    let seed = WEIGHT_SEED.wrapping_add(copy as u64);
    let rows_per_thread = rows.div_ceil(threads.max(1));
    // SAFETY: ty is valid; initializing its quantization tables (if any) up front is
    // idempotent and thread-safe in ggml.
    unsafe { sys::ggml_quantize_init(ty) };
    std::thread::scope(|s| {
        for (t, part) in dst.chunks_mut(rows_per_thread * row_bytes).enumerate() {
            s.spawn(move || {
                let first_row = t * rows_per_thread;
                let sub = (GEN_CHUNK / cols).max(1);
                let mut f = Vec::with_capacity(sub * cols);
                for (i, out) in part.chunks_mut(sub * row_bytes).enumerate() {
                    let n = out.len() / row_bytes;
                    let row0 = first_row + i * sub;
                    f.clear();
                    f.extend((row0 * cols..(row0 + n) * cols).map(|k| value(seed, k, WEIGHT_RANGE)));
                    // SAFETY: `f` holds n rows of `cols` f32 and `out` n rows of
                    // row_bytes bytes; cols is a multiple of the block size and no
                    // importance matrix is needed (checked in lookup_type).
                    unsafe { sys::ggml_quantize_chunk(ty, f.as_ptr(), out.as_mut_ptr().cast(), 0, n as i64, cols as i64, ptr::null()) };
                }
            });
        }
    });
}

/// `n` deterministic pseudo-random values uniform in [-range, range).
fn uniform(seed: u64, n: usize, range: f32) -> Vec<f32> {
    (0..n).map(|k| value(seed, k, range)).collect()
}

/// Element `k` of the stream `seed`: SplitMix64 of a counter, so any element can be
/// made independently (and in parallel). Uniform in [-range, range) on a 2^-23 grid.
fn value(seed: u64, k: usize, range: f32) -> f32 {
    let mut z = seed.wrapping_add((k as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let u = (z >> 40) as i32 - (1 << 23); // in [-2^23, 2^23)
    u as f32 * (range / (1u32 << 23) as f32)
}

thread_local! {
    /// While `Some`, the log callback stores here the layout of a "repack tensor" message.
    static REPACK_CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Level of the last message on this thread, for GGML_LOG_LEVEL_CONT continuations.
    static LAST_LEVEL: Cell<sys::ggml_log_level> = const { Cell::new(sys::GGML_LOG_LEVEL_NONE) };
}

/// Installs [`log_callback`] as ggml's logger, once per process.
fn install_logger() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the callback is a plain function valid for the whole program and
        // ignores user_data.
        unsafe { sys::ggml_log_set(Some(log_callback), ptr::null_mut()) };
    });
}

/// ggml log callback: warnings and errors go to stderr; info and debug are dropped,
/// except that a CPU_REPACK "repack tensor NAME with LAYOUT" message is captured while
/// `new` sets a weight. Never panics (it is called from C).
unsafe extern "C" fn log_callback(level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: ggml passes a NUL-terminated message that lives for this call.
    let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
    let level = if level == sys::GGML_LOG_LEVEL_CONT {
        LAST_LEVEL.with(Cell::get)
    } else {
        LAST_LEVEL.with(|l| l.set(level));
        level
    };
    if level >= sys::GGML_LOG_LEVEL_WARN {
        let _ = std::io::stderr().write_all(bytes);
        return;
    }
    let msg = String::from_utf8_lossy(bytes);
    if let Some(pos) = msg.find("repack tensor ") {
        let layout = msg[pos..].rsplit(" with ").next().unwrap_or("").trim();
        REPACK_CAPTURE.with(|cap| {
            if let Ok(mut cap) = cap.try_borrow_mut() {
                if let Some(s) = cap.as_mut() {
                    if s.is_empty() {
                        s.push_str(layout);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative L2 error of `run`'s copy-0 output against the f64 product of the
    /// dequantized weights and the input.
    fn rel_err(g: &mut GgmlGemv) -> f64 {
        g.run().unwrap();
        let y = g.output();
        let w = g.dequantized_weights();
        let x = g.input();
        let (mut num, mut den) = (0f64, 0f64);
        for (r, &yr) in y.iter().enumerate() {
            let row = &w[r * x.len()..(r + 1) * x.len()];
            let want: f64 = row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
            num += (yr as f64 - want).powi(2);
            den += want * want;
        }
        (num / den).sqrt()
    }

    #[test]
    fn gemv_matches_dequantized_reference() {
        for (ty, repack) in
            [("F16", false), ("Q8_0", false), ("Q4_0", true), ("q4_k", true), ("Q2_K", true), ("TQ2_0", false), ("Q1_0", false)]
        {
            let mut g = GgmlGemv::new(ty, 64, 512, 2, 2, repack).unwrap();
            let e = rel_err(&mut g);
            assert!(e < 2e-2, "{ty}: rel err {e}");
            // A second run gives the same result.
            let y = g.output();
            g.run().unwrap();
            assert_eq!(y, g.output(), "{ty}");
            g.pause();
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let e = GgmlGemv::new("Q9_9", 8, 256, 1, 1, false).err().unwrap();
        assert!(e.contains("unknown"), "{e}");
        let e = GgmlGemv::new("Q4_K", 8, 640, 1, 1, false).err().unwrap();
        assert!(e.contains("not a multiple of block size 256"), "{e}");
        assert!(GgmlGemv::new("IQ2_XXS", 8, 256, 1, 1, false).is_err());
        assert!(GgmlGemv::new("Q8_K", 8, 256, 1, 1, false).is_err());
        assert!(GgmlGemv::new("Q4_0", 0, 256, 1, 1, false).is_err());
        assert!(GgmlGemv::new("Q4_0", 8, 256, 1, 0, false).is_err());
        assert!(GgmlGemv::new("Q4_0", 8, 256, 1 << 20, 1, false).is_err());
    }

    #[test]
    fn features_are_listed() {
        assert!(!ggml_cpu_features().is_empty());
    }
}
