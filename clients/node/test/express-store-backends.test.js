// RedisModuleStore on both backends and with the module's other algorithms, behind
// express-rate-limit in Express apps over real HTTP: the same requests on a server with the
// module (its debug clock) and on a plain redis-server (the script backend, on the scripts'
// test-only clock, NOW), at one shared instant, give the same fields; express-rate-limit's
// window on the scripts (EVALSHA, one a request; its window the key's TTL on each server's own
// clock); `limit: { algorithm }` (GCRA, a sliding
// window) with its exact fields, a refusal that takes nothing and whose decrement under
// skipFailedRequests gives nothing back, the refusals a key remembers for that bounded (the
// rest counted, never given back); and what init and the constructor refuse, by name.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RedisModuleStore } from '../express-rate-limit.js';
import { DRAFT6, LEGACY, app, fields, inWindow, watchDecrements } from './express-store-app.js';
import { PATIENT, calls, endWindow, moduleAndPlainForFile, quiet, sharedClock } from './helpers.js';

const { m, p } = await moduleAndPlainForFile();

/** A store on the module's server and one on the plain server, and their shared clock. */
function pair(options = {}) {
  const base = { timeout: PATIENT.timeout, setupTimeout: PATIENT.setupTimeout, logger: quiet, ...options };
  const mod = new RedisModuleStore({ ...base, client: m, backend: 'module' });
  const scr = new RedisModuleStore({ ...base, client: p });
  return { mod, scr, clock: sharedClock(m, [scr]) };
}

/**
 * A response as both backends must give it: its status, fields and body, without what is read
 * off this process's wall clock (X-RateLimit-Reset, /info's resetTime).
 */
const NAMES = [...LEGACY, ...DRAFT6, 'retry-after'];
function seen(r) {
  const body = r.body.startsWith('{') ? { ...JSON.parse(r.body), resetTime: undefined } : r.body;
  return [r.status, fields(r, NAMES), body];
}

test('express-rate-limit\'s window on the scripts: the module\'s fields, one EVALSHA a request', async () => {
  const { mod, scr } = pair({ prefix: 'rl:erlw:' });
  const options = { windowMs: 30_000, limit: 2, standardHeaders: 'draft-6' };
  const a = await app({ ...options, store: mod });
  const b = await app({ ...options, store: scr });
  try {
    const evals = await calls(p, 'evalsha');
    // The window is the key's TTL on each server's clock: each step's seconds left checked
    // between bounds of the real time since its window began (inWindow); 18 s left made so
    // (PEXPIRE), and the window ended by the keys' expiry (endWindow).
    const steps = [['w', 30_000], ['w', 30_000], ['w', 30_000], ['w', 18_000, 'left'], ['w', 30_000, 'ended'], ['v', 30_000]];
    const ours = [];
    const theirs = [];
    let since = performance.now();
    for (const [id, windowMs, event] of steps) {
      if (event === 'left') {
        since = performance.now();
        for (const c of [m, p]) assert.equal(await c.pExpire('rl:erlw:w', 18_000), 1);
      } else if (event === 'ended') {
        await endWindow(m, 'rl:erlw:w');
        await endWindow(p, 'rl:erlw:w');
        since = performance.now();
      }
      ours.push(seen(inWindow(await a.as(id), windowMs, since)));
      theirs.push(seen(inWindow(await b.as(id), windowMs, since)));
    }
    assert.deepEqual(theirs, ours);
    assert.deepEqual(ours.map(([status, f]) => [status, f['x-ratelimit-remaining'], f['ratelimit-reset'], f['retry-after']]), [
      [200, '1', '30', undefined],
      [200, '0', '30', undefined],
      [429, '0', '30', '30'],
      [429, '0', '18', '18'],
      [200, '1', '30', undefined], // a new window, once the key expired
      [200, '1', '30', undefined],
    ]);
    assert.equal(await calls(p, 'evalsha') - evals, steps.length, 'one EVALSHA a request');
    assert.equal(scr.stats.backend, 'script');
    assert.equal(mod.stats.backend, 'module');
    // The keys are the same plain strings on both; a decrement and a read on the scripts.
    assert.deepEqual([await m.get('rl:erlw:w'), await p.get('rl:erlw:w')], ['1', '1']);
    assert.equal((await scr.get('w'))?.totalHits, 1);
    await scr.decrement('w');
    assert.equal((await scr.get('w'))?.totalHits, 0);
  } finally {
    await a.close();
    await b.close();
  }
});

test('limit: { algorithm: "gcra" }: the module decides, a refusal takes nothing, on both backends', async () => {
  // GCRA burst 3 at 3 a minute: one unit back each 20 s.
  const { mod, scr, clock } = pair({ prefix: 'rl:erlg:', limit: { algorithm: 'gcra', burst: 3, rate: 3, period: '1m' } });
  const options = { windowMs: 60_000, limit: 3, standardHeaders: 'draft-6' };
  const a = await app({ ...options, store: mod });
  const b = await app({ ...options, store: scr });
  try {
    const steps = [[0, '/info'], [0, '/info'], [0, '/'], [0, '/'], [0, '/'], [20_000, '/info'], [20_000, '/']];
    const ours = [];
    const theirs = [];
    for (const [ms, path] of steps) {
      await clock.at(ms);
      ours.push(await a.as('g', path));
      theirs.push(await b.as('g', path));
    }
    assert.deepEqual(theirs.map(seen), ours.map(seen));
    assert.deepEqual(ours.map((r) => [r.status, r.headers['x-ratelimit-remaining'], r.headers['ratelimit-reset'], r.headers['retry-after']]), [
      [200, '2', '20', undefined],
      [200, '1', '40', undefined],
      [200, '0', '60', undefined],
      [429, '0', '20', '20'], // refused: resetTime is the retry time
      [429, '0', '20', '20'], // the refusal took nothing: still 20 s
      [200, '0', '60', undefined], // 20 s later one unit is back, and taken
      [429, '0', '20', '20'],
    ]);
    assert.deepEqual([JSON.parse(ours[0].body).used, JSON.parse(ours[1].body).used, JSON.parse(ours[5].body).used], [1, 2, 3]);
    assert.equal(ours[3].headers['ratelimit-policy'], '3;w=60');
  } finally {
    await a.close();
    await b.close();
  }
});

test('an algorithm with skipFailedRequests: a refused request\'s decrement gives nothing back', async () => {
  const { mod, clock } = pair({ prefix: 'rl:erlgs:', limit: { algorithm: 'gcra', burst: 2, rate: 2, period: '1m' } });
  const decrements = watchDecrements(mod);
  const a = await app({ windowMs: 60_000, limit: 2, skipFailedRequests: true, store: mod });
  try {
    await clock.at(0);
    const refunds = await calls(m, 'rl.refund');
    const fail = await a.as('s', '/fail');
    await decrements.done(1);
    assert.equal(fail.status, 400);
    assert.equal(await calls(m, 'rl.refund') - refunds, 1, 'the failed request, admitted, gave its unit back');
    const statuses = [(await a.as('s')).status, (await a.as('s')).status];
    const refused = await a.as('s');
    await decrements.done(2);
    statuses.push(refused.status);
    assert.deepEqual(statuses, [200, 200, 429]);
    assert.equal(await calls(m, 'rl.refund') - refunds, 1, 'the refusal took nothing: no RL.REFUND');
    const still = await a.as('s');
    assert.deepEqual([still.status, still.headers['retry-after']], [429, '30']);
    await decrements.done(3);
    assert.equal(await calls(m, 'rl.refund') - refunds, 1);
  } finally {
    await a.close();
  }
});

// With skipFailedRequests a store remembers a key's refusals until their decrement comes (at most
// 100 each with its retry time, the rest as a count: RedisModuleStore's REMEMBERED_REFUSALS).
const GCRA_2_PER_MINUTE = { algorithm: 'gcra', burst: 2, rate: 2, period: '1m' };

test('a refusal answered below 400 (no decrement comes): a key remembers 100 with their times, the rest as a count', async () => {
  const { mod, clock } = pair({ prefix: 'rl:erlgb:', limit: GCRA_2_PER_MINUTE });
  const decrements = watchDecrements(mod);
  // A handler that sends the refused to a page of their own: a success (303) to
  // express-rate-limit, which then decrements nothing.
  const handler = (req, res) => res.redirect(303, '/slow-down');
  const a = await app({ windowMs: 60_000, limit: 2, skipFailedRequests: true, handler, store: mod });
  try {
    await clock.at(0);
    assert.deepEqual([(await a.as('b')).status, (await a.as('b')).status], [200, 200]);
    const refunds = await calls(m, 'rl.refund');
    const statuses = new Set();
    for (let i = 0; i < 150; i++) statuses.add((await a.as('b')).status);
    assert.deepEqual([...statuses], [303]);
    assert.equal(decrements.keys.length, 0, 'no refusal was decremented');
    assert.equal(mod.refused.get('b')?.length, 100, 'the 100 latest refusals, each with its retry time');
    assert.equal(mod.folded.get('b')?.count, 50, 'the 50 oldest, counted');
    // An admitted request that fails, 30 s later: its decrement is taken for a refusal's (the
    // safe side: it gives nothing back), and the oldest remembered refusal goes.
    await clock.at(30_000);
    assert.equal((await a.as('b', '/fail')).status, 400);
    await decrements.done(1);
    assert.equal(await calls(m, 'rl.refund') - refunds, 0, 'nothing given back');
    assert.equal(mod.folded.get('b')?.count, 49);
    assert.equal(mod.refused.get('b')?.length, 100);
    // resetKey forgets them all.
    await a.limiter.resetKey('b');
    assert.deepEqual([mod.refused.has('b'), mod.folded.has('b')], [false, false]);
  } finally {
    await a.close();
  }
});

test('more refusals in flight than a key remembers with their times: no decrement gives back what was never taken', async () => {
  const { mod, clock } = pair({ prefix: 'rl:erlgf:', limit: GCRA_2_PER_MINUTE });
  const decrements = watchDecrements(mod);
  // The handler holds each refusal until the test lets them all go, then answers at once, with
  // express-rate-limit's own status (429) and message: 120 refused requests of one key in flight.
  const held = [];
  let holding = true;
  let heldChanged = () => {};
  const handler = (req, res, next, options) => {
    const answer = () => res.status(options.statusCode).send(options.message);
    if (!holding) return answer();
    held.push(answer);
    heldChanged();
  };
  const a = await app({ windowMs: 60_000, limit: 2, skipFailedRequests: true, handler, store: mod });
  try {
    await clock.at(0);
    assert.deepEqual([(await a.as('c')).status, (await a.as('c')).status], [200, 200]);
    const refunds = await calls(m, 'rl.refund');
    const storeCalls = mod.stats.calls;
    const responses = Array.from({ length: 120 }, () => a.as('c'));
    while (held.length < 120) await new Promise((r) => { heldChanged = r; });
    assert.equal(mod.refused.get('c')?.length, 100);
    assert.equal(mod.folded.get('c')?.count, 20);
    holding = false;
    for (const release of held.splice(0)) release();
    assert.deepEqual(new Set((await Promise.all(responses)).map((r) => r.status)), new Set([429]));
    await decrements.done(120);
    assert.equal(await calls(m, 'rl.refund') - refunds, 0, 'no RL.REFUND: all 120 refusals took nothing');
    assert.equal(mod.stats.calls - storeCalls, 120, 'one call an increment, none a decrement');
    assert.deepEqual([mod.refused.has('c'), mod.folded.has('c')], [false, false], 'each decrement took one refusal');
    // Nothing given back: still refused, 30 s from the two admitted.
    const still = await a.as('c');
    assert.deepEqual([still.status, still.headers['retry-after']], [429, '30']);
    await decrements.done(121);
    // 30 s later one is admitted again, and its failure is given back: no refusal is left over.
    await clock.at(30_000);
    assert.equal((await a.as('c', '/fail')).status, 400);
    await decrements.done(122);
    assert.equal(await calls(m, 'rl.refund') - refunds, 1, 'the admitted failure gave its unit back');
  } finally {
    holding = false;
    for (const release of held.splice(0)) release();
    await a.close();
  }
});

test('limit: { algorithm: "slidingwindow" }: its window is windowMs; what init refuses is logged and every request fails', async () => {
  const { mod, scr, clock } = pair({ prefix: 'rl:erlsw:', limit: { algorithm: 'slidingwindow', limit: 2, window: '10s' } });
  const options = { windowMs: 10_000, limit: 2, standardHeaders: 'draft-6' };
  const a = await app({ ...options, store: mod });
  const b = await app({ ...options, store: scr });
  try {
    const ours = [];
    const theirs = [];
    // (Half a second past the windows' edges, T0 being on one: the module's sliding window frees
    // a unit a microsecond past an edge, so a wait there is x001 ms, which the fields round up
    // to one second more or not by how long the response took.)
    for (const ms of [500, 500, 500, 5_500, 10_500, 12_500]) {
      await clock.at(ms);
      ours.push(await a.as('sw'));
      theirs.push(await b.as('sw'));
    }
    assert.deepEqual(theirs.map(seen), ours.map(seen));
    assert.deepEqual(ours.map((r) => [r.status, r.headers['x-ratelimit-remaining'], r.headers['retry-after']]), [
      [200, '1', undefined], [200, '0', undefined], [429, '0', '10'], [429, '0', '5'],
      // 10.5 s: the two hits are the previous window's, floor(2 × 0.95) = 1 of them counted: one
      // more fits; 12.5 s: floor(2 × 0.75) + 1 = 2, full until the previous window counts 0 (15 s).
      [200, '0', undefined], [429, '0', '3'],
    ]);
  } finally {
    await a.close();
    await b.close();
  }
  const init = 'express-rate-limit: error during store initialization.';
  const cases = [
    [{ windowMs: 60_000, limit: 2 }, "invalid windowMs for RedisModuleStore with limit.algorithm slidingwindow: express-rate-limit's windowMs is 60000, the algorithm's window 10000 ms; make them equal"],
    [{ windowMs: 10_000, limit: 5 }, "invalid limit for RedisModuleStore with limit.algorithm slidingwindow: express-rate-limit's limit is 5, the algorithm admits 2; make them equal"],
    [{ windowMs: 10_000, limit: () => 2 }, "invalid limit for RedisModuleStore with limit.algorithm slidingwindow: the algorithm decides, so express-rate-limit's limit must be the number it admits (2), not a function"],
  ];
  for (const [options, message] of cases) {
    const s = new RedisModuleStore({ client: m, limit: { algorithm: 'slidingwindow', limit: 2, window: '10s' }, logger: quiet });
    const bad = await app({ ...options, store: s });
    try {
      assert.deepEqual(bad.logger.lines.map(([kind, m2, e]) => [kind, m2, e?.message]), [['error', init, message]]);
      const r = await bad.as('x');
      assert.deepEqual([r.status, r.body], [500, message]);
    } finally {
      await bad.close();
    }
  }
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client: m, limit: { algorithm: 'concurrency', limit: 2, lease: '30s' } })), {
    name: 'TypeError',
    message: 'invalid limit.algorithm: a concurrency limit holds a lease until the response ends, which a store cannot give back; use rateLimitMiddleware',
  });
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client: m, limit: { policy: 'api' } })), {
    message: 'invalid limit.policy: the store takes one algorithm; a policy needs rateLimitMiddleware or RateLimit',
  });
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client: m, limit: { algorithm: 'gcra', burst: 0, rate: 1, period: '1s' } })), {
    message: 'invalid limit.burst: expected an integer from 1 to 10^12; got 0',
  });
});

test('past the keys it remembers, a key with a refusal in flight is not forgotten: its decrement gives nothing back', async () => {
  const { mod, clock } = pair({ prefix: 'rl:erlgk:', limit: GCRA_2_PER_MINUTE });
  // Three keys here where a store keeps 10,000 (the same code past the bound, without 10,000
  // requests).
  mod.rememberedKeys = 3;
  const decrements = watchDecrements(mod);
  // k1's refusal held in flight (answered later with 429, so its decrement comes); the other
  // keys' refusals answered 303 at once (no decrement comes; their retry times still ahead).
  let release = () => {};
  let heldNow = () => {};
  const held = new Promise((r) => { heldNow = r; });
  const handler = (req, res, next, options) => {
    const answer = () => res.status(options.statusCode).send(options.message);
    if (req.get('X-Client-Id') === 'k1') {
      release = () => {
        release = () => {};
        answer();
      };
      heldNow();
      return;
    }
    res.redirect(303, '/slow-down');
  };
  const a = await app({ windowMs: 60_000, limit: 2, skipFailedRequests: true, handler, store: mod });
  try {
    await clock.at(0);
    for (const key of ['k1', 'k2', 'k3', 'k4']) {
      assert.deepEqual([(await a.as(key)).status, (await a.as(key)).status], [200, 200], key);
    }
    const refunds = await calls(m, 'rl.refund');
    const first = a.as('k1');
    await held;
    for (const key of ['k2', 'k3', 'k4']) assert.equal((await a.as(key)).status, 303, key);
    assert.deepEqual([...mod.refused.keys()].sort(), ['k1', 'k2', 'k3'], 'three keys remembered, k4 counted');
    assert.equal(mod.unkeyed.count, 1);
    release();
    assert.equal((await first).status, 429);
    await decrements.done(1);
    assert.equal(await calls(m, 'rl.refund') - refunds, 0, 'k1\'s refusal took nothing: nothing given back');
    // An admitted request of a key never refused fails while k4's refusal is counted without its
    // key: taken for a refusal's (the safe side), nothing given back.
    assert.equal((await a.as('k5', '/fail')).status, 400);
    await decrements.done(2);
    assert.equal(await calls(m, 'rl.refund') - refunds, 0, 'the count of refusals without their key takes it');
  } finally {
    release();
    await a.close();
  }
});
