// The page in headless Chromium (playwright-core, Debian's /usr/bin/chromium): greedy text
// equals the native CLI's, tokens/s shown, a bad file is a readable error after which the
// page still generates, Stop ends a long generation within 1 s and the next one works, and
// the threaded build on 2 and 3 threads writes the single-thread text, and a 1-bit (Q1_0)
// qwen3 file loaded from disk does too, as a completion and as a two-turn chat; model text
// with HTML in it is shown as text.
// Completion tests pass ?chat=0: a model with a chat template opens as a chat.
// Run by `cargo xtask test-web` (which builds www/pkg and places the models first).
// LUTRA_WEB_GEMMA=1 adds Gemma 3 270M, LUTRA_WEB_QWEN=1 a chat with Qwen2.5-Coder-0.5B-Instruct
// from the same origin; LUTRA_BIN names the native lutra to compare with.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const www = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const root = path.dirname(www);
const lutra = process.env.LUTRA_BIN || path.join(root, 'target/release/lutra');
const shots = path.join(root, 'target/web');
let server;
let base;
let context;
let profile;

before(async () => {
  server = spawn(process.execPath, ['serve.mjs', '.', '0', '--isolated'], { cwd: www, stdio: ['ignore', 'pipe', 'inherit'] });
  base = await new Promise((resolve, reject) => {
    server.stdout.once('data', (d) => resolve(String(d).match(/http:\S+/)[0]));
    server.once('exit', (c) => reject(new Error(`server exited ${c}`)));
  });
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'lutra-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  fs.mkdirSync(shots, { recursive: true });
});

after(async () => {
  await context?.close();
  server?.kill();
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
});

async function open(query) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(`${base}index.html?${query}`);
  return { page, errors };
}

const state = (page, s, timeout) => page.waitForSelector(`body[data-state="${s}"]`, { timeout });

/**
 * What the native `lutra run` writes after the prompt, greedy, for `n` tokens, on the
 * SSSE3 tier (`LUTRA_MAX_ISA=ssse3` on an x86 host) or on this CPU's best. Every tier adds
 * floats in one order (the scalar kernel's), so the page must equal both.
 */
function native(args, prompt, n, hostTier = false) {
  const cli = ['run', ...args, '-p', prompt, '-n', String(n), '--temp', '0', '-t', '1'];
  const env = os.arch() === 'x64' && !hostTier ? { ...process.env, LUTRA_MAX_ISA: 'ssse3' } : process.env;
  const out = execFileSync(lutra, cli, { stdio: ['ignore', 'pipe', 'ignore'], env }).toString();
  assert.ok(out.startsWith(prompt));
  return out.slice(prompt.length).replace(/\n$/, '');
}

/**
 * The page's greedy text against the native CLI on the SSSE3 tier and (`best`) on this
 * CPU's best one. Files with Q5_0 matrices (Gemma 3) run those on int8 kernels on the AVX2
 * tier alone (`import::q5_0_as_int8`), so there the best tier is only reported.
 */
async function greedyMatchesNative(model, args, prompt, n, timeout, query = '', best = true) {
  const { page, errors } = await open(`model=${model}&chat=0&prompt=${encodeURIComponent(prompt)}&n=${n}&temp=0&autorun=1${query}`);
  await state(page, 'done', timeout);
  // ?temp=0 wins over the engine's default
  assert.equal(await page.inputValue('#temp'), '0');
  const text = await page.textContent('#output');
  const tps = Number(await page.textContent('#tps'));
  const stats = await page.textContent('#stats');
  console.log(`${model}: ${tps} tokens/s in Chromium (${stats}); status: ${await page.textContent('#status')}`);
  assert.equal(text, native(args, prompt, n));
  const host = native(args, prompt, n, true);
  if (best) assert.equal(text, host);
  console.log(`${model}: the page equals the native SSSE3 tier; this CPU's best tier writes ${host === text ? 'the same text' : 'other text'}`);
  assert.ok(tps > 0, `tokens/s shown: ${tps}`);
  assert.deepEqual(errors, []);
  return page;
}

test('the wasm kernels equal the scalar reference inside Chromium', async () => {
  const { page, errors } = await open('model=stories15M');
  for (const [pkg, variant] of [['pkg', 'baseline'], ['pkg-relaxed', 'relaxed'], ['pkg-threads', 'relaxed']]) {
    const [result, built] = await page.evaluate(async (pkg) => {
      const m = await import(`./${pkg}/lutra_wasm.js`);
      await m.default();
      return [m.kernel_check(), m.simd_variant()];
    }, pkg);
    console.log(`kernel check in Chromium, ${built} build: ${result}`);
    assert.equal(built, variant);
    assert.match(result, /^simd128: .* equal scalar$/);
  }
  await state(page, 'ready', 60000);
  // the form's sampler fields hold the engine's defaults (index.html has none of its own)
  const defaults = await page.evaluate(async () => {
    const m = await import('./pkg/lutra_wasm.js');
    await m.default();
    return m.sampler_defaults();
  });
  for (const [key, id] of [['temperature', 'temp'], ['top_k', 'top_k'], ['top_p', 'top_p'], ['min_p', 'min_p'], ['repeat_penalty', 'repeat_penalty']]) {
    assert.equal(await page.inputValue(`#${id}`), String(defaults[key]), id);
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test('stories15M: greedy text equals the native CLI, a bad file is an error, Stop stops', async () => {
  const stories = ['-m', path.join(root, 'models/stories15M/model.bin'), '--bits', '4'];
  // the simd128 build everywhere, the relaxed-SIMD one, and the page's default: the
  // threaded build (relaxed SIMD) on 2 threads where the browser reports 2 cores or more
  (await greedyMatchesNative('stories15M', stories, 'Once upon a time', 32, 60000, '&simd=baseline&threads=1')).close();
  const relaxed = await greedyMatchesNative('stories15M', stories, 'Once upon a time', 32, 60000, '&threads=1');
  assert.match(await relaxed.textContent('#status'), /simd128 \(relaxed\); 1 thread;/);
  await relaxed.close();
  const page = await greedyMatchesNative('stories15M', stories, 'Once upon a time', 32, 60000);
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  assert.match(await page.textContent('#status'), cores >= 2 ? /simd128 \(relaxed, threaded build\); 2 threads;/ : /; 1 thread;/);

  // a file that is no model: a readable error, and the loaded model still generates
  const bad = path.join(os.tmpdir(), `not-a-model-${process.pid}.gguf`);
  fs.writeFileSync(bad, 'GGUF this is not a real model file at all');
  await page.setInputFiles('#file', bad);
  await state(page, 'error', 20000);
  const message = await page.textContent('#error');
  assert.match(message, /Could not load the model/);
  assert.ok(await page.isVisible('#error'));
  fs.rmSync(bad);
  // without the .gguf name, the magic (the engine's is_gguf) still sends it to the GGUF reader
  const unnamed = path.join(os.tmpdir(), `not-a-model-${process.pid}.bin`);
  fs.writeFileSync(unnamed, 'GGUF this is not a real model file at all');
  await page.evaluate(() => { document.getElementById('error').textContent = ''; });
  await page.setInputFiles('#file', unnamed);
  await page.waitForFunction(() => document.body.dataset.state === 'error' && document.getElementById('error').textContent, null, { timeout: 20000 });
  const unnamedMessage = await page.textContent('#error');
  assert.match(unnamedMessage, /Could not load the model/);
  assert.doesNotMatch(unnamedMessage, /tokenizer\.bin/);
  fs.rmSync(unnamed);

  // a long generation (to the end of the context), stopped as soon as it writes: done
  // within 1 s of the click, with fewer tokens than it would have written
  await page.fill('#n', '4000');
  await page.fill('#temp', '0.8');
  await page.click('#generate');
  await state(page, 'generating', 5000);
  await page.waitForFunction(() => document.getElementById('output').textContent.length > 0, null, { timeout: 20000 });
  const t = Date.now();
  await page.click('#stop');
  await state(page, 'done', 1000);
  console.log(`Stop took ${Date.now() - t} ms`);
  const stopped = await page.textContent('#stats');
  assert.match(stopped, /stopped/);
  assert.ok(Number(stopped.match(/(\d+) generated/)[1]) < 250, stopped);

  // the next generation works
  await page.fill('#n', '16');
  await page.click('#generate');
  await state(page, 'done', 20000);
  assert.ok((await page.textContent('#output')).length > 0);
  await page.screenshot({ path: path.join(shots, 'stories15M.png'), fullPage: true });
  await page.close();
});

test('threads: 2 and 3 threads write the single-thread text; the Threads control restarts the engine', async () => {
  const stories = ['-m', path.join(root, 'models/stories15M/model.bin'), '--bits', '4'];
  // every product split (?split=0, not only those of matrices over 256 KiB), on 3 threads
  // (more threads than this CI machine's 2 cores: workers come late, chunks fall unevenly)
  const prompt = 'Once upon a time';
  (await greedyMatchesNative('stories15M', stories, prompt, 64, 60000, '&threads=3&split=0')).close();
  const page = await greedyMatchesNative('stories15M', stories, prompt, 64, 60000, '&threads=2');
  assert.match(await page.textContent('#status'), /simd128 \(relaxed, threaded build\); 2 threads;/);
  const two = await page.textContent('#output');
  // the control: 1 thread (the single-thread build), the same model, the same greedy text
  await page.selectOption('#threads', '1');
  await state(page, 'ready', 60000);
  assert.match(await page.textContent('#status'), /simd128 \(relaxed\); 1 thread;/);
  await page.click('#generate');
  await state(page, 'done', 60000);
  assert.equal(await page.textContent('#output'), two);
  await page.close();
});

test('a 1-bit qwen3 file from disk (Q1_0 layers, Q8_0 embedding and head, as Bonsai ships): greedy text equals the native CLI, on 1 thread and on 2', { skip: !process.env.LUTRA_WEB_Q1_0 && 'LUTRA_WEB_Q1_0=FILE (cargo xtask test-web writes it)' }, async () => {
  const file = process.env.LUTRA_WEB_Q1_0;
  const prompt = 'Otters hold hands while they sleep';
  const expected = native(['-m', file], prompt, 24);
  assert.equal(native(['-m', file], prompt, 24, true), expected, 'the SSSE3 and best native tiers write the same text');
  for (const threads of [1, 2]) {
    const { page, errors } = await open(`model=stories15M&chat=0&threads=${threads}&prompt=${encodeURIComponent(prompt)}&n=24&temp=0`);
    await state(page, 'ready', 60000);
    await page.setInputFiles('#file', file);
    await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.getElementById('status').textContent.startsWith('Ready: qwen3,'), null, { timeout: 60000 });
    console.log(`Q1_0 qwen3 file, ${threads} thread(s): ${await page.textContent('#status')}`);
    // the model menu names the loaded file, not the preset it replaced
    assert.equal(await page.$eval('#model', (s) => s.selectedOptions[0].textContent), `File: ${path.basename(file)}`);
    await page.click('#generate');
    await state(page, 'done', 60000);
    assert.equal(await page.textContent('#output'), expected);
    assert.match(await page.textContent('#stats'), /24 generated; token limit/);
    assert.deepEqual(errors, []);
    await page.close();
  }
});

test('model text is data: Markdown renders as elements, HTML in it shows as text and never runs', async () => {
  const { page, errors } = await open('model=stories15M');
  await state(page, 'ready', 60000);
  const hostile = [
    '# Title <b>x</b>',
    'Text with <script>window.pwned = 1</script> and <img src=x onerror="window.pwned = 2"> and **bold** and `<i>code</i>`.',
    '- <a href="javascript:window.pwned=3">link</a>',
    '```html',
    '<img src=x onerror="window.pwned = 4"><script>window.pwned = 5</script>',
    '```',
    '<iframe srcdoc="<script>parent.pwned=6</script>"></iframe>',
  ].join('\n');
  const seen = await page.evaluate(async (text) => {
    const { renderMarkdown } = await import('./markdown.js');
    const host = document.createElement('div');
    host.append(renderMarkdown(text));
    document.body.append(host);
    await new Promise((r) => setTimeout(r, 300));
    return {
      pwned: window.pwned ?? null,
      injected: host.querySelectorAll('script, img, iframe, a, b, i').length,
      tags: [...host.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()).join(' '),
      text: host.textContent,
      code: host.querySelector('pre code')?.textContent,
    };
  }, hostile);
  assert.equal(seen.pwned, null);
  assert.equal(seen.injected, 0, seen.tags);
  assert.equal(seen.tags, 'h3 p strong code ul li div div span button pre code p');
  for (const raw of ['<b>x</b>', '<script>window.pwned = 1</script>', '<img src=x onerror="window.pwned = 2">', '<i>code</i>', '<a href="javascript:window.pwned=3">link</a>', '<iframe srcdoc=']) {
    assert.ok(seen.text.includes(raw), `${raw} shown as text`);
  }
  assert.equal(seen.code, '<img src=x onerror="window.pwned = 4"><script>window.pwned = 5</script>');
  assert.deepEqual(errors, []);
  await page.close();
});

test('chat with a qwen3 file from disk: two turns as messages, the answers equal `lutra chat`; Enter sends; a phone-sized viewport does not scroll sideways', { skip: !process.env.LUTRA_WEB_Q1_0 && 'LUTRA_WEB_Q1_0=FILE (cargo xtask test-web writes it)' }, async () => {
  const file = process.env.LUTRA_WEB_Q1_0;
  const turns = ['Hello! Who are you?', 'Write a haiku about otters.'];
  const env = os.arch() === 'x64' ? { ...process.env, LUTRA_MAX_ISA: 'ssse3' } : process.env;
  const expected = execFileSync(lutra, ['chat', '-m', file, '-n', '16', '--temp', '0', '-t', '1'], { input: `${turns.join('\n')}\n`, stdio: ['pipe', 'pipe', 'ignore'], env }).toString();
  const { page, errors } = await open('model=stories15M&threads=1&n=16&temp=0');
  await page.setViewportSize({ width: 390, height: 844 });
  await state(page, 'ready', 60000);
  await page.setInputFiles('#file', file);
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.getElementById('status').textContent.startsWith('Ready: qwen3,'), null, { timeout: 60000 });
  assert.ok(await page.isChecked('#chat'), 'a model with a chat template opens as a chat');
  assert.equal(await page.textContent('#generate'), 'Send');
  for (const turn of turns) {
    await page.fill('#prompt', turn);
    await page.focus('#prompt');
    await page.keyboard.press('Enter');
    await state(page, 'done', 60000);
    assert.equal(await page.inputValue('#prompt'), '', 'the box empties when a message is sent');
  }
  const messages = await page.$$eval('#messages > li', (lis) => lis.map((li) => [li.className, li.dataset.text ?? li.querySelector('.body').textContent]));
  assert.deepEqual(messages.map(([c]) => c), ['message user', 'message assistant', 'message user', 'message assistant']);
  assert.deepEqual(messages.filter(([c]) => c.endsWith('user')).map(([, t]) => t), turns);
  const answers = messages.filter(([c]) => c.endsWith('assistant')).map(([, t]) => `${t}\n`).join('');
  assert.equal(answers, expected);
  // Shift+Enter is a new line, not a message
  await page.focus('#prompt');
  await page.keyboard.type('one');
  await page.keyboard.press('Shift+Enter');
  await page.keyboard.type('two');
  assert.equal(await page.inputValue('#prompt'), 'one\ntwo');
  assert.equal(await page.$$eval('#messages > li', (lis) => lis.length), 4);
  // what sticks out past the viewport's right edge, if anything
  const wide = await page.evaluate(() => [...document.querySelectorAll('body *')]
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5)
    .map((e) => `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ''}${e.className ? `.${e.className}` : ''} (${Math.round(e.getBoundingClientRect().right)} px)`));
  assert.deepEqual(wide, [], 'no sideways scrolling at 390 px');
  await page.screenshot({ path: path.join(shots, 'chat-phone.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('Qwen2.5-Coder-0.5B-Instruct from the same origin: two chat turns equal `lutra chat`, a code block, the model\'s <script> as text, Stop and New conversation', { skip: process.env.LUTRA_WEB_QWEN !== '1' && 'LUTRA_WEB_QWEN=1 (cargo xtask test-web --qwen)' }, async () => {
  const file = path.join(root, 'models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf');
  const turns = ['Write a minimal HTML page whose script tag shows an alert saying hello.', 'Now make the alert say goodbye.'];
  // the page adds floats as the SSSE3 tier does (the file's Q5_0 matrices run on int8 kernels on AVX2 alone)
  const env = os.arch() === 'x64' ? { ...process.env, LUTRA_MAX_ISA: 'ssse3' } : process.env;
  const expected = execFileSync(lutra, ['chat', '-m', file, '-n', '96', '--temp', '0', '-t', '1'], { input: `${turns.join('\n')}\n`, stdio: ['pipe', 'pipe', 'ignore'], env }).toString();
  const { page, errors } = await open('model=qwen&threads=2&n=96&temp=0');
  await state(page, 'ready', 300000);
  console.log(`Qwen 0.5B: ${await page.textContent('#status')}`);
  assert.ok(await page.isChecked('#chat'));
  assert.equal(await page.$eval('#model', (s) => s.selectedOptions[0].value), 'qwen');
  assert.equal(await page.$eval('#progress', (p) => p.value), 1, 'the progress bar is full when ready');
  const send = async (text) => {
    await page.fill('#prompt', text);
    await page.focus('#prompt');
    await page.keyboard.press('Enter');
    await state(page, 'done', 120000);
  };
  for (const turn of turns) await send(turn);
  console.log(`Qwen 0.5B chat: ${await page.textContent('#stats')}; ${await page.textContent('#tps')} tokens/s`);
  const answers = await page.$$eval('#messages > li.assistant', (lis) => lis.map((li) => li.dataset.text));
  assert.equal(answers.map((a) => `${a}\n`).join(''), expected);
  assert.ok(answers[0].includes('<script>'), 'the model wrote a script tag');
  const shown = await page.evaluate(() => {
    const log = document.getElementById('messages');
    return { code: log.querySelectorAll('.assistant .code pre code').length, live: log.querySelectorAll('script, img, iframe, a').length, text: log.textContent };
  });
  assert.ok(shown.code >= 1, 'a code block');
  assert.equal(shown.live, 0, 'nothing the model wrote became an element');
  assert.ok(shown.text.includes('<script>'), 'its <script> is shown as text');
  await page.screenshot({ path: path.join(shots, 'chat-qwen-desktop.png'), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: path.join(shots, 'chat-qwen-phone.png'), fullPage: true });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no sideways scrolling at 390 px');
  // Stop ends a long answer within 1 s; New conversation empties the log and the next message is answered
  await page.fill('#n', '400');
  await page.fill('#prompt', 'Write a long story about an otter, in ten chapters.');
  await page.focus('#prompt');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => (document.querySelector('#messages > li.assistant:last-child')?.dataset.text || '').length > 0, null, { timeout: 60000 });
  const t = Date.now();
  await page.click('#stop');
  await state(page, 'done', 1000);
  console.log(`Stop took ${Date.now() - t} ms`);
  assert.match(await page.textContent('#stats'), /stopped/);
  await page.click('#reset');
  assert.equal(await page.$$eval('#messages > li', (lis) => lis.length), 0);
  await page.fill('#n', '8');
  await send('Hi!');
  assert.equal(await page.$$eval('#messages > li', (lis) => lis.length), 2);
  assert.match(await page.textContent('#stats'), /^prompt \d+ tokens/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('Gemma 3 270M: greedy text equals the native CLI, on 1 thread and on 2', { skip: process.env.LUTRA_WEB_GEMMA !== '1' && 'LUTRA_WEB_GEMMA=1 (cargo xtask test-web --gemma)' }, async () => {
  const gemma = ['-m', path.join(root, 'models/gemma-3-270m-q4_k_m.gguf')];
  (await greedyMatchesNative('gemma', gemma, 'Otters are', 32, 300000, '&threads=1', false)).close();
  const page = await greedyMatchesNative('gemma', gemma, 'Otters are', 32, 300000, '&threads=2', false);
  await page.screenshot({ path: path.join(shots, 'gemma.png'), fullPage: true });
  await page.close();
});
