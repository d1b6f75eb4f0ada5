// The script backend's differential test in this package (issue 28): random seeded sequences,
// per algorithm and for policies with rules, through RateLimit on both backends at the same
// instants: the module on its server with the debug clock, the scripts on a plain server with
// their test-only clock (TEST_NOW). Each step's decision (or refund) must be equal field by
// field. The steps: costs 0 to limit + 2, ATMOST, DRYRUN, SHADOW, refunds (and their DRYRUN),
// BLOCK, parameter changes (a new limiter on the same keys, as a redeploy makes), idle gaps from
// none to several periods, and keys deleted as if expired. clients/python/tests/
// test_script_equal.py drives the scripts themselves far harder; this one drives them through
// the package (its words, its reply parsing, its options), with the same seeds every run
// (SCRIPT_RANDOM_SEED, SCRIPT_RANDOM_SEQUENCES to vary).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimit } from '../index.js';
import { TEST_NOW, ruleKeys } from '../lib/scripts.cjs';
import { moduleAndPlainForFile, strip, T0_MS } from './helpers.js';

const SEED = Number(process.env.SCRIPT_RANDOM_SEED ?? 28);
const SEQUENCES = Number(process.env.SCRIPT_RANDOM_SEQUENCES ?? 40);
const STEPS = 30;

// m: a client on the module's server, p: on the plain one (RESP3).
const { withModule, plain, m, p } = await moduleAndPlainForFile();

// mulberry32: a small seeded generator, so that a failure names a sequence that replays.
function generator(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (xs) => xs[int(0, xs.length - 1)];
  return { next, int, pick };
}

const PERIODS = ['1s', '3s', '10s', '1m', '999ms', '1001ms'];

// Each algorithm's limit, drawn small so that a sequence is admitted and refused; its limit (the
// costs are drawn against it) and its period in ms (the gaps are).
const ALGORITHMS = {
  gcra: (r) => ({ algorithm: 'gcra', burst: r.int(1, 6), rate: r.int(1, 4), period: r.pick(PERIODS) }),
  tokenbucket: (r) => ({ algorithm: 'tokenbucket', capacity: r.int(1, 6), refillAmount: r.int(1, 3), refillPeriod: r.pick(PERIODS), interval: r.next() < 0.5 }),
  leakybucket: (r) => ({ algorithm: 'leakybucket', capacity: r.int(1, 6), leakAmount: r.int(1, 3), leakPeriod: r.pick(PERIODS) }),
  fixedwindow: (r) => ({ algorithm: 'fixedwindow', limit: r.int(1, 6), window: r.pick(PERIODS) }),
  slidingwindow: (r) => ({ algorithm: 'slidingwindow', limit: r.int(1, 6), window: r.pick(PERIODS) }),
  slidinglog: (r) => ({ algorithm: 'slidinglog', limit: r.int(1, 6), window: r.pick(PERIODS) }),
  warmup: (r) => ({ algorithm: 'warmup', rate: r.int(1, 5), period: r.pick(PERIODS), warmup: r.pick(['2s', '10s', '30s']), coldFactor: r.int(2, 5) }),
};

const limitOf = (l) => l.burst ?? l.capacity ?? l.limit ?? l.rate ?? 3;
const ms = (d) => {
  const [, n, unit] = /^(\d+)(ms|s|m)$/.exec(d);
  return Number(n) * { ms: 1, s: 1000, m: 60_000 }[unit];
};
const periodOf = (l) => ms(l.period ?? l.refillPeriod ?? l.leakPeriod ?? l.window);

// A policy of `least` to 3 rules: a change never drops rules here (the scripts read the keys of
// the rules a call names, so a policy that loses rules drops the state past its new count where
// the module may still match it: clients/scripts/README.md, Policies; Python's
// test_script_equal_policy.py covers the rest).
function policy(r, least = 1) {
  const n = r.int(least, 3);
  const rules = Array.from({ length: n }, () => {
    const rule = ALGORITHMS[r.pick(Object.keys(ALGORITHMS))](r);
    if (r.next() < 0.15) rule.shadow = true;
    return rule;
  });
  if (rules.every((x) => x.shadow)) delete rules[0].shadow;
  return { policy: 'random', rules };
}

// A new limit: all new, or (half the time) the same algorithm with one parameter changed.
function changed(r, make, old) {
  if (old.rules) return make(r, old.rules.length);
  const fresh = make(r);
  if (r.next() < 0.5) return fresh;
  const keys = Object.keys(fresh).filter((k) => k !== 'algorithm');
  const k = r.pick(keys);
  return { ...old, [k]: fresh[k] };
}


async function runSequence(name, make, n) {
  const r = generator(SEED * 100_003 + n * 7919 + name.length);
  let limit = make(r);
  if (r.next() < 0.2 && !limit.rules) limit.block = r.pick(['1s', '5s', '1m']);
  const prefix = `rl:rand:${name}:${n}:`;
  const key = 'k';
  let now = r.int(0, 86_400_000);
  const log = [];
  const counts = { admitted: 0, refused: 0, refunds: 0, changes: 0 };
  const pair = () => {
    const options = { limit, prefix, denialMemory: 0, logger: null, timeout: 2000, failClosed: true };
    const mod = new RateLimit({ ...options, client: m, backend: 'module' });
    const scr = new RateLimit({ ...options, client: p, backend: 'script' });
    scr[TEST_NOW] = () => (T0_MS + now) * 1000;
    return [mod, scr];
  };
  let [mod, scr] = pair();
  const forget = async () => {
    await m.sendCommand(['DEL', prefix + key]);
    await p.sendCommand(['DEL', prefix + key, ...ruleKeys(prefix + key, 3)]);
  };
  await forget();
  for (let step = 0; step < STEPS; step++) {
    const period = limit.rules ? Math.max(...limit.rules.map(periodOf)) : periodOf(limit);
    const g = r.next();
    now += g < 0.3 ? 0 : g < 0.75 ? r.int(1, period) : g < 0.97 ? r.int(period, 3 * period) : 86_400_000;
    await m.sendCommand(['RL.DEBUG.CLOCK', 'SET', String(T0_MS + now)]);
    if (r.next() < 0.03) {
      await forget();
      log.push(`@${now} DEL`);
    }
    if (r.next() < 0.1) {
      limit = changed(r, make, limit);
      [mod, scr] = pair();
      counts.changes++;
      log.push(`@${now} limit ${JSON.stringify(limit)}`);
    }
    const most = limit.rules ? Math.min(...limit.rules.map(limitOf)) : limitOf(limit);
    let call;
    const what = r.next();
    if (what < 0.12) {
      const units = r.int(0, most + 1);
      const dryRun = r.next() < 0.2;
      call = (l) => l.refund(key, units, { dryRun });
      log.push(`@${now} refund ${units}${dryRun ? ' dryRun' : ''}`);
      counts.refunds++;
    } else {
      const cost = r.pick([0, 1, 1, 1, 2, r.int(0, most + 2)]);
      const options = {};
      if (r.next() < 0.15) options.atMost = r.int(1, most + 2);
      if (r.next() < 0.12) options.dryRun = true;
      if (r.next() < 0.12) options.shadow = true;
      call = (l) => l.check(key, options.atMost ? 1 : cost, options);
      log.push(`@${now} check ${options.atMost ? 1 : cost} ${JSON.stringify(options)}`);
    }
    const want = await call(mod);
    const got = await call(scr);
    const where = `${name} sequence ${n} (seed ${SEED}), step ${step}:\n  ${log.slice(-10).join('\n  ')}`;
    if (typeof want === 'number') {
      assert.equal(got, want, where);
      continue;
    }
    assert.equal(want.failed, undefined, `${where}\nmodule: ${want.error}`);
    assert.equal(got.failed, undefined, `${where}\nscripts: ${got.error}`);
    assert.deepEqual(strip(got), strip(want), where);
    counts[want.allowed ? 'admitted' : 'refused']++;
  }
  return counts;
}

for (const name of [...Object.keys(ALGORITHMS), 'policy']) {
  test(`random sequences through the package: ${name} on the scripts answers as on the module`, async () => {
    const make = name === 'policy' ? policy : ALGORITHMS[name];
    const totals = { admitted: 0, refused: 0, refunds: 0, changes: 0 };
    for (let n = 0; n < SEQUENCES; n++) {
      const counts = await runSequence(name, make, n);
      for (const k of Object.keys(totals)) totals[k] += counts[k];
    }
    // The sequences reach admissions, refusals, refunds and changes of the limit.
    assert.ok(Object.values(totals).every((v) => v > 0), JSON.stringify(totals));
  });
}
