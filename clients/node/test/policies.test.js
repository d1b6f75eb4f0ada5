// RL.LIMIT through the middleware against a real server with the debug clock frozen: a policy
// of each rule kind the module has (SHADOW marks and each rule's options included) limits as
// RL.LIMIT does, a WARMUP rule among them (docs/policies.md's example); and nothing passes
// silently when the package meets a reply it does not know: the request fails as configured,
// logged and counted, and the policy is read again.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseReply, policyWindows, rateLimitHeaders, rateLimitMiddleware } from '../index.js';
import { PATIENT, calls, clocks, helloApp, limitFields, memoryLogger, serverForFile } from './helpers.js';

const { client } = await serverForFile();

/** The middleware on `policy`, the caller being X-Client-Id, served; its logger's lines kept. */
async function policyApp(policy, options = {}) {
  const clock = await clocks(client);
  const logger = memoryLogger();
  const limit = rateLimitMiddleware({
    ...PATIENT,
    client,
    limit: { policy },
    key: (req) => req.get('X-Client-Id'),
    prefix: `rl:policy:${policy}:`,
    now: () => clock.ms,
    logger,
    ...options,
  });
  const { http, as } = await helloApp(limit);
  return { http, as, clock, logger, limiter: limit.limiter };
}

test("a policy with a WARMUP rule limits as RL.LIMIT does (docs/policies.md's example)", async () => {
  await client.sendCommand(['RL.POLICY.SET', 'search', 'WARMUP', '10', '1s', '10s', 'COLDFACTOR', '3', 'FIXEDWINDOW', '5000', '1h']);
  const { http, as, logger, limiter } = await policyApp('search');
  try {
    // The warm-up rule binds: limit 1, spaced by the cold interval (398 ms, then 298 ms to wait).
    assert.deepEqual(limitFields(await as('user:9')), [
      200, '"search/0";q=1', '"search/0";r=0;t=1', '1', '0', '1', undefined,
    ]);
    assert.deepEqual(limitFields(await as('user:9')), [
      429, '"search/0";q=1', '"search/0";r=0;t=1', '1', '0', '1', '1',
    ]);
    assert.deepEqual(logger.lines, []);
    assert.equal(limiter.stats.failures, 0);
  } finally {
    await http.close();
  }
});

/**
 * The real client, with the replies of `command` replaced by `rewrite(reply)` while
 * `rewrite` is set; `asked(command)` counts the calls that went through it.
 */
function rewriting(command) {
  const counts = new Map();
  const wrapper = {
    rewrite: undefined,
    asked: (name) => counts.get(name) ?? 0,
    async sendCommand(args) {
      counts.set(args[0], wrapper.asked(args[0]) + 1);
      const reply = await client.sendCommand(args);
      return args[0] === command && wrapper.rewrite ? wrapper.rewrite(reply) : reply;
    },
  };
  return wrapper;
}

for (const failMode of ['open', 'closed']) {
  test(`a rule the package does not know is a failure (fail ${failMode}), logged, counted and looked up again`, async () => {
    await client.sendCommand(['RL.POLICY.SET', 'future', 'GCRA', '2', '2', '1s', 'FIXEDWINDOW', '5', '1m']);
    const wrapped = rewriting('RL.POLICY.GET');
    // A module newer than the package: a rule kind it has never seen.
    wrapped.rewrite = (flat) => [...flat, 'NEWRULE', '7'];
    const { http, as, logger, limiter } = await policyApp('future', { client: wrapped, failMode });
    try {
      const failed = await as(`f-${failMode}`);
      assert.deepEqual(limitFields(failed), [failMode === 'open' ? 200 : 503, undefined, undefined, undefined, undefined, undefined, undefined]);
      assert.equal(logger.lines.length, 1);
      assert.match(logger.lines[0], new RegExp(
        `^ratelimit: RL\\.LIMIT for "rl:policy:future:f-${failMode}" failed \\(unexpected rule in RL\\.POLICY\\.GET's reply: NEWRULE\\); fail ${failMode}`));
      assert.deepEqual([limiter.stats.failures, limiter.stats.failOpen, limiter.stats.failClosed],
        failMode === 'open' ? [1, 1, 0] : [1, 0, 1]);
      // Not kept: the next request reads the policy again, and once it reads, limits.
      wrapped.rewrite = undefined;
      assert.deepEqual(limitFields(await as(`f-${failMode}`)), [
        200, '"future/0";q=2;w=1', '"future/0";r=0;t=1', '2', '0', '1', undefined,
      ]);
      assert.equal(wrapped.asked('RL.POLICY.GET'), 2);
      assert.equal(logger.lines.length, 1);
    } finally {
      await http.close();
    }
  });
}

// Each rule kind of the module (src/args/rules.rs, docs/policies.md), as RL.POLICY.SET takes it,
// with its `w` in whole seconds (policyWindows): a window, or the time a bucket takes to earn its
// whole burst back (burst × period / rate); none when not whole seconds.
const RULE_KINDS = [
  ['GCRA', ['GCRA', '3', '1', '1s'], 3],
  ['TOKENBUCKET', ['TOKENBUCKET', '3', '1', '2s'], 6],
  ['TOKENBUCKET with INTERVAL', ['tokenbucket', '3', '3', '2s', 'interval'], 2],
  ['LEAKYBUCKET', ['LEAKYBUCKET', '3', '1', '1s'], 3],
  ['FIXEDWINDOW', ['FIXEDWINDOW', '3', '10s'], 10],
  ['SLIDINGWINDOW', ['SLIDINGWINDOW', '3', '10s'], 10],
  ['SLIDINGLOG', ['SLIDINGLOG', '3', '1500ms'], undefined],
  ['WARMUP', ['WARMUP', '2', '1s', '10s'], undefined],
  ['WARMUP with COLDFACTOR', ['RL.WARMUP', '10', '1s', '10s', 'coldfactor', '5'], undefined],
];

test("policyWindows reads every rule kind, SHADOW marks and options, as RL.POLICY.GET gives them", async () => {
  for (const [kind, rule, w] of RULE_KINDS) {
    const policy = `windows-${kind.replace(/ /g, '-')}`;
    await client.sendCommand(['RL.POLICY.SET', policy, ...rule, 'SHADOW', ...rule, 'FIXEDWINDOW', '5', '1m', 'SHADOW', 'GCRA', '1', '1', '2s']);
    assert.deepEqual(policyWindows(await client.sendCommand(['RL.POLICY.GET', policy])), [w, w, 60, 2], kind);
  }
  for (const [flat, message] of [
    [['GCRA', '1', '1', '1s', 'NEWRULE', '7'], /unexpected rule in RL\.POLICY\.GET's reply: NEWRULE$/],
    [['GCRA', '1', '1'], /unexpected rule in RL\.POLICY\.GET's reply: GCRA with 2 arguments$/],
    [['FIXEDWINDOW', '1', '1s', 'SHADOW'], /unexpected rule in RL\.POLICY\.GET's reply: nothing after SHADOW$/],
    [['CONCURRENCY', '1', '1s'], /unexpected rule in RL\.POLICY\.GET's reply: CONCURRENCY$/],
  ]) {
    assert.throws(() => policyWindows(flat), message);
  }
});

for (const [kind, rule] of RULE_KINDS) {
  test(`a policy of a ${kind} rule, alone and as a shadow rule, limits as RL.LIMIT does`, async () => {
    const name = kind.replace(/ /g, '-');
    await client.sendCommand(['RL.POLICY.SET', `alone-${name}`, ...rule]);
    await client.sendCommand(['RL.POLICY.SET', `shadowed-${name}`, 'SHADOW', ...rule, 'FIXEDWINDOW', '4', '1m']);
    for (const policy of [`alone-${name}`, `shadowed-${name}`]) {
      const { http, as, clock, logger, limiter } = await policyApp(policy);
      const windows = policyWindows(await client.sendCommand(['RL.POLICY.GET', policy]));
      try {
        // The same requests through the middleware and straight to RL.LIMIT on a twin key,
        // 300 ms apart: the same decision and the same fields, request by request.
        for (let i = 0; i < 6; i++) {
          await clock.at(300 * i);
          const res = await as('twin');
          const d = parseReply(await client.sendCommand(['RL.LIMIT', `rl:direct:${policy}`, policy]), 'rule');
          // RateLimit's t while admitted: when the policy admits one unit more than remains.
          const more = d.allowed && d.remaining < d.limit
            ? parseReply(await client.sendCommand(['RL.LIMIT', `rl:direct:${policy}`, policy, 'COST', `${d.remaining + 1}`, 'DRYRUN']), 'rule')
            : undefined;
          const expected = rateLimitHeaders({
            ...d, name: windows.length > 1 ? `${policy}/${d.rule}` : policy, windowSeconds: windows[d.rule],
            moreAfterMs: more === undefined || more.retryAfterMs < 0 ? undefined : more.retryAfterMs,
          });
          assert.deepEqual(limitFields(res), [d.allowed ? 200 : 429, ...expected.map(([, v]) => v), ...(d.allowed ? [undefined] : [])],
            `${policy}, request ${i}`);
        }
        assert.deepEqual(logger.lines, []);
        assert.equal(limiter.stats.failures, 0);
        assert.ok(limiter.stats.denied > 0, `${policy}: some request was refused`);
      } finally {
        await http.close();
      }
    }
  });
}

test('a reply of RL.LIMIT with a field the package does not know is a failure, logged and counted', async () => {
  await client.sendCommand(['RL.POLICY.SET', 'odd', 'GCRA', '5', '5', '1s']);
  const wrapped = rewriting('RL.LIMIT');
  wrapped.rewrite = (reply) => (reply instanceof Map ? new Map([...reply, ['novel', 1]])
    : Array.isArray(reply) ? [...reply, 1] : { ...reply, novel: 1 });
  const { http, as, logger, limiter } = await policyApp('odd', { client: wrapped, failMode: 'closed' });
  try {
    assert.equal((await as('o')).status, 503);
    assert.match(logger.lines[0], /failed \(unexpected reply from the module: the fields allowed, limit, remaining, retry_after_ms, reset_after_ms, rule, novel where allowed, limit, remaining, retry_after_ms, reset_after_ms, rule were expected\); fail closed/);
    assert.equal(limiter.stats.failClosed, 1);
    wrapped.rewrite = undefined;
    assert.equal((await as('o')).status, 200);
  } finally {
    await http.close();
  }
});

test('a policy set after the first request is read then; one that grows is read again', async () => {
  await client.sendCommand(['RL.POLICY.DEL', 'late']);
  const { http, as, logger } = await policyApp('late');
  try {
    assert.equal((await as('l')).status, 200);
    // The module's refusal or the package's reading of RL.POLICY.GET, whichever comes first.
    assert.match(logger.lines[0], /failed \(.*no policy named ['"]late['"].*\); fail open/);
    await client.sendCommand(['RL.POLICY.SET', 'late', 'GCRA', '10', '10', '1s']);
    const gets = await calls(client, 'RL.POLICY.GET');
    assert.deepEqual(limitFields(await as('l')), [200, '"late";q=10;w=1', '"late";r=9;t=1', '10', '9', '1', undefined]);
    assert.equal(await calls(client, 'RL.POLICY.GET'), gets + 1);
    // A second rule, binding at once: its index is past the rules read, so its w is not known
    // yet, and the policy is read again for the next request. (T0 is 20 s into its minute.)
    await client.sendCommand(['RL.POLICY.SET', 'late', 'GCRA', '10', '10', '1s', 'FIXEDWINDOW', '1', '1m']);
    assert.deepEqual(limitFields(await as('l')), [200, '"late/1";q=1', '"late/1";r=0;t=40', '1', '0', '40', undefined]);
    assert.deepEqual(limitFields(await as('l')), [429, '"late/1";q=1;w=60', '"late/1";r=0;t=40', '1', '0', '40', '40']);
    assert.equal(await calls(client, 'RL.POLICY.GET'), gets + 2);
    assert.equal(logger.lines.length, 1);
  } finally {
    await http.close();
  }
});
