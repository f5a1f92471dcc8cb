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

/// f16 values and the softmax · V half of attention, shared by every key cache.
pub struct ValueCache {
    shape: AttentionShape,
    data: Vec<u16>,
    row: Vec<f32>,
}

impl ValueCache {
    pub fn new(shape: AttentionShape) -> ValueCache {
        // the row scratch holds a block of rows for the x86 kernel, one row elsewhere
        ValueCache { shape, data: vec![0; shape.layers * shape.context * shape.kv_dim()], row: vec![0.0; 16 * shape.head_dim] }
    }

    pub fn bytes(&self) -> usize {
        2 * self.data.len()
    }

    pub fn store(&mut self, layer: usize, pos: usize, v: &[f32]) {
        let kv_dim = self.shape.kv_dim();
        let at = (layer * self.shape.context + pos) * kv_dim;
        for (d, &x) in self.data[at..at + kv_dim].iter_mut().zip(v) {
            *d = f32_to_f16_bits(x);
        }
    }

    /// Softmax of each of the `group` score rows (`scores[g * stride..][..n]`), then
    /// `out[g · head_dim..]` = the rows' weighted sum of the values at `positions` of
    /// `kv_head`: each value row is read and converted once for the whole group.
    pub fn softmax_mix(
        &mut self,
        layer: usize,
        kv_head: usize,
        positions: Range<usize>,
        scores: &mut [f32],
        stride: usize,
        out: &mut [f32],
    ) {
        let (hd, kv_dim) = (self.shape.head_dim, self.shape.kv_dim());
        let base = (layer * self.shape.context + positions.start) * kv_dim + kv_head * hd;
        let values = Rows { data: &self.data[base..], stride: kv_dim, len: hd, count: positions.len() };
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
        let n = shape.layers * shape.context * shape.kv_dim();
        let (f16_len, f32_len) = match precision {
            KeyPrecision::F16 => (n, 0),
            KeyPrecision::F32 => (0, n),
        };
        ExactKvCache {
            shape,
            precision,
            keys_f16: vec![0; f16_len],
            keys_f32: vec![0.0; f32_len],
            values: ValueCache::new(shape),
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
        let at = (layer * self.shape.context + pos) * kv_dim;
        match self.precision {
            KeyPrecision::F16 => self.keys_f16[at..at + kv_dim].iter_mut().zip(k).for_each(|(d, &x)| *d = f32_to_f16_bits(x)),
            KeyPrecision::F32 => self.keys_f32[at..at + kv_dim].copy_from_slice(k),
        }
        self.values.store(layer, pos, v);
    }

    fn attend(&mut self, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        let s = self.shape;
        let (hd, kv_dim, group, n) = (s.head_dim, s.kv_dim(), s.group(), pos + 1 - first);
        for kvh in 0..s.n_kv_heads {
            let heads = kvh * group * hd..(kvh + 1) * group * hd;
            let base = (layer * s.context + first) * kv_dim + kvh * hd;
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
            self.values.softmax_mix(layer, kvh, first..pos + 1, &mut self.scores, s.context, &mut out[heads]);
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
