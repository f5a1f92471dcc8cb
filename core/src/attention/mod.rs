//! Attention over a KV cache behind a trait. Every buffer is allocated when a cache is
//! made; `store` and `attend` never allocate. (The one exception: the first prompt batch
//! an exact cache attends on several threads sizes that batch's pieces, once.)
//!
//! * here: [`AttentionShape`], the [`KvCache`] trait, [`PromptBatch`];
//! * `exact.rs`: [`ExactKvCache`], keys in f16 (or f32 for comparisons);
//! * [`pq`]: [`PqKvCache`], NoMAD's product-quantized keys (codebooks in `crate::pq`);
//! * `values.rs`: [`ValueCache`], values in f16 or llama.cpp's q8_0 / q4_0 blocks
//!   ([`ValueFormat`]), shared by both caches;
//! * `rows.rs`: where a position's row lives (whole context, or a sliding-window ring);
//! * `pieces.rs`: attention cut into [`AttentionPiece`]s that any thread runs
//!   ([`Parallel`], [`SingleThread`]);
//! * [`synthetic`]: filled caches for timings.
//!
//! The arithmetic is `crate::kernels::attend`.

use crate::kernels::attend::{self as kernels, BlockRows, Rows, SoftmaxStats, ValueRows, VALUE_BLOCK};
use crate::Error;

mod exact;
mod pieces;
pub mod pq;
mod rows;
mod values;

pub use exact::{ExactKvCache, KeyPrecision};
pub(crate) use pieces::{token_block_rows, Pieces, TOKEN_BLOCK};
pub use pieces::{AttentionPiece, Parallel, SingleThread};
pub use pq::PqKvCache;
pub(crate) use rows::LayerRows;
pub use values::{ValueCache, ValueFormat};
pub mod synthetic;

/// What a cache holds: `layers` × `context` positions of `kv_heads` keys and values of
/// `head_dim`, read by `heads` query heads (`heads / kv_heads` per KV head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub context: usize,
}

impl AttentionShape {
    /// Width of all query heads.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }
    /// Width of all key (or value) heads.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// A KV cache: stores each position's keys and values and runs attention over them.
pub trait KvCache: Send {
    fn shape(&self) -> AttentionShape;
    /// Stores position `pos` of `layer`; `k` and `v` hold every KV head (`kv_dim` values).
    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]);
    /// For every query head `h` (KV head `h / group`), over positions `first..=pos`:
    /// `out_h = Σ_i softmax_i(q_h · k_i · q_scale) · v_i`, its pieces (see `PIECE_ROWS`)
    /// run by `threads`. The result is the same for every `threads`, bit for bit.
    #[allow(clippy::too_many_arguments)]
    fn attend_with(&mut self, threads: &dyn Parallel, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]);
    /// `attend_with` on the calling thread.
    fn attend(&mut self, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        self.attend_with(&SingleThread, layer, first, pos, q, q_scale, out)
    }
    /// A prompt batch of `layer`: for each token t at `pos = batch.first_pos + t` in turn,
    /// `store` its keys and values and `attend_with` its queries over `first..=pos` into
    /// `out` (`heads × head_dim` per token), where `first = pos + 1 − window` for a
    /// sliding window, else 0. A cache may attend the tokens in any order or at once;
    /// outputs are those of the loop, bit for bit.
    fn store_and_attend(&mut self, threads: &dyn Parallel, layer: usize, batch: &PromptBatch<'_>, out: &mut [f32]) {
        store_and_attend_each(self, threads, layer, batch, out);
    }
    /// Bytes of the key cache.
    fn key_bytes(&self) -> usize;
    /// Bytes of the value cache.
    fn value_bytes(&self) -> usize;
    /// How the values are stored.
    fn value_format(&self) -> ValueFormat;
    /// What the keys are, for reports: "f16", "f32", "pq16 S=128", ...
    fn describe(&self) -> alloc::string::String;
    /// The fewest positions any ring of this cache holds (a sliding window, recent exact
    /// keys), `None` when every position keeps its own row. Once a sequence runs past a
    /// ring, the ring no longer holds what earlier positions attended to, so a rewind
    /// further back than one position must compute the sequence again from its start.
    /// The default claims the smallest ring, which is always safe.
    fn shortest_ring(&self) -> Option<usize> {
        Some(0)
    }
}

/// One layer's tokens of a prompt batch at positions `first_pos..`, token-major: keys and
/// values (`kv_dim` each per token) and queries (`heads × head_dim` per token).
pub struct PromptBatch<'a> {
    pub first_pos: usize,
    /// The layer's sliding window, `None` for a layer that attends to every position.
    pub window: Option<usize>,
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub q: &'a [f32],
    pub q_scale: f32,
}

impl PromptBatch<'_> {
    /// The first position the token at `pos` attends to.
    fn first_attended(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }

    /// How many tokens, the lengths (with `out`'s) checked on the caller's thread.
    fn tokens(&self, shape: &AttentionShape, out: &[f32]) -> usize {
        let (kvd, qd) = (shape.kv_dim(), shape.q_dim());
        let n = self.k.len() / kvd;
        assert!(
            self.k.len() == n * kvd && self.v.len() == self.k.len() && self.q.len() == n * qd && out.len() == self.q.len(),
            "attention batch: k and v must hold kv_dim values per token, q and out heads × head_dim"
        );
        n
    }
}

/// `KvCache::store_and_attend` as its documentation states it: token by token.
fn store_and_attend_each<C: KvCache + ?Sized>(
    cache: &mut C,
    threads: &dyn Parallel,
    layer: usize,
    batch: &PromptBatch<'_>,
    out: &mut [f32],
) {
    let shape = cache.shape();
    let n = batch.tokens(&shape, out);
    let (kvd, qd) = (shape.kv_dim(), shape.q_dim());
    for t in 0..n {
        let pos = batch.first_pos + t;
        cache.store(layer, pos, &batch.k[t * kvd..][..kvd], &batch.v[t * kvd..][..kvd]);
        let (q, out) = (&batch.q[t * qd..][..qd], &mut out[t * qd..][..qd]);
        cache.attend_with(threads, layer, batch.first_attended(pos), pos, q, batch.q_scale, out);
    }
}

/// Positions per piece of one attention. A long span is cut at fixed multiples of this
/// many rows, per KV head; each piece is scored and softmaxed on its own (by any thread)
/// and the pieces are merged in order, so thread count never changes a result.
pub const PIECE_ROWS: usize = 1024;

/// Tokens a batched prefill (`feed_batch`) runs over one pass of the weights: the
/// largest `PromptBatch` a cache sizes its token-block pieces for.
pub const PREFILL_BATCH: usize = 32;
