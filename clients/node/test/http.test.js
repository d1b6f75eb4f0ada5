// The middleware over real HTTP (Express 5 on node:http) against a real server with the debug
// clock frozen: every field of the contract in docs/node.md, byte for byte.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import express from 'express';
import { parseReply, rateLimitHeaders, rateLimitMiddleware } from '../index.js';
import { PATIENT, T0_MS, calls, clocks, connect, get, helloApp, limitFields, memoryLogger, serve, serverForFile } from './helpers.js';

const PROBLEM_429 =
  '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",' +
  '"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,' +
  '"violated-policies":["default"]}';

const { redis, client } = await serverForFile();

/**
 * An Express app limited by `options`, the caller being X-Client-Id; the server's clock set to
 * T0 and a fake monotonic clock (helpers.js's clocks).
 */
async function app(options) {
  const clock = await clocks(client);
  const limit = rateLimitMiddleware({
    client,
    key: (req) => req.get('X-Client-Id') ?? req.ip,
    now: () => clock.ms,
    logger: memoryLogger(),
    // Not what these tests check (failure.test.js does): a busy machine must not fail them open.
    timeout: 1000,
    ...options,
  });
  const { http, as } = await helloApp(limit);
  return { http, clock, limiter: limit.limiter, as };
}

test('GCRA: the burst, the 429 with its problem body, then the denial memory', async () => {
  const { http, clock, limiter, as } = await app({
    limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
    prefix: 'rl:gcra:',
  });
  try {
    // A burst of 5, then one every 6 s: remaining 4 to 0, reset 6 s more each time, and one
    // unit more 6 s later each time (t). q/w = 5 per 30 s, the 10 a minute it admits.
    for (const [r, reset] of [[4, 6], [3, 12], [2, 18], [1, 24], [0, 30]]) {
      const res = await as('alice');
      assert.deepEqual(limitFields(res), [
        200, '"default";q=5;w=30', `"default";r=${r};t=6`, '5', `${r}`, `${reset}`, undefined,
      ]);
      assert.equal(res.body, 'hello');
    }
    const before429 = await calls(client, 'RL.GCRA');
    const denied = await as('alice');
    assert.deepEqual(limitFields(denied), [
      429, '"default";q=5;w=30', '"default";r=0;t=6', '5', '0', '30', '6',
    ]);
    assert.equal(denied.headers['content-type'], 'application/problem+json');
    assert.equal(denied.body, PROBLEM_429);
    assert.equal(await calls(client, 'RL.GCRA'), before429 + 1);

    // Remembered: the same answer without a round trip, t and Retry-After from the time left.
    const again = await as('alice');
    assert.deepEqual(limitFields(again), limitFields(denied));
    assert.equal(again.body, PROBLEM_429);
    clock.ms += 2_500; // 3500 ms left: rounded up to 4; the reset 27500 ms to 28
    assert.deepEqual(limitFields(await as('alice')), [
      429, '"default";q=5;w=30', '"default";r=0;t=4', '5', '0', '28', '4',
    ]);
    clock.ms += 3_499; // 1 ms left is still a whole second
    assert.deepEqual(limitFields(await as('alice')), [
      429, '"default";q=5;w=30', '"default";r=0;t=1', '5', '0', '25', '1',
    ]);
    assert.equal(await calls(client, 'RL.GCRA'), before429 + 1, 'the memory answered without Redis');
    assert.equal(limiter.stats.deniedLocally, 3);
    assert.equal(limiter.stats.denied, 4);

    // Another caller has a limit of its own (and is not refused by alice's memory).
    assert.deepEqual(limitFields(await as('bob')), [
      200, '"default";q=5;w=30', '"default";r=4;t=6', '5', '4', '6', undefined,
    ]);

    // Once the time is up, the next request asks Redis again: admitted at the retry time.
    clock.ms += 1;
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '6000']);
    assert.deepEqual(limitFields(await as('alice')), [
      200, '"default";q=5;w=30', '"default";r=0;t=6', '5', '0', '30', undefined,
    ]);
    assert.equal(await calls(client, 'RL.GCRA'), before429 + 3);
  } finally {
    await http.close();
  }
});

/** `send()`'s response with `before` and `after`, this process's wall clock (ms) around it. */
async function timed(send) {
  const before = Date.now();
  const r = await send();
  return { ...r, before, after: Date.now() };
}

/**
 * X-RateLimit-Reset in epoch seconds for a key fresh `ms` after the reply: the reply arrived
 * between `before` and `after`, so the field is ceil((that + ms) / 1000) for an instant between.
 */
function epochReset(r, ms) {
  const reset = Number(r.headers['x-ratelimit-reset']);
  assert.ok(Number.isSafeInteger(reset), `X-RateLimit-Reset ${r.headers['x-ratelimit-reset']} is not whole seconds`);
  const [low, high] = [Math.ceil((r.before + ms) / 1000), Math.ceil((r.after + ms) / 1000)];
  assert.ok(low <= reset && reset <= high, `X-RateLimit-Reset ${reset} is not ${ms} ms after the reply: ${low}..${high}`);
  return reset;
}

test("xRateLimitReset 'epoch': X-RateLimit-Reset the reset instant, the same from the denial memory", async () => {
  const { http, clock, limiter, as } = await app({
    limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
    prefix: 'rl:epoch:',
    xRateLimitReset: 'epoch',
  });
  try {
    // The burst of the GCRA test above: every other field as there, X-RateLimit-Reset the
    // wall clock's epoch seconds 6 s more each time.
    for (const [r, reset] of [[4, 6], [3, 12], [2, 18], [1, 24], [0, 30]]) {
      const res = await timed(() => as('alice'));
      epochReset(res, reset * 1000);
      assert.deepEqual(limitFields(res), [
        200, '"default";q=5;w=30', `"default";r=${r};t=6`, '5', `${r}`, res.headers['x-ratelimit-reset'], undefined,
      ]);
    }
    const before429 = await calls(client, 'RL.GCRA');
    const denied = await timed(() => as('alice'));
    const instant = epochReset(denied, 30_000);
    assert.deepEqual(limitFields(denied), [429, '"default";q=5;w=30', '"default";r=0;t=6', '5', '0', `${instant}`, '6']);
    // From the memory, 2.5 s then 5999 ms later on its clock (t and Retry-After counted down, as
    // in the GCRA test; delta seconds would say 28 and 25): the instant the reply fixed, not
    // this process's clock now plus the time left, which gives an earlier second here (the fake
    // monotonic clock moves, the wall clock does not, as after a step of the wall clock).
    clock.ms += 2_500;
    assert.deepEqual(limitFields(await as('alice')), [429, '"default";q=5;w=30', '"default";r=0;t=4', '5', '0', `${instant}`, '4']);
    clock.ms += 3_499;
    assert.deepEqual(limitFields(await as('alice')), [429, '"default";q=5;w=30', '"default";r=0;t=1', '5', '0', `${instant}`, '1']);
    assert.equal(await calls(client, 'RL.GCRA'), before429 + 1, 'the memory answered without Redis');
    assert.equal(limiter.stats.deniedLocally, 2);

    // At the retry time Redis is asked again: admitted, a new instant 30 s after its reply.
    clock.ms += 1;
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '6000']);
    const admitted = await timed(() => as('alice'));
    assert.equal(admitted.status, 200);
    epochReset(admitted, 30_000);
  } finally {
    await http.close();
  }
});

test("xRateLimitReset: 'delta' by default, and anything else is refused when the middleware is made", async () => {
  const limit = { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' };
  for (const bad of ['seconds', 'Epoch', '', 1, null]) {
    assert.throws(() => rateLimitMiddleware({ client, limit, xRateLimitReset: bad }), {
      name: 'TypeError',
      message: `invalid xRateLimitReset: expected "delta" or "epoch"; got ${String(bad)}`,
    });
  }
  const d = { allowed: true, name: 'default', limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 6000, windowSeconds: 30, local: false };
  assert.throws(() => rateLimitHeaders(d, { xRateLimitReset: 'utc' }), {
    name: 'TypeError',
    message: 'invalid xRateLimitReset: expected "delta" or "epoch"; got utc',
  });
  // The default and 'delta': the seconds from now, whatever the clock.
  assert.deepEqual(rateLimitHeaders(d), rateLimitHeaders(d, { xRateLimitReset: 'delta' }));
  assert.deepEqual(rateLimitHeaders(d).at(-1), ['X-RateLimit-Reset', '6']);
  // A decision the application made has no instant fixed: now plus resetAfterMs, rounded up.
  const before = Date.now();
  const reset = Number(rateLimitHeaders(d, { xRateLimitReset: 'epoch' }).at(-1)?.[1]);
  const after = Date.now();
  assert.ok(Math.ceil((before + 6000) / 1000) <= reset && reset <= Math.ceil((after + 6000) / 1000), `${reset}`);
  const { http, as } = await app({ limit, prefix: 'rl:delta:', xRateLimitReset: 'delta' });
  try {
    assert.deepEqual(limitFields(await as('alice')), [200, '"default";q=5;w=30', '"default";r=4;t=6', '5', '4', '6', undefined]);
  } finally {
    await http.close();
  }
});

test('a request that can never pass: no t, no Retry-After, and not remembered', async () => {
  const { http, limiter, as } = await app({
    limit: { algorithm: 'tokenbucket', capacity: 4, refillAmount: 4, refillPeriod: 60_000 },
    name: 'uploads',
    cost: (req) => Number(req.get('X-Cost') ?? 1),
    prefix: 'rl:never:',
  });
  try {
    const big = () => get(http.url, '/', { 'X-Client-Id': 'carol', 'X-Cost': '5' });
    for (let i = 0; i < 2; i++) {
      const res = await big();
      assert.deepEqual(limitFields(res), [
        429, '"uploads";q=4;w=60', '"uploads";r=4', '4', '4', '0', undefined,
      ]);
      assert.equal(res.body, PROBLEM_429.replace('"default"', '"uploads"'));
    }
    assert.equal(limiter.stats.deniedLocally, 0);
    assert.equal(limiter.memory.size, 0);
    // The same caller with a cost that fits is admitted.
    assert.deepEqual(limitFields(await as('carol')), [
      200, '"uploads";q=4;w=60', '"uploads";r=3;t=15', '4', '3', '15', undefined,
    ]);
  } finally {
    await http.close();
  }
});

test('a remembered denial refuses the same cost; another cost is asked', async () => {
  const { http, limiter } = await app({
    limit: { algorithm: 'tokenbucket', capacity: 4, refillAmount: 4, refillPeriod: '1m' },
    cost: (req) => Number(req.get('X-Cost')),
    prefix: 'rl:cost:',
  });
  const costing = (n) => get(http.url, '/', { 'X-Client-Id': 'gina', 'X-Cost': `${n}` });
  try {
    // 1 left; the next token in 15 s (the bucket full in 45).
    assert.equal((await costing(3)).headers.ratelimit, '"default";r=1;t=15');
    const calls0 = await calls(client, 'RL.TOKENBUCKET');
    // 3 more do not fit: 2 of them are missing, 30 s at 4 a minute.
    assert.deepEqual(limitFields(await costing(3)), [429, '"default";q=4;w=60', '"default";r=1;t=30', '4', '1', '45', '30']);
    // Remembered: r=0 from the memory, the same cost, without a round trip.
    assert.deepEqual(limitFields(await costing(3)), [429, '"default";q=4;w=60', '"default";r=0;t=30', '4', '0', '45', '30']);
    assert.equal(await calls(client, 'RL.TOKENBUCKET'), calls0 + 1);
    // A larger cost waits longer (3 tokens missing: 45 s, not the 30 remembered): asked.
    assert.deepEqual(limitFields(await costing(4)), [429, '"default";q=4;w=60', '"default";r=1;t=45', '4', '1', '45', '45']);
    assert.equal(await calls(client, 'RL.TOKENBUCKET'), calls0 + 2);
    // One unit fits: asked, and admitted.
    assert.deepEqual(limitFields(await costing(1)), [200, '"default";q=4;w=60', '"default";r=0;t=15', '4', '0', '60', undefined]);
    assert.equal(await calls(client, 'RL.TOKENBUCKET'), calls0 + 3);
    assert.equal(limiter.stats.deniedLocally, 1);
  } finally {
    await http.close();
  }
});

test('w is left out when the window is not whole seconds', async () => {
  const { http, as } = await app({
    limit: { algorithm: 'slidinglog', limit: 2, window: '1500ms' },
    prefix: 'rl:w:',
  });
  try {
    assert.deepEqual(limitFields(await as('dave')), [
      200, '"default";q=2', '"default";r=1;t=2', '2', '1', '2', undefined,
    ]);
  } finally {
    await http.close();
  }
});

test('RL.LIMIT: the policy name, "<policy>/<rule>" with several rules, w from each rule', async () => {
  await client.sendCommand(['RL.POLICY.SET', 'api', 'GCRA', '2', '2', '1s', 'FIXEDWINDOW', '3', '1m']);
  await client.sendCommand(['RL.POLICY.SET', 'solo', 'SLIDINGWINDOW', '5', '10s']);
  const multi = await app({ limit: { policy: 'api' }, prefix: 'rl:api:' });
  const single = await app({ limit: { policy: 'solo' }, prefix: 'rl:solo:' });
  const named = await app({ limit: { policy: 'api' }, name: 'tiers', prefix: 'rl:named:' });
  try {
    // The GCRA rule binds first (fewest remaining); a tie goes to the earlier rule.
    assert.deepEqual(limitFields(await multi.as('erin')), [
      200, '"api/0";q=2;w=1', '"api/0";r=1;t=1', '2', '1', '1', undefined,
    ]);
    // The GCRA rule binds again (r=1), but the policy's r grows only when the minute's window
    // (2 of 3 taken, 39 s left of it) admits 2: t is the policy's, not the binding rule's.
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '1000']);
    assert.deepEqual(limitFields(await multi.as('erin')), [
      200, '"api/0";q=2;w=1', '"api/0";r=1;t=39', '2', '1', '1', undefined,
    ]);
    // Then the minute's window: T0 is 20 s into its minute, so 2 s later 38 s are left.
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '1000']);
    assert.deepEqual(limitFields(await multi.as('erin')), [
      200, '"api/1";q=3;w=60', '"api/1";r=0;t=38', '3', '0', '38', undefined,
    ]);
    const denied = await multi.as('erin');
    assert.deepEqual(limitFields(denied), [
      429, '"api/1";q=3;w=60', '"api/1";r=0;t=38', '3', '0', '38', '38',
    ]);
    assert.equal(denied.body, PROBLEM_429.replace('"default"', '"api/1"'));
    // 2 s into its 10 s window; fresh 1 ms after the window ends (8001 ms, rounded up to 9).
    assert.deepEqual(limitFields(await single.as('erin')), [
      200, '"solo";q=5;w=10', '"solo";r=4;t=9', '5', '4', '9', undefined,
    ]);
    // A name given to a policy takes the policy's place, the rule's index still after it.
    assert.equal((await named.as('erin')).headers.ratelimit, '"tiers/0";r=1;t=1');
    assert.equal(await calls(client, 'RL.POLICY.GET'), 3, 'each limit reads its policy once');
  } finally {
    await multi.http.close();
    await single.http.close();
    await named.http.close();
  }
});

test('the denial memory is bounded: the oldest goes first', async () => {
  const { http, limiter, as } = await app({
    limit: { algorithm: 'fixedwindow', limit: 1, window: '1m' },
    prefix: 'rl:bound:',
    denialMemory: 2,
  });
  try {
    for (const id of ['k1', 'k2', 'k3']) {
      assert.equal((await as(id)).status, 200);
      assert.equal((await as(id)).status, 429);
    }
    assert.deepEqual([...limiter.memory.entries.keys()], ['k2', 'k3']);
    const before = await calls(client, 'RL.FIXEDWINDOW');
    assert.equal((await as('k1')).status, 429);
    assert.equal(await calls(client, 'RL.FIXEDWINDOW'), before + 1, 'k1 was forgotten: asked again');
    assert.deepEqual([...limiter.memory.entries.keys()], ['k3', 'k1']);
  } finally {
    await http.close();
  }
});

test('RESP2 clients get the same fields', async () => {
  const resp2 = await connect(redis, { RESP: 2 });
  const { http, as } = await app({
    client: resp2,
    limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
    prefix: 'rl:resp2:',
  });
  try {
    assert.deepEqual(limitFields(await as('frank')), [
      200, '"default";q=5;w=30', '"default";r=4;t=6', '5', '4', '6', undefined,
    ]);
  } finally {
    await http.close();
    await resp2.quit();
  }
});

test('concurrency: a lease per request in flight, given back when its response ends', async () => {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const limit = rateLimitMiddleware({
    ...PATIENT,
    client,
    limit: { algorithm: 'concurrency', limit: 2, lease: '30s' },
    key: () => 'jobs',
    prefix: 'rl:conc:',
    logger: memoryLogger(),
  });
  let open;
  const gate = new Promise((r) => { open = r; });
  const a = express();
  a.use(limit);
  a.get('/', async (req, res) => {
    await gate;
    res.send('done');
  });
  const http = await serve(a);
  const held = async () => {
    const info = await client.sendCommand(['RL.INSPECT', 'rl:conc:jobs']);
    const map = info instanceof Map ? Object.fromEntries(info) : info;
    return Number(map?.held ?? 0);
  };
  const until = async (n) => {
    for (let i = 0; i < 200 && (await held()) !== n; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(await held(), n);
  };
  try {
    const first = get(http.url);
    const second = get(http.url);
    await until(2);
    // Both slots are held: refused, qu="concurrent-requests" and no w; t from the lease's end.
    const refused = await get(http.url);
    assert.deepEqual(limitFields(refused), [
      429, '"default";q=2;qu="concurrent-requests"', '"default";r=0;t=30', '2', '0', '30', '30',
    ]);
    // Not remembered: a lease may be given back before its retry time.
    assert.equal(limit.limiter.memory.size, 0);
    open();
    const done = await Promise.all([first, second]);
    // The two admitted ones, in whichever order the server took them; no t while admitted: a
    // slot comes back when its holder's response ends, which nobody can tell in advance.
    assert.deepEqual(done.map(limitFields).sort((x, y) => x[2].localeCompare(y[2])), [
      [200, '"default";q=2;qu="concurrent-requests"', '"default";r=0', '2', '0', '30', undefined],
      [200, '"default";q=2;qu="concurrent-requests"', '"default";r=1', '2', '1', '30', undefined],
    ]);
    await until(0);
    assert.equal((await get(http.url)).headers.ratelimit, '"default";r=1');
    assert.equal(limit.limiter.stats.releaseFailures, 0);
  } finally {
    await http.close();
  }
});

test('RL.WARMUP: limit 1, spaced by the cold interval after idle; COLDFACTOR; no w', async () => {
  const { http, clock, limiter, as } = await app({
    limit: { algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s' },
    prefix: 'rl:warm:',
  });
  const colder = await app({
    limit: { algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s', coldFactor: 5 },
    prefix: 'rl:warm5:',
  });
  try {
    // docs/commands.md's session: admitted, then 298 ms to wait (reset 398 ms).
    assert.deepEqual(limitFields(await as('gil')), [200, '"default";q=1', '"default";r=0;t=1', '1', '0', '1', undefined]);
    assert.deepEqual(limitFields(await as('gil')), [429, '"default";q=1', '"default";r=0;t=1', '1', '0', '1', '1']);
    // A denial of its own algorithm is remembered: the third is refused without a round trip.
    const before = await calls(client, 'RL.WARMUP');
    assert.equal((await as('gil')).status, 429);
    assert.equal(await calls(client, 'RL.WARMUP'), before);
    assert.equal(limiter.stats.deniedLocally, 1);
    // 298 ms later the memory lets go and the module admits.
    clock.ms += 298;
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '298']);
    assert.equal((await as('gil')).status, 200);
    // COLDFACTOR 5: the same as the command with it, on a twin key.
    for (let i = 0; i < 2; i++) {
      const res = await colder.as('hal');
      const d = parseReply(await client.sendCommand(['RL.WARMUP', 'rl:warm5-direct:hal', '10', '1s', '10s', 'COLDFACTOR', '5']));
      // Admitted, t is when the next request passes: a DRYRUN's retry time.
      const next = parseReply(await client.sendCommand(['RL.WARMUP', 'rl:warm5-direct:hal', '10', '1s', '10s', 'COLDFACTOR', '5', 'DRYRUN']));
      assert.deepEqual(limitFields(res).slice(0, 6), [d.allowed ? 200 : 429, '"default";q=1', `"default";r=0;t=${Math.ceil((d.allowed ? next.retryAfterMs : d.retryAfterMs) / 1000)}`,
        '1', '0', `${Math.ceil(d.resetAfterMs / 1000)}`]);
      assert.equal(res.status, i === 0 ? 200 : 429);
    }
  } finally {
    await http.close();
    await colder.http.close();
  }
  for (const coldFactor of [1, 11, 2.5]) {
    assert.throws(() => rateLimitMiddleware({ client, limit: { algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s', coldFactor } }),
      new RegExp(`^TypeError: invalid limit\\.coldFactor: expected an integer from 2 to 10; got ${coldFactor}$`));
  }
});
