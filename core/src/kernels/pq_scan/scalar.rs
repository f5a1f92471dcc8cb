//! The reference scan: plain lookups and adds, one key at a time per sub-space. It
//! defines every score the SIMD kernels must reproduce.

use super::{block_bytes16, block_bytes256, BLOCK_KEYS, SCAN_HEADS};

/// 4-bit codes (lengths checked by the caller).
pub(crate) fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    let (tables, _) = tables.as_chunks::<16>();
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let mut acc = [0u16; BLOCK_KEYS];
        // the 16 code bytes of sub-space s are bytes 16s..16s + 16 of the block (chunk
        // s / 2, half s % 2): low nibble key j, high nibble key j + 16
        for (codes16, table) in block.as_chunks::<16>().0.iter().zip(tables) {
            for (j, &c) in codes16.iter().enumerate() {
                acc[j] += table[(c & 0x0f) as usize] as u16;
                acc[j + 16] += table[(c >> 4) as usize] as u16;
            }
        }
        scores.copy_from_slice(&acc);
    }
}

/// 8-bit codes (lengths checked by the caller).
pub(crate) fn scan256(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    let (tables, _) = tables.as_chunks::<256>();
    for (block, scores) in codes.chunks_exact(block_bytes256(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let mut acc = [0u16; BLOCK_KEYS];
        // row s: byte j is the code of key j
        for (row, table) in block.as_chunks::<BLOCK_KEYS>().0.iter().zip(tables) {
            for (a, &c) in acc.iter_mut().zip(row) {
                *a += table[c as usize] as u16;
            }
        }
        scores.copy_from_slice(&acc);
    }
}

/// 8-bit codes, `heads` query heads' interleaved tables (lengths checked by the caller).
pub(crate) fn scan256_heads(codes: &[u8], subspaces: usize, tables: &[u8], heads: usize, out: &mut [u16]) {
    let n = out.len() / heads;
    for (b, block) in codes.chunks_exact(block_bytes256(subspaces)).enumerate() {
        for h in 0..heads {
            let mut acc = [0u16; BLOCK_KEYS];
            for (s, row) in block.chunks_exact(BLOCK_KEYS).enumerate() {
                for (a, &c) in acc.iter_mut().zip(row) {
                    *a += tables[(256 * s + c as usize) * SCAN_HEADS + h] as u16;
                }
            }
            out[h * n + BLOCK_KEYS * b..][..BLOCK_KEYS].copy_from_slice(&acc);
        }
    }
}
