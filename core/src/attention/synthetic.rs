//! One layer's attention cache of a named kind, filled with synthetic keys and values:
//! what the attention timings run where the native bench's own set-up is not at hand
//! (the profiler example, the wasm build's `attention_timer`). Timing does not depend
//! on the numbers, only on the kind and the shape.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, ValueFormat};
use crate::attention::PqKvCache;
use crate::pq::{Codebooks, PqShape, Rotation};
use crate::rng::SplitMix64;
use crate::Isa;

/// The kinds `cache` makes: keys (exact f16, 4-bit PQ codes over pairs, 8-bit codes over
/// quadruples), optionally `+` a block value format.
pub const KINDS: [&str; 7] = ["exact_f16", "exact_f16+q8_0", "pq16", "pq16+q8_0", "pq16+q4_0", "pq256", "pq256+q4_0"];

/// Attention shapes by name: Gemma 3 270M's (4 query heads on one KV head of 256) and
/// Llama 7B's (32 heads of 128, no grouping).
pub fn shape(name: &str, context: usize) -> Option<AttentionShape> {
    let (heads, kv_heads, head_dim) = match name {
        "gemma3" => (4, 1, 256),
        "llama7b" => (32, 32, 128),
        _ => return None,
    };
    Some(AttentionShape { layers: 1, heads, kv_heads, head_dim, context })
}

/// Sums of four uniforms, centred and scaled to unit variance: cheap near-normal values.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| ((0..4).map(|_| rng.unit()).sum::<f64>() - 2.0) as f32 * 1.732).collect()
}

/// Most positions `cache` fills: 128k, four times the longest context the timings use,
/// so that a mistyped length is refused rather than allocated (llama7b's exact cache
/// takes 16 KiB a position).
pub const MAX_CONTEXT: usize = 1 << 17;

/// A cache of `kind` (one of `KINDS`) for one layer of `shape`, every one of its
/// `shape.context` (1..=`MAX_CONTEXT`) positions stored, the PQ kinds' scans on `isa`.
pub fn cache(kind: &str, shape: AttentionShape, isa: Isa) -> Result<Box<dyn KvCache>, String> {
    if !(1..=MAX_CONTEXT).contains(&shape.context) {
        return Err(format!("context {}: 1 to {MAX_CONTEXT} positions", shape.context));
    }
    let (keys, values_format) = match kind.split_once('+') {
        None => (kind, ValueFormat::F16),
        Some((keys, v)) => (keys, ValueFormat::from_name(v).ok_or(format!("unknown value format {v}"))?),
    };
    let hd = shape.head_dim;
    let text = |e: &dyn core::fmt::Display| e.to_string();
    let mut cache: Box<dyn KvCache> = match keys {
        "exact_f16" => Box::new(ExactKvCache::with_value_format(shape, KeyPrecision::F16, &[], values_format).map_err(|e| text(&e))?),
        "pq16" | "pq256" => {
            let (subspaces, centroids) = if keys == "pq16" { (hd / 2, 16) } else { (hd / 4, 256) };
            let pq = PqShape::new(1, shape.kv_heads, hd, subspaces, centroids).map_err(|e| text(&e))?;
            let scale = 1.0 / libm::sqrtf(hd as f32);
            let transform = values(shape.kv_heads * 2 * hd * hd, 2).into_iter().map(|v| v * scale).collect();
            let books = Codebooks::new(pq, "synthetic", Rotation::None, values(shape.kv_heads * pq.book_len(), 1))
                .and_then(|b| b.with_key_transform(transform))
                .map_err(|e| text(&e))?;
            Box::new(PqKvCache::new(shape, books, isa).and_then(|c| c.with_value_format(values_format)).map_err(|e| text(&e))?)
        }
        other => return Err(format!("unknown kind {other}: one of {}", KINDS.join(", "))),
    };
    let kv_dim = shape.kv_dim();
    for pos in 0..shape.context {
        cache.store(0, pos, &values(kv_dim, 2 * pos as u64 + 7), &values(kv_dim, 2 * pos as u64 + 8));
    }
    Ok(cache)
}
