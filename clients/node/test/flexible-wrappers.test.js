// rate-limiter-flexible's wrappers around this package's RateLimiterRedis, on a server with the
// module (a msBeforeNext is the key's TTL on the server's clock, between the window and the window
// less the real time measured since the call that set it: ttlWithin): RateLimiterUnion, RLWrapperBlackAndWhite,
// RLWrapperTimeouts, RateLimiterQueue and BurstyRateLimiter take it (they check `instanceof` its
// RateLimiterCompatibleAbstract, and BurstyRateLimiter a refusal `instanceof` its
// RateLimiterRes: the class and its RateLimiterRes extend them when rate-limiter-flexible is
// installed), and it is another limiter's insuranceLimiter; on node-redis's client and ioredis's.

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import Redis from 'ioredis';
import * as RLF from 'rate-limiter-flexible';
import { RateLimiterRedis, RateLimiterRes } from '../index.js';
import { connect, endWindow, serverForFile, ttlWithin } from './helpers.js';

const { redis, client } = await serverForFile();
const io = new Redis({ host: '127.0.0.1', port: redis.port });
after(() => io.disconnect());
const KINDS = [['node-redis', client], ['ioredis', io]];

const json = (res) => res.toJSON();
/**
 * `res` with its msBeforeNext checked against a window of `windowMs` begun after `since`
 * (ttlWithin), and then said to be the window, for an exact comparison of the rest.
 */
function windowed(res, windowMs, since) {
  ttlWithin(res.msBeforeNext, windowMs, since, 'msBeforeNext');
  return { ...res, msBeforeNext: windowMs };
}
/** settled(), msBeforeNext as windowed() says it. */
async function settledIn(promise, windowMs, since) {
  const [how, res] = await settled(promise);
  return [how, windowed(res, windowMs, since)];
}
/** What a call settles with: ['resolved' | 'rejected', its toJSON()] (an Error fails the test). */
async function settled(promise) {
  try {
    return ['resolved', json(await promise)];
  } catch (rej) {
    if (rej instanceof Error) throw rej;
    return ['rejected', json(rej)];
  }
}

test('the class and its RateLimiterRes are rate-limiter-flexible\'s kinds when it is installed', () => {
  const limiter = new RateLimiterRedis({ storeClient: client, points: 1, duration: 1 });
  assert.ok(limiter instanceof RLF.RateLimiterCompatibleAbstract);
  assert.ok(new RateLimiterRes(1, 2, 3, true) instanceof RLF.RateLimiterRes);
  assert.deepEqual(new RateLimiterRes(1, 2, 3, true).toJSON(), { remainingPoints: 1, msBeforeNext: 2, consumedPoints: 3, isFirstInDuration: true });
  assert.equal(limiter.keyPrefix, 'rlflx');
  limiter.blockDuration = 5;
  assert.equal(limiter.msBlockDuration, 5000);
});

for (const [kind, store] of KINDS) {
  const ours = (options) => new RateLimiterRedis({ storeClient: store, ...options, keyPrefix: `${kind}-${options.keyPrefix}` });

  test(`RateLimiterUnion of two of ours: each one's answer under its keyPrefix (${kind})`, async () => {
    const perSecond = ours({ keyPrefix: 'u1', points: 1, duration: 1 });
    const perMinute = ours({ keyPrefix: 'u2', points: 5, duration: 60 });
    const union = new RLF.RateLimiterUnion(perSecond, perMinute);
    const since = performance.now();
    const first = await union.consume('k');
    const windows = { [`${kind}-u1`]: 1000, [`${kind}-u2`]: 60_000 };
    assert.deepEqual(Object.fromEntries(Object.entries(first).map(([p, r]) => [p, windowed(json(r), windows[p], since)])), {
      [`${kind}-u1`]: { remainingPoints: 0, msBeforeNext: 1000, consumedPoints: 1, isFirstInDuration: true },
      [`${kind}-u2`]: { remainingPoints: 4, msBeforeNext: 60_000, consumedPoints: 1, isFirstInDuration: true },
    });
    // The second: the per-second limiter refuses; the union rejects with its refusal alone.
    const refused = await union.consume('k').then(() => assert.fail('admitted'), (rej) => rej);
    assert.deepEqual(Object.fromEntries(Object.entries(refused).map(([p, r]) => [p, windowed(json(r), windows[p], since)])), {
      [`${kind}-u1`]: { remainingPoints: 0, msBeforeNext: 1000, consumedPoints: 2, isFirstInDuration: false },
    });
  });

  test(`RLWrapperBlackAndWhite around ours: listed keys skip it, the others are its answers (${kind})`, async () => {
    const limiter = ours({ keyPrefix: 'bw', points: 1, duration: 10, blockDuration: 30 });
    const wrapped = new RLF.RLWrapperBlackAndWhite({ limiter, whiteList: ['friend'], blackList: ['foe'] });
    assert.equal(wrapped.keyPrefix, `${kind}-bw`);
    assert.equal(wrapped.blockDuration, 30);
    assert.deepEqual(await settled(wrapped.consume('friend')),
      ['resolved', { remainingPoints: Number.MAX_SAFE_INTEGER, msBeforeNext: 0, consumedPoints: 0, isFirstInDuration: false }]);
    assert.deepEqual(await settled(wrapped.consume('foe')),
      ['rejected', { remainingPoints: 0, msBeforeNext: Number.MAX_SAFE_INTEGER, consumedPoints: 0, isFirstInDuration: false }]);
    const since = performance.now();
    assert.deepEqual(await settledIn(wrapped.consume('other'), 10_000, since),
      ['resolved', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 1, isFirstInDuration: true }]);
    assert.deepEqual(await settled(wrapped.consume('other')),
      ['rejected', { remainingPoints: 0, msBeforeNext: 30_000, consumedPoints: 2, isFirstInDuration: false }]);
    assert.equal(await client.exists(`${kind}-bw:friend`), 0);
  });

  test(`RLWrapperTimeouts around ours: its answers within the time (${kind})`, async () => {
    const wrapped = new RLF.RLWrapperTimeouts({ limiter: ours({ keyPrefix: 'to', points: 2, duration: 10 }), timeoutMs: 60_000 });
    const since = performance.now();
    assert.deepEqual(await settledIn(wrapped.consume('k', 2), 10_000, since),
      ['resolved', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: true }]);
    assert.deepEqual(await settledIn(wrapped.consume('k'), 10_000, since),
      ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 3, isFirstInDuration: false }]);
  });

  test(`BurstyRateLimiter of two of ours: the burst limiter takes what the first refuses (${kind})`, async () => {
    const bursty = new RLF.BurstyRateLimiter(ours({ keyPrefix: 'b1', points: 2, duration: 1 }), ours({ keyPrefix: 'b2', points: 1, duration: 60 }));
    const seen = [];
    const since = performance.now();
    for (let i = 0; i < 4; i++) seen.push(await settledIn(bursty.consume('k'), 1000, since));
    assert.deepEqual(seen, [
      ['resolved', { remainingPoints: 1, msBeforeNext: 1000, consumedPoints: 1, isFirstInDuration: true }],
      ['resolved', { remainingPoints: 0, msBeforeNext: 1000, consumedPoints: 2, isFirstInDuration: false }],
      // Refused by the first (3 of 2), taken by the burst limiter: the first's refusal, its
      // msBeforeNext the lesser of the two.
      ['resolved', { remainingPoints: 0, msBeforeNext: 1000, consumedPoints: 3, isFirstInDuration: false }],
      // The first's refusal again (a fourth point counted, as there), the burst limiter's one used.
      ['rejected', { remainingPoints: 0, msBeforeNext: 1000, consumedPoints: 4, isFirstInDuration: false }],
    ]);
  });

  test(`RateLimiterQueue around ours: tokens taken, a request queued until the window ends (${kind})`, async () => {
    const limiter = ours({ keyPrefix: 'q', points: 2, duration: 1 });
    const queue = new RLF.RateLimiterQueue(limiter, { maxQueueSize: 1 });
    assert.equal(await queue.removeTokens(1), 1);
    assert.equal(await queue.removeTokens(1), 0);
    assert.equal(await queue.getTokensRemaining(), 0);
    await assert.rejects(queue.removeTokens(3), (e) => e instanceof RLF.RateLimiterQueueError && /exceeds maximum 2 tokens/.test(e.message));
    // The third waits in the queue (msBeforeNext: the window's time left, in real time); the
    // window is ended now, so the consume it then sends is admitted.
    const third = queue.removeTokens(1);
    await assert.rejects(queue.removeTokens(1), (e) => e instanceof RLF.RateLimiterQueueError && e.message === "Number of requests reached it's maximum 1");
    await endWindow(client, `${kind}-q:limiter`);
    assert.equal(await third, 1);
  });

  test(`ours as rate-limiter-flexible's insuranceLimiter: it answers when Redis fails the other (${kind})`, async () => {
    // rate-limiter-flexible's own limiter on a client that cannot send (closed, or never
    // connected without an offline queue): a store error on every call.
    const broken = kind === 'node-redis'
      ? await connect(redis).then(async (c) => { await c.quit(); return c; })
      : new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true, enableOfflineQueue: false });
    const insured = new RLF.RateLimiterRedis({
      storeClient: broken, ...(kind === 'node-redis' ? { useRedisPackage: true } : {}), keyPrefix: `${kind}-theirs`, points: 5, duration: 10,
      insuranceLimiter: ours({ keyPrefix: 'ins', points: 1, duration: 20 }),
    });
    const since = performance.now();
    assert.deepEqual(await settledIn(insured.consume('k'), 20_000, since),
      ['resolved', { remainingPoints: 0, msBeforeNext: 20_000, consumedPoints: 1, isFirstInDuration: true }]);
    assert.deepEqual(await settledIn(insured.consume('k'), 20_000, since),
      ['rejected', { remainingPoints: 0, msBeforeNext: 20_000, consumedPoints: 2, isFirstInDuration: false }]);
    if (kind === 'ioredis') broken.disconnect();
  });
}
