// rate-limiter-flexible's interface, backed by the module: RateLimiterRes and RateLimiterRedis,
// so that its users switch by changing one constructor.

// @ts-check
'use strict';

const { DenialMemory, monotonicMs } = require('./denial-memory.cjs');
const { MAX_COUNT, MAX_DURATION_MS, durationMs } = require('./limits.cjs');
const { parseReply } = require('./reply.cjs');
const { Backend } = require('./backend.cjs');
const { LimiterBase, ResBase } = require('./flexible-base.cjs');
const { SETUP_TIMEOUT_MS, checkStoreClient } = require('./setup.cjs');
const { TEST_NOW, checkBackend, evalMulti, moduleError, scriptingError } = require('./scripts.cjs');

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

const UNSUPPORTED_OPTIONS = ['blockOnConsumed', 'customIncrTtlLuaScript'];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * rate-limiter-flexible's RateLimiterRedis, on the module: `points` per `duration` seconds, the
 * window starting at the key's first consume (RL.TOKENBUCKET key points points duration
 * INTERVAL: all the points come back at once, `duration` after the window began). See
 * docs/node.md for every difference. When rate-limiter-flexible is installed, a subclass of its
 * RateLimiterCompatibleAbstract (flexible-base.cjs), which its wrappers take.
 */
class RateLimiterRedis extends LimiterBase {
  // RateLimiterCompatibleAbstract's accessors, which throw until a subclass gives its own.
  #keyPrefix = 'rlflx';
  #blockDuration = 0;
  #execEvenly = false;

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
    // points 0 admits nothing, as there: the module has no bucket of 0, so nothing is stored and
    // every consume of a point or more is refused in the process.
    this.points = opts.points === undefined ? 4 : opts.points;
    if (!Number.isSafeInteger(this.points) || this.points < 0 || this.points > MAX_COUNT) {
      throw new Error('points must be an integer from 0 to 10^12');
    }
    this.duration = opts.duration === undefined ? 1 : opts.duration;
    if (typeof this.duration !== 'number' || !Number.isFinite(this.duration) || this.duration < 0) {
      throw new Error('duration must be set and must be a finite, non-negative number');
    }
    // duration 0 means "never expires": the longest period the module takes, and msBeforeNext -1.
    this.periodMs = this.duration === 0 ? MAX_DURATION_MS : durationMs(Math.round(this.duration * 1000), 'duration');
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
    this.inMemoryBlocked = new DenialMemory(10_000);
    // The in-memory blocks' clock: monotonic milliseconds (not in rate-limiter-flexible; a
    // test gives a fake one that moves with the server's debug clock).
    this.now = opts.now ?? monotonicMs;
    if (typeof this.now !== 'function') throw new Error('now must be a function returning milliseconds');
    // The client's adapter and the backend (backend.cjs), as RateLimit's: node-redis's or
    // ioredis's, a standalone or a cluster client (client.cjs): on a cluster each command to its
    // key's node (the SCRIPT LOAD after NOSCRIPT too), COMMAND INFO to any, a MULTI to its key's.
    // An object that only says whether it is ready (rejectIfRedisNotReady's stand-in for a client
    // not connected) has no adapter: it is never sent anything. Its setup loads the token
    // bucket's script and the refund's (reward); `logger` hears the choice and a failed setup.
    this.wiring = new Backend(this, {
      client: this.client,
      option: opts.backend ?? 'auto',
      commands: ['RL.TOKENBUCKET', 'RL.REFUND'],
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

  #command(key, ...options) {
    return this.#commandFor(key, this.periodMs, ...options);
  }

  #commandFor(key, periodMs, ...options) {
    return ['RL.TOKENBUCKET', this.getKey(key), String(this.points), String(this.points), `${periodMs}`, 'INTERVAL', ...options];
  }

  // options.customDuration: the window's seconds for this call (0: never), as there, where it is
  // the expiry of a key the call creates. Here it is the call's period: the length of a window
  // the call starts; a window in progress is converted to it as the module converts a key whose
  // parameters change, at the first admitted call (the same duration as before, on a fresh key).
  #periodFor(options) {
    const seconds = options?.customDuration;
    if (seconds === undefined || seconds === null) return this.periodMs;
    if (typeof seconds !== 'number' || !(seconds >= 0)) {
      throw new Error('options.customDuration must be a non-negative number of seconds');
    }
    return seconds === 0 ? MAX_DURATION_MS : durationMs(Math.max(1, Math.round(seconds * 1000)), 'customDuration');
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

  async #send(args, extras) {
    this.#checkReady();
    await this.setup.pending;
    return parseReply(await this.wiring.run(args), undefined, extras);
  }

  // Commands in one MULTI to their key's node (backend.cjs has the single command's way).
  async #multi(commands) {
    this.#checkReady();
    await this.setup.pending;
    if ((await this.wiring.resolve()) === 'script') {
      return evalMulti(this.client, commands, this.wiring.now()).catch((error) => {
        throw scriptingError(error, this.wiring.option);
      });
    }
    const replies = await /** @type {NonNullable<typeof this.adapter>} */ (this.adapter).multi(commands, commands[0][1]).catch((error) => {
      throw moduleError(this.client, error);
    });
    const failed = replies.find((r) => r instanceof Error);
    if (failed !== undefined) throw moduleError(this.client, failed);
    return replies;
  }

  // msBeforeNext: -1 for "never", as rate-limiter-flexible says of a key without expiry. The
  // class's "never" (duration 0, block(key, 0)) is the module's longest duration, 10 years, and
  // nothing else comes near it: a wait of more than half of that is never.
  #ms(ms) {
    return ms > MAX_DURATION_MS / 2 ? -1 : ms;
  }

  // The state as RateLimiterRes: `consumedPoints` is what the window has taken; in a block
  // (a probe at COST 0 refused) it is points + 1, as rate-limiter-flexible's block stores it.
  #res(r, changed, probe = false) {
    if (probe && !r.allowed) {
      return new RateLimiterRes(0, this.#ms(r.retryAfterMs), this.points + 1, false);
    }
    const consumed = r.limit - r.remaining;
    return new RateLimiterRes(r.remaining, this.#ms(r.resetAfterMs), consumed, changed > 0 && consumed === changed);
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

  // A consume of more than `points`, which no window can hold: there it is counted, so the
  // window is used up and every consume is refused until it ends (or, with blockDuration, the
  // key is blocked). The same here: ATMOST takes the points the window has left, and with
  // blockDuration a consume of all the points, refused since none are left, starts the block.
  // The refusal as RateLimiterRes: msBeforeNext to the window's end or the block's,
  // consumedPoints what the window held plus what was asked.
  async #overPoints(key, points, block, periodMs) {
    const take = this.#commandFor(key, periodMs, 'ATMOST', String(this.points), ...block);
    let taken;
    let ms;
    if (block.length > 0) {
      const [first, second] = await this.#multi([take, this.#commandFor(key, periodMs, 'COST', String(this.points), ...block)]);
      taken = parseReply(first, undefined, ['granted']);
      ms = parseReply(second).retryAfterMs;
    } else {
      taken = await this.#send(take, ['granted']);
      ms = taken.allowed ? taken.resetAfterMs : taken.retryAfterMs;
    }
    const held = taken.limit - taken.remaining - /** @type {number} */ (taken.granted); // asked for: there
    return new RateLimiterRes(0, this.#ms(ms), held + points, false);
  }

  /**
   * Takes `points` (default 1). Resolves with a RateLimiterRes when admitted; rejects with a
   * RateLimiterRes when refused (the window is full, or the key is blocked), with an Error when
   * Redis fails and there is no insuranceLimiter.
   * @param {string | number} key
   * @param {number | string} [points]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  consume(key, points = 1, options = {}) {
    return this.#insured('consume', [key, points, options], async () => {
      points = this.#checkPoints(points);
      if (this.points === 0) {
        if (points > 0) throw new RateLimiterRes(0, this.#ms(this.periodMs), points, false);
        return new RateLimiterRes(0, 0, 0, false);
      }
      const rlKey = this.getKey(key);
      const now = this.now();
      if (this.inMemoryBlockOnConsumed > 0) {
        const blocked = this.inMemoryBlocked.lookup(rlKey, 0, now);
        if (blocked !== undefined) throw new RateLimiterRes(0, Math.ceil(blocked.until - now));
      }
      const periodMs = this.#periodFor(options);
      const block = this.blockDuration > 0 ? ['BLOCK', `${Math.max(1, Math.round(this.msBlockDuration))}ms`] : [];
      let res;
      let refused;
      if (points > this.points) {
        res = await this.#overPoints(key, points, block, periodMs);
        refused = true;
      } else {
        const cost = points !== 1 ? ['COST', String(points)] : [];
        const r = await this.#send(this.#commandFor(key, periodMs, ...cost, ...block));
        refused = !r.allowed;
        if (r.allowed) {
          const consumed = r.limit - r.remaining;
          res = new RateLimiterRes(r.remaining, this.#ms(r.resetAfterMs), consumed, consumed === points);
        } else {
          // Refused: what the window holds plus what was asked (more than points), as
          // rate-limiter-flexible counts it; the state itself took nothing.
          res = new RateLimiterRes(0, this.#ms(r.retryAfterMs), r.limit - r.remaining + points, false);
        }
      }
      const inMemory = this.inMemoryBlockOnConsumed > 0 && res.consumedPoints >= this.inMemoryBlockOnConsumed;
      if (inMemory && !(this.inMemoryBlockDuration > 0)) {
        this.#blockInMemory(rlKey, res.msBeforeNext, now);
      } else if (inMemory && refused) {
        res.msBeforeNext = this.inMemoryBlockDuration * 1000;
        this.#blockInMemory(rlKey, res.msBeforeNext, now);
      }
      if (refused) throw res;
      if (this.execEvenly && res.msBeforeNext > 0 && !res.isFirstInDuration) {
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
   * The key's state, or null when it has taken nothing in its window.
   * @param {string | number} key
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes | null>}
   */
  get(key, options = {}) {
    return this.#insured('get', [key, options], async () => {
      if (this.points === 0) return null;
      const r = await this.#send(this.#command(key, 'COST', '0', 'DRYRUN'));
      if (r.allowed && r.resetAfterMs === 0) return null;
      return this.#res(r, 0, true);
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
      const n = await this.client.del(this.getKey(key));
      this.inMemoryBlocked.entries.delete(this.getKey(key));
      return Number(n) > 0;
    });
  }

  /**
   * Gives back `points` (default 1) with RL.REFUND, up to what the window has taken; resolves
   * with the state after it.
   * @param {string | number} key
   * @param {number} [points]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  reward(key, points = 1, options = {}) {
    return this.#insured('reward', [key, points, options], async () => {
      points = this.#checkPoints(points);
      if (this.points === 0) return new RateLimiterRes(0, 0, 0, false);
      const [, state] = await this.#multi([
        ['RL.REFUND', this.getKey(key), String(points)],
        this.#command(key, 'COST', '0', 'DRYRUN'),
      ]);
      return this.#res(parseReply(state), 0, true);
    });
  }

  /**
   * Takes `points` (default 1) without refusing: as many as the window still has, at most
   * `points` (the module never counts past the limit). Resolves with the state after it.
   * @param {string | number} key
   * @param {number} [points]
   * @param {object} [options]
   * @returns {Promise<RateLimiterRes>}
   */
  penalty(key, points = 1, options = {}) {
    return this.#insured('penalty', [key, points, options], async () => {
      points = this.#checkPoints(points);
      if (this.points === 0) return new RateLimiterRes(0, 0, 0, false);
      const periodMs = this.#periodFor(options);
      let want = points;
      let r = await this.#send(this.#commandFor(key, periodMs, 'COST', String(want)));
      // Refused: take what is left instead (twice at most, should another client take it first).
      for (let i = 0; i < 2 && !r.allowed && r.remaining > 0; i++) {
        want = Math.min(want, r.remaining);
        r = await this.#send(this.#commandFor(key, periodMs, 'COST', String(want)));
      }
      return this.#res(r, r.allowed ? want : 0);
    });
  }

  /**
   * Blocks the key for `secDuration` seconds (0: as long as the module allows, 10 years):
   * every consume is refused until then. Resolves with RateLimiterRes(0, ms, points + 1).
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
      const ms = Math.round(secDuration * 1000);
      if (this.points === 0) return new RateLimiterRes(0, ms >= 1 ? ms : -1, 1, false);
      const blockMs = ms >= 1 ? Math.min(ms, MAX_DURATION_MS) : MAX_DURATION_MS;
      // Taking all the points refuses at once when the window has taken any, starting the
      // block; on a fresh window the first takes them all and the second starts it.
      const take = this.#command(key, 'COST', String(this.points), 'BLOCK', `${blockMs}ms`);
      await this.#multi([take, take]);
      return new RateLimiterRes(0, ms >= 1 ? ms : -1, this.points + 1, false);
    });
  }

  /**
   * rate-limiter-flexible's set(): the module has no way to write a count, so it refuses.
   * @returns {Promise<never>}
   */
  set() {
    return Promise.reject(new Error("set() is not supported by ratelimit-redis-module's RateLimiterRedis"));
  }
}

module.exports = { RateLimiterRes, RateLimiterRedis };
