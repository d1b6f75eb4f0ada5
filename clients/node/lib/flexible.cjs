// rate-limiter-flexible's interface, backed by the module: RateLimiterRes and RateLimiterRedis,
// so that its users switch by changing one constructor.

// @ts-check
'use strict';

const { DenialMemory, monotonicMs } = require('./denial-memory.cjs');
const { MAX_COUNT, MAX_DURATION_MS } = require('./limits.cjs');
const { parseCount } = require('./reply.cjs');
const { counterArgs } = require('./counter.cjs');
const { Backend } = require('./backend.cjs');
const { LimiterBase, ResBase } = require('./flexible-base.cjs');
const { SETUP_TIMEOUT_MS, checkStoreClient } = require('./setup.cjs');
const { TEST_NOW, checkBackend } = require('./scripts.cjs');

// The options are read as index.d.cts declares them, so that tsc (tsconfig.json) fails when the
// two part.
/** @typedef {import('../index.cjs').RateLimiterRedisOptions} RateLimiterRedisOptions */

/**
 * rate-limiter-flexible's RateLimiterRes: what consume and the others resolve (or reject) with.
 * When rate-limiter-flexible is installed, a subclass of its own (flexible-base.cjs), so that
 * its BurstyRateLimiter takes a refusal of ours for one; its fields are then its accessors.
 */
class RateLimiterRes extends ResBase {
  /**
   * @param {number} [remainingPoints]
   * @param {number} [msBeforeNext]
   * @param {number} [consumedPoints]
   * @param {boolean} [isFirstInDuration]
   */
  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    super(remainingPoints, msBeforeNext, consumedPoints, Boolean(isFirstInDuration));
    /** @type {number} */
    this.remainingPoints = remainingPoints;
    /** @type {number} */
    this.msBeforeNext = msBeforeNext;
    /** @type {number} */
    this.consumedPoints = consumedPoints;
    /** @type {boolean} */
    this.isFirstInDuration = Boolean(isFirstInDuration);
  }

  toJSON() {
    return {
      remainingPoints: this.remainingPoints,
      msBeforeNext: this.msBeforeNext,
      consumedPoints: this.consumedPoints,
      isFirstInDuration: this.isFirstInDuration,
    };
  }

  toString() {
    return JSON.stringify(this.toJSON());
  }
}

const UNSUPPORTED_OPTIONS = ['customIncrTtlLuaScript'];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * rate-limiter-flexible's RateLimiterRedis, on the module: `points` per `duration` seconds, the
 * window starting at the key's first consume, in rate-limiter-flexible's own key: `keyPrefix:key`
 * holding the points consumed as a plain integer string, its TTL the window (RL.COUNTER: INCRBY,
 * and the expiry at the first consume, in one call; `block` and `set` write it with SET as
 * there), so that keys it wrote read the same here and back. See docs/node.md for every
 * difference. When rate-limiter-flexible is installed, a subclass of its
 * RateLimiterCompatibleAbstract (flexible-base.cjs), which its wrappers take.
 */
class RateLimiterRedis extends LimiterBase {
  // RateLimiterCompatibleAbstract's accessors, which throw until a subclass gives its own.
  #keyPrefix = 'rlflx';
  #blockDuration = 0;
  #execEvenly = false;
  #blockOnConsumed = 0;

  /** @param {RateLimiterRedisOptions} opts */
  constructor(opts = /** @type {RateLimiterRedisOptions} */ ({})) {
    super();
    if (opts.storeClient === undefined) throw new Error('storeClient is not set');
    for (const o of UNSUPPORTED_OPTIONS) {
      if (Reflect.get(opts, o)) throw new Error(`${o} is not supported by ratelimit-redis-module's RateLimiterRedis`);
    }
    // A client it cannot drive is refused now, by name.
    checkStoreClient(opts.storeClient);
    /** @type {any} */
    this.client = opts.storeClient;
    // The backend, as RateLimit's (not in rate-limiter-flexible): "auto" (default), "module" or
    // "script" (checked here, in the options' order; backend.cjs keeps it).
    checkBackend(opts.backend ?? 'auto');
    this[TEST_NOW] = undefined;
    // points 0 admits nothing, as there: every consume of a point or more is counted and refused.
    this.points = opts.points === undefined ? 4 : opts.points;
    if (!Number.isSafeInteger(this.points) || this.points < 0 || this.points > MAX_COUNT) {
      throw new Error('points must be an integer from 0 to 10^12');
    }
    this.duration = opts.duration === undefined ? 1 : opts.duration;
    if (typeof this.duration !== 'number' || !Number.isFinite(this.duration) || this.duration < 0) {
      throw new Error('duration must be set and must be a finite, non-negative number');
    }
    // Whole seconds, as there (the key's EX); 0 (or less than a second) means "never expires":
    // INCRBY with no expiry, msBeforeNext -1. RL.COUNTER's window is at most 10 years.
    if (Math.floor(this.duration) * 1000 > MAX_DURATION_MS) throw new Error('duration must be at most 10 years (315360000 seconds)');
    this.blockDuration = opts.blockDuration ?? 0;
    if (typeof this.blockDuration !== 'number' || !(this.blockDuration >= 0)) {
      throw new Error('blockDuration must be a non-negative number of seconds');
    }
    this.keyPrefix = opts.keyPrefix === undefined ? 'rlflx' : opts.keyPrefix;
    if (typeof this.keyPrefix !== 'string') throw new Error('keyPrefix must be string');
    this.insuranceLimiter = opts.insuranceLimiter;
    this.rejectIfRedisNotReady = Boolean(opts.rejectIfRedisNotReady);
    // execEvenly: an admitted consume resolves after a delay that spreads the rest of the
    // window's points over the time left (rate-limiter-flexible's formula, see consume).
    this.execEvenly = Boolean(opts.execEvenly);
    this.execEvenlyMinDelayMs = opts.execEvenlyMinDelayMs ?? Math.ceil(this.msDuration / this.points);
    // In-memory block: a key that has consumed inMemoryBlockOnConsumed points is refused in
    // this process, without Redis, for inMemoryBlockDuration seconds (or the window's time left).
    this.inMemoryBlockOnConsumed = opts.inMemoryBlockOnConsumed ? parseInt(String(opts.inMemoryBlockOnConsumed), 10) : 0;
    if (this.inMemoryBlockOnConsumed > 0 && this.points > this.inMemoryBlockOnConsumed) {
      throw new Error('inMemoryBlockOnConsumed option must be greater or equal "points" option');
    }
    this.inMemoryBlockDuration = opts.inMemoryBlockDuration ? parseInt(String(opts.inMemoryBlockDuration), 10) : 0;
    if (this.inMemoryBlockDuration > 0 && this.inMemoryBlockOnConsumed === 0) {
      throw new Error('inMemoryBlockOnConsumed option must be set up');
    }
    this.blockOnConsumed = opts.blockOnConsumed ?? 0;
    this.inMemoryBlocked = new DenialMemory(10_000);
    // The in-memory blocks' clock: monotonic milliseconds (not in rate-limiter-flexible; a
    // test gives a fake one that moves with the server's debug clock).
    this.now = opts.now ?? monotonicMs;
    if (typeof this.now !== 'function') throw new Error('now must be a function returning milliseconds');
    // The client's adapter and the backend (backend.cjs), as RateLimit's: node-redis's or
    // ioredis's, a standalone or a cluster client (client.cjs): on a cluster each command to its
    // key's node (the SCRIPT LOAD after NOSCRIPT too), COMMAND INFO to any, a MULTI to its key's.
    // An object that only says whether it is ready (rejectIfRedisNotReady's stand-in for a client
    // not connected) has no adapter: it is never sent anything. Its setup loads the counter's
    // script (the other commands are plain ones); `logger` hears the choice and a failed setup.
    this.wiring = new Backend(this, {
      client: this.client,
      option: opts.backend ?? 'auto',
      commands: ['RL.COUNTER'],
      setupTimeout: opts.setupTimeout ?? SETUP_TIMEOUT_MS,
      logger: opts.logger === undefined ? console : opts.logger,
      name: 'RateLimiterRedis',
    });
    this.adapter = this.wiring.adapter;
    this.cluster = this.wiring.cluster;
    this.setup = this.wiring.setup;
  }

  /**
   * The backend in use, 'module' or 'script', once known.
   * @returns {'module' | 'script' | undefined}
   */
  get backend() {
    return this.wiring.chosen;
  }

  /** @returns {string} */
  get keyPrefix() {
    return this.#keyPrefix;
  }

  set keyPrefix(value) {
    this.#keyPrefix = value;
  }

  /** @returns {number} */
  get blockDuration() {
    return this.#blockDuration;
  }

  set blockDuration(value) {
    this.#blockDuration = value;
  }

  /** @returns {boolean} */
  get execEvenly() {
    return this.#execEvenly;
  }

  set execEvenly(value) {
    this.#execEvenly = value;
  }

  // Blocks from `now`, read before the consume was sent: the server's msBeforeNext counts
  // from its own instant, which is no earlier.
  #blockInMemory(rlKey, ms, now) {
    if (ms > 0) this.inMemoryBlocked.remember(rlKey, { retryAfterMs: ms, resetAfterMs: ms }, 0, now);
  }

  /** Forgets every in-memory block. */
  deleteInMemoryBlockedAll() {
    this.inMemoryBlocked.entries.clear();
  }

  get msDuration() {
    return this.duration * 1000;
  }

  get msBlockDuration() {
    return this.blockDuration * 1000;
  }

  /** @returns {number} */
  get blockOnConsumed() {
    return this.#blockOnConsumed;
  }

  set blockOnConsumed(value) {
    // rate-limiter-flexible's: a threshold of consumed points at which a consume blocks the key
    // for blockDuration (0: off, the first consume over points blocks).
    const n = value ? parseInt(String(value), 10) : 0;
    if (n > 0 && this.points > n) throw new Error('blockOnConsumed option must be greater or equal "points" option');
    this.#blockOnConsumed = n;
  }

  /**
   * @param {string | number} key
   * @returns {string}
   */
  getKey(key) {
    // A string either way: a number sent as a key word fails in node-redis.
    return this.keyPrefix.length > 0 ? `${this.keyPrefix}:${key}` : String(key);
  }

  /**
   * @param {string} rlKey
   * @returns {string}
   */
  parseKey(rlKey) {
    return this.keyPrefix.length > 0 ? rlKey.substring(this.keyPrefix.length + 1) : rlKey;
  }

  // The seconds of a key's expiry for this call, as rate-limiter-flexible reads them:
  // options.customDuration when it is a number of 0 or more (0: never), else duration; whole
  // seconds, rounded down (its `EX`), so that less than a second is "never" too.
  #secondsFor(options) {
    const seconds = options?.customDuration;
    const s = Math.floor(typeof seconds === 'number' && seconds >= 0 ? seconds : this.duration);
    if (s * 1000 > MAX_DURATION_MS) throw new Error('options.customDuration must be at most 10 years (315360000 seconds)');
    return s;
  }

  // rejectIfRedisNotReady: a command is not sent, and the call rejects at once, unless the client
  // says it is ready: ioredis's `status` 'ready'; node-redis's isReady (a boolean since node-redis
  // 4, a function before), or failing that its isOpen (false once the client is closed).
  #checkReady() {
    if (!this.rejectIfRedisNotReady) return;
    // ioredis's client (or a stand-in for one not connected: `{ status: 'closed' }`, as
    // rate-limiter-flexible's tests give it) says it with `status`.
    if (this.adapter?.kind === 'ioredis' || (this.adapter === undefined && typeof this.client.status === 'string')) {
      if (this.client.status !== 'ready') throw new Error('Redis connection is not ready');
      return;
    }
    const { isReady, isOpen } = this.client;
    let ready = isOpen !== false;
    if (typeof isReady === 'function') ready = Boolean(isReady.call(this.client));
    else if (typeof isReady === 'boolean') ready = isReady;
    if (!ready) throw new Error('Redis connection is not ready');
  }

  // RL.COUNTER on the backend (the module, or counter.lua): [count, pttl].
  async #counter(rlKey, seconds, by) {
    this.#checkReady();
    await this.setup.pending;
    return parseCount(await this.wiring.run(counterArgs(rlKey, `${seconds}s`, { by })));
  }

  // Plain commands, the same on both backends: one to the key's node, or a MULTI there. Sent
  // once the backend is known, as every other call: a server with neither the module nor Lua
  // gets the same clear error from block, set, delete and a duration of 0 as from consume, and
  // nothing written.
  async #plain(args) {
    this.#checkReady();
    await this.setup.pending;
    await this.wiring.usable();
    return this.wiring.send(args, args[1]);
  }

  async #multi(commands) {
    this.#checkReady();
    await this.setup.pending;
    await this.wiring.usable();
    const replies = await /** @type {NonNullable<typeof this.adapter>} */ (this.adapter).multi(commands, commands[0][1]);
    const failed = replies.find((r) => r instanceof Error);
    if (failed !== undefined) throw failed;
    return replies;
  }

  // rate-limiter-flexible's _upsert without forceExpire: `points` added to the key (negative
  // given back), the key made with the expiry `seconds` (a key without one gets it; 0: none, so
  // INCRBY and PTTL in a MULTI, as there). Resolves to its count and PTTL.
  async #upsert(rlKey, points, seconds) {
    if (seconds > 0) {
      const { count, ttlMs } = await this.#counter(rlKey, seconds, points);
      // 0 points only reads: on no key, what rate-limiter-flexible answers having made one of 0
      // (the window), none made.
      if (ttlMs === -2) return { consumed: 0, ttl: seconds * 1000 };
      return { consumed: count, ttl: ttlMs };
    }
    const [consumed, ttl] = await this.#multi([['INCRBY', rlKey, String(points)], ['PTTL', rlKey]]);
    return { consumed: Number(consumed), ttl: Number(ttl) };
  }

  // rate-limiter-flexible's _upsert with forceExpire (block, set): `SET key points EX seconds`
  // (whole seconds, rounded down; none: no expiry), its own command.
  async #write(rlKey, points, ms) {
    const seconds = Math.floor(ms / 1000);
    await this.#plain(seconds > 0 ? ['SET', rlKey, String(points), 'EX', String(seconds)] : ['SET', rlKey, String(points)]);
  }

  // The key's count and PTTL as RateLimiterRes (rate-limiter-flexible's _getRateLimiterRes).
  #res({ consumed, ttl }, changed) {
    return new RateLimiterRes(Math.max(this.points - consumed, 0), ttl, consumed, consumed === changed);
  }

  /**
   * @param {unknown} points
   * @returns {number}
   */
  #checkPoints(points) {
    // rate-limiter-flexible's words: a string of digits is a count, any other string refused.
    if (typeof points === 'string' && !/^[1-9][0-9]*$/.test(points)) {
      throw new Error('Consuming string different than integer values is not supported by this package');
    }
    const n = typeof points === 'string' ? Number(points) : points;
    if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
      throw new Error('Consuming decimal number of points is not supported by this package');
    }
    if (n < 0 || n > MAX_COUNT) throw new Error('points must be an integer from 0 to 10^12');
    return n;
  }

  // rate-limiter-flexible's insurance: on a store error (not a refusal), ask insuranceLimiter.
  async #insured(method, params, run) {
    try {
      return await run();
    } catch (err) {
      if (err instanceof RateLimiterRes || !this.insuranceLimiter) throw err;
      return this.insuranceLimiter[method](...params);
    }
  }

  // The consume that crossed the storage block's threshold (rate-limiter-flexible's
  // _crossedBlockThreshold): without blockOnConsumed, the one that first went over points.
  #crossed(consumed, changed) {
    const at = this.#blockOnConsumed;
    if (!(at > 0 && at > this.points)) return consumed > this.points && consumed <= this.points + changed;
    return consumed >= at && consumed - changed < at;
  }

  /**
   * Takes `points` (default 1): one RL.COUNTER (INCRBY, and the key's expiry `duration` at its
   * first consume). Resolves with a RateLimiterRes when the key has consumed at most `points`;
   * rejects with one when more (the consume counted, as there; with blockDuration the consume
   * that went over blocks the key), or when it is blocked in memory; with an Error when Redis
   * fails and there is no insuranceLimiter.
   * @param {string | number} key
   * @param {number | string} [points]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  consume(key, points = 1, options = {}) {
    return this.#insured('consume', [key, points, options], async () => {
      points = this.#checkPoints(points);
      const rlKey = this.getKey(key);
      const now = this.now();
      if (this.inMemoryBlockOnConsumed > 0) {
        const blocked = this.inMemoryBlocked.lookup(rlKey, 0, now);
        if (blocked !== undefined) throw new RateLimiterRes(0, Math.ceil(blocked.until - now));
      }
      const res = this.#res(await this.#upsert(rlKey, points, this.#secondsFor(options)), points);
      const over = res.consumedPoints > this.points;
      if (this.inMemoryBlockOnConsumed > 0 && !(this.inMemoryBlockDuration > 0) && res.consumedPoints >= this.inMemoryBlockOnConsumed) {
        this.#blockInMemory(rlKey, res.msBeforeNext, now);
        if (over) throw res;
        return res;
      }
      if (over) {
        if (this.blockDuration > 0 && this.#crossed(res.consumedPoints, points)) {
          res.msBeforeNext = this.msBlockDuration;
          await this.#write(rlKey, res.consumedPoints, this.msBlockDuration);
        }
        if (this.inMemoryBlockOnConsumed > 0 && res.consumedPoints >= this.inMemoryBlockOnConsumed) {
          res.msBeforeNext = this.inMemoryBlockDuration * 1000;
          this.#blockInMemory(rlKey, res.msBeforeNext, now);
        }
        throw res;
      }
      if (this.execEvenly && this.points > 0 && res.msBeforeNext > 0 && !res.isFirstInDuration) {
        // Spread: the time left shared by the points left and this one (+2), at least
        // execEvenlyMinDelayMs per point consumed; msBeforeNext counts the wait as spent.
        let delay = Math.ceil(res.msBeforeNext / (res.remainingPoints + 2));
        if (delay < this.execEvenlyMinDelayMs) delay = res.consumedPoints * this.execEvenlyMinDelayMs;
        res.msBeforeNext = Math.max(res.msBeforeNext - delay, 0);
        await sleep(delay);
      }
      return res;
    });
  }

  /**
   * The key's state (RL.COUNTER ... BY 0: its count and PTTL, nothing written), or null when
   * there is no key.
   * @param {string | number} key
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes | null>}
   */
  get(key, options = {}) {
    return this.#insured('get', [key, options], async () => {
      const { count, ttlMs } = await this.#counter(this.getKey(key), 1, 0);
      if (ttlMs === -2) return null;
      return this.#res({ consumed: count, ttl: ttlMs }, 0);
    });
  }

  /**
   * Deletes the key: resolves true when there was one.
   * @param {string | number} key
   * @param {object} [options]
   * @returns {Promise<boolean>}
   */
  delete(key, options = {}) {
    return this.#insured('delete', [key, options], async () => {
      const n = await this.#plain(['DEL', this.getKey(key)]);
      this.inMemoryBlocked.entries.delete(this.getKey(key));
      return Number(n) > 0;
    });
  }

  /**
   * Gives back `points` (default 1): RL.COUNTER with BY -points, the count going below 0 as
   * there. Resolves with the state after it.
   * @param {string | number} key
   * @param {number} [points]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  reward(key, points = 1, options = {}) {
    return this.#insured('reward', [key, points, options], async () => {
      points = this.#checkPoints(points);
      return this.#res(await this.#upsert(this.getKey(key), -points, this.#secondsFor(options)), -points);
    });
  }

  /**
   * Adds `points` (default 1) without refusing, as there. Resolves with the state after it.
   * @param {string | number} key
   * @param {number} [points]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  penalty(key, points = 1, options = {}) {
    return this.#insured('penalty', [key, points, options], async () => {
      points = this.#checkPoints(points);
      return this.#res(await this.#upsert(this.getKey(key), points, this.#secondsFor(options)), points);
    });
  }

  /**
   * Blocks the key for `secDuration` seconds (0: for good): `SET key <points + 1> EX
   * secDuration` (blockOnConsumed instead of points + 1 when it is on), as there. Resolves with
   * RateLimiterRes(0, ms or -1, that count).
   * @param {string | number} key
   * @param {number} secDuration
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  block(key, secDuration, options = {}) {
    return this.#insured('block', [key, secDuration, options], async () => {
      if (typeof secDuration !== 'number' || !(secDuration >= 0)) {
        throw new Error('secDuration must be a non-negative number of seconds');
      }
      const ms = secDuration * 1000;
      const at = this.#blockOnConsumed;
      const points = at > 0 && at > this.points ? at : this.points + 1;
      await this.#write(this.getKey(key), points, ms);
      return new RateLimiterRes(0, ms > 0 ? ms : -1, points, false);
    });
  }

  /**
   * Sets the key's count to `points` for `secDuration` seconds (0: for good; left out or
   * negative: duration): `SET key points EX secDuration`, as there. Resolves with
   * RateLimiterRes(0, ms or -1, points).
   * @param {string | number} key
   * @param {number} points
   * @param {number} [secDuration]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  set(key, points, secDuration, options = {}) {
    return this.#insured('set', [key, points, secDuration, options], async () => {
      if (!Number.isSafeInteger(points)) throw new Error('points must be an integer');
      const ms = (typeof secDuration === 'number' && secDuration >= 0 ? secDuration : this.duration) * 1000;
      await this.#write(this.getKey(key), points, ms);
      return new RateLimiterRes(0, ms > 0 ? ms : -1, points, false);
    });
  }
}

module.exports = { RateLimiterRes, RateLimiterRedis };
