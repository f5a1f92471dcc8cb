//! AVX2: one 32-byte chunk (two sub-spaces) per `vpshufb`, with the two sub-spaces'
//! tables in the two 128-bit lanes; the lanes are summed once per block.

use core::arch::x86_64::*;

use super::SCAN_PREFETCH_BYTES;
use crate::kernels::pq_scan::{block_bytes16, block_bytes256, diff_tables, BLOCK_KEYS, DIFF_SUBSPACES, SCAN_HEADS};

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
    let block_bytes = block_bytes16(subspaces);
    for (block, scores) in codes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let zero = _mm256_setzero_si256();
        let (mut a_lo, mut b_lo, mut a_hi, mut b_hi) = (zero, zero, zero, zero);
        let ahead = block.as_ptr().wrapping_add(SCAN_PREFETCH_BYTES);
        // chunk p (sub-spaces 2p, 2p + 1) and tables 2p, 2p + 1 are both 32 bytes at 32p
        for (i, (c, t)) in block.chunks_exact(32).zip(tables.chunks_exact(32)).enumerate() {
            if i % 2 == 0 {
                // a prefetch never faults: past the end of `codes` it asks for nothing useful
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(32 * i).cast());
            }
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

/// K = 256 with byte shuffles over `diff_tables` (its doc has the method): three
/// instructions per 16-entry chunk and 32 keys, against a gather per 8 lookups that
/// measured slower (bench/results/journal-2026-11-29-to-2026-12-06.md, "pq256 by byte shuffles on SSSE3 and AVX2").
///
/// # Safety
/// AVX2 must be available; `codes` holds whole 8-bit blocks of `subspaces` sub-spaces,
/// `tables` is `256 · subspaces` bytes, `out` 32 entries per block.
#[target_feature(enable = "avx2")]
pub unsafe fn scan256(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert!(tables.len() == 256 * subspaces);
    let block_bytes = block_bytes256(subspaces);
    let mut diff = [[0u8; 256]; DIFF_SUBSPACES];
    for first in (0..subspaces).step_by(DIFF_SUBSPACES) {
        let count = DIFF_SUBSPACES.min(subspaces - first);
        for (d, t) in diff.iter_mut().zip(tables[256 * first..][..256 * count].as_chunks::<256>().0) {
            diff_tables(t, d);
        }
        for (block, scores) in codes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
            let zero = _mm256_setzero_si256();
            let (mut a, mut b) = (zero, zero);
            let rows = &block[BLOCK_KEYS * first..][..BLOCK_KEYS * count];
            let ahead = rows.as_ptr().wrapping_add(SCAN_PREFETCH_BYTES);
            for (i, (row, d)) in rows.chunks_exact(BLOCK_KEYS).zip(&diff).enumerate() {
                if i % 2 == 0 {
                    // a prefetch never faults: past the end of `codes` it asks for nothing useful
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(BLOCK_KEYS * i).cast());
                }
                // SAFETY: `row` is 32 bytes.
                let codes = unsafe { _mm256_loadu_si256(row.as_ptr().cast()) };
                add_bytes(&mut a, &mut b, lookup256(d, codes));
            }
            // per lane (keys 0..16, 16..32): keys 0..8 of the lane, then 8..16
            let even = _mm256_sub_epi16(a, _mm256_slli_epi16(b, 8));
            let (x, y) = (_mm256_unpacklo_epi16(even, b), _mm256_unpackhi_epi16(even, b));
            let keys = [_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31)];
            for (half, mut keys) in keys.into_iter().enumerate() {
                let dst = scores[16 * half..][..16].as_mut_ptr().cast::<__m256i>();
                if first > 0 {
                    // SAFETY: `dst` points at 16 u16 inside `scores`.
                    keys = _mm256_add_epi16(keys, unsafe { _mm256_loadu_si256(dst) });
                }
                // SAFETY: as above.
                unsafe { _mm256_storeu_si256(dst, keys) };
            }
        }
    }
}

/// The 32 entries of `diff` (a `diff_tables` table) at the 32 byte `codes`.
#[target_feature(enable = "avx2")]
#[inline]
fn lookup256(diff: &[u8; 256], codes: __m256i) -> __m256i {
    let chunk = |k: usize| {
        // SAFETY: chunk k (k < 16) is 16 bytes inside `diff`.
        _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(diff.as_ptr().add(16 * k).cast()) })
    };
    // codes of the upper half with bit 7 cleared, the lower half's set
    let upper = _mm256_xor_si256(codes, _mm256_set1_epi8(i8::MIN));
    let mut sum = [_mm256_setzero_si256(); 2];
    for (half, c) in [codes, upper].into_iter().enumerate() {
        for k in 0..8 {
            // bit 7 stays clear where the code's high nibble (in this half) is ≤ k; the
            // low nibble is unchanged (0x70 − 16k ≡ 0 mod 16)
            let index = _mm256_adds_epu8(c, _mm256_set1_epi8((0x70 - 16 * k) as i8));
            sum[half] = _mm256_xor_si256(sum[half], _mm256_shuffle_epi8(chunk(8 * half + k), index));
        }
    }
    _mm256_xor_si256(sum[0], sum[1])
}

/// `scan256_heads`: one `vpgatherdd` reads the four heads' entries of 8 keys at once;
/// heads 0 and 2 are summed as the u16 halves of one accumulator, 1 and 3 of another
/// (≤ 256 · 255 each, so no carry crosses a half).
///
/// # Safety
/// AVX2 must be available; `codes` holds whole 8-bit blocks of `subspaces` sub-spaces,
/// `tables` is `256 · 4 · subspaces` bytes, `out` `heads` (1..=4) runs of 32 per block.
#[target_feature(enable = "avx2")]
pub unsafe fn scan256_heads(codes: &[u8], subspaces: usize, tables: &[u8], heads: usize, out: &mut [u16]) {
    debug_assert!(tables.len() == 256 * SCAN_HEADS * subspaces && (1..=SCAN_HEADS).contains(&heads));
    let n = out.len() / heads;
    let low_bytes = _mm256_set1_epi32(0x00ff_00ff);
    let low_half = _mm256_set1_epi32(0xffff);
    for (b, block) in codes.chunks_exact(block_bytes256(subspaces)).enumerate() {
        // [keys 8i..8i + 8]: (heads 0 | 2 << 16), (heads 1 | 3 << 16)
        let mut even = [_mm256_setzero_si256(); 4];
        let mut odd = [_mm256_setzero_si256(); 4];
        for (s, row) in block.chunks_exact(BLOCK_KEYS).enumerate() {
            // SAFETY: `row` is 32 bytes.
            let row = unsafe { _mm256_loadu_si256(row.as_ptr().cast()) };
            let (lo, hi) = (_mm256_castsi256_si128(row), _mm256_extracti128_si256::<1>(row));
            let index = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)].map(|c| _mm256_cvtepu8_epi32(c));
            // SAFETY: sub-space s's 256 entries of 4 bytes lie inside `tables`.
            let base = unsafe { tables.as_ptr().add(256 * SCAN_HEADS * s) }.cast::<i32>();
            for i in 0..4 {
                // SAFETY: index ≤ 255, so each 4-byte read is one entry of sub-space s.
                let entries = unsafe { _mm256_i32gather_epi32::<4>(base, index[i]) };
                even[i] = _mm256_add_epi16(even[i], _mm256_and_si256(entries, low_bytes));
                odd[i] = _mm256_add_epi16(odd[i], _mm256_and_si256(_mm256_srli_epi32::<8>(entries), low_bytes));
            }
        }
        for h in 0..heads {
            let sums = |i: usize| {
                let v = if h % 2 == 0 { even[i] } else { odd[i] };
                if h < 2 {
                    _mm256_and_si256(v, low_half)
                } else {
                    _mm256_srli_epi32::<16>(v)
                }
            };
            for half in 0..2 {
                // packus interleaves the lanes: [0..4, 8..12 | 4..8, 12..16] → key order
                let keys = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(sums(2 * half), sums(2 * half + 1)));
                // SAFETY: 16 u16 of head h's run for block b lie inside `out`.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(h * n + BLOCK_KEYS * b + 16 * half).cast(), keys) };
            }
        }
    }
}
