// The options of one call, against a real server with the debug clock frozen: ATMOST (a partial
// grant, `granted` in the decision) and SHADOW (checked and counted, never refusing,
// `shadowDenied` in the decision), in either protocol, through RateLimit and the middleware;
// neither answered from the denial memory nor remembered. The figures are docs/commands.md's.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimit, rateLimitMiddleware } from '../index.js';
import { calls, clocks, connect, get, helloApp, limitFields, memoryLogger, serverForFile } from './helpers.js';

const { redis, client } = await serverForFile();

/** A RateLimit on `limit`, its memory on the fake clock, keys under `prefix`. */
async function limiter(limit, prefix, options = {}) {
  const clock = await clocks(client);
  return new RateLimit({ client, limit, prefix, now: () => clock.ms, logger: memoryLogger(), ...options });
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
    calls: 5, admitted: 2, denied: 1, deniedLocally: 0, failures: 0, failOpen: 0, failClosed: 0,
    shadowDenied: 2, releaseFailures: 0,
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
