// The denial memory against a real server with the debug clock frozen, the memory's clock
// injected and moved in step: it refuses locally until exactly the denial's retry_after (not a
// millisecond more, however long the answer took to come back), and never refuses a request
// that runs under other parameters than the denial it remembers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimit, RateLimiterRedis, parseReply } from '../index.js';
import { PATIENT, calls, clocks, endWindow, memoryLogger, refusal, serverForFile, ttlWithin } from './helpers.js';

const { client } = await serverForFile();

/**
 * The real client, each answer arriving `ms` later on the package's clock than the request
 * left (the server, its clock frozen, decided at the instant the request was sent).
 */
const slowAnswers = (clock, ms) => ({
  async sendCommand(args) {
    const reply = await client.sendCommand(args);
    // (Not the backend's question, COMMAND INFO RL.GCRA, asked once before the first command.)
    if (args[0] !== 'COMMAND') clock.ms += ms;
    return reply;
  },
});

test('the memory counts from when the request was sent, not from when its answer came', async () => {
  const clock = await clocks(client);
  await client.sendCommand(['RL.GCRA', 'rl:rtt:ivy', '1', '1', '60000']); // the burst of 1, taken
  const limiter = new RateLimit({
    ...PATIENT,
    client: slowAnswers(clock, 7),
    limit: { algorithm: 'gcra', burst: 1, rate: 1, period: '1m' },
    prefix: 'rl:rtt:',
    now: () => clock.ms,
    logger: memoryLogger(),
  });
  const denied = await limiter.check('ivy');
  assert.deepEqual([denied.allowed, denied.retryAfterMs, denied.local], [false, 60_000, false]);
  assert.equal(clock.ms, 1_007, 'the answer came 7 ms after the request left');
  const calls0 = await calls(client, 'RL.GCRA');
  // The server's answer holds from the request's instant (1000): 1 ms before 61000 it is
  // still refused locally, with 1 ms to go.
  await clock.at(60_000 - 1);
  const local = await limiter.check('ivy');
  assert.deepEqual([local.allowed, local.retryAfterMs, local.local], [false, 1, true]);
  assert.equal(await calls(client, 'RL.GCRA'), calls0);
  // At 61000 the server admits: the memory has let go, and Redis is asked.
  await clock.at(60_000);
  const retried = await limiter.check('ivy');
  assert.deepEqual([retried.allowed, retried.local], [true, false], 'admitted at retry_after, not refused from memory');
  assert.equal(await calls(client, 'RL.GCRA'), calls0 + 1);
});

test('a policy changed on the server is not refused from a denial remembered under its old rules', async () => {
  const clock = await clocks(client);
  await client.sendCommand(['RL.POLICY.SET', 'grow', 'GCRA', '3', '1', '3m']);
  const limiter = new RateLimit({
    ...PATIENT,
    client, limit: { policy: 'grow' }, prefix: 'rl:grow:', now: () => clock.ms, logger: memoryLogger(),
  });
  for (const r of [2, 1, 0]) assert.equal((await limiter.check('jo')).remaining, r);
  const denied = await limiter.check('jo');
  assert.deepEqual([denied.allowed, denied.retryAfterMs], [false, 180_000]);
  // The operator raises the burst to 5: the key has taken 3 of 5, so the server admits now.
  await client.sendCommand(['RL.POLICY.SET', 'grow', 'GCRA', '5', '1', '3m']);
  const direct = parseReply(await client.sendCommand(['RL.LIMIT', 'rl:grow:jo', 'grow', 'DRYRUN']), 'rule');
  assert.deepEqual([direct.allowed, direct.remaining], [true, 1]);
  const calls0 = await calls(client, 'RL.LIMIT');
  const next = await limiter.check('jo');
  assert.deepEqual([next.allowed, next.remaining, next.local, next.limit], [true, 1, false, 5],
    'not refused by the denial remembered under burst 3');
  // Asked: the decision, then the DRYRUN that finds when `remaining` grows (RateLimit's t).
  assert.equal(await calls(client, 'RL.LIMIT'), calls0 + 2);
  assert.equal(limiter.stats.deniedLocally, 0);
});

test("RateLimiterRedis's in-memory block follows the injected clock, from when the consume was sent", async () => {
  const clock = await clocks(client);
  const options = { points: 2, duration: 60, keyPrefix: 'inmem-clock', inMemoryBlockOnConsumed: 3, logger: null };
  const since = performance.now();
  await new RateLimiterRedis({ storeClient: client, ...options }).consume('kim', 2);
  const limiter = new RateLimiterRedis({ storeClient: slowAnswers(clock, 7), now: () => clock.ms, ...options });
  // Refused, the window's time left (the key's TTL, on the server's clock: RL.COUNTER): blocked
  // in memory until then, counted from 1000, when the consume was sent, not from its answer.
  const left = (await refusal(limiter.consume('kim'))).msBeforeNext;
  ttlWithin(left, 60_000, since, 'the window\'s time left');
  assert.equal(clock.ms, 1_007);
  const calls0 = await calls(client, 'RL.COUNTER');
  clock.ms = 1_000 + left - 1;
  assert.equal((await refusal(limiter.consume('kim'))).msBeforeNext, 1);
  assert.equal(await calls(client, 'RL.COUNTER'), calls0, 'refused in memory');
  // The key expires (made to, then seen gone); at the block's end the consume is sent, a new window.
  await endWindow(client, 'inmem-clock:kim');
  clock.ms = 1_000 + left;
  assert.deepEqual((await limiter.consume('kim')).toJSON(),
    { remainingPoints: 1, msBeforeNext: 60_000, consumedPoints: 1, isFirstInDuration: true });
  assert.equal(await calls(client, 'RL.COUNTER'), calls0 + 1);
});
