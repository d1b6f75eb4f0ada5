// Local budgets across real processes (child_process.fork, local-budget-worker.js) on one key,
// for the algorithms local-budget.test.js does not cover that way: token bucket, leaky bucket,
// sliding window, sliding log and warm-up. The module's debug clock is held still (nothing
// refills, leaks or slides), and the hold is long (the workers' clocks are real): what the
// module counts as taken is exactly what the processes admitted plus what they hold, and once
// every process closed (gave back what it held), exactly what they admitted.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { PACKAGE_TEST, T0_MS, clocks, serverForFile } from './helpers.js';
import { budgetWorker } from './local-budget-worker.js';

const { redis, client } = await serverForFile();

const inspect = async (key) => {
  const r = await client.sendCommand(['RL.INSPECT', key]);
  return r instanceof Map ? Object.fromEntries(r) : r;
};

const PROCESSES = 4;
const T0_US = T0_MS * 1000;
const K = 16;

const sum = (rs, f) => rs.reduce((a, r) => a + f(r), 0);

/**
 * 4 processes with `localBudget: 16` on one key of `limit` (which admits `max` at once): a first
 * round of 40 requests each, 8 at a time, under the limit (every refill grants 16: each process
 * refills 3 times and holds 48 - 40 = 8), then a second of 60 each, past it; `taken(state)` reads the units the module counts as taken from
 * RL.INSPECT. Checked after each round and after every process closed.
 */
async function processes(limit, max, taken, key) {
  const workers = await Promise.all(
    Array.from({ length: PROCESSES }, () => budgetWorker(redis.url, limit, K, { prefix: 'rl:lbp:', hold: '1h' })),
  );
  try {
    const rounds = [];
    for (const [n, concurrency] of [[40, 8], [60, 6]]) {
      const ran = await Promise.all(workers.map((w) => w.ask({ op: 'run', key, n, concurrency })));
      const admitted = sum(ran, (r) => r.admitted);
      const held = sum(ran, (r) => r.stats.held);
      assert.equal(sum(ran, (r) => r.failed), 0);
      assert.ok(held <= PROCESSES * K, `held ${held}`);
      const state = await inspect(`rl:lbp:${key}`);
      assert.equal(taken(state), admitted + held, `round of ${n}: taken - admitted = held (${held})`);
      assert.equal(state.remaining, max - admitted - held);
      rounds.push({ admitted, held, denied: sum(ran, (r) => r.denied) });
    }
    // Under the limit, every process refilled 3 times by 16: 8 held each.
    assert.deepEqual([rounds[0].admitted, rounds[0].held, rounds[0].denied], [160, 32, 0]);
    // Past it: refused once the key had nothing left; never more than the limit admitted.
    assert.ok(rounds[1].denied > 0, 'the second round reaches the limit');
    assert.ok(rounds[1].admitted <= max && rounds[1].admitted >= max - PROCESSES * K, `admitted ${rounds[1].admitted}`);
    const closed = await Promise.all(workers.map((w) => w.ask({ op: 'close' })));
    assert.equal(sum(closed, (r) => r.refunded), rounds[1].held, 'close gave back what was held');
    const admitted = sum(closed, (r) => r.admitted);
    const state = await inspect(`rl:lbp:${key}`);
    assert.equal(taken(state), admitted, 'after close: the module counts what was admitted, exactly');
    assert.equal(state.remaining, max - admitted);
  } finally {
    for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    await Promise.all(workers.map((w) => (w.child.exitCode === null && w.child.signalCode === null ? once(w.child, 'exit') : undefined)));
  }
}

test('4 processes on one token bucket: the tokens taken are what was admitted and held', { skip: PACKAGE_TEST }, async () => {
  await clocks(client);
  const limit = { algorithm: 'tokenbucket', capacity: 300, refillAmount: 1, refillPeriod: '1h' };
  await processes(limit, 300, (s) => s.capacity - s.tokens, 'tb');
});

test('4 processes on one leaky bucket: the units queued are what was admitted and held', { skip: PACKAGE_TEST }, async () => {
  await clocks(client);
  const limit = { algorithm: 'leakybucket', capacity: 300, leakAmount: 1, leakPeriod: '1h' };
  await processes(limit, 300, (s) => s.queued, 'lk');
});

test("4 processes on one sliding window: the window's count is what was admitted and held", { skip: PACKAGE_TEST }, async () => {
  await clocks(client);
  const limit = { algorithm: 'slidingwindow', limit: 300, window: '1h' };
  await processes(limit, 300, (s) => (assert.equal(s.previous, 0), s.current), 'sw');
});

test('4 processes on one sliding log: the units in the log are what was admitted and held', { skip: PACKAGE_TEST }, async () => {
  await clocks(client);
  const limit = { algorithm: 'slidinglog', limit: 300, window: '1h' };
  await processes(limit, 300, (s) => s.active, 'sl');
});

test("4 processes on one warm-up key: its schedule is a plain client's that took what was admitted and held", { skip: PACKAGE_TEST }, async () => {
  const clock = await clocks(client);
  // 10 a second after a 10 s warm-up: a fresh key admits one request of any cost (a refill of
  // 16 is one), paid for by the schedule; with the clock held still, nothing more until then.
  // The module keeps a schedule, not a count: the key's is compared with a reference key's, a
  // plain client's that took (COST) and gave back (RL.REFUND) the units the processes did.
  const limit = { algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s' };
  const params = ['10', '1s', '10s'];
  const workers = await Promise.all(
    Array.from({ length: PROCESSES }, () => budgetWorker(redis.url, limit, K, { prefix: 'rl:lbp:', hold: '1h' })),
  );
  try {
    // A plain client on the reference key: `cost` units taken (COST), then `refund` given back.
    const reference = async (cost, refund) => {
      if (cost > 0) await client.sendCommand(['RL.WARMUP', 'rl:lbp:wu-ref', ...params, 'COST', String(cost)]);
      if (refund > 0) await client.sendCommand(['RL.REFUND', 'rl:lbp:wu-ref', String(refund)]);
      return inspect('rl:lbp:wu-ref');
    };
    const rounds = [];
    // Two rounds, the second once the first's schedule is paid (the clock moved there). In each,
    // exactly one refill is granted (16 units: a process refills only once it holds none); the
    // other processes' are refused and remembered.
    for (const [round, n, concurrency] of [[0, 6, 3], [1, 14, 2]]) {
      if (round === 1) await clock.at(Math.ceil(((await inspect('rl:lbp:wu')).next_free_us - T0_US) / 1000));
      const ran = await Promise.all(workers.map((w) => w.ask({ op: 'run', key: 'wu', n, concurrency })));
      const admitted = sum(ran, (r) => r.admitted) - (rounds[0]?.admitted ?? 0);
      const held = sum(ran, (r) => r.stats.held);
      assert.equal(admitted + held - (rounds[0]?.held ?? 0), K, `round ${round}: one refill of 16`);
      assert.equal(sum(ran, (r) => r.failed), 0);
      rounds.push({ admitted, held, denied: sum(ran, (r) => r.denied) });
    }
    // Round 0: the process that won admitted 6 of its 16, 10 held; round 1: 14 admitted (the 10
    // held, then a refill of 16 at the new instant), 12 held.
    assert.deepEqual(rounds.map((r) => [r.admitted, r.held]), [[6, 10], [14, 12]]);
    assert.ok(rounds[1].denied > 0, 'the other processes were refused');
    // The schedule while they hold units: the reference's after taking 16 at T0 and 16 at the
    // second instant, nothing given back (taken - admitted = held).
    const second = await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '0']);
    await clocks(client);
    await reference(K, 0);
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', String(second)]);
    const ref = await reference(K, 0);
    const state = await inspect('rl:lbp:wu');
    assert.deepEqual([state.next_free_us, state.stored_micropermits], [ref.next_free_us, ref.stored_micropermits]);
    // Closed: the units held are given back, one stable interval (100 ms) of the schedule each.
    const closed = await Promise.all(workers.map((w) => w.ask({ op: 'close' })));
    assert.equal(sum(closed, (r) => r.refunded), 12);
    assert.equal(sum(closed, (r) => r.admitted), 20);
    const after = await inspect('rl:lbp:wu');
    assert.equal(after.next_free_us, state.next_free_us - 12 * 100_000);
    assert.equal(after.next_free_us, (await reference(0, 12)).next_free_us, 'after close: the schedule of what was admitted');
  } finally {
    for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    await Promise.all(workers.map((w) => (w.child.exitCode === null && w.child.signalCode === null ? once(w.child, 'exit') : undefined)));
  }
});
