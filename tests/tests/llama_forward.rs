//! stories15M end to end: lutra's LUT forward pass against a plain f32 reference
//! forward pass (llama2.c's run.c, transcribed without any table or quantization).

use lutra_core::arch::Architecture;
use std::path::PathBuf;

use lutra_core::arch::llama;
use lutra_core::arch::llama_family::LlamaFamilyState as State;
use lutra_core::formats::llama2c::Checkpoint;
use lutra_core::model::{ModelError, SingleThread};
use lutra_core::tokenizer::{Llama2cTokenizer, Tokenizer};

fn read(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories15M").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}\n  run `cargo xtask models` first", path.display()))
}

/// run.c, in f32, weights as stored.
struct Reference {
    dim: usize,
    hidden: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    vocab: usize,
    w: Vec<Vec<f32>>, // per tensor kind, all layers
    key_cache: Vec<f32>,
    value_cache: Vec<f32>,
    seq_len: usize,
}

impl Reference {
    fn new(ck: &Checkpoint<'_>) -> Reference {
        use lutra_core::formats::llama2c::TensorKind::*;
        let c = *ck.config();
        let get = |kind| {
            let layers = if lutra_core::formats::llama2c::TensorKind::per_layer(kind) { c.n_layers } else { 1 };
            let mut all = Vec::new();
            for l in 0..layers {
                let t = ck.tensor(kind, l).unwrap();
                let mut v = vec![0.0; t.len()];
                t.read_all(&mut v).unwrap();
                all.extend(v);
            }
            all
        };
        let kv_dim = c.dim * c.n_kv_heads / c.n_heads;
        Reference {
            dim: c.dim,
            hidden: c.hidden_dim,
            layers: c.n_layers,
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            vocab: c.vocab_size,
            w: vec![
                get(TokenEmbedding),
                get(RmsAtt),
                get(Wq),
                get(Wk),
                get(Wv),
                get(Wo),
                get(RmsFfn),
                get(W1),
                get(W2),
                get(W3),
                get(RmsFinal),
            ],
            key_cache: vec![0.0; c.n_layers * c.seq_len * kv_dim],
            value_cache: vec![0.0; c.n_layers * c.seq_len * kv_dim],
            seq_len: c.seq_len,
        }
    }

    fn forward(&mut self, token: usize, pos: usize) -> Vec<f32> {
        let (dim, hidden, hs) = (self.dim, self.hidden, self.dim / self.heads);
        let kv_dim = hs * self.kv_heads;
        let matmul = |w: &[f32], x: &[f32], rows: usize| -> Vec<f32> {
            (0..rows).map(|r| w[r * x.len()..(r + 1) * x.len()].iter().zip(x).map(|(a, b)| a * b).sum()).collect()
        };
        let rmsnorm = |x: &[f32], w: &[f32]| -> Vec<f32> {
            let ss = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32 + 1e-5;
            x.iter().zip(w).map(|(x, w)| w * (x / ss.sqrt())).collect()
        };
        let mut x = self.w[0][token * dim..(token + 1) * dim].to_vec();
        for l in 0..self.layers {
            let xb = rmsnorm(&x, &self.w[1][l * dim..(l + 1) * dim]);
            let mut q = matmul(&self.w[2][l * dim * dim..(l + 1) * dim * dim], &xb, dim);
            let mut k = matmul(&self.w[3][l * kv_dim * dim..(l + 1) * kv_dim * dim], &xb, kv_dim);
            let v = matmul(&self.w[4][l * kv_dim * dim..(l + 1) * kv_dim * dim], &xb, kv_dim);
            for i in (0..dim).step_by(2) {
                let freq = 1.0 / 10000f32.powf((i % hs) as f32 / hs as f32);
                let (s, c) = (pos as f32 * freq).sin_cos();
                let rot = |v: &mut [f32]| {
                    let (a, b) = (v[i], v[i + 1]);
                    v[i] = a * c - b * s;
                    v[i + 1] = a * s + b * c;
                };
                rot(&mut q);
                if i < kv_dim {
                    rot(&mut k);
                }
            }
            let at = (l * self.seq_len + pos) * kv_dim;
            self.key_cache[at..at + kv_dim].copy_from_slice(&k);
            self.value_cache[at..at + kv_dim].copy_from_slice(&v);
            let mut out = vec![0.0; dim];
            for h in 0..self.heads {
                let kvh = h / (self.heads / self.kv_heads);
                let qh = &q[h * hs..(h + 1) * hs];
                let mut att: Vec<f32> = (0..=pos)
                    .map(|t| {
                        let k = &self.key_cache[(l * self.seq_len + t) * kv_dim + kvh * hs..][..hs];
                        qh.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() / (hs as f32).sqrt()
                    })
                    .collect();
                let max = att.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = att
                    .iter_mut()
                    .map(|a| {
                        *a = (*a - max).exp();
                        *a
                    })
                    .sum();
                for (t, a) in att.iter().enumerate() {
                    let v = &self.value_cache[(l * self.seq_len + t) * kv_dim + kvh * hs..][..hs];
                    for (o, v) in out[h * hs..(h + 1) * hs].iter_mut().zip(v) {
                        *o += a / sum * v;
                    }
                }
            }
            let o = matmul(&self.w[5][l * dim * dim..(l + 1) * dim * dim], &out, dim);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let xb = rmsnorm(&x, &self.w[6][l * dim..(l + 1) * dim]);
            let h1 = matmul(&self.w[7][l * hidden * dim..(l + 1) * hidden * dim], &xb, hidden);
            let h3 = matmul(&self.w[9][l * hidden * dim..(l + 1) * hidden * dim], &xb, hidden);
            let hb: Vec<f32> = h1.iter().zip(&h3).map(|(a, b)| a / (1.0 + (-a).exp()) * b).collect();
            let o = matmul(&self.w[8][l * dim * hidden..(l + 1) * dim * hidden], &hb, dim);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        }
        let x = rmsnorm(&x, &self.w[10]);
        matmul(&self.w[0], &x, self.vocab)
    }
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum();
    dot / (na.sqrt() * nb.sqrt())
}

/// Issue #3: over a 64-position greedy run (teacher-forced on the reference's path), the
/// LUT forward at 8 bits has the reference's top-1 token at every position and a logits
/// cosine ≥ 0.999. With int8 tables alone 8-bit weights reach only cosine 0.9989 and one
/// near-tie flips; the model adds residual tables for ≥ 5-bit weights (0.99984, 64/64).
#[test]
fn lut_forward_at_8_bits_agrees_with_the_f32_reference() {
    let bytes = read("model.bin");
    let ck = Checkpoint::parse(&bytes).unwrap();
    let tok = Llama2cTokenizer::from_bytes(&read("tokenizer.bin"), 32000).unwrap();
    let model = llama::from_llama2c(&ck, 8).unwrap();
    let mut state = State::new(&model, 256).unwrap();
    let mut reference = Reference::new(&ck);
    let mut prompt = Vec::new();
    tok.encode("Once upon a time", true, &mut prompt).unwrap();
    let (mut token, mut worst, mut max_err, mut same) = (prompt[0] as usize, 1.0f64, 0.0f32, 0);
    for pos in 0..64 {
        let want = reference.forward(token, pos);
        let got = model.forward(&SingleThread, &mut state, token as u32, pos).unwrap();
        let cos = cosine(got, &want);
        worst = worst.min(cos);
        max_err = got.iter().zip(&want).fold(max_err, |m, (a, b)| m.max((a - b).abs()));
        assert!(cos >= 0.999, "pos {pos}: logits cosine {cos}");
        // teacher-forced on the reference's greedy path
        let next = if pos + 1 < prompt.len() { prompt[pos + 1] as usize } else { argmax(&want) };
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let margin = sorted[0] - sorted[1];
        same += usize::from(argmax(got) == argmax(&want));
        assert_eq!(argmax(got), argmax(&want), "pos {pos}: greedy token differs from the reference's (its top-two margin {margin})");
        token = next;
    }
    eprintln!(
        "8 bits, 64 positions: worst logits cosine {worst:.6}, max |logit error| {max_err:.3}, top-1 identical at {same}/64 positions"
    );
    assert_eq!(same, 64);
}

/// A prompt fed without logits, one token at a time or in batches (across a batch
/// boundary, with the residual tables of 8-bit weights too), leaves the state `forward`
/// would: the next logits match bit for bit.
#[test]
fn feeding_a_prompt_without_logits_changes_nothing_after_it() {
    let bytes = read("model.bin");
    let tok = Llama2cTokenizer::from_bytes(&read("tokenizer.bin"), 32000).unwrap();
    let mut prompt = Vec::new();
    tok.encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she found a big red ball under a tree and ran to show her mom.",
        true,
        &mut prompt,
    )
    .unwrap();
    assert!(prompt.len() > 33, "the prompt must cross a batch boundary: {} tokens", prompt.len());
    for bits in [4, 8] {
        let model = llama::from_llama2c(&Checkpoint::parse(&bytes).unwrap(), bits).unwrap();
        let state = || State::new(&model, 64).unwrap();
        let (mut fed, mut batched, mut forwarded) = (state(), state(), state());
        let (last, head) = prompt.split_last().unwrap();
        for (pos, &token) in head.iter().enumerate() {
            model.feed(&SingleThread, &mut fed, token, pos).unwrap();
            model.forward(&SingleThread, &mut forwarded, token, pos).unwrap();
        }
        model.feed_batch(&SingleThread, &mut batched, &head[..5], 0).unwrap();
        model.feed_batch(&SingleThread, &mut batched, &head[5..], 5).unwrap();
        let pos = head.len();
        let want = model.forward(&SingleThread, &mut forwarded, *last, pos).unwrap().to_vec();
        assert!(want.iter().any(|&x| x != 0.0));
        assert_eq!(model.forward(&SingleThread, &mut fed, *last, pos).unwrap(), &want[..], "{bits} bits, fed");
        assert_eq!(model.forward(&SingleThread, &mut batched, *last, pos).unwrap(), &want[..], "{bits} bits, batched");
        assert!(matches!(model.feed_batch(&SingleThread, &mut batched, &[1, 2], 63), Err(ModelError::ContextFull { .. })));
    }
}

#[test]
fn default_bits_write_a_coherent_story() {
    let bytes = read("model.bin");
    let ck = Checkpoint::parse(&bytes).unwrap();
    let tok = Llama2cTokenizer::from_bytes(&read("tokenizer.bin"), 32000).unwrap();
    let model = llama::from_llama2c(&ck, 4).unwrap();
    for prompt_text in ["Once upon a time", "The little dog", "Lily and Ben went to the park"] {
        let mut state = State::new(&model, 256).unwrap();
        let mut tokens = Vec::new();
        tok.encode(prompt_text, true, &mut tokens).unwrap();
        let prompt_len = tokens.len();
        for pos in 0..prompt_len + 60 {
            let logits = model.forward(&SingleThread, &mut state, tokens[pos], pos).unwrap();
            if pos + 1 >= tokens.len() {
                tokens.push(argmax(logits) as u32);
            }
        }
        let mut text = Vec::new();
        tok.decode(&tokens, &mut text).unwrap();
        let text = String::from_utf8_lossy(&text).into_owned();
        eprintln!("{prompt_text:?} -> {text:?}");
        let generated = &tokens[prompt_len..];
        // no repeated-token loops: no token 4 times in a row, many distinct tokens
        assert!(!generated.windows(4).any(|w| w.iter().all(|&t| t == w[0])), "loop in {text:?}");
        let mut distinct = generated.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 25, "only {} distinct tokens in {text:?}", distinct.len());
        // plain English: common words and sentence ends
        let words = text.split_whitespace().count();
        let common = ["the", "a", "and", "was", "to", "he", "she", "they"];
        let hits = text.split(|c: char| !c.is_alphabetic()).filter(|w| common.contains(&w.to_lowercase().as_str())).count();
        assert!(words >= 30 && hits * 8 >= words, "not plausible English: {text:?}");
        assert!(text.contains('.'), "no sentence in {text:?}");
    }
}
