//! SSSE3: `pshufb`; a plane pair folds with `pmaddubsw` against bytes 1, 2; bytes widen
//! by duplicating them into both halves of a lane and shifting back (no `pmovsx`
//! before SSE4.1). Bytes add into u16 sums as pairs (even + 256·odd) in one register and
//! the odd bytes alone in another; the even bytes' sums are then `a − (b << 8)`, exact
//! modulo 2^16.

use core::arch::x86_64::*;

use super::Shuffle128;

pub(crate) struct Ssse3;

impl Shuffle128 for Ssse3 {
    type Bytes = __m128i;
    type I16x8 = __m128i;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m128i {
        // SAFETY: the caller's contract (16 readable bytes; SSE2 is baseline on x86-64).
        unsafe { _mm_loadu_si128(p.cast()) }
    }

    #[inline(always)]
    unsafe fn load_aligned(p: *const u8) -> __m128i {
        // SAFETY: the caller's contract (16 readable, aligned bytes).
        unsafe { _mm_load_si128(p.cast()) }
    }

    #[inline(always)]
    unsafe fn nibbles(v: __m128i) -> (__m128i, __m128i) {
        // SAFETY: SSE2 (the trait's contract).
        unsafe {
            let nibble = _mm_set1_epi8(0x0f);
            (_mm_and_si128(v, nibble), _mm_and_si128(_mm_srli_epi16(v, 4), nibble))
        }
    }

    #[inline(always)]
    unsafe fn lookup(table: __m128i, index: __m128i) -> __m128i {
        // SAFETY: the caller runs with SSSE3 enabled (the trait's contract).
        unsafe { _mm_shuffle_epi8(table, index) }
    }

    #[inline(always)]
    unsafe fn zero_i16() -> __m128i {
        // SAFETY: SSE2 (the trait's contract).
        unsafe { _mm_setzero_si128() }
    }

    #[inline(always)]
    unsafe fn add_plane_pairs(acc: __m128i, x: __m128i) -> __m128i {
        // SAFETY: as `lookup`.
        unsafe { _mm_add_epi16(acc, _mm_maddubs_epi16(_mm_set1_epi16(0x0201), x)) }
    }

    #[inline(always)]
    unsafe fn add_low_i8(acc: __m128i, x: __m128i) -> __m128i {
        // SAFETY: SSE2 (the trait's contract).
        unsafe { _mm_add_epi16(acc, _mm_srai_epi16(_mm_unpacklo_epi8(x, x), 8)) }
    }

    #[inline(always)]
    unsafe fn add_high_i8(acc: __m128i, x: __m128i) -> __m128i {
        // SAFETY: SSE2 (the trait's contract).
        unsafe { _mm_add_epi16(acc, _mm_srai_epi16(_mm_unpackhi_epi8(x, x), 8)) }
    }

    #[inline(always)]
    unsafe fn i16_lanes(v: __m128i) -> [i16; 8] {
        // SAFETY: __m128i and [i16; 8] have the same size; every bit pattern is valid.
        unsafe { core::mem::transmute(v) }
    }

    type KeySums = (__m128i, __m128i);

    #[inline(always)]
    unsafe fn key_sums_zero() -> (__m128i, __m128i) {
        // SAFETY: SSE2 (the trait's contract).
        unsafe { (_mm_setzero_si128(), _mm_setzero_si128()) }
    }

    #[inline(always)]
    unsafe fn add_key_bytes((a, b): (__m128i, __m128i), x: __m128i) -> (__m128i, __m128i) {
        // SAFETY: SSE2 (the trait's contract).
        unsafe { (_mm_add_epi16(a, x), _mm_add_epi16(b, _mm_srli_epi16(x, 8))) }
    }

    #[inline(always)]
    unsafe fn store_key_sums((a, b): (__m128i, __m128i), out: &mut [u16; 16]) {
        // SAFETY: SSE2 (the trait's contract); each store writes 8 u16 inside `out`.
        unsafe {
            let even = _mm_sub_epi16(a, _mm_slli_epi16(b, 8));
            _mm_storeu_si128(out.as_mut_ptr().cast(), _mm_unpacklo_epi16(even, b));
            _mm_storeu_si128(out.as_mut_ptr().add(8).cast(), _mm_unpackhi_epi16(even, b));
        }
    }
}
