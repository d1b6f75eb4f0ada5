// docs/express-rate-limit.md as an express-rate-limit user meets it: in a fresh folder, the
// page's install from the release's npm tarball (packed here from a copy of the package,
// helpers.js's packTarball; npm's cache first), `npm pkg set type=module`, then the page's app
// saved as app.js and started with node (its Redis URL and port put to this test's): it answers
// with the fields the page shows, and the 101st request with 429.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { PACKAGE_TEST, ROOT, T0_MS, connect, get, packTarball, startRedis } from './helpers.js';

const page = () => readFileSync(path.join(ROOT, 'docs/express-rate-limit.md'), 'utf8');
const npm = (args, cwd) => execFileSync('npm', [...args, '--loglevel=error'], { cwd, encoding: 'utf8' });

test("docs/express-rate-limit.md's install from the tarball and its app, in a fresh folder, limit", { skip: PACKAGE_TEST }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-node-erl-docs-'));
  let child;
  let redis;
  let client;
  try {
    const tarball = packTarball(dir);
    // The page's first command, as written (the tarball's version is the package's).
    const install = /## Install\n[\s\S]*?```\n(npm install \.\/ratelimit-redis-module-[^\n]*)\n```/.exec(page());
    assert.ok(install, 'the page installs from the tarball first');
    assert.equal(install[1], `npm install ./${tarball} express-rate-limit@8 express@5`);
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'erl-app', version: '1.0.0', private: true }));
    npm([...install[1].split(' ').slice(1), '--prefer-offline', '--no-audit', '--no-fund'], dir);
    npm(['pkg', 'set', 'type=module'], dir);
    for (const name of ['redis', 'express', 'express-rate-limit', 'ratelimit-redis-module']) {
      assert.ok(existsSync(path.join(dir, `node_modules/${name}/package.json`)), `${name} installed`);
    }
    redis = await startRedis();
    client = await connect(redis);
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const app = /Saved as `app\.js`[\s\S]*?```js\n([\s\S]*?)```/.exec(page());
    assert.ok(app, 'the page has the app');
    const listen = "app.listen(8080, '127.0.0.1');";
    const source = app[1];
    assert.ok(source.includes(listen) && source.includes('redis://127.0.0.1:6379'));
    writeFileSync(path.join(dir, 'app.js'), source
      .replace('redis://127.0.0.1:6379', redis.url)
      .replace(listen, "const s = app.listen(0, '127.0.0.1', () => console.log(s.address().port));"));
    child = spawn(process.execPath, ['app.js'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => { stderr += d; });
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
    const first = await get(base, '/');
    // What the page says curl shows.
    assert.ok(page().includes('`RateLimit: "100-in-15min"; r=99; t=900`'));
    assert.deepEqual([first.status, first.body, first.headers.ratelimit, first.headers['x-ratelimit-limit']],
      [200, 'hello', '"100-in-15min"; r=99; t=900', undefined]);
    for (let i = 0; i < 99; i++) assert.equal((await get(base, '/')).status, 200);
    const refused = await get(base, '/');
    assert.deepEqual([refused.status, refused.headers.ratelimit, refused.headers['retry-after']],
      [429, '"100-in-15min"; r=0; t=900', '900']);
    assert.equal(await client.exists('rl:erl:127.0.0.1'), 1);
  } finally {
    child?.kill('SIGKILL');
    await client?.quit();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
