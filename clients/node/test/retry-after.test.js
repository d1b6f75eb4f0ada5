// Issue 22: Retry-After is a promise, across a change of a limit's parameters too. Traffic under
// one limit, then the application changes the limit (a new middleware on the same keys, or
// RL.POLICY.SET for a policy); the 429 that follows carries Retry-After, and a client that waits
// exactly that long is admitted at its first retry, over real HTTP (Express 5 on node:http) and
// through the RateLimiterRedis class (msBeforeNext; its window the key's TTL, below). The server's debug clock is frozen and the
// package's denial memory runs on an injected clock; both are moved together. The figures are
// issue 22's table (burst 3, rate 1 and 3) with periods in minutes instead of seconds (x60), so
// that no key's TTL, which runs in real time, can end under the test.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimiterRedis, parseReply, rateLimitMiddleware } from '../index.js';
import { PATIENT, calls, clocks, endWindow, helloApp, limitFields, memoryLogger, refusal, serverForFile, ttlWithin } from './helpers.js';

const { client } = await serverForFile();

/** The module's answer now for `command` (a key and its parameters), with DRYRUN: nothing written. */
async function direct(command) {
  const sixth = { 'RL.LIMIT': 'rule', 'RL.LEAKYBUCKET': 'delay_ms' }[command[0]];
  return parseReply(await client.sendCommand([...command, 'DRYRUN']), sixth);
}

/**
 * An Express service whose limit the application can change: `change(limit)` puts a new
 * middleware (the same keys, the same clock) in the old one's place, as an application that
 * reloads its configuration does.
 */
async function service(clock, limit, prefix) {
  const make = (l) => rateLimitMiddleware({
    ...PATIENT,
    client, limit: l, prefix, key: (req) => req.get('X-Client-Id'), now: () => clock.ms, logger: memoryLogger(),
  });
  let current = make(limit);
  const { http, as } = await helloApp((req, res, next) => current(req, res, next));
  return {
    http,
    as,
    change: (l) => { current = make(l); },
    get limiter() { return current.limiter; },
  };
}

/**
 * Three requests admitted under the old limit and a fourth refused, the change, then the 429
 * under the new parameters: its Retry-After (and RateLimit's t) is the module's exact
 * retry_after_ms rounded up to seconds; one ms before retry_after_ms the module still denies;
 * the client's first retry, Retry-After seconds later, is admitted.
 */
async function obeyingRetryAfter({ svc, clock, id, change, command, retryAfterMs }) {
  for (let i = 0; i < 3; i++) assert.equal((await svc.as(id)).status, 200, `request ${i} under the old limit`);
  assert.equal((await svc.as(id)).status, 429, 'the fourth under the old limit');
  await change();
  const refused = await svc.as(id);
  const [status, , ratelimit, , , , retryAfter] = limitFields(refused);
  assert.equal(status, 429, 'refused under the new parameters');
  const exact = await direct(command);
  assert.equal(exact.allowed, false);
  const seconds = Math.ceil(exact.retryAfterMs / 1000);
  assert.equal(retryAfter, `${seconds}`, 'Retry-After = ceil(retry_after_ms / 1000)');
  assert.match(ratelimit, new RegExp(`;r=0;t=${seconds}$`), "RateLimit's t is the same figure");
  // One ms before retry_after_ms the module still denies, 1 ms left (DRYRUN: nothing written);
  // the client waits exactly Retry-After and its first retry is admitted.
  await clock.at(exact.retryAfterMs - 1);
  const early = await direct(command);
  await clock.at(seconds * 1000);
  const retry = await svc.as(id);
  assert.deepEqual({
    'retry_after_ms': exact.retryAfterMs,
    [`the module at ${exact.retryAfterMs - 1} ms`]: { allowed: early.allowed, retryAfterMs: early.retryAfterMs },
    [`the first retry at ${seconds} s`]: { status: retry.status, retryAfter: retry.headers['retry-after'] },
  }, {
    'retry_after_ms': retryAfterMs,
    [`the module at ${exact.retryAfterMs - 1} ms`]: { allowed: false, retryAfterMs: 1 },
    [`the first retry at ${seconds} s`]: { status: 200, retryAfter: undefined },
  });
}

// [what, the old limit, the new one, the module's command under the new one (key excepted),
// retry_after_ms of the first request under the new one]
const CHANGES = [
  ['GCRA burst 3, 1 per 3m -> 3 per 3m', { algorithm: 'gcra', burst: 3, rate: 1, period: '3m' },
    { algorithm: 'gcra', burst: 3, rate: 3, period: '3m' }, ['RL.GCRA', '3', '3', '180000'], 180_000],
  ['GCRA burst 3, 3 per 3m -> 1 per 3m', { algorithm: 'gcra', burst: 3, rate: 3, period: '3m' },
    { algorithm: 'gcra', burst: 3, rate: 1, period: '3m' }, ['RL.GCRA', '3', '1', '180000'], 60_000],
  ['token bucket of 3, 1 per 3m -> 3 per 3m', { algorithm: 'tokenbucket', capacity: 3, refillAmount: 1, refillPeriod: '3m' },
    { algorithm: 'tokenbucket', capacity: 3, refillAmount: 3, refillPeriod: '3m' }, ['RL.TOKENBUCKET', '3', '3', '180000'], 180_000],
  ['token bucket of 3, 3 per 3m -> 1 per 3m', { algorithm: 'tokenbucket', capacity: 3, refillAmount: 3, refillPeriod: '3m' },
    { algorithm: 'tokenbucket', capacity: 3, refillAmount: 1, refillPeriod: '3m' }, ['RL.TOKENBUCKET', '3', '1', '180000'], 60_000],
  ['leaky bucket of 3, 1 per 3m -> 3 per 3m', { algorithm: 'leakybucket', capacity: 3, leakAmount: 1, leakPeriod: '3m' },
    { algorithm: 'leakybucket', capacity: 3, leakAmount: 3, leakPeriod: '3m' }, ['RL.LEAKYBUCKET', '3', '3', '180000'], 180_000],
  ['leaky bucket of 3, 3 per 3m -> 1 per 3m', { algorithm: 'leakybucket', capacity: 3, leakAmount: 3, leakPeriod: '3m' },
    { algorithm: 'leakybucket', capacity: 3, leakAmount: 1, leakPeriod: '3m' }, ['RL.LEAKYBUCKET', '3', '1', '180000'], 60_000],
];

for (const [what, oldLimit, newLimit, [name, ...params], retryAfterMs] of CHANGES) {
  test(`middleware, ${what}: the first retry after Retry-After is admitted`, async () => {
    const clock = await clocks(client);
    const svc = await service(clock, oldLimit, `rl:change:${name}:${params.join(':')}:`);
    try {
      await obeyingRetryAfter({
        svc, clock, id: 'ann', retryAfterMs,
        change: () => svc.change(newLimit),
        command: [name, `rl:change:${name}:${params.join(':')}:ann`, ...params],
      });
    } finally {
      await svc.http.close();
    }
  });
}

for (const [what, before, after, retryAfterMs] of [
  ['1 per 3m -> 3 per 3m', ['3', '1', '3m'], ['3', '3', '3m'], 180_000],
  ['3 per 3m -> 1 per 3m', ['3', '3', '3m'], ['3', '1', '3m'], 60_000],
]) {
  test(`middleware, a policy whose GCRA rule goes ${what} (RL.POLICY.SET): the first retry is admitted`, async () => {
    const clock = await clocks(client);
    const policy = `change-${before[1]}-${after[1]}`;
    await client.sendCommand(['RL.POLICY.SET', policy, 'GCRA', ...before]);
    const svc = await service(clock, { policy }, 'rl:policy-change:');
    try {
      await obeyingRetryAfter({
        svc, clock, id: policy, retryAfterMs,
        change: () => client.sendCommand(['RL.POLICY.SET', policy, 'GCRA', ...after]),
        command: ['RL.LIMIT', `rl:policy-change:${policy}`, policy],
      });
    } finally {
      await svc.http.close();
    }
  });
}

test('middleware: a limit changed to a larger burst admits at once, whatever the old one refused', async () => {
  const clock = await clocks(client);
  const svc = await service(clock, { algorithm: 'gcra', burst: 3, rate: 1, period: '3m' }, 'rl:larger:');
  try {
    for (let i = 0; i < 3; i++) assert.equal((await svc.as('bea')).status, 200);
    assert.equal((await svc.as('bea')).status, 429);
    assert.equal((await svc.as('bea')).status, 429, 'the old limit remembers its denial');
    svc.change({ algorithm: 'gcra', burst: 5, rate: 1, period: '3m' });
    // 3 of 5 taken: 2 more now, then the third refused for one emission interval (180 s).
    for (const r of ['1', '0']) {
      const res = await svc.as('bea');
      assert.deepEqual([res.status, res.headers['x-ratelimit-limit'], res.headers['x-ratelimit-remaining']], [200, '5', r]);
    }
    assert.equal((await svc.as('bea')).headers['retry-after'], '180');
  } finally {
    await svc.http.close();
  }
});

// rate-limiter-flexible's RateLimiterRedis keeps its key (RL.COUNTER): the points consumed, the
// window its TTL, set at the window's first consume on the server's clock. The window that began
// under the old options governs the key until it expires, as in rate-limiter-flexible: its
// msBeforeNext is that key's TTL (between the old duration and that less the real time since the
// window began), the in-memory block refuses until then without a round trip, and once the key
// has expired (made to, then seen gone) a consume is admitted under the new options.
for (const [what, oldOptions, newOptions] of [
  ['duration 180 s -> 60 s', { points: 3, duration: 180 }, { points: 3, duration: 60 }],
  ['duration 60 s -> 180 s', { points: 3, duration: 60 }, { points: 3, duration: 180 }],
  ['points 3 -> 5', { points: 3, duration: 60 }, { points: 5, duration: 60 }],
  ['points 5 -> 3', { points: 5, duration: 60 }, { points: 3, duration: 60 }],
]) {
  test(`RateLimiterRedis, ${what}: a consume msBeforeNext later is admitted`, async () => {
    const clock = { ms: 1_000 };
    const keyPrefix = `change-${oldOptions.points}-${oldOptions.duration}-${newOptions.points}-${newOptions.duration}`;
    // The in-memory block is the class's denial memory: on from the consume over the points.
    const make = (options) => new RateLimiterRedis({
      storeClient: client, keyPrefix, now: () => clock.ms, inMemoryBlockOnConsumed: Math.max(oldOptions.points, newOptions.points) + 1,
      logger: null, ...options,
    });
    const old = make(oldOptions);
    const since = performance.now();
    // Traffic under the old options: the points taken.
    for (let i = 0; i < oldOptions.points; i++) await old.consume('cy');
    // The application changes the options; the new limiter takes the key as the old one left it.
    const limiter = make(newOptions);
    const over = Math.max(0, oldOptions.points - newOptions.points) + Math.max(0, newOptions.points - oldOptions.points) + 1;
    const refused = await refusal(limiter.consume('cy', over));
    ttlWithin(refused.msBeforeNext, oldOptions.duration * 1000, since, 'the old window\'s time left');
    // Until then the in-memory block refuses, without a round trip.
    const calls0 = await calls(client, 'RL.COUNTER');
    clock.ms += refused.msBeforeNext - 1;
    assert.equal((await refusal(limiter.consume('cy'))).msBeforeNext, 1);
    assert.equal((await calls(client, 'RL.COUNTER')) - calls0, 0);
    // The key expires (the window's end); msBeforeNext later a consume is admitted, a new window.
    await endWindow(client, `${keyPrefix}:cy`);
    clock.ms += 1;
    const retry = await limiter.consume('cy');
    assert.deepEqual(retry.toJSON(), { remainingPoints: newOptions.points - 1, msBeforeNext: newOptions.duration * 1000, consumedPoints: 1, isFirstInDuration: true });
  });
}
