//! wasm simd128: `i8x16.swizzle` per 16-byte chunk (indices are masked to 0..15, so
//! it agrees with `pshufb`/`tbl`); pairwise extend-add plus the odd bytes again folds
//! a plane pair (even + 2·odd). Built with `relaxed-simd`, the lookup is
//! `i8x16.relaxed_swizzle`, which engines lower to a bare `pshufb`/`tbl` (plain swizzle
//! adds an instruction to zero indices ≥ 16): the same result, as indices are < 16.

use core::arch::wasm32::*;

use crate::{Block64, Interleave, TILE_ROWS};

/// `table[index]` per byte, for indices 0..15.
#[inline(always)]
fn lookup(table: v128, index: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    return i8x16_relaxed_swizzle(table, index);
    #[cfg(not(target_feature = "relaxed-simd"))]
    return i8x16_swizzle(table, index);
}

#[inline(always)]
fn widen_into(acc: &mut [i32; TILE_ROWS], row: usize, v: v128, shift: usize) {
    let lanes = [
        i16x8_extract_lane::<0>(v),
        i16x8_extract_lane::<1>(v),
        i16x8_extract_lane::<2>(v),
        i16x8_extract_lane::<3>(v),
        i16x8_extract_lane::<4>(v),
        i16x8_extract_lane::<5>(v),
        i16x8_extract_lane::<6>(v),
        i16x8_extract_lane::<7>(v),
    ];
    for (i, x) in lanes.into_iter().enumerate() {
        acc[row + i] += (x as i32) << shift;
    }
}

/// # Safety
/// simd128 must be enabled (compile time); `w` is one tile-group of a layout with
/// `quads.len()` quads.
#[target_feature(enable = "simd128")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    let bits = bits as usize;
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * quads.len() * bits / 8);
    let nibble = u8x16_splat(0x0f);
    let mut p = w.as_ptr();
    for pair in 0..bits / 2 {
        let mut a = [i16x8_splat(0); 4];
        for quad in quads {
            for half in 0..2 {
                for lane in 0..4 {
                    // SAFETY: `quad` is 64 bytes; `p` walks exactly `w`.
                    let (table, v) = unsafe {
                        let t = v128_load(quad.0.as_ptr().add(16 * lane).cast());
                        let v = v128_load(p.cast());
                        p = p.add(16);
                        (t, v)
                    };
                    let lo = lookup(table, v128_and(v, nibble));
                    let hi = lookup(table, u8x16_shr(v, 4));
                    let fold = |x: v128| i16x8_add(i16x8_extadd_pairwise_i8x16(x), i16x8_shr(x, 8));
                    a[2 * half] = i16x8_add(a[2 * half], fold(lo));
                    a[2 * half + 1] = i16x8_add(a[2 * half + 1], fold(hi));
                }
            }
        }
        for (k, v) in a.into_iter().enumerate() {
            widen_into(acc, 8 * k, v, 2 * pair);
        }
    }
    if bits % 2 == 1 {
        let mut a = [i16x8_splat(0); 4];
        for quad in quads {
            for lane in 0..4 {
                // SAFETY: as above.
                let (table, v) = unsafe {
                    let t = v128_load(quad.0.as_ptr().add(16 * lane).cast());
                    let v = v128_load(p.cast());
                    p = p.add(16);
                    (t, v)
                };
                let lo = lookup(table, v128_and(v, nibble));
                let hi = lookup(table, u8x16_shr(v, 4));
                a[0] = i16x8_add(a[0], i16x8_extend_low_i8x16(lo));
                a[1] = i16x8_add(a[1], i16x8_extend_high_i8x16(lo));
                a[2] = i16x8_add(a[2], i16x8_extend_low_i8x16(hi));
                a[3] = i16x8_add(a[3], i16x8_extend_high_i8x16(hi));
            }
        }
        for (k, v) in a.into_iter().enumerate() {
            widen_into(acc, 8 * k, v, bits - 1);
        }
    }
}

crate::lut::define_run!("simd128");
