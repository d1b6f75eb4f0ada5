// RateLimit, the Express middleware and RateLimiterRedis over a cluster client, node-redis's
// (createCluster) and then ioredis's (Cluster, the clusters emptied between the two), on two 3-primary clusters of startCluster: one WITH the module on its debug
// clock, one WITHOUT (the script backend, on the scripts' test-only clock, NOW). On each: backend
// "auto" picks the right backend; every algorithm admitted then refused with exact values, keys
// on all three nodes; a policy with rules (on the module RL.POLICY.SET sent once, to the node of
// the first key, the module spreading it over the cluster bus, RL.LIMIT answered on every node;
// on the scripts its rule keys share one slot); refunds; concurrency leases; `durable: 1`, whose
// WAIT goes to the key's node after the command (no replicas: NotDurableError, fail closed);
// the middleware (200, 200, 429); RateLimiterRedis (its MULTIs to the key's node); and on the
// scripts, NOSCRIPT after SCRIPT FLUSH on one node answered by SCRIPT LOAD on that node.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Cluster } from 'ioredis';
import { RateLimit, RateLimiterRedis, rateLimitMiddleware } from '../index.js';
import { TEST_NOW, ruleKeys, scripts } from '../lib/scripts.cjs';
import { PATIENT, T0_MS, helloApp, memoryLogger, quiet, refusal, startCluster, ttlWithin } from './helpers.js';

const stacks = {}; // 'module' and 'script': startCluster's { direct, cluster, nodeOf, calls, ... }

before(async () => {
  [stacks.module, stacks.script] = await Promise.all([startCluster(), startCluster({ withModule: false })]);
  // The debug clock of every node of the module's cluster at T0 (it stays there).
  for (const c of stacks.module.direct) await c.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  // ioredis's Cluster on each, ready (its slots known).
  for (const stack of Object.values(stacks)) {
    stack.io = new Cluster([{ host: '127.0.0.1', port: stack.nodes[0].port }]);
    stack.io.on('error', () => {});
    await new Promise((resolve) => stack.io.once('ready', resolve));
  }
});

after(async () => {
  for (const stack of Object.values(stacks)) stack?.io?.disconnect();
  await Promise.all(Object.values(stacks).map((s) => s?.stop()));
});

const BACKENDS = ['module', 'script'];
const CLIENTS = ['node-redis', 'ioredis'];
let using = 'node-redis'; // the client kind of the tests running now (each describe's before sets it)

/** The cluster client of the kind in use on `kind`'s cluster. */
const clusterOf = (kind) => (using === 'ioredis' ? stacks[kind].io : stacks[kind].cluster);

/** A RateLimit over `kind`'s cluster client at T0 (the scripts' clock through TEST_NOW). */
function limiter(kind, options) {
  const l = new RateLimit({ client: clusterOf(kind), denialMemory: 0, timeout: 1000, logger: quiet, ...options });
  if (kind === 'script') l[TEST_NOW] = () => T0_MS * 1000;
  return l;
}

/** Three application keys `base:i`, one whose Redis key (`prefix` + key) is on each node, in node order. */
async function keysOnEveryNode(kind, base, prefix = 'rl:http:') {
  const keys = [];
  for (let i = 0; keys.filter(Boolean).length < 3; i++) {
    const node = await stacks[kind].nodeOf(`${prefix}${base}:${i}`);
    keys[node] ??= `${base}:${i}`;
  }
  return keys;
}

/** The nodes (0, 1, 2) on which `key` exists (a node not serving its slot answers MOVED: not there). */
async function whereIs(kind, key) {
  const found = [];
  for (const [i, c] of stacks[kind].direct.entries()) {
    const there = await c.sendCommand(['EXISTS', key]).catch((error) => {
      if (!String(error?.message).startsWith('MOVED')) throw error;
      return 0;
    });
    if (Number(there) === 1) found.push(i);
  }
  return found;
}

/** Calls of `command` on each node so far. */
const callsOnNodes = (kind, command) => Promise.all([0, 1, 2].map((i) => stacks[kind].calls(i, command)));
const minus = (a, b) => a.map((x, i) => x - b[i]);

// Three checks at T0 of a fresh key: [allowed, limit, remaining, retryAfterMs, resetAfterMs,
// moreAfterMs], the module's values (the scripts answer the same).
const LIMITS = {
  gcra: [{ algorithm: 'gcra', burst: 2, rate: 1, period: '1s' }, [
    [true, 2, 1, 0, 1000, 1000], [true, 2, 0, 0, 2000, 1000], [false, 2, 0, 1000, 2000, undefined]]],
  tokenbucket: [{ algorithm: 'tokenbucket', capacity: 2, refillAmount: 1, refillPeriod: '1s' }, [
    [true, 2, 1, 0, 1000, 1000], [true, 2, 0, 0, 2000, 1000], [false, 2, 0, 1000, 2000, undefined]]],
  leakybucket: [{ algorithm: 'leakybucket', capacity: 2, leakAmount: 1, leakPeriod: '1s' }, [
    [true, 2, 1, 0, 1000, 1000], [true, 2, 0, 0, 2000, 1000], [false, 2, 0, 1000, 2000, undefined]]],
  fixedwindow: [{ algorithm: 'fixedwindow', limit: 2, window: '10s' }, [
    [true, 2, 1, 0, 10_000, 10_000], [true, 2, 0, 0, 10_000, 10_000], [false, 2, 0, 10_000, 10_000, undefined]]],
  slidingwindow: [{ algorithm: 'slidingwindow', limit: 2, window: '10s' }, [
    [true, 2, 1, 0, 10_001, 10_001], [true, 2, 0, 0, 15_001, 10_001], [false, 2, 0, 10_001, 15_001, undefined]]],
  slidinglog: [{ algorithm: 'slidinglog', limit: 2, window: '10s' }, [
    [true, 2, 1, 0, 10_000, 10_000], [true, 2, 0, 0, 10_000, 10_000], [false, 2, 0, 10_000, 10_000, undefined]]],
  // Cold: a rate of 1 per second (2 / coldFactor).
  warmup: [{ algorithm: 'warmup', rate: 2, period: '1s', warmup: '5s', coldFactor: 2 }, [
    [true, 1, 0, 0, 1392, 963], [false, 1, 0, 963, 1392, undefined], [false, 1, 0, 963, 1392, undefined]]],
  concurrency: [{ algorithm: 'concurrency', limit: 2, lease: '30s' }, [
    [true, 2, 1, 0, 30_000, undefined], [true, 2, 0, 0, 30_000, undefined], [false, 2, 0, 30_000, 30_000, undefined]]],
};
const fields = (d) => [d.allowed, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs, d.moreAfterMs];

const POLICY = {
  policy: 'p',
  rules: [{ algorithm: 'gcra', burst: 2, rate: 1, period: '1s' }, { algorithm: 'fixedwindow', limit: 5, window: '10s' }],
};

for (const client of CLIENTS) {
  describe(client, () => {
    // Each kind of client on clusters of its own keys: emptied before the next kind's tests.
    before(async () => {
      using = client;
      for (const stack of Object.values(stacks)) {
        for (const c of stack.direct) await c.sendCommand(['FLUSHALL']);
      }
    });

    for (const kind of BACKENDS) {
      test(`${client}, ${kind}: backend "auto" over the cluster client picks the ${kind === 'module' ? 'module' : 'scripts'}, logged once`, async () => {
        const lines = [];
        const l = new RateLimit({
          ...PATIENT,
          client: clusterOf(kind), limit: LIMITS.gcra[0], logger: { warn: (s) => lines.push(`warn ${s}`), info: (s) => lines.push(`info ${s}`) },
        });
        assert.equal(l.cluster, true);
        assert.equal(await l.resolveBackend(), kind);
        assert.equal(l.stats.backend, kind);
        assert.deepEqual(lines, [kind === 'module'
          ? 'info ratelimit: the server has the ratelimit module; using the module'
          : 'info ratelimit: the server has no ratelimit module; using the script backend']);
      });

      test(`${client}, ${kind}: every algorithm admitted then refused, exact values, keys on all three nodes`, async () => {
        for (const [name, [limit, expected]] of Object.entries(LIMITS)) {
          const l = limiter(kind, { limit, prefix: `rl:${name}:` });
          const keys = await keysOnEveryNode(kind, 'k', `rl:${name}:`);
          for (const [node, key] of keys.entries()) {
            const got = [];
            for (let i = 0; i < 3; i++) {
              const d = await l.check(key);
              assert.equal(d.failed, undefined, `${name} ${key}: ${d.error}`);
              got.push(fields(d));
              if (name === 'leakybucket') assert.equal(d.delayMs, [0, 1000, -1][i], `${name} delay ${i}`);
              if (name === 'concurrency') assert.equal(typeof d.token, d.allowed ? 'string' : 'undefined');
            }
            assert.deepEqual(got, expected, `${name} on node ${node}`);
            assert.deepEqual(await whereIs(kind, l.redisKey(key)), [node], `${name}: the key lives on its node alone`);
          }
          assert.equal(l.stats.failures, 0);
        }
      });

      test(`${client}, ${kind}: a policy with rules, answered on every node`, async () => {
        const before = { set: await callsOnNodes(kind, 'rl.policy.set'), limit: await callsOnNodes(kind, 'rl.limit') };
        const l = limiter(kind, { limit: POLICY, prefix: 'rl:pol:' });
        const keys = await keysOnEveryNode(kind, 'k', 'rl:pol:');
        for (const [n, key] of keys.entries()) {
          const got = [];
          for (let i = 0; i < 3; i++) {
            const d = await l.check(key);
            assert.equal(d.failed, undefined, `${key}: ${d.error}`);
            got.push([...fields(d), d.rule, d.name]);
          }
          assert.deepEqual(got, [
            [true, 2, 1, 0, 1000, 1000, 0, 'p/0'], [true, 2, 0, 0, 2000, 1000, 0, 'p/0'], [false, 2, 0, 1000, 2000, undefined, 0, 'p/0'],
          ], `node ${n}`);
          assert.equal(await l.refund(key, 1), 1);
          assert.equal((await l.check(key)).allowed, true, 'admitted again after the refund');
          if (kind === 'module') {
            // The policy spreads from the node it was set on over the cluster bus, at once; waited
            // for here so that the next node's RL.LIMIT cannot come before it (a setup wait).
            for (const c of stacks.module.direct) {
              const deadline = Date.now() + 5000;
              while ((await c.sendCommand(['RL.POLICY.GET', 'p'])) === null) {
                assert.ok(Date.now() < deadline, 'the policy did not reach every node');
                await new Promise((r) => setTimeout(r, 10));
              }
            }
          } else {
            // The rule keys share a hash tag, so a slot: one node, the key's.
            for (const rk of ruleKeys(l.redisKey(key), 2)) assert.deepEqual(await whereIs(kind, rk), [n], rk);
          }
        }
        if (kind === 'module') {
          // RL.POLICY.SET once, on the node of the first key; RL.LIMIT on every node: 3 checks, the 2
          // admitted ones' DRYRUN probes (moreAfterMs), the check after the refund and its probe.
          assert.deepEqual(minus(await callsOnNodes(kind, 'rl.policy.set'), before.set), [1, 0, 0]);
          assert.deepEqual(minus(await callsOnNodes(kind, 'rl.limit'), before.limit), [7, 7, 7]);
        } else {
          assert.deepEqual(await callsOnNodes(kind, 'rl.policy.set'), [0, 0, 0]);
        }
      });

      test(`${client}, ${kind}: refund and concurrency leases on every node`, async () => {
        const l = limiter(kind, { limit: LIMITS.gcra[0], prefix: 'rl:refund:' });
        const lease = limiter(kind, { limit: { algorithm: 'concurrency', limit: 1, lease: '30s' }, prefix: 'rl:lease:' });
        for (const key of await keysOnEveryNode(kind, 'k', 'rl:refund:')) {
          assert.deepEqual(fields(await l.check(key, 2)), [true, 2, 0, 0, 2000, 1000]);
          assert.equal(await l.refund(key, 1, { dryRun: true }), 1);
          assert.equal(await l.refund(key, 1), 1);
          assert.deepEqual(fields(await l.check(key)), [true, 2, 0, 0, 2000, 1000]);
          assert.equal((await l.check(key)).allowed, false);
        }
        for (const key of await keysOnEveryNode(kind, 'k', 'rl:lease:')) {
          const held = await lease.check(key);
          assert.equal(held.allowed, true);
          assert.equal((await lease.check(key)).allowed, false, 'the one lease is taken');
          await lease.release(key, held);
          const again = await lease.check(key);
          assert.deepEqual([again.allowed, again.remaining], [true, 0], 'released, so taken again');
          await lease.release(key, again);
        }
        assert.deepEqual([l.stats.failures, lease.stats.releaseFailures], [0, 0]);
      });

      test(`${client}, ${kind}: durable: 1 without replicas, WAIT on the key's node after the command: NotDurableError, fail closed`, async () => {
        const l = limiter(kind, { limit: { algorithm: 'fixedwindow', limit: 1, window: '1h' }, prefix: 'rl:durable:', durable: 1, durableTimeoutMs: 10, failMode: 'closed', logger: memoryLogger() });
        for (const [node, key] of (await keysOnEveryNode(kind, 'k', 'rl:durable:')).entries()) {
          const waits = await callsOnNodes(kind, 'wait');
          const first = await l.check(key);
          assert.deepEqual([first.failed, first.allowed, first.error?.name], [true, false, 'NotDurableError']);
          assert.deepEqual(minus(await callsOnNodes(kind, 'wait'), waits), [0, 1, 2].map((i) => (i === node ? 1 : 0)), 'WAIT on the key\'s node');
          // The write happened on the primary (only a replica's copy is missing): the next is refused.
          const second = await l.check(key);
          assert.deepEqual([second.failed, second.allowed], [undefined, false]);
        }
        assert.equal(l.stats.notDurable, 3);
        if (kind === 'script') {
          // A policy's scripts run on the node of its rule keys: WAIT goes there, after them. A key
          // with a '}' and no '{' before it: its own slot and its rule keys' ('{...%7D...}') differ.
          const p = limiter(kind, { limit: { ...POLICY, policy: 'd' }, prefix: 'rl:durable:', durable: 1, durableTimeoutMs: 10, logger: memoryLogger() });
          let key;
          for (let i = 0; key === undefined; i++) {
            const k = `a}${i}`;
            if ((await stacks.script.nodeOf(p.redisKey(k))) !== (await stacks.script.nodeOf(ruleKeys(p.redisKey(k), 1)[0]))) key = k;
          }
          const node = await stacks.script.nodeOf(ruleKeys(p.redisKey(key), 1)[0]);
          const waits = await callsOnNodes(kind, 'wait');
          const d = await p.check(key);
          assert.deepEqual([d.failed, d.allowed, d.error?.name], [true, true, 'NotDurableError']);
          assert.deepEqual(minus(await callsOnNodes(kind, 'wait'), waits), [0, 1, 2].map((i) => (i === node ? 1 : 0)));
        }
      });

      test(`${client}, ${kind}: the Express middleware over the cluster client: 200, 200, 429`, async () => {
        const limit = rateLimitMiddleware({
          client: clusterOf(kind), limit: { algorithm: 'gcra', burst: 2, rate: 1, period: '1h' }, prefix: 'rl:mw:',
          key: (req) => req.get('X-Client-Id'), timeout: 1000, logger: memoryLogger(),
        });
        if (kind === 'script') limit.limiter[TEST_NOW] = () => T0_MS * 1000;
        const app = await helloApp(limit);
        try {
          for (const id of await keysOnEveryNode(kind, 'caller', 'rl:mw:')) {
            const statuses = [];
            for (let i = 0; i < 3; i++) statuses.push((await app.as(id)).status);
            assert.deepEqual(statuses, [200, 200, 429], id);
          }
        } finally {
          await app.http.close();
        }
        assert.equal(limit.limiter.stats.failures, 0);
      });

      test(`${client}, ${kind}: RateLimiterRedis over the cluster client, each command on the key's node`, async () => {
        const flex = new RateLimiterRedis({ storeClient: clusterOf(kind), points: 2, duration: 10, keyPrefix: 'flx', logger: quiet });
        if (kind === 'script') flex[TEST_NOW] = () => T0_MS * 1000;
        // msBeforeNext is the key's TTL on its node's clock (RL.COUNTER): between the window and
        // that less the real time since the key's first consume (ttlWithin), written as the window.
        const at = (res, windowMs, since) => {
          ttlWithin(res.msBeforeNext, windowMs, since, 'msBeforeNext');
          return { ...res.toJSON(), msBeforeNext: windowMs };
        };
        for (const [node, key] of (await keysOnEveryNode(kind, 'user', 'flx:')).entries()) {
          const since = performance.now();
          assert.deepEqual(at(await flex.consume(key), 10_000, since), { remainingPoints: 1, msBeforeNext: 10_000, consumedPoints: 1, isFirstInDuration: true });
          assert.deepEqual(at(await flex.consume(key), 10_000, since), { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: false });
          assert.deepEqual(at(await refusal(flex.consume(key)), 10_000, since), { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 3, isFirstInDuration: false });
          // reward: RL.COUNTER BY -1, on the key's node.
          assert.deepEqual(at(await flex.reward(key, 1), 10_000, since), { remainingPoints: 0, msBeforeNext: 10_000, consumedPoints: 2, isFirstInDuration: false });
          assert.deepEqual(await whereIs(kind, `flx:${key}`), [node]);
          // block: SET ... EX 60 on the key's node.
          const blocked = performance.now();
          await flex.block(key, 60);
          assert.deepEqual(await whereIs(kind, `flx:${key}`), [node]);
          ttlWithin((await refusal(flex.consume(key))).msBeforeNext, 60_000, blocked, 'in the block');
          assert.equal(await flex.delete(key), true);
          assert.deepEqual(await whereIs(kind, `flx:${key}`), []);
        }
      });
    }

    test(`${client}, script: NOSCRIPT after SCRIPT FLUSH on one node: SCRIPT LOAD on that node, the check answered`, async () => {
      const l = limiter('script', { limit: { algorithm: 'slidinglog', limit: 2, window: '10s' }, prefix: 'rl:flush:' });
      const keys = await keysOnEveryNode('script', 'k', 'rl:flush:');
      for (const key of keys) assert.equal((await l.check(key)).remaining, 1);
      const { sha } = scripts().slidinglog;
      for (const c of stacks.script.direct) assert.deepEqual(await c.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);
      const flushed = 1;
      await stacks.script.direct[flushed].sendCommand(['SCRIPT', 'FLUSH']);
      const [loads, evals] = [await callsOnNodes('script', 'script|load'), await callsOnNodes('script', 'evalsha')];
      for (const key of keys) {
        const d = await l.check(key);
        assert.deepEqual([d.failed, d.allowed, d.remaining], [undefined, true, 0]);
      }
      // On the flushed node: EVALSHA (NOSCRIPT), SCRIPT LOAD, EVALSHA, and each admitted check's
      // DRYRUN probe (moreAfterMs); elsewhere the check and its probe.
      assert.deepEqual(minus(await callsOnNodes('script', 'script|load'), loads), [0, 1, 0]);
      assert.deepEqual(minus(await callsOnNodes('script', 'evalsha'), evals), [2, 3, 2]);
      for (const c of stacks.script.direct) assert.deepEqual(await c.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);
    });
  });
}
