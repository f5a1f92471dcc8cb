//! Four rows at a time with `pmaddubsw`: |w| (unsigned, so −128 reads as 128) times x
//! with w's sign (x is −127..=127, so the sign flip cannot wrap); pair sums ≤ 2·128·127
//! fit i16 without saturating, `pmaddwd` by ones widens them to i32, a `phaddd` tree
//! gives the four rows' block sums in one vector, and the float step is the scalar
//! one's, lane by lane.

use core::arch::x86_64::*;

use super::{FiveBitGroup, Group, Int8Activations, BLOCK, FIVE_BIT_BLOCK_BYTES, GROUP_ROWS};
use crate::f16::{f16_bits_to_f32, f32_to_f16_bits};
use crate::Error;

/// `Int8Activations::quantize_portable`, a block of 32 in four vectors: the same float
/// operations (|x|'s maximum, `d = amax / 127`, `x · (1/d)` clamped to ±127, rounded half
/// away from zero through truncation and the remainder), so the same codes, scales and
/// sums. A product `0 · ∞` (a subnormal amax makes 1/d infinite) is NaN there and rounds
/// to code 0; here it is zeroed before the clamp to the same end.
///
/// # Safety
/// AVX2 must be available; `x` has `a.cols()` values.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_avx2(a: &mut Int8Activations, x: &[f32]) -> Result<(), Error> {
    debug_assert_eq!(x.len(), a.codes.len());
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (low, high) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let (half, minus_half) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.5));
    // bytes of `packs` come out 128-bit lane by lane: put each vector's 8 codes back in order
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let blocks = x.chunks_exact(BLOCK).zip(a.codes.chunks_exact_mut(BLOCK));
    for (((x, q), s), sum) in blocks.zip(&mut a.scales).zip(&mut a.sums) {
        // SAFETY: a block is 32 f32 = four 8-lane loads.
        let v: [__m256; 4] = core::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) });
        let nan = v.iter().fold(_mm256_setzero_ps(), |m, &v| _mm256_or_ps(m, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)));
        if _mm256_movemask_ps(nan) != 0 {
            return Err(Error::NonFiniteInput);
        }
        let m = v.iter().fold(_mm256_setzero_ps(), |m, &v| _mm256_max_ps(m, _mm256_and_ps(v, magnitude)));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if !amax.is_finite() {
            return Err(Error::NonFiniteInput);
        }
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let codes = v.map(|v| {
            let y = _mm256_mul_ps(v, id);
            let y = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(y, y), y);
            let y = _mm256_min_ps(_mm256_max_ps(y, low), high);
            let t = _mm256_cvttps_epi32(y);
            let frac = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
            let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half));
            let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, minus_half));
            // the masks are −1 where true
            _mm256_add_epi32(_mm256_sub_epi32(t, up), down)
        });
        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3]));
        // SAFETY: `q` is 32 bytes.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), _mm256_permutevar8x32_epi32(bytes, order)) };
        let total = _mm256_add_epi32(_mm256_add_epi32(codes[0], codes[1]), _mm256_add_epi32(codes[2], codes[3]));
        let total = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256::<1>(total));
        let total = _mm_add_epi32(total, _mm_shuffle_epi32::<0b01_00_11_10>(total));
        *sum = _mm_cvtsi128_si32(_mm_add_epi32(total, _mm_shuffle_epi32::<0b10_11_00_01>(total)));
        *s = f16_bits_to_f32(f32_to_f16_bits(d));
    }
    Ok(())
}

/// As `scalar::group`, 16 bytes at a time.
///
/// # Safety
/// SSSE3 must be available; `g`'s lengths agree (see `Group`).
#[target_feature(enable = "ssse3")]
pub unsafe fn group_ssse3(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    debug_assert!(g.w.len() == GROUP_ROWS * g.x.len() && g.w_scales.len() == GROUP_ROWS * g.x_scales.len());
    let ones = _mm_set1_epi16(1);
    let mut acc = _mm_setzero_ps();
    for (b, &dx) in g.x_scales.iter().enumerate() {
        // SAFETY (loads): row i's block b is bytes (4b + i)·32.. + 32 of `w`, block b of
        // `x` is bytes 32b.. + 32, scales 4b.. + 4 of `w_scales`: all within the lengths.
        let dot16 = |i: usize, half: usize| unsafe {
            let xv = _mm_loadu_si128(g.x.as_ptr().add(b * BLOCK + half).cast());
            let wv = _mm_loadu_si128(g.w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK + half).cast());
            _mm_madd_epi16(_mm_maddubs_epi16(_mm_sign_epi8(wv, wv), _mm_sign_epi8(xv, wv)), ones)
        };
        let row = |i: usize| _mm_add_epi32(dot16(i, 0), dot16(i, 16));
        let sums = _mm_hadd_epi32(_mm_hadd_epi32(row(0), row(1)), _mm_hadd_epi32(row(2), row(3)));
        // SAFETY: scales 4b..4b + 4 lie inside `w_scales` (4 per block).
        let dw = unsafe { _mm_loadu_ps(g.w_scales.as_ptr().add(b * GROUP_ROWS)) };
        acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(dx))));
    }
    // SAFETY: `out` holds four f32.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
}

/// As `scalar::group`, one 32-byte block per vector.
///
/// # Safety
/// AVX2 must be available; `g`'s lengths agree (see `Group`).
#[target_feature(enable = "avx2")]
pub unsafe fn group_avx2(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    debug_assert!(g.w.len() == GROUP_ROWS * g.x.len() && g.w_scales.len() == GROUP_ROWS * g.x_scales.len());
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm_setzero_ps();
    for (b, &dx) in g.x_scales.iter().enumerate() {
        // SAFETY (loads): as in `group_ssse3`.
        let xv = unsafe { _mm256_loadu_si256(g.x.as_ptr().add(b * BLOCK).cast()) };
        let row = |i: usize| {
            // SAFETY: row i's block b is bytes (4b + i)·32.. + 32 of `w`, inside it.
            let wv = unsafe { _mm256_loadu_si256(g.w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast()) };
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones)
        };
        // per 128-bit half: [Σ row 0, Σ row 1, Σ row 2, Σ row 3] of that half's lanes
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(row(0), row(1)), _mm256_hadd_epi32(row(2), row(3)));
        let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        // SAFETY: scales 4b..4b + 4 lie inside `w_scales` (4 per block).
        let dw = unsafe { _mm_loadu_ps(g.w_scales.as_ptr().add(b * GROUP_ROWS)) };
        acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(dx))));
    }
    // SAFETY: `out` holds four f32.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
}

/// As `scalar::five_bit_group` for N tokens: each block's 128 codes are widened to bytes
/// `u = code + 16` once (two nibble planes, the fifth bits moved to bit 4), then per
/// token `pmaddubsw(u, x)` (u ≤ 31, so pair sums ≤ 2·31·127 and two `phaddw` rounds
/// ≤ 8·31·127 < 2^15: no saturation), one `pmaddwd` by ones, and `Σu·x − 16·Σx` is
/// the block sum over the codes.
///
/// # Safety
/// AVX2 must be available; `g` and every token's lengths agree (see `FiveBitGroup`).
#[target_feature(enable = "avx2")]
pub unsafe fn five_bit_avx2<const N: usize>(g: &FiveBitGroup<'_>, xs: [&Int8Activations; N], out: &mut [[f32; GROUP_ROWS]; N]) {
    let blocks = g.w_scales.len() / GROUP_ROWS;
    debug_assert!(g.w.len() == blocks * FIVE_BIT_BLOCK_BYTES && xs.iter().all(|x| x.codes.len() == blocks * BLOCK));
    let nibble = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm_setzero_ps(); N];
    for b in 0..blocks {
        // SAFETY (loads): block b's 80 bytes lie inside `w` (80 per block), its four
        // scales inside `w_scales`, and each token's block b (32 codes, a scale, a sum)
        // inside that token's vectors.
        let (low01, low23, fifth, dw) = unsafe {
            let p = g.w.as_ptr().add(b * FIVE_BIT_BLOCK_BYTES);
            let fifth = _mm_loadu_si128(p.add(64).cast());
            (
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(32).cast()),
                // bytes 0..16 carry codes 0..16's fifth bits at bits 4..8; shifted by a
                // nibble, bytes 16..32 carry codes 16..32's there too
                _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(fifth), _mm_slli_epi16::<4>(fifth)),
                _mm_loadu_ps(g.w_scales.as_ptr().add(b * GROUP_ROWS)),
            )
        };
        // each fifth bit isolated, then moved to bit 4 of its own byte
        let u = [
            _mm256_or_si256(_mm256_and_si256(low01, nibble), _mm256_and_si256(fifth, _mm256_set1_epi8(0x10))),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(low01), nibble),
                _mm256_srli_epi16::<1>(_mm256_and_si256(fifth, _mm256_set1_epi8(0x20))),
            ),
            _mm256_or_si256(_mm256_and_si256(low23, nibble), _mm256_srli_epi16::<2>(_mm256_and_si256(fifth, _mm256_set1_epi8(0x40)))),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(low23), nibble),
                _mm256_srli_epi16::<3>(_mm256_and_si256(fifth, _mm256_set1_epi8(0x80u8 as i8))),
            ),
        ];
        for (t, x) in xs.iter().enumerate() {
            // SAFETY: as above.
            let xv = unsafe { _mm256_loadu_si256(x.codes.as_ptr().add(b * BLOCK).cast()) };
            let p = |i: usize| _mm256_maddubs_epi16(u[i], xv);
            let pairs = _mm256_hadd_epi16(_mm256_hadd_epi16(p(0), p(1)), _mm256_hadd_epi16(p(2), p(3)));
            // per 128-bit half: [Σ row 0, Σ row 1, Σ row 2, Σ row 3] of that half's codes
            let h = _mm256_madd_epi16(pairs, ones);
            let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let sums = _mm_sub_epi32(sums, _mm_set1_epi32(16 * x.sums[b]));
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(x.scales[b]))));
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` holds four f32.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// `group_avx2` for N tokens: each row's codes and their magnitudes are loaded and made
/// once per block for all N; each token's float steps are `group_avx2`'s.
///
/// # Safety
/// AVX2 must be available; `w` is four rows' interleaved codes (`4 · cols` bytes),
/// `w_scales` their `4 · cols/32` scales, and every token has `cols` codes.
#[target_feature(enable = "avx2")]
pub unsafe fn group_avx2_n<const N: usize>(w: &[u8], w_scales: &[f32], xs: [&Int8Activations; N], out: &mut [[f32; GROUP_ROWS]; N]) {
    let blocks = w_scales.len() / GROUP_ROWS;
    debug_assert!(w.len() == blocks * GROUP_ROWS * BLOCK && xs.iter().all(|x| x.codes.len() == blocks * BLOCK));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm_setzero_ps(); N];
    for b in 0..blocks {
        // SAFETY (loads): row i's block b is bytes (4b + i)·32.. + 32 of `w`, its scales
        // 4b.. + 4 of `w_scales`, each token's block b inside that token's vectors.
        let (wv, dw) = unsafe {
            let row = |i: usize| _mm256_loadu_si256(w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast());
            ([row(0), row(1), row(2), row(3)], _mm_loadu_ps(w_scales.as_ptr().add(b * GROUP_ROWS)))
        };
        let magnitude = wv.map(|w| _mm256_sign_epi8(w, w));
        for (t, x) in xs.iter().enumerate() {
            // SAFETY: as above.
            let xv = unsafe { _mm256_loadu_si256(x.codes.as_ptr().add(b * BLOCK).cast()) };
            let row = |i: usize| _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[i], _mm256_sign_epi8(xv, wv[i])), ones);
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(row(0), row(1)), _mm256_hadd_epi32(row(2), row(3)));
            let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(x.scales[b]))));
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` holds four f32.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), a) };
    }
}
