// Concurrency leases on the script backend (issue 28): on a plain redis-server (no module) a
// concurrency limit runs as clients/lua/concurrency_acquire.lua and concurrency_release.lua.
// The same sequence of acquisitions (generated tokens and the caller's, renewals, refusals,
// SHADOW, DRYRUN) and releases runs on a module server with its debug clock and on the plain
// server with the scripts' test-only clock (NOW, through the private TEST_NOW hook), and the
// decisions are compared field by field, tokens included. The Express middleware holds a lease
// per request in flight there; adaptive limits still need the module.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import express from 'express';
import { ModuleRequiredError, RateLimit, rateLimitMiddleware } from '../index.js';
import { TEST_NOW } from '../lib/scripts.cjs';
import { PATIENT, get, limitFields, moduleAndPlainForFile, quiet, serve, sharedClock, strip } from './helpers.js';

// m: a client on the module's server, p: on the plain one (RESP3).
const { withModule, plain, m, p } = await moduleAndPlainForFile();


// Both clocks at T0 + ms: the module's debug clock, and the scripts' NOW for the limiters given.
const clockFor = (limiters) => sharedClock(m, limiters);

// [ms after T0, limit, what]: `held` names the decisions kept to release later (per backend).
const STEPS = [
  [0, 'two', (l, k) => l.check(k)],
  [0, 'two', (l, k) => l.check(k, 1, { id: 'worker-7' })],
  [0, 'two', (l, k) => l.check(k)], // refused: both held
  [0, 'two', (l, k) => l.check(k, 1, { shadow: true })], // answered allowed, no lease
  [0, 'three', (l, k) => l.check(k, 1, { dryRun: true })],
  [4000, 'two', (l, k) => l.check(k, 1, { id: 'worker-7' })], // renewed: no second slot
  [4000, 'two', (l, k, held) => l.release(k, held[1], { rtt: 250 })],
  [4000, 'two', (l, k) => l.check(k, 1, { dryRun: true })],
  [4000, 'two', (l, k, held) => l.release(k, held[1], { dropped: true })], // no longer held
  [4000, 'two', (l, k, held) => l.release(k, held[0])],
  [4000, 'two', (l, k) => l.check(k, 1, { shadow: true })],
  [5000, 'one', (l, k) => l.check(k)],
  [5000, 'one', (l, k) => l.check(k, 1, { id: 'w' })], // refused: above the lowered limit
  [9000, 'one', (l, k) => l.check(k, 1, { dryRun: true })],
  [14_001, 'one', (l, k) => l.check(k, 1, { id: 'w' })], // the renewed lease ended
  [14_001, 'three', (l, k) => l.check(k)],
];

test('leases on the scripts answer as the module: generated tokens and ID, renewals, refusals, SHADOW, DRYRUN, releases', async () => {
  const limits = {
    one: { algorithm: 'concurrency', limit: 1, lease: '10s' },
    two: { algorithm: 'concurrency', limit: 2, lease: '10s' },
    three: { algorithm: 'concurrency', limit: 3, lease: '1m' },
  };
  const make = (client, backend) =>
    Object.fromEntries(Object.entries(limits).map(([n, limit]) => [n, new RateLimit({ ...PATIENT, client, limit, prefix: 'rl:leases:', denialMemory: 0, logger: quiet, backend })]));
  const mod = make(m, 'module');
  const scr = make(p, 'auto');
  const clock = clockFor(Object.values(scr));
  await Promise.all([m.sendCommand(['DEL', 'rl:leases:k']), p.sendCommand(['DEL', 'rl:leases:k'])]);
  const held = { mod: [], scr: [] };
  const seen = [];
  for (const [ms, limit, step] of STEPS) {
    await clock.at(ms);
    const a = await step(mod[limit], 'k', held.mod);
    const b = await step(scr[limit], 'k', held.scr);
    if (a === undefined) {
      assert.equal(b, undefined); // a release: what it did shows in the next decisions
      continue;
    }
    assert.ok(a.failed === undefined && b.failed === undefined, `at ${ms}: ${a.error ?? b.error}`);
    assert.deepEqual(strip(b), strip(a), `at ${ms} ms`);
    if (a.token !== undefined && a.allowed && !a.shadowDenied) {
      held.mod.push(a);
      held.scr.push(b);
    }
    seen.push(a.shadowDenied ? 'shadow' : a.allowed ? 'admitted' : 'refused');
  }
  assert.ok(['admitted', 'refused', 'shadow'].every((s) => seen.includes(s)), String(seen));
  assert.equal(held.scr[0].token, '60a24181e4000-0');
  assert.equal(scr.two.stats.backend, 'script');
  assert.equal(scr.two.stats.releaseFailures, 0);
  assert.equal(await p.sendCommand(['TYPE', 'rl:leases:k']), 'zset');
});

test('adaptive concurrency limits still need the module on the scripts, refused before anything is sent', async () => {
  const needs = (e) => e instanceof ModuleRequiredError && /adaptive concurrency limit needs the ratelimit module/.test(e.message);
  const limit = { algorithm: 'concurrency', limit: 20, lease: '10s', adaptive: 'aimd' };
  assert.throws(() => new RateLimit({ client: p, limit, backend: 'script', logger: quiet }), needs);
  const auto = new RateLimit({ ...PATIENT, client: p, limit, prefix: 'rl:adaptive:', logger: quiet });
  await assert.rejects(auto.check('k'), needs);
  assert.equal(auto.stats.failures, 0);
  assert.equal(await p.sendCommand(['EXISTS', 'rl:adaptive:k']), 0, 'nothing was written');
  // A plain one works there.
  const plainLimit = new RateLimit({ ...PATIENT, client: p, limit: { algorithm: 'concurrency', limit: 1, lease: '10s' }, prefix: 'rl:adaptive:', backend: 'script', logger: quiet });
  const d = await plainLimit.check('k');
  assert.deepEqual([d.allowed, d.remaining, d.limit], [true, 0, 1]);
  await plainLimit.release('k', d);
  assert.equal(await p.sendCommand(['EXISTS', 'rl:adaptive:k']), 0, 'the last lease released: the key goes');
});

test('the middleware on the scripts: a lease per request in flight, the (limit + 1)-th refused, given back when its response ends', async () => {
  await p.sendCommand(['DEL', 'rl:conc:jobs']);
  const limit = rateLimitMiddleware({
    ...PATIENT,
    client: p,
    limit: { algorithm: 'concurrency', limit: 2, lease: '30s' },
    key: () => 'jobs',
    prefix: 'rl:conc:',
    logger: quiet,
  });
  let open;
  const gate = new Promise((r) => { open = r; });
  const a = express();
  a.use(limit);
  a.get('/', async (req, res) => {
    await gate;
    res.send('done');
  });
  const http = await serve(a);
  // The leases held (members past the key's four of layout and parameters; leases end in 30 s,
  // far beyond the test).
  const held = async () => Math.max(0, Number(await p.sendCommand(['ZCARD', 'rl:conc:jobs'])) - 4);
  const until = async (n) => {
    for (let i = 0; i < 200 && (await held()) !== n; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(await held(), n);
  };
  try {
    const first = get(http.url);
    const second = get(http.url);
    await until(2);
    const refused = await get(http.url);
    assert.deepEqual(limitFields(refused), [
      429, '"default";q=2;qu="concurrent-requests"', '"default";r=0;t=30', '2', '0', '30', '30',
    ]);
    assert.equal(limit.limiter.stats.backend, 'script');
    open();
    const done = await Promise.all([first, second]);
    assert.deepEqual(done.map((r) => r.status), [200, 200]);
    await until(0);
    assert.equal(await p.sendCommand(['EXISTS', 'rl:conc:jobs']), 0, 'the last release removed the key');
    assert.equal((await get(http.url)).headers.ratelimit, '"default";r=1');
    assert.equal(limit.limiter.stats.releaseFailures, 0);
  } finally {
    await http.close();
  }
});
