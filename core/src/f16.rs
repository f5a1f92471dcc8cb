//! Branch-free f16 -> f32 for finite values, written so loops over it vectorize.
//!
//! Scales are stored as IEEE half bits. Import rejects non-finite scales, so the
//! inf/NaN encodings never reach the kernels. Subnormal halves convert exactly.

/// f16 bits -> f32, exact for every finite half (normal or subnormal).
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let magnitude = (h as u32) & 0x7fff;
    // Normal halves: the exponent rebiased (15 -> 127) in the integer bits. Subnormal ones
    // (and zero): the integer mantissa times 2^-24, exact. No float operation meets a
    // subnormal operand (on x86 each costs a microcode assist: scaling the bits by 2^112
    // instead made K-quant scales with subnormal dmin 2.5x slower to expand on SSSE3).
    let value = if magnitude >= 0x0400 { f32::from_bits((magnitude << 13) + (112 << 23)) } else { magnitude as f32 * (1.0 / 16_777_216.0) };
    f32::from_bits(value.to_bits() | sign)
}

/// f32 -> f16 bits (round to nearest even), via `half`.
#[inline]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// Whether the half bits encode a finite value.
#[inline]
pub fn f16_bits_finite(h: u16) -> bool {
    h & 0x7c00 != 0x7c00
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn every_finite_half_converts_exactly() {
        for h in 0..=u16::MAX {
            if f16_bits_finite(h) {
                let want = half::f16::from_bits(h).to_f32();
                assert_eq!(f16_bits_to_f32(h).to_bits(), want.to_bits(), "h={h:#06x}");
            }
        }
    }
}
