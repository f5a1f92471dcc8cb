//! A tiny random-weight `gemma3` GGUF with the metadata llama.cpp's converter writes
//! for the 270M: the model the Gemma 3 tests import and the fuzzers start from.

use super::gguf_writer::{Meta, Tensor};
use super::Rng;

pub const DIM: usize = 64;
pub const HIDDEN: usize = 128;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 16;
pub const VOCAB: usize = 300;
pub const CONTEXT: usize = 64;
pub const WINDOW: usize = 4;

pub type Kvs = Vec<(String, Meta)>;

pub fn kvs(entries: &[(&str, Meta)]) -> Kvs {
    entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// `kvs` with `key` set to `value` (appended if new), or removed for `None`.
pub fn with(mut kvs: Kvs, key: &str, value: Option<Meta>) -> Kvs {
    let at = kvs.iter().position(|(k, _)| k == key);
    match (at, value) {
        (Some(i), Some(v)) => kvs[i].1 = v,
        (Some(i), None) => {
            kvs.remove(i);
        }
        (None, Some(v)) => kvs.push((key.into(), v)),
        (None, None) => {}
    }
    kvs
}

/// Metadata as llama.cpp's converter writes it for the 270M (no RoPE scaling, no
/// softcapping, no pattern or local-base keys), for a tiny model of `n_layers` layers.
pub fn meta_270m(n_layers: usize) -> Kvs {
    sized(n_layers, DIM, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, WINDOW, CONTEXT, VOCAB)
}

#[allow(clippy::too_many_arguments)]
pub fn sized(
    n_layers: usize,
    dim: usize,
    hidden: usize,
    heads: usize,
    kv: usize,
    head_dim: usize,
    window: usize,
    ctx: usize,
    vocab: usize,
) -> Kvs {
    let u = |n: usize| Meta::U32(n as u32);
    kvs(&[
        ("general.architecture", Meta::Str("gemma3".into())),
        ("gemma3.context_length", u(ctx)),
        ("gemma3.embedding_length", u(dim)),
        ("gemma3.block_count", u(n_layers)),
        ("gemma3.feed_forward_length", u(hidden)),
        ("gemma3.attention.head_count", u(heads)),
        ("gemma3.attention.layer_norm_rms_epsilon", Meta::F32(1e-6)),
        ("gemma3.attention.key_length", u(head_dim)),
        ("gemma3.attention.value_length", u(head_dim)),
        ("gemma3.rope.freq_base", Meta::F32(1_000_000.0)),
        ("gemma3.attention.sliding_window", u(window)),
        ("gemma3.attention.head_count_kv", u(kv)),
        ("tokenizer.ggml.tokens", Meta::Strs((0..vocab).map(|i| format!("t{i}")).collect())),
    ])
}

/// `kvs` with the SentencePiece keys a runnable model needs: the tokenizer type and
/// scores (the token list is in [`sized`]).
pub fn with_tokenizer(kvs: Kvs) -> Kvs {
    let kvs = with(kvs, "tokenizer.ggml.model", Some(Meta::Str("llama".into())));
    with(kvs, "tokenizer.ggml.scores", Some(Meta::F32s((0..VOCAB).map(|i| -(i as f32)).collect())))
}

/// The 4B's, 12B's and 27B's additions: their `rope_scaling: {rope_type: linear, factor: 8}`
/// and (newer converters) the sliding layers' base.
pub fn scaled(kvs: Kvs) -> Kvs {
    let kvs = with(kvs, "gemma3.rope.scaling.type", Some(Meta::Str("linear".into())));
    let kvs = with(kvs, "gemma3.rope.scaling.factor", Some(Meta::F32(8.0)));
    with(kvs, "gemma3.rope.freq_base_swa", Some(Meta::F32(10_000.0)))
}

/// Random weights (the same for the same seed) for `n_layers` layers; norms near 1.
pub fn tensors(n_layers: usize, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng(seed);
    let mut matrix = |name: &str, rows: usize, cols: usize, scale: f32| Tensor::q8_0(name, rows, cols, &rng.vec(rows * cols, scale));
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let mut t = vec![matrix("token_embd.weight", VOCAB, DIM, 1.0)];
    for l in 0..n_layers {
        let name = |s: &str| format!("blk.{l}.{s}.weight");
        t.push(matrix(&name("attn_q"), q, DIM, 0.2));
        t.push(matrix(&name("attn_k"), kv, DIM, 0.2));
        t.push(matrix(&name("attn_v"), kv, DIM, 0.2));
        t.push(matrix(&name("attn_output"), DIM, q, 0.2));
        t.push(matrix(&name("ffn_gate"), HIDDEN, DIM, 0.2));
        t.push(matrix(&name("ffn_up"), HIDDEN, DIM, 0.2));
        t.push(matrix(&name("ffn_down"), DIM, HIDDEN, 0.2));
    }
    let mut rng = Rng(seed ^ 0x5eed);
    let mut norm = |name: String, n: usize| Tensor::f32(&name, &(0..n).map(|_| 1.0 + 0.1 * rng.normal()).collect::<Vec<_>>());
    for l in 0..n_layers {
        for (s, n) in [("attn_norm", DIM), ("attn_q_norm", HEAD_DIM), ("attn_k_norm", HEAD_DIM), ("post_attention_norm", DIM)] {
            t.push(norm(format!("blk.{l}.{s}.weight"), n));
        }
        for s in ["ffn_norm", "post_ffw_norm"] {
            t.push(norm(format!("blk.{l}.{s}.weight"), DIM));
        }
    }
    t.push(norm("output_norm.weight".into(), DIM));
    t
}
