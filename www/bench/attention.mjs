// One decode token's attention over one layer in wasm (node, V8), every cache kind
// interleaved round by round — the wasm side of `lutra bench attention`:
// `node bench/attention.mjs [--pkg pkg] [--shapes gemma3,llama7b] [--ctx 16384]
// [--kinds exact_f16,pq16,pq256,...] [--scan best,scalar] [--rounds 5] [--tokens 3]`,
// after `cargo xtask test-web` (or `serve`) has built www/pkg. `--scan scalar` also times
// the PQ kinds with the scalar reference scan in the same build. Prints one JSON line per
// (shape, ctx, kind, scan), then a table; medians over the rounds of µs per token.
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const list = (name, dflt) => opt(name, dflt).split(',').filter(Boolean);
const www = path.dirname(path.dirname(new URL(import.meta.url).pathname));
const pkg = path.resolve(www, opt('--pkg', 'pkg'));
const shapes = list('--shapes', 'gemma3,llama7b');
const ctxs = list('--ctx', '16384').map(Number);
const kinds = list('--kinds', 'exact_f16,exact_f16+q8_0,pq16,pq16+q8_0,pq16+q4_0,pq256,pq256+q4_0');
const scans = list('--scan', 'best');
const rounds = Number(opt('--rounds', 5));
const tokens = Number(opt('--tokens', 3));

const wasm = await import(path.join(pkg, 'lutra_wasm.js'));
wasm.initSync({ module: fs.readFileSync(path.join(pkg, 'lutra_wasm_bg.wasm')) });
const isa = `${wasm.best_isa()} (${wasm.simd_variant()})`;
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const rows = [];
for (const shape of shapes) {
  for (const ctx of ctxs) {
    const timers = [];
    for (const kind of kinds) {
      for (const scan of kind.startsWith('pq') ? scans : ['best']) {
        const timer = new wasm.AttentionTimer(kind, shape, ctx, scan);
        timer.run(1); // first touch of the tables and buffers
        timers.push({ kind, scan, timer, us: [] });
      }
    }
    for (let r = 0; r < rounds; r++) {
      for (const t of timers) {
        const start = performance.now();
        t.timer.run(tokens);
        t.us.push(((performance.now() - start) * 1000) / tokens);
      }
    }
    const exact = timers.find((t) => t.kind === 'exact_f16');
    for (const t of timers) {
      const [keyBytes, valueBytes] = t.timer.bytes();
      const row = {
        shape, ctx, kind: t.kind, scan: t.scan, isa, us_per_token: Math.round(median(t.us)),
        vs_exact_f16: exact ? +(median(exact.us) / median(t.us)).toFixed(3) : null,
        key_bytes: keyBytes, value_bytes: valueBytes, rounds,
      };
      rows.push(row);
      console.log(JSON.stringify(row));
      t.timer.free();
    }
  }
}
console.log(`\nwasm ${isa}, node ${process.version}, ${rounds} rounds of ${tokens} tokens, medians`);
console.log('| shape | ctx | kind | scan | µs/token | vs exact f16 |\n|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.shape} | ${r.ctx} | ${r.kind} | ${r.scan} | ${r.us_per_token} | ${r.vs_exact_f16 ?? ''}× |`);
}
