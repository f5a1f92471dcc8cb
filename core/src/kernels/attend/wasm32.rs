//! wasm simd128 for the value sum: q8_0 / q4_0 blocks decoded to f32 by explicit
//! widening (i8 → i16 → i32 → f32), where LLVM's vectorizer left a scalar
//! `f32.convert_i32_s` per value. Same products `d · q` as the portable loop, so the
//! same floats.

use core::arch::wasm32::*;

use super::VALUE_BLOCK;

/// 16 signed bytes times `d`, into `dst[..16]`.
#[inline(always)]
fn widen(q: v128, d: v128, dst: &mut [f32]) {
    let (lo, hi) = (i16x8_extend_low_i8x16(q), i16x8_extend_high_i8x16(q));
    let quads = [i32x4_extend_low_i16x8(lo), i32x4_extend_high_i16x8(lo), i32x4_extend_low_i16x8(hi), i32x4_extend_high_i16x8(hi)];
    for (dst, q) in dst[..16].chunks_exact_mut(4).zip(quads) {
        // SAFETY: `dst` is 4 writable f32 (v128_store takes unaligned pointers).
        unsafe { v128_store(dst.as_mut_ptr().cast(), f32x4_mul(d, f32x4_convert_i32x4(q))) };
    }
}

/// One q8_0 block (32 int8 codes) times `d`, into `dst` (32 values).
#[inline(always)]
pub(super) fn q8_0_block(codes: &[u8], d: f32, dst: &mut [f32]) {
    let (codes, dst) = (&codes[..VALUE_BLOCK], &mut dst[..VALUE_BLOCK]);
    let d = f32x4_splat(d);
    for (half, dst) in dst.chunks_exact_mut(16).enumerate() {
        // SAFETY: 16 readable bytes at 16·half inside `codes` (32 bytes).
        widen(unsafe { v128_load(codes.as_ptr().add(16 * half).cast()) }, d, dst);
    }
}

/// One q4_0 block (16 bytes: value j in the low nibble of byte j, value j + 16 in its
/// high nibble, each `q − 8`) times `d`, into `dst` (32 values).
#[inline(always)]
pub(super) fn q4_0_block(codes: &[u8], d: f32, dst: &mut [f32]) {
    let (codes, dst) = (&codes[..VALUE_BLOCK / 2], &mut dst[..VALUE_BLOCK]);
    // SAFETY: `codes` is 16 readable bytes.
    let v = unsafe { v128_load(codes.as_ptr().cast()) };
    let (d, eight) = (f32x4_splat(d), i8x16_splat(8));
    let (lo, hi) = dst.split_at_mut(VALUE_BLOCK / 2);
    widen(i8x16_sub(v128_and(v, i8x16_splat(15)), eight), d, lo);
    widen(i8x16_sub(u8x16_shr(v, 4), eight), d, hi);
}
