// Policies whose rules the application gives (issue 28: `{ policy, rules }`), on both backends:
// on a plain redis-server the package runs RL.LIMIT as policy.lua and RL.REFUND as
// policyrefund.lua over one key per rule (`{key}:0`, `{key}:1`, ...: one hash tag, one slot); on
// the module it sends RL.POLICY.SET of the rules once, then RL.LIMIT. The same sequences (costs,
// ATMOST, DRYRUN, the SHADOW option, a shadow rule, refunds, a BLOCK) run through RateLimit on
// the module's server with its debug clock and on the plain server with the scripts' test-only
// clock (NOW, through the private TEST_NOW hook), and the decisions are compared field by field.
// Also: the rules checked in the constructor, ruleKeys, NOSCRIPT, a policy without rules refused
// on the scripts, the Express middleware's fields and 429, and a local budget's refunds.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ModuleRequiredError, RateLimit, rateLimitMiddleware } from '../index.js';
import { readFileSync } from 'node:fs';
import { TEST_NOW, ruleKeys, scripts } from '../lib/scripts.cjs';
import { PATIENT, calls, helloApp, limitFields, moduleAndPlainForFile, quiet, sharedClock, strip, T0_MS } from './helpers.js';

// m: a client on the module's server, p: on the plain one (RESP3).
const { withModule, plain, m, p } = await moduleAndPlainForFile();


// Both clocks at T0 + ms: the module's debug clock, and the scripts' NOW for the limiters given.
const clockFor = (limiters) => sharedClock(m, limiters);


/** Redis Cluster's slot of a key (CRC16/XMODEM of its hash tag, or of the whole key, mod 16384). */
function keySlot(key) {
  let k = Buffer.from(key);
  const open = k.indexOf('{');
  if (open >= 0) {
    const close = k.indexOf('}', open + 1);
    if (close > open + 1) k = k.subarray(open + 1, close);
  }
  let crc = 0;
  for (const byte of k) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

const POLICIES = {
  // docs/policies.md's tiers, small, with a shadow rule that would refuse first.
  tiers: {
    policy: 'tiers',
    rules: [
      { algorithm: 'gcra', burst: 3, rate: 1, period: '1s' },
      { algorithm: 'fixedwindow', limit: 6, window: '10s' },
      { algorithm: 'slidinglog', limit: 2, window: '5s', shadow: true },
    ],
  },
  // Every other algorithm, INTERVAL and COLDFACTOR among the rules' words.
  mixed: {
    policy: 'mixed',
    rules: [
      { algorithm: 'tokenbucket', capacity: 5, refillAmount: 2, refillPeriod: '1s', interval: true },
      { algorithm: 'leakybucket', capacity: 4, leakAmount: 1, leakPeriod: '1s' },
      { algorithm: 'slidingwindow', limit: 5, window: '10s' },
      { algorithm: 'warmup', rate: 4, period: '1s', warmup: '5s', coldFactor: 2 },
      { algorithm: 'tokenbucket', capacity: 2, refillAmount: 1, refillPeriod: '3s', shadow: true },
    ],
  },
  // A penalty over every rule.
  blocked: {
    policy: 'blocked',
    block: '5s',
    rules: [
      { algorithm: 'gcra', burst: 3, rate: 1, period: '1s' },
      { algorithm: 'fixedwindow', limit: 4, window: '1m' },
    ],
  },
};

// [ms after T0, what]: admitted, COST, refused, DRYRUN, refunds (DRYRUN too), ATMOST/granted,
// the SHADOW option, a cost no rule can admit, idle gaps.
const STEPS = [
  [0, (l, k) => l.check(k)],
  [0, (l, k) => l.check(k, 2)],
  [0, (l, k) => l.check(k)],
  [0, (l, k) => l.check(k, 1, { shadow: true })],
  [250, (l, k) => l.check(k, 1, { dryRun: true })],
  [250, (l, k) => l.refund(k, 1, { dryRun: true })],
  [250, (l, k) => l.refund(k, 1)],
  [300, (l, k) => l.check(k, 1, { atMost: 5 })],
  [300, (l, k) => l.check(k, 1, { atMost: 5 })],
  [300, (l, k) => l.check(k, 1, { atMost: 5, shadow: true })],
  [1700, (l, k) => l.check(k, 0)],
  [1700, (l, k) => l.check(k, 1, { atMost: 2 })],
  [1700, (l, k) => l.check(k, 2, { shadow: true })],
  [3000, (l, k) => l.check(k, 3)],
  [3000, (l, k) => l.check(k, 50)],
  [4500, (l, k) => l.check(k)],
  [7000, (l, k) => l.check(k)],
  [7000, (l, k) => l.check(k, 9, { shadow: true })],
  [9000, (l, k) => l.check(k)],
  [12_500, (l, k) => l.check(k, 2)],
  [12_500, (l, k) => l.refund(k, 5)],
  [12_600, (l, k) => l.check(k)],
  [25_000, (l, k) => l.check(k)],
  [25_000, (l, k) => l.check(k)],
];

test('a policy of rules on the scripts answers as on the module: rule index, granted, shadowDenied, refunds, BLOCK', async () => {
  const sets = await calls(m, 'RL.POLICY.SET');
  const gets = await calls(m, 'RL.POLICY.GET');
  for (const [name, limit] of Object.entries(POLICIES)) {
    const options = { limit, prefix: `rl:eq:${name}:`, denialMemory: 0, logger: quiet };
    const mod = new RateLimit({ ...PATIENT, ...options, client: m, backend: 'module' });
    const scr = new RateLimit({ ...PATIENT, ...options, client: p, backend: 'script' });
    const clock = clockFor([scr]);
    const seen = [];
    for (const [i, [ms, step]] of STEPS.entries()) {
      await clock.at(ms);
      const [a, b] = [await step(mod, 'k'), await step(scr, 'k')];
      assert.ok(a.failed === undefined && b.failed === undefined, `${name} step ${i}: ${a.error ?? b.error}`);
      assert.deepEqual(typeof b === 'number' ? b : strip(b), typeof a === 'number' ? a : strip(a), `${name} step ${i} (${ms} ms)`);
      seen.push(a);
    }
    const decisions = seen.filter((d) => typeof d !== 'number');
    assert.ok(decisions.some((d) => d.allowed && !d.shadowDenied) && decisions.some((d) => !d.allowed), `${name}: admitted and refused`);
    assert.ok(decisions.some((d) => d.rule > 0), `${name}: a rule other than the first binds`);
    assert.ok(decisions.some((d) => d.shadowDenied === true), `${name}: SHADOW's would-be denial`);
    assert.ok(seen.some((d) => typeof d === 'number' && d > 0), `${name}: a refund gave units back`);
    // ATMOST granted some (a BLOCK in force grants none); the BLOCK: the first refusal locks
    // every rule for 5 s, though GCRA has room again after 1 s.
    if (limit.block === undefined) assert.ok(decisions.some((d) => d.granted > 0), `${name}: ATMOST granted`);
    else assert.deepEqual([seen[2].allowed, seen[2].retryAfterMs, seen[10].allowed, seen[10].retryAfterMs], [false, 5000, false, 3300]);
    const counts = (s) => [s.calls, s.admitted, s.denied, s.shadowDenied, s.failures];
    assert.deepEqual(counts(scr.stats), counts(mod.stats), name);
    assert.deepEqual([mod.stats.backend, scr.stats.backend], ['module', 'script']);
    // The module holds the application's rules, as RL.POLICY.SET takes them (shadow marks too).
    const words = await m.sendCommand(['RL.POLICY.GET', limit.policy]);
    assert.equal(words.filter((w) => String(w) === 'SHADOW').length, limit.rules.filter((r) => r.shadow).length, name);
    assert.equal(words.filter((w) => /^[A-Z]+$/.test(String(w)) && String(w) !== 'SHADOW' && String(w) !== 'INTERVAL' && String(w) !== 'COLDFACTOR').length,
      limit.rules.length, name);
  }
  // RL.POLICY.SET once per RateLimit (three here), however many calls; RL.POLICY.GET never: the
  // rules' shapes are the configuration's.
  assert.equal(await calls(m, 'RL.POLICY.SET'), sets + Object.keys(POLICIES).length);
  assert.equal(await calls(m, 'RL.POLICY.GET'), gets + Object.keys(POLICIES).length, 'only this test\'s own GETs');
});

test('the rule keys on the plain server: {key}:0 .. {key}:n-1, hashes of one slot, with one TTL', async () => {
  const limit = POLICIES.tiers;
  const scr = new RateLimit({ ...PATIENT, client: p, limit, prefix: 'rl:keys:', backend: 'script', denialMemory: 0, logger: quiet });
  const mod = new RateLimit({ ...PATIENT, client: m, limit, prefix: 'rl:keys:', backend: 'module', denialMemory: 0, logger: quiet });
  const clock = clockFor([scr]);
  await clock.at(0);
  const [a, b] = [await mod.check('user:42', 2), await scr.check('user:42', 2)];
  assert.deepEqual(strip(b), strip(a));
  const keys = ['{rl:keys:user:42}:0', '{rl:keys:user:42}:1', '{rl:keys:user:42}:2'];
  assert.deepEqual(ruleKeys('rl:keys:user:42', 3), keys);
  assert.deepEqual((await p.sendCommand(['KEYS', 'rl:keys:*'])).length, 0, 'no key of its own');
  assert.deepEqual((await p.sendCommand(['KEYS', '{rl:keys:*'])).map(String).sort(), keys);
  for (const key of keys) assert.equal(await p.sendCommand(['TYPE', key]), 'hash', key);
  assert.equal(new Set(keys.map(keySlot)).size, 1);
  assert.equal(keySlot(keys[0]), keySlot('rl:keys:user:42'), 'the slot the module\'s key is in');
  // One TTL for every key of a call, the longest rule's (the 10 s window; T0 is 20 s into its minute).
  const ttls = await Promise.all(keys.map((k) => p.sendCommand(['PTTL', k])));
  assert.ok(ttls.every((t) => Math.abs(t - ttls[0]) < 100 && t > 9_000 && t <= 10_000), String(ttls));
  const moduleTtl = await m.sendCommand(['PTTL', 'rl:keys:user:42']);
  assert.ok(Math.abs(moduleTtl - ttls[0]) < 500, `${moduleTtl} ${ttls}`);
  // A key with a hash tag of its own keeps it; an empty tag is not one.
  assert.deepEqual(ruleKeys('rl:{user:42}:api', 2), ['rl:{user:42}:api:0', 'rl:{user:42}:api:1']);
  // Without a tag of its own, '}' and '%' inside the braces are escaped: the braces hold the
  // whole key, and no two keys share rule keys.
  assert.deepEqual(ruleKeys('rl:{}:x', 2), ['{rl:{%7D:x}:0', '{rl:{%7D:x}:1']);
  assert.deepEqual(ruleKeys('a}b{c', 1), ['{a%7Db{c}:0']);
  assert.deepEqual(ruleKeys('100%}', 1), ['{100%25%7D}:0']);
  assert.notDeepEqual(ruleKeys('a}b', 1), ruleKeys('{a}b}', 1));
  for (const key of ['rl:{user:42}:api', 'rl:{}:x', 'a}b{c', '}x', 'plain']) {
    assert.equal(new Set(ruleKeys(key, 4).map(keySlot)).size, 1, key);
  }
  // The cases both packages check (clients/policy-rule-keys.json).
  const shared = JSON.parse(readFileSync(new URL('../../policy-rule-keys.json', import.meta.url), 'utf8')).cases;
  for (const [key, n, want] of shared) {
    assert.deepEqual(ruleKeys(key, n), want, key);
    assert.equal(new Set(ruleKeys(key, 4).map(keySlot)).size, 1, key);
  }
  await scr.check('{tagged}', 1);
  assert.deepEqual((await p.sendCommand(['KEYS', 'rl:keys:{tagged}*'])).map(String).sort(),
    ['rl:keys:{tagged}:0', 'rl:keys:{tagged}:1', 'rl:keys:{tagged}:2']);
});

test('NOSCRIPT: after SCRIPT FLUSH policy.lua and policyrefund.lua are loaded again', async () => {
  const scr = new RateLimit({ ...PATIENT, client: p, limit: POLICIES.tiers, prefix: 'rl:flush:', backend: 'script', denialMemory: 0, logger: quiet });
  scr[TEST_NOW] = () => T0_MS * 1000;
  const { policy, policyrefund } = scripts();
  await p.sendCommand(['SCRIPT', 'FLUSH']);
  const d = await scr.check('k', 2);
  assert.deepEqual([d.failed, d.allowed, d.remaining, d.rule], [undefined, true, 1, 0]);
  assert.deepEqual(await p.sendCommand(['SCRIPT', 'EXISTS', policy.sha, policyrefund.sha]), [1, 0]);
  assert.equal(await scr.refund('k', 1), 1);
  assert.deepEqual(await p.sendCommand(['SCRIPT', 'EXISTS', policy.sha, policyrefund.sha]), [1, 1]);
});

test('a policy without rules needs the module on the scripts; with rules it runs there', async () => {
  const needs = (e) => e instanceof ModuleRequiredError && /needs the ratelimit module/.test(e.message) && /without rules/.test(e.message);
  assert.throws(() => new RateLimit({ client: p, limit: { policy: 'api' }, backend: 'script', logger: quiet }), needs);
  const auto = new RateLimit({ ...PATIENT, client: p, limit: { policy: 'api' }, prefix: 'rl:needs:', logger: quiet });
  await assert.rejects(auto.check('k'), needs);
  await assert.rejects(auto.check('k', 1, { shadow: true }), needs);
  await assert.rejects(auto.refund('k', 1), needs);
  assert.equal(auto.stats.failures, 0);
  assert.deepEqual(await p.sendCommand(['KEYS', '*needs*']), [], 'nothing was written');
  // auto with rules: the scripts.
  const ruled = new RateLimit({ ...PATIENT, client: p, limit: { ...POLICIES.tiers, policy: 'api' }, prefix: 'rl:needs:', logger: quiet });
  const d = await ruled.check('k');
  assert.deepEqual([d.allowed, d.rule, d.name, ruled.stats.backend], [true, 0, 'api/0', 'script']);
});

test('the rules are checked in the constructor', () => {
  const gcra = { algorithm: 'gcra', burst: 1, rate: 1, period: '1s' };
  const make = (limit, options = {}) => new RateLimit({ ...PATIENT, client: p, limit, logger: quiet, ...options });
  const cases = [
    [{ policy: 'x', rules: [] }, /invalid limit\.rules: expected an array of 1 to 16 rules; got 0 rules/],
    [{ policy: 'x', rules: Array(17).fill(gcra) }, /1 to 16 rules; got 17 rules/],
    [{ policy: 'x', rules: gcra }, /invalid limit\.rules: expected an array/],
    [{ policy: 'x', rules: [{ ...gcra, shadow: true }] }, /every rule is a shadow rule/],
    [{ policy: 'x', rules: [gcra, { policy: 'y' }] }, /invalid limit\.rules\[1\]: a rule is one algorithm's limit, not a policy/],
    [{ policy: 'x', rules: [gcra, { policy: 'y', rules: [gcra] }] }, /not a policy/],
    [{ policy: 'x', rules: [{ algorithm: 'concurrency', limit: 2, lease: '1s' }] }, /invalid limit\.rules\[0\]: a policy's rule cannot be a concurrency limit/],
    [{ policy: 'x', rules: [{ ...gcra, localBudget: 3 }] }, /invalid limit\.rules\[0\]\.localBudget/],
    [{ policy: 'x', rules: [{ ...gcra, block: '1s' }] }, /invalid limit\.rules\[0\]\.block/],
    [{ policy: 'x', rules: [{ ...gcra, shadow: 'yes' }] }, /invalid limit\.rules\[0\]\.shadow/],
    [{ policy: 'x', rules: [gcra, { algorithm: 'gcra', burst: 0, rate: 1, period: '1s' }] }, /invalid limit\.rules\[1\]\.burst/],
    [{ policy: 'x', rules: [{ algorithm: 'gcra', burst: 1, rate: 1, period: '1y' }] }, /invalid limit\.rules\[0\]\.period/],
    [{ policy: 'x', rules: [{ algorithm: 'warmup', rate: 1, period: '1s', warmup: '5s', coldFactor: 11 }] }, /invalid limit\.rules\[0\]\.coldFactor/],
    [{ policy: 'x', rules: [{ algorithm: 'bucket' }] }, /invalid limit\.rules\[0\]\.algorithm: expected one of gcra, .*warmup; got bucket/],
    [{ policy: 'x', rules: [null] }, /invalid limit\.rules\[0\]: expected \{ algorithm/],
    [{ ...gcra, rules: [gcra] }, /invalid limit\.rules: only a policy/],
  ];
  for (const [limit, message] of cases) assert.throws(() => make(limit), (e) => e instanceof TypeError && message.test(e.message), message);
  // 16 rules, a shadow one among them, is a policy.
  const sixteen = make({ policy: 'x', rules: [...Array(15).fill(gcra), { ...gcra, shadow: true }] });
  assert.equal(sixteen.rules.count, 16);
  assert.deepEqual(make(POLICIES.mixed).rules.words, [
    'TOKENBUCKET', '5', '2', '1000', 'INTERVAL', 'LEAKYBUCKET', '4', '1', '1000', 'SLIDINGWINDOW', '5', '10000',
    'WARMUP', '4', '1000', '5000', 'COLDFACTOR', '2', 'SHADOW', 'TOKENBUCKET', '2', '1', '3000',
  ]);
});

test('the module: RL.POLICY.SET of the rules once per RateLimit, replacing the server\'s policy; a failed SET is sent again', async () => {
  await m.sendCommand(['RL.POLICY.SET', 'replaced', 'FIXEDWINDOW', '1', '1h']);
  const sets = await calls(m, 'RL.POLICY.SET');
  const limit = { policy: 'replaced', rules: [{ algorithm: 'gcra', burst: 5, rate: 5, period: '1s' }] };
  const mod = new RateLimit({ ...PATIENT, client: m, limit, prefix: 'rl:set:', backend: 'module', denialMemory: 0, logger: quiet });
  await m.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0_MS}`]);
  const first = await Promise.all([1, 2, 3].map(() => mod.check('k')));
  assert.deepEqual(first.map((d) => [d.allowed, d.limit, d.name]), [[true, 5, 'replaced'], [true, 5, 'replaced'], [true, 5, 'replaced']]);
  assert.equal((await mod.check('k', 1, { atMost: 9 })).granted, 2);
  assert.equal(await mod.refund('k', 1), 1);
  assert.equal(await calls(m, 'RL.POLICY.SET'), sets + 1);
  assert.deepEqual((await m.sendCommand(['RL.POLICY.GET', 'replaced'])).map(String), ['GCRA', '5', '5', '1000']);
  // A rule the module refuses (SLIDINGLOG above sliding-log-max-limit): each request fails as
  // configured, no RL.LIMIT is sent, and the SET is tried again by the next request.
  const sent = [];
  const counting = { sendCommand: (args) => (sent.push(args[0]), m.sendCommand(args)) };
  const warned = [];
  const bad = new RateLimit({
    ...PATIENT,
    client: counting, limit: { policy: 'toolong', rules: [{ algorithm: 'slidinglog', limit: 1e12, window: '1s' }] },
    prefix: 'rl:set:', backend: 'module', failMode: 'closed', logger: { warn: (s) => warned.push(s), info() {} },
  });
  for (let i = 0; i < 2; i++) {
    const d = await bad.check('k');
    assert.deepEqual([d.failed, d.allowed], [true, false]);
  }
  assert.deepEqual(sent.filter((c) => c.startsWith('RL.')), ['RL.POLICY.SET', 'RL.POLICY.SET']);
  assert.equal(warned.length, 2);
  assert.match(warned[0], /^ratelimit: RL\.LIMIT for "rl:set:k" failed \(.*SLIDINGLOG.*\); fail closed/);
  assert.equal(await m.sendCommand(['RL.POLICY.GET', 'toolong']), null);
});

test('the Express middleware with a policy of rules: the same fields, 200s then 429, on the scripts as on the module', async () => {
  const limit = {
    policy: 'web',
    rules: [
      { algorithm: 'fixedwindow', limit: 3, window: '1m' },
      { algorithm: 'gcra', burst: 10, rate: 1, period: '1s' },
      { algorithm: 'fixedwindow', limit: 1, window: '1m', shadow: true },
    ],
  };
  const key = (req) => req.get('X-Client-Id');
  const onModule = rateLimitMiddleware({ ...PATIENT, client: m, limit, key, prefix: 'rl:mw:', backend: 'module', logger: quiet });
  const onScripts = rateLimitMiddleware({ ...PATIENT, client: p, limit, key, prefix: 'rl:mw:', backend: 'script', logger: quiet });
  const clock = clockFor([onScripts.limiter]);
  await clock.at(0);
  const [a, b] = [await helloApp(onModule), await helloApp(onScripts)];
  try {
    const got = [];
    for (let i = 0; i < 5; i++) {
      const [x, y] = [await a.as('ann'), await b.as('ann')];
      assert.deepEqual(limitFields(y), limitFields(x), `request ${i}`);
      assert.equal(y.body, x.body);
      got.push(limitFields(y));
    }
    assert.deepEqual(got.map((f) => f[0]), [200, 200, 200, 429, 429]);
    // The binding rule's fields: the minute's window (T0 is 20 s into its minute), rule 0.
    assert.deepEqual(got[3], [429, '"web/0";q=3;w=60', '"web/0";r=0;t=40', '3', '0', '40', '40']);
    assert.deepEqual([onModule.limiter.stats.denied, onScripts.limiter.stats.denied], [2, 2]);
  } finally {
    await a.http.close();
    await b.http.close();
  }
});

test('a local budget on a policy of rules: refills with ATMOST, unspent units refunded through policyrefund', async () => {
  const limit = {
    policy: 'budget',
    rules: [
      { algorithm: 'fixedwindow', limit: 10, window: '1m' },
      { algorithm: 'gcra', burst: 20, rate: 20, period: '1s' },
    ],
  };
  const options = { limit, prefix: 'rl:lb:', localBudget: 4, hold: '1h', denialMemory: 0, logger: quiet };
  const mod = new RateLimit({ ...PATIENT, ...options, client: m, backend: 'module' });
  const scr = new RateLimit({ ...PATIENT, ...options, client: p, backend: 'script' });
  const clock = clockFor([scr]);
  await clock.at(0);
  await p.sendCommand(['SCRIPT', 'FLUSH']);
  const admitted = [0, 0];
  for (let i = 0; i < 6; i++) {
    const [a, b] = [await mod.check('k'), await scr.check('k')];
    assert.deepEqual(strip(b), strip(a), `request ${i}`);
    assert.equal(a.local, b.local);
    if (a.allowed) admitted[0] += 1;
    if (b.allowed) admitted[1] += 1;
  }
  assert.deepEqual(admitted, [6, 6]);
  assert.deepEqual([mod.stats.refills, scr.stats.refills, mod.stats.held, scr.stats.held], [2, 2, 2, 2]);
  assert.deepEqual([await mod.close(), await scr.close()], [2, 2]);
  assert.deepEqual(await p.sendCommand(['SCRIPT', 'EXISTS', scripts().policyrefund.sha]), [1], 'through policyrefund');
  // The module key's count is what was admitted; the scripts' keys say the same.
  const inspected = await m.sendCommand(['RL.INSPECT', 'rl:lb:k']);
  assert.equal(inspected.rules[0].count, 6);
  const [a, b] = [await mod.check('k', 1, { dryRun: true }), await scr.check('k', 1, { dryRun: true })];
  assert.deepEqual(strip(b), strip(a));
  assert.deepEqual([a.remaining, a.rule], [3, 0], "10 - 6 admitted - this 1");
});

// Midnight (UTC) after T0, in ms after T0: the day's and the minute's windows start there.
const MIDNIGHT = 6_400_000;

// `steps` ([ms after midnight, limit, cost]) on both backends at the same instants, a new
// RateLimit pair whenever the limit changes (a redeploy), each pair of decisions equal field by
// field; resolves to the module's.
async function throughChanges(prefix, steps) {
  await p.sendCommand(['DEL', ...ruleKeys(`${prefix}k`, 16)]);
  await m.sendCommand(['DEL', `${prefix}k`]);
  const decisions = [];
  let current, mod, scr, clock;
  for (const [i, [ms, limit, cost]] of steps.entries()) {
    if (limit !== current) {
      const options = { limit, prefix, denialMemory: 0, logger: quiet, timeout: 2000 };
      [mod, scr, current] = [new RateLimit({ ...PATIENT, ...options, client: m, backend: 'module' }), new RateLimit({ ...PATIENT, ...options, client: p, backend: 'script' }), limit];
      clock = clockFor([scr]);
    }
    await clock.at(MIDNIGHT + ms);
    const [a, b] = [await mod.check('k', cost), await scr.check('k', cost)];
    assert.ok(a.failed === undefined && b.failed === undefined, `step ${i}: ${a.error ?? b.error}`);
    assert.deepEqual(strip(b), strip(a), `step ${i} (${ms} ms, ${JSON.stringify(limit.rules)})`);
    decisions.push(a);
  }
  return decisions;
}

test('a policy that loses a rule keeps the others\' state (issue 36): FIXEDWINDOW 3 1m + 5 1d, then 5 1d alone', async () => {
  const fw = (limit, window) => ({ algorithm: 'fixedwindow', limit, window });
  const both = { policy: 'day', rules: [fw(3, '1m'), fw(5, '1d')] };
  const day = { policy: 'day', rules: [fw(5, '1d')] };
  const steps = [...Array(3).fill([0, both, 1]), ...Array(2).fill([60_000, both, 1]), [120_000, both, 1],
    ...Array(5).fill([120_000, day, 1]), [180_000, day, 1], [240_000, both, 1]];
  const decisions = await throughChanges('rl:lost:day:', steps);
  assert.deepEqual(decisions.map((d) => d.allowed), [...Array(5).fill(true), ...Array(8).fill(false)]);
  assert.deepEqual(decisions.slice(6, 11).map((d) => [d.limit, d.remaining, d.retryAfterMs, d.rule]), Array(5).fill([5, 0, 86_280_000, 0]));
  assert.deepEqual([decisions[12].rule, decisions[12].retryAfterMs], [1, 86_160_000]);
});

test('docs/policies.md\'s tiers lose their middle rule, then are reordered: the day stays spent on both backends', async () => {
  const gcra = (burst) => ({ algorithm: 'gcra', burst, rate: 10, period: '1s' });
  const fw = (limit, window) => ({ algorithm: 'fixedwindow', limit, window });
  const tiers = { policy: 'tiers', rules: [gcra(10), fw(300, '1m'), fw(5000, '1d')] };
  const two = { policy: 'tiers', rules: [gcra(10), fw(5000, '1d')] };
  const moved = { policy: 'tiers', rules: [fw(5000, '1d'), gcra(20)] };
  const steps = [];
  for (let minute = 0; minute < 17; minute++) for (let s = 0; s < 30; s++) steps.push([minute * 60_000 + s * 1000, tiers, 10]);
  for (let s = 30; s < 40; s++) steps.push([16 * 60_000 + s * 1000, two, 10]);
  for (let s = 0; s < 5; s++) steps.push([17 * 60_000 + s * 1000, moved, 10]);
  const decisions = await throughChanges('rl:lost:tiers:', steps);
  assert.equal(decisions.filter((d) => d.allowed).length * 10, 5000);
  assert.deepEqual(decisions.slice(-15).map((d) => [d.allowed, d.limit, d.rule]),
    [...Array(10).fill([false, 5000, 1]), ...Array(5).fill([false, 5000, 0])]);
});

test('after RULEKEYS a RateLimit names a lost rule\'s key in its later calls: one refusal, not one per call; durable too', async () => {
  const both = { policy: 'rk', rules: [{ algorithm: 'slidingwindow', limit: 3, window: '1m' }, { algorithm: 'fixedwindow', limit: 5, window: '1d' }] };
  const day = { policy: 'rk', rules: [{ algorithm: 'fixedwindow', limit: 5, window: '1d' }] };
  const keys = ruleKeys('rl:rk:k', 2);
  const make = (limit, options = {}) => new RateLimit({ client: p, limit, prefix: 'rl:rk:', backend: 'script', denialMemory: 0, logger: quiet, timeout: 2000, ...options });
  await p.sendCommand(['DEL', ...keys]);
  const before = make(both);
  assert.equal((await before.check('k', 2)).remaining, 1);
  assert.equal(await before.refund('k', 0), 0); // both scripts loaded
  await p.sendCommand(['CONFIG', 'RESETSTAT']);
  const after = make(day);
  const remaining = [];
  for (let i = 0; i < 3; i++) remaining.push((await after.check('k')).remaining);
  assert.deepEqual(remaining, [2, 1, 0]);
  assert.deepEqual([await p.sendCommand(['EXISTS', keys[1]]), String(await p.sendCommand(['HGET', keys[0], 'r']))], [0, '1']);
  assert.equal(await after.refund('k', 1), 1);
  // The 3 checks, their 3 probes (moreAfterMs: a DRYRUN), the refund, and the one refused.
  assert.equal(await calls(p, 'EVALSHA'), 8);
  assert.match(String(await p.sendCommand(['INFO', 'errorstats'])), /^errorstat_RULEKEYS:count=1\r?$/m);
  // durable: the check and WAIT together, RULEKEYS answered as well (the day's 5 are spent).
  await p.sendCommand(['DEL', ...keys]);
  const spent = { policy: 'rk', rules: [{ algorithm: 'slidingwindow', limit: 5, window: '1m' }, day.rules[0]] };
  assert.equal((await make(spent).check('k', 5)).remaining, 0);
  const d = await make(day, { durable: 1, durableTimeoutMs: 1 }).check('k');
  assert.deepEqual([d.failed, d.allowed, d.remaining, d.limit], [undefined, false, 0, 5]);
});

test('durable: a write sent again after RULEKEYS is followed by a WAIT of its own', async () => {
  const both = { policy: 'rw', rules: [{ algorithm: 'slidingwindow', limit: 3, window: '1m' }, { algorithm: 'fixedwindow', limit: 5, window: '1d' }] };
  const day = { policy: 'rw', rules: [{ algorithm: 'fixedwindow', limit: 5, window: '1d' }] };
  const keys = ruleKeys('rl:rw:k', 2);
  const make = (limit, options = {}) => new RateLimit({ client: p, limit, prefix: 'rl:rw:', backend: 'script', denialMemory: 0, logger: quiet, timeout: 2000, ...options });
  await p.sendCommand(['DEL', ...keys]);
  assert.equal((await make(both).check('k', 2)).remaining, 1);
  await p.sendCommand(['CONFIG', 'RESETSTAT']);
  // The first EVALSHA names one key and is refused (RULEKEYS), WAIT goes with it; the second,
  // with both keys, writes: only a WAIT sent after it can say a replica has that write. This
  // server has none, so the admission is not durable, and says so.
  const d = await make(day, { durable: 1, durableTimeoutMs: 1 }).check('k');
  assert.deepEqual([d.failed, d.error?.name], [true, 'NotDurableError']);
  assert.match(String(await p.sendCommand(['INFO', 'errorstats'])), /^errorstat_RULEKEYS:count=1\r?$/m);
  assert.deepEqual([await calls(p, 'EVALSHA'), await calls(p, 'WAIT')], [2, 2]);
  assert.equal(String(await p.sendCommand(['HGET', keys[0], 'r'])), '1');
});
