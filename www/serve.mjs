// Static server for the page: `node serve.mjs DIR PORT [--isolated]` (PORT 0 picks a free
// one). --isolated sends COOP/COEP, so the page is crossOriginIsolated (threads-ready).
// Prints `serving http://127.0.0.1:PORT/` once listening.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';

const [dirArg, portArg, flag] = process.argv.slice(2);
const dir = path.resolve(dirArg || '.');
const types = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.css': 'text/css', '.wasm': 'application/wasm', '.json': 'application/json', '.png': 'image/png',
};
const server = http.createServer((req, res) => {
  let p;
  try {
    p = path.join(dir, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  } catch {
    res.writeHead(400).end();
    return;
  }
  if (p.endsWith(path.sep)) p = path.join(p, 'index.html');
  if (!p.startsWith(dir + path.sep) && p !== dir) {
    res.writeHead(403).end();
    return;
  }
  fs.stat(p, (err, st) => {
    if (err || !st.isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    const headers = { 'Content-Type': types[path.extname(p)] || 'application/octet-stream', 'Content-Length': st.size, 'Cache-Control': 'no-cache' };
    if (flag === '--isolated') {
      headers['Cross-Origin-Opener-Policy'] = 'same-origin';
      headers['Cross-Origin-Embedder-Policy'] = 'require-corp';
    }
    res.writeHead(200, headers);
    if (req.method === 'HEAD') res.end();
    else fs.createReadStream(p).pipe(res);
  });
});
server.listen(Number(portArg || 8080), '127.0.0.1', () => {
  console.log(`serving http://127.0.0.1:${server.address().port}/`);
});
