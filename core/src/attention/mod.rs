//! Attention over a KV cache behind a trait: exact keys (f16, or f32 for comparisons)
//! here, the product-quantized NoMAD cache in [`pq`] (its codebooks in `crate::pq`). Values are f16, or llama.cpp's
//! q8_0 / q4_0 blocks (`ValueFormat`), in both. Every buffer is allocated when the cache
//! is made; `store` and `attend` never allocate. (The one exception: the first prompt batch
//! an exact cache attends on several threads sizes that batch's pieces, once.)

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::kernels::attend::{self as kernels, BlockRows, Rows, SoftmaxStats, ValueRows, VALUE_BLOCK};
use crate::Error;

pub mod pq;

pub use pq::PqKvCache;
pub mod synthetic;

/// What a cache holds: `layers` × `context` positions of `n_kv_heads` keys and values of
/// `head_dim`, read by `n_heads` query heads (`n_heads / n_kv_heads` per KV head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub context: usize,
}

impl AttentionShape {
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
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
    /// `out` (`n_heads × head_dim` per token), where `first = pos + 1 − window` for a
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
/// values (`kv_dim` each per token) and queries (`n_heads × head_dim` per token).
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
        let (kvd, qd) = (shape.kv_dim(), shape.n_heads * shape.head_dim);
        let n = self.k.len() / kvd;
        assert!(
            self.k.len() == n * kvd && self.v.len() == self.k.len() && self.q.len() == n * qd && out.len() == self.q.len(),
            "attention batch: k and v must hold kv_dim values per token, q and out n_heads × head_dim"
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
    let (kvd, qd) = (shape.kv_dim(), shape.n_heads * shape.head_dim);
    for t in 0..n {
        let pos = batch.first_pos + t;
        cache.store(layer, pos, &batch.k[t * kvd..][..kvd], &batch.v[t * kvd..][..kvd]);
        let (q, out) = (&batch.q[t * qd..][..qd], &mut out[t * qd..][..qd]);
        cache.attend_with(threads, layer, batch.first_attended(pos), pos, q, batch.q_scale, out);
    }
}

/// Pieces a batch attended at once may hold (a batch with more is attended in runs of
/// tokens): 32 tokens of a model whose span is one piece, as Gemma 3 270M's below 1024
/// positions — the case whose attention a second thread otherwise cannot share.
const BATCH_PIECES: usize = 32;

/// Consecutive tokens of a prompt batch whose attention to one KV head is one piece, where
/// every query head has its own KV head (`ExactKvCache::attend_tokens`).
pub(crate) const TOKEN_BLOCK: usize = 4;

/// Score rows per token of an `attend_tokens` piece: its tokens attend to at most this
/// many positions (one `PIECE_ROWS` span, or the whole context where it is shorter).
pub(crate) const fn token_block_rows(context: usize) -> usize {
    if context < PIECE_ROWS {
        context
    } else {
        PIECE_ROWS
    }
}

/// Positions per piece of one attention. A long span is cut at fixed multiples of this
/// many rows, per KV head; each piece is scored and softmaxed on its own (by any thread)
/// and the pieces are merged in order, so thread count never changes a result.
pub const PIECE_ROWS: usize = 1024;

/// Tokens a batched prefill (`feed_batch`) runs over one pass of the weights: the
/// largest `PromptBatch` a cache sizes its token-block pieces for.
pub const PREFILL_BATCH: usize = 32;

/// Runs the pieces of one attention: in order on the calling thread (`SingleThread`), or
/// spread over threads (`crate::threads::Split`). `job` must see every piece exactly once.
pub trait Parallel {
    fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync));
    /// Threads that run pieces at once.
    fn threads(&self) -> usize {
        1
    }
}

/// Every piece of attention (and, in `crate::model`, every product) on the calling
/// thread, with the fastest kernels the CPU has.
pub struct SingleThread;

impl Parallel for SingleThread {
    fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
        pieces.iter_mut().for_each(job);
    }
}

/// One piece of an attention — a run of one KV head's rows — and the scratch its job
/// works in. The output is the piece's own softmax-weighted sum of values.
pub struct AttentionPiece {
    pub(crate) kv_head: usize,
    /// The token of a batch (`KvCache::store_and_attend`) whose query it scores; 0 alone.
    pub(crate) token: usize,
    /// Rows of the layer (relative to its first row), within one `PIECE_ROWS` span.
    pub(crate) rows: Range<usize>,
    /// `group` rows of `PIECE_ROWS` scores.
    pub(crate) scores: Vec<f32>,
    /// Integer table sums of the piece's code blocks (PQ caches), for up to four heads.
    pub(crate) sums: Vec<u16>,
    /// One key or value row converted to f32 (the portable loops and exact sink keys);
    /// a token block's query rows (`ExactKvCache::attend_tokens`).
    pub(crate) row: Vec<f32>,
    /// `group × head_dim`.
    pub(crate) out: Vec<f32>,
    pub(crate) stats: Vec<SoftmaxStats>,
}

/// Every piece a cache may need at once, allocated with the cache.
pub(crate) struct Pieces {
    all: Vec<AttentionPiece>,
    group: usize,
    head_dim: usize,
}

impl Pieces {
    pub(crate) fn new(shape: AttentionShape) -> Pieces {
        let mut pieces = Pieces::none(shape);
        pieces.reserve(shape.n_kv_heads * shape.context.div_ceil(PIECE_ROWS));
        pieces
    }

    /// No pieces yet, for `shape`'s attention.
    fn none(shape: AttentionShape) -> Pieces {
        Pieces { all: Vec::new(), group: shape.group(), head_dim: shape.head_dim }
    }

    /// The pieces of `attend_tokens`, made with the cache where it runs (none elsewhere):
    /// one per `TOKEN_BLOCK` tokens of the largest prompt batch and KV head, each with
    /// `TOKEN_BLOCK` score rows of `token_block_rows(context)` and the block's queries
    /// and outputs (`engine::budget` counts them).
    fn for_token_blocks(shape: AttentionShape, usable: bool) -> Pieces {
        let (hd, rows) = (shape.head_dim, token_block_rows(shape.context));
        let count = if usable { PREFILL_BATCH.div_ceil(TOKEN_BLOCK) * shape.n_kv_heads } else { 0 };
        let all = (0..count)
            .map(|_| AttentionPiece {
                kv_head: 0,
                token: 0,
                rows: 0..0,
                scores: vec![0.0; TOKEN_BLOCK * rows],
                sums: Vec::new(),
                row: vec![0.0; TOKEN_BLOCK * hd],
                out: vec![0.0; TOKEN_BLOCK * hd],
                stats: vec![SoftmaxStats::default(); TOKEN_BLOCK],
            })
            .collect();
        Pieces { all, group: TOKEN_BLOCK, head_dim: hd }
    }

    /// At least `count` pieces.
    fn reserve(&mut self, count: usize) {
        let (group, hd) = (self.group, self.head_dim);
        while self.all.len() < count {
            self.all.push(AttentionPiece {
                kv_head: 0,
                token: 0,
                rows: 0..0,
                scores: vec![0.0; group * PIECE_ROWS],
                sums: vec![0; crate::kernels::pq_scan::SCAN_HEADS * PIECE_ROWS],
                row: vec![0.0; hd],
                out: vec![0.0; group * hd],
                stats: vec![SoftmaxStats::default(); group],
            });
        }
    }

    /// Cuts `rows` of every KV head at multiples of `PIECE_ROWS` into the first pieces,
    /// KV head major; returns how many.
    pub(crate) fn plan(&mut self, n_kv_heads: usize, rows: Range<usize>) -> usize {
        self.plan_token(0, 0, n_kv_heads, rows)
    }

    /// As `plan`, for token `token` of a batch, into the pieces from index `used` on;
    /// returns the pieces used so far.
    fn plan_token(&mut self, mut used: usize, token: usize, n_kv_heads: usize, rows: Range<usize>) -> usize {
        for kv_head in 0..n_kv_heads {
            let mut start = rows.start;
            while start < rows.end {
                let end = ((start / PIECE_ROWS + 1) * PIECE_ROWS).min(rows.end);
                let p = &mut self.all[used];
                (p.kv_head, p.token, p.rows) = (kv_head, token, start..end);
                used += 1;
                start = end;
            }
        }
        used
    }

    /// Pieces one attention over `rows` takes.
    fn count(n_kv_heads: usize, rows: &Range<usize>) -> usize {
        let spans = if rows.is_empty() { 0 } else { (rows.end - 1) / PIECE_ROWS - rows.start / PIECE_ROWS + 1 };
        n_kv_heads * spans
    }

    /// The first `used` pieces.
    pub(crate) fn planned(&mut self, used: usize) -> &mut [AttentionPiece] {
        &mut self.all[..used]
    }

    /// `out` (every query head) from the `used` planned pieces: each head's pieces
    /// weighted by their share of the softmax, `sum · e^(max − overall max)`, in order.
    pub(crate) fn merge(&self, used: usize, out: &mut [f32]) {
        self.merge_range(0..used, out);
    }

    /// `merge` of the planned pieces `range` (one token's).
    fn merge_range(&self, range: Range<usize>, out: &mut [f32]) {
        let (group, hd) = (self.group, self.head_dim);
        if range.is_empty() {
            // an empty span (first > pos) attends to nothing
            out.fill(0.0);
        }
        for head in self.all[range].chunk_by(|a, b| a.kv_head == b.kv_head) {
            let kv_head = head[0].kv_head;
            let out = &mut out[kv_head * group * hd..(kv_head + 1) * group * hd];
            if let [only] = head {
                out.copy_from_slice(&only.out);
                continue;
            }
            for (g, o) in out.chunks_exact_mut(hd).enumerate() {
                let max = head.iter().map(|p| p.stats[g].max).fold(f32::NEG_INFINITY, f32::max);
                o.fill(0.0);
                let mut total = 0.0;
                for p in head.iter().filter(|p| p.stats[g].sum > 0.0) {
                    let w = p.stats[g].sum * kernels::exp(p.stats[g].max - max);
                    total += w;
                    o.iter_mut().zip(&p.out[g * hd..(g + 1) * hd]).for_each(|(o, &x)| *o += w * x);
                }
                if total > 0.0 {
                    let inv = 1.0 / total;
                    o.iter_mut().for_each(|o| *o *= inv);
                }
            }
        }
    }
}

/// How exact keys are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPrecision {
    F16,
    F32,
}

/// Rows per layer: the whole context, or — for a layer that only ever attends to its last
/// `window` positions — a ring of `window` rows (position `p` in row `p % window`).
#[derive(Clone, Debug)]
pub(crate) struct LayerRows {
    offsets: Vec<usize>,
    caps: Vec<usize>,
}

impl LayerRows {
    /// `windows[l]` = 0 (or missing) keeps every position of layer `l`.
    fn new(layers: usize, context: usize, windows: &[usize]) -> LayerRows {
        let caps: Vec<usize> = (0..layers)
            .map(|l| match windows.get(l) {
                Some(&w) if w > 0 => w.min(context),
                _ => context,
            })
            .collect();
        let offsets = caps.iter().scan(0, |at, &c| Some(core::mem::replace(at, *at + c))).collect();
        LayerRows { offsets, caps }
    }

    /// The shortest ring (a layer holding fewer rows than the context).
    pub(crate) fn shortest_ring(&self, context: usize) -> Option<usize> {
        self.caps.iter().copied().filter(|&c| c < context).min()
    }

    /// Rows of all layers together.
    fn total(&self) -> usize {
        self.caps.iter().sum()
    }

    /// Rows of `layer`: its window, or the whole context.
    pub(crate) fn cap(&self, layer: usize) -> usize {
        self.caps[layer]
    }

    /// Where the `head_dim` values of `kv_head` in row `row` of `layer` start, in a buffer
    /// laid out `[layer][kv_head][row][head_dim]`: each KV head's rows are contiguous, so
    /// attention streams them instead of striding across the other heads.
    fn at(&self, shape: &AttentionShape, layer: usize, kv_head: usize, row: usize) -> usize {
        self.index(shape, layer, kv_head, row) * shape.head_dim
    }

    /// The row's index in that layout, counting rows of every KV head and layer.
    fn index(&self, shape: &AttentionShape, layer: usize, kv_head: usize, row: usize) -> usize {
        self.offsets[layer] * shape.n_kv_heads + kv_head * self.caps[layer] + row
    }

    /// Stores position `pos` of `layer` (every KV head of `x`, each head's row converted
    /// by `convert`) in `data`.
    fn store<T>(&self, shape: &AttentionShape, data: &mut [T], layer: usize, pos: usize, x: &[f32], convert: impl Fn(&[f32], &mut [T])) {
        let (hd, row) = (shape.head_dim, pos % self.caps[layer]);
        for (kv_head, x) in x.chunks_exact(hd).enumerate().take(shape.n_kv_heads) {
            let at = self.at(shape, layer, kv_head, row);
            convert(x, &mut data[at..at + hd]);
        }
    }

    /// Which of `layer`'s rows hold positions `first..=pos`, relative to its first row,
    /// and whether the span also holds rows outside them (a ring asked for fewer
    /// positions than it holds after wrapping; `mask_outside` clears those).
    pub(crate) fn span(&self, layer: usize, first: usize, pos: usize) -> (Range<usize>, bool) {
        let cap = self.caps[layer];
        if pos < cap {
            (first..pos + 1, false)
        } else {
            (0..cap, pos + 1 - first < cap)
        }
    }

    /// Sets the scores of a full ring's rows (`scores[i]` for row `first_row + i`) whose
    /// position is outside `first..=pos` to −∞ (zero weight after softmax).
    pub(crate) fn mask_outside(&self, layer: usize, first: usize, pos: usize, first_row: usize, scores: &mut [f32]) {
        let cap = self.caps[layer];
        for (i, s) in (first_row..cap).zip(scores.iter_mut()) {
            let held = pos - (pos % cap + cap - i) % cap;
            if held < first {
                *s = f32::NEG_INFINITY;
            }
        }
    }
}

/// How a value cache stores each row of `head_dim` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueFormat {
    /// IEEE half precision, 2 bytes a value.
    #[default]
    F16,
    /// llama.cpp's q8_0: blocks of 32 int8 codes and an f16 scale, 1.06 bytes a value.
    Q8_0,
    /// llama.cpp's q4_0: blocks of 32 4-bit codes and an f16 scale, 0.56 bytes a value.
    Q4_0,
}

impl ValueFormat {
    pub const ALL: [ValueFormat; 3] = [ValueFormat::F16, ValueFormat::Q8_0, ValueFormat::Q4_0];

    /// The name llama.cpp's `--cache-type-v` gives it: "f16", "q8_0", "q4_0".
    pub fn name(self) -> &'static str {
        match self {
            ValueFormat::F16 => "f16",
            ValueFormat::Q8_0 => "q8_0",
            ValueFormat::Q4_0 => "q4_0",
        }
    }

    pub fn from_name(name: &str) -> Option<ValueFormat> {
        ValueFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether rows of `head_dim` values can be stored this way: the block formats need
    /// whole blocks of 32.
    pub fn check(self, head_dim: usize) -> Result<(), Error> {
        match self {
            ValueFormat::F16 => Ok(()),
            _ if head_dim.is_multiple_of(VALUE_BLOCK) => Ok(()),
            format => Err(Error::ValueFormat { format: format.name(), head_dim }),
        }
    }

    /// Code bytes of one row (block formats).
    fn code_bytes(self, head_dim: usize) -> usize {
        match self {
            ValueFormat::F16 => 0,
            ValueFormat::Q8_0 => head_dim,
            ValueFormat::Q4_0 => head_dim / 2,
        }
    }
}

/// The values (in a `ValueFormat`) and the softmax · V half of attention, shared by every
/// key cache.
pub struct ValueCache {
    shape: AttentionShape,
    rows: LayerRows,
    format: ValueFormat,
    /// F16: the values, `[layer][kv_head][row][head_dim]`.
    halves: Vec<u16>,
    /// Block formats: each row's codes, in the same row order.
    codes: Vec<u8>,
    /// Block formats: each row's `head_dim / 32` f16 scales.
    scales: Vec<u16>,
}

impl ValueCache {
    pub fn new(shape: AttentionShape) -> ValueCache {
        ValueCache::with_windows(shape, &[])
    }

    /// Layers with `windows[l] > 0` keep a ring of that many positions.
    pub fn with_windows(shape: AttentionShape, windows: &[usize]) -> ValueCache {
        ValueCache::checked(shape, windows, ValueFormat::F16)
    }

    /// As `with_windows`, storing values as `format`; refuses a block format for a
    /// head_dim that is not a multiple of 32.
    pub fn with_format(shape: AttentionShape, windows: &[usize], format: ValueFormat) -> Result<ValueCache, Error> {
        format.check(shape.head_dim)?;
        Ok(ValueCache::checked(shape, windows, format))
    }

    /// `with_format` for a `format` already checked against `shape.head_dim`.
    pub(crate) fn checked(shape: AttentionShape, windows: &[usize], format: ValueFormat) -> ValueCache {
        let rows = LayerRows::new(shape.layers, shape.context, windows);
        let n = rows.total() * shape.n_kv_heads;
        let (halves, codes, scales) = match format {
            ValueFormat::F16 => (n * shape.head_dim, 0, 0),
            _ => (0, n * format.code_bytes(shape.head_dim), n * (shape.head_dim / VALUE_BLOCK)),
        };
        ValueCache { shape, rows, format, halves: vec![0; halves], codes: vec![0; codes], scales: vec![0; scales] }
    }

    pub fn bytes(&self) -> usize {
        2 * self.halves.len() + self.codes.len() + 2 * self.scales.len()
    }

    pub fn format(&self) -> ValueFormat {
        self.format
    }

    /// The rows layout (shared with keys kept the same way).
    pub(crate) fn rows(&self) -> &LayerRows {
        &self.rows
    }

    pub fn store(&mut self, layer: usize, pos: usize, v: &[f32]) {
        let (shape, format) = (self.shape, self.format);
        let quantize = match format {
            ValueFormat::F16 => return self.rows.store(&shape, &mut self.halves, layer, pos, v, kernels::f16_row),
            ValueFormat::Q8_0 => kernels::quantize_q8_0,
            ValueFormat::Q4_0 => kernels::quantize_q4_0,
        };
        let (hd, row) = (shape.head_dim, pos % self.rows.cap(layer));
        let (code_bytes, blocks) = (format.code_bytes(hd), hd / VALUE_BLOCK);
        for (kv_head, x) in v.chunks_exact(hd).enumerate().take(shape.n_kv_heads) {
            let at = self.rows.index(&shape, layer, kv_head, row);
            let codes = self.codes[at * code_bytes..][..code_bytes].chunks_exact_mut(code_bytes / blocks);
            let scales = &mut self.scales[at * blocks..][..blocks];
            for ((x, codes), scale) in x.chunks_exact(VALUE_BLOCK).zip(codes).zip(scales) {
                quantize(x.try_into().expect("chunks of VALUE_BLOCK"), codes, scale);
            }
        }
    }

    /// Value rows `rows` of `kv_head` in `layer` (rows of one span, counted from the
    /// layer's first), as the value-sum kernels read them.
    ///
    /// # Panics
    /// If `layer`, `kv_head` or `rows` lie outside the cache.
    pub fn value_rows(&self, layer: usize, kv_head: usize, rows: Range<usize>) -> ValueRows<'_> {
        let (hd, count) = (self.shape.head_dim, rows.len());
        let at = self.rows.index(&self.shape, layer, kv_head, rows.start);
        let blocks = || BlockRows {
            codes: &self.codes[at * self.format.code_bytes(hd)..],
            scales: &self.scales[at * (hd / VALUE_BLOCK)..],
            len: hd,
            count,
        };
        match self.format {
            ValueFormat::F16 => ValueRows::F16(Rows { data: &self.halves[at * hd..], stride: hd, len: hd, count }),
            ValueFormat::Q8_0 => ValueRows::Q8_0(blocks()),
            ValueFormat::Q4_0 => ValueRows::Q4_0(blocks()),
        }
    }

    /// The f16 value rows `0..count` of `kv_head` in `layer` (None for block formats).
    fn f16_rows(&self, layer: usize, kv_head: usize, count: usize) -> Option<Rows<'_, u16>> {
        match self.value_rows(layer, kv_head, 0..count) {
            ValueRows::F16(rows) => Some(rows),
            _ => None,
        }
    }

    /// A piece's softmax of its `group` score rows (`scores[g * PIECE_ROWS..]`), then its
    /// `out[g · head_dim..]` = the rows' weighted sum of the values in its rows of
    /// `kv_head`: each value row is read and converted once for the whole group.
    pub(crate) fn softmax_mix(&self, layer: usize, piece: &mut AttentionPiece) {
        let values = self.value_rows(layer, piece.kv_head, piece.rows.clone());
        // the piece's query heads only (a token block's piece holds more room)
        let out = &mut piece.out[..self.shape.group() * self.shape.head_dim];
        kernels::softmax_mix(values, &mut piece.scores, PIECE_ROWS, &mut piece.row, out, &mut piece.stats);
    }
}

/// Keys kept exactly (f16 or f32): scores are dot products.
pub struct ExactKvCache {
    shape: AttentionShape,
    precision: KeyPrecision,
    keys_f16: Vec<u16>,
    keys_f32: Vec<f32>,
    values: ValueCache,
    pieces: Pieces,
    /// A prompt batch's pieces (`store_and_attend` on several threads), made on first use.
    batch: Pieces,
    /// A prompt batch's pieces of `TOKEN_BLOCK` tokens each (`attend_tokens`), made with
    /// the cache where that path runs (none elsewhere).
    token_blocks: Pieces,
}

impl ExactKvCache {
    pub fn new(shape: AttentionShape, precision: KeyPrecision) -> ExactKvCache {
        ExactKvCache::with_windows(shape, precision, &[])
    }

    /// Layers with `windows[l] > 0` only ever attend to their last `windows[l]` positions
    /// and keep a ring of that many keys and values.
    pub fn with_windows(shape: AttentionShape, precision: KeyPrecision, windows: &[usize]) -> ExactKvCache {
        ExactKvCache::with_values(shape, precision, ValueCache::with_windows(shape, windows))
    }

    /// As `with_windows`, storing values as `format` (refused for a block format where
    /// head_dim is not a multiple of 32).
    pub fn with_value_format(
        shape: AttentionShape,
        precision: KeyPrecision,
        windows: &[usize],
        format: ValueFormat,
    ) -> Result<ExactKvCache, Error> {
        Ok(ExactKvCache::with_values(shape, precision, ValueCache::with_format(shape, windows, format)?))
    }

    pub(crate) fn with_values(shape: AttentionShape, precision: KeyPrecision, values: ValueCache) -> ExactKvCache {
        let n = values.rows().total() * shape.kv_dim();
        let (f16_len, f32_len) = match precision {
            KeyPrecision::F16 => (n, 0),
            KeyPrecision::F32 => (0, n),
        };
        let attends_in_token_blocks = shape.group() == 1
            && precision == KeyPrecision::F16
            && values.format() == ValueFormat::F16
            && kernels::attends_tokens_f16(shape.head_dim);
        ExactKvCache {
            shape,
            precision,
            keys_f16: vec![0; f16_len],
            keys_f32: vec![0.0; f32_len],
            values,
            pieces: Pieces::new(shape),
            batch: Pieces::none(shape),
            token_blocks: Pieces::for_token_blocks(shape, attends_in_token_blocks),
        }
    }

    /// Scores one piece's rows for query `q` (its KV head's group of heads), masks what a
    /// ring holds outside `first..=pos`, and mixes the values.
    #[allow(clippy::too_many_arguments)]
    fn attend_piece(&self, layer: usize, first: usize, pos: usize, masked: bool, q: &[f32], q_scale: f32, piece: &mut AttentionPiece) {
        let s = self.shape;
        let (hd, group) = (s.head_dim, s.group());
        let (kvh, n) = (piece.kv_head, piece.rows.len());
        let q = &q[kvh * group * hd..(kvh + 1) * group * hd];
        let base = self.values.rows().at(&s, layer, kvh, piece.rows.start);
        match self.precision {
            KeyPrecision::F16 => {
                let keys = Rows { data: &self.keys_f16[base..], stride: hd, len: hd, count: n };
                kernels::scores_f16(keys, q, q_scale, &mut piece.row, &mut piece.scores, PIECE_ROWS);
            }
            KeyPrecision::F32 => {
                let keys = Rows { data: &self.keys_f32[base..], stride: hd, len: hd, count: n };
                kernels::scores_f32(keys, q, q_scale, &mut piece.scores, PIECE_ROWS);
            }
        }
        if masked {
            for g in 0..group {
                self.values.rows().mask_outside(layer, first, pos, piece.rows.start, &mut piece.scores[g * PIECE_ROWS..][..n]);
            }
        }
        self.values.softmax_mix(layer, piece);
    }
}

impl ExactKvCache {
    /// Whether a prompt batch's attention in this layer goes by `attend_tokens`: the cache
    /// made its pieces (every query head has its own KV head, so a piece of one token
    /// would convert each key and value row for one query; keys and values are f16; the
    /// CPU has the kernel), there are enough of them, every token attends from the
    /// layer's first row, and each token's rows fit one piece.
    fn attends_in_token_blocks(&self, layer: usize, batch: &PromptBatch<'_>, n: usize) -> bool {
        let s = self.shape;
        let last = batch.first_pos + n.saturating_sub(1);
        n >= 2
            && n.div_ceil(TOKEN_BLOCK) * s.n_kv_heads <= self.token_blocks.all.len()
            && batch.window.is_none()
            && last < self.values.rows().cap(layer).min(token_block_rows(s.context))
    }

    /// Stores the whole batch, then attends it in one parallel run of pieces of
    /// `TOKEN_BLOCK` consecutive tokens × one KV head: each key and value row is converted
    /// once per block instead of once per token. Each token's output is what
    /// `attend_with` gives it, bit for bit (`kernels::attend_tokens_f16`).
    fn attend_tokens(&mut self, threads: &dyn Parallel, layer: usize, batch: &PromptBatch<'_>, out: &mut [f32]) {
        let s = self.shape;
        let n = batch.tokens(&s, out);
        let (kvd, qd, hd) = (s.kv_dim(), s.n_heads * s.head_dim, s.head_dim);
        for t in 0..n {
            self.store(layer, batch.first_pos + t, &batch.k[t * kvd..][..kvd], &batch.v[t * kvd..][..kvd]);
        }
        let used = n.div_ceil(TOKEN_BLOCK) * s.n_kv_heads;
        for (i, p) in self.token_blocks.all[..used].iter_mut().enumerate() {
            let first = i / s.n_kv_heads * TOKEN_BLOCK;
            let last = (first + TOKEN_BLOCK).min(n) - 1;
            (p.kv_head, p.token, p.rows) = (i % s.n_kv_heads, first, 0..batch.first_pos + last + 1);
        }
        let mut pieces = core::mem::take(&mut self.token_blocks.all);
        let this = &*self;
        threads.run_pieces(&mut pieces[..used], &|piece| this.attend_token_block(layer, batch, n, piece));
        for p in &pieces[..used] {
            for (j, t) in (p.token..n).take(TOKEN_BLOCK).enumerate() {
                out[t * qd + p.kv_head * hd..][..hd].copy_from_slice(&p.out[j * hd..][..hd]);
            }
        }
        self.token_blocks.all = pieces;
    }

    /// One piece of `attend_tokens`: its tokens' outputs into `piece.out`, token-major.
    fn attend_token_block(&self, layer: usize, batch: &PromptBatch<'_>, n: usize, piece: &mut AttentionPiece) {
        let s = self.shape;
        let (hd, qd, kvh) = (s.head_dim, s.n_heads * s.head_dim, piece.kv_head);
        let tokens = (n - piece.token).min(TOKEN_BLOCK);
        let mut counts = [0; TOKEN_BLOCK];
        for (j, t) in (piece.token..piece.token + tokens).enumerate() {
            piece.row[j * hd..][..hd].copy_from_slice(&batch.q[t * qd + kvh * hd..][..hd]);
            counts[j] = batch.first_pos + t + 1;
        }
        if let Some(values) = self.values.f16_rows(layer, kvh, piece.rows.len()) {
            let count = piece.rows.len();
            let base = self.values.rows().at(&s, layer, kvh, 0);
            let keys = Rows { data: &self.keys_f16[base..], stride: hd, len: hd, count };
            let (q, out) = (&piece.row[..tokens * hd], &mut piece.out[..tokens * hd]);
            let outputs = (&mut piece.scores[..], out, &mut piece.stats[..]);
            if kernels::attend_tokens_f16(keys, values, q, &counts[..tokens], batch.q_scale, token_block_rows(s.context), outputs) {
                return;
            }
        }
        // where the kernel cannot run: token by token as `attend_with` (the last token
        // first, so that each output moves to its slot before the next is made in slot 0)
        let rows = piece.rows.clone();
        for (j, t) in (piece.token..piece.token + tokens).enumerate().rev() {
            piece.rows = 0..counts[j];
            self.attend_piece(layer, 0, batch.first_pos + t, false, &batch.q[t * qd..][..qd], batch.q_scale, piece);
            piece.out.copy_within(..hd, j * hd);
        }
        piece.rows = rows;
    }
}

impl KvCache for ExactKvCache {
    fn shape(&self) -> AttentionShape {
        self.shape
    }

    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (shape, rows) = (&self.shape, self.values.rows());
        match self.precision {
            KeyPrecision::F16 => rows.store(shape, &mut self.keys_f16, layer, pos, k, kernels::f16_row),
            KeyPrecision::F32 => rows.store(shape, &mut self.keys_f32, layer, pos, k, |x, d| d.copy_from_slice(x)),
        }
        self.values.store(layer, pos, v);
    }

    fn attend_with(&mut self, threads: &dyn Parallel, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        let s = self.shape;
        // checked here, on the caller's thread: a pool would not pass a piece's panic on
        assert!(q.len() == s.n_heads * s.head_dim && out.len() == q.len(), "attention: q and out must hold n_heads × head_dim values");
        let (rows, masked) = self.values.rows().span(layer, first, pos);
        let used = self.pieces.plan(s.n_kv_heads, rows);
        let mut pieces = core::mem::take(&mut self.pieces.all);
        let this = &*self;
        threads.run_pieces(&mut pieces[..used], &|piece| this.attend_piece(layer, first, pos, masked, q, q_scale, piece));
        self.pieces.all = pieces;
        self.pieces.merge(used, out);
    }

    /// Stores the whole batch, then attends all its tokens' pieces in one parallel run
    /// (a run of tokens at a time), where the other threads would otherwise wait: fewer
    /// pieces per token than threads. Each token's pieces and merge are `attend_with`'s,
    /// so its output is too; a ring must still hold every position each token attends to
    /// once the batch is stored, else the batch goes token by token.
    fn store_and_attend(&mut self, threads: &dyn Parallel, layer: usize, batch: &PromptBatch<'_>, out: &mut [f32]) {
        let s = self.shape;
        let n = batch.tokens(&s, out);
        let (kvd, qd, first_pos) = (s.kv_dim(), s.n_heads * s.head_dim, batch.first_pos);
        let last = (first_pos + n).saturating_sub(1);
        let cap = self.values.rows().cap(layer);
        if self.attends_in_token_blocks(layer, batch, n) {
            return self.attend_tokens(threads, layer, batch, out);
        }
        let held = last < cap || batch.first_attended(first_pos) + cap > last;
        let per_token = Pieces::count(s.n_kv_heads, &self.values.rows().span(layer, batch.first_attended(last), last).0);
        if n < 2 || !held || per_token >= threads.threads() {
            return store_and_attend_each(self, threads, layer, batch, out);
        }
        for t in 0..n {
            self.store(layer, first_pos + t, &batch.k[t * kvd..][..kvd], &batch.v[t * kvd..][..kvd]);
        }
        let run = (BATCH_PIECES / per_token.max(1)).max(1);
        for tokens in (0..n).step_by(run).map(|start| start..(start + run).min(n)) {
            // per token of the run: where its pieces start, and its span
            let mut starts = [0; BATCH_PIECES + 1];
            let mut used = 0;
            for (i, t) in tokens.clone().enumerate() {
                starts[i] = used;
                let pos = first_pos + t;
                let (rows, _) = self.values.rows().span(layer, batch.first_attended(pos), pos);
                self.batch.reserve(used + Pieces::count(s.n_kv_heads, &rows));
                used = self.batch.plan_token(used, t, s.n_kv_heads, rows);
            }
            starts[tokens.len()] = used;
            let mut pieces = core::mem::take(&mut self.batch.all);
            let this = &*self;
            threads.run_pieces(&mut pieces[..used], &|piece| {
                let pos = first_pos + piece.token;
                let first = batch.first_attended(pos);
                let (_, masked) = this.values.rows().span(layer, first, pos);
                this.attend_piece(layer, first, pos, masked, &batch.q[piece.token * qd..][..qd], batch.q_scale, piece);
            });
            self.batch.all = pieces;
            for (i, t) in tokens.enumerate() {
                self.batch.merge_range(starts[i]..starts[i + 1], &mut out[t * qd..][..qd]);
            }
        }
    }

    fn key_bytes(&self) -> usize {
        2 * self.keys_f16.len() + 4 * self.keys_f32.len()
    }

    fn value_bytes(&self) -> usize {
        self.values.bytes()
    }

    fn value_format(&self) -> ValueFormat {
        self.values.format()
    }

    fn shortest_ring(&self) -> Option<usize> {
        self.values.rows().shortest_ring(self.shape.context)
    }

    fn describe(&self) -> alloc::string::String {
        match self.precision {
            KeyPrecision::F16 => "exact f16".into(),
            KeyPrecision::F32 => "exact f32".into(),
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::SingleThread;
    use super::*;

    /// Pieces in reverse order, as if on three threads: a batch's outputs must not
    /// depend on which piece runs first.
    struct Reversed;

    impl Parallel for Reversed {
        fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
            pieces.iter_mut().rev().for_each(job);
        }
        fn threads(&self) -> usize {
            3
        }
    }

    /// A batch attended at once (stores first, every token's pieces in one run) gives what
    /// storing and attending token by token gives, bit for bit: global and sliding-window
    /// layers, batches before, across and after a ring's wrap, one to thirteen tokens.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_batch_at_once_equals_token_by_token() {
        // grouped-query attention; and a KV head per query head, whose batches without a
        // window go by `attend_tokens` (layer 0; layer 1 has a window)
        for shape in [
            AttentionShape { layers: 2, n_heads: 4, n_kv_heads: 1, head_dim: 16, context: 48 },
            AttentionShape { layers: 2, n_heads: 3, n_kv_heads: 3, head_dim: 48, context: 48 },
        ] {
            batch_equals_token_by_token(shape);
        }
    }

    fn batch_equals_token_by_token(shape: AttentionShape) {
        let (kvd, qd, window) = (shape.kv_dim(), shape.n_heads * shape.head_dim, 8);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect()
        };
        let (k, v, q) = (values(shape.context * kvd), values(shape.context * kvd), values(shape.context * qd));
        let windows = [0, window];
        let mut one = ExactKvCache::with_windows(shape, KeyPrecision::F16, &windows);
        let mut batched = ExactKvCache::with_windows(shape, KeyPrecision::F16, &windows);
        let mut first_pos = 0;
        for n in [1, 5, 3, 13, 2, 7, 1, 9, 4] {
            for (layer, &w) in windows.iter().enumerate() {
                let window = (w > 0).then_some(w);
                let at = |x: &[f32], d: usize| x[first_pos * d..(first_pos + n) * d].to_vec();
                let (k, v, q) = (at(&k, kvd), at(&v, kvd), at(&q, qd));
                let batch = PromptBatch { first_pos, window, k: &k, v: &v, q: &q, q_scale: 0.25 };
                let (mut want, mut got) = (vec![0.0; n * qd], vec![0.0; n * qd]);
                store_and_attend_each(&mut one, &SingleThread, layer, &batch, &mut want);
                let token_blocks = shape.group() == 1 && layer == 0 && n >= 2 && kernels::attends_tokens_f16(shape.head_dim);
                assert_eq!(batched.attends_in_token_blocks(layer, &batch, n), token_blocks);
                batched.store_and_attend(&Reversed, layer, &batch, &mut got);
                assert!(want.iter().all(|x| x.is_finite()));
                let bits = |x: &[f32]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "layer {layer}, tokens {first_pos}..{}", first_pos + n);
            }
            first_pos += n;
        }
        assert_eq!(first_pos, 45);
    }
}
