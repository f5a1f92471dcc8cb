//! SSSE3: one `pshufb` of a sub-space's 16-entry table per 16 code bytes for the low
//! nibbles (keys 0..16) and one for the high nibbles (keys 16..32); 8-bit codes by
//! sixteen `pshufb` of `diff_tables` chunks per 16 codes.

use core::arch::x86_64::*;

use super::SCAN_PREFETCH_BYTES;
use crate::kernels::pq_scan::{block_bytes16, block_bytes256, diff_tables, BLOCK_KEYS, DIFF_SUBSPACES};

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

/// K = 256: as the AVX2 kernel, 16 keys per register (`diff_tables` has the method).
///
/// # Safety
/// The CPU must support SSSE3; `codes` holds whole 8-bit blocks of `subspaces`
/// sub-spaces, `tables` is `256 · subspaces` bytes, `out` 32 entries per block.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn scan256(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert!(tables.len() == 256 * subspaces);
    let block_bytes = block_bytes256(subspaces);
    let mut diff = [[0u8; 256]; DIFF_SUBSPACES];
    for first in (0..subspaces).step_by(DIFF_SUBSPACES) {
        let count = DIFF_SUBSPACES.min(subspaces - first);
        for (d, t) in diff.iter_mut().zip(tables[256 * first..][..256 * count].as_chunks::<256>().0) {
            diff_tables(t, d);
        }
        for (block, scores) in codes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
            let zero = _mm_setzero_si128();
            let mut acc = [(zero, zero); 2];
            let rows = &block[BLOCK_KEYS * first..][..BLOCK_KEYS * count];
            let ahead = rows.as_ptr().wrapping_add(SCAN_PREFETCH_BYTES);
            for (i, (row, d)) in rows.chunks_exact(BLOCK_KEYS).zip(&diff).enumerate() {
                if i % 2 == 0 {
                    // a prefetch never faults: past the end of `codes` it asks for nothing useful
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(BLOCK_KEYS * i).cast());
                }
                for (half, (a, b)) in acc.iter_mut().enumerate() {
                    // SAFETY: `row` is 32 bytes.
                    let codes = unsafe { _mm_loadu_si128(row.as_ptr().add(16 * half).cast()) };
                    add_bytes(a, b, lookup256(d, codes));
                }
            }
            for (half, (a, b)) in acc.into_iter().enumerate() {
                let keys = &mut scores[16 * half..][..16];
                if first == 0 {
                    store_keys(keys, a, b);
                } else {
                    let mut sums = [0u16; 16];
                    store_keys(&mut sums, a, b);
                    for (k, s) in keys.iter_mut().zip(sums) {
                        *k = k.wrapping_add(s);
                    }
                }
            }
        }
    }
}

/// The 16 entries of `diff` (a `diff_tables` table) at the 16 byte `codes`.
#[target_feature(enable = "ssse3")]
#[inline]
fn lookup256(diff: &[u8; 256], codes: __m128i) -> __m128i {
    // SAFETY: chunk k (k < 16) is 16 bytes inside `diff`.
    let chunk = |k: usize| unsafe { _mm_loadu_si128(diff.as_ptr().add(16 * k).cast()) };
    // codes of the upper half with bit 7 cleared, the lower half's set
    let upper = _mm_xor_si128(codes, _mm_set1_epi8(i8::MIN));
    let mut sum = [_mm_setzero_si128(); 2];
    for (half, c) in [codes, upper].into_iter().enumerate() {
        for k in 0..8 {
            let index = _mm_adds_epu8(c, _mm_set1_epi8((0x70 - 16 * k) as i8));
            sum[half] = _mm_xor_si128(sum[half], _mm_shuffle_epi8(chunk(8 * half + k), index));
        }
    }
    _mm_xor_si128(sum[0], sum[1])
}
