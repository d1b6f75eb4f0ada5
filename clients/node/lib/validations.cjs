// The checks of RateLimit's options, each with the error an application sees (a TypeError that
// names the option, what it expects and what it got), apart from what the limiter does with
// them, as express-rate-limit keeps its checks in a module of their own: the options as a whole
// (checkOptions: the limit among them, checkLimit, as the words of its command, then its local
// budget), a limit's own words (algorithmWords, adaptiveWords, policyRules), and those of each
// call (checkCall, checkFlag).

// @ts-check
'use strict';

/** @typedef {import('../index.cjs').RateLimitOptions} RateLimitOptions */
/** @typedef {import('../index.cjs').CheckOptions} CheckOptions */

const { monotonicMs } = require('./denial-memory.cjs');
const { checkName } = require('./fields.cjs');
const { defaultHoldMs } = require('./local-budget.cjs');
const { ALGORITHMS, DURATION_PARAMS, count, durationMs, fieldShape, periodMs } = require('./limits.cjs');
const { SETUP_TIMEOUT_MS, checkClient, checkSetupTimeout } = require('./setup.cjs');
const { ModuleRequiredError, checkBackend, moduleOnly } = require('./scripts.cjs');

/**
 * RateLimit's options checked, in the order a constructor meets them (the backend, the client,
 * setupTimeout, durable and durableTimeoutMs, failMode, timeout, denialMemory, prefix, the limit
 * with the name, what of it needs the module when backend is "script", then localBudget and
 * hold), with their defaults: the limit as checkLimit gives it, and the local budget's
 * `{ k, holdMs }` (undefined without localBudget).
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
  const checked = checkLimit(limit, name);
  // The script backend forced: what needs the module is refused now, before anything is sent.
  const needs = backend === 'script' ? moduleOnly(checked) : undefined;
  if (needs !== undefined) throw new ModuleRequiredError(needs);
  return {
    client, prefix, timeout, failMode, denialMemory, logger, now, backend, setupTimeout, durable,
    durableTimeoutMs, limit: checked, localBudget: checkLocalBudget(options, checked),
  };
}

/**
 * A limit checked, as RateLimit keeps it: the words of its command, and what the package reads
 * of it.
 * @typedef {object} CheckedLimit
 * @property {string} name the limit's name in the HTTP fields (the option `name`, else the
 *   policy's, else 'default')
 * @property {string} command RL.LIMIT, or the algorithm's command
 * @property {'rule' | 'delay_ms' | 'token' | undefined} sixth the reply's sixth field (parseReply)
 * @property {string[]} args the command's words after the key: the limit's own (a policy's name;
 *   an algorithm's parameters, its option and flag, ADAPTIVE ...)
 * @property {string[]} block BLOCK and the penalty in ms, or nothing: kept apart from `args`
 * @property {boolean} concurrent a concurrency limit (a lease per request, released)
 * @property {import('../index.cjs').AdaptiveKind | undefined} adaptive an adaptive concurrency
 *   limit's kind, lower case
 * @property {string | undefined} algorithm the algorithm, lower case (undefined for a policy)
 * @property {number | undefined} periodMs its period or window (limits.cjs, periodMs), for the
 *   local budget's default hold (undefined for a policy)
 * @property {ReturnType<typeof fieldShape> | undefined} shape what the HTTP fields say of it
 *   (limits.cjs, fieldShape; undefined for a policy: its rules' shapes are read per rule)
 * @property {string | undefined} policy the policy's name, for RL.LIMIT
 * @property {ReturnType<typeof policyRules> | undefined} rules a policy's rules from the
 *   application's configuration, or undefined: the policy is the server's (RL.POLICY.SET by
 *   someone else; module only)
 */

/**
 * `limit` (`{ algorithm, ...parameters }` or `{ policy, rules }`, either with `block`; a
 * concurrency limit with `adaptive`, `min` and `max`) and the option `name`, checked in that
 * order: the min and max of a limit that does not adapt, the policy's name or the algorithm's
 * words, the name, adaptive, then block.
 * @param {Record<string, any>} limit
 * @param {string | undefined} name
 * @returns {CheckedLimit}
 */
function checkLimit(limit, name) {
  // MIN and MAX bound an adaptive concurrency limit only.
  if (limit.adaptive === undefined) {
    for (const bound of ['min', 'max']) {
      if (limit[bound] !== undefined) {
        throw new TypeError(`invalid limit.${bound}: only an adaptive concurrency limit (limit.adaptive) has bounds`);
      }
    }
  }
  /** @type {Omit<CheckedLimit, 'block'>} */
  let checked;
  if (limit.policy !== undefined) {
    const policy = checkName(limit.policy, 'policy');
    const named = checkName(name ?? policy, 'name');
    if (limit.adaptive !== undefined) adaptiveWords(undefined, limit);
    checked = {
      name: named, command: 'RL.LIMIT', sixth: 'rule', args: [policy], concurrent: false, adaptive: undefined,
      algorithm: undefined, periodMs: undefined, shape: undefined, policy,
      rules: limit.rules === undefined ? undefined : policyRules(limit.rules),
    };
  } else {
    if (limit.rules !== undefined) {
      throw new TypeError('invalid limit.rules: only a policy ({ policy, rules }) has rules');
    }
    const { algorithm, name: lower, args } = algorithmWords(limit, 'limit');
    const named = checkName(name ?? 'default', 'name');
    let adaptive;
    if (limit.adaptive !== undefined) {
      const [kind, words] = adaptiveWords(algorithm.adaptive, limit, Number(args[0]));
      adaptive = kind;
      args.push(...words);
    }
    checked = {
      name: named, command: algorithm.command, sixth: algorithm.sixth, args, concurrent: Boolean(algorithm.concurrent),
      adaptive, algorithm: lower, periodMs: periodMs(lower, args), shape: fieldShape(lower, args), policy: undefined,
      rules: undefined,
    };
  }
  // A penalty: a refused request blocks the key for this long (BLOCK; RL.CONCURRENCY.ACQUIRE
  // has none).
  let block = [];
  if (limit.block !== undefined) {
    if (checked.concurrent) throw new TypeError('invalid limit.block: a concurrency limit has no block');
    block = ['BLOCK', `${durationMs(limit.block, 'limit.block')}`];
  }
  return { ...checked, block };
}

/**
 * `localBudget` and `hold` checked against the limit: `{ k, holdMs }` (hold's default from the
 * limit's period: local-budget.cjs, defaultHoldMs), or undefined without localBudget.
 * @param {RateLimitOptions} options
 * @param {CheckedLimit} limit
 */
function checkLocalBudget({ localBudget, hold }, limit) {
  if (localBudget === undefined) {
    if (hold !== undefined) throw new TypeError('invalid hold: only a limit with localBudget holds units');
    return undefined;
  }
  if (limit.concurrent) {
    throw new TypeError('invalid localBudget: a concurrency limit takes one lease per request (no ATMOST, no RL.REFUND)');
  }
  const k = count(localBudget, 'localBudget');
  const holdMs = hold === undefined ? defaultHoldMs(limit.periodMs) : durationMs(hold, 'hold');
  return { k, holdMs };
}

/**
 * A flag (`shadow`, `dryRun`, `dropped`, a rule's `shadow`), checked: true or false.
 * @param {unknown} value
 * @param {string} what
 */
function checkFlag(value, what) {
  if (typeof value !== 'boolean') throw new TypeError(`invalid ${what}: expected true or false; got ${String(value)}`);
  return value;
}

/**
 * check()'s `cost` and options, checked for a limit (`concurrent`: a concurrency limit's), with
 * their defaults.
 * @param {number} cost
 * @param {CheckOptions} options
 * @param {boolean} concurrent
 */
function checkCall(cost, options, concurrent) {
  const { atMost, shadow = false, dryRun = false, id } = options;
  count(cost, 'cost', 0);
  if (atMost !== undefined) {
    count(atMost, 'atMost');
    if (concurrent) throw new TypeError('invalid atMost: a concurrency limit takes one lease per request');
    if (cost !== 1) throw new TypeError('invalid atMost: give cost or atMost, not both');
  }
  checkFlag(shadow, 'shadow');
  checkFlag(dryRun, 'dryRun');
  if (id !== undefined) {
    if (!concurrent) throw new TypeError('invalid id: only a concurrency limit names its leases');
    if (typeof id !== 'string' || id.length === 0 || Buffer.byteLength(id) > 256) {
      throw new TypeError(`invalid id: expected a string of 1 to 256 bytes; got ${String(id)}`);
    }
  }
  return { atMost, shadow, dryRun, id };
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
    if (rule.shadow !== undefined) checkFlag(rule.shadow, `${what}.shadow`);
    const { algorithm, name, args } = algorithmWords(rule, what, true);
    if (rule.shadow) words.push('SHADOW');
    else enforced = true;
    words.push(algorithm.command.replace(/^RL\./, ''), ...args);
    shapes.push(fieldShape(name, args));
  });
  if (!enforced) throw new TypeError('invalid limit.rules: every rule is a shadow rule; at least one must not be');
  return { count: rules.length, words, shapes };
}

module.exports = { checkCall, checkFlag, checkLimit, checkOptions };
