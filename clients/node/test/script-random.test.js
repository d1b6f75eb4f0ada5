// The script backend's differential test in this package (issue 28): random seeded sequences,
// per algorithm and for policies with rules, through RateLimit on both backends at the same
// instants: the module on its server with the debug clock, the scripts on a plain server with
// their test-only clock (TEST_NOW). Each step's decision (or refund) must be equal field by
// field. The steps: costs 0 to limit + 2, ATMOST, DRYRUN, SHADOW, refunds (and their DRYRUN),
// BLOCK, parameter changes (a new limiter on the same keys, as a redeploy makes; a policy's
// anywhere in it: a rule's parameter, rules added, dropped, moved, replaced, a shadow mark on or
// off), idle gaps from none to several periods, and keys deleted as if expired (and when one
// expired in real time on one server only). clients/python/tests/
// test_script_equal.py drives the scripts themselves far harder; this one drives them through
// the package (its words, its reply parsing, its options), with the same seeds every run
// (SCRIPT_RANDOM_SEED, SCRIPT_RANDOM_SEQUENCES to vary).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimit } from '../index.js';
import { TEST_NOW, ruleKeys } from '../lib/scripts.cjs';
import { PATIENT, moduleAndPlainForFile, strip, T0_MS } from './helpers.js';

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

const MAX_RULES = 4;

// A rule of any algorithm, now and then a shadow one.
function newRule(r, shadow = r.next() < 0.15) {
  const rule = ALGORITHMS[r.pick(Object.keys(ALGORITHMS))](r);
  return shadow ? { ...rule, shadow } : rule;
}

// At least one rule enforced.
function enforced(rules) {
  if (rules.every((x) => x.shadow)) rules[0] = { ...rules[0], shadow: undefined };
  return { policy: 'random', rules: rules.map(({ shadow, ...rule }) => (shadow ? { ...rule, shadow } : rule)) };
}

// A policy of 1 to 3 rules.
function policy(r) {
  return enforced(Array.from({ length: r.int(1, 3) }, () => newRule(r)));
}

// A change an application makes, anywhere in a policy: a rule's parameter, a rule added, dropped,
// moved, replaced by another (of any algorithm), its shadow mark on or off; or a new policy.
function changedPolicy(r, old) {
  const rules = [...old.rules];
  const i = r.int(0, rules.length - 1);
  const pick = r.next();
  if (pick < 0.25) {
    const fresh = ALGORITHMS[rules[i].algorithm](r);
    const k = r.pick(Object.keys(fresh).filter((x) => x !== 'algorithm'));
    rules[i] = { ...rules[i], [k]: fresh[k] };
  } else if (pick < 0.4 && rules.length < MAX_RULES) {
    rules.splice(r.int(0, rules.length), 0, newRule(r));
  } else if (pick < 0.65 && rules.length > 1) {
    rules.splice(i, 1);
  } else if (pick < 0.75 && rules.length > 1) {
    const [moved] = rules.splice(i, 1);
    rules.splice(r.int(0, rules.length), 0, moved);
  } else if (pick < 0.85) {
    rules[i] = newRule(r, rules[i].shadow === true);
  } else if (pick < 0.93) {
    rules[i] = { ...rules[i], shadow: !rules[i].shadow };
  } else {
    return policy(r);
  }
  return enforced(rules);
}

// A new limit: all new, or (half the time) the same algorithm with one parameter changed.
function changed(r, make, old) {
  if (old.rules) return changedPolicy(r, old);
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
  const counts = { admitted: 0, refused: 0, refunds: 0, changes: 0, ...(limit.rules ? { lost: 0 } : {}) };
  const pair = () => {
    const options = { limit, prefix, denialMemory: 0, logger: null, timeout: 2000, failClosed: true };
    const mod = new RateLimit({ ...PATIENT, ...options, client: m, backend: 'module' });
    const scr = new RateLimit({ ...PATIENT, ...options, client: p, backend: 'script' });
    scr[TEST_NOW] = () => (T0_MS + now) * 1000;
    return [mod, scr];
  };
  let [mod, scr] = pair();
  const forget = async () => {
    await m.sendCommand(['DEL', prefix + key]);
    await p.sendCommand(['DEL', prefix + key, ...ruleKeys(prefix + key, MAX_RULES)]);
  };
  // The keys kept from the real clock, which moves on while the sequence's stands. A key may
  // expire in real time before its PERSIST (a slow step on a loaded machine), on one server and
  // not on the other: then both go, as if expired together. True when a key is gone on either.
  const persist = async () => {
    await Promise.all([m.sendCommand(['PERSIST', prefix + key]),
      ...[prefix + key, ...ruleKeys(prefix + key, MAX_RULES)].map((k) => p.sendCommand(['PERSIST', k]))]);
    const first = limit.rules ? ruleKeys(prefix + key, 1)[0] : prefix + key;
    const [kept, mine] = await Promise.all([m.sendCommand(['EXISTS', prefix + key]), p.sendCommand(['EXISTS', first])]);
    if (kept !== mine) {
      await forget();
      log.push(`@${now} expired in real time on one server: DEL`);
    }
    return kept === 0 || mine === 0;
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
    if (r.next() < (limit.rules ? 0.15 : 0.1)) {
      limit = changed(r, make, limit);
      [mod, scr] = pair();
      counts.changes++;
      log.push(`@${now} limit ${JSON.stringify(limit)}`);
    }
    if (limit.rules) {
      // The policy lost rules whose states the keys still hold: the scripts name them all.
      const held = await p.sendCommand(['HGET', ruleKeys(prefix + key, 1)[0], 'r']);
      if (held !== null && Number(held) > limit.rules.length) counts.lost++;
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
    const gone = await persist();
    if (typeof want === 'number') {
      assert.equal(got, want, where);
      continue;
    }
    assert.equal(want.failed, undefined, `${where}\nmodule: ${want.error}`);
    assert.equal(got.failed, undefined, `${where}\nscripts: ${got.error}`);
    // moreAfterMs of a sliding window, a log, a warm-up or a policy is a second, DRYRUN call's
    // (RateLimit's probe): a key the decision wrote with a TTL of a few ms may have expired in
    // real time between the two calls on one server and not the other. Where a key is gone after
    // the step, the decision is compared without it.
    const [a, b] = gone ? [strip(got), strip(want)].map(({ moreAfterMs, ...d }) => d) : [strip(got), strip(want)];
    assert.deepEqual(a, b, where);
    counts[want.allowed ? 'admitted' : 'refused']++;
  }
  return counts;
}

for (const name of [...Object.keys(ALGORITHMS), 'policy']) {
  test(`random sequences through the package: ${name} on the scripts answers as on the module`, async () => {
    const make = name === 'policy' ? policy : ALGORITHMS[name];
    const totals = {};
    // Policies: more sequences, their changes being what the algorithms' sequences do not make.
    for (let n = 0; n < SEQUENCES * (name === 'policy' ? 3 : 1); n++) {
      const counts = await runSequence(name, make, n);
      for (const [k, v] of Object.entries(counts)) totals[k] = (totals[k] ?? 0) + v;
    }
    if (name === 'policy') console.log(`${name}: ${JSON.stringify(totals)}`);
    // The sequences reach admissions, refusals, refunds and changes of the limit.
    assert.ok(Object.values(totals).every((v) => v > 0), JSON.stringify(totals));
  });
}
