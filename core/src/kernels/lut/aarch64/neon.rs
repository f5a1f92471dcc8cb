//! NEON: `tbl` (vqtbl1q) per 16-byte chunk; a plane pair folds with a pairwise
//! add-accumulate plus a shift-right-accumulate of the odd bytes (even + 2·odd); several
//! tokens' tables per weight load at prefill (`tile_group_n`).

use core::arch::aarch64::*;

use crate::{Block64, Interleave, TILE_ROWS};

#[inline(always)]
fn widen_into(acc: &mut [i32; TILE_ROWS], row: usize, v: int16x8_t, shift: usize) {
    let mut lanes = [0i16; 8];
    // SAFETY: NEON is enabled for this target (compile-time); `lanes` holds 8 i16.
    unsafe { vst1q_s16(lanes.as_mut_ptr(), v) };
    for (i, x) in lanes.into_iter().enumerate() {
        acc[row + i] += (x as i32) << shift;
    }
}

/// # Safety
/// NEON must be available (it is on every aarch64 target with `neon`); `w` is one
/// tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "neon")]
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
/// NEON must be available; `w` is one tile-group of a layout with `quads[t].len()` quads,
/// the same for every token.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, acc: &mut [[i32; TILE_ROWS]; N]) {
    let bits = bits as usize;
    let n_quads = quads[0].len();
    debug_assert!(quads.iter().all(|q| q.len() == n_quads));
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * n_quads * bits / 8);
    let tables = quads.map(|q| q.as_ptr().cast::<i8>());
    let nibble = vdupq_n_u8(0x0f);
    let mut p = w.as_ptr();
    // a pair's bytes run quad by quad, each quad's two halves (rows 0..16, 16..32) of four
    // 16-byte chunks; one half at a time keeps two i16 accumulators per token
    let pair_bytes = n_quads * 2 * 4 * 16;
    for pair in 0..bits / 2 {
        for half in 0..2 {
            // per token: rows 16·half + 0..8, + 8..16 as i16
            let mut a = [[vdupq_n_s16(0); 2]; N];
            for quad in 0..n_quads {
                for lane in 0..4 {
                    // SAFETY: every token's tables hold `n_quads` 64-byte blocks; the offset
                    // stays inside pair `pair`'s bytes of `w`.
                    unsafe {
                        let v = vld1q_u8(p.add(pair * pair_bytes + ((quad * 2 + half) * 4 + lane) * 16));
                        let (i_lo, i_hi) = (vandq_u8(v, nibble), vshrq_n_u8(v, 4));
                        for (a, table) in a.iter_mut().zip(tables) {
                            let table = vld1q_s8(table.add(64 * quad + 16 * lane));
                            let lo = vqtbl1q_s8(table, i_lo);
                            let hi = vqtbl1q_s8(table, i_hi);
                            // even + odd, then + odd again: plane 0 + 2·plane 1 per row
                            a[0] = vsraq_n_s16(vpadalq_s8(a[0], lo), vreinterpretq_s16_s8(lo), 8);
                            a[1] = vsraq_n_s16(vpadalq_s8(a[1], hi), vreinterpretq_s16_s8(hi), 8);
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
        let mut a = [[vdupq_n_s16(0); 4]; N];
        for quad in 0..n_quads {
            for lane in 0..4 {
                // SAFETY: as above.
                unsafe {
                    let v = vld1q_u8(p);
                    p = p.add(16);
                    let (i_lo, i_hi) = (vandq_u8(v, nibble), vshrq_n_u8(v, 4));
                    for (a, table) in a.iter_mut().zip(tables) {
                        let table = vld1q_s8(table.add(64 * quad + 16 * lane));
                        let lo = vqtbl1q_s8(table, i_lo);
                        let hi = vqtbl1q_s8(table, i_hi);
                        a[0] = vaddw_s8(a[0], vget_low_s8(lo));
                        a[1] = vaddw_high_s8(a[1], lo);
                        a[2] = vaddw_s8(a[2], vget_low_s8(hi));
                        a[3] = vaddw_high_s8(a[3], hi);
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

crate::kernels::lut::define_run!("neon");
crate::kernels::lut::define_run_n!("neon");
