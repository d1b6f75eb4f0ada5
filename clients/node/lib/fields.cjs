// The HTTP fields of docs/node.md: RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11, a name being a Structured Field String),
// X-RateLimit-*, Retry-After, and the application/problem+json bodies of 429 and 503 (fail
// closed, and an adaptive concurrency limit shedding load); and a decision's reset instant, the
// epoch X-RateLimit-Reset.

// @ts-check
'use strict';

const ceilSeconds = (ms) => Math.ceil(ms / 1000);

// A name in RateLimit-Policy and RateLimit is a Structured Field String: printable ASCII, with
// `"` and `\` escaped.
function checkName(name, what) {
  if (typeof name !== 'string' || name.length === 0 || !/^[\x20-\x7e]*$/.test(name)) {
    throw new TypeError(`invalid ${what}: expected a non-empty string of printable ASCII; got ${String(name)}`);
  }
  return name;
}
const sfString = (s) => `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

/** What X-RateLimit-Reset says: delta seconds (the default) or epoch seconds. */
const X_RATELIMIT_RESET = ['delta', 'epoch'];

/** The xRateLimitReset option checked: 'delta' (the default) or 'epoch'. */
function checkXRateLimitReset(value = 'delta') {
  if (!X_RATELIMIT_RESET.includes(value)) {
    throw new TypeError(`invalid xRateLimitReset: expected "delta" or "epoch"; got ${String(value)}`);
  }
  return /** @type {'delta' | 'epoch'} */ (value);
}

// The instant a decision's key is fresh again, in ms since the Unix epoch: this process's
// wall clock when the reply arrived plus its reset_after_ms, fixed then, so that the denial
// memory's later answers say the same instant (their resetAfterMs, counted down on the monotonic
// clock, would round to another second now and then, or follow a step of the wall clock). A
// hidden property (not enumerable, not copied by a spread): the decision's fields stay those
// index.d.cts declares.
const RESET_AT = Symbol('ratelimit reset instant');

/**
 * `d` with its reset instant `ms` (ms since the epoch) fixed; as it is when `ms` is undefined.
 * @template {object} T
 * @param {T} d
 * @param {number | undefined} ms
 * @returns {T}
 */
function withResetAt(d, ms) {
  if (ms !== undefined) Object.defineProperty(d, RESET_AT, { value: ms, enumerable: false, configurable: true, writable: true });
  return d;
}

/**
 * The reset instant fixed on `d` (ms since the epoch), or undefined.
 * @param {object} d
 * @returns {number | undefined}
 */
const fixedResetAt = (d) => /** @type {any} */ (d)[RESET_AT];

/**
 * A decision's reset instant in ms since the epoch: the one fixed when its reply arrived, or for
 * a decision without one (a local budget's, one made by the application) now plus resetAfterMs.
 * @param {import('../index.cjs').Decision} d
 * @returns {number}
 */
const resetAt = (d) => fixedResetAt(d) ?? Date.now() + d.resetAfterMs;

const QUOTA_EXCEEDED_TYPE = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
const REDUCED_CAPACITY_TYPE =
  'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';

/**
 * The 429 body (application/problem+json), its keys in a fixed order and no spaces.
 * @param {string} name
 */
function quotaExceededBody(name) {
  return JSON.stringify({
    type: QUOTA_EXCEEDED_TYPE,
    title: 'Request cannot be satisfied as assigned quota has been exceeded',
    status: 429,
    'violated-policies': [name],
  });
}

/**
 * The 503 body of an adaptive concurrency limit's refusal (application/problem+json): the
 * service sheds load, it has as many requests in flight as it can take now; not the caller's
 * quota. The draft's temporary-reduced-capacity type, naming the limit as a 429 does.
 * @param {string} name
 */
function loadSheddingBody(name) {
  return JSON.stringify({
    type: REDUCED_CAPACITY_TYPE,
    title: 'Request cannot be satisfied due to temporary server capacity constraints',
    status: 503,
    detail: 'load shedding: the server is at its adaptive concurrency limit',
    'violated-policies': [name],
  });
}

/** The 503 body of fail closed (application/problem+json). */
const UNAVAILABLE_BODY = JSON.stringify({
  type: REDUCED_CAPACITY_TYPE,
  title: 'Rate limiter unavailable',
  status: 503,
});

/**
 * The response fields for a decision, in order, as [name, value] pairs: RateLimit-Policy,
 * RateLimit, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, and on a refusal
 * Retry-After (left out when the request can never pass; at least 1 for an adaptive
 * concurrency limit's 503, and `t` with it). X-RateLimit-Reset is ceil(resetAfterMs / 1000),
 * or with `xRateLimitReset: 'epoch'` the reset instant in seconds since the epoch, rounded up
 * (express-rate-limit's legacy field).
 * @param {import('../index.cjs').Decision} d
 * @param {import('../index.cjs').HeaderOptions} [options]
 */
function rateLimitHeaders(d, options = undefined) {
  const epoch = checkXRateLimitReset(options?.xRateLimitReset) === 'epoch';
  // A refusal's seconds: an adaptive limit's 503 says at least 1 (a retry at once would be shed).
  const retrySeconds = (ms) => (d.adaptive === undefined ? ceilSeconds(ms) : Math.max(1, ceilSeconds(ms)));
  let w = d.windowSeconds === undefined ? '' : `;w=${d.windowSeconds}`;
  if (d.concurrent) w = ';qu="concurrent-requests"';
  const name = sfString(d.name);
  // `t`: the seconds until `r` grows (draft-11): when refused, the retry time; when admitted, the
  // decision's moreAfterMs (none when `r` is all there is, or when it is not known).
  let t = '';
  if (d.allowed && d.moreAfterMs !== undefined) t = `;t=${ceilSeconds(d.moreAfterMs)}`;
  else if (!d.allowed && d.retryAfterMs >= 0) t = `;t=${retrySeconds(d.retryAfterMs)}`;
  /** @type {Array<[string, string]>} */
  const headers = [
    ['RateLimit-Policy', `${name};q=${d.limit}${w}`],
    ['RateLimit', `${name};r=${d.remaining}${t}`],
    ['X-RateLimit-Limit', String(d.limit)],
    ['X-RateLimit-Remaining', String(d.remaining)],
    ['X-RateLimit-Reset', String(epoch ? ceilSeconds(resetAt(d)) : ceilSeconds(d.resetAfterMs))],
  ];
  if (!d.allowed && d.retryAfterMs >= 0) headers.push(['Retry-After', String(retrySeconds(d.retryAfterMs))]);
  return headers;
}

module.exports = {
  checkName,
  checkXRateLimitReset,
  withResetAt,
  fixedResetAt,
  QUOTA_EXCEEDED_TYPE,
  REDUCED_CAPACITY_TYPE,
  quotaExceededBody,
  loadSheddingBody,
  UNAVAILABLE_BODY,
  rateLimitHeaders,
};
