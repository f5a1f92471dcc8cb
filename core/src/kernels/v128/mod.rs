//! The 128-bit byte-shuffle vector that SSSE3, NEON and wasm simd128 share: a 16-byte
//! table looked up at 16 indices in one instruction (`pshufb`, `tbl`, `i8x16.swizzle`)
//! and the few integer steps around it. Kernels over it (`lut::shuffle128`) are written
//! once and instantiated per ISA, as memchr writes its searches once over a vector trait.
//!
//! Each ISA folds and widens with its own best instructions (SSSE3 `pmaddubsw`, NEON
//! `sadalp` + `ssra`, wasm `extadd_pairwise`): the trait names what is computed, the
//! implementation how. All methods are `#[inline(always)]` so that a kernel compiled under
//! `#[target_feature]` gets them inlined with that feature.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "wasm32")]
mod wasm32;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64::Neon;
#[cfg(target_arch = "wasm32")]
pub(crate) use wasm32::Simd128;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::Ssse3;

/// One ISA's 128-bit byte shuffle and the integer steps kernels take around it.
///
/// # Safety (of every method)
/// Only call from code compiled with the ISA enabled: a `#[target_feature]` function of
/// the implementing arch module whose caller checked the CPU, or a target where the ISA is
/// baseline. Pointer arguments are read as each method states.
pub(crate) trait Shuffle128 {
    /// 16 bytes.
    type Bytes: Copy;
    /// 8 signed 16-bit lanes.
    type I16x8: Copy;

    /// 16 bytes from `p` (any alignment).
    unsafe fn load(p: *const u8) -> Self::Bytes;
    /// 16 bytes from `p`, 16-byte aligned.
    unsafe fn load_aligned(p: *const u8) -> Self::Bytes;
    /// Each byte's low and high nibble, as bytes 0..16.
    unsafe fn nibbles(v: Self::Bytes) -> (Self::Bytes, Self::Bytes);
    /// `table[index[i]]` per byte, for indices 0..16.
    unsafe fn lookup(table: Self::Bytes, index: Self::Bytes) -> Self::Bytes;
    /// Eight zero lanes.
    unsafe fn zero_i16() -> Self::I16x8;
    /// `acc[i] + x[2i] + 2·x[2i+1]` with `x` as signed bytes: two bit planes of one row
    /// folded (plane 0 at the even byte).
    unsafe fn add_plane_pairs(acc: Self::I16x8, x: Self::Bytes) -> Self::I16x8;
    /// `acc[i] + x[i]` for the signed bytes 0..8 of `x`.
    unsafe fn add_low_i8(acc: Self::I16x8, x: Self::Bytes) -> Self::I16x8;
    /// `acc[i] + x[8 + i]` for the signed bytes 8..16 of `x`.
    unsafe fn add_high_i8(acc: Self::I16x8, x: Self::Bytes) -> Self::I16x8;
    /// The lanes in order.
    unsafe fn i16_lanes(v: Self::I16x8) -> [i16; 8];

    /// 16 unsigned 16-bit sums, one per byte position, in whatever form the ISA adds bytes
    /// into fastest.
    type KeySums: Copy;
    /// Sixteen zero sums.
    unsafe fn key_sums_zero() -> Self::KeySums;
    /// `sums[i] + x[i]` for the 16 unsigned bytes of `x`, modulo 2^16.
    unsafe fn add_key_bytes(sums: Self::KeySums, x: Self::Bytes) -> Self::KeySums;
    /// The 16 sums in byte order.
    unsafe fn store_key_sums(sums: Self::KeySums, out: &mut [u16; 16]);
}
