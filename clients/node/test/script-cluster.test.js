// The script backend on a Redis Cluster without the module (issue 28): three primaries (slots
// split in three with CLUSTER ADDSLOTSRANGE, joined by MEET), node-redis's createCluster. Each
// script call declares its one key, so the cluster client sends it to that key's node, and the
// SCRIPT LOAD after NOSCRIPT goes there too (evalScript's `send`, bound to the key). Every
// algorithm's replies equal the module's (a module server on its debug clock; the scripts on the
// test-only clock, NOW), keys in every node's slots; NOSCRIPT on the one node whose script cache
// was flushed is answered by loading the script there and trying again; RL.REFUND works.
//
// This file runs the package's script calls (evalScript, and `auto`'s resolveBackend) through
// the cluster client itself; RateLimit and RateLimiterRedis over a cluster client:
// cluster-client.test.js.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { parseReply } from '../lib/reply.cjs';
import { evalScript, resolveBackend, scripts } from '../lib/scripts.cjs';
import { T0_MS, connect, startCluster, startRedis } from './helpers.js';

let direct = []; // a client on each, for what the test asks of one node
let withModule; // the module on its debug clock: the replies to compare with
let m; // RESP2, as the cluster client
let cluster;
let nodeOf; // the node (0, 1 or 2) whose slots hold a key
let calls; // calls of a command on node i so far (INFO commandstats)
let stack;

before(async () => {
  [withModule, stack] = await Promise.all([startRedis(), startCluster({ withModule: false })]);
  ({ direct, cluster, nodeOf, calls } = stack);
  m = await connect(withModule, { RESP: 2 });
});

after(async () => {
  if (m?.isOpen) m.destroy();
  await Promise.all([withModule?.stop(), stack?.stop()]);
});

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
