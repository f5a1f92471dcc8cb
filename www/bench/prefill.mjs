// Prompt processing (prefill) speed of wasm builds, side by side: every build loaded in
// one process (node, or one headless Chromium page with --chromium), timed round by round
// in alternating order, so that two builds of the engine — e.g. one token per lookup pass
// against two — are compared on the same machine minute:
// `node bench/prefill.mjs --pkgs pkg,/tmp/pkg-other [--model stories15M|gemma] [--chars N]
// [--rounds 7] [--chromium]`, after `cargo xtask test-web [--gemma]` has built www/pkg and
// placed the models (relaxed-SIMD builds need `node --experimental-wasm-relaxed-simd` in
// node 20; Chromium has it). The prompt is the first N characters of bench/text/stories.txt;
// the time is `Engine.prefill` (the prompt but its last token), one thread. Prints one JSON
// line per (build, round), then medians and each round's ratio to the first build. Each
// build's greedy continuation (16 tokens, in the warm-up round) is printed and must agree.
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import os from 'node:os';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const www = path.dirname(path.dirname(new URL(import.meta.url).pathname));
const root = path.dirname(www);
const pkgs = opt('--pkgs', 'pkg').split(',').map((p) => path.resolve(www, p));
const model = opt('--model', 'stories15M');
const rounds = Number(opt('--rounds', 7));
// about 200 tokens of stories15M's 256-position context, and 290 of Gemma's
const chars = Number(opt('--chars', model === 'gemma' ? 1200 : 800));
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const prompt = fs.readFileSync(path.join(root, 'bench/text/stories.txt'), 'utf8').slice(0, chars);
const gguf = 'models/gemma-3-270m-q4_k_m.gguf';

// Both functions below also run inside the Chromium page (passed as source text), so they
// use nothing from this module's scope.
function engineOf(wasm, model, files) {
  if (model === 'gemma') return wasm.Engine.from_gguf_blob(files.gguf.length, (offset, length) => files.gguf.slice(offset, offset + length), 2048);
  const file = new wasm.ModelFile(files.checkpoint.length);
  file.push(files.checkpoint);
  return wasm.Engine.from_llama2c(file, files.tokenizer, 4, 0);
}

function measure(builds, prompt, rounds) {
  const records = [];
  for (let r = 0; r <= rounds; r++) {
    // round 0 warms up; later rounds alternate which build goes first
    const order = r % 2 ? [...builds.keys()].reverse() : [...builds.keys()];
    for (const i of order) {
      const b = builds[i];
      const tokens = b.engine.start(prompt, false, 16, 0, 1, 1, 0, 1, 64, 0);
      const t0 = performance.now();
      b.engine.prefill();
      const ms = performance.now() - t0;
      if (r === 0) {
        // the greedy continuation of the prompt
        b.text = '';
        for (let k = 0; k < 16; k++) b.text += b.engine.next_token() ?? '';
        continue;
      }
      records.push({ build: i, isa: b.isa, round: r, prompt_tokens: tokens, prefill_tps: (tokens - 1) / (ms / 1000) });
    }
  }
  return { records, texts: builds.map((b) => b.text) };
}

async function inNode() {
  const files = model === 'gemma'
    ? { gguf: new Uint8Array(fs.readFileSync(path.join(root, gguf))) }
    : { checkpoint: new Uint8Array(fs.readFileSync(path.join(root, 'models/stories15M/model.bin'))), tokenizer: new Uint8Array(fs.readFileSync(path.join(root, 'models/stories15M/tokenizer.bin'))) };
  const builds = [];
  for (const pkg of pkgs) {
    // each build its own module instance and memory
    const wasm = await import(`${path.join(pkg, 'lutra_wasm.js')}?${encodeURIComponent(pkg)}`);
    wasm.initSync({ module: fs.readFileSync(path.join(pkg, 'lutra_wasm_bg.wasm')) });
    builds.push({ isa: `${wasm.best_isa()} (${wasm.simd_variant()})`, engine: engineOf(wasm, model, files) });
  }
  return measure(builds, prompt, rounds);
}

async function inChromium() {
  const { chromium } = await import('playwright-core');
  // a folder of links: the builds as /pkg0, /pkg1, …, and the models
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lutra-prefill-'));
  pkgs.forEach((p, i) => fs.symlinkSync(p, path.join(dir, `pkg${i}`)));
  fs.symlinkSync(path.join(root, 'models'), path.join(dir, 'models'));
  fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>prefill</title>');
  const server = spawn(process.execPath, [path.join(www, 'serve.mjs'), dir, '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  process.on('exit', () => server.kill());
  const base = await new Promise((resolve) => server.stdout.once('data', (d) => resolve(String(d).match(/http:\S+/)[0])));
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage();
  page.setDefaultTimeout(0);
  await page.goto(`${base}index.html`);
  const result = await page.evaluate(`(async () => {
    ${engineOf}
    ${measure}
    const bytes = async (url) => new Uint8Array(await (await fetch(url)).arrayBuffer());
    const files = ${JSON.stringify(model)} === 'gemma'
      ? { gguf: await bytes('/${gguf}') }
      : { checkpoint: await bytes('/models/stories15M/model.bin'), tokenizer: await bytes('/models/stories15M/tokenizer.bin') };
    const builds = [];
    for (let i = 0; i < ${pkgs.length}; i++) {
      const wasm = await import('/pkg' + i + '/lutra_wasm.js');
      await wasm.default('/pkg' + i + '/lutra_wasm_bg.wasm');
      builds.push({ isa: wasm.best_isa() + ' (' + wasm.simd_variant() + ')', engine: engineOf(wasm, ${JSON.stringify(model)}, files) });
    }
    return measure(builds, ${JSON.stringify(prompt)}, ${rounds});
  })()`);
  const version = browser.version();
  await browser.close();
  server.kill();
  fs.rmSync(dir, { recursive: true });
  return { ...result, where: `Chromium ${version}` };
}

const { records, texts, where = `node ${process.version}` } = args.includes('--chromium') ? await inChromium() : await inNode();
for (const r of records) console.log(JSON.stringify({ model, where, pkg: pkgs[r.build], ...r, build: undefined, prefill_tps: Number(r.prefill_tps.toFixed(1)) }));
console.log(`\n${model} in ${where}: prompt of ${records[0].prompt_tokens} tokens, prefill tokens/s, medians of ${rounds} rounds (ratio: each round's against the first build's)`);
const tps = pkgs.map((_, i) => records.filter((r) => r.build === i).map((r) => r.prefill_tps));
pkgs.forEach((pkg, i) => {
  const ratios = tps[i].map((t, k) => t / tps[0][k]);
  const isa = records.find((r) => r.build === i).isa;
  console.log(`${pkg.padEnd(40)} ${isa.padEnd(20)} ${median(tps[i]).toFixed(1).padStart(8)}  ratio ${median(ratios).toFixed(3)} (${ratios.map((x) => x.toFixed(2)).join(' ')})`);
});
console.log(`greedy continuations: ${texts.map((t) => JSON.stringify(t)).join(' | ')}`);
if (texts.some((t) => t !== texts[0])) {
  console.error('the builds continue the prompt differently');
  process.exit(1);
}
