//! Four rows at a time with `smull`: products of two int8 fit i16 (|w·x| ≤ 128·127),
//! pairs widen into i32 (`sadalp`), an `addp` tree gives the four rows' block sums in one
//! vector, and the float step is the scalar one's, lane by lane. Builds for cores with
//! the dot-product extension (`-C target-feature=+dotprod`, implied by
//! `-C target-cpu=cortex-a76` — a Pi 5 — and by Apple's targets) sum each row's 32
//! products with two `sdot` instead of four `smull` and four pair-widenings: the same
//! exact i32 sums, so the same output.

use core::arch::aarch64::*;
#[cfg(target_feature = "dotprod")]
use core::arch::asm;

use super::{Group, BLOCK, GROUP_ROWS};

/// Four finite f16 scales as f32, as `f16_bits_to_f32` converts them (magnitude bits
/// moved into an f32 and scaled by 2^112, subnormals included, the sign put back):
/// `fcvtl` would need the unstable f16 vector types.
#[inline(always)]
fn scales(h: uint16x4_t) -> float32x4_t {
    // SAFETY: NEON is enabled for this build (this module's cfg); register-only steps.
    unsafe {
        let h = vmovl_u16(h);
        let magnitude = vreinterpretq_f32_u32(vshlq_n_u32::<13>(vandq_u32(h, vdupq_n_u32(0x7fff))));
        let magnitude = vmulq_f32(magnitude, vreinterpretq_f32_u32(vdupq_n_u32(0x7780_0000)));
        vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(magnitude), vshlq_n_u32::<16>(vandq_u32(h, vdupq_n_u32(0x8000)))))
    }
}

/// `acc + ` the sums of each four consecutive products `a·b` (lane i: bytes 4i..4i + 4):
/// `sdot`, whose intrinsic `vdotq_s32` is not stable Rust yet.
#[cfg(target_feature = "dotprod")]
#[inline(always)]
fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: this build targets cores with the dot-product extension (this function's
    // cfg); the instruction only reads and writes the three registers.
    unsafe {
        asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b, options(pure, nomem, nostack))
    };
    acc
}

/// As `scalar::group`.
///
/// # Safety
/// NEON must be available (compile-time here); `g`'s lengths agree (see `Group`).
#[target_feature(enable = "neon")]
pub unsafe fn group(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    debug_assert!(g.w.len() == GROUP_ROWS * g.x.len() && g.w_scales.len() == GROUP_ROWS * g.x_scales.len());
    let mut acc = vdupq_n_f32(0.0);
    for (b, &dx) in g.x_scales.iter().enumerate() {
        // SAFETY (loads): row i's block b is bytes (4b + i)·32.. + 32 of `w`, block b of
        // `x` is bytes 32b.. + 32, scales 4b.. + 4 of `w_scales`: all within the lengths.
        let (x0, x1) = unsafe { (vld1q_s8(g.x.as_ptr().add(b * BLOCK)), vld1q_s8(g.x.as_ptr().add(b * BLOCK + 16))) };
        let row = |i: usize| {
            // SAFETY: row i's block b is bytes (4b + i)·32.. + 32 of `w`, inside it.
            let (w0, w1) = unsafe {
                let w = g.w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast::<i8>();
                (vld1q_s8(w), vld1q_s8(w.add(16)))
            };
            #[cfg(target_feature = "dotprod")]
            return sdot(sdot(vdupq_n_s32(0), w0, x0), w1, x1);
            #[cfg(not(target_feature = "dotprod"))]
            {
                let mut s = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
                s = vpadalq_s16(s, vmull_high_s8(w0, x0));
                s = vpadalq_s16(s, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
                vpadalq_s16(s, vmull_high_s8(w1, x1))
            }
        };
        let sums = vpaddq_s32(vpaddq_s32(row(0), row(1)), vpaddq_s32(row(2), row(3)));
        // SAFETY: scales 4b..4b + 4 lie inside `w_scales` (4 per block).
        let dw = scales(unsafe { vld1_u16(g.w_scales.as_ptr().add(b * GROUP_ROWS)) });
        acc = vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(sums), vmulq_f32(dw, vdupq_n_f32(dx))));
    }
    // SAFETY: `out` holds four f32.
    unsafe { vst1q_f32(out.as_mut_ptr(), acc) };
}
