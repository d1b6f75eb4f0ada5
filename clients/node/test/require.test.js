// `require` and `import` of the packed package, on a Node that cannot `require` an ES module:
// node --no-experimental-require-module turns require(esm) off as Node 18 and 20 before 20.19
// have it (the package's `engines` says 18.19). The package is packed and installed into a fresh
// project (as install.test.js does), then child processes with that flag require both entries
// (`.` and `./flexible`) and import them, check and consume on a real server, and find one class
// for each name whichever way it was loaded: an object made through one passes `instanceof` of
// the other (no second copy of the implementation, so no dual-package hazard). And `exports`
// is in the order Node and TypeScript read it.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PACKAGE_TEST, startRedis } from './helpers.js';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const npm = (args, cwd) =>
  execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, encoding: 'utf8' });
// As Node 18 and 20 before 20.19: `require` of an ES module throws ERR_REQUIRE_ESM.
const OLD_NODE = ['--no-experimental-require-module'];

let dir;
let redis;
/** Runs `file` of the fresh project on the old-Node terms, its output parsed as JSON. */
const run = (file, ...args) =>
  JSON.parse(execFileSync(process.execPath, [...OLD_NODE, file, ...args], { cwd: dir, encoding: 'utf8' }));

before(async () => {
  if (PACKAGE_TEST) return; // its tests are skipped: nothing to pack
  dir = mkdtempSync(path.join(tmpdir(), 'rl-node-require-'));
  npm(['pack', pkg, '--pack-destination', dir], dir);
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
  // A CommonJS project (no "type"), as most that `require` are.
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'fresh-cjs', version: '1.0.0', private: true }));
  npm(['install', '--prefer-offline', `./${tarball}`], dir);
  redis = await startRedis();
});

after(async () => {
  await redis?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

test('require of both entries works without require(esm), and talks to the server', { skip: PACKAGE_TEST }, () => {
  writeFileSync(path.join(dir, 'required.js'), `
    const { createClient } = require('redis');
    const { RateLimit, RateLimiterRes, rateLimitMiddleware } = require('ratelimit-redis-module');
    const { RateLimiterRedis } = require('ratelimit-redis-module/flexible');
    (async () => {
      const client = createClient({ url: process.argv[2] });
      await client.connect();
      const limit = new RateLimit({ client, limit: { algorithm: 'gcra', burst: 2, rate: 1, period: '1m' }, logger: null, timeout: 60_000 });
      const checks = [];
      for (let i = 0; i < 3; i++) checks.push((await limit.check('required')).allowed);
      const limiter = new RateLimiterRedis({ storeClient: client, points: 2, duration: 60, logger: null });
      const consumed = (await limiter.consume('required', 2)).consumedPoints;
      const refused = await limiter.consume('required').catch((e) => e);
      console.log(JSON.stringify({
        requireModule: process.features.require_module,
        files: [require.resolve('ratelimit-redis-module'), require.resolve('ratelimit-redis-module/flexible'),
          require.resolve('ratelimit-redis-module/express-rate-limit')].map((f) => f.slice(f.lastIndexOf('/') + 1)),
        store: require('ratelimit-redis-module/express-rate-limit').RedisModuleStore === require('ratelimit-redis-module').RedisModuleStore,
        backend: limit.stats.backend,
        checks,
        consumed,
        refused: refused instanceof RateLimiterRes ? refused.consumedPoints : String(refused),
        middleware: typeof rateLimitMiddleware({ limiter: limit }),
      }));
      await client.quit();
    })();
  `);
  assert.deepEqual(run('required.js', redis.url), {
    requireModule: false, // the flag took: this Node cannot require an ES module
    files: ['index.cjs', 'flexible.cjs', 'express-rate-limit.cjs'],
    store: true,
    backend: 'module',
    checks: [true, true, false],
    consumed: 2,
    refused: 3,
    middleware: 'function',
  });
});

test('import of both entries works there too, and gives the classes require gives', { skip: PACKAGE_TEST }, () => {
  writeFileSync(path.join(dir, 'imported.mjs'), `
    import { createRequire } from 'node:module';
    import { createClient } from 'redis';
    import * as main from 'ratelimit-redis-module';
    import * as flexible from 'ratelimit-redis-module/flexible';
    const require = createRequire(import.meta.url);
    const cjs = require('ratelimit-redis-module');
    const cjsFlexible = require('ratelimit-redis-module/flexible');
    const client = createClient({ url: process.argv[2] });
    await client.connect();
    const limit = new main.RateLimit({ client, limit: { algorithm: 'fixedwindow', limit: 1, window: '1m' }, logger: null });
    const checks = [(await limit.check('imported')).allowed, (await limit.check('imported')).allowed];
    const limiter = new flexible.RateLimiterRedis({ storeClient: client, points: 1, duration: 60, logger: null });
    await limiter.consume('imported');
    const refused = await limiter.consume('imported').catch((e) => e);
    console.log(JSON.stringify({
      files: [import.meta.resolve('ratelimit-redis-module'), import.meta.resolve('ratelimit-redis-module/flexible')].map((f) => f.slice(f.lastIndexOf('/') + 1)),
      checks,
      // Made through import, an instance of what require gives, and the other way round.
      esmToCjs: [limit instanceof cjs.RateLimit, refused instanceof cjs.RateLimiterRes, refused instanceof cjsFlexible.RateLimiterRes,
        limiter instanceof cjsFlexible.RateLimiterRedis, limiter instanceof cjs.RateLimiterRedis],
      cjsToEsm: [new cjs.RateLimiterRes() instanceof main.RateLimiterRes, new cjsFlexible.RateLimiterRes() instanceof flexible.RateLimiterRes,
        new cjs.NotDurableError(0, 1, 100) instanceof main.NotDurableError, new cjsFlexible.ModuleRequiredError('x') instanceof main.ModuleRequiredError],
      // The same value under every name, whichever way and through whichever entry it came.
      same: Object.keys(main).every((k) => main[k] === cjs[k]) && Object.keys(flexible).every((k) => flexible[k] === cjsFlexible[k] && flexible[k] === main[k]),
      // Every name of each entry both ways: import's (an ES module's, no "default") and require's.
      names: [Object.keys(main), Object.keys(cjs), Object.keys(flexible), Object.keys(cjsFlexible)].map((n) => [...n].sort()),
    }));
    await client.quit();
  `);
  const out = run('imported.mjs', redis.url);
  assert.deepEqual(out.files, ['index.js', 'flexible.js']);
  assert.deepEqual(out.checks, [true, false]);
  assert.deepEqual(out.esmToCjs, [true, true, true, true, true]);
  assert.deepEqual(out.cjsToEsm, [true, true, true, true]);
  assert.equal(out.same, true);
  const [imported, required, flexibleImported, flexibleRequired] = out.names;
  assert.deepEqual(required, imported);
  assert.deepEqual(flexibleRequired, flexibleImported);
  assert.deepEqual(imported, [
    'Counter', 'ModuleRequiredError', 'NotDurableError', 'QUOTA_EXCEEDED_TYPE', 'REDUCED_CAPACITY_TYPE', 'RateLimit', 'RateLimiterRedis',
    'RateLimiterRes', 'RedisModuleStore', 'UNAVAILABLE_BODY', 'durationMs', 'loadSheddingBody', 'parseCount', 'parseReply', 'policyWindows', 'quotaExceededBody',
    'rateLimitHeaders', 'rateLimitMiddleware', 'reconnectStrategy',
  ]);
  assert.deepEqual(flexibleImported, ['ModuleRequiredError', 'RateLimiterRedis', 'RateLimiterRes']);
});

test("exports: per entry import, require, default; each condition's types first; every target shipped", { skip: PACKAGE_TEST }, () => {
  const { exports, main, types, files } = JSON.parse(readFileSync(path.join(pkg, 'package.json'), 'utf8'));
  const installed = path.join(dir, 'node_modules/ratelimit-redis-module');
  for (const [entry, base] of [['.', 'index'], ['./flexible', 'flexible'], ['./express-rate-limit', 'express-rate-limit']]) {
    // Node and TypeScript take the first condition that matches: "import" and "require" before
    // "default", and within each its own "types" (ESM .d.ts, CommonJS .d.cts) before the code.
    assert.deepEqual(exports[entry], {
      import: { types: `./${base}.d.ts`, default: `./${base}.js` },
      require: { types: `./${base}.d.cts`, default: `./${base}.cjs` },
      default: `./${base}.cjs`,
    }, entry);
    assert.deepEqual(Object.keys(exports[entry]), ['import', 'require', 'default']);
    for (const c of ['import', 'require']) assert.deepEqual(Object.keys(exports[entry][c]), ['types', 'default']);
    for (const target of [exports[entry].import, exports[entry].require].flatMap(Object.values)) {
      assert.ok(existsSync(path.join(installed, target)), `${target} is in the packed package`);
      assert.ok(files.includes(target.slice(2)), `${target} is in "files"`);
    }
  }
  // For tools that read no `exports`: the CommonJS entry and its types.
  assert.deepEqual([main, types], ['index.cjs', 'index.d.cts']);
});
