// The complete Express app of docs/clients.md runs as written (its Redis URL and port put to
// this test's), and answers with the fields the page describes.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ROOT, T0_MS, connect, get, limitFields, startRedis } from './helpers.js';

const here = path.dirname(fileURLToPath(import.meta.url));

function docsApp() {
  const page = readFileSync(path.join(ROOT, 'docs/clients.md'), 'utf8');
  const m = /### A complete Express app\n\n```js\n([\s\S]*?)```/.exec(page);
  assert.ok(m, 'docs/clients.md has "### A complete Express app" and its js block');
  return m[1];
}

test("docs/clients.md's complete Express app runs and limits", async () => {
  const redis = await startRedis();
  const client = await connect(redis);
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  // The page's app, inside this package so that its import of the package's own name resolves.
  const file = path.join(here, '.docs-app.mjs');
  const listen = "app.listen(8080, '127.0.0.1');";
  const source = docsApp();
  assert.ok(source.includes(listen) && source.includes('redis://127.0.0.1:6379'));
  writeFileSync(file, source
    .replace('redis://127.0.0.1:6379', redis.url)
    .replace(listen, "const s = app.listen(0, '127.0.0.1', () => console.log(s.address().port));"));
  const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  try {
    const port = await new Promise((resolve, reject) => {
      child.stdout.once('data', (d) => resolve(Number(String(d).trim())));
      child.once('exit', (code) => reject(new Error(`the app exited (${code}): ${stderr}`)));
    });
    const base = `http://127.0.0.1:${port}`;
    for (const [r, t] of [[4, 6], [3, 12], [2, 18], [1, 24], [0, 30]]) {
      const res = await get(base, '/api/hello', { 'X-Api-Key': 'k1' });
      assert.deepEqual(limitFields(res), [
        200, '"default";q=5;w=60', `"default";r=${r};t=${t}`, '5', `${r}`, `${t}`, undefined,
      ]);
      assert.equal(res.body, '{"hello":"world"}');
    }
    const refused = await get(base, '/api/hello', { 'X-Api-Key': 'k1' });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers['retry-after'], '6');
    const stats = JSON.parse((await get(base, '/metrics/ratelimit')).body);
    assert.deepEqual([stats.admitted, stats.denied, stats.failures], [5, 1, 0]);
  } finally {
    child.kill('SIGKILL');
    rmSync(file, { force: true });
    await client.quit();
    await redis.stop();
  }
});
