//! Attention cut into pieces — runs of one KV head's rows — that any thread may score,
//! softmax and sum on its own; merged in order, so thread count never changes a result.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::*;

/// Pieces a batch attended at once may hold (a batch with more is attended in runs of
/// tokens): 32 tokens of a model whose span is one piece, as Gemma 3 270M's below 1024
/// positions — the case whose attention a second thread otherwise cannot share.
pub(super) const BATCH_PIECES: usize = 32;

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
    pub(super) all: Vec<AttentionPiece>,
    pub(super) group: usize,
    pub(super) head_dim: usize,
}

impl Pieces {
    pub(crate) fn new(shape: AttentionShape) -> Pieces {
        let mut pieces = Pieces::none(shape);
        pieces.reserve(shape.kv_heads * shape.context.div_ceil(PIECE_ROWS));
        pieces
    }

    /// No pieces yet, for `shape`'s attention.
    pub(super) fn none(shape: AttentionShape) -> Pieces {
        Pieces { all: Vec::new(), group: shape.group(), head_dim: shape.head_dim }
    }

    /// The pieces of `attend_tokens`, made with the cache where it runs (none elsewhere):
    /// one per `TOKEN_BLOCK` tokens of the largest prompt batch and KV head, each with
    /// `TOKEN_BLOCK` score rows of `token_block_rows(context)` and the block's queries
    /// and outputs (`engine::budget` counts them).
    pub(super) fn for_token_blocks(shape: AttentionShape, usable: bool) -> Pieces {
        let (hd, rows) = (shape.head_dim, token_block_rows(shape.context));
        let count = if usable { PREFILL_BATCH.div_ceil(TOKEN_BLOCK) * shape.kv_heads } else { 0 };
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
    pub(super) fn reserve(&mut self, count: usize) {
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
    pub(crate) fn plan(&mut self, kv_heads: usize, rows: Range<usize>) -> usize {
        self.plan_token(0, 0, kv_heads, rows)
    }

    /// As `plan`, for token `token` of a batch, into the pieces from index `used` on;
    /// returns the pieces used so far.
    pub(super) fn plan_token(&mut self, mut used: usize, token: usize, kv_heads: usize, rows: Range<usize>) -> usize {
        for kv_head in 0..kv_heads {
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
    pub(super) fn count(kv_heads: usize, rows: &Range<usize>) -> usize {
        let spans = if rows.is_empty() { 0 } else { (rows.end - 1) / PIECE_ROWS - rows.start / PIECE_ROWS + 1 };
        kv_heads * spans
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
    pub(super) fn merge_range(&self, range: Range<usize>, out: &mut [f32]) {
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
