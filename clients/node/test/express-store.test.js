// RedisModuleStore behind express-rate-limit itself (the pinned devDependency), in real Express
// apps over real HTTP, on a redis-server with the module: express-rate-limit's window (from the
// key's first hit, windowMs long, every hit counted, those over the limit too, in
// rate-limit-redis's own key: a plain integer string whose TTL is the window, on the server's
// clock, so the seconds left are checked between bounds of the real time measured, inWindow)
// with the exact fields of standardHeaders draft-6, draft-7 and draft-8 and the legacy ones;
// `limit` as a number and as a function, `handler`, `message`, `statusCode`,
// `requestPropertyName`, `keyGenerator`, skipFailedRequests and skipSuccessfulRequests (the
// decrement awaited as an event), passOnStoreError with Redis hung (the store's timeout) and
// stopped, two app instances on one Redis counting together, resetKey and getKey; one module
// call per request (INFO commandstats); and the store's own calls, checks and errors.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { RedisModuleStore } from '../express-rate-limit.js';
import { RedisModuleStore as MainEntryStore } from '../index.js';
import { DRAFT6, DRAFT7, LEGACY, app, assertEpochReset, fields, inWindow, watchDecrements } from './express-store-app.js';
import { PATIENT, calls, connect, endWindow, quiet, serverForFile, startRedis } from './helpers.js';

const { client } = await serverForFile();

/** A store on the file's server, patient (a busy machine is not a timeout), quiet. */
function store(options = {}) {
  return new RedisModuleStore({ client, timeout: PATIENT.timeout, setupTimeout: PATIENT.setupTimeout, logger: quiet, ...options });
}

test('express-rate-limit\'s window: every hit counted, exact draft-6 and legacy fields, one module call per request', async () => {
  const a = await app({ windowMs: 60_000, limit: 3, standardHeaders: 'draft-6', store: store() });
  try {
    const before = await calls(client, 'rl.counter');
    const seen = [];
    const since = performance.now();
    const from = Date.now();
    for (let i = 0; i < 5; i++) seen.push(inWindow(await a.as('w1'), 60_000, since));
    assert.equal(await calls(client, 'rl.counter') - before, 5, 'one RL.COUNTER per request, nothing else');
    assert.deepEqual(seen.map((r) => r.status), [200, 200, 200, 429, 429]);
    assert.deepEqual(seen.map((r) => fields(r, [...LEGACY, ...DRAFT6, 'retry-after'])), [2, 1, 0, 0, 0].map((remaining, i) => ({
      'x-ratelimit-limit': '3',
      'x-ratelimit-remaining': `${remaining}`,
      'ratelimit-policy': '3;w=60',
      'ratelimit-limit': '3',
      'ratelimit-remaining': `${remaining}`,
      'ratelimit-reset': '60',
      'retry-after': i >= 3 ? '60' : undefined,
    })));
    for (const r of seen) assertEpochReset(r, 60_000, from);
    assert.equal(seen[3].body, 'Too many requests, please try again later.');
    // The hits over the limit counted: the store's count is 5, as MemoryStore's would be; the key
    // is rate-limit-redis's, a string GET reads.
    const info = await a.limiter.getKey('w1');
    assert.equal(info?.totalHits, 5);
    assert.equal(await client.get('rl:erl:w1'), '5');
    // With 10 s left of the window (the key's TTL made so), the fields say 10 s; once the key has
    // expired, a new window starts.
    const left = performance.now();
    assert.equal(await client.pExpire('rl:erl:w1', 10_000), 1);
    let r = inWindow(await a.as('w1', '/info'), 10_000, left);
    assert.equal(r.status, 429);
    assert.equal(r.headers['ratelimit-reset'], '10');
    assert.equal(r.headers['retry-after'], '10');
    assertEpochReset(r, 10_000, r.before - Math.ceil(performance.now() - left));
    await endWindow(client, 'rl:erl:w1');
    r = await a.as('w1', '/info');
    assert.equal(r.status, 200);
    const body = JSON.parse(r.body);
    assert.deepEqual({ limit: body.limit, used: body.used, remaining: body.remaining, key: body.key },
      { limit: 3, used: 1, remaining: 2, key: 'w1' });
    const resetTime = Date.parse(body.resetTime);
    assert.ok(resetTime >= r.before + 60_000 && resetTime <= r.after + 60_000, 'resetTime: the window ends 60 s after this hit');
    assert.equal(r.headers['ratelimit-reset'], '60');
    // The key in Redis is the prefix's: rl:erl:w1.
    assert.equal(await client.exists('rl:erl:w1'), 1);
    assert.deepEqual(a.logger.lines, [], 'express-rate-limit found nothing to say of the store');
  } finally {
    await a.close();
  }
});

test('standardHeaders draft-7 and draft-8: the exact fields', async () => {
  const s7 = await app({ windowMs: 90_000, limit: 2, standardHeaders: 'draft-7', legacyHeaders: false, store: store() });
  const s8 = await app({ windowMs: 90_000, limit: 2, standardHeaders: 'draft-8', legacyHeaders: false, store: store({ prefix: 'rl:erl8:' }) });
  try {
    const r7 = [];
    const since7 = performance.now();
    for (let i = 0; i < 3; i++) r7.push(inWindow(await s7.as('d7'), 90_000, since7));
    assert.deepEqual(r7.map((r) => [r.status, fields(r, [...DRAFT7, 'retry-after', 'x-ratelimit-limit'])]), [
      [200, { 'ratelimit-policy': '2;w=90', ratelimit: 'limit=2, remaining=1, reset=90', 'retry-after': undefined, 'x-ratelimit-limit': undefined }],
      [200, { 'ratelimit-policy': '2;w=90', ratelimit: 'limit=2, remaining=0, reset=90', 'retry-after': undefined, 'x-ratelimit-limit': undefined }],
      [429, { 'ratelimit-policy': '2;w=90', ratelimit: 'limit=2, remaining=0, reset=90', 'retry-after': '90', 'x-ratelimit-limit': undefined }],
    ]);
    // draft-8's partition key: the first 12 hex digits of the key's SHA-256, in base64.
    const pk = Buffer.from(createHash('sha256').update('d8').digest('hex').slice(0, 12)).toString('base64');
    const r8 = [];
    const since8 = performance.now();
    for (let i = 0; i < 2; i++) r8.push(inWindow(await s8.as('d8'), 90_000, since8));
    // 45 s left of the window (the key's TTL made so).
    const left = performance.now();
    assert.equal(await client.pExpire('rl:erl8:d8', 45_000), 1);
    r8.push(inWindow(await s8.as('d8'), 45_000, left));
    assert.deepEqual(r8.map((r) => [r.status, fields(r, [...DRAFT7, 'retry-after'])]), [
      [200, { 'ratelimit-policy': `"2-in-1.5min"; q=2; w=90; pk=:${pk}:`, ratelimit: '"2-in-1.5min"; r=1; t=90', 'retry-after': undefined }],
      [200, { 'ratelimit-policy': `"2-in-1.5min"; q=2; w=90; pk=:${pk}:`, ratelimit: '"2-in-1.5min"; r=0; t=90', 'retry-after': undefined }],
      [429, { 'ratelimit-policy': `"2-in-1.5min"; q=2; w=90; pk=:${pk}:`, ratelimit: '"2-in-1.5min"; r=0; t=45', 'retry-after': '45' }],
    ]);
  } finally {
    await s7.close();
    await s8.close();
  }
});

test('limit as a function, handler, message, statusCode, requestPropertyName, keyGenerator', async () => {
  const plans = await app({
    windowMs: 60_000,
    limit: (req) => (req.get('X-Plan') === 'pro' ? 4 : 2),
    message: { error: 'slow down' },
    statusCode: 503,
    store: store({ prefix: 'rl:erlfn:' }),
  });
  const handled = await app({
    windowMs: 60_000,
    limit: 1,
    requestPropertyName: 'quota',
    keyGenerator: (req) => `user:${req.get('X-User')}`,
    handler: (req, res) => res.status(429).json({ over: true, used: Reflect.get(req, 'quota').used, key: Reflect.get(req, 'quota').key }),
    store: store({ prefix: 'rl:erlh:' }),
  });
  try {
    const free = [];
    for (let i = 0; i < 3; i++) free.push(await plans.as('free-1'));
    assert.deepEqual(free.map((r) => [r.status, r.headers['x-ratelimit-limit'], r.headers['x-ratelimit-remaining']]),
      [[200, '2', '1'], [200, '2', '0'], [503, '2', '0']]);
    assert.equal(free[2].body, '{"error":"slow down"}');
    assert.match(String(free[2].headers['content-type']), /^application\/json/);
    const pro = [];
    for (let i = 0; i < 5; i++) pro.push(await plans.as('pro-1', '/', { 'X-Plan': 'pro' }));
    assert.deepEqual(pro.map((r) => [r.status, r.headers['x-ratelimit-limit'], r.headers['x-ratelimit-remaining']]),
      [[200, '4', '3'], [200, '4', '2'], [200, '4', '1'], [200, '4', '0'], [503, '4', '0']]);
    // The same client counted under a bigger limit: its 3 hits are below 4.
    const upgraded = await plans.as('free-1', '/', { 'X-Plan': 'pro' });
    assert.deepEqual([upgraded.status, upgraded.headers['x-ratelimit-remaining']], [200, '0']);

    const first = await handled.as('x', '/info', { 'X-User': 'ann' });
    assert.equal(first.status, 200);
    assert.equal(JSON.parse(first.body).key, 'user:ann');
    const over = await handled.as('x', '/', { 'X-User': 'ann' });
    assert.deepEqual([over.status, JSON.parse(over.body)], [429, { over: true, used: 2, key: 'user:ann' }]);
    const other = await handled.as('x', '/', { 'X-User': 'bob' });
    assert.equal(other.status, 200);
    assert.equal(await client.exists('rl:erlh:user:ann'), 1);
  } finally {
    await plans.close();
    await handled.close();
  }
});

test('skipFailedRequests: a failed request, the 429s included, is taken back (BY -1 XX)', async () => {
  const s = store({ prefix: 'rl:erlsf:' });
  const decrements = watchDecrements(s);
  const a = await app({ windowMs: 60_000, limit: 2, skipFailedRequests: true, store: s });
  try {
    const counted = await calls(client, 'rl.counter');
    const statuses = [];
    let n = 0;
    for (const path of ['/fail', '/fail', '/', '/']) {
      const r = await a.as('sf', path);
      statuses.push([r.status, r.headers['x-ratelimit-remaining']]);
      if (r.status >= 400) await decrements.done(++n);
    }
    // Each /fail counted (remaining 1) then taken back; the two successes stay.
    assert.deepEqual(statuses, [[400, '1'], [400, '1'], [200, '1'], [200, '0']]);
    const refused = await a.as('sf');
    assert.deepEqual([refused.status, refused.headers['x-ratelimit-remaining']], [429, '0']);
    await decrements.done(++n); // the 429 is a failed request: taken back, as MemoryStore does
    assert.equal((await a.limiter.getKey('sf'))?.totalHits, 2);
    // Five hits, three decrements and getKey's read: one RL.COUNTER each.
    assert.equal(await calls(client, 'rl.counter') - counted, 9);
  } finally {
    await a.close();
  }
});

test('skipSuccessfulRequests: only failures count', async () => {
  const s = store({ prefix: 'rl:erlss:' });
  const decrements = watchDecrements(s);
  const a = await app({ windowMs: 60_000, limit: 2, skipSuccessfulRequests: true, store: s });
  try {
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      statuses.push((await a.as('ss')).status);
      await decrements.done(i + 1);
    }
    for (let i = 0; i < 3; i++) statuses.push((await a.as('ss', '/fail')).status);
    assert.deepEqual(statuses, [200, 200, 200, 400, 400, 429]);
    assert.equal((await a.limiter.getKey('ss'))?.totalHits, 3);
  } finally {
    await a.close();
  }
});

test('two app instances on one Redis count together; resetKey and getKey', async () => {
  const one = await app({ windowMs: 60_000, limit: 3, store: store({ prefix: 'rl:erlshared:' }) });
  const two = await app({ windowMs: 60_000, limit: 3, store: store({ prefix: 'rl:erlshared:' }) });
  try {
    const seen = [];
    for (const a of [one, two, one, two]) seen.push(await a.as('both'));
    assert.deepEqual(seen.map((r) => [r.status, r.headers['x-ratelimit-remaining']]), [[200, '2'], [200, '1'], [200, '0'], [429, '0']]);
    const info = await two.limiter.getKey('both');
    assert.equal(info?.totalHits, 4);
    assert.ok(info?.resetTime instanceof Date);
    await one.limiter.resetKey('both');
    assert.equal(await two.limiter.getKey('both'), undefined);
    const again = await two.as('both');
    assert.deepEqual([again.status, again.headers['x-ratelimit-remaining']], [200, '2']);
  } finally {
    await one.close();
    await two.close();
  }
});

test('passOnStoreError with Redis hung and stopped: passed (and logged) or refused with a 500', async () => {
  const gone = await startRedis();
  const c = await connect(gone);
  const open = store({ client: c, prefix: 'rl:erldown:', timeout: 5_000 });
  const closed = store({ client: c, prefix: 'rl:erldown:', timeout: 5_000 });
  const passing = await app({ windowMs: 60_000, limit: 1, passOnStoreError: true, store: open });
  const failing = await app({ windowMs: 60_000, limit: 1, store: closed });
  try {
    assert.equal((await passing.as('d')).status, 200);
    assert.equal(open.stats.backend, 'module');
    // A hang (SIGSTOP): the call rejects after the store's timeout, and passes.
    const hung = store({ client: c, prefix: 'rl:erldown:', timeout: 200 });
    const waiting = await app({ windowMs: 60_000, limit: 1, passOnStoreError: true, store: hung });
    try {
      assert.equal((await waiting.as('h')).status, 200);
      gone.pause();
      const r = await waiting.as('h');
      gone.resume();
      assert.deepEqual([r.status, r.headers['x-ratelimit-limit']], [200, undefined]);
      assert.ok(r.after - r.before >= 190, `answered after ${r.after - r.before} ms, before the timeout`);
      assert.deepEqual(waiting.logger.lines.map(([, m, e]) => [m, e?.message]),
        [['express-rate-limit: error from store, allowing request without rate-limiting.', 'no answer from Redis within 200 ms']]);
      assert.equal(hung.stats.failures, 1);
    } finally {
      if (gone.paused) gone.resume();
      await waiting.close();
    }
    await gone.stop();
    const passed = await passing.as('d');
    assert.deepEqual([passed.status, passed.body, passed.headers['x-ratelimit-limit']], [200, 'hello', undefined]);
    assert.equal(passing.logger.lines.length, 1);
    assert.equal(passing.logger.lines[0][1], 'express-rate-limit: error from store, allowing request without rate-limiting.');
    assert.ok(passing.logger.lines[0][2] instanceof Error);
    assert.equal(open.stats.failures, 1);
    const refused = await failing.as('d');
    assert.deepEqual([refused.status, refused.body], [500, 'The client is offline']);
    assert.equal(closed.stats.failures, 1);
  } finally {
    await passing.close();
    await failing.close();
    c.destroy();
  }
});

test('the store on its own: the calls, the window, and each error named', async () => {
  assert.equal(MainEntryStore, RedisModuleStore, 'one class, from the main entry and the subpath');
  const s = store({ prefix: 'rl:erlapi:' });
  assert.equal(s.localKeys, false);
  assert.equal(s.prefix, 'rl:erlapi:');
  await assert.rejects(s.increment('k'), { message: 'RedisModuleStore: init(options) was not called; pass the store to rateLimit({ store })' });
  for (const windowMs of [0, 1.5, -1, undefined, '60000', 315_360_000_001]) {
    assert.throws(() => s.init(/** @type {any} */ ({ windowMs, limit: 5 })), {
      name: 'TypeError',
      message: `invalid windowMs for RedisModuleStore: expected an integer number of milliseconds from 1 to 10 years; got ${String(windowMs)}`,
    });
    await assert.rejects(s.increment('k'), { name: 'TypeError' });
  }
  s.init({ windowMs: 10_000, limit: 5 });
  const t = Date.now();
  const first = await s.increment('k');
  assert.equal(first.totalHits, 1);
  assert.ok(first.resetTime instanceof Date && first.resetTime.getTime() >= t + 10_000 && first.resetTime.getTime() <= Date.now() + 10_000);
  assert.equal((await s.increment('k')).totalHits, 2);
  await s.decrement('k');
  assert.equal((await s.get('k'))?.totalHits, 1);
  assert.equal((await s.increment('k')).totalHits, 2);
  // Decremented to 0 and below, as MemoryStore and rate-limit-redis's DECR count: the key and its
  // window stay.
  await s.decrement('k');
  await s.decrement('k');
  assert.equal((await s.get('k'))?.totalHits, 0);
  await s.decrement('k');
  assert.equal(await client.get('rl:erlapi:k'), '-1');
  assert.ok((await client.pTTL('rl:erlapi:k')) > 0);
  // A decrement of no key makes none (XX).
  await s.decrement('none');
  assert.equal(await client.exists('rl:erlapi:none'), 0);
  assert.equal(await s.get('none'), undefined);
  // resetKey: DEL.
  await s.increment('k');
  await s.resetKey('k');
  assert.equal(await client.exists('rl:erlapi:k'), 0);
  assert.equal((await s.increment('k')).totalHits, 1);
  // get writes nothing: the count and the key's TTL stay.
  const ttl = await client.pTTL('rl:erlapi:k');
  await s.get('k');
  assert.equal((await s.get('k'))?.totalHits, 1);
  assert.ok((await client.pTTL('rl:erlapi:k')) <= ttl);
  // A key of another type, a string that is no count: Redis's own errors, rejected.
  await client.hSet('rl:erlapi:h', 'a', '1');
  await assert.rejects(s.increment('h'), { message: 'WRONGTYPE Operation against a key holding the wrong kind of value' });
  await client.set('rl:erlapi:str', 'x');
  await assert.rejects(s.increment('str'), { message: 'ERR value is not an integer or out of range' });
  await s.shutdown();
  // The constructor's checks.
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client, windowMs: 1000 })), {
    name: 'TypeError',
    message: 'invalid option windowMs: RedisModuleStore takes client, prefix, limit, backend, timeout, setupTimeout, logger (express-rate-limit\'s own options go to rateLimit())',
  });
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({})), { name: 'TypeError', message: /^invalid client: expected a node-redis client/ });
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client, prefix: 5 })), { message: 'invalid prefix: expected a string; got 5' });
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client, timeout: 0 })), { message: 'invalid timeout: expected a positive number of milliseconds; got 0' });
  assert.throws(() => new RedisModuleStore(/** @type {any} */ ({ client, backend: 'lua' })), { message: 'invalid backend: expected "auto", "module" or "script"; got lua' });
});

test('a window ends when its key expires: the next hit starts a new one', async () => {
  const s = store({ prefix: 'rl:erlexp:' });
  s.init({ windowMs: 300, limit: 5 });
  await s.increment('e');
  // The key's TTL is the window, in real time: wait for that event (the key gone), and hit again.
  while ((await client.exists('rl:erlexp:e')) === 1) await new Promise((r) => setTimeout(r, 20));
  const t = Date.now();
  const again = await s.increment('e');
  assert.equal(again.totalHits, 1);
  const ends = again.resetTime?.getTime() ?? 0;
  assert.ok(ends >= t + 300 && ends <= Date.now() + 300, 'a whole window from this hit');
});
