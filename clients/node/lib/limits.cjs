// What to limit by: the module's bounds and duration grammar, each algorithm's command and
// positional parameters, what the HTTP fields say of each (RateLimit-Policy's `w`, how RateLimit's
// `t` is known), and the same for a policy's rules as RL.POLICY.GET gives them back.

// @ts-check
'use strict';

const MAX_DURATION_MS = 315_360_000_000; // 10 years: the module's bound on every duration
const MAX_COUNT = 1_000_000_000_000; // 10^12: the module's bound on every count
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * A duration in the module's grammar (a bare integer is milliseconds; units ms, s, m, h, d),
 * or a number of milliseconds; returns milliseconds. Throws a TypeError naming `what`.
 * @param {import('../index.cjs').Duration} value
 * @param {string} [what]
 * @returns {number}
 */
function durationMs(value, what = 'duration') {
  let ms;
  if (typeof value === 'number') {
    ms = value;
  } else if (typeof value === 'string') {
    const m = /^([1-9][0-9]*)(ms|s|m|h|d)?$/i.exec(value);
    ms = m ? Number(m[1]) * UNIT_MS[(m[2] ?? 'ms').toLowerCase()] : NaN;
  } else {
    ms = NaN;
  }
  if (!Number.isSafeInteger(ms) || ms < 1 || ms > MAX_DURATION_MS) {
    throw new TypeError(
      `invalid ${what}: expected a duration from 1 ms to 10 years, as milliseconds or a string ` +
        `like "1500", "90s", "1m", "24h", "7d"; got ${String(value)}`,
    );
  }
  return ms;
}

function count(value, what, min = 1) {
  if (!Number.isSafeInteger(value) || value < min || value > MAX_COUNT) {
    throw new TypeError(`invalid ${what}: expected an integer from ${min} to 10^12; got ${String(value)}`);
  }
  return value;
}

// For each algorithm: its positional parameters (the option names the application writes), which
// of them are durations, its flag (`INTERVAL`) and its option with a value (`COLDFACTOR factor`),
// and `fields`, what RateLimit-Policy and RateLimit say of it (see `fieldShape`). A policy's
// rules are these algorithms too (concurrency excepted), so RL.POLICY.GET's reply is read with
// the same table.
const ALGORITHMS = {
  gcra: { command: 'RL.GCRA', params: ['burst', 'rate', 'period'], fields: 'spaced' },
  tokenbucket: {
    command: 'RL.TOKENBUCKET',
    params: ['capacity', 'refillAmount', 'refillPeriod'],
    flag: 'interval',
    fields: 'spaced',
  },
  leakybucket: {
    command: 'RL.LEAKYBUCKET',
    params: ['capacity', 'leakAmount', 'leakPeriod'],
    sixth: 'delay_ms',
    fields: 'spaced',
  },
  fixedwindow: { command: 'RL.FIXEDWINDOW', params: ['limit', 'window'], fields: 'fixed' },
  slidingwindow: { command: 'RL.SLIDINGWINDOW', params: ['limit', 'window'], fields: 'sliding' },
  slidinglog: { command: 'RL.SLIDINGLOG', params: ['limit', 'window'], fields: 'sliding' },
  warmup: {
    command: 'RL.WARMUP',
    params: ['rate', 'period', 'warmup'],
    valued: { name: 'coldFactor', word: 'COLDFACTOR', min: 2, max: 10 },
    fields: 'warmup',
  },
  // Requests in flight: a lease per admitted request, released when its response ends. With
  // `adaptive` (ADAPTIVE <KIND> [MIN n] [MAX n] after limit and lease) the limit is an estimate
  // the releases move, `limit` only where a new key starts; `adaptive` holds each kind's MIN and
  // MAX when left out (the module's defaults, Netflix's), widened to include `limit`.
  concurrency: {
    command: 'RL.CONCURRENCY.ACQUIRE',
    params: ['limit', 'lease'],
    sixth: 'token',
    concurrent: true,
    adaptive: { aimd: { min: 20, max: 200 }, vegas: { min: 1, max: 1000 }, gradient2: { min: 20, max: 200 } },
  },
};
const DURATION_PARAMS = new Set(['period', 'refillPeriod', 'leakPeriod', 'window', 'lease', 'warmup']);

/**
 * An algorithm's period or window in ms (its first duration), from its words after the key as
 * the package writes them (durations in ms): what a local budget's default hold is taken from.
 * @param {string} name the algorithm, lower case (a key of ALGORITHMS)
 * @param {ReadonlyArray<string>} words
 */
function periodMs(name, words) {
  return Number(words[ALGORITHMS[name].params.findIndex((p) => DURATION_PARAMS.has(p))]);
}

// The largest integer a Structured Field may carry (RFC 9651: 15 digits).
const SF_INTEGER_MAX = 999_999_999_999_999n;

// `a × b / c` ms in whole seconds, or undefined when it is not a whole number of seconds or is
// past a Structured Field integer (BigInt: counts and durations up to 10^12 and 10 years
// multiply past 2^53).
function wholeSecondsOf(a, b, c) {
  const num = BigInt(a) * BigInt(b);
  const den = BigInt(c) * 1000n;
  return num % den === 0n && num / den <= SF_INTEGER_MAX ? Number(num / den) : undefined;
}

/**
 * What the HTTP fields say of one algorithm's limit, given its words after the key (counts,
 * durations in ms or the module's grammar, then its flags and options): `windowSeconds`, the `w`
 * of RateLimit-Policy in whole seconds (undefined when not whole, or for concurrency), chosen so
 * that q/w is the sustained rate; and `more`, how to know when the reply's `remaining` grows
 * (RateLimit's `t`): `{ spaced: [periodMs, amount] }` (GCRA and the buckets: one unit each
 * periodMs / amount, from the reply alone), `{ interval: [periodMs, amount] }` (a token bucket
 * with INTERVAL: `amount` units at each whole period), `'reset'` (a fixed window: at its end),
 * `'probe'` (sliding window and log, warm-up: the reply does not say; a DRYRUN asks) or
 * undefined (concurrency: when a holder gives its lease back).
 */
function fieldShape(name, words) {
  const algorithm = ALGORITHMS[name];
  const ms = (i) => durationMs(/^[0-9]+$/.test(String(words[i])) ? Number(words[i]) : String(words[i]));
  switch (algorithm.fields) {
    case 'spaced': {
      // burst or capacity, rate or amount, period: a whole burst comes back in burst × period / rate.
      const [burst, amount, periodMs] = [Number(words[0]), Number(words[1]), ms(2)];
      const interval = words.slice(3).some((w) => String(w).toUpperCase() === 'INTERVAL');
      return {
        windowSeconds: wholeSecondsOf(burst, periodMs, amount),
        more: interval ? { interval: [periodMs, amount] } : { spaced: [periodMs, amount] },
      };
    }
    case 'fixed':
      return { windowSeconds: wholeSecondsOf(1, ms(1), 1), more: 'reset' };
    case 'sliding':
      return { windowSeconds: wholeSecondsOf(1, ms(1), 1), more: 'probe' };
    case 'warmup':
      // Its limit is 1: one request each period / rate once warm.
      return { windowSeconds: wholeSecondsOf(1, ms(1), Number(words[0])), more: 'probe' };
    default:
      return { windowSeconds: undefined, more: undefined };
  }
}

const ceilDivBig = (a, b) => (a + b - 1n) / b;

/**
 * The ms (whole, rounded up) until the reply's `remaining` grows, known from the reply alone
 * for a limit of this `more` (see fieldShape); undefined when it never does (remaining is the
 * limit) or the reply does not say ('probe', concurrency). GCRA and the buckets give one unit
 * each T = periodMs / amount and are fresh after `reset_after_ms`, so the next unit comes
 * (limit - remaining - 1) × T before that; an INTERVAL bucket fills at its k-th refill from now,
 * k = ceil((limit - remaining) / amount), and the next refill is (k - 1) periods before; a fixed
 * window frees its units at its end. In Numbers while every product is below 2^53 (the common
 * case, on every request), else in BigInts.
 */
function moreAfterMs(more, d) {
  if (d.remaining >= d.limit || d.resetAfterMs <= 0) return undefined;
  if (more === 'reset') return d.resetAfterMs;
  const missing = d.limit - d.remaining;
  if (more?.spaced) {
    const [period, amount] = more.spaced;
    const num = d.resetAfterMs * amount - (missing - 1) * period;
    if (Number.isSafeInteger(d.resetAfterMs * amount) && Number.isSafeInteger((missing - 1) * period)) {
      return num > 0 ? Math.ceil(num / amount) : 0;
    }
    const [p, a] = [BigInt(period), BigInt(amount)];
    const ms = ceilDivBig(BigInt(d.resetAfterMs) * a - BigInt(missing - 1) * p, a);
    return ms > 0n ? Number(ms) : 0;
  }
  if (more?.interval) {
    const [period, amount] = more.interval;
    const refills = Math.ceil(missing / amount) - 1;
    if (Number.isSafeInteger(refills * period)) return Math.max(0, d.resetAfterMs - refills * period);
    const ms = BigInt(d.resetAfterMs) - BigInt(refills) * BigInt(period);
    return ms > 0n ? Number(ms) : 0;
  }
  return undefined;
}

/**
 * The shape (fieldShape) of each rule in RL.POLICY.GET's reply, in the policy's order, shadow
 * rules included. A rule the package does not know, or a rule cut short, throws: the package
 * would otherwise misread every rule after it.
 */
function policyShapes(flat) {
  const words = flat.map((w) => (Buffer.isBuffer(w) ? w.toString() : String(w)));
  const shapes = [];
  let i = 0;
  while (i < words.length) {
    if (words[i].toUpperCase() === 'SHADOW') i += 1;
    const word = words[i];
    const name = word?.toLowerCase().replace(/^rl\./, '');
    const rule = Object.hasOwn(ALGORITHMS, name) && !ALGORITHMS[name].concurrent ? ALGORITHMS[name] : undefined;
    if (rule === undefined) throw new Error(`unexpected rule in RL.POLICY.GET's reply: ${word ?? 'nothing after SHADOW'}`);
    const start = i + 1;
    const args = words.slice(start, start + rule.params.length);
    if (args.length < rule.params.length) {
      throw new Error(`unexpected rule in RL.POLICY.GET's reply: ${word} with ${args.length} arguments`);
    }
    i = start + rule.params.length;
    if (rule.valued && words[i]?.toUpperCase() === rule.valued.word) i += 2;
    if (rule.flag && words[i]?.toUpperCase() === rule.flag.toUpperCase()) i += 1;
    let shape;
    try {
      shape = fieldShape(name, words.slice(start, i));
    } catch {
      shape = { windowSeconds: undefined, more: undefined };
    }
    shapes.push(shape);
  }
  return shapes;
}

/**
 * The `w` of each rule in RL.POLICY.GET's reply (policyShapes' windowSeconds).
 * @param {ReadonlyArray<string | Buffer>} flat
 * @returns {Array<number | undefined>}
 */
function policyWindows(flat) {
  return policyShapes(flat).map((s) => s.windowSeconds);
}

module.exports = {
  MAX_DURATION_MS,
  MAX_COUNT,
  durationMs,
  count,
  ALGORITHMS,
  DURATION_PARAMS,
  fieldShape,
  periodMs,
  moreAfterMs,
  policyShapes,
  policyWindows,
};
