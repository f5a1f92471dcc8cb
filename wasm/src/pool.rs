//! The page's threads as the engine's `Workers`: the bindings the worker scripts call
//! and `products`, which every engine call runs its products through. The pool itself
//! (shared memory, `memory.atomic.wait32`) is `crate::threads`, in the threaded build only.

use lutra_core::engine::SingleThread;
use lutra_core::threads::{Split, Workers};
use wasm_bindgen::prelude::*;

#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
use crate::threads;

/// Whether this build can run threads (the threaded build: `+atomics`, shared memory).
#[wasm_bindgen]
pub fn threads_built() -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "atomics"))
}

/// Threaded build: makes the pool of `threads` threads (the calling engine worker and
/// `threads − 1` Web Workers it starts, each calling [`pool_worker`] with the address
/// returned here). Engines use the pool from then on. One pool per page.
#[wasm_bindgen]
pub fn start_threads(threads: usize) -> Result<usize, JsError> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    return threads::start(threads).map_err(|e| JsError::new(&e));
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    Err(JsError::new(&format!("{threads} threads asked, but this build of lutra-wasm has no threads")))
}

/// Threaded build: a pool worker's loop (never returns); `pool` is [`start_threads`]'s
/// address, `index` the worker's number (1, 2, …).
#[wasm_bindgen]
pub fn pool_worker(pool: usize, index: usize) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    threads::worker(pool, index);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = (pool, index);
}

/// Threaded build: called by a worker's script when [`pool_worker`] trapped, so the
/// engine's job in progress fails instead of waiting for that worker forever.
#[wasm_bindgen]
pub fn pool_worker_failed(pool: usize) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    threads::worker_failed(pool);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = pool;
}

/// Threaded build: products of matrices under `bytes` stay on one thread (default
/// `threads::MIN_SPLIT_BYTES`; a knob for measurements).
#[wasm_bindgen]
pub fn set_min_split_bytes(bytes: usize) {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    threads::set_min_split_bytes(bytes);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    let _ = bytes;
}

/// Threads the engine's products run on: 1, or the pool's size once started.
#[wasm_bindgen]
pub fn threads() -> usize {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    if let Some(pool) = threads::pool() {
        return pool.threads();
    }
    1
}

/// Who computes the products: the calling thread, or the pool when the page started one
/// (products of matrices under its `MIN_SPLIT_BYTES` stay on the caller).
pub(crate) fn products() -> Split<'static, dyn Workers> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    if let Some(pool) = threads::pool() {
        return Split::new(pool as &dyn Workers).min_split_bytes(threads::min_split_bytes());
    }
    Split::new(&SingleThread as &dyn Workers)
}
