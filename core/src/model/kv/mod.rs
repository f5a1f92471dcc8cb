//! The KV cache behind a trait: exact keys (f16, or f32 for comparisons) here, the
//! product-quantized NoMAD cache in `crate::pq::PqKvCache`. Values are f16 in both.
//! Every buffer is allocated when the cache is made; `store` and `attend` never allocate.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::f16::f32_to_f16_bits;
use kernels::Rows;

pub mod kernels;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// What a cache holds: `layers` × `context` positions of `n_kv_heads` keys and values of
/// `head_dim`, read by `n_heads` query heads (`n_heads / n_kv_heads` per KV head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub context: usize,
}

impl AttentionShape {
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }
}

/// A KV cache: stores each position's keys and values and runs attention over them.
pub trait KvCache: Send {
    fn shape(&self) -> AttentionShape;
    /// Stores position `pos` of `layer`; `k` and `v` hold every KV head (`kv_dim` values).
    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]);
    /// For every query head `h` (KV head `h / group`), over positions `first..=pos`:
    /// `out_h = Σ_i softmax_i(q_h · k_i · q_scale) · v_i`.
    fn attend(&mut self, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]);
    /// Bytes of the key cache.
    fn key_bytes(&self) -> usize;
    /// Bytes of the value cache.
    fn value_bytes(&self) -> usize;
    /// What the keys are, for reports: "f16", "f32", "pq16 S=128", ...
    fn describe(&self) -> alloc::string::String;
}

/// How exact keys are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPrecision {
    F16,
    F32,
}

/// Rows per layer: the whole context, or — for a layer that only ever attends to its last
/// `window` positions — a ring of `window` rows (position `p` in row `p % window`).
#[derive(Clone, Debug)]
pub(crate) struct LayerRows {
    offsets: Vec<usize>,
    caps: Vec<usize>,
}

impl LayerRows {
    /// `windows[l]` = 0 (or missing) keeps every position of layer `l`.
    fn new(layers: usize, context: usize, windows: &[usize]) -> LayerRows {
        let caps: Vec<usize> = (0..layers)
            .map(|l| match windows.get(l) {
                Some(&w) if w > 0 => w.min(context),
                _ => context,
            })
            .collect();
        let offsets = caps.iter().scan(0, |at, &c| Some(core::mem::replace(at, *at + c))).collect();
        LayerRows { offsets, caps }
    }

    /// Rows of all layers together.
    fn total(&self) -> usize {
        self.caps.iter().sum()
    }

    /// Rows of `layer`: its window, or the whole context.
    pub(crate) fn cap(&self, layer: usize) -> usize {
        self.caps[layer]
    }

    /// Row of `pos` in `layer`, counted from the first row of layer 0.
    fn row(&self, layer: usize, pos: usize) -> usize {
        self.offsets[layer] + pos % self.caps[layer]
    }

    /// First row of `layer`.
    fn start(&self, layer: usize) -> usize {
        self.offsets[layer]
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

    /// Sets the scores of a full ring's rows whose position is outside `first..=pos` to
    /// −∞ (zero weight after softmax).
    pub(crate) fn mask_outside(&self, layer: usize, first: usize, pos: usize, scores: &mut [f32]) {
        let cap = self.caps[layer];
        for (i, s) in scores.iter_mut().enumerate().take(cap) {
            let held = pos - (pos % cap + cap - i) % cap;
            if held < first {
                *s = f32::NEG_INFINITY;
            }
        }
    }
}

/// f16 values and the softmax · V half of attention, shared by every key cache.
pub struct ValueCache {
    shape: AttentionShape,
    rows: LayerRows,
    data: Vec<u16>,
    row: Vec<f32>,
}

impl ValueCache {
    pub fn new(shape: AttentionShape) -> ValueCache {
        ValueCache::with_windows(shape, &[])
    }

    /// Layers with `windows[l] > 0` keep a ring of that many positions.
    pub fn with_windows(shape: AttentionShape, windows: &[usize]) -> ValueCache {
        let rows = LayerRows::new(shape.layers, shape.context, windows);
        // the row scratch holds a block of rows for the x86 kernel, one row elsewhere
        ValueCache { shape, data: vec![0; rows.total() * shape.kv_dim()], rows, row: vec![0.0; 16 * shape.head_dim] }
    }

    pub fn bytes(&self) -> usize {
        2 * self.data.len()
    }

    /// The rows layout (shared with keys kept the same way).
    pub(crate) fn rows(&self) -> &LayerRows {
        &self.rows
    }

    pub fn store(&mut self, layer: usize, pos: usize, v: &[f32]) {
        let kv_dim = self.shape.kv_dim();
        let at = self.rows.row(layer, pos) * kv_dim;
        for (d, &x) in self.data[at..at + kv_dim].iter_mut().zip(v) {
            *d = f32_to_f16_bits(x);
        }
    }

    /// Softmax of each of the `group` score rows (`scores[g * stride..][..n]`), then
    /// `out[g · head_dim..]` = the rows' weighted sum of the values in `rows` (of
    /// `layer`'s rows, as `LayerRows::span` gives them) of `kv_head`: each value row is
    /// read and converted once for the whole group.
    pub fn softmax_mix(&mut self, layer: usize, kv_head: usize, rows: Range<usize>, scores: &mut [f32], stride: usize, out: &mut [f32]) {
        let (hd, kv_dim) = (self.shape.head_dim, self.shape.kv_dim());
        let base = (self.rows.start(layer) + rows.start) * kv_dim + kv_head * hd;
        let values = Rows { data: &self.data[base..], stride: kv_dim, len: hd, count: rows.len() };
        kernels::softmax_mix_f16(values, scores, stride, &mut self.row, out);
    }
}

/// Keys kept exactly (f16 or f32): scores are dot products.
pub struct ExactKvCache {
    shape: AttentionShape,
    precision: KeyPrecision,
    keys_f16: Vec<u16>,
    keys_f32: Vec<f32>,
    values: ValueCache,
    scores: Vec<f32>,
    row: Vec<f32>,
}

impl ExactKvCache {
    pub fn new(shape: AttentionShape, precision: KeyPrecision) -> ExactKvCache {
        ExactKvCache::with_windows(shape, precision, &[])
    }

    /// Layers with `windows[l] > 0` only ever attend to their last `windows[l]` positions
    /// and keep a ring of that many keys and values.
    pub fn with_windows(shape: AttentionShape, precision: KeyPrecision, windows: &[usize]) -> ExactKvCache {
        let values = ValueCache::with_windows(shape, windows);
        let n = values.rows().total() * shape.kv_dim();
        let (f16_len, f32_len) = match precision {
            KeyPrecision::F16 => (n, 0),
            KeyPrecision::F32 => (0, n),
        };
        ExactKvCache {
            shape,
            precision,
            keys_f16: vec![0; f16_len],
            keys_f32: vec![0.0; f32_len],
            values,
            scores: vec![0.0; shape.group() * shape.context],
            row: vec![0.0; shape.head_dim],
        }
    }
}

impl KvCache for ExactKvCache {
    fn shape(&self) -> AttentionShape {
        self.shape
    }

    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let kv_dim = self.shape.kv_dim();
        let at = self.values.rows().row(layer, pos) * kv_dim;
        match self.precision {
            KeyPrecision::F16 => self.keys_f16[at..at + kv_dim].iter_mut().zip(k).for_each(|(d, &x)| *d = f32_to_f16_bits(x)),
            KeyPrecision::F32 => self.keys_f32[at..at + kv_dim].copy_from_slice(k),
        }
        self.values.store(layer, pos, v);
    }

    fn attend(&mut self, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        let s = self.shape;
        let (hd, kv_dim, group) = (s.head_dim, s.kv_dim(), s.group());
        let (rows, masked) = self.values.rows().span(layer, first, pos);
        let n = rows.len();
        for kvh in 0..s.n_kv_heads {
            let heads = kvh * group * hd..(kvh + 1) * group * hd;
            let base = (self.values.rows().start(layer) + rows.start) * kv_dim + kvh * hd;
            match self.precision {
                KeyPrecision::F16 => {
                    let keys = Rows { data: &self.keys_f16[base..], stride: kv_dim, len: hd, count: n };
                    kernels::scores_f16(keys, &q[heads.clone()], q_scale, &mut self.row, &mut self.scores, s.context);
                }
                KeyPrecision::F32 => {
                    let keys = Rows { data: &self.keys_f32[base..], stride: kv_dim, len: hd, count: n };
                    kernels::scores_f32(keys, &q[heads.clone()], q_scale, &mut self.scores, s.context);
                }
            }
            if masked {
                for g in 0..group {
                    self.values.rows().mask_outside(layer, first, pos, &mut self.scores[g * s.context..][..n]);
                }
            }
            self.values.softmax_mix(layer, kvh, rows.clone(), &mut self.scores, s.context, &mut out[heads]);
        }
    }

    fn key_bytes(&self) -> usize {
        2 * self.keys_f16.len() + 4 * self.keys_f32.len()
    }

    fn value_bytes(&self) -> usize {
        self.values.bytes()
    }

    fn describe(&self) -> alloc::string::String {
        match self.precision {
            KeyPrecision::F16 => "exact f16".into(),
            KeyPrecision::F32 => "exact f32".into(),
        }
    }
}
