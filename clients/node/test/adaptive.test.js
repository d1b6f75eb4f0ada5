// Adaptive concurrency (issue 26) against a real server with the debug clock frozen at T0 (no
// lease runs out unless a test moves the clock): the words sent for `adaptive`, `min`, `max` and
// for a release's `rtt` and `dropped`; the limit moving exactly as the module's AIMD says; and the
// middleware over real HTTP (Express 5 on node:http): the latency it reports, DROPPED on a 5xx, an
// error, an aborted request and a socket timeout, and a refusal being a 503 with Retry-After;
// and the README's example, run. What was sent is read from a client that records every command
// on its way to the real one.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import express from 'express';
import { RateLimit, loadSheddingBody, rateLimitMiddleware } from '../index.js';
import { T0_MS, freePort, get, limitFields, memoryLogger, serverForFile } from './helpers.js';

const { redis, client } = await serverForFile();
await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);

/**
 * A client that sends through the real one and records every command; `release(i)` resolves,
 * once the i-th RL.CONCURRENCY.RELEASE (from 0) has been sent and answered, to its words and
 * reply. `hold(words)`, when set, is awaited before a command is sent.
 */
function recording() {
  const sent = [];
  const releases = [];
  let wake = () => {};
  const rec = {
    sent,
    hold: undefined,
    sendCommand(args) {
      const words = args.map(String);
      sent.push(words);
      const reply = (rec.hold ? rec.hold(words) : Promise.resolve()).then(() => client.sendCommand(args));
      if (words[0] === 'RL.CONCURRENCY.RELEASE') {
        releases.push(reply.then((r) => ({ words, reply: r })));
        wake();
      }
      return reply;
    },
    async release(i) {
      while (releases.length <= i) await new Promise((r) => { wake = r; });
      return releases[i];
    },
  };
  return rec;
}

let serial = 0;
/** A RateLimit on `limit` through a recording client, its keys its own. */
function limiter(limit) {
  const rec = recording();
  serial += 1;
  const l = new RateLimit({ client: rec, limit, prefix: `rl:adaptive:${serial}:`, logger: memoryLogger(), timeout: 1000 });
  return { l, rec };
}

/** RL.INSPECT of a key, as an object of strings and numbers. */
async function inspect(key) {
  const info = await client.sendCommand(['RL.INSPECT', key]);
  if (info instanceof Map) return Object.fromEntries(info);
  if (Array.isArray(info)) return Object.fromEntries(info.flatMap((v, i) => (i % 2 ? [] : [[String(v), info[i + 1]]])));
  return info;
}

/** [limit, remaining] of a decision. */
const lr = (d) => [d.limit, d.remaining];

test('adaptive concurrency: ADAPTIVE <KIND> [MIN n] [MAX n] after limit and lease; a release sends RTT <n>us and DROPPED', async () => {
  const cases = [
    [{ adaptive: 'AIMD', min: 1, max: 10 }, ['ADAPTIVE', 'AIMD', 'MIN', '1', 'MAX', '10'], 'aimd'],
    [{ adaptive: 'vegas' }, ['ADAPTIVE', 'VEGAS'], 'vegas'],
    [{ adaptive: 'Gradient2', max: 50 }, ['ADAPTIVE', 'GRADIENT2', 'MAX', '50'], 'gradient2'],
    [{ adaptive: 'aimd', min: 2 }, ['ADAPTIVE', 'AIMD', 'MIN', '2'], 'aimd'],
  ];
  for (const [options, words, kind] of cases) {
    const { l, rec } = limiter({ algorithm: 'concurrency', limit: 4, lease: '30s', ...options });
    assert.equal(l.adaptive, kind);
    const d = await l.check('k');
    assert.equal(d.allowed, true, JSON.stringify(d));
    assert.equal(d.adaptive, kind);
    assert.deepEqual(rec.sent.at(-1), ['RL.CONCURRENCY.ACQUIRE', l.redisKey('k'), '4', '30000', ...words]);
    // The call's own options come after the limit's words.
    await l.check('k', 1, { id: 'w-1' });
    assert.deepEqual(rec.sent.at(-1), ['RL.CONCURRENCY.ACQUIRE', l.redisKey('k'), '4', '30000', ...words, 'ID', 'w-1']);
    assert.equal((await inspect(l.redisKey('k'))).adaptive, kind);
  }
  // Not adaptive: no such words, and no `adaptive` in the decision.
  const { l: plain, rec: plainRec } = limiter({ algorithm: 'concurrency', limit: 4, lease: '30s' });
  const p = await plain.check('k');
  assert.deepEqual(plainRec.sent.at(-1), ['RL.CONCURRENCY.ACQUIRE', plain.redisKey('k'), '4', '30000']);
  assert.equal(p.adaptive, undefined);
  assert.equal(plain.adaptive, undefined);

  // A release: milliseconds, fractions kept, as whole microseconds (rounded, at least 1).
  const { l, rec } = limiter({ algorithm: 'concurrency', limit: 10, lease: '30s', adaptive: 'aimd', min: 1, max: 100 });
  const reports = [
    [{ rtt: 2.35 }, ['RTT', '2350us']],
    [{ rtt: 12.5, dropped: true }, ['RTT', '12500us', 'DROPPED']],
    [{ dropped: true }, ['DROPPED']],
    [{ rtt: 0 }, ['RTT', '1us']],
    [{ rtt: 0.0004 }, ['RTT', '1us']],
    [{ rtt: 1.0004 }, ['RTT', '1000us']],
    [{ rtt: 1.0006 }, ['RTT', '1001us']],
    [{ rtt: 86_400_000 }, ['RTT', '86400000000us']],
    [{ dropped: false }, []],
    [{}, []],
    [undefined, []],
  ];
  for (const [i, [options, words]] of reports.entries()) {
    const d = await l.check('r');
    await l.release('r', d, options);
    assert.deepEqual(await rec.release(i), { words: ['RL.CONCURRENCY.RELEASE', l.redisKey('r'), d.token, ...words], reply: 1 });
  }
  assert.equal(l.stats.releaseFailures, 0);
  // A limit that is not adaptive sends them too; the module takes and ignores them.
  await plain.release('k', p, { rtt: 3, dropped: true });
  assert.deepEqual(await plainRec.release(0), { words: ['RL.CONCURRENCY.RELEASE', plain.redisKey('k'), p.token, 'RTT', '3000us', 'DROPPED'], reply: 1 });
  assert.equal(plain.stats.releaseFailures, 0);
});

test('adaptive concurrency: what the module would refuse is a TypeError, and what it takes is taken', async () => {
  const base = { algorithm: 'concurrency', limit: 4, lease: '30s' };
  const refused = [
    [{ adaptive: 'bbr' }, 'invalid limit.adaptive: expected "aimd", "vegas" or "gradient2"; got bbr'],
    [{ adaptive: 1 }, 'invalid limit.adaptive: expected "aimd", "vegas" or "gradient2"; got 1'],
    [{ adaptive: '' }, 'invalid limit.adaptive: expected "aimd", "vegas" or "gradient2"; got '],
    [{ min: 1 }, 'invalid limit.min: only an adaptive concurrency limit (limit.adaptive) has bounds'],
    [{ max: 10 }, 'invalid limit.max: only an adaptive concurrency limit (limit.adaptive) has bounds'],
    [{ adaptive: 'aimd', min: 0 }, 'invalid limit.min: expected an integer from 1 to 10^12; got 0'],
    [{ adaptive: 'aimd', min: 2.5 }, 'invalid limit.min: expected an integer from 1 to 10^12; got 2.5'],
    [{ adaptive: 'aimd', max: '10' }, 'invalid limit.max: expected an integer from 1 to 10^12; got 10'],
    [{ adaptive: 'aimd', min: 5, max: 3 }, 'invalid limit.min: 5 is above limit.max 3'],
    // One bound left out is the module's default for the kind, widened to include `limit`.
    [{ adaptive: 'aimd', min: 300 }, 'invalid limit.min: 300 is above limit.max, whose default for aimd is 200 (200, or limit if higher)'],
    [{ adaptive: 'gradient2', max: 3 }, 'invalid limit.max: 3 is below limit.min, whose default for gradient2 is 4 (20, or limit if lower)'],
    [{ adaptive: 'vegas', min: 1001 }, 'invalid limit.min: 1001 is above limit.max, whose default for vegas is 1000 (1000, or limit if higher)'],
  ];
  for (const [options, message] of refused) {
    assert.throws(() => new RateLimit({ client, limit: { ...base, ...options } }), { name: 'TypeError', message }, JSON.stringify(options));
  }
  // The module refuses the same bounds (sent as the package would send them).
  for (const words of [['MIN', '5', 'MAX', '3'], ['MIN', '300'], ['MAX', '3']]) {
    await assert.rejects(client.sendCommand(['RL.CONCURRENCY.ACQUIRE', 'rl:adaptive:raw', '4', '30000', 'ADAPTIVE', 'AIMD', ...words]),
      /MIN is above MAX/, words.join(' '));
  }
  await assert.rejects(client.sendCommand(['RL.CONCURRENCY.ACQUIRE', 'rl:adaptive:raw', '4', '30000', 'MIN', '1']), /MIN and MAX bound an adaptive limit/);
  // Accepted here, and by the module: `limit` widens the defaults; Vegas goes down to 1.
  for (const [options, first] of [
    [{ limit: 400, adaptive: 'aimd', min: 300 }, [400, 399]],
    [{ limit: 5, adaptive: 'vegas', max: 3 }, [3, 2]],
    [{ limit: 4, adaptive: 'gradient2', max: 4 }, [4, 3]],
    [{ limit: 4, adaptive: 'aimd', min: 2, max: 3 }, [3, 2]],
  ]) {
    const { l } = limiter({ ...base, ...options });
    const d = await l.check('k');
    assert.equal(d.failed, undefined, `${JSON.stringify(options)}: ${d.error?.message}`);
    assert.deepEqual(lr(d), first, JSON.stringify(options));
  }
  // Only a concurrency limit adapts.
  assert.throws(() => new RateLimit({ client, limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m', adaptive: 'aimd' } }),
    { name: 'TypeError', message: 'invalid limit.adaptive: only a concurrency limit adapts; got aimd' });
  assert.throws(() => new RateLimit({ client, limit: { policy: 'api', adaptive: 'vegas' } }),
    { name: 'TypeError', message: 'invalid limit.adaptive: only a concurrency limit adapts; got vegas' });
  assert.throws(() => new RateLimit({ client, limit: { policy: 'api', max: 3 } }),
    { name: 'TypeError', message: 'invalid limit.max: only an adaptive concurrency limit (limit.adaptive) has bounds' });
  // A release's options.
  const { l, rec } = limiter({ ...base, adaptive: 'aimd' });
  const d = await l.check('k');
  for (const rtt of [-1, NaN, Infinity, '5', 315_360_000_001]) {
    await assert.rejects(l.release('k', d, { rtt }), {
      name: 'TypeError',
      message: `invalid rtt: expected the milliseconds the work took, a number from 0 to 10 years; got ${String(rtt)}`,
    });
  }
  await assert.rejects(l.release('k', d, { dropped: 'yes' }), { name: 'TypeError', message: 'invalid dropped: expected true or false; got yes' });
  assert.equal(rec.sent.filter((w) => w[0] === 'RL.CONCURRENCY.RELEASE').length, 0, 'nothing sent');
});

test('release with rtt and dropped moves an AIMD limit exactly', async () => {
  const { l, rec } = limiter({ algorithm: 'concurrency', limit: 4, lease: '30s', adaptive: 'aimd', min: 1, max: 10 });
  const key = l.redisKey('k');
  const a = await l.check('k');
  const b = await l.check('k');
  assert.deepEqual([lr(a), lr(b)], [[4, 3], [4, 2]]);
  // b began with 2 in flight: 2 × 2 >= 4, + 1.
  await l.release('k', b, { rtt: 5 });
  const c = await l.check('k');
  assert.deepEqual(lr(c), [5, 3]);
  // A dropped sample backs off: (int) (5 × 0.9) = 4.
  await l.release('k', c, { rtt: 5, dropped: true });
  const d = await l.check('k');
  assert.deepEqual(lr(d), [4, 2]);
  assert.deepEqual([(await inspect(key)).limit, (await inspect(key)).held], [4, 2]);
  // AIMD's timeout is 5 s: an RTT over it is a drop, to the microsecond (rounded to the nearest).
  await l.release('k', d, { rtt: 5000.0004 });
  const e = await l.check('k');
  assert.deepEqual(lr(e), [5, 3], '5000000us is not over 5 s: + 1');
  await l.release('k', e, { rtt: 5000.0006 });
  const f = await l.check('k');
  assert.deepEqual(lr(f), [4, 2], '5000001us is: (int) (5 × 0.9) = 4');
  const rtts = await Promise.all([0, 1, 2, 3].map((i) => rec.release(i).then((r) => r.words.slice(3))));
  assert.deepEqual(rtts, [['RTT', '5000us'], ['RTT', '5000us', 'DROPPED'], ['RTT', '5000000us'], ['RTT', '5000001us']]);
  // A release without a report: the time since the lease was taken (the frozen clock: none).
  await l.release('k', f);
  await l.release('k', a);
  assert.deepEqual([(await inspect(key)).limit, (await inspect(key)).held], [5, 0]);
  assert.equal(l.stats.releaseFailures, 0);
});

/**
 * An Express app behind the middleware on `limit`, every request the key "api", through a
 * recording client, on node:http on a free loopback port; `routes(app)` adds its routes.
 * Express's error handler answers without logging (env "test").
 */
async function adaptiveApp(limit, routes, { before } = {}) {
  const rec = recording();
  serial += 1;
  const middleware = rateLimitMiddleware({
    client: rec,
    limit,
    key: () => 'api',
    prefix: `rl:mw:${serial}:`,
    logger: memoryLogger(),
    timeout: 1000,
  });
  const app = express();
  app.set('env', 'test');
  if (before) app.use(before);
  app.use(middleware);
  routes(app);
  const server = http.createServer(app);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    rec,
    server,
    limiter: middleware.limiter,
    key: middleware.limiter.redisKey('api'),
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

/** A promise and its resolve. */
function signal() {
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  return { promise, resolve };
}

test('middleware: a 5xx releases with DROPPED and the limit backs off; a 2xx or 4xx does not', async () => {
  const app = await adaptiveApp({ algorithm: 'concurrency', limit: 10, lease: '30s', adaptive: 'aimd', min: 1, max: 100 }, (a) => {
    a.get('/ok', (req, res) => res.send('ok'));
    a.get('/fail', (req, res) => res.status(500).send('no'));
    a.get('/unavailable', (req, res) => res.status(503).send('later'));
    a.get('/missing', (req, res) => res.status(404).send('?'));
  });
  try {
    const steps = [
      ['/fail', 500, true, 9],
      ['/ok', 200, false, 9], // 1 in flight of 9: no growth
      ['/unavailable', 503, true, 8],
      ['/missing', 404, false, 8],
    ];
    for (const [i, [path, status, dropped, limit]] of steps.entries()) {
      const res = await get(app.url, path);
      assert.equal(res.status, status, path);
      const { words, reply } = await app.rec.release(i);
      assert.equal(reply, 1);
      assert.equal(words[3], 'RTT', path);
      assert.match(words[4], /^[1-9][0-9]*us$/);
      assert.equal(words.includes('DROPPED'), dropped, `${path}: ${words.join(' ')}`);
      const info = await inspect(app.key);
      assert.deepEqual([info.adaptive, info.limit, info.held], ['aimd', limit, 0], path);
    }
    // RateLimit-Policy's q is the limit now, as RL.CONCURRENCY.ACQUIRE answered it.
    assert.deepEqual(limitFields(await get(app.url, '/ok')).slice(0, 6),
      [200, '"default";q=8;qu="concurrent-requests"', '"default";r=7', '8', '7', '30']);
  } finally {
    await app.close();
  }
  // A limit that is not adaptive releases as before: no RTT, no DROPPED, on a 5xx too.
  const plain = await adaptiveApp({ algorithm: 'concurrency', limit: 10, lease: '30s' }, (a) => {
    a.get('/fail', (req, res) => res.status(500).send('no'));
  });
  try {
    assert.equal((await get(plain.url, '/fail')).status, 500);
    const { words } = await plain.rec.release(0);
    assert.deepEqual(words.slice(0, 2), ['RL.CONCURRENCY.RELEASE', plain.key]);
    assert.equal(words.length, 3);
  } finally {
    await plain.close();
  }
});

test("middleware: a request's RTT is its duration, from just before next() to the response's finish", async () => {
  let handlerUs;
  const app = await adaptiveApp({ algorithm: 'concurrency', limit: 20, lease: '30s', adaptive: 'gradient2' }, (a) => {
    a.get('/work', async (req, res) => {
      const t0 = process.hrtime.bigint();
      await sleep(25);
      handlerUs = Number(process.hrtime.bigint() - t0) / 1000;
      res.send('done');
    });
  });
  try {
    const t0 = process.hrtime.bigint();
    const res = await get(app.url, '/work');
    const requestUs = Number(process.hrtime.bigint() - t0) / 1000;
    assert.equal(res.status, 200);
    const { words } = await app.rec.release(0);
    assert.equal(words.length, 5, words.join(' '));
    const rttUs = Number(/^([0-9]+)us$/.exec(words[4])[1]);
    // Within the request as the client timed it, and no shorter than the handler's own work.
    assert.ok(rttUs >= Math.floor(handlerUs) && rttUs <= requestUs, `RTT ${rttUs}us, handler ${handlerUs}us, request ${requestUs}us`);
    // The sample Gradient2 took is that RTT.
    const info = await inspect(app.key);
    assert.equal(info.adaptive, 'gradient2');
    assert.equal(info.short_rtt_us, rttUs);
    assert.equal(info.long_rtt_us, rttUs);
  } finally {
    await app.close();
  }
});

test('middleware: next(err) and a rejected handler (500) release with DROPPED; an error answered 4xx does not', async () => {
  const app = await adaptiveApp({ algorithm: 'concurrency', limit: 10, lease: '30s', adaptive: 'aimd', min: 1, max: 100 }, (a) => {
    a.get('/next-error', (req, res, next) => next(new Error('boom')));
    a.get('/throws', async () => {
      throw new Error('boom');
    });
    a.get('/bad-request', (req, res, next) => next(Object.assign(new Error('bad'), { status: 400 })));
  });
  try {
    for (const [i, [path, status, dropped, limit]] of [
      ['/next-error', 500, true, 9],
      ['/throws', 500, true, 8],
      ['/bad-request', 400, false, 8],
    ].entries()) {
      assert.equal((await get(app.url, path)).status, status, path);
      const { words } = await app.rec.release(i);
      assert.equal(words.includes('DROPPED'), dropped, `${path}: ${words.join(' ')}`);
      assert.deepEqual([(await inspect(app.key)).limit, (await inspect(app.key)).held], [limit, 0], path);
    }
  } finally {
    await app.close();
  }
});

test('middleware: an aborted request releases with DROPPED, with its RTT until it closed', async () => {
  const entered = signal();
  const gate = signal();
  const app = await adaptiveApp({ algorithm: 'concurrency', limit: 10, lease: '30s', adaptive: 'aimd', min: 1, max: 100 }, (a) => {
    a.get('/slow', async (req, res) => {
      entered.resolve();
      await gate.promise;
      if (!res.destroyed) res.send('late');
    });
  });
  try {
    const req = http.get(`${app.url}/slow`, { agent: false });
    req.on('error', () => {});
    await entered.promise;
    assert.equal((await inspect(app.key)).held, 1);
    req.destroy();
    const { words, reply } = await app.rec.release(0);
    assert.equal(reply, 1);
    assert.deepEqual([words[3], /^[1-9][0-9]*us$/.test(words[4]), words[5]], ['RTT', true, 'DROPPED']);
    assert.deepEqual([(await inspect(app.key)).limit, (await inspect(app.key)).held], [9, 0]);
    // The handler ends later: nothing more is released.
    gate.resolve();
    await sleep(0);
    assert.equal(app.rec.sent.filter((w) => w[0] === 'RL.CONCURRENCY.RELEASE').length, 1);
  } finally {
    gate.resolve();
    await app.close();
  }
});

test('middleware: a request aborted while its lease was asked is released with DROPPED at once', async () => {
  const closed = signal();
  const acquiring = signal();
  const reached = signal();
  const app = await adaptiveApp(
    { algorithm: 'concurrency', limit: 10, lease: '30s', adaptive: 'aimd', min: 1, max: 100 },
    (a) => a.get('/', (req, res) => { reached.resolve(); res.end(); }),
    { before: (req, res, next) => { res.once('close', closed.resolve); next(); } },
  );
  // The ACQUIRE waits until the server has seen the connection close.
  app.rec.hold = async (words) => {
    if (words[0] !== 'RL.CONCURRENCY.ACQUIRE') return;
    acquiring.resolve();
    await closed.promise;
  };
  try {
    const req = http.get(`${app.url}/`, { agent: false });
    req.on('error', () => {});
    await acquiring.promise;
    req.destroy();
    const { words, reply } = await app.rec.release(0);
    // No RTT: the work never began (the module takes the time the lease was held: none).
    assert.deepEqual([words.slice(3), reply], [['DROPPED'], 1]);
    await reached.promise; // the handler still runs, as before
    assert.deepEqual([(await inspect(app.key)).limit, (await inspect(app.key)).held], [9, 0]);
  } finally {
    await app.close();
  }
});

test('middleware: a response that finishes after its socket timed out releases with DROPPED', async () => {
  const timedOut = signal();
  const app = await adaptiveApp({ algorithm: 'concurrency', limit: 10, lease: '30s', adaptive: 'aimd', min: 1, max: 100 }, (a) => {
    a.get('/late', async (req, res) => {
      await timedOut.promise;
      res.send('late');
    });
  });
  // The server's timeout has a listener: the socket is kept, and the handler answers after it.
  app.server.setTimeout(50, () => timedOut.resolve());
  try {
    const res = await get(app.url, '/late');
    assert.deepEqual([res.status, res.body], [200, 'late']);
    const { words } = await app.rec.release(0);
    assert.deepEqual([words[3], words[5]], ['RTT', 'DROPPED']);
    assert.equal((await inspect(app.key)).limit, 9);
  } finally {
    await app.close();
  }
});

test('middleware: an adaptive limit refuses with 503, Retry-After and a load-shedding body; not remembered', async () => {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  let inside = 0;
  const both = signal();
  const gate = signal();
  const app = await adaptiveApp({ algorithm: 'concurrency', limit: 2, lease: '30s', adaptive: 'aimd', min: 1, max: 2 }, (a) => {
    a.get('/', async (req, res) => {
      inside += 1;
      if (inside === 2) both.resolve();
      await gate.promise;
      res.send('done');
    });
  });
  try {
    const held = [get(app.url), get(app.url)];
    await both.promise;
    const refused = await get(app.url);
    assert.deepEqual(limitFields(refused), [
      503, '"default";q=2;qu="concurrent-requests"', '"default";r=0;t=30', '2', '0', '30', '30',
    ]);
    assert.equal(refused.headers['content-type'], 'application/problem+json');
    assert.equal(refused.body, loadSheddingBody('default'));
    assert.deepEqual(JSON.parse(refused.body), {
      type: 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity',
      title: 'Request cannot be satisfied due to temporary server capacity constraints',
      status: 503,
      detail: 'load shedding: the server is at its adaptive concurrency limit',
      'violated-policies': ['default'],
    });
    // 1 ms before the first lease ends: Retry-After and t rounded up, to 1.
    await client.sendCommand(['RL.DEBUG.CLOCK', 'ADVANCE', '29999']);
    assert.deepEqual(limitFields(await get(app.url)), [
      503, '"default";q=2;qu="concurrent-requests"', '"default";r=0;t=1', '2', '0', '1', '1',
    ]);
    assert.equal(app.limiter.memory.size, 0);
    gate.resolve();
    assert.deepEqual((await Promise.all(held)).map((r) => r.status), [200, 200]);
    await Promise.all([app.rec.release(0), app.rec.release(1)]);
    assert.equal((await get(app.url)).status, 200);
    assert.equal(app.limiter.stats.denied, 2);
  } finally {
    gate.resolve();
    await app.close();
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  }
});

test("the README's adaptive concurrency example runs: a gradient2 limit of 20 to start", async () => {
  const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const readme = readFileSync(path.join(pkg, 'README.md'), 'utf8');
  const m = /## Adaptive concurrency\n[\s\S]*?```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, 'README.md has "## Adaptive concurrency" and its js block');
  // Its Redis and port put to this test's, and a timeout a busy machine does not fail open; run
  // in the package's folder (it imports the package by name).
  const port = await freePort();
  let code = m[1];
  for (const [from, to] of [
    ['createClient({ RESP: 3,', `createClient({ url: ${JSON.stringify(redis.url)}, RESP: 3,`],
    ['app.listen(3000);', `app.listen(${port}, '127.0.0.1', () => console.log('listening'));`],
    ["key: () => 'api',", "key: () => 'api', timeout: 5000,"],
  ]) {
    assert.ok(code.includes(from), from);
    code = code.replace(from, to);
  }
  const child = spawn(process.execPath, ['--input-type=module', '--eval', code], { cwd: pkg, stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise((resolve, reject) => {
      child.stdout.on('data', (d) => String(d).includes('listening') && resolve());
      child.once('exit', (c) => reject(new Error(`the example exited (${c})`)));
    });
    const res = await get(`http://127.0.0.1:${port}`);
    assert.deepEqual(limitFields(res).slice(0, 6), [
      200, '"api-inflight";q=20;qu="concurrent-requests"', '"api-inflight";r=19', '20', '19', '30',
    ]);
    const info = await inspect('rl:http:api');
    assert.deepEqual([info.adaptive, info.start, info.min, info.max], ['gradient2', 20, 4, 200]);
  } finally {
    child.kill();
  }
});
