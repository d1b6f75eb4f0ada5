// The options of one call, against a real server with the debug clock frozen: ATMOST (a partial
// grant, `granted` in the decision) and SHADOW (checked and counted, never refusing,
// `shadowDenied` in the decision), in either protocol, through RateLimit and the middleware;
// neither answered from the denial memory nor remembered. DRYRUN (a preview) and ID (a lease's
// own token) the same way, BLOCK (the limit's penalty), and RL.REFUND (RateLimit's refund).
// The figures are docs/commands.md's.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimit, rateLimitMiddleware } from '../index.js';
import { PATIENT, calls, clocks, connect, get, helloApp, limitFields, memoryLogger, serverForFile } from './helpers.js';

const { redis, client } = await serverForFile();

/** A RateLimit on `limit`, its memory on the fake clock, keys under `prefix`. */
async function limiter(limit, prefix, options = {}) {
  const clock = await clocks(client);
  return new RateLimit({ ...PATIENT, client, limit, prefix, now: () => clock.ms, logger: memoryLogger(), ...options });
}

/** The fields of a decision that the options add or decide. */
const grant = (d) => [d.allowed, d.remaining, d.retryAfterMs, d.resetAfterMs, d.granted, d.shadowDenied];

test('atMost: as many units as the key allows now, up to it; granted in the decision', async () => {
  for (const RESP of [3, 2]) {
    const c = RESP === 3 ? client : await connect(redis, { RESP });
    try {
      const gcra = await limiter({ algorithm: 'gcra', burst: 5, rate: 1, period: '1m' }, `rl:atmost${RESP}:`, { client: c });
      // Three granted, then the two left, then none: refused as a request of one unit.
      assert.deepEqual(grant(await gcra.check('k', 1, { atMost: 3 })), [true, 2, 0, 180_000, 3, undefined]);
      assert.deepEqual(grant(await gcra.check('k', 1, { atMost: 3 })), [true, 0, 0, 300_000, 2, undefined]);
      assert.deepEqual(grant(await gcra.check('k', 1, { atMost: 3 })), [false, 0, 60_000, 300_000, 0, undefined]);
      // Not remembered: the next call asks the server again.
      const before = await calls(client, 'RL.GCRA');
      assert.equal((await gcra.check('k', 1, { atMost: 3 })).local, false);
      assert.equal(await calls(client, 'RL.GCRA'), before + 1);
      assert.equal(gcra.memory.size, 0);
      // A policy: the largest grant every rule admits, and the binding rule.
      await c.sendCommand(['RL.POLICY.SET', 'tight', 'GCRA', '10', '10', '1s', 'FIXEDWINDOW', '3', '1d']);
      const tight = await limiter({ policy: 'tight' }, `rl:atmost-policy${RESP}:`, { client: c });
      const d = await tight.check('t', 1, { atMost: 10 });
      assert.deepEqual([d.name, d.rule, ...grant(d)], ['tight/1', 1, true, 0, 0, 6_400_000, 3, undefined]);
      // A leaky bucket: delay_ms, then granted, then shadow_denied, in that order in RESP2.
      const leaky = await limiter({ algorithm: 'leakybucket', capacity: 2, leakAmount: 1, leakPeriod: '1s' }, `rl:atmost-leaky${RESP}:`, { client: c });
      const first = await leaky.check('l', 1, { atMost: 5, shadow: true });
      assert.deepEqual([first.delayMs, ...grant(first)], [0, true, 0, 0, 2000, 2, false]);
      const second = await leaky.check('l', 1, { atMost: 5, shadow: true });
      assert.deepEqual([second.delayMs, ...grant(second)], [-1, true, 0, 1000, 2000, 0, true]);
    } finally {
      if (c !== client) await c.quit();
    }
  }
});

test('atMost is refused where the module refuses it: with a cost, on a concurrency limit, below 1', async () => {
  const gcra = await limiter({ algorithm: 'gcra', burst: 5, rate: 1, period: '1m' }, 'rl:atmost-bad:');
  await assert.rejects(gcra.check('k', 2, { atMost: 3 }), /^TypeError: invalid atMost: give cost or atMost, not both$/);
  await assert.rejects(gcra.check('k', 1, { atMost: 0 }), /^TypeError: invalid atMost: expected an integer from 1 to 10\^12; got 0$/);
  await assert.rejects(gcra.check('k', 1, { shadow: 'yes' }), /^TypeError: invalid shadow: expected true or false; got yes$/);
  const leases = await limiter({ algorithm: 'concurrency', limit: 1, lease: '30s' }, 'rl:atmost-conc:');
  await assert.rejects(leases.check('c', 1, { atMost: 3 }), /^TypeError: invalid atMost: a concurrency limit takes one lease per request$/);
});

test('shadow: a request the limit would refuse is answered allowed, shadowDenied, and nothing is written', async () => {
  const gcra = await limiter({ algorithm: 'gcra', burst: 2, rate: 1, period: '1s' }, 'rl:shadow:');
  for (const remaining of [1, 0]) assert.deepEqual(grant(await gcra.check('u7')), [true, remaining, 0, 2000 - 1000 * remaining, undefined, undefined]);
  assert.deepEqual(grant(await gcra.check('u7', 1, { shadow: true })), [true, 0, 1000, 2000, undefined, true]);
  // Nothing was written: the plain call is refused with the same wait, and remembered.
  assert.deepEqual(grant(await gcra.check('u7')), [false, 0, 1000, 2000, undefined, undefined]);
  assert.equal(gcra.memory.size, 1);
  // A shadow call is not refused by the memory: it asks the server, which answers as before.
  const before = await calls(client, 'RL.GCRA');
  const d = await gcra.check('u7', 1, { shadow: true });
  assert.deepEqual([d.local, ...grant(d)], [false, true, 0, 1000, 2000, undefined, true]);
  assert.equal(await calls(client, 'RL.GCRA'), before + 1);
  assert.deepEqual(gcra.stats, {
    backend: 'module',
    calls: 5, admitted: 2, denied: 1, deniedLocally: 0, failures: 0, failOpen: 0, failClosed: 0,
    shadowDenied: 2, notDurable: 0, releaseFailures: 0,
    localAdmitted: 0, refills: 0, refunded: 0, lapsed: 0, refundFailures: 0, held: 0, setupFailures: 0,
  });
  // A concurrency limit: a would-be refusal takes no lease, so there is no token to give back.
  const leases = await limiter({ algorithm: 'concurrency', limit: 1, lease: '30s' }, 'rl:shadow-conc:');
  const held = await leases.check('jobs', 1, { shadow: true });
  assert.deepEqual([held.allowed, held.shadowDenied, typeof held.token], [true, false, 'string']);
  const over = await leases.check('jobs', 1, { shadow: true });
  assert.deepEqual([over.allowed, over.shadowDenied, over.token, over.retryAfterMs], [true, true, undefined, 30_000]);
});

test('the middleware with shadow: every request passes, with the fields the limit gives it', async () => {
  const clock = await clocks(client);
  const limit = rateLimitMiddleware({
    ...PATIENT,
    client,
    limit: { algorithm: 'fixedwindow', limit: 1, window: '1m' },
    key: (req) => req.get('X-Client-Id'),
    shadow: (req) => req.get('X-Shadow') === '1',
    prefix: 'rl:shadow-http:',
    now: () => clock.ms,
    logger: memoryLogger(),
  });
  const { http, as } = await helloApp(limit);
  const watched = (id) => limit.limiter.check(id, 1, { shadow: true });
  try {
    assert.equal((await as('w')).status, 200);
    // T0 is 20 s into its minute: 40 s to the window's end.
    for (let i = 0; i < 2; i++) {
      const res = await get(http.url, '/', { 'X-Client-Id': 'w', 'X-Shadow': '1' });
      assert.deepEqual(limitFields(res), [200, '"default";q=1;w=60', '"default";r=0;t=40', '1', '0', '40', undefined]);
      assert.equal(res.body, 'hello');
    }
    assert.equal((await as('w')).status, 429, 'without shadow the limit refuses');
    assert.equal((await watched('w')).shadowDenied, true);
    assert.deepEqual([limit.limiter.stats.admitted, limit.limiter.stats.shadowDenied, limit.limiter.stats.denied], [1, 3, 1]);
  } finally {
    await http.close();
  }
});

test('dryRun: the decision the call would get, nothing written, counted in calls only', async () => {
  const gcra = await limiter({ algorithm: 'gcra', burst: 2, rate: 1, period: '1m' }, 'rl:dryrun:');
  // A preview, twice: the same answer, since nothing was written.
  for (let i = 0; i < 2; i++) assert.deepEqual(grant(await gcra.check('d', 1, { dryRun: true })), [true, 1, 0, 60_000, undefined, undefined]);
  for (const remaining of [1, 0]) assert.equal((await gcra.check('d')).remaining, remaining);
  assert.deepEqual(grant(await gcra.check('d')), [false, 0, 60_000, 120_000, undefined, undefined]);
  assert.equal(gcra.memory.size, 1);
  // Not answered from the memory: it asks the server, which refuses as the plain call was.
  const before = await calls(client, 'RL.GCRA');
  const d = await gcra.check('d', 1, { dryRun: true });
  assert.deepEqual([d.local, ...grant(d)], [false, false, 0, 60_000, 120_000, undefined, undefined]);
  assert.equal(await calls(client, 'RL.GCRA'), before + 1);
  // With shadow too: answered allowed, shadowDenied, and counted as a call only, as the module counts it.
  assert.deepEqual(grant(await gcra.check('d', 1, { dryRun: true, shadow: true })), [true, 0, 60_000, 120_000, undefined, true]);
  assert.deepEqual(gcra.stats, {
    backend: 'module',
    calls: 7, admitted: 2, denied: 1, deniedLocally: 0, failures: 0, failOpen: 0, failClosed: 0,
    shadowDenied: 0, notDurable: 0, releaseFailures: 0,
    localAdmitted: 0, refills: 0, refunded: 0, lapsed: 0, refundFailures: 0, held: 0, setupFailures: 0,
  });
  // A concurrency limit's preview holds no lease and has no token.
  const leases = await limiter({ algorithm: 'concurrency', limit: 1, lease: '30s' }, 'rl:dryrun-conc:');
  const preview = await leases.check('jobs', 1, { dryRun: true });
  assert.deepEqual([preview.allowed, preview.remaining, preview.token], [true, 0, undefined]);
  assert.equal((await leases.check('jobs')).allowed, true);
  await assert.rejects(gcra.check('d', 1, { dryRun: 1 }), /^TypeError: invalid dryRun: expected true or false; got 1$/);
});

test("id: a concurrency lease of the caller's own token, renewed by it", async () => {
  const leases = await limiter({ algorithm: 'concurrency', limit: 1, lease: '30s' }, 'rl:id:');
  const held = await leases.check('jobs', 1, { id: 'worker-7' });
  assert.deepEqual([held.allowed, held.remaining, held.token], [true, 0, 'worker-7']);
  // The same token renews its own lease; another is refused while it is held.
  assert.deepEqual([(await leases.check('jobs', 1, { id: 'worker-7' })).allowed, (await leases.check('jobs', 1, { id: 'b' })).allowed], [true, false]);
  await leases.release('jobs', held);
  assert.deepEqual(await leases.check('jobs', 1, { id: 'b' }).then((d) => [d.allowed, d.token]), [true, 'b']);
  assert.equal(leases.stats.releaseFailures, 0);
  const gcra = await limiter({ algorithm: 'gcra', burst: 2, rate: 1, period: '1m' }, 'rl:id-gcra:');
  await assert.rejects(gcra.check('k', 1, { id: 'a' }), /^TypeError: invalid id: only a concurrency limit names its leases$/);
  await assert.rejects(leases.check('jobs', 1, { id: '' }), /^TypeError: invalid id: expected a string of 1 to 256 bytes; got $/);
  await assert.rejects(leases.check('jobs', 1, { id: 'é'.repeat(129) }), /^TypeError: invalid id: expected a string of 1 to 256 bytes/);
  assert.equal((await leases.check('jobs2', 1, { id: 'é'.repeat(128) })).token, 'é'.repeat(128));
});

test("block: a refused request blocks the key (BLOCK), and the denial memory holds the block's wait", async () => {
  const gcra = await limiter({ algorithm: 'gcra', burst: 2, rate: 1, period: '1m', block: '5m' }, 'rl:block:');
  assert.deepEqual(grant(await gcra.check('b')), [true, 1, 0, 60_000, undefined, undefined]);
  // Two units do not fit: refused, and the key is blocked, so that one unit, which would fit, is too.
  assert.deepEqual(grant(await gcra.check('b', 2)), [false, 0, 300_000, 300_000, undefined, undefined]);
  assert.equal((await gcra.check('b', 2)).local, true);
  assert.deepEqual(grant(await gcra.check('b')), [false, 0, 300_000, 300_000, undefined, undefined]);
  await client.sendCommand(['RL.POLICY.SET', 'blocked', 'GCRA', '1', '1', '1m']);
  const policy = await limiter({ policy: 'blocked', block: '1h' }, 'rl:block-policy:');
  assert.equal((await policy.check('p')).allowed, true);
  assert.deepEqual(grant(await policy.check('p')), [false, 0, 3_600_000, 3_600_000, undefined, undefined]);
  await assert.rejects(limiter({ algorithm: 'concurrency', limit: 1, lease: '30s', block: '1m' }, 'rl:x:'),
    /^TypeError: invalid limit.block: a concurrency limit has no block$/);
  await assert.rejects(limiter({ algorithm: 'gcra', burst: 1, rate: 1, period: '1m', block: '0s' }, 'rl:x:'),
    /^TypeError: invalid limit.block: expected a duration from 1 ms to 10 years/);
});

test("refund: RL.REFUND gives units back (docs/commands.md's session), and this limit's remembered denial goes", async () => {
  const gcra = await limiter({ algorithm: 'gcra', burst: 5, rate: 1, period: '1s' }, 'rl:refund:');
  const clock = await clocks(client);
  assert.deepEqual(grant(await gcra.check('k', 4)), [true, 1, 0, 4000, undefined, undefined]);
  assert.equal(await gcra.refund('k', 2), 2);
  assert.deepEqual(grant(await gcra.check('k', 0)), [true, 3, 0, 2000, undefined, undefined]);
  assert.equal(await gcra.refund('k', 9, { dryRun: true }), 2);
  await clock.at(500);
  assert.equal(await gcra.refund('k', 9), 2);
  assert.equal(await client.exists('rl:refund:k'), 0);
  assert.equal(await gcra.refund('k', 9), 0);
  // A denial remembered by this limit is forgotten once units are given back, not by a dry run.
  const window = await limiter({ algorithm: 'fixedwindow', limit: 1, window: '1m' }, 'rl:refund-memory:');
  assert.equal((await window.check('m')).allowed, true);
  assert.equal((await window.check('m')).allowed, false);
  assert.equal((await window.check('m')).local, true);
  assert.equal(await window.refund('m', 1, { dryRun: true }), 1);
  assert.equal(window.memory.size, 1);
  assert.equal(await window.refund('m', 1), 1);
  assert.equal(window.memory.size, 0);
  assert.deepEqual([(await window.check('m')).allowed, window.stats.deniedLocally], [true, 1]);
  // A policy's key: every rule gets the units back.
  await client.sendCommand(['RL.POLICY.SET', 'refunded', 'GCRA', '2', '2', '1m', 'FIXEDWINDOW', '3', '1d']);
  const policy = await limiter({ policy: 'refunded' }, 'rl:refund-policy:');
  assert.equal((await policy.check('p', 2)).remaining, 0);
  assert.equal(await policy.refund('p', 1), 1);
  assert.deepEqual([(await policy.check('p', 0)).remaining, (await policy.check('p', 0)).rule], [1, 0]);
  // What it refuses, and a Redis failure: a rejection, the error as Redis gave it.
  const leases = await limiter({ algorithm: 'concurrency', limit: 1, lease: '30s' }, 'rl:refund-conc:');
  await assert.rejects(leases.refund('c', 1), /^TypeError: invalid refund: a concurrency limit gives its leases back with release$/);
  await assert.rejects(gcra.refund('k', -1), /^TypeError: invalid units: expected an integer from 0 to 10\^12; got -1$/);
  await assert.rejects(gcra.refund('k', 1, { dryRun: 'yes' }), /^TypeError: invalid dryRun: expected true or false; got yes$/);
  const broken = await limiter({ algorithm: 'gcra', burst: 5, rate: 1, period: '1s' }, 'rl:refund:', {
    client: { sendCommand: async () => { throw new Error('READONLY You can\'t write against a read only replica.'); } },
  });
  await assert.rejects(broken.refund('k', 1), /^Error: READONLY/);
});
