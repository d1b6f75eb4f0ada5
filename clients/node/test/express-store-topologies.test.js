// RedisModuleStore behind express-rate-limit over node-redis's cluster client (createCluster)
// and ioredis's (Cluster), on two 3-primary clusters of startCluster, one with the module on its debug clock and one
// without (the script backend, on the scripts' test-only clock): keys on every node, each
// request one call on its key's node (INFO commandstats of each node), decrement, get and
// resetKey (DEL) by the key's slot; and over node-redis's Sentinel client (createSentinel), a
// real Sentinel process watching a primary with the module; and over ioredis's standalone
// client.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Cluster } from 'ioredis';
import { createSentinel } from 'redis';
import { RedisModuleStore } from '../express-rate-limit.js';
import { TEST_NOW } from '../lib/scripts.cjs';
import { app, inWindow } from './express-store-app.js';
import { PATIENT, T0_MS, calls, connect, connectIoredis, freePort, quiet, startCluster, startRedis } from './helpers.js';

const stacks = {}; // 'module' and 'script': startCluster's { direct, cluster, nodeOf, calls, ... }

before(async () => {
  [stacks.module, stacks.script] = await Promise.all([startCluster(), startCluster({ withModule: false })]);
  for (const c of stacks.module.direct) await c.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  // ioredis's Cluster on each, ready (its slots known).
  for (const s of Object.values(stacks)) {
    s.io = new Cluster([{ host: '127.0.0.1', port: s.nodes[0].port }]);
    s.io.on('error', () => {});
    await new Promise((resolve) => s.io.once('ready', resolve));
  }
});

after(async () => {
  for (const s of Object.values(stacks)) s?.io?.disconnect();
  await Promise.all(Object.values(stacks).map((s) => s?.stop()));
});

/** Three application keys, one whose Redis key (`prefix` + key) is on each node, in node order. */
async function keysOnEveryNode(kind, prefix) {
  const keys = [];
  for (let i = 0; keys.filter(Boolean).length < 3; i++) {
    const node = await stacks[kind].nodeOf(`${prefix}k${i}`);
    keys[node] ??= `k${i}`;
  }
  return keys;
}

for (const [kind, using] of [['module', 'node-redis'], ['script', 'node-redis'], ['module', 'ioredis'], ['script', 'ioredis']]) {
  test(`a cluster (${kind}, ${using}): each request one call on its key's node, all three nodes`, async () => {
    const s = stacks[kind];
    const prefix = `rl:erlc:${kind}:${using}:`;
    const client = using === 'ioredis' ? s.io : s.cluster;
    const store = new RedisModuleStore({ client, prefix, ...PATIENT, logger: quiet });
    if (kind === 'script') store[TEST_NOW] = () => T0_MS * 1000;
    const a = await app({ windowMs: 60_000, limit: 2, store });
    try {
      const keys = await keysOnEveryNode(kind, prefix);
      const command = kind === 'module' ? 'rl.counter' : 'evalsha';
      for (const [node, key] of keys.entries()) {
        const before = await Promise.all([0, 1, 2].map((i) => s.calls(i, command)));
        const statuses = [];
        for (let i = 0; i < 4; i++) {
          const r = await a.as(key);
          statuses.push([r.status, r.headers['x-ratelimit-remaining']]);
        }
        assert.deepEqual(statuses, [[200, '1'], [200, '0'], [429, '0'], [429, '0']], `key ${key} on node ${node}`);
        const afterCalls = await Promise.all([0, 1, 2].map((i) => s.calls(i, command)));
        assert.deepEqual(afterCalls.map((n, i) => n - before[i]), [0, 1, 2].map((i) => (i === node ? 4 : 0)));
        assert.equal((await store.get(key))?.totalHits, 4);
        await store.decrement(key);
        assert.equal((await store.get(key))?.totalHits, 3);
        await a.limiter.resetKey(key);
        assert.equal(await s.direct[node].exists(`${prefix}${key}`), 0);
        assert.equal(await store.get(key), undefined);
      }
      assert.equal(store.stats.backend, kind);
    } finally {
      await a.close();
    }
  });
}

/** A Sentinel process watching `main` at 127.0.0.1:`primary` (quorum 1), stopped by its PID. */
async function startSentinel(primary) {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-erl-sentinel-'));
  const conf = path.join(dir, 'sentinel.conf');
  writeFileSync(conf, `port ${port}\nbind 127.0.0.1\ndir ${dir}\nsentinel monitor main 127.0.0.1 ${primary} 1\n`);
  const child = spawn(process.env.RATELIMIT_SERVER || 'redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once('exit', r));
      process.kill(child.pid, 'SIGKILL');
      await gone;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready when it names the primary (SENTINEL get-master-addr-by-name answers its port).
  for (;;) {
    assert.equal(child.exitCode, null, 'Sentinel exited');
    const named = await new Promise((resolve) => {
      const sock = net.connect(port, '127.0.0.1');
      let data = '';
      sock.once('connect', () => sock.write('SENTINEL get-master-addr-by-name main\r\n'));
      sock.on('data', (d) => {
        data += d;
        if (data.includes(`${primary}\r\n`) || data.startsWith('*-1') || data.startsWith('-')) {
          sock.destroy();
          resolve(data.includes(`${primary}\r\n`));
        }
      });
      sock.once('error', () => resolve(false));
    });
    if (named) return { port, stop };
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a Sentinel client: the store on the primary Sentinel names', async () => {
  const primary = await startRedis();
  const direct = await connect(primary);
  const sentinel = await startSentinel(primary.port);
  const client = createSentinel({ name: 'main', sentinelRootNodes: [{ host: '127.0.0.1', port: sentinel.port }] });
  client.on('error', () => {});
  try {
    await client.connect();
    await direct.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const a = await app({
      windowMs: 60_000, limit: 2, standardHeaders: 'draft-7',
      store: new RedisModuleStore({ client, ...PATIENT, logger: quiet }),
    });
    try {
      const before = await calls(direct, 'rl.counter');
      const seen = [];
      const since = performance.now();
      for (let i = 0; i < 3; i++) seen.push(inWindow(await a.as('s'), 60_000, since));
      assert.deepEqual(seen.map((r) => [r.status, r.headers.ratelimit]), [
        [200, 'limit=2, remaining=1, reset=60'], [200, 'limit=2, remaining=0, reset=60'], [429, 'limit=2, remaining=0, reset=60'],
      ]);
      assert.equal(await calls(direct, 'rl.counter') - before, 3);
      assert.equal(await direct.exists('rl:erl:s'), 1);
    } finally {
      await a.close();
    }
  } finally {
    await client.close().catch(() => {});
    direct.destroy();
    await sentinel.stop();
    await primary.stop();
  }
});

test("ioredis's standalone client: the store's one call a request, its keys under ioredis's keyPrefix", async () => {
  const redis = await startRedis();
  const direct = await connect(redis);
  // ioredis's keyPrefix would prefix DEL's and a script's keys but not a module command's: the
  // package puts it before every key itself, once (docs/node.md, "ioredis"), on each call.
  const client = await connectIoredis(redis, { keyPrefix: 'io:' });
  try {
    await direct.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    const store = new RedisModuleStore({ client, ...PATIENT, logger: quiet });
    const a = await app({ windowMs: 60_000, limit: 2, standardHeaders: 'draft-7', store });
    try {
      const before = await calls(direct, 'rl.counter');
      const seen = [];
      const since = performance.now();
      for (let i = 0; i < 3; i++) seen.push(inWindow(await a.as('i'), 60_000, since));
      assert.deepEqual(seen.map((r) => [r.status, r.headers.ratelimit]), [
        [200, 'limit=2, remaining=1, reset=60'], [200, 'limit=2, remaining=0, reset=60'], [429, 'limit=2, remaining=0, reset=60'],
      ]);
      assert.equal(await calls(direct, 'rl.counter') - before, 3);
      assert.deepEqual([await direct.exists('io:rl:erl:i'), await direct.exists('rl:erl:i')], [1, 0]);
      assert.equal((await store.get('i'))?.totalHits, 3);
      await store.decrement('i');
      assert.equal((await store.get('i'))?.totalHits, 2);
      await store.resetKey('i');
      assert.deepEqual(await direct.keys('*'), []);
    } finally {
      await a.close();
    }
  } finally {
    client.disconnect();
    direct.destroy();
    await redis.stop();
  }
});
