use super::{Attention, Error, Model, Session};
use crate::attention::ValueFormat;
use crate::model::Gemv;

/// Perplexity of a text, by llama.cpp's `llama-perplexity` method.
#[derive(Debug, Clone, PartialEq)]
pub struct Perplexity {
    /// The perplexity.
    pub ppl: f64,
    /// Chunks of `ctx` tokens scored.
    pub chunks: usize,
    /// Tokens per chunk.
    pub ctx: usize,
    /// Tokens scored (the second half of each chunk, less its last token).
    pub scored: usize,
    /// The key cache's kind and bytes.
    pub keys: alloc::string::String,
    /// Bytes of the key cache.
    pub key_bytes: usize,
    /// How the values were stored.
    pub values: ValueFormat,
    /// Bytes of the value cache.
    pub value_bytes: usize,
}

/// The text's tokens (with BOS where the vocabulary adds one) cut into non-overlapping
/// chunks of `ctx`, the first token of each chunk set to BOS (where it adds one), each
/// chunk run from position 0, and only the second
/// half of each chunk scored: `exp(mean(−log p(next token)))`, in f64. Keys are read as
/// `attention` says and values stored as `values`.
pub fn perplexity<G: Gemv>(
    model: &Model,
    gemv: &G,
    text: &str,
    ctx: usize,
    attention: &Attention,
    values: ValueFormat,
) -> Result<Perplexity, Error> {
    let tokens = model.encode(text, true)?;
    let max = model.info().hparams.context_length;
    let chunks = tokens.len() / ctx.max(1);
    if ctx < 4 || ctx > max || chunks == 0 {
        return Err(Error::PerplexityText { tokens: tokens.len(), ctx, max });
    }
    let mut session = Session::with_values(model, ctx, attention, values)?;
    let (mut nll, mut scored) = (0.0f64, 0usize);
    for chunk in tokens.chunks_exact(ctx) {
        let first = ctx / 2;
        session.reset();
        // llama-perplexity: each chunk starts with BOS where the vocabulary adds one
        session.append(&[if model.adds_bos() { model.bos() } else { chunk[0] }])?;
        session.feed(gemv, &chunk[1..first])?;
        // ctx ≥ 4, so the first scored position is not the BOS slot
        for pos in first..ctx - 1 {
            let logits = session.forward(gemv, chunk[pos])?;
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = logits.iter().map(|&l| libm::exp(l as f64 - max)).sum();
            nll += max + libm::log(sum) - logits[chunk[pos + 1] as usize] as f64;
            scored += 1;
        }
    }
    let cache = session.cache_info();
    Ok(Perplexity {
        ppl: libm::exp(nll / scored as f64),
        chunks,
        ctx,
        scored,
        keys: cache.keys,
        key_bytes: cache.key_bytes,
        values: cache.values,
        value_bytes: cache.value_bytes,
    })
}
