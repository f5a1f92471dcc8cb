//! A persistent thread pool for GEMV-sized jobs (tens of microseconds): workers spin
//! briefly on a generation counter, then park, so back-to-back matrix products do not
//! pay a wake-up each. Work inside a job is handed out in chunks through an atomic
//! counter, so a thread slowed by a noisy neighbour simply takes fewer chunks, and
//! (`run_shared`) a thread that is not running at all — descheduled because another
//! process wants a core — misses the job instead of holding it up.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_micros(200);

type Job = dyn Fn(usize) + Sync;

/// `Shared::joined`: the job's generation above these bits, then `CLOSED`, then how many
/// workers joined it.
const GENERATION_SHIFT: u32 = 16;
const CLOSED: u64 = 1 << 15;
const JOINED_MASK: u64 = CLOSED - 1;

struct Shared {
    /// Incremented once per job; workers run each generation once.
    generation: AtomicUsize,
    /// The current job's generation, whether it still takes workers, and how many joined:
    /// one word, so joining and closing cannot cross.
    joined: AtomicU64,
    /// Workers that joined the current job and have finished it.
    finished: AtomicUsize,
    /// The current job, lifetime-erased (see `dispatch`).
    job: Mutex<Option<&'static Job>>,
    shutdown: AtomicBool,
    caller: Mutex<Option<Thread>>,
    /// Set by a worker whose share of the job panicked; `dispatch` re-raises it.
    worker_panicked: AtomicBool,
    /// Workers that have started (`Pool::new` waits for all of them).
    started: AtomicUsize,
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
        // the joined count has 15 bits; no CPU offers that many threads to one process
        let threads = threads.clamp(1, JOINED_MASK as usize);
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            joined: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            job: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            caller: Mutex::new(None),
            worker_panicked: AtomicBool::new(false),
            started: AtomicUsize::new(0),
        });
        let workers = (1..threads)
            .map(|index| {
                let shared = Arc::clone(&shared);
                let handle = thread::Builder::new()
                    .name(format!("lutra-{index}"))
                    .spawn(move || worker(&shared, index, threads - 1))
                    .expect("spawn worker thread");
                let t = handle.thread().clone();
                (handle, t)
            })
            .collect::<Vec<_>>();
        // every worker past its thread's start-up (which allocates) before the pool is
        // used: a caller that then forbids allocation (the Pi binary seals its arena while
        // generating) must not meet a worker that the scheduler started late
        while shared.started.load(Ordering::Acquire) < workers.len() {
            thread::yield_now();
        }
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
        self.dispatch(&f, false);
    }

    /// Run `f(thread_index)` on the caller and on every worker that starts it before the
    /// caller's own call returns; workers arriving later skip it. For jobs that share
    /// their work out (a `ChunkCounter`), so any thread's call may do all of it: when
    /// another process holds a core, the job no longer waits a scheduler time slice for
    /// the worker it displaced (measured on 16 cores beside one busy process: 16 threads
    /// decoded 10× faster than when every job waited for every worker; BENCHMARKS.md).
    pub fn run_shared<F: Fn(usize) + Sync>(&self, f: F) {
        self.dispatch(&f, true);
    }

    fn dispatch(&self, f: &(dyn Fn(usize) + Sync + '_), late_workers_skip: bool) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        // a panic re-raised below poisons the lock; the pool itself is still sound
        let _turn = self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // (`_turn` keeps any other caller from replacing the job until this one is done.)
        // A worker reads the reference only after joining this job (`joined`) and stops
        // using it before counting itself in `finished`; this function does not return
        // (or unwind past `f`'s owner) before every worker that joined has finished, and
        // once it closes the job (or, without `late_workers_skip`, once all joined) no
        // other worker can join.
        // SAFETY: by the above, `f` outlives every use of the lifetime-erased reference.
        let job: &'static Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(f) };
        *self.shared.job.lock().unwrap() = Some(job);
        *self.shared.caller.lock().unwrap() = Some(thread::current());
        self.shared.finished.store(0, Ordering::Relaxed);
        let generation = self.shared.generation.load(Ordering::Relaxed).wrapping_add(1);
        self.shared.joined.store((generation as u64) << GENERATION_SHIFT, Ordering::Release);
        self.shared.generation.store(generation, Ordering::Release);
        for (_, t) in &self.workers {
            t.unpark();
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        let joined = if late_workers_skip {
            (self.shared.joined.fetch_or(CLOSED, Ordering::SeqCst) & JOINED_MASK) as usize
        } else {
            self.workers.len()
        };
        let start = Instant::now();
        while self.shared.finished.load(Ordering::SeqCst) != joined {
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

/// Joins job `generation` if it is still the current one and open; false otherwise.
fn join(shared: &Shared, generation: usize) -> bool {
    let mut word = shared.joined.load(Ordering::Acquire);
    loop {
        if word >> GENERATION_SHIFT != (generation as u64) & (u64::MAX >> GENERATION_SHIFT) || word & CLOSED != 0 {
            return false;
        }
        match shared.joined.compare_exchange_weak(word, word + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => word = now,
        }
    }
}

/// Worker `index` of `workers`: runs each job it joins, then wakes the caller if it was
/// the last.
fn worker(shared: &Shared, index: usize, workers: usize) {
    shared.started.fetch_add(1, Ordering::Release);
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
        if !join(shared, generation) {
            continue;
        }
        let job = *shared.job.lock().unwrap();
        if let Some(job) = job {
            // A panicking job must still release the caller, which then raises it: the
            // default hook has printed the message, and no half-written output is used.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(index))).is_err() {
                shared.worker_panicked.store(true, Ordering::Release);
            }
        }
        // SeqCst with the caller's close-then-read: either it sees this worker finished or
        // this worker sees the job closed and wakes it (a missed wake costs one 100 µs nap)
        let finished = shared.finished.fetch_add(1, Ordering::SeqCst) + 1;
        let word = shared.joined.load(Ordering::SeqCst);
        let last = if word & CLOSED != 0 { finished == (word & JOINED_MASK) as usize } else { finished == workers };
        if last {
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

#[cfg(test)]
mod tests {
    use super::*;
    use lutra_core::threads::ChunkCounter;

    /// Jobs per test: Miri (which checks the pool's unsafe code and atomics for races)
    /// runs a few; natively, enough rounds for the scheduler to interleave them every way.
    const ROUNDS: usize = if cfg!(miri) { 6 } else { 300 };

    #[test]
    fn every_thread_runs_every_job() {
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            for round in 0..ROUNDS {
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
                    for _ in 0..ROUNDS {
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
        assert_eq!(hits.load(Ordering::Relaxed), 2 * ROUNDS);
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
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            for round in 0..ROUNDS {
                let counter = ChunkCounter::new(100, 7);
                let seen: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
                let shares: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
                let job = |i: usize| {
                    shares[i].fetch_add(1, Ordering::Relaxed);
                    while let Some(r) = counter.next() {
                        for i in r {
                            seen[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                };
                if round % 2 == 0 {
                    pool.run(job);
                } else {
                    pool.run_shared(job);
                }
                assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "round {round}: every index once");
                // the caller always runs its share; a worker at most once (shared jobs may
                // finish before a worker arrives), and every worker in a plain `run`
                assert_eq!(shares[0].load(Ordering::Relaxed), 1);
                let most = if round % 2 == 0 { 1..=1 } else { 0..=1 };
                assert!(shares.iter().all(|s| most.contains(&s.load(Ordering::Relaxed))), "round {round}");
            }
        }
    }

    #[test]
    fn shared_jobs_finish_while_workers_cannot_run() {
        // more threads than this machine has cores, beside as many busy threads: workers
        // are often descheduled when a job starts, and the job must not need them
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let pool = Pool::new(cores + 1);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..cores {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            for _ in 0..ROUNDS {
                let counter = ChunkCounter::new(64, 1);
                let done = AtomicUsize::new(0);
                pool.run_shared(|_| {
                    while let Some(r) = counter.next() {
                        done.fetch_add(r.len(), Ordering::Relaxed);
                    }
                });
                assert_eq!(done.load(Ordering::Relaxed), 64);
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn a_shared_job_panic_reaches_the_caller() {
        let pool = Pool::new(3);
        let fails = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run_shared(|i| {
                if i == 0 {
                    panic!("the caller's share fails (expected by this test)");
                }
            })
        }));
        assert!(fails.is_err());
        let hits = AtomicUsize::new(0);
        pool.run_shared(|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert!((1..=3).contains(&hits.load(Ordering::Relaxed)), "the next job runs clean");
    }
}
