//! SSSE3: the 128-bit lookup kernel (`lut::shuffle128`) with `pshufb` and `pmaddubsw`
//! (`kernels::v128::Ssse3`).

use crate::kernels::lut::shuffle128;
use crate::kernels::v128::Ssse3;
use crate::{Block64, Interleave, TILE_ROWS};

/// # Safety
/// The CPU must support SSSE3; `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "ssse3")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: the caller's contract.
    unsafe { tile_group_n(w, [quads], bits, core::array::from_mut(acc)) }
}

/// `shuffle128::tile_group_n` compiled for ssse3.
///
/// # Safety
/// The CPU must support SSSE3; `w` is one tile-group of a layout with `quads[t].len()` quads, the same for
/// every token.
#[target_feature(enable = "ssse3")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, acc: &mut [[i32; TILE_ROWS]; N]) {
    // SAFETY: the caller's contract; ssse3 is enabled here.
    unsafe { shuffle128::tile_group_n::<Ssse3, N>(w, quads, bits, acc) }
}

crate::kernels::lut::define_run!("ssse3");
crate::kernels::lut::define_run_n!("ssse3");
