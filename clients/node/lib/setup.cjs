// What happens between a limiter's creation and its first request: the client it was given,
// checked (a client the package does not take is refused in the constructor, by name; how a
// command is sent on each kind is client.cjs's), and its setup: the backend (`COMMAND INFO` for "auto", once per client), its scripts
// (`SCRIPT LOAD`, on every primary of a cluster) and a policy's rules on the module
// (`RL.POLICY.SET`), asked in the background when the limiter is created with a ready client
// and again each time its client becomes ready (a server that restarted has an empty script
// cache), so that no request pays for them inside its timeout. A request that arrives while a
// setup runs waits for it, for at most `setupTimeout` ms after the setup began, and only then
// starts its own timeout.

// @ts-check
'use strict';

const { clientOf, isIoredis } = require('./client.cjs');
const { scriptingError, scripts } = require('./scripts.cjs');

/** The default `setupTimeout`: how long a setup may take before it counts as failed. */
const SETUP_TIMEOUT_MS = 1000;

/** A value as an error message names it: its class, or its type. */
function described(value) {
  if (value === null || typeof value !== 'object') return String(value);
  const name = value.constructor?.name;
  return name && name !== 'Object' ? `a ${name} object` : 'an object without sendCommand';
}

/**
 * `client` checked for RateLimit (and the middleware): node-redis's standalone client
 * (createClient), its Sentinel client (createSentinel) or its cluster client (createCluster), or
 * ioredis's client (`new Redis()`, a server or a Sentinel setup) or its `Cluster`. Throws a
 * TypeError that says which clients it takes and what it got.
 */
function checkClient(client) {
  if (isIoredis(client)) return;
  if (client === null || typeof client !== 'object' || typeof client.sendCommand !== 'function') {
    throw new TypeError(`invalid client: expected a node-redis client (createClient, createSentinel or createCluster from "redis") or an ioredis client (new Redis() or new Cluster() from "ioredis"); got ${described(client)}`);
  }
}

/**
 * How a limiter sends a command on `client` (client.cjs's adapter): `send(args, key)`, on a
 * cluster to the primary of `key`'s slot (left out: the key the command declares,
 * clusterKey), elsewhere to the one server (`key` ignored); whether it is a cluster client, and
 * node-redis's Sentinel client.
 * @param {any} client
 */
function sender(client) {
  const adapter = clientOf(client);
  return { sentinel: adapter.sentinel, cluster: adapter.cluster, send: adapter.send, adapter };
}

/**
 * `storeClient` checked for RateLimiterRedis: node-redis's standalone client (createClient) or
 * its cluster client (createCluster), or ioredis's client (`new Redis()`, a server or a Sentinel
 * setup) or its `Cluster`. Throws an Error (as rate-limiter-flexible's option errors are) that
 * says which clients it takes.
 */
function checkStoreClient(client) {
  const takes = 'RateLimiterRedis takes a node-redis client (createClient from "redis") or its cluster client (createCluster), ' +
    'or an ioredis client (new Redis() or new Cluster() from "ioredis")';
  if (isIoredis(client)) return;
  if (typeof client?.getMasterNode === 'function') {
    throw new Error(`invalid storeClient: ${takes}; got node-redis's Sentinel client (createSentinel), which it does not take (RateLimit and rateLimitMiddleware do)`);
  }
  // An object without sendCommand that says whether it is ready is taken, as rate-limiter-flexible
  // takes it: its own tests stand for a client not connected with `{ isReady: () => false }`,
  // `{ isOpen: false }` or ioredis's `{ status: 'closed' }` and rejectIfRedisNotReady, which then
  // sends nothing.
  const saysReady = client?.isReady !== undefined || client?.isOpen !== undefined || typeof client?.status === 'string';
  if (client === null || typeof client !== 'object' || (typeof client.sendCommand !== 'function' && !saysReady)) {
    throw new Error(`invalid storeClient: ${takes}; got ${described(client)}`);
  }
}

/** `setupTimeout`, checked. */
function checkSetupTimeout(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms <= 0) {
    throw new TypeError(`invalid setupTimeout: expected a positive number of milliseconds; got ${String(ms)}`);
  }
  return ms;
}

/**
 * Whether `client` can take commands now (client.cjs's `ready`: node-redis's `isReady`, or for
 * its cluster client open with its primaries known; ioredis's `status` 'ready'). Anything else (a
 * wrapper of the application's) is not known to be: its setup waits for the first request.
 */
function clientReady(client) {
  if (client === null || typeof client !== 'object') return false;
  if (typeof client.sendCommand !== 'function' && !isIoredis(client)) return client.isReady === true;
  return clientOf(client).ready();
}

// Per client, the setups to run again when it becomes ready (client.cjs's `onReady`: at each
// connection, a reconnection included, or a cluster client's once its slots are known). One
// listener per client however many limiters share it (node-redis warns past ten), holding each
// setup weakly: a limiter the application lets go is not kept alive by its client. Dead entries
// are dropped as the set grows and at each event.
const watched = new WeakMap();

function watch(client, setup) {
  if (typeof client?.on !== 'function' || typeof client?.sendCommand !== 'function') return;
  let entry = watched.get(client);
  if (entry === undefined) {
    const refs = new Set();
    entry = { refs, pruneAt: 64 };
    watched.set(client, entry);
    clientOf(client).onReady(() => {
      loaded.delete(client); // a new connection: perhaps a server that restarted, its cache empty
      for (const ref of refs) {
        const s = ref.deref();
        if (s === undefined) refs.delete(ref);
        else s.start();
      }
    });
  }
  entry.refs.add(new WeakRef(setup));
  if (entry.refs.size >= entry.pruneAt) {
    for (const ref of entry.refs) if (ref.deref() === undefined) entry.refs.delete(ref);
    entry.pruneAt = Math.max(64, 2 * entry.refs.size);
  }
}

/**
 * One limiter's setup: `work()` (its questions and loads) run in the background, now if
 * `client` is ready and again each time it becomes ready; a run that fails or takes longer than
 * `timeoutMs` is reported to `failed(error)` (the limiter logs and counts it) and never rejects.
 * `pending` is the run in flight (a promise that resolves when it ends, whatever its outcome),
 * undefined when none is: what a request waits for.
 */
class Setup {
  /**
   * @param {unknown} client
   * @param {{ work: () => Promise<unknown>, timeoutMs: number, failed: (error: any) => void }} options
   */
  constructor(client, { work, timeoutMs, failed }) {
    this.work = work;
    this.timeoutMs = timeoutMs;
    this.failed = failed;
    /** @type {Promise<void> | undefined} */
    this.pending = undefined;
    this.again = false; // the client became ready during a run: run once more after it
    watch(client, this);
    if (clientReady(client)) this.start();
  }

  /** Starts a run, or another once the one in flight ends. */
  start() {
    if (this.pending !== undefined) {
      this.again = true;
      return;
    }
    const ms = this.timeoutMs;
    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    const deadline = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`not done within ${ms} ms (setupTimeout)`)), ms);
      timer.unref(); // a setup keeps no process alive
    });
    const run = Promise.resolve().then(() => this.work());
    run.catch(() => {}); // its failure after the deadline is the deadline's, already reported
    // Done: no longer pending (a request that comes now waits for nothing), then reported.
    const settle = (ok, error) => {
      clearTimeout(timer);
      this.pending = undefined;
      if (!ok) {
        try {
          this.failed(error);
        } catch {
          // a logger that throws: the setup's outcome is the same, and no request waits on it
        }
      }
      if (this.again) {
        this.again = false;
        this.start();
      }
    };
    this.pending = Promise.race([run, deadline]).then(() => settle(true), (error) => settle(false, error));
  }
}

// Per client, the SCRIPT LOADs sent since it last became ready (script name -> its promise): a
// script is loaded once per client however many limiters share it; a failed load is not kept.
const loaded = new WeakMap();

/**
 * SCRIPT LOAD of the scripts `names` with `send(args)` (the limiter's: the one server, or a
 * Sentinel setup's primary); on a cluster client, on each primary (a script is per node).
 */
async function loadScripts(client, send, names) {
  let sent = loaded.get(client);
  if (sent === undefined) {
    sent = new Map();
    loaded.set(client, sent);
  }
  const all = scripts();
  const loads = [...new Set(names)].map((name) => {
    let load = sent.get(name);
    if (load === undefined) {
      const source = all[name].source;
      load = clientOf(client).cluster ? loadOnPrimaries(client, source) : Promise.resolve().then(() => send(['SCRIPT', 'LOAD', source]));
      sent.set(name, load);
      const pending = load;
      pending.catch(() => {
        if (sent.get(name) === pending) sent.delete(name);
      });
    }
    return load;
  });
  // Every load answered before the first refusal is passed on (a server without Lua refuses
  // them all): a call made after it sends them again, none found still in flight.
  const refused = (await Promise.allSettled(loads)).find((r) => r.status === 'rejected');
  if (refused !== undefined) throw refused.reason;
}

/**
 * A limiter's SCRIPT LOADs (`load()`, loadScripts with its scripts) under the option `backend`:
 * a server without Lua refuses them, and that refusal is the script backend's error
 * (scriptingError); any other is passed on as it is.
 */
async function loadScriptsFor(backend, load) {
  try {
    await load();
  } catch (error) {
    throw scriptingError(error, backend);
  }
}

// SCRIPT LOAD of `source` on every primary of a cluster client.
async function loadOnPrimaries(client, source) {
  const primaries = await clientOf(client).primaries();
  await Promise.all(primaries.map((send) => send(['SCRIPT', 'LOAD', source])));
}

module.exports = {
  SETUP_TIMEOUT_MS,
  Setup,
  checkClient,
  checkSetupTimeout,
  checkStoreClient,
  clientReady,
  isIoredis,
  loadScripts,
  loadScriptsFor,
  sender,
};
