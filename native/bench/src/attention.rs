//! `lutra bench attention`: one decode token's attention over one layer's KV cache of
//! `ctx` positions — NoMAD PQ keys vs exact f32 / f16 keys, with f16 or q8_0 / q4_0
//! values (and llama.cpp's `ggml_flash_attn_ext` with the `llamacpp` feature), all
//! interleaved in the same rounds.

use std::sync::Mutex;

use lutra::threads::Pool;
use lutra_core::attention::PqKvCache;
use lutra_core::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, ValueCache, ValueFormat, PIECE_ROWS};
use lutra_core::kernels::attend::{softmax_mix, SoftmaxStats};
use lutra_core::pq::{Codebooks, PqShape, Rotation};
use lutra_core::Isa;

use crate::{normals, Contender, Timer};

/// A model's attention shape, by name.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

pub const SHAPES: [Shape; 2] =
    [Shape { name: "gemma3", heads: 4, kv_heads: 1, head_dim: 256 }, Shape { name: "llama7b", heads: 32, kv_heads: 32, head_dim: 128 }];

/// One measured row.
pub struct Row {
    pub ctx: usize,
    pub shape: &'static str,
    pub threads: usize,
    pub kind: String,
    pub ns_per_token: f64,
    pub key_bytes: usize,
    /// Value-cache bytes read per token.
    pub value_bytes: usize,
}

impl Row {
    pub fn json(&self) -> String {
        format!(
            "{{\"ctx\":{},\"shape\":\"{}\",\"threads\":{},\"kind\":\"{}\",\"ns_per_token\":{:.0},\"key_bytes\":{},\"value_bytes\":{}}}",
            self.ctx, self.shape, self.threads, self.kind, self.ns_per_token, self.key_bytes, self.value_bytes
        )
    }
}

/// The PQ configurations timed: 8× key compression against f16 with 4-bit codes over
/// pairs of values (pq16) and 8-bit codes over quadruples (pq256), and the value formats
/// each is timed with.
fn pq_shapes(shape: &Shape) -> [(&'static str, usize, usize, &'static [ValueFormat]); 2] {
    use ValueFormat::{F16, Q4_0, Q8_0};
    [("pq16", shape.head_dim / 2, 16, &[F16, Q8_0, Q4_0]), ("pq256", shape.head_dim / 4, 256, &[F16, Q4_0])]
}

/// "pq16", or "pq16+q8_0" where values are not f16.
fn kind_name(keys: &str, values: ValueFormat) -> String {
    match values {
        ValueFormat::F16 => keys.into(),
        v => format!("{keys}+{}", v.name()),
    }
}

/// Rows for every (shape, ctx, thread count); `llamacpp` adds llama.cpp's flash attention
/// with f16 and q8_0 keys on as many threads.
pub fn bench_attention(shapes: &[Shape], ctxs: &[usize], samples: usize, llamacpp: bool, threads: &[usize]) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for shape in shapes {
        for &ctx in ctxs {
            let att = AttentionShape { layers: 1, heads: shape.heads, kv_heads: shape.kv_heads, head_dim: shape.head_dim, context: ctx };
            let exact = |precision, values| -> Result<Box<dyn KvCache>, String> {
                Ok(Box::new(ExactKvCache::with_value_format(att, precision, &[], values).map_err(|e| e.to_string())?))
            };
            let mut caches: Vec<(String, Box<dyn KvCache>)> = vec![
                ("exact_f32".into(), exact(KeyPrecision::F32, ValueFormat::F16)?),
                ("exact_f16".into(), exact(KeyPrecision::F16, ValueFormat::F16)?),
                (kind_name("exact_f16", ValueFormat::Q8_0), exact(KeyPrecision::F16, ValueFormat::Q8_0)?),
            ];
            for (kind, s, k, value_formats) in pq_shapes(shape) {
                let pq = PqShape::new(1, shape.kv_heads, shape.head_dim, s, k).map_err(|e| e.to_string())?;
                // timing does not depend on what the centroids and the key / query matrices
                // (which `calibrate --key-transform opq` learns) are
                let hd = shape.head_dim;
                let transform = normals(pq.kv_heads * 2 * hd * hd, 2, 1.0 / (hd as f32).sqrt());
                let books = Codebooks::new(pq, "bench", Rotation::None, normals(pq.kv_heads * pq.book_len(), 1, 1.0))
                    .and_then(|b| b.with_key_transform(transform))
                    .map_err(|e| e.to_string())?;
                for &values in value_formats {
                    let cache = PqKvCache::new(att, books.clone(), Isa::best()).and_then(|c| c.with_value_format(values));
                    caches.push((kind_name(kind, values), Box::new(cache.map_err(|e| e.to_string())?)));
                }
            }
            let kv_dim = att.kv_dim();
            for pos in 0..ctx {
                let k = normals(kv_dim, 2 * pos as u64 + 7, 1.0);
                let v = normals(kv_dim, 2 * pos as u64 + 8, 1.0);
                for (_, c) in caches.iter_mut() {
                    c.store(0, pos, &k, &v);
                }
            }
            let q = normals(shape.heads * shape.head_dim, 3, 1.0);
            let scale = 1.0 / (shape.head_dim as f32).sqrt();
            let mut bytes: Vec<(usize, usize)> = caches.iter().map(|(_, c)| (c.key_bytes(), c.value_bytes())).collect();
            let mut names: Vec<String> = caches.iter().map(|(n, _)| n.clone()).collect();
            let floors = ValueFormat::ALL.into_iter().map(|format| ValueFloor::new(att, format)).collect::<Result<Vec<_>, _>>()?;
            for floor in &floors {
                names.push(kind_name("values_only", floor.values.format()));
                bytes.push((0, floor.values.bytes()));
            }
            for &t in threads {
                let pool = Pool::new(t);
                let mut outs: Vec<Vec<f32>> = caches.iter().map(|_| vec![0.0; q.len()]).collect();
                let mut runs: Vec<Box<dyn FnMut() + '_>> = caches
                    .iter_mut()
                    .zip(outs.iter_mut())
                    .map(|((_, c), out)| {
                        let (q, split) = (&q, pool.split());
                        Box::new(move || c.attend_with(&split, 0, 0, ctx - 1, q, scale, out)) as Box<dyn FnMut()>
                    })
                    .collect();
                for floor in &floors {
                    let (scratch, pool_ref) = (floor.scratch(t), &pool);
                    runs.push(Box::new(move || floor.run(pool_ref, &scratch)));
                }
                let mut engines: Vec<Contender<'_, '_>> = runs.iter_mut().map(|r| Contender { run: &mut **r, settle: None }).collect();
                let ns = Timer { samples }.medians_settled(&mut engines);
                for ((kind, ns), &(key_bytes, value_bytes)) in names.iter().zip(ns).zip(&bytes) {
                    rows.push(Row { ctx, shape: shape.name, threads: t, kind: kind.clone(), ns_per_token: ns, key_bytes, value_bytes });
                }
                if llamacpp {
                    rows.extend(llamacpp_rows(shape, ctx, samples, t)?);
                }
            }
        }
    }
    Ok(rows)
}

/// The part of any attention that keys cannot make cheaper: the softmax of every score and
/// the value sum, in the caches' own value cache, pieces and kernel, with no key read and no
/// merge. Exact f16 over this is the most that any key compression with these values could gain.
struct ValueFloor {
    shape: AttentionShape,
    /// One layer of every position's values.
    values: ValueCache,
    scores: Vec<f32>,
}

/// One thread's piece scratch.
struct FloorScratch {
    scores: Vec<f32>,
    row: Vec<f32>,
    out: Vec<f32>,
    stats: Vec<SoftmaxStats>,
}

impl ValueFloor {
    fn new(shape: AttentionShape, format: ValueFormat) -> Result<ValueFloor, String> {
        let mut values = ValueCache::with_format(shape, &[], format).map_err(|e| e.to_string())?;
        let kv_dim = shape.kv_dim();
        for (pos, v) in normals(shape.context * kv_dim, 11, 1.0).chunks_exact(kv_dim).enumerate() {
            values.store(0, pos, v);
        }
        Ok(ValueFloor { shape, values, scores: normals(shape.group() * PIECE_ROWS, 12, 3.0) })
    }

    fn scratch(&self, threads: usize) -> Vec<Mutex<FloorScratch>> {
        let (group, hd) = (self.shape.group(), self.shape.head_dim);
        (0..threads)
            .map(|_| {
                Mutex::new(FloorScratch {
                    scores: self.scores.clone(),
                    row: vec![0.0; hd],
                    out: vec![0.0; group * hd],
                    stats: vec![SoftmaxStats::default(); group],
                })
            })
            .collect()
    }

    /// Pieces dealt out round-robin: thread i takes pieces i, i + threads, …
    fn run(&self, pool: &Pool, scratch: &[Mutex<FloorScratch>]) {
        let ctx = self.shape.context;
        let per_head = ctx.div_ceil(PIECE_ROWS);
        let pieces = self.shape.kv_heads * per_head;
        pool.run(|i| {
            let Ok(mut guard) = scratch[i].lock() else { return };
            let s = &mut *guard;
            for piece in (i..pieces).step_by(pool.threads()) {
                let (kvh, start) = (piece / per_head, piece % per_head * PIECE_ROWS);
                let count = PIECE_ROWS.min(ctx - start);
                let values = self.values.value_rows(0, kvh, start..start + count);
                // softmax rewrites the scores in place; its cost does not depend on their values
                softmax_mix(values, &mut s.scores, PIECE_ROWS, &mut s.row, &mut s.out, &mut s.stats);
            }
        });
    }
}

#[cfg(feature = "llamacpp")]
fn llamacpp_rows(shape: &Shape, ctx: usize, samples: usize, threads: usize) -> Result<Vec<Row>, String> {
    use crate::llamacpp::attention::GgmlAttention;
    let mut rows = Vec::new();
    for key_type in ["f16", "q8_0"] {
        let mut g = GgmlAttention::new(shape.heads, shape.kv_heads, shape.head_dim, ctx, key_type, threads)?;
        let key_bytes = g.key_bytes();
        let ns = {
            let cell = std::cell::RefCell::new(&mut g);
            let mut run = || {
                let _ = cell.borrow_mut().run();
            };
            let mut settle = || cell.borrow_mut().pause();
            let mut engines = [Contender { run: &mut run, settle: Some(&mut settle) }];
            Timer { samples }.medians_settled(&mut engines)[0]
        };
        let value_bytes = ctx * shape.kv_heads * shape.head_dim * 2;
        rows.push(Row { ctx, shape: shape.name, threads, kind: format!("llamacpp_{key_type}"), ns_per_token: ns, key_bytes, value_bytes });
    }
    Ok(rows)
}

#[cfg(not(feature = "llamacpp"))]
fn llamacpp_rows(_shape: &Shape, _ctx: usize, _samples: usize, _threads: usize) -> Result<Vec<Row>, String> {
    Err("--llamacpp: this lutra was built without llama.cpp; rebuild with `--features llamacpp`".into())
}

/// A table: one line per (shape, ctx, threads, kind), with the ratio to exact f16 keys
/// and values on as many threads and the key + value bytes read per second (compare `bench membw`).
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<8} {:>6} {:>7} {:<15} {:>12} {:>9} {:>9} {:>10} {:>8}\n",
        "shape", "ctx", "threads", "kind", "µs/token", "key MiB", "value MiB", "vs f16", "GB/s"
    );
    for r in rows {
        let f16 = rows
            .iter()
            .find(|o| o.shape == r.shape && o.ctx == r.ctx && o.threads == r.threads && o.kind == "exact_f16")
            .map_or(f64::NAN, |o| o.ns_per_token);
        out += &format!(
            "{:<8} {:>6} {:>7} {:<15} {:>12.1} {:>9.2} {:>9.2} {:>9.2}× {:>8.1}\n",
            r.shape,
            r.ctx,
            r.threads,
            r.kind,
            r.ns_per_token / 1e3,
            r.key_bytes as f64 / (1 << 20) as f64,
            r.value_bytes as f64 / (1 << 20) as f64,
            f16 / r.ns_per_token,
            (r.key_bytes + r.value_bytes) as f64 / r.ns_per_token
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lutra_core::f16::f32_to_f16_bits;
    use lutra_core::kernels::attend::{quantize_q4_0, quantize_q8_0, ValueRows, VALUE_BLOCK};

    #[test]
    fn every_kind_is_timed_with_the_bytes_it_reads() {
        let rows = bench_attention(&SHAPES[..1], &[1500], 1, false, &[1, 2]).unwrap();
        let kinds: Vec<&str> = rows.iter().filter(|r| r.threads == 2).map(|r| r.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "exact_f32",
                "exact_f16",
                "exact_f16+q8_0",
                "pq16",
                "pq16+q8_0",
                "pq16+q4_0",
                "pq256",
                "pq256+q4_0",
                "values_only",
                "values_only+q8_0",
                "values_only+q4_0"
            ]
        );
        for r in &rows {
            assert!(r.ns_per_token > 0.0, "{}", r.kind);
            // f16: 2 bytes a value; q8_0 / q4_0: 34 / 18 bytes per 32 values
            let per_row = match r.kind.rsplit('+').next() {
                Some("q8_0") => 8 * 34,
                Some("q4_0") => 8 * 18,
                _ => 256 * 2,
            };
            assert_eq!(r.value_bytes, 1500 * per_row, "{}", r.kind);
        }
        let key_bytes = |kind: &str| rows.iter().find(|r| r.kind == kind).map(|r| r.key_bytes);
        assert_eq!(key_bytes("exact_f16"), Some(1500 * 256 * 2));
        assert_eq!(key_bytes("values_only"), Some(0));
        assert!(rows[0].json().ends_with(",\"value_bytes\":768000}"), "{}", rows[0].json());
    }

    #[test]
    fn the_value_floor_mixes_every_piece() {
        // 3 pieces of 1024 rows on 2 threads: thread 0 takes pieces 0 and 2
        let att = AttentionShape { layers: 1, heads: 4, kv_heads: 1, head_dim: 64, context: 2 * PIECE_ROWS + 10 };
        for format in ValueFormat::ALL {
            let floor = ValueFloor::new(att, format).unwrap();
            let (pool, scratch) = (Pool::new(2), floor.scratch(2));
            floor.run(&pool, &scratch);
            let out: Vec<Vec<f32>> = scratch.into_iter().map(|s| s.into_inner().unwrap().out).collect();
            // each thread's pieces in turn, recomputed on one scratch
            for (thread, pieces) in [(0, &[0, 2][..]), (1, &[1][..])] {
                let mut s = floor.scratch(1).pop().unwrap().into_inner().unwrap();
                for &piece in pieces {
                    let count = PIECE_ROWS.min(att.context - piece * PIECE_ROWS);
                    softmax_mix(
                        floor.values.value_rows(0, 0, piece * PIECE_ROWS..piece * PIECE_ROWS + count),
                        &mut s.scores,
                        PIECE_ROWS,
                        &mut s.row,
                        &mut s.out,
                        &mut s.stats,
                    );
                }
                assert_eq!(out[thread], s.out, "{format:?} thread {thread}");
            }
        }
    }

    #[test]
    fn the_value_floor_rows_are_the_values_row_by_row() {
        let att = AttentionShape { layers: 1, heads: 4, kv_heads: 1, head_dim: 64, context: 40 };
        let values = normals(40 * 64, 11, 1.0);
        let row = 37;
        let x: &[f32; VALUE_BLOCK] = values[row * 64 + VALUE_BLOCK..][..VALUE_BLOCK].try_into().unwrap();
        for format in ValueFormat::ALL {
            let floor = ValueFloor::new(att, format).unwrap();
            // per row of 64: f16 2 bytes a value, q8_0 / q4_0 two blocks of 34 / 18 bytes
            let row_bytes = match format {
                ValueFormat::F16 => 128,
                ValueFormat::Q8_0 => 2 * 34,
                ValueFormat::Q4_0 => 2 * 18,
            };
            assert_eq!(floor.values.bytes(), 40 * row_bytes, "{format:?}");
            // row 37's second block, from the rows the floor hands the kernel
            match (format, floor.values.value_rows(0, 0, row..row + 1)) {
                (ValueFormat::F16, ValueRows::F16(r)) => {
                    assert_eq!(r.data[VALUE_BLOCK..][..VALUE_BLOCK], x.map(f32_to_f16_bits));
                }
                (ValueFormat::Q8_0, ValueRows::Q8_0(b)) | (ValueFormat::Q4_0, ValueRows::Q4_0(b)) => {
                    let (mut codes, mut scale) = ([0u8; VALUE_BLOCK], 0u16);
                    let block_bytes = if format == ValueFormat::Q8_0 { VALUE_BLOCK } else { VALUE_BLOCK / 2 };
                    let quantize = if format == ValueFormat::Q8_0 { quantize_q8_0 } else { quantize_q4_0 };
                    quantize(x, &mut codes[..block_bytes], &mut scale);
                    assert_eq!(b.codes[block_bytes..][..block_bytes], codes[..block_bytes], "{format:?}");
                    assert_eq!(b.scales[1], scale, "{format:?}");
                    assert_eq!(b.count, 1);
                }
                _ => panic!("{format:?}: rows of another format"),
            }
        }
    }
}
