//! NEON: 4-bit codes by `shuffle128::scan16`; 8-bit codes by four chained 64-byte
//! `tbl`/`tbx` lookups per 16 codes.

use core::arch::aarch64::*;

use crate::kernels::pq_scan::{block_bytes256, shuffle128, BLOCK_KEYS};
use crate::kernels::v128::{Neon, Shuffle128};

/// `shuffle128::scan16` compiled for NEON.
///
/// # Safety
/// NEON must be available (it is on every aarch64 target with `neon`); `codes` is whole
/// blocks of `block_bytes16(subspaces)`, `tables` is `16 · subspaces` bytes and `out`
/// has 32 entries per block.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    // SAFETY: the caller's contract.
    unsafe { shuffle128::scan16::<Neon>(codes, subspaces, tables, out) }
}

/// K = 256: a 256-entry table is four 64-byte `tbl`/`tbx` tables (`vqtbl4q` for entries
/// 0..64, then `vqtbx4q` with the index less 64, 128, 192: an index out of a table's
/// range leaves the byte as it was), 16 codes per lookup chain, widened into u16 sums.
///
/// # Safety
/// NEON must be available; `codes` is whole blocks of `block_bytes256(subspaces)`,
/// `tables` is `256 · subspaces` bytes and `out` has 32 entries per block.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn scan256(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 256 * subspaces);
    let step = vdupq_n_u8(64);
    for (block, scores) in codes.chunks_exact(block_bytes256(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        // keys 0..16, 16..32
        // SAFETY: NEON is enabled here.
        let mut acc = unsafe { [Neon::key_sums_zero(); 2] };
        // row s: byte j is the code of key j; table s at 256s
        for (row, t) in block.chunks_exact(BLOCK_KEYS).zip(tables.chunks_exact(256)) {
            // SAFETY: `t` is 256 readable bytes, `row` 32.
            let (quarters, codes) = unsafe {
                let q = |i: usize| vld1q_u8_x4(t.as_ptr().add(64 * i));
                ([q(0), q(1), q(2), q(3)], [vld1q_u8(row.as_ptr()), vld1q_u8(row.as_ptr().add(16))])
            };
            for (half, c) in codes.into_iter().enumerate() {
                let mut v = vqtbl4q_u8(quarters[0], c);
                let mut index = c;
                for quarter in &quarters[1..] {
                    index = vsubq_u8(index, step);
                    v = vqtbx4q_u8(v, *quarter, index);
                }
                // SAFETY: NEON is enabled here.
                acc[half] = unsafe { Neon::add_key_bytes(acc[half], vreinterpretq_s8_u8(v)) };
            }
        }
        for (sums, keys) in acc.into_iter().zip(scores.as_chunks_mut::<16>().0) {
            // SAFETY: NEON is enabled here.
            unsafe { Neon::store_key_sums(sums, keys) };
        }
    }
}
