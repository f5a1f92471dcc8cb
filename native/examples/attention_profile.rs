//! One kind of `lutra bench attention`'s caches, attended over and over, so that a
//! profiler sees that kind alone (the bench interleaves every kind in one process):
//! `perf record target/release/examples/attention_profile pq16+q8_0 llama7b 16384 400`.
//! Kinds: exact_f16, exact_f16+q8_0, pq16, pq16+q8_0, pq16+q4_0, pq256, pq256+q4_0;
//! shapes gemma3, llama7b. `LUTRA_MAX_ISA` caps the kernel tier as for the CLI. Prints the
//! median µs of one decode token's attention over the layer, 1 thread.
use std::time::Instant;

use lutra::threads::Pool;
use lutra_core::model::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, ValueFormat};
use lutra_core::pq::{Codebooks, PqKvCache, PqShape, Rotation};
use lutra_core::Isa;

/// Sums of four uniforms, centred: a cheap stand-in for normal values (timing does not
/// depend on them).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n).map(|_| ((0..4).map(|_| uniform()).sum::<f32>() - 2.0) * 1.7).collect()
}

/// An error as the message `main` returns.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, shape, ctx, iterations] = args.as_slice() else {
        return Err("usage: attention_profile KIND gemma3|llama7b CTX ITERATIONS".into());
    };
    if let Ok(name) = std::env::var("LUTRA_MAX_ISA") {
        Isa::limit_to(Isa::from_name(&name).ok_or(format!("LUTRA_MAX_ISA={name}: not a kernel tier"))?);
    }
    let (n_heads, n_kv_heads, head_dim) = match shape.as_str() {
        "gemma3" => (4, 1, 256),
        "llama7b" => (32, 32, 128),
        other => return Err(format!("unknown shape {other}")),
    };
    let ctx: usize = ctx.parse().map_err(|e| format!("CTX: {e}"))?;
    let iterations: usize = iterations.parse().map_err(|e| format!("ITERATIONS: {e}"))?;
    let shape = AttentionShape { layers: 1, n_heads, n_kv_heads, head_dim, context: ctx };
    let (keys, value_format) = match kind.split_once('+') {
        Some((keys, "q8_0")) => (keys, ValueFormat::Q8_0),
        Some((keys, "q4_0")) => (keys, ValueFormat::Q4_0),
        None => (kind.as_str(), ValueFormat::F16),
        Some((_, v)) => return Err(format!("unknown value format {v}")),
    };
    let mut cache: Box<dyn KvCache> = match keys {
        "exact_f16" => Box::new(ExactKvCache::with_value_format(shape, KeyPrecision::F16, &[], value_format).map_err(text)?),
        "pq16" | "pq256" => {
            let (subspaces, centroids) = if keys == "pq16" { (head_dim / 2, 16) } else { (head_dim / 4, 256) };
            let pq = PqShape::new(1, n_kv_heads, head_dim, subspaces, centroids).map_err(text)?;
            let scale = 1.0 / (head_dim as f32).sqrt();
            let transform = values(n_kv_heads * 2 * head_dim * head_dim, 2).into_iter().map(|v| v * scale).collect();
            let books = Codebooks::new(pq, "profile", Rotation::None, values(n_kv_heads * pq.book_len(), 1))
                .and_then(|b| b.with_key_transform(transform))
                .map_err(text)?;
            Box::new(PqKvCache::new(shape, books, Isa::best()).and_then(|c| c.with_value_format(value_format)).map_err(text)?)
        }
        other => return Err(format!("unknown keys {other}")),
    };
    let kv_dim = n_kv_heads * head_dim;
    for pos in 0..ctx {
        cache.store(0, pos, &values(kv_dim, 2 * pos as u64 + 7), &values(kv_dim, 2 * pos as u64 + 8));
    }
    let q = values(n_heads * head_dim, 3);
    let mut out = vec![0.0; q.len()];
    let pool = Pool::new(1);
    let mut us: Vec<f64> = (0..iterations.max(1))
        .map(|_| {
            let t = Instant::now();
            cache.attend_with(&pool, 0, 0, ctx - 1, &q, 1.0 / (head_dim as f32).sqrt(), &mut out);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    println!("{kind} {} ctx {ctx}, kernels {}: median {:.1} µs over {} tokens", args[1], Isa::best().name(), us[us.len() / 2], us.len());
    Ok(())
}
