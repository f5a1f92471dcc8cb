// The page loads MODEL (qwen|gemma, placed by `cargo xtask web --model MODEL`) twice in one persistent Chromium profile
// (the second from the Cache API) and generates 32 tokens; run beside 2026-12-07-page-pss.sh, which samples the summed
// PSS of every Chromium process: `bench/results/2026-12-07-page-pss.sh qwen`.
import { chromium } from '../../www/node_modules/playwright-core/index.mjs';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
const server = spawn(process.execPath, ['serve.mjs', '.', '0', '--isolated'], { cwd: new URL('../../www', import.meta.url).pathname, stdio: ['ignore', 'pipe', 'inherit'] });
const base = await new Promise((r) => server.stdout.once('data', (d) => r(String(d).match(/http:\S+/)[0])));
const profile = fs.mkdtempSync('/tmp/lutra-prof-');
const ctx = await chromium.launchPersistentContext(profile, { executablePath: '/usr/bin/chromium', headless: true, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
const model = process.argv[2] || 'qwen';
for (const round of [1, 2]) {
  const page = await ctx.newPage();
  await page.goto(`${base}index.html?model=${model}&threads=1&chat=0&prompt=Otters%20are&n=32&temp=0&autorun=1`);
  await page.waitForSelector('body[data-state="done"]', { timeout: 300000 });
  console.log(`round ${round}:`, await page.textContent('#status'));
  await page.close();
}
await ctx.close();
server.kill();
fs.rmSync(profile, { recursive: true, force: true });
