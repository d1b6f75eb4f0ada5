// The package installs from its path into a fresh project: npm pack, then npm install of the
// tarball (--prefer-offline: the tarballs come from npm's cache, which npm ci filled; npm asks
// the registry only for what the cache lacks, such as node-redis's version list for the peer
// dependency), then import it there and use it; and its copy of the scripts (made by prepack
// from clients/lua/, the one source) runs every limit on a plain redis-server.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { scripts } from '../lib/scripts.cjs';
import { PACKAGE_TEST, startRedis } from './helpers.js';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const npm = (args, cwd) =>
  execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, encoding: 'utf8' });

// npm pack runs the package's prepack and postpack, which make and remove clients/node/lua:
// it packs a copy of clients/node and clients/lua, so that other runs of this test (make
// test runs the suite against several servers at once) never find the folder half made or
// removed under them (one did: its tarball lacked the Lua).
function packableCopy() {
  const work = mkdtempSync(path.join(tmpdir(), 'rl-node-pack-'));
  cpSync(path.join(pkg, '../lua'), path.join(work, 'lua'), { recursive: true });
  const skip = [path.join(pkg, 'node_modules'), path.join(pkg, 'lua')];
  cpSync(pkg, path.join(work, 'node'), { recursive: true, filter: (from) => !skip.some((s) => from === s || from.startsWith(s + path.sep)) });
  return work;
}

test('npm install of the packed package into a fresh directory', { skip: PACKAGE_TEST }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-node-install-'));
  const work = packableCopy();
  const source = path.join(work, 'node');
  try {
    npm(['pack', source, '--pack-destination', dir], dir);
    const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
    assert.match(tarball, /^ratelimit-redis-module-\d+\.\d+\.\d+\.tgz$/);
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'fresh', version: '1.0.0', private: true, type: 'module' }));
    npm(['install', '--prefer-offline', `./${tarball}`], dir);
    // The peer dependency came along, and the package's files are those it declares.
    assert.ok(existsSync(path.join(dir, 'node_modules/redis/package.json')), 'node-redis installed as the peer');
    // ioredis is an optional peer, and rate-limiter-flexible no dependency: neither is installed,
    // and the package loads and runs without them (below).
    for (const absent of ['ioredis', 'rate-limiter-flexible']) {
      assert.ok(!existsSync(path.join(dir, 'node_modules', absent)), `${absent} not installed`);
    }
    assert.deepEqual(readdirSync(path.join(dir, 'node_modules/ratelimit-redis-module')).sort(),
      ['README.md', 'express-rate-limit.cjs', 'express-rate-limit.d.cts', 'express-rate-limit.d.ts', 'express-rate-limit.js',
        'flexible.cjs', 'flexible.d.cts', 'flexible.d.ts', 'flexible.js', 'index.cjs', 'index.d.cts', 'index.d.ts', 'index.js',
        'lib', 'lua', 'package.json']);
    assert.ok(!existsSync(path.join(source, 'lua')), 'postpack removed the copy: clients/lua/ stays the only one');
    assert.deepEqual(readdirSync(path.join(dir, 'node_modules/ratelimit-redis-module/lib')).sort(),
      ['backend.cjs', 'client.cjs', 'counter.cjs', 'denial-memory.cjs', 'express-store.cjs', 'fields.cjs', 'flexible-base.cjs', 'flexible.cjs', 'limits.cjs', 'local-budget.cjs', 'middleware.cjs', 'rate-limit.cjs', 'reconnect.cjs',
        'reply.cjs', 'scripts.cjs', 'setup.cjs', 'validations.cjs']);
    assert.deepEqual(readdirSync(path.join(dir, 'node_modules/ratelimit-redis-module/lua')).sort(),
      readdirSync(path.join(pkg, '../lua')).filter((f) => f !== 'README.md' && f !== 'conformance').sort());
    const script = `
      import { RateLimiterRedis, rateLimitMiddleware, rateLimitHeaders } from 'ratelimit-redis-module';
      import { createClient } from 'redis';
      const client = createClient();
      const mw = rateLimitMiddleware({ client, limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' } });
      new RateLimiterRedis({ storeClient: client, points: 5, duration: 1 });
      console.log(typeof mw, typeof mw.limiter.check,
        rateLimitHeaders({ allowed: true, name: 'default', limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 6000, windowSeconds: 30, moreAfterMs: 6000 })[1][1]);
    `;
    writeFileSync(path.join(dir, 'check.mjs'), script);
    const out = execFileSync(process.execPath, ['check.mjs'], { cwd: dir, encoding: 'utf8' });
    assert.equal(out, 'function function "default";r=4;t=6\n');
    // rate-limiter-flexible's class on its own subpath: the main entry's very class.
    writeFileSync(path.join(dir, 'flexible.mjs'), `
      import * as main from 'ratelimit-redis-module';
      import { RateLimiterRedis, RateLimiterRes, ModuleRequiredError } from 'ratelimit-redis-module/flexible';
      console.log(RateLimiterRedis === main.RateLimiterRedis, RateLimiterRes === main.RateLimiterRes,
        ModuleRequiredError === main.ModuleRequiredError);
    `);
    assert.equal(execFileSync(process.execPath, ['flexible.mjs'], { cwd: dir, encoding: 'utf8' }), 'true true true\n');
    // The store for express-rate-limit on its own subpath: the main entry's very class.
    writeFileSync(path.join(dir, 'store.mjs'), `
      import * as main from 'ratelimit-redis-module';
      import { RedisModuleStore, ModuleRequiredError } from 'ratelimit-redis-module/express-rate-limit';
      const { RedisModuleStore: Required } = (await import('node:module')).createRequire(import.meta.url)('ratelimit-redis-module/express-rate-limit');
      console.log(RedisModuleStore === main.RedisModuleStore, Required === RedisModuleStore, ModuleRequiredError === main.ModuleRequiredError);
    `);
    assert.equal(execFileSync(process.execPath, ['store.mjs'], { cwd: dir, encoding: 'utf8' }), 'true true true\n');
    // The public API, the same names through import and through require (on any Node:
    // require.test.js runs it as Node 18 would), whichever files under lib/ define them.
    writeFileSync(path.join(dir, 'names.cjs'), `
      const required = Object.keys(require('ratelimit-redis-module'));
      import('ratelimit-redis-module').then((m) => console.log(JSON.stringify([Object.keys(m), required])));
    `);
    const [imported, required] = JSON.parse(execFileSync(process.execPath, ['names.cjs'], { cwd: dir, encoding: 'utf8' }));
    assert.deepEqual(imported, [
      'Counter', 'ModuleRequiredError', 'NotDurableError', 'QUOTA_EXCEEDED_TYPE', 'REDUCED_CAPACITY_TYPE', 'RateLimit', 'RateLimiterRedis',
      'RateLimiterRes', 'RedisModuleStore', 'UNAVAILABLE_BODY', 'durationMs', 'loadSheddingBody', 'parseCount', 'parseReply', 'policyWindows',
      'quotaExceededBody',
      'rateLimitHeaders', 'rateLimitMiddleware', 'reconnectStrategy',
    ]);
    assert.deepEqual(required, imported);
    // Every script, from the installed package, on a server without the module.
    const plain = await startRedis({ withModule: false });
    try {
      writeFileSync(path.join(dir, 'scripts.mjs'), `
        import { Counter, RateLimit } from 'ratelimit-redis-module';
        import { createClient } from 'redis';
        const client = createClient({ url: process.argv[2] });
        await client.connect();
        const limits = {
          gcra: { algorithm: 'gcra', burst: 3, rate: 1, period: '1s' },
          tokenbucket: { algorithm: 'tokenbucket', capacity: 4, refillAmount: 1, refillPeriod: '1s' },
          leakybucket: { algorithm: 'leakybucket', capacity: 3, leakAmount: 1, leakPeriod: '1s' },
          fixedwindow: { algorithm: 'fixedwindow', limit: 3, window: '10s' },
          slidingwindow: { algorithm: 'slidingwindow', limit: 3, window: '10s' },
          slidinglog: { algorithm: 'slidinglog', limit: 3, window: '10s' },
          warmup: { algorithm: 'warmup', rate: 2, period: '1s', warmup: '5s' },
        };
        const out = {};
        for (const [name, limit] of Object.entries(limits)) {
          const l = new RateLimit({ client, limit, logger: null, timeout: 2000 });
          const d = await l.check(name, 2);
          out[name] = [l.stats.backend, d.allowed, d.limit, d.remaining, d.retryAfterMs, await l.refund(name, 1)];
        }
        const counter = new Counter({ client, logger: null, timeout: 2000 });
        out.counter = [(await counter.count('n', '1h', { by: 2 })).count, counter.backend];
        console.log(JSON.stringify(out));
        await client.quit();
      `);
      const out = JSON.parse(execFileSync(process.execPath, ['scripts.mjs', plain.url], { cwd: dir, encoding: 'utf8' }));
      assert.deepEqual(out, {
        gcra: ['script', true, 3, 1, 0, 1],
        tokenbucket: ['script', true, 4, 2, 0, 1],
        leakybucket: ['script', true, 3, 1, 0, 1],
        fixedwindow: ['script', true, 3, 1, 0, 1],
        slidingwindow: ['script', true, 3, 1, 0, 1],
        slidinglog: ['script', true, 3, 1, 0, 1],
        warmup: ['script', true, 1, 0, 0, 1],
        counter: [2, 'script'],
      });
      // The installed scripts are the repository's, byte for byte: the same SHAs are loaded.
      const client = createClient({ url: plain.url });
      await client.connect();
      const used = ['gcra', 'tokenbucket', 'leakybucket', 'fixedwindow', 'slidingwindow', 'slidinglog', 'warmup', 'refund', 'counter'];
      const shas = used.map((name) => scripts()[name].sha);
      assert.deepEqual(await client.sendCommand(['SCRIPT', 'EXISTS', ...shas]), shas.map(() => 1));
      await client.quit();
    } finally {
      await plain.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(work, { recursive: true, force: true });
  }
});
