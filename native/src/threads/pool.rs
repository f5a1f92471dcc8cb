//! A persistent thread pool for GEMV-sized jobs (tens of microseconds): workers spin
//! briefly on a generation counter, then park, so back-to-back matrix products do not
//! pay a wake-up each. Work inside a job is handed out in chunks through an atomic
//! counter, so a thread slowed by a noisy neighbour simply takes fewer chunks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_micros(200);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Incremented once per job; workers run each generation once.
    generation: AtomicUsize,
    /// Workers still running the current job.
    pending: AtomicUsize,
    /// The current job, lifetime-erased (see `run`).
    job: Mutex<Option<&'static Job>>,
    shutdown: AtomicBool,
    caller: Mutex<Option<Thread>>,
    /// Set by a worker whose share of the job panicked; `run` re-raises it.
    worker_panicked: AtomicBool,
}

/// A fixed set of worker threads that run one job at a time, together with the caller.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<(JoinHandle<()>, Thread)>,
    /// Held for a whole `run`: the pool is `Sync`, and two callers' jobs must not overlap.
    running: Mutex<()>,
}

impl Pool {
    /// A pool of `threads` threads in all, counting the caller (so `threads − 1` workers).
    pub fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            job: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            caller: Mutex::new(None),
            worker_panicked: AtomicBool::new(false),
        });
        let workers = (1..threads.max(1))
            .map(|index| {
                let shared = Arc::clone(&shared);
                let handle = thread::Builder::new()
                    .name(format!("lutra-{index}"))
                    .spawn(move || worker(&shared, index))
                    .expect("spawn worker thread");
                let t = handle.thread().clone();
                (handle, t)
            })
            .collect();
        Pool { shared, workers, running: Mutex::new(()) }
    }

    /// Threads that run each job, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Run `f(thread_index)` on every thread of the pool (the caller is index 0) and
    /// return when all have finished. Callers on other threads wait their turn; a panic
    /// in any thread's share is raised here once every thread is done.
    pub fn run<F: Fn(usize) + Sync>(&self, f: F) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        // a panic re-raised below poisons the lock; the pool itself is still sound
        let _turn = self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let job: &(dyn Fn(usize) + Sync + '_) = &f;
        // (`_turn` keeps any other caller from replacing the job until this one is done.)
        // SAFETY: the reference is only used by workers between the generation bump
        // below and `pending` reaching zero, and this function does not return (or
        // unwind past `f`'s owner) before `pending` is zero, so `f` outlives every use.
        let job: &'static Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        *self.shared.job.lock().unwrap() = Some(job);
        *self.shared.caller.lock().unwrap() = Some(thread::current());
        self.shared.pending.store(self.workers.len(), Ordering::Release);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        for (_, t) in &self.workers {
            t.unpark();
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        let start = Instant::now();
        while self.shared.pending.load(Ordering::Acquire) != 0 {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                thread::park_timeout(Duration::from_micros(100));
            }
        }
        *self.shared.job.lock().unwrap() = None;
        // cleared whichever panic is raised, so the next job starts clean
        let worker_panicked = self.shared.worker_panicked.swap(false, Ordering::AcqRel);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
        if worker_panicked {
            panic!("a pool worker panicked (its message is printed above)");
        }
    }
}

fn worker(shared: &Shared, index: usize) {
    let mut seen = 0usize;
    loop {
        let start = Instant::now();
        let generation = loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = shared.generation.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                thread::park_timeout(Duration::from_millis(10));
            }
        };
        seen = generation;
        let job = *shared.job.lock().unwrap();
        if let Some(job) = job {
            // A panicking job must still release the caller, which then raises it: the
            // default hook has printed the message, and no half-written output is used.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(index))).is_err() {
                shared.worker_panicked.store(true, Ordering::Release);
            }
        }
        if shared.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(t) = shared.caller.lock().unwrap().as_ref() {
                t.unpark();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        for (handle, t) in self.workers.drain(..) {
            t.unpark();
            let _ = handle.join();
        }
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
    pub fn next(&self) -> Option<std::ops::Range<usize>> {
        let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
        (start < self.n).then(|| start..(start + self.chunk).min(self.n))
    }
}

/// A mutable slice shared by the threads of one `Pool::run`, each writing ranges that
/// a `ChunkCounter` handed to it alone.
pub struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: access goes through `range_mut`, whose contract makes ranges disjoint.
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}

impl<'a, T> DisjointSlice<'a, T> {
    /// Borrows `slice` mutably for as long as the `DisjointSlice` lives.
    pub fn new(slice: &'a mut [T]) -> Self {
        DisjointSlice { ptr: slice.as_mut_ptr(), len: slice.len(), _borrow: std::marker::PhantomData }
    }

    /// # Safety
    /// No two live results may overlap (ranges from one `ChunkCounter` never do).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len, "range within the slice");
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_every_job() {
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            for round in 0..200 {
                let hits = AtomicUsize::new(0);
                pool.run(|i| {
                    assert!(i < threads);
                    hits.fetch_add(1 + round % 2, Ordering::Relaxed);
                });
                assert_eq!(hits.load(Ordering::Relaxed), threads * (1 + round % 2));
            }
        }
    }

    #[test]
    fn concurrent_callers_take_turns() {
        let pool = Pool::new(2);
        let hits = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..300 {
                        let mine = AtomicUsize::new(0);
                        pool.run(|_| {
                            mine.fetch_add(1, Ordering::Relaxed);
                        });
                        assert_eq!(mine.load(Ordering::Relaxed), 2, "each of the 2 threads ran this caller's job once");
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(hits.load(Ordering::Relaxed), 600);
    }

    #[test]
    fn a_worker_panic_reaches_the_caller() {
        let pool = Pool::new(2);
        let fails = |fail: &(dyn Fn(usize) -> bool + Sync)| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.run(|i| {
                    if fail(i) {
                        panic!("share {i} fails (expected by this test)");
                    }
                })
            }))
            .is_err()
        };
        // every share, then none (no stale panic), then the worker's alone, then none
        assert!(fails(&|_| true));
        assert!(!fails(&|_| false));
        assert!(fails(&|i| i == 1));
        assert!(!fails(&|_| false));
    }

    #[test]
    fn chunks_cover_the_range_once() {
        let pool = Pool::new(2);
        let counter = ChunkCounter::new(1000, 7);
        let seen: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        pool.run(|_| {
            while let Some(r) = counter.next() {
                for i in r {
                    seen[i].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
    }
}
