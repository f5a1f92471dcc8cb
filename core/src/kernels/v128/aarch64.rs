//! NEON: `tbl` (vqtbl1q); a plane pair folds with a pairwise add-accumulate plus a
//! shift-right-accumulate of the odd bytes (even + 2·odd); bytes widen with `saddw` (`uaddw` into unsigned sums).

use core::arch::aarch64::*;

use super::Shuffle128;

pub(crate) struct Neon;

impl Shuffle128 for Neon {
    type Bytes = int8x16_t;
    type I16x8 = int16x8_t;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> int8x16_t {
        // SAFETY: the caller's contract (16 readable bytes; NEON is baseline on aarch64).
        unsafe { vld1q_s8(p.cast()) }
    }

    #[inline(always)]
    unsafe fn load_aligned(p: *const u8) -> int8x16_t {
        // SAFETY: as `load`; NEON loads take any alignment.
        unsafe { vld1q_s8(p.cast()) }
    }

    #[inline(always)]
    unsafe fn nibbles(v: int8x16_t) -> (int8x16_t, int8x16_t) {
        // SAFETY: NEON (the trait's contract).
        unsafe {
            let v = vreinterpretq_u8_s8(v);
            (vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))), vreinterpretq_s8_u8(vshrq_n_u8(v, 4)))
        }
    }

    #[inline(always)]
    unsafe fn lookup(table: int8x16_t, index: int8x16_t) -> int8x16_t {
        // SAFETY: NEON (the trait's contract).
        unsafe { vqtbl1q_s8(table, vreinterpretq_u8_s8(index)) }
    }

    #[inline(always)]
    unsafe fn zero_i16() -> int16x8_t {
        // SAFETY: NEON (the trait's contract).
        unsafe { vdupq_n_s16(0) }
    }

    #[inline(always)]
    unsafe fn add_plane_pairs(acc: int16x8_t, x: int8x16_t) -> int16x8_t {
        // even + odd, then + odd again
        // SAFETY: NEON (the trait's contract).
        unsafe { vsraq_n_s16(vpadalq_s8(acc, x), vreinterpretq_s16_s8(x), 8) }
    }

    #[inline(always)]
    unsafe fn add_low_i8(acc: int16x8_t, x: int8x16_t) -> int16x8_t {
        // SAFETY: NEON (the trait's contract).
        unsafe { vaddw_s8(acc, vget_low_s8(x)) }
    }

    #[inline(always)]
    unsafe fn add_high_i8(acc: int16x8_t, x: int8x16_t) -> int16x8_t {
        // SAFETY: NEON (the trait's contract).
        unsafe { vaddw_high_s8(acc, x) }
    }

    #[inline(always)]
    unsafe fn i16_lanes(v: int16x8_t) -> [i16; 8] {
        let mut lanes = [0i16; 8];
        // SAFETY: `lanes` holds 8 i16.
        unsafe { vst1q_s16(lanes.as_mut_ptr(), v) };
        lanes
    }

    type KeySums = [uint16x8_t; 2];

    #[inline(always)]
    unsafe fn key_sums_zero() -> [uint16x8_t; 2] {
        // SAFETY: NEON (the trait's contract).
        unsafe { [vdupq_n_u16(0); 2] }
    }

    #[inline(always)]
    unsafe fn add_key_bytes([lo, hi]: [uint16x8_t; 2], x: int8x16_t) -> [uint16x8_t; 2] {
        // SAFETY: NEON (the trait's contract).
        unsafe {
            let x = vreinterpretq_u8_s8(x);
            [vaddw_u8(lo, vget_low_u8(x)), vaddw_high_u8(hi, x)]
        }
    }

    #[inline(always)]
    unsafe fn store_key_sums(sums: [uint16x8_t; 2], out: &mut [u16; 16]) {
        // SAFETY: NEON (the trait's contract); each store writes 8 u16 inside `out`.
        unsafe {
            vst1q_u16(out.as_mut_ptr(), sums[0]);
            vst1q_u16(out.as_mut_ptr().add(8), sums[1]);
        }
    }
}
