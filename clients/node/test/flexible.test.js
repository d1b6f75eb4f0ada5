// RateLimiterRedis against rate-limiter-flexible's own RateLimiterRedis on the same server: the
// scenarios its README and wiki document (consume within and over the points, a cost above 1,
// blockDuration, get, delete, penalty, block, insuranceLimiter), field by field, on each client
// both take (node-redis's and ioredis's). Ours runs on the frozen debug clock, so its
// msBeforeNext is exact; rate-limiter-flexible's comes from real PTTLs, so it is compared within
// the few milliseconds the test takes.

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import Redis, { Cluster } from 'ioredis';
import * as RLF from 'rate-limiter-flexible';
import { createSentinel } from 'redis';
import { RateLimit, RateLimiterRedis, RateLimiterRes } from '../index.js';
import { PATIENT, T0_MS, calls, connect, quiet, refusal, serverForFile } from './helpers.js';

const { redis, client } = await serverForFile();
await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
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
  const ours = new RateLimiterRedis({ storeClient: store, keyPrefix: `ours-${kind}-${name}`, ...options });
  const theirs = new RLF.RateLimiterRedis({
    storeClient: store, ...theirOptions, keyPrefix: `rlf-${kind}-${name}`, ...options,
  });
  return { ours, theirs };
}

/** Asserts ours equals rate-limiter-flexible's, msBeforeNext within `slack` ms below ours. */
function same(ourOutcome, theirOutcome, what, slack = 1000) {
  const [ourKind, ourRes] = ourOutcome;
  const [theirKind, theirRes] = theirOutcome;
  assert.equal(ourKind, theirKind, what);
  if (ourRes === null || typeof ourRes !== 'object') {
    assert.deepEqual(ourRes, theirRes, what);
    return;
  }
  const { msBeforeNext: ourMs, ...ourRest } = ourRes;
  const { msBeforeNext: theirMs, ...theirRest } = theirRes;
  assert.deepEqual(ourRest, theirRest, what);
  assert.ok(theirMs <= ourMs && theirMs > ourMs - slack, `${what}: msBeforeNext ${ourMs} against ${theirMs}`);
}

for (const K of KINDS) {
  const [kind, store] = K;

  test(`consume within the points resolves, over them rejects with a RateLimiterRes (${kind})`, async () => {
    const { ours, theirs } = pair({ points: 5, duration: 10 }, 'basic', K);
    const expected = [
      ['resolved', { remainingPoints: 4, msBeforeNext: 10_000, consumedPoints: 1, isFirstInDuration: true }],
      ['resolved', { remainingPoints: 2, msBeforeNext: 10_000, consumedPoints: 3, isFirstInDuration: false }],
      ['resolved', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 5, isFirstInDuration: false }],
      ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 6, isFirstInDuration: false }],
    ];
    const costs = [1, 2, 2, 1];
    for (const [i, cost] of costs.entries()) {
      const mine = await outcome(ours.consume('user1', cost));
      assert.deepEqual(mine, expected[i], `consume ${i}`);
      same(mine, await outcome(theirs.consume('user1', cost)), `consume ${i}`);
    }
    // get: the state, and null for a key that has consumed nothing.
    const mine = await outcome(ours.get('user1'));
    assert.deepEqual(mine, ['resolved', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 5, isFirstInDuration: false }]);
    // rate-limiter-flexible counts the refused point too (6): ours took nothing for it.
    const theirs6 = await outcome(theirs.get('user1'));
    assert.equal(theirs6[1].consumedPoints, 6);
    same(await outcome(ours.get('nobody')), await outcome(theirs.get('nobody')), 'get of a missing key');
    assert.deepEqual(await outcome(ours.get('nobody')), ['resolved', null]);
    // delete: true when the key was there, then false.
    for (const expectedDeleted of [true, false]) {
      const d = await outcome(ours.delete('user1'));
      assert.deepEqual(d, ['resolved', expectedDeleted]);
      same(d, await outcome(theirs.delete('user1')), 'delete');
    }
    assert.equal(await ours.get('user1'), null);
    // A string of digits is a number of points; a fraction is an Error, as there.
    // (There, isFirstInDuration compares the count with the string '2', so it is false: ours says
    // true, as it does for the number 2.)
    const byString = await outcome(ours.consume('user2', '2'));
    assert.deepEqual(byString, ['resolved', { remainingPoints: 3, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: true }]);
    const theirByString = await outcome(theirs.consume('user2', '2'));
    same(byString, ['resolved', { ...theirByString[1], isFirstInDuration: true }], 'points as a string');
    same(await outcome(ours.consume('user2', 1.5)), await outcome(theirs.consume('user2', 1.5)), 'fractional points');
    // Another string is refused in rate-limiter-flexible's words.
    const byOtherString = await outcome(ours.consume('user2', '2.0'));
    assert.deepEqual(byOtherString, ['error', 'Consuming string different than integer values is not supported by this package']);
    same(byOtherString, await outcome(theirs.consume('user2', '2.0')), 'points as a string with a fraction');
  });

  test(`the window starts at the first consume and lasts duration seconds (${kind})`, async () => {
    // (Keys expire in real time while the server's clock is frozen: each step below leaves the
    // key at least 10 s to live, so that no key vanishes under the test.)
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS + 123}`]); // not on a round second
    const limiter = new RateLimiterRedis({ storeClient: store, points: 2, duration: 60, keyPrefix: `window-${kind}` });
    assert.equal((await limiter.consume('k')).msBeforeNext, 60_000);
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '50000']);
    assert.deepEqual((await limiter.consume('k')).toJSON(),
      { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: false });
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '9999']);
    await assert.rejects(limiter.consume('k'), (res) => res instanceof RateLimiterRes && res.msBeforeNext === 1);
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '1']);
    assert.deepEqual((await limiter.consume('k')).toJSON(),
      { remainingPoints: 1, msBeforeNext: 60_000, consumedPoints: 1, isFirstInDuration: true });
  });

  test(`blockDuration: the consume that goes over blocks the key for blockDuration seconds (${kind})`, async () => {
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const { ours, theirs } = pair({ points: 2, duration: 1, blockDuration: 30 }, 'blockdur', K);
    for (let i = 0; i < 2; i++) {
      same(await outcome(ours.consume('ip')), await outcome(theirs.consume('ip')), `consume ${i}`);
    }
    const mine = await outcome(ours.consume('ip'));
    assert.deepEqual(mine, ['rejected', { remainingPoints: 0, msBeforeNext: 30_000, consumedPoints: 3, isFirstInDuration: false }]);
    same(mine, await outcome(theirs.consume('ip')), 'the consume that blocks');
    // Long after the window (5 s), the key is still blocked, with the time left.
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '5000']);
    const blocked = await outcome(ours.consume('ip'));
    assert.equal(blocked[0], 'rejected');
    assert.equal(blocked[1].msBeforeNext, 25_000);
    assert.deepEqual(await outcome(ours.get('ip')),
      ['resolved', { remainingPoints: 0, msBeforeNext: 25_000, consumedPoints: 3, isFirstInDuration: false }]);
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '25000']);
    assert.equal((await ours.consume('ip')).remainingPoints, 1);
  });

  test(`penalty takes points without refusing; block(key, s) refuses every consume for s (${kind})`, async () => {
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const { ours, theirs } = pair({ points: 5, duration: 10 }, 'penalty', K);
    same(await outcome(ours.penalty('p', 2)), await outcome(theirs.penalty('p', 2)), 'penalty on a fresh key');
    same(await outcome(ours.penalty('p', 3)), await outcome(theirs.penalty('p', 3)), 'penalty up to the points');
    // Over the points: rate-limiter-flexible counts past them (8); the module stops at the limit.
    assert.deepEqual(await outcome(ours.penalty('p', 3)),
      ['resolved', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 5, isFirstInDuration: false }]);
    assert.equal((await theirs.penalty('p', 3)).consumedPoints, 8);
    // A penalty that does not fit takes what is left.
    await ours.penalty('q', 4);
    assert.deepEqual((await ours.penalty('q', 3)).toJSON(),
      { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 5, isFirstInDuration: false });

    for (const key of ['fresh', 'used']) {
      if (key === 'used') {
        await ours.consume(key);
        await theirs.consume(key);
      }
      const mine = await outcome(ours.block(key, 60));
      assert.deepEqual(mine, ['resolved', { remainingPoints: 0, msBeforeNext: 60_000, consumedPoints: 6, isFirstInDuration: false }]);
      same(mine, await outcome(theirs.block(key, 60)), `block a ${key} key`);
      const refused = await outcome(ours.consume(key));
      assert.deepEqual(refused, ['rejected', { remainingPoints: 0, msBeforeNext: 60_000, consumedPoints: 6, isFirstInDuration: false }]);
      const theirRefusal = await outcome(theirs.consume(key));
      assert.equal(theirRefusal[0], 'rejected', `consume in a block of a ${key} key`);
    }
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '60000']);
    assert.equal((await ours.consume('fresh')).isFirstInDuration, true);
  });

  test(`a store error rejects with an Error, or goes to insuranceLimiter (${kind})`, async () => {
    // A key of another type makes the module answer WRONGTYPE: a store error, not a refusal.
    await client.set(`ours-err-${kind}:k`, 'x');
    const plain = new RateLimiterRedis({ storeClient: store, points: 2, duration: 1, keyPrefix: `ours-err-${kind}` });
    const [how, message] = await outcome(plain.consume('k'));
    assert.equal(how, 'error');
    assert.match(message, /WRONGTYPE/);
    const insured = new RateLimiterRedis({
      storeClient: store, points: 2, duration: 1, keyPrefix: `ours-err-${kind}`,
      insuranceLimiter: new RLF.RateLimiterMemory({ points: 1, duration: 1 }),
    });
    assert.deepEqual((await insured.consume('k')).toJSON().remainingPoints, 0);
    await assert.rejects(insured.consume('k'), (res) => res instanceof RLF.RateLimiterRes);
  });

  test(`reward gives points back with RL.REFUND (${kind})`, async () => {
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const { ours, theirs } = pair({ points: 5, duration: 10 }, 'reward', K);
    for (let i = 0; i < 3; i++) {
      await ours.consume('r');
      await theirs.consume('r');
    }
    const mine = await outcome(ours.reward('r', 2));
    assert.deepEqual(mine, ['resolved', { remainingPoints: 4, msBeforeNext: 10_000, consumedPoints: 1, isFirstInDuration: false }]);
    same(mine, await outcome(theirs.reward('r', 2)), 'reward');
    assert.equal((await ours.consume('r')).remainingPoints, 3);
  });

  test(`execEvenly: admitted consumes are spread over the time left in the window (${kind})`, async () => {
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const { ours, theirs } = pair({ points: 3, duration: 2, execEvenly: true }, 'evenly', K);
    // The first of a window at once; then ceil(ms left / (points left + 2)): 2000 / 3 = 667 ms,
    // then 2000 / 2 = 1000 ms (our clock is frozen), msBeforeNext less the wait. (The key lives
    // 2 s of real time from each write: long enough for the waits.)
    const expected = [
      [0, { remainingPoints: 2, msBeforeNext: 2000, consumedPoints: 1, isFirstInDuration: true }],
      [667, { remainingPoints: 1, msBeforeNext: 1333, consumedPoints: 2, isFirstInDuration: false }],
      [1000, { remainingPoints: 0, msBeforeNext: 1000, consumedPoints: 3, isFirstInDuration: false }],
    ];
    for (const [wait, fields] of expected) {
      const started = performance.now();
      const mine = await outcome(ours.consume('e'));
      const waited = performance.now() - started;
      assert.deepEqual(mine, ['resolved', fields]);
      assert.ok(waited >= wait - 2 && waited < wait + 1000, `waited ${waited} ms for ${wait}`);
    }
    // Theirs, on a real clock, the same fields (msBeforeNext within the time the test took).
    const theirFields = [];
    for (let i = 0; i < 3; i++) theirFields.push(await outcome(theirs.consume('e')));
    assert.deepEqual(theirFields.map(([kind, f]) => [kind, f.remainingPoints, f.consumedPoints, f.isFirstInDuration]),
      expected.map(([, f]) => ['resolved', f.remainingPoints, f.consumedPoints, f.isFirstInDuration]));
  });

  test(`inMemoryBlockOnConsumed: a key over it is refused in the process, without Redis (${kind})`, async () => {
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const { ours, theirs } = pair({ points: 2, duration: 60, inMemoryBlockOnConsumed: 3, inMemoryBlockDuration: 10 }, 'inmem', K);
    for (let i = 0; i < 2; i++) same(await outcome(ours.consume('m')), await outcome(theirs.consume('m')), `consume ${i}`);
    // The third reaches 3: refused, and blocked in memory for 10 s.
    const third = await outcome(ours.consume('m'));
    assert.deepEqual(third, ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 3, isFirstInDuration: false }]);
    same(third, await outcome(theirs.consume('m')), 'the consume that blocks in memory');
    // The next is refused by the process: RateLimiterRes(0, time left), no command sent.
    const before = await calls(client, 'RL.TOKENBUCKET');
    const [kind, res] = await outcome(ours.consume('m'));
    assert.equal(await calls(client, 'RL.TOKENBUCKET'), before);
    assert.equal(kind, 'rejected');
    assert.deepEqual({ ...res, msBeforeNext: 0 }, { remainingPoints: 0, msBeforeNext: 0, consumedPoints: 0, isFirstInDuration: false });
    assert.ok(res.msBeforeNext > 9_000 && res.msBeforeNext <= 10_000, `${res.msBeforeNext}`);
    same(['rejected', { ...res, msBeforeNext: 10_000 }], await outcome(theirs.consume('m')), 'refused in memory', 2000);
    // delete() forgets the block too.
    assert.equal(await ours.delete('m'), true);
    assert.equal((await ours.consume('m')).consumedPoints, 1);
    assert.throws(() => new RateLimiterRedis({ storeClient: store, points: 5, inMemoryBlockOnConsumed: 4 }),
      /inMemoryBlockOnConsumed option must be greater or equal "points" option/);
  });
}

test('options rate-limiter-flexible has and the module cannot honour are refused', () => {
  for (const option of ['blockOnConsumed']) {
    assert.throws(() => new RateLimiterRedis({ storeClient: client, points: 5, [option]: 10 }),
      new RegExp(`${option} is not supported`));
  }
  assert.throws(() => new RateLimiterRedis({ points: 5 }), /storeClient is not set/);
  assert.throws(() => new RateLimiterRedis({ storeClient: client, points: 1.5 }), /points must be an integer/);
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
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const prefixed = new Redis({ host: '127.0.0.1', port: redis.port, keyPrefix: 'app:' });
  try {
    for (const backend of ['module', 'script']) {
      const limiter = new RateLimiterRedis({ storeClient: prefixed, points: 3, duration: 10, keyPrefix: `kp-${backend}`, backend, logger: quiet });
      assert.deepEqual((await limiter.consume('u', 2)).toJSON(),
        { remainingPoints: 1, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: true });
      // The key in Redis is ioredis's prefix, then the class's key; none without it.
      assert.equal(await client.exists(`app:kp-${backend}:u`), 1, backend);
      assert.equal(await client.exists(`kp-${backend}:u`), 0, backend);
      assert.equal((await limiter.get('u')).consumedPoints, 2);
      // delete (ioredis's DEL, which ioredis prefixes) finds the same key.
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

test('points 0 admits nothing: every consume is refused, without a round trip', async () => {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const { ours, theirs } = pair({ points: 0, duration: 10 }, 'zero');
  const before = await calls(client, 'RL.TOKENBUCKET');
  for (const cost of [1, 3]) {
    const mine = await outcome(ours.consume('z', cost));
    assert.deepEqual(mine, ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: cost, isFirstInDuration: false }]);
    // (There a refusal that starts a window says isFirstInDuration; ours, stored nowhere, never.)
    const their = await outcome(theirs.consume(`z${cost}`, cost));
    same(mine, ['rejected', { ...their[1], isFirstInDuration: false }], `consume ${cost} of 0 points`);
  }
  // Nothing stored: get says null, penalty and reward change nothing, block refuses no more.
  assert.equal(await ours.get('z'), null);
  assert.deepEqual((await ours.penalty('z', 2)).toJSON(), { remainingPoints: 0, msBeforeNext: 0, consumedPoints: 0, isFirstInDuration: false });
  assert.deepEqual((await ours.reward('z', 2)).toJSON(), { remainingPoints: 0, msBeforeNext: 0, consumedPoints: 0, isFirstInDuration: false });
  assert.deepEqual((await ours.block('z', 5)).toJSON(), { remainingPoints: 0, msBeforeNext: 5000, consumedPoints: 1, isFirstInDuration: false });
  assert.equal(await calls(client, 'RL.TOKENBUCKET'), before);
  // A consume of nothing takes nothing, and passes.
  assert.deepEqual((await ours.consume('z', 0)).toJSON(), { remainingPoints: 0, msBeforeNext: 0, consumedPoints: 0, isFirstInDuration: false });
  assert.throws(() => new RateLimiterRedis({ storeClient: client, points: -1 }), /^Error: points must be an integer from 0 to 10\^12$/);
});

test('a cost above points uses the window up: refused to its end, or blocked for blockDuration', async () => {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  // (There the consume that starts a window says isFirstInDuration, refused or not; ours never
  // does for a refusal. And there each refused consume adds to the count: the second
  // refusal's consumedPoints is 4 there, 3 here, the module counting no refusal.)
  const firstOfTheirs = (o) => ['rejected', { ...o[1], isFirstInDuration: false }];
  const { ours, theirs } = pair({ points: 2, duration: 10 }, 'over');
  const mine = await outcome(ours.consume('fresh', 3));
  assert.deepEqual(mine, ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 3, isFirstInDuration: false }]);
  same(mine, firstOfTheirs(await outcome(theirs.consume('fresh', 3))), 'a cost above points on a fresh key');
  const next = await outcome(ours.consume('fresh'));
  assert.deepEqual(next, ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 3, isFirstInDuration: false }]);
  const theirNext = await outcome(theirs.consume('fresh'));
  same(next, ['rejected', { ...theirNext[1], consumedPoints: 3 }], 'the next consume, in the used window');
  // A key that has taken a point: the point left is taken too.
  same(await outcome(ours.consume('used')), await outcome(theirs.consume('used')), 'a first point');
  const over = await outcome(ours.consume('used', 3));
  assert.deepEqual(over, ['rejected', { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 4, isFirstInDuration: false }]);
  same(over, await outcome(theirs.consume('used', 3)), 'a cost above points on a key that has taken some');
  assert.deepEqual((await ours.get('used')).toJSON(), { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: false });
  // The window ends: every point is back.
  await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '10000']);
  assert.equal((await ours.consume('fresh')).remainingPoints, 1);

  // With blockDuration: blocked, as there; once the block is over the key is fresh again.
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const blocking = pair({ points: 2, duration: 10, blockDuration: 30 }, 'overblock');
  const blocked = await outcome(blocking.ours.consume('b', 3));
  assert.deepEqual(blocked, ['rejected', { remainingPoints: 0, msBeforeNext: 30_000, consumedPoints: 3, isFirstInDuration: false }]);
  same(blocked, firstOfTheirs(await outcome(blocking.theirs.consume('b', 3))), 'a cost above points with blockDuration');
  await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '29999']);
  assert.equal((await refusal(blocking.ours.consume('b'))).msBeforeNext, 1);
  await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '1']);
  assert.deepEqual((await blocking.ours.consume('b')).toJSON(), { remainingPoints: 1, msBeforeNext: 10_000, consumedPoints: 1, isFirstInDuration: true });

  // With inMemoryBlockOnConsumed: blocked in the process until the window ends.
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const clock = { ms: 0 };
  const inMemory = new RateLimiterRedis({
    storeClient: client, points: 1, duration: 5, inMemoryBlockOnConsumed: 1, keyPrefix: 'ours-overmem', now: () => clock.ms,
  });
  assert.equal((await refusal(inMemory.consume('m', 2))).msBeforeNext, 5000);
  const before = await calls(client, 'RL.TOKENBUCKET');
  clock.ms = 4999;
  assert.equal((await refusal(inMemory.consume('m'))).msBeforeNext, 1);
  assert.equal(await calls(client, 'RL.TOKENBUCKET'), before, 'refused in the process');

  // duration 0: the window never ends.
  const never = new RateLimiterRedis({ storeClient: client, points: 2, duration: 0, keyPrefix: 'ours-overnever' });
  assert.deepEqual((await refusal(never.consume('n', 3))).toJSON(), { remainingPoints: 0, msBeforeNext: -1, consumedPoints: 3, isFirstInDuration: false });
});

test('never: block(key, 0) and duration 0 say msBeforeNext -1, in get and in refusals', async () => {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const { ours, theirs } = pair({ points: 1, duration: 1 }, 'forever');
  same(await outcome(ours.block('k', 0)), await outcome(theirs.block('k', 0)), 'block(key, 0)');
  // A year later, still blocked, for ever.
  await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', `${365 * 86_400_000}`]);
  const got = await outcome(ours.get('k'));
  assert.deepEqual(got, ['resolved', { remainingPoints: 0, msBeforeNext: -1, consumedPoints: 2, isFirstInDuration: false }]);
  same(got, await outcome(theirs.get('k')), 'get in a block for ever');
  const refused = await outcome(ours.consume('k'));
  assert.deepEqual(refused, ['rejected', { remainingPoints: 0, msBeforeNext: -1, consumedPoints: 2, isFirstInDuration: false }]);
  // (There the refused point is counted, 3, and its script gives the key, which had no expiry,
  // the window's: msBeforeNext 1000, and the block for ever ends a second later. Not here.)
  const theirRefusal = await outcome(theirs.consume('k'));
  assert.deepEqual([theirRefusal[0], theirRefusal[1].consumedPoints], ['rejected', 3]);

  const never = pair({ points: 2, duration: 0 }, 'never');
  for (let i = 0; i < 2; i++) same(await outcome(never.ours.consume('n')), await outcome(never.theirs.consume('n')), `consume ${i}`);
  const full = await outcome(never.ours.consume('n'));
  assert.deepEqual(full, ['rejected', { remainingPoints: 0, msBeforeNext: -1, consumedPoints: 3, isFirstInDuration: false }]);
  same(full, await outcome(never.theirs.consume('n')), 'a consume over the points of a window that never ends');
});

test('options.customDuration is the length of the window the call starts (0: never)', async () => {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const { ours, theirs } = pair({ points: 2, duration: 5 }, 'custom');
  for (const [key, customDuration, ms] of [['one', 1, 1000], ['half', 0.5, 500], ['never', 0, -1]]) {
    const mine = await outcome(ours.consume(key, 1, { customDuration }));
    assert.deepEqual(mine, ['resolved', { remainingPoints: 1, msBeforeNext: ms, consumedPoints: 1, isFirstInDuration: true }], key);
    // (There fractions of a second are dropped, as for duration: 0.5 is no expiry at all.)
    if (key !== 'half') same(mine, await outcome(theirs.consume(key, 1, { customDuration })), `customDuration ${customDuration}`);
  }
  // The window is that long: its points come back a second after it began.
  await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '999']);
  assert.equal((await refusal(ours.consume('one', 2, { customDuration: 1 }))).msBeforeNext, 1);
  await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '1']);
  assert.equal((await ours.consume('one', 2, { customDuration: 1 })).remainingPoints, 0);
  // penalty takes it too (rate-limiter-flexible's ExpressBruteFlexible does).
  assert.deepEqual((await ours.penalty('pen', 1, { customDuration: 3 })).toJSON(),
    { remainingPoints: 1, msBeforeNext: 3000, consumedPoints: 1, isFirstInDuration: true });
  // The insurance limiter gets the options as they were given.
  await client.set('ours-custom-broken:k', 'x');
  const insured = new RateLimiterRedis({
    storeClient: client, points: 1, duration: 2, keyPrefix: 'ours-custom-broken',
    insuranceLimiter: new RateLimiterRedis({ storeClient: client, points: 2, duration: 3, keyPrefix: 'ours-custom-insurance' }),
  });
  assert.deepEqual((await insured.consume('k', 1, { customDuration: 1 })).toJSON(),
    { remainingPoints: 1, msBeforeNext: 1000, consumedPoints: 1, isFirstInDuration: true });
  await assert.rejects(ours.consume('bad', 1, { customDuration: -1 }), /^Error: options\.customDuration must be a non-negative number of seconds$/);
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
    const limiter = new RateLimiterRedis({ storeClient, points: 2, duration: 1, rejectIfRedisNotReady: true });
    for (const call of [() => limiter.consume('k'), () => limiter.get('k'), () => limiter.reward('k'), () => limiter.block('k', 1)]) {
      await assert.rejects(call(), /^Error: Redis connection is not ready$/, what);
    }
    assert.equal(sent, 0, what);
  }
  // A closed node-redis client, really.
  const closed = await connect(redis);
  await closed.quit();
  const limiter = new RateLimiterRedis({ storeClient: closed, points: 2, duration: 1, rejectIfRedisNotReady: true });
  await assert.rejects(limiter.consume('k'), /^Error: Redis connection is not ready$/);
  // ioredis says it with `status` ('ready' once connected): a stand-in, and a client closed.
  const standIn = new RateLimiterRedis({ storeClient: { status: 'closed' }, points: 2, duration: 1, rejectIfRedisNotReady: true });
  await assert.rejects(standIn.consume('k'), /^Error: Redis connection is not ready$/);
  const ioClosed = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
  const ioLimiter = new RateLimiterRedis({ storeClient: ioClosed, points: 2, duration: 1, rejectIfRedisNotReady: true, logger: quiet });
  await assert.rejects(ioLimiter.consume('k'), /^Error: Redis connection is not ready$/);
  // Ready: sent.
  for (const [kind, store] of KINDS) {
    const ready = new RateLimiterRedis({ storeClient: store, points: 2, duration: 1, rejectIfRedisNotReady: true, keyPrefix: `ours-ready-${kind}` });
    assert.equal((await ready.consume('k')).remainingPoints, 1, kind);
  }
});

test('a number key without keyPrefix is sent as a string (getKey returns one, as declared)', async () => {
  // Found by the type check (tsc -p .): getKey(7) with keyPrefix '' returned the number 7, which
  // node-redis refuses as a command word, so every call with such a key failed.
  const limiter = new RateLimiterRedis({ storeClient: client, points: 2, duration: 60, keyPrefix: '' });
  assert.equal(limiter.getKey(7), '7');
  assert.equal((await limiter.consume(7)).consumedPoints, 1);
  assert.equal((await limiter.get(7)).consumedPoints, 1);
  assert.equal(await limiter.delete(7), true);
});
