//! stories15M as the `llama`-architecture GGUF files llama.cpp makes of it, written here
//! byte for byte as llama.cpp writes them, so CI has them without building llama.cpp:
//!
//! - F32: `llama-convert-llama2c-to-ggml --copy-vocab-from-model ggml-vocab-llama-spm.gguf
//!   --llama2c-model stories15M/model.bin` (its metadata in its order, the vocabulary of
//!   the llama-spm vocab file, tensors copied unpermuted in the converter's order; the
//!   shared classifier written again as `output.weight`; context length 128, the
//!   converter's default).
//! - Q8_0 and Q4_0: `llama-quantize F32-FILE OUT Q8_0|Q4_0`: the same metadata plus
//!   `general.quantization_version` = 2 and `general.file_type`; tensors reordered as
//!   its loader sorts them (names without a layer first, then layer by layer, names in
//!   byte order); norms stay F32; `output.weight` is Q8_0 in both (the Q4_0 rule's
//!   Q6_K needs 256-wide rows, its fallback for 288 columns is Q8_0).
//!
//! The `stories_gguf` example writes them and checks them against the SHA-256 sums of
//! llama.cpp's own files (tests/golden/stories15M-gguf.sha256).

use lutra_core::formats::gguf::Gguf;
use lutra_core::formats::llama2c::{Checkpoint, F32Tensor};

use crate::gguf_writer::{write_gguf, Meta, Tensor};

/// The files' names (in `models/stories15M/`) and bytes: F32, Q8_0, Q4_0.
pub fn write(model_bin: &[u8], vocab_gguf: &[u8]) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let ckpt = Checkpoint::parse(model_bin).map_err(|e| e.to_string())?;
    let c = *ckpt.config();
    let vocab = Gguf::parse(vocab_gguf).map_err(|e| e.to_string())?;
    let array = |key: &str| vocab.get_array(key).ok_or_else(|| format!("the vocabulary has no {key}"));
    let tokens: Vec<String> = array("tokenizer.ggml.tokens")?.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect();
    let scores: Vec<f32> = array("tokenizer.ggml.scores")?.iter().map(|v| v.as_f32().unwrap_or_default()).collect();
    let types: Vec<i32> = array("tokenizer.ggml.token_type")?.iter().map(|v| v.as_i64().unwrap_or_default() as i32).collect();
    if tokens.len() != c.vocab_size {
        return Err(format!("the vocabulary has {} tokens, the checkpoint {}", tokens.len(), c.vocab_size));
    }

    let u = |n: usize| Meta::U32(n as u32);
    let s = |v: &str| Meta::Str(v.into());
    let mut kvs: Vec<(String, Meta)> = [
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.scores", Meta::F32s(scores)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.model", s("llama")),
        ("general.architecture", s("llama")),
        ("general.name", s("llama")),
        ("tokenizer.ggml.unknown_token_id", u(0)),
        ("tokenizer.ggml.bos_token_id", u(1)),
        ("tokenizer.ggml.eos_token_id", u(2)),
        ("tokenizer.ggml.seperator_token_id", Meta::U32(u32::MAX)),
        ("tokenizer.ggml.padding_token_id", Meta::U32(u32::MAX)),
        ("llama.context_length", u(128)),
        ("llama.embedding_length", u(c.dim)),
        ("llama.feed_forward_length", u(c.hidden_dim)),
        ("llama.attention.head_count", u(c.n_heads)),
        ("llama.attention.head_count_kv", u(c.n_kv_heads)),
        ("llama.block_count", u(c.n_layers)),
        ("llama.rope.dimension_count", u(c.dim / c.n_heads)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    // (name, the checkpoint's tensor, a matrix?) in the converter's order
    let mut named: Vec<(String, F32Tensor<'_>, bool)> = vec![
        ("token_embd.weight".into(), ckpt.token_embedding().map_err(|e| e.to_string())?, true),
        ("output_norm.weight".into(), ckpt.rms_final().map_err(|e| e.to_string())?, false),
        ("output.weight".into(), ckpt.classifier().map_err(|e| e.to_string())?, true),
    ];
    for l in 0..c.n_layers {
        let t = ckpt.layer(l).map_err(|e| e.to_string())?;
        for (name, tensor, matrix) in [
            ("attn_q", t.wq, true),
            ("attn_k", t.wk, true),
            ("attn_v", t.wv, true),
            ("attn_output", t.wo, true),
            ("attn_norm", t.rms_att, false),
            ("ffn_gate", t.w1, true),
            ("ffn_down", t.w2, true),
            ("ffn_up", t.w3, true),
            ("ffn_norm", t.rms_ffn, false),
        ] {
            named.push((format!("blk.{l}.{name}.weight"), tensor, matrix));
        }
    }
    let values = |t: &F32Tensor<'_>| t.bytes().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<f32>>();
    let tensor = |(name, t, matrix): &(String, F32Tensor<'_>, bool), quantize: fn(&str, usize, usize, &[f32]) -> Tensor| {
        if *matrix {
            quantize(name, t.rows(), t.cols(), &values(t))
        } else {
            Tensor::f32(name, &values(t))
        }
    };

    let f32_file = write_gguf(&kvs, &named.iter().map(|n| tensor(n, Tensor::f32_matrix)).collect::<Vec<_>>());

    // llama-quantize's order: no layer first, then by layer; names in byte order within
    named.sort_by(|a, b| (layer_of(&a.0), &a.0).cmp(&(layer_of(&b.0), &b.0)));
    kvs.push(("general.quantization_version".into(), u(2)));
    let mut quantized = |file_type: usize, quantize: fn(&str, usize, usize, &[f32]) -> Tensor| {
        kvs.push(("general.file_type".into(), u(file_type)));
        let tensors: Vec<Tensor> =
            named.iter().map(|n| if n.0 == "output.weight" { tensor(n, Tensor::q8_0) } else { tensor(n, quantize) }).collect();
        let file = write_gguf(&kvs, &tensors);
        kvs.pop();
        file
    };
    let q8_0 = quantized(7, Tensor::q8_0);
    let q4_0 = quantized(2, Tensor::q4_0);
    Ok(vec![("stories15M-f32.gguf", f32_file), ("stories15M-q8_0.gguf", q8_0), ("stories15M-q4_0.gguf", q4_0)])
}

/// A tensor's layer, `None` (first) for the ones outside the blocks.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}
