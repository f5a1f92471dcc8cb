//! `scan16` written once over [`Shuffle128`] for SSSE3, NEON and wasm simd128: one shuffle
//! of a sub-space's 16-entry table per 16 code bytes for the low nibbles (keys 0..16) and
//! one for the high nibbles (keys 16..32), added into u16 sums. Each arch module
//! instantiates it inside its own `#[target_feature]` function.

use crate::kernels::pq_scan::{block_bytes16, BLOCK_KEYS};
use crate::kernels::v128::Shuffle128;

/// # Safety
/// `V`'s ISA is enabled where this is inlined (see [`Shuffle128`]); `codes` is whole
/// blocks of `block_bytes16(subspaces)`, `tables` is `16 · subspaces` bytes and `out` has
/// 32 entries per block.
#[inline(always)]
pub(crate) unsafe fn scan16<V: Shuffle128>(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 16 * subspaces);
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.as_chunks_mut::<BLOCK_KEYS>().0) {
        // SAFETY (every `V::` call): the caller's contract on `V`'s ISA; `c` and `t` are 16
        // readable bytes each.
        let mut keys = unsafe { [V::key_sums_zero(); 2] };
        // 16 code bytes of sub-space s sit at 16s, like its table
        for (c, t) in block.chunks_exact(16).zip(tables.chunks_exact(16)) {
            // SAFETY: as above.
            unsafe {
                let (lo, hi) = V::nibbles(V::load(c.as_ptr()));
                let table = V::load(t.as_ptr());
                keys[0] = V::add_key_bytes(keys[0], V::lookup(table, lo));
                keys[1] = V::add_key_bytes(keys[1], V::lookup(table, hi));
            }
        }
        for (sums, out) in keys.into_iter().zip(scores.as_chunks_mut::<16>().0) {
            // SAFETY: as above.
            unsafe { V::store_key_sums(sums, out) };
        }
    }
}
