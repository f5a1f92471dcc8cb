// Model bytes for the engine worker: same-origin files through the Cache API (downloaded
// once, progress reported), GGUFs kept as Blobs outside wasm memory, llama2.c files
// streamed into wasm memory chunk by chunk. `io` is `{ post, ModelFile }`: how progress
// and notes reach the page, and the wasm build's ModelFile.

export const CACHE = 'lutra-models-v1';

/** Reads `stream` (of `size` bytes) into an `io.ModelFile` in wasm memory, reporting progress by `io.post`. */
export async function intoWasm(stream, size, label, io) {
  if (!Number.isFinite(size) || size <= 0) throw new Error(`${label}: unknown size`);
  const file = new io.ModelFile(size);
  await eachChunk(stream, size, label, io, (chunk) => file.push(chunk));
  return file;
}

/** `onChunk` for each chunk of `stream` (of `size` bytes), progress posted every 1 %. */
async function eachChunk(stream, size, label, io, onChunk) {
  const reader = stream.getReader();
  const count = progressCounter(size, label, io);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    onChunk(value);
    count(value.length);
  }
}

/** `count(bytes)` for each chunk of a `size`-byte download: posts progress every 1 %. */
function progressCounter(size, label, io) {
  let received = 0;
  let reported = 0;
  return (bytes) => {
    received += bytes;
    if (received - reported >= size / 100 || received === size) {
      reported = received;
      io.post({ type: 'progress', phase: label, done: received, total: size });
    }
  };
}

/**
 * A same-origin GGUF as a Blob: the cached one, else downloaded (progress reported) into
 * the cache and read back from it — a Blob the browser keeps outside wasm memory. Where
 * the cache refuses it (a storage quota: a private window, a full disk), it is
 * downloaded again into memory (`useCache` false).
 */
export async function fetchModelBlob(url, label, io, useCache = true) {
  const cache = !useCache ? null : await caches.open(CACHE).catch(() => {
    io.post({ type: 'note', message: 'This browser offers no Cache Storage here: the model will be downloaded again next time.' });
    return null;
  });
  const cached = cache ? await cache.match(url) : undefined;
  if (cached) return cached.blob();
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: the server answered ${response.status} ${response.statusText}`);
  const size = Number(response.headers.get('Content-Length'));
  const phase = `downloading ${label}`;
  if (!cache) return new Blob(await chunksOf(response.body, size, phase, io));
  // the bytes pass once, counted on their way into the cache (a tee would queue the
  // faster branch's copy in memory), then are read back from it as a disk-backed Blob
  const counted = response.body.pipeThrough(counter(size, phase, io));
  const stored = await cache.put(url, new Response(counted, { headers: response.headers })).then(() => true, (e) => {
    io.post({ type: 'note', message: `The model could not be cached (storage quota refused?): ${e.message}. It works, but a reload downloads it again.` });
    return false;
  });
  if (stored) return (await cache.match(url)).blob();
  return fetchModelBlob(url, label, io, false);
}

/** Every chunk of `stream`, progress posted as they come. */
async function chunksOf(stream, size, label, io) {
  const chunks = [];
  await eachChunk(stream, size, label, io, (chunk) => chunks.push(chunk));
  return chunks;
}

/** A stream that passes its bytes through, posting progress every 1 % of `size`. */
function counter(size, label, io) {
  const count = progressCounter(size, label, io);
  return new TransformStream({
    transform(chunk, out) {
      count(chunk.length);
      out.enqueue(chunk);
    },
  });
}

/** A same-origin model file: from the cache when it is there, else downloaded (and cached). */
export async function fetchModelFile(url, label, io) {
  let cache = null;
  try {
    cache = await caches.open(CACHE);
  } catch {
    io.post({ type: 'note', message: 'This browser offers no Cache Storage here: the model will be downloaded again next time.' });
  }
  let response = cache ? await cache.match(url) : undefined;
  const cached = Boolean(response);
  let storing = Promise.resolve();
  if (!response) {
    response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: the server answered ${response.status} ${response.statusText}`);
    if (cache) {
      storing = cache.put(url, response.clone()).catch((e) => {
        io.post({ type: 'note', message: `The model could not be cached (storage quota refused?): ${e.message}. It works, but a reload downloads it again.` });
      });
    }
  }
  const size = Number(response.headers.get('Content-Length'));
  const file = await intoWasm(response.body, size, `${cached ? 'reading the cached' : 'downloading'} ${label}`, io);
  await storing;
  return file;
}

/** A small same-origin file (a tokenizer), through the cache. */
export async function fetchSmall(url) {
  const cache = await caches.open(CACHE).catch(() => null);
  let response = cache ? await cache.match(url) : undefined;
  if (!response) {
    response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: the server answered ${response.status} ${response.statusText}`);
    if (cache) await cache.put(url, response.clone()).catch(() => {});
  }
  return new Uint8Array(await response.arrayBuffer());
}
