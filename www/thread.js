// One thread of the threaded engine (pkg-threads): the engine worker (worker.js) starts
// threads − 1 of these and sends each the compiled module, the shared memory and the pool's
// address. It instantiates the module on that memory, says it is ready, then runs the
// pool's loop (lutra_wasm::threads) until the page closes; it never returns.
self.onmessage = async ({ data: { pkg, module, memory, pool, index } }) => {
  let m;
  try {
    m = await import(pkg);
    m.initSync({ module, memory });
  } catch (e) {
    self.postMessage({ type: 'error', message: `thread ${index}: ${e?.message || e}` });
    return;
  }
  self.postMessage({ type: 'ready' });
  try {
    m.pool_worker(pool, index);
  } catch (e) {
    // a trap (a panic aborts): the engine's job in progress fails instead of hanging
    m.pool_worker_failed(pool);
    self.postMessage({ type: 'error', message: `thread ${index}: ${e?.message || e}` });
  }
};
