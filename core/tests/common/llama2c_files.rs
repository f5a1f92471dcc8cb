//! llama2.c files written by hand: `tokenizer.bin` and checkpoints of random weights.

use lutra_core::formats::llama2c::{Config, TensorKind};

use super::Rng;

/// A `tokenizer.bin`: the longest piece's length, then per token a score, a length and
/// the bytes.
pub fn write_tokenizer(max_len: i32, vocab: &[(f32, Vec<u8>)]) -> Vec<u8> {
    let mut out = max_len.to_le_bytes().to_vec();
    for (score, piece) in vocab {
        out.extend_from_slice(&score.to_le_bytes());
        out.extend_from_slice(&(piece.len() as i32).to_le_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// `<unk>`, BOS, EOS, the 256 `<0xXX>` byte tokens, then `extra`.
pub fn vocab(extra: &[(&str, f32)]) -> Vec<(f32, Vec<u8>)> {
    let mut v = vec![(0.0, b"<unk>".to_vec()), (0.0, b"\n<s>\n".to_vec()), (0.0, b"\n</s>\n".to_vec())];
    v.extend((0..=255u8).map(|b| (0.0, format!("<0x{b:02X}>").into_bytes())));
    v.extend(extra.iter().map(|(p, s)| (*s, p.as_bytes().to_vec())));
    v
}

/// A checkpoint of `c` in run.c's order, element `i` of layer `layer` of `kind` being
/// `value(kind, layer, i)`.
pub fn write_checkpoint_with(c: &Config, mut value: impl FnMut(TensorKind, usize, usize) -> f32) -> Vec<u8> {
    let mut out = c.to_header().to_vec();
    for kind in TensorKind::ALL {
        if kind == TensorKind::Wcls && c.shared_classifier {
            continue;
        }
        let (rows, cols) = c.shape(kind);
        let layers = if kind.per_layer() { c.n_layers } else { 1 };
        for layer in 0..layers {
            for i in 0..rows * cols {
                out.extend_from_slice(&value(kind, layer, i).to_le_bytes());
            }
        }
    }
    out
}

/// A checkpoint of `c` with normal random weights (norms near 1).
pub fn random_checkpoint(c: &Config, rng: &mut Rng) -> Vec<u8> {
    write_checkpoint_with(c, |kind, _, _| {
        if matches!(kind, TensorKind::RmsAtt | TensorKind::RmsFfn | TensorKind::RmsFinal) {
            1.0 + 0.1 * rng.normal()
        } else {
            0.3 * rng.normal()
        }
    })
}

/// A tiny checkpoint (2 layers, dim 32, grouped-query heads, shared classifier) of seeded
/// random weights and its `tokenizer.bin` (byte tokens and a few merges).
pub fn tiny_checkpoint_and_tokenizer() -> (Vec<u8>, Vec<u8>) {
    let words: Vec<(&str, f32)> = [" a", " b", "ab", " ab", "ba", " the", "he", "th"].iter().map(|w| (*w, -1.0)).collect();
    let v = vocab(&words);
    let c = Config {
        dim: 32,
        hidden_dim: 64,
        n_layers: 2,
        n_heads: 2,
        n_kv_heads: 1,
        vocab_size: v.len(),
        seq_len: 16,
        shared_classifier: true,
    };
    (random_checkpoint(&c, &mut Rng(3)), write_tokenizer(8, &v))
}
