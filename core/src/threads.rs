//! Products and attention pieces split over threads: the one place that does it.
//!
//! A front-end says only how to run one closure on N threads ([`Workers`]: the native
//! pool, the browser's Web Workers); [`Split`] cuts every product into chunks that
//! threads take from a shared counter, so a thread slowed by a noisy neighbour (or never
//! scheduled) just takes fewer. Every output row is computed by the same kernel call it
//! would get on one thread, so results equal [`SingleThread`](crate::model::SingleThread)'s
//! bit for bit whatever the thread count.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::Range;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::attention::{AttentionPiece, Parallel};
use crate::kernels::int8::{self, Int8Activations, Int8Matrix};
use crate::kernels::lut::Tables;
use crate::model::Gemv;
use crate::{gemm_chunk_tiles, gemm_tiles, gemv_tiles, Error, Isa, PackedMatrix, TILE_ROWS};

/// Runs one job on several threads: what a front-end's pool provides.
pub trait Workers: Sync {
    /// Threads that run a job, the caller included.
    fn threads(&self) -> usize;
    /// Runs `job(thread_index)` on the caller (index 0) and on any other threads that
    /// join before the caller's own call returns, and returns once every thread that
    /// joined has finished (their writes visible to the caller). Jobs here share their
    /// work out through a [`ChunkCounter`], so a thread that joins late, or not at all,
    /// costs nothing.
    fn run(&self, job: &(dyn Fn(usize) + Sync));
}

/// The calling thread alone: a [`Split`] over it runs every product as
/// [`SingleThread`](crate::model::SingleThread) does, for front-ends whose threads may
/// or may not have started.
impl Workers for crate::model::SingleThread {
    fn threads(&self) -> usize {
        1
    }
    fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        job(0);
    }
}

/// The engine's [`Gemv`] over a front-end's [`Workers`].
pub struct Split<'w, W: ?Sized> {
    workers: &'w W,
    min_split_bytes: usize,
    isa: Option<Isa>,
}

impl<'w, W: Workers + ?Sized> Split<'w, W> {
    /// Every product split over `workers`.
    pub fn new(workers: &'w W) -> Self {
        Split { workers, min_split_bytes: 0, isa: None }
    }

    /// Every product on `isa`'s kernels instead of the fastest the matrix allows (to time
    /// each tier); an `isa` the CPU lacks runs the scalar kernels.
    pub fn isa(self, isa: Isa) -> Self {
        Split { isa: Some(isa), ..self }
    }

    /// Products of matrices under `bytes` stay on the caller: where waking a thread
    /// costs more than a small matrix's product (Web Workers), splitting it loses.
    pub fn min_split_bytes(self, bytes: usize) -> Self {
        Split { min_split_bytes: bytes, ..self }
    }

    /// The kernels for `m`: the chosen tier, or the fastest that accepts its layout.
    fn lut_isa<B: AsRef<[u8]>>(&self, m: &PackedMatrix<B>) -> Isa {
        self.isa.unwrap_or_else(|| Isa::best_for(m.layout().interleave()))
    }

    fn int8_isa(&self) -> Isa {
        self.isa.unwrap_or_else(Isa::best)
    }

    fn single(&self, matrix_bytes: usize) -> bool {
        self.workers.threads() == 1 || matrix_bytes < self.min_split_bytes
    }

    /// Runs `job` on every thread for each range `counter` hands out, until it has handed
    /// out all; the first error any call returned is the result.
    fn run_chunks(&self, counter: &ChunkCounter, job: impl Fn(Range<usize>) -> Result<(), Error> + Sync) -> Result<(), Error> {
        let first_error = FirstError::new();
        self.workers.run(&|_| {
            while let Some(range) = counter.next() {
                if let Err(e) = job(range) {
                    first_error.set(e);
                }
            }
        });
        first_error.into_result()
    }

    /// `job(range, &mut out[range])` for consecutive ranges of `chunk` elements (the last
    /// may be shorter) covering `out`, each on whichever thread takes it first; the first
    /// error any call returned is the result.
    pub fn for_each_chunk<T: Send>(
        &self,
        out: &mut [T],
        chunk: usize,
        job: impl Fn(Range<usize>, &mut [T]) -> Result<(), Error> + Sync,
    ) -> Result<(), Error> {
        let out_len = out.len();
        let out = DisjointSlice::new(out);
        self.run_chunks(&ChunkCounter::new(out_len, chunk), |range| {
            // SAFETY: each range comes from the counter exactly once, so ranges of
            // different calls never overlap.
            job(range.clone(), unsafe { out.range_mut(range) })
        })
    }
}

/// Tiles per chunk: small enough to balance two noisy cores, large enough that the
/// counter is not contended (a 32-row tile of 4096 columns at 2 bits is 32 KiB).
fn chunk_tiles(tiles: usize, threads: usize) -> usize {
    (tiles / (8 * threads)).clamp(1, 16)
}

/// Rows per chunk of an int8 product (a multiple of the kernels' 4-row groups): 64 rows
/// of 640 int8 columns is 40 KiB.
const INT8_CHUNK_ROWS: usize = 64;

/// Matrices at most this large are split between threads by tokens, not rows: each
/// thread keeps the whole matrix in its L2 (1 MiB and up on every x86 core of the last
/// decade) and runs a share of the batch over it. Split by rows, a small matrix gives
/// one thread all of it (stories15M's 288×288 at 4 bits is one cache-sized chunk) or,
/// cut finer, pays a kernel call per tile and token: either way two threads measured no
/// faster than one.
pub const TOKEN_SPLIT_BYTES: usize = 256 * 1024;

impl<W: Workers + ?Sized> Gemv for Split<'_, W> {
    /// `y = W·x`, tiles in chunks.
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        let (l, isa) = (*m.layout(), self.lut_isa(m));
        if y.len() != l.rows() {
            return Err(Error::BufferSize { what: "output rows", expected: l.rows(), got: y.len() });
        }
        if self.single(l.total_bytes()) {
            return gemv_tiles(isa, m, tables, 0..l.tiles(), y);
        }
        // chunks of whole tiles: rows `32·t..` are tile t's
        let chunk_rows = chunk_tiles(l.tiles(), self.workers.threads()) * TILE_ROWS;
        self.for_each_chunk(y, chunk_rows, |rows, y| gemv_tiles(isa, m, tables, rows.start / TILE_ROWS..rows.end.div_ceil(TILE_ROWS), y))
    }

    /// A batch of tokens' products (`ys` token-major): threads take chunks of tiles, and
    /// each runs every token over its chunk while it is in cache. A small matrix is split
    /// by tokens instead (`TOKEN_SPLIT_BYTES`), two at a time.
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        let (l, isa) = (*m.layout(), self.lut_isa(m));
        if ys.len() != tables.len() * l.rows() {
            return Err(Error::BufferSize { what: "output rows × batch", expected: tables.len() * l.rows(), got: ys.len() });
        }
        if self.single(l.total_bytes()) {
            return crate::gemm_with(isa, m, tables, ys);
        }
        // one token (decode): the GEMV's own split
        if let [t] = tables {
            return self.gemv(m, *t, ys);
        }
        let threads = self.workers.threads();
        let out = DisjointSlice::new(ys);
        if m.as_bytes().len() <= TOKEN_SPLIT_BYTES && tables.len() >= 2 * threads {
            return self.run_chunks(&ChunkCounter::new(tables.len(), 2), |tokens| {
                let at = |b: usize| (tokens.start + b) * l.rows()..(tokens.start + b + 1) * l.rows();
                // SAFETY: each token range comes from the counter exactly once, so these
                // tokens' rows are written by this call only.
                gemm_tiles(isa, m, &tables[tokens.clone()], 0..l.tiles(), |b| unsafe { out.range_mut(at(b)) })
            });
        }
        let per_chunk = gemm_chunk_tiles(m);
        self.run_chunks(&ChunkCounter::new(l.tiles().div_ceil(per_chunk), 1), |chunks| {
            let tiles = chunks.start * per_chunk..(chunks.end * per_chunk).min(l.tiles());
            let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows());
            let at = |b: usize| b * l.rows() + rows.start..b * l.rows() + rows.end;
            // SAFETY: each chunk comes from the counter exactly once, so these rows of
            // these tokens are written by this call only.
            gemm_tiles(isa, m, tables, tiles, |b| unsafe { out.range_mut(at(b)) })
        })
    }

    /// `y = W·x` over int8 codes, rows in chunks.
    fn int8_gemv(&self, m: &Int8Matrix, x: &Int8Activations, y: &mut [f32]) -> Result<(), Error> {
        if y.len() != m.rows() {
            return Err(Error::BufferSize { what: "output rows", expected: m.rows(), got: y.len() });
        }
        let isa = self.int8_isa();
        if self.single(m.bytes()) {
            return int8::gemv_rows(isa, m, x, 0..m.rows(), y);
        }
        let chunks = m.rows().div_ceil(INT8_CHUNK_ROWS);
        let chunk_rows = chunk_tiles(chunks, self.workers.threads()) * INT8_CHUNK_ROWS;
        self.for_each_chunk(y, chunk_rows, |rows, y| int8::gemv_rows(isa, m, x, rows, y))
    }

    /// A batch of tokens' int8 products (`ys` token-major): threads take chunks of rows,
    /// and each runs every token over its chunk while it is in cache (`int8::gemm_rows`
    /// reads a chunk's weights once for several tokens where the kernel can). A small
    /// matrix is split by tokens instead, up to eight at a time (the AVX2 tile kernels'
    /// batch).
    fn int8_gemm(&self, m: &Int8Matrix, xs: &[Int8Activations], ys: &mut [f32]) -> Result<(), Error> {
        let (rows, isa) = (m.rows(), self.int8_isa());
        if ys.len() != xs.len() * rows {
            return Err(Error::BufferSize { what: "output rows × batch", expected: xs.len() * rows, got: ys.len() });
        }
        if let [x] = xs {
            return self.int8_gemv(m, x, ys);
        }
        if self.single(m.bytes()) {
            let mut per_token = ys.chunks_exact_mut(rows);
            return int8::gemm_rows(isa, m, xs, 0..rows, |_| per_token.next().unwrap_or_default());
        }
        let threads = self.workers.threads();
        let out = DisjointSlice::new(ys);
        if m.bytes() <= TOKEN_SPLIT_BYTES && xs.len() >= 2 * threads {
            // a tile's eight where the batch gives every thread one; fewer per chunk otherwise
            let per_chunk = xs.len().div_ceil(threads).min(8);
            return self.run_chunks(&ChunkCounter::new(xs.len(), per_chunk), |tokens| {
                // SAFETY: each token range comes from the counter exactly once, so these
                // tokens' rows are written by this call only.
                let y = |t: usize| unsafe { out.range_mut((tokens.start + t) * rows..(tokens.start + t + 1) * rows) };
                int8::gemm_rows(isa, m, &xs[tokens.clone()], 0..rows, y)
            });
        }
        self.run_chunks(&ChunkCounter::new(rows.div_ceil(INT8_CHUNK_ROWS), 1), |chunks| {
            let chunk = chunks.start * INT8_CHUNK_ROWS..(chunks.end * INT8_CHUNK_ROWS).min(rows);
            // SAFETY: each chunk comes from the counter exactly once, so these rows of each
            // token are written by this call only.
            let y = |t: usize| unsafe { out.range_mut(t * rows + chunk.start..t * rows + chunk.end) };
            int8::gemm_rows(isa, m, xs, chunk.clone(), y)
        })
    }

    /// `job(item, i)` for every item, in chunks of tokens (a batch's table builds and
    /// activation quantization, microseconds each).
    fn for_each_token<T: Send>(&self, items: &mut [T], job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync)) -> Result<(), Error> {
        let n = items.len();
        if self.workers.threads() == 1 || n < 2 {
            return items.iter_mut().enumerate().try_for_each(|(i, item)| job(item, i));
        }
        self.for_each_chunk(items, n.div_ceil(4 * self.workers.threads()), |range, chunk| {
            chunk.iter_mut().zip(range).try_for_each(|(item, i)| job(item, i))
        })
    }

    fn parallel(&self) -> &dyn Parallel {
        self
    }
}

/// Attention's pieces, one at a time to whichever thread asks first.
impl<W: Workers + ?Sized> Parallel for Split<'_, W> {
    fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
        if self.workers.threads() == 1 || pieces.len() < 2 {
            pieces.iter_mut().for_each(job);
            return;
        }
        let all_ran = self.for_each_chunk(pieces, 1, |_, piece| {
            piece.iter_mut().for_each(job);
            Ok(())
        });
        debug_assert!(all_ran.is_ok(), "pieces return no errors");
    }
    fn threads(&self) -> usize {
        self.workers.threads()
    }
}

/// Hands out `0..n` in chunks of `chunk` to whoever asks first.
pub struct ChunkCounter {
    next: AtomicUsize,
    n: usize,
    chunk: usize,
}

impl ChunkCounter {
    /// A counter over `0..n` handing out ranges of `chunk` (at least 1) indices.
    pub fn new(n: usize, chunk: usize) -> Self {
        ChunkCounter { next: AtomicUsize::new(0), n, chunk: chunk.max(1) }
    }
    /// The next unclaimed range (the last may be shorter), or `None` once `0..n` is handed out.
    pub fn next(&self) -> Option<Range<usize>> {
        let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
        (start < self.n).then(|| start..(start + self.chunk).min(self.n))
    }
}

/// A mutable slice shared by the threads of one job, each writing ranges that a
/// [`ChunkCounter`] handed to it alone.
struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: access goes through `range_mut`, whose contract makes ranges disjoint.
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}

impl<'a, T> DisjointSlice<'a, T> {
    /// Borrows `slice` mutably for as long as the `DisjointSlice` lives.
    fn new(slice: &'a mut [T]) -> Self {
        DisjointSlice { ptr: slice.as_mut_ptr(), len: slice.len(), _borrow: PhantomData }
    }

    /// # Safety
    /// No two live results may overlap (ranges from one `ChunkCounter` never do).
    #[allow(clippy::mut_from_ref)]
    unsafe fn range_mut(&self, range: Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len, "range within the slice");
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start) }
    }
}

/// The first error any thread of a job reports (no lock: `no_std` has none).
struct FirstError {
    /// `EMPTY`, then `WRITING` for the one thread that won the error slot, then `WRITTEN`.
    state: AtomicU8,
    error: UnsafeCell<Option<Error>>,
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const WRITTEN: u8 = 2;

// SAFETY: `error` is written only by the one thread whose compare-exchange moved `state`
// from EMPTY, and read only by `into_result`, which owns the value (every thread is done).
unsafe impl Sync for FirstError {}

impl FirstError {
    fn new() -> Self {
        FirstError { state: AtomicU8::new(EMPTY), error: UnsafeCell::new(None) }
    }

    /// Keeps `e` if no error was kept yet.
    fn set(&self, e: Error) {
        if self.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            // SAFETY: the compare-exchange above succeeds for one call only, so this is the
            // only access to `error` until `into_result`.
            unsafe { *self.error.get() = Some(e) };
            self.state.store(WRITTEN, Ordering::Release);
        }
    }

    fn into_result(self) -> Result<(), Error> {
        self.error.into_inner().map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;

    /// Runs every job on the caller `threads` times, as indices 0..threads: a pool with
    /// no threads of its own, enough to check that the chunks cover every output once.
    struct Sequential(usize);

    impl Workers for Sequential {
        fn threads(&self) -> usize {
            self.0
        }
        fn run(&self, job: &(dyn Fn(usize) + Sync)) {
            (0..self.0).for_each(job);
        }
    }

    #[test]
    fn chunks_cover_the_range_once() {
        for (n, chunk) in [(0, 1), (1, 1), (100, 7), (100, 100), (5, 0)] {
            let counter = ChunkCounter::new(n, chunk);
            let mut seen = std::vec![0u8; n];
            while let Some(r) = counter.next() {
                r.for_each(|i| seen[i] += 1);
            }
            assert!(seen.iter().all(|&s| s == 1), "n {n} chunk {chunk}");
        }
    }

    #[test]
    fn the_first_error_is_kept() {
        let workers = Sequential(3);
        let split = Split::new(&workers);
        let counter = ChunkCounter::new(10, 1);
        let result = split.run_chunks(&counter, |r| {
            if r.start >= 4 {
                Err(Error::BufferSize { what: "test", expected: r.start, got: 0 })
            } else {
                Ok(())
            }
        });
        assert_eq!(result, Err(Error::BufferSize { what: "test", expected: 4, got: 0 }));
        assert_eq!(split.run_chunks(&ChunkCounter::new(10, 3), |_| Ok(())), Ok(()));
    }

    #[test]
    fn every_item_once_at_any_thread_count() {
        for threads in 1..=4 {
            let workers = Sequential(threads);
            let split = Split::new(&workers);
            let mut items: Vec<usize> = std::vec![0; 37];
            split
                .for_each_token(&mut items, &|item, i| {
                    *item += i + 1;
                    Ok(())
                })
                .unwrap();
            assert_eq!(items, (1..=37).collect::<Vec<_>>(), "{threads} threads");
        }
    }
}
