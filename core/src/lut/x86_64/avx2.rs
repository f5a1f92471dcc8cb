//! AVX2: two chunks per `vpshufb` (one table per 128-bit lane), `vpmaddubsw` for plane pairs.

use core::arch::x86_64::*;

use crate::{Block64, Interleave, TILE_ROWS};

/// Sum the two 128-bit lanes (same rows, different chunks), widen to i32, scale by
/// 2^shift and add to `acc[row..row + 8]`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn fold8(acc: &mut [i32; TILE_ROWS], row: usize, v: __m256i, shift: i32) {
    let x = _mm_add_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let x = _mm256_sll_epi32(_mm256_cvtepi16_epi32(x), _mm_cvtsi32_si128(shift));
    let dst = acc[row..row + 8].as_mut_ptr().cast::<__m256i>();
    // SAFETY: `dst` points at 8 i32 inside `acc`.
    unsafe { _mm256_storeu_si256(dst, _mm256_add_epi32(_mm256_loadu_si256(dst), x)) };
}

/// Widen 16 i16 rows to i32, scale and add to `acc[row..row + 16]`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn fold16(acc: &mut [i32; TILE_ROWS], row: usize, v: __m256i, shift: i32) {
    let s = _mm_cvtsi32_si128(shift);
    let lo = _mm256_sll_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(v)), s);
    let hi = _mm256_sll_epi32(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(v, 1)), s);
    let dst = acc[row..row + 16].as_mut_ptr().cast::<__m256i>();
    // SAFETY: `dst` points at 16 i32 inside `acc`.
    unsafe {
        _mm256_storeu_si256(dst, _mm256_add_epi32(_mm256_loadu_si256(dst), lo));
        _mm256_storeu_si256(dst.add(1), _mm256_add_epi32(_mm256_loadu_si256(dst.add(1)), hi));
    }
}

/// # Safety
/// The CPU must support AVX2; `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: the caller's contract.
    unsafe { tile_group_n::<1>(w, [quads], bits, [acc]) }
}

/// `tile_group` for N tokens at once: each 32 weight bytes are loaded and split into
/// nibble indices once, then looked up in every token's tables. Integer sums, so each
/// `acc[t]` is what `tile_group` gives token t, bit for bit.
///
/// # Safety
/// The CPU must support AVX2; `w` is one tile-group of a layout with `quads[t].len()`
/// quads for every t.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, mut acc: [&mut [i32; TILE_ROWS]; N]) {
    let bits = bits as usize;
    let n_quads = quads[0].len();
    debug_assert!(quads.iter().all(|q| q.len() == n_quads), "every token's tables cover the same group");
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * n_quads * bits / 8);
    let tables = quads.map(|q| q.as_ptr().cast::<u8>());
    let nibble = _mm256_set1_epi8(0x0f);
    let plane_weights = _mm256_set1_epi16(0x0201);
    let mut p = w.as_ptr();
    for pair in 0..bits / 2 {
        let mut a = [[_mm256_setzero_si256(); 4]; N];
        for quad in 0..n_quads {
            for half in 0..2 {
                for lanes in 0..2 {
                    // SAFETY: `p` walks exactly `w`; every token's tables hold `n_quads`
                    // 64-byte (aligned) blocks.
                    unsafe {
                        let v = _mm256_loadu_si256(p.cast());
                        p = p.add(32);
                        let i_lo = _mm256_and_si256(v, nibble);
                        let i_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                        for (a, table) in a.iter_mut().zip(tables) {
                            let table = _mm256_load_si256(table.add(64 * quad + 32 * lanes).cast());
                            let lo = _mm256_shuffle_epi8(table, i_lo);
                            let hi = _mm256_shuffle_epi8(table, i_hi);
                            a[2 * half] = _mm256_add_epi16(a[2 * half], _mm256_maddubs_epi16(plane_weights, lo));
                            a[2 * half + 1] = _mm256_add_epi16(a[2 * half + 1], _mm256_maddubs_epi16(plane_weights, hi));
                        }
                    }
                }
            }
        }
        for (a, acc) in a.into_iter().zip(acc.iter_mut()) {
            for (k, v) in a.into_iter().enumerate() {
                // SAFETY: AVX2 is enabled in this function.
                unsafe { fold8(acc, 8 * k, v, 2 * pair as i32) };
            }
        }
    }
    if bits % 2 == 1 {
        let mut rows = [[_mm256_setzero_si256(); 2]; N];
        for quad in 0..n_quads {
            for lanes in 0..2 {
                // SAFETY: as above.
                unsafe {
                    let v = _mm256_loadu_si256(p.cast());
                    p = p.add(32);
                    let i_lo = _mm256_and_si256(v, nibble);
                    let i_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                    for (rows, table) in rows.iter_mut().zip(tables) {
                        let table = _mm256_load_si256(table.add(64 * quad + 32 * lanes).cast());
                        for (r, index) in rows.iter_mut().zip([i_lo, i_hi]) {
                            let x = _mm256_shuffle_epi8(table, index);
                            let x16 = _mm256_add_epi16(
                                _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x)),
                                _mm256_cvtepi8_epi16(_mm256_extracti128_si256(x, 1)),
                            );
                            *r = _mm256_add_epi16(*r, x16);
                        }
                    }
                }
            }
        }
        for ([lo_rows, hi_rows], acc) in rows.into_iter().zip(acc.iter_mut()) {
            // SAFETY: AVX2 is enabled in this function.
            unsafe {
                fold16(acc, 0, lo_rows, bits as i32 - 1);
                fold16(acc, 16, hi_rows, bits as i32 - 1);
            }
        }
    }
}

/// 32 f16 scales to f32 with F16C `vcvtph2ps`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn f16x32(bytes: &[u8; 64]) -> [f32; TILE_ROWS] {
    let mut out = [_mm256_setzero_ps(); 4];
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: 16 readable bytes at 16·i within the 64.
        *o = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(bytes.as_ptr().add(16 * i).cast()) });
    }
    // SAFETY: [f32; 32] is four __m256 of plain bits.
    unsafe { core::mem::transmute(out) }
}

crate::lut::define_run!("avx2,fma,f16c"; |b| f16x32(b));
crate::lut::define_run_n!("avx2,fma,f16c"; |b| f16x32(b));

/// The portable table builder, compiled with AVX2 + FMA so it vectorizes 8-wide.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn build_tables(x: &[f32], group: usize, quads: &mut [Block64], scale: &mut [f32], sum: &mut [f32]) {
    crate::lut::build_tables(x, group, quads, scale, sum)
}
