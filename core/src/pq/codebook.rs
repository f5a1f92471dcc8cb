//! Codebooks: for every layer and KV head, `S` sub-spaces × `K` centroids × `head_dim / S`
//! values; key encoding (nearest centroid per sub-space); query tables; and the GGUF side
//! file `lutra calibrate` writes.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::formats::gguf::{GgmlType, Gguf, GgufError, MAGIC};
use crate::kernels::pq_scan::{BLOCK_KEYS, MAX_SUBSPACES};

/// Longest key PQ supports (the rotation works in a stack buffer of this size).
pub const MAX_HEAD_DIM: usize = 1024;

/// A fixed orthogonal transform applied to keys and queries before product quantization:
/// dot products are unchanged, but a Hadamard transform spreads a few large dimensions
/// over all sub-spaces, which k-means then codes more evenly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotation {
    None,
    /// Normalized Walsh–Hadamard transform over blocks of the largest power of two
    /// dividing `head_dim`.
    Hadamard,
    /// Interleave the two halves (`v[i]`, `v[i + d/2]` become neighbours): the pairs
    /// NEOX RoPE rotates together fall into the same sub-space.
    RopePairs,
}

impl Rotation {
    pub fn name(self) -> &'static str {
        match self {
            Rotation::None => "none",
            Rotation::Hadamard => "hadamard",
            Rotation::RopePairs => "rope-pairs",
        }
    }

    pub fn from_name(name: &str) -> Option<Rotation> {
        [Rotation::None, Rotation::Hadamard, Rotation::RopePairs].into_iter().find(|r| r.name() == name)
    }

    /// Applies the transform in place.
    pub fn apply(self, v: &mut [f32]) {
        if self == Rotation::None || v.is_empty() {
            return;
        }
        if self == Rotation::RopePairs {
            let half = v.len() / 2;
            let mut copy = [0.0f32; MAX_HEAD_DIM];
            copy[..v.len()].copy_from_slice(v);
            for i in 0..half {
                v[2 * i] = copy[i];
                v[2 * i + 1] = copy[i + half];
            }
            return;
        }
        let block = 1 << v.len().trailing_zeros();
        let norm = 1.0 / libm::sqrtf(block as f32);
        for b in v.chunks_exact_mut(block) {
            let mut h = 1;
            while h < block {
                for i in (0..block).step_by(2 * h) {
                    for j in i..i + h {
                        let (x, y) = (b[j], b[j + h]);
                        b[j] = x + y;
                        b[j + h] = x - y;
                    }
                }
                h *= 2;
            }
            b.iter_mut().for_each(|x| *x *= norm);
        }
    }
}

/// Sub-space and centroid counts, and the attention shape they were trained for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PqShape {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub subspaces: usize,
    /// 16 (4-bit codes, the in-register fast path) or 256 (8-bit codes).
    pub centroids: usize,
}

impl PqShape {
    /// Checks what the kernels and the code layout need: an even number of sub-spaces,
    /// at most 256 and at most `head_dim`, and 16 or 256 centroids. When `subspaces` does
    /// not divide `head_dim`, the first `head_dim % subspaces` sub-spaces get one value more.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize, subspaces: usize, centroids: usize) -> Result<PqShape, PqError> {
        let s = PqShape { layers, kv_heads, head_dim, subspaces, centroids };
        let ok = layers > 0
            && head_dim <= MAX_HEAD_DIM
            && kv_heads > 0
            && layers.checked_mul(kv_heads).and_then(|n| n.checked_mul(head_dim)).and_then(|n| n.checked_mul(centroids)).is_some()
            && subspaces > 0
            && subspaces <= MAX_SUBSPACES
            && subspaces.is_multiple_of(2)
            && subspaces <= head_dim
            && (centroids == 16 || centroids == 256);
        if ok {
            Ok(s)
        } else {
            Err(PqError::BadShape(s))
        }
    }

    /// Whether every sub-space has the same number of values.
    pub fn is_uniform(&self) -> bool {
        self.head_dim.is_multiple_of(self.subspaces)
    }

    /// The key dimensions of sub-space `s` (its centroids are `centroids × len` values at
    /// `centroids × start` of each codebook).
    pub fn sub_range(&self, s: usize) -> core::ops::Range<usize> {
        let (base, extra) = (self.head_dim / self.subspaces, self.head_dim % self.subspaces);
        let start = s * base + s.min(extra);
        start..start + base + usize::from(s < extra)
    }

    /// f32 values of one (layer, KV head) codebook: `centroids × head_dim`.
    pub fn book_len(&self) -> usize {
        self.centroids * self.head_dim
    }

    /// Bytes of one key's codes.
    pub fn code_bytes_per_key(&self) -> usize {
        if self.centroids == 16 {
            self.subspaces / 2
        } else {
            self.subspaces
        }
    }

    /// Bytes of one 32-key code block.
    pub fn block_bytes(&self) -> usize {
        self.code_bytes_per_key() * BLOCK_KEYS
    }

    /// Key compression against f16 keys.
    pub fn compression_vs_f16(&self) -> f32 {
        (2 * self.head_dim) as f32 / self.code_bytes_per_key() as f32
    }
}

impl fmt::Display for PqShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} layers × {} KV heads, head_dim {}, {} sub-spaces of {} × {} centroids",
            self.layers,
            self.kv_heads,
            self.head_dim,
            self.subspaces,
            if self.is_uniform() {
                alloc::format!("{}", self.head_dim / self.subspaces)
            } else {
                alloc::format!("{}–{}", self.head_dim / self.subspaces, self.head_dim / self.subspaces + 1)
            },
            self.centroids
        )
    }
}

/// Why codebooks could not be read, built or used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PqError {
    /// Sub-space / centroid counts the kernels cannot run.
    BadShape(PqShape),
    /// The side file is not valid GGUF.
    Gguf(GgufError),
    /// The side file is GGUF but not lutra codebooks, or a field is missing or wrong.
    Malformed(&'static str),
    /// A kernel refused (e.g. an instruction set this CPU lacks).
    Kernel(crate::Error),
    /// Codebooks trained for another model.
    WrongModel { codebooks: PqShape, model_layers: usize, model_kv_heads: usize, model_head_dim: usize },
}

impl fmt::Display for PqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PqError::BadShape(s) => write!(
                f,
                "impossible product quantization {} sub-spaces × {} centroids for head_dim {} (sub-spaces: even, ≤ 256 and ≤ head_dim; centroids: 16 or 256)",
                s.subspaces, s.centroids, s.head_dim
            ),
            PqError::Gguf(e) => write!(f, "codebook file: {e}"),
            PqError::Malformed(what) => write!(f, "codebook file: {what}"),
            PqError::Kernel(e) => write!(f, "{e}"),
            PqError::WrongModel { codebooks, model_layers, model_kv_heads, model_head_dim } => write!(
                f,
                "codebooks are for {codebooks}, but the model has {model_layers} layers × {model_kv_heads} KV heads, head_dim {model_head_dim}"
            ),
        }
    }
}

impl core::error::Error for PqError {}

impl From<GgufError> for PqError {
    fn from(e: GgufError) -> Self {
        PqError::Gguf(e)
    }
}

/// Trained codebooks for every (layer, KV head).
#[derive(Clone, Debug, PartialEq)]
pub struct Codebooks {
    shape: PqShape,
    /// `general.architecture` of the model they were trained on.
    model: String,
    rotation: Rotation,
    /// `[layer][kv_head][sub-space][centroid][sub_dim]`.
    data: Vec<f32>,
    /// The same values as `[layer][kv_head][sub-space][sub_dim][centroid]`, so encoding
    /// and table building loop over contiguous centroids (and vectorize).
    by_dim: Vec<f32>,
    /// Empty, or `[layer][kv_head][head_dim]` positive factors: keys are multiplied and
    /// queries divided by them before quantization (dot products unchanged), so that
    /// k-means' squared error weighs each dimension as much as queries do.
    key_scale: Vec<f32>,
    /// Empty, or `[layer][kv_head][key, query][head_dim][head_dim]` row-major matrices `M`
    /// and `Q` with `Mᵀ·Q = I`: keys are multiplied by `M`, queries by `Q`, so
    /// `(Q·q)·(M·k) = q·k`. Calibration learns them (see `lutra calibrate --key-transform opq`).
    key_transform: Vec<f32>,
    /// Positions `0..context` were seen in calibration (0: not recorded). Keys are post-RoPE,
    /// so later positions carry rotations the centroids never saw.
    context: usize,
}

const ARCH: &str = "lutra-pq";
const TENSOR: &str = "pq.codebooks";
const SCALE_TENSOR: &str = "pq.key_scale";
const TRANSFORM_TENSOR: &str = "pq.key_transform";
const CONTEXT_KEY: &str = "lutra.pq.calibration_context";

impl Codebooks {
    /// `data` laid out `[layer][kv_head][sub-space][centroid][sub_dim]`, all finite.
    pub fn new(shape: PqShape, model: &str, rotation: Rotation, data: Vec<f32>) -> Result<Codebooks, PqError> {
        let shape = PqShape::new(shape.layers, shape.kv_heads, shape.head_dim, shape.subspaces, shape.centroids)?;
        if data.len() != shape.layers * shape.kv_heads * shape.book_len() {
            return Err(PqError::Malformed("codebook data does not match its shape"));
        }
        if !data.iter().all(|v| v.is_finite()) {
            return Err(PqError::Malformed("codebook holds NaN or infinity"));
        }
        let k = shape.centroids;
        let mut by_dim = vec![0.0; data.len()];
        for (book, out) in data.chunks_exact(shape.book_len()).zip(by_dim.chunks_exact_mut(shape.book_len())) {
            for s in 0..shape.subspaces {
                let r = shape.sub_range(s);
                let sd = r.len();
                let (book, out) = (&book[k * r.start..k * r.end], &mut out[k * r.start..k * r.end]);
                for c in 0..k {
                    for d in 0..sd {
                        out[d * k + c] = book[c * sd + d];
                    }
                }
            }
        }
        Ok(Codebooks { shape, model: model.into(), rotation, data, by_dim, key_scale: Vec::new(), key_transform: Vec::new(), context: 0 })
    }

    /// Records that calibration saw positions `0..context`.
    pub fn with_context(mut self, context: usize) -> Codebooks {
        self.context = context;
        self
    }

    /// How many positions calibration saw, if recorded.
    pub fn context(&self) -> Option<usize> {
        (self.context > 0).then_some(self.context)
    }

    /// Adds per-(layer, KV head) key and query matrices (`[layer][kv_head][key, query]
    /// [head_dim][head_dim]`, finite), which the centroids must have been trained with.
    pub fn with_key_transform(mut self, key_transform: Vec<f32>) -> Result<Codebooks, PqError> {
        let s = self.shape;
        if key_transform.len() != s.layers * s.kv_heads * 2 * s.head_dim * s.head_dim {
            return Err(PqError::Malformed("key transforms do not match the codebook shape"));
        }
        if !key_transform.iter().all(|v| v.is_finite()) {
            return Err(PqError::Malformed("key transforms hold NaN or infinity"));
        }
        self.key_transform = key_transform;
        Ok(self)
    }

    /// The (key, query) matrices of (layer, KV head), if any.
    pub fn key_transform(&self, layer: usize, kv_head: usize) -> Option<(&[f32], &[f32])> {
        let n = self.shape.head_dim * self.shape.head_dim;
        let i = layer * self.shape.kv_heads + kv_head;
        self.key_transform.get(2 * i * n..2 * (i + 1) * n).map(|m| m.split_at(n))
    }

    /// Rotation, key scales and key matrix applied to a key or (`query`) a query, in place.
    fn transform(&self, layer: usize, kv_head: usize, v: &mut [f32], query: bool) {
        self.rotation.apply(v);
        if let Some(scale) = self.key_scale(layer, kv_head) {
            if query {
                v.iter_mut().zip(scale).for_each(|(x, s)| *x /= s);
            } else {
                v.iter_mut().zip(scale).for_each(|(x, s)| *x *= s);
            }
        }
        if let Some((key_m, query_m)) = self.key_transform(layer, kv_head) {
            apply_matrix(if query { query_m } else { key_m }, v);
        }
    }

    /// Adds per-dimension key scales (`[layer][kv_head][head_dim]`, finite and > 0),
    /// which the centroids must have been trained with.
    pub fn with_key_scale(mut self, key_scale: Vec<f32>) -> Result<Codebooks, PqError> {
        let s = self.shape;
        if key_scale.len() != s.layers * s.kv_heads * s.head_dim {
            return Err(PqError::Malformed("key scales do not match the codebook shape"));
        }
        if !key_scale.iter().all(|v| v.is_finite() && *v > 0.0) {
            return Err(PqError::Malformed("key scales must be finite and positive"));
        }
        self.key_scale = key_scale;
        Ok(self)
    }

    /// The per-dimension key scales of (layer, KV head), if any.
    pub fn key_scale(&self, layer: usize, kv_head: usize) -> Option<&[f32]> {
        let hd = self.shape.head_dim;
        let i = layer * self.shape.kv_heads + kv_head;
        self.key_scale.get(i * hd..(i + 1) * hd)
    }

    pub fn shape(&self) -> PqShape {
        self.shape
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// The codebook of one (layer, KV head): `[sub-space][centroid][sub_dim]`.
    pub fn book(&self, layer: usize, kv_head: usize) -> &[f32] {
        let n = self.shape.book_len();
        let i = layer * self.shape.kv_heads + kv_head;
        &self.data[i * n..(i + 1) * n]
    }

    /// Refuses codebooks made for another attention shape.
    pub fn check_model(&self, layers: usize, kv_heads: usize, head_dim: usize) -> Result<(), PqError> {
        let s = self.shape;
        if (s.layers, s.kv_heads, s.head_dim) != (layers, kv_heads, head_dim) {
            return Err(PqError::WrongModel { codebooks: s, model_layers: layers, model_kv_heads: kv_heads, model_head_dim: head_dim });
        }
        Ok(())
    }

    /// The side file: GGUF v3, metadata `lutra.pq.*`, one f32 tensor
    /// `pq.codebooks` of ggml shape `[sub_dim, centroids, subspaces, layers · kv_heads]`
    /// (`[centroids · head_dim, layers · kv_heads]` when sub-spaces differ in size).
    pub fn to_gguf(&self) -> Vec<u8> {
        let s = self.shape;
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        put_u32(&mut out, 3);
        let hd = s.head_dim as u64;
        let heads = (s.layers * s.kv_heads) as u64;
        let books_shape = books_tensor_shape(s);
        let (scale_shape, transform_shape) = ([hd, heads], [hd, hd, 2, heads]);
        let tensors: Vec<(&str, &[u64], &[f32])> = [
            (TENSOR, &books_shape[..], &self.data[..]),
            (SCALE_TENSOR, &scale_shape[..], &self.key_scale[..]),
            (TRANSFORM_TENSOR, &transform_shape[..], &self.key_transform[..]),
        ]
        .into_iter()
        .filter(|t| !t.2.is_empty())
        .collect();
        put_u64(&mut out, tensors.len() as u64);
        let mut kvs: Vec<(&str, KvValue<'_>)> = vec![
            ("general.architecture", KvValue::Str(ARCH)),
            ("lutra.pq.model_architecture", KvValue::Str(&self.model)),
            ("lutra.pq.rotation", KvValue::Str(self.rotation.name())),
            ("lutra.pq.layers", KvValue::U32(s.layers as u32)),
            ("lutra.pq.kv_heads", KvValue::U32(s.kv_heads as u32)),
            ("lutra.pq.head_dim", KvValue::U32(s.head_dim as u32)),
            ("lutra.pq.subspaces", KvValue::U32(s.subspaces as u32)),
            ("lutra.pq.centroids", KvValue::U32(s.centroids as u32)),
        ];
        if self.context > 0 {
            kvs.push((CONTEXT_KEY, KvValue::U32(u32::try_from(self.context).unwrap_or(u32::MAX))));
        }
        put_u64(&mut out, kvs.len() as u64);
        for (key, value) in kvs {
            put_str(&mut out, key);
            match value {
                KvValue::U32(v) => {
                    put_u32(&mut out, 4); // GGUF_TYPE_UINT32
                    put_u32(&mut out, v);
                }
                KvValue::Str(v) => {
                    put_u32(&mut out, 8); // GGUF_TYPE_STRING
                    put_str(&mut out, v);
                }
            }
        }
        let mut offset = 0;
        for (name, dims, data) in &tensors {
            put_str(&mut out, name);
            put_u32(&mut out, dims.len() as u32);
            dims.iter().for_each(|&d| put_u64(&mut out, d));
            put_u32(&mut out, GgmlType::F32.id());
            put_u64(&mut out, offset as u64); // within the data section
            offset = (offset + 4 * data.len()).next_multiple_of(32);
        }
        out.resize(out.len().next_multiple_of(32), 0); // general.alignment default
        for (_, _, data) in &tensors {
            data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            out.resize(out.len().next_multiple_of(32), 0);
        }
        out
    }

    /// Reads a side file, checking every field before use.
    pub fn from_gguf(bytes: &[u8]) -> Result<Codebooks, PqError> {
        let g = Gguf::parse(bytes)?;
        if g.get_str("general.architecture") != Some(ARCH) {
            return Err(PqError::Malformed("not a lutra codebook file (general.architecture is not lutra-pq)"));
        }
        let field = |key: &'static str| g.get_u32(key).map(|v| v as usize).ok_or(PqError::Malformed(key));
        let shape = PqShape::new(
            field("lutra.pq.layers")?,
            field("lutra.pq.kv_heads")?,
            field("lutra.pq.head_dim")?,
            field("lutra.pq.subspaces")?,
            field("lutra.pq.centroids")?,
        )?;
        let model = g.get_str("lutra.pq.model_architecture").ok_or(PqError::Malformed("lutra.pq.model_architecture"))?;
        let rotation = g
            .get_str("lutra.pq.rotation")
            .and_then(Rotation::from_name)
            .ok_or(PqError::Malformed("lutra.pq.rotation is missing or not none / hadamard / rope-pairs"))?;
        let info = g.tensor(TENSOR).ok_or(PqError::Malformed("tensor pq.codebooks is missing"))?;
        if info.ggml_type != GgmlType::F32 || info.shape() != books_tensor_shape(shape).as_slice() {
            return Err(PqError::Malformed("tensor pq.codebooks has the wrong type or shape for the metadata"));
        }
        let raw = g.tensor_data(&info)?;
        let data = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        // optional (files from before it was recorded lack it)
        let context = g.get_u32(CONTEXT_KEY).map_or(0, |v| v as usize);
        let mut books = Codebooks::new(shape, model, rotation, data)?.with_context(context);
        let floats = |name: &'static str, dims: &[u64], wrong: &'static str| -> Result<Option<Vec<f32>>, PqError> {
            let Some(info) = g.tensor(name) else { return Ok(None) };
            if info.ggml_type != GgmlType::F32 || info.shape() != dims {
                return Err(PqError::Malformed(wrong));
            }
            Ok(Some(g.tensor_data(&info)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
        };
        let (hd, heads) = (shape.head_dim as u64, (shape.layers * shape.kv_heads) as u64);
        if let Some(scale) = floats(SCALE_TENSOR, &[hd, heads], "tensor pq.key_scale has the wrong type or shape for the metadata")? {
            books = books.with_key_scale(scale)?;
        }
        if let Some(m) =
            floats(TRANSFORM_TENSOR, &[hd, hd, 2, heads], "tensor pq.key_transform has the wrong type or shape for the metadata")?
        {
            books = books.with_key_transform(m)?;
        }
        Ok(books)
    }

    /// Nearest centroid (squared L2) of each sub-space of `key`, one code per sub-space.
    pub fn encode(&self, layer: usize, kv_head: usize, key_in: &[f32], codes: &mut [u8]) {
        let k = self.shape.centroids;
        let book = self.book_by_dim(layer, kv_head);
        let mut rotated = [0.0f32; MAX_HEAD_DIM];
        let key = &mut rotated[..key_in.len()];
        key.copy_from_slice(key_in);
        self.transform(layer, kv_head, key, false);
        let mut dist = [0.0f32; 256];
        let dist = &mut dist[..k];
        for (s, code) in codes.iter_mut().enumerate().take(self.shape.subspaces) {
            let r = self.shape.sub_range(s);
            let (x, by_dim) = (&key[r.clone()], &book[k * r.start..k * r.end]);
            // the same sums in the same order as `nearest`, centroids side by side
            dist.fill(0.0);
            for (&xd, row) in x.iter().zip(by_dim.chunks_exact(k)) {
                for (d, &c) in dist.iter_mut().zip(row) {
                    *d += (c - xd) * (c - xd);
                }
            }
            let mut best = (0, f32::INFINITY);
            for (c, &d) in dist.iter().enumerate() {
                if d < best.1 {
                    best = (c, d);
                }
            }
            *code = best.0 as u8;
        }
    }

    /// One (layer, KV head) codebook as `[sub-space][sub_dim][centroid]`.
    fn book_by_dim(&self, layer: usize, kv_head: usize) -> &[f32] {
        let n = self.shape.book_len();
        let i = layer * self.shape.kv_heads + kv_head;
        &self.by_dim[i * n..(i + 1) * n]
    }

    /// Query tables of one query head against one (layer, KV head) codebook:
    /// `LUT_s[i] = q_s · c_{s,i} · q_scale`, stored as `u8` with one scale for all
    /// sub-spaces (and each table's minimum folded into the bias) so the kernels add them
    /// as integers. `float` is scratch of `subspaces × centroids` and receives the
    /// unrounded tables; `tables` receives as many bytes.
    pub fn query_tables(
        &self,
        layer: usize,
        kv_head: usize,
        q_in: &[f32],
        q_scale: f32,
        float: &mut [f32],
        tables: &mut [u8],
    ) -> TableScale {
        let k = self.shape.centroids;
        let book = self.book_by_dim(layer, kv_head);
        let mut rotated = [0.0f32; MAX_HEAD_DIM];
        let q = &mut rotated[..q_in.len()];
        q.copy_from_slice(q_in);
        self.transform(layer, kv_head, q, true);
        q.iter_mut().for_each(|v| *v *= q_scale);
        let mut lows = [0.0f32; MAX_SUBSPACES];
        let mut widest = 0.0f32;
        for (s, lut) in float.chunks_exact_mut(k).enumerate().take(self.shape.subspaces) {
            let r = self.shape.sub_range(s);
            let (qs, by_dim) = (&q[r.clone()], &book[k * r.start..k * r.end]);
            lut.fill(0.0);
            for (&qd, row) in qs.iter().zip(by_dim.chunks_exact(k)) {
                for (v, &c) in lut.iter_mut().zip(row) {
                    *v += qd * c;
                }
            }
            let (lo, hi) = min_max(lut);
            lows[s] = lo;
            widest = widest.max(hi - lo);
        }
        // a range too narrow for 1 / scale to be finite scores as flat
        let scale = if widest >= 255.0 * f32::MIN_POSITIVE { widest / 255.0 } else { 1.0 };
        let inv = 1.0 / scale;
        // 0 ≤ (v − lo)·inv ≤ 255 (to an ulp): adding 1.5·2^23 rounds it to the nearest
        // integer, which lands in the low mantissa bits (a bit cast, so the loop vectorizes)
        const ROUND: f32 = 12_582_912.0;
        for ((t, v), &lo) in tables.chunks_exact_mut(k).zip(float.chunks_exact(k)).zip(&lows) {
            for (t, &v) in t.iter_mut().zip(v) {
                *t = ((v - lo) * inv + ROUND).to_bits() as u8;
            }
        }
        TableScale { scale, bias: lows[..self.shape.subspaces].iter().sum() }
    }
}

/// Smallest and largest of `x`, in 16 independent lanes so the loop vectorizes.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([f32::INFINITY; 16], [f32::NEG_INFINITY; 16]);
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for j in 0..16 {
            lo[j] = if c[j] < lo[j] { c[j] } else { lo[j] };
            hi[j] = if c[j] > hi[j] { c[j] } else { hi[j] };
        }
    }
    let rest = chunks.remainder();
    let lo = lo.iter().chain(rest).copied().fold(f32::INFINITY, f32::min);
    let hi = hi.iter().chain(rest).copied().fold(f32::NEG_INFINITY, f32::max);
    (lo, hi)
}

/// `v ← M·v` for the row-major `v.len()`² matrix `m` (`v.len()` ≤ `MAX_HEAD_DIM`): `v`
/// scored against M's rows by the attention kernel (AVX2 + FMA when present).
pub fn apply_matrix(m: &[f32], v: &mut [f32]) {
    let n = v.len();
    let mut copy = [0.0f32; MAX_HEAD_DIM];
    copy[..n].copy_from_slice(v);
    let rows = crate::kernels::attend::Rows { data: m, stride: n, len: n, count: n };
    crate::kernels::attend::scores_f32(rows, &copy[..n], 1.0, v, n);
}

/// ggml shape of `pq.codebooks`.
fn books_tensor_shape(s: PqShape) -> Vec<u64> {
    let heads = (s.layers * s.kv_heads) as u64;
    if s.is_uniform() {
        vec![(s.head_dim / s.subspaces) as u64, s.centroids as u64, s.subspaces as u64, heads]
    } else {
        vec![(s.centroids * s.head_dim) as u64, heads]
    }
}

/// A key's score from its integer table sum: `scale · sum + bias`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TableScale {
    pub scale: f32,
    pub bias: f32,
}

impl TableScale {
    pub fn score(&self, sum: u16) -> f32 {
        self.scale * f32::from(sum) + self.bias
    }
}

/// Index of the centroid (rows of `x.len()` values in `centroids`) nearest to `x`.
pub fn nearest(centroids: &[f32], x: &[f32]) -> usize {
    let mut best = (0, f32::INFINITY);
    for (i, c) in centroids.chunks_exact(x.len()).enumerate() {
        let d: f32 = c.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum();
        if d < best.1 {
            best = (i, d);
        }
    }
    best.0
}

enum KvValue<'a> {
    U32(u32),
    Str(&'a str),
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}
