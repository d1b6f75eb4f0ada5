// The module's replies, in either protocol: an admission command's as the package's decision
// fields (parseReply), RL.COUNTER's as a count and a PTTL (parseCount).

// @ts-check
'use strict';

/** @typedef {Omit<import('../index.cjs').Decision, 'name' | 'windowSeconds' | 'moreAfterMs' | 'local'>} Reply */

const FIVE = ['allowed', 'limit', 'remaining', 'retry_after_ms', 'reset_after_ms'];

const unexpected = (what) => new Error(`unexpected reply from the module: ${what}`);

/**
 * The reply of an admission command, in either protocol: RESP2 is an array
 * [allowed, limit, remaining, retry_after_ms, reset_after_ms, ...], RESP3 a map (an object or a
 * Map, as node-redis's type mapping gives it) with `allowed` a boolean. `sixth` names the field
 * the command adds after the five (`rule` for RL.LIMIT, `delay_ms` for RL.LEAKYBUCKET, `token`
 * for RL.CONCURRENCY.ACQUIRE); `extras` the fields its options add after that, in order
 * (`granted` for ATMOST, `shadow_denied` for SHADOW). A reply of another shape (other fields,
 * more or fewer, `allowed` neither 0 nor 1) throws: the module said something the package
 * cannot read.
 * @param {unknown} reply
 * @param {'rule' | 'delay_ms' | 'token'} [sixth]
 * @param {ReadonlyArray<'granted' | 'shadow_denied'>} [extras]
 * @returns {Reply}
 */
function parseReply(reply, sixth, extras = []) {
  const names = sixth ? [...FIVE, sixth, ...extras] : [...FIVE, ...extras];
  /** @type {Record<string, any>} */
  let r;
  if (Array.isArray(reply)) {
    if (reply.length !== names.length) {
      throw unexpected(`${reply.length} fields where ${names.length} were expected (${names.join(', ')})`);
    }
    r = Object.fromEntries(names.map((name, i) => [name, reply[i]]));
  } else if (reply instanceof Map) {
    r = Object.fromEntries(reply);
  } else if (reply !== null && typeof reply === 'object') {
    r = reply;
  } else {
    throw unexpected(String(reply));
  }
  const keys = Object.keys(r);
  if (keys.length !== names.length || !names.every((name) => Object.hasOwn(r, name))) {
    throw unexpected(`the fields ${keys.join(', ')} where ${names.join(', ')} were expected`);
  }
  const allowed = r.allowed === true || r.allowed === false ? r.allowed : Number(r.allowed);
  if (allowed !== true && allowed !== false && allowed !== 0 && allowed !== 1) {
    throw unexpected(`allowed is ${String(r.allowed)}`);
  }
  /** @type {Reply} */
  const out = {
    allowed: allowed === true || allowed === 1,
    limit: Number(r.limit),
    remaining: Number(r.remaining),
    retryAfterMs: Number(r.retry_after_ms),
    resetAfterMs: Number(r.reset_after_ms),
  };
  if (sixth === 'rule') out.rule = Number(r.rule);
  if (sixth === 'delay_ms') out.delayMs = Number(r.delay_ms);
  if (sixth === 'token' && r.token != null) out.token = String(r.token);
  if (extras.includes('granted')) out.granted = Number(r.granted);
  if (extras.includes('shadow_denied')) out.shadowDenied = Number(r.shadow_denied) === 1;
  for (const k of ['limit', 'remaining', 'retryAfterMs', 'resetAfterMs', 'rule', 'delayMs', 'granted']) {
    if (Object.hasOwn(out, k) && !Number.isFinite(/** @type {Record<string, unknown>} */ (out)[k])) throw unexpected(`${k} is not a number`);
  }
  return out;
}

/**
 * RL.COUNTER's reply, `[count, pttl]` in either protocol (integers, or their text): `{ count,
 * ttlMs }`. Anything else throws, as parseReply does: a count that is not a safe integer (the
 * module counts to 2^63; past 2^53 a number cannot hold it exactly), a PTTL below -2.
 * @param {unknown} reply
 * @returns {import('../index.cjs').Count}
 */
function parseCount(reply) {
  if (!Array.isArray(reply) || reply.length !== 2) throw unexpected(`RL.COUNTER answered ${String(reply)}, not [count, pttl]`);
  const [count, ttlMs] = reply.map((v) => (typeof v === 'number' || typeof v === 'string' ? Number(v) : NaN));
  if (!Number.isSafeInteger(count) || !Number.isSafeInteger(ttlMs) || ttlMs < -2) {
    throw unexpected(`RL.COUNTER answered [${reply.map(String).join(', ')}], not [count, pttl]`);
  }
  return { count, ttlMs };
}

module.exports = { parseCount, parseReply };
