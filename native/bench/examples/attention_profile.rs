//! One kind of `lutra bench attention`'s caches, attended over and over, so that a
//! profiler sees that kind alone (the bench interleaves every kind in one process):
//! `perf record target/release/examples/attention_profile pq16+q8_0 llama7b 16384 400`.
//! Kinds: `lutra_core::attention::synthetic::KINDS`; shapes gemma3, llama7b.
//! `LUTRA_MAX_ISA` caps the kernel tier as for the CLI. Prints the median µs of one
//! decode token's attention over the layer, 1 thread.
use std::time::Instant;

use lutra::threads::Pool;
use lutra_core::attention::synthetic;
use lutra_core::Isa;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, shape, ctx, iterations] = args.as_slice() else {
        return Err("usage: attention_profile KIND gemma3|llama7b CTX ITERATIONS".into());
    };
    if let Ok(name) = std::env::var("LUTRA_MAX_ISA") {
        Isa::limit_to(Isa::from_name(&name).ok_or(format!("LUTRA_MAX_ISA={name}: not a kernel tier"))?);
    }
    let ctx: usize = ctx.parse().map_err(|e| format!("CTX: {e}"))?;
    let iterations: usize = iterations.parse().map_err(|e| format!("ITERATIONS: {e}"))?;
    let shape = synthetic::shape(shape, ctx).ok_or(format!("unknown shape {shape}"))?;
    let mut cache = synthetic::cache(kind, shape, Isa::best())?;
    let q = synthetic::values(shape.heads * shape.head_dim, 3);
    let mut out = vec![0.0; q.len()];
    let pool = Pool::new(1);
    let scale = 1.0 / (shape.head_dim as f32).sqrt();
    let mut us: Vec<f64> = (0..iterations.max(1))
        .map(|_| {
            let t = Instant::now();
            cache.attend_with(&pool.split(), 0, 0, ctx - 1, &q, scale, &mut out);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    println!("{kind} {} ctx {ctx}, kernels {}: median {:.1} µs over {} tokens", args[1], Isa::best().name(), us[us.len() / 2], us.len());
    Ok(())
}
