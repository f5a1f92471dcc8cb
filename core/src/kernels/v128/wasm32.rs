//! wasm simd128: `i8x16.swizzle` (indices are masked to 0..15, so it agrees with
//! `pshufb`/`tbl`); built with `relaxed-simd`, `i8x16.relaxed_swizzle`, which engines lower
//! to a bare `pshufb`/`tbl` (plain swizzle adds an instruction to zero indices ≥ 16): the
//! same result, as indices are < 16. A plane pair folds as pairwise extend-add plus the
//! odd bytes again (even + 2·odd). Bytes add into u16 sums as SSSE3's do (pairs in one
//! register, odd bytes in another).

use core::arch::wasm32::*;

use super::Shuffle128;

pub(crate) struct Simd128;

impl Shuffle128 for Simd128 {
    type Bytes = v128;
    type I16x8 = v128;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> v128 {
        // SAFETY: the caller's contract (16 readable bytes; wasm loads take any alignment).
        unsafe { v128_load(p.cast()) }
    }

    #[inline(always)]
    unsafe fn load_aligned(p: *const u8) -> v128 {
        // SAFETY: as `load`.
        unsafe { v128_load(p.cast()) }
    }

    #[inline(always)]
    unsafe fn nibbles(v: v128) -> (v128, v128) {
        (v128_and(v, u8x16_splat(0x0f)), u8x16_shr(v, 4))
    }

    #[inline(always)]
    unsafe fn lookup(table: v128, index: v128) -> v128 {
        #[cfg(target_feature = "relaxed-simd")]
        return i8x16_relaxed_swizzle(table, index);
        #[cfg(not(target_feature = "relaxed-simd"))]
        return i8x16_swizzle(table, index);
    }

    #[inline(always)]
    unsafe fn zero_i16() -> v128 {
        i16x8_splat(0)
    }

    #[inline(always)]
    unsafe fn add_plane_pairs(acc: v128, x: v128) -> v128 {
        i16x8_add(acc, i16x8_add(i16x8_extadd_pairwise_i8x16(x), i16x8_shr(x, 8)))
    }

    #[inline(always)]
    unsafe fn add_low_i8(acc: v128, x: v128) -> v128 {
        i16x8_add(acc, i16x8_extend_low_i8x16(x))
    }

    #[inline(always)]
    unsafe fn add_high_i8(acc: v128, x: v128) -> v128 {
        i16x8_add(acc, i16x8_extend_high_i8x16(x))
    }

    #[inline(always)]
    unsafe fn i16_lanes(v: v128) -> [i16; 8] {
        [
            i16x8_extract_lane::<0>(v),
            i16x8_extract_lane::<1>(v),
            i16x8_extract_lane::<2>(v),
            i16x8_extract_lane::<3>(v),
            i16x8_extract_lane::<4>(v),
            i16x8_extract_lane::<5>(v),
            i16x8_extract_lane::<6>(v),
            i16x8_extract_lane::<7>(v),
        ]
    }

    type KeySums = (v128, v128);

    #[inline(always)]
    unsafe fn key_sums_zero() -> (v128, v128) {
        (u8x16_splat(0), u8x16_splat(0))
    }

    #[inline(always)]
    unsafe fn add_key_bytes((a, b): (v128, v128), x: v128) -> (v128, v128) {
        (i16x8_add(a, x), i16x8_add(b, u16x8_shr(x, 8)))
    }

    #[inline(always)]
    unsafe fn store_key_sums((a, b): (v128, v128), out: &mut [u16; 16]) {
        let even = i16x8_sub(a, i16x8_shl(b, 8));
        // SAFETY: each store writes 8 u16 inside `out` (v128_store takes unaligned pointers).
        unsafe {
            v128_store(out.as_mut_ptr().cast(), i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(even, b));
            v128_store(out.as_mut_ptr().add(8).cast(), i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(even, b));
        }
    }
}
