// The checks of RateLimit's options, each with the error an application sees (a TypeError that
// names the option, what it expects and what it got), apart from what the limiter does with
// them, as express-rate-limit keeps its checks in a module of their own: the options as a whole
// (checkOptions), then a limit's own words (algorithmWords, adaptiveWords, policyRules).

// @ts-check
'use strict';

/** @typedef {import('../index.cjs').RateLimitOptions} RateLimitOptions */

const { monotonicMs } = require('./denial-memory.cjs');
const { ALGORITHMS, DURATION_PARAMS, count, durationMs, fieldShape } = require('./limits.cjs');
const { SETUP_TIMEOUT_MS, checkClient, checkSetupTimeout } = require('./setup.cjs');
const { checkBackend } = require('./scripts.cjs');

/**
 * RateLimit's options checked, in the order a constructor meets them (the backend, the client,
 * setupTimeout, durable and durableTimeoutMs, failMode, timeout, denialMemory, prefix), with
 * their defaults; `limit` as a plain object, its members checked by the constructor with the
 * functions below (an application in JavaScript may pass anything).
 * @param {RateLimitOptions} options
 */
function checkOptions(options) {
  const {
    client,
    name,
    prefix = 'rl:http:',
    timeout = 50,
    failMode = 'open',
    denialMemory = 10_000,
    logger = console,
    now = monotonicMs,
    backend = 'auto',
    setupTimeout = SETUP_TIMEOUT_MS,
  } = options;
  checkBackend(backend);
  /** @type {Record<string, any>} */
  const limit = options.limit;
  checkClient(client);
  checkSetupTimeout(setupTimeout);
  const { durable = 0, durableTimeoutMs = 100 } = options;
  if (!Number.isSafeInteger(durable) || durable < 0) {
    throw new TypeError(`invalid durable: expected a number of replicas, 0 or more; got ${String(durable)}`);
  }
  if (!Number.isSafeInteger(durableTimeoutMs) || durableTimeoutMs < 0) {
    throw new TypeError(`invalid durableTimeoutMs: expected an integer, 0 or more; got ${String(durableTimeoutMs)}`);
  }
  if (failMode !== 'open' && failMode !== 'closed') {
    throw new TypeError(`invalid failMode: expected "open" or "closed"; got ${String(failMode)}`);
  }
  if (!Number.isFinite(timeout) || timeout <= 0) {
    throw new TypeError(`invalid timeout: expected a positive number of milliseconds; got ${String(timeout)}`);
  }
  if (!Number.isSafeInteger(denialMemory) || denialMemory < 0) {
    throw new TypeError(`invalid denialMemory: expected an integer, 0 or more; got ${String(denialMemory)}`);
  }
  if (typeof prefix !== 'string') throw new TypeError('invalid prefix: expected a string');
  if (limit === null || typeof limit !== 'object') {
    throw new TypeError('invalid limit: expected { algorithm, ...parameters } or { policy }');
  }
  return {
    client, name, prefix, timeout, failMode, denialMemory, logger, now, backend, setupTimeout, durable,
    durableTimeoutMs, limit,
  };
}

/**
 * A concurrency limit's `adaptive`, `min` and `max` as the words of RL.CONCURRENCY.ACQUIRE
 * (`ADAPTIVE <KIND> [MIN n] [MAX n]`) and the kind, lower case; `min` and `max` are checked
 * against each other as the module checks them (one left out takes the module's default for the
 * kind, widened to include `limit`), so that a limit the module would refuse on every request
 * is refused here, once.
 */
function adaptiveWords(kinds, limit, start) {
  if (kinds === undefined) {
    throw new TypeError(`invalid limit.adaptive: only a concurrency limit adapts; got ${String(limit.adaptive)}`);
  }
  const kind = typeof limit.adaptive === 'string' ? limit.adaptive.toLowerCase() : undefined;
  if (kind === undefined || !Object.hasOwn(kinds, kind)) {
    throw new TypeError(`invalid limit.adaptive: expected "aimd", "vegas" or "gradient2"; got ${String(limit.adaptive)}`);
  }
  const words = ['ADAPTIVE', kind.toUpperCase()];
  const min = limit.min === undefined ? undefined : count(limit.min, 'limit.min');
  const max = limit.max === undefined ? undefined : count(limit.max, 'limit.max');
  const defaults = kinds[kind];
  const lo = min ?? Math.min(defaults.min, start);
  const hi = max ?? Math.max(defaults.max, start);
  if (lo > hi) {
    if (max === undefined) {
      throw new TypeError(
        `invalid limit.min: ${min} is above limit.max, whose default for ${kind} is ${hi} (${defaults.max}, or limit if higher)`,
      );
    }
    if (min === undefined) {
      throw new TypeError(
        `invalid limit.max: ${max} is below limit.min, whose default for ${kind} is ${lo} (${defaults.min}, or limit if lower)`,
      );
    }
    throw new TypeError(`invalid limit.min: ${min} is above limit.max ${max}`);
  }
  if (min !== undefined) words.push('MIN', `${min}`);
  if (max !== undefined) words.push('MAX', `${max}`);
  return [kind, words];
}

/**
 * An algorithm's limit (`{ algorithm, ...parameters }`) as its command's words after the key:
 * its positional parameters (durations in ms), then its option with a value (COLDFACTOR k) and
 * its flag (INTERVAL). `what` names the limit in errors ('limit', or 'limit.rules[i]'); `rule`:
 * a policy's rule, which cannot be a concurrency limit. Returns { algorithm (ALGORITHMS' entry),
 * name (lower case), args }.
 */
function algorithmWords(limit, what, rule = false) {
  const name = String(limit.algorithm).toLowerCase();
  const algorithm = Object.hasOwn(ALGORITHMS, name) ? ALGORITHMS[name] : undefined;
  if (rule && algorithm?.concurrent) {
    throw new TypeError(`invalid ${what}: a policy's rule cannot be a concurrency limit`);
  }
  if (algorithm === undefined) {
    const kinds = Object.keys(ALGORITHMS).filter((k) => !(rule && ALGORITHMS[k].concurrent));
    throw new TypeError(
      `invalid ${what}.algorithm: expected one of ${kinds.join(', ')}${rule ? '' : ', or limit.policy'}; ` +
        `got ${String(limit.algorithm)}`,
    );
  }
  const args = algorithm.params.map((p) =>
    DURATION_PARAMS.has(p) ? `${durationMs(limit[p], `${what}.${p}`)}` : `${count(limit[p], `${what}.${p}`)}`,
  );
  const { valued } = algorithm;
  if (valued && limit[valued.name] !== undefined) {
    const value = limit[valued.name];
    if (!Number.isSafeInteger(value) || value < valued.min || value > valued.max) {
      throw new TypeError(
        `invalid ${what}.${valued.name}: expected an integer from ${valued.min} to ${valued.max}; got ${String(value)}`,
      );
    }
    args.push(valued.word, `${value}`);
  }
  if (algorithm.flag && limit[algorithm.flag]) args.push(algorithm.flag.toUpperCase());
  return { algorithm, name, args };
}

/**
 * A policy's rules given by the application (`limit.rules`: 1 to 16 algorithms' limits, each
 * written as a single limit is, `shadow: true` for a shadow rule, at least one not), checked,
 * as the words RL.POLICY.SET and policy.lua take them (`[SHADOW] NAME args...` each, e.g.
 * `GCRA 10 10 1000`), with each rule's field shape: { count, words, shapes }.
 */
function policyRules(rules) {
  if (!Array.isArray(rules) || rules.length < 1 || rules.length > 16) {
    throw new TypeError(`invalid limit.rules: expected an array of 1 to 16 rules; got ${Array.isArray(rules) ? `${rules.length} rules` : String(rules)}`);
  }
  const words = [];
  const shapes = [];
  let enforced = false;
  rules.forEach((rule, i) => {
    const what = `limit.rules[${i}]`;
    if (rule === null || typeof rule !== 'object') {
      throw new TypeError(`invalid ${what}: expected { algorithm, ...parameters }; got ${String(rule)}`);
    }
    if (rule.policy !== undefined || rule.rules !== undefined) {
      throw new TypeError(`invalid ${what}: a rule is one algorithm's limit, not a policy`);
    }
    if (rule.localBudget !== undefined) {
      throw new TypeError(`invalid ${what}.localBudget: a local budget is the limiter's (the localBudget option), not a rule's`);
    }
    if (rule.block !== undefined) {
      throw new TypeError(`invalid ${what}.block: a penalty is the policy's (limit.block), over every rule`);
    }
    for (const option of ['adaptive', 'min', 'max']) {
      if (rule[option] !== undefined) throw new TypeError(`invalid ${what}.${option}: only a concurrency limit adapts, and a rule is not one`);
    }
    if (rule.shadow !== undefined && typeof rule.shadow !== 'boolean') {
      throw new TypeError(`invalid ${what}.shadow: expected true or false; got ${String(rule.shadow)}`);
    }
    const { algorithm, name, args } = algorithmWords(rule, what, true);
    if (rule.shadow) words.push('SHADOW');
    else enforced = true;
    words.push(algorithm.command.replace(/^RL\./, ''), ...args);
    shapes.push(fieldShape(name, args));
  });
  if (!enforced) throw new TypeError('invalid limit.rules: every rule is a shadow rule; at least one must not be');
  return { count: rules.length, words, shapes };
}

module.exports = { adaptiveWords, algorithmWords, checkOptions, policyRules };
