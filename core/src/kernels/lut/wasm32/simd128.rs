//! wasm simd128: the 128-bit lookup kernel (`lut::shuffle128`) with `i8x16.swizzle`
//! (`kernels::v128::Simd128`).

use crate::kernels::lut::shuffle128;
use crate::kernels::v128::Simd128;
use crate::{Block64, Interleave, TILE_ROWS};

/// # Safety
/// simd128 must be enabled (compile time); `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "simd128")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: the caller's contract.
    unsafe { tile_group_n(w, [quads], bits, core::array::from_mut(acc)) }
}

/// `shuffle128::tile_group_n` compiled for simd128.
///
/// # Safety
/// simd128 must be enabled (compile time); `w` is one tile-group of a layout with `quads[t].len()` quads, the same for
/// every token.
#[target_feature(enable = "simd128")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, acc: &mut [[i32; TILE_ROWS]; N]) {
    // SAFETY: the caller's contract; simd128 is enabled here.
    unsafe { shuffle128::tile_group_n::<Simd128, N>(w, quads, bits, acc) }
}

crate::kernels::lut::define_run!("simd128");
crate::kernels::lut::define_run_n!("simd128");
