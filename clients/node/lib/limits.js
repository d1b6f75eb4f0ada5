// What to limit by: the module's bounds and duration grammar, each algorithm's command and
// positional parameters (with the one whose length is RateLimit-Policy's `w`), and the windows
// of a policy's rules as RL.POLICY.GET gives them back.

export const MAX_DURATION_MS = 315_360_000_000; // 10 years: the module's bound on every duration
export const MAX_COUNT = 1_000_000_000_000; // 10^12: the module's bound on every count
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * A duration in the module's grammar (a bare integer is milliseconds; units ms, s, m, h, d),
 * or a number of milliseconds; returns milliseconds. Throws a TypeError naming `what`.
 */
export function durationMs(value, what = 'duration') {
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

export function count(value, what, min = 1) {
  if (!Number.isSafeInteger(value) || value < min || value > MAX_COUNT) {
    throw new TypeError(`invalid ${what}: expected an integer from ${min} to 10^12; got ${String(value)}`);
  }
  return value;
}

/** Whole seconds, or undefined when the duration is not a whole number of seconds. */
export function wholeSeconds(ms) {
  return ms % 1000 === 0 ? ms / 1000 : undefined;
}

// For each algorithm: its positional parameters (the option names the application writes), which
// of them are durations, and the one whose length is the `w` of RateLimit-Policy.
export const ALGORITHMS = {
  gcra: { command: 'RL.GCRA', params: ['burst', 'rate', 'period'], window: 'period' },
  tokenbucket: {
    command: 'RL.TOKENBUCKET',
    params: ['capacity', 'refillAmount', 'refillPeriod'],
    window: 'refillPeriod',
    flag: 'interval',
  },
  leakybucket: {
    command: 'RL.LEAKYBUCKET',
    params: ['capacity', 'leakAmount', 'leakPeriod'],
    window: 'leakPeriod',
    sixth: 'delay_ms',
  },
  fixedwindow: { command: 'RL.FIXEDWINDOW', params: ['limit', 'window'], window: 'window' },
  slidingwindow: { command: 'RL.SLIDINGWINDOW', params: ['limit', 'window'], window: 'window' },
  slidinglog: { command: 'RL.SLIDINGLOG', params: ['limit', 'window'], window: 'window' },
  // Requests in flight: a lease per admitted request, released when its response ends.
  concurrency: { command: 'RL.CONCURRENCY.ACQUIRE', params: ['limit', 'lease'], sixth: 'token', concurrent: true },
};
export const DURATION_PARAMS = new Set(['period', 'refillPeriod', 'leakPeriod', 'window', 'lease']);

// RL.POLICY.GET's flat reply, rule by rule: the number of arguments after each algorithm's name.
const RULE_ARITY = { GCRA: 3, TOKENBUCKET: 3, LEAKYBUCKET: 3, FIXEDWINDOW: 2, SLIDINGWINDOW: 2, SLIDINGLOG: 2 };
const RULE_WINDOW_INDEX = { GCRA: 2, TOKENBUCKET: 2, LEAKYBUCKET: 2, FIXEDWINDOW: 1, SLIDINGWINDOW: 1, SLIDINGLOG: 1 };

/**
 * The window in whole seconds of each rule in RL.POLICY.GET's reply (undefined where it is not
 * a whole number of seconds), in the policy's order.
 */
export function policyWindows(flat) {
  const words = flat.map((w) => (Buffer.isBuffer(w) ? w.toString() : String(w)));
  const windows = [];
  let i = 0;
  while (i < words.length) {
    let name = words[i].toUpperCase();
    if (name === 'SHADOW') name = words[++i]?.toUpperCase();
    name = name?.replace(/^RL\./, '');
    const arity = RULE_ARITY[name];
    if (arity === undefined) throw new Error(`unexpected rule in RL.POLICY.GET's reply: ${words[i]}`);
    const args = words.slice(i + 1, i + 1 + arity);
    let w;
    try {
      w = wholeSeconds(durationMs(args[RULE_WINDOW_INDEX[name]]));
    } catch {
      w = undefined;
    }
    windows.push(w);
    i += 1 + arity;
    if (name === 'TOKENBUCKET' && words[i]?.toUpperCase() === 'INTERVAL') i += 1;
  }
  return windows;
}
