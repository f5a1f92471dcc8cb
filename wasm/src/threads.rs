//! Threads for the threaded wasm build (`+atomics`, shared memory; built by nightly with
//! `-Z build-std`, see xtask's `build_web`). Web Workers cannot be spawned from Rust on
//! wasm32-unknown-unknown, so the page's engine worker starts them (`www/thread.js`):
//! each instantiates this module on the same shared memory and calls [`pool_worker`],
//! which never returns. A [`Pool`] then runs jobs on those workers and the caller much
//! as the native pool does (`native/src/threads`): workers spin briefly on a job
//! counter, then park (`memory.atomic.wait32` underneath), and work inside a job is
//! handed out in chunks through an atomic counter. Unlike the native pool, the caller
//! does not wait for a worker that has not joined a job by the time the chunks ran out
//! (see [`Shared`]).
//!
//! Products and attention pieces are split exactly as natively: whole 32-row tiles per
//! chunk for GEMV, whole chunks of `gemm_chunk_tiles` for a batch, one attention piece at
//! a time; products of matrices under [`MIN_SPLIT_BYTES`] stay on the caller. Each row's sum is computed by the same kernel whichever thread takes it, so
//! the results equal [`SingleThread`](lutra_core::engine::SingleThread)'s bit for bit.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, Thread};

use lutra_core::int8::{self, Int8Activations, Int8Matrix};
use lutra_core::lut::Tables;
use lutra_core::model::kv::{AttentionPiece, Parallel};
use lutra_core::model::Gemv;
use lutra_core::{gemm_chunk_tiles, gemm_tiles, gemv_tiles, Error, Isa, PackedMatrix, TILE_ROWS};

/// Spins of an idle thread before it parks (no clock on wasm32-unknown-unknown): about
/// 0.1–0.3 ms of atomic loads, longer than the gap between a token's products.
const SPIN: u32 = 1 << 17;

type Job = dyn Fn(usize) + Sync;

/// [`Shared::state`]: workers in the current job in the low bits, then whether it is
/// still open to workers, then the job's number (wrapping).
const COUNT: usize = 0xff;
const OPEN: usize = 0x100;
const GENERATION: usize = 0x200;

/// The state the caller and the workers share.
pub struct Shared {
    /// Job number, open flag and workers in the job (see [`COUNT`]). A worker joins a job
    /// only while it is open, and the caller closes it once its own share ran out of
    /// chunks: then it waits for the workers that joined, never for one that was
    /// descheduled before joining (on a busy 2-core machine a wake-up can take a whole
    /// time slice; the chunks it would have taken were done by the others meanwhile).
    state: AtomicUsize,
    /// The current job, lifetime-erased (see `Pool::run`).
    job: Mutex<Option<&'static Job>>,
    /// Workers that have entered [`worker`], to be unparked for each job.
    workers: Mutex<Vec<Thread>>,
    caller: Mutex<Option<Thread>>,
    /// Set when a worker's JavaScript caught a trap (a panic aborts): `run` then panics
    /// rather than waiting forever for a share that will never finish.
    failed: AtomicBool,
}

/// `threads` threads in all: the caller and `threads − 1` Web Workers.
pub struct Pool {
    shared: Shared,
    threads: usize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// Products of matrices smaller than this many bytes run on the caller alone: a job
/// costs a wake-up and cache-line traffic that a 288×288 4-bit matrix (41 KiB,
/// stories15M) does not repay. Measured in headless Chromium on a busy 2-vCPU host
/// (median of 7 interleaved rounds, 128 tokens): stories15M 354 tok/s on one thread,
/// 292 with every product split, 362 with this threshold (only the 4.4 MiB LM head
/// split); Gemma 3 270M, whose products are 0.3–0.6 MiB and up, loses little to it.
pub const MIN_SPLIT_BYTES: usize = 256 << 10;
static MIN_SPLIT: AtomicUsize = AtomicUsize::new(MIN_SPLIT_BYTES);

/// Sets the smallest matrix (bytes) whose product is split (for measurements).
pub fn set_min_split_bytes(bytes: usize) {
    MIN_SPLIT.store(bytes, Ordering::Relaxed);
}

/// The page's pool, once [`start`] made it.
pub fn pool() -> Option<&'static Pool> {
    POOL.get()
}

/// Makes the pool of `threads` threads (once per module instance); returns the address
/// its workers pass to [`worker`].
pub fn start(threads: usize) -> Result<usize, String> {
    if !(1..=64).contains(&threads) {
        return Err(format!("threads must be 1 to 64, not {threads}"));
    }
    let pool = POOL.get_or_init(|| Pool {
        shared: Shared {
            state: AtomicUsize::new(0),
            job: Mutex::new(None),
            workers: Mutex::new(Vec::new()),
            caller: Mutex::new(None),
            failed: AtomicBool::new(false),
        },
        threads,
    });
    if pool.threads != threads {
        return Err(format!("the pool already has {} threads", pool.threads));
    }
    Ok(&pool.shared as *const Shared as usize)
}

/// # Safety
/// `shared` must be an address [`start`] returned in this memory.
unsafe fn shared_at<'a>(shared: usize) -> &'a Shared {
    // SAFETY: `start`'s pool is a `static` that is never dropped, so the address stays valid.
    unsafe { &*(shared as *const Shared) }
}

/// A worker's loop: joins every job it finds open, as thread `index` (1, 2, …). Never
/// returns. `shared` is [`start`]'s address.
pub fn worker(shared: usize, index: usize) {
    // SAFETY: the worker script passes the address the engine worker got from `start`.
    let shared = unsafe { shared_at(shared) };
    shared.workers.lock().unwrap().push(thread::current());
    let mut seen = shared.state.load(Ordering::Acquire) & !(COUNT | OPEN);
    loop {
        let mut spins = 0u32;
        // wait for a job number not seen yet, and join it if it is still open
        let joined = loop {
            let s = shared.state.load(Ordering::Acquire);
            if s & !(COUNT | OPEN) != seen {
                if s & OPEN == 0 {
                    seen = s & !(COUNT | OPEN);
                    continue;
                }
                if shared.state.compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    seen = s & !(COUNT | OPEN);
                    break true;
                }
                continue;
            }
            if spins < SPIN {
                spins += 1;
                std::hint::spin_loop();
            } else {
                thread::park();
                spins = 0;
            }
        };
        if joined {
            // joined while open: the caller has set the job and waits for this share
            let job = *shared.job.lock().unwrap();
            if let Some(job) = job {
                job(index);
            }
            let before = shared.state.fetch_sub(1, Ordering::AcqRel);
            if before & COUNT == 1 && before & OPEN == 0 {
                if let Some(t) = shared.caller.lock().unwrap().as_ref() {
                    t.unpark();
                }
            }
        }
    }
}

/// Called by a worker's script when [`worker`] trapped: the job in progress fails (a
/// panic in the caller) instead of waiting for that worker forever.
pub fn worker_failed(shared: usize) {
    // SAFETY: as in `worker`.
    let shared = unsafe { shared_at(shared) };
    shared.failed.store(true, Ordering::Release);
    if let Some(t) = shared.caller.lock().unwrap().as_ref() {
        t.unpark();
    }
}

impl Pool {
    /// Threads that run each job, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `f(thread_index)` on the caller (index 0) and on every worker that joins
    /// before the caller's `f` returns, and return when all of those have finished. `f`
    /// must split its work dynamically (a shared chunk counter), so that a worker that
    /// comes late or not at all costs nothing. Only the engine worker calls this.
    pub fn run<F: Fn(usize) + Sync>(&self, f: F) {
        if self.threads == 1 {
            f(0);
            return;
        }
        let s = &self.shared;
        assert!(!s.failed.load(Ordering::Acquire), "a thread of the pool has failed");
        let job: &(dyn Fn(usize) + Sync + '_) = &f;
        // SAFETY: workers read the reference only after joining the job while it is
        // open, and this function does not return before every worker that joined has
        // left (a panic here aborts: wasm builds are panic=abort), so `f` outlives every use.
        let job: &'static Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        *s.job.lock().unwrap() = Some(job);
        s.caller.lock().unwrap().get_or_insert_with(thread::current);
        // a new job number, open, nobody in it yet (the last job's workers all left)
        let next = (s.state.load(Ordering::Acquire) & !(COUNT | OPEN)).wrapping_add(GENERATION);
        s.state.store(next | OPEN, Ordering::Release);
        for t in s.workers.lock().unwrap().iter() {
            t.unpark();
        }
        f(0);
        let mut count = s.state.fetch_and(!OPEN, Ordering::AcqRel) & COUNT;
        let mut spins = 0u32;
        while count != 0 {
            assert!(!s.failed.load(Ordering::Acquire), "a thread of the pool has failed");
            if spins < SPIN {
                spins += 1;
                std::hint::spin_loop();
            } else {
                thread::park();
            }
            count = s.state.load(Ordering::Acquire) & COUNT;
        }
        *s.job.lock().unwrap() = None;
    }
}

/// Hands out `0..n` in chunks of `chunk` to whoever asks first.
struct ChunkCounter {
    next: AtomicUsize,
    n: usize,
    chunk: usize,
}

impl ChunkCounter {
    fn new(n: usize, chunk: usize) -> Self {
        ChunkCounter { next: AtomicUsize::new(0), n, chunk: chunk.max(1) }
    }
    fn next(&self) -> Option<std::ops::Range<usize>> {
        let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
        (start < self.n).then(|| start..(start + self.chunk).min(self.n))
    }
}

/// A mutable slice shared by the threads of one `Pool::run`, each writing ranges that a
/// `ChunkCounter` handed to it alone.
struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: access goes through `range_mut`, whose contract makes ranges disjoint.
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}

impl<'a, T> DisjointSlice<'a, T> {
    fn new(slice: &'a mut [T]) -> Self {
        DisjointSlice { ptr: slice.as_mut_ptr(), len: slice.len(), _borrow: std::marker::PhantomData }
    }

    /// # Safety
    /// No two live results may overlap (ranges from one `ChunkCounter` never do).
    #[allow(clippy::mut_from_ref)]
    unsafe fn range_mut(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len, "range within the slice");
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start) }
    }
}

/// Tiles per chunk, as natively: small enough to balance two noisy cores, large enough
/// that the counter is not contended.
fn chunk_tiles(tiles: usize, threads: usize) -> usize {
    (tiles / (8 * threads)).clamp(1, 16)
}

/// Runs `each(range)` over `0..n` in chunks on every thread; the first error wins.
fn split(pool: &Pool, n: usize, chunk: usize, each: impl Fn(std::ops::Range<usize>) -> Result<(), Error> + Sync) -> Result<(), Error> {
    let counter = ChunkCounter::new(n, chunk);
    let first_error = Mutex::new(None);
    pool.run(|_| {
        while let Some(range) = counter.next() {
            if let Err(e) = each(range) {
                first_error.lock().unwrap().get_or_insert(e);
            }
        }
    });
    first_error.into_inner().unwrap().map_or(Ok(()), Err)
}

/// The engine's products and attention on a [`Pool`].
pub struct PoolGemv(pub &'static Pool);

impl Gemv for PoolGemv {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        let (l, isa) = (*m.layout(), Isa::best_for(m.layout().interleave()));
        if y.len() != l.rows() {
            return Err(Error::BufferSize { what: "output rows", expected: l.rows(), got: y.len() });
        }
        if self.0.threads() == 1 || l.total_bytes() < MIN_SPLIT.load(Ordering::Relaxed) {
            return gemv_tiles(isa, m, tables, 0..l.tiles(), y);
        }
        let out = DisjointSlice::new(y);
        split(self.0, l.tiles(), chunk_tiles(l.tiles(), self.0.threads()), |tiles| {
            let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows());
            // SAFETY: each tile range comes from the counter exactly once.
            gemv_tiles(isa, m, tables, tiles, unsafe { out.range_mut(rows) })
        })
    }

    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        let (l, isa) = (*m.layout(), Isa::best_for(m.layout().interleave()));
        if ys.len() != tables.len() * l.rows() {
            return Err(Error::BufferSize { what: "output rows × batch", expected: tables.len() * l.rows(), got: ys.len() });
        }
        if self.0.threads() == 1 || l.total_bytes() < MIN_SPLIT.load(Ordering::Relaxed) {
            return lutra_core::gemm_with(isa, m, tables, ys);
        }
        if let [t] = tables {
            return self.gemv(m, *t, ys);
        }
        let per_chunk = gemm_chunk_tiles(m);
        let out = DisjointSlice::new(ys);
        split(self.0, l.tiles().div_ceil(per_chunk), 1, |chunks| {
            let tiles = chunks.start * per_chunk..(chunks.end * per_chunk).min(l.tiles());
            let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows());
            let at = |b: usize| b * l.rows() + rows.start..b * l.rows() + rows.end;
            // SAFETY: each chunk comes from the counter exactly once, so these rows of
            // these tokens are written by this call only.
            gemm_tiles(isa, m, tables, tiles, |b| unsafe { out.range_mut(at(b)) })
        })
    }

    fn int8_gemv(&self, m: &Int8Matrix, x: &Int8Activations, y: &mut [f32]) -> Result<(), Error> {
        if y.len() != m.rows() {
            return Err(Error::BufferSize { what: "output rows", expected: m.rows(), got: y.len() });
        }
        let isa = Isa::best();
        if self.0.threads() == 1 || m.bytes() < MIN_SPLIT.load(Ordering::Relaxed) {
            return int8::gemv_rows(isa, m, x, 0..m.rows(), y);
        }
        // 64-row chunks (a multiple of the kernel's 4-row groups): 40 KiB at 640 columns
        const CHUNK_ROWS: usize = 64;
        let chunks = m.rows().div_ceil(CHUNK_ROWS);
        let out = DisjointSlice::new(y);
        split(self.0, chunks, chunk_tiles(chunks, self.0.threads()), |c| {
            let rows = c.start * CHUNK_ROWS..(c.end * CHUNK_ROWS).min(m.rows());
            // SAFETY: each chunk range comes from the counter exactly once.
            int8::gemv_rows(isa, m, x, rows.clone(), unsafe { out.range_mut(rows) })
        })
    }

    fn for_each_token<T: Send>(&self, items: &mut [T], job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync)) -> Result<(), Error> {
        let n = items.len();
        if self.0.threads() == 1 || n < 2 {
            return items.iter_mut().enumerate().try_for_each(|(i, item)| job(item, i));
        }
        let items = DisjointSlice::new(items);
        split(self.0, n, n.div_ceil(4 * self.0.threads()), |range| {
            // SAFETY: each index range comes from the counter exactly once.
            let chunk = unsafe { items.range_mut(range.clone()) };
            chunk.iter_mut().zip(range).try_for_each(|(item, i)| job(item, i))
        })
    }

    fn parallel(&self) -> &dyn Parallel {
        self
    }
}

/// Attention's pieces, one at a time to whichever thread asks first.
impl Parallel for PoolGemv {
    fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
        if self.0.threads() == 1 || pieces.len() < 2 {
            pieces.iter_mut().for_each(job);
            return;
        }
        let counter = ChunkCounter::new(pieces.len(), 1);
        let pieces = DisjointSlice::new(pieces);
        self.0.run(|_| {
            while let Some(range) = counter.next() {
                // SAFETY: each index comes from the counter exactly once.
                unsafe { pieces.range_mut(range) }.iter_mut().for_each(job);
            }
        });
    }
    fn threads(&self) -> usize {
        self.0.threads()
    }
}
