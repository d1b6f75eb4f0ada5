// A server without Lua (issue 38, 3): Valkey 9.1 moved Lua into a module (`lua`) that an
// operator can unload (MODULE UNLOAD lua); then every SCRIPT LOAD and EVAL fails with "ERR Could
// not find scripting engine 'lua'" (and EVALSHA with NOSCRIPT: the scripts went with the engine).
// The module runs there, the script backend cannot: the script backend asked for (backend
// "script", or "auto" on a server without the module) is one clear error, ModuleRequiredError (a
// configuration error, never failed open or closed), the same at each call of every entry point
// (RateLimit, a local budget, the middleware, RateLimiterRedis and its MULTIs), with nothing
// written; "auto" on a server with the module takes it, as anywhere.
//
// Each server is $RATELIMIT_SERVER started with enable-module-command local and its lua module
// unloaded; a server that cannot unload it (Redis, where Lua is built in; Valkey before 9.1)
// says so, and the tests are skipped with its words.

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import express from 'express';
import { ModuleRequiredError, RateLimit, RateLimiterRedis, rateLimitMiddleware } from '../index.js';
import { calls, connect, get, serve, startRedis, T0_MS } from './helpers.js';

const ARGS = ['--enable-module-command', 'local'];
// bare: neither the module nor Lua; moduleOnly: the module (its debug clock at T0), no Lua.
const [bare, moduleOnly] = await Promise.all([startRedis({ withModule: false, args: ARGS }), startRedis({ args: ARGS })]);
const clients = [];
after(async () => {
  await Promise.all(clients.map((c) => c.quit()));
  await Promise.all([bare.stop(), moduleOnly.stop()]);
});
const [b, m] = await Promise.all([connect(bare), connect(moduleOnly)]);
clients.push(b, m);

// Why the tests cannot run here, in the server's words, or undefined.
let skip;
for (const c of [b, m]) {
  try {
    await c.sendCommand(['MODULE', 'UNLOAD', 'lua']);
  } catch (error) {
    const info = String(await c.sendCommand(['INFO', 'server']));
    const field = (name) => new RegExp(`^${name}:(.*)\r?$`, 'm').exec(info)?.[1];
    skip = `${field('server_name') ?? 'redis'} ${field('valkey_version') ?? field('redis_version')} cannot unload Lua (MODULE UNLOAD lua: ${error.message})`;
    break;
  }
}
if (skip === undefined) await m.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);

// What the server answers SCRIPT LOAD without Lua, as node-redis gives it.
const SERVER_SAID = "ERR Could not find scripting engine 'lua'";
// The one error each backend gets on a server without Lua (and, for "auto", without the module).
const NO_LUA = Object.fromEntries([
  ['script', 'backend "script"'],
  ['auto', 'backend "auto", and the server has no ratelimit module'],
].map(([backend, asked]) => [backend,
  `the script backend needs a Lua scripting engine, and the server has none (${asked}; the server said: ${SERVER_SAID}): ` +
    'load the ratelimit module on the server (backend "auto" or "module" then uses it), or use a server with Lua ' +
    '(docs/managed.md, "A server without Lua")']));

const GCRA = { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' };
const COUNTED = ['command|info', 'script|load', 'evalsha', 'eval', 'multi', 'rl.gcra', 'rl.counter'];

async function counts(client) {
  return Object.fromEntries(await Promise.all(COUNTED.map(async (c) => [c, await calls(client, c)])));
}

// The commands sent since `before`, those sent at least once.
async function sentSince(client, before) {
  const now = await counts(client);
  return Object.fromEntries(COUNTED.filter((c) => now[c] > before[c]).map((c) => [c, now[c] - before[c]]));
}

async function nothingWritten(client) {
  assert.equal(await client.sendCommand(['DBSIZE']), 0);
  assert.match(String(await client.sendCommand(['INFO', 'memory'])), /^number_of_cached_scripts:0\r?$/m);
}

/** A logger that keeps every line, with its level. */
function keeper() {
  const lines = [];
  return { lines, info: (l) => lines.push(['info', l]), warn: (l) => lines.push(['warn', l]) };
}

/** Asserts `promise` rejects with the ModuleRequiredError of `backend`. */
async function rejectsClearly(promise, backend) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof ModuleRequiredError, `${error?.stack ?? error}`);
    assert.equal(error.message, NO_LUA[backend]);
    return true;
  });
}

for (const backend of ['script', 'auto']) {
  test(`without the module or Lua, backend "${backend}" is one clear error at each entry point; nothing written, nothing retried`, { skip }, async () => {
    const before = await counts(b);
    const logger = keeper();
    // timeout 5000: two round trips a call, on a busy machine; nothing here waits for a timeout.
    const limiter = new RateLimit({ client: b, limit: GCRA, backend, logger, timeout: 5000 });
    await limiter.setup.pending;
    // The setup met it (auto: COMMAND INFO said no module, and the limit's SCRIPT LOADs, made
    // before it takes the scripts, no Lua), said it once and is over: nothing runs again until
    // the client reconnects.
    assert.equal(limiter.setup.pending, undefined);
    assert.equal(limiter.stats.setupFailures, 1);
    const setup = backend === 'script' ? { 'script|load': 2 } : { 'command|info': 1, 'script|load': 2 };
    assert.deepEqual(await sentSince(b, before), setup);
    assert.deepEqual(logger.lines, [['warn', `ratelimit: ${NO_LUA[backend]}`]]);
    for (let i = 0; i < 2; i++) await rejectsClearly(limiter.check('k'), backend);
    await rejectsClearly(limiter.refund('k', 1), backend);
    assert.deepEqual([limiter.backend, limiter.stats.backend], backend === 'script' ? ['script', 'script'] : [undefined, undefined]);
    assert.deepEqual([limiter.stats.calls, limiter.stats.failures, limiter.stats.failOpen], [0, 0, 0]);
    // Each call asks again (nothing kept: a server given the module or Lua later is used):
    // script, EVALSHA (NOSCRIPT) and SCRIPT LOAD; auto, the SCRIPT LOADs it takes the scripts
    // after (COMMAND INFO is asked once per client).
    const perCall = backend === 'script' ? { evalsha: 1, 'script|load': 1 } : { 'script|load': 2 };
    const want = (n) => Object.fromEntries([...new Set([...Object.keys(setup), ...Object.keys(perCall)])]
      .map((c) => [c, (setup[c] ?? 0) + n * (perCall[c] ?? 0)]));
    assert.deepEqual(await sentSince(b, before), want(3));
    assert.deepEqual(logger.lines.length, 1);

    // A local budget's refill.
    const budgeted = new RateLimit({ client: b, limit: GCRA, backend, logger: keeper(), timeout: 5000, localBudget: 3 });
    await budgeted.setup.pending;
    await rejectsClearly(budgeted.check('budget'), backend);

    // The middleware hands it to the application (next(error)), neither passing nor refusing.
    const seen = [];
    const app = express();
    app.use(rateLimitMiddleware({ client: b, limit: GCRA, backend, logger: keeper(), timeout: 5000, key: () => 'mw' }));
    app.get('/', (req, res) => res.send('hello'));
    app.use((error, req, res, next) => {
      seen.push(error);
      res.status(500).send(error.message);
    });
    const server = await serve(app);
    try {
      const res = await get(server.url);
      assert.deepEqual([res.status, res.body], [500, NO_LUA[backend]]);
      assert.ok(seen[0] instanceof ModuleRequiredError);
    } finally {
      await server.close();
    }

    // RateLimiterRedis: a consume, and block's MULTI.
    const flexLogger = keeper();
    const flexible = new RateLimiterRedis({ storeClient: b, points: 5, duration: 60, backend, logger: flexLogger });
    await flexible.setup.pending;
    assert.deepEqual(flexLogger.lines, [['warn', `ratelimit: ${NO_LUA[backend]}`]]);
    await rejectsClearly(flexible.consume('k'), backend);
    await rejectsClearly(flexible.block('k', 10), backend);
    assert.equal(flexible.backend, backend === 'script' ? 'script' : undefined);
    await nothingWritten(b);
  });
}

test('with the module and no Lua, auto takes the module and a limiter works; "script" is the clear error', { skip }, async () => {
  const before = await counts(m);
  const logger = keeper();
  const limiter = new RateLimit({ client: m, limit: GCRA, logger, timeout: 5000 });
  assert.deepEqual(await limiter.check('auto'), {
    allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 6000, name: 'default', windowSeconds: 30, moreAfterMs: 6000, local: false,
  });
  assert.deepEqual(await limiter.check('auto'), {
    allowed: true, limit: 5, remaining: 3, retryAfterMs: 0, resetAfterMs: 12000, name: 'default', windowSeconds: 30, moreAfterMs: 6000, local: false,
  });
  assert.deepEqual([limiter.backend, limiter.stats.backend, limiter.stats.setupFailures], ['module', 'module', 0]);
  assert.deepEqual(logger.lines, [['info', 'ratelimit: the server has the ratelimit module; using the module']]);
  const flexible = new RateLimiterRedis({ storeClient: m, points: 5, duration: 60, logger: keeper() });
  const res = await flexible.consume('flex');
  assert.deepEqual(res.toJSON(), { remainingPoints: 4, msBeforeNext: 60000, consumedPoints: 1, isFirstInDuration: true });
  assert.equal(flexible.backend, 'module');
  assert.deepEqual(await sentSince(m, before), { 'command|info': 1, 'rl.gcra': 2, 'rl.counter': 1 });

  const scripted = new RateLimit({ client: m, limit: GCRA, backend: 'script', logger: keeper(), timeout: 5000 });
  await rejectsClearly(scripted.check('script'), 'script');
  assert.equal(await m.sendCommand(['EXISTS', 'rl:http:script']), 0);
});

/** A client of a user that may run everything but COMMAND (docs/managed.md's application user
 * cannot ask COMMAND INFO): "auto" cannot ask it whether it has the module. */
async function aclUser(server, admin) {
  await admin.sendCommand(['ACL', 'SETUSER', 'app', 'on', '>secret', '~*', '+@all', '-command']);
  const c = await connect(server, { username: 'app', password: 'secret' });
  clients.push(c);
  return c;
}

test('auto that cannot ask (NOPERM on COMMAND INFO) takes the module where there is no Lua; with neither, the clear error', { skip }, async () => {
  const logger = keeper();
  const limiter = new RateLimit({ client: await aclUser(moduleOnly, m), limit: GCRA, logger, timeout: 5000, prefix: 'rl:unasked:' });
  assert.equal((await limiter.check('k')).remaining, 4);
  assert.equal(limiter.backend, 'module');
  assert.deepEqual(logger.lines, [['warn',
    'ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO), and it has no Lua scripting ' +
      "engine for the script backend: using the module; set backend='module' to say so"]]);
  const neither = new RateLimit({ client: await aclUser(bare, b), limit: GCRA, logger: keeper(), timeout: 5000, prefix: 'rl:unasked:' });
  await rejectsClearly(neither.check('k'), 'auto');
  assert.equal(await b.sendCommand(['DBSIZE']), 0);
});
