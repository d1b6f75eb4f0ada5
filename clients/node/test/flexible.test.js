// RateLimiterRedis against rate-limiter-flexible's own RateLimiterRedis on the same server: the
// scenarios its README and wiki document (consume within and over the points, a cost above 1,
// blockDuration, blockOnConsumed, get, delete, penalty, reward, block, set, insuranceLimiter),
// field by field, on each client both take (node-redis's and ioredis's). Both keep the same key:
// `keyPrefix:key`, the points consumed as a plain integer string whose TTL is the window, so
// keys either wrote are read and counted on by the other. The window is the key's TTL on the
// server's own clock (RL.COUNTER; the debug clock does not move it): a msBeforeNext is asserted
// between the window and the window less the real time measured since the call that set it, and
// a window is ended by an event (the key made to expire, then seen gone).

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import Redis, { Cluster } from 'ioredis';
import * as RLF from 'rate-limiter-flexible';
import { createSentinel } from 'redis';
import { RateLimit, RateLimiterRedis, RateLimiterRes } from '../index.js';
import { PATIENT, calls, connect, endWindow, quiet, refusal, serverForFile, ttlWithin } from './helpers.js';

const { redis, client } = await serverForFile();
// ioredis's client on the same server (RESP2; node-redis's `client` is RESP3).
const io = new Redis({ host: '127.0.0.1', port: redis.port });
after(() => io.disconnect());

// The clients the scenarios run on: [kind, the store client, rate-limiter-flexible's options for it].
const KINDS = [['node-redis', client, { useRedisPackage: true }], ['ioredis', io, {}]];

/** Runs one call, returning ['resolved' | 'rejected', fields] or ['error', message]. */
async function outcome(promise) {
  try {
    const res = await promise;
    return ['resolved', res === null ? null : fields(res)];
  } catch (err) {
    if (err instanceof Error) return ['error', err.message];
    return ['rejected', fields(err)];
  }
}
const fields = (res) => (typeof res === 'boolean' ? res : { ...res.toJSON() });

/** Both limiters with the same options on the client of `kind`, each on its own key prefix. */
function pair(options, name, [kind, store, theirOptions] = KINDS[0]) {
  const ours = new RateLimiterRedis({ storeClient: store, keyPrefix: `ours-${kind}-${name}`, logger: quiet, ...options });
  const theirs = new RLF.RateLimiterRedis({
    storeClient: store, ...theirOptions, keyPrefix: `rlf-${kind}-${name}`, ...options,
  });
  return { ours, theirs };
}

/**
 * Asserts an outcome: its kind and fields as `expected`, but msBeforeNext, which is at most
 * `windowMs` and at least that less the real time since `since` (performance.now() before the
 * call that set the key's TTL); a negative msBeforeNext (-1: no expiry) exactly.
 */
function expectOutcome([kind, res], [wantKind, want], windowMs, since, what) {
  assert.equal(kind, wantKind, what);
  if (res === null || typeof res !== 'object') {
    assert.deepEqual(res, want, what);
    return;
  }
  const { msBeforeNext, ...rest } = res;
  const { msBeforeNext: wantMs, ...wantRest } = want;
  assert.deepEqual(rest, wantRest, what);
  if (wantMs < 0 || since === undefined) assert.equal(msBeforeNext, wantMs, what);
  else ttlWithin(msBeforeNext, windowMs, since, what);
}

/** Both outcomes as `expected` (expectOutcome), ours and rate-limiter-flexible's. */
function both(mine, theirs, expected, windowMs, since, what) {
  expectOutcome(mine, expected, windowMs, since, `${what} (ours)`);
  expectOutcome(theirs, expected, windowMs, since, `${what} (rate-limiter-flexible)`);
}

const res = (remainingPoints, msBeforeNext, consumedPoints, isFirstInDuration = false) =>
  ({ remainingPoints, msBeforeNext, consumedPoints, isFirstInDuration });

for (const K of KINDS) {
  const [kind, store] = K;

  test(`consume within the points resolves, over them rejects, counted as there (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 5, duration: 10 }, 'basic', K);
    const since = performance.now();
    const expected = [
      ['resolved', res(4, 10_000, 1, true)],
      ['resolved', res(2, 10_000, 3)],
      ['resolved', res(0, 10_000, 5)],
      ['rejected', res(0, 10_000, 6)],
    ];
    for (const [i, cost] of [1, 2, 2, 1].entries()) {
      both(await outcome(ours.consume('user1', cost)), await outcome(theirs.consume('user1', cost)), expected[i], 10_000, since, `consume ${i}`);
    }
    // The first consume's msBeforeNext is the window exactly (the key was made by it).
    assert.equal((await ours.consume('user0')).msBeforeNext, 10_000);
    // The key is rate-limiter-flexible's own: the count as a string, the window as its TTL.
    assert.equal(await client.get(`ours-${kind}-basic:user1`), '6');
    assert.equal(await client.get(`rlf-${kind}-basic:user1`), '6');
    ttlWithin(await client.pTTL(`ours-${kind}-basic:user1`), 10_000, since, 'the key\'s TTL');
    // get: the state, and null for a key that has none.
    both(await outcome(ours.get('user1')), await outcome(theirs.get('user1')), ['resolved', res(0, 10_000, 6)], 10_000, since, 'get');
    both(await outcome(ours.get('nobody')), await outcome(theirs.get('nobody')), ['resolved', null], 0, undefined, 'get of a missing key');
    // delete: true when the key was there, then false.
    for (const deleted of [true, false]) {
      both(await outcome(ours.delete('user1')), await outcome(theirs.delete('user1')), ['resolved', deleted], 0, undefined, 'delete');
    }
    assert.equal(await ours.get('user1'), null);
    // A string of digits is a number of points; a fraction is an Error, as there. (There,
    // isFirstInDuration compares the count with the string '2', so it is false: ours says true,
    // as it does for the number 2.)
    const s2 = performance.now();
    expectOutcome(await outcome(ours.consume('user2', '2')), ['resolved', res(3, 10_000, 2, true)], 10_000, s2, 'points as a string');
    expectOutcome(await outcome(theirs.consume('user2', '2')), ['resolved', res(3, 10_000, 2, false)], 10_000, s2, 'points as a string (theirs)');
    for (const points of [1.5, '2.0']) {
      const mine = await outcome(ours.consume('user2', points));
      assert.equal(mine[0], 'error');
      assert.deepEqual(mine, await outcome(theirs.consume('user2', points)), `points ${points}`);
    }
  });

  test(`the window starts at the first consume and ends when the key expires (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 2, duration: 60 }, 'window', K);
    for (const limiter of [ours, theirs]) {
      const since = performance.now();
      expectOutcome(await outcome(limiter.consume('k')), ['resolved', res(1, 60_000, 1, true)], 60_000, since, 'the first');
      expectOutcome(await outcome(limiter.consume('k')), ['resolved', res(0, 60_000, 2)], 60_000, since, 'the second');
      expectOutcome(await outcome(limiter.consume('k')), ['rejected', res(0, 60_000, 3)], 60_000, since, 'over');
      await endWindow(client, limiter.getKey('k'));
      const again = performance.now();
      expectOutcome(await outcome(limiter.consume('k')), ['resolved', res(1, 60_000, 1, true)], 60_000, again, 'a new window');
    }
  });

  test(`blockDuration: the consume that goes over blocks the key for blockDuration seconds (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 2, duration: 1, blockDuration: 30 }, 'blockdur', K);
    const first = performance.now();
    for (let i = 0; i < 2; i++) {
      const since = first;
      both(await outcome(ours.consume('ip')), await outcome(theirs.consume('ip')), ['resolved', res(1 - i, 1000, i + 1, i === 0)], 1000, since, `consume ${i}`);
    }
    const since = performance.now();
    // The block: msBeforeNext the block's, the key written SET 3 EX 30, as there.
    both(await outcome(ours.consume('ip')), await outcome(theirs.consume('ip')), ['rejected', res(0, 30_000, 3)], 30_000, undefined, 'the consume that blocks');
    for (const prefix of ['ours', 'rlf']) {
      assert.equal(await client.get(`${prefix}-${kind}-blockdur:ip`), '3');
      ttlWithin(await client.pTTL(`${prefix}-${kind}-blockdur:ip`), 30_000, since, `${prefix}'s block`);
    }
    // Blocked: a consume is counted and refused until the key expires, the block's time left.
    both(await outcome(ours.consume('ip')), await outcome(theirs.consume('ip')), ['rejected', res(0, 30_000, 4)], 30_000, since, 'in the block');
    both(await outcome(ours.get('ip')), await outcome(theirs.get('ip')), ['resolved', res(0, 30_000, 4)], 30_000, since, 'get in the block');
    await endWindow(client, ours.getKey('ip'));
    assert.deepEqual((await ours.consume('ip')).toJSON(), res(1, 1000, 1, true));
  });

  test(`blockOnConsumed: the block starts at that many points consumed (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 2, duration: 10, blockDuration: 20, blockOnConsumed: 4 }, 'blockon', K);
    const since = performance.now();
    const steps = [
      ['resolved', res(1, 10_000, 1, true)], ['resolved', res(0, 10_000, 2)], ['rejected', res(0, 10_000, 3)],
    ];
    for (const [i, want] of steps.entries()) {
      both(await outcome(ours.consume('b')), await outcome(theirs.consume('b')), want, 10_000, since, `consume ${i}`);
    }
    const blocked = performance.now();
    both(await outcome(ours.consume('b')), await outcome(theirs.consume('b')), ['rejected', res(0, 20_000, 4)], 20_000, undefined, 'the fourth blocks');
    ttlWithin(await client.pTTL(ours.getKey('b')), 20_000, blocked, 'the block\'s TTL');
    // block(key) writes blockOnConsumed, as there.
    both(await outcome(ours.block('c', 5)), await outcome(theirs.block('c', 5)), ['resolved', res(0, 5000, 4)], 0, undefined, 'block');
    assert.throws(() => new RateLimiterRedis({ storeClient: store, points: 5, blockOnConsumed: 4 }),
      /^Error: blockOnConsumed option must be greater or equal "points" option$/);
  });

  test(`penalty and reward add and take back, as there; block and set write the key with SET (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 5, duration: 10 }, 'penalty', K);
    const since = performance.now();
    const steps = [
      [(l) => l.penalty('p', 2), res(3, 10_000, 2, true)],
      [(l) => l.penalty('p', 3), res(0, 10_000, 5)],
      [(l) => l.penalty('p', 3), res(0, 10_000, 8)], // past the points, as there
      [(l) => l.reward('p', 6), res(3, 10_000, 2)],
      [(l) => l.reward('p', 4), res(7, 10_000, -2)], // below zero, as there
    ];
    for (const [i, [call, want]] of steps.entries()) {
      both(await outcome(call(ours)), await outcome(call(theirs)), ['resolved', want], 10_000, since, `step ${i}`);
    }
    for (const key of ['fresh', 'used']) {
      if (key === 'used') {
        await ours.consume(key);
        await theirs.consume(key);
      }
      const blocked = performance.now();
      both(await outcome(ours.block(key, 60)), await outcome(theirs.block(key, 60)), ['resolved', res(0, 60_000, 6)], 0, undefined, `block a ${key} key`);
      assert.equal(await client.get(ours.getKey(key)), '6');
      both(await outcome(ours.consume(key)), await outcome(theirs.consume(key)), ['rejected', res(0, 60_000, 7)], 60_000, blocked, `consume in a block of a ${key} key`);
    }
    // set(key, points, secDuration): SET points EX secDuration; left out, duration.
    const setAt = performance.now();
    both(await outcome(ours.set('s', 3, 20)), await outcome(theirs.set('s', 3, 20)), ['resolved', res(0, 20_000, 3)], 0, undefined, 'set');
    both(await outcome(ours.get('s')), await outcome(theirs.get('s')), ['resolved', res(2, 20_000, 3)], 20_000, setAt, 'get after set');
    both(await outcome(ours.set('t', 1)), await outcome(theirs.set('t', 1)), ['resolved', res(0, 10_000, 1)], 0, undefined, 'set for duration');
    both(await outcome(ours.set('u', 2, 0)), await outcome(theirs.set('u', 2, 0)), ['resolved', res(0, -1, 2)], 0, undefined, 'set for good');
    assert.equal(await client.pTTL(ours.getKey('u')), -1);
  });

  test(`a store error rejects with an Error, or goes to insuranceLimiter (${kind})`, async () => {
    await client.set(`ours-err-${kind}:k`, 'x');
    await client.hSet(`ours-err-${kind}:h`, 'a', '1');
    const plain = new RateLimiterRedis({ storeClient: store, points: 2, duration: 1, keyPrefix: `ours-err-${kind}`, logger: quiet });
    assert.deepEqual(await outcome(plain.consume('k')), ['error', 'ERR value is not an integer or out of range']);
    assert.deepEqual(await outcome(plain.consume('h')), ['error', 'WRONGTYPE Operation against a key holding the wrong kind of value']);
    assert.equal(await client.get(`ours-err-${kind}:k`), 'x');
    const insured = new RateLimiterRedis({
      storeClient: store, points: 2, duration: 1, keyPrefix: `ours-err-${kind}`, logger: quiet,
      insuranceLimiter: new RLF.RateLimiterMemory({ points: 1, duration: 1 }),
    });
    assert.equal((await insured.consume('k')).remainingPoints, 0);
    await assert.rejects(insured.consume('k'), (r) => r instanceof RLF.RateLimiterRes);
  });

  test(`execEvenly: admitted consumes are spread over the time left in the window (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 3, duration: 2, execEvenly: true }, 'evenly', K);
    for (const limiter of [ours, theirs]) {
      // The first of a window at once; then a wait of ceil(ms left / (points left + 2)), the
      // ms left being the key's TTL (2000 less the real time since the first), and msBeforeNext
      // that TTL less the wait.
      const since = performance.now();
      expectOutcome(await outcome(limiter.consume('e')), ['resolved', res(2, 2000, 1, true)], 2000, since, 'the first');
      for (const [remaining, consumed] of [[1, 2], [0, 3]]) {
        const started = performance.now();
        const r = await limiter.consume('e');
        const ended = performance.now();
        assert.deepEqual({ ...r.toJSON(), msBeforeNext: 0 }, res(remaining, 0, consumed));
        const leastTtl = 2000 - Math.ceil(ended - since) - 1;
        const mostTtl = 2000 - Math.floor(started - since);
        const leastWait = Math.ceil(leastTtl / (remaining + 2));
        const mostWait = Math.ceil(mostTtl / (remaining + 2));
        assert.ok(ended - started >= leastWait - 1, `waited ${ended - started} ms, at least ${leastWait}`);
        assert.ok(r.msBeforeNext >= leastTtl - mostWait && r.msBeforeNext <= mostTtl - leastWait,
          `msBeforeNext ${r.msBeforeNext}: the TTL (${leastTtl} to ${mostTtl}) less the wait (${leastWait} to ${mostWait})`);
      }
    }
  });

  test(`inMemoryBlockOnConsumed: a key over it is refused in the process, without Redis (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 2, duration: 60, inMemoryBlockOnConsumed: 3, inMemoryBlockDuration: 10 }, 'inmem', K);
    const since = performance.now();
    for (let i = 0; i < 2; i++) {
      both(await outcome(ours.consume('m')), await outcome(theirs.consume('m')), ['resolved', res(1 - i, 60_000, i + 1, i === 0)], 60_000, since, `consume ${i}`);
    }
    // The third reaches 3: refused, and blocked in memory for 10 s from the call.
    const blocked = performance.now();
    both(await outcome(ours.consume('m')), await outcome(theirs.consume('m')), ['rejected', res(0, 10_000, 3)], 0, undefined, 'the consume that blocks in memory');
    // The next is refused by the process: RateLimiterRes(0, time left), no command sent.
    const before = await calls(client, 'RL.COUNTER');
    const [how, r] = await outcome(ours.consume('m'));
    assert.equal(await calls(client, 'RL.COUNTER'), before);
    assert.equal(how, 'rejected');
    expectOutcome(['rejected', r], ['rejected', res(0, 10_000, 0)], 10_000, blocked, 'refused in memory');
    // delete() forgets the block too.
    assert.equal(await ours.delete('m'), true);
    assert.equal((await ours.consume('m')).consumedPoints, 1);
    assert.throws(() => new RateLimiterRedis({ storeClient: store, points: 5, inMemoryBlockOnConsumed: 4 }),
      /inMemoryBlockOnConsumed option must be greater or equal "points" option/);
  });

  test(`keys rate-limiter-flexible wrote are read and counted on, and back (${kind})`, async () => {
    // The same keyPrefix: a user switching constructors keeps every count in flight.
    const ours = new RateLimiterRedis({ storeClient: store, points: 5, duration: 30, keyPrefix: `shared-${kind}`, logger: quiet });
    const theirs = new RLF.RateLimiterRedis({ storeClient: store, points: 5, duration: 30, keyPrefix: `shared-${kind}`, ...K[2] });
    const since = performance.now();
    await theirs.consume('u', 2);
    expectOutcome(await outcome(ours.get('u')), ['resolved', res(3, 30_000, 2)], 30_000, since, 'ours reads theirs');
    expectOutcome(await outcome(ours.consume('u', 2)), ['resolved', res(1, 30_000, 4)], 30_000, since, 'ours counts on');
    expectOutcome(await outcome(theirs.consume('u', 2)), ['rejected', res(0, 30_000, 6)], 30_000, since, 'theirs counts on');
    expectOutcome(await outcome(ours.reward('u', 3)), ['resolved', res(2, 30_000, 3)], 30_000, since, 'ours gives back');
    await ours.block('v', 30);
    await assert.rejects(theirs.consume('v'), (r) => r instanceof RLF.RateLimiterRes && r.consumedPoints === 7);
  });
}

test('an option rate-limiter-flexible has and the module cannot honour is refused', () => {
  assert.throws(() => new RateLimiterRedis({ storeClient: client, points: 5, customIncrTtlLuaScript: 'return 1' }),
    /customIncrTtlLuaScript is not supported/);
  assert.throws(() => new RateLimiterRedis({ points: 5 }), /storeClient is not set/);
  assert.throws(() => new RateLimiterRedis({ storeClient: client, points: 1.5 }), /points must be an integer/);
  assert.throws(() => new RateLimiterRedis({ storeClient: client, points: 1, duration: 315_360_001 }), /duration must be at most 10 years/);
});

test('a client it does not take is refused in the constructor, saying which it takes: a Sentinel client', async () => {
  const ioCluster = new Cluster([{ host: '127.0.0.1', port: redis.port }], { lazyConnect: true });
  const sentinel = createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: redis.port }] });
  try {
    // ioredis's clients are taken (a Redis, a Cluster), by both classes.
    for (const storeClient of [io, ioCluster]) {
      assert.ok(new RateLimiterRedis({ storeClient, points: 5, duration: 1, logger: quiet }) instanceof RateLimiterRedis);
      assert.ok(new RateLimit({ client: storeClient, logger: quiet, limit: { algorithm: 'gcra', burst: 1, rate: 1, period: '1s' } }) instanceof RateLimit);
    }
    const takes = 'invalid storeClient: RateLimiterRedis takes a node-redis client (createClient from "redis") or its cluster client (createCluster), ' +
      'or an ioredis client (new Redis() or new Cluster() from "ioredis"); got ';
    assert.throws(() => new RateLimiterRedis({ storeClient: sentinel, points: 5, duration: 1 }),
      { name: 'Error', message: `${takes}node-redis's Sentinel client (createSentinel), which it does not take (RateLimit and rateLimitMiddleware do)` });
    assert.throws(() => new RateLimiterRedis({ storeClient: {}, points: 5, duration: 1 }),
      { name: 'Error', message: `${takes}an object without sendCommand` });
    assert.throws(() => new RateLimit({ client: {}, limit: { algorithm: 'gcra', burst: 1, rate: 1, period: '1s' } }), {
      name: 'TypeError',
      message: 'invalid client: expected a node-redis client (createClient, createSentinel or createCluster from "redis") or an ioredis client ' +
        '(new Redis() or new Cluster() from "ioredis"); got an object without sendCommand',
    });
  } finally {
    ioCluster.disconnect();
  }
});

test("ioredis's keyPrefix prefixes every key the class and RateLimit write, on both backends", async () => {
  const prefixed = new Redis({ host: '127.0.0.1', port: redis.port, keyPrefix: 'app:' });
  try {
    for (const backend of ['module', 'script']) {
      const limiter = new RateLimiterRedis({ storeClient: prefixed, points: 3, duration: 10, keyPrefix: `kp-${backend}`, backend, logger: quiet });
      assert.deepEqual((await limiter.consume('u', 2)).toJSON(), res(1, 10_000, 2, true));
      // The key in Redis is ioredis's prefix, then the class's key; none without it.
      assert.equal(await client.get(`app:kp-${backend}:u`), '2', backend);
      assert.equal(await client.exists(`kp-${backend}:u`), 0, backend);
      assert.equal((await limiter.get('u')).consumedPoints, 2);
      // block (SET) and delete (DEL), which ioredis prefixes, find the same key.
      await limiter.block('u', 5);
      assert.equal(await client.get(`app:kp-${backend}:u`), '4', backend);
      assert.equal(await limiter.delete('u'), true);
      assert.equal(await client.exists(`app:kp-${backend}:u`), 0, backend);
      const rl = new RateLimit({ client: prefixed, backend, prefix: `rl-${backend}:`, logger: quiet, ...PATIENT,
        limit: { algorithm: 'fixedwindow', limit: 2, window: '10s' } });
      assert.equal((await rl.check('u')).remaining, 1);
      assert.equal(await client.exists(`app:rl-${backend}:u`), 1, backend);
    }
  } finally {
    prefixed.disconnect();
  }
});

test('points 0 admits nothing: every consume is counted and refused, as there', async () => {
  const { ours, theirs } = pair({ points: 0, duration: 10 }, 'zero');
  for (const cost of [1, 3]) {
    const since = performance.now();
    both(await outcome(ours.consume(`z${cost}`, cost)), await outcome(theirs.consume(`z${cost}`, cost)),
      ['rejected', res(0, 10_000, cost, true)], 10_000, since, `consume ${cost} of 0 points`);
  }
  // A consume of nothing takes nothing, and passes.
  const since = performance.now();
  both(await outcome(ours.consume('y', 0)), await outcome(theirs.consume('y', 0)), ['resolved', res(0, 10_000, 0, true)], 10_000, since, 'consume 0');
  assert.throws(() => new RateLimiterRedis({ storeClient: client, points: -1 }), /^Error: points must be an integer from 0 to 10\^12$/);
});

test('a cost above points is counted and refused, as there; with blockDuration it blocks', async () => {
  const { ours, theirs } = pair({ points: 2, duration: 10 }, 'over');
  const since = performance.now();
  both(await outcome(ours.consume('fresh', 3)), await outcome(theirs.consume('fresh', 3)), ['rejected', res(0, 10_000, 3, true)], 10_000, since, 'a cost above points on a fresh key');
  both(await outcome(ours.consume('fresh')), await outcome(theirs.consume('fresh')), ['rejected', res(0, 10_000, 4)], 10_000, since, 'the next consume');
  const blocking = pair({ points: 2, duration: 10, blockDuration: 30 }, 'overblock');
  both(await outcome(blocking.ours.consume('b', 3)), await outcome(blocking.theirs.consume('b', 3)), ['rejected', res(0, 30_000, 3, true)], 0, undefined, 'with blockDuration');
  // With inMemoryBlockOnConsumed: blocked in the process for the window's time left.
  const clock = { ms: 0 };
  const inMemory = new RateLimiterRedis({
    storeClient: client, points: 1, duration: 5, inMemoryBlockOnConsumed: 1, keyPrefix: 'ours-overmem', now: () => clock.ms, logger: quiet,
  });
  const memSince = performance.now();
  const first = await refusal(inMemory.consume('m', 2));
  ttlWithin(first.msBeforeNext, 5000, memSince, 'blocked in memory');
  const before = await calls(client, 'RL.COUNTER');
  clock.ms = first.msBeforeNext - 1;
  assert.equal((await refusal(inMemory.consume('m'))).msBeforeNext, 1);
  assert.equal(await calls(client, 'RL.COUNTER'), before, 'refused in the process');
  // duration 0: the window never ends (INCRBY and PTTL, as there).
  const never = pair({ points: 2, duration: 0 }, 'overnever');
  both(await outcome(never.ours.consume('n', 3)), await outcome(never.theirs.consume('n', 3)), ['rejected', res(0, -1, 3, true)], 0, undefined, 'duration 0');
  assert.equal(await client.pTTL(never.ours.getKey('n')), -1);
});

test('block(key, 0) is for good; a consume then gives the key the window, as there', async () => {
  const { ours, theirs } = pair({ points: 1, duration: 1 }, 'forever');
  both(await outcome(ours.block('k', 0)), await outcome(theirs.block('k', 0)), ['resolved', res(0, -1, 2)], 0, undefined, 'block(key, 0)');
  both(await outcome(ours.get('k')), await outcome(theirs.get('k')), ['resolved', res(0, -1, 2)], 0, undefined, 'get in a block for good');
  // The refused point is counted, and the key, which had no expiry, gets the window's (its script's rule, RL.COUNTER's too).
  const since = performance.now();
  both(await outcome(ours.consume('k')), await outcome(theirs.consume('k')), ['rejected', res(0, 1000, 3)], 1000, since, 'a consume in it');
});

test('options.customDuration is the expiry of a key the call makes (0, or under a second: none)', async () => {
  const { ours, theirs } = pair({ points: 2, duration: 5 }, 'custom');
  for (const [key, customDuration, ms] of [['one', 1, 1000], ['half', 0.5, -1], ['never', 0, -1], ['negative', -1, 5000]]) {
    const since = performance.now();
    both(await outcome(ours.consume(key, 1, { customDuration })), await outcome(theirs.consume(key, 1, { customDuration })),
      ['resolved', res(1, ms, 1, true)], ms, ms > 0 ? since : undefined, `customDuration ${customDuration}`);
  }
  // penalty takes it too (rate-limiter-flexible's ExpressBruteFlexible does).
  assert.deepEqual((await ours.penalty('pen', 1, { customDuration: 3 })).toJSON(), res(1, 3000, 1, true));
  // The insurance limiter gets the options as they were given.
  await client.set('ours-custom-broken:k', 'x');
  const insured = new RateLimiterRedis({
    storeClient: client, points: 1, duration: 2, keyPrefix: 'ours-custom-broken', logger: quiet,
    insuranceLimiter: new RateLimiterRedis({ storeClient: client, points: 2, duration: 3, keyPrefix: 'ours-custom-insurance', logger: quiet }),
  });
  assert.deepEqual((await insured.consume('k', 1, { customDuration: 1 })).toJSON(), res(1, 1000, 1, true));
});

test('rejectIfRedisNotReady: a client that says it is not ready gets no command', async () => {
  // node-redis 4 and 5 say it with isReady (false while connecting) and isOpen (false once
  // closed), older ones with an isReady() function.
  for (const [what, shape] of [
    ['isReady false', { isReady: false, isOpen: true }],
    ['isReady() false', { isReady: () => false }],
    ['isOpen false', { isOpen: false }],
  ]) {
    let sent = 0;
    const storeClient = { ...shape, sendCommand: async () => { sent += 1; }, multi: () => { sent += 1; } };
    const limiter = new RateLimiterRedis({ storeClient, points: 2, duration: 1, rejectIfRedisNotReady: true, logger: quiet });
    for (const call of [() => limiter.consume('k'), () => limiter.get('k'), () => limiter.reward('k'), () => limiter.block('k', 1),
      () => limiter.set('k', 1, 1), () => limiter.delete('k')]) {
      await assert.rejects(call(), /^Error: Redis connection is not ready$/, what);
    }
    assert.equal(sent, 0, what);
  }
  // A closed node-redis client, really.
  const closed = await connect(redis);
  await closed.quit();
  const limiter = new RateLimiterRedis({ storeClient: closed, points: 2, duration: 1, rejectIfRedisNotReady: true, logger: quiet });
  await assert.rejects(limiter.consume('k'), /^Error: Redis connection is not ready$/);
  // ioredis says it with `status` ('ready' once connected): a stand-in, and a client closed.
  const standIn = new RateLimiterRedis({ storeClient: { status: 'closed' }, points: 2, duration: 1, rejectIfRedisNotReady: true });
  await assert.rejects(standIn.consume('k'), /^Error: Redis connection is not ready$/);
  const ioClosed = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
  const ioLimiter = new RateLimiterRedis({ storeClient: ioClosed, points: 2, duration: 1, rejectIfRedisNotReady: true, logger: quiet });
  await assert.rejects(ioLimiter.consume('k'), /^Error: Redis connection is not ready$/);
  // Ready: sent.
  for (const [kind, store] of KINDS) {
    const ready = new RateLimiterRedis({ storeClient: store, points: 2, duration: 1, rejectIfRedisNotReady: true, keyPrefix: `ours-ready-${kind}`, logger: quiet });
    assert.equal((await ready.consume('k')).remainingPoints, 1, kind);
  }
});

test('a number key without keyPrefix is sent as a string (getKey returns one, as declared)', async () => {
  // Found by the type check (tsc -p .): getKey(7) with keyPrefix '' returned the number 7, which
  // node-redis refuses as a command word, so every call with such a key failed.
  const limiter = new RateLimiterRedis({ storeClient: client, points: 2, duration: 60, keyPrefix: '', logger: quiet });
  assert.equal(limiter.getKey(7), '7');
  assert.equal((await limiter.consume(7)).consumedPoints, 1);
  assert.equal((await limiter.get(7)).consumedPoints, 1);
  assert.equal(await limiter.delete(7), true);
});
