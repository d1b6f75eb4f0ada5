// Local budgets in real node:cluster workers (local-budget-cluster.js): a primary forking 4
// workers, each an Express app with rateLimitMiddleware and `localBudget: 16` on one shared key,
// for GCRA, a fixed window and a policy, the module's debug clock held still and a long hold (the
// workers' clocks are real). Requests on many connections (the primary hands them to the
// workers in turn): more than one worker serves. Twice for each limit:
// - 150 requests (under the limit: all 200; the workers hold units, 150 being no multiple of
//   16), then SIGTERM to the primary stops every worker gracefully (close() gives back what it
//   holds): the module's own count of units taken is the 200s counted, exactly;
// - 150 requests, a worker that reports units held (GET /held) SIGKILLed, 200 more (past the
//   limit: 429s), SIGTERM: the count is the 200s plus the units the killed worker held, exactly.

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PACKAGE_TEST, clocks, get, serverForFile } from './helpers.js';

const { redis, client } = await serverForFile();
const APP = path.join(path.dirname(fileURLToPath(import.meta.url)), 'local-budget-cluster.js');
const K = 16;

const inspect = async (key) => {
  const r = await client.sendCommand(['RL.INSPECT', key]);
  return r instanceof Map ? Object.fromEntries(r) : r;
};

// Every process started, killed by PID after the file's tests if one is left (a failed test).
const started = new Set();
after(() => {
  for (const pid of started) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
});

/** The cluster on `limit`: `{ primary, port, pids, messages }` (messages: the primary's, queued). */
async function startCluster(limit, prefix) {
  const primary = fork(APP, [], {
    env: {
      ...process.env,
      RL_LB_CLUSTER: '1',
      RL_WORKERS: '4',
      RL_URL: redis.url,
      RL_LIMIT: JSON.stringify(limit),
      RL_K: String(K),
      RL_HOLD: '1h',
      RL_PREFIX: prefix,
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  started.add(primary.pid);
  const messages = [];
  const waiting = [];
  primary.on('message', (m) => {
    const i = waiting.findIndex((w) => w.op === m.op);
    if (i >= 0) waiting.splice(i, 1)[0].resolve(m);
    else messages.push(m);
  });
  const next = (op) => {
    const i = messages.findIndex((m) => m.op === op);
    if (i >= 0) return Promise.resolve(messages.splice(i, 1)[0]);
    return new Promise((resolve) => waiting.push({ op, resolve }));
  };
  const ready = await next('ready');
  for (const pid of ready.pids) started.add(pid);
  assert.equal(new Set(ready.ports).size, 1, 'the workers share one port');
  assert.equal(new Set(ready.pids).size, 4);
  return { primary, base: `http://127.0.0.1:${ready.ports[0]}`, pids: ready.pids, next };
}

/** `n` GETs of /, `concurrency` at a time, each on a connection of its own: statuses and pids. */
async function traffic(base, n, concurrency) {
  const count = { 200: 0, 429: 0, other: 0, pids: new Set() };
  let sent = 0;
  const one = async () => {
    while (sent < n) {
      sent += 1;
      const r = await get(base, '/');
      if (r.status === 200 || r.status === 429) count[r.status] += 1;
      else count.other += 1;
      count.pids.add(r.headers['x-worker-pid']);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, one));
  return count;
}

/**
 * The scenario for one limit: 150 requests (under the limit: all 200; workers hold units); with
 * `kill`, one worker that holds some SIGKILLed and 200 more requests (past the limit: 429s);
 * SIGTERM to the primary. `taken()` reads the module's count of units taken. Returns what it
 * counted.
 */
async function scenario(t, limit, max, prefix, taken, kill) {
  await clocks(client);
  const c = await startCluster(limit, prefix);
  const first = await traffic(c.base, 150, 16);
  assert.deepEqual([first[200], first[429], first.other], [150, 0, 0]);
  assert.ok(first.pids.size > 1, `served by ${first.pids.size} worker(s)`);
  // With `kill`, a worker holding units (each /held goes to the next worker in turn).
  let victim = { pid: 0, held: 0, admitted: 0 };
  if (kill) {
    victim = undefined;
    for (let i = 0; i < 12 && victim === undefined; i++) {
      const r = JSON.parse((await get(c.base, '/held')).body);
      if (r.held > 0) victim = r;
    }
    assert.ok(victim !== undefined && victim.held <= K, 'a worker holds units');
    process.kill(victim.pid, 'SIGKILL');
    const exit = await c.next('exit');
    assert.deepEqual([exit.pid, exit.signal], [victim.pid, 'SIGKILL']);
  }
  const second = kill ? await traffic(c.base, 200, 16) : { 200: 0, 429: 0, other: 0, pids: new Set() };
  if (kill) {
    assert.equal(second.other, 0);
    assert.ok(second[429] > 0, 'past the limit');
    assert.ok(!second.pids.has(String(victim.pid)));
  }
  c.primary.kill('SIGTERM');
  const stopped = await c.next('stopped');
  const [code] = await once(c.primary, 'exit');
  assert.equal(code, 0);
  // The others closed gracefully, each giving back all it held.
  assert.equal(stopped.closed.length, kill ? 3 : 4);
  for (const w of stopped.closed) assert.equal(w.refunded, w.held, `worker ${w.pid}`);
  const refunded = stopped.closed.reduce((a, w) => a + w.refunded, 0);
  if (!kill) assert.ok(refunded > 0, 'the workers held units at SIGTERM');
  const ok = first[200] + second[200];
  assert.equal(ok + victim.held, taken(await inspect(`${prefix}shared`)), 'taken = the 200s + what the killed worker held');
  assert.ok(ok + victim.held <= max);
  assert.equal(stopped.closed.reduce((a, w) => a + w.admitted, 0) + victim.admitted, ok, 'the workers admitted the 200s');
  t.diagnostic(
    `${kill ? 'SIGKILL' : 'graceful'}: ${ok} 200s, ${first[429] + second[429]} 429s, served by ${new Set([...first.pids, ...second.pids]).size} ` +
      `workers, ${refunded} given back at close, ${victim.held} lost with the killed worker`,
  );
  return { ok, held: victim.held };
}

test('4 cluster workers on one GCRA key: the module counts the 200s (graceful), and what a SIGKILLed worker held', { skip: PACKAGE_TEST }, async (t) => {
  const limit = { algorithm: 'gcra', burst: 300, rate: 1, period: '1h' };
  await scenario(t, limit, 300, 'rl:lbcg:', (s) => 300 - s.remaining, false);
  await scenario(t, limit, 300, 'rl:lbcgk:', (s) => 300 - s.remaining, true);
});

test('4 cluster workers on one fixed window: its count is the 200s (graceful), and what a SIGKILLed worker held', { skip: PACKAGE_TEST }, async (t) => {
  const limit = { algorithm: 'fixedwindow', limit: 300, window: '1h' };
  await scenario(t, limit, 300, 'rl:lbcf:', (s) => s.count, false);
  await scenario(t, limit, 300, 'rl:lbcfk:', (s) => s.count, true);
});

test('4 cluster workers on one policy: every rule counts the 200s (graceful), and what a SIGKILLed worker held', { skip: PACKAGE_TEST }, async (t) => {
  await client.sendCommand(['RL.POLICY.SET', 'lbc', 'GCRA', '300', '1', '1h', 'FIXEDWINDOW', '400', '1h']);
  const rules = (s) => s.rules.map((x) => (x instanceof Map ? Object.fromEntries(x) : x));
  for (const [prefix, kill] of [['rl:lbcp:', false], ['rl:lbcpk:', true]]) {
    let fixed;
    const { ok, held } = await scenario(t, { policy: 'lbc' }, 300, prefix, (s) => {
      const [gcra, window] = rules(s);
      fixed = window.count;
      return 300 - gcra.remaining;
    }, kill);
    assert.equal(fixed, ok + held, 'the fixed window rule counts the same');
  }
});
