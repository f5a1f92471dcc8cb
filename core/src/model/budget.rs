//! What a model needs from memory, from its hyperparameters alone. `const fn`s, so a
//! build for a machine with a fixed heap sizes it at compile time (lutra-embedded's
//! arenas), and any caller can refuse a model before importing anything.
//!
//! Each figure is an upper bound of what the engine allocates, term by term from the
//! code that allocates (`Session::new`, the states' `Batch::new`, the KV caches,
//! `Generation::start`), with every block's alignment padding counted;
//! lutra-embedded's `arena` test measures the real peak against it.

use crate::attention::{token_block_rows, PIECE_ROWS, TOKEN_BLOCK};
use crate::model::PREFILL_BATCH;
use crate::sampler::scratch_len;

/// The architecture's forward pass, which decides the working buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// llama2.c checkpoints: lookup matrices.
    Llama {
        /// Weights of ≥ 5 bits add residual tables.
        residual_tables: bool,
    },
    /// Gemma 3.
    Gemma3 {
        /// Positions a sliding-window layer keeps (0: every layer global).
        sliding_window: usize,
        /// Every `global_every`-th layer keeps all positions.
        global_every: usize,
    },
    /// GGUF `llama`, `qwen2`, `qwen3`: Gemma 3's buffers without its second RoPE set.
    LlamaFamily,
}

/// The hyperparameters memory depends on, and the tokenizer's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Which forward pass.
    pub family: Family,
    /// Width of the residual stream.
    pub dim: usize,
    /// Width of the feed-forward layer.
    pub hidden_dim: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Bytes of all token strings together (the tokenizer's tables grow with them).
    pub token_bytes: usize,
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
    /// Width of all query heads.
    pub const fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of all key (or value) heads.
    pub const fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Positions of all layers' KV rows: sliding-window layers keep a ring.
    pub const fn kv_rows(&self, context: usize) -> usize {
        match self.family {
            Family::Gemma3 { sliding_window, global_every } if sliding_window > 0 => {
                let global = match self.layers.checked_div(global_every) {
                    Some(g) => g,
                    None => 0,
                };
                let ring = if sliding_window < context { sliding_window } else { context };
                global * context + (self.layers - global) * ring
            }
            _ => self.layers * context,
        }
    }

    /// The exact f16 KV cache of `context` positions: keys, values, and the attention
    /// pieces it splits a step into.
    pub const fn kv_cache_bytes(&self, context: usize) -> usize {
        let (hd, group) = (self.head_dim, self.heads / self.kv_heads);
        let piece = block(4 * group * PIECE_ROWS) + block(4 * PIECE_ROWS) + block(4 * hd) + block(4 * group * hd) + block(8 * group) + 160;
        let pieces = self.kv_heads * context.div_ceil(PIECE_ROWS);
        // with a KV head per query head, on x86-64: the pieces a prompt batch is attended
        // in, four tokens each (`ExactKvCache::attend_tokens`; their sums are empty)
        let token_blocks = if cfg!(target_arch = "x86_64") && group == 1 {
            let piece = block(4 * TOKEN_BLOCK * token_block_rows(context)) + 2 * block(4 * TOKEN_BLOCK * hd) + block(8 * TOKEN_BLOCK) + 160;
            PREFILL_BATCH.div_ceil(TOKEN_BLOCK) * self.kv_heads * piece + block(PREFILL_BATCH.div_ceil(TOKEN_BLOCK) * self.kv_heads * 160)
        } else {
            0
        };
        2 * block(2 * self.kv_rows(context) * self.kv_dim())
            + block(pieces * 160)
            + pieces * piece
            + 2 * block(self.layers * 8)
            + 256
            + token_blocks
    }

    /// Activations, tables and angles of a prefill batch, and the logits.
    pub const fn state_bytes(&self) -> usize {
        let n = PREFILL_BATCH;
        let (dim, hidden, kv) = (self.dim, self.hidden_dim, self.kv_dim());
        let batch = match self.family {
            Family::Llama { residual_tables } => {
                let floats = 4 * block(4 * n * dim) + 2 * block(4 * n * hidden) + 2 * block(4 * n * kv);
                let sets = if residual_tables { 2 } else { 1 };
                let table_sets = sets * (2 * block(n * 96) + n * (tables(dim) + tables(hidden)));
                let big = if hidden > dim { hidden } else { dim };
                let scratch =
                    if residual_tables { block(4 * if n * big > self.vocab_size { n * big } else { self.vocab_size }) } else { 0 };
                floats + table_sets + scratch + block(n * 72) + n * rope(self.head_dim)
            }
            Family::Gemma3 { .. } | Family::LlamaFamily => {
                let q = self.q_dim();
                let floats = 2 * block(4 * n * dim) + 2 * block(4 * n * q) + 2 * block(4 * n * kv) + 2 * block(4 * n * hidden);
                // a table set per distinct (column count, group): inputs of dim, q_dim or
                // hidden columns, each in at most two group sizes (Q4_K's 32, Q6_K's 16)
                let table_sets = 6 * block(n * 96) + 2 * n * (tables(dim) + tables(q) + tables(hidden)) + block(6 * 80);
                // an int8 activation buffer per token for each int8 matrix's column count
                let int8 = 3 * (n * 2 * block(hidden + hidden / 32 * 4) + block(n * 64)) + block(3 * 48);
                floats + table_sets + int8 + 2 * (block(n * 72) + n * rope(self.head_dim))
            }
        };
        block(batch) + block(4 * self.vocab_size) + 512
    }

    /// A session of `context` positions and a generation on it: the KV cache, the
    /// state, the token list, the sampler's scratch and the text stream's buffers.
    pub const fn session_bytes(&self, context: usize) -> usize {
        self.kv_cache_bytes(context)
            + self.state_bytes()
            + block(4 * context)
            + block(8 * scratch_len(self.vocab_size))
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
