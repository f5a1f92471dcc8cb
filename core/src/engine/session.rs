use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::model::{Attention, Model};
use super::Error;
use crate::arch::NetworkState;
use crate::attention::{KvCache, ValueFormat};
use crate::model::Gemv;

/// Positions of a session when none are asked for (the CLI's `--ctx` default, `context: 0`
/// in the library, the page and the Pi), capped by the model's own: [`default_context`].
/// Not the model's whole context: that is often far longer (Gemma 3: 32k), and a session's
/// KV cache is allocated for all its positions up front.
pub const DEFAULT_CONTEXT: usize = 4096;

/// The context of a session that asked for none: [`DEFAULT_CONTEXT`], or the model's own
/// `context_length` where that is shorter.
pub fn default_context(context_length: usize) -> usize {
    context_length.min(DEFAULT_CONTEXT)
}

/// One sequence of a model: its KV cache, its tokens and its position.
///
/// Tokens are appended first and computed when they are needed — all but the last in
/// batches over one pass of the weights, the last with logits — so a prompt, a chat
/// turn or a generated token costs the same whether it arrives alone or in a batch, and
/// the logits are what feeding every token one by one gives, bit for bit.
pub struct Session {
    model: Model,
    state: NetworkState,
    /// Every token of the sequence; `tokens[..computed]` are in the KV cache.
    tokens: Vec<u32>,
    computed: usize,
    /// The state's logits belong to the last computed token.
    logits_ready: bool,
}

/// What a session's KV cache holds and costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheInfo {
    /// "exact f16", "pq16 S=128 (8.0× smaller than f16 keys) + ...".
    pub keys: String,
    /// Bytes of the key cache.
    pub key_bytes: usize,
    /// Bytes of the value cache.
    pub value_bytes: usize,
    /// How the values are stored.
    pub values: ValueFormat,
    /// Positions the cache holds.
    pub context: usize,
}

impl fmt::Display for CacheInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        write!(
            f,
            "{}; {:.1} MiB of keys + {:.1} MiB of {} values",
            self.keys,
            mib(self.key_bytes),
            mib(self.value_bytes),
            self.values.name()
        )
    }
}

impl Session {
    /// A session of `context` positions (at most the model's) with keys read as `attention` says.
    pub fn new(model: &Model, context: usize, attention: &Attention) -> Result<Session, Error> {
        Session::with_cache(model, model.kv_cache(context, attention)?)
    }

    /// As `new`, with values stored as `values` (llama.cpp's `--cache-type-v`).
    pub fn with_values(model: &Model, context: usize, attention: &Attention, values: ValueFormat) -> Result<Session, Error> {
        Session::with_cache(model, model.kv_cache_with_values(context, attention, values)?)
    }

    /// A session over a KV cache made for `model.attention_shape(context)`.
    pub fn with_cache(model: &Model, cache: Box<dyn KvCache>) -> Result<Session, Error> {
        let context = cache.shape().context;
        let state = model.inner().net.new_state(cache, model.table_precision())?;
        // room for every position now: appending while generating never allocates
        let tokens = Vec::with_capacity(context);
        Ok(Session { model: model.clone(), state, tokens, computed: 0, logits_ready: false })
    }

    /// The model the session runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Positions the session holds at most.
    pub fn context(&self) -> usize {
        self.state.context()
    }

    /// The tokens of the sequence, appended and computed alike.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The position the next appended token takes.
    pub fn position(&self) -> usize {
        self.tokens.len()
    }

    /// Positions left in the context.
    pub fn room(&self) -> usize {
        self.context() - self.tokens.len()
    }

    /// The KV cache.
    pub fn cache(&self) -> &dyn KvCache {
        self.state.cache()
    }

    /// What the KV cache holds and costs.
    pub fn cache_info(&self) -> CacheInfo {
        let c = self.cache();
        CacheInfo {
            keys: c.describe(),
            key_bytes: c.key_bytes(),
            value_bytes: c.value_bytes(),
            values: c.value_format(),
            context: self.context(),
        }
    }

    /// Appends `tokens` to the sequence without computing them yet.
    pub fn append(&mut self, tokens: &[u32]) -> Result<(), Error> {
        let vocab_size = self.model.vocab_size();
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(Error::TokenOutOfRange { token, vocab_size });
        }
        let needed = self.tokens.len().saturating_add(tokens.len());
        if needed > self.context() {
            return Err(Error::ContextFull { needed, context: self.context() });
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Appends `tokens` and puts every token not yet computed into the KV cache, without
    /// logits (the LM head is the largest matrix).
    pub fn feed<G: Gemv>(&mut self, gemv: &G, tokens: &[u32]) -> Result<(), Error> {
        self.append(tokens)?;
        self.compute(gemv, self.tokens.len())
    }

    /// Computes every appended token but the last into the cache (the last is computed
    /// with the logits, when they are asked for): a prompt's prefill, timed apart.
    pub fn prefill<G: Gemv>(&mut self, gemv: &G) -> Result<(), Error> {
        self.compute(gemv, self.tokens.len().saturating_sub(1))
    }

    /// Appends `token` and returns the logits of the position after it.
    pub fn forward<G: Gemv>(&mut self, gemv: &G, token: u32) -> Result<&[f32], Error> {
        self.append(&[token])?;
        self.logits(gemv)
    }

    /// The logits after the last token: computes the tokens appended since, the last one
    /// through the LM head.
    pub fn logits<G: Gemv>(&mut self, gemv: &G) -> Result<&[f32], Error> {
        self.logits_and_tokens(gemv).map(|(logits, _)| logits)
    }

    /// `logits`, and the tokens they follow (what a repetition penalty looks at).
    pub(crate) fn logits_and_tokens<G: Gemv>(&mut self, gemv: &G) -> Result<(&[f32], &[u32]), Error> {
        if self.computed < self.tokens.len() || !self.logits_ready {
            let last = self.tokens.len().checked_sub(1).ok_or(Error::NothingToPredict)?;
            self.compute(gemv, last)?;
            self.model.inner().net.forward(gemv, &mut self.state, self.tokens[last], last)?;
            self.computed = last + 1;
            self.logits_ready = true;
        }
        Ok((self.state.logits(), &self.tokens))
    }

    /// The logits of each of `sessions` (all of one model; see [`Session::logits`]),
    /// those with one token left to compute (a decode step each) computed together over
    /// one pass of the weights: what a server does for the sequences it generates at
    /// once. Each session's logits are what its own [`Session::logits`] gives, bit for
    /// bit. `scratch` is working memory, kept by the caller from step to step.
    pub fn logits_together<G: Gemv>(gemv: &G, sessions: &mut [&mut Session], scratch: &mut Vec<f32>) -> Result<(), Error> {
        let Some(model) = sessions.first().map(|s| s.model.clone()) else { return Ok(()) };
        if sessions.iter().any(|s| !core::ptr::eq(s.model.inner(), model.inner())) {
            return Err(Error::SessionsOfDifferentModels);
        }
        let mut pending: Vec<&mut Session> = Vec::new();
        for s in sessions.iter_mut() {
            if s.logits_ready && s.computed == s.tokens.len() {
                continue;
            }
            let last = s.tokens.len().checked_sub(1).ok_or(Error::NothingToPredict)?;
            // a prompt's tokens but the last go in on their own, in batches
            s.compute(gemv, last)?;
            pending.push(s);
        }
        let tokens: Vec<u32> = pending.iter().map(|s| s.tokens[s.computed]).collect();
        let positions: Vec<usize> = pending.iter().map(|s| s.computed).collect();
        let mut states: Vec<&mut NetworkState> = pending.iter_mut().map(|s| &mut s.state).collect();
        model.inner().net.forward_many(gemv, &mut states, &tokens, &positions, scratch)?;
        for s in pending {
            s.computed = s.tokens.len();
            s.logits_ready = true;
        }
        Ok(())
    }

    /// Puts the tokens up to (not including) `end` into the cache, in batches.
    fn compute<G: Gemv>(&mut self, gemv: &G, end: usize) -> Result<(), Error> {
        if self.computed >= end {
            return Ok(());
        }
        let (first, batch) = (self.computed, &self.tokens[self.computed..end]);
        self.model.inner().net.feed_batch(gemv, &mut self.state, batch, first)?;
        self.computed = end;
        self.logits_ready = false;
        Ok(())
    }

    /// Keeps the first `position` tokens and forgets the rest, so the sequence can go
    /// on differently from there. Dropping the last token is free, as is any rewind
    /// while the sequence still fits every ring of the cache; once it has run past a
    /// ring (Gemma's sliding windows, PQ's recent exact keys), the ring no longer holds
    /// what the kept positions attended to, and they are computed again from the start
    /// when next needed, so the logits stay those of the kept sequence, bit for bit.
    pub fn truncate(&mut self, position: usize) -> Result<(), Error> {
        if position > self.tokens.len() {
            return Err(Error::TruncateBeyondEnd { position, len: self.tokens.len() });
        }
        if position < self.computed {
            let wrapped = self.cache().shortest_ring().is_some_and(|ring| self.computed > ring);
            self.computed = if wrapped && position + 1 < self.computed { 0 } else { position };
            self.logits_ready = false;
        }
        self.tokens.truncate(position);
        Ok(())
    }

    /// As [`Session::truncate`], but never computes anything again: rings that later
    /// positions wrapped keep those positions' rows, so what follows costs what the
    /// kept sequence would cost but its logits are not that sequence's. For benchmarks
    /// that time decoding at a depth round after round (as `llama-bench -d` does).
    pub fn rewind_for_timing(&mut self, position: usize) -> Result<(), Error> {
        if position > self.tokens.len() {
            return Err(Error::TruncateBeyondEnd { position, len: self.tokens.len() });
        }
        self.computed = self.computed.min(position);
        self.logits_ready = false;
        self.tokens.truncate(position);
        Ok(())
    }

    /// Forgets every token: the session starts again at position 0.
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.computed = 0;
        self.logits_ready = false;
    }
}
