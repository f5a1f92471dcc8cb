//! Gemma 3 (llama.cpp's `gemma3` GGUF architecture): grouped-query attention with
//! QK-norm, sandwich norms around attention and FFN, GeGLU (tanh GELU), sliding-window
//! layers with their own RoPE base (NEOX rotation), embeddings scaled by √dim, and the
//! LM head tied to the (Q8_0) token embedding.
//!
//! Every product, the LM head included, is a LUT GEMV over the imported weights.
//!
//! # Configuration
//!
//! Every size of Gemma 3 shares this graph; what differs is read from the file as
//! llama.cpp reads it (`load_hparams`' generic keys and its `LLM_ARCH_GEMMA3` case,
//! `src/models/gemma3.cpp`), so a 1B, 4B, 12B or 27B file runs as llama.cpp runs it.
//! A value lutra does not implement is refused with `ModelError::Unsupported` naming the
//! key, never ignored. `Gemma3Config::from_gguf` holds the rules:
//!
//! - Sizes: `embedding_length`, `block_count`, `feed_forward_length`, `context_length`,
//!   `attention.head_count`, `attention.layer_norm_rms_epsilon` are required;
//!   `attention.head_count_kv` defaults to the head count, `attention.key_length` and
//!   `attention.value_length` to dim / heads. llama.cpp also takes per-layer arrays for
//!   the counts; lutra refuses them (every layer has one shape here), a `value_length`
//!   other than the key length (its cache keeps one head width) and a
//!   `rope.dimension_count` other than the key length (partial rotation).
//! - Sliding window: `attention.sliding_window` absent or 0 makes every layer global
//!   (newer llama.cpp, for Rnj-1). Otherwise layer `l` is global iff `l % p == p − 1`
//!   for the period `p` of `attention.sliding_window_pattern`, default 6 (0: no global
//!   layer); the per-layer array form is refused (llama.cpp ignores it for Gemma 3).
//! - RoPE: global layers rotate with base `rope.freq_base` (default 10 000, as llama.cpp;
//!   the converter always writes it, 1 000 000 for every Gemma 3) and the file's
//!   scaling; sliding-window layers with `rope.freq_base_swa` (default 10 000) and never
//!   scaled. `rope.scaling.type` defaults to `linear`; its `rope.scaling.factor` (or the
//!   older `rope.scale_linear`) `f` multiplies positions by 1/f (4B, 12B and 27B: f = 8,
//!   folded into the global frequencies); `none` never scales; `yarn`, `longrope` and
//!   anything else are refused, as is a `rope.scaling.attn_factor` other than 1 (ggml
//!   would multiply the rotation by it).
//! - Query scale: llama.cpp has no key for it and tells the 27B apart by its 62 layers:
//!   then queries are scaled by 1/√(dim / heads) (gemma_pytorch's `query_pre_attn_scalar`
//!   = 168, not head_dim 128), else by 1/√head_dim. lutra does the same.
//! - Logits: a nonzero `final_logit_softcapping` `c` makes them `c·tanh(logits / c)`
//!   (llama.cpp applies it when set; Google's Gemma 3 files have none). An
//!   `attn_logit_softcapping` is refused: llama.cpp does not read it for Gemma 3 and its
//!   converter asserts Gemma 3 has none, so a file with one was not made for this graph.
//! - An `output.weight` tensor (an LM head not tied to the embedding, which llama.cpp
//!   would use) is refused.

use crate::formats::llama2c::{MAX_DIM, MAX_HEADS, MAX_HIDDEN_DIM, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB};
use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;

use crate::arch::{Architecture, State};
use crate::attention::{ExactKvCache, KeyPrecision, KvCache, PromptBatch};
use crate::formats::gguf::{Gguf, Value};
pub use crate::formats::import::Imported;
use crate::formats::import::{Importer, InMemory, TensorSource, Weights};
use crate::kernels::attend::exp;
use crate::model::hparams::{linear_rope_scale, optional, required, rope_base, unsupported};
use crate::model::ops::{add, rmsnorm, rmsnorm_in_place, rope_neox, RopeAngles};
use crate::model::products::{self, batch_product, batch_products, for_each_row_pair, Scratch};
use crate::model::{feed_in_batches, Gemv, Hparams, ModelError, TablePrecision, PREFILL_BATCH};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemma3Config {
    /// The model's sizes.
    pub hparams: Hparams,
    pub norm_eps: f32,
    /// RoPE base of the global layers.
    pub rope_global: f32,
    /// What the global layers' RoPE multiplies positions by: 1/factor of linear scaling, 1 without.
    pub rope_global_scale: f32,
    /// RoPE base of the sliding-window layers, which are never scaled.
    pub rope_local: f32,
    /// Positions a sliding-window layer attends to (its own included); 0: no sliding
    /// window, every layer global.
    pub sliding_window: usize,
    /// Every `swa_period`-th layer (the last of each period) attends globally; 0: none does.
    pub swa_period: usize,
    /// What queries are multiplied by before attention.
    pub query_scale: f32,
    /// `Some(c)`: logits become `c·tanh(logits / c)`.
    pub final_logit_softcap: Option<f32>,
}

impl Gemma3Config {
    /// The hyperparameters of a `gemma3` GGUF file, read as llama.cpp reads them (see the
    /// module doc); a value this graph does not implement is `ModelError::Unsupported`.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Gemma3Config, ModelError> {
        let arch = g.get_str("general.architecture").ok_or(ModelError::MissingMetadata("general.architecture"))?;
        if arch != "gemma3" {
            return Err(ModelError::WrongArchitecture { expected: "gemma3", found: arch.into() });
        }
        let vocab_size =
            g.get_array("tokenizer.ggml.tokens").map(|a| a.len() as usize).ok_or(ModelError::MissingMetadata("tokenizer.ggml.tokens"))?;

        // sizes
        let dim = required(g, "gemma3.embedding_length", Value::as_u32)? as usize;
        let layers = required(g, "gemma3.block_count", Value::as_u32)? as usize;
        let heads = required(g, "gemma3.attention.head_count", Value::as_u32)? as usize;
        let kv_heads = optional(g, "gemma3.attention.head_count_kv", Value::as_u32)?.map_or(heads, |n| n as usize);
        if layers == 0 {
            return Err(unsupported("gemma3.block_count", 0));
        }
        if heads == 0 {
            return Err(unsupported("gemma3.attention.head_count", 0));
        }
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(unsupported("gemma3.attention.head_count_kv", format!("{kv_heads} (with {heads} query heads)")));
        }
        let head_dim = optional(g, "gemma3.attention.key_length", Value::as_u32)?.map_or(dim / heads, |n| n as usize);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(unsupported("gemma3.attention.key_length", head_dim));
        }
        let value_dim = optional(g, "gemma3.attention.value_length", Value::as_u32)?.map_or(dim / heads, |n| n as usize);
        if value_dim != head_dim {
            return Err(unsupported("gemma3.attention.value_length", format!("{value_dim} (key_length {head_dim})")));
        }
        if let Some(rotated) = optional(g, "gemma3.rope.dimension_count", Value::as_u32)? {
            if rotated as usize != head_dim {
                return Err(unsupported("gemma3.rope.dimension_count", format!("{rotated} (key_length {head_dim})")));
            }
        }

        // sliding window: which layers, and the RoPE base of theirs
        let sliding_window = optional(g, "gemma3.attention.sliding_window", Value::as_u32)?.unwrap_or(0) as usize;
        let (swa_period, rope_local) = if sliding_window > 0 {
            let period = optional(g, "gemma3.attention.sliding_window_pattern", Value::as_u32)?.unwrap_or(6);
            (period as usize, rope_base(g, "gemma3.rope.freq_base_swa")?)
        } else {
            (1, 10_000.0)
        };

        // RoPE of the global layers
        let rope_global = rope_base(g, "gemma3.rope.freq_base")?;
        let rope_global_scale = match optional(g, "gemma3.rope.scaling.type", Value::as_str)?.unwrap_or("linear") {
            "none" => 1.0,
            "linear" => linear_rope_scale(g, "gemma3.rope.scaling.factor", "gemma3.rope.scale_linear")?,
            other => return Err(unsupported("gemma3.rope.scaling.type", other)),
        };
        if let Some(a) = optional(g, "gemma3.rope.scaling.attn_factor", Value::as_f32)? {
            if a != 1.0 {
                return Err(unsupported("gemma3.rope.scaling.attn_factor", a));
            }
        }

        // attention and logits
        let query_scale = if layers == 62 { 1.0 / libm::sqrtf((dim / heads) as f32) } else { 1.0 / libm::sqrtf(head_dim as f32) };
        if let Some(cap) = optional(g, "gemma3.attn_logit_softcapping", Value::as_f32)? {
            if cap != 0.0 {
                return Err(unsupported("gemma3.attn_logit_softcapping", cap));
            }
        }
        let final_logit_softcap = match optional(g, "gemma3.final_logit_softcapping", Value::as_f32)? {
            None | Some(0.0) => None,
            Some(cap) if cap.is_finite() => Some(cap),
            Some(cap) => return Err(unsupported("gemma3.final_logit_softcapping", cap)),
        };

        // every buffer sized from these is bounded: the limits llama2.c files have too
        let hidden_dim = required(g, "gemma3.feed_forward_length", Value::as_u32)? as usize;
        let context_length = required(g, "gemma3.context_length", Value::as_u32)? as usize;
        for (key, value, max) in [
            ("gemma3.embedding_length", dim, MAX_DIM),
            ("gemma3.feed_forward_length", hidden_dim, MAX_HIDDEN_DIM),
            ("gemma3.block_count", layers, MAX_LAYERS),
            ("gemma3.attention.head_count", heads, MAX_HEADS),
            ("gemma3.attention.key_length", head_dim, MAX_DIM),
            ("gemma3.context_length", context_length, MAX_SEQ_LEN),
            ("tokenizer.ggml.tokens", vocab_size, MAX_VOCAB),
        ] {
            if value > max {
                return Err(unsupported(key, format!("{value} (at most {max})")));
            }
        }

        Ok(Gemma3Config {
            hparams: Hparams { dim, hidden_dim, layers, heads, kv_heads, head_dim, vocab_size, context_length },
            norm_eps: required(g, "gemma3.attention.layer_norm_rms_epsilon", Value::as_f32)?,
            rope_global,
            rope_global_scale,
            rope_local,
            sliding_window,
            swa_period,
            query_scale,
            final_logit_softcap,
        })
    }

    pub fn is_global(&self, layer: usize) -> bool {
        let p = self.swa_period;
        self.sliding_window == 0 || (p != 0 && layer % p == p - 1)
    }
    /// Each layer's sliding window, 0 for the global layers (a cache keeps rings of these).
    pub fn layer_windows(&self) -> Vec<usize> {
        (0..self.hparams.layers).map(|l| if self.is_global(l) { 0 } else { self.sliding_window }).collect()
    }
    /// The NEOX RoPE frequencies of the global (or sliding-window) layers: at position
    /// `pos`, pair `i` of a head turns by `pos · f[i]`, `f[i] = scale · base^(−2i/head_dim)`.
    pub fn rope_frequencies(&self, global: bool) -> Vec<f32> {
        let (base, scale) = if global { (self.rope_global, self.rope_global_scale) } else { (self.rope_local, 1.0) };
        let d = self.hparams.head_dim as f32;
        (0..self.hparams.head_dim / 2).map(|i| libm::powf(base, -2.0 * i as f32 / d) * scale).collect()
    }
}

pub struct Gemma3Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Weights,
    pub wk: Weights,
    pub wv: Weights,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub wo: Weights,
    pub post_attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Weights,
    pub w_up: Weights,
    pub w_down: Weights,
    pub post_ffn_norm: Vec<f32>,
}

pub struct Gemma3 {
    pub config: Gemma3Config,
    /// The token embedding, also the LM head.
    pub token_embd: Weights,
    pub layers: Vec<Gemma3Layer>,
    pub output_norm: Vec<f32>,
}

impl Gemma3 {
    /// Import every tensor of a `gemma3` GGUF file.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Gemma3, ModelError> {
        Self::from_gguf_with_progress(g, |_| {})
    }

    /// As `from_gguf`, calling `progress` after each tensor is imported: a caller that
    /// maps the file can release that tensor's pages, so the file and the imported
    /// weights are never both resident in full.
    pub fn from_gguf_with_progress(g: &Gguf<'_>, progress: impl FnMut(Imported<'_>)) -> Result<Gemma3, ModelError> {
        Self::from_gguf_source(g, &mut InMemory(g.bytes()), progress)
    }

    /// As `from_gguf_with_progress`, the tensors' bytes read from `source` (`g` may have
    /// been parsed from the header alone: `Gguf::parse_prefix`).
    pub fn from_gguf_source(g: &Gguf<'_>, source: &mut dyn TensorSource, progress: impl FnMut(Imported<'_>)) -> Result<Gemma3, ModelError> {
        let c = Gemma3Config::from_gguf(g)?;
        let h = c.hparams;
        if g.tensor("output.weight").is_some() {
            return Err(unsupported("output.weight", "present (an LM head not tied to token_embd.weight)"));
        }
        let mut imp = Importer { g, source, progress, done: 0, total: 2 + 13 * h.layers };
        let token_embd = imp.matrix("token_embd.weight".into(), (h.vocab_size, h.dim))?;
        let mut layers = Vec::with_capacity(h.layers);
        for l in 0..h.layers {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            layers.push(Gemma3Layer {
                attn_norm: imp.vector(name("attn_norm"), h.dim)?,
                wq: imp.matrix(name("attn_q"), (h.q_dim(), h.dim))?,
                wk: imp.matrix(name("attn_k"), (h.kv_dim(), h.dim))?,
                wv: imp.matrix(name("attn_v"), (h.kv_dim(), h.dim))?,
                q_norm: imp.vector(name("attn_q_norm"), h.head_dim)?,
                k_norm: imp.vector(name("attn_k_norm"), h.head_dim)?,
                wo: imp.matrix(name("attn_output"), (h.dim, h.q_dim()))?,
                post_attn_norm: imp.vector(name("post_attention_norm"), h.dim)?,
                ffn_norm: imp.vector(name("ffn_norm"), h.dim)?,
                w_gate: imp.matrix(name("ffn_gate"), (h.hidden_dim, h.dim))?,
                w_up: imp.matrix(name("ffn_up"), (h.hidden_dim, h.dim))?,
                w_down: imp.matrix(name("ffn_down"), (h.dim, h.hidden_dim))?,
                post_ffn_norm: imp.vector(name("post_ffw_norm"), h.dim)?,
            });
        }
        let output_norm = imp.vector("output_norm.weight".into(), h.dim)?;
        Ok(Gemma3 { config: c, token_embd, layers, output_norm })
    }

    /// Writes the model packed (`crate::formats::pack`): `source`'s metadata (hyperparameters,
    /// tokenizer) as it was, every tensor under its GGUF name as the kernels read it.
    pub fn write_packed<'a>(&'a self, source: &Gguf<'_>, w: &mut crate::formats::pack::Writer<'a>) {
        w.copy_metadata(source);
        w.str(crate::formats::pack::SOURCE_KEY, "gguf");
        w.matrix("token_embd.weight", &self.token_embd);
        for (l, layer) in self.layers.iter().enumerate() {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            w.f32s(&name("attn_norm"), &layer.attn_norm);
            w.matrix(&name("attn_q"), &layer.wq);
            w.matrix(&name("attn_k"), &layer.wk);
            w.matrix(&name("attn_v"), &layer.wv);
            w.f32s(&name("attn_q_norm"), &layer.q_norm);
            w.f32s(&name("attn_k_norm"), &layer.k_norm);
            w.matrix(&name("attn_output"), &layer.wo);
            w.f32s(&name("post_attention_norm"), &layer.post_attn_norm);
            w.f32s(&name("ffn_norm"), &layer.ffn_norm);
            w.matrix(&name("ffn_gate"), &layer.w_gate);
            w.matrix(&name("ffn_up"), &layer.w_up);
            w.matrix(&name("ffn_down"), &layer.w_down);
            w.f32s(&name("post_ffw_norm"), &layer.post_ffn_norm);
        }
        w.f32s("output_norm.weight", &self.output_norm);
    }

    /// Every matrix the model multiplies by, the LM head first.
    pub fn matrices(&self) -> impl Iterator<Item = &Weights> {
        let layers = self.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        core::iter::once(&self.token_embd).chain(layers)
    }

    /// `forward` without the logits: puts `token` at `pos` into the cache, for prompt
    /// tokens whose prediction nobody reads (the LM head is the largest matrix).
    pub fn feed<G: Gemv>(&self, gemv: &G, s: &mut Gemma3State, token: u32, pos: usize) -> Result<(), ModelError> {
        self.feed_batch(gemv, s, &[token], pos)
    }

    fn feed_chunk<G: Gemv>(&self, gemv: &G, s: &mut Gemma3State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (c, b) = (&self.config, &mut *s.batch);
        let h = &c.hparams;
        let (n, dim, hd, qd, kvd) = (tokens.len(), h.dim, h.head_dim, h.q_dim(), h.kv_dim());
        let scale = libm::sqrtf(h.dim as f32);
        for (i, &token) in tokens.iter().enumerate() {
            let x = &mut b.x[i * dim..(i + 1) * dim];
            self.token_embd.dequantize_row(token as usize, x)?;
            x.iter_mut().for_each(|v| *v *= scale);
            b.rope.global[i].set_position(first_pos + i);
            b.rope.local[i].set_position(first_pos + i);
        }

        // the per-token steps between products run on every thread, one token per job
        for (l, layer) in self.layers.iter().enumerate() {
            // attention: norm, q k v, QK-norm, rope
            for_each_row_pair(gemv, (&mut b.xb, dim), (&mut b.x, dim), n, &|(xb, x), _| {
                rmsnorm(xb, x, &layer.attn_norm, c.norm_eps);
                Ok(())
            })?;
            batch_products(gemv, &mut b.scratch, &b.xb, n, [(&layer.wq, &mut b.q), (&layer.wk, &mut b.k), (&layer.wv, &mut b.v)])?;
            let angles = if c.is_global(l) { &b.rope.global } else { &b.rope.local };
            for_each_row_pair(gemv, (&mut b.q, qd), (&mut b.k, kvd), n, &|(q, k), i| {
                for head in q.chunks_exact_mut(hd) {
                    rmsnorm_in_place(head, &layer.q_norm, c.norm_eps);
                    rope_neox(head, &angles[i]);
                }
                for head in k.chunks_exact_mut(hd) {
                    rmsnorm_in_place(head, &layer.k_norm, c.norm_eps);
                    rope_neox(head, &angles[i]);
                }
                Ok(())
            })?;
            let window = (!c.is_global(l)).then_some(c.sliding_window);
            let batch =
                PromptBatch { first_pos, window, k: &b.k[..n * kvd], v: &b.v[..n * kvd], q: &b.q[..n * qd], q_scale: c.query_scale };
            s.cache.store_and_attend(gemv.parallel(), l, &batch, &mut b.attn[..n * qd]);

            // output, post-attention norm, residual; then the ffn's norm
            batch_product(gemv, &layer.wo, &mut b.scratch, &b.attn, n, &mut b.xb)?;
            for_each_row_pair(gemv, (&mut b.x, dim), (&mut b.xb, dim), n, &|(x, xb), _| {
                rmsnorm_in_place(xb, &layer.post_attn_norm, c.norm_eps);
                add(x, xb);
                rmsnorm(xb, x, &layer.ffn_norm, c.norm_eps);
                Ok(())
            })?;

            // ffn: GeGLU, down, post-ffn norm, residual
            batch_products(gemv, &mut b.scratch, &b.xb, n, [(&layer.w_gate, &mut b.hb), (&layer.w_up, &mut b.hb2)])?;
            let hidden = h.hidden_dim;
            for_each_row_pair(gemv, (&mut b.hb, hidden), (&mut b.hb2, hidden), n, &|(g, u), _| {
                g.iter_mut().zip(u.iter()).for_each(|(g, &u)| *g = gelu_tanh(*g) * u);
                Ok(())
            })?;
            batch_product(gemv, &layer.w_down, &mut b.scratch, &b.hb, n, &mut b.xb)?;
            for_each_row_pair(gemv, (&mut b.x, dim), (&mut b.xb, dim), n, &|(x, xb), _| {
                rmsnorm_in_place(xb, &layer.post_ffn_norm, c.norm_eps);
                add(x, xb);
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// Rotary angles per token: global layers' and sliding-window layers' frequencies.
pub struct Angles {
    global: Vec<RopeAngles>,
    local: Vec<RopeAngles>,
}

/// The batch buffers with both sets of rotary angles.
type Batch = products::Batch<Angles>;

fn new_batch(model: &Gemma3, tables: TablePrecision) -> Result<Batch, ModelError> {
    let c = &model.config;
    let h = &c.hparams;
    let angles = |global| (0..PREFILL_BATCH).map(|_| RopeAngles::new(c.rope_frequencies(global))).collect();
    let rope = Angles { global: angles(true), local: angles(false) };
    let mut scratch = Scratch::for_matrices(model.matrices())?;
    if tables == TablePrecision::Residual {
        scratch = scratch.with_residual_tables(h)?;
    }
    Ok(Batch::new(h.dim, h.q_dim(), h.kv_dim(), h.hidden_dim, scratch, rope))
}

/// Working memory of one sequence, allocated once: activations, tables and angles of up
/// to `PREFILL_BATCH` tokens (one token's `forward` is a batch of one).
pub type Gemma3State = State<Batch>;

impl State<Batch> {
    /// For up to `context` positions (at most the model's trained context), exact f16 keys.
    pub fn new(model: &Gemma3, context: usize) -> Result<Gemma3State, ModelError> {
        let shape = model.attention_shape(context);
        Self::with_cache(model, Box::new(ExactKvCache::with_windows(shape, KeyPrecision::F16, &model.config.layer_windows())))
    }

    /// With a KV cache made for `model.attention_shape(context)`.
    pub fn with_cache(model: &Gemma3, cache: Box<dyn KvCache>) -> Result<Gemma3State, ModelError> {
        Self::with_tables(model, cache, TablePrecision::Auto)
    }

    /// As `with_cache`, the lookup products at `tables`' precision.
    pub fn with_tables(model: &Gemma3, cache: Box<dyn KvCache>, tables: TablePrecision) -> Result<Gemma3State, ModelError> {
        State::for_model(model, cache, || new_batch(model, tables))
    }
}

impl Architecture for Gemma3 {
    type State = Gemma3State;

    /// The 270M's file has no template, and Gemma's turns all the same.
    const DEFAULT_CHAT: Option<crate::chat::ChatTemplate> = Some(crate::chat::ChatTemplate::Gemma);
    const SENTENCEPIECE_ONLY: bool = true;

    fn runs_gguf(name: &str) -> bool {
        name == "gemma3"
    }
    fn from_gguf(gguf: &Gguf<'_>, source: &mut dyn TensorSource, progress: &mut dyn FnMut(Imported<'_>)) -> Result<Self, ModelError> {
        Gemma3::from_gguf_source(gguf, source, progress)
    }
    fn name(&self) -> &'static str {
        "gemma3"
    }
    fn hparams(&self) -> Hparams {
        self.config.hparams
    }
    fn dims(&self) -> crate::model::budget::Dims {
        let c = &self.config;
        crate::model::budget::Dims {
            // a local and a global RoPE set; table sets and int8 buffers counted for
            // Q4_K_M files (two group sizes per width, int8 at every width)
            buffers: crate::model::budget::Buffers {
                sliding_window: c.sliding_window,
                global_every: c.swa_period,
                rope_sets: 2,
                groups_per_width: 2,
                int8_widths: 3,
                residual_tables: false,
            },
            hparams: c.hparams,
            token_bytes: 0,
            merges: 0,
        }
    }
    /// Bytes of the imported matrices.
    fn matrix_bytes(&self) -> usize {
        let layer = |l: &Gemma3Layer| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down].iter().map(|m| m.bytes()).sum::<usize>();
        self.token_embd.bytes() + self.layers.iter().map(layer).sum::<usize>()
    }
    /// The buffers of every matrix the model multiplies by, in the order a decode step
    /// reads them (layer by layer, the LM head last).
    fn matrix_buffers_mut(&mut self) -> Vec<&mut crate::AlignedBytes> {
        let mut out = Vec::new();
        for l in &mut self.layers {
            for m in [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo, &mut l.w_gate, &mut l.w_up, &mut l.w_down] {
                m.buffers_mut(&mut out);
            }
        }
        self.token_embd.buffers_mut(&mut out);
        out
    }
    fn layer_windows(&self) -> Vec<usize> {
        self.config.layer_windows()
    }
    fn write_packed<'a>(&'a self, origin: &'a [u8], writer: &mut crate::formats::pack::Writer<'a>) -> Result<(), ModelError> {
        let g = Gguf::parse(origin)?;
        if crate::formats::pack::is_packed(&g) {
            return Err(ModelError::BadPackedFile("already packed".into()));
        }
        Gemma3::write_packed(self, &g, writer);
        Ok(())
    }
    fn new_state(&self, cache: Box<dyn KvCache>, tables: TablePrecision) -> Result<Gemma3State, ModelError> {
        Gemma3State::with_tables(self, cache, tables)
    }
    /// Logits for `token` at `pos`; positions fed in order from 0.
    fn forward<'s, G: Gemv>(&self, gemv: &G, s: &'s mut Gemma3State, token: u32, pos: usize) -> Result<&'s [f32], ModelError> {
        self.feed(gemv, s, token, pos)?;
        let (c, b) = (&self.config, &mut *s.batch);
        // final norm, tied LM head
        rmsnorm(&mut b.xb[..c.hparams.dim], &b.x[..c.hparams.dim], &self.output_norm, c.norm_eps);
        batch_product(gemv, &self.token_embd, &mut b.scratch, &b.xb, 1, &mut s.logits)?;
        if let Some(cap) = c.final_logit_softcap {
            s.logits.iter_mut().for_each(|l| *l = cap * libm::tanhf(*l / cap));
        }
        Ok(&s.logits)
    }
    /// `feed` for `tokens` at positions `first_pos..`, up to `PREFILL_BATCH` at a time over
    /// one pass of each weight matrix (prefill): the cache and every later logit are what
    /// feeding them one by one gives, bit for bit.
    fn feed_batch<G: Gemv>(&self, gemv: &G, s: &mut Gemma3State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (context, vocab_size) = (s.context, self.config.hparams.vocab_size);
        feed_in_batches(tokens, first_pos, context, vocab_size, |chunk, pos| self.feed_chunk(gemv, s, chunk, pos))
    }
}

/// GELU, tanh approximation (ggml's `ggml_gelu`): `½x(1 + tanh u)` written as the equal
/// `x · sigmoid(2u)`, with the branch-free `exp` of `e^−2|u|` so the loop vectorizes
/// (libm's `tanhf` was a tenth of a decode step).
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x);
    let e = exp(-2.0 * u.abs());
    // sigmoid(2u) = 1 / (1 + e) for u ≥ 0, e / (1 + e) below
    x * if u >= 0.0 { 1.0 } else { e } / (1.0 + e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sigmoid form equals ggml's `½x(1 + tanh u)` to f32 rounding, both tails included.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn gelu_matches_the_tanh_form() {
        let mut worst = 0.0f64;
        for i in -40_000..=40_000 {
            let x = i as f32 / 2000.0;
            let u = 0.797_884_6 * f64::from(x) * (1.0 + 0.044_715 * f64::from(x) * f64::from(x));
            let want = 0.5 * f64::from(x) * (1.0 + u.tanh());
            worst = worst.max((f64::from(gelu_tanh(x)) - want).abs() / f64::from(x.abs()).max(1.0));
        }
        assert!(worst < 4e-7, "worst error {worst:e}");
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert!(gelu_tanh(-100.0).abs() < 1e-30);
    }

    /// A 4B-style configuration: head_dim 8, global layers with base 10⁶ and linear scaling by 8.
    fn scaled_config() -> Gemma3Config {
        Gemma3Config {
            hparams: Hparams {
                dim: 32,
                hidden_dim: 64,
                layers: 6,
                heads: 4,
                kv_heads: 1,
                head_dim: 8,
                vocab_size: 10,
                context_length: 1 << 17,
            },
            norm_eps: 1e-6,
            rope_global: 1_000_000.0,
            rope_global_scale: 0.125,
            rope_local: 10_000.0,
            sliding_window: 4,
            swa_period: 6,
            query_scale: 1.0 / libm::sqrtf(8.0),
            final_logit_softcap: None,
        }
    }

    /// Angles set once per position rotate as `base^(−2i/d)` at that position would.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn rope_rotates_each_pair_by_its_position_angle() {
        let mut angles = RopeAngles::new(scaled_config().rope_frequencies(false));
        angles.set_position(3);
        let mut head = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        rope_neox(&mut head, &angles);
        for i in 0..4 {
            let theta = 3.0 * 10_000f64.powf(-2.0 * i as f64 / 8.0);
            let (a, b) = ((i + 1) as f64, (i + 5) as f64);
            assert!((f64::from(head[i]) - (a * theta.cos() - b * theta.sin())).abs() < 1e-5, "pair {i}");
            assert!((f64::from(head[i + 4]) - (a * theta.sin() + b * theta.cos())).abs() < 1e-5, "pair {i}");
        }
    }

    /// Linear scaling by 8: the global layers' angles at position p are those of p/8 (f64
    /// reference, to the f32 rounding of the angle); the sliding-window layers' are unscaled.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn linear_scaling_divides_global_positions() {
        let c = scaled_config();
        let (mut global, mut local) = (RopeAngles::new(c.rope_frequencies(true)), RopeAngles::new(c.rope_frequencies(false)));
        for pos in [0usize, 1, 3, 7, 8, 9, 100, 1000, 4095, 32_767, 131_071] {
            global.set_position(pos);
            local.set_position(pos);
            for i in 0..4 {
                for (angles, base, p) in [(&global, 1e6f64, pos as f64 / 8.0), (&local, 1e4, pos as f64)] {
                    let theta = p * base.powf(-2.0 * i as f64 / 8.0);
                    let tol = 3e-7 * theta + 1e-6;
                    assert!((f64::from(angles.cos[i]) - theta.cos()).abs() <= tol, "pos {pos} pair {i} base {base}: cos");
                    assert!((f64::from(angles.sin[i]) - theta.sin()).abs() <= tol, "pos {pos} pair {i} base {base}: sin");
                }
            }
        }
    }

    /// Without scaling the frequencies are `base^(−2i/d)` bit for bit, what the 270M ran
    /// with before scaling was read.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn unscaled_frequencies_are_unchanged() {
        let c = Gemma3Config { rope_global_scale: 1.0, ..scaled_config() };
        let want: Vec<f32> = (0..4).map(|i| libm::powf(1_000_000.0, -2.0 * i as f32 / 8.0)).collect();
        let got = c.rope_frequencies(true);
        assert_eq!(got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), want.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
    }
}
