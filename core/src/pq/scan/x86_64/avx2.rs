//! AVX2: one 32-byte chunk (two sub-spaces) per `vpshufb`, with the two sub-spaces'
//! tables in the two 128-bit lanes; the lanes are summed once per block.

use core::arch::x86_64::*;

use crate::pq::scan::{block_bytes16, BLOCK_KEYS};

/// Adds 32 looked-up bytes into `a` (as u16 pairs: even + 256·odd) and their odd bytes
/// into `b`. `a − (b << 8)` is then the even bytes' sum, exact modulo 2^16.
#[target_feature(enable = "avx2")]
#[inline]
fn add_bytes(a: &mut __m256i, b: &mut __m256i, x: __m256i) {
    *a = _mm256_add_epi16(*a, x);
    *b = _mm256_add_epi16(*b, _mm256_srli_epi16(x, 8));
}

/// The 16 sums of (a, b) in key order, the two lanes added, stored to `out[..16]`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn store_keys(out: &mut [u16], a: __m256i, b: __m256i) {
    let even = _mm256_sub_epi16(a, _mm256_slli_epi16(b, 8));
    // per lane: keys 0..8 and 8..16 of that lane's sub-spaces
    let x = _mm256_unpacklo_epi16(even, b);
    let y = _mm256_unpackhi_epi16(even, b);
    let keys = _mm256_add_epi16(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
    let dst = out[..16].as_mut_ptr().cast::<__m256i>();
    // SAFETY: `dst` points at 16 u16 inside `out`.
    unsafe { _mm256_storeu_si256(dst, keys) };
}

/// # Safety
/// The CPU must support AVX2; `codes` is whole blocks of `block_bytes16(subspaces)`,
/// `tables` is `16 · subspaces` bytes and `out` has 32 entries per block.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 16 * subspaces);
    let nibble = _mm256_set1_epi8(0x0f);
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let zero = _mm256_setzero_si256();
        let (mut a_lo, mut b_lo, mut a_hi, mut b_hi) = (zero, zero, zero, zero);
        // chunk p (sub-spaces 2p, 2p + 1) and tables 2p, 2p + 1 are both 32 bytes at 32p
        for (c, t) in block.chunks_exact(32).zip(tables.chunks_exact(32)) {
            // SAFETY: `c` and `t` are 32 readable bytes each.
            let (v, table) = unsafe { (_mm256_loadu_si256(c.as_ptr().cast()), _mm256_loadu_si256(t.as_ptr().cast())) };
            let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, nibble));
            let hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
            add_bytes(&mut a_lo, &mut b_lo, lo);
            add_bytes(&mut a_hi, &mut b_hi, hi);
        }
        store_keys(&mut scores[..16], a_lo, b_lo);
        store_keys(&mut scores[16..], a_hi, b_hi);
    }
}
