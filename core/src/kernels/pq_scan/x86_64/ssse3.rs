//! SSSE3: 4-bit codes by `shuffle128::scan16`; 8-bit codes by sixteen `pshufb` of
//! `diff_tables` chunks per 16 codes.

use core::arch::x86_64::*;

use super::SCAN_PREFETCH_BYTES;
use crate::kernels::pq_scan::{block_bytes256, diff_tables, shuffle128, BLOCK_KEYS, DIFF_SUBSPACES};
use crate::kernels::v128::{Shuffle128, Ssse3};

/// `shuffle128::scan16` compiled for SSSE3.
///
/// # Safety
/// The CPU must support SSSE3; `codes` is whole blocks of `block_bytes16(subspaces)`,
/// `tables` is `16 · subspaces` bytes and `out` has 32 entries per block.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    // SAFETY: the caller's contract; SSSE3 is enabled here.
    unsafe { shuffle128::scan16::<Ssse3>(codes, subspaces, tables, out) }
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
            // SAFETY: SSSE3 is enabled here.
            let mut acc = unsafe { [Ssse3::key_sums_zero(); 2] };
            let rows = &block[BLOCK_KEYS * first..][..BLOCK_KEYS * count];
            let ahead = rows.as_ptr().wrapping_add(SCAN_PREFETCH_BYTES);
            for (i, (row, d)) in rows.chunks_exact(BLOCK_KEYS).zip(&diff).enumerate() {
                if i % 2 == 0 {
                    // a prefetch never faults: past the end of `codes` it asks for nothing useful
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(BLOCK_KEYS * i).cast());
                }
                for (half, sums) in acc.iter_mut().enumerate() {
                    // SAFETY: `row` is 32 bytes; SSSE3 is enabled here.
                    unsafe {
                        let codes = _mm_loadu_si128(row.as_ptr().add(16 * half).cast());
                        *sums = Ssse3::add_key_bytes(*sums, lookup256(d, codes));
                    }
                }
            }
            for (sums, keys) in acc.into_iter().zip(scores.as_chunks_mut::<16>().0) {
                if first == 0 {
                    // SAFETY: SSSE3 is enabled here.
                    unsafe { Ssse3::store_key_sums(sums, keys) };
                } else {
                    let mut part = [0u16; 16];
                    // SAFETY: as above.
                    unsafe { Ssse3::store_key_sums(sums, &mut part) };
                    for (k, s) in keys.iter_mut().zip(part) {
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
