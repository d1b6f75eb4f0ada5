// RateLimit-Policy and RateLimit for every algorithm, against a real server with the debug clock:
// the cases of clients/http-fields-cases.json (which the Python package's tests read too, so both
// packages give the same fields), and for each `t` the promise itself, asked of the module.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { RateLimit, rateLimitHeaders } from '../index.js';
import { ALGORITHMS, fieldShape } from '../lib/limits.cjs';
import { ROOT, clocks, memoryLogger, serverForFile } from './helpers.js';

const { cases, t0_ms: T0 } = JSON.parse(readFileSync(path.join(ROOT, 'clients/http-fields-cases.json'), 'utf8'));
const { client } = await serverForFile();

// The package's limit for a case's command and arguments.
function limitOf({ command, args }) {
  if (command === 'RL.LIMIT') return { policy: args[0] };
  const name = Object.keys(ALGORITHMS).find((k) => ALGORITHMS[k].command === command);
  const { params, flag } = ALGORITHMS[name];
  const limit = { algorithm: name };
  params.forEach((p, i) => {
    limit[p] = /^[0-9]+$/.test(args[i]) ? Number(args[i]) : args[i];
  });
  if (flag && args.slice(params.length).includes(flag.toUpperCase())) limit[flag] = true;
  return limit;
}

// Whether `units` are admitted at `ms` after T0 (a DRYRUN: nothing written).
async function admits(c, key, units, ms) {
  await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0 + ms}`]);
  const words = [c.command, key, ...c.args];
  if (c.command !== 'RL.CONCURRENCY.ACQUIRE') words.push('COST', `${units}`);
  const reply = await client.sendCommand([...words, 'DRYRUN']);
  const allowed = reply instanceof Map ? reply.get('allowed') : (reply.allowed ?? reply[0]);
  return allowed === true || allowed === 1;
}

test('the cases are the ones the table of docs/python.md implies: every algorithm, burst below, equal to and above rate', () => {
  const commands = new Set(cases.map((c) => c.command));
  for (const { command } of Object.values(ALGORITHMS)) assert.ok(commands.has(command), command);
  assert.ok(commands.has('RL.LIMIT'));
  for (const command of ['RL.GCRA', 'RL.TOKENBUCKET', 'RL.LEAKYBUCKET']) {
    const relations = cases
      .filter((c) => c.command === command && c.args.length === 3)
      .map((c) => Math.sign(Number(c.args[0]) - Number(c.args[1])));
    assert.deepEqual(relations.sort(), [-1, 0, 1], command);
  }
});

test('w is the time to earn a burst back, and a Structured Field integer', () => {
  assert.deepEqual(fieldShape('gcra', ['5', '10', '1m']), { windowSeconds: 30, more: { spaced: [60_000, 10] } });
  assert.deepEqual(fieldShape('tokenbucket', ['4', '2', '10s', 'INTERVAL']), { windowSeconds: 20, more: { interval: [10_000, 2] } });
  assert.deepEqual(fieldShape('warmup', ['3', '1s', '10s']), { windowSeconds: undefined, more: 'probe' });
  assert.deepEqual(fieldShape('concurrency', ['2', '10s']), { windowSeconds: undefined, more: undefined });
  // 10^12 a burst, one every 10 years: w would have 21 digits, past the 15 a Structured Field
  // integer may have (RFC 9651), so it is left out.
  assert.equal(fieldShape('gcra', ['1000000000000', '1', '3650d']).windowSeconds, undefined);
  assert.equal(fieldShape('gcra', ['999', '1', '3650d']).windowSeconds, 999 * 3650 * 86400);
});

for (const [n, c] of cases.entries()) {
  test(`fields: ${c.name}`, async () => {
    const clock = await clocks(client);
    if (c.setup) await client.sendCommand(c.setup);
    const prefix = `rl:fields:${n}:`;
    const limiter = new RateLimit({ client, limit: limitOf(c), prefix, timeout: 1000, now: () => clock.ms, logger: memoryLogger() });
    for (const step of c.steps) {
      const cost = step.cost ?? 1;
      await clock.at(step.at);
      const d = await limiter.check('k', cost);
      assert.equal(d.failed, undefined, String(d.error));
      const fields = Object.fromEntries(rateLimitHeaders(d));
      assert.deepEqual(
        [d.allowed ? 200 : 429, fields['RateLimit-Policy'], fields.RateLimit, fields['Retry-After']],
        [step.status, step.policy ?? c.policy, step.ratelimit, step.retry_after],
        `at ${step.at} ms, cost ${cost}`,
      );
      // The promise: t seconds from now, r + 1 units pass (the request itself when refused),
      // and not a second sooner.
      const m = /;r=(\d+)(?:;t=(\d+))?$/.exec(fields.RateLimit);
      if (m[2] !== undefined) {
        const units = d.allowed ? Number(m[1]) + 1 : cost;
        const t = Number(m[2]) * 1000;
        assert.equal(await admits(c, prefix + 'k', units, step.at + t - 1000), false, `${units} units at ${step.at} + t - 1 s`);
        assert.equal(await admits(c, prefix + 'k', units, step.at + t), true, `${units} units at ${step.at} + t`);
      }
    }
    await client.sendCommand(['RL.DEBUG.CLOCK', 'SET', `${T0}`]);
  });
}
