//! `lutra bench attention`: one decode token's attention over one layer's KV cache of
//! `ctx` positions — NoMAD PQ keys vs exact f32 / f16 keys (and llama.cpp's
//! `ggml_flash_attn_ext` with the `llamacpp` feature), all interleaved in the same rounds.

use crate::pool::Pool;
use lutra_core::model::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache};
use lutra_core::pq::{Codebooks, PqKvCache, PqShape, Rotation};
use lutra_core::Isa;

use crate::bench::{normals, Engine, Sampler};

/// A model's attention shape, by name.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

pub const SHAPES: [Shape; 2] = [
    Shape { name: "gemma3", n_heads: 4, n_kv_heads: 1, head_dim: 256 },
    Shape { name: "llama7b", n_heads: 32, n_kv_heads: 32, head_dim: 128 },
];

/// One measured row.
pub struct Row {
    pub ctx: usize,
    pub shape: &'static str,
    pub threads: usize,
    pub kind: String,
    pub ns_per_token: f64,
    pub key_bytes: usize,
}

impl Row {
    pub fn json(&self) -> String {
        format!(
            "{{\"ctx\":{},\"shape\":\"{}\",\"threads\":{},\"kind\":\"{}\",\"ns_per_token\":{:.0},\"key_bytes\":{}}}",
            self.ctx, self.shape, self.threads, self.kind, self.ns_per_token, self.key_bytes
        )
    }
}

/// The PQ configurations timed: 8× key compression against f16 with 4-bit codes over
/// pairs of values (pq16) and 8-bit codes over quadruples (pq256).
fn pq_shapes(shape: &Shape) -> [(&'static str, usize, usize); 2] {
    [("pq16", shape.head_dim / 2, 16), ("pq256", shape.head_dim / 4, 256)]
}

/// Rows for every (shape, ctx, thread count); `llamacpp` adds llama.cpp's flash attention
/// with f16 and q8_0 keys on as many threads.
pub fn bench_attention(shapes: &[Shape], ctxs: &[usize], samples: usize, llamacpp: bool, threads: &[usize]) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for shape in shapes {
        for &ctx in ctxs {
            let att =
                AttentionShape { layers: 1, n_heads: shape.n_heads, n_kv_heads: shape.n_kv_heads, head_dim: shape.head_dim, context: ctx };
            let mut caches: Vec<(String, Box<dyn KvCache>)> = vec![
                ("exact_f32".into(), Box::new(ExactKvCache::new(att, KeyPrecision::F32))),
                ("exact_f16".into(), Box::new(ExactKvCache::new(att, KeyPrecision::F16))),
            ];
            for (kind, s, k) in pq_shapes(shape) {
                let pq = PqShape::new(1, shape.n_kv_heads, shape.head_dim, s, k).map_err(|e| e.to_string())?;
                // timing does not depend on what the centroids and the key / query matrices
                // (which `calibrate --key-transform opq` learns) are
                let hd = shape.head_dim;
                let transform = normals(pq.kv_heads * 2 * hd * hd, 2, 1.0 / (hd as f32).sqrt());
                let books = Codebooks::new(pq, "bench", Rotation::None, normals(pq.kv_heads * pq.book_len(), 1, 1.0))
                    .and_then(|b| b.with_key_transform(transform))
                    .map_err(|e| e.to_string())?;
                caches.push((kind.into(), Box::new(PqKvCache::new(att, books, Isa::best()).map_err(|e| e.to_string())?)));
            }
            let kv_dim = att.kv_dim();
            for pos in 0..ctx {
                let k = normals(kv_dim, 2 * pos as u64 + 7, 1.0);
                let v = normals(kv_dim, 2 * pos as u64 + 8, 1.0);
                for (_, c) in caches.iter_mut() {
                    c.store(0, pos, &k, &v);
                }
            }
            let q = normals(shape.n_heads * shape.head_dim, 3, 1.0);
            let scale = 1.0 / (shape.head_dim as f32).sqrt();
            let key_bytes: Vec<usize> = caches.iter().map(|(_, c)| c.key_bytes()).collect();
            let names: Vec<String> = caches.iter().map(|(n, _)| n.clone()).collect();
            for &t in threads {
                let pool = Pool::new(t);
                let mut outs: Vec<Vec<f32>> = caches.iter().map(|_| vec![0.0; q.len()]).collect();
                let mut runs: Vec<Box<dyn FnMut() + '_>> = caches
                    .iter_mut()
                    .zip(outs.iter_mut())
                    .map(|((_, c), out)| {
                        let (q, pool) = (&q, &pool);
                        Box::new(move || c.attend_with(pool, 0, 0, ctx - 1, q, scale, out)) as Box<dyn FnMut()>
                    })
                    .collect();
                let mut engines: Vec<Engine<'_, '_>> = runs.iter_mut().map(|r| Engine { run: &mut **r, settle: None }).collect();
                let ns = Sampler { samples }.medians_settled(&mut engines);
                for ((kind, ns), &bytes) in names.iter().zip(ns).zip(&key_bytes) {
                    rows.push(Row { ctx, shape: shape.name, threads: t, kind: kind.clone(), ns_per_token: ns, key_bytes: bytes });
                }
                if llamacpp {
                    rows.extend(llamacpp_rows(shape, ctx, samples, t)?);
                }
            }
        }
    }
    Ok(rows)
}

#[cfg(feature = "llamacpp")]
fn llamacpp_rows(shape: &Shape, ctx: usize, samples: usize, threads: usize) -> Result<Vec<Row>, String> {
    use crate::ggml_attention::GgmlAttention;
    let mut rows = Vec::new();
    for key_type in ["f16", "q8_0"] {
        let mut g = GgmlAttention::new(shape.n_heads, shape.n_kv_heads, shape.head_dim, ctx, key_type, threads)?;
        let key_bytes = g.key_bytes();
        let ns = {
            let cell = std::cell::RefCell::new(&mut g);
            let mut run = || {
                let _ = cell.borrow_mut().run();
            };
            let mut settle = || cell.borrow_mut().pause();
            let mut engines = [Engine { run: &mut run, settle: Some(&mut settle) }];
            Sampler { samples }.medians_settled(&mut engines)[0]
        };
        rows.push(Row { ctx, shape: shape.name, threads, kind: format!("llamacpp_{key_type}"), ns_per_token: ns, key_bytes });
    }
    Ok(rows)
}

#[cfg(not(feature = "llamacpp"))]
fn llamacpp_rows(_shape: &Shape, _ctx: usize, _samples: usize, _threads: usize) -> Result<Vec<Row>, String> {
    Err("--llamacpp: this lutra was built without llama.cpp; rebuild with `--features llamacpp`".into())
}

/// A table: one line per (shape, ctx, threads, kind), with the ratio to exact f16 keys
/// on as many threads.
pub fn table(rows: &[Row]) -> String {
    let mut out =
        format!("{:<8} {:>6} {:>7} {:<14} {:>12} {:>12} {:>10}\n", "shape", "ctx", "threads", "kind", "µs/token", "key MiB", "vs f16");
    for r in rows {
        let f16 = rows
            .iter()
            .find(|o| o.shape == r.shape && o.ctx == r.ctx && o.threads == r.threads && o.kind == "exact_f16")
            .map_or(f64::NAN, |o| o.ns_per_token);
        out += &format!(
            "{:<8} {:>6} {:>7} {:<14} {:>12.1} {:>12.2} {:>9.2}×\n",
            r.shape,
            r.ctx,
            r.threads,
            r.kind,
            r.ns_per_token / 1e3,
            r.key_bytes as f64 / (1 << 20) as f64,
            f16 / r.ns_per_token
        );
    }
    out
}
