// Real servers for the tests: redis-server ($RATELIMIT_SERVER, default redis-server on PATH)
// with the module ($RATELIMIT_MODULE, default target/release/libratelimit.so of this checkout)
// loaded with the debug clock, on a free loopback port, stopped by PID (one a test file:
// serverForFile); HTTP servers on node:http on free loopback ports, and requests to them; the
// fake clock that moves with the server's; what a refused consume rejects with; the release's
// npm tarball, packed for the docs' install tests.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';
import express from 'express';
import Redis from 'ioredis';
import { TEST_NOW } from '../lib/scripts.cjs';
import { createClient, createCluster } from 'redis';
import { RateLimiterRes } from '../index.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const T0_MS = 1_700_000_000_000;

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * A free port for a cluster node: at most 55535, so that its cluster bus port (10000 above)
 * exists (Redis refuses to start a cluster node above it: "Redis port number too high"), with
 * that bus port free too. About four in five ephemeral ports qualify.
 */
export async function freeClusterPort() {
  for (;;) {
    const port = await freePort();
    if (port > 55535) continue;
    const busFree = await new Promise((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(port + 10000, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (busFree) return port;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A redis-server child process with the module (`withModule: false`: a plain server, the script
 * backend's); `stop()`, `pause()`, `resume()` by PID. On a
 * free port, or on `port` (a server started again where one was stopped).
 */
export async function startRedis({ port: wanted, withModule = true, args = [] } = {}) {
  const binary = process.env.RATELIMIT_SERVER || 'redis-server';
  const module = process.env.RATELIMIT_MODULE || path.join(ROOT, 'target/release/libratelimit.so');
  if (withModule && !existsSync(module)) throw new Error(`${module} is missing: run cargo build --release first`);
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-node-'));
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = wanted ?? (args.includes('--cluster-enabled') ? await freeClusterPort() : await freePort());
    const child = spawn(
      binary,
      ['--port', `${port}`, '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no',
        ...args, ...(withModule ? ['--loadmodule', module, 'debug-clock', 'yes'] : [])],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    // Its log (stdout: where it says why it stopped, such as "Address already in use") and stderr.
    let stderr = '';
    child.stdout.on('data', (d) => { stderr += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    let exited = false;
    child.once('exit', () => { exited = true; });
    for (let i = 0; i < 200 && !exited; i++) {
      // Ready when it answers PONG; not when it exits (its port taken): the connection may have
      // reached another listener there, such as a cluster bus, that never answers a PING.
      const ok = await new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        const gone = () => { s.destroy(); resolve(false); };
        child.once('exit', gone);
        if (exited) return gone();
        const done = (result) => { child.off('exit', gone); s.destroy(); resolve(result); };
        s.once('connect', () => { s.write('PING\r\n'); });
        s.once('data', (d) => done(String(d).startsWith('+PONG')));
        s.once('error', () => done(false));
        s.once('close', () => done(false));
      });
      if (ok) {
        const server = {
          port,
          pid: child.pid,
          url: `redis://127.0.0.1:${port}`,
          paused: false,
          pause() { process.kill(child.pid, 'SIGSTOP'); server.paused = true; },
          resume() { process.kill(child.pid, 'SIGCONT'); server.paused = false; },
          async stop() {
            if (child.exitCode !== null || child.signalCode !== null) return;
            const gone = new Promise((r) => child.once('exit', r));
            if (server.paused) server.resume();
            process.kill(child.pid, 'SIGKILL');
            await gone;
            rmSync(dir, { recursive: true, force: true });
          },
        };
        return server;
      }
      await sleep(25);
    }
    if (!exited) process.kill(child.pid, 'SIGKILL');
    if (wanted !== undefined || !/Address already in use/.test(stderr)) throw new Error(`${binary} did not start: ${stderr}`);
  }
  throw new Error(`${binary} found no free port`);
}

/** The slots of startCluster's three primaries, in node order. */
export const CLUSTER_BOUNDS = [[0, 5460], [5461, 10922], [10923, 16383]];

/**
 * A Redis Cluster of three primaries, no replicas (slots split in three with CLUSTER
 * ADDSLOTSRANGE, joined by MEET), each a startRedis server with the module on its debug clock
 * (`withModule: false`: without), and node-redis's createCluster on it (RESP2).
 * Resolves { nodes, direct (a client on each node), cluster, nodeOf(key) (0, 1 or 2),
 * calls(i, command) (INFO commandstats of node i), stop() }.
 */
export async function startCluster({ withModule = true } = {}) {
  const args = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000'];
  const nodes = await Promise.all([0, 1, 2].map(() => startRedis({ withModule, args })));
  const direct = await Promise.all(nodes.map((n) => connect(n, { RESP: 2 })));
  for (const [i, c] of direct.entries()) {
    await c.sendCommand(['CLUSTER', 'ADDSLOTSRANGE', `${CLUSTER_BOUNDS[i][0]}`, `${CLUSTER_BOUNDS[i][1]}`]);
  }
  for (const n of nodes.slice(1)) await direct[0].sendCommand(['CLUSTER', 'MEET', '127.0.0.1', `${n.port}`]);
  // The cluster forming (gossip): a setup wait, not time-dependent behaviour under test.
  const deadline = Date.now() + 30_000;
  for (const c of direct) {
    for (;;) {
      const info = String(await c.sendCommand(['CLUSTER', 'INFO']));
      const known = String(await c.sendCommand(['CLUSTER', 'NODES'])).trim().split('\n').length;
      // With the module: caught up with the cluster's policies too (a node refuses policy
      // changes until it has: docs/cluster.md, Catching up).
      const policies = String(await c.sendCommand(['INFO', 'ratelimit_policies']));
      const caughtUp = !policies.includes('caught_up') || policies.includes('ratelimit_policies_caught_up:1');
      if (info.includes('cluster_state:ok') && known === 3 && caughtUp) break;
      assert.ok(Date.now() < deadline, 'the cluster did not come up');
      await sleep(50);
    }
  }
  const cluster = createCluster({ rootNodes: [{ url: nodes[0].url }], defaults: { disableOfflineQueue: true } });
  cluster.on('error', () => {});
  await cluster.connect();
  return {
    nodes,
    direct,
    cluster,
    async nodeOf(key) {
      const slot = Number(await direct[0].sendCommand(['CLUSTER', 'KEYSLOT', key]));
      return CLUSTER_BOUNDS.findIndex(([first, last]) => slot >= first && slot <= last);
    },
    async calls(i, command) {
      const info = String(await direct[i].sendCommand(['INFO', 'commandstats']));
      const found = new RegExp(`^cmdstat_${command.replace(/[.|]/g, '\\$&')}:calls=(\\d+)`, 'm').exec(info);
      return found ? Number(found[1]) : 0;
    },
    async stop() {
      await cluster.close().catch(() => {});
      for (const c of direct) if (c.isOpen) c.destroy();
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}

/** A node-redis client (RESP3 unless told), connected; errors are swallowed (tests stop servers). */
export async function connect(server, options = {}) {
  const client = createClient({ url: server.url, RESP: 3, disableOfflineQueue: true, ...options });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/**
 * An ioredis client (RESP2) on `server`, ready; errors are swallowed (tests stop servers). Its
 * offline queue off, as a limiter on the request path wants it (docs/node.md, "ioredis").
 */
export async function connectIoredis(server, options = {}) {
  const client = new Redis({ host: '127.0.0.1', port: server.port, enableOfflineQueue: false, ...options });
  client.on('error', () => {});
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  return client;
}

/**
 * A server and a client on it for every test of a file: started now (a top-level await in the
 * file), stopped after the file's last test.
 */
export async function serverForFile() {
  const redis = await startRedis();
  let client;
  after(async () => {
    await client?.quit();
    await redis.stop();
  });
  client = await connect(redis);
  return { redis, client };
}

/**
 * A module server and a plain redis-server (no module), a RESP3 client on each, for every test
 * of a file (the script backend's tests run one sequence on both and compare): started now (a
 * top-level await in the file), stopped after the file's last test. `m` is the module server's
 * client, `p` the plain one's.
 */
export async function moduleAndPlainForFile() {
  const [withModule, plain] = await Promise.all([startRedis(), startRedis({ withModule: false })]);
  const clients = [];
  after(async () => {
    await Promise.all(clients.map((c) => c.quit()));
    await Promise.all([withModule.stop(), plain.stop()]);
  });
  const [m, p] = await Promise.all([connect(withModule), connect(plain)]);
  clients.push(m, p);
  return { withModule, plain, m, p };
}

/**
 * The timeouts of a limiter in a test that is not about timeouts. The package's defaults (a
 * call's 50 ms, a setup's 1 s) are for a server nearby with time to spare; `make test` runs six
 * suites on two cores, where a round trip can take longer, and a call that times out fails open
 * and changes what the test sees. A minute is a hang, not a busy machine. Tests of the timeout
 * itself set theirs.
 */
/**
 * The release's npm tarball (`make dist`'s npm pack) packed into `dir`: its file name. It packs a
 * copy of clients/node and clients/lua (the package's prepack copies the Lua in beside it, and
 * postpack removes it: never under another test running at the same time), removed after.
 * @param {string} dir
 * @returns {string}
 */
export function packTarball(dir) {
  const pkg = path.join(ROOT, 'clients/node');
  const work = mkdtempSync(path.join(tmpdir(), 'rl-node-pack-'));
  try {
    cpSync(path.join(ROOT, 'clients/lua'), path.join(work, 'lua'), { recursive: true });
    const skip = [path.join(pkg, 'node_modules'), path.join(pkg, 'lua')];
    cpSync(pkg, path.join(work, 'node'), { recursive: true, filter: (from) => !skip.some((s) => from === s || from.startsWith(s + path.sep)) });
    execFileSync('npm', ['pack', path.join(work, 'node'), '--pack-destination', dir, '--loglevel=error'], { cwd: dir, encoding: 'utf8' });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack made a tarball');
  return tarball;
}

export const PATIENT = { timeout: 60_000, setupTimeout: 60_000 };

/**
 * The `skip` of a test of the package itself rather than of a server: its type declarations
 * (tsc), its tarball installed into a fresh folder, require and import of it, the manual's app
 * installed from it, and its local budgets across processes (node:cluster workers and forked
 * processes started, stopped and killed; each process's commands are a plain client's, which
 * local-budget.test.js and the module's own tests hold to the server). make test runs this
 * suite on four servers and sets RATELIMIT_SKIP_PACKAGE_TESTS=1 on all but the first, where
 * such a test would repeat itself (about 65 s of CPU each time on a machine make test keeps
 * busy, 29 of them the processes').
 */
export const PACKAGE_TEST = process.env.RATELIMIT_SKIP_PACKAGE_TESTS === '1'
  ? 'a test of the package, not of the server: make test runs it with the first server'
  : false;

/** A logger that says nothing (for the warnings a test expects, such as the backend's choice). */
export const quiet = { warn() {}, info() {} };

/** A decision without `local`, which says which call made it (a round trip, either backend). */
export const strip = ({ local, ...d }) => d;

/** `command` (its words) as a RESP array of bulk strings, as clients send commands. */
export function respEncode(command) {
  return `*${command.length}\r\n${command.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`;
}

/**
 * The RESP2 value at `at` in `buffer` (a reply, or a command: an array of bulk strings) and
 * where it ends, `{ value, next }`, or undefined while not all of it is there: strings as
 * strings, integers as numbers, arrays as arrays, an error as an Error, nil as null.
 */
export function respParse(buffer, at) {
  const eol = buffer.indexOf('\r\n', at);
  if (eol < 0) return undefined;
  const line = buffer.toString('utf8', at + 1, eol);
  const kind = String.fromCharCode(buffer[at]);
  if (kind === '+') return { value: line, next: eol + 2 };
  if (kind === '-') return { value: new Error(line), next: eol + 2 };
  if (kind === ':') return { value: Number(line), next: eol + 2 };
  const n = Number(line);
  if (n < 0) return { value: null, next: eol + 2 };
  if (kind === '$') {
    if (buffer.length < eol + 2 + n + 2) return undefined;
    return { value: buffer.toString('utf8', eol + 2, eol + 2 + n), next: eol + 2 + n + 2 };
  }
  const items = [];
  let next = eol + 2;
  for (let i = 0; i < n; i++) {
    const item = respParse(buffer, next);
    if (item === undefined) return undefined;
    items.push(item.value);
    next = item.next;
  }
  return { value: items, next };
}

/** Calls of a command so far, from INFO commandstats (0 when never called). */
export async function calls(client, command) {
  const info = await client.sendCommand(['INFO', 'commandstats']);
  // Every `.` and `|` (a subcommand's stat: cmdstat_acl|log) matched as itself.
  const name = command.toLowerCase().replace(/[.|]/g, '\\$&');
  const m = new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(String(info));
  return m ? Number(m[1]) : 0;
}

/** Serves `handler` (an Express app or a plain handler) on node:http on a free loopback port. */
export async function serve(handler) {
  const server = http.createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }),
  };
}

/**
 * `method` `path` with extra headers and a body (none by default); resolves { status, headers
 * (lower-case names), body }.
 */
export function request(base, method, urlPath, headers = {}, data = undefined) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${urlPath}`, { method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

/** GET `path` with extra headers; resolves { status, headers (lower-case names), body }. */
export function get(base, urlPath = '/', headers = {}) {
  return request(base, 'GET', urlPath, headers);
}

/**
 * An Express app that answers "hello" on GET / behind `middleware`, served; `as(id)` sends that
 * GET as the caller `id` (X-Client-Id).
 */
export async function helloApp(middleware) {
  const app = express();
  app.use(middleware);
  app.get('/', (req, res) => res.send('hello'));
  const server = await serve(app);
  return { http: server, as: (id) => get(server.url, '/', { 'X-Client-Id': id }) };
}

/** The rate-limit fields of a response, in a fixed order (undefined when absent). */
export function limitFields(r) {
  return [
    r.status,
    r.headers['ratelimit-policy'],
    r.headers.ratelimit,
    r.headers['x-ratelimit-limit'],
    r.headers['x-ratelimit-remaining'],
    r.headers['x-ratelimit-reset'],
    r.headers['retry-after'],
  ];
}

/** A logger that keeps what it is told. */
export function memoryLogger() {
  const lines = [];
  return { lines, warn: (m) => lines.push(m) };
}

/**
 * The package's fake monotonic clock, 1000 when the server's debug clock (set to T0 here) reads
 * T0; `at(ms)` moves both clocks to `ms` after the start.
 */
export async function clocks(client) {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const clock = {
    ms: 1_000,
    async at(ms) {
      clock.ms = 1_000 + ms;
      await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS + ms}`]);
    },
  };
  return clock;
}

/**
 * A PTTL (or what a reply derives from one: msBeforeNext, a reset) read now of a key given
 * `windowMs` at some instant after `since` (performance.now() before the call that set it): at
 * most the window, at least the window less the real time since, rounded up. The counters'
 * windows (RL.COUNTER) are their keys' TTLs on the server's clock, which no debug clock moves:
 * asserted so, from the time measured, never from a tolerance.
 * @param {number} ms
 * @param {number} windowMs
 * @param {number} since
 * @param {string} [what]
 */
export function ttlWithin(ms, windowMs, since, what = 'a TTL') {
  const elapsed = Math.ceil(performance.now() - since);
  assert.ok(ms <= windowMs && ms >= windowMs - elapsed - 1, `${what}: ${ms} ms, where the window is ${windowMs} ms, ${elapsed} ms after it began`);
}

/**
 * The whole seconds a client shows of a `windowMs` window begun after `since` (ttlWithin's
 * bounds, rounded up, as express-rate-limit's RateLimit-Reset and Retry-After round): one value,
 * or two when the time since crosses a second.
 * @param {number} windowMs
 * @param {number} since
 * @returns {string[]}
 */
export function secondsLeft(windowMs, since) {
  const elapsed = Math.ceil(performance.now() - since);
  const values = [];
  for (let s = Math.ceil(Math.max(0, windowMs - elapsed - 1) / 1000); s <= Math.ceil(windowMs / 1000); s++) values.push(String(s));
  return values;
}

/**
 * Ends the windows of counter keys now, as their TTLs would: each key made to expire in 1 ms
 * (PEXPIRE), then seen gone (EXISTS, until it says 0: an event, not a wait of a set length).
 * @param {any} client a node-redis client
 * @param {...string} keys
 */
export async function endWindow(client, ...keys) {
  for (const key of keys) {
    assert.equal(await client.pExpire(key, 1), 1, `${key} exists`);
    while ((await client.exists(key)) === 1);
  }
}

/** The RateLimiterRes a consume rejects with (an admission or an Error fails the test). */
export async function refusal(promise) {
  let res;
  try {
    res = await promise;
  } catch (err) {
    if (err instanceof RateLimiterRes) return err;
    throw err;
  }
  return assert.fail(`admitted: ${res}`);
}

/**
 * One instant for both backends: `at(ms)` sets the module server's debug clock (through client
 * `m`) to T0 + ms, and the scripts' test-only clock of each of `limiters` (TEST_NOW) reads the
 * same instant in µs.
 */
export function sharedClock(m, limiters) {
  const clock = {
    ms: 0,
    async at(ms) {
      clock.ms = ms;
      await m.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS + ms}`]);
    },
  };
  for (const l of limiters) l[TEST_NOW] = () => (T0_MS + clock.ms) * 1000;
  return clock;
}
