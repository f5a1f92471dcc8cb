//! AVX-512BW: two 32-byte chunks (four sub-spaces) per `vpshufb`, one table per
//! 128-bit lane; an odd chunk count ends with the last chunk zero-extended (its upper
//! tables are zero, so the upper lanes look up zeros).

use core::arch::x86_64::*;

use crate::kernels::pq_scan::{block_bytes16, BLOCK_KEYS};

/// Adds 64 looked-up bytes into `a` (as u16 pairs: even + 256·odd) and their odd bytes
/// into `b`. `a − (b << 8)` is then the even bytes' sum, exact modulo 2^16.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn add_bytes(a: &mut __m512i, b: &mut __m512i, x: __m512i) {
    *a = _mm512_add_epi16(*a, x);
    *b = _mm512_add_epi16(*b, _mm512_srli_epi16(x, 8));
}

/// Lookups of 64 code bytes in four tables (one per lane).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn lookup(table: __m512i, v: __m512i, nibble: __m512i) -> (__m512i, __m512i) {
    let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, nibble));
    let hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
    (lo, hi)
}

/// The 16 sums of (a, b) in key order, four lanes added, stored to `out[..16]`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn store_keys(out: &mut [u16], a: __m512i, b: __m512i) {
    let fold = |x: __m512i| _mm256_add_epi16(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
    // the two 256-bit halves hold the same keys of other sub-spaces: modular sums stay exact
    super::avx2::store_keys(out, fold(a), fold(b));
}

/// # Safety
/// The CPU must support AVX-512 F and BW; `codes` is whole blocks of
/// `block_bytes16(subspaces)`, `tables` is `16 · subspaces` bytes and `out` has 32
/// entries per block.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 16 * subspaces);
    let nibble = _mm512_set1_epi8(0x0f);
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let zero = _mm512_setzero_si512();
        let (mut a_lo, mut b_lo, mut a_hi, mut b_hi) = (zero, zero, zero, zero);
        // chunks 2q, 2q + 1 (sub-spaces 4q..4q + 4) and their tables: 64 bytes at 64q
        for (c, t) in block.chunks_exact(64).zip(tables.chunks_exact(64)) {
            // SAFETY: `c` and `t` are 64 readable bytes each.
            let (v, table) = unsafe { (_mm512_loadu_si512(c.as_ptr().cast()), _mm512_loadu_si512(t.as_ptr().cast())) };
            let (lo, hi) = lookup(table, v, nibble);
            add_bytes(&mut a_lo, &mut b_lo, lo);
            add_bytes(&mut a_hi, &mut b_hi, hi);
        }
        // an odd number of chunks: the last one (`block` and `tables` have the same length)
        if !block.len().is_multiple_of(64) {
            let (c, t) = (&block[block.len() - 32..], &tables[tables.len() - 32..]);
            // SAFETY: `c` and `t` are 32 readable bytes each.
            let (v, table) = unsafe { (_mm256_loadu_si256(c.as_ptr().cast()), _mm256_loadu_si256(t.as_ptr().cast())) };
            let (lo, hi) = lookup(_mm512_zextsi256_si512(table), _mm512_zextsi256_si512(v), nibble);
            add_bytes(&mut a_lo, &mut b_lo, lo);
            add_bytes(&mut a_hi, &mut b_hi, hi);
        }
        store_keys(&mut scores[..16], a_lo, b_lo);
        store_keys(&mut scores[16..], a_hi, b_hi);
    }
}
