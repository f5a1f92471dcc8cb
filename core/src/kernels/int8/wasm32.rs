//! Four rows at a time on wasm simd128 (`i16x8.extmul` of int8 pairs, widened pairwise
//! to i32); with relaxed SIMD, `i32x4.relaxed_dot_i8x16_i7x16_add`, deterministic
//! because its second operand is |x| (0..=127) and its first is w with x's sign — which
//! cannot wrap unless a code is −128, so such matrices take the simd128 path. A shuffle
//! tree gives the four rows' block sums in one vector; the float step is the scalar
//! one's, lane by lane.

use core::arch::wasm32::*;

use super::{Group, BLOCK, GROUP_ROWS};

/// `[Σ v0, Σ v1, Σ v2, Σ v3]`: four vectors' lane sums.
#[inline(always)]
fn sum4(v0: v128, v1: v128, v2: v128, v3: v128) -> v128 {
    let a01 = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(v0, v1), i32x4_shuffle::<2, 6, 3, 7>(v0, v1));
    let a23 = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(v2, v3), i32x4_shuffle::<2, 6, 3, 7>(v2, v3));
    i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(a01, a23), i32x4_shuffle::<2, 3, 6, 7>(a01, a23))
}

/// Four finite f16 scales (zero-extended to 32 bits) as f32, as `f16_bits_to_f32`
/// converts them: magnitude bits moved into an f32 and scaled by 2^112, subnormals
/// included, the sign put back.
#[inline(always)]
fn scales(h: v128) -> v128 {
    let magnitude = f32x4_mul(i32x4_shl(v128_and(h, u32x4_splat(0x7fff)), 13), u32x4_splat(0x7780_0000));
    v128_or(magnitude, i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16))
}

#[inline(always)]
fn dot16(w: v128, x: v128) -> v128 {
    i32x4_add(i32x4_extadd_pairwise_i16x8(i16x8_extmul_low_i8x16(w, x)), i32x4_extadd_pairwise_i16x8(i16x8_extmul_high_i8x16(w, x)))
}

/// As `scalar::group`.
///
/// # Safety
/// simd128 must be enabled (compile-time here); `g`'s lengths agree (see `Group`).
#[target_feature(enable = "simd128")]
pub unsafe fn group(has_minus_128: bool, g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    debug_assert!(g.w.len() == GROUP_ROWS * g.x.len() && g.w_scales.len() == GROUP_ROWS * g.x_scales.len());
    // SAFETY (loads): row i's block b is bytes (4b + i)·32.. + 32 of `w`, block b of `x`
    // is bytes 32b.. + 32, scales 4b.. + 4 of `w_scales`: all within the lengths.
    let load = |p: *const u8, at: usize| unsafe { v128_load(p.add(at).cast()) };
    let mut acc = f32x4_splat(0.0);
    for (b, &dx) in g.x_scales.iter().enumerate() {
        let at = b * BLOCK;
        let (x0, x1) = (load(g.x.as_ptr().cast(), at), load(g.x.as_ptr().cast(), at + 16));
        let w_at = |i: usize| (b * GROUP_ROWS + i) * BLOCK;
        let sums = relaxed_sums(has_minus_128, g, b, x0, x1).unwrap_or_else(|| {
            let row = |i: usize| i32x4_add(dot16(load(g.w.as_ptr(), w_at(i)), x0), dot16(load(g.w.as_ptr(), w_at(i) + 16), x1));
            sum4(row(0), row(1), row(2), row(3))
        });
        // SAFETY: scales 4b..4b + 4 lie inside `w_scales` (4 per block).
        let dw = scales(unsafe { u32x4_load_extend_u16x4(g.w_scales.as_ptr().add(b * GROUP_ROWS)) });
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(sums), f32x4_mul(dw, f32x4_splat(dx))));
    }
    // SAFETY: `out` holds four f32.
    unsafe { v128_store(out.as_mut_ptr().cast(), acc) };
}

/// The four rows' sums of block `b` by relaxed dot products, or `None` where this build
/// has no relaxed SIMD or a code is −128.
#[inline(always)]
fn relaxed_sums(has_minus_128: bool, g: &Group<'_>, b: usize, x0: v128, x1: v128) -> Option<v128> {
    #[cfg(target_feature = "relaxed-simd")]
    if !has_minus_128 {
        let (negative0, negative1) = (i8x16_shr(x0, 7), i8x16_shr(x1, 7));
        let (abs0, abs1) = (i8x16_abs(x0), i8x16_abs(x1));
        // w with x's sign: (w ^ m) − m negates where m is all ones
        let signed = |w: v128, m: v128| i8x16_sub(v128_xor(w, m), m);
        let row = |i: usize| {
            // SAFETY: as the loads in `group`.
            let at = (b * GROUP_ROWS + i) * BLOCK;
            let (w0, w1) = unsafe { (v128_load(g.w.as_ptr().add(at).cast()), v128_load(g.w.as_ptr().add(at + 16).cast())) };
            let s = i32x4_relaxed_dot_i8x16_i7x16_add(signed(w0, negative0), abs0, i32x4_splat(0));
            i32x4_relaxed_dot_i8x16_i7x16_add(signed(w1, negative1), abs1, s)
        };
        return Some(sum4(row(0), row(1), row(2), row(3)));
    }
    let _ = (has_minus_128, g, b, x0, x1);
    None
}
