// The script backend on a Redis Cluster without the module (issue 28): three primaries (slots
// split in three with CLUSTER ADDSLOTSRANGE, joined by MEET), node-redis's createCluster. Each
// script call declares its one key, so the cluster client sends it to that key's node, and the
// SCRIPT LOAD after NOSCRIPT goes there too (evalScript's `send`, bound to the key). Every
// algorithm's replies equal the module's (a module server on its debug clock; the scripts on the
// test-only clock, NOW), keys in every node's slots; NOSCRIPT on the one node whose script cache
// was flushed is answered by loading the script there and trying again; RL.REFUND works.
//
// RateLimit itself takes a standalone or Sentinel client (a cluster client's sendCommand takes
// the key to route by first): this file runs the package's script calls (evalScript, and `auto`'s
// resolveBackend) through the cluster client.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { createClient, createCluster } from 'redis';
import { parseReply } from '../lib/reply.js';
import { evalScript, resolveBackend, scripts } from '../lib/scripts.js';
import { T0_MS, freePort, startRedis } from './helpers.js';

/** A redis-server without the module, with `args`, on a free loopback port; stopped by PID. */
async function startServer(args) {
  const binary = process.env.RATELIMIT_SERVER || 'redis-server';
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-node-cluster-'));
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const child = spawn(
      binary,
      ['--port', `${port}`, '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', ...args],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (d) => { stderr += d; });
    let exited = false;
    child.once('exit', () => { exited = true; });
    for (let i = 0; i < 200 && !exited; i++) {
      const ok = await new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => s.write('PING\r\n'));
        s.once('data', (d) => { s.destroy(); resolve(String(d).startsWith('+PONG')); });
        s.once('error', () => resolve(false));
      });
      if (ok) {
        return {
          port,
          url: `redis://127.0.0.1:${port}`,
          async stop() {
            if (child.exitCode !== null || child.signalCode !== null) return;
            const gone = new Promise((r) => child.once('exit', r));
            process.kill(child.pid, 'SIGKILL');
            await gone;
            rmSync(dir, { recursive: true, force: true });
          },
        };
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    if (!exited) process.kill(child.pid, 'SIGKILL');
    if (!/Address already in use/.test(stderr)) throw new Error(`${binary} did not start: ${stderr}`);
  }
  throw new Error(`${binary} found no free port`);
}

const BOUNDS = [[0, 5460], [5461, 10922], [10923, 16383]];

let nodes = []; // the three primaries
let direct = []; // a client on each, for what the test asks of one node
let withModule; // the module on its debug clock: the replies to compare with
let m; // RESP2, as the cluster client
let cluster;

const newClient = async (url) => {
  const c = createClient({ url, disableOfflineQueue: true });
  c.on('error', () => {});
  await c.connect();
  return c;
};

before(async () => {
  const clusterArgs = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000'];
  [withModule, ...nodes] = await Promise.all([startRedis(), ...[0, 1, 2].map(() => startServer(clusterArgs))]);
  m = await newClient(withModule.url);
  direct = await Promise.all(nodes.map((n) => newClient(n.url)));
  for (const [i, c] of direct.entries()) await c.sendCommand(['CLUSTER', 'ADDSLOTSRANGE', `${BOUNDS[i][0]}`, `${BOUNDS[i][1]}`]);
  for (const n of nodes.slice(1)) await direct[0].sendCommand(['CLUSTER', 'MEET', '127.0.0.1', `${n.port}`]);
  // The cluster forming (gossip): a setup wait, not time-dependent behaviour under test.
  const deadline = Date.now() + 30_000;
  for (const c of direct) {
    for (;;) {
      const info = String(await c.sendCommand(['CLUSTER', 'INFO']));
      const known = String(await c.sendCommand(['CLUSTER', 'NODES'])).trim().split('\n').length;
      if (info.includes('cluster_state:ok') && known === 3) break;
      assert.ok(Date.now() < deadline, 'the cluster did not come up');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  cluster = createCluster({ rootNodes: [{ url: nodes[0].url }], defaults: { disableOfflineQueue: true } });
  cluster.on('error', () => {});
  await cluster.connect();
});

after(async () => {
  await cluster?.close().catch(() => {});
  for (const c of [m, ...direct]) if (c?.isOpen) c.destroy();
  await Promise.all([withModule, ...nodes].map((s) => s?.stop()));
});

/** The node (0, 1 or 2) whose slots hold `key`. */
async function nodeOf(key) {
  const slot = Number(await direct[0].sendCommand(['CLUSTER', 'KEYSLOT', key]));
  return BOUNDS.findIndex(([first, last]) => slot >= first && slot <= last);
}

/** Calls of a command on node `i` so far (INFO commandstats). */
async function calls(i, command) {
  const info = String(await direct[i].sendCommand(['INFO', 'commandstats']));
  const found = new RegExp(`^cmdstat_${command.replace(/[.|]/g, '\\$&')}:calls=(\\d+)`, 'm').exec(info);
  return found ? Number(found[1]) : 0;
}

/** A module command (`[command, key, ...words]`) as its script, through the cluster client. */
const viaCluster = (args, ms) => evalScript((a) => cluster.sendCommand(args[1], false, a), args, (T0_MS + ms) * 1000);
/** The same on the module server, its debug clock at T0 + ms. */
async function onModule(args, ms) {
  await m.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS + ms}`]);
  return m.sendCommand(args);
}

// [command, its words after the key (durations in ms), the reply's sixth field].
const ALGORITHMS = {
  gcra: ['RL.GCRA', ['3', '1', '1000']],
  tokenbucket: ['RL.TOKENBUCKET', ['5', '2', '1000']],
  tokenbucketInterval: ['RL.TOKENBUCKET', ['5', '2', '1000', 'INTERVAL']],
  leakybucket: ['RL.LEAKYBUCKET', ['3', '1', '1000'], 'delay_ms'],
  fixedwindow: ['RL.FIXEDWINDOW', ['3', '10000']],
  slidingwindow: ['RL.SLIDINGWINDOW', ['3', '10000']],
  slidinglog: ['RL.SLIDINGLOG', ['3', '10000']],
  warmup: ['RL.WARMUP', ['2', '1000', '5000', 'COLDFACTOR', '3']],
  gcraBlock: ['RL.GCRA', ['2', '1', '1000', 'BLOCK', '5000']],
};

// [ms after T0, the words after the algorithm's (null: RL.REFUND key <units>), what they add].
const STEPS = [
  [0, []],
  [0, ['COST', '2']],
  [0, []],
  [250, ['DRYRUN']],
  [250, null, '1'],
  [300, ['ATMOST', '5'], ['granted']],
  [300, ['ATMOST', '5'], ['granted']],
  [1700, ['COST', '0']],
  [3000, ['COST', '3']],
  [7000, []],
  [12_500, ['COST', '2']],
  [12_500, null, '9'],
  [25_000, []],
];

test('every algorithm on a 3-primary cluster answers as the module, keys on every node', async () => {
  const where = new Set();
  for (const [name, [command, words, sixth]] of Object.entries(ALGORITHMS)) {
    const key = `rl:cl:${name}`;
    const node = await nodeOf(key);
    where.add(node);
    const seen = [];
    for (const [i, [ms, extra, more]] of STEPS.entries()) {
      const args = extra === null ? ['RL.REFUND', key, more] : [command, key, ...words, ...extra];
      const [a, b] = [await onModule(args, ms), await viaCluster(args, ms)];
      assert.deepEqual(b, a, `${name} step ${i}: ${args.join(' ')}`);
      if (extra === null) {
        assert.equal(typeof b, 'number', `${name} step ${i}`);
        seen.push(`refunded ${b}`);
      } else {
        const d = parseReply(b, sixth, more ?? []);
        seen.push(d.allowed ? 'admitted' : 'refused');
      }
    }
    assert.ok(seen.includes('admitted') && seen.includes('refused'), `${name}: ${seen}`);
    assert.ok(seen.some((s) => /^refunded [1-9]/.test(s)), `${name}: ${seen}`);
    // The key lives on its node only, as the scripts' hash.
    assert.equal(await direct[node].sendCommand(['TYPE', key]), 'hash', name);
    const slot = await direct[0].sendCommand(['CLUSTER', 'KEYSLOT', key]);
    for (const [i, c] of direct.entries()) {
      assert.equal(await c.sendCommand(['CLUSTER', 'COUNTKEYSINSLOT', `${slot}`]), i === node ? 1 : 0, `${name} on node ${i}`);
    }
  }
  assert.deepEqual([...where].sort(), [0, 1, 2], 'keys in every node\'s slots');
});

test('exact values through the cluster: GCRA 3 per 3 s on each node, refused, refunded', async () => {
  const keys = ['rl:exact:a', 'rl:exact:b', 'rl:exact:c', 'rl:exact:d', 'rl:exact:e', 'rl:exact:f'];
  const byNode = new Map();
  for (const k of keys) byNode.set(await nodeOf(k), k);
  assert.equal(byNode.size, 3);
  for (const key of byNode.values()) {
    const gcra = (words, ms = 0) => viaCluster(['RL.GCRA', key, '3', '1', '1000', ...words], ms);
    assert.deepEqual(await gcra([]), [1, 3, 2, 0, 1000]);
    assert.deepEqual(await gcra(['COST', '2']), [1, 3, 0, 0, 3000]);
    assert.deepEqual(await gcra([]), [0, 3, 0, 1000, 3000]);
    assert.deepEqual(await gcra(['DRYRUN'], 400), [0, 3, 0, 600, 2600]);
    assert.equal(await viaCluster(['RL.REFUND', key, '1'], 400), 1);
    assert.deepEqual(await gcra([], 400), [1, 3, 0, 0, 2600]);
    assert.equal(await viaCluster(['RL.REFUND', key, '9'], 400), 3);
    assert.equal(await cluster.sendCommand(key, true, ['EXISTS', key]), 0, 'a refund of all of it leaves the key fresh');
  }
});

test('NOSCRIPT on the one node whose script cache was flushed: loaded on that node, tried again', async () => {
  const keys = ['rl:flush:a', 'rl:flush:b', 'rl:flush:c', 'rl:flush:d', 'rl:flush:e', 'rl:flush:f'];
  const byNode = new Map();
  for (const k of keys) byNode.set(await nodeOf(k), k);
  assert.equal(byNode.size, 3);
  const { sha } = scripts().slidinglog;
  const check = (key) => viaCluster(['RL.SLIDINGLOG', key, '2', '10000'], 0);
  for (const key of byNode.values()) assert.deepEqual(await check(key), [1, 2, 1, 0, 10000]);
  for (const c of direct) assert.deepEqual(await c.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);

  const flushed = 1;
  await direct[flushed].sendCommand(['SCRIPT', 'FLUSH']);
  const before = await Promise.all([0, 1, 2].map(async (i) => [await calls(i, 'script|load'), await calls(i, 'evalsha')]));
  for (const key of byNode.values()) assert.deepEqual(await check(key), [1, 2, 0, 0, 10000]);
  const loaded = await Promise.all([0, 1, 2].map(async (i) => [await calls(i, 'script|load') - before[i][0], await calls(i, 'evalsha') - before[i][1]]));
  // On the flushed node: EVALSHA (NOSCRIPT), SCRIPT LOAD, EVALSHA; on the others one EVALSHA.
  assert.deepEqual(loaded, [0, 1, 2].map((i) => (i === flushed ? [1, 2] : [0, 1])));
  for (const c of direct) assert.deepEqual(await c.sendCommand(['SCRIPT', 'EXISTS', sha]), [1]);

  // RL.REFUND too, its script flushed on that node alone.
  await direct[flushed].sendCommand(['SCRIPT', 'FLUSH']);
  for (const key of byNode.values()) assert.equal(await viaCluster(['RL.REFUND', key, '1'], 0), 1);
  for (const key of byNode.values()) assert.deepEqual(await check(key), [1, 2, 0, 0, 10000]);
  assert.deepEqual(await direct[flushed].sendCommand(['SCRIPT', 'EXISTS', scripts().refund.sha, sha]), [1, 1]);
});

test('auto through the cluster client: no module on the nodes, so the scripts, logged once', async () => {
  const lines = [];
  const logger = { warn: (s) => lines.push(`warn ${s}`), info: (s) => lines.push(`info ${s}`) };
  const send = (a) => cluster.sendCommand(undefined, false, a);
  assert.equal(await resolveBackend(cluster, send, 'auto', logger), 'script');
  assert.equal(await resolveBackend(cluster, send, 'auto', logger), 'script');
  assert.deepEqual(lines, ['info ratelimit: the server has no ratelimit module; using the script backend']);
});
