//! Token sampler: repeat penalty, greedy, top-k, top-p, min-p, temperature and a seeded
//! draw — no allocation, no panic on bad input.
//!
//! # Order (llama.cpp's default chain)
//!
//! llama.cpp's `common` sampler applies, in this order: penalties, (dry, top-n-σ,)
//! top-k, (typical-p,) top-p, min-p, (xtc,) temperature, dist. The ones in parentheses
//! are off by default there and not implemented here. So [`Sampler::sample`]:
//!
//! 1. **Repeat penalty** on the tokens among the last `repeat_last_n` of
//!    `recent_tokens`, once per distinct token however often it occurs: a logit > 0 is
//!    divided by `repeat_penalty`, a logit ≤ 0 multiplied by it (llama.cpp's rule).
//! 2. **Temperature 0** stops here: greedy argmax of the penalized logits, ties to the
//!    lowest id (the argmax survives every filter below, so they do not matter).
//! 3. **Top-k** (`top_k > 0`): the `top_k` largest logits, by partial selection
//!    (`select_nth_unstable_by`), not a sort. Ties at the cut go to the lower id.
//! 4. **Top-p** (`top_p < 1`): with probabilities = softmax of the surviving logits at
//!    temperature 1 (as llama.cpp: temperature comes later), the smallest prefix of the
//!    candidates sorted by probability descending whose mass is ≥ `top_p`.
//! 5. **Min-p** (`min_p > 0`): drop every token whose probability is < `min_p` × the
//!    largest probability, computed as llama.cpp does on logits: keep
//!    `logit ≥ max_logit + ln(min_p)`.
//! 6. **Temperature**: divide the survivors' logits by `temperature`, softmax (the max
//!    subtracted first), and draw one token in proportion to these weights (which is the
//!    renormalized distribution over the survivors).
//!
//! Top-p and min-p both keep a prefix of the survivors sorted by logit, and the top-p
//! masses are normalized over the top-k set either way, so the result of 4 then 5 is
//! the shorter of the two prefixes. The implementation uses that: it applies min-p
//! first (one linear pass) and sorts only what is left, and only as far as top-p needs
//! (growing chunks: select, sort the chunk, accumulate). A full sort of the vocabulary
//! happens only with top-p on and top-k and min-p off, and a flat distribution.
//!
//! # Non-finite logits
//!
//! A NaN logit is treated as −∞: that token is never chosen. If no logit is finite
//! (all NaN or −∞) the call fails with [`SamplerError::NoCandidates`]. A +∞ logit is
//! refused with [`SamplerError::InfiniteLogit`] (an overflowed model, not a choice). A
//! penalty that would push a finite logit to +∞ saturates at `f32::MAX`.
//!
//! # Determinism
//!
//! The draw uses xorshift64* seeded through splitmix64 (one 64-bit output per sampled
//! token; greedy consumes none), `libm`'s `expf`/`logf`, and a fixed summation order
//! (the survivors in id order, or sorted by logit descending then id), so the same
//! seed, config and logits give the same tokens on every platform.
//!
//! # Memory
//!
//! The caller passes `scratch`: at least [`scratch_len`]`(vocab_size)` [`Candidate`]s
//! (8 bytes each: 2 MiB for a 262 144-token vocabulary). The logits are only read.

use core::cmp::Ordering;
use core::fmt;

/// One token and its (penalized, pre-temperature) logit: the element of the scratch
/// buffer and of [`Sampler::filter`]'s result.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Number of [`Candidate`]s of scratch that [`Sampler::sample`] and [`Sampler::filter`]
/// need for a vocabulary of `vocab_size` tokens.
pub const fn scratch_len(vocab_size: usize) -> usize {
    vocab_size
}

/// Why a sampler configuration or a sampling call was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerError {
    /// Temperature NaN, infinite or negative.
    InvalidTemperature(f32),
    /// `top_p` NaN or outside (0, 1].
    InvalidTopP(f32),
    /// `min_p` NaN or outside [0, 1].
    InvalidMinP(f32),
    /// `repeat_penalty` NaN, infinite, zero or negative.
    InvalidRepeatPenalty(f32),
    /// No logits at all.
    EmptyLogits,
    /// More logits than `u32` token ids can name.
    VocabTooLarge(usize),
    /// The scratch buffer is shorter than [`scratch_len`] of the vocabulary.
    ScratchTooSmall { needed: usize, got: usize },
    /// A recent token (inside the penalty window) is not a token of this vocabulary.
    TokenOutOfRange { token: u32, vocab_size: usize },
    /// A logit is +∞.
    InfiniteLogit { token: u32 },
    /// Every logit is NaN or −∞: there is nothing to sample.
    NoCandidates,
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SamplerError::InvalidTemperature(t) => write!(f, "invalid temperature {t} (must be finite and >= 0)"),
            SamplerError::InvalidTopP(p) => write!(f, "invalid top-p {p} (must be in (0, 1]; 1 = off)"),
            SamplerError::InvalidMinP(p) => write!(f, "invalid min-p {p} (must be in [0, 1]; 0 = off)"),
            SamplerError::InvalidRepeatPenalty(p) => {
                write!(f, "invalid repeat penalty {p} (must be finite and > 0; 1 = off)")
            }
            SamplerError::EmptyLogits => write!(f, "sampler: no logits"),
            SamplerError::VocabTooLarge(n) => write!(f, "sampler: {n} logits, more than u32 token ids can name"),
            SamplerError::ScratchTooSmall { needed, got } => {
                write!(f, "sampler: scratch holds {got} candidates, needs {needed}")
            }
            SamplerError::TokenOutOfRange { token, vocab_size } => {
                write!(f, "sampler: recent token {token} out of range (vocabulary of {vocab_size})")
            }
            SamplerError::InfiniteLogit { token } => write!(f, "sampler: logit of token {token} is +infinity"),
            SamplerError::NoCandidates => write!(f, "sampler: every logit is NaN or -infinity"),
        }
    }
}

impl core::error::Error for SamplerError {}

/// Sampling parameters, named and defaulted like llama.cpp's command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// 0 = greedy. llama.cpp `--temp`, default 0.8.
    pub temperature: f32,
    /// 0 = off. llama.cpp `--top-k`, default 40.
    pub top_k: usize,
    /// 1.0 = off. llama.cpp `--top-p`, default 0.95.
    pub top_p: f32,
    /// 0.0 = off. llama.cpp `--min-p`, default 0.05.
    pub min_p: f32,
    /// 1.0 = off. llama.cpp `--repeat-penalty`, default 1.0.
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalty looks at (0 = none). llama.cpp
    /// `--repeat-last-n`, default 64.
    pub repeat_last_n: usize,
    /// Seed of the draw. llama.cpp's default seed means "random"; a `no_std` crate has
    /// no entropy source, so the default here is a fixed 0 and the caller picks another.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1.0, repeat_last_n: 64, seed: 0 }
    }
}

impl SamplerConfig {
    /// Plain argmax of the raw logits: temperature 0, every filter and the penalty off.
    pub fn greedy() -> Self {
        SamplerConfig { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, repeat_penalty: 1.0, ..Self::default() }
    }

    /// Checks every field (NaN anywhere is refused).
    pub fn validate(&self) -> Result<(), SamplerError> {
        let t = self.temperature;
        if !(t >= 0.0) || !t.is_finite() {
            return Err(SamplerError::InvalidTemperature(t));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplerError::InvalidTopP(self.top_p));
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return Err(SamplerError::InvalidMinP(self.min_p));
        }
        let r = self.repeat_penalty;
        if !(r > 0.0) || !r.is_finite() {
            return Err(SamplerError::InvalidRepeatPenalty(r));
        }
        Ok(())
    }
}

/// Lanes of `argmax`'s first pass: enough independent maxima to fill two AVX2 vectors.
const ARGMAX_LANES: usize = 16;

/// The index of the largest value, the lowest on ties (−0.0 and +0.0 tie); NaN is never
/// chosen, and `None` when nothing is above −∞. Two passes that vectorize: the maximum
/// in independent lanes, then the first position holding it (about 20 µs over Gemma 3's
/// 262 144 logits where a one-pass running argmax took 145).
pub fn argmax(x: &[f32]) -> Option<usize> {
    let mut lanes = [f32::NEG_INFINITY; ARGMAX_LANES];
    let chunks = x.chunks_exact(ARGMAX_LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            // not `f32::max`: this form skips NaN and compiles to one `maxps`
            *m = if v > *m { v } else { *m };
        }
    }
    let max = lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    if max == f32::NEG_INFINITY {
        return None;
    }
    // whole chunks tested at once (no early exit inside one), then the position within
    let (c, chunk) = x.chunks(ARGMAX_LANES).enumerate().find(|(_, c)| c.iter().fold(false, |hit, &v| hit | (v == max)))?;
    chunk.iter().position(|&v| v == max).map(|k| c * ARGMAX_LANES + k)
}

/// xorshift64* (Vigna), state seeded by splitmix64 so every seed, 0 included, works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Rng(if z == 0 { 0x9e37_79b9_7f4a_7c15 } else { z })
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1), 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A validated configuration and the state of its random stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    config: SamplerConfig,
    rng: Rng,
}

/// Higher logit first, then lower id: a total order (logits are finite and -0.0 has
/// been folded into +0.0 by then), so the result never depends on the sort algorithm.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Keeps, in order, the candidates for which `keep` holds; returns how many.
fn retain(cands: &mut [Candidate], mut keep: impl FnMut(&Candidate) -> bool) -> usize {
    let mut n = 0;
    for i in 0..cands.len() {
        if keep(&cands[i]) {
            cands[n] = cands[i];
            n += 1;
        }
    }
    n
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Result<Self, SamplerError> {
        config.validate()?;
        Ok(Sampler { config, rng: Rng::new(config.seed) })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Restarts the random stream as if the sampler had been built with `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.config.seed = seed;
        self.rng = Rng::new(seed);
    }

    /// Picks the next token from `logits` (one per vocabulary entry; only read).
    /// `recent_tokens` is the history, oldest first; only its last `repeat_last_n`
    /// entries are looked at, and only when the penalty is on. `scratch` needs
    /// [`scratch_len`]`(logits.len())` elements; its contents on entry do not matter.
    /// The logits are only read; on an error the scratch contents are unspecified.
    pub fn sample(&mut self, logits: &[f32], recent_tokens: &[u32], scratch: &mut [Candidate]) -> Result<u32, SamplerError> {
        if self.config.temperature == 0.0 && self.penalty_window(recent_tokens).is_empty() {
            // nothing penalized: the argmax of the raw logits, without the 8-byte
            // candidate per token (Gemma 3's 262 144 took 145 µs a token that way)
            self.check_buffers(logits, scratch)?;
            let best = argmax(logits).ok_or(SamplerError::NoCandidates)?;
            // the first +∞, if any, is the argmax: the same refusal as the full path's
            return if logits[best] == f32::INFINITY { Err(SamplerError::InfiniteLogit { token: best as u32 }) } else { Ok(best as u32) };
        }
        let n = self.penalized(logits, recent_tokens, scratch)?;
        let cands = &mut scratch[..n];
        if self.config.temperature == 0.0 {
            let mut best = Candidate { id: 0, logit: f32::NEG_INFINITY };
            for c in cands.iter() {
                if c.logit > best.logit {
                    best = *c;
                }
            }
            return if best.logit == f32::NEG_INFINITY { Err(SamplerError::NoCandidates) } else { Ok(best.id) };
        }
        let kept = self.filter_penalized(cands)?;
        Ok(self.draw(&mut scratch[..kept]))
    }

    /// The candidates that survive the penalty and the top-k / top-p / min-p filters
    /// (steps 1 and 3–5 of the module docs; temperature plays no part), with their
    /// penalized logits, in the order the draw walks them: sorted by logit descending
    /// then id when a filter needed that, else by id. Does not touch the random stream.
    /// At temperature 0 `sample` ignores the filters, but this still applies them.
    pub fn filter<'s>(
        &self,
        logits: &[f32],
        recent_tokens: &[u32],
        scratch: &'s mut [Candidate],
    ) -> Result<&'s mut [Candidate], SamplerError> {
        let n = self.penalized(logits, recent_tokens, scratch)?;
        let kept = self.filter_penalized(&mut scratch[..n])?;
        Ok(&mut scratch[..kept])
    }

    /// Checks the inputs, writes every token with its penalized logit into
    /// `scratch[..logits.len()]` in id order (NaN as -inf) and returns that length.
    fn penalized(&self, logits: &[f32], recent_tokens: &[u32], scratch: &mut [Candidate]) -> Result<usize, SamplerError> {
        self.check_buffers(logits, scratch)?;
        let vocab = logits.len();
        let penalty = self.config.repeat_penalty;
        let window = self.penalty_window(recent_tokens);
        if let Some(&token) = window.iter().find(|&&t| t as usize >= vocab) {
            return Err(SamplerError::TokenOutOfRange { token, vocab_size: vocab });
        }
        let cands = &mut scratch[..vocab];
        for (i, (c, &l)) in cands.iter_mut().zip(logits).enumerate() {
            if l == f32::INFINITY {
                return Err(SamplerError::InfiniteLogit { token: i as u32 });
            }
            // NaN -> -inf; `+ 0.0` turns -0.0 into +0.0 for the total order.
            let logit = if l.is_nan() { f32::NEG_INFINITY } else { l + 0.0 };
            *c = Candidate { id: i as u32, logit };
        }
        // Penalize each distinct token once: `id = !t` marks "done" (it is never `t`),
        // then a second pass restores the ids.
        for &t in window {
            let c = &mut cands[t as usize];
            if c.id == t {
                let l = c.logit;
                c.logit = if l <= 0.0 { l * penalty } else { (l / penalty).min(f32::MAX) };
                c.id = !t;
            }
        }
        for &t in window {
            cands[t as usize].id = t;
        }
        Ok(vocab)
    }

    /// The logits are a vocabulary of ids that fit u32, and `scratch` holds a candidate each.
    fn check_buffers(&self, logits: &[f32], scratch: &[Candidate]) -> Result<(), SamplerError> {
        let vocab = logits.len();
        if vocab == 0 {
            return Err(SamplerError::EmptyLogits);
        }
        if vocab - 1 > u32::MAX as usize {
            return Err(SamplerError::VocabTooLarge(vocab));
        }
        if scratch.len() < scratch_len(vocab) {
            return Err(SamplerError::ScratchTooSmall { needed: scratch_len(vocab), got: scratch.len() });
        }
        Ok(())
    }

    /// The recent tokens the repeat penalty applies to (none when it is off).
    fn penalty_window<'t>(&self, recent_tokens: &'t [u32]) -> &'t [u32] {
        if self.config.repeat_penalty == 1.0 {
            &[]
        } else {
            &recent_tokens[recent_tokens.len().saturating_sub(self.config.repeat_last_n)..]
        }
    }

    /// Top-k, top-p, min-p over `cands` (all tokens, in id order); returns how many of
    /// the leading candidates survive.
    fn filter_penalized(&self, cands: &mut [Candidate]) -> Result<usize, SamplerError> {
        let cfg = &self.config;
        let mut n = retain(cands, |c| c.logit > f32::NEG_INFINITY);
        if n == 0 {
            return Err(SamplerError::NoCandidates);
        }
        // Whether cands[..n] is in a canonical order (by id, or `by_logit_desc`).
        let mut canonical = true;
        if cfg.top_k > 0 && cfg.top_k < n {
            cands[..n].select_nth_unstable_by(cfg.top_k - 1, by_logit_desc);
            n = cfg.top_k;
            canonical = false;
        }
        let max = cands[..n].iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        // Top-p mass is normalized over the top-k set, before min-p narrows it.
        let top_p_mass = if cfg.top_p < 1.0 {
            let z: f64 = cands[..n].iter().map(|c| libm::expf(c.logit - max) as f64).sum();
            Some(cfg.top_p as f64 * z)
        } else {
            None
        };
        if cfg.min_p > 0.0 {
            let min_logit = max + libm::logf(cfg.min_p);
            n = retain(&mut cands[..n], |c| c.logit >= min_logit);
        }
        if let Some(target) = top_p_mass {
            // Sort only as far as needed, in growing chunks: each chunk is selected
            // from what is left, so the prefix sorted so far is a prefix of the full
            // sort.
            let mut done = 0;
            let mut chunk = 64;
            let mut cum = 0.0f64;
            'chunks: while done < n {
                let end = n.min(done + chunk);
                if end < n {
                    cands[done..n].select_nth_unstable_by(end - done - 1, by_logit_desc);
                }
                cands[done..end].sort_unstable_by(by_logit_desc);
                for (i, c) in cands[done..end].iter().enumerate() {
                    cum += libm::expf(c.logit - max) as f64;
                    if cum >= target {
                        n = done + i + 1;
                        break 'chunks;
                    }
                }
                done = end;
                chunk *= 4;
            }
            canonical = true;
        }
        if !canonical {
            cands[..n].sort_unstable_by(by_logit_desc);
        }
        Ok(n)
    }

    /// Softmax at the configured temperature over `cands` (non-empty, finite logits)
    /// and one draw; always consumes exactly one random number. Overwrites each
    /// candidate's logit with its unnormalized weight.
    fn draw(&mut self, cands: &mut [Candidate]) -> u32 {
        let t = self.config.temperature;
        let u = self.rng.next_f64();
        let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let mut total = 0.0f64;
        for c in cands.iter_mut() {
            c.logit = libm::expf((c.logit - max) / t);
            total += c.logit as f64;
        }
        let target = u * total;
        let mut cum = 0.0f64;
        let mut last = cands[0].id;
        for c in cands.iter() {
            if c.logit > 0.0 {
                cum += c.logit as f64;
                last = c.id;
                if cum > target {
                    return c.id;
                }
            }
        }
        // Only reachable by rounding (target == total): the last token with weight.
        last
    }
}
