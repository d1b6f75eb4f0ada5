// Local budgets (localBudget: k, hold) against a real server with the module, its debug clock
// frozen: several real processes (child_process.fork) on one key, their admissions added up and
// checked against the module's own state (RL.INSPECT) for GCRA, a fixed window and a policy; a
// process SIGKILLed while it holds units; one refill for many concurrent requests; the rule's
// timing (units spent until hold / 2 after their refill left, then given back, on the request
// path and by the timer; a fixed window's units lapsing at its end when it comes within the whole
// hold, else given back at hold / 2); the refund at close; the middleware. More processes, on
// every other algorithm: local-budget-processes.test.js; node:cluster workers:
// local-budget-cluster.test.js.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { RateLimit, rateLimitMiddleware } from '../index.js';
import { PATIENT, calls, clocks, helloApp, memoryLogger, serverForFile } from './helpers.js';
import { budgetWorker } from './local-budget-worker.js';

const { redis, client } = await serverForFile();

const inspect = async (key) => {
  const r = await client.sendCommand(['RL.INSPECT', key]);
  return r instanceof Map ? Object.fromEntries(r) : r;
};

/** A worker process with a local budget of `k` on `limit`; `ask(message)` resolves its reply. */
const worker = (limit, k, options) => budgetWorker(redis.url, limit, k, options);

/** `n` workers each checking `each` requests on `key`, `concurrency` at a time, then closed. */
async function crowd(limit, { n = 4, k, key, each, concurrency = 8 }) {
  const workers = await Promise.all(Array.from({ length: n }, () => worker(limit, k)));
  const ran = await Promise.all(workers.map((w) => w.ask({ op: 'run', key, n: each, concurrency })));
  const closed = await Promise.all(workers.map((w) => w.ask({ op: 'close' })));
  await Promise.all(workers.map((w) => (w.child.exitCode === null ? once(w.child, 'exit') : undefined)));
  const sum = (f) => closed.reduce((a, r) => a + f(r), 0);
  return {
    ran,
    admitted: sum((r) => r.admitted),
    failed: sum((r) => r.failed),
    calls: sum((r) => r.stats.calls),
    heldAtEnd: ran.reduce((a, r) => a + r.stats.held, 0),
    refunded: sum((r) => r.refunded),
    localAdmitted: sum((r) => r.stats.localAdmitted),
  };
}

test('4 processes on one GCRA key: admitted + what the module has left = the burst, exactly', async () => {
  await clocks(client);
  const limit = { algorithm: 'gcra', burst: 200, rate: 1, period: '1h' };
  const calls0 = await calls(client, 'RL.GCRA');
  const r = await crowd(limit, { k: 16, key: 'g4', each: 100 });
  assert.equal(r.failed, 0);
  const state = await inspect('rl:lb:g4');
  // Demand (400) is twice the burst: never more than the burst admitted; what was held unspent
  // when the key ran out (at most 16 a process) came back at close.
  assert.ok(r.admitted <= 200, `admitted ${r.admitted}`);
  assert.ok(r.admitted >= 200 - 4 * 16, `admitted ${r.admitted}`);
  assert.equal(r.refunded, r.heldAtEnd);
  assert.equal(r.admitted + state.remaining, 200, 'the module counts as taken exactly what was admitted');
  // Round trips: the module's count of RL.GCRA calls is the processes' refills.
  assert.equal(await calls(client, 'RL.GCRA'), calls0 + r.calls);
  assert.ok(r.calls <= Math.ceil(200 / 16) + 4 * 8 + 4, `${r.calls} refills`);
  // The rest waited, 8 at a time, for their process's one refill in flight.
  assert.ok(r.localAdmitted > 0, `${r.localAdmitted} of ${r.admitted} served locally`);
});

test('4 processes on one fixed window: the window\'s count is what was admitted', async () => {
  await clocks(client);
  const limit = { algorithm: 'fixedwindow', limit: 150, window: '1h' };
  const r = await crowd(limit, { k: 10, key: 'fw4', each: 80, concurrency: 5 });
  const state = await inspect('rl:lb:fw4');
  assert.ok(r.admitted <= 150 && r.admitted >= 150 - 4 * 10, `admitted ${r.admitted}`);
  assert.equal(state.count, r.admitted);
  assert.equal(state.remaining, 150 - r.admitted);
});

test('4 processes on one policy: every rule counts what was admitted', async () => {
  await clocks(client);
  await client.sendCommand(['RL.POLICY.SET', 'lbp', 'GCRA', '100', '1', '1h', 'FIXEDWINDOW', '120', '1h']);
  const r = await crowd({ policy: 'lbp' }, { k: 8, key: 'p4', each: 50, concurrency: 4 });
  const state = await inspect('rl:lb:p4');
  const rules = state.rules.map((x) => (x instanceof Map ? Object.fromEntries(x) : x));
  assert.ok(r.admitted <= 100 && r.admitted >= 100 - 4 * 8, `admitted ${r.admitted}`);
  assert.equal(rules[0].remaining, 100 - r.admitted, 'GCRA rule');
  assert.equal(rules[1].count, r.admitted, 'fixed window rule');
});

test('a process SIGKILLed while holding units: lost to the limit until the GCRA schedule pays them off', async () => {
  const clock = await clocks(client);
  // Burst 20, 10 per 10 s: one unit each T = 1 s.
  const limit = { algorithm: 'gcra', burst: 20, rate: 10, period: '10s' };
  const w = await worker(limit, 10);
  const ran = await w.ask({ op: 'run', key: 'kill', n: 1, concurrency: 1 });
  assert.deepEqual([ran.admitted, ran.stats.held], [1, 9]);
  w.child.kill('SIGKILL');
  await once(w.child, 'exit');
  // 10 taken (1 spent, 9 held): nobody gives the 9 back.
  assert.equal((await inspect('rl:lb:kill')).remaining, 10);
  // The schedule pays one unit back each T: all 10 after 10 × T = 10 s (k × T at most).
  await clock.at(9_000);
  assert.equal((await inspect('rl:lb:kill')).remaining, 19);
  await clock.at(10_000);
  const fresh = await inspect('rl:lb:kill');
  assert.ok(fresh === null || fresh.remaining === 20, 'fresh again');
});

test('no stampede: 50 concurrent requests on an empty budget cost one refill', async () => {
  await clocks(client);
  const limiter = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'gcra', burst: 1000, rate: 1, period: '1h' }, prefix: 'rl:lbs:', localBudget: 64,
  });
  const calls0 = await calls(client, 'RL.GCRA');
  const ds = await Promise.all(Array.from({ length: 50 }, () => limiter.check('herd')));
  assert.equal(await calls(client, 'RL.GCRA'), calls0 + 1);
  assert.ok(ds.every((d) => d.allowed && !d.local));
  // Served in arrival order: remaining falls by one each (held + the server's 936).
  assert.deepEqual(ds.map((d) => d.remaining), Array.from({ length: 50 }, (_, i) => 936 + 63 - i));
  assert.deepEqual([limiter.stats.refills, limiter.stats.held, limiter.stats.admitted], [1, 14, 50]);
  const next = await limiter.check('herd');
  assert.deepEqual([next.allowed, next.local, next.remaining], [true, true, 936 + 13]);
  assert.equal(await calls(client, 'RL.GCRA'), calls0 + 1);
  assert.equal(limiter.stats.localAdmitted, 1);
  // 100 concurrent with k = 8: ceil(100 / 8) refills, one after the other, nothing more.
  const small = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'gcra', burst: 1000, rate: 1, period: '1h' }, prefix: 'rl:lbs:', localBudget: 8,
  });
  await Promise.all(Array.from({ length: 100 }, () => small.check('herd8')));
  assert.equal(small.stats.refills, 13);
  assert.equal(small.stats.held, 4);
  await limiter.close();
  await small.close();
  assert.equal((await inspect('rl:lbs:herd')).remaining, 1000 - 51);
});

test('units are spent until hold / 2 after their refill left, then given back: on the request path (fake clock) and by the timer', async () => {
  const clock = await clocks(client);
  const limiter = new RateLimit({
    ...PATIENT,
    client,
    limit: { algorithm: 'gcra', burst: 100, rate: 1, period: '1h' },
    prefix: 'rl:lbh:',
    localBudget: 10,
    hold: '1s',
    now: () => clock.ms,
  });
  await limiter.check('h');
  await limiter.check('h');
  assert.equal(limiter.stats.held, 8);
  await clock.at(499);
  const refunds0 = await calls(client, 'RL.REFUND');
  assert.equal((await limiter.check('h')).local, true, 'still spendable at hold / 2 - 1 ms');
  assert.equal(await calls(client, 'RL.REFUND'), refunds0);
  assert.equal((await inspect('rl:lbh:h')).remaining, 100 - 10);
  await clock.at(500);
  // Taken at 0, due at hold / 2 = 500: the 7 left are given back, and 10 more taken.
  const d = await limiter.check('h');
  await limiter.flush(); // waits for the refund in flight (and gives back the 9 new ones)
  assert.equal(await calls(client, 'RL.REFUND'), refunds0 + 2);
  assert.equal(limiter.stats.refunded, 7 + 9);
  assert.deepEqual([d.allowed, d.local, d.remaining], [true, false, 9 + 100 - 3 - 10]);
  assert.equal((await inspect('rl:lbh:h')).remaining, 100 - 4);
  assert.equal(limiter.stats.refills, 2);

  // The timer, on the real clock (default `now`): a hold of 50 ms, due 25 ms after the refill
  // left, unref'd.
  const timed = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'gcra', burst: 100, rate: 1, period: '1h' }, prefix: 'rl:lbt:', localBudget: 10, hold: 50,
  });
  const sent = performance.now();
  await timed.check('t');
  assert.equal(timed.stats.held, 9);
  // Due at hold / 2 after the refill left (between `sent` and now), not at the whole hold.
  const leftAt = timed.budget.timerDue - 25;
  assert.ok(leftAt >= sent - 1e-6 && leftAt <= performance.now() + 1e-6, `due ${timed.budget.timerDue - sent} ms after sent`);
  assert.equal(timed.budget.timer.hasRef(), false, 'the timer does not keep the process alive');
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual([timed.stats.held, timed.stats.refunded], [0, 9]);
  assert.equal((await inspect('rl:lbt:t')).remaining, 99);
  assert.equal(timed.budget.entries.size, 0, 'an idle key is forgotten');
});

test('close gives back what is held; later checks are round trips', async () => {
  await clocks(client);
  const limiter = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'tokenbucket', capacity: 50, refillAmount: 1, refillPeriod: '1h' }, prefix: 'rl:lbc:', localBudget: 20,
  });
  await Promise.all([limiter.check('a'), limiter.check('b', 3)]);
  assert.equal(limiter.stats.held, 19 + 17);
  assert.equal(await limiter.close(), 36);
  assert.equal(limiter.stats.held, 0);
  assert.equal((await inspect('rl:lbc:a')).remaining, 49);
  assert.equal((await inspect('rl:lbc:b')).remaining, 47);
  const calls0 = await calls(client, 'RL.TOKENBUCKET');
  await limiter.check('a');
  await limiter.check('a');
  assert.equal(await calls(client, 'RL.TOKENBUCKET'), calls0 + 2);
});

test('a refill that grants nothing refuses, and is remembered until its retry time', async () => {
  const clock = await clocks(client);
  const limiter = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'gcra', burst: 5, rate: 1, period: '1m' }, prefix: 'rl:lbd:', localBudget: 4,
    now: () => clock.ms,
  });
  const ds = await Promise.all(Array.from({ length: 7 }, () => limiter.check('d')));
  assert.deepEqual(ds.map((d) => d.allowed), [true, true, true, true, true, false, false]);
  assert.equal(ds[6].retryAfterMs, 60_000);
  // 4, then 1 (of 4 asked), then none: 3 refills.
  assert.equal(limiter.stats.refills, 3);
  const calls0 = await calls(client, 'RL.GCRA');
  const local = await limiter.check('d');
  assert.deepEqual([local.allowed, local.local, local.retryAfterMs], [false, true, 60_000]);
  assert.equal(await calls(client, 'RL.GCRA'), calls0);
  await clock.at(60_000);
  const again = await limiter.check('d');
  assert.deepEqual([again.allowed, again.local], [true, false]);
});

test("a fixed window's held units lapse at its end when it comes within the hold, not given back into the next window", async () => {
  const clock = await clocks(client);
  // T0 is 20 s into a minute: the window ends in 40 s.
  const limiter = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'fixedwindow', limit: 10, window: '1m' }, prefix: 'rl:lbw:', localBudget: 5,
    hold: '1h', now: () => clock.ms,
  });
  await limiter.check('w');
  assert.equal(limiter.stats.held, 4);
  await clock.at(40_000);
  const refunds0 = await calls(client, 'RL.REFUND');
  const d = await limiter.check('w');
  assert.deepEqual([d.allowed, d.local, limiter.stats.lapsed, limiter.stats.refunded], [true, false, 4, 0]);
  assert.equal(await calls(client, 'RL.REFUND'), refunds0);
  assert.equal((await inspect('rl:lbw:w')).count, 5, 'the new window counts its own refill only');
  assert.equal(await limiter.close(), 4);
  assert.equal((await inspect('rl:lbw:w')).count, 1);

  // The end (40 s away) within the whole hold (60 s) but after hold / 2 (30 s): the units are
  // still spent at 30 s and up to the end, and lapse then.
  const clock2 = await clocks(client);
  const half = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'fixedwindow', limit: 10, window: '1m' }, prefix: 'rl:lbw2:', localBudget: 5,
    hold: '1m', now: () => clock2.ms,
  });
  await half.check('w');
  await clock2.at(30_000);
  assert.equal((await half.check('w')).local, true, 'past hold / 2, before the end');
  await clock2.at(39_999);
  assert.equal((await half.check('w')).local, true, 'the last ms of the window');
  const refunds1 = await calls(client, 'RL.REFUND');
  await clock2.at(40_000);
  const next = await half.check('w');
  assert.deepEqual([next.local, half.stats.lapsed, half.stats.refunded], [false, 2, 0]);
  assert.equal(await calls(client, 'RL.REFUND'), refunds1);
  assert.equal((await inspect('rl:lbw2:w')).count, 5);
  await half.close();
});

test("a fixed window whose end is past the hold: its units are given back at hold / 2, like any other", async () => {
  const clock = await clocks(client);
  // The window ends in 40 s; hold 30 s: due at 15 s, given back then (25 s before the end).
  const limiter = new RateLimit({
    ...PATIENT,
    client, limit: { algorithm: 'fixedwindow', limit: 10, window: '1m' }, prefix: 'rl:lbw3:', localBudget: 5,
    hold: '30s', now: () => clock.ms,
  });
  await limiter.check('w');
  await clock.at(14_999);
  const refunds0 = await calls(client, 'RL.REFUND');
  assert.equal((await limiter.check('w')).local, true, 'still spendable at hold / 2 - 1 ms');
  assert.equal((await inspect('rl:lbw3:w')).count, 5);
  await clock.at(15_000);
  // The 3 left are given back, and 5 more taken: 2 + 5 counted.
  const d = await limiter.check('w');
  await limiter.flush(); // waits for the refund in flight (and gives back the 4 new ones)
  assert.deepEqual([d.allowed, d.local, limiter.stats.lapsed, limiter.stats.refunded], [true, false, 0, 3 + 4]);
  assert.equal(await calls(client, 'RL.REFUND'), refunds0 + 2);
  assert.equal((await inspect('rl:lbw3:w')).count, 3, 'the window counts what was admitted');
});

test('a failed refill fails every waiter open or closed, with one warning', async () => {
  const logger = memoryLogger();
  const broken = { sendCommand: () => Promise.reject(new Error('down')) };
  const limiter = new RateLimit({
    ...PATIENT,
    client: broken, limit: { algorithm: 'gcra', burst: 5, rate: 1, period: '1m' }, localBudget: 4, failMode: 'closed', logger,
  });
  const ds = await Promise.all(Array.from({ length: 3 }, () => limiter.check('x')));
  assert.ok(ds.every((d) => d.failed && !d.allowed));
  assert.deepEqual([limiter.stats.failures, limiter.stats.failClosed, logger.lines.length], [1, 3, 1]);
});

test('options: refused on a concurrency limit, hold without localBudget, k out of range', () => {
  assert.throws(
    () => new RateLimit({ client, limit: { algorithm: 'concurrency', limit: 2, lease: '1m' }, localBudget: 4 }),
    /invalid localBudget: a concurrency limit/,
  );
  const gcra = { algorithm: 'gcra', burst: 5, rate: 1, period: '1m' };
  assert.throws(() => new RateLimit({ client, limit: gcra, hold: '1s' }), /invalid hold/);
  assert.throws(() => new RateLimit({ client, limit: gcra, localBudget: 0 }), /invalid localBudget/);
  assert.throws(() => new RateLimit({ client, limit: gcra, localBudget: 4, hold: '0s' }), /invalid hold/);
  // Default holds: a quarter of the period or window, 250 ms for a policy, at least 10 ms.
  const hold = (limit) => new RateLimit({ ...PATIENT, client, limit, localBudget: 4 }).localBudget.holdMs;
  assert.equal(hold(gcra), 15_000);
  assert.equal(hold({ algorithm: 'slidingwindow', limit: 5, window: '10s' }), 2_500);
  assert.equal(hold({ algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s' }), 250);
  assert.equal(hold({ algorithm: 'leakybucket', capacity: 5, leakAmount: 1, leakPeriod: 20 }), 10);
  assert.equal(hold({ policy: 'lbp' }), 250);
});

test('the middleware with a local budget: one round trip for k requests, the fields from the budget', async () => {
  await clocks(client);
  const mw = rateLimitMiddleware({
    ...PATIENT,
    client,
    limit: { algorithm: 'gcra', burst: 10, rate: 1, period: '1m' },
    prefix: 'rl:lbm:',
    localBudget: 5,
    key: (req) => String(req.headers['x-client-id']),
  });
  const app = await helloApp(mw);
  try {
    const calls0 = await calls(client, 'RL.GCRA');
    const rs = [];
    for (let i = 0; i < 6; i++) rs.push(await app.as('m'));
    assert.deepEqual(rs.map((r) => r.status), [200, 200, 200, 200, 200, 200]);
    assert.deepEqual(rs.map((r) => r.headers['x-ratelimit-remaining']), ['9', '8', '7', '6', '5', '4']);
    assert.equal(rs[0].headers['ratelimit-policy'], '"default";q=10;w=600');
    assert.equal(await calls(client, 'RL.GCRA'), calls0 + 2);
  } finally {
    await app.http.close();
    await mw.limiter.close();
  }
  assert.equal((await inspect('rl:lbm:m')).remaining, 4);
});

