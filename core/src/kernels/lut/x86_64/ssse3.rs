//! SSSE3: one 16-byte table per `pshufb`, `pmaddubsw` (weights 1, 2) to fold a plane pair;
//! several tokens' tables per weight load at prefill (`tile_group_n`).

use core::arch::x86_64::*;

use crate::{Block64, Interleave, TILE_ROWS};

/// Add the i16 lanes of `v` (8 rows starting at `row`) times 2^shift into `acc`.
#[inline(always)]
fn widen_into(acc: &mut [i32; TILE_ROWS], row: usize, v: [i16; 8], shift: usize) {
    for (i, x) in v.into_iter().enumerate() {
        acc[row + i] += (x as i32) << shift;
    }
}

#[inline(always)]
fn lanes(v: __m128i) -> [i16; 8] {
    // SAFETY: __m128i and [i16; 8] have the same size; every bit pattern is valid.
    unsafe { core::mem::transmute(v) }
}

/// A chunk's low and high nibbles: the indices of rows 0..16 and 16..32.
#[target_feature(enable = "ssse3")]
#[inline]
fn split(v: __m128i) -> (__m128i, __m128i) {
    let nibble = _mm_set1_epi8(0x0f);
    (_mm_and_si128(v, nibble), _mm_and_si128(_mm_srli_epi16(v, 4), nibble))
}

/// The 16-byte table at `table` looked up at both halves' indices.
///
/// # Safety
/// `table` points at 16 readable, 16-byte aligned bytes.
#[target_feature(enable = "ssse3")]
#[inline]
unsafe fn lookups(table: *const u8, (lo, hi): (__m128i, __m128i)) -> (__m128i, __m128i) {
    // SAFETY: the caller's contract.
    let table = unsafe { _mm_load_si128(table.cast()) };
    (_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi))
}

/// # Safety
/// The CPU must support SSSE3; `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "ssse3")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: the caller's contract.
    unsafe { tile_group_n(w, [quads], bits, core::array::from_mut(acc)) }
}

/// The integer sums of one tile-group for N tokens' tables: each 16 weight bytes are
/// loaded and split into indices once for all N; integer sums, so each token's do not
/// depend on N.
///
/// # Safety
/// The CPU must support SSSE3; `w` is one tile-group of a layout with `quads[t].len()`
/// quads, the same for every token.
#[target_feature(enable = "ssse3")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, acc: &mut [[i32; TILE_ROWS]; N]) {
    let bits = bits as usize;
    let n_quads = quads[0].len();
    debug_assert!(quads.iter().all(|q| q.len() == n_quads));
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * n_quads * bits / 8);
    let tables = quads.map(|q| q.as_ptr().cast::<u8>());
    let plane_weights = _mm_set1_epi16(0x0201); // bytes 1, 2, 1, 2, …
    let mut p = w.as_ptr();
    // a pair's bytes run quad by quad, each quad's two halves (rows 0..16, 16..32) of four
    // 16-byte chunks; one half at a time keeps two i16 accumulators per token, so two
    // tokens' fit SSE's 16 registers beside the indices and tables
    let pair_bytes = n_quads * 2 * 4 * 16;
    for pair in 0..bits / 2 {
        for half in 0..2 {
            // per token: rows 16·half + 0..8, + 8..16 as i16
            let mut a = [[_mm_setzero_si128(); 2]; N];
            for quad in 0..n_quads {
                for lane in 0..4 {
                    // SAFETY: every token's tables hold `n_quads` 64-byte (aligned) blocks;
                    // the offset stays inside pair `pair`'s bytes of `w` (length checked by
                    // layout).
                    unsafe {
                        let v = _mm_loadu_si128(p.add(pair * pair_bytes + ((quad * 2 + half) * 4 + lane) * 16).cast());
                        let indices = split(v);
                        for (a, table) in a.iter_mut().zip(tables) {
                            let (lo, hi) = lookups(table.add(64 * quad + 16 * lane), indices);
                            a[0] = _mm_add_epi16(a[0], _mm_maddubs_epi16(plane_weights, lo));
                            a[1] = _mm_add_epi16(a[1], _mm_maddubs_epi16(plane_weights, hi));
                        }
                    }
                }
            }
            for (acc, a) in acc.iter_mut().zip(a) {
                for (k, v) in a.into_iter().enumerate() {
                    widen_into(acc, 16 * half + 8 * k, lanes(v), 2 * pair);
                }
            }
        }
    }
    // SAFETY: the pairs' bytes come first in `w`.
    p = unsafe { p.add(bits / 2 * pair_bytes) };
    if bits % 2 == 1 {
        let mut a = [[_mm_setzero_si128(); 4]; N];
        for quad in 0..n_quads {
            for lane in 0..4 {
                // SAFETY: as above.
                unsafe {
                    let v = _mm_loadu_si128(p.cast());
                    p = p.add(16);
                    let indices = split(v);
                    for (a, table) in a.iter_mut().zip(tables) {
                        let (lo, hi) = lookups(table.add(64 * quad + 16 * lane), indices);
                        // sign-extend bytes to i16 (no pmovsx before SSE4.1): duplicate, shift back
                        a[0] = _mm_add_epi16(a[0], _mm_srai_epi16(_mm_unpacklo_epi8(lo, lo), 8));
                        a[1] = _mm_add_epi16(a[1], _mm_srai_epi16(_mm_unpackhi_epi8(lo, lo), 8));
                        a[2] = _mm_add_epi16(a[2], _mm_srai_epi16(_mm_unpacklo_epi8(hi, hi), 8));
                        a[3] = _mm_add_epi16(a[3], _mm_srai_epi16(_mm_unpackhi_epi8(hi, hi), 8));
                    }
                }
            }
        }
        for (acc, a) in acc.iter_mut().zip(a) {
            for (k, v) in a.into_iter().enumerate() {
                widen_into(acc, 8 * k, lanes(v), bits - 1);
            }
        }
    }
}

crate::kernels::lut::define_run!("ssse3");
crate::kernels::lut::define_run_n!("ssse3");
