//! SSSE3: one `pshufb` of a sub-space's 16-entry table per 16 code bytes for the low
//! nibbles (keys 0..16) and one for the high nibbles (keys 16..32).

use core::arch::x86_64::*;

use crate::pq::scan::{block_bytes16, BLOCK_KEYS};

/// Adds 16 looked-up bytes into `a` (as u16 pairs: even + 256·odd) and their odd bytes
/// into `b`. `a − (b << 8)` is then the even bytes' sum, exact modulo 2^16.
#[target_feature(enable = "ssse3")]
#[inline]
fn add_bytes(a: &mut __m128i, b: &mut __m128i, x: __m128i) {
    *a = _mm_add_epi16(*a, x);
    *b = _mm_add_epi16(*b, _mm_srli_epi16(x, 8));
}

/// The 16 sums of (a, b) in key order, stored to `out[..16]`.
#[target_feature(enable = "ssse3")]
#[inline]
fn store_keys(out: &mut [u16], a: __m128i, b: __m128i) {
    let even = _mm_sub_epi16(a, _mm_slli_epi16(b, 8));
    let keys = [_mm_unpacklo_epi16(even, b), _mm_unpackhi_epi16(even, b)];
    for (k, v) in keys.into_iter().enumerate() {
        let dst = out[8 * k..8 * k + 8].as_mut_ptr().cast::<__m128i>();
        // SAFETY: `dst` points at 8 u16 inside `out`.
        unsafe { _mm_storeu_si128(dst, v) };
    }
}

/// # Safety
/// The CPU must support SSSE3; `codes` is whole blocks of `block_bytes16(subspaces)`,
/// `tables` is `16 · subspaces` bytes and `out` has 32 entries per block.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 16 * subspaces);
    let nibble = _mm_set1_epi8(0x0f);
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let zero = _mm_setzero_si128();
        let (mut a_lo, mut b_lo, mut a_hi, mut b_hi) = (zero, zero, zero, zero);
        // 16 code bytes of sub-space s sit at 16s, like its table
        for (c, t) in block.chunks_exact(16).zip(tables.chunks_exact(16)) {
            // SAFETY: `c` and `t` are 16 readable bytes each.
            let (v, table) = unsafe { (_mm_loadu_si128(c.as_ptr().cast()), _mm_loadu_si128(t.as_ptr().cast())) };
            let lo = _mm_shuffle_epi8(table, _mm_and_si128(v, nibble));
            let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), nibble));
            add_bytes(&mut a_lo, &mut b_lo, lo);
            add_bytes(&mut a_hi, &mut b_hi, hi);
        }
        store_keys(&mut scores[..16], a_lo, b_lo);
        store_keys(&mut scores[16..], a_hi, b_hi);
    }
}
