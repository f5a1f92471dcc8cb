// Which wasm build the engine worker runs, and its threads: relaxed SIMD where the
// browser validates it, the threaded build (with its Web Workers started) where threads
// are asked for and possible. Imported by worker.js only.

// A module whose one function runs i8x16.relaxed_swizzle: it validates where the engine
// has relaxed SIMD, and then the build that uses it (a bare pshufb/tbl per lookup) loads.
const RELAXED_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 43, 1, 41, 0,
  253, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  253, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  253, 128, 2, 11,
]);
const params = new URLSearchParams(self.location.search);
const asked = params.get('simd');
const relaxed = asked ? asked === 'relaxed' : WebAssembly.validate(RELAXED_PROBE);
// ?threads=N: N ≥ 2 runs the threaded build (pkg-threads: relaxed SIMD + atomics on
// shared memory) with N − 1 more Web Workers; 1 the single-thread builds. Threads need
// crossOriginIsolated (SharedArrayBuffer) and relaxed SIMD (the threaded build has it);
// without them the page runs on one thread and says why. The default, 2 threads where
// the browser reports 2 cores or more, is measured (BENCHMARKS.md, "Threads in the
// browser"): on a 2-vCPU host shared with other work, Gemma 3 270M decodes up to 1.8×
// faster on 2 threads and stories15M about as fast; more than 2 has not been measured.
const DEFAULT_THREADS = Math.min(2, navigator.hardwareConcurrency || 1);
const threadsAsked = Number(params.get('threads') || DEFAULT_THREADS);
const why = !self.crossOriginIsolated ? 'the page is not cross-origin isolated (no SharedArrayBuffer)'
  : !WebAssembly.validate(RELAXED_PROBE) ? 'this browser lacks relaxed SIMD, which the threaded build uses'
  : asked === 'baseline' ? 'the threaded build uses relaxed SIMD, and ?simd=baseline was asked'
  : '';
const threads = Number.isInteger(threadsAsked) && threadsAsked >= 2 && !why ? threadsAsked : 1;
export const threadNote = threadsAsked >= 2 && threads === 1 ? `${threadsAsked} threads wanted, running 1: ${why}` : '';
// ?build=threads: the threaded build even on 1 thread (to time what the build itself costs)
const pkg = threads > 1 || (params.get('build') === 'threads' && !why) ? './pkg-threads/' : relaxed ? './pkg-relaxed/' : './pkg/';
// imported while the first messages may already arrive: handlers await it (no top-level
// await, which would leave messages sent before it settles without a handler)
export const wasm = import(`${pkg}lutra_wasm.js`).then(async (m) => {
  if (pkg !== './pkg-threads/') {
    await m.default();
    return m;
  }
  const module = await WebAssembly.compileStreaming(fetch(new URL(`${pkg}lutra_wasm_bg.wasm`, import.meta.url)));
  const { memory } = await m.default({ module_or_path: module });
  const pool = m.start_threads(threads);
  // ?split=BYTES (measurements): the smallest matrix whose product is split across threads
  if (params.has('split')) m.set_min_split_bytes(Number(params.get('split')));
  const script = new URL('./thread.js', import.meta.url);
  const pkgUrl = new URL(`${pkg}lutra_wasm.js`, import.meta.url).href;
  await Promise.all(Array.from({ length: threads - 1 }, (_, i) => new Promise((resolve, reject) => {
    const w = new Worker(script, { type: 'module', name: `lutra-${i + 1}` });
    w.onmessage = ({ data }) => (data.type === 'ready' ? resolve() : reject(new Error(data.message)));
    w.onerror = (e) => reject(new Error(`thread ${i + 1} did not start: ${e.message}`));
    w.postMessage({ pkg: pkgUrl, module, memory, pool, index: i + 1 });
  })));
  return m;
});
