//! Arena sizes, computed at compile time from a model's hyperparameters and a context
//! length: what importing a packed model allocates (its tokenizer's tables and the
//! model's structure; matrices are read in place) plus what a session and a generation
//! allocate ([`Dims::session_bytes`], next to the engine code it bounds).

pub use lutra_core::engine::budget::{Buffers, Dims};
pub use lutra_core::engine::Hparams;

/// stories15M (llama2.c), packed at 2–4 bits: `lutra pack -m models/stories15M/model.bin`.
pub const STORIES15M: Dims = Dims {
    buffers: Buffers::llama(1, 0),
    hparams: Hparams { dim: 288, hidden_dim: 768, layers: 6, heads: 6, kv_heads: 6, head_dim: 48, vocab_size: 32000, context_length: 256 },
    token_bytes: 176_713,
};

/// Gemma 3 270M (Q4_K_M GGUF, packed as imported).
pub const GEMMA3_270M: Dims = Dims {
    buffers: Buffers { sliding_window: 512, global_every: 6, rope_sets: 2, groups_per_width: 2, int8_widths: 3, residual_tables: false },
    hparams: Hparams {
        dim: 640,
        hidden_dim: 2048,
        layers: 18,
        heads: 4,
        kv_heads: 1,
        head_dim: 256,
        vocab_size: 262144,
        context_length: 32768,
    },
    token_bytes: 2_315_366,
};

/// What importing a packed model allocates: the tokenizer's tables (pieces, offsets,
/// scores, types, sorted ids, and the GGUF header's entries while it is read) and the
/// model's structure (norm weights, layer records).
pub const fn import_bytes(d: &Dims) -> usize {
    import_bytes_for(d.hparams.vocab_size, d.token_bytes, d.hparams.layers)
}

/// [`import_bytes`] from the three figures it depends on (a file's header has them).
pub const fn import_bytes_for(vocab_size: usize, token_bytes: usize, layers: usize) -> usize {
    // SentencePiece: pieces and their decoded forms (2 bytes per byte), per token two
    // offsets, a score, a type and two ids (≤ 32 bytes); llama2.c's tokenizer keeps its
    // file blob while it is read (one more byte per byte, fewer per token)
    2 * token_bytes + 32 * vocab_size + 2048 * layers + (64 << 10)
}

/// The arena a model needs to run `context` positions.
pub const fn arena_bytes(d: &Dims, context: usize) -> usize {
    import_bytes(d) + d.session_bytes(context)
}
