//! The Llama family of GGUF architectures, as llama.cpp runs them: `llama` (Llama 2, 3,
//! 3.1, 3.2, TinyLlama, SmolLM/SmolLM2, Mistral-7B-style files, stories15M from
//! llama.cpp's llama2.c converter), `qwen2` and `qwen3`. One graph, with the three
//! visible differences:
//!
//! - `llama` rotates adjacent pairs (ggml's "normal" RoPE); `qwen2` and `qwen3` rotate
//!   dimension `i` with `i + head_dim/2` (NEOX).
//! - `qwen3` RMS-normalizes each query and key head before the rotation (QK-norm).
//! - Biases on the query, key, value and output projections are added where the file has
//!   them (`qwen2` has q/k/v biases).
//!
//! llama2.c checkpoints run on this graph too (`crate::arch::llama` maps them onto it),
//! with [`Numerics::Llama2c`]: llama2.c's own RoPE frequencies and SiLU, f32 token
//! embedding rows, and residual tables for 5–8-bit matrices.
//!
//! Everything else is shared: RMSNorm, grouped-query attention scaled by 1/√head_dim, a
//! SiLU-gated FFN, an LM head that is `output.weight` or, when the file has none, the
//! token embedding (tied). Every product is a LUT GEMV (or an int8 dot product for Q8_0
//! and float matrices) over the imported weights.
//!
//! # Configuration
//!
//! Read as llama.cpp's `load_hparams` reads it for these architectures. A value lutra
//! does not implement is `ModelError::Unsupported` naming the key:
//!
//! - Sizes: `embedding_length`, `block_count`, `feed_forward_length`, `context_length`,
//!   `attention.head_count`, `attention.layer_norm_rms_epsilon` are required;
//!   `attention.head_count_kv` defaults to the head count, `attention.key_length` and
//!   `attention.value_length` to dim / heads (they must be equal); per-layer arrays are
//!   refused. `rope.dimension_count` must equal the key length (llama.cpp refuses partial
//!   rotation for `llama` too). `expert_count` > 0 (mixture of experts) is refused.
//! - RoPE: base `rope.freq_base` (default 10 000); `rope.scaling.type` `none` or `linear`
//!   (`rope.scaling.factor` f multiplies positions by 1/f); `yarn`, `longrope` and others
//!   are refused, as is `rope.scaling.attn_factor` ≠ 1. Llama 3.1/3.2's "llama3" scaling
//!   is the `rope_freqs.weight` tensor the converter writes: pair `i`'s frequency is
//!   divided by its factor, as ggml's `rope_ext` does with `freq_factors`.
//! - Tensors: every tensor in the file must be one this graph reads (as llama.cpp's
//!   loader insists): fused `attn_qkv`, FFN biases, an `output.bias`, expert tensors…
//!   are refused by name rather than ignored.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::arch::{Architecture, State};
use crate::attention::{ExactKvCache, KeyPrecision, KvCache, PromptBatch};
use crate::formats::gguf::{Gguf, Value};
use crate::formats::import::{Imported, Importer, InMemory, TensorSource, Weights};
use crate::formats::llama2c::{MAX_DIM, MAX_HEADS, MAX_HIDDEN_DIM, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB};
use crate::kernels::attend::exp;
use crate::model::hparams::{linear_rope_scale, optional, required, rope_base, unsupported};
use crate::model::ops::{add, rmsnorm, rmsnorm_in_place, rope_adjacent, rope_neox, RopeAngles};
use crate::model::products::{self, batch_product, batch_products, first_rows, for_each_row_pair, Scratch};
use crate::model::{feed_in_batches, Gemv, Hparams, ModelError, TablePrecision, PREFILL_BATCH};

/// Which member of the family a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    /// The architecture of `general.architecture = name`, if it is one of the family.
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    /// Whether RoPE rotates dimension `i` with `i + head_dim/2` (else adjacent pairs).
    pub fn neox_rope(self) -> bool {
        self != Arch::Llama
    }

    /// Whether query and key heads are RMS-normalized before RoPE.
    pub fn qk_norm(self) -> bool {
        self == Arch::Qwen3
    }

    fn keys(self) -> &'static Keys {
        match self {
            Arch::Llama => &keys!("llama"),
            Arch::Qwen2 => &keys!("qwen2"),
            Arch::Qwen3 => &keys!("qwen3"),
        }
    }
}

/// The metadata keys of one architecture (errors name them, so they are `'static`).
struct Keys {
    dim: &'static str,
    hidden_dim: &'static str,
    layers: &'static str,
    heads: &'static str,
    kv_heads: &'static str,
    key_length: &'static str,
    value_length: &'static str,
    context: &'static str,
    vocab_size: &'static str,
    norm_eps: &'static str,
    expert_count: &'static str,
    rope_dims: &'static str,
    rope_base: &'static str,
    rope_scaling: &'static str,
    rope_factor: &'static str,
    rope_scale_linear: &'static str,
    rope_attn_factor: &'static str,
}

macro_rules! keys {
    ($arch:literal) => {
        Keys {
            dim: concat!($arch, ".embedding_length"),
            hidden_dim: concat!($arch, ".feed_forward_length"),
            layers: concat!($arch, ".block_count"),
            heads: concat!($arch, ".attention.head_count"),
            kv_heads: concat!($arch, ".attention.head_count_kv"),
            key_length: concat!($arch, ".attention.key_length"),
            value_length: concat!($arch, ".attention.value_length"),
            context: concat!($arch, ".context_length"),
            vocab_size: concat!($arch, ".vocab_size"),
            norm_eps: concat!($arch, ".attention.layer_norm_rms_epsilon"),
            expert_count: concat!($arch, ".expert_count"),
            rope_dims: concat!($arch, ".rope.dimension_count"),
            rope_base: concat!($arch, ".rope.freq_base"),
            rope_scaling: concat!($arch, ".rope.scaling.type"),
            rope_factor: concat!($arch, ".rope.scaling.factor"),
            rope_scale_linear: concat!($arch, ".rope.scale_linear"),
            rope_attn_factor: concat!($arch, ".rope.scaling.attn_factor"),
        }
    };
}
use keys;

/// Whose float arithmetic the few places that round differently follow, so a model's
/// outputs stay what its own reference computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numerics {
    /// ggml's (GGUF files): RoPE frequency `base^(−2i/d)`, SiLU by lutra's vectorized `exp`.
    Ggml,
    /// llama2.c's `run.c` (its checkpoints): frequency `1 / θ^(2i/d)`, SiLU by libm's
    /// `expf`; matrices of 5 bits and more add residual tables to their products.
    Llama2c,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaFamilyConfig {
    pub arch: Arch,
    pub numerics: Numerics,
    /// The model's sizes.
    pub hparams: Hparams,
    pub norm_eps: f32,
    pub rope_base: f32,
    /// What RoPE multiplies positions by: 1/factor of linear scaling, 1 without.
    pub rope_scale: f32,
}

impl LlamaFamilyConfig {
    /// The hyperparameters of a `llama`, `qwen2` or `qwen3` GGUF file (see the module doc).
    pub fn from_gguf(g: &Gguf<'_>) -> Result<LlamaFamilyConfig, ModelError> {
        let name = g.get_str("general.architecture").ok_or(ModelError::MissingMetadata("general.architecture"))?;
        let arch =
            Arch::from_name(name).ok_or_else(|| ModelError::WrongArchitecture { expected: "llama, qwen2 or qwen3", found: name.into() })?;
        let k = arch.keys();
        let count = |key: &'static str| required(g, key, Value::as_u32).map(|n| n as usize);

        // sizes
        let dim = count(k.dim)?;
        let layers = count(k.layers)?;
        let heads = count(k.heads)?;
        let kv_heads = optional(g, k.kv_heads, Value::as_u32)?.map_or(heads, |n| n as usize);
        if dim == 0 {
            return Err(unsupported(k.dim, 0));
        }
        if layers == 0 {
            return Err(unsupported(k.layers, 0));
        }
        if heads == 0 {
            return Err(unsupported(k.heads, 0));
        }
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(unsupported(k.kv_heads, format!("{kv_heads} (with {heads} query heads)")));
        }
        let head_dim = optional(g, k.key_length, Value::as_u32)?.map_or(dim / heads, |n| n as usize);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(unsupported(k.key_length, head_dim));
        }
        let value_dim = optional(g, k.value_length, Value::as_u32)?.map_or(dim / heads, |n| n as usize);
        if value_dim != head_dim {
            return Err(unsupported(k.value_length, format!("{value_dim} (key_length {head_dim})")));
        }
        if let Some(rotated) = optional(g, k.rope_dims, Value::as_u32)? {
            if rotated as usize != head_dim {
                return Err(unsupported(k.rope_dims, format!("{rotated} (key_length {head_dim}): partial rotation")));
            }
        }
        if let Some(experts) = optional(g, k.expert_count, Value::as_u32)? {
            if experts > 0 {
                return Err(unsupported(k.expert_count, format!("{experts} (mixture of experts)")));
            }
        }
        let hidden_dim = count(k.hidden_dim)?;
        let context_length = count(k.context)?;
        // llama.cpp: the vocab_size key, else the tokenizer's token count
        let vocab_size = match optional(g, k.vocab_size, Value::as_u32)? {
            Some(n) => n as usize,
            None => g
                .get_array("tokenizer.ggml.tokens")
                .map(|a| a.len() as usize)
                .ok_or(ModelError::MissingMetadata("tokenizer.ggml.tokens"))?,
        };

        // RoPE
        let rope_scale = match optional(g, k.rope_scaling, Value::as_str)?.unwrap_or("linear") {
            "none" => 1.0,
            "linear" => linear_rope_scale(g, k.rope_factor, k.rope_scale_linear)?,
            other => return Err(unsupported(k.rope_scaling, other)),
        };
        if let Some(a) = optional(g, k.rope_attn_factor, Value::as_f32)? {
            if a != 1.0 {
                return Err(unsupported(k.rope_attn_factor, a));
            }
        }

        // every buffer sized from these is bounded: the limits llama2.c files have too
        for (key, value, max) in [
            (k.dim, dim, MAX_DIM),
            (k.hidden_dim, hidden_dim, MAX_HIDDEN_DIM),
            (k.layers, layers, MAX_LAYERS),
            (k.heads, heads, MAX_HEADS),
            (k.key_length, head_dim, MAX_DIM),
            (k.context, context_length, MAX_SEQ_LEN),
            (k.vocab_size, vocab_size, MAX_VOCAB),
        ] {
            if value > max {
                return Err(unsupported(key, format!("{value} (at most {max})")));
            }
        }
        if vocab_size == 0 || context_length == 0 || hidden_dim == 0 {
            return Err(unsupported(k.vocab_size, format!("vocabulary {vocab_size}, context {context_length}, feed-forward {hidden_dim}")));
        }

        let norm_eps = required(g, k.norm_eps, Value::as_f32)?;
        if !norm_eps.is_finite() || norm_eps < 0.0 {
            return Err(unsupported(k.norm_eps, norm_eps));
        }
        Ok(LlamaFamilyConfig {
            arch,
            numerics: Numerics::Ggml,
            hparams: Hparams { dim, hidden_dim, layers, heads, kv_heads, head_dim, vocab_size, context_length },
            norm_eps,
            rope_base: rope_base(g, k.rope_base)?,
            rope_scale,
        })
    }

    /// RoPE frequencies: at position `pos`, pair `i` turns by `pos · f[i]`,
    /// `f[i] = scale · base^(−2i/head_dim) / factor[i]` (`factors`: Llama 3's `rope_freqs`).
    pub fn rope_frequencies(&self, factors: Option<&[f32]>) -> Vec<f32> {
        let d = self.hparams.head_dim as f32;
        let pairs = 0..self.hparams.head_dim / 2;
        match self.numerics {
            Numerics::Ggml => {
                pairs.map(|i| libm::powf(self.rope_base, -2.0 * i as f32 / d) * self.rope_scale / factors.map_or(1.0, |f| f[i])).collect()
            }
            Numerics::Llama2c => pairs.map(|i| 1.0 / libm::powf(self.rope_base, (2 * i) as f32 / d)).collect(),
        }
    }
}

/// A matrix and, where the file has one, the bias added to its product.
pub struct Projection {
    pub weights: Weights,
    pub bias: Option<Vec<f32>>,
}

pub struct LlamaFamilyLayer {
    pub attn_norm: Vec<f32>,
    pub wq: Projection,
    pub wk: Projection,
    pub wv: Projection,
    /// `qwen3`'s per-head RMSNorm weights of queries and keys.
    pub qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    pub wo: Projection,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Weights,
    pub w_up: Weights,
    pub w_down: Weights,
}

/// The token embedding.
pub enum Embedding {
    /// A GGUF file's imported weights: the LM head too where the file has no `output`.
    Weights(Weights),
    /// A llama2.c checkpoint's f32 rows, looked up exactly, and its LM head (the
    /// checkpoint's classifier, quantized on load).
    F32 { rows: crate::AlignedBytes, head: Weights },
}

impl Embedding {
    /// Row `token` (checked by the caller against the vocabulary) into `out`.
    fn row(&self, token: usize, out: &mut [f32]) -> Result<(), ModelError> {
        match self {
            Embedding::Weights(w) => Ok(w.dequantize_row(token, out)?),
            Embedding::F32 { rows, .. } => {
                let dim = out.len();
                let row = rows.as_f32s().get(token * dim..(token + 1) * dim);
                out.copy_from_slice(
                    row.ok_or(ModelError::TokenOutOfRange { token: token as u32, vocab_size: rows.len() / 4 / dim.max(1) })?,
                );
                Ok(())
            }
        }
    }
}

pub struct LlamaFamily {
    pub config: LlamaFamilyConfig,
    pub token_embd: Embedding,
    pub layers: Vec<LlamaFamilyLayer>,
    pub output_norm: Vec<f32>,
    /// `None`: the LM head is the token embedding's (tied, or a llama2.c classifier).
    pub output: Option<Weights>,
    /// Llama 3's per-pair RoPE frequency divisors (`rope_freqs.weight`).
    pub rope_factors: Option<Vec<f32>>,
}

impl LlamaFamily {
    /// Import every tensor of a `llama`, `qwen2` or `qwen3` GGUF file.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<LlamaFamily, ModelError> {
        Self::from_gguf_source(g, &mut InMemory(g.bytes()), |_| {})
    }

    /// As `from_gguf`, the tensors' bytes read from `source`, `progress` called after each
    /// tensor (see `Gemma3::from_gguf_source`).
    pub fn from_gguf_source(
        g: &Gguf<'_>,
        source: &mut dyn TensorSource,
        progress: impl FnMut(Imported<'_>),
    ) -> Result<LlamaFamily, ModelError> {
        let c = LlamaFamilyConfig::from_gguf(g)?;
        let h = c.hparams;
        let optional_tensor = |name: String| g.tensor(&name).is_some().then_some(name);
        let has_output = g.tensor("output.weight").is_some();
        let rope_freqs = optional_tensor("rope_freqs.weight".into());
        let biases = |l: usize| ["attn_q", "attn_k", "attn_v", "attn_output"].map(|t| optional_tensor(format!("blk.{l}.{t}.bias")));
        let per_layer = 7 + 2 + if c.arch.qk_norm() { 2 } else { 0 };
        let bias_count: usize = (0..h.layers).map(|l| biases(l).iter().flatten().count()).sum();
        let total = 2 + usize::from(has_output) + usize::from(rope_freqs.is_some()) + per_layer * h.layers + bias_count;
        // a packed file keeps each int8 matrix's scales as a tensor of their own
        let packed = crate::formats::pack::is_packed(g);
        let scale_tensors = if packed { g.tensors().filter(|t| t.name.ends_with(".scales")).count() } else { 0 };
        // llama.cpp refuses a file with tensors its graph does not read; so does lutra,
        // naming the first, before importing anything
        if g.tensor_count() != (total + scale_tensors) as u64 {
            return Err(unsupported("tensor", unread_tensor(g, &c, total)));
        }

        let mut imp = Importer { g, source, progress, done: 0, total };
        let token_embd = Embedding::Weights(imp.matrix("token_embd.weight".into(), (h.vocab_size, h.dim))?);
        let rope_factors = match rope_freqs {
            Some(name) => {
                let f = imp.vector(name, h.head_dim / 2)?;
                if f.iter().any(|v| !v.is_finite() || *v <= 0.0) {
                    return Err(unsupported("rope_freqs.weight", "a factor that is not finite and positive"));
                }
                Some(f)
            }
            None => None,
        };
        let mut layers = Vec::with_capacity(h.layers);
        for l in 0..h.layers {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            let [bq, bk, bv, bo] = biases(l);
            let projection = |imp: &mut Importer<'_, '_, '_, _>, t: &str, shape: (usize, usize), bias: Option<String>| {
                let weights = imp.matrix(name(t), shape)?;
                let bias = bias.map(|b| imp.vector(b, shape.0)).transpose()?;
                Ok::<_, ModelError>(Projection { weights, bias })
            };
            let attn_norm = imp.vector(name("attn_norm"), h.dim)?;
            let wq = projection(&mut imp, "attn_q", (h.q_dim(), h.dim), bq)?;
            let wk = projection(&mut imp, "attn_k", (h.kv_dim(), h.dim), bk)?;
            let wv = projection(&mut imp, "attn_v", (h.kv_dim(), h.dim), bv)?;
            let qk_norm = if c.arch.qk_norm() {
                Some((imp.vector(name("attn_q_norm"), h.head_dim)?, imp.vector(name("attn_k_norm"), h.head_dim)?))
            } else {
                None
            };
            let wo = projection(&mut imp, "attn_output", (h.dim, h.q_dim()), bo)?;
            layers.push(LlamaFamilyLayer {
                attn_norm,
                wq,
                wk,
                wv,
                qk_norm,
                wo,
                ffn_norm: imp.vector(name("ffn_norm"), h.dim)?,
                w_gate: imp.matrix(name("ffn_gate"), (h.hidden_dim, h.dim))?,
                w_up: imp.matrix(name("ffn_up"), (h.hidden_dim, h.dim))?,
                w_down: imp.matrix(name("ffn_down"), (h.dim, h.hidden_dim))?,
            });
        }
        let output_norm = imp.vector("output_norm.weight".into(), h.dim)?;
        let output = if has_output { Some(imp.matrix("output.weight".into(), (h.vocab_size, h.dim))?) } else { None };
        Ok(LlamaFamily { config: c, token_embd, layers, output_norm, output, rope_factors })
    }

    /// Packs a model imported from GGUF `source` into `w`: the file's metadata, and every
    /// tensor under its GGUF name as the kernels read it, so [`LlamaFamily::from_gguf_source`]
    /// reads it back in place.
    fn write_packed_gguf<'a>(&'a self, source: &Gguf<'_>, w: &mut crate::formats::pack::Writer<'a>) {
        w.copy_metadata(source);
        w.str(crate::formats::pack::SOURCE_KEY, "gguf");
        if let Embedding::Weights(embd) = &self.token_embd {
            w.matrix("token_embd.weight", embd);
        }
        if let Some(factors) = &self.rope_factors {
            w.f32s("rope_freqs.weight", factors);
        }
        for (l, layer) in self.layers.iter().enumerate() {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            w.f32s(&name("attn_norm"), &layer.attn_norm);
            for (t, p) in [("attn_q", &layer.wq), ("attn_k", &layer.wk), ("attn_v", &layer.wv), ("attn_output", &layer.wo)] {
                w.matrix(&name(t), &p.weights);
                if let Some(bias) = &p.bias {
                    w.f32s(&format!("blk.{l}.{t}.bias"), bias);
                }
            }
            if let Some((q_norm, k_norm)) = &layer.qk_norm {
                w.f32s(&name("attn_q_norm"), q_norm);
                w.f32s(&name("attn_k_norm"), k_norm);
            }
            w.f32s(&name("ffn_norm"), &layer.ffn_norm);
            w.matrix(&name("ffn_gate"), &layer.w_gate);
            w.matrix(&name("ffn_up"), &layer.w_up);
            w.matrix(&name("ffn_down"), &layer.w_down);
        }
        w.f32s("output_norm.weight", &self.output_norm);
        if let Some(head) = &self.output {
            w.matrix("output.weight", head);
        }
    }

    /// Bits per weight of the LM head's bit planes (8 for int8 codes).
    pub fn lm_head_bits(&self) -> u8 {
        match self.lm_head() {
            Weights::Lookup(m) => m.layout().bits(),
            Weights::Int8(_) => 8,
        }
    }

    /// Whether products add residual tables: llama2.c's numerics at 5 bits and more, where
    /// the int8 tables' rounding would dominate the weights' error.
    pub fn residual_tables(&self) -> bool {
        self.config.numerics == Numerics::Llama2c && matches!(self.lm_head(), Weights::Lookup(m) if m.layout().bits() >= 5)
    }

    /// The LM head: `output.weight`, or the token embedding when they are tied.
    pub fn lm_head(&self) -> &Weights {
        match (&self.output, &self.token_embd) {
            (Some(head), _) | (None, Embedding::Weights(head) | Embedding::F32 { head, .. }) => head,
        }
    }

    /// Every matrix the model multiplies by, the LM head first.
    pub fn matrices(&self) -> impl Iterator<Item = &Weights> {
        let layers =
            self.layers.iter().flat_map(|l| [&l.wq.weights, &l.wk.weights, &l.wv.weights, &l.wo.weights, &l.w_gate, &l.w_up, &l.w_down]);
        core::iter::once(self.lm_head()).chain(layers)
    }

    /// `forward` without the logits: puts `token` at `pos` into the cache.
    pub fn feed<G: Gemv>(&self, gemv: &G, s: &mut LlamaFamilyState, token: u32, pos: usize) -> Result<(), ModelError> {
        self.feed_batch(gemv, s, &[token], pos)
    }

    fn feed_chunk<G: Gemv>(&self, gemv: &G, s: &mut LlamaFamilyState, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (b, cache) = (&mut *s.batch, &mut s.cache);
        self.run_layers(
            gemv,
            b,
            tokens,
            |i| first_pos + i,
            |l, batch, out| {
                let batch = PromptBatch { first_pos, window: None, ..batch };
                cache.store_and_attend(gemv.parallel(), l, &batch, out);
            },
        )
    }

    /// One token for each of several sequences, `tokens[i]` at `positions[i]` of
    /// `states[i]` (at most `PREFILL_BATCH`; all of this model), over one pass of each
    /// weight matrix: each cache gets its token, each state its logits, and `logits`
    /// (resized to `tokens.len()` × vocabulary) every row. Each sequence's cache and
    /// logits are what its own [`Architecture::forward`] gives, bit for bit: the batched
    /// products equal one token's, and each token attends to its own cache alone.
    pub fn forward_many<G: Gemv>(
        &self,
        gemv: &G,
        states: &mut [&mut LlamaFamilyState],
        tokens: &[u32],
        positions: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let (n, vocab_size) = (tokens.len(), self.config.hparams.vocab_size);
        assert!(n == states.len() && n == positions.len() && n <= PREFILL_BATCH, "one token and position per state, at most a batch");
        for (s, (&token, &pos)) in states.iter().zip(tokens.iter().zip(positions)) {
            if token as usize >= vocab_size {
                return Err(ModelError::TokenOutOfRange { token, vocab_size });
            }
            if pos >= s.context {
                return Err(ModelError::ContextFull { pos, context: s.context });
            }
        }
        let Some((first, rest)) = states.split_first_mut() else { return Ok(()) };
        let (b, first_cache) = (&mut *first.batch, &mut first.cache);
        self.run_layers(
            gemv,
            b,
            tokens,
            |i| positions[i],
            |l, batch, out| {
                let (kvd, qd) = (batch.k.len() / n, batch.q.len() / n);
                for i in 0..n {
                    let row = PromptBatch {
                        first_pos: positions[i],
                        window: None,
                        k: &batch.k[i * kvd..(i + 1) * kvd],
                        v: &batch.v[i * kvd..(i + 1) * kvd],
                        q: &batch.q[i * qd..(i + 1) * qd],
                        q_scale: batch.q_scale,
                    };
                    let cache = if i == 0 { &mut *first_cache } else { &mut rest[i - 1].cache };
                    cache.store_and_attend(gemv.parallel(), l, &row, &mut out[i * qd..(i + 1) * qd]);
                }
            },
        )?;
        let (c, dim) = (&self.config, self.config.hparams.dim);
        for i in 0..n {
            let (xb, x) = (&mut b.xb[i * dim..(i + 1) * dim], &b.x[i * dim..(i + 1) * dim]);
            rmsnorm(xb, x, &self.output_norm, c.norm_eps);
        }
        logits.resize(n * vocab_size, 0.0);
        batch_product(gemv, self.lm_head(), &mut b.scratch, &b.xb, n, logits)?;
        first.logits.copy_from_slice(&logits[..vocab_size]);
        for (i, s) in rest.iter_mut().enumerate() {
            s.logits.copy_from_slice(&logits[(i + 1) * vocab_size..(i + 2) * vocab_size]);
        }
        Ok(())
    }

    /// The layers over `tokens` (at `position(i)`), from their embeddings to the last
    /// residual in `b.x`; `attend(layer, batch, out)` stores the batch's keys and values
    /// and writes each token's attention (`first_pos` and `window` are the caller's).
    fn run_layers<G: Gemv>(
        &self,
        gemv: &G,
        b: &mut Batch,
        tokens: &[u32],
        position: impl Fn(usize) -> usize,
        mut attend: impl FnMut(usize, PromptBatch<'_>, &mut [f32]),
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let h = &c.hparams;
        let (n, dim, hd, qd, kvd) = (tokens.len(), h.dim, h.head_dim, h.q_dim(), h.kv_dim());
        let query_scale = 1.0 / libm::sqrtf(hd as f32);
        for (i, &token) in tokens.iter().enumerate() {
            self.token_embd.row(token as usize, &mut b.x[i * dim..(i + 1) * dim])?;
            b.rope[i].set_position(position(i));
        }

        // the per-token steps between products run on every thread, one token per job
        for (l, layer) in self.layers.iter().enumerate() {
            // attention: norm, q k v (+ biases), QK-norm, rope
            for_each_row_pair(gemv, (&mut b.xb, dim), (&mut b.x, dim), n, &|(xb, x), _| {
                rmsnorm(xb, x, &layer.attn_norm, c.norm_eps);
                Ok(())
            })?;
            let (wq, wk, wv) = (&layer.wq, &layer.wk, &layer.wv);
            batch_products(gemv, &mut b.scratch, &b.xb, n, [(&wq.weights, &mut b.q), (&wk.weights, &mut b.k), (&wv.weights, &mut b.v)])?;
            for (p, ys) in [(wq, &mut b.q), (wk, &mut b.k), (wv, &mut b.v)] {
                add_bias(p, ys, n);
            }
            let angles = &b.rope;
            for_each_row_pair(gemv, (&mut b.q, qd), (&mut b.k, kvd), n, &|(q, k), i| {
                let norms = layer.qk_norm.as_ref();
                let heads = q.chunks_exact_mut(hd).map(|h| (h, norms.map(|n| &n.0)));
                for (head, norm) in heads.chain(k.chunks_exact_mut(hd).map(|h| (h, norms.map(|n| &n.1)))) {
                    if let Some(norm) = norm {
                        rmsnorm_in_place(head, norm, c.norm_eps);
                    }
                    if c.arch.neox_rope() {
                        rope_neox(head, &angles[i]);
                    } else {
                        rope_adjacent(head, &angles[i]);
                    }
                }
                Ok(())
            })?;
            // each token's key and value into the cache, and its attention over 0..=pos
            let batch =
                PromptBatch { first_pos: 0, window: None, k: &b.k[..n * kvd], v: &b.v[..n * kvd], q: &b.q[..n * qd], q_scale: query_scale };
            attend(l, batch, &mut b.attn[..n * qd]);

            // output projection, residual; then the ffn's norm
            project(gemv, &layer.wo, &mut b.scratch, &b.attn, n, &mut b.xb)?;
            for_each_row_pair(gemv, (&mut b.x, dim), (&mut b.xb, dim), n, &|(x, xb), _| {
                add(x, xb);
                rmsnorm(xb, x, &layer.ffn_norm, c.norm_eps);
                Ok(())
            })?;

            // ffn: SiLU-gated up, down, residual
            batch_products(gemv, &mut b.scratch, &b.xb, n, [(&layer.w_gate, &mut b.hb), (&layer.w_up, &mut b.hb2)])?;
            let hidden = h.hidden_dim;
            let llama2c = c.numerics == Numerics::Llama2c;
            for_each_row_pair(gemv, (&mut b.hb, hidden), (&mut b.hb2, hidden), n, &|(g, u), _| {
                if llama2c {
                    g.iter_mut().zip(u.iter()).for_each(|(g, &u)| *g = *g / (1.0 + libm::expf(-*g)) * u);
                } else {
                    g.iter_mut().zip(u.iter()).for_each(|(g, &u)| *g = silu(*g) * u);
                }
                Ok(())
            })?;
            batch_product(gemv, &layer.w_down, &mut b.scratch, &b.hb, n, &mut b.xb)?;
            add(&mut b.x[..n * dim], &b.xb[..n * dim]);
        }
        Ok(())
    }
}

/// SiLU, `x · sigmoid(x)`, with the branch-free `exp` of `e^−|x|` so the loop vectorizes
/// (libm's `expf` was a twentieth of a prefill).
#[inline(always)]
fn silu(x: f32) -> f32 {
    let e = exp(-x.abs());
    // sigmoid(x) = 1 / (1 + e) for x ≥ 0, e / (1 + e) below
    x * if x >= 0.0 { 1.0 } else { e } / (1.0 + e)
}

/// `ys[i] = p.weights · xs[i] + p.bias` for the first `n` rows of `xs`.
fn project<G: Gemv>(gemv: &G, p: &Projection, scratch: &mut Scratch, xs: &[f32], n: usize, ys: &mut [f32]) -> Result<(), ModelError> {
    batch_product(gemv, &p.weights, scratch, xs, n, ys)?;
    add_bias(p, ys, n);
    Ok(())
}

/// Adds `p`'s bias, if it has one, to the first `n` rows of `ys`.
fn add_bias(p: &Projection, ys: &mut [f32], n: usize) {
    if let Some(bias) = &p.bias {
        for y in first_rows(ys, n, bias.len()) {
            add(y, bias);
        }
    }
}

/// The first tensor of `g` that a model of config `c` does not read (`expected` of them).
fn unread_tensor(g: &Gguf<'_>, c: &LlamaFamilyConfig, expected: usize) -> String {
    let layer_tensor = |rest: &str| {
        let known = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"];
        let qk = ["attn_q_norm", "attn_k_norm"];
        match rest.split_once('.') {
            Some((t, "weight")) => known.contains(&t) || (c.arch.qk_norm() && qk.contains(&t)),
            Some((t, "bias")) => ["attn_q", "attn_k", "attn_v", "attn_output"].contains(&t),
            _ => false,
        }
    };
    let read = |name: &str| match name.strip_prefix("blk.").and_then(|r| r.split_once('.')) {
        Some((l, rest)) => l.parse::<usize>().is_ok_and(|l| l < c.hparams.layers) && layer_tensor(rest),
        None => ["token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"].contains(&name),
    };
    // a packed file's int8 scales belong to their matrix
    let packed = crate::formats::pack::is_packed(g);
    let matrix = |name| if packed { str::strip_suffix(name, ".scales").unwrap_or(name) } else { name };
    match g.tensors().find(|t| !read(matrix(t.name))) {
        Some(t) => format!("{} (not part of the {} graph)", t.name, c.arch.name()),
        None => format!("{} tensors in the file, {expected} expected (one is missing)", g.tensor_count()),
    }
}

/// The batch buffers with one set of rotary angles per token.
type Batch = products::Batch<Vec<RopeAngles>>;

fn new_batch(model: &LlamaFamily, tables: TablePrecision) -> Result<Batch, ModelError> {
    let c = &model.config;
    let h = &c.hparams;
    let freqs = c.rope_frequencies(model.rope_factors.as_deref());
    let rope = (0..PREFILL_BATCH).map(|_| RopeAngles::new(freqs.clone())).collect();
    let mut scratch = Scratch::for_matrices(model.matrices())?;
    if model.residual_tables() || tables == TablePrecision::Residual {
        scratch = scratch.with_residual_tables(h)?;
    }
    Ok(Batch::new(h.dim, h.q_dim(), h.kv_dim(), h.hidden_dim, scratch, rope))
}

/// Working memory of one sequence, allocated once.
pub type LlamaFamilyState = State<Batch>;

impl State<Batch> {
    /// For up to `context` positions (at most the model's trained context), exact f16 keys.
    pub fn new(model: &LlamaFamily, context: usize) -> Result<LlamaFamilyState, ModelError> {
        Self::with_cache(model, Box::new(ExactKvCache::new(model.attention_shape(context), KeyPrecision::F16)))
    }

    /// With a KV cache made for `model.attention_shape(context)`.
    pub fn with_cache(model: &LlamaFamily, cache: Box<dyn KvCache>) -> Result<LlamaFamilyState, ModelError> {
        Self::with_tables(model, cache, TablePrecision::Auto)
    }

    /// As `with_cache`, the lookup products at `tables`' precision.
    pub fn with_tables(model: &LlamaFamily, cache: Box<dyn KvCache>, tables: TablePrecision) -> Result<LlamaFamilyState, ModelError> {
        State::for_model(model, cache, || new_batch(model, tables))
    }
}

impl Architecture for LlamaFamily {
    type State = LlamaFamilyState;

    fn runs_gguf(name: &str) -> bool {
        Arch::from_name(name).is_some()
    }
    fn from_gguf(gguf: &Gguf<'_>, source: &mut dyn TensorSource, progress: &mut dyn FnMut(Imported<'_>)) -> Result<Self, ModelError> {
        LlamaFamily::from_gguf_source(gguf, source, progress)
    }
    fn name(&self) -> &'static str {
        self.config.arch.name()
    }
    fn hparams(&self) -> Hparams {
        self.config.hparams
    }
    fn dims(&self) -> crate::model::budget::Dims {
        let (groups_per_width, int8_widths) = products::scratch_sets(self.matrices());
        let buffers = crate::model::budget::Buffers::llama(groups_per_width, int8_widths);
        let buffers = crate::model::budget::Buffers { residual_tables: self.residual_tables(), ..buffers };
        crate::model::budget::Dims { buffers, hparams: self.config.hparams, token_bytes: 0, merges: 0 }
    }
    /// Bytes of the imported matrices, the token embedding included.
    fn matrix_bytes(&self) -> usize {
        let embedding = match (&self.output, &self.token_embd) {
            (Some(_), Embedding::Weights(w)) => w.bytes(),
            _ => 0,
        };
        embedding + self.matrices().map(Weights::bytes).sum::<usize>()
    }
    /// The buffers of every matrix the model multiplies by, in the order a decode step
    /// reads them (layer by layer, the LM head last; an untied token embedding, of which
    /// a step reads one row, is left out).
    fn matrix_buffers_mut(&mut self) -> Vec<&mut crate::AlignedBytes> {
        let mut out = Vec::new();
        for l in &mut self.layers {
            let (wq, wk, wv, wo) = (&mut l.wq.weights, &mut l.wk.weights, &mut l.wv.weights, &mut l.wo.weights);
            for m in [wq, wk, wv, wo, &mut l.w_gate, &mut l.w_up, &mut l.w_down] {
                m.buffers_mut(&mut out);
            }
        }
        match (&mut self.output, &mut self.token_embd) {
            (Some(head), _) | (None, Embedding::Weights(head) | Embedding::F32 { head, .. }) => head.buffers_mut(&mut out),
        }
        out
    }
    fn layer_windows(&self) -> Vec<usize> {
        alloc::vec![0; self.config.hparams.layers]
    }
    /// `origin` is the GGUF file it was imported from (its metadata and tokenizer are
    /// kept), or a llama2.c model's `tokenizer.bin`.
    fn write_packed<'a>(&'a self, origin: &'a [u8], writer: &mut crate::formats::pack::Writer<'a>) -> Result<(), ModelError> {
        if let Embedding::F32 { .. } = self.token_embd {
            return super::llama::write_packed(self, origin, writer);
        }
        let g = Gguf::parse(origin)?;
        if crate::formats::pack::is_packed(&g) {
            return Err(ModelError::BadPackedFile("already packed".into()));
        }
        self.write_packed_gguf(&g, writer);
        Ok(())
    }
    fn new_state(&self, cache: Box<dyn KvCache>, tables: TablePrecision) -> Result<LlamaFamilyState, ModelError> {
        LlamaFamilyState::with_tables(self, cache, tables)
    }
    /// Logits for `token` at `pos`; positions fed in order from 0.
    fn forward<'s, G: Gemv>(&self, gemv: &G, s: &'s mut LlamaFamilyState, token: u32, pos: usize) -> Result<&'s [f32], ModelError> {
        self.feed(gemv, s, token, pos)?;
        let (c, b) = (&self.config, &mut *s.batch);
        rmsnorm(&mut b.xb[..c.hparams.dim], &b.x[..c.hparams.dim], &self.output_norm, c.norm_eps);
        batch_product(gemv, self.lm_head(), &mut b.scratch, &b.xb, 1, &mut s.logits)?;
        Ok(&s.logits)
    }
    /// `feed` for `tokens` at positions `first_pos..`, up to `PREFILL_BATCH` at a time over
    /// one pass of each weight matrix: the cache and every later logit are what feeding
    /// them one by one gives, bit for bit.
    fn feed_batch<G: Gemv>(&self, gemv: &G, s: &mut LlamaFamilyState, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (context, vocab_size) = (s.context, self.config.hparams.vocab_size);
        feed_in_batches(tokens, first_pos, context, vocab_size, |chunk, pos| self.feed_chunk(gemv, s, chunk, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::silu;

    /// The sigmoid form equals `x / (1 + e^−x)` in f64 to f32 rounding, both tails included.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn silu_matches_its_definition() {
        let mut worst = 0.0f64;
        for i in -40_000..=40_000 {
            let x = i as f32 / 1000.0;
            let want = f64::from(x) / (1.0 + (-f64::from(x)).exp());
            worst = worst.max((f64::from(silu(x)) - want).abs() / want.abs().max(1e-30).max(f64::from(x.abs()) * 1e-3));
        }
        assert!(worst < 2e-6, "worst relative error {worst:e}");
        assert_eq!(silu(0.0), 0.0);
        assert!(silu(-100.0).abs() < 1e-30 && silu(100.0) == 100.0);
    }
}
