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
    merges: 0,
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
    merges: 0,
};

/// Qwen2.5-0.5B (Qwen2.5-Coder-0.5B-Instruct Q4_K_M, packed as imported); the int8 and
/// table buffers of any K-quant mix.
pub const QWEN2_5_0_5B: Dims = Dims {
    buffers: Buffers::llama(2, 3),
    hparams: Hparams {
        dim: 896,
        hidden_dim: 4864,
        layers: 24,
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
        vocab_size: 151936,
        context_length: 32768,
    },
    token_bytes: 1_372_758,
    merges: 151_387,
};

/// Qwen2.5-1.5B (`cargo xtask models shapes`' file, the real vocabulary).
pub const QWEN2_5_1_5B: Dims = Dims {
    hparams: Hparams { dim: 1536, hidden_dim: 8960, layers: 28, heads: 12, kv_heads: 2, head_dim: 128, ..QWEN2_5_0_5B.hparams },
    ..QWEN2_5_0_5B
};

/// Llama-3.2-1B: the most KV bytes per position of the class (16 layers × 8 KV heads ×
/// 64); its vocabulary's figures are those of llama.cpp's `ggml-vocab-llama-bpe.gguf`.
pub const LLAMA3_2_1B: Dims = Dims {
    buffers: Buffers::llama(2, 3),
    hparams: Hparams {
        dim: 2048,
        hidden_dim: 8192,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        vocab_size: 128256,
        context_length: 131072,
    },
    token_bytes: 1_073_445,
    merges: 280_147,
};

/// The models `lutra-pi` is sized for: up to 1.5 billion parameters (Llama 3.2 1B,
/// Qwen2.5 0.5B and 1.5B, Gemma 3 270M, stories15M) at [`PI_CONTEXT`] positions.
pub const PI_CLASS: [Dims; 5] = [STORIES15M, GEMMA3_270M, QWEN2_5_0_5B, QWEN2_5_1_5B, LLAMA3_2_1B];

/// Positions every model of [`PI_CLASS`] gets (fewer where its own context is shorter).
pub const PI_CONTEXT: usize = 4096;

/// The arena that runs any of `class` at `context` positions (or its own, if shorter).
pub const fn class_arena_bytes(class: &[Dims], context: usize) -> usize {
    let (mut most, mut i) = (0, 0);
    while i < class.len() {
        let d = &class[i];
        let positions = if d.hparams.context_length < context { d.hparams.context_length } else { context };
        let bytes = arena_bytes(d, positions);
        if bytes > most {
            most = bytes;
        }
        i += 1;
    }
    most
}

/// What importing a packed model allocates: the tokenizer's tables (pieces, offsets,
/// scores, types, sorted ids, and the GGUF header's entries while it is read) and the
/// model's structure (norm weights, layer records).
pub const fn import_bytes(d: &Dims) -> usize {
    import_bytes_for(d.hparams.vocab_size, d.token_bytes, d.merges, d.hparams.layers)
}

/// [`import_bytes`] from the four figures it depends on (a file's header has them).
pub const fn import_bytes_for(vocab_size: usize, token_bytes: usize, merges: usize, layers: usize) -> usize {
    // SentencePiece: pieces and their decoded forms (2 bytes per byte), per token two
    // offsets, a score, a type and two ids (≤ 32 bytes); llama2.c's tokenizer keeps its
    // file blob while it is read (one more byte per byte, fewer per token); BPE: its
    // merges, 16 bytes each in a list grown by doubling, and their lookups while read
    // (measured 49–56 bytes per merge for Qwen2.5 and Llama 3)
    2 * token_bytes + 32 * vocab_size + 64 * merges + 2048 * layers + (64 << 10)
}

/// The arena a model needs to run `context` positions.
pub const fn arena_bytes(d: &Dims, context: usize) -> usize {
    import_bytes(d) + d.session_bytes(context)
}
