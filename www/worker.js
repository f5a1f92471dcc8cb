// The engine in a Web Worker: loads models (GGUF: the header, then each tensor read
// from a Blob as the import needs it, so wasm memory never holds the file next to the
// weights; llama2.c: streamed chunk by chunk into wasm memory), generates token by
// token, and yields between tokens so a Stop message takes effect before the next one.
// Which wasm build runs is build.js's choice; where model bytes come from, source.js's.

import { threadNote, wasm } from './build.js';
import { fetchModelBlob, fetchModelFile, fetchSmall, intoWasm } from './source.js';

let Engine;

const MODELS = {
  stories15M: { kind: 'llama2c', url: 'models/stories15M/model.bin', tokenizer: 'models/stories15M/tokenizer.bin', bits: 4 },
  gemma: { kind: 'gguf', url: 'models/gemma-3-270m-q4_k_m.gguf' },
  qwen: { kind: 'gguf', url: 'models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf' },
};

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


/** A GGUF Blob (a same-origin model or a file from disk) into an Engine, read in pieces. */
function engineFromGgufBlob(blob) {
  const reader = new FileReaderSync();
  // the engine copies each piece before asking for the next: detaching the one before
  // frees it at once, not at the next garbage collection (hundreds of MB on a big file)
  let previous = null;
  const read = (offset, length) => {
    previous?.transfer?.(0);
    previous = reader.readAsArrayBuffer(blob.slice(offset, offset + length));
    return new Uint8Array(previous);
  };
  return Engine.from_gguf_blob(blob.size, read, 0, importProgress('importing tensors'));
}


const importProgress = (label) => (done, total) => post({ type: 'progress', phase: label, done, total });

async function load({ model, files }) {
  const m = await wasm;
  ({ Engine } = m);
  const io = { post, ModelFile: m.ModelFile };
  const t0 = performance.now();
  let next;
  if (files && files.length) {
    const gguf = files.find((f) => f.name.toLowerCase().endsWith('.gguf'));
    const tokenizer = files.find((f) => f.name === 'tokenizer.bin');
    const checkpoint = files.find((f) => f !== tokenizer && f !== gguf);
    if (gguf) {
      next = engineFromGgufBlob(gguf);
    } else if (checkpoint && tokenizer) {
      const file = await intoWasm(checkpoint.stream(), checkpoint.size, `reading ${checkpoint.name}`, io);
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
      next = engineFromGgufBlob(await fetchModelBlob(m.url, model, io));
    } else {
      const tok = await fetchSmall(m.tokenizer);
      const file = await fetchModelFile(m.url, model, io);
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
