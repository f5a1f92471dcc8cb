//! Where a position's row lives in a layer's cache: the whole context, or a ring for
//! sliding-window layers.

use alloc::vec::Vec;
use core::ops::Range;

use super::*;

/// Rows per layer: the whole context, or — for a layer that only ever attends to its last
/// `window` positions — a ring of `window` rows (position `p` in row `p % window`).
#[derive(Clone, Debug)]
pub(crate) struct LayerRows {
    offsets: Vec<usize>,
    caps: Vec<usize>,
}

impl LayerRows {
    /// `windows[l]` = 0 (or missing) keeps every position of layer `l`.
    pub(super) fn new(layers: usize, context: usize, windows: &[usize]) -> LayerRows {
        let caps: Vec<usize> = (0..layers)
            .map(|l| match windows.get(l) {
                Some(&w) if w > 0 => w.min(context),
                _ => context,
            })
            .collect();
        let offsets = caps.iter().scan(0, |at, &c| Some(core::mem::replace(at, *at + c))).collect();
        LayerRows { offsets, caps }
    }

    /// The shortest ring (a layer holding fewer rows than the context).
    pub(crate) fn shortest_ring(&self, context: usize) -> Option<usize> {
        self.caps.iter().copied().filter(|&c| c < context).min()
    }

    /// Rows of all layers together.
    pub(super) fn total(&self) -> usize {
        self.caps.iter().sum()
    }

    /// Rows of `layer`: its window, or the whole context.
    pub(crate) fn cap(&self, layer: usize) -> usize {
        self.caps[layer]
    }

    /// Where the `head_dim` values of `kv_head` in row `row` of `layer` start, in a buffer
    /// laid out `[layer][kv_head][row][head_dim]`: each KV head's rows are contiguous, so
    /// attention streams them instead of striding across the other heads.
    pub(super) fn at(&self, shape: &AttentionShape, layer: usize, kv_head: usize, row: usize) -> usize {
        self.index(shape, layer, kv_head, row) * shape.head_dim
    }

    /// The row's index in that layout, counting rows of every KV head and layer.
    pub(super) fn index(&self, shape: &AttentionShape, layer: usize, kv_head: usize, row: usize) -> usize {
        self.offsets[layer] * shape.kv_heads + kv_head * self.caps[layer] + row
    }

    /// Stores position `pos` of `layer` (every KV head of `x`, each head's row converted
    /// by `convert`) in `data`.
    pub(super) fn store<T>(
        &self,
        shape: &AttentionShape,
        data: &mut [T],
        layer: usize,
        pos: usize,
        x: &[f32],
        convert: impl Fn(&[f32], &mut [T]),
    ) {
        let (hd, row) = (shape.head_dim, pos % self.caps[layer]);
        for (kv_head, x) in x.chunks_exact(hd).enumerate().take(shape.kv_heads) {
            let at = self.at(shape, layer, kv_head, row);
            convert(x, &mut data[at..at + hd]);
        }
    }

    /// Which of `layer`'s rows hold positions `first..=pos`, relative to its first row,
    /// and whether the span also holds rows outside them (a ring asked for fewer
    /// positions than it holds after wrapping; `mask_outside` clears those).
    pub(crate) fn span(&self, layer: usize, first: usize, pos: usize) -> (Range<usize>, bool) {
        let cap = self.caps[layer];
        if pos < cap {
            (first..pos + 1, false)
        } else {
            (0..cap, pos + 1 - first < cap)
        }
    }

    /// Sets the scores of a full ring's rows (`scores[i]` for row `first_row + i`) whose
    /// position is outside `first..=pos` to −∞ (zero weight after softmax).
    pub(crate) fn mask_outside(&self, layer: usize, first: usize, pos: usize, first_row: usize, scores: &mut [f32]) {
        let cap = self.caps[layer];
        for (i, s) in (first_row..cap).zip(scores.iter_mut()) {
            let held = pos - (pos % cap + cap - i) % cap;
            if held < first {
                *s = f32::NEG_INFINITY;
            }
        }
    }
}
