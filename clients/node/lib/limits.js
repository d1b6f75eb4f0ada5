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
// of them are durations, the one whose length is the `w` of RateLimit-Policy (none for a warm-up,
// whose `limit` is 1 request spaced by an interval that changes as it warms), its flag
// (`INTERVAL`) and its option with a value (`COLDFACTOR factor`). A policy's rules are these
// algorithms too (concurrency excepted), so RL.POLICY.GET's reply is read with the same table.
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
  warmup: {
    command: 'RL.WARMUP',
    params: ['rate', 'period', 'warmup'],
    valued: { name: 'coldFactor', word: 'COLDFACTOR', min: 2, max: 10 },
  },
  // Requests in flight: a lease per admitted request, released when its response ends.
  concurrency: { command: 'RL.CONCURRENCY.ACQUIRE', params: ['limit', 'lease'], sixth: 'token', concurrent: true },
};
export const DURATION_PARAMS = new Set(['period', 'refillPeriod', 'leakPeriod', 'window', 'lease', 'warmup']);

/**
 * The window in whole seconds of each rule in RL.POLICY.GET's reply (undefined where it is not
 * a whole number of seconds, and for a WARMUP rule), in the policy's order, shadow rules
 * included. A rule the package does not know, or a rule cut short, throws: the package would
 * otherwise misread every rule after it.
 */
export function policyWindows(flat) {
  const words = flat.map((w) => (Buffer.isBuffer(w) ? w.toString() : String(w)));
  const windows = [];
  let i = 0;
  while (i < words.length) {
    if (words[i].toUpperCase() === 'SHADOW') i += 1;
    const word = words[i];
    const name = word?.toLowerCase().replace(/^rl\./, '');
    const rule = Object.hasOwn(ALGORITHMS, name) && !ALGORITHMS[name].concurrent ? ALGORITHMS[name] : undefined;
    if (rule === undefined) throw new Error(`unexpected rule in RL.POLICY.GET's reply: ${word ?? 'nothing after SHADOW'}`);
    const args = words.slice(i + 1, i + 1 + rule.params.length);
    if (args.length < rule.params.length) {
      throw new Error(`unexpected rule in RL.POLICY.GET's reply: ${word} with ${args.length} arguments`);
    }
    let w;
    if (rule.window !== undefined) {
      try {
        w = wholeSeconds(durationMs(args[rule.params.indexOf(rule.window)]));
      } catch {
        w = undefined;
      }
    }
    windows.push(w);
    i += 1 + rule.params.length;
    if (rule.valued && words[i]?.toUpperCase() === rule.valued.word) i += 2;
    if (rule.flag && words[i]?.toUpperCase() === rule.flag.toUpperCase()) i += 1;
  }
  return windows;
}
