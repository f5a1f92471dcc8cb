//! llama2.c checkpoints on the Llama graph (`crate::arch::llama_family`): one Llama.
//!
//! A checkpoint's f32 matrices are quantized on load to `bits` (1–8) bit planes with
//! per-group scales and minima; its token embedding stays f32 rows ([`Embedding::F32`]),
//! its classifier becomes the LM head. The graph runs with [`Numerics::Llama2c`], so every
//! logit is what the separate llama2.c implementation computed before, bit for bit.
//! Packed `.lutra` files of such a model ([`write_packed`], [`from_packed`]) keep the
//! checkpoint's `tokenizer.bin` as a byte tensor.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::llama_family::{Arch, Embedding, LlamaFamily, LlamaFamilyConfig, LlamaFamilyLayer, Numerics, Projection};
use crate::formats::gguf::Gguf;
use crate::formats::import::{meta_f32, meta_u32, vector, weights, TensorSource, Weights};
use crate::formats::llama2c::{self, Checkpoint, F32Tensor};
use crate::formats::pack::{self, Writer};
use crate::model::{group_for, Hparams, ModelError};
use crate::{AlignedBytes, Offset, PackedMatrix};

/// The packed file's tensor holding the checkpoint's `tokenizer.bin`.
pub const TOKENIZER_BLOB: &str = "tokenizer.llama2c";

/// llama2.c's fixed hyperparameters (`run.c`), which its checkpoints do not store.
const ROPE_THETA: f32 = 10_000.0;
const NORM_EPS: f32 = 1e-5;

/// Largest group size of a quantized checkpoint matrix.
const MAX_GROUP: usize = 128;

fn read(t: &F32Tensor<'_>) -> Result<Vec<f32>, ModelError> {
    let mut v = vec![0.0; t.len()];
    t.read_all(&mut v)?;
    Ok(v)
}

/// One matrix quantized; the f32 copy lives only for the call.
fn quantize(t: &F32Tensor<'_>, bits: u8, group: usize) -> Result<Weights, ModelError> {
    let w = read(t)?;
    Ok(Weights::Lookup(PackedMatrix::quantize(&w, t.rows(), t.cols(), bits, group, Offset::Min)?))
}

fn projection(weights: Weights) -> Projection {
    Projection { weights, bias: None }
}

/// A checkpoint header's sizes as lutra names them: the one place `run.c`'s field names
/// (`n_layers`, `n_heads`, `n_kv_heads`, `seq_len`) become [`Hparams`].
fn hparams(c: &llama2c::Config) -> Hparams {
    Hparams {
        dim: c.dim,
        hidden_dim: c.hidden_dim,
        layers: c.n_layers,
        heads: c.n_heads,
        kv_heads: c.n_kv_heads,
        head_dim: head_dim(c.dim, c.n_heads),
        vocab_size: c.vocab_size,
        context_length: c.seq_len,
    }
}

/// `run.c`'s head size: the residual stream split evenly among the heads.
fn head_dim(dim: usize, heads: usize) -> usize {
    dim / heads.max(1)
}

/// The graph's hyperparameters for a llama2.c model of sizes `hparams`.
fn config(hparams: Hparams) -> LlamaFamilyConfig {
    LlamaFamilyConfig {
        arch: Arch::Llama,
        numerics: Numerics::Llama2c,
        hparams,
        norm_eps: NORM_EPS,
        rope_base: ROPE_THETA,
        rope_scale: 1.0,
    }
}

/// A llama2.c checkpoint quantized to `bits` per weight (group sizes up to 128).
pub fn from_llama2c(ckpt: &Checkpoint<'_>, bits: u8) -> Result<LlamaFamily, ModelError> {
    from_llama2c_with_progress(ckpt, bits, |_, _| {})
}

/// As [`from_llama2c`], calling `progress(done, total)` after each matrix.
pub fn from_llama2c_with_progress(
    ckpt: &Checkpoint<'_>,
    bits: u8,
    mut progress: impl FnMut(usize, usize),
) -> Result<LlamaFamily, ModelError> {
    if !(1..=8).contains(&bits) {
        return Err(ModelError::UnsupportedBits(bits));
    }
    let config = config(hparams(ckpt.config()));
    let c = config.hparams;
    let group_dim = group_for(c.dim, MAX_GROUP)?;
    let group_hidden = group_for(c.hidden_dim, MAX_GROUP)?;
    let total = 7 * c.layers + 1;
    let mut done = 0;
    let mut step = |done: &mut usize| {
        *done += 1;
        progress(*done, total);
    };
    let mut layers = Vec::with_capacity(c.layers);
    for l in 0..c.layers {
        let t = ckpt.layer(l)?;
        let mut q = |m: &F32Tensor<'_>, g: usize| {
            let r = quantize(m, bits, g);
            step(&mut done);
            r
        };
        let (wq, wk, wv, wo) = (q(&t.wq, group_dim)?, q(&t.wk, group_dim)?, q(&t.wv, group_dim)?, q(&t.wo, group_dim)?);
        let (w_gate, w_down, w_up) = (q(&t.w1, group_dim)?, q(&t.w2, group_hidden)?, q(&t.w3, group_dim)?);
        layers.push(LlamaFamilyLayer {
            attn_norm: read(&t.rms_att)?,
            wq: projection(wq),
            wk: projection(wk),
            wv: projection(wv),
            qk_norm: None,
            wo: projection(wo),
            ffn_norm: read(&t.rms_ffn)?,
            w_gate,
            w_up,
            w_down,
        });
    }
    let head = quantize(&ckpt.classifier()?, bits, group_dim)?;
    step(&mut done);
    let embedding = read(&ckpt.token_embedding()?)?;
    let mut rows = AlignedBytes::zeroed(embedding.len() * 4);
    rows.as_f32s_mut().copy_from_slice(&embedding);
    Ok(LlamaFamily {
        config,
        token_embd: Embedding::F32 { rows, head },
        layers,
        output_norm: read(&ckpt.rms_final()?)?,
        output: None,
        rope_factors: None,
    })
}

/// Writes a model made by [`from_llama2c`] packed (`crate::formats::pack`): its
/// hyperparameters as `llama.*` keys, `tokenizer` (the checkpoint's `tokenizer.bin`) as a
/// byte tensor, and every tensor under its GGUF name as the kernels read it.
pub fn write_packed<'a>(model: &'a LlamaFamily, tokenizer: &'a [u8], w: &mut Writer<'a>) -> Result<(), ModelError> {
    let (c, head) = (&model.config, model.lm_head());
    let h = &c.hparams;
    let Embedding::F32 { rows, .. } = &model.token_embd else {
        let name = c.arch.name();
        return Err(ModelError::BadPackedFile(format!("packing {name} models is not implemented yet; run the GGUF file itself")));
    };
    w.str("general.architecture", "llama");
    w.str(pack::SOURCE_KEY, "llama2c");
    for (key, v) in [
        ("llama.embedding_length", h.dim),
        ("llama.feed_forward_length", h.hidden_dim),
        ("llama.block_count", h.layers),
        ("llama.attention.head_count", h.heads),
        ("llama.attention.head_count_kv", h.kv_heads),
        ("llama.vocab_size", h.vocab_size),
        ("llama.context_length", h.context_length),
    ] {
        w.u32(key, v as u32);
    }
    w.f32("llama.rope.freq_base", c.rope_base);
    w.f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
    w.blob(TOKENIZER_BLOB, tokenizer);
    w.f32s("token_embd.weight", rows.as_f32s());
    for (l, layer) in model.layers.iter().enumerate() {
        let name = |t: &str| format!("blk.{l}.{t}.weight");
        w.f32s(&name("attn_norm"), &layer.attn_norm);
        w.matrix(&name("attn_q"), &layer.wq.weights);
        w.matrix(&name("attn_k"), &layer.wk.weights);
        w.matrix(&name("attn_v"), &layer.wv.weights);
        w.matrix(&name("attn_output"), &layer.wo.weights);
        w.f32s(&name("ffn_norm"), &layer.ffn_norm);
        w.matrix(&name("ffn_gate"), &layer.w_gate);
        w.matrix(&name("ffn_down"), &layer.w_down);
        w.matrix(&name("ffn_up"), &layer.w_up);
    }
    w.f32s("output_norm.weight", &model.output_norm);
    w.matrix("output.weight", head);
    Ok(())
}

/// A model written by [`write_packed`], its matrices read in place where `source` lends
/// them; returns the model and the `tokenizer.bin` bytes.
pub fn from_packed(g: &Gguf<'_>, source: &mut dyn TensorSource) -> Result<(LlamaFamily, Vec<u8>), ModelError> {
    let get = |key: &'static str| meta_u32(g, key);
    let (dim, hidden_dim, layers) = (get("llama.embedding_length")?, get("llama.feed_forward_length")?, get("llama.block_count")?);
    let (heads, kv_heads) = (get("llama.attention.head_count")?, get("llama.attention.head_count_kv")?);
    let (vocab_size, context_length) = (get("llama.vocab_size")?, get("llama.context_length")?);
    let head_dim = head_dim(dim, heads);
    let mut config = config(Hparams { dim, hidden_dim, layers, heads, kv_heads, head_dim, vocab_size, context_length });
    (config.rope_base, config.norm_eps) = (meta_f32(g, "llama.rope.freq_base")?, meta_f32(g, "llama.attention.layer_norm_rms_epsilon")?);
    let c = config.hparams;
    if c.heads == 0
        || c.kv_heads == 0
        || !c.dim.is_multiple_of(c.heads)
        || !c.heads.is_multiple_of(c.kv_heads)
        || c.layers == 0
        || c.vocab_size == 0
    {
        return Err(ModelError::BadPackedFile(format!("impossible llama hyperparameters {config:?}")));
    }
    let (q, kv) = (c.q_dim(), c.kv_dim());
    let mut matrix = |name: String, shape: (usize, usize)| match weights(g, source, &name, Some(shape), |_| {})? {
        Weights::Lookup(m) => Ok(Weights::Lookup(m)),
        Weights::Int8(_) => Err(ModelError::BadPackedFile(format!("{name}: an int8 matrix where llama2.c weights are bit planes"))),
    };
    let mut layers = Vec::with_capacity(c.layers);
    for l in 0..c.layers {
        let name = |t: &str| format!("blk.{l}.{t}.weight");
        let (wq, wk) = (matrix(name("attn_q"), (q, c.dim))?, matrix(name("attn_k"), (kv, c.dim))?);
        let (wv, wo) = (matrix(name("attn_v"), (kv, c.dim))?, matrix(name("attn_output"), (c.dim, q))?);
        let w_gate = matrix(name("ffn_gate"), (c.hidden_dim, c.dim))?;
        let w_down = matrix(name("ffn_down"), (c.dim, c.hidden_dim))?;
        let w_up = matrix(name("ffn_up"), (c.hidden_dim, c.dim))?;
        layers.push(LlamaFamilyLayer {
            attn_norm: Vec::new(),
            wq: projection(wq),
            wk: projection(wk),
            wv: projection(wv),
            qk_norm: None,
            wo: projection(wo),
            ffn_norm: Vec::new(),
            w_gate,
            w_up,
            w_down,
        });
    }
    let head = matrix("output.weight".into(), (c.vocab_size, c.dim))?;
    for (l, layer) in layers.iter_mut().enumerate() {
        layer.attn_norm = vector(g, source, &format!("blk.{l}.attn_norm.weight"), c.dim)?;
        layer.ffn_norm = vector(g, source, &format!("blk.{l}.ffn_norm.weight"), c.dim)?;
    }
    let rows = pack::packed_f32s(g, source, "token_embd.weight", c.vocab_size * c.dim)?;
    let output_norm = vector(g, source, "output_norm.weight", c.dim)?;
    // every matrix of one input width in one group size, as `from_llama2c` makes them:
    // the graph keeps one table set per (width, group)
    let group = |w: &Weights| match w {
        Weights::Lookup(m) => m.layout().group(),
        Weights::Int8(_) => 0,
    };
    let (group_dim, group_hidden) = (group(&layers[0].wq.weights), group(&layers[0].w_down));
    if layers.iter().any(|l| {
        group(&l.w_down) != group_hidden
            || [&l.wq.weights, &l.wk.weights, &l.wv.weights, &l.wo.weights, &l.w_gate, &l.w_up].iter().any(|m| group(m) != group_dim)
    }) || group(&head) != group_dim
    {
        return Err(ModelError::BadPackedFile("matrices of one input width with different group sizes".into()));
    }
    let tokenizer = pack::packed_blob(g, source, TOKENIZER_BLOB)?;
    let model = LlamaFamily { config, token_embd: Embedding::F32 { rows, head }, layers, output_norm, output: None, rope_factors: None };
    Ok((model, tokenizer))
}
