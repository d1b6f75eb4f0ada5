// A failover through the package, as an application meets it (docs/cluster.md, Failover): a
// primary with the module, its replica and three real Sentinels (the server binary in sentinel
// mode, as Debian's redis-sentinel package links it); a RateLimit on node-redis's Sentinel client
// (createSentinel) spends the quota of 20 fixed windows of 100, failing closed; the primary is
// killed (SIGKILL) halfway, Sentinel promotes the replica, and a new server is made its replica
// as an operator would. The limit follows the new primary by itself; with `durable: 1` no key is
// admitted past its limit. And `durable` with no replica in time fails as configured.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { createClient, createSentinel } from 'redis';
import { RateLimit } from '../index.js';
import { T0_MS, freePort, memoryLogger, serverForFile, startRedis } from './helpers.js';

const KEYS = 20;
const LIMIT = 100;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A client of one node, for the test's own commands. */
async function plain(port) {
  const c = createClient({ url: `redis://127.0.0.1:${port}`, disableOfflineQueue: true });
  c.on('error', () => {});
  await c.connect();
  return c;
}

/** A Sentinel process watching `main` at `primary`, stopped by its PID. */
async function startSentinel(primary) {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-sentinel-'));
  const conf = path.join(dir, 'sentinel.conf');
  writeFileSync(conf, `port ${port}\nbind 127.0.0.1\ndir ${dir}\nlogfile sentinel.log\n` +
    `sentinel monitor main 127.0.0.1 ${primary} 2\nsentinel down-after-milliseconds main 2000\n` +
    'sentinel failover-timeout main 10000\n');
  const child = spawn(process.env.RATELIMIT_SERVER || 'redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  for (let i = 0; i < 200; i++) {
    try {
      const c = await plain(port);
      c.destroy();
      break;
    } catch {
      await sleep(25);
    }
  }
  const sentinel = {
    port,
    async master() {
      const c = await plain(port);
      try {
        const fields = await c.sendCommand(['SENTINEL', 'master', 'main']);
        const map = {};
        for (let i = 0; i + 1 < fields.length; i += 2) map[String(fields[i])] = String(fields[i + 1]);
        return map;
      } finally {
        c.destroy();
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        process.kill(child.pid, 'SIGKILL');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return sentinel;
}

async function watched() {
  const primary = await startRedis();
  const replica = await startRedis();
  const spares = [];
  for (const s of [primary, replica]) {
    const c = await plain(s.port);
    await c.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    if (s === replica) {
      await c.sendCommand(['REPLICAOF', '127.0.0.1', `${primary.port}`]);
      for (let i = 0; i < 800 && !/master_link_status:up/.test(String(await c.sendCommand(['INFO', 'replication']))); i++) await sleep(25);
    }
    c.destroy();
  }
  // Online as the primary sees it: after a diskless sync it streams nothing to the replica until
  // the replica's first REPLCONF ACK (docs/cluster.md, Failover).
  const p = await plain(primary.port);
  for (let i = 0; i < 800 && !/slave0:.*state=online/.test(String(await p.sendCommand(['INFO', 'replication']))); i++) await sleep(25);
  p.destroy();
  const sentinels = [];
  for (let i = 0; i < 3; i++) sentinels.push(await startSentinel(primary.port));
  for (let i = 0; i < 800; i++) {
    const masters = await Promise.all(sentinels.map((s) => s.master()));
    if (masters.every((m) => m['num-slaves'] === '1' && m['num-other-sentinels'] === '2')) break;
    await sleep(25);
  }
  const stop = async () => {
    for (const s of [...sentinels, ...spares, primary, replica]) await s.stop();
  };
  return { primary, replica, sentinels, spares, stop };
}

/** Every key's quota spent through a RateLimit on the Sentinel client, the primary killed halfway. */
async function spendAcrossAFailover(durable) {
  const setup = await watched();
  const { primary, replica, sentinels, spares } = setup;
  const client = createSentinel({
    name: 'main',
    sentinelRootNodes: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
  });
  client.on('error', () => {});
  await client.connect();
  const limiter = new RateLimit({
    client, limit: { algorithm: 'fixedwindow', limit: LIMIT, window: '1h' }, failMode: 'closed', durable,
    timeout: 1000, denialMemory: 0, logger: memoryLogger(),
  });
  const admitted = new Array(KEYS).fill(0);
  const full = new Array(KEYS).fill(false);
  let killed = false;
  // Once Sentinel names the replica primary, the operator gives it a replica of its own
  // (watched apart from the requests, which take up to the timeout each while none answers).
  let attached;
  const attachSpare = async () => {
    for (let i = 0; i < 1200; i++) {
      const m = await sentinels[0].master().catch(() => ({}));
      if (Number(m.port) === replica.port) break;
      await sleep(25);
    }
    const spare = await startRedis();
    spares.push(spare);
    const c = await plain(spare.port);
    await c.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    await c.sendCommand(['REPLICAOF', '127.0.0.1', `${replica.port}`]);
    c.destroy();
  };
  const started = Date.now();
  try {
    while (!full.every(Boolean)) {
      assert.ok(Date.now() - started < 90_000, `not done: ${admitted} ${JSON.stringify(limiter.stats)}`);
      for (let k = 0; k < KEYS; k++) {
        if (full[k]) continue;
        const d = await limiter.check(`k${k}`);
        if (d.allowed) admitted[k] += 1;
        else if (!d.failed) full[k] = true;
        if (!killed && admitted.reduce((a, b) => a + b, 0) >= (KEYS * LIMIT) / 2) {
          await primary.stop();
          killed = true;
          attached = attachSpare();
        }
      }
    }
    await attached;
    assert.ok(killed);
    assert.equal(Number((await sentinels[0].master()).port), replica.port);
    return { over: admitted.map((a) => a - LIMIT), stats: limiter.stats };
  } finally {
    await client.close().catch(() => {});
    await setup.stop();
  }
}

test('the limit follows the promoted replica through the Sentinel client', async () => {
  const { over, stats } = await spendAcrossAFailover(0);
  // Every key's quota was spent to the end (the loop ends only then) on the new primary; what
  // failed, failed closed, while no node was primary.
  assert.equal(stats.failures, stats.failClosed);
  console.log(`without durable: ${over.filter((o) => o > 0).length} of ${KEYS} keys over; ${stats.failures} requests failed closed`);
});

test('with durable: 1 no key is admitted past its limit across the failover', async () => {
  const { over, stats } = await spendAcrossAFailover(1);
  assert.ok(over.every((o) => o <= 0), String(over));
  console.log(`durable: at most ${Math.max(...over)} over; ${stats.notDurable} admissions not acknowledged`);
});

test('durable with no replica in time: the admission fails as configured, the refusal stands', async () => {
  const { client } = await serverForFile();
  for (const [failMode, allowed] of [['closed', false], ['open', true]]) {
    const limiter = new RateLimit({
      client, limit: { algorithm: 'fixedwindow', limit: 1, window: '1h' }, failMode, durable: 1, durableTimeoutMs: 10,
      timeout: 1000, prefix: `durable:${failMode}:`, logger: memoryLogger(),
    });
    const first = await limiter.check('k');
    assert.deepEqual([first.failed, first.allowed, first.error?.name, limiter.stats.notDurable], [true, allowed, 'NotDurableError', 1]);
    // The write happened on the primary (only a replica's copy is missing): the next is refused.
    const second = await limiter.check('k');
    assert.deepEqual([second.failed, second.allowed, limiter.stats.notDurable], [undefined, false, 1]);
  }
});

