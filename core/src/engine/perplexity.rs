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
    let chunks = tokens.len() / ctx.max(1);
    let (mut nll, mut scored) = (0.0f64, 0usize);
    let cache = score_chunks(model, gemv, &tokens, ctx, attention, values, |_, logits, next| {
        nll += log_sum_exp(logits) - logits[next as usize] as f64;
        scored += 1;
    })?;
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

/// `log Σ exp(logits)`, in f64.
fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + libm::log(logits.iter().map(|&l| libm::exp(l as f64 - max)).sum::<f64>())
}

/// Runs `tokens` in chunks of `ctx` as llama-perplexity does (each chunk from position 0,
/// its first token BOS where the vocabulary adds one) and calls `scored(index, logits,
/// next)` for each position of each chunk's second half but its last, in order, with the
/// token that follows it. Returns the cache's description.
fn score_chunks<G: Gemv>(
    model: &Model,
    gemv: &G,
    tokens: &[u32],
    ctx: usize,
    attention: &Attention,
    values: ValueFormat,
    mut scored: impl FnMut(usize, &[f32], u32),
) -> Result<super::CacheInfo, Error> {
    let max = model.info().hparams.context_length;
    let chunks = tokens.len() / ctx.max(1);
    if ctx < 4 || ctx > max || chunks == 0 {
        return Err(Error::PerplexityText { tokens: tokens.len(), ctx, max });
    }
    let mut session = Session::with_values(model, ctx, attention, values)?;
    let mut index = 0;
    for chunk in tokens.chunks_exact(ctx) {
        let first = ctx / 2;
        session.reset();
        // llama-perplexity: each chunk starts with BOS where the vocabulary adds one
        session.append(&[if model.adds_bos() { model.bos() } else { chunk[0] }])?;
        session.feed(gemv, &chunk[1..first])?;
        // ctx ≥ 4, so the first scored position is not the BOS slot
        for pos in first..ctx - 1 {
            let logits = session.forward(gemv, chunk[pos])?;
            scored(index, logits, chunk[pos + 1]);
            index += 1;
        }
    }
    Ok(session.cache_info())
}

/// The log-probabilities llama.cpp's `llama-perplexity --kl-divergence-base FILE` writes:
/// `_logits_`, then `n_ctx`, `n_vocab`, `n_chunk` (i32), the `n_chunk · n_ctx` tokens
/// (i32), then for each chunk's scored positions one record of `n_vocab` rounded up to
/// even, plus 4, u16: an f32 scale and an f32 minimum, then each token's log-probability
/// as `scale · q + min`.
#[derive(Debug, Clone, Copy)]
pub struct LlamaLogits<'a> {
    /// Tokens per chunk (`n_ctx`).
    pub ctx: usize,
    /// Vocabulary size (`n_vocab`).
    pub vocab: usize,
    /// Chunks (`n_chunk`).
    pub chunks: usize,
    tokens: &'a [u8],
    records: &'a [u8],
}

impl<'a> LlamaLogits<'a> {
    /// Reads the header and checks that the file holds every record it promises
    /// (`Error::LogitsFile` naming what is wrong otherwise).
    pub fn parse(bytes: &'a [u8]) -> Result<LlamaLogits<'a>, Error> {
        let bad = |why: &str| Error::LogitsFile(why.into());
        let rest = bytes
            .strip_prefix(b"_logits_")
            .ok_or_else(|| bad("no `_logits_` magic: not written by llama-perplexity --kl-divergence-base"))?;
        let int = |at: usize| -> Result<usize, Error> {
            let b = rest.get(4 * at..4 * at + 4).ok_or_else(|| bad("the header is cut short"))?;
            usize::try_from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])).map_err(|_| bad("a negative size in the header"))
        };
        let (ctx, vocab, chunks) = (int(0)?, int(1)?, int(2)?);
        if ctx < 4 || vocab == 0 || chunks == 0 {
            return Err(Error::LogitsFile(alloc::format!("sizes n_ctx {ctx}, n_vocab {vocab}, n_chunk {chunks}")));
        }
        let token_bytes = chunks.checked_mul(ctx).and_then(|n| n.checked_mul(4)).ok_or_else(|| bad("sizes overflow"))?;
        let record_bytes = Self::record_len(vocab) * 2;
        let records =
            (ctx - 1 - ctx / 2).checked_mul(chunks).and_then(|n| n.checked_mul(record_bytes)).ok_or_else(|| bad("sizes overflow"))?;
        let body = &rest[12..];
        if body.len() != token_bytes + records {
            return Err(Error::LogitsFile(alloc::format!(
                "{} bytes after the header where n_ctx {ctx}, n_vocab {vocab}, n_chunk {chunks} make {}",
                body.len(),
                token_bytes + records
            )));
        }
        Ok(LlamaLogits { ctx, vocab, chunks, tokens: &body[..token_bytes], records: &body[token_bytes..] })
    }

    /// u16 values per record.
    fn record_len(vocab: usize) -> usize {
        2 * vocab.div_ceil(2) + 4
    }

    /// Every chunk's tokens, in order.
    pub fn tokens(&self) -> impl Iterator<Item = i32> + '_ {
        self.tokens.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Scored position `i`'s log-probabilities, as llama.cpp reads them back (f32).
    fn log_probs(&self, i: usize, out: &mut [f32]) {
        let n = Self::record_len(self.vocab) * 2;
        let r = &self.records[i * n..(i + 1) * n];
        let f = |at: usize| f32::from_le_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]]);
        let (scale, min) = (f(0), f(4));
        for (v, q) in out.iter_mut().zip(r[8..].chunks_exact(2)) {
            *v = scale * u16::from_le_bytes([q[0], q[1]]) as f32 + min;
        }
    }
}

/// lutra's next-token distributions against llama.cpp's on the same tokens
/// ([`kl_divergence`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KlDivergence {
    /// Positions compared.
    pub positions: usize,
    /// Mean KL(llama.cpp ‖ lutra) in nats, by llama-perplexity's sum (base log-probs above −16).
    pub mean: f64,
    /// Its standard error.
    pub stderr: f64,
    /// The largest at one position.
    pub max: f64,
    /// Positions where both have the same most likely token.
    pub same_top: usize,
    /// Positions where llama.cpp's top token leads its runner-up by ≥ 0.1 nats.
    pub decisive: usize,
    /// Of those, positions where lutra ranks another token first.
    pub decisive_differ: usize,
    /// Perplexity of the tokens under lutra.
    pub ppl: f64,
    /// Perplexity of the tokens under llama.cpp's stored log-probs.
    pub ppl_base: f64,
}

/// Runs `base`'s own tokens through `model` as llama-perplexity did (chunks of its
/// `n_ctx`) and compares each scored position's distribution with the stored one.
pub fn kl_divergence<G: Gemv>(
    model: &Model,
    gemv: &G,
    base: &LlamaLogits<'_>,
    attention: &Attention,
    values: ValueFormat,
) -> Result<KlDivergence, Error> {
    let vocab = model.vocab_size();
    if base.vocab != vocab {
        return Err(Error::LogitsFile(alloc::format!("written for a vocabulary of {}; the model has {vocab}", base.vocab)));
    }
    let mut tokens = alloc::vec::Vec::with_capacity(base.chunks * base.ctx);
    for t in base.tokens() {
        match u32::try_from(t) {
            Ok(t) if (t as usize) < vocab => tokens.push(t),
            _ => return Err(Error::LogitsFile(alloc::format!("token {t} outside the vocabulary of {vocab}"))),
        }
    }
    let mut stored = alloc::vec![0.0f32; vocab];
    let mut k = KlDivergence {
        positions: 0,
        mean: 0.0,
        stderr: 0.0,
        max: 0.0,
        same_top: 0,
        decisive: 0,
        decisive_differ: 0,
        ppl: 0.0,
        ppl_base: 0.0,
    };
    let (mut sum, mut sum2, mut nll, mut nll_base) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let argmax = |v: &[f32]| (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best });
    score_chunks(model, gemv, &tokens, base.ctx, attention, values, |i, logits, next| {
        base.log_probs(i, &mut stored);
        let lse = log_sum_exp(logits);
        let kl: f64 =
            stored.iter().zip(logits).filter(|(&p, _)| p > -16.0).map(|(&p, &l)| libm::exp(p as f64) * (p as f64 - (l as f64 - lse))).sum();
        (sum, sum2, k.max) = (sum + kl, sum2 + kl * kl, k.max.max(kl));
        nll += lse - logits[next as usize] as f64;
        nll_base -= stored[next as usize] as f64;
        let (top, top_base) = (argmax(logits), argmax(&stored));
        k.same_top += usize::from(top == top_base);
        let runner_up = stored.iter().enumerate().filter(|&(j, _)| j != top_base).map(|(_, &p)| p).fold(f32::NEG_INFINITY, f32::max);
        if stored[top_base] - runner_up >= 0.1 {
            k.decisive += 1;
            k.decisive_differ += usize::from(top != top_base);
        }
        k.positions += 1;
    })?;
    let n = k.positions as f64;
    k.mean = sum / n;
    k.stderr = libm::sqrt(((sum2 / n - k.mean * k.mean) / (n - 1.0).max(1.0)).max(0.0));
    (k.ppl, k.ppl_base) = (libm::exp(nll / n), libm::exp(nll_base / n));
    Ok(k)
}
