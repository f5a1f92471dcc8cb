//! The kernels: scalar references and their SIMD twins, bit for bit.
//!
//! * [`isa`]: which instruction set each kernel runs on (x86 detected once, at run time;
//!   aarch64 and wasm32 chosen at compile time), and `LUTRA_MAX_ISA`'s cap.
//! * [`lut`]: activation tables and the lookup GEMV/GEMM (T-MAC), over [`quant`]'s bit planes.
//! * `v128`: the 128-bit byte shuffle that SSSE3, NEON and simd128 share, as a trait the
//!   128-bit kernels are written over once.
//! * [`int8`]: int8 dot products for weights imported as int8 codes (Q8_0, Q5_0).
//! * [`pq_scan`]: NoMAD attention's score scans over product-quantized keys.
//! * [`attend`]: exact attention's f32 halves (scores, softmax, value sums) for the key
//!   caches in `crate::attention`.
//!
//! Each op has one safe entry point that takes an [`isa::Isa`] and validates its
//! arguments before any `unsafe` arch code runs.

#[cfg(feature = "alloc")]
pub mod attend;
#[cfg(feature = "alloc")]
pub mod int8;
pub mod isa;
pub mod lut;
pub mod pq_scan;
pub mod quant;
pub(crate) mod v128;

/// The canonical horizontal sum of 16 lanes, the one every tier's reductions follow
/// (attention scores, table statistics): `l[j] += l[j + w]` for w = 8, 4, 2, 1.
#[inline(always)]
pub fn fold_lanes(mut lanes: [f32; 16]) -> f32 {
    for width in [8, 4, 2, 1] {
        for j in 0..width {
            lanes[j] += lanes[j + width];
        }
    }
    lanes[0]
}
