//! NEON: `tbl` (vqtbl1q) per 16-byte chunk; a plane pair folds with a pairwise
//! add-accumulate plus a shift-right-accumulate of the odd bytes (even + 2·odd).

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
    let bits = bits as usize;
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * quads.len() * bits / 8);
    let nibble = vdupq_n_u8(0x0f);
    let mut p = w.as_ptr();
    for pair in 0..bits / 2 {
        let mut a = [vdupq_n_s16(0); 4];
        for quad in quads {
            for half in 0..2 {
                for lane in 0..4 {
                    // SAFETY: `quad` is 64 bytes; `p` walks exactly `w`.
                    unsafe {
                        let table = vld1q_s8(quad.0.as_ptr().add(16 * lane).cast());
                        let v = vld1q_u8(p);
                        p = p.add(16);
                        let lo = vqtbl1q_s8(table, vandq_u8(v, nibble));
                        let hi = vqtbl1q_s8(table, vshrq_n_u8(v, 4));
                        // even + odd, then + odd again: plane 0 + 2·plane 1 per row
                        a[2 * half] = vsraq_n_s16(vpadalq_s8(a[2 * half], lo), vreinterpretq_s16_s8(lo), 8);
                        a[2 * half + 1] = vsraq_n_s16(vpadalq_s8(a[2 * half + 1], hi), vreinterpretq_s16_s8(hi), 8);
                    }
                }
            }
        }
        for (k, v) in a.into_iter().enumerate() {
            widen_into(acc, 8 * k, v, 2 * pair);
        }
    }
    if bits % 2 == 1 {
        let mut a = [vdupq_n_s16(0); 4];
        for quad in quads {
            for lane in 0..4 {
                // SAFETY: as above.
                unsafe {
                    let table = vld1q_s8(quad.0.as_ptr().add(16 * lane).cast());
                    let v = vld1q_u8(p);
                    p = p.add(16);
                    let lo = vqtbl1q_s8(table, vandq_u8(v, nibble));
                    let hi = vqtbl1q_s8(table, vshrq_n_u8(v, 4));
                    a[0] = vaddw_s8(a[0], vget_low_s8(lo));
                    a[1] = vaddw_high_s8(a[1], lo);
                    a[2] = vaddw_s8(a[2], vget_low_s8(hi));
                    a[3] = vaddw_high_s8(a[3], hi);
                }
            }
        }
        for (k, v) in a.into_iter().enumerate() {
            widen_into(acc, 8 * k, v, bits - 1);
        }
    }
}

crate::lut::define_run!("neon");
