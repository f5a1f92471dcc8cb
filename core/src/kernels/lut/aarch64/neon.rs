//! NEON: the 128-bit lookup kernel (`lut::shuffle128`) with `tbl` and `sadalp`/`ssra`
//! (`kernels::v128::Neon`).

use crate::kernels::lut::shuffle128;
use crate::kernels::v128::Neon;
use crate::{Block64, Interleave, TILE_ROWS};

/// # Safety
/// NEON must be available (it is on every aarch64 target with `neon`); `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: the caller's contract.
    unsafe { tile_group_n(w, [quads], bits, core::array::from_mut(acc)) }
}

/// `shuffle128::tile_group_n` compiled for neon.
///
/// # Safety
/// NEON must be available (it is on every aarch64 target with `neon`); `w` is one tile-group of a layout with `quads[t].len()` quads, the same for
/// every token.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn tile_group_n<const N: usize>(w: &[u8], quads: [&[Block64]; N], bits: u8, acc: &mut [[i32; TILE_ROWS]; N]) {
    // SAFETY: the caller's contract; neon is enabled here.
    unsafe { shuffle128::tile_group_n::<Neon, N>(w, quads, bits, acc) }
}

crate::kernels::lut::define_run!("neon");
crate::kernels::lut::define_run_n!("neon");
