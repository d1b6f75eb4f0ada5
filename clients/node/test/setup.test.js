// Setup is not paid by a request: a limiter asks its questions (the backend,
// COMMAND INFO for "auto") and loads its scripts (SCRIPT LOAD) when it is created or its client
// becomes ready, in the background; a request that arrives while that runs waits for it, the
// wait not counted against the request's timeout; a setup that fails throws nothing and leaves
// no unhandled rejection, is logged and counted, and is run again when the client is ready again.
//
// Between the limiter's client and the server sits a TCP proxy (startProxy): each command the
// client sends is read there and passed on in order, and the setup's commands (COMMAND INFO,
// SCRIPT LOAD, RL.POLICY.SET) can be held until an event. That, not a server paused (CLIENT
// PAUSE, DEBUG SLEEP, SIGSTOP), because only the setup is to be slow: the request's own command
// must pass, and a paused server holds both, and holds the parent's own view of it too.
// A setup the server dies in, and a limiter made before its client connects, run on node-redis's
// client and on ioredis's.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { RateLimit, rateLimitMiddleware } from '../index.js';
import { reconnectStrategy } from '../lib/reconnect.cjs';
import { scripts } from '../lib/scripts.cjs';
import Redis from 'ioredis';
import { connect, connectIoredis, get, helloApp, limitFields, respParse, startCluster, startRedis } from './helpers.js';

const APP = path.join(path.dirname(fileURLToPath(import.meta.url)), 'setup-app.js');

/** The commands of a limiter's setup. */
const SETUP = new Set(['COMMAND INFO', 'SCRIPT LOAD', 'RL.POLICY.SET']);
/** What node-redis and ioredis (its ready check: INFO) say on each connection before any of the limiter's commands. */
const HANDSHAKE = /^(CLIENT|HELLO|AUTH|SELECT|INFO)\b/;

// One command off the front of `buf` (a RESP array of bulk strings, as node-redis writes every
// command): { args, end }, or undefined while it is incomplete.
function readCommand(buf) {
  if (buf.length === 0) return undefined;
  if (buf[0] !== 0x2a) throw new Error(`not a RESP array: ${JSON.stringify(String(buf.subarray(0, 20)))}`);
  const command = respParse(buf, 0);
  return command && { args: command.value, end: command.next };
}

// A command's name as the log keeps it: upper case, a container's subcommand after a space.
function commandName(args) {
  const name = args[0].toUpperCase();
  return ['COMMAND', 'SCRIPT', 'CLIENT', 'ACL'].includes(name) && args.length > 1 ? `${name} ${args[1].toUpperCase()}` : name;
}

/**
 * A TCP proxy on a free loopback port in front of the server on `port`: each connection made to
 * it gets its own to the server. What the server says passes as it comes; each command sent to
 * it is written down in `log` (its name, commandName) and passed on in order, unless `hold(name)`
 * returns a promise: then that command, and every later one of its connection, waits for it.
 * `url` is its address; `seen(name)` resolves once a command of that name has been read;
 * `close()` ends it and its connections.
 */
async function startProxy(port, hold = () => undefined) {
  const log = [];
  const waiting = []; // [name, resolve] of seen()
  const sockets = new Set();
  const server = net.createServer((down) => {
    const up = net.connect(port, '127.0.0.1');
    for (const s of [down, up]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        down.destroy();
        up.destroy();
      });
    }
    up.on('data', (d) => down.write(d));
    let buffered = Buffer.alloc(0);
    let queue = Promise.resolve();
    down.on('data', (d) => {
      buffered = Buffer.concat([buffered, d]);
      for (let cmd = readCommand(buffered); cmd !== undefined; cmd = readCommand(buffered)) {
        const bytes = buffered.subarray(0, cmd.end);
        buffered = buffered.subarray(cmd.end);
        const name = commandName(cmd.args);
        log.push(name);
        for (const [wanted, resolve] of waiting) if (wanted === name) resolve();
        const wait = hold(name);
        queue = queue.then(() => wait).then(() => {
          if (!up.destroyed) up.write(bytes);
        });
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `redis://127.0.0.1:${server.address().port}`,
    port: server.address().port,
    log,
    /** The limiter's commands so far, the handshake's left out. */
    commands: () => log.filter((c) => !HANDSHAKE.test(c)),
    seen: (name) => (log.includes(name) ? Promise.resolve() : new Promise((r) => waiting.push([name, r]))),
    close: () => new Promise((r) => {
      for (const s of sockets) s.destroy();
      server.close(r);
    }),
  };
}

/** A promise and the function that resolves it. */
function signal() {
  let fire;
  const fired = new Promise((r) => { fire = r; });
  return { fired, fire };
}

// The first request's answer, per application (setup-app.js) and backend: GCRA 5 per 30 s
// (10 a minute) on the middleware, 5 points per 60 s on RateLimiterRedis.
const FIRST = {
  middleware: [200, '"default";q=5;w=30', '"default";r=4;t=6', '5', '4', '6', undefined],
  flexible: JSON.stringify({ remainingPoints: 4, msBeforeNext: 60000, consumedPoints: 1, isFirstInDuration: true }),
};

/**
 * A fresh process (setup-app.js's application `kind`) against a fresh server (an empty script
 * cache; the module's or a plain one), through the proxy, and its first request. The request
 * has reached the application when the proxy reads its `INCR requests`, on the connection the
 * limiter's commands take, in the order the process sent them:
 * - a setup command sent before it (at the limiter's creation) is held until then: the request
 *   arrives while the setup runs, and waits for it;
 * - a setup command first sent after it (no setup before: the request's own, as before issue
 *   36) is held until the response: a setup a cold server makes slow (the 19-78 ms for
 *   COMMAND INFO, NOSCRIPT, SCRIPT LOAD) stands in the request's way until its timeout, which it
 *   then fails open on, every time (setup-app.js gives the middleware a minute, so that a loaded
 *   machine does not fail a request whose setup was done: such a failure takes the minute).
 *   RateLimiterRedis has no timeout (its call would wait for
 *   ever): for it, nothing is held then, and the commands say it.
 * Resolves { res, before (a setup command was sent before the request), commands, stderr }.
 */
async function firstRequest(kind, withModule) {
  const redis = await startRedis({ withModule });
  const arrival = signal();
  const response = signal();
  let arrived = false;
  let before = false;
  const proxy = await startProxy(redis.port, (name) => {
    if (name === 'INCR') {
      arrived = true;
      arrival.fire();
      return undefined;
    }
    if (!SETUP.has(name)) return undefined;
    if (!arrived) {
      before = true;
      return arrival.fired;
    }
    return before || kind === 'flexible' ? undefined : response.fired;
  });
  const child = spawn(process.execPath, [APP], {
    env: { ...process.env, RL_SETUP_APP: kind, RL_URL: proxy.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => child.once('exit', r));
  try {
    const listening = signal();
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.startsWith('{')) listening.fire(JSON.parse(line).port);
    });
    const port = await Promise.race([listening.fired, exited.then(() => assert.fail(`the application ended: ${stderr}`))]);
    const res = await get(`http://127.0.0.1:${port}`, '/');
    response.fire();
    return { res, before, commands: proxy.commands(), stderr };
  } finally {
    arrival.fire();
    response.fire();
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGKILL');
    await exited;
    await proxy.close();
    await redis.stop();
  }
}

for (const kind of ['express', 'http', 'flexible']) {
  for (const [backend, withModule, commands] of [
    ['module', true, ['COMMAND INFO', 'INCR', 'RL.GCRA']],
    ['script', false, ['COMMAND INFO', 'INCR', 'SCRIPT LOAD', 'SCRIPT LOAD', 'EVALSHA']],
  ]) {
    // RateLimiterRedis's one command is RL.COUNTER, and its setup loads that one script.
    const expected = kind !== 'flexible' ? commands
      : commands.map((c) => (c === 'RL.GCRA' ? 'RL.COUNTER' : c)).filter((c, i, all) => c !== 'SCRIPT LOAD' || all.indexOf(c) === i);
    test(`a fresh process's first request, ${kind} on the ${backend} backend: limited, the setup done before it`, async () => {
      const { res, before, commands: sentCommands, stderr } = await firstRequest(kind, withModule);
      if (kind === 'flexible') {
        assert.deepEqual([res.status, res.headers['x-ratelimit-remaining'], res.headers['x-ratelimiter-res']], [200, '4', FIRST.flexible], stderr);
      } else {
        assert.deepEqual(limitFields(res), FIRST.middleware, stderr);
      }
      assert.equal(res.body, 'hello');
      assert.ok(before, 'the setup began when the limiter was created, before the first request');
      // One command for the request (the limit's script and its refund's were loaded: no
      // NOSCRIPT, no second EVALSHA).
      assert.deepEqual(sentCommands, expected);
      assert.equal(stderr, '');
    });
  }
}

// --- in this process: the wait, a setup that fails, a client not yet connected -----------------

const unhandled = [];
process.on('unhandledRejection', (error) => unhandled.push(error));

const GCRA = { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' };
const FIRST_DECISION = {
  allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 6000, name: 'default', windowSeconds: 30, moreAfterMs: 6000, local: false,
};

/** A logger that keeps its warnings and says when one matching `pattern` comes. */
function watcher(pattern) {
  const lines = [];
  const seen = signal();
  return {
    lines,
    seen: seen.fired,
    warn: (m) => {
      lines.push(m);
      if (pattern.test(m)) seen.fire();
    },
    info() {},
  };
}

test('a request that arrives while the setup runs waits for it, and the wait is not counted against its timeout', async () => {
  const redis = await startRedis({ withModule: false });
  const release = signal();
  const proxy = await startProxy(redis.port, (name) => (name === 'COMMAND INFO' ? release.fired : undefined));
  const client = await connect({ url: proxy.url });
  try {
    const logger = watcher(/./);
    // A timeout of 200 ms: once the setup is let go, its SCRIPT LOADs and the check's EVALSHA
    // have that long on a busy machine.
    const limiter = new RateLimit({ client, limit: GCRA, timeout: 200, failMode: 'closed', logger });
    let settled = false;
    const decision = limiter.check('k').finally(() => { settled = true; });
    // A timer set now, three timeouts long, fires after the check's own 200 ms would have (Node
    // runs timers in the order they fall due): had the wait counted, the check would have
    // failed closed by then, however slow or fast the machine.
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(settled, false, 'still waiting for the setup');
    await proxy.seen('COMMAND INFO');
    assert.deepEqual(proxy.commands(), ['COMMAND INFO']);
    release.fire();
    assert.deepEqual(await decision, FIRST_DECISION);
    assert.deepEqual(proxy.commands(), ['COMMAND INFO', 'SCRIPT LOAD', 'SCRIPT LOAD', 'EVALSHA']);
    const { failures, setupFailures, backend } = limiter.stats;
    assert.deepEqual({ failures, setupFailures, backend }, { failures: 0, setupFailures: 0, backend: 'script' });
    assert.deepEqual(logger.lines, []);
  } finally {
    release.fire();
    client.destroy();
    await proxy.close();
    await redis.stop();
  }
});

for (const kind of ['node-redis', 'ioredis']) {
  test(`a setup the server dies in: nothing thrown nor unhandled, logged and counted; requests fail as configured; run again once the client is ready (${kind})`, async () => {
    let redis = await startRedis({ withModule: false });
    const { port } = redis;
    let first = true;
    // The first COMMAND INFO is held for ever: the server dies under it.
    const proxy = await startProxy(port, (name) => {
      if (name !== 'COMMAND INFO' || !first) return undefined;
      first = false;
      return new Promise(() => {});
    });
    const client = kind === 'ioredis'
      ? await connectIoredis(proxy, { retryStrategy: () => 50 })
      : await connect({ url: proxy.url }, { socket: { reconnectStrategy } });
    const middlewareLogger = watcher(/^ratelimit: the setup of RL\.GCRA/);
    const flexibleLogger = watcher(/^ratelimit: the setup of RateLimiterRedis/);
    let http;
    try {
      // timeout 1000: a busy machine must not fail the request after the recovery (the failures
      // here are refused connections, at once).
      const limit = rateLimitMiddleware({ client, limit: GCRA, key: () => 'k', failMode: 'closed', timeout: 1000, logger: middlewareLogger });
      const { RateLimiterRedis } = await import('../index.js');
      const flexible = new RateLimiterRedis({ storeClient: client, points: 5, duration: 60, logger: flexibleLogger });
      assert.equal(limit.limiter.stats.setupFailures, 0);
      const app = await helloApp(limit);
      http = app.http;
      await proxy.seen('COMMAND INFO');
      assert.deepEqual(proxy.commands(), ['COMMAND INFO']);
      await redis.stop();
      await Promise.all([middlewareLogger.seen, flexibleLogger.seen]);
      assert.equal(limit.limiter.stats.setupFailures, 1);
      assert.match(middlewareLogger.lines[0],
        /^ratelimit: the setup of RL\.GCRA \(backend, scripts\) failed \(.+\); it runs again when the client is ready again, and until then each request asks what it needs within its timeout$/);
      assert.match(flexibleLogger.lines[0],
        /^ratelimit: the setup of RateLimiterRedis \(backend, scripts\) failed \(.+\); it runs again when the client is ready again, and until then each call asks what it needs$/);
      // The server away: failing closed, logged and counted.
      const refused = await app.as('a');
      assert.equal(refused.status, 503);
      assert.deepEqual([limit.limiter.stats.failures, limit.limiter.stats.failClosed], [1, 1]);
      assert.match(middlewareLogger.lines[1], /^ratelimit: RL\.GCRA for "rl:http:k" failed \(.+\); fail closed: the request is refused$/);
      // node-redis rejects the calls in flight when the connection drops. ioredis keeps them and
      // sends them again once it is ready (autoResendUnfulfilledCommands): RateLimiterRedis's call,
      // which has no timeout of its own (nor has rate-limiter-flexible's), would wait for the
      // server to be back (docs/node.md, "ioredis").
      if (kind === 'node-redis') await assert.rejects(flexible.consume('k'), Error);
      // Back on the same port: the client reconnects, and each setup runs again before a request.
      const ready = new Promise((r) => client.once('ready', r));
      redis = await startRedis({ port, withModule: false });
      await ready;
      await Promise.all([limit.limiter.setup.pending, flexible.setup.pending]);
      const asked = proxy.commands().length;
      assert.deepEqual(limitFields(await app.as('a')), FIRST.middleware);
      assert.deepEqual((await flexible.consume('k')).toJSON(), JSON.parse(FIRST.flexible));
      assert.deepEqual(proxy.commands().slice(asked), ['EVALSHA', 'EVALSHA'], 'one command each: the scripts were loaded');
      assert.deepEqual([limit.limiter.stats.setupFailures, middlewareLogger.lines.length, flexibleLogger.lines.length], [1, 2, 1]);
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(unhandled, []);
    } finally {
      await http?.close();
      if (kind === 'ioredis') client.disconnect();
      else client.destroy();
      await proxy.close();
      await redis.stop();
    }
  });

  test(`a limiter made before its client connects: nothing thrown or sent; its setup runs when the client is ready (${kind})`, async () => {
    const redis = await startRedis({ withModule: false });
    const proxy = await startProxy(redis.port);
    const { createClient } = await import('redis');
    const client = kind === 'ioredis'
      ? new Redis({ host: '127.0.0.1', port: proxy.port, lazyConnect: true, enableOfflineQueue: false })
      : createClient({ url: proxy.url, disableOfflineQueue: true });
    client.on('error', () => {});
    try {
      const limiter = new RateLimit({ client, limit: GCRA, timeout: 1000, logger: watcher(/./) });
      assert.equal(limiter.setup.pending, undefined);
      await client.connect();
      await limiter.setup.pending;
      assert.deepEqual(proxy.commands(), ['COMMAND INFO', 'SCRIPT LOAD', 'SCRIPT LOAD']);
      assert.deepEqual(await limiter.check('k'), FIRST_DECISION);
      assert.deepEqual(proxy.commands(), ['COMMAND INFO', 'SCRIPT LOAD', 'SCRIPT LOAD', 'EVALSHA']);
      // The scripts are the package's: the server holds the one the limit needs, by its SHA.
      const exists = ['SCRIPT', 'EXISTS', scripts().gcra.sha, scripts().refund.sha];
      assert.deepEqual(await (kind === 'ioredis' ? client.call(...exists) : client.sendCommand(exists)), [1, 1]);
      assert.deepEqual(unhandled, []);
    } finally {
      if (kind === 'ioredis') client.disconnect();
      else if (client.isOpen) client.destroy();
      await proxy.close();
      await redis.stop();
    }
  });
}

test('a setup that overruns setupTimeout: logged and counted, and requests stop waiting for it', async () => {
  const redis = await startRedis({ withModule: false });
  const release = signal();
  const proxy = await startProxy(redis.port, (name) => (name === 'COMMAND INFO' ? release.fired : undefined));
  const client = await connect({ url: proxy.url });
  try {
    assert.throws(() => new RateLimit({ client, limit: GCRA, setupTimeout: 0 }),
      { name: 'TypeError', message: 'invalid setupTimeout: expected a positive number of milliseconds; got 0' });
    const logger = watcher(/^ratelimit: the setup of RL\.GCRA/);
    const limiter = new RateLimit({ client, limit: GCRA, timeout: 300, failMode: 'closed', setupTimeout: 100, logger });
    await logger.seen; // the server never answers its COMMAND INFO: the deadline's doing, not a sleep's
    assert.equal(logger.lines[0], 'ratelimit: the setup of RL.GCRA (backend, scripts) failed (not done within 100 ms (setupTimeout)); ' +
      'it runs again when the client is ready again, and until then each request asks what it needs within its timeout');
    assert.deepEqual([limiter.stats.setupFailures, limiter.setup.pending], [1, undefined]);
    // A request now waits for nothing but its own answer: the backend is still unknown, so it
    // fails closed at its timeout, logged and counted.
    const d = await limiter.check('k');
    assert.deepEqual([d.failed, d.allowed, d.error.message], [true, false, 'no answer from Redis within 300 ms']);
    assert.deepEqual([limiter.stats.failures, limiter.stats.failClosed, logger.lines.length], [1, 1, 2]);
    // The server answers at last: requests are limited again. Another key: the one that timed
    // out was not cancelled, and is admitted too.
    release.fire();
    assert.deepEqual(await limiter.check('k2'), FIRST_DECISION);
  } finally {
    release.fire();
    client.destroy();
    await proxy.close();
    await redis.stop();
  }
});

test('on a cluster client the setup loads the scripts on every primary, so a first call on any node is one EVALSHA', async () => {
  const stack = await startCluster({ withModule: false });
  try {
    const limiter = new RateLimit({ client: stack.cluster, limit: GCRA, timeout: 2000, logger: watcher(/./) });
    await limiter.setup?.pending; // what a first request would wait for
    // A key on each node: one EVALSHA there, no SCRIPT LOAD (no NOSCRIPT).
    const keys = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const onNode = [];
    for (const key of keys) onNode[await stack.nodeOf(limiter.redisKey(key))] ??= key;
    assert.equal(onNode.filter(Boolean).length, 3, `keys on every node: ${onNode}`);
    const counts = () => Promise.all([0, 1, 2].map((i) => Promise.all([stack.calls(i, 'evalsha'), stack.calls(i, 'script|load')])));
    const before = await counts();
    for (const key of onNode) assert.deepEqual(await limiter.check(key), FIRST_DECISION);
    const after = await counts();
    assert.deepEqual(after.map(([e, l], i) => [e - before[i][0], l - before[i][1]]), [[1, 0], [1, 0], [1, 0]]);
    const { gcra, refund } = scripts();
    for (const node of stack.direct) assert.deepEqual(await node.sendCommand(['SCRIPT', 'EXISTS', gcra.sha, refund.sha]), [1, 1]);
    assert.equal(limiter.stats.setupFailures, 0);
  } finally {
    await stack.stop();
  }
});
