//! wasm simd128: 4-bit codes by `shuffle128::scan16` (`i8x16.swizzle`).

use crate::kernels::pq_scan::shuffle128;
use crate::kernels::v128::Simd128;

/// `shuffle128::scan16` compiled for simd128.
///
/// # Safety
/// simd128 must be enabled (compile time); `codes` is whole blocks of
/// `block_bytes16(subspaces)`, `tables` is `16 · subspaces` bytes and `out` has 32
/// entries per block.
#[target_feature(enable = "simd128")]
pub(crate) unsafe fn scan16(codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) {
    // SAFETY: the caller's contract.
    unsafe { shuffle128::scan16::<Simd128>(codes, subspaces, tables, out) }
}
