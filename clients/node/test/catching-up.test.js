// A cluster node that has not caught up with the cluster's policies since it started or joined
// (issue 37; docs/cluster.md, "Catching up") answers RL.LIMIT of a policy it does not hold yet,
// and RL.POLICY.SET, with TRYAGAIN; node-redis does not send a command again after TRYAGAIN.
// RateLimit does, within its timeout: a request on such a node gets its decision once the node
// has caught up, and fails open or closed only when the timeout is spent first.
//
// The node held behind, for as long as the test wants (as tests/integration/cluster_floods.rs holds it): a
// fourth node started alone, owning the slot of `{catchup}` (taken from the 3-node cluster with
// DELSLOTS), holding a policy of its own and taking at most one (ratelimit.max-policies 1). Once
// it has met the cluster it refuses the cluster's `api`, so its table cannot become the
// cluster's and it stays at ratelimit_policies_caught_up:0, until the test raises the bound.
// Meanwhile: a call on it fails (closed) only once its timeout is spent, after more than one
// RL.LIMIT; limiters whose keys are on the other nodes are not failed by it (their RL.POLICY.GET
// goes to the key's node, not to any); then calls in flight through a cluster client (one that
// knows the fourth node, and one that MOVED leads there), a standalone client on it, and a policy
// whose RL.POLICY.SET it refuses, all get their decision once the bound is raised.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createCluster, ErrorReply } from 'redis';
import { RateLimit } from '../index.js';
// The module's object, not its names: run on the package before the retry (which has no
// retryPauseMs), the scenario below still runs, and fails.
import rateLimitModule from '../lib/rate-limit.cjs';
import { PATIENT, T0_MS, connect, memoryLogger, startCluster, startRedis, strip } from './helpers.js';

const { retryPauseMs, TRY_AGAIN_PAUSE_MS } = rateLimitModule;

const NOT_YET = "TRYAGAIN no policy named 'api' on this node yet: it has not caught up with the cluster's policies since it started";
const CHANGE_NOT_YET = "TRYAGAIN this node has not caught up with the cluster's policies since it started: a change made " +
  'now could lose to one it has not learned yet; try again in a moment';

test('a TRYAGAIN is sent again after a pause while time is left after it; nothing else is', () => {
  const tryAgain = new ErrorReply(NOT_YET);
  assert.equal(TRY_AGAIN_PAUSE_MS, 20);
  assert.equal(retryPauseMs(tryAgain, 50), 20);
  assert.equal(retryPauseMs(new ErrorReply(CHANGE_NOT_YET), 1999.5), 20);
  assert.equal(retryPauseMs(new ErrorReply('TRYAGAIN Multiple keys request during rehashing of slot'), 21), 20);
  // No time left for an answer after the pause: the TRYAGAIN is the call's failure.
  assert.equal(retryPauseMs(tryAgain, 20), undefined);
  assert.equal(retryPauseMs(tryAgain, 0), undefined);
  assert.equal(retryPauseMs(tryAgain, -3), undefined);
  // Final answers, and what node-redis follows itself (MOVED, ASK), are not sent again.
  for (const final of [
    new ErrorReply("ERR no policy named 'api': create it with RL.POLICY.SET api rule [rule ...]"),
    new ErrorReply('CLUSTERDOWN Hash slot not served'),
    new ErrorReply('MOVED 3999 127.0.0.1:6381'),
    new Error('no answer from Redis within 50 ms'),
    new ErrorReply('ERR a reply that says TRYAGAIN later in its text'),
  ]) {
    assert.equal(retryPauseMs(final, 50), undefined, final.message);
  }
  assert.equal(retryPauseMs('TRYAGAIN as a string, not an error', 50), undefined);
  assert.equal(retryPauseMs(undefined, 50), undefined);
});

const CLUSTER_ARGS = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000'];
const TAG = '{catchup}';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let stack; // startCluster's 3 nodes
let added; // the fourth node, and a client on it
let addedClient;
const opened = []; // further clients, closed after

before(async () => {
  stack = await startCluster();
  await stack.direct[0].sendCommand(['RL.POLICY.SET', 'api', 'GCRA', '5', '5', '1m']);
  await until('every node holds api', async () => {
    const held = await Promise.all(stack.direct.map((c) => c.sendCommand(['RL.POLICY.GET', 'api'])));
    return held.every(Array.isArray);
  });
  const slot = String(await stack.direct[0].sendCommand(['CLUSTER', 'KEYSLOT', TAG]));
  for (const c of stack.direct) assert.equal(String(await c.sendCommand(['CLUSTER', 'DELSLOTS', slot])), 'OK');
  added = await startRedis({ args: CLUSTER_ARGS });
  addedClient = await connect(added, { RESP: 2 });
  // Its debug clock at T0, as the others', where they stay: the decisions are exact.
  for (const c of [...stack.direct, addedClient]) await c.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  assert.equal(String(await addedClient.sendCommand(['CLUSTER', 'ADDSLOTS', slot])), 'OK');
  assert.equal(String(await addedClient.sendCommand(['RL.POLICY.SET', 'own', 'FIXEDWINDOW', '10', '1m'])), 'OK');
  assert.equal(String(await addedClient.sendCommand(['CONFIG', 'SET', 'ratelimit.max-policies', '1'])), 'OK');
  // Alone, it is the whole cluster: caught up.
  assert.equal(await info(addedClient, 'ratelimit_policies_caught_up'), '1');
  assert.equal(String(await addedClient.sendCommand(['CLUSTER', 'MEET', '127.0.0.1', `${stack.nodes[0].port}`])), 'OK');
  // Met: it knows the three others, has refused the cluster's api at an exchange, says it has
  // not caught up, and every node says cluster_state:ok (the three others once they know that
  // the fourth serves the slot they gave up).
  await until('the fourth node is in the cluster, held behind', async () => {
    const nodes = String(await addedClient.sendCommand(['CLUSTER', 'NODES'])).trim().split('\n');
    const known = nodes.filter((l) => !/myself|handshake|noaddr/.test(l.split(' ')[2])).length;
    const refused = Number(await info(addedClient, 'ratelimit_cluster_changes_refused'));
    const states = await Promise.all([...stack.direct, addedClient].map((c) => c.sendCommand(['CLUSTER', 'INFO'])));
    return known === 3 && refused >= 1 && (await info(addedClient, 'ratelimit_policies_caught_up')) === '0' &&
      states.every((s) => String(s).includes('cluster_state:ok'));
  });
  // The fourth node as a client meets it: TRYAGAIN, not nil or "no policy named".
  await assert.rejects(addedClient.sendCommand(['RL.POLICY.GET', 'api']), { message: NOT_YET });
  await assert.rejects(addedClient.sendCommand(['RL.LIMIT', `${TAG}:raw`, 'api']), { message: NOT_YET });
});

after(async () => {
  await Promise.all(opened.map((c) => c.close().catch(() => {})));
  if (addedClient?.isOpen) addedClient.destroy();
  await added?.stop();
  await stack?.stop();
});

/** Polls `condition` every 20 ms until it holds, for 30 s at most (a setup's wait). */
async function until(what, condition) {
  const deadline = Date.now() + 30_000;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, `not within 30 s: ${what}`);
    await sleep(20);
  }
}

/** A field of the module's INFO on the node of `client`. */
async function info(client, field) {
  const text = String(await client.sendCommand(['INFO', 'ratelimit']));
  return new RegExp(`^${field}:(.*?)\\r?$`, 'm').exec(text)?.[1];
}

/** Calls of `command` on the fourth node that answered an error (INFO commandstats). */
async function failedCalls(command) {
  const text = String(await addedClient.sendCommand(['INFO', 'commandstats']));
  const found = new RegExp(`^cmdstat_${command.replace(/[.|]/g, '\\$&')}:.*\\bfailed_calls=(\\d+)`, 'm').exec(text);
  return found ? Number(found[1]) : 0;
}

/** The last command of each connection `ids` of the fourth node (CLIENT LIST ID ...), by id. */
async function lastCommands(ids) {
  const list = String(await addedClient.sendCommand(['CLIENT', 'LIST', 'ID', ...ids.map(String)]));
  return Object.fromEntries(list.trim().split('\n').map((l) => [/\bid=(\d+)/.exec(l)?.[1], /\bcmd=(\S+)/.exec(l)?.[1]]));
}

/** A cluster client (RESP2, as startCluster's) from the cluster's first node, closed after the file. */
async function clusterClient() {
  const cluster = createCluster({ rootNodes: [{ url: stack.nodes[0].url }], defaults: { disableOfflineQueue: true } });
  cluster.on('error', () => {});
  await cluster.connect();
  opened.push(cluster);
  return cluster;
}

/** The id of the connection of `cluster` to the fourth node. */
async function connectionToAdded(cluster) {
  const master = cluster.masters.find((m) => m.port === added.port);
  assert.ok(master, 'the cluster client knows the fourth node');
  return Number(await (await cluster.nodeClient(master)).sendCommand(['CLIENT', 'ID']));
}

// A fresh key's decision under `api` (GCRA 5 per minute: a unit back each 12 s), every node's
// clock standing still at T0.
const DECIDED = {
  allowed: true,
  name: 'api',
  limit: 5,
  remaining: 4,
  retryAfterMs: 0,
  resetAfterMs: 12_000,
  rule: 0,
  windowSeconds: 60,
  moreAfterMs: 12_000,
};

test('held behind: the call is sent again until its timeout, then fails closed with the TRYAGAIN', async () => {
  const direct = await connect(added);
  opened.push(direct);
  const logger = memoryLogger();
  const limiter = new RateLimit({ client: direct, limit: { policy: 'api' }, timeout: 1000, failMode: 'closed', logger });
  await limiter.setup.pending;
  const before = await failedCalls('rl.limit');
  const d = await limiter.check(`${TAG}:held`);
  assert.deepEqual([d.failed, d.allowed, d.error?.message], [true, false, NOT_YET]);
  assert.deepEqual([limiter.stats.calls, limiter.stats.failures, limiter.stats.failClosed], [1, 1, 1]);
  assert.equal(logger.lines.length, 1);
  assert.match(logger.lines[0], /^ratelimit: RL\.LIMIT for "rl:http:\{catchup\}:held" failed \(TRYAGAIN no policy named 'api' on this node yet: .*\); fail closed/);
  // More than one RL.LIMIT, each answered TRYAGAIN (the package before this sent one).
  assert.ok((await failedCalls('rl.limit')) - before >= 2, 'sent again');
  assert.equal(await info(addedClient, 'ratelimit_policies_caught_up'), '0');
});

test('held behind past its timeout: the call fails with the TRYAGAIN the node said, not the silence after it', async () => {
  // The node answers the first RL.LIMIT with TRYAGAIN; before that answer reaches the limiter,
  // the node's writes are paused for longer than the call's timeout, so the RL.LIMIT sent again
  // is not answered within it. What the node said is still why the call failed: it has not
  // caught up (the package before this failed it with "no answer from Redis").
  const direct = await connect(added);
  opened.push(direct);
  let paused = false;
  const client = {
    async sendCommand(args) {
      try {
        return await direct.sendCommand(args);
      } catch (error) {
        if (!paused && String(args[0]) === 'RL.LIMIT' && String(error?.message).startsWith('TRYAGAIN')) {
          paused = true;
          await addedClient.sendCommand(['CLIENT', 'PAUSE', '60000', 'WRITE']);
        }
        throw error;
      }
    },
  };
  const logger = memoryLogger();
  const limiter = new RateLimit({ client, limit: { policy: 'api' }, timeout: 2000, failMode: 'closed', logger });
  await limiter.setup.pending;
  let d;
  try {
    d = await limiter.check(`${TAG}:paused`);
  } finally {
    await addedClient.sendCommand(['CLIENT', 'UNPAUSE']);
  }
  assert.ok(paused, 'the node answered TRYAGAIN first');
  assert.deepEqual([d.failed, d.allowed, d.error?.message], [true, false, NOT_YET]);
  assert.match(logger.lines[0], /failed \(TRYAGAIN no policy named 'api' on this node yet: .*\); fail closed/);
});

test('meanwhile a policy is read from the node of the call\'s key: keys on caught-up nodes are decided', async () => {
  // Four limiters of `api` on a cluster client that knows the four nodes, each's first call on a
  // key of the first node: each reads the policy with the RL.POLICY.GET of its first call. Sent
  // to any node (node-redis takes them in turn), one of four would reach the fourth node, which
  // answers nil.
  const fresh = await clusterClient();
  const logger = memoryLogger();
  const limiters = [0, 1, 2, 3].map(() => new RateLimit({ client: fresh, limit: { policy: 'api' }, timeout: 1000, logger }));
  await Promise.all(limiters.map((l) => l.setup.pending));
  const slot = String(await stack.direct[0].sendCommand(['CLUSTER', 'KEYSLOT', TAG]));
  const keys = [];
  for (let i = 0; keys.length < limiters.length; i++) {
    const key = `first:${i}`;
    const redisKey = `rl:http:${key}`;
    if ((await stack.nodeOf(redisKey)) === 0 && String(await stack.direct[0].sendCommand(['CLUSTER', 'KEYSLOT', redisKey])) !== slot) keys.push(key);
  }
  for (const [i, l] of limiters.entries()) assert.deepEqual(strip(await l.check(keys[i])), DECIDED, keys[i]);
  assert.deepEqual(logger.lines, []);
  assert.equal(await info(addedClient, 'ratelimit_policies_caught_up'), '0', 'still held behind');
});

test('a call made while the node has not caught up gets its decision once it has: cluster and standalone clients, a policy and its SET', async () => {
  const [fresh, fresh2] = [await clusterClient(), await clusterClient()];
  const direct = await connect(added);
  opened.push(direct);
  const logger = memoryLogger();
  const options = { timeout: 10_000, logger, denialMemory: 0 };
  const api = { policy: 'api' };
  const limiters = {
    // A cluster client made after the slot moved: its RL.LIMIT goes to the fourth node.
    a: new RateLimit({ ...PATIENT, client: fresh, limit: api, failMode: 'closed', ...options }),
    // A standalone client on the fourth node.
    b: new RateLimit({ ...PATIENT, client: direct, limit: api, failMode: 'open', ...options }),
    // A policy whose rules the limiter sets itself: its RL.POLICY.SET goes to the node of its
    // key, the fourth, which refuses the change until it has caught up.
    c: new RateLimit({
      ...PATIENT,
      client: fresh2,
      limit: { policy: 'api2', rules: [{ algorithm: 'gcra', burst: 5, rate: 5, period: '1m' }] },
      failMode: 'open',
      ...options,
    }),
    // startCluster's cluster client, made before the slot moved: MOVED leads it to the fourth node.
    d: new RateLimit({ ...PATIENT, client: stack.cluster, limit: api, failMode: 'closed', ...options }),
  };
  await Promise.all(Object.values(limiters).map((l) => l.setup.pending));
  const ids = { a: await connectionToAdded(fresh), b: Number(await direct.sendCommand(['CLIENT', 'ID'])) };
  const setsBefore = await failedCalls('rl.policy.set');
  let settled = 0; // calls ended: none can decide while the node is held behind, only fail
  const calls = Object.entries(limiters).map(([k, l]) => l.check(`${TAG}:${k}`).finally(() => { settled += 1; }));
  // Each has been answered TRYAGAIN on the fourth node: the last command of A's, B's and D's
  // connections there is an RL.LIMIT (or the RL.POLICY.GET sent after it), and an RL.POLICY.SET
  // (C's only) failed there. Or a call has ended: its failure is shown below.
  await until('every call has been answered TRYAGAIN', async () => {
    if (settled > 0) return true;
    if (ids.d === undefined && stack.cluster.masters.some((m) => m.port === added.port)) {
      ids.d = await connectionToAdded(stack.cluster);
    }
    const last = await lastCommands(Object.values(ids));
    return ids.d !== undefined && Object.values(ids).every((id) => ['rl.limit', 'rl.policy.get'].includes(last[id])) &&
      (await failedCalls('rl.policy.set')) > setsBefore;
  });
  assert.equal(await info(addedClient, 'ratelimit_policies_caught_up'), '0', 'still held behind');
  // Room for the cluster's api: the node takes it at its next exchange, and catches up.
  assert.equal(String(await addedClient.sendCommand(['CONFIG', 'SET', 'ratelimit.max-policies', '10000'])), 'OK');
  const [da, db, dc, dd] = await Promise.all(calls);
  assert.deepEqual(strip(da), DECIDED);
  assert.deepEqual(strip(db), DECIDED);
  assert.deepEqual(strip(dc), { ...DECIDED, name: 'api2' });
  assert.deepEqual(strip(dd), DECIDED);
  for (const l of Object.values(limiters)) {
    assert.deepEqual([l.stats.calls, l.stats.admitted, l.stats.failures], [1, 1, 0]);
  }
  assert.deepEqual(logger.lines, []);
  assert.equal(await info(addedClient, 'ratelimit_policies_caught_up'), '1');
  // Decided on the fourth node (its keys), with the cluster's api and C's api2.
  const keys = Object.keys(limiters).map((k) => `rl:http:${TAG}:${k}`);
  assert.equal(Number(await addedClient.sendCommand(['EXISTS', ...keys])), 4);
  const rules = (await stack.direct[0].sendCommand(['RL.POLICY.GET', 'api'])).map(String);
  assert.deepEqual((await addedClient.sendCommand(['RL.POLICY.GET', 'api'])).map(String), rules);
  assert.deepEqual((await addedClient.sendCommand(['RL.POLICY.GET', 'api2'])).map(String), ['GCRA', '5', '5', '60000']);
});
