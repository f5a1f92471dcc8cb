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

use lutra_core::threads::Workers;

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

/// The smallest matrix (bytes) whose product is split.
pub fn min_split_bytes() -> usize {
    MIN_SPLIT.load(Ordering::Relaxed)
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

/// The engine's products on this pool, split by lutra-core (`lutra_core::threads::Split`).
impl Workers for Pool {
    fn threads(&self) -> usize {
        self.threads
    }
    fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        Pool::run(self, job);
    }
}
