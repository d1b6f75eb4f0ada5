// docs/node.md's install and complete Express app, as a new user meets them: in a
// fresh folder, the page's install commands as written, from the release's npm tarball (packed
// here, helpers.js's packTarball; npm's cache first, which npm ci filled), then the page's app
// saved as app.js and started with node there (its Redis URL and port put to this test's). It
// answers with the fields the page describes.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { PACKAGE_TEST, ROOT, T0_MS, connect, get, limitFields, packTarball, startRedis } from './helpers.js';

/** The code block of the section `heading` of docs/node.md. */
function docsBlock(heading, lang = '') {
  const node = readFileSync(path.join(ROOT, 'docs/node.md'), 'utf8');
  const m = new RegExp(`## ${heading}\\n[\\s\\S]*?\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``).exec(node);
  assert.ok(m, `docs/node.md has "## ${heading}" and its ${lang || 'plain'} block`);
  return m[1];
}

/** The page's install commands, run in `dir`, which holds the release's tarball `tarball`. */
function install(dir, tarball) {
  const lines = docsBlock('Install').trim().split('\n');
  assert.ok(lines.some((l) => l.startsWith(`npm install ./${tarball} `)), `the page installs ./${tarball}`);
  for (const line of lines) {
    const [npm, ...args] = line.split(' ');
    assert.equal(npm, 'npm', line);
    const quiet = args[0] === 'install' ? ['--prefer-offline', '--no-audit', '--no-fund'] : [];
    execFileSync('npm', [...args, ...quiet, '--loglevel=error'], { cwd: dir, encoding: 'utf8' });
  }
}

test("docs/node.md's install and complete Express app, in a fresh folder, run and limit", { skip: PACKAGE_TEST }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-node-docs-'));
  install(dir, packTarball(dir));
  // The package installed from the tarball (not a link), its required peer (node-redis) with
  // it though the page does not name it, its optional one (ioredis) not; express beside it; the
  // app an ES module.
  assert.ok(!lstatSync(path.join(dir, 'node_modules/ratelimit-redis-module')).isSymbolicLink());
  for (const name of ['redis', 'express']) assert.ok(existsSync(path.join(dir, `node_modules/${name}/package.json`)), name);
  assert.ok(!existsSync(path.join(dir, 'node_modules/ioredis')), 'ioredis, an optional peer, not installed');
  assert.equal(JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')).type, 'module');
  const redis = await startRedis();
  const client = await connect(redis);
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const listen = "app.listen(8080, '127.0.0.1');";
  const source = docsBlock('A complete Express app', 'js');
  assert.ok(source.includes(listen) && source.includes('redis://127.0.0.1:6379'));
  writeFileSync(path.join(dir, 'app.js'), source
    .replace('redis://127.0.0.1:6379', redis.url)
    .replace(listen, "const s = app.listen(0, '127.0.0.1', () => console.log(s.address().port));"));
  const child = spawn(process.execPath, ['app.js'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  try {
    // The port is the line the app prints that is a number (anything it prints before, such
    // as a warning on a slow machine, is not; a line may come in more than one chunk).
    const port = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const line = out.split('\n').slice(0, -1).find((l) => /^\d+$/.test(l.trim()));
        if (line !== undefined) resolve(Number(line.trim()));
      });
      child.once('exit', (code) => reject(new Error(`the app exited (${code}): ${stderr}${out}`)));
    });
    const base = `http://127.0.0.1:${port}`;
    for (const [r, reset] of [[4, 6], [3, 12], [2, 18], [1, 24], [0, 30]]) {
      const res = await get(base, '/api/hello', { 'X-Api-Key': 'k1' });
      assert.deepEqual(limitFields(res), [
        200, '"default";q=5;w=30', `"default";r=${r};t=6`, '5', `${r}`, `${reset}`, undefined,
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
    rmSync(dir, { recursive: true, force: true });
    await client.quit();
    await redis.stop();
  }
});
