//! SSSE3: one 16-byte table per `pshufb`, `pmaddubsw` (weights 1, 2) to fold a plane pair.

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

/// # Safety
/// The CPU must support SSSE3; `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "ssse3")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    let bits = bits as usize;
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * quads.len() * bits / 8);
    let nibble = _mm_set1_epi8(0x0f);
    let plane_weights = _mm_set1_epi16(0x0201); // bytes 1, 2, 1, 2, …
    let mut p = w.as_ptr();
    for pair in 0..bits / 2 {
        // rows 0..8, 8..16, 16..24, 24..32 as i16
        let mut a = [_mm_setzero_si128(); 4];
        for quad in quads {
            for half in 0..2 {
                for lane in 0..4 {
                    // SAFETY: `quad` is 64 bytes; `p` walks exactly `w` (length checked by layout).
                    unsafe {
                        let table = _mm_load_si128(quad.0.as_ptr().add(16 * lane).cast());
                        let v = _mm_loadu_si128(p.cast());
                        p = p.add(16);
                        let lo = _mm_shuffle_epi8(table, _mm_and_si128(v, nibble));
                        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), nibble));
                        a[2 * half] = _mm_add_epi16(a[2 * half], _mm_maddubs_epi16(plane_weights, lo));
                        a[2 * half + 1] = _mm_add_epi16(a[2 * half + 1], _mm_maddubs_epi16(plane_weights, hi));
                    }
                }
            }
        }
        for (k, v) in a.into_iter().enumerate() {
            widen_into(acc, 8 * k, lanes(v), 2 * pair);
        }
    }
    if bits % 2 == 1 {
        let mut a = [_mm_setzero_si128(); 4];
        for quad in quads {
            for lane in 0..4 {
                // SAFETY: as above.
                unsafe {
                    let table = _mm_load_si128(quad.0.as_ptr().add(16 * lane).cast());
                    let v = _mm_loadu_si128(p.cast());
                    p = p.add(16);
                    let lo = _mm_shuffle_epi8(table, _mm_and_si128(v, nibble));
                    let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), nibble));
                    // sign-extend bytes to i16 (no pmovsx before SSE4.1): duplicate, shift back
                    a[0] = _mm_add_epi16(a[0], _mm_srai_epi16(_mm_unpacklo_epi8(lo, lo), 8));
                    a[1] = _mm_add_epi16(a[1], _mm_srai_epi16(_mm_unpackhi_epi8(lo, lo), 8));
                    a[2] = _mm_add_epi16(a[2], _mm_srai_epi16(_mm_unpacklo_epi8(hi, hi), 8));
                    a[3] = _mm_add_epi16(a[3], _mm_srai_epi16(_mm_unpackhi_epi8(hi, hi), 8));
                }
            }
        }
        for (k, v) in a.into_iter().enumerate() {
            widen_into(acc, 8 * k, lanes(v), bits - 1);
        }
    }
}

crate::lut::define_run!("ssse3");
