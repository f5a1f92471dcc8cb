//! Threads: a persistent [`Pool`], and the engine's products and attention split across
//! it by lutra-core's [`Split`] (the splitting lives there, once, for every front-end).

mod pool;

pub use lutra_core::threads::Split;
pub use pool::Pool;

use lutra_core::threads::Workers;

impl Pool {
    /// The engine's products and attention pieces on this pool: what a
    /// [`Gemv`](lutra_core::model::Gemv) argument takes. Results equal
    /// [`SingleThread`](lutra_core::model::SingleThread)'s bit for bit.
    pub fn split(&self) -> Split<'_, Pool> {
        Split::new(self)
    }
}

/// Jobs split through a counter: a worker that is descheduled when one starts skips it
/// (`run_shared`) instead of holding it up.
impl Workers for Pool {
    fn threads(&self) -> usize {
        Pool::threads(self)
    }
    fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        self.run_shared(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lutra_core::kernels::int8::{self, Int8Activations, Int8Matrix};
    use lutra_core::model::Gemv;
    use lutra_core::threads::TOKEN_SPLIT_BYTES;
    use lutra_core::{gemm_chunk_tiles, gemv_tiles, Error, Isa, Offset, OwnedTables, PackedMatrix, Tables};

    /// `n` deterministic test values in [−scale, scale), from an integer hash of (seed, i).
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let h = (seed << 32 ^ i).wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                ((h >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
            })
            .collect()
    }

    /// Attention's pieces on 1–3 threads give the single-thread result bit for bit, for
    /// exact keys and both PQ code widths, over a span of several pieces, and for rings
    /// whose window crosses a piece boundary.
    #[test]
    fn threaded_attention_equals_the_single_thread_result() {
        use lutra_core::attention::PqKvCache;
        use lutra_core::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, PIECE_ROWS};
        use lutra_core::model::SingleThread;
        use lutra_core::pq::{Codebooks, PqShape, Rotation};
        let shape = AttentionShape { layers: 2, heads: 4, kv_heads: 2, head_dim: 32, context: 3 * PIECE_ROWS + 100 };
        // layer 0: a ring of `window` positions; layer 1: the whole context
        let window = PIECE_ROWS + 70;
        let windows = [window, 0];
        let mut caches: Vec<Box<dyn KvCache>> = vec![Box::new(ExactKvCache::with_windows(shape, KeyPrecision::F16, &windows))];
        for (subspaces, centroids) in [(16, 16), (8, 256)] {
            let pq = PqShape::new(2, 2, 32, subspaces, centroids).unwrap();
            let books = Codebooks::new(pq, "test", Rotation::None, values(4 * pq.book_len(), 5, 1.0)).unwrap();
            caches.push(Box::new(PqKvCache::new(shape, books, Isa::best()).unwrap().with_exact_keys(4, 64).with_layers(&[], &windows)));
        }
        for pos in 0..shape.context {
            let k = values(shape.kv_dim(), 2 * pos as u64 + 20, 1.0);
            let v = values(shape.kv_dim(), 2 * pos as u64 + 21, 1.0);
            for layer in 0..2 {
                caches.iter_mut().for_each(|c| c.store(layer, pos, &k, &v));
            }
        }
        let q = values(4 * 32, 6, 1.0);
        let last = shape.context - 1;
        let pool = [1, 2, 3].map(Pool::new);
        for cache in &mut caches {
            for (layer, first) in [(1, 0), (1, 17), (1, PIECE_ROWS + 5), (0, last + 1 - window), (0, last - 100)] {
                let mut want = vec![0.0; q.len()];
                cache.attend_with(&SingleThread, layer, first, last, &q, 0.2, &mut want);
                assert!(want.iter().all(|x| x.is_finite()) && want.iter().any(|&x| x != 0.0));
                for pool in &pool {
                    let mut got = vec![f32::NAN; q.len()];
                    cache.attend_with(&pool.split(), layer, first, last, &q, 0.2, &mut got);
                    assert_eq!(got, want, "{} layer {layer} from {first} on {} threads", cache.describe(), pool.threads());
                }
            }
        }
    }

    #[test]
    fn threaded_splits_equal_the_single_thread_result() {
        let (rows, cols) = (333, 512);
        let w = values(rows * cols, 9, 0.05);
        let x = values(cols, 10, 1.0);
        let m = PackedMatrix::quantize(&w, rows, cols, 3, 64, Offset::Min).unwrap();
        let mut t = OwnedTables::new(cols, 64).unwrap();
        let tables = t.build(&x).unwrap();
        let mut want = vec![0.0; rows];
        gemv_tiles(Isa::best(), &m, tables, 0..m.layout().tiles(), &mut want).unwrap();
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            let mut y = vec![f32::NAN; rows];
            pool.split().isa(Isa::best()).gemv(&m, tables, &mut y).unwrap();
            assert_eq!(y, want, "pool of {threads}");
        }
        assert!(matches!(Pool::new(2).split().gemv(&m, tables, &mut [0.0; 3]), Err(Error::BufferSize { .. })));
    }

    /// A batch's products, on 1–3 threads and from the core loop, are each token's GEMV
    /// bit for bit, over a matrix of several chunks (so chunks and tokens both vary) and
    /// over one small enough to be split by tokens.
    #[test]
    fn batched_products_equal_one_gemv_per_token() {
        batched_products_equal_one_gemv_per_token_at(1000, 7);
        batched_products_equal_one_gemv_per_token_at(100, 7);
    }

    fn batched_products_equal_one_gemv_per_token_at(rows: usize, batch: usize) {
        let cols = 512;
        let w = values(rows * cols, 11, 0.05);
        let m = PackedMatrix::quantize(&w, rows, cols, 4, 64, Offset::Min).unwrap();
        if rows > 500 {
            assert!(gemm_chunk_tiles(&m) < m.layout().tiles(), "the matrix must span several chunks");
            assert!(m.as_bytes().len() > TOKEN_SPLIT_BYTES, "and be split by rows");
        } else {
            assert!(m.as_bytes().len() <= TOKEN_SPLIT_BYTES, "the matrix must be split by tokens");
        }
        let mut owned: Vec<OwnedTables> = (0..batch).map(|_| OwnedTables::new(cols, 64).unwrap()).collect();
        let mut want = vec![0.0; batch * rows];
        for (b, (t, y)) in owned.iter_mut().zip(want.chunks_exact_mut(rows)).enumerate() {
            let tables = t.build(&values(cols, 20 + b as u64, 1.0)).unwrap();
            lutra_core::gemv(&m, tables, y).unwrap();
        }
        let tables: Vec<Tables<'_>> = owned.iter().map(OwnedTables::view).collect();
        let mut y = vec![f32::NAN; batch * rows];
        lutra_core::gemm(&m, &tables, &mut y).unwrap();
        assert_eq!(y, want, "core loop");
        for threads in 1..=3 {
            let mut y = vec![f32::NAN; batch * rows];
            Pool::new(threads).split().gemm(&m, &tables, &mut y).unwrap();
            assert_eq!(y, want, "pool of {threads}");
        }
        assert!(matches!(Pool::new(2).split().gemm(&m, &tables, &mut [0.0; 3]), Err(Error::BufferSize { .. })));
    }

    /// The same for int8 products, in both code forms: split by rows (a large matrix)
    /// and by tokens (a small one), each token's `int8::gemv_rows` bit for bit.
    #[test]
    fn batched_int8_products_equal_one_gemv_per_token() {
        let cols = 640;
        for rows in [600, 100] {
            let codes = values(rows * cols, 12, 1.0);
            let mut q8 = Vec::new();
            let mut q5 = Vec::new();
            for (i, block) in codes.chunks_exact(32).enumerate() {
                let d = half::f16::from_f32(0.01 + (i % 7) as f32 * 1e-3).to_bits().to_le_bytes();
                q8.extend_from_slice(&d);
                q8.extend(block.iter().map(|&v| (v * 127.0) as i8 as u8));
                q5.extend_from_slice(&d);
                let u: Vec<u8> = block.iter().map(|&v| ((v + 1.0) * 15.99) as u8).collect();
                q5.extend_from_slice(&u.iter().enumerate().fold(0u32, |h, (j, &u)| h | u32::from(u >> 4) << j).to_le_bytes());
                q5.extend((0..16).map(|j| (u[j] & 15) | (u[j + 16] & 15) << 4));
            }
            for m in [Int8Matrix::from_q8_0(&q8, rows, cols).unwrap(), Int8Matrix::from_q5_0(&q5, rows, cols).unwrap()] {
                assert_eq!(m.bytes() <= TOKEN_SPLIT_BYTES, rows < 500, "{rows} rows: the split this case is for");
                let xs: Vec<Int8Activations> = (0..7)
                    .map(|t| {
                        let mut x = Int8Activations::new(cols).unwrap();
                        x.quantize(&values(cols, 30 + t, 2.0)).unwrap();
                        x
                    })
                    .collect();
                let mut want = vec![0.0; xs.len() * rows];
                for (x, y) in xs.iter().zip(want.chunks_exact_mut(rows)) {
                    int8::gemv_rows(Isa::Scalar, &m, x, 0..rows, y).unwrap();
                }
                for threads in 1..=3 {
                    let mut y = vec![f32::NAN; xs.len() * rows];
                    Pool::new(threads).split().int8_gemm(&m, &xs, &mut y).unwrap();
                    assert_eq!(y, want, "{:?}, {rows} rows, pool of {threads}", m.form());
                }
            }
        }
    }
}
