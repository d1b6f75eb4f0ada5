// A failover through the package, as an application meets it (docs/cluster.md, Failover): a
// primary with the module, its replica and three real Sentinels (the server binary in sentinel
// mode, as Debian's redis-sentinel package links it); a RateLimit on node-redis's Sentinel client
// (createSentinel; without durable, on ioredis's Sentinel setup too) spends the quota of 20 fixed windows of 20, failing closed. Halfway, once the
// replica has acknowledged everything the primary has, the replica is cut off and five keys get
// one request each that only the primary sees; then the primary is killed (SIGKILL), Sentinel
// promotes the replica, and a new server is made its replica as an operator would. The limit
// follows the new primary by itself. What the primary admitted in the cut is lost with it: without
// `durable` a key is over its limit by at most its admission in the cut; with `durable: 1` the cut
// admits nothing (no replica acknowledges) and no key is over its limit. And `durable` with no
// replica in time fails as configured, and on node-redis's Sentinel client a durable check sends
// its command and WAIT on one connection without leasing one.
//
// Every step waits for an event (a port answering, the replica's acknowledgement, Sentinel naming
// the new primary, the spare online, a decision from the new primary), never for a chosen time.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import Redis from 'ioredis';
import { createClient, createSentinel } from 'redis';
import { RateLimit } from '../index.js';
import { T0_MS, freePort, memoryLogger, respEncode, respParse, serverForFile, startRedis } from './helpers.js';

const KEYS = 20;
const LIMIT = 20;
// Keys given one request each while the replica is cut off.
const CUT = 5;
// A hang guard, not a measure: each event below comes within seconds even on a loaded 2-core
// machine (the failover: Sentinel's 5 s down-after period and about a second more); this only
// turns one that never comes into a failure that says which.
const HANG_MS = 300_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Resolves once `condition` (async) holds, polling it; a condition that throws has not held yet
 * (a server not answering yet), except an assertion's failure, which is the test's.
 */
async function until(what, condition, scenario = {}) {
  const since = Date.now();
  for (;;) {
    assert.ok(!scenario.ended, `ended while waiting for ${what}`);
    try {
      if (await condition()) return;
    } catch (error) {
      if (error instanceof assert.AssertionError) throw error;
    }
    assert.ok(Date.now() - since < HANG_MS, `hung: no ${what} in ${HANG_MS / 1000} s`);
    await sleep(20);
  }
}

/** A client of one node, for the test's own commands (no reconnection: a refused port throws). */
async function plain(port) {
  const c = createClient({ url: `redis://127.0.0.1:${port}`, disableOfflineQueue: true, socket: { reconnectStrategy: false } });
  c.on('error', () => {});
  await c.connect();
  return c;
}

/**
 * `command` on the node at `port`, over a connection of its own (a refused port throws, as does
 * an error reply). A socket, not a node-redis client: `until` polls every 20 ms, and a node-redis
 * client costs milliseconds of CPU to create (its command methods are built per client), which
 * was most of this file's CPU.
 */
function on(port, command) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let buffer = Buffer.alloc(0);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error(`port ${port}: closed before a reply`)));
    socket.once('connect', () => socket.write(respEncode(command)));
    socket.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      const reply = respParse(buffer, 0);
      if (reply === undefined) return;
      socket.destroy();
      if (reply.value instanceof Error) reject(reply.value);
      else resolve(reply.value);
    });
  });
}

/** A flat [field, value, ...] reply as an object of strings. */
function fields(flat) {
  const map = {};
  for (let i = 0; i + 1 < flat.length; i += 2) map[String(flat[i])] = String(flat[i + 1]);
  return map;
}

/** INFO replication of the node at `port`, its fields by name. */
async function replication(port) {
  const map = {};
  for (const line of String(await on(port, ['INFO', 'replication'])).split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) map[line.slice(0, colon)] = line.slice(colon + 1);
  }
  return map;
}

/** Whether the node at `port` lists a replica at `replicaPort` as online (its own view). */
async function online(port, replicaPort) {
  const info = await replication(port);
  return Object.keys(info).some((f) => /^slave\d+$/.test(f) && info[f].includes(`port=${replicaPort},state=online`));
}

/** A Sentinel process watching `main` at `primary`, stopped by its PID. */
async function startSentinel(primary) {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-sentinel-'));
  const conf = path.join(dir, 'sentinel.conf');
  // down-after-milliseconds: how long a primary does not answer before Sentinel takes it for
  // down. Long enough that a live primary on a loaded machine is never taken for down (the
  // scenario kills it at a chosen point); the test waits for the failover, whatever it takes.
  writeFileSync(conf, `port ${port}\nbind 127.0.0.1\ndir ${dir}\nlogfile sentinel.log\n` +
    `sentinel monitor main 127.0.0.1 ${primary} 2\nsentinel down-after-milliseconds main 5000\n` +
    'sentinel failover-timeout main 10000\n');
  const child = spawn(process.env.RATELIMIT_SERVER || 'redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  const sentinel = {
    port,
    async ask(...args) {
      return on(port, ['SENTINEL', ...args]);
    },
    async master() {
      return fields(await sentinel.ask('master', 'main'));
    },
    async replicas() {
      return (await sentinel.ask('replicas', 'main')).map(fields);
    },
    /** The port of the primary this Sentinel names (what a client asks it). */
    async primaryPort() {
      return Number((await sentinel.ask('get-master-addr-by-name', 'main'))[1]);
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
  try {
    await until(`Sentinel answering on port ${port}`, async () => {
      assert.ok(child.exitCode === null, `Sentinel exited (${child.exitCode})`);
      return (await on(port, ['PING'])) === 'PONG';
    });
  } catch (error) {
    await sentinel.stop();
    throw error;
  }
  return sentinel;
}

/** A primary and its replica, online, watched by three Sentinels that know both and each other. */
async function watched() {
  const primary = await startRedis();
  const replica = await startRedis();
  const sentinels = [];
  const spares = [];
  const stop = async () => {
    for (const s of [...sentinels, ...spares, primary, replica]) await s.stop();
  };
  try {
    for (const s of [primary, replica]) await on(s.port, ['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
    await on(replica.port, ['REPLICAOF', '127.0.0.1', `${primary.port}`]);
    // Online as the primary sees it: after a diskless sync it streams nothing to the replica
    // until the replica's first REPLCONF ACK (docs/cluster.md, Failover).
    await until('replica online', () => online(primary.port, replica.port));
    for (let i = 0; i < 3; i++) sentinels.push(await startSentinel(primary.port));
    // Each Sentinel knows the two others (a quorum elects a leader) and has read the replica's
    // INFO with its link up (a replica whose INFO it has not read, Sentinel does not promote).
    await until('Sentinels that know each other and the replica', async () => {
      for (const s of sentinels) {
        if ((await s.master())['num-other-sentinels'] !== '2') return false;
        const replicas = await s.replicas();
        if (replicas.length !== 1 || replicas[0]['master-link-status'] !== 'ok') return false;
      }
      return true;
    });
  } catch (error) {
    await stop();
    throw error;
  }
  return { primary, replica, sentinels, spares, stop };
}

/**
 * Every key's quota spent through a RateLimit on the Sentinel client, the primary cut off from its
 * replica and killed halfway: each key's admissions over its limit (`over`), its admissions while
 * the replica was cut off (`cut`), and the limiter's counters.
 */
async function spendAcrossAFailover(durable, kind = 'node-redis') {
  const setup = await watched();
  const { primary, replica, sentinels, spares } = setup;
  const client = kind === 'ioredis'
    ? new Redis({
      name: 'main', sentinels: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
      lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => 50,
    })
    : createSentinel({
      name: 'main',
      sentinelRootNodes: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
    });
  client.on('error', () => {});
  const limiter = new RateLimit({
    client, limit: { algorithm: 'fixedwindow', limit: LIMIT, window: '1h' }, failMode: 'closed', durable,
    timeout: 1000, denialMemory: 0, logger: memoryLogger(),
  });
  const admitted = new Array(KEYS).fill(0);
  const full = new Array(KEYS).fill(false);
  const cut = new Array(KEYS).fill(0);
  const scenario = { ended: false };
  let failover;
  let lastDecision = Date.now();
  const ask = async (k) => {
    const d = await limiter.check(`k${k}`);
    if (d.failed) {
      // A client without an offline queue fails at once while no primary is known (ioredis's):
      // the loop lets I/O and timers run (the client's reconnection) before the next request.
      await new Promise((r) => setImmediate(r));
      return 0;
    }
    lastDecision = Date.now();
    if (d.allowed) admitted[k] += 1;
    else full[k] = true;
    return d.allowed ? 1 : 0;
  };
  // One request for each key not yet refused in turn, from where the last call stopped, until
  // `done()`. A request fails (closed) while no node is primary; the hang guard wants a decision
  // now and then.
  let next = 0;
  const spend = async (done) => {
    while (!done()) {
      if (!full[next]) await ask(next);
      next = (next + 1) % KEYS;
      assert.ok(Date.now() - lastDecision < HANG_MS,
        `hung: no decision in ${HANG_MS / 1000} s: ${admitted} ${JSON.stringify(limiter.stats)}`);
    }
  };
  try {
    await client.connect();
    await spend(() => admitted.reduce((a, b) => a + b, 0) >= (KEYS * LIMIT) / 2);
    // The replica has everything the primary has: it acknowledged (WAIT, no timeout but the hang
    // guard's) a write made on the primary after all of the limiter's.
    const p = await plain(primary.port);
    await p.sendCommand(['SET', 'fence', '1']);
    assert.equal(Number(await p.sendCommand(['WAIT', '1', `${HANG_MS}`])), 1, 'the replica did not acknowledge');
    // Then it is cut off: its link closed, and it can no longer authenticate to the primary (a
    // password the primary does not have), so what the primary admits from now on only the
    // primary has, as a lagging replica would not have it.
    await on(replica.port, ['CONFIG', 'SET', 'masterauth', 'not-the-primary-s']);
    await p.sendCommand(['CLIENT', 'KILL', 'TYPE', 'replica']);
    p.destroy();
    await until('the replica cut off', async () =>
      (await replication(replica.port)).master_link_status === 'down' && (await replication(primary.port)).connected_slaves === '0');
    // Sentinel promotes a replica whose link has been down for no more than ten down-after
    // periods (50 s) before it took the primary for down: here the CUT requests (each at most a
    // limiter timeout) and one down-after period.
    for (let i = 0; i < CUT; i++, next = (next + 1) % KEYS) cut[next] = await ask(next);
    await primary.stop();
    // The promotion as Sentinel and the client see it: Sentinel names the replica; the client's
    // requests reach it (the loop below gets decisions again; the old primary is dead). Then the
    // operator gives it a replica of its own, the spare, apart from the requests.
    failover = (async () => {
      await until('Sentinel naming the replica primary', async () => (await sentinels[0].primaryPort()) === replica.port, scenario);
      // The spare never becomes primary (replica-priority 0): Sentinel would take it, still empty,
      // for as good a candidate as any (a replica that never synced reports
      // master_link_down_since_seconds:-1, which passes Sentinel's check of how long a link has been
      // down), so a second failover, should Sentinel take the new primary for down while the spare
      // loads, would go to a node without the keys: every key's quota again.
      const spare = await startRedis({ args: ['--replica-priority', '0'] });
      spares.push(spare);
      await on(spare.port, ['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
      await on(spare.port, ['REPLICAOF', '127.0.0.1', `${replica.port}`]);
      // With durable, admissions wait for it: none is acknowledged until the new primary lists it online.
      await until('the spare online', () => online(replica.port, spare.port), scenario);
    })();
    let failed;
    failover.catch((error) => { failed = error; });
    await spend(() => {
      if (failed !== undefined) throw failed;
      return full.every(Boolean);
    });
    await failover;
    // Every Sentinel names the replica: no second failover.
    assert.deepEqual(await Promise.all(sentinels.map((s) => s.primaryPort())), sentinels.map(() => replica.port));
    return { over: admitted.map((a) => a - LIMIT), cut, stats: limiter.stats };
  } finally {
    scenario.ended = true;
    await failover?.catch(() => {});
    if (kind === 'ioredis') client.disconnect();
    else await client.close().catch(() => {});
    await setup.stop();
  }
}

test('the limit follows the promoted replica through the Sentinel client', async () => {
  const { over, cut, stats } = await spendAcrossAFailover(0);
  // Every key's quota was spent to the end (the loop ends only then) on the new primary, which
  // has every admission but those of the cut: a key admits those again, and no more. What failed,
  // failed closed, while no node was primary.
  over.forEach((o, k) => assert.ok(o <= cut[k], `k${k}: ${o} over its limit, ${cut[k]} admitted in the cut`));
  assert.equal(stats.failures, stats.failClosed);
  console.log(`without durable: ${cut.filter((c) => c > 0).length} admitted in the cut; ${over.filter((o) => o > 0).length} of ${KEYS} keys over; ${stats.failures} requests failed closed`);
});

test("the limit follows the promoted replica through ioredis's Sentinel setup", async () => {
  const { over, cut, stats } = await spendAcrossAFailover(0, 'ioredis');
  over.forEach((o, k) => assert.ok(o <= cut[k], `k${k}: ${o} over its limit, ${cut[k]} admitted in the cut`));
  assert.equal(stats.failures, stats.failClosed);
  console.log(`ioredis, without durable: ${cut.filter((c) => c > 0).length} admitted in the cut; ${over.filter((o) => o > 0).length} of ${KEYS} keys over; ${stats.failures} requests failed closed`);
});

test('with durable: 1 no key is admitted past its limit across the failover', async () => {
  const { over, cut, stats } = await spendAcrossAFailover(1);
  // No replica acknowledged the cut's admissions: none was taken as admitted (each failed closed).
  assert.deepEqual(cut, new Array(KEYS).fill(0));
  assert.ok(over.every((o) => o <= 0), String(over));
  console.log(`durable: at most ${Math.max(...over)} over; ${stats.notDurable} admissions not acknowledged`);
});

test("durable on node-redis's Sentinel client: the command and its WAIT on one connection, no lease per check", async () => {
  // node-redis's RedisSentinel.use and acquire build a whole client (every command's method)
  // per call: ~5 ms of CPU per durable admission when #sendWaiting leased a connection for each.
  const setup = await watched();
  const client = createSentinel({ name: 'main', sentinelRootNodes: setup.sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })) });
  client.on('error', () => {});
  const leases = { use: 0, acquire: 0 };
  for (const method of ['use', 'acquire']) {
    const original = client[method].bind(client);
    client[method] = (...args) => {
      leases[method] += 1;
      return original(...args);
    };
  }
  const waits = async () => Number(/^cmdstat_wait:calls=(\d+)/m.exec(await on(setup.primary.port, ['INFO', 'commandstats']))?.[1] ?? 0);
  try {
    await client.connect();
    for (const backend of ['module', 'script']) {
      const limiter = new RateLimit({
        client, backend, limit: { algorithm: 'fixedwindow', limit: 3, window: '1h' }, failMode: 'closed', durable: 1,
        durableTimeoutMs: 60_000, timeout: 60_000, setupTimeout: 60_000, denialMemory: 0, prefix: `lease:${backend}:`, logger: memoryLogger(),
      });
      await limiter.setup.pending;
      const before = await waits();
      const seen = [];
      for (let i = 0; i < 4; i++) {
        const d = await limiter.check('k');
        seen.push([d.failed, d.allowed, d.remaining]);
      }
      // Three admissions the replica acknowledged (WAIT 1 answered 1), then the refusal.
      assert.deepEqual(seen, [[undefined, true, 2], [undefined, true, 1], [undefined, true, 0], [undefined, false, 0]], backend);
      assert.deepEqual([limiter.stats.notDurable, limiter.stats.failures], [0, 0], backend);
      // One WAIT per check, each in the pipeline of its command.
      assert.equal(await waits() - before, 4, backend);
      if (backend === 'script') {
        // NOSCRIPT: the EVALSHA sent again after SCRIPT LOAD has a WAIT of its own (two in all).
        await on(setup.primary.port, ['SCRIPT', 'FLUSH']);
        const flushed = await waits();
        const d = await limiter.check('other');
        assert.deepEqual([d.failed, d.allowed, d.remaining, limiter.stats.notDurable], [undefined, true, 2, 0]);
        assert.equal(await waits() - flushed, 2);
      }
    }
    assert.deepEqual(leases, { use: 0, acquire: 0 });
  } finally {
    await client.close().catch(() => {});
    await setup.stop();
  }
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
