//! The Llama architecture, from llama2.c checkpoints: f32 weights quantized on load to
//! `bits` (1–8) with per-group scales and minima; every matrix product, the classifier
//! included, is a LUT GEMV; RMSNorm, RoPE, softmax and SiLU in f32 via libm; the KV
//! cache in f16. `State` holds all working memory, allocated once: `forward` never
//! allocates.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::arch::{ArchState, Architecture};
use crate::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, PromptBatch};
use crate::formats::gguf::Gguf;
use crate::formats::import::{meta_f32, meta_u32, vector, weights, TensorSource, Weights};
use crate::formats::llama2c::{Checkpoint, F32Tensor};
use crate::kernels::lut::Tables;
use crate::model::ops::{add, rmsnorm, rope_adjacent, RopeAngles};
use crate::model::{feed_in_batches, group_for, Gemv, ModelError, PREFILL_BATCH};
use crate::{AlignedBytes, Offset, OwnedTables, PackedMatrix};

/// Hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaConfig {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub vocab_size: usize,
    pub seq_len: usize,
    pub rope_theta: f32,
    pub norm_eps: f32,
}

impl LlamaConfig {
    pub fn head_size(&self) -> usize {
        self.dim / self.n_heads
    }
    pub fn kv_dim(&self) -> usize {
        self.head_size() * self.n_kv_heads
    }
}

type Matrix = PackedMatrix<AlignedBytes>;

/// The packed file's tensor holding the checkpoint's `tokenizer.bin`.
pub const TOKENIZER_BLOB: &str = "tokenizer.llama2c";

/// One transformer block.
pub struct LlamaLayer {
    pub rms_att: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    pub rms_ffn: Vec<f32>,
    pub w1: Matrix,
    pub w2: Matrix,
    pub w3: Matrix,
}

pub struct Llama {
    pub config: LlamaConfig,
    /// f32 rows: the input of the network is a lookup, not a product.
    pub token_embedding: AlignedBytes,
    pub layers: Vec<LlamaLayer>,
    pub rms_final: Vec<f32>,
    pub classifier: Matrix,
    /// Group size of the matrices whose input has `dim` / `hidden_dim` columns.
    pub group_dim: usize,
    pub group_hidden: usize,
}

fn read(t: &F32Tensor<'_>) -> Result<Vec<f32>, ModelError> {
    let mut v = vec![0.0; t.len()];
    t.read_all(&mut v)?;
    Ok(v)
}

/// f32 values as aligned little-endian bytes.
fn f32_bytes(v: &[f32]) -> AlignedBytes {
    let mut bytes = AlignedBytes::zeroed(v.len() * 4);
    bytes.as_f32s_mut().copy_from_slice(v);
    bytes
}

/// Quantize one matrix; the f32 copy lives only for the call.
fn quantize(t: &F32Tensor<'_>, bits: u8, group: usize) -> Result<Matrix, ModelError> {
    let w = read(t)?;
    Ok(PackedMatrix::quantize(&w, t.rows(), t.cols(), bits, group, Offset::Min)?)
}

impl Llama {
    /// Quantize a llama2.c checkpoint to `bits` per weight (group sizes up to 128).
    pub fn from_llama2c(ckpt: &Checkpoint<'_>, bits: u8) -> Result<Llama, ModelError> {
        Self::from_llama2c_with_progress(ckpt, bits, |_, _| {})
    }

    /// As `from_llama2c`, calling `progress(done, total)` after each matrix.
    pub fn from_llama2c_with_progress(
        ckpt: &Checkpoint<'_>,
        bits: u8,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Llama, ModelError> {
        if !(1..=8).contains(&bits) {
            return Err(ModelError::UnsupportedBits(bits));
        }
        let c = ckpt.config();
        let config = LlamaConfig {
            dim: c.dim,
            hidden_dim: c.hidden_dim,
            n_layers: c.n_layers,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            vocab_size: c.vocab_size,
            seq_len: c.seq_len,
            rope_theta: 10_000.0,
            norm_eps: 1e-5,
        };
        let group_dim = group_for(c.dim, 128)?;
        let group_hidden = group_for(c.hidden_dim, 128)?;
        let total = 7 * c.n_layers + 1;
        let mut done = 0;
        let mut step = |done: &mut usize| {
            *done += 1;
            progress(*done, total);
        };
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let t = ckpt.layer(l)?;
            let mut q = |m: &F32Tensor<'_>, g: usize| {
                let r = quantize(m, bits, g);
                step(&mut done);
                r
            };
            layers.push(LlamaLayer {
                rms_att: read(&t.rms_att)?,
                wq: q(&t.wq, group_dim)?,
                wk: q(&t.wk, group_dim)?,
                wv: q(&t.wv, group_dim)?,
                wo: q(&t.wo, group_dim)?,
                rms_ffn: read(&t.rms_ffn)?,
                w1: q(&t.w1, group_dim)?,
                w2: q(&t.w2, group_hidden)?,
                w3: q(&t.w3, group_dim)?,
            });
        }
        let classifier = quantize(&ckpt.classifier()?, bits, group_dim)?;
        step(&mut done);
        Ok(Llama {
            config,
            token_embedding: f32_bytes(&read(&ckpt.token_embedding()?)?),
            layers,
            rms_final: read(&ckpt.rms_final()?)?,
            classifier,
            group_dim,
            group_hidden,
        })
    }

    /// Writes the model packed (`crate::formats::pack`): its hyperparameters as `llama.*` keys,
    /// `tokenizer` (the checkpoint's `tokenizer.bin`) as a byte tensor, and every tensor
    /// under its GGUF name as the kernels read it.
    pub fn write_packed<'a>(&'a self, tokenizer: &'a [u8], w: &mut crate::formats::pack::Writer<'a>) {
        let c = &self.config;
        w.str("general.architecture", "llama");
        w.str(crate::formats::pack::SOURCE_KEY, "llama2c");
        for (key, v) in [
            ("llama.embedding_length", c.dim),
            ("llama.feed_forward_length", c.hidden_dim),
            ("llama.block_count", c.n_layers),
            ("llama.attention.head_count", c.n_heads),
            ("llama.attention.head_count_kv", c.n_kv_heads),
            ("llama.vocab_size", c.vocab_size),
            ("llama.context_length", c.seq_len),
        ] {
            w.u32(key, v as u32);
        }
        w.f32("llama.rope.freq_base", c.rope_theta);
        w.f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
        w.blob(TOKENIZER_BLOB, tokenizer);
        w.f32s("token_embd.weight", self.token_embedding.as_f32s());
        for (l, layer) in self.layers.iter().enumerate() {
            let name = |t: &str| alloc::format!("blk.{l}.{t}.weight");
            w.f32s(&name("attn_norm"), &layer.rms_att);
            w.lookup(&name("attn_q"), &layer.wq);
            w.lookup(&name("attn_k"), &layer.wk);
            w.lookup(&name("attn_v"), &layer.wv);
            w.lookup(&name("attn_output"), &layer.wo);
            w.f32s(&name("ffn_norm"), &layer.rms_ffn);
            w.lookup(&name("ffn_gate"), &layer.w1);
            w.lookup(&name("ffn_down"), &layer.w2);
            w.lookup(&name("ffn_up"), &layer.w3);
        }
        w.f32s("output_norm.weight", &self.rms_final);
        w.lookup("output.weight", &self.classifier);
    }

    /// A model written by `write_packed`, its matrices read in place where `source`
    /// lends them; returns the model and the `tokenizer.bin` bytes.
    pub fn from_packed(g: &Gguf<'_>, source: &mut dyn TensorSource) -> Result<(Llama, Vec<u8>), ModelError> {
        let get = |key: &'static str| meta_u32(g, key);
        let config = LlamaConfig {
            dim: get("llama.embedding_length")?,
            hidden_dim: get("llama.feed_forward_length")?,
            n_layers: get("llama.block_count")?,
            n_heads: get("llama.attention.head_count")?,
            n_kv_heads: get("llama.attention.head_count_kv")?,
            vocab_size: get("llama.vocab_size")?,
            seq_len: get("llama.context_length")?,
            rope_theta: meta_f32(g, "llama.rope.freq_base")?,
            norm_eps: meta_f32(g, "llama.attention.layer_norm_rms_epsilon")?,
        };
        let c = config;
        if c.n_heads == 0
            || c.n_kv_heads == 0
            || !c.dim.is_multiple_of(c.n_heads)
            || !c.n_heads.is_multiple_of(c.n_kv_heads)
            || c.n_layers == 0
            || c.vocab_size == 0
        {
            return Err(ModelError::BadPackedFile(alloc::format!("impossible llama hyperparameters {c:?}")));
        }
        let (q, kv) = (c.dim, c.kv_dim());
        let mut matrix = |name: String, shape: (usize, usize)| match weights(g, source, &name, Some(shape), |_| {})? {
            Weights::Lookup(m) => Ok(m),
            Weights::Int8(_) => {
                Err(ModelError::BadPackedFile(alloc::format!("{name}: an int8 matrix where llama2.c weights are bit planes")))
            }
        };
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let name = |t: &str| alloc::format!("blk.{l}.{t}.weight");
            layers.push(LlamaLayer {
                rms_att: Vec::new(),
                wq: matrix(name("attn_q"), (q, c.dim))?,
                wk: matrix(name("attn_k"), (kv, c.dim))?,
                wv: matrix(name("attn_v"), (kv, c.dim))?,
                wo: matrix(name("attn_output"), (c.dim, q))?,
                rms_ffn: Vec::new(),
                w1: matrix(name("ffn_gate"), (c.hidden_dim, c.dim))?,
                w2: matrix(name("ffn_down"), (c.dim, c.hidden_dim))?,
                w3: matrix(name("ffn_up"), (c.hidden_dim, c.dim))?,
            });
        }
        let classifier = matrix("output.weight".into(), (c.vocab_size, c.dim))?;
        for (l, layer) in layers.iter_mut().enumerate() {
            layer.rms_att = vector(g, source, &alloc::format!("blk.{l}.attn_norm.weight"), c.dim)?;
            layer.rms_ffn = vector(g, source, &alloc::format!("blk.{l}.ffn_norm.weight"), c.dim)?;
        }
        let token_embedding = crate::formats::pack::packed_f32s(g, source, "token_embd.weight", c.vocab_size * c.dim)?;
        let rms_final = vector(g, source, "output_norm.weight", c.dim)?;
        let (group_dim, group_hidden) = (layers[0].wq.layout().group(), layers[0].w2.layout().group());
        let model = Llama { config, token_embedding, layers, rms_final, classifier, group_dim, group_hidden };
        if model.layers.iter().any(|l| {
            l.w2.layout().group() != group_hidden
                || [&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w3].iter().any(|m| m.layout().group() != group_dim)
        }) || model.classifier.layout().group() != group_dim
        {
            return Err(ModelError::BadPackedFile("matrices of one input width with different group sizes".into()));
        }
        let tokenizer = crate::formats::pack::packed_blob(g, source, TOKENIZER_BLOB)?;
        Ok((model, tokenizer))
    }

    /// `forward` without the logits: puts `token` at `pos` into the cache, for prompt
    /// tokens whose prediction nobody reads.
    pub fn feed<G: Gemv>(&self, gemv: &G, s: &mut State, token: u32, pos: usize) -> Result<(), ModelError> {
        self.feed_batch(gemv, s, &[token], pos)
    }

    fn feed_chunk<G: Gemv>(&self, gemv: &G, s: &mut State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (c, b) = (&self.config, &mut *s.batch);
        let (n, dim, hidden, kvd, head_size) = (tokens.len(), c.dim, c.hidden_dim, c.kv_dim(), c.head_size());
        for (i, &token) in tokens.iter().enumerate() {
            b.x[i * dim..(i + 1) * dim].copy_from_slice(&self.token_embedding.as_f32s()[token as usize * dim..(token as usize + 1) * dim]);
            b.rope[i].set_position(first_pos + i);
        }
        for (l, layer) in self.layers.iter().enumerate() {
            // attention: norm, qkv, rope
            for (xb, x) in b.xb[..n * dim].chunks_exact_mut(dim).zip(b.x.chunks_exact(dim)) {
                rmsnorm(xb, x, &layer.rms_att, c.norm_eps);
            }
            b.dim.build(&b.xb, n)?;
            b.dim.product(gemv, &layer.wq, n, &mut b.q, &mut b.scratch)?;
            b.dim.product(gemv, &layer.wk, n, &mut b.k, &mut b.scratch)?;
            b.dim.product(gemv, &layer.wv, n, &mut b.v, &mut b.scratch)?;
            for ((q, k), angles) in b.q[..n * dim].chunks_exact_mut(dim).zip(b.k.chunks_exact_mut(kvd)).zip(&b.rope) {
                rope(q, k, head_size, angles);
            }

            // each token's key and value into the cache, and its attention over 0..=pos
            let q_scale = 1.0 / libm::sqrtf(head_size as f32);
            let batch = PromptBatch { first_pos, window: None, k: &b.k[..n * kvd], v: &b.v[..n * kvd], q: &b.q[..n * dim], q_scale };
            s.cache.store_and_attend(gemv.parallel(), l, &batch, &mut b.xb[..n * dim]);

            // output projection and residual
            b.dim.build(&b.xb, n)?;
            b.dim.product(gemv, &layer.wo, n, &mut b.xb2, &mut b.scratch)?;
            add(&mut b.x[..n * dim], &b.xb2[..n * dim]);

            // ffn: norm, gate and up, SiLU, down, residual
            for (xb, x) in b.xb[..n * dim].chunks_exact_mut(dim).zip(b.x.chunks_exact(dim)) {
                rmsnorm(xb, x, &layer.rms_ffn, c.norm_eps);
            }
            b.dim.build(&b.xb, n)?;
            b.dim.product(gemv, &layer.w1, n, &mut b.hb, &mut b.scratch)?;
            b.dim.product(gemv, &layer.w3, n, &mut b.hb2, &mut b.scratch)?;
            for (h, &up) in b.hb[..n * hidden].iter_mut().zip(&b.hb2) {
                *h = *h / (1.0 + libm::expf(-*h)) * up;
            }
            b.hidden.build(&b.hb, n)?;
            b.hidden.product(gemv, &layer.w2, n, &mut b.xb, &mut b.scratch)?;
            add(&mut b.x[..n * dim], &b.xb[..n * dim]);
        }
        Ok(())
    }
}

/// One table set per token of a batch for matrices of one column count, with residual
/// tables when the state uses them.
struct BatchTables {
    cols: usize,
    tables: Vec<OwnedTables>,
    residual: Vec<OwnedTables>,
}

impl BatchTables {
    fn new(cols: usize, group: usize, residual: bool) -> Result<BatchTables, ModelError> {
        let set = || (0..PREFILL_BATCH).map(|_| OwnedTables::new(cols, group)).collect::<Result<Vec<_>, _>>();
        Ok(BatchTables { cols, tables: set()?, residual: if residual { set()? } else { Vec::new() } })
    }

    /// Tables (and residual tables) of the first `n` rows of `xs`.
    fn build(&mut self, xs: &[f32], n: usize) -> Result<(), ModelError> {
        for (i, x) in xs.chunks_exact(self.cols).take(n).enumerate() {
            let t = self.tables[i].build(x)?;
            if let Some(r) = self.residual.get_mut(i) {
                r.build_residual(x, t)?;
            }
        }
        Ok(())
    }

    /// `ys = W·x` for the first `n` tokens (`ys` token-major), plus the product over the
    /// residual tables when there are any.
    fn product<G: Gemv>(&self, gemv: &G, m: &Matrix, n: usize, ys: &mut [f32], scratch: &mut [f32]) -> Result<(), ModelError> {
        let len = n * m.layout().rows();
        let views: [Tables<'_>; PREFILL_BATCH] = core::array::from_fn(|i| self.tables[i].view());
        gemv.gemm(m, &views[..n], &mut ys[..len])?;
        if !self.residual.is_empty() {
            let residual: [Tables<'_>; PREFILL_BATCH] = core::array::from_fn(|i| self.residual[i].view());
            gemv.gemm(m, &residual[..n], &mut scratch[..len])?;
            add(&mut ys[..len], &scratch[..len]);
        }
        Ok(())
    }
}

/// Working memory of up to `PREFILL_BATCH` tokens: activations, tables and rotary angles,
/// token-major.
struct Batch {
    x: Vec<f32>,
    xb: Vec<f32>,
    xb2: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    dim: BatchTables,
    hidden: BatchTables,
    /// Residual products, before they are added (empty without residual tables).
    scratch: Vec<f32>,
    rope: Vec<RopeAngles>,
}

impl Batch {
    fn new(model: &Llama, residual: bool) -> Result<Batch, ModelError> {
        let (c, n) = (&model.config, PREFILL_BATCH);
        Ok(Batch {
            x: vec![0.0; n * c.dim],
            xb: vec![0.0; n * c.dim],
            xb2: vec![0.0; n * c.dim],
            hb: vec![0.0; n * c.hidden_dim],
            hb2: vec![0.0; n * c.hidden_dim],
            q: vec![0.0; n * c.dim],
            k: vec![0.0; n * c.kv_dim()],
            v: vec![0.0; n * c.kv_dim()],
            dim: BatchTables::new(c.dim, model.group_dim, residual)?,
            hidden: BatchTables::new(c.hidden_dim, model.group_hidden, residual)?,
            // the classifier's residual product needs a vocabulary's worth
            scratch: vec![0.0; if residual { (n * c.hidden_dim.max(c.dim)).max(c.vocab_size) } else { 0 }],
            rope: (0..n).map(|_| rope_angles(c.rope_theta, c.head_size())).collect(),
        })
    }
}

/// Working memory of one sequence: the f16 KV cache, and activations, tables and angles
/// of up to `PREFILL_BATCH` tokens (one token's `forward` is a batch of one).
pub struct State {
    context: usize,
    cache: Box<dyn KvCache>,
    batch: Box<Batch>,
    logits: Vec<f32>,
}

impl State {
    /// For up to `context` positions (at most the model's `seq_len`), exact f16 keys.
    pub fn new(model: &Llama, context: usize) -> Result<State, ModelError> {
        let shape = model.attention_shape(context);
        Self::with_cache(model, Box::new(ExactKvCache::new(shape, KeyPrecision::F16)))
    }

    /// With a KV cache made for `model.attention_shape(context)`.
    pub fn with_cache(model: &Llama, cache: Box<dyn KvCache>) -> Result<State, ModelError> {
        let c = &model.config;
        let context = cache.shape().context;
        if cache.shape() != model.attention_shape(context) {
            return Err(ModelError::CacheShape { expected: model.attention_shape(context), got: cache.shape() });
        }
        // int8 tables dominate the error of ≥ 5-bit weights: add the residual products
        let fine = model.classifier.layout().bits() >= 5;
        Ok(State { context, cache, batch: Box::new(Batch::new(model, fine)?), logits: vec![0.0; c.vocab_size] })
    }

    /// Bytes of the KV cache.
    pub fn kv_cache_bytes(&self) -> usize {
        self.cache.key_bytes() + self.cache.value_bytes()
    }
}

impl Architecture for Llama {
    type State = State;

    fn runs_gguf(_name: &str) -> bool {
        false
    }
    fn from_gguf(
        gguf: &Gguf<'_>,
        _: &mut dyn TensorSource,
        _: &mut dyn FnMut(crate::formats::import::Imported<'_>),
    ) -> Result<Self, ModelError> {
        let found = gguf.get_str("general.architecture").unwrap_or("none").into();
        Err(ModelError::WrongArchitecture { expected: "a llama2.c checkpoint", found })
    }
    fn name(&self) -> &'static str {
        "llama"
    }
    fn dims(&self) -> crate::model::budget::Dims {
        let c = &self.config;
        crate::model::budget::Dims {
            family: crate::model::budget::Family::Llama { residual_tables: self.classifier.layout().bits() >= 5 },
            dim: c.dim,
            hidden_dim: c.hidden_dim,
            layers: c.n_layers,
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            head_dim: c.head_size(),
            vocab_size: c.vocab_size,
            token_bytes: 0,
        }
    }
    fn context_length(&self) -> usize {
        self.config.seq_len
    }
    /// Bytes of the quantized matrices (the classifier included).
    fn matrix_bytes(&self) -> usize {
        let layer = |l: &LlamaLayer| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3].iter().map(|m| m.as_bytes().len()).sum::<usize>();
        self.layers.iter().map(layer).sum::<usize>() + self.classifier.as_bytes().len()
    }
    /// The buffers of every matrix the model multiplies by, in the order a decode step
    /// reads them (layer by layer, the classifier last).
    fn matrix_buffers_mut(&mut self) -> Vec<&mut AlignedBytes> {
        let layers = self.layers.iter_mut().flat_map(|l| [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo, &mut l.w1, &mut l.w3, &mut l.w2]);
        layers.chain([&mut self.classifier]).map(|m| m.data_mut()).collect()
    }
    /// The attention a KV cache for up to `context` positions must serve.
    fn attention_shape(&self, context: usize) -> AttentionShape {
        let c = &self.config;
        AttentionShape {
            layers: c.n_layers,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_size(),
            context: context.min(c.seq_len).max(1),
        }
    }
    fn layer_windows(&self) -> Vec<usize> {
        vec![0; self.config.n_layers]
    }
    /// `origin` is the checkpoint's `tokenizer.bin` (the engine has checked it), kept in
    /// the packed file.
    fn write_packed<'a>(&'a self, origin: &'a [u8], writer: &mut crate::formats::pack::Writer<'a>) -> Result<(), ModelError> {
        Llama::write_packed(self, origin, writer);
        Ok(())
    }
    fn new_state(&self, cache: Box<dyn KvCache>) -> Result<State, ModelError> {
        State::with_cache(self, cache)
    }
    /// Logits for `token` at position `pos`; positions must be fed in order from 0.
    fn forward<'s, G: Gemv>(&self, gemv: &G, s: &'s mut State, token: u32, pos: usize) -> Result<&'s [f32], ModelError> {
        self.feed(gemv, s, token, pos)?;
        let (dim, b) = (self.config.dim, &mut *s.batch);
        // final norm and classifier
        rmsnorm(&mut b.xb[..dim], &b.x[..dim], &self.rms_final, self.config.norm_eps);
        b.dim.build(&b.xb, 1)?;
        b.dim.product(gemv, &self.classifier, 1, &mut s.logits, &mut b.scratch)?;
        Ok(&s.logits)
    }
    /// `feed` for `tokens` at positions `first_pos..`, up to `PREFILL_BATCH` at a time over
    /// one pass of each weight matrix (prefill): the cache and every later logit are what
    /// feeding them one by one gives, bit for bit.
    fn feed_batch<G: Gemv>(&self, gemv: &G, s: &mut State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (context, vocab_size) = (s.context, self.config.vocab_size);
        feed_in_batches(tokens, first_pos, context, vocab_size, |chunk, pos| self.feed_chunk(gemv, s, chunk, pos))
    }
}

impl ArchState for State {
    fn context(&self) -> usize {
        self.context
    }
    fn cache(&self) -> &dyn KvCache {
        &*self.cache
    }
    /// The logits of the last `forward`.
    fn logits(&self) -> &[f32] {
        &self.logits
    }
}

/// llama2.c's RoPE: rotate adjacent pairs (2j, 2j + 1) of every head by pair j's angle.
fn rope(q: &mut [f32], k: &mut [f32], head_size: usize, angles: &RopeAngles) {
    for head in q.chunks_exact_mut(head_size).chain(k.chunks_exact_mut(head_size)) {
        rope_adjacent(head, angles);
    }
}

/// llama2.c's RoPE frequencies: pair j of a head turns at 1 / theta^(2j/head_size).
fn rope_angles(theta: f32, head_size: usize) -> RopeAngles {
    RopeAngles::new((0..head_size / 2).map(|j| 1.0 / libm::powf(theta, (2 * j) as f32 / head_size as f32)).collect())
}
