//! NEON: one `tbl` (vqtbl1q) of a sub-space's 16-entry table per 16 code bytes for the
//! low nibbles (keys 0..16) and one for the high nibbles (keys 16..32), widened into
//! u16 sums with `uaddw`.

use core::arch::aarch64::*;

use crate::kernels::pq_scan::{block_bytes16, block_bytes256, BLOCK_KEYS};

/// # Safety
/// NEON must be available (it is on every aarch64 target with `neon`); `codes` is whole
/// blocks of `block_bytes16(subspaces)`, `tables` is `16 · subspaces` bytes and `out`
/// has 32 entries per block.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 16 * subspaces);
    let nibble = vdupq_n_u8(0x0f);
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        // keys 0..8, 8..16, 16..24, 24..32
        let mut acc = [vdupq_n_u16(0); 4];
        // 16 code bytes of sub-space s sit at 16s, like its table
        for (c, t) in block.chunks_exact(16).zip(tables.chunks_exact(16)) {
            // SAFETY: `c` and `t` are 16 readable bytes each.
            let (v, table) = unsafe { (vld1q_u8(c.as_ptr()), vld1q_u8(t.as_ptr())) };
            let lo = vqtbl1q_u8(table, vandq_u8(v, nibble));
            let hi = vqtbl1q_u8(table, vshrq_n_u8(v, 4));
            acc[0] = vaddw_u8(acc[0], vget_low_u8(lo));
            acc[1] = vaddw_high_u8(acc[1], lo);
            acc[2] = vaddw_u8(acc[2], vget_low_u8(hi));
            acc[3] = vaddw_high_u8(acc[3], hi);
        }
        for (k, v) in acc.into_iter().enumerate() {
            let dst = scores[8 * k..8 * k + 8].as_mut_ptr();
            // SAFETY: `dst` points at 8 u16 inside `scores`.
            unsafe { vst1q_u16(dst, v) };
        }
    }
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
        // keys 0..8, 8..16, 16..24, 24..32
        let mut acc = [vdupq_n_u16(0); 4];
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
                acc[2 * half] = vaddw_u8(acc[2 * half], vget_low_u8(v));
                acc[2 * half + 1] = vaddw_high_u8(acc[2 * half + 1], v);
            }
        }
        for (k, v) in acc.into_iter().enumerate() {
            let dst = scores[8 * k..8 * k + 8].as_mut_ptr();
            // SAFETY: `dst` points at 8 u16 inside `scores`.
            unsafe { vst1q_u16(dst, v) };
        }
    }
}
