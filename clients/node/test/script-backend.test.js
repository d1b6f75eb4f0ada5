// The script backend (issue 28): on a plain redis-server (no module) the package runs each limit
// as its Lua script of clients/lua/ (EVALSHA). Every algorithm through the function API gives
// the module's decisions, exact values included: the same sequence runs on a module server with
// its debug clock and on the plain server with the scripts' test-only clock (NOW, sent through
// the private TEST_NOW hook), and the decisions are compared field by field. Also: `auto`
// chooses, `module` and `script` forced, NOSCRIPT after SCRIPT FLUSH, shadow as on the module,
// what needs the module refused, each backend's keys refused by the other, a RESP2 client, local
// budgets and the Express middleware's fields and 429 (and shadow) on the scripts. The
// comparison of every algorithm, NOSCRIPT and RateLimiterRedis run on node-redis's clients and
// on ioredis's.

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import Redis from 'ioredis';
import { ModuleRequiredError, RateLimit, RateLimiterRedis, rateLimitMiddleware } from '../index.js';
import { TEST_NOW, scripts } from '../lib/scripts.cjs';
import { PATIENT, connect, helloApp, limitFields, moduleAndPlainForFile, quiet, sharedClock, strip, T0_MS, ttlWithin } from './helpers.js';

// m: a client on the module's server, p: on the plain one (RESP3).
const { withModule, plain, m, p } = await moduleAndPlainForFile();
// The same with ioredis (RESP2).
const [im, ip] = [withModule, plain].map((server) => new Redis({ host: '127.0.0.1', port: server.port }));
after(() => {
  im.disconnect();
  ip.disconnect();
});
// [kind, a client on the module's server, a client on the plain one].
const CLIENTS = [['node-redis', m, p], ['ioredis', im, ip]];


// Both clocks at T0 + ms: the module's debug clock, and the scripts' NOW for the limiters given.
const clockFor = (limiters) => sharedClock(m, limiters);


const LIMITS = {
  gcra: { algorithm: 'gcra', burst: 3, rate: 1, period: '1s' },
  tokenbucket: { algorithm: 'tokenbucket', capacity: 5, refillAmount: 2, refillPeriod: '1s' },
  tokenbucketInterval: { algorithm: 'tokenbucket', capacity: 5, refillAmount: 2, refillPeriod: '1s', interval: true },
  leakybucket: { algorithm: 'leakybucket', capacity: 3, leakAmount: 1, leakPeriod: '1s' },
  fixedwindow: { algorithm: 'fixedwindow', limit: 3, window: '10s' },
  slidingwindow: { algorithm: 'slidingwindow', limit: 3, window: '10s' },
  slidinglog: { algorithm: 'slidinglog', limit: 3, window: '10s' },
  warmup: { algorithm: 'warmup', rate: 2, period: '1s', warmup: '5s', coldFactor: 3 },
  gcraBlock: { algorithm: 'gcra', burst: 2, rate: 1, period: '1s', block: '5s' },
};

// [ms after T0, what]: admitted, COST, refused, DRYRUN, refund (also DRYRUN), ATMOST/granted,
// BLOCK (gcraBlock), idle gaps.
const STEPS = [
  [0, (l, k) => l.check(k)],
  [0, (l, k) => l.check(k, 2)],
  [0, (l, k) => l.check(k)],
  [250, (l, k) => l.check(k, 1, { dryRun: true })],
  [250, (l, k) => l.refund(k, 1, { dryRun: true })],
  [250, (l, k) => l.refund(k, 1)],
  [300, (l, k) => l.check(k, 1, { atMost: 5 })],
  [300, (l, k) => l.check(k, 1, { atMost: 5 })],
  [1700, (l, k) => l.check(k, 0)],
  [1700, (l, k) => l.check(k, 1, { atMost: 2 })],
  [3000, (l, k) => l.check(k, 3)],
  [7000, (l, k) => l.check(k)],
  [12_500, (l, k) => l.check(k, 2)],
  [12_500, (l, k) => l.refund(k, 5)],
  [25_000, (l, k) => l.check(k)],
];

for (const [kind, mc, pc] of CLIENTS) {
  test(`every algorithm on the scripts answers as the module: admitted, refused, COST, ATMOST, DRYRUN, refund, BLOCK (${kind})`, async () => {
    for (const [name, limit] of Object.entries(LIMITS)) {
      const options = { limit, prefix: `rl:eq:${kind}:${name}:`, denialMemory: 0, logger: quiet };
      const mod = new RateLimit({ ...PATIENT, ...options, client: mc, backend: 'module' });
      const scr = new RateLimit({ ...PATIENT, ...options, client: pc });
      const clock = clockFor([scr]);
      const seen = [];
      for (const [ms, step] of STEPS) {
        await clock.at(ms);
        const [a, b] = [await step(mod, 'k'), await step(scr, 'k')];
        assert.ok(a.failed === undefined && b.failed === undefined, `${name} at ${ms}: ${a.error ?? b.error}`);
        assert.deepEqual(typeof b === 'number' ? b : strip(b), typeof a === 'number' ? a : strip(a), `${name} at ${ms} ms`);
        seen.push(typeof a === 'number' ? 'refund' : a.allowed ? 'admitted' : 'refused');
      }
      assert.ok(seen.includes('admitted') && seen.includes('refused'), `${name}: ${seen}`);
      assert.deepEqual([mod.stats.backend, scr.stats.backend], ['module', 'script']);
      // The scripts' state is a hash, the module's its own type.
      assert.equal(await p.sendCommand(['TYPE', `rl:eq:${kind}:${name}:k`]), 'hash');
    }
  });
}

// [ms after T0, what]: shadow's would-be denials answered as allowed (shadowDenied), nothing
// written and no BLOCK started (the plain checks after them say so), with COST, ATMOST, DRYRUN,
// a refund, and a BLOCK in force (gcraBlock).
const SHADOW_STEPS = [
  [0, (l, k) => l.check(k, 1, { shadow: true })],
  [0, (l, k) => l.check(k, 3, { shadow: true })],
  [0, (l, k) => l.check(k, 2)],
  [0, (l, k) => l.check(k, 1, { shadow: true })],
  [0, (l, k) => l.check(k, 1, { atMost: 5, shadow: true })],
  [0, (l, k) => l.check(k, 1, { dryRun: true, shadow: true })],
  [500, (l, k) => l.check(k)],
  [500, (l, k) => l.check(k, 2, { shadow: true })],
  [1000, (l, k) => l.check(k, 9, { shadow: true })],
  [1000, (l, k) => l.check(k, 3)],
  [2000, (l, k) => l.check(k, 1, { shadow: true })],
  [3000, (l, k) => l.refund(k, 1)],
  [3000, (l, k) => l.check(k, 2, { shadow: true })],
  [12_000, (l, k) => l.check(k, 1, { atMost: 9, shadow: true })],
  [12_000, (l, k) => l.check(k)],
];

test('shadow on the scripts answers as the module: shadowDenied, nothing written, no BLOCK started', async () => {
  for (const [name, limit] of Object.entries(LIMITS)) {
    const options = { limit, prefix: `rl:shadow:${name}:`, denialMemory: 0, logger: quiet };
    const mod = new RateLimit({ ...PATIENT, ...options, client: m, backend: 'module' });
    const scr = new RateLimit({ ...PATIENT, ...options, client: p, backend: 'script' });
    const clock = clockFor([scr]);
    const shadowed = [];
    for (const [i, [ms, step]] of SHADOW_STEPS.entries()) {
      await clock.at(ms);
      const [a, b] = [await step(mod, 'k'), await step(scr, 'k')];
      assert.ok(a.failed === undefined && b.failed === undefined, `${name} step ${i}: ${a.error ?? b.error}`);
      assert.deepEqual(typeof b === 'number' ? b : strip(b), typeof a === 'number' ? a : strip(a), `${name} step ${i}`);
      if (typeof a !== 'number' && a.shadowDenied !== undefined) shadowed.push(a);
    }
    assert.ok(shadowed.every((d) => d.allowed), name);
    assert.ok(shadowed.some((d) => d.shadowDenied) && shadowed.some((d) => !d.shadowDenied), name);
    assert.equal(scr.stats.shadowDenied, mod.stats.shadowDenied, name);
  }
});

test('exact values on the scripts: GCRA 3 per 3 s, a queue\'s delay, a refund, a BLOCK', async () => {
  const gcra = new RateLimit({ ...PATIENT, client: p, limit: LIMITS.gcra, prefix: 'rl:exact:', denialMemory: 0, logger: quiet });
  const clock = clockFor([gcra]);
  await clock.at(0);
  const pick = (d) => [d.allowed, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs];
  assert.deepEqual(pick(await gcra.check('a')), [true, 3, 2, 0, 1000]);
  assert.deepEqual(pick(await gcra.check('a', 2)), [true, 3, 0, 0, 3000]);
  assert.deepEqual(pick(await gcra.check('a')), [false, 3, 0, 1000, 3000]);
  await clock.at(400);
  assert.deepEqual(pick(await gcra.check('a', 1, { dryRun: true })), [false, 3, 0, 600, 2600]);
  assert.equal(await gcra.refund('a', 1), 1);
  assert.deepEqual(pick(await gcra.check('a')), [true, 3, 0, 0, 2600]);
  const granted = await gcra.check('b', 1, { atMost: 5 });
  assert.deepEqual([...pick(granted), granted.granted], [true, 3, 0, 0, 3000, 3]);
  // A queue: 3 turns a second; the third request waits 2/3 of a second in it.
  const queue = new RateLimit({
    ...PATIENT,
    client: p, limit: { algorithm: 'leakybucket', capacity: 3, leakAmount: 3, leakPeriod: '1s' }, prefix: 'rl:exact:', denialMemory: 0, logger: quiet,
  });
  queue[TEST_NOW] = gcra[TEST_NOW];
  assert.deepEqual((await Promise.all([1, 2, 3, 4].map(() => queue.check('q')))).map((d) => d.delayMs), [0, 334, 667, -1]);
  // BLOCK: refused for 5 s after the refusal, though GCRA has room again after 1 s.
  const blocked = new RateLimit({ ...PATIENT, client: p, limit: LIMITS.gcraBlock, prefix: 'rl:exact:', denialMemory: 0, logger: quiet });
  blocked[TEST_NOW] = gcra[TEST_NOW];
  await clock.at(10_000);
  assert.deepEqual([(await blocked.check('c', 2)).allowed, (await blocked.check('c')).allowed], [true, false]);
  await clock.at(13_000);
  assert.deepEqual(pick(await blocked.check('c')), [false, 2, 0, 2000, 2000]);
  await clock.at(15_000);
  assert.deepEqual(pick(await blocked.check('c')), [true, 2, 1, 0, 1000]);
});

test('auto: the module where it is loaded, the scripts where not, decided once per client and logged once', async () => {
  const lines = [];
  const logger = { warn: (s) => lines.push(`warn ${s}`), info: (s) => lines.push(`info ${s}`) };
  const client = await connect(plain);
  try {
    const limit = LIMITS.gcra;
    const a = new RateLimit({ ...PATIENT, client, limit, prefix: 'rl:auto:', logger });
    const b = new RateLimit({ ...PATIENT, client, limit, prefix: 'rl:auto:', logger });
    assert.equal(a.stats.backend, undefined, 'undefined before the first call');
    assert.equal((await a.check('x')).allowed, true);
    assert.equal((await b.check('y')).allowed, true);
    assert.deepEqual([a.stats.backend, b.stats.backend], ['script', 'script']);
    assert.deepEqual(lines, ['info ratelimit: the server has no ratelimit module; using the script backend']);
  } finally {
    await client.quit();
  }
  const mlines = [];
  const onModule = new RateLimit({ ...PATIENT, client: m, limit: LIMITS.gcra, prefix: 'rl:auto:', logger: { warn() {}, info: (s) => mlines.push(s) } });
  assert.equal((await onModule.check('x')).allowed, true);
  assert.equal(onModule.stats.backend, 'module');
  assert.equal(await m.sendCommand(['TYPE', 'rl:auto:x']), 'ratelimit');
  assert.ok(mlines.length <= 1 && mlines.every((s) => s === 'ratelimit: the server has the ratelimit module; using the module'));
});

test('backend "module" without the module rejects with an error naming it; "script" on a module server works', async () => {
  const limiter = new RateLimit({ ...PATIENT, client: p, limit: LIMITS.gcra, prefix: 'rl:forced:', backend: 'module', logger: quiet });
  await assert.rejects(limiter.check('x'), (e) => e instanceof ModuleRequiredError && /needs the ratelimit module/.test(e.message));
  assert.equal(limiter.stats.failures, 0);
  const scr = new RateLimit({ ...PATIENT, client: m, limit: LIMITS.gcra, prefix: 'rl:forced:', backend: 'script', logger: quiet });
  assert.equal(scr.stats.backend, 'script');
  const d = await scr.check('x', 2);
  assert.deepEqual([d.allowed, d.remaining], [true, 1]);
  assert.equal(await m.sendCommand(['TYPE', 'rl:forced:x']), 'hash');
  assert.equal(await scr.refund('x', 1), 1);
  assert.throws(() => new RateLimit({ client: m, limit: LIMITS.gcra, backend: 'lua' }), /invalid backend/);
});

for (const [kind, mc, pc] of CLIENTS) {
  test(`NOSCRIPT: after SCRIPT FLUSH the next call loads the script again and answers (${kind})`, async () => {
    const limiter = new RateLimit({ ...PATIENT, client: pc, limit: LIMITS.slidinglog, prefix: `rl:flush:${kind}:`, denialMemory: 0, logger: quiet });
    const { sha } = scripts().slidinglog;
    assert.equal((await limiter.check('k')).remaining, 2);
    assert.deepEqual(await p.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);
    await p.sendCommand(['SCRIPT', 'FLUSH']);
    assert.deepEqual(await p.sendCommand(['SCRIPT', 'EXISTS', sha]), [0]);
    const d = await limiter.check('k');
    assert.deepEqual([d.failed, d.allowed, d.remaining], [undefined, true, 1]);
    assert.deepEqual(await p.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);
    await p.sendCommand(['SCRIPT', 'FLUSH']);
    assert.equal(await limiter.refund('k', 1), 1, 'RL.REFUND too');
  });
}

test('what needs the module is refused on the scripts before anything is sent, naming the module', async () => {
  const needs = (e) => e instanceof ModuleRequiredError && /needs the ratelimit module/.test(e.message);
  for (const limit of [{ policy: 'p' }, { algorithm: 'concurrency', limit: 20, lease: '10s', adaptive: 'aimd' }]) {
    assert.throws(() => new RateLimit({ client: p, limit, backend: 'script', logger: quiet }), needs);
    const auto = new RateLimit({ ...PATIENT, client: p, limit, prefix: 'rl:needs:', logger: quiet });
    await assert.rejects(auto.check('k'), needs);
    assert.equal(auto.stats.failures, 0);
  }
  // With shadow too: shadow itself runs on the scripts, a policy or an adaptive limit does not.
  for (const limit of [{ policy: 'p' }, { algorithm: 'concurrency', limit: 20, lease: '10s', adaptive: 'vegas' }]) {
    const auto = new RateLimit({ ...PATIENT, client: p, limit, prefix: 'rl:needs:', logger: quiet });
    await assert.rejects(auto.check('k', 1, { shadow: true }), needs);
  }
  assert.equal(await p.sendCommand(['EXISTS', 'rl:needs:k']), 0, 'nothing was written');
  // A policy with a local budget: its refill rejects too (not a pass).
  const budget = new RateLimit({ ...PATIENT, client: p, limit: { policy: 'p' }, localBudget: 3, prefix: 'rl:needs:', logger: quiet });
  await assert.rejects(budget.check('k'), needs);
  await budget.close();
});

test('a key written by one backend is refused by the other with a clear error', async () => {
  const options = { client: m, limit: LIMITS.gcra, prefix: 'rl:cross:', failMode: 'closed', denialMemory: 0 };
  const warned = [];
  const logger = { warn: (s) => warned.push(s), info() {} };
  const mod = new RateLimit({ ...PATIENT, ...options, backend: 'module', logger });
  const scr = new RateLimit({ ...PATIENT, ...options, backend: 'script', logger });
  assert.equal((await mod.check('byModule')).allowed, true);
  assert.equal((await scr.check('byScript')).allowed, true);
  const a = await scr.check('byModule');
  assert.deepEqual([a.failed, a.allowed], [true, false]);
  assert.match(a.error.message, /^WRONGTYPE the key holds a value of another type \(a ratelimit module key/);
  const b = await mod.check('byScript');
  assert.deepEqual([b.failed, b.allowed], [true, false]);
  assert.match(b.error.message, /^WRONGTYPE/);
  assert.equal(warned.length, 2);
  assert.match(warned[0], /WRONGTYPE the key holds a value of another type/);
  await assert.rejects(scr.refund('byModule', 1), /WRONGTYPE the key holds a value of another type/);
});

test('a RESP2 client and a local budget on the scripts', async () => {
  const client = await connect(plain, { RESP: 2 });
  try {
    const limiter = new RateLimit({ ...PATIENT, client, limit: LIMITS.gcra, prefix: 'rl:resp2:', denialMemory: 0, logger: quiet });
    limiter[TEST_NOW] = () => T0_MS * 1000;
    const d = await limiter.check('k', 1, { atMost: 2 });
    assert.deepEqual([d.allowed, d.remaining, d.granted, d.resetAfterMs], [true, 1, 2, 2000]);
    const budget = new RateLimit({ ...PATIENT, client, limit: LIMITS.fixedwindow, prefix: 'rl:budget:', localBudget: 3, logger: quiet });
    const taken = [];
    for (let i = 0; i < 4; i++) taken.push(await budget.check('k'));
    assert.deepEqual(taken.map((t) => [t.allowed, t.local]), [[true, false], [true, true], [true, true], [false, false]]);
    assert.equal(budget.stats.refills, 2);
    assert.equal(await budget.close(), 0);
    assert.equal(budget.stats.backend, 'script');
  } finally {
    await client.quit();
  }
});

test('the Express middleware on the scripts: the same fields and 429 as on the module', async () => {
  const limit = { algorithm: 'gcra', burst: 2, rate: 1, period: '30s' };
  const key = (req) => req.get('X-Client-Id');
  const onModule = rateLimitMiddleware({ ...PATIENT, client: m, limit, key, prefix: 'rl:mw:', logger: quiet });
  const onScripts = rateLimitMiddleware({ ...PATIENT, client: p, limit, key, prefix: 'rl:mw:', logger: quiet });
  clockFor([onScripts.limiter]);
  await m.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const [a, b] = [await helloApp(onModule), await helloApp(onScripts)];
  try {
    const got = [];
    for (let i = 0; i < 3; i++) {
      const [x, y] = [await a.as('ann'), await b.as('ann')];
      assert.deepEqual(limitFields(y), limitFields(x));
      assert.equal(y.body, x.body);
      got.push(y.status);
    }
    assert.deepEqual(got, [200, 200, 429]);
    assert.equal(onScripts.limiter.stats.backend, 'script');
    // shadow: the same fields as on the module, and never a 429.
    const shadowOnModule = rateLimitMiddleware({ ...PATIENT, client: m, limit, key, shadow: true, prefix: 'rl:mw:', logger: quiet });
    const shadowOnScripts = rateLimitMiddleware({ ...PATIENT, client: p, limit, key, shadow: true, prefix: 'rl:mw:', backend: 'script', logger: quiet });
    clockFor([shadowOnScripts.limiter]);
    const [c, e] = [await helloApp(shadowOnModule), await helloApp(shadowOnScripts)];
    try {
      const statuses = [];
      for (let i = 0; i < 3; i++) {
        const [x, y] = [await c.as('ann'), await e.as('ann')];
        assert.deepEqual(limitFields(y), limitFields(x));
        statuses.push(y.status);
      }
      assert.deepEqual(statuses, [200, 200, 200]);
      assert.equal(shadowOnScripts.limiter.stats.shadowDenied, 3);
    } finally {
      await c.http.close();
      await e.http.close();
    }
  } finally {
    await a.http.close();
    await b.http.close();
  }
});

for (const [kind, mc, pc] of CLIENTS) {
  test(`RateLimiterRedis on the scripts: consume, get, reward, penalty, block, delete as on the module (${kind})`, async () => {
    const flexible = (client, backend) =>
      new RateLimiterRedis({ storeClient: client, points: 3, duration: 10, blockDuration: 20, keyPrefix: `flx-${kind}`, backend, logger: null });
    const mod = flexible(mc, 'module');
    const scr = flexible(pc, 'auto');
    await Promise.all([m.sendCommand(['DEL', `flx-${kind}:u`, `flx-${kind}:v`, `flx-${kind}:w`]), p.sendCommand(['DEL', `flx-${kind}:u`, `flx-${kind}:v`, `flx-${kind}:w`])]);
    const json = (r) => (typeof r?.toJSON === 'function' ? r.toJSON() : r);
    const settle = (promise) => promise.then((r) => ['ok', json(r)], (r) => ['refused', r instanceof Error ? r.message : json(r)]);
    // Each key's window is its TTL on its server's clock (RL.COUNTER, counter.lua): msBeforeNext
    // checked between the step's window and that less the real time since the test began
    // (ttlWithin), then written as the window, so the rest compares exactly.
    const since = performance.now();
    const windowed = ([how, r], windowMs) => {
      if (r === null || typeof r !== 'object') return [how, r];
      ttlWithin(r.msBeforeNext, windowMs, since, 'msBeforeNext');
      return [how, { ...r, msBeforeNext: windowMs }];
    };
    const steps = [
      [10_000, (l) => l.consume('u')],
      [10_000, (l) => l.consume('u', 2)],
      [10_000, (l) => l.get('u')],
      [10_000, (l) => l.reward('u', 1)],
      [10_000, (l) => l.consume('u')],
      [20_000, (l) => l.consume('u')], // over: blockDuration starts
      [20_000, (l) => l.consume('u')],
      [10_000, (l) => l.penalty('v', 2)],
      [20_000, (l) => l.consume('v', 5)], // more than points
      [30_000, (l) => l.block('w', 30)],
      [30_000, (l) => l.get('w')],
      [0, (l) => l.delete('w')],
    ];
    for (const [windowMs, step] of steps) {
      assert.deepEqual(windowed(await settle(step(scr)), windowMs), windowed(await settle(step(mod)), windowMs), `${step}`);
    }
    assert.equal(scr.backend, 'script');
    // NOSCRIPT (a consume): loaded again, answered.
    await m.sendCommand(['DEL', `flx-${kind}:x`]);
    await p.sendCommand(['DEL', `flx-${kind}:x`]);
    await Promise.all([mod.consume('x', 2), scr.consume('x', 2)]);
    await p.sendCommand(['SCRIPT', 'FLUSH']);
    assert.deepEqual(windowed(await settle(scr.reward('x', 1)), 10_000), windowed(await settle(mod.reward('x', 1)), 10_000));
    assert.throws(() => flexible(pc, 'redis'), /invalid backend/);
  });
}
