//! wasm simd128: `i8x16.swizzle` per 16-byte chunk (indices are masked to 0..15, so
//! it agrees with `pshufb`/`tbl`); pairwise extend-add plus the odd bytes again folds
//! a plane pair (even + 2·odd); several tokens' tables per weight load at prefill
//! (`tile_group_n`). Built with `relaxed-simd`, the lookup is
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

/// The 16-byte table at `table` looked up at both halves' indices.
///
/// # Safety
/// `table` points at 16 readable bytes.
#[inline(always)]
unsafe fn lookups(table: *const u8, (lo, hi): (v128, v128)) -> (v128, v128) {
    // SAFETY: the caller's contract.
    let table = unsafe { v128_load(table.cast()) };
    (lookup(table, lo), lookup(table, hi))
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
    // SAFETY: the caller's contract.
    unsafe { tile_group_n(w, [quads], bits, core::array::from_mut(acc)) }
}

/// The integer sums of one tile-group for N tokens' tables: each 16 weight bytes are
/// loaded and split into indices once for all N; integer sums, so each token's do not
/// depend on N.
///
/// # Safety
/// simd128 must be enabled (compile time); `w` is one tile-group of a layout with
/// `quads[t].len()` quads, the same for every token.
#[target_feature(enable = "simd128")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, acc: &mut [[i32; TILE_ROWS]; N]) {
    let bits = bits as usize;
    let n_quads = quads[0].len();
    debug_assert!(quads.iter().all(|q| q.len() == n_quads));
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * n_quads * bits / 8);
    let tables = quads.map(|q| q.as_ptr().cast::<u8>());
    let nibble = u8x16_splat(0x0f);
    let fold = |x: v128| i16x8_add(i16x8_extadd_pairwise_i8x16(x), i16x8_shr(x, 8));
    let mut p = w.as_ptr();
    // a pair's bytes run quad by quad, each quad's two halves (rows 0..16, 16..32) of four
    // 16-byte chunks; one half at a time keeps two i16 accumulators per token
    let pair_bytes = n_quads * 2 * 4 * 16;
    for pair in 0..bits / 2 {
        for half in 0..2 {
            // per token: rows 16·half + 0..8, + 8..16 as i16
            let mut a = [[i16x8_splat(0); 2]; N];
            for quad in 0..n_quads {
                for lane in 0..4 {
                    // SAFETY: every token's tables hold `n_quads` 64-byte blocks; the offset
                    // stays inside pair `pair`'s bytes of `w`.
                    unsafe {
                        let v = v128_load(p.add(pair * pair_bytes + ((quad * 2 + half) * 4 + lane) * 16).cast());
                        let indices = (v128_and(v, nibble), u8x16_shr(v, 4));
                        for (a, table) in a.iter_mut().zip(tables) {
                            let (lo, hi) = lookups(table.add(64 * quad + 16 * lane), indices);
                            a[0] = i16x8_add(a[0], fold(lo));
                            a[1] = i16x8_add(a[1], fold(hi));
                        }
                    }
                }
            }
            for (acc, a) in acc.iter_mut().zip(a) {
                for (k, v) in a.into_iter().enumerate() {
                    widen_into(acc, 16 * half + 8 * k, v, 2 * pair);
                }
            }
        }
    }
    // SAFETY: the pairs' bytes come first in `w`.
    p = unsafe { p.add(bits / 2 * pair_bytes) };
    if bits % 2 == 1 {
        let mut a = [[i16x8_splat(0); 4]; N];
        for quad in 0..n_quads {
            for lane in 0..4 {
                // SAFETY: as above.
                unsafe {
                    let v = v128_load(p.cast());
                    p = p.add(16);
                    let indices = (v128_and(v, nibble), u8x16_shr(v, 4));
                    for (a, table) in a.iter_mut().zip(tables) {
                        let (lo, hi) = lookups(table.add(64 * quad + 16 * lane), indices);
                        a[0] = i16x8_add(a[0], i16x8_extend_low_i8x16(lo));
                        a[1] = i16x8_add(a[1], i16x8_extend_high_i8x16(lo));
                        a[2] = i16x8_add(a[2], i16x8_extend_low_i8x16(hi));
                        a[3] = i16x8_add(a[3], i16x8_extend_high_i8x16(hi));
                    }
                }
            }
        }
        for (acc, a) in acc.iter_mut().zip(a) {
            for (k, v) in a.into_iter().enumerate() {
                widen_into(acc, 8 * k, v, bits - 1);
            }
        }
    }
}

crate::kernels::lut::define_run!("simd128");
crate::kernels::lut::define_run_n!("simd128");
