// Redis stops answering mid-traffic: SIGSTOP (a hang, so the timeout) and then SIGKILL
// (connection refused). Fail open passes with no rate-limit fields; fail closed answers 503 with
// its problem body. Either way one warning per failure and the counters. On node-redis's client
// and on ioredis's (its offline queue off).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rateLimitMiddleware } from '../index.js';
import { T0_MS, connect, connectIoredis, helloApp, limitFields, memoryLogger, startRedis } from './helpers.js';

const PROBLEM_503 =
  '{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",' +
  '"title":"Rate limiter unavailable","status":503}';
const NO_FIELDS = [undefined, undefined, undefined, undefined, undefined, undefined];

async function scenario(failMode, kind) {
  const redis = await startRedis();
  const admin = await connect(redis);
  await admin.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  admin.destroy();
  const client = kind === 'ioredis' ? await connectIoredis(redis, { retryStrategy: () => 50 }) : await connect(redis);
  const logger = memoryLogger();
  const limit = rateLimitMiddleware({
    client,
    limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
    key: (req) => req.get('X-Client-Id'),
    // Patient while Redis answers: an answer that took over 50 ms on a loaded machine would fail
    // the request that expects it. The hang below is met with 50 ms.
    timeout: 60_000,
    failMode,
    logger,
  });
  const { http, as } = await helloApp(limit);
  const stats = limit.limiter.stats;
  try {
    // Traffic while Redis answers.
    for (const r of [4, 3]) {
      assert.deepEqual(limitFields(await as('alice')), [
        200, '"default";q=5;w=30', `"default";r=${r};t=6`, '5', `${r}`, `${(5 - r) * 6}`, undefined,
      ]);
    }
    const expectFailure = async (what) => {
      const started = performance.now();
      const res = await as('alice');
      const waited = performance.now() - started;
      if (failMode === 'open') {
        assert.deepEqual(limitFields(res), [200, ...NO_FIELDS], what);
        assert.equal(res.body, 'hello');
      } else {
        assert.deepEqual(limitFields(res), [503, ...NO_FIELDS], what);
        assert.equal(res.headers['content-type'], 'application/problem+json');
        assert.equal(res.body, PROBLEM_503);
      }
      return waited;
    };

    // A hang: every request waits the timeout (50 ms), then fails as configured. That it is
    // answered at all, Redis stopped, is the timeout's doing; how soon after, the machine's load
    // decides, so only the lower bound is asserted.
    limit.limiter.timeout = 50;
    redis.pause();
    for (let i = 0; i < 3; i++) {
      const waited = await expectFailure(`hang ${i}`);
      assert.ok(waited >= 45, `answered after ${waited} ms`);
    }
    assert.equal(stats.failures, 3);
    assert.equal(logger.lines.length, 3);
    assert.match(logger.lines[0], /^ratelimit: RL\.GCRA for "rl:http:alice" failed \(no answer from Redis within 50 ms\); fail (open|closed)/);

    // Gone: connection refused (either client fails at once without its offline queue).
    await redis.stop();
    for (let i = 0; i < 3; i++) await expectFailure(`gone ${i}`);
    assert.equal(stats.failures, 6);
    assert.equal(logger.lines.length, 6);
    assert.equal(stats.failOpen, failMode === 'open' ? 6 : 0);
    assert.equal(stats.failClosed, failMode === 'closed' ? 6 : 0);
    assert.equal(stats.admitted, 2);
  } finally {
    await http.close();
    if (kind === 'ioredis') client.disconnect();
    else client.destroy();
    await redis.stop();
  }
}

for (const kind of ['node-redis', 'ioredis']) {
  test(`fail open: a hung and then a dead Redis lets requests through, logged and counted (${kind})`, () =>
    scenario('open', kind));

  test(`fail closed: a hung and then a dead Redis answers 503, logged and counted (${kind})`, () =>
    scenario('closed', kind));
}
