//! AVX-512 VBMI, 8-bit codes: a 256-entry table is four zmm registers; two `vpermi2b`
//! look 64 codes up in its halves (bits 0..7 of the code) and bit 7 picks between them.
//! One zmm holds the same sub-space's row of two blocks, so both halves share the
//! table; up to eight blocks are scanned per table load.

use core::arch::x86_64::*;

use crate::kernels::pq_scan::{block_bytes256, BLOCK_KEYS};

/// Blocks per pass over the tables: `2 · WIDE` (one zmm per two blocks).
const WIDE: usize = 4;

/// `table[v]` for each of the 64 bytes of `v`; `t` is the table as 4 × 64 bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
fn lookup(t: &[__m512i; 4], v: __m512i) -> __m512i {
    let low = _mm512_permutex2var_epi8(t[0], v, t[1]);
    let high = _mm512_permutex2var_epi8(t[2], v, t[3]);
    _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high)
}

/// Scores of `blocks` (1..=2·N) consecutive blocks starting at `codes`: zmm `i` holds
/// blocks 2i and 2i + 1 (upper half zero when 2i + 1 is past the end; not stored).
///
/// # Safety
/// AVX-512 F/BW/VBMI; `codes` is `blocks` whole blocks of `block_bytes256(subspaces)`,
/// `tables` `256 · subspaces` bytes, `out` `32 · blocks` entries.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
unsafe fn group<const N: usize>(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    let bb = block_bytes256(subspaces);
    let blocks = codes.len() / bb;
    debug_assert!(blocks >= 1 && blocks <= 2 * N && codes.len() == blocks * bb && out.len() == BLOCK_KEYS * blocks);
    let mut a = [_mm512_setzero_si512(); N];
    let mut b = [_mm512_setzero_si512(); N];
    let pc = codes.as_ptr();
    for (s, table) in tables.chunks_exact(256).enumerate() {
        let tp = table.as_ptr();
        // SAFETY: `table` is 256 readable bytes.
        let t = unsafe { [0, 1, 2, 3].map(|k| _mm512_loadu_si512(tp.add(64 * k).cast())) };
        for i in 0..N {
            if 2 * i >= blocks {
                break;
            }
            // SAFETY: row s (32 bytes at 32s) of block 2i, and of block 2i + 1 when it
            // exists, lie inside `codes`.
            let v = unsafe {
                let lo = _mm256_loadu_si256(pc.add(2 * i * bb + BLOCK_KEYS * s).cast());
                if 2 * i + 1 < blocks {
                    let hi = _mm256_loadu_si256(pc.add((2 * i + 1) * bb + BLOCK_KEYS * s).cast());
                    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
                } else {
                    _mm512_zextsi256_si512(lo)
                }
            };
            let x = lookup(&t, v);
            // u16 pairs (even + 256·odd) into a, odd bytes into b: a − (b << 8) is exact
            a[i] = _mm512_add_epi16(a[i], x);
            b[i] = _mm512_add_epi16(b[i], _mm512_srli_epi16(x, 8));
        }
    }
    let first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    let second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for i in 0..N {
        if 2 * i >= blocks {
            break;
        }
        let even = _mm512_sub_epi16(a[i], _mm512_slli_epi16(b[i], 8));
        // per 128-bit lane (16 keys): keys 0..8, 8..16 of that lane
        let x = _mm512_unpacklo_epi16(even, b[i]);
        let y = _mm512_unpackhi_epi16(even, b[i]);
        let dst = out[BLOCK_KEYS * 2 * i..][..BLOCK_KEYS].as_mut_ptr().cast::<__m512i>();
        // SAFETY: `dst` points at the 32 u16 scores of block 2i inside `out`.
        unsafe { _mm512_storeu_si512(dst, _mm512_permutex2var_epi64(x, first, y)) };
        if 2 * i + 1 < blocks {
            let dst = out[BLOCK_KEYS * (2 * i + 1)..][..BLOCK_KEYS].as_mut_ptr().cast::<__m512i>();
            // SAFETY: `dst` points at the 32 u16 scores of block 2i + 1 inside `out`.
            unsafe { _mm512_storeu_si512(dst, _mm512_permutex2var_epi64(x, second, y)) };
        }
    }
}

/// # Safety
/// The CPU must support AVX-512 F, BW and VBMI; `codes` is whole blocks of
/// `block_bytes256(subspaces)`, `tables` is `256 · subspaces` bytes and `out` has 32
/// entries per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(crate) unsafe fn scan256(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 256 * subspaces);
    let bb = block_bytes256(subspaces);
    let wide = codes.chunks_exact(2 * WIDE * bb);
    let rest = wide.remainder();
    let (out_wide, out_rest) = out.split_at_mut(out.len() - BLOCK_KEYS * (rest.len() / bb));
    for (c, o) in wide.zip(out_wide.chunks_exact_mut(2 * WIDE * BLOCK_KEYS)) {
        // SAFETY: AVX-512 VBMI per the caller; `c` is 2·WIDE blocks, `o` their scores.
        unsafe { group::<WIDE>(c, subspaces, tables, o) };
    }
    for (c, o) in rest.chunks(2 * bb).zip(out_rest.chunks_mut(2 * BLOCK_KEYS)) {
        // SAFETY: as above, with 1 or 2 blocks.
        unsafe { group::<1>(c, subspaces, tables, o) };
    }
}
