//! The specification: exact integer block sums, then one float multiply-add per block in
//! block order. Every kernel performs the same float operations on each row.

use super::{Group, BLOCK, GROUP_ROWS};

/// `Σ_j w[j] · x[j]` over one block, `w` read as int8.
pub fn block_sum(w: &[u8], x: &[i8]) -> i32 {
    w.iter().zip(x).map(|(&w, &x)| w as i8 as i32 * x as i32).sum()
}

/// One row: `Σ_b sum_b · (w_scale(b) · x_scales[b])`, added in block order.
pub fn row_product(w: &[u8], w_scale: impl Fn(usize) -> f32, x: &[i8], x_scales: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (b, (w, x)) in w.chunks_exact(BLOCK).zip(x.chunks_exact(BLOCK)).enumerate() {
        acc += block_sum(w, x) as f32 * (w_scale(b) * x_scales[b]);
    }
    acc
}

/// Four rows, as `row_product` each.
pub fn group(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    let cols = g.x.len();
    for (i, o) in out.iter_mut().enumerate() {
        *o = row_product(&g.w[i * cols..][..cols], |b| g.w_scales[b * GROUP_ROWS + i], g.x, g.x_scales);
    }
}
