//! Gemma 3 (llama.cpp's `gemma3` GGUF architecture): grouped-query attention with
//! QK-norm, sandwich norms around attention and FFN, GeGLU (tanh GELU), sliding-window
//! layers with their own RoPE base (NEOX rotation), embeddings scaled by √dim, and the
//! LM head tied to the (Q8_0) token embedding. What the file does not say is as in
//! llama.cpp's `src/models/gemma3.cpp`: layer `l` is global iff `l % 6 == 5`, local
//! layers rotate with base 10 000, queries are scaled by 1/√head_dim.
//!
//! Every product, the LM head included, is a LUT GEMV over the imported weights.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::import::{matrix_releasing, meta_f32, meta_u32, vector, Matrix};
use super::kv::kernels::exp;
use super::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache};
use super::ops::{add, rmsnorm, rmsnorm_in_place, RopeAngles};
use super::{check_feed, Gemv, ModelError, PREFILL_BATCH};
use crate::gguf::Gguf;
use crate::{OwnedTables, Tables};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemma3Config {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context: usize,
    pub norm_eps: f32,
    pub rope_global: f32,
    pub rope_local: f32,
    pub sliding_window: usize,
    /// Every `swa_period`-th layer (the last of each period) attends globally.
    pub swa_period: usize,
}

impl Gemma3Config {
    pub fn is_global(&self, layer: usize) -> bool {
        layer % self.swa_period == self.swa_period - 1
    }
    /// Each layer's sliding window, 0 for the global layers (a cache keeps rings of these).
    pub fn layer_windows(&self) -> Vec<usize> {
        (0..self.n_layers).map(|l| if self.is_global(l) { 0 } else { self.sliding_window }).collect()
    }
    fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

pub struct Gemma3Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub wo: Matrix,
    pub post_attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Matrix,
    pub w_up: Matrix,
    pub w_down: Matrix,
    pub post_ffn_norm: Vec<f32>,
}

/// Reported after each imported tensor, and after each chunk of a tensor imported in
/// chunks (`consumed` then holds the byte range of the tensor's data read so far).
pub struct Imported<'a> {
    pub done: usize,
    pub total: usize,
    /// The tensor just imported (or being imported).
    pub tensor: &'a str,
    /// `Some(bytes of the tensor's data)` for a chunk, `None` once the tensor is done.
    pub consumed: Option<core::ops::Range<usize>>,
}

struct Importer<'g, 'a, F> {
    g: &'g Gguf<'a>,
    progress: F,
    done: usize,
    total: usize,
}

impl<F: FnMut(Imported<'_>)> Importer<'_, '_, F> {
    fn report(&mut self, tensor: &str) {
        self.done += 1;
        (self.progress)(Imported { done: self.done, total: self.total, tensor, consumed: None });
    }
    fn matrix(&mut self, name: String, shape: (usize, usize)) -> Result<Matrix, ModelError> {
        let (done, total, progress) = (self.done, self.total, &mut self.progress);
        let m = matrix_releasing(self.g, &name, Some(shape), |range| {
            progress(Imported { done, total, tensor: &name, consumed: Some(range) });
        })?;
        self.report(&name);
        Ok(m)
    }
    fn vector(&mut self, name: String, len: usize) -> Result<Vec<f32>, ModelError> {
        let v = vector(self.g, &name, len)?;
        self.report(&name);
        Ok(v)
    }
}

pub struct Gemma3 {
    pub config: Gemma3Config,
    /// The token embedding, also the LM head.
    pub token_embd: Matrix,
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
        let arch = g.get_str("general.architecture").ok_or(ModelError::MissingMetadata("general.architecture"))?;
        if arch != "gemma3" {
            return Err(ModelError::WrongArchitecture { expected: "gemma3", found: arch.into() });
        }
        let vocab_size =
            g.get_array("tokenizer.ggml.tokens").map(|a| a.len() as usize).ok_or(ModelError::MissingMetadata("tokenizer.ggml.tokens"))?;
        let c = Gemma3Config {
            dim: meta_u32(g, "gemma3.embedding_length")?,
            hidden_dim: meta_u32(g, "gemma3.feed_forward_length")?,
            n_layers: meta_u32(g, "gemma3.block_count")?,
            n_heads: meta_u32(g, "gemma3.attention.head_count")?,
            n_kv_heads: meta_u32(g, "gemma3.attention.head_count_kv")?,
            head_dim: meta_u32(g, "gemma3.attention.key_length")?,
            vocab_size,
            context: meta_u32(g, "gemma3.context_length")?,
            norm_eps: meta_f32(g, "gemma3.attention.layer_norm_rms_epsilon")?,
            rope_global: g.get_f32("gemma3.rope.freq_base").unwrap_or(1_000_000.0),
            rope_local: 10_000.0,
            sliding_window: meta_u32(g, "gemma3.attention.sliding_window")?,
            swa_period: 6,
        };
        if c.n_heads == 0
            || c.n_kv_heads == 0
            || !c.n_heads.is_multiple_of(c.n_kv_heads)
            || !c.head_dim.is_multiple_of(2)
            || c.n_layers == 0
        {
            return Err(ModelError::MissingMetadata("gemma3.attention.head_count / head_count_kv / key_length"));
        }
        let mut imp = Importer { g, progress, done: 0, total: 2 + 13 * c.n_layers };
        let token_embd = imp.matrix("token_embd.weight".into(), (c.vocab_size, c.dim))?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            layers.push(Gemma3Layer {
                attn_norm: imp.vector(name("attn_norm"), c.dim)?,
                wq: imp.matrix(name("attn_q"), (c.q_dim(), c.dim))?,
                wk: imp.matrix(name("attn_k"), (c.kv_dim(), c.dim))?,
                wv: imp.matrix(name("attn_v"), (c.kv_dim(), c.dim))?,
                q_norm: imp.vector(name("attn_q_norm"), c.head_dim)?,
                k_norm: imp.vector(name("attn_k_norm"), c.head_dim)?,
                wo: imp.matrix(name("attn_output"), (c.dim, c.q_dim()))?,
                post_attn_norm: imp.vector(name("post_attention_norm"), c.dim)?,
                ffn_norm: imp.vector(name("ffn_norm"), c.dim)?,
                w_gate: imp.matrix(name("ffn_gate"), (c.hidden_dim, c.dim))?,
                w_up: imp.matrix(name("ffn_up"), (c.hidden_dim, c.dim))?,
                w_down: imp.matrix(name("ffn_down"), (c.dim, c.hidden_dim))?,
                post_ffn_norm: imp.vector(name("post_ffw_norm"), c.dim)?,
            });
        }
        let output_norm = imp.vector("output_norm.weight".into(), c.dim)?;
        Ok(Gemma3 { config: c, token_embd, layers, output_norm })
    }

    /// The attention a KV cache for up to `context` positions must serve.
    pub fn attention_shape(&self, context: usize) -> AttentionShape {
        let c = &self.config;
        AttentionShape {
            layers: c.n_layers,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            context: context.min(c.context).max(1),
        }
    }

    /// Bytes of the imported matrices.
    pub fn matrix_bytes(&self) -> usize {
        let layer =
            |l: &Gemma3Layer| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down].iter().map(|m| m.as_bytes().len()).sum::<usize>();
        self.token_embd.as_bytes().len() + self.layers.iter().map(layer).sum::<usize>()
    }

    /// Logits for `token` at `pos`; positions fed in order from 0.
    pub fn forward<'s, G: Gemv>(&self, gemv: &G, s: &'s mut Gemma3State, token: u32, pos: usize) -> Result<&'s [f32], ModelError> {
        self.feed(gemv, s, token, pos)?;
        let (c, b) = (&self.config, &mut *s.batch);
        // final norm, tied LM head
        rmsnorm(&mut b.xb[..c.dim], &b.x[..c.dim], &self.output_norm, c.norm_eps);
        batch_product(gemv, &self.token_embd, &mut b.tables, &b.xb, 1, &mut s.logits)?;
        Ok(&s.logits)
    }

    /// `forward` without the logits: puts `token` at `pos` into the cache, for prompt
    /// tokens whose prediction nobody reads (the LM head is the largest matrix).
    pub fn feed<G: Gemv>(&self, gemv: &G, s: &mut Gemma3State, token: u32, pos: usize) -> Result<(), ModelError> {
        self.feed_batch(gemv, s, &[token], pos)
    }

    /// `feed` for `tokens` at positions `first_pos..`, up to `PREFILL_BATCH` at a time over
    /// one pass of each weight matrix (prefill): the cache and every later logit are what
    /// feeding them one by one gives, bit for bit.
    pub fn feed_batch<G: Gemv>(&self, gemv: &G, s: &mut Gemma3State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        check_feed(tokens, first_pos, s.context, self.config.vocab_size)?;
        for (i, chunk) in tokens.chunks(PREFILL_BATCH).enumerate() {
            self.feed_chunk(gemv, s, chunk, first_pos + i * PREFILL_BATCH)?;
        }
        Ok(())
    }

    fn feed_chunk<G: Gemv>(&self, gemv: &G, s: &mut Gemma3State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        let (c, b) = (&self.config, &mut *s.batch);
        let (n, dim, hd, qd, kvd) = (tokens.len(), c.dim, c.head_dim, c.q_dim(), c.kv_dim());
        let scale = libm::sqrtf(c.dim as f32);
        for (i, &token) in tokens.iter().enumerate() {
            let x = &mut b.x[i * dim..(i + 1) * dim];
            self.token_embd.dequantize_row(token as usize, x)?;
            x.iter_mut().for_each(|v| *v *= scale);
            b.rope_global[i].set_position(first_pos + i);
            b.rope_local[i].set_position(first_pos + i);
        }

        for (l, layer) in self.layers.iter().enumerate() {
            // attention: norm, q k v, QK-norm, rope
            for (xb, x) in first_rows(&mut b.xb, n, dim).zip(b.x.chunks_exact(dim)) {
                rmsnorm(xb, x, &layer.attn_norm, c.norm_eps);
            }
            batch_product(gemv, &layer.wq, &mut b.tables, &b.xb, n, &mut b.q)?;
            batch_product(gemv, &layer.wk, &mut b.tables, &b.xb, n, &mut b.k)?;
            batch_product(gemv, &layer.wv, &mut b.tables, &b.xb, n, &mut b.v)?;
            let angles = if c.is_global(l) { &b.rope_global } else { &b.rope_local };
            for ((q, k), angles) in first_rows(&mut b.q, n, qd).zip(b.k.chunks_exact_mut(kvd)).zip(angles) {
                for head in q.chunks_exact_mut(hd) {
                    rmsnorm_in_place(head, &layer.q_norm, c.norm_eps);
                    rope_neox(head, angles);
                }
                for head in k.chunks_exact_mut(hd) {
                    rmsnorm_in_place(head, &layer.k_norm, c.norm_eps);
                    rope_neox(head, angles);
                }
            }
            // each token stores, then attends (a ring must not yet hold later tokens)
            for i in 0..n {
                let pos = first_pos + i;
                s.cache.store(l, pos, &b.k[i * kvd..(i + 1) * kvd], &b.v[i * kvd..(i + 1) * kvd]);
                let first = if c.is_global(l) { 0 } else { (pos + 1).saturating_sub(c.sliding_window) };
                let (q, out) = (&b.q[i * qd..(i + 1) * qd], &mut b.attn[i * qd..(i + 1) * qd]);
                s.cache.attend_with(gemv.parallel(), l, first, pos, q, 1.0 / libm::sqrtf(hd as f32), out);
            }

            // output, post-attention norm, residual
            batch_product(gemv, &layer.wo, &mut b.tables, &b.attn, n, &mut b.xb)?;
            for (x, xb) in first_rows(&mut b.x, n, dim).zip(b.xb.chunks_exact_mut(dim)) {
                rmsnorm_in_place(xb, &layer.post_attn_norm, c.norm_eps);
                add(x, xb);
            }

            // ffn: norm, GeGLU, down, post-ffn norm, residual
            for (xb, x) in first_rows(&mut b.xb, n, dim).zip(b.x.chunks_exact(dim)) {
                rmsnorm(xb, x, &layer.ffn_norm, c.norm_eps);
            }
            batch_product(gemv, &layer.w_gate, &mut b.tables, &b.xb, n, &mut b.hb)?;
            batch_product(gemv, &layer.w_up, &mut b.tables, &b.xb, n, &mut b.hb2)?;
            for (g, &u) in b.hb[..n * c.hidden_dim].iter_mut().zip(&b.hb2) {
                *g = gelu_tanh(*g) * u;
            }
            batch_product(gemv, &layer.w_down, &mut b.tables, &b.hb, n, &mut b.xb)?;
            for (x, xb) in first_rows(&mut b.x, n, dim).zip(b.xb.chunks_exact_mut(dim)) {
                rmsnorm_in_place(xb, &layer.post_ffn_norm, c.norm_eps);
                add(x, xb);
            }
        }
        Ok(())
    }
}

/// The first `n` rows of `width` values of a token-major buffer.
fn first_rows(v: &mut [f32], n: usize, width: usize) -> core::slice::ChunksExactMut<'_, f32> {
    v[..n * width].chunks_exact_mut(width)
}

/// `ys[i] = m · xs[i]` for the first `n` rows of `xs`, over one table set per token.
fn batch_product<G: Gemv>(gemv: &G, m: &Matrix, sets: &mut [TokenTables], xs: &[f32], n: usize, ys: &mut [f32]) -> Result<(), ModelError> {
    let l = m.layout();
    let (_, set) =
        sets.iter_mut().find(|(key, _)| *key == (l.cols(), l.group())).expect("tables for every (cols, group) are made in Batch::new");
    for (t, x) in set.iter_mut().zip(xs.chunks_exact(l.cols())).take(n) {
        t.build(x)?;
    }
    let views: [Tables<'_>; PREFILL_BATCH] = core::array::from_fn(|i| set[i].view());
    gemv.gemm(m, &views[..n], &mut ys[..n * l.rows()])?;
    Ok(())
}

/// One table set per token of a batch, for matrices of (columns, group).
type TokenTables = ((usize, usize), Vec<OwnedTables>);

/// Working memory of up to `PREFILL_BATCH` tokens: activations, tables and rotary angles,
/// token-major.
struct Batch {
    x: Vec<f32>,
    xb: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    tables: Vec<TokenTables>,
    rope_global: Vec<RopeAngles>,
    rope_local: Vec<RopeAngles>,
}

impl Batch {
    fn new(model: &Gemma3) -> Result<Batch, ModelError> {
        let (c, n) = (&model.config, PREFILL_BATCH);
        let mut tables = Vec::new();
        for (cols, group) in table_keys(model) {
            let set = (0..n).map(|_| OwnedTables::new(cols, group)).collect::<Result<Vec<_>, _>>()?;
            tables.push(((cols, group), set));
        }
        Ok(Batch {
            x: vec![0.0; n * c.dim],
            xb: vec![0.0; n * c.dim],
            q: vec![0.0; n * c.q_dim()],
            k: vec![0.0; n * c.kv_dim()],
            v: vec![0.0; n * c.kv_dim()],
            attn: vec![0.0; n * c.q_dim()],
            hb: vec![0.0; n * c.hidden_dim],
            hb2: vec![0.0; n * c.hidden_dim],
            tables,
            rope_global: (0..n).map(|_| rope_neox_angles(c.rope_global, c.head_dim)).collect(),
            rope_local: (0..n).map(|_| rope_neox_angles(c.rope_local, c.head_dim)).collect(),
        })
    }
}

/// The (columns, group) of every matrix the model multiplies by.
fn table_keys(model: &Gemma3) -> Vec<(usize, usize)> {
    let mut keys: Vec<(usize, usize)> = vec![(model.config.dim, model.token_embd.layout().group())];
    for l in &model.layers {
        for m in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
            keys.push((m.layout().cols(), m.layout().group()));
        }
    }
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Working memory of one sequence, allocated once.
pub struct Gemma3State {
    context: usize,
    cache: Box<dyn KvCache>,
    /// Activations, tables and angles of up to `PREFILL_BATCH` tokens; one token's
    /// `forward` is a batch of one.
    batch: Box<Batch>,
    logits: Vec<f32>,
}

impl Gemma3State {
    /// For up to `context` positions (at most the model's trained context), exact f16 keys.
    pub fn new(model: &Gemma3, context: usize) -> Result<Gemma3State, ModelError> {
        let shape = model.attention_shape(context);
        Self::with_cache(model, Box::new(ExactKvCache::with_windows(shape, KeyPrecision::F16, &model.config.layer_windows())))
    }

    /// With a KV cache made for `model.attention_shape(context)`.
    pub fn with_cache(model: &Gemma3, cache: Box<dyn KvCache>) -> Result<Gemma3State, ModelError> {
        let c = &model.config;
        let context = cache.shape().context;
        if cache.shape() != model.attention_shape(context) {
            return Err(ModelError::CacheShape { expected: model.attention_shape(context), got: cache.shape() });
        }
        Ok(Gemma3State { context, cache, batch: Box::new(Batch::new(model)?), logits: vec![0.0; c.vocab_size] })
    }

    pub fn context(&self) -> usize {
        self.context
    }

    /// The logits of the last `forward`.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    pub fn kv_cache_bytes(&self) -> usize {
        self.cache.key_bytes() + self.cache.value_bytes()
    }

    pub fn cache(&self) -> &dyn KvCache {
        &*self.cache
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

/// NEOX RoPE: dimension i rotates with i + head_dim/2, by pair i's angle.
fn rope_neox(head: &mut [f32], angles: &RopeAngles) {
    let half = head.len() / 2;
    let (first, second) = head.split_at_mut(half);
    for (((a, b), &cos), &sin) in first.iter_mut().zip(second).zip(&angles.cos).zip(&angles.sin) {
        (*a, *b) = (*a * cos - *b * sin, *a * sin + *b * cos);
    }
}

/// NEOX RoPE frequencies: pair i turns at base^(−2i/head_dim).
fn rope_neox_angles(base: f32, head_dim: usize) -> RopeAngles {
    RopeAngles::new((0..head_dim / 2).map(|i| libm::powf(base, -2.0 * i as f32 / head_dim as f32)).collect())
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

    /// Angles set once per position rotate as `base^(−2i/d)` at that position would.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn rope_rotates_each_pair_by_its_position_angle() {
        let mut angles = rope_neox_angles(10_000.0, 8);
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
}
