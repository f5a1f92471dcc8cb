//! What the fuzz targets share: using everything a parsed file offers, and running a
//! loaded model for a few tokens, so a bad value that parses still has to survive use.

use lutra_core::engine::{Attention, Generation, Model, SamplerConfig, Session, SingleThread};
use lutra_core::formats::gguf::Gguf;

/// Reads every metadata value (arrays element by element) and every tensor's size,
/// range and data.
pub fn touch_gguf(g: &Gguf<'_>) {
    for (key, value) in g.metadata() {
        let _ = (key.len(), value.as_u64(), value.as_i64(), value.as_f64(), value.as_bool(), value.as_str());
        if let Some(array) = value.as_array() {
            for v in array.iter().take(1 << 16) {
                let _ = (v.as_u64(), v.as_f32(), v.as_str());
            }
        }
    }
    for t in g.tensors() {
        let _ = (t.shape().len(), t.n_elements(), t.byte_size());
        if let Ok(range) = g.tensor_range(&t) {
            let _ = range.end - range.start;
        }
        if let Ok(data) = g.tensor_data(&t) {
            let _ = data.iter().take(64).fold(0u8, |a, &b| a ^ b);
        }
    }
}

/// A session of at most 16 positions, `prompt` (ids taken modulo the vocabulary, BOS
/// first) and up to `max_tokens` sampled as `sampler` says, decoded as text.
pub fn run(model: &Model, prompt: &[u32], sampler: SamplerConfig, max_tokens: usize) {
    let Ok(mut session) = Session::new(model, 16, &Attention::Exact) else {
        return;
    };
    let vocab = model.vocab_size() as u32;
    let mut ids = vec![model.bos()];
    ids.extend(prompt.iter().take(8).map(|t| t % vocab));
    let Ok(mut generation) = Generation::start(&mut session, &ids, sampler, max_tokens) else {
        return;
    };
    while let Ok(Some(token)) = generation.step(&mut session, &SingleThread) {
        let _ = token.text.len();
    }
    let _ = generation.finish_text();
    let _ = model.decode(session.tokens());
}

/// Sampler settings from 5 bytes: temperature 0–2.5, top-k 0–255, top-p and min-p in
/// 0–1, a seed.
pub fn sampler(bytes: &[u8]) -> SamplerConfig {
    let b = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let mut s = SamplerConfig::greedy();
    s.temperature = b(0) as f32 / 100.0;
    s.top_k = b(1) as usize;
    s.top_p = b(2) as f32 / 255.0;
    s.min_p = b(3) as f32 / 255.0;
    s.seed = u64::from(b(4));
    s
}
