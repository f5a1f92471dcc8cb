//! GEMV rows split across threads: tiles handed out in chunks (see `pool`).

use lutra_core::int8::{self, Int8Activations, Int8Matrix};
use lutra_core::model::kv::{AttentionPiece, Parallel};
use lutra_core::{gemm_chunk_tiles, gemm_tiles, gemv_tiles, Error, Isa, PackedMatrix, Tables, TILE_ROWS};

use super::pool::{ChunkCounter, DisjointSlice, Pool};

/// Tiles per chunk: small enough to balance two noisy cores, large enough that the
/// counter is not contended (a 32-row tile of 4096 columns at 2 bits is 32 KiB).
fn chunk_tiles(tiles: usize, threads: usize) -> usize {
    (tiles / (8 * threads)).clamp(1, 16)
}

/// Runs `job` on every thread of `pool` for each range `counter` hands out, until it has
/// handed out all; the first error any call returned is the result.
fn run_chunks(pool: &Pool, counter: &ChunkCounter, job: impl Fn(std::ops::Range<usize>) -> Result<(), Error> + Sync) -> Result<(), Error> {
    let first_error = std::sync::Mutex::new(None);
    pool.run_shared(|_| {
        while let Some(range) = counter.next() {
            if let Err(e) = job(range) {
                first_error.lock().unwrap().get_or_insert(e);
            }
        }
    });
    first_error.into_inner().unwrap().map_or(Ok(()), Err)
}

/// `y = W·x` on every thread of `pool`.
pub fn gemv<B: AsRef<[u8]> + Sync>(pool: &Pool, isa: Isa, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
    let l = *m.layout();
    if y.len() != l.rows() {
        return Err(Error::BufferSize { what: "output rows", expected: l.rows(), got: y.len() });
    }
    if pool.threads() == 1 {
        return gemv_tiles(isa, m, tables, 0..l.tiles(), y);
    }
    let counter = ChunkCounter::new(l.tiles(), chunk_tiles(l.tiles(), pool.threads()));
    let out = DisjointSlice::new(y);
    run_chunks(pool, &counter, |tiles| {
        let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows());
        // SAFETY: each tile range comes from the counter exactly once, so row ranges of
        // different calls never overlap.
        let y = unsafe { out.range_mut(rows) };
        gemv_tiles(isa, m, tables, tiles, y)
    })
}

/// Rows per chunk of an int8 product: 64 rows of 640 int8 columns is 40 KiB.
const INT8_CHUNK_ROWS: usize = 64;

/// `y = W·x` over int8 codes on every thread of `pool` (rows in chunks, as `gemv`).
pub fn int8_gemv(pool: &Pool, isa: Isa, m: &Int8Matrix, x: &Int8Activations, y: &mut [f32]) -> Result<(), Error> {
    if y.len() != m.rows() {
        return Err(Error::BufferSize { what: "output rows", expected: m.rows(), got: y.len() });
    }
    if pool.threads() == 1 {
        return int8::gemv_rows(isa, m, x, 0..m.rows(), y);
    }
    let counter = ChunkCounter::new(m.rows().div_ceil(INT8_CHUNK_ROWS), chunk_tiles(m.rows().div_ceil(INT8_CHUNK_ROWS), pool.threads()));
    let out = DisjointSlice::new(y);
    run_chunks(pool, &counter, |chunks| {
        let rows = chunks.start * INT8_CHUNK_ROWS..(chunks.end * INT8_CHUNK_ROWS).min(m.rows());
        // SAFETY: each chunk range comes from the counter exactly once, so row ranges of
        // different calls never overlap.
        let y = unsafe { out.range_mut(rows.clone()) };
        int8::gemv_rows(isa, m, x, rows, y)
    })
}

/// A batch of tokens' int8 products (`ys` token-major) on every thread of `pool`: threads
/// take chunks of rows, and each runs every token over its chunk while it is in cache
/// (one dispatch for the batch, not one per token; `int8::gemm_rows` reads a chunk's
/// weights once for several tokens where the kernel can). A small matrix is split by
/// tokens instead (`TOKEN_SPLIT_BYTES`), up to eight at a time (the AVX2 tile kernels'
/// batch).
pub fn int8_gemm(pool: &Pool, isa: Isa, m: &Int8Matrix, xs: &[Int8Activations], ys: &mut [f32]) -> Result<(), Error> {
    let rows = m.rows();
    if ys.len() != xs.len() * rows {
        return Err(Error::BufferSize { what: "output rows × batch", expected: xs.len() * rows, got: ys.len() });
    }
    if xs.len() == 1 {
        return int8_gemv(pool, isa, m, &xs[0], ys);
    }
    if pool.threads() == 1 {
        let mut per_token = ys.chunks_exact_mut(rows);
        return int8::gemm_rows(isa, m, xs, 0..rows, |_| per_token.next().unwrap_or_default());
    }
    let out = DisjointSlice::new(ys);
    if m.bytes() <= TOKEN_SPLIT_BYTES && xs.len() >= 2 * pool.threads() {
        // a tile's eight where the batch gives every thread one; fewer per chunk otherwise
        let per_chunk = xs.len().div_ceil(pool.threads()).min(8);
        return run_chunks(pool, &ChunkCounter::new(xs.len(), per_chunk), |tokens| {
            // SAFETY: each token range comes from the counter exactly once, so these
            // tokens' rows are written by this call only.
            let y = |t: usize| unsafe { out.range_mut((tokens.start + t) * rows..(tokens.start + t + 1) * rows) };
            int8::gemm_rows(isa, m, &xs[tokens.clone()], 0..rows, y)
        });
    }
    run_chunks(pool, &ChunkCounter::new(rows.div_ceil(INT8_CHUNK_ROWS), 1), |chunks| {
        let chunk = chunks.start * INT8_CHUNK_ROWS..(chunks.end * INT8_CHUNK_ROWS).min(rows);
        // SAFETY: each chunk comes from the counter exactly once, so these rows of each
        // token are written by this call only.
        let y = |t: usize| unsafe { out.range_mut(t * rows + chunk.start..t * rows + chunk.end) };
        int8::gemm_rows(isa, m, xs, chunk.clone(), y)
    })
}

/// Matrices at most this large are split between threads by tokens, not rows: each
/// thread keeps the whole matrix in its L2 (1 MiB and up on every x86 core of the last
/// decade) and runs a share of the batch over it. Split by rows, a small matrix gives
/// one thread all of it (stories15M's 288×288 at 4 bits is one cache-sized chunk) or,
/// cut finer, pays a kernel call per tile and token: either way two threads measured no
/// faster than one.
const TOKEN_SPLIT_BYTES: usize = 256 * 1024;

/// A batch of tokens' products (`ys` token-major) on every thread of `pool`: threads take
/// chunks of tiles, and each runs every token over its chunk while it is in cache. A
/// small matrix is split by tokens instead (`TOKEN_SPLIT_BYTES`), two at a time.
pub fn gemm<B: AsRef<[u8]> + Sync>(pool: &Pool, isa: Isa, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
    let l = *m.layout();
    if ys.len() != tables.len() * l.rows() {
        return Err(Error::BufferSize { what: "output rows × batch", expected: tables.len() * l.rows(), got: ys.len() });
    }
    if pool.threads() == 1 {
        return lutra_core::gemm_with(isa, m, tables, ys);
    }
    // one token (decode): the GEMV's own split
    if let [t] = tables {
        return gemv(pool, isa, m, *t, ys);
    }
    let out = DisjointSlice::new(ys);
    if m.as_bytes().len() <= TOKEN_SPLIT_BYTES && tables.len() >= 2 * pool.threads() {
        return run_chunks(pool, &ChunkCounter::new(tables.len(), 2), |tokens| {
            let at = |b: usize| (tokens.start + b) * l.rows()..(tokens.start + b + 1) * l.rows();
            // SAFETY: each token range comes from the counter exactly once, so these
            // tokens' rows are written by this call only.
            gemm_tiles(isa, m, &tables[tokens.clone()], 0..l.tiles(), |b| unsafe { out.range_mut(at(b)) })
        });
    }
    let per_chunk = gemm_chunk_tiles(m);
    run_chunks(pool, &ChunkCounter::new(l.tiles().div_ceil(per_chunk), 1), |chunks| {
        let tiles = chunks.start * per_chunk..(chunks.end * per_chunk).min(l.tiles());
        let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows());
        let at = |b: usize| b * l.rows() + rows.start..b * l.rows() + rows.end;
        // SAFETY: each chunk comes from the counter exactly once, so these rows of these
        // tokens are written by this call only.
        gemm_tiles(isa, m, tables, tiles, |b| unsafe { out.range_mut(at(b)) })
    })
}

/// `job(item, i)` for every item on every thread of `pool`, in chunks of tokens (a
/// batch's table builds and activation quantization, microseconds each).
pub fn for_each_token<T: Send>(
    pool: &Pool,
    items: &mut [T],
    job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync),
) -> Result<(), Error> {
    if pool.threads() == 1 || items.len() < 2 {
        return items.iter_mut().enumerate().try_for_each(|(i, item)| job(item, i));
    }
    let counter = ChunkCounter::new(items.len(), items.len().div_ceil(4 * pool.threads()));
    let items = DisjointSlice::new(items);
    run_chunks(pool, &counter, |range| {
        // SAFETY: each index range comes from the counter exactly once, so no two threads
        // hold the same item.
        let chunk = unsafe { items.range_mut(range.clone()) };
        chunk.iter_mut().zip(range).try_for_each(|(item, i)| job(item, i))
    })
}

/// Attention's pieces, one at a time to whichever thread asks first.
impl Parallel for Pool {
    fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
        if self.threads() == 1 || pieces.len() < 2 {
            pieces.iter_mut().for_each(job);
            return;
        }
        let counter = ChunkCounter::new(pieces.len(), 1);
        let pieces = DisjointSlice::new(pieces);
        self.run_shared(|_| {
            while let Some(range) = counter.next() {
                // SAFETY: each index comes from the counter exactly once, so no two
                // threads hold the same piece.
                unsafe { pieces.range_mut(range) }.iter_mut().for_each(job);
            }
        });
    }
    fn threads(&self) -> usize {
        Pool::threads(self)
    }
}

/// The same split with rayon's work stealing, kept for the comparison in
/// `lutra bench gemv --pool rayon`.
pub fn gemv_rayon<B: AsRef<[u8]> + Sync>(isa: Isa, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
    use rayon::prelude::*;
    let l = *m.layout();
    if y.len() != l.rows() {
        return Err(Error::BufferSize { what: "output rows", expected: l.rows(), got: y.len() });
    }
    let chunk = chunk_tiles(l.tiles(), rayon::current_num_threads());
    y.par_chunks_mut(chunk * TILE_ROWS).enumerate().try_for_each(|(i, y)| {
        let start = i * chunk;
        let end = (start + chunk).min(l.tiles());
        gemv_tiles(isa, m, tables, start..end, y)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lutra_core::{Offset, OwnedTables};

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
        use lutra_core::model::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, PIECE_ROWS};
        use lutra_core::model::SingleThread;
        use lutra_core::pq::{Codebooks, PqKvCache, PqShape, Rotation};
        let shape = AttentionShape { layers: 2, n_heads: 4, n_kv_heads: 2, head_dim: 32, context: 3 * PIECE_ROWS + 100 };
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
                    cache.attend_with(pool, layer, first, last, &q, 0.2, &mut got);
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
            gemv(&pool, Isa::best(), &m, tables, &mut y).unwrap();
            assert_eq!(y, want, "pool of {threads}");
        }
        let mut y = vec![f32::NAN; rows];
        gemv_rayon(Isa::best(), &m, tables, &mut y).unwrap();
        assert_eq!(y, want, "rayon");
        assert!(matches!(gemv(&Pool::new(2), Isa::best(), &m, tables, &mut [0.0; 3]), Err(Error::BufferSize { .. })));
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
            gemm(&Pool::new(threads), Isa::best_for(m.layout().interleave()), &m, &tables, &mut y).unwrap();
            assert_eq!(y, want, "pool of {threads}");
        }
        assert!(matches!(gemm(&Pool::new(2), Isa::best(), &m, &tables, &mut [0.0; 3]), Err(Error::BufferSize { .. })));
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
                    int8_gemm(&Pool::new(threads), Isa::best(), &m, &xs, &mut y).unwrap();
                    assert_eq!(y, want, "{:?}, {rows} rows, pool of {threads}", m.form());
                }
            }
        }
    }
}
