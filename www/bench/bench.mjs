// Tokens/s of the page in headless Chromium against the native CLI on the same host and,
// for GGUF files, against wllama (npm @wllama/wllama: llama.cpp in wasm, 1 thread, the
// same file from the same origin, bench/wllama.html), interleaved round by round:
// `node bench/bench.mjs [--gemma] [--rounds 5] [--n 128] [--simd relaxed,baseline] [--threads 1,1t,2]
// [--variants SIMD:THREADS,...] [--native-tiers best,avx2,ssse3] [--no-native] [--no-wllama] [--wllama-threads 1,2]
// [--prompt TEXT] [--gguf FILE,...]`,
// after `cargo xtask test-web [--gemma]` has built www/pkg and placed the models. --gguf adds
// files from disk, loaded through the page's file picker (their first-token time counts the
// load; wllama reads a hard link under www/models/bench/). Prints one JSON line per model,
// then a table; medians over the rounds. wllama's figure is llama.cpp's own
// predicted_per_second (its decode alone); lutra's counts from the last prompt token on.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const rounds = Number(opt('--rounds', 5));
const n = Number(opt('--n', 128));
// wasm builds to time, each in its own page per round: the first fills the table's column.
// Each SIMD variant runs at each of --threads: N threads (N ≥ 2: the threaded build with
// N − 1 more Web Workers), 1 (the single-thread build), 1t (the threaded build on 1 thread)
// (N:BYTES adds ?split=BYTES: products of smaller matrices stay on one thread)
// (--variants relaxed:1,relaxed:2,baseline:1 lists SIMD:THREADS pairs instead of the product)
const pairs = args.includes('--variants')
  ? opt('--variants').split(',').map((v) => v.split(/:(.*)/s).slice(0, 2))
  : opt('--simd', 'relaxed,baseline').split(',').flatMap((simd) => opt('--threads', '1').split(',').map((t) => [simd, t]));
const variants = pairs.map(([simd, t]) => {
  const [n, split] = t.split(':');
  return {
    simd, threads: n, key: t === '1' ? simd : `${simd}_t${t.replaceAll(':', '_')}`,
    query: `&simd=${simd}${n === '1t' ? '&threads=1&build=threads' : `&threads=${n}`}${split ? `&split=${split}` : ''}`,
  };
});
const withNative = !args.includes('--no-native');
// the native CLI at each tier (LUTRA_MAX_ISA): "best" is this CPU's fastest; the first fills the table
const nativeTiers = opt('--native-tiers', 'best').split(',');
const withWllama = !args.includes('--no-wllama');
// wllama at each thread count (≥ 2: its own pthreads build, the page being cross-origin isolated)
const wllamaThreads = opt('--wllama-threads', '1').split(',').map(Number);
// a prompt for every model instead of each one's own (a long one times prefill)
const promptOverride = opt('--prompt');
const www = path.dirname(path.dirname(new URL(import.meta.url).pathname));
const root = path.dirname(www);
const lutra = process.env.LUTRA_BIN || path.join(root, 'target/release/lutra');
const models = [
  { name: 'stories15M', args: ['-m', path.join(root, 'models/stories15M/model.bin'), '--bits', '4'], prompt: 'Once upon a time' },
  ...(args.includes('--gemma') ? [{ name: 'gemma', args: ['-m', path.join(root, 'models/gemma-3-270m-q4_k_m.gguf')], prompt: 'Otters are', gguf: 'models/gemma-3-270m-q4_k_m.gguf' }] : []),
  ...opt('--gguf', '').split(',').filter(Boolean).map((file) => {
    const disk = path.resolve(file);
    const link = path.join(www, 'models/bench', path.basename(disk));
    fs.mkdirSync(path.dirname(link), { recursive: true });
    if (!fs.existsSync(link)) {
      try { fs.linkSync(disk, link); } catch { fs.copyFileSync(disk, link); }
    }
    return { name: path.basename(disk, '.gguf'), args: ['-m', disk], prompt: 'Otters are', gguf: path.relative(www, link), disk };
  }),
];
if (promptOverride) for (const m of models) m.prompt = promptOverride;
const median = (v) => { const s = [...v].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };

process.on('exit', () => server?.kill());
const server = spawn(process.execPath, ['serve.mjs', '.', '0', '--isolated'], { cwd: www, stdio: ['ignore', 'pipe', 'inherit'] });
const base = await new Promise((resolve) => server.stdout.once('data', (d) => resolve(String(d).match(/http:\S+/)[0])));
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'lutra-bench-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

async function page(model, variant) {
  const p = await context.newPage();
  let t0 = Date.now();
  const builtIn = model.disk ? 'stories15M' : model.name;
  await p.goto(`${base}index.html?model=${builtIn}&chat=0&prompt=${encodeURIComponent(model.prompt)}&n=${n}&temp=0${model.disk ? '' : '&autorun=1'}${variant.query}`);
  if (model.disk) {
    // a file from disk: the picker replaces the built-in model once that has loaded
    await p.waitForSelector('body[data-state="ready"]', { timeout: 600000 });
    const before = await p.textContent('#status');
    t0 = Date.now();
    await p.setInputFiles('#file', model.disk);
    await p.waitForFunction((s) => ['ready', 'error'].includes(document.body.dataset.state) && document.getElementById('status').textContent !== s, before, { timeout: 600000 });
    if ((await p.evaluate(() => document.body.dataset.state)) === 'error') throw new Error(`${model.name}: ${await p.textContent('#error')}`);
    await p.click('#generate');
  }
  await p.waitForFunction(() => document.getElementById('output').textContent.length > 0 || document.body.dataset.state === 'error', null, { timeout: 600000 });
  if ((await p.evaluate(() => document.body.dataset.state)) === 'error') throw new Error(`${model.name}: ${await p.textContent('#error')}`);
  const firstToken = Date.now() - t0;
  await p.waitForSelector('body[data-state="done"]', { timeout: 600000 });
  const tps = Number(await p.textContent('#tps'));
  const stats = await p.textContent('#stats');
  const status = await p.textContent('#status');
  const threads = variant.threads === '1t' ? 1 : Number(variant.threads);
  if (!status.includes(`; ${threads} thread`)) throw new Error(`${model.name}, ${variant.key}: the page says ${status}`);
  const text = await p.textContent('#output');
  const wasmMemory = Number(status.match(/wasm memory (\d+) MiB/)?.[1] ?? NaN);
  const [, tokens, ms] = stats.match(/prompt (\d+) tokens in (\d+) ms/);
  const rss = Number(execFileSync('sh', ['-c', "ps -C chromium -o rss= | awk '{s+=$1} END {print s}'"]).toString()) * 1024;
  await p.close();
  return { tps, prefillTps: (Number(tokens) - 1) / (Number(ms) / 1000), firstToken, rss, text, wasmMemory };
}

async function wllama(model, threads = wllamaThreads[0]) {
  const p = await context.newPage();
  await p.goto(`${base}bench/wllama.html?model=../${model.gguf}&prompt=${encodeURIComponent(model.prompt)}&n=${n}&threads=${threads}`);
  await p.waitForSelector('body[data-state="done"], body[data-state="error"]', { timeout: 600000 });
  const r = JSON.parse(await p.textContent('#result'));
  await p.close();
  if (r.error) throw new Error(`wllama: ${r.error}`);
  return { tps: r.timings.predicted_per_second, prefillTps: r.timings.prompt_per_second, multithread: r.multithread };
}

function native(model, tier) {
  const env = tier === 'best' ? process.env : { ...process.env, LUTRA_MAX_ISA: tier };
  const out = spawnSync(lutra, ['run', ...model.args, '-p', model.prompt, '-n', String(n), '--temp', '0', '-t', '1'], { stdio: ['ignore', 'ignore', 'pipe'], env }).stderr.toString();
  return Number(out.match(/generation: \d+ tokens at ([\d.]+) tokens\/s/)[1]);
}

const rows = [];
for (const model of models) {
  for (const v of variants) await page(model, v); // warm-up: fills the Cache API, compiles the modules
  let useWllama = model.gguf && withWllama;
  let wllamaError;
  if (useWllama) {
    // a type wllama's llama.cpp lacks (Q1_0 in 3.13.0) is a column it cannot fill, not a failed run
    try { await wllama(model); } catch (e) { wllamaError = e.message; useWllama = false; console.error(`${model.name}: ${wllamaError}`); }
  }
  const byVariant = Object.fromEntries(variants.map((v) => [v.key, []]));
  const tiers = Object.fromEntries(nativeTiers.map((t) => [t, []]));
  const cli = tiers[nativeTiers[0]];
  const wlByThreads = Object.fromEntries(wllamaThreads.map((t) => [t, []]));
  for (let r = 0; r < rounds; r++) {
    for (const v of variants) byVariant[v.key].push(await page(model, v));
    const tps = Object.entries(byVariant).map(([k, w]) => `${k} ${w.at(-1).tps}`).join(', ');
    if (withNative) nativeTiers.forEach((t) => tiers[t].push(native(model, t)));
    if (useWllama) {
      for (const t of wllamaThreads) wlByThreads[t].push(await wllama(model, t));
    }
    const wlText = wllamaThreads.map((t) => `t${t} ${wlByThreads[t].at(-1)?.tps.toFixed(1)}`).join(' ');
    console.error(`${model.name} round ${r + 1} (load ${os.loadavg()[0].toFixed(2)}): ${tps}${withNative ? `, native ${nativeTiers.map((t) => `${t} ${tiers[t].at(-1)}`).join(' ')}` : ''}${useWllama ? `, wllama ${wlText}` : ''}`);
  }
  const web = byVariant[variants[0].key];
  // every build and thread count writes the same greedy text
  for (const [k, w] of Object.entries(byVariant)) {
    if (w.some((x) => x.text !== web[0].text)) throw new Error(`${model.name}: ${k} wrote different text than ${variants[0].key}`);
  }
  const row = {
    model: model.name, n, rounds,
    chromium_tps: median(web.map((w) => w.tps)),
    native_tps: cli.length ? median(cli) : NaN,
    first_token_ms_cached: median(web.map((w) => w.firstToken)),
    chromium_rss_mib_max: Math.max(...web.map((w) => w.rss)) / 1048576,
    model_file_mib: fs.statSync(model.args[1]).size / 1048576,
    wasm_bytes: fs.statSync(path.join(www, 'pkg/lutra_wasm_bg.wasm')).size,
  };
  row.ratio = row.chromium_tps / row.native_tps;
  if (withNative) for (const t of nativeTiers) row[`native_tps_${t}`] = median(tiers[t]);
  row.wasm_memory_mib = Math.max(...web.map((w) => w.wasmMemory));
  row.variant = variants[0].key;
  for (const v of variants) {
    row[`chromium_tps_${v.key}`] = median(byVariant[v.key].map((w) => w.tps));
    row[`chromium_tps_${v.key}_rounds`] = byVariant[v.key].map((w) => w.tps);
    row[`chromium_prefill_tps_${v.key}`] = median(byVariant[v.key].map((w) => w.prefillTps));
  }
  if (wllamaError) row.wllama_error = wllamaError;
  const wl = wlByThreads[wllamaThreads[0]].map((w) => w.tps);
  if (wl.length) {
    row.wllama_tps = median(wl);
    row.vs_wllama = row.chromium_tps / row.wllama_tps;
    for (const t of wllamaThreads) {
      row[`wllama_tps_t${t}`] = median(wlByThreads[t].map((w) => w.tps));
      row[`wllama_prefill_tps_t${t}`] = median(wlByThreads[t].map((w) => w.prefillTps));
      row[`wllama_multithread_t${t}`] = wlByThreads[t].every((w) => w.multithread);
    }
  }
  console.log(JSON.stringify(row));
  rows.push(row);
}
console.log('\n| model | lutra in Chromium tg tok/s | native lutra tg tok/s | ratio | wllama tg tok/s | lutra / wllama | first token, cached model | Chromium RSS (all processes) | model file | wasm |');
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  const wl = r.wllama_tps ? [r.wllama_tps.toFixed(1), `${r.vs_wllama.toFixed(2)}×`] : ['–', '–'];
  console.log(`| ${r.model} | ${r.chromium_tps.toFixed(1)} | ${r.native_tps.toFixed(1)} | ${r.ratio.toFixed(2)}× | ${wl[0]} | ${wl[1]} | ${(r.first_token_ms_cached / 1000).toFixed(2)} s | ${r.chromium_rss_mib_max.toFixed(0)} MiB | ${r.model_file_mib.toFixed(0)} MiB | ${(r.wasm_bytes / 1024).toFixed(0)} KiB |`);
}
await context.close();
server.kill();
fs.rmSync(profile, { recursive: true, force: true });
