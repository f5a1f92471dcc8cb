//! AVX-512BW: four chunks per `vpshufb` (the 64 bytes of a table block load as one
//! register, no broadcast), `vpmaddubsw` for plane pairs.

use core::arch::x86_64::*;

use crate::{Block64, Interleave, TILE_ROWS};

/// Sum the four 128-bit lanes (chunks) of each of `a[0..4]` (rows 0–8, 8–16, 16–24,
/// 24–32) with a 4×4 lane transpose, widen, scale by 2^shift and add to `acc`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn fold_pairs(acc: &mut [i32; TILE_ROWS], a: [__m512i; 4], shift: i32) {
    let ab = _mm512_add_epi16(_mm512_shuffle_i64x2(a[0], a[1], 0x44), _mm512_shuffle_i64x2(a[0], a[1], 0xee));
    let cd = _mm512_add_epi16(_mm512_shuffle_i64x2(a[2], a[3], 0x44), _mm512_shuffle_i64x2(a[2], a[3], 0xee));
    let rows = _mm512_add_epi16(_mm512_shuffle_i64x2(ab, cd, 0x88), _mm512_shuffle_i64x2(ab, cd, 0xdd));
    let s = _mm_cvtsi32_si128(shift);
    let lo = _mm512_sll_epi32(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(rows)), s);
    let hi = _mm512_sll_epi32(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(rows, 1)), s);
    let dst = acc.as_mut_ptr().cast::<__m512i>();
    // SAFETY: `acc` is 32 i32 = two 512-bit vectors.
    unsafe {
        _mm512_storeu_si512(dst, _mm512_add_epi32(_mm512_loadu_si512(dst), lo));
        _mm512_storeu_si512(dst.add(1), _mm512_add_epi32(_mm512_loadu_si512(dst.add(1)), hi));
    }
}

/// Sum the two 256-bit halves (16 rows each), widen, scale, add to `acc[row..row + 16]`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn fold16(acc: &mut [i32; TILE_ROWS], row: usize, v: __m512i, shift: i32) {
    let y = _mm256_add_epi16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    let x = _mm512_sll_epi32(_mm512_cvtepi16_epi32(y), _mm_cvtsi32_si128(shift));
    let dst = acc[row..row + 16].as_mut_ptr().cast::<__m512i>();
    // SAFETY: `dst` points at 16 i32 inside `acc`.
    unsafe { _mm512_storeu_si512(dst, _mm512_add_epi32(_mm512_loadu_si512(dst), x)) };
}

/// # Safety
/// The CPU must support AVX-512 F and BW; `w` is one tile-group of a layout with
/// `quads.len()` quads.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    let bits = bits as usize;
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * quads.len() * bits / 8);
    let nibble = _mm512_set1_epi8(0x0f);
    let plane_weights = _mm512_set1_epi16(0x0201);
    let mut p = w.as_ptr();
    for pair in 0..bits / 2 {
        let mut a = [_mm512_setzero_si512(); 4];
        for quad in quads {
            // SAFETY: `quad` is 64 aligned bytes; `p` walks exactly `w`.
            unsafe {
                let table = _mm512_load_si512(quad.0.as_ptr().cast());
                for half in 0..2 {
                    let v = _mm512_loadu_si512(p.cast());
                    p = p.add(64);
                    let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, nibble));
                    let hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
                    a[2 * half] = _mm512_add_epi16(a[2 * half], _mm512_maddubs_epi16(plane_weights, lo));
                    a[2 * half + 1] = _mm512_add_epi16(a[2 * half + 1], _mm512_maddubs_epi16(plane_weights, hi));
                }
            }
        }
        // SAFETY: AVX-512 F/BW are enabled in this function.
        unsafe { fold_pairs(acc, a, 2 * pair as i32) };
    }
    if bits % 2 == 1 {
        let (mut lo_rows, mut hi_rows) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        for quad in quads {
            // SAFETY: as above.
            unsafe {
                let table = _mm512_load_si512(quad.0.as_ptr().cast());
                let v = _mm512_loadu_si512(p.cast());
                p = p.add(64);
                let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, nibble));
                let hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
                lo_rows = _mm512_add_epi16(lo_rows, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(lo)));
                lo_rows = _mm512_add_epi16(lo_rows, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(lo, 1)));
                hi_rows = _mm512_add_epi16(hi_rows, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(hi)));
                hi_rows = _mm512_add_epi16(hi_rows, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(hi, 1)));
            }
        }
        // SAFETY: AVX-512 F/BW are enabled in this function.
        unsafe {
            fold16(acc, 0, lo_rows, bits as i32 - 1);
            fold16(acc, 16, hi_rows, bits as i32 - 1);
        }
    }
}

/// 32 f16 scales to f32 with `vcvtph2ps`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn f16x32(bytes: &[u8; 64]) -> [f32; TILE_ROWS] {
    // SAFETY: 64 readable bytes; unaligned load.
    let v = unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) };
    let lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
    let hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
    // SAFETY: [f32; 32] is two __m512 of plain bits.
    unsafe { core::mem::transmute([lo, hi]) }
}

crate::kernels::lut::define_run!("avx512f,avx512bw,avx2,fma,f16c"; |b| f16x32(b));

/// Activation tables with AVX-512: 16 entries of a chunk are one vector
/// (`s0·a0 + s1·a1 + s2·a2 + s3·a3` as one multiply and three exact-order FMAs, the
/// portable builder's order), scaled, clamped, rounded half to even, narrowed.
///
/// # Safety
/// The CPU must support AVX-512 F; lengths as checked by `TablesMut::build`.
#[target_feature(enable = "avx512f,avx512bw,fma")]
pub(crate) unsafe fn build_tables(x: &[f32], group: usize, quads: &mut [Block64], scale: &mut [f32], sum: &mut [f32]) {
    use crate::kernels::lut::SIGNS;
    let signs: [__m512; 4] = core::array::from_fn(|t| {
        // SAFETY: 16 f32 per row of SIGNS.
        unsafe { _mm512_loadu_ps(SIGNS[t].as_ptr()) }
    });
    let quads_per_group = group / 16;
    for (g, xs) in x.chunks_exact(group).enumerate() {
        // SAFETY: AVX-512 F is enabled in this function.
        let (absmax, s) = unsafe { group_stats(xs) };
        let inv = _mm512_set1_ps(if absmax > 0.0 { 127.0 / absmax } else { 0.0 });
        let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        for (q, xq) in quads[g * quads_per_group..(g + 1) * quads_per_group].iter_mut().zip(xs.chunks_exact(16)) {
            for (lane, a) in xq.chunks_exact(4).enumerate() {
                // (a0·s0 + a1·s1): the product a1·s1 is exact, so the FMA rounds once,
                // exactly like the portable add.
                let mut t = _mm512_mul_ps(_mm512_set1_ps(a[0]), signs[0]);
                t = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), signs[1], t);
                t = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), signs[2], t);
                t = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), signs[3], t);
                let t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(t, inv), lo), hi);
                let i = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
                // SAFETY: 16 bytes at 16·lane inside the 64-byte block.
                unsafe { _mm_storeu_si128(q.0.as_mut_ptr().add(16 * lane).cast(), _mm512_cvtepi32_epi8(i)) };
            }
        }
        scale[g] = absmax / 127.0;
        sum[g] = s;
    }
}

/// `crate::kernels::lut::group_stats` in the same orders: per chunk (|a0|+|a1|)+(|a2|+|a3|) by
/// two in-lane swaps, Σa in 16 lanes halved 8, 4, 2, 1.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn group_stats(xs: &[f32]) -> (f32, f32) {
    let abs_mask = _mm512_set1_epi32(0x7fff_ffff);
    let (mut absmax, mut lanes) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for x16 in xs.chunks_exact(16) {
        // SAFETY: 16 f32.
        let v = unsafe { _mm512_loadu_ps(x16.as_ptr()) };
        lanes = _mm512_add_ps(lanes, v);
        let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
        let pairs = _mm512_add_ps(a, _mm512_permute_ps::<0xb1>(a));
        let chunk = _mm512_add_ps(pairs, _mm512_permute_ps::<0x4e>(pairs));
        absmax = _mm512_max_ps(absmax, chunk);
    }
    let h8 = _mm256_add_ps(_mm512_castps512_ps256(lanes), _mm256_castsi256_ps(_mm512_extracti64x4_epi64::<1>(_mm512_castps_si512(lanes))));
    let h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps::<1>(h8));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    let h1 = _mm_add_ss(h2, _mm_movehdup_ps(h2));
    (_mm512_reduce_max_ps(absmax), _mm_cvtss_f32(h1))
}
