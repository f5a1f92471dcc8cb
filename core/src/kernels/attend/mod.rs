//! The f32 halves of attention shared by every key cache: exact scores, softmax, and the
//! probability-weighted sum of values (f16, or llama.cpp's q8_0 / q4_0 blocks). Each loop
//! is written once, plainly enough to vectorize, and compiled twice on x86-64: for the
//! baseline target and (in `x86_64.rs`) with AVX2 + FMA + F16C enabled, chosen at run time.
//! On wasm simd128 the q8_0 / q4_0 block decode is spelled out (`wasm32.rs`): LLVM left
//! its int → float conversions scalar there. The key caches in `crate::attention` call
//! only these safe entries.

use crate::f16::{f16_bits_to_f32, f32_to_f16_bits};
use crate::kernels::int8::{max_of, quantize_q8_0_block};

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm32;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// Where a run of cached rows lives: row `i` of `count` is `data[i * stride..][..len]`.
#[derive(Clone, Copy)]
pub struct Rows<'a, T> {
    pub data: &'a [T],
    pub stride: usize,
    pub len: usize,
    pub count: usize,
}

/// Values per block of the q8_0 and q4_0 value formats (llama.cpp's QK8_0 = QK4_0 = 32).
pub const VALUE_BLOCK: usize = 32;

/// Block-quantized value rows, contiguous: row `i` of `count` rows of `len` values is
/// `codes[i * code_bytes..]` (q8_0: `len` bytes, q4_0: `len / 2`) with one f16 scale per
/// block at `scales[i * len / VALUE_BLOCK..]`.
#[derive(Clone, Copy)]
pub struct BlockRows<'a> {
    pub codes: &'a [u8],
    pub scales: &'a [u16],
    pub len: usize,
    pub count: usize,
}

/// Value rows in one of the value cache's formats.
#[derive(Clone, Copy)]
pub enum ValueRows<'a> {
    F16(Rows<'a, u16>),
    /// Blocks of 32 int8 codes `q`, value `d · q`.
    Q8_0(BlockRows<'a>),
    /// Blocks of 32 4-bit codes `q` (byte `j` holds value `j` low and `j + 16` high),
    /// value `d · (q − 8)`.
    Q4_0(BlockRows<'a>),
}

impl ValueRows<'_> {
    /// Values per row.
    pub fn row_len(&self) -> usize {
        match self {
            ValueRows::F16(r) => r.len,
            ValueRows::Q8_0(b) | ValueRows::Q4_0(b) => b.len,
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        match self {
            ValueRows::F16(r) => r.count,
            ValueRows::Q8_0(b) | ValueRows::Q4_0(b) => b.count,
        }
    }

    /// Row `i` as f32 into `dst[..len]`: each value exactly what its format holds.
    #[inline(always)]
    pub fn decode(&self, i: usize, dst: &mut [f32]) {
        match *self {
            ValueRows::F16(r) => {
                for (d, &h) in dst.iter_mut().zip(&r.data[i * r.stride..][..r.len]) {
                    *d = f16_bits_to_f32(h);
                }
            }
            ValueRows::Q8_0(b) => {
                let blocks = b.len / VALUE_BLOCK;
                let codes = b.codes[i * b.len..][..b.len].chunks_exact(VALUE_BLOCK);
                for ((dst, codes), &d) in dst.chunks_exact_mut(VALUE_BLOCK).zip(codes).zip(&b.scales[i * blocks..][..blocks]) {
                    let d = f16_bits_to_f32(d);
                    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
                    wasm32::q8_0_block(codes, d, dst);
                    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
                    for (v, &q) in dst.iter_mut().zip(codes) {
                        *v = d * f32::from(q as i8);
                    }
                }
            }
            ValueRows::Q4_0(b) => {
                let blocks = b.len / VALUE_BLOCK;
                let codes = b.codes[i * b.len / 2..][..b.len / 2].chunks_exact(VALUE_BLOCK / 2);
                for ((dst, codes), &d) in dst.chunks_exact_mut(VALUE_BLOCK).zip(codes).zip(&b.scales[i * blocks..][..blocks]) {
                    let d = f16_bits_to_f32(d);
                    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
                    wasm32::q4_0_block(codes, d, dst);
                    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
                    {
                        let (lo, hi) = dst.split_at_mut(VALUE_BLOCK / 2);
                        for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(codes) {
                            *lo = d * f32::from((q & 15) as i8 - 8);
                            *hi = d * f32::from((q >> 4) as i8 - 8);
                        }
                    }
                }
            }
        }
    }
}

/// One block of 32 values as llama.cpp's `quantize_row_q8_0_ref` makes it: scale
/// `d = amax / 127` (stored as f16), codes `roundf(x / d)` from the f32 `d`.
pub fn quantize_q8_0(x: &[f32; VALUE_BLOCK], codes: &mut [u8], scale: &mut u16) {
    let mut q = [0i8; VALUE_BLOCK];
    *scale = f32_to_f16_bits(quantize_q8_0_block(x, &mut q));
    codes.iter_mut().zip(q).for_each(|(c, q)| *c = q as u8);
}

/// One block of 32 values as llama.cpp's `quantize_row_q4_0_ref` makes it: the value of
/// largest magnitude `m` (sign kept) maps to code 0, `d = m / −8` (stored as f16), codes
/// `min(15, trunc(x / d + 8.5))`.
pub fn quantize_q4_0(x: &[f32; VALUE_BLOCK], codes: &mut [u8], scale: &mut u16) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            (amax, max) = (v.abs(), v);
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    *scale = f32_to_f16_bits(d);
    let code = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
    for (j, c) in codes.iter_mut().take(VALUE_BLOCK / 2).enumerate() {
        *c = code(x[j]) | code(x[j + VALUE_BLOCK / 2]) << 4;
    }
}

/// `dst[i] = f32_to_f16_bits(x[i])` (round to nearest even; NaN stays NaN): the key and
/// value rows a cache stores, converted by F16C where the CPU has it.
pub fn f16_row(x: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if x86_64::f16_row(x, dst) {
        return;
    }
    dst.iter_mut().zip(x).for_each(|(d, &v)| *d = f32_to_f16_bits(v));
}

/// `scores[g * out_stride + i] = scale · q_g · key_i` for the query heads `q` (rows of
/// `keys.len`) against f16 keys; `row` is scratch of at least one key.
pub fn scores_f16(keys: Rows<'_, u16>, q: &[f32], scale: f32, row: &mut [f32], scores: &mut [f32], out_stride: usize) {
    #[cfg(target_arch = "x86_64")]
    if x86_64::scores_f16(keys, q, scale, row, scores, out_stride) {
        return;
    }
    scores_f16_body(keys, q, scale, row, scores, out_stride)
}

/// As `scores_f16` for f32 keys.
pub fn scores_f32(keys: Rows<'_, f32>, q: &[f32], scale: f32, scores: &mut [f32], out_stride: usize) {
    #[cfg(target_arch = "x86_64")]
    if x86_64::scores_f32(keys, q, scale, scores, out_stride) {
        return;
    }
    scores_f32_body(keys, q, scale, scores, out_stride)
}

/// Softmax of each of the `out.len() / values.row_len()` score rows
/// `p[g * p_stride..][..rows]` (their max and exp-sum into `stats[g]`), then
/// `out_g = Σ_i p_g[i] · value_i`; `row` is scratch of at least one row of values.
pub fn softmax_mix(values: ValueRows<'_>, p: &mut [f32], p_stride: usize, row: &mut [f32], out: &mut [f32], stats: &mut [SoftmaxStats]) {
    #[cfg(target_arch = "x86_64")]
    if x86_64::softmax_mix(values, p, p_stride, out, stats) {
        return;
    }
    softmax_mix_body(values, p, p_stride, row, out, stats)
}

/// Whether [`attend_tokens_f16`] runs for rows of `head_dim`: x86-64 with AVX2 + FMA +
/// F16C and a head_dim multiple of 16. Elsewhere a batch attends token by token.
pub fn attends_tokens_f16(head_dim: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86_64::usable(head_dim);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = head_dim;
        false
    }
}

/// Up to four consecutive tokens against one KV head (no grouped-query attention), each
/// key and value row converted once for all of them: token j attends to rows
/// `0..counts[j]`; every output, score row (`stride` apart) and softmax stat is that
/// token's own `scores_f16` + `softmax_mix` bit for bit. False, doing nothing, where
/// [`attends_tokens_f16`] is false or the shapes do not fit.
pub fn attend_tokens_f16(
    keys: Rows<'_, u16>,
    values: Rows<'_, u16>,
    q: &[f32],
    counts: &[usize],
    scale: f32,
    stride: usize,
    outputs: (&mut [f32], &mut [f32], &mut [SoftmaxStats]),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86_64::attend_tokens_f16(keys, values, q, counts, scale, stride, outputs);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (keys, values, q, counts, scale, stride, outputs);
        false
    }
}

/// What a softmax divided by: the largest score and `Σ e^(score − max)`. Pieces of one
/// softmax merge by these (`sum` = 0: every score was −∞).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SoftmaxStats {
    pub max: f32,
    pub sum: f32,
}

#[inline(always)]
pub(super) fn scores_f16_body(keys: Rows<'_, u16>, q: &[f32], scale: f32, row: &mut [f32], scores: &mut [f32], out_stride: usize) {
    let hd = keys.len;
    let row = &mut row[..hd];
    for i in 0..keys.count {
        for (r, &h) in row.iter_mut().zip(&keys.data[i * keys.stride..][..hd]) {
            *r = f16_bits_to_f32(h);
        }
        for (g, qh) in q.chunks_exact(hd).enumerate() {
            scores[g * out_stride + i] = dot(qh, row) * scale;
        }
    }
}

#[inline(always)]
pub(super) fn scores_f32_body(keys: Rows<'_, f32>, q: &[f32], scale: f32, scores: &mut [f32], out_stride: usize) {
    let hd = keys.len;
    for i in 0..keys.count {
        let key = &keys.data[i * keys.stride..][..hd];
        for (g, qh) in q.chunks_exact(hd).enumerate() {
            scores[g * out_stride + i] = dot(qh, key) * scale;
        }
    }
}

#[inline(always)]
pub(super) fn softmax_mix_body(
    values: ValueRows<'_>,
    p: &mut [f32],
    p_stride: usize,
    row: &mut [f32],
    out: &mut [f32],
    stats: &mut [SoftmaxStats],
) {
    let (hd, n) = (values.row_len(), values.rows());
    let group = out.len() / hd;
    for (g, st) in stats.iter_mut().enumerate().take(group) {
        *st = softmax(&mut p[g * p_stride..g * p_stride + n]);
    }
    out.fill(0.0);
    let row = &mut row[..hd];
    for i in 0..n {
        values.decode(i, row);
        for (g, o) in out.chunks_exact_mut(hd).enumerate() {
            let w = p[g * p_stride + i];
            for (o, &v) in o.iter_mut().zip(row.iter()) {
                *o += w * v;
            }
        }
    }
}

/// Dot product in 16 independent lanes (lane j: `acc += x·y`, multiply then add, over
/// the elements ≡ j mod 16 in order), the lanes folded in halves (j + 8, j + 4, j + 2,
/// j + 1), then the tail in order. This order is the one every tier follows (AVX2: two
/// ymm accumulators, no FMA; 128-bit: four), so a score is the same float on every CPU.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let (ac, bc) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for j in 0..16 {
            acc[j] += x[j] * y[j];
        }
    }
    super::fold_lanes(acc) + tail
}

/// Numerically stable softmax in place, with `exp` below; returns its max and exp-sum.
/// The max and the sum run in 16 independent lanes so that every loop vectorizes. A row
/// of −∞ only (every position masked) becomes zeros.
#[inline(always)]
pub fn softmax(x: &mut [f32]) -> SoftmaxStats {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = max_of(*l, v);
        }
    }
    let max = chunks.remainder().iter().chain(&lanes).copied().fold(f32::NEG_INFINITY, max_of);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return SoftmaxStats { max, sum: 0.0 };
    }
    for v in x.iter_mut() {
        *v = exp(*v - max);
    }
    let mut sums = [0.0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (s, &v) in sums.iter_mut().zip(c) {
            *s += v;
        }
    }
    let sum = sums.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
    SoftmaxStats { max, sum }
}

/// `e^x` for `x ≤ 0` (what softmax feeds it), branch-free so loops over it vectorize:
/// `x = n·ln2 + r` with |r| ≤ ln2/2 (ln2 split in two for exactness), a degree-6
/// polynomial for `e^r`, and `2^n` built in the exponent bits. Relative error < 3e-7;
/// inputs below −87 (where f32 would go subnormal) give e^−87.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer

    // -87 first: a NaN x (a NaN or ∞ − ∞ score) is clamped to -87 as `f32::max` did
    let x = max_of(-87.0, x);
    let shifted = x * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // n's integer is in `shifted`'s low mantissa bits (its ulp is 1 and its exponent is
    // ROUND's while |n| < 2^22): an integer subtraction, where `n as i32` (saturating,
    // NaN to 0) compiled to a scalar conversion and two `cmova` per lane
    let n_int = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn exp_matches_libm_over_the_softmax_range() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let want = f64::from(libm::expf(x));
            worst = worst.max((f64::from(exp(x)) - want).abs() / want);
        }
        assert!(worst < 3e-7, "worst relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        // 2^n from the bits of `x·log2(e) + 1.5·2^23` is 2^n from the float n itself
        for i in 0..=87 * 64 {
            let x = -(i as f32) / 64.0;
            let n = libm::roundf(x * core::f32::consts::LOG2_E);
            let r = f64::from(exp(x)) / 2f64.powi(n as i32);
            assert!((0.7..1.42).contains(&r), "exp({x}) = {} is not 2^{n} · e^r, |r| ≤ ln2/2", exp(x));
        }
        assert_eq!(exp(f32::NEG_INFINITY), exp(-87.0));
        // one bad score weighs next to nothing instead of making its row NaN
        assert_eq!(exp(f32::NAN), exp(-87.0));
    }

    /// The stored key/value rows (F16C where the CPU has it) against `half`, one value at
    /// a time: every half, the f32 values on both sides of each rounding midpoint (ties
    /// to even), NaNs, infinities, overflow, and random bit patterns.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn f16_rows_round_like_half() {
        let mut xs = alloc::vec::Vec::new();
        for h in 0..=u16::MAX {
            let x = half::f16::from_bits(h).to_f32();
            let next = half::f16::from_bits(h.wrapping_add(1)).to_f32();
            xs.push(x);
            if x.is_finite() && next.is_finite() && (h & 0x7fff) != 0x7bff {
                let mid = ((f64::from(x) + f64::from(next)) / 2.0) as f32;
                xs.extend([f32::from_bits(mid.to_bits() - 1), mid, f32::from_bits(mid.to_bits() + 1)]);
            }
        }
        xs.extend([f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xffbf_ffff), f32::MAX, -f32::MAX, 65520.0, 65519.99]);
        let mut rng = crate::rng::SplitMix64::new(17);
        xs.extend((0..100_000).map(|_| f32::from_bits(rng.next_u64() as u32)));
        // lengths a row kernel takes whole, and ones it must leave to the portable loop
        for len in [16, 48, 256, 7] {
            let mut dst = alloc::vec![0u16; len];
            for x in xs.chunks_exact(len) {
                f16_row(x, &mut dst);
                for (&v, &d) in x.iter().zip(&dst) {
                    assert_eq!(d, half::f16::from_f32(v).to_bits(), "{v:e} ({:#010x})", v.to_bits());
                }
            }
        }
    }
}
