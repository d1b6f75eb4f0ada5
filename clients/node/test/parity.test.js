// Parity with the module, so that the next command, option or rule kind cannot be forgotten:
// what the package reaches is stated here, once, as calls of the package, and compared with
// what a real server with the module says of itself (COMMAND LIST, COMMAND DOCS, and the rule
// kinds RL.POLICY.SET names). A command of the module the table neither reaches nor gives a
// reason for, an option of a command the table cannot send, or a rule kind the package cannot
// read fails here; so does a claim the module no longer backs. Each claim is checked by making
// the call on the real server through a client that records what the package sends.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Counter, RateLimit, policyWindows } from '../index.js';
import { ALGORITHMS } from '../lib/limits.cjs';
import { PATIENT, ROOT, memoryLogger, serverForFile } from './helpers.js';

const { client } = await serverForFile();

const check = (l, way) => l.check('k', way.cost ?? 1, way.options);

/**
 * Every command of the module the package reaches: the limit it is reached through, and the
 * call that sends it (`way` carrying an option's cost, options of the call or of the limit).
 */
const REACHED = {
  'RL.GCRA': { limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' }, call: check },
  'RL.TOKENBUCKET': { limit: { algorithm: 'tokenbucket', capacity: 5, refillAmount: 1, refillPeriod: '1s' }, call: check },
  'RL.LEAKYBUCKET': { limit: { algorithm: 'leakybucket', capacity: 5, leakAmount: 1, leakPeriod: '1s' }, call: check },
  'RL.FIXEDWINDOW': { limit: { algorithm: 'fixedwindow', limit: 5, window: '1m' }, call: check },
  'RL.SLIDINGWINDOW': { limit: { algorithm: 'slidingwindow', limit: 5, window: '1m' }, call: check },
  'RL.SLIDINGLOG': { limit: { algorithm: 'slidinglog', limit: 5, window: '1m' }, call: check },
  'RL.WARMUP': { limit: { algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s' }, call: check },
  'RL.CONCURRENCY.ACQUIRE': { limit: { algorithm: 'concurrency', limit: 2, lease: '30s' }, call: check },
  'RL.LIMIT': { limit: { policy: 'parity' }, call: check },
  // Read by a policy's limit for the windows of its rules.
  'RL.POLICY.GET': { limit: { policy: 'parity' }, call: check },
  'RL.CONCURRENCY.RELEASE': {
    limit: { algorithm: 'concurrency', limit: 2, lease: '30s', adaptive: 'aimd' },
    call: async (l, way) => {
      const d = await l.check('k');
      assert.equal(d.allowed, true);
      await l.release('k', d, way.release);
      assert.equal(l.stats.releaseFailures, 0);
    },
  },
  // A Counter on the limit's recording client (its own class: no limit to check).
  'RL.COUNTER': {
    limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
    call: async (l, way) => {
      const counter = new Counter({ client: l.client, prefix: 'rl:parity:counter:', logger: null, timeout: 1000 });
      const { count } = await counter.count('k', '1m', way.counter);
      assert.ok(Number.isSafeInteger(count));
    },
  },
  'RL.REFUND': {
    limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
    call: async (l, way) => {
      await l.check('k', 2);
      assert.equal(await l.refund('k', 1, way.options), 1);
    },
  },
};

/** The commands of the module the package does not reach, and why. */
const NOT_REACHED = {
  'CL.THROTTLE': "redis-cell's interface, for its users' own clients: its algorithm is RL.GCRA's, reached with every option",
  'RL.POLICY.SET': 'administration: a policy is set where it is deployed, not on the request path',
  'RL.POLICY.DEL': 'administration, as RL.POLICY.SET',
  'RL.POLICY.LIST': 'administration, as RL.POLICY.SET',
  'RL.INSPECT': "operations: a key's state, for a person or a tool, not a decision",
  'RL.TOP': 'operations: the keys denied most, for a person or a tool',
  'RL.DEBUG.CLOCK': 'tests only (debug-clock yes); the package\'s tests use it directly',
  'RL.DEBUG.PANIC': 'tests only (debug-clock yes)',
  'RL.DEBUG.CLUSTERMSG': 'tests only (debug-clock yes)',
  'RL.DEBUG.POLICYVERSION': 'tests only (debug-clock yes)',
  'RL.POLICY.FORCE': 'administration, as RL.POLICY.SET: an operator\'s repair on Redis Cluster',
  'RL.REPLAY': 'internal: replication and the AOF, refused from clients',
  'RL.LOADSTATE': 'internal: replication and the AOF, refused from clients',
  'RL.POLICY.SYNC': 'internal: replication and the AOF, refused from clients',
};

/**
 * Every option of those commands, as the package sends it: a cost, an option of the call or of a
 * release (`way.release`), or an option of the limit. `value` is what the command must carry
 * after the token.
 */
const OPTIONS = {
  COST: { way: { cost: 2 }, value: '2' },
  ATMOST: { way: { options: { atMost: 2 } }, value: '2' },
  DRYRUN: { way: { options: { dryRun: true } } },
  SHADOW: { way: { options: { shadow: true } } },
  ID: { way: { options: { id: 'lease-7' } }, value: 'lease-7' },
  BLOCK: { way: { limit: { block: '1m' } }, value: '60000' },
  INTERVAL: { way: { limit: { interval: true } } },
  COLDFACTOR: { way: { limit: { coldFactor: 5 } }, value: '5' },
  // An adaptive concurrency limit (any case), its bounds; what a release reports to it.
  ADAPTIVE: { way: { limit: { adaptive: 'aimd' } }, value: 'AIMD' },
  AIMD: { way: { limit: { adaptive: 'AIMD' } } },
  VEGAS: { way: { limit: { adaptive: 'vegas' } } },
  GRADIENT2: { way: { limit: { adaptive: 'Gradient2' } } },
  MIN: { way: { limit: { adaptive: 'vegas', min: 2 } }, value: '2' },
  MAX: { way: { limit: { adaptive: 'aimd', max: 50 } }, value: '50' },
  RTT: { way: { release: { rtt: 2.35 } }, value: '2350us' },
  DROPPED: { way: { release: { dropped: true } } },
  // RL.COUNTER's, through Counter#count's options.
  BY: { way: { counter: { by: -2 } }, value: '-2' },
  XX: { way: { counter: { xx: true } } },
};

/** RESP3's maps as node-redis gives them: objects, or Maps with a type mapping. */
const fields = (m) => (m instanceof Map ? Object.fromEntries(m) : m);

/**
 * The module's commands, upper case, each with whether it takes a key, its positional arguments
 * after the key, and its option tokens.
 */
async function moduleCommands() {
  const names = (await client.sendCommand(['COMMAND', 'LIST', 'FILTERBY', 'MODULE', 'ratelimit'])).map(String);
  const docs = fields(await client.sendCommand(['COMMAND', 'DOCS', ...names]));
  const commands = new Map();
  for (const [name, doc] of Object.entries(docs)) {
    const args = (fields(doc).arguments ?? []).map(fields);
    const positional = args.filter((a) => a.token === undefined && a.type !== 'oneof' && a.type !== 'key').map((a) => String(a.name));
    const options = new Map(); // token -> whether it takes a value
    const walk = (list) => {
      for (const a of list.map(fields)) {
        if (a.token !== undefined) options.set(String(a.token).toUpperCase(), a.type !== 'pure-token');
        if (a.arguments) walk(a.arguments);
      }
    };
    walk(args);
    commands.set(name.toUpperCase(), { keyed: args.some((a) => a.type === 'key'), positional, options });
  }
  return commands;
}

/** A client that sends through the real one and records every command. */
function recording() {
  const sent = [];
  return {
    sent,
    sendCommand(args) {
      sent.push(args.map(String));
      return client.sendCommand(args);
    },
  };
}

let serial = 0;
/** A RateLimit on `limit` through a recording client, its keys its own. */
function limiter(limit) {
  const recorder = recording();
  serial += 1;
  const l = new RateLimit({ client: recorder, limit, prefix: `rl:parity:${serial}:`, logger: memoryLogger(), timeout: 1000 });
  return { l, sent: recorder.sent };
}

const camel = (snake) => snake.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

await client.sendCommand(['RL.POLICY.SET', 'parity', 'GCRA', '5', '10', '1m', 'FIXEDWINDOW', '100', '1h']);

test('every command of the module is reached by the package, or listed with the reason it is not', async () => {
  const commands = await moduleCommands();
  assert.ok(commands.size > 0, 'COMMAND LIST FILTERBY MODULE ratelimit lists the module');
  const stated = [...Object.keys(REACHED), ...Object.keys(NOT_REACHED)].sort();
  assert.deepEqual([...commands.keys()].sort(), stated, 'the module\'s commands, and the table\'s');
  for (const name of Object.keys(REACHED)) assert.ok(!Object.hasOwn(NOT_REACHED, name), `${name} both reached and not`);
});

test("every option of a command the package reaches is sent by the package, and the module takes it", async () => {
  const commands = await moduleCommands();
  const used = new Set();
  for (const [name, entry] of Object.entries(REACHED)) {
    const { keyed, positional, options } = commands.get(name);
    for (const token of [undefined, ...options.keys()]) {
      const option = token === undefined ? { way: {} } : OPTIONS[token];
      assert.ok(option, `${name}'s option ${token} has no way in the package (OPTIONS)`);
      used.add(token);
      const { l, sent } = limiter({ ...entry.limit, ...option.way.limit });
      const d = await entry.call(l, option.way);
      assert.notEqual(d?.failed, true, `${name} ${token ?? ''}: ${d?.error?.message}`);
      const words = sent.find((args) => args[0].toUpperCase() === name);
      assert.ok(words, `${name} ${token ?? ''}: the package sent ${JSON.stringify(sent)}`);
      // The positional arguments, as many as the module's, after the key where it takes one.
      const first = keyed ? 2 : 1;
      const after = words[first + positional.length];
      assert.ok(after === undefined || options.has(after.toUpperCase()), `${name}: ${JSON.stringify(words)} for ${positional}`);
      if (token !== undefined) {
        const at = words.findIndex((w, i) => i >= first + positional.length && w.toUpperCase() === token);
        assert.ok(at > 0, `${name}: ${token} not sent in ${JSON.stringify(words)}`);
        if (options.get(token)) assert.equal(words[at + 1], option.value, `${name} ${token}'s value`);
      }
    }
  }
  // No claim the module does not back.
  for (const token of Object.keys(OPTIONS)) assert.ok(used.has(token), `OPTIONS.${token} is an option of no command reached`);
});

test("each algorithm's parameters are the module's, in its order", async () => {
  const commands = await moduleCommands();
  for (const [algorithm, { command, params }] of Object.entries(ALGORITHMS)) {
    assert.ok(commands.has(command), `${algorithm}: no ${command} in the module`);
    assert.equal(REACHED[command]?.limit.algorithm, algorithm, `${command} reached through { algorithm: '${algorithm}' }`);
    assert.deepEqual(params, commands.get(command).positional.map(camel), command);
  }
});

test('every rule kind of the module is one the package reads, alone, as a shadow rule, and with its options', async () => {
  const commands = await moduleCommands();
  // The module names its rule kinds when refused one it does not have.
  const refusal = await client.sendCommand(['RL.POLICY.SET', 'parity-probe', 'NO-SUCH-RULE', '1']).then(
    (r) => assert.fail(`accepted: ${r}`),
    (e) => e.message,
  );
  const m = /expected a rule, one of (.+?) with its arguments/.exec(refusal);
  assert.ok(m, refusal);
  const kinds = m[1].split(/, | or /);
  assert.ok(kinds.length > 1 && kinds.includes('GCRA'), refusal);
  const byCommand = new Map(Object.values(ALGORITHMS).filter((a) => !a.concurrent).map((a) => [a.command, a]));
  assert.deepEqual([...byCommand.keys()].sort(), kinds.map((k) => `RL.${k}`).sort(), 'the rule kinds: the package\'s, and the module\'s');
  for (const kind of kinds) {
    const command = `RL.${kind}`;
    // The rule with every option of its command that the package gives the limit: INTERVAL and
    // COLDFACTOR are the rule's words (args); BLOCK is RL.LIMIT's, kept out of them.
    const limitOptions = [...commands.get(command).options.keys()].map((t) => OPTIONS[t]?.way.limit).filter(Boolean);
    const rule = new RateLimit({ ...PATIENT, client, limit: Object.assign({}, REACHED[command].limit, ...limitOptions) });
    for (const [rules, words] of [[1, [kind, ...rule.args]], [2, ['GCRA', '5', '10', '1m', 'SHADOW', kind, ...rule.args]]]) {
      await client.sendCommand(['RL.POLICY.SET', `parity-${kind}`, ...words]);
      assert.equal(policyWindows(await client.sendCommand(['RL.POLICY.GET', `parity-${kind}`])).length, rules, words.join(' '));
      const { l } = limiter({ policy: `parity-${kind}` });
      const d = await l.check('k');
      assert.notEqual(d.failed, true, `${words.join(' ')}: ${d.error?.message}`);
      assert.equal(d.allowed, true, words.join(' '));
    }
  }
});

test("docs/node.md's table of what the Node package reaches names the module's commands as this test does", async () => {
  const page = readFileSync(path.join(ROOT, 'docs/node.md'), 'utf8');
  const section = /## What the package reaches\n([\s\S]*?)\n## /.exec(page);
  assert.ok(section, 'docs/node.md has "## What the package reaches"');
  // A row names one or more commands; its second column says how, or starts "not reached".
  const rows = [...section[1].matchAll(/^\| (`[A-Z.]+`(?:, `[A-Z.]+`)*) \| ([^|]+) \|$/gm)]
    .flatMap(([, names, how]) => [...names.matchAll(/`([A-Z.]+)`/g)].map(([, name]) => [name, !how.startsWith('not reached')]));
  assert.deepEqual(rows.filter(([, reached]) => reached).map(([n]) => n).sort(), Object.keys(REACHED).sort());
  assert.deepEqual(rows.filter(([, reached]) => !reached).map(([n]) => n).sort(), Object.keys(NOT_REACHED).sort());
});
