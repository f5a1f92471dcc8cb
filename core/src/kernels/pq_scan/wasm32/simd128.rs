//! wasm simd128: one `i8x16.swizzle` of a sub-space's 16-entry table per 16 code bytes
//! for the low nibbles (keys 0..16) and one for the high nibbles (keys 16..32). Indices
//! are masked to 0..15, so it agrees with `pshufb`/`tbl`.

use core::arch::wasm32::*;

use crate::kernels::pq_scan::{block_bytes16, BLOCK_KEYS};

/// Adds 16 looked-up bytes into `a` (as u16 pairs: even + 256·odd) and their odd bytes
/// into `b`. `a − (b << 8)` is then the even bytes' sum, exact modulo 2^16.
#[inline(always)]
fn add_bytes(a: &mut v128, b: &mut v128, x: v128) {
    *a = i16x8_add(*a, x);
    *b = i16x8_add(*b, u16x8_shr(x, 8));
}

/// The 16 sums of (a, b) in key order, stored to `out[..16]`.
#[inline(always)]
fn store_keys(out: &mut [u16], a: v128, b: v128) {
    let even = i16x8_sub(a, i16x8_shl(b, 8));
    let keys = [i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(even, b), i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(even, b)];
    for (k, v) in keys.into_iter().enumerate() {
        let dst = out[8 * k..8 * k + 8].as_mut_ptr().cast::<v128>();
        // SAFETY: `dst` points at 8 u16 inside `out` (v128_store takes unaligned pointers).
        unsafe { v128_store(dst, v) };
    }
}

/// # Safety
/// simd128 must be enabled (compile time); `codes` is whole blocks of
/// `block_bytes16(subspaces)`, `tables` is `16 · subspaces` bytes and `out` has 32
/// entries per block.
#[target_feature(enable = "simd128")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    debug_assert_eq!(tables.len(), 16 * subspaces);
    let nibble = u8x16_splat(0x0f);
    for (block, scores) in codes.chunks_exact(block_bytes16(subspaces)).zip(out.chunks_exact_mut(BLOCK_KEYS)) {
        let zero = u8x16_splat(0);
        let (mut a_lo, mut b_lo, mut a_hi, mut b_hi) = (zero, zero, zero, zero);
        // 16 code bytes of sub-space s sit at 16s, like its table
        for (c, t) in block.chunks_exact(16).zip(tables.chunks_exact(16)) {
            // SAFETY: `c` and `t` are 16 readable bytes each (unaligned loads are allowed).
            let (v, table) = unsafe { (v128_load(c.as_ptr().cast()), v128_load(t.as_ptr().cast())) };
            let lo = u8x16_swizzle(table, v128_and(v, nibble));
            let hi = u8x16_swizzle(table, u8x16_shr(v, 4));
            add_bytes(&mut a_lo, &mut b_lo, lo);
            add_bytes(&mut a_hi, &mut b_hi, hi);
        }
        store_keys(&mut scores[..16], a_lo, b_lo);
        store_keys(&mut scores[16..], a_hi, b_hi);
    }
}
