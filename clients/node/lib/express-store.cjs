// RedisModuleStore: a store for express-rate-limit (its `Store` interface: init, increment,
// decrement, resetKey, get, shutdown, localKeys, prefix) backed by the module, one call per
// request, on any client setup.cjs takes (standalone, Sentinel, Cluster), on the module or its
// scripts (backend "auto", "module", "script"), so that an express-rate-limit user swaps
// `store:` and keeps every other option. Two modes:
// - express-rate-limit's own window (the default): a key's window starts at its first hit and
//   lasts windowMs, every hit counts (those over the limit too) and decrement takes one back, as
//   its MemoryStore and rate-limit-redis count, in rate-limit-redis's own format: a plain integer
//   string whose TTL, set at the first hit, is the window (`GET` reads it). `RL.COUNTER key
//   windowMs`: totalHits the count, resetTime now + its PTTL; decrement `BY -1 XX` (no key
//   made), get `BY 0` (a read: writes and propagates nothing), resetKey DEL.
// - `limit: { algorithm, ... }`: one of the module's algorithms decides (GCRA, buckets, windows,
//   sliding log, warm-up); a refused request takes nothing, and totalHits is what makes
//   express-rate-limit decide the same: the units taken when admitted, limit + 1 when refused.
// docs/express-rate-limit.md says what each field means in each mode, and every difference.

// @ts-check
'use strict';

/** @typedef {import('../index.cjs').RedisModuleStoreOptions} RedisModuleStoreOptions */
/** @typedef {import('../index.cjs').ExpressRateLimitOptionsLike} ExpressRateLimitOptionsLike */
/** @typedef {import('../index.cjs').ClientRateLimitInfo} ClientRateLimitInfo */

const { MAX_DURATION_MS } = require('./limits.cjs');
const { parseCount, parseReply } = require('./reply.cjs');
const { counterArgs } = require('./counter.cjs');
const { withTimeout } = require('./rate-limit.cjs');
const { Backend } = require('./backend.cjs');
const { SETUP_TIMEOUT_MS, checkClient } = require('./setup.cjs');
const { TEST_NOW, checkBackend } = require('./scripts.cjs');
const { checkLimit } = require('./validations.cjs');

const OPTIONS = new Set(['client', 'prefix', 'limit', 'backend', 'timeout', 'setupTimeout', 'logger']);
// The algorithms whose parameters hold a window: express-rate-limit's windowMs must be it.
const WINDOWED = new Set(['fixedwindow', 'slidingwindow', 'slidinglog']);

// With an algorithm and skipFailedRequests, the refusals of one key remembered each with its
// retry time until its decrement comes: as many as can be in flight at once. A refusal's
// decrement comes when its response ends, and express-rate-limit's handler answers at once, so
// a key has about one in flight for each connection its client holds to this process (browsers
// open 6 a host over HTTP/1.1; HTTP/2 advises at least 100 streams a connection, RFC 9113
// 6.5.2). Past it the oldest are kept as a count, which lasts until the latest of their retry
// times (`folded`): a decrement then taken for a refusal's gives nothing back. That is the safe
// side: an admitted request's failure taken for a refusal's keeps its unit taken (stricter),
// where the other way round a unit never taken would be given back (more than the limit).
const REMEMBERED_REFUSALS = 100;
// The keys whose refusals are remembered, at most. A key is forgotten when its refusals' retry
// times have all passed (their decrements are not coming), never before: a key forgotten with a
// refusal in flight would give back, at its decrement, a unit never taken. Past the bound, with
// every remembered key's refusals still in force, a new key's refusal joins a count of refusals
// without their key (`unkeyed`), which lasts until the latest of their retry times: meanwhile a
// decrement of a key not remembered is taken for one of them (the safe side, as `folded`).
const REMEMBERED_KEYS = 10_000;
// Remembered keys looked at for forgetting when a new key is remembered: the oldest two, each
// forgotten if its times have passed, else moved to the back (a round, in O(1) a refusal).
const SWEPT = 2;

const unexpected = (what) => new Error(`unexpected reply from the module: ${what}`);

/**
 * A store for express-rate-limit on the module: `rateLimit({ windowMs, limit, store: new
 * RedisModuleStore({ client }) })`. Its setup (the backend, the scripts) runs in the background
 * from the constructor; a Redis error or a reply it cannot read rejects the call, so that
 * express-rate-limit's `passOnStoreError` decides.
 */
class RedisModuleStore {
  /** @param {RedisModuleStoreOptions} options */
  constructor(options = /** @type {RedisModuleStoreOptions} */ ({})) {
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`invalid options: expected an object with a client; got ${String(options)}`);
    }
    for (const name of Object.keys(options)) {
      if (!OPTIONS.has(name)) {
        throw new TypeError(`invalid option ${name}: RedisModuleStore takes ${[...OPTIONS].join(', ')} (express-rate-limit's own options go to rateLimit())`);
      }
    }
    const {
      client, prefix = 'rl:erl:', limit, backend = 'auto', timeout = 1000, setupTimeout = SETUP_TIMEOUT_MS,
      logger = console,
    } = options;
    checkClient(client);
    if (typeof prefix !== 'string') throw new TypeError(`invalid prefix: expected a string; got ${String(prefix)}`);
    if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout <= 0) {
      throw new TypeError(`invalid timeout: expected a positive number of milliseconds; got ${String(timeout)}`);
    }
    checkBackend(backend); // checked in the options' order; backend.cjs keeps it
    this.timeout = timeout;
    /** express-rate-limit's double-count check reads these: keys are shared by every instance. */
    this.prefix = prefix;
    /** @type {false} */
    this.localKeys = false;
    /** @type {import('../index.cjs').RedisModuleStoreStats} */
    this.stats = { calls: 0, failures: 0, setupFailures: 0, backend: undefined };
    this[TEST_NOW] = undefined;
    // The mode: express-rate-limit's window (algorithm undefined), or one of the module's
    // algorithms, checked now (a policy and a concurrency limit are refused: no single key's
    // units to count, or a lease a store cannot give back).
    this.algorithm = undefined;
    if (limit !== undefined) {
      if (limit === null || typeof limit !== 'object') {
        throw new TypeError(`invalid limit: expected { algorithm, ...parameters } (or leave it out for express-rate-limit's window); got ${String(limit)}`);
      }
      if (Reflect.get(limit, 'policy') !== undefined) {
        throw new TypeError('invalid limit.policy: the store takes one algorithm; a policy needs rateLimitMiddleware or RateLimit');
      }
      const checked = checkLimit(limit, undefined);
      if (checked.concurrent) {
        throw new TypeError('invalid limit.algorithm: a concurrency limit holds a lease until the response ends, which a store cannot give back; use rateLimitMiddleware');
      }
      const lower = /** @type {string} */ (checked.algorithm);
      this.algorithm = {
        name: lower,
        command: checked.command,
        words: [...checked.args, ...checked.block],
        sixth: checked.sixth,
        // The reply's `limit`: the burst, the capacity or the window's limit (a warm-up's is 1).
        limit: lower === 'warmup' ? 1 : Number(checked.args[0]),
        windowMs: WINDOWED.has(lower) ? Number(checked.args[1]) : undefined,
      };
    }
    // Set by init: express-rate-limit's windowMs (the counter's period), and whether a refused
    // request is decremented later (skipFailedRequests).
    /** @type {number | undefined} */
    this.windowMs = undefined;
    /** @type {Error | undefined} */
    this.initError = new Error('RedisModuleStore: init(options) was not called; pass the store to rateLimit({ store })');
    this.refusalsDecremented = false;
    // With an algorithm and skipFailedRequests: per key, the resetTimes (ms) of refused requests
    // whose decrement is still to come, the latest REMEMBERED_REFUSALS of them, and the count of
    // older ones with the latest of their resetTimes (a key in `folded` is in `refused`, perhaps
    // with no time). A refusal took nothing, so its decrement gives nothing back.
    /** @type {Map<string, number[]>} */
    this.refused = new Map();
    /** @type {Map<string, { count: number, until: number }>} */
    this.folded = new Map();
    // The refusals of keys not remembered (past rememberedKeys): their count and the latest of
    // their retry times. rememberedKeys is REMEMBERED_KEYS; tests lower it.
    this.unkeyed = { count: 0, until: 0 };
    this.rememberedKeys = REMEMBERED_KEYS;
    // The backend (backend.cjs): the mode's commands (the counter; an algorithm's and the
    // refund's), their scripts loaded by its setup, in the background from now.
    this.wiring = new Backend(this, {
      client,
      option: backend,
      commands: this.algorithm === undefined ? ['RL.COUNTER'] : [this.algorithm.command, 'RL.REFUND'],
      setupTimeout,
      logger,
      name: 'RedisModuleStore',
      stats: this.stats,
    });
    this.setup = this.wiring.setup;
  }

  /**
   * The backend in use, 'module' or 'script', once known.
   * @returns {'module' | 'script' | undefined}
   */
  get backend() {
    return this.wiring.chosen;
  }

  /**
   * Called once by express-rate-limit with its options: reads `windowMs` (an integer from 1 ms to
   * 10 years), and with an algorithm checks `limit` (a number equal to the algorithm's) and, for a
   * window or a log, that `windowMs` is its window. A bad option throws here (express-rate-limit
   * logs it) and every later call rejects with the same error.
   * @param {ExpressRateLimitOptionsLike} options
   */
  init(options) {
    try {
      const windowMs = options?.windowMs;
      if (!Number.isSafeInteger(windowMs) || windowMs < 1 || windowMs > MAX_DURATION_MS) {
        throw new TypeError(`invalid windowMs for RedisModuleStore: expected an integer number of milliseconds from 1 to 10 years; got ${String(windowMs)}`);
      }
      const a = this.algorithm;
      if (a !== undefined) {
        const limit = options.limit;
        if (typeof limit === 'function') {
          throw new TypeError(`invalid limit for RedisModuleStore with limit.algorithm ${a.name}: the algorithm decides, so express-rate-limit's limit must be the number it admits (${a.limit}), not a function`);
        }
        if (limit !== a.limit) {
          throw new TypeError(`invalid limit for RedisModuleStore with limit.algorithm ${a.name}: express-rate-limit's limit is ${String(limit)}, the algorithm admits ${a.limit}; make them equal`);
        }
        if (a.windowMs !== undefined && windowMs !== a.windowMs) {
          throw new TypeError(`invalid windowMs for RedisModuleStore with limit.algorithm ${a.name}: express-rate-limit's windowMs is ${windowMs}, the algorithm's window ${a.windowMs} ms; make them equal`);
        }
      }
      this.windowMs = windowMs;
      this.refusalsDecremented = a !== undefined && options.skipFailedRequests === true;
      this.initError = undefined;
    } catch (error) {
      this.initError = error;
      throw error;
    }
  }

  /**
   * One hit of `key`: `{ totalHits, resetTime }`. express-rate-limit's window: the hits of the
   * key's window, this one included (never refused here: express-rate-limit compares with its
   * limit), and when the window ends. An algorithm: the units the key holds taken, this one
   * included, when admitted, and when it is fresh again; `limit + 1` and the retry time when
   * refused (it took nothing).
   * @param {string} key
   * @returns {Promise<ClientRateLimitInfo>}
   */
  async increment(key) {
    const sent = Date.now();
    const a = this.algorithm;
    if (a === undefined) {
      const c = await this.#counter(key, 1);
      return { totalHits: c.count, resetTime: new Date(sent + c.ttlMs) };
    }
    const r = await this.#admission(key, []);
    if (r.allowed) return { totalHits: Math.max(1, a.limit - r.remaining), resetTime: new Date(sent + r.resetAfterMs) };
    const retryAt = sent + (r.retryAfterMs >= 0 ? r.retryAfterMs : r.resetAfterMs);
    if (this.refusalsDecremented) this.#remember(key, retryAt);
    return { totalHits: a.limit + 1, resetTime: new Date(retryAt) };
  }

  /**
   * Takes one hit of `key` back (express-rate-limit's skipFailedRequests and
   * skipSuccessfulRequests): express-rate-limit's window, `RL.COUNTER key windowMs BY -1 XX`
   * (a key gone makes none); an algorithm, RL.REFUND 1, where a refused request took nothing,
   * so its decrement (with skipFailedRequests) gives nothing back and costs no round trip.
   * @param {string} key
   * @returns {Promise<void>}
   */
  async decrement(key) {
    if (this.initError !== undefined) throw this.initError;
    if (this.algorithm === undefined) {
      await this.#counter(key, -1, true);
      return;
    }
    if (this.#forget(key)) return;
    const given = await this.#call(['RL.REFUND', this.#key(key), '1']);
    if (typeof given !== 'number' || (given !== 0 && given !== 1)) {
      throw unexpected(`RL.REFUND answered ${String(given)}`);
    }
  }

  /**
   * The key's hits and when its window ends, or undefined for a key with none (no key, or a
   * window that has ended), read without writing anything (express-rate-limit's window:
   * RL.COUNTER's BY 0; an algorithm: COST 0 DRYRUN).
   * @param {string} key
   * @returns {Promise<ClientRateLimitInfo | undefined>}
   */
  async get(key) {
    const sent = Date.now();
    const a = this.algorithm;
    if (a === undefined) {
      const c = await this.#counter(key, 0);
      if (c.ttlMs === -2) return undefined;
      // A key without a TTL (written by hand: the store's keys always have one) has no resetTime.
      return { totalHits: c.count, resetTime: c.ttlMs >= 0 ? new Date(sent + c.ttlMs) : undefined };
    }
    const r = await this.#admission(key, ['COST', '0', 'DRYRUN']);
    if (r.allowed && r.resetAfterMs === 0) return undefined;
    // Refused at COST 0: a BLOCK (limit.block) in force.
    if (!r.allowed) return { totalHits: a.limit + 1, resetTime: new Date(sent + r.retryAfterMs) };
    return { totalHits: a.limit - r.remaining, resetTime: new Date(sent + r.resetAfterMs) };
  }

  /**
   * Forgets `key` (DEL): its next hit starts a new window.
   * @param {string} key
   * @returns {Promise<void>}
   */
  async resetKey(key) {
    if (this.initError !== undefined) throw this.initError;
    this.refused.delete(key);
    this.folded.delete(key);
    const k = this.#key(key);
    await this.#call(['DEL', k], k);
  }

  /**
   * express-rate-limit's shutdown: forgets what this instance keeps in memory (the refusals
   * whose decrement is to come). The client is the application's: not closed.
   * @returns {Promise<void>}
   */
  async shutdown() {
    this.refused.clear();
    this.folded.clear();
    this.unkeyed = { count: 0, until: 0 };
  }

  // A refusal of `key` whose decrement is to come, until `retryAt` (ms): past
  // REMEMBERED_REFUSALS, the oldest is folded into the key's count.
  /**
   * @param {string} key
   * @param {number} retryAt
   */
  #remember(key, retryAt) {
    let times = this.refused.get(key);
    if (times === undefined) {
      const now = Date.now();
      this.#sweep(now);
      if (this.refused.size >= this.rememberedKeys) {
        if (this.unkeyed.until <= now) this.unkeyed = { count: 0, until: 0 };
        this.unkeyed.count += 1;
        this.unkeyed.until = Math.max(this.unkeyed.until, retryAt);
        return;
      }
      times = [];
      this.refused.set(key, times);
    }
    if (times.length >= REMEMBERED_REFUSALS) {
      const until = /** @type {number} */ (times.shift());
      const folded = this.folded.get(key);
      if (folded === undefined) this.folded.set(key, { count: 1, until });
      else {
        folded.count += 1;
        folded.until = Math.max(folded.until, until);
      }
    }
    times.push(retryAt);
  }

  // Whether a decrement of `key` is a remembered refusal's: then the oldest one still before
  // its resetTime is taken (the folded count first) and nothing is given back. Those past their
  // resetTime go: their decrement is not coming.
  /** @param {string} key */
  #forget(key) {
    const times = this.refused.get(key);
    const now = Date.now();
    if (times === undefined) {
      if (this.unkeyed.count === 0 || this.unkeyed.until <= now) return false;
      this.unkeyed.count -= 1;
      return true;
    }
    let taken = false;
    const folded = this.folded.get(key);
    if (folded !== undefined && folded.until > now) {
      folded.count -= 1;
      taken = true;
    }
    if (folded !== undefined && (folded.count === 0 || folded.until <= now)) this.folded.delete(key);
    while (times.length > 0 && /** @type {number} */ (times[0]) <= now) times.shift();
    if (!taken && times.length > 0) {
      times.shift();
      taken = true;
    }
    if (times.length === 0 && !this.folded.has(key)) this.refused.delete(key);
    return taken;
  }

  // The oldest SWEPT remembered keys: each forgotten if its retry times (its own and its folded
  // count's) have passed, else moved behind the others.
  /** @param {number} now */
  #sweep(now) {
    for (let i = 0; i < SWEPT && this.refused.size > 0; i++) {
      const [key, times] = /** @type {[string, number[]]} */ (this.refused.entries().next().value);
      const folded = this.folded.get(key);
      this.refused.delete(key);
      if ((times.at(-1) ?? 0) <= now && (folded === undefined || folded.until <= now)) this.folded.delete(key);
      else this.refused.set(key, times);
    }
  }

  #key(key) {
    return `${this.prefix}${key}`;
  }

  // express-rate-limit's window: RL.COUNTER on `key` adding `by` (`xx`: only a key that
  // exists), its reply read.
  async #counter(key, by, xx = false) {
    if (this.initError !== undefined) throw this.initError;
    return parseCount(await this.#call(counterArgs(this.#key(key), /** @type {number} */ (this.windowMs), { by, xx })));
  }

  // An algorithm's command for `key`, with `options` (COST 0 DRYRUN for a peek), sent; its reply
  // read (a reply of another shape, or of another limit, rejects).
  async #admission(key, options) {
    if (this.initError !== undefined) throw this.initError;
    const a = /** @type {NonNullable<typeof this.algorithm>} */ (this.algorithm);
    const args = [a.command, this.#key(key), ...a.words, ...options];
    const r = parseReply(await this.#call(args), a.sixth);
    if (r.limit !== a.limit) throw unexpected(`limit ${r.limit} where ${a.limit} was expected (${args[0]})`);
    return r;
  }

  // A command, within `timeout` (after a setup in flight, which setupTimeout bounds): on the
  // module as it is, on the scripts as its script (DEL as it is on either), sent by `routing`'s
  // slot on a cluster (left out: the key the command declares). Counted; a failure rejects.
  /**
   * @param {string[]} args
   * @param {string} [routing]
   */
  async #call(args, routing = undefined) {
    if (this.setup.pending !== undefined) await this.setup.pending;
    this.stats.calls += 1;
    try {
      const run = () => (args[0] === 'DEL' ? this.wiring.send(args, routing) : this.wiring.run(args));
      return await withTimeout(run, this.timeout);
    } catch (error) {
      this.stats.failures += 1;
      throw error;
    }
  }
}

module.exports = { RedisModuleStore };
