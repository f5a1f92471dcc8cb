// The engine in a Web Worker: loads models (GGUF: the header, then each tensor read
// from a Blob as the import needs it, so wasm memory never holds the file next to the
// weights; llama2.c: streamed chunk by chunk into wasm memory), caches downloads with
// the Cache API, generates token by token, and yields between tokens so a Stop message
// takes effect before the next one.

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
const threadNote = threadsAsked >= 2 && threads === 1 ? `${threadsAsked} threads wanted, running 1: ${why}` : '';
// ?build=threads: the threaded build even on 1 thread (to time what the build itself costs)
const pkg = threads > 1 || (params.get('build') === 'threads' && !why) ? './pkg-threads/' : relaxed ? './pkg-relaxed/' : './pkg/';
// imported while the first messages may already arrive: handlers await it (no top-level
// await, which would leave messages sent before it settles without a handler)
const wasm = import(`${pkg}lutra_wasm.js`).then(async (m) => {
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
let Engine;
let ModelFile;

const MODELS = {
  stories15M: { kind: 'llama2c', url: 'models/stories15M/model.bin', tokenizer: 'models/stories15M/tokenizer.bin', bits: 4 },
  gemma: { kind: 'gguf', url: 'models/gemma-3-270m-q4_k_m.gguf' },
};
const CACHE = 'lutra-models-v1';

let engine = null;
const post = (m) => self.postMessage(m);
// the engine's sampler defaults for the page's form; registered before any load's
// `await wasm`, so posted before its 'ready' (a failed import is load's error to report)
wasm.then((m) => post({ type: 'defaults', sampler: m.sampler_defaults() }), () => {});

// A macrotask without setTimeout's clamping: lets queued messages (Stop) run.
const channel = new MessageChannel();
const yieldToEvents = () => new Promise((resolve) => {
  channel.port1.onmessage = () => resolve();
  channel.port2.postMessage(0);
});

/** Reads `stream` (of `size` bytes) into a ModelFile in wasm memory, reporting progress. */
async function intoWasm(stream, size, label) {
  if (!Number.isFinite(size) || size <= 0) throw new Error(`${label}: unknown size`);
  const file = new ModelFile(size);
  const reader = stream.getReader();
  let received = 0;
  let reported = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    file.push(value);
    received += value.length;
    if (received - reported >= size / 100 || received === size) {
      reported = received;
      post({ type: 'progress', phase: label, done: received, total: size });
    }
  }
  return file;
}

/**
 * A same-origin GGUF as a Blob: the cached one, else downloaded (progress reported) into
 * the cache and read back from it — a Blob the browser keeps outside wasm memory.
 */
async function fetchModelBlob(url, label) {
  const cache = await caches.open(CACHE).catch(() => {
    post({ type: 'note', message: 'This browser offers no Cache Storage here: the model will be downloaded again next time.' });
    return null;
  });
  const cached = cache ? await cache.match(url) : undefined;
  if (cached) return cached.blob();
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: the server answered ${response.status} ${response.statusText}`);
  const size = Number(response.headers.get('Content-Length'));
  const [forCache, forCount] = cache ? response.body.tee() : [null, response.body];
  const storing = cache
    ? cache.put(url, new Response(forCache, { headers: response.headers })).then(() => true, (e) => {
      post({ type: 'note', message: `The model could not be cached (storage quota refused?): ${e.message}. It works, but a reload downloads it again.` });
      return false;
    })
    : Promise.resolve(false);
  // without a cache the chunks make the Blob; with one they are only counted
  const chunks = [];
  const reader = forCount.getReader();
  let received = 0;
  let reported = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (!cache) chunks.push(value);
    received += value.length;
    if (received - reported >= size / 100 || received === size) {
      reported = received;
      post({ type: 'progress', phase: `downloading ${label}`, done: received, total: size });
    }
  }
  if (await storing) return (await cache.match(url)).blob();
  if (!chunks.length) throw new Error(`${url}: the download could not be kept (cache refused it); reload to retry`);
  return new Blob(chunks);
}

/** A GGUF Blob (a same-origin model or a file from disk) into an Engine, read in pieces. */
function engineFromGgufBlob(blob) {
  const reader = new FileReaderSync();
  const read = (offset, length) => new Uint8Array(reader.readAsArrayBuffer(blob.slice(offset, offset + length)));
  return Engine.from_gguf_blob(blob.size, read, 0, importProgress('importing tensors'));
}

/** A same-origin model file: from the cache when it is there, else downloaded (and cached). */
async function fetchModelFile(url, label) {
  let cache = null;
  try {
    cache = await caches.open(CACHE);
  } catch {
    post({ type: 'note', message: 'This browser offers no Cache Storage here: the model will be downloaded again next time.' });
  }
  let response = cache ? await cache.match(url) : undefined;
  const cached = Boolean(response);
  let storing = Promise.resolve();
  if (!response) {
    response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: the server answered ${response.status} ${response.statusText}`);
    if (cache) {
      storing = cache.put(url, response.clone()).catch((e) => {
        post({ type: 'note', message: `The model could not be cached (storage quota refused?): ${e.message}. It works, but a reload downloads it again.` });
      });
    }
  }
  const size = Number(response.headers.get('Content-Length'));
  const file = await intoWasm(response.body, size, `${cached ? 'reading the cached' : 'downloading'} ${label}`);
  await storing;
  return file;
}

async function fetchSmall(url) {
  const cache = await caches.open(CACHE).catch(() => null);
  let response = cache ? await cache.match(url) : undefined;
  if (!response) {
    response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: the server answered ${response.status} ${response.statusText}`);
    if (cache) await cache.put(url, response.clone()).catch(() => {});
  }
  return new Uint8Array(await response.arrayBuffer());
}

const importProgress = (label) => (done, total) => post({ type: 'progress', phase: label, done, total });

async function load({ model, files }) {
  const m = await wasm;
  ({ Engine, ModelFile } = m);
  const t0 = performance.now();
  let next;
  if (files && files.length) {
    const gguf = files.find((f) => f.name.toLowerCase().endsWith('.gguf'));
    const tokenizer = files.find((f) => f.name === 'tokenizer.bin');
    const checkpoint = files.find((f) => f !== tokenizer && f !== gguf);
    if (gguf) {
      next = engineFromGgufBlob(gguf);
    } else if (checkpoint && tokenizer) {
      const file = await intoWasm(checkpoint.stream(), checkpoint.size, `reading ${checkpoint.name}`);
      const tok = new Uint8Array(await tokenizer.arrayBuffer());
      next = Engine.from_llama2c(file, tok, 4, 0, importProgress('quantizing to 4 bits'));
    } else if (checkpoint) {
      const bytes = new Uint8Array(await checkpoint.slice(0, 4).arrayBuffer());
      if (m.is_gguf(bytes)) {
        next = engineFromGgufBlob(checkpoint);
      } else {
        throw new Error(`${checkpoint.name}: not a GGUF file; a llama2.c checkpoint needs its tokenizer.bin selected with it`);
      }
    } else {
      throw new Error('pick a .gguf file, or a llama2.c model.bin together with its tokenizer.bin');
    }
  } else {
    const m = MODELS[model];
    if (!m) throw new Error(`unknown model ${model}`);
    if (m.kind === 'gguf') {
      next = engineFromGgufBlob(await fetchModelBlob(m.url, model));
    } else {
      const tok = await fetchSmall(m.tokenizer);
      const file = await fetchModelFile(m.url, model);
      next = Engine.from_llama2c(file, tok, m.bits, 0, importProgress(`quantizing to ${m.bits} bits`));
    }
  }
  // only a model that loaded replaces the one in use
  engine?.free();
  engine = next;
  const threadsUsed = m.threads();
  post({
    type: 'ready', summary: engine.summary(), chat: engine.has_chat(), context: engine.context(),
    isa: `${m.best_isa()} (${m.simd_variant()}${m.threads_built() ? ', threaded build' : ''})`,
    threads: threadsUsed, threadNote, loadMs: performance.now() - t0, memory: m.memory_bytes(),
  });
}

async function generate({ prompt, chat, n, sampler }) {
  if (!engine) throw new Error('no model loaded');
  const s = sampler;
  const t0 = performance.now();
  const promptTokens = engine.start(prompt, chat, n, s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.repeat_last_n, s.seed);
  engine.prefill();
  const t1 = performance.now();
  let lastYield = t1;
  for (;;) {
    const piece = engine.next_token();
    if (piece === undefined) break;
    const now = performance.now();
    post({ type: 'token', text: piece, generated: engine.generated(), ms: now - t1 });
    if (now - lastYield > 16) {
      await yieldToEvents();
      lastYield = performance.now();
    }
  }
  const t2 = performance.now();
  post({
    type: 'done',
    reason: engine.stop_reason(),
    promptTokens,
    prefillMs: t1 - t0,
    generated: engine.generated(),
    genMs: t2 - t1,
    position: engine.position(),
    context: engine.context(),
  });
}

self.onmessage = async ({ data }) => {
  if (data.type === 'stop') {
    // runs between tokens (the loop yields to events); the engine stops before the next
    engine?.cancel();
    return;
  }
  try {
    if (data.type === 'load') await load(data);
    else if (data.type === 'generate') await generate(data);
    else if (data.type === 'reset') engine?.reset();
  } catch (e) {
    post({ type: 'error', message: e?.message || String(e), during: data.type, loaded: Boolean(engine) });
  }
};
