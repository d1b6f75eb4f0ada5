// The middleware's skip(req, res) over real HTTP (Express 5 on node:http), as
// express-rate-limit's: a health check and an internal caller pass unlimited, with no round
// trip and no fields, while the same limit refuses everyone else; skip may answer with a
// promise; a skip that throws or rejects is the application's error.

import assert from 'node:assert/strict';
import { ServerResponse } from 'node:http';
import { test } from 'node:test';
import express from 'express';
import { rateLimitMiddleware } from '../index.js';
import { PATIENT, calls, clocks, get, limitFields, memoryLogger, serve, serverForFile } from './helpers.js';

const { client } = await serverForFile();
const NO_FIELDS = [undefined, undefined, undefined, undefined, undefined, undefined];

/** An Express app behind the middleware with `skip`: GET /health answers ok, GET / hello. */
async function app(prefix, skip) {
  const clock = await clocks(client);
  const limit = rateLimitMiddleware({
    ...PATIENT,
    client,
    limit: { algorithm: 'gcra', burst: 2, rate: 1, period: '1m' },
    key: (req) => req.get('X-Client-Id'),
    prefix,
    now: () => clock.ms,
    logger: memoryLogger(),
    skip,
  });
  const express5 = express();
  express5.use(limit);
  express5.get('/health', (req, res) => res.send('ok'));
  express5.get('/', (req, res) => res.send('hello'));
  // Express's own error handler would print the error: answer 500 with its message instead.
  express5.use((err, req, res, next) => res.status(500).send(err.message));
  const server = await serve(express5);
  return { server, limiter: limit.limiter, call: (path, headers) => get(server.url, path, headers) };
}

test('skip: health checks and internal callers pass unlimited, with no round trip and no fields', async () => {
  const seen = [];
  const { server, limiter, call } = await app('rl:skip:', (req, res) => {
    seen.push(res instanceof ServerResponse && !res.headersSent);
    return req.path === '/health' || req.get('X-Internal') === 'yes';
  });
  try {
    const before = await calls(client, 'RL.GCRA');
    const limited = [];
    for (let i = 0; i < 3; i++) limited.push(await call('/', { 'X-Client-Id': 'alice' }));
    assert.deepEqual(limited.map((r) => r.status), [200, 200, 429]);
    assert.ok(limited.every((r) => r.headers['ratelimit-policy'] !== undefined && r.headers.ratelimit !== undefined));
    // alice is refused on /, yet her health checks, and an internal caller on /, pass as if
    // there were no limit: no fields, not counted, nothing asked of Redis.
    for (let i = 0; i < 3; i++) {
      const health = await call('/health', { 'X-Client-Id': 'alice' });
      assert.deepEqual(limitFields(health), [200, ...NO_FIELDS]);
      assert.equal(health.body, 'ok');
      const internal = await call('/', { 'X-Client-Id': 'alice', 'X-Internal': 'yes' });
      assert.deepEqual(limitFields(internal), [200, ...NO_FIELDS]);
      assert.equal(internal.body, 'hello');
    }
    assert.equal(await calls(client, 'RL.GCRA'), before + 3);
    assert.deepEqual([limiter.stats.calls, limiter.stats.admitted, limiter.stats.denied], [3, 2, 1]);
    assert.equal((await call('/', { 'X-Client-Id': 'alice' })).status, 429, 'still refused where not skipped');
    // skip was given each request's response, before anything was sent.
    assert.deepEqual(seen, Array(10).fill(true));
  } finally {
    await server.close();
  }
});

test('skip may answer with a promise (an allow-list looked up elsewhere)', async () => {
  const allowed = new Set(['partner']);
  const { server, limiter } = await app('rl:skip-async:', async (req) => allowed.has(req.get('X-Client-Id')));
  const call = (id) => get(server.url, '/', { 'X-Client-Id': id });
  try {
    for (let i = 0; i < 4; i++) assert.deepEqual(limitFields(await call('partner')), [200, ...NO_FIELDS]);
    assert.deepEqual([(await call('bob')).status, (await call('bob')).status, (await call('bob')).status], [200, 200, 429]);
    assert.equal(limiter.stats.calls, 3);
  } finally {
    await server.close();
  }
});

test("a skip that throws or rejects is the application's error (next(error)); skip must be a function", async () => {
  const { server, limiter, call } = await app('rl:skip-error:', (req) => {
    if (req.get('X-Client-Id') === 'sync') throw new Error('skip threw');
    return Promise.reject(new Error('skip rejected'));
  });
  try {
    for (const [id, body] of [['sync', 'skip threw'], ['async', 'skip rejected']]) {
      const r = await call('/', { 'X-Client-Id': id });
      assert.deepEqual([r.status, r.body, r.headers['ratelimit-policy']], [500, body, undefined]);
    }
    assert.equal(limiter.stats.calls, 0);
  } finally {
    await server.close();
  }
  assert.throws(() => rateLimitMiddleware({ client, limit: { policy: 'api' }, skip: true }),
    /^TypeError: invalid skip: expected a function \(req, res\) => boolean; got true$/);
});
