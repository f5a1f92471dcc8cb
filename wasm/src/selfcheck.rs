//! Checks and timings the page's tests and benches run in the browser (and node): this
//! build's kernels against scalar, and one decode token's attention per cache kind.

use wasm_bindgen::prelude::*;

use crate::js;

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
        let q = synthetic::values(att.heads * att.head_dim, 3);
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

    /// The self-check the browser test runs in Chromium, here under node (and natively).
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn kernels_equal_scalar() {
        let report = super::kernel_check().unwrap_or_else(|_| panic!("kernel check failed"));
        assert!(report.ends_with("equal scalar"), "{report}");
    }
}
