// Counter: RL.COUNTER, a fixed window kept as a plain integer string (INCRBY + PEXPIRE at the
// window's first hit, the format rate-limiter-flexible, express-rate-limit's Redis stores and
// limits keep: GET reads it), on the module or its script (counter.lua). `count(key, window,
// { by, xx })` adds `by` (negative gives back, 0 only reads) and resolves to the count and the
// key's PTTL. The window is the key's TTL on the server's own clock.

// @ts-check
'use strict';

/** @typedef {import('../index.cjs').CounterOptions} CounterOptions */
/** @typedef {import('../index.cjs').CountOptions} CountOptions */
/** @typedef {import('../index.cjs').Count} Count */

const { MAX_COUNT, durationMs } = require('./limits.cjs');
const { parseCount } = require('./reply.cjs');
const { withTimeout } = require('./rate-limit.cjs');
const { Backend } = require('./backend.cjs');
const { SETUP_TIMEOUT_MS, checkClient } = require('./setup.cjs');
const { TEST_NOW, checkBackend } = require('./scripts.cjs');
const { checkFlag } = require('./validations.cjs');

const OPTIONS = new Set(['client', 'prefix', 'backend', 'timeout', 'setupTimeout', 'logger']);

/**
 * RL.COUNTER's words for `key` (already prefixed): `window` (ms, or a duration string as the
 * module takes it) checked here, `by` an integer of at most 10^12 either way.
 * @param {string} key
 * @param {import('../index.cjs').Duration} window
 * @param {CountOptions} options
 * @returns {string[]}
 */
function counterArgs(key, window, options) {
  const { by = 1, xx = false } = options ?? {};
  const ms = durationMs(window, 'window');
  if (!Number.isSafeInteger(by) || Math.abs(by) > MAX_COUNT) {
    throw new TypeError(`invalid by: expected an integer from -${MAX_COUNT} to ${MAX_COUNT}; got ${String(by)}`);
  }
  checkFlag(xx, 'xx');
  const args = ['RL.COUNTER', key, `${ms}`];
  if (by !== 1) args.push('BY', `${by}`);
  if (xx) args.push('XX');
  return args;
}

/**
 * RL.COUNTER on a client: `new Counter({ client }).count('rl:hits:42', '1m')`. Its setup (the
 * backend, the script) runs in the background from the constructor; a Redis error, a timeout
 * or a reply it cannot read rejects the call.
 */
class Counter {
  /** @param {CounterOptions} options */
  constructor(options = /** @type {CounterOptions} */ ({})) {
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`invalid options: expected an object with a client; got ${String(options)}`);
    }
    for (const name of Object.keys(options)) {
      if (!OPTIONS.has(name)) throw new TypeError(`invalid option ${name}: Counter takes ${[...OPTIONS].join(', ')}`);
    }
    const { client, prefix = '', backend = 'auto', timeout = 1000, setupTimeout = SETUP_TIMEOUT_MS, logger = console } = options;
    checkClient(client);
    if (typeof prefix !== 'string') throw new TypeError(`invalid prefix: expected a string; got ${String(prefix)}`);
    if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout <= 0) {
      throw new TypeError(`invalid timeout: expected a positive number of milliseconds; got ${String(timeout)}`);
    }
    checkBackend(backend);
    this.prefix = prefix;
    this.timeout = timeout;
    this[TEST_NOW] = undefined;
    this.wiring = new Backend(this, {
      client, option: backend, commands: ['RL.COUNTER'], setupTimeout, logger, name: 'Counter',
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
   * Adds `by` (default 1) to `key`'s count: a key made now expires `window` later (a key
   * without a TTL gets it too); `by` 0 only reads; `xx` writes only a key that exists (none:
   * `{ count: 0, ttlMs: -2 }`). Resolves to the count and the key's PTTL after the call (-1: no
   * TTL, -2: no key).
   * @param {string} key
   * @param {import('../index.cjs').Duration} window
   * @param {CountOptions} [options]
   * @returns {Promise<Count>}
   */
  async count(key, window, options = {}) {
    const args = counterArgs(`${this.prefix}${key}`, window, options);
    await this.setup.pending;
    return parseCount(await withTimeout(() => this.wiring.run(args), this.timeout));
  }
}

module.exports = { Counter, counterArgs };
