//! Attention loops for CPUs with AVX2 + FMA + F16C (`Isa::Avx2` and above; the f16 value
//! sum has an AVX-512 variant for head_dim multiple of 64): f16 keys and values converted
//! by `vcvtph2ps` (q8_0 / q4_0 values widened and scaled), each product rounded before
//! its add as in the portable loops (no FMA: the same floats on every CPU), the query
//! heads of a KV head sharing each converted row. Each entry returns false, doing
//! nothing, where it cannot run (no such CPU, or a head_dim that is not a multiple of
//! 16); `attend/mod.rs` then runs the portable loop.

use core::arch::x86_64::*;

use super::{self as kernels, BlockRows, Rows, SoftmaxStats, ValueRows, VALUE_BLOCK};
use crate::Isa;

/// Query heads handled per pass over the rows (4 heads × 2 vectors = 8 accumulators).
const HEADS: usize = 4;

/// How far ahead rows are prefetched. Rows of one KV head sit `kv_dim` values apart, a
/// stride the hardware prefetchers follow poorly once there are several KV heads.
const PREFETCH_ROWS: usize = 16;

/// Asks for the `len` f16 values at `row` to be brought into L1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn prefetch_row(row: *const u16, len: usize) {
    prefetch_bytes(row.cast(), 2 * len);
}

/// Asks for the `len` bytes at `at` to be brought into L1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn prefetch_bytes(at: *const u8, len: usize) {
    for line in (0..len).step_by(64) {
        // a prefetch never faults; `wrapping_add` keeps the address arithmetic defined
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast());
    }
}

pub(super) fn usable(rows_len: usize) -> bool {
    rows_len.is_multiple_of(16) && Isa::Avx2.is_available()
}

/// Whether every row `i < count` lies inside `data`.
fn in_bounds<T>(r: &Rows<'_, T>) -> bool {
    r.count == 0 || (r.count - 1).checked_mul(r.stride).and_then(|s| s.checked_add(r.len)).is_some_and(|end| end <= r.data.len())
}

/// Whether `count` block rows of `code_bytes` codes each lie inside `b`.
fn blocks_in_bounds(b: &BlockRows<'_>, code_bytes: usize) -> bool {
    b.len.is_multiple_of(VALUE_BLOCK)
        && b.count.checked_mul(code_bytes).is_some_and(|n| n <= b.codes.len())
        && b.count.checked_mul(b.len / VALUE_BLOCK).is_some_and(|n| n <= b.scales.len())
}

fn values_in_bounds(values: &ValueRows<'_>) -> bool {
    match values {
        ValueRows::F16(r) => in_bounds(r),
        ValueRows::Q8_0(b) => blocks_in_bounds(b, b.len),
        ValueRows::Q4_0(b) => blocks_in_bounds(b, b.len / 2),
    }
}

/// `kernels::f16_row` by `vcvtps2ph`, which rounds to nearest even and quiets NaNs as
/// `half` does, so the bits are the same; false (nothing done) where it cannot run.
pub(super) fn f16_row(x: &[f32], dst: &mut [u16]) -> bool {
    if x.len() != dst.len() || !Isa::Avx2.is_available() {
        return false;
    }
    // SAFETY: the CPU has F16C (`Isa::Avx2` includes it).
    unsafe { f16_row_f16c(x, dst) };
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_row_f16c(x: &[f32], dst: &mut [u16]) {
    let whole = x.len() - x.len() % 8;
    let ((x, x_tail), (dst, d_tail)) = (x.split_at(whole), dst.split_at_mut(whole));
    for (x, d) in x.chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
        // SAFETY: `x` is 8 readable f32, `d` 8 writable u16.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.as_ptr()));
            _mm_storeu_si128(d.as_mut_ptr().cast(), h);
        }
    }
    d_tail.iter_mut().zip(x_tail).for_each(|(d, &v)| *d = crate::f16::f32_to_f16_bits(v));
}

pub(super) fn scores_f16(keys: Rows<'_, u16>, q: &[f32], scale: f32, _row: &mut [f32], scores: &mut [f32], out_stride: usize) -> bool {
    let group = q.len() / keys.len.max(1);
    if !usable(keys.len) || !in_bounds(&keys) || scores.len() < (group.max(1) - 1) * out_stride + keys.count {
        return false;
    }
    for first in (0..group).step_by(HEADS) {
        let heads = (group - first).min(HEADS);
        let q = &q[first * keys.len..(first + heads) * keys.len];
        let scores = &mut scores[first * out_stride..];
        // SAFETY: the CPU has AVX2, FMA and F16C and every row is inside `keys.data`
        // (both checked above); `q` holds `heads` rows and `scores` `heads` rows of `out_stride` ≥ count.
        unsafe {
            match heads {
                1 => scores_f16_avx2::<1>(keys, q, scale, scores, out_stride),
                2 => scores_f16_avx2::<2>(keys, q, scale, scores, out_stride),
                3 => scores_f16_avx2::<3>(keys, q, scale, scores, out_stride),
                _ => scores_f16_avx2::<4>(keys, q, scale, scores, out_stride),
            }
        }
    }
    true
}

pub(super) fn scores_f32(keys: Rows<'_, f32>, q: &[f32], scale: f32, scores: &mut [f32], out_stride: usize) -> bool {
    if !Isa::Avx2.is_available() {
        return false;
    }
    // SAFETY: the CPU has AVX2, FMA and F16C (checked just above); the body is safe code.
    unsafe { scores_f32_autovectorized(keys, q, scale, scores, out_stride) };
    true
}

pub(super) fn softmax_mix(values: ValueRows<'_>, p: &mut [f32], p_stride: usize, out: &mut [f32], stats: &mut [SoftmaxStats]) -> bool {
    let (hd, n) = (values.row_len(), values.rows());
    let group = out.len() / hd.max(1);
    if !usable(hd)
        || !values_in_bounds(&values)
        || p.len() < (group.max(1) - 1) * p_stride + n
        || out.len() != group * hd
        || stats.len() < group
    {
        return false;
    }
    // SAFETY: the CPU has AVX2, FMA and F16C (checked above); the body is safe code.
    unsafe { softmax_rows(p, p_stride, n, &mut stats[..group]) };
    out.fill(0.0);
    if let (ValueRows::F16(values), true) = (values, hd.is_multiple_of(64) && Isa::Avx512.is_available()) {
        for first in (0..group).step_by(HEADS) {
            let (p, out) = (&p[first * p_stride..], &mut out[first * hd..]);
            // SAFETY: AVX-512 F (checked just above); every row inside `values.data`,
            // `p` rows and `out` for the heads from `first` as for the AVX2 kernel below.
            unsafe {
                match group - first {
                    1 => mix_f16_avx512::<1>(values, p, p_stride, &mut out[..hd]),
                    2 => mix_f16_avx512::<2>(values, p, p_stride, &mut out[..2 * hd]),
                    3 => mix_f16_avx512::<3>(values, p, p_stride, &mut out[..3 * hd]),
                    _ => mix_f16_avx512::<4>(values, p, p_stride, &mut out[..4 * hd]),
                }
            }
        }
        return true;
    }
    for first in (0..group).step_by(HEADS) {
        let (p, out) = (&p[first * p_stride..], &mut out[first * hd..]);
        // SAFETY: as above, plus every row inside its buffers (checked) in the format the
        // kernel is chosen for; `p` holds the probability rows of the heads from `first`
        // and `out` their `heads × hd` outputs.
        unsafe {
            match values {
                ValueRows::F16(_) => mix_heads::<F16>(group - first, values, p, p_stride, out),
                ValueRows::Q8_0(_) => mix_heads::<Q8_0>(group - first, values, p, p_stride, out),
                ValueRows::Q4_0(_) => mix_heads::<Q4_0>(group - first, values, p, p_stride, out),
            }
        }
    }
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
fn scores_f32_autovectorized(keys: Rows<'_, f32>, q: &[f32], scale: f32, scores: &mut [f32], out_stride: usize) {
    kernels::scores_f32_body(keys, q, scale, scores, out_stride)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn softmax_rows(p: &mut [f32], p_stride: usize, n: usize, stats: &mut [SoftmaxStats]) {
    for (g, st) in stats.iter_mut().enumerate() {
        *st = kernels::softmax(&mut p[g * p_stride..g * p_stride + n]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The lanes of each of four vectors summed, as four sums in one vector, each by `hsum`'s
/// tree (the canonical `fold_lanes` order): the halves added, then the 4 × 4 transposed
/// so that lanes j and j + 2, then j and j + 1, meet in one add per step.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum4(v: [__m256; 4]) -> __m128 {
    let w = v.map(|v| _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)));
    // rows w0..w3 to columns: c[j] holds lane j of every row
    let (t0, t1) = (_mm_unpacklo_ps(w[0], w[1]), _mm_unpacklo_ps(w[2], w[3]));
    let (t2, t3) = (_mm_unpackhi_ps(w[0], w[1]), _mm_unpackhi_ps(w[2], w[3]));
    let c = [_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3), _mm_movehl_ps(t3, t2)];
    _mm_add_ps(_mm_add_ps(c[0], c[2]), _mm_add_ps(c[1], c[3]))
}

/// `q · key` of `H` ≤ 4 query heads against the f16 key at `row`, as 8-lane partial sums
/// per head (two accumulators per head, so 2·H add chains are in flight); zeros past H.
///
/// # Safety
/// AVX2, FMA and F16C; `row` holds `hd` (a multiple of 16) readable f16 and `qp` `H` rows
/// of `hd` f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_row<const H: usize>(row: *const u16, qp: *const f32, hd: usize) -> [__m256; HEADS] {
    let mut acc = [[_mm256_setzero_ps(); 2]; HEADS];
    // a plain counted loop: `step_by` here cost more instructions than the products
    for c in (0..hd / 16).map(|c| 16 * c) {
        // SAFETY: the caller's contract.
        unsafe {
            let k0 = _mm256_cvtph_ps(_mm_loadu_si128(row.add(c).cast()));
            let k1 = _mm256_cvtph_ps(_mm_loadu_si128(row.add(c + 8).cast()));
            for (g, a) in acc.iter_mut().enumerate().take(H) {
                a[0] = _mm256_add_ps(a[0], _mm256_mul_ps(_mm256_loadu_ps(qp.add(g * hd + c)), k0));
                a[1] = _mm256_add_ps(a[1], _mm256_mul_ps(_mm256_loadu_ps(qp.add(g * hd + c + 8)), k1));
            }
        }
    }
    acc.map(|a| _mm256_add_ps(a[0], a[1]))
}

/// `scores[g * out_stride + i] = scale · q_g · key_i` for `H` ≤ 4 query heads. One head
/// reduces four rows' sums at once (`hsum4`).
///
/// # Safety
/// AVX2, FMA and F16C; `keys.len` a multiple of 16; every row inside `keys.data`;
/// `q.len() == H * keys.len`; `scores` holds `H` rows of `out_stride ≥ keys.count`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_f16_avx2<const H: usize>(keys: Rows<'_, u16>, q: &[f32], scale: f32, scores: &mut [f32], out_stride: usize) {
    // SAFETY: the caller guarantees the CPU features and that every row, query and
    // score index used below is in bounds (see # Safety).
    unsafe {
        let hd = keys.len;
        let qp = q.as_ptr();
        let scale_x4 = _mm_set1_ps(scale);
        let row = |i: usize| {
            let row = keys.data.as_ptr().add(i * keys.stride);
            if i + PREFETCH_ROWS < keys.count {
                prefetch_row(row.add(PREFETCH_ROWS * keys.stride), hd);
            }
            row
        };
        let mut s = [0.0f32; 4];
        if H == 1 {
            for first in (0..keys.count.div_ceil(4)).map(|b| 4 * b) {
                let n = (keys.count - first).min(4);
                let mut sums = [_mm256_setzero_ps(); 4];
                if n == 4 {
                    // four rows with a constant count: unrolled, 4 % fewer instructions
                    // than the counted loop below (callgrind, stories15M's scores)
                    sums = core::array::from_fn(|r| dot_row::<1>(row(first + r), qp, hd)[0]);
                } else {
                    for (r, sum) in sums.iter_mut().enumerate().take(n) {
                        *sum = dot_row::<1>(row(first + r), qp, hd)[0];
                    }
                }
                let four = _mm_mul_ps(hsum4(sums), scale_x4);
                if n == 4 {
                    // stored in place: a `memcpy` of a variable count was a call per 4 rows
                    _mm_storeu_ps(scores.get_unchecked_mut(first..first + 4).as_mut_ptr(), four);
                } else {
                    _mm_storeu_ps(s.as_mut_ptr(), four);
                    scores.get_unchecked_mut(first..first + n).copy_from_slice(&s[..n]);
                }
            }
        } else {
            // each head's sum on its own: reduced across heads by `hsum4` instead, Gemma 3's
            // scores round differently, and with q4_0 values its top-1 agreement with f16
            // values (tests/engine.rs) moved from 0.945 to 0.918 for no speed that showed
            for i in 0..keys.count {
                for (g, sum) in dot_row::<H>(row(i), qp, hd).into_iter().enumerate().take(H) {
                    *scores.get_unchecked_mut(g * out_stride + i) = hsum(sum) * scale;
                }
            }
        }
    }
}

/// Up to four consecutive tokens of a prompt batch against one KV head of a model without
/// grouped-query attention, attended together: `q` holds the tokens' query rows for the
/// head, token j attends to rows `0..counts[j]` of `keys` and `values` (`keys.count` =
/// the last token's), and `out` gets `q.len()` outputs. Each key and value row is
/// converted once for all the tokens instead of once per token; the results are each
/// token's own `scores_f16` and `softmax_mix` bit for bit — a token's four scores are
/// reduced by `hsum4` as one head's four rows are, its softmax covers its own rows, and
/// the rows past them weigh exactly zero in the value sum (`0·v` adds nothing to a sum
/// that starts at +0). Writes the score rows (`stride` apart), the outputs and each
/// token's softmax stats; false (nothing done) where the kernels cannot run.
pub(super) fn attend_tokens_f16(
    keys: Rows<'_, u16>,
    values: Rows<'_, u16>,
    q: &[f32],
    counts: &[usize],
    scale: f32,
    stride: usize,
    (scores, out, stats): (&mut [f32], &mut [f32], &mut [SoftmaxStats]),
) -> bool {
    let (hd, tokens) = (keys.len, counts.len());
    let n = keys.count;
    if !usable(hd)
        || !(1..=HEADS).contains(&tokens)
        || values.len != hd
        || values.count != n
        || !in_bounds(&keys)
        || !in_bounds(&values)
        || q.len() != tokens * hd
        || out.len() != q.len()
        || stats.len() < tokens
        || scores.len() < tokens * stride
        || n > stride
        || counts.iter().any(|&c| c == 0 || c > n)
    {
        return false;
    }
    // SAFETY: the CPU has AVX2, FMA and F16C and every key row is inside `keys.data`
    // (both checked above); `q` holds `tokens` rows; `scores` holds `tokens` rows of
    // `stride` ≥ n.
    unsafe {
        match tokens {
            1 => scores_f16_tokens::<1>(keys, q, scale, scores, stride),
            2 => scores_f16_tokens::<2>(keys, q, scale, scores, stride),
            3 => scores_f16_tokens::<3>(keys, q, scale, scores, stride),
            _ => scores_f16_tokens::<4>(keys, q, scale, scores, stride),
        }
    }
    for (j, (&count, st)) in counts.iter().zip(stats.iter_mut()).enumerate() {
        let p = &mut scores[j * stride..][..n];
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); the body is safe code.
        *st = unsafe { softmax_avx2(&mut p[..count]) };
        p[count..].fill(0.0);
    }
    out.fill(0.0);
    // SAFETY: as above; the value rows are inside `values.data` (checked), `scores` holds
    // the tokens' probability rows, and `out` their `tokens × hd` outputs.
    unsafe { mix_heads::<F16>(tokens, ValueRows::F16(values), scores, stride, out) };
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
fn softmax_avx2(p: &mut [f32]) -> SoftmaxStats {
    kernels::softmax(p)
}

/// `scores[j * stride + i] = scale · q_j · key_i` for T ≤ 4 tokens' queries of one
/// head: `scores_f16_avx2::<1>`'s sums (the same `dot_row` accumulators, reduced by
/// `hsum4`), four tokens of one row at a time instead of one token's four rows.
///
/// # Safety
/// AVX2, FMA and F16C; `keys.len` a multiple of 16; every row inside `keys.data`;
/// `q.len() == T * keys.len`; `scores` holds T rows of `stride` ≥ `keys.count`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_f16_tokens<const T: usize>(keys: Rows<'_, u16>, q: &[f32], scale: f32, scores: &mut [f32], stride: usize) {
    // SAFETY: the caller guarantees the CPU features and that every row, query and
    // score index used below is in bounds (see # Safety).
    unsafe {
        let hd = keys.len;
        let scale_x4 = _mm_set1_ps(scale);
        let mut s = [0.0f32; 4];
        for i in 0..keys.count {
            let row = keys.data.as_ptr().add(i * keys.stride);
            if i + PREFETCH_ROWS < keys.count {
                prefetch_row(row.add(PREFETCH_ROWS * keys.stride), hd);
            }
            _mm_storeu_ps(s.as_mut_ptr(), _mm_mul_ps(hsum4(dot_row::<T>(row, q.as_ptr(), hd)), scale_x4));
            for (j, &v) in s.iter().enumerate().take(T) {
                *scores.get_unchecked_mut(j * stride + i) = v;
            }
        }
    }
}

/// `mix_avx2` for the first `min(heads, 4)` heads, with as many dimensions per pass as
/// the row length allows up to 8 accumulators (one head of 48 dimensions, stories15M's:
/// all 48 in one pass, 6 add chains instead of 2).
///
/// # Safety
/// As `mix_avx2`, for a row length that is a multiple of 16; `out` holds the heads' outputs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mix_heads<const F: u8>(heads: usize, values: ValueRows<'_>, p: &[f32], p_stride: usize, out: &mut [f32]) {
    let hd = values.row_len();
    // SAFETY: the caller's contract, and each kernel's row length divides by its 16·V
    // (checked just here).
    unsafe {
        match heads {
            1 if hd.is_multiple_of(64) => mix_avx2::<1, F, 4>(values, p, p_stride, &mut out[..hd]),
            1 if hd.is_multiple_of(48) => mix_avx2::<1, F, 3>(values, p, p_stride, &mut out[..hd]),
            1 if hd.is_multiple_of(32) => mix_avx2::<1, F, 2>(values, p, p_stride, &mut out[..hd]),
            1 => mix_avx2::<1, F, 1>(values, p, p_stride, &mut out[..hd]),
            2 if hd.is_multiple_of(32) => mix_avx2::<2, F, 2>(values, p, p_stride, &mut out[..2 * hd]),
            2 => mix_avx2::<2, F, 1>(values, p, p_stride, &mut out[..2 * hd]),
            3 => mix_avx2::<3, F, 1>(values, p, p_stride, &mut out[..3 * hd]),
            _ => mix_avx2::<4, F, 1>(values, p, p_stride, &mut out[..4 * hd]),
        }
    }
}

/// Value formats of `mix_avx2`, as a const parameter so that each is compiled on its own.
const F16: u8 = 0;
const Q8_0: u8 = 1;
const Q4_0: u8 = 2;

/// Rows per block of the AVX2 mix: the block's raw values (at most 32 × 512 bytes) stay
/// in L1 while each 16 dimensions of it are summed.
const MIX_ROW_BLOCK: usize = 32;
/// How far ahead the AVX2 mix asks for rows.
const MIX_PREFETCH_ROWS: usize = 64;

/// `out_g += Σ_i p[g * p_stride + i] · value_i` for `H` ≤ 4 query heads: `16·V` dimensions
/// of every head in `2·V·H` ymm accumulators (8 where the row length allows — one head
/// × 64 dimensions, two × 32, four × 16 — so that enough add chains are in flight
/// whatever H), each row's values converted straight into registers (f16 by
/// `vcvtph2ps`; q8_0 / q4_0 codes widened and multiplied by the block's scale), rows in
/// order, `acc + p·v` multiplied then added: the portable loop's floats, and the AVX-512
/// kernel's, bit for bit.
///
/// # Safety
/// AVX2, FMA and F16C; `F` the format of `values`; its row length a multiple of `16·V`
/// (and of 32 for blocks); every row inside its buffers (`values_in_bounds`); `p` holds
/// `H` rows of `p_stride ≥ values.rows()`; `out.len() == H * values.row_len()`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)] // each (H, F, V) compiled on its own: inlined together, the arms' code grew
unsafe fn mix_avx2<const H: usize, const F: u8, const V: usize>(values: ValueRows<'_>, p: &[f32], p_stride: usize, out: &mut [f32]) {
    // SAFETY: the caller guarantees the CPU features and that every row, probability and
    // output index used below is in bounds (see # Safety).
    unsafe {
        let (hd, count) = (values.row_len(), values.rows());
        let (halves, codes, scales, row_bytes) = match values {
            ValueRows::F16(r) => (r.data.as_ptr(), core::ptr::null(), core::ptr::null(), 2 * r.stride),
            ValueRows::Q8_0(b) => (core::ptr::null(), b.codes.as_ptr(), b.scales.as_ptr(), hd),
            ValueRows::Q4_0(b) => (core::ptr::null(), b.codes.as_ptr(), b.scales.as_ptr(), hd / 2),
        };
        let stride = if F == F16 { row_bytes / 2 } else { 0 };
        let blocks = hd / VALUE_BLOCK;
        let op = out.as_mut_ptr();
        let (low, eight) = (_mm_set1_epi8(15), _mm_set1_epi8(8));
        let first_row: *const u8 = if F == F16 { halves.cast() } else { codes };
        // the blocks are read a column of 16·V values at a time, which the hardware
        // prefetchers do not follow: each column's pass asks for the same column
        // MIX_PREFETCH_ROWS rows ahead, so every byte is asked for once, evenly spread
        prefetch_bytes(first_row, MIX_PREFETCH_ROWS.min(count) * row_bytes);
        // one head's q8_0 rows (two passes a row at head_dim 128): the first pass asks for
        // whole rows, so memory sees one sequential stream, not one per pass — llama7b's
        // shape at 16k-32k ran 1.08-1.13x faster; four heads' rows (16 passes) ran 0.87x that
        // way, and q4_0 rows (one line each) gained nothing (BENCHMARKS.md)
        let whole_rows = F == Q8_0 && H == 1;
        // constants for the block formats (a code byte per value, or half of one), so that a
        // column's prefetch is one or two instructions rather than a counted loop
        let column_bytes = match F {
            Q8_0 => 16 * V,
            Q4_0 => 8 * V,
            _ => 16 * V * row_bytes / hd,
        };
        for block in (0..count).step_by(MIX_ROW_BLOCK) {
            let end = (block + MIX_ROW_BLOCK).min(count);
            for c in (0..hd).step_by(16 * V) {
                let column = c * row_bytes / hd;
                let mut acc = [[[_mm256_setzero_ps(); 2]; V]; H];
                for (g, a) in acc.iter_mut().enumerate() {
                    for (j, a) in a.iter_mut().enumerate() {
                        a[0] = _mm256_loadu_ps(op.add(g * hd + c + 16 * j));
                        a[1] = _mm256_loadu_ps(op.add(g * hd + c + 16 * j + 8));
                    }
                }
                for i in block..end {
                    // past the last row too: a branch here cost the loop more than the
                    // prefetches of up to 64 rows beyond it (which never fault)
                    if !whole_rows {
                        prefetch_bytes(first_row.wrapping_add((i + MIX_PREFETCH_ROWS) * row_bytes + column), column_bytes);
                    } else if c == 0 {
                        prefetch_bytes(first_row.wrapping_add((i + MIX_PREFETCH_ROWS) * row_bytes), row_bytes);
                    }
                    let mut w = [_mm256_setzero_ps(); H];
                    for (g, w) in w.iter_mut().enumerate() {
                        *w = _mm256_broadcast_ss(&*p.as_ptr().add(g * p_stride + i));
                    }
                    let mut d = _mm256_setzero_ps();
                    for j in 0..V {
                        let c = c + 16 * j;
                        let v = if F == F16 {
                            let row = halves.add(i * stride + c);
                            [_mm256_cvtph_ps(_mm_loadu_si128(row.cast())), _mm256_cvtph_ps(_mm_loadu_si128(row.add(8).cast()))]
                        } else {
                            if j == 0 || c.is_multiple_of(VALUE_BLOCK) {
                                let scale = *scales.add(i * blocks + c / VALUE_BLOCK);
                                d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(scale))));
                            }
                            let (q0, q1) = if F == Q8_0 {
                                let at = codes.add(i * row_bytes + c);
                                (_mm_loadl_epi64(at.cast()), _mm_loadl_epi64(at.add(8).cast()))
                            } else {
                                // the block's bytes: low nibbles its first 16 values, high its last 16
                                let bytes = _mm_loadu_si128(codes.add(i * row_bytes + (c / VALUE_BLOCK) * VALUE_BLOCK / 2).cast());
                                let nibbles = if c.is_multiple_of(VALUE_BLOCK) { bytes } else { _mm_srli_epi16::<4>(bytes) };
                                let q = _mm_sub_epi8(_mm_and_si128(nibbles, low), eight);
                                (q, _mm_srli_si128::<8>(q))
                            };
                            // `d·q` first, then `p·(d·q)`, as the portable loop rounds
                            [_mm256_cvtepi8_epi32(q0), _mm256_cvtepi8_epi32(q1)].map(|q| _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)))
                        };
                        for (a, &w) in acc.iter_mut().zip(&w) {
                            a[j][0] = _mm256_add_ps(a[j][0], _mm256_mul_ps(w, v[0]));
                            a[j][1] = _mm256_add_ps(a[j][1], _mm256_mul_ps(w, v[1]));
                        }
                    }
                }
                for (g, a) in acc.iter().enumerate() {
                    for (j, a) in a.iter().enumerate() {
                        _mm256_storeu_ps(op.add(g * hd + c + 16 * j), a[0]);
                        _mm256_storeu_ps(op.add(g * hd + c + 16 * j + 8), a[1]);
                    }
                }
            }
        }
    }
}

/// Rows per block of the AVX-512 mix: the block is re-read from L1 for each 64 dimensions.
const ZMM_ROW_BLOCK: usize = 32;

/// As `mix_avx2` over f16 values for `H` ≤ 4 heads and `values.len` a multiple of 64: 64 dimensions of
/// every head in 4·H zmm accumulators, each row's f16 converted straight into registers.
/// The sums run in the same order as the AVX2 kernel's, so both give the same output.
///
/// # Safety
/// AVX-512 F; `values.len` a multiple of 64; every row inside `values.data`; `p` holds `H`
/// rows of `p_stride ≥ values.count`; `out.len() == H * values.len`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn mix_f16_avx512<const H: usize>(values: Rows<'_, u16>, p: &[f32], p_stride: usize, out: &mut [f32]) {
    // SAFETY: the caller guarantees the CPU features and that every row, probability
    // and output index used below is in bounds (see # Safety).
    unsafe {
        let hd = values.len;
        let op = out.as_mut_ptr();
        for block in (0..values.count).step_by(ZMM_ROW_BLOCK) {
            let end = (block + ZMM_ROW_BLOCK).min(values.count);
            for c in (0..hd).step_by(64) {
                let mut acc = [[_mm512_setzero_ps(); 4]; H];
                for (g, a) in acc.iter_mut().enumerate() {
                    for (k, a) in a.iter_mut().enumerate() {
                        *a = _mm512_loadu_ps(op.add(g * hd + c + 16 * k));
                    }
                }
                for i in block..end {
                    let row = values.data.as_ptr().add(i * values.stride + c);
                    if c == 0 && i + PREFETCH_ROWS < values.count {
                        prefetch_row(row.add(PREFETCH_ROWS * values.stride), hd);
                    }
                    let v = [0, 1, 2, 3].map(|k| _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * k).cast())));
                    for (g, a) in acc.iter_mut().enumerate() {
                        let w = _mm512_set1_ps(*p.get_unchecked(g * p_stride + i));
                        for (a, &v) in a.iter_mut().zip(&v) {
                            *a = _mm512_add_ps(*a, _mm512_mul_ps(w, v));
                        }
                    }
                }
                for (g, a) in acc.iter().enumerate() {
                    for (k, &a) in a.iter().enumerate() {
                        _mm512_storeu_ps(op.add(g * hd + c + 16 * k), a);
                    }
                }
            }
        }
    }
}
