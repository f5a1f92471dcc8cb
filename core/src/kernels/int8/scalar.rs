//! The specification: exact integer block sums, then one float multiply-add per block in
//! block order. Every kernel performs the same float operations on each row.

use super::{five_bit_code, FiveBitGroup, Group, Int8Activations, BLOCK, FIVE_BIT_BLOCK_BYTES, GROUP_ROWS};
use crate::f16::f16_bits_to_f32;

/// `Σ_j w[j] · x[j]` over one block, `w` read as int8.
pub fn block_sum(w: &[u8], x: &[i8]) -> i32 {
    w.iter().zip(x).map(|(&w, &x)| w as i8 as i32 * x as i32).sum()
}

/// Four rows: `Σ_b sum_b · (w_scale · x_scale)` each, added in block order (`w_scale`
/// the f16 scale as f32, exactly).
pub fn group(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    for (i, o) in out.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for (b, (x, &dx)) in g.x.chunks_exact(BLOCK).zip(g.x_scales).enumerate() {
            let w = &g.w[(b * GROUP_ROWS + i) * BLOCK..][..BLOCK];
            acc += block_sum(w, x) as f32 * (f16_bits_to_f32(g.w_scales[b * GROUP_ROWS + i]) * dx);
        }
        *o = acc;
    }
}

/// The five-bit form's four rows (`super::CodeForm::FiveBit`): each block's codes
/// decoded, then as `group`.
pub fn five_bit_group(g: &FiveBitGroup<'_>, x: &Int8Activations, out: &mut [f32; GROUP_ROWS]) {
    for (i, o) in out.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for (b, (xb, &dx)) in x.codes.chunks_exact(BLOCK).zip(&x.scales).enumerate() {
            let group_block = &g.w[b * FIVE_BIT_BLOCK_BYTES..][..FIVE_BIT_BLOCK_BYTES];
            let sum: i32 = xb.iter().enumerate().map(|(k, &x)| i32::from(five_bit_code(group_block, i, k)) * i32::from(x)).sum();
            acc += sum as f32 * (f16_bits_to_f32(g.w_scales[b * GROUP_ROWS + i]) * dx);
        }
        *o = acc;
    }
}
