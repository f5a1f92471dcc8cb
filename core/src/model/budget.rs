//! What a model needs from memory, from its hyperparameters alone. `const fn`s, so a
//! build for a machine with a fixed heap sizes it at compile time (lutra-embedded's
//! arenas), and any caller can refuse a model before importing anything.
//!
//! Each figure is an upper bound of what the engine allocates, term by term from the
//! code that allocates (`Session::new`, the states' `Batch::new`, the KV caches,
//! `Generation::start`), with every block's alignment padding counted;
//! lutra-embedded's `arena` test measures the real peak against it.

use crate::attention::{token_block_rows, PIECE_ROWS, TOKEN_BLOCK};
use crate::kernels::pq_scan::SCAN_HEADS;
use crate::model::{Hparams, PREFILL_BATCH};
use crate::sampler::scratch_len;

/// The working buffers a forward pass keeps beyond those every architecture here has
/// (token-major activations, KV cache): described by an architecture's `dims`, so a new
/// one with the same kinds of buffers edits nothing here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    /// Positions a sliding-window layer keeps (0: every layer keeps them all).
    pub sliding_window: usize,
    /// With a sliding window: every `global_every`-th layer keeps all positions.
    pub global_every: usize,
    /// Rotary angle sets per token (Gemma 3: global and local layers).
    pub rope_sets: usize,
    /// Most group sizes among the lookup matrices of any one input width (Q4_K_M: 2, for
    /// Q4_K's 32 and Q6_K's 16; llama2.c: 1): a table set per (width, group).
    pub groups_per_width: usize,
    /// Input widths of int8 matrices (Q8_0, float): an activation buffer per token each.
    pub int8_widths: usize,
    /// Residual tables for every table set, and room for their products (llama2.c at
    /// 5–8 bits).
    pub residual_tables: bool,
}

impl Buffers {
    /// One RoPE set, no sliding window, no residual tables: the Llama graph's buffers for
    /// matrices of `groups_per_width` group sizes per width and `int8_widths` int8 widths.
    pub const fn llama(groups_per_width: usize, int8_widths: usize) -> Buffers {
        Buffers { sliding_window: 0, global_every: 0, rope_sets: 1, groups_per_width, int8_widths, residual_tables: false }
    }
}

/// The hyperparameters memory depends on, and the tokenizer's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Which working buffers its forward pass keeps.
    pub buffers: Buffers,
    /// The model's sizes.
    pub hparams: Hparams,
    /// Bytes of all token strings together (the tokenizer's tables grow with them).
    pub token_bytes: usize,
    /// A byte-level BPE vocabulary's merges (0 for SentencePiece and llama2.c).
    pub merges: usize,
}

/// Bytes of a heap block after the previous one: its size plus the worst padding its
/// alignment can cost (a bump arena) and a general allocator's header.
const fn block(bytes: usize) -> usize {
    bytes + 64 + 16
}

/// One set of 16-entry tables over `cols` activations (`OwnedTables`): 64 bytes per 16
/// columns, a scale and a sum per group (groups of at least 16: Q6_K's).
const fn tables(cols: usize) -> usize {
    block(cols * 4) + 2 * block(cols / 16 * 4) + 64
}

/// Rotary angles of one token: frequencies, cosines and sines of `head_dim / 2` pairs.
const fn rope(head_dim: usize) -> usize {
    3 * block(head_dim / 2 * 4) + 80
}

impl Dims {
    /// Positions of all layers' KV rows: sliding-window layers keep a ring.
    pub const fn kv_rows(&self, context: usize) -> usize {
        let layers = self.hparams.layers;
        match self.buffers {
            Buffers { sliding_window, global_every, .. } if sliding_window > 0 => {
                let global = match layers.checked_div(global_every) {
                    Some(g) => g,
                    None => 0,
                };
                let ring = if sliding_window < context { sliding_window } else { context };
                global * context + (layers - global) * ring
            }
            _ => layers * context,
        }
    }

    /// The exact f16 KV cache of `context` positions: keys, values, and the attention
    /// pieces it splits a step into.
    pub const fn kv_cache_bytes(&self, context: usize) -> usize {
        let h = &self.hparams;
        let (hd, group) = (h.head_dim, h.group());
        // scores, the PQ scan's u16 sums of `SCAN_HEADS` heads, a row, outputs, softmax stats
        let piece = block(4 * group * PIECE_ROWS)
            + block(2 * SCAN_HEADS * PIECE_ROWS)
            + block(4 * hd)
            + block(4 * group * hd)
            + block(8 * group)
            + 160;
        let pieces = h.kv_heads * context.div_ceil(PIECE_ROWS);
        // with a KV head per query head, on x86-64: the pieces a prompt batch is attended
        // in, four tokens each (`ExactKvCache::attend_tokens`; their sums are empty)
        let token_blocks = if cfg!(target_arch = "x86_64") && group == 1 {
            let piece = block(4 * TOKEN_BLOCK * token_block_rows(context)) + 2 * block(4 * TOKEN_BLOCK * hd) + block(8 * TOKEN_BLOCK) + 160;
            PREFILL_BATCH.div_ceil(TOKEN_BLOCK) * h.kv_heads * piece + block(PREFILL_BATCH.div_ceil(TOKEN_BLOCK) * h.kv_heads * 160)
        } else {
            0
        };
        2 * block(2 * self.kv_rows(context) * h.kv_dim())
            + block(pieces * 160)
            + pieces * piece
            + 2 * block(h.layers * 8)
            + 256
            + token_blocks
    }

    /// Activations, tables and angles of a prefill batch, and the logits.
    pub const fn state_bytes(&self) -> usize {
        let n = PREFILL_BATCH;
        let h = &self.hparams;
        let (dim, hidden, kv) = (h.dim, h.hidden_dim, h.kv_dim());
        let (q, b) = (h.q_dim(), self.buffers);
        let floats = 2 * block(4 * n * dim) + 2 * block(4 * n * q) + 2 * block(4 * n * kv) + 2 * block(4 * n * hidden);
        // a table set per distinct (column count, group): inputs of dim, q_dim (where it
        // differs) or hidden columns; each token's entry holds its tables and an optional
        // residual set (176 bytes)
        let (widths, width_tables) =
            if q == dim { (2, tables(dim) + tables(hidden)) } else { (3, tables(dim) + tables(q) + tables(hidden)) };
        let sets = widths * b.groups_per_width;
        let table_sets = sets * block(n * 176) + b.groups_per_width * n * width_tables + block(sets * 80);
        // residual tables: a second set of tables per set, and the residual products
        let residual = if b.residual_tables {
            let widest = if hidden > dim { hidden } else { dim };
            let widest = if q > widest { q } else { widest };
            let out = if n * widest > h.vocab_size { n * widest } else { h.vocab_size };
            b.groups_per_width * n * width_tables + block(4 * out)
        } else {
            0
        };
        // an int8 activation buffer per token for each int8 matrix's column count
        let int8 = if b.int8_widths > 0 {
            b.int8_widths * (n * 2 * block(hidden + hidden / 32 * 4) + block(n * 64)) + block(b.int8_widths * 48)
        } else {
            0
        };
        let batch = floats + table_sets + residual + int8 + b.rope_sets * (block(n * 72) + n * rope(h.head_dim));
        block(batch) + block(4 * h.vocab_size) + 512
    }

    /// A session of `context` positions and a generation on it: the KV cache, the
    /// state, the token list, the sampler's scratch and the text stream's buffers.
    pub const fn session_bytes(&self, context: usize) -> usize {
        self.kv_cache_bytes(context)
            + self.state_bytes()
            + block(4 * context)
            + block(8 * scratch_len(self.hparams.vocab_size))
            + 2 * block(768)
            + 512
    }
}

/// What a session would need, and what there is: the message of a refused model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// Bytes the session would allocate (an upper bound).
    pub needed: usize,
    /// Bytes free.
    pub available: usize,
    /// Positions asked for.
    pub context: usize,
}

impl core::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        write!(
            f,
            "a session of {} positions needs {} bytes ({:.2} MiB) of working memory; {} bytes ({:.2} MiB) are free",
            self.context,
            self.needed,
            mib(self.needed),
            self.available,
            mib(self.available)
        )
    }
}
