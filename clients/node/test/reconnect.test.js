// Redis goes away and comes back on the same port: with the package's reconnectStrategy the
// middleware (failing closed) limits again within RECONNECT_MAX_MS (100 ms) of the server
// answering, however long it was away. node-redis's own strategy waits up to 2.2 s by then.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rateLimitMiddleware, reconnectStrategy } from '../index.js';
import { RECONNECT_MAX_MS } from '../lib/reconnect.cjs';
import { PATIENT, connect, helloApp, memoryLogger, startRedis } from './helpers.js';

// The traffic's pace once the server is back: a request every PACE_MS, so that the refused
// requests can be counted against a bound: those sent in the RECONNECT_MAX_MS the client may
// wait, one more at its start, and one while the new connection says HELLO.
const PACE_MS = 10;
const BOUND = RECONNECT_MAX_MS / PACE_MS + 2;

test(`reconnectStrategy: failing closed, at most ${BOUND} requests refused once Redis is back, one every ${PACE_MS} ms`, async () => {
  let redis = await startRedis();
  const { port } = redis;
  const client = await connect(redis, { socket: { reconnectStrategy } });
  let attempts = 0;
  let awayLongEnough;
  const away = new Promise((resolve) => { awayLongEnough = resolve; });
  client.on('reconnecting', () => {
    attempts += 1;
    if (attempts === 8) awayLongEnough();
  });
  const limit = rateLimitMiddleware({
    ...PATIENT,
    client,
    limit: { algorithm: 'gcra', burst: 1000, rate: 1000, period: '1s' },
    key: () => 'k',
    failMode: 'closed',
    logger: memoryLogger(),
  });
  const { http, as } = await helloApp(limit);
  try {
    assert.equal((await as('a')).status, 200);
    await redis.stop();
    assert.equal((await as('a')).status, 503);
    // Away for 8 attempts: long enough for node-redis's own strategy to wait its longest,
    // 2 s and up to 200 ms (50, 100, 200, ... ms after each failed attempt).
    await away;
    redis = await startRedis({ port });
    // Back (it answers PING): count the refusals until the first admitted request.
    const backAt = performance.now();
    let refused = 0;
    for (;;) {
      const sent = performance.now();
      const res = await as('a');
      if (res.status === 200) break;
      assert.equal(res.status, 503);
      refused += 1;
      assert.ok(refused <= BOUND, `${refused} refused ${Math.round(performance.now() - backAt)} ms after Redis came back`);
      await new Promise((r) => setTimeout(r, Math.max(0, sent + PACE_MS - performance.now())));
    }
    const took = performance.now() - backAt;
    // And it stays back.
    for (let i = 0; i < 5; i++) assert.equal((await as('a')).status, 200);
    assert.ok(limit.limiter.stats.failClosed >= 1 + refused);
    console.log(`# back after ${refused} refused requests, ${Math.round(took)} ms; ${attempts} attempts while away`);
  } finally {
    await http.close();
    client.destroy();
    await redis.stop();
  }
});
