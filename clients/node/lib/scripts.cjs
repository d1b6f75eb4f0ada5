// The script backend (issue 28; docs/managed.md): where the server has no ratelimit module (managed
// Redis and Valkey refuse MODULE LOAD), each admission command, RL.REFUND and the concurrency
// leases (RL.CONCURRENCY.ACQUIRE without ADAPTIVE, RL.CONCURRENCY.RELEASE) run as a Lua
// script of clients/lua/, called by its SHA: `EVALSHA <sha> 1 <key> <the command's words
// after its key>`, loaded with SCRIPT LOAD after NOSCRIPT and tried once more. The reply is the
// module's RESP2 array, read as the module's. A policy whose rules the application gives
// (`{ policy, rules }`) runs as policy.lua (RL.LIMIT) and policyrefund.lua (RL.REFUND) over one
// key per rule (ruleKeys): `EVALSHA <sha> N <rule keys> <rules> <options>`.
//
// One source: the scripts live in clients/lua/ only. The packed package carries a copy made
// by `npm pack` (prepack copies it into lua/, postpack removes it), so an installed package
// reads its own lua/, and the repository's tree reads ../lua/.

// @ts-check
'use strict';

const { createHash } = require('node:crypto');
const { existsSync, readFileSync } = require('node:fs');
const path = require('node:path');

const { clientOf } = require('./client.cjs');

const here = __dirname;

/**
 * The scripts' directory: in the repository (this package is clients/node), clients/lua/,
 * even if an interrupted `npm pack` left a copy behind; installed, the package's own lua/.
 */
function scriptsDir() {
  const pkg = path.resolve(here, '..');
  const repo = path.join(pkg, '../lua');
  const dirs = path.basename(pkg) === 'node' ? [repo, path.join(pkg, 'lua')] : [path.join(pkg, 'lua')];
  for (const dir of dirs) {
    if (existsSync(path.join(dir, 'lib/common.lua'))) return dir;
  }
  throw new Error('ratelimit: the script backend\'s scripts are missing (neither lua/ in the package nor clients/lua/)');
}

/** The script that stands for each module command. */
const SCRIPT_OF = {
  'RL.GCRA': 'gcra',
  'RL.TOKENBUCKET': 'tokenbucket',
  'RL.LEAKYBUCKET': 'leakybucket',
  'RL.FIXEDWINDOW': 'fixedwindow',
  'RL.SLIDINGWINDOW': 'slidingwindow',
  'RL.SLIDINGLOG': 'slidinglog',
  'RL.WARMUP': 'warmup',
  'RL.REFUND': 'refund',
  'RL.CONCURRENCY.ACQUIRE': 'concurrency_acquire', // not ADAPTIVE (the script says it needs the module)
  'RL.CONCURRENCY.RELEASE': 'concurrency_release',
  'RL.COUNTER': 'counter', // a plain integer string (RedisModuleStore's and RateLimiterRedis's fixed window)
};

/**
 * The scripts of a policy whose rules the application gives (`{ policy, rules }`): RL.LIMIT and
 * RL.REFUND of its key, over one key per rule (ruleKeys). No single module command stands for
 * them, so they are apart from SCRIPT_OF.
 */
const POLICY_SCRIPT_OF = {
  'RL.LIMIT': 'policy',
  'RL.REFUND': 'policyrefund',
};

/**
 * The keys of a policy's `n` rules on the scripts, for the (prefixed) key `key`: `key:0`, ...
 * when `key` has a hash tag of its own (as Redis Cluster reads one: the first '{', then the first
 * '}' after it, with at least one byte between), else `{key}:0`, `{key}:1`, ..., with '%' and
 * '}' in the key written `%25` and `%7D` so that the braces hold all of it (a '}' inside would
 * end the tag early, and two keys could then name the same rule keys): the keys share a hash
 * tag, so a slot. The Python package's rule_keys names them the same.
 */
function ruleKeys(key, n) {
  const k = String(key);
  const open = k.indexOf('{');
  const close = open < 0 ? -1 : k.indexOf('}', open + 1);
  const base = open >= 0 && close > open + 1 ? k : `{${k.replaceAll('%', '%25').replaceAll('}', '%7D')}}`;
  return Array.from({ length: n }, (_, i) => `${base}:${i}`);
}

/**
 * A script as it is sent: the lib/ parts its `-- needs:` line names, in that order, then the
 * entry file (clients/lua/README.md, "One source").
 */
function scriptSource(name, dir = scriptsDir()) {
  const entry = readFileSync(path.join(dir, `${name}.lua`), 'utf8');
  const needs = /^-- needs: (.+)$/m.exec(entry);
  if (!needs) throw new Error(`ratelimit: ${name}.lua names no parts (-- needs:)`);
  const parts = needs[1].trim().split(/\s+/).map((p) => readFileSync(path.join(dir, 'lib', `${p}.lua`), 'utf8'));
  return parts.join('') + entry;
}

let loaded; // name -> { source, sha }, read once per process
function scripts() {
  if (loaded === undefined) {
    const dir = scriptsDir();
    loaded = {};
    for (const name of new Set([...Object.values(SCRIPT_OF), ...Object.values(POLICY_SCRIPT_OF)])) {
      const source = scriptSource(name, dir);
      loaded[name] = { source, sha: createHash('sha1').update(source).digest('hex') };
    }
  }
  return loaded;
}

/**
 * What needs the module, asked of the script backend: refused before anything is sent; or the
 * script backend on a server without Lua (noLuaError), where the module is all that can run.
 */
class ModuleRequiredError extends Error {
  /**
   * @param {string} what what needs the module, the message's subject
   * @param {string} [message] the whole message instead (noLuaError's)
   */
  constructor(what, message = undefined) {
    super(message ?? `${what} needs the ratelimit module: the server has none (or backend is "script"), and the script backend ` +
      'runs the seven algorithms, COST, ATMOST, DRYRUN, BLOCK, SHADOW, RL.REFUND, policies whose rules the application gives ' +
      '(limit.rules) and concurrency leases (not adaptive) only');
    this.name = 'ModuleRequiredError';
  }
}

/**
 * What of a limit (as RateLimit keeps it: validations.cjs, checkLimit) needs the module, the
 * subject of ModuleRequiredError's message, or undefined (`shadow` does not: the scripts take
 * SHADOW as the module does).
 * @param {{ policy?: string, rules?: unknown, adaptive?: string }} limit
 * @returns {string | undefined}
 */
function moduleOnly({ policy, rules, adaptive }) {
  if (policy !== undefined && rules === undefined) {
    return `a policy without rules in the configuration (RL.LIMIT ${policy}: the server's policy; limit.rules runs on the scripts)`;
  }
  if (adaptive !== undefined) return 'an adaptive concurrency limit';
  return undefined; // a plain concurrency limit runs on the scripts too
}

// What a server without a Lua scripting engine answers SCRIPT LOAD and EVAL: Valkey 9.1 and
// later, whose Lua is a module an operator can unload ("ERR Could not find scripting engine
// 'lua'"; EVALSHA answers NOSCRIPT there, the scripts gone with the engine).
const NO_LUA = /could not find scripting engine/i;

/** The server's `error` says it has no Lua scripting engine (not the package's error saying so). */
function luaMissing(error) {
  return !(error instanceof ModuleRequiredError) && NO_LUA.test(String(error?.message ?? ''));
}

/**
 * The one error of the script backend on a server without Lua (docs/managed.md, "A server
 * without Lua"): `said`, the server's answer; `backend`, the option that took the scripts
 * ("script", or "auto" on a server without the module). The Python package's words.
 */
function noLuaError(said, backend) {
  const asked = backend === 'script' ? 'backend "script"' : 'backend "auto", and the server has no ratelimit module';
  return new ModuleRequiredError('the script backend',
    `the script backend needs a Lua scripting engine, and the server has none (${asked}; the server said: ${said}): ` +
      'load the ratelimit module on the server (backend "auto" or "module" then uses it), or use a server with Lua ' +
      '(docs/managed.md, "A server without Lua")');
}

/** `error`, from the script backend under the option `backend`: noLuaError's on a server without Lua. */
function scriptingError(error, backend) {
  return luaMissing(error) ? noLuaError(String(error.message), backend) : error;
}

// Per client, what a server without Lua answered when "auto" took the module for want of Lua
// without asking whether it has it (NOPERM on COMMAND INFO): a module command it then does not
// know is the script backend's error (moduleError).
const withoutLua = new WeakMap();

/**
 * `error`, from a module command with `client`: noLuaError's where auto took the module for want
 * of Lua (withoutLua) and the server does not know it either.
 */
function moduleError(client, error) {
  const said = withoutLua.get(client);
  // Unknown, or a MULTI discarded for it (EXECABORT).
  const unknown = /unknown command|^EXECABORT/i.test(String(error?.message ?? ''));
  return said !== undefined && unknown ? noLuaError(said, 'auto') : error;
}

/** The backend option, checked. */
function checkBackend(backend) {
  if (backend !== 'auto' && backend !== 'module' && backend !== 'script') {
    throw new TypeError(`invalid backend: expected "auto", "module" or "script"; got ${String(backend)}`);
  }
  return backend;
}

// Test-only: a limiter with this symbol set to a function returning µs sends the scripts' test
// clock (`NOW <µs>`). Not exported by the package's index: the public API never sends it.
const TEST_NOW = Symbol('ratelimit script test clock');

// The backend `auto` found, per client: { promise }, asked once per client.
const found = new WeakMap();

/**
 * The backend to use with `client` for `backend` ('auto', 'module' or 'script'): 'module' or
 * 'script'. `auto` asks `COMMAND INFO RL.GCRA` once per client (a nil entry: no module) and logs
 * the choice once; a user whose ACL refuses COMMAND INFO (NOPERM) gets the scripts, with a
 * warning once. `module` checks the module is there (once per client), with a clear error
 * when it is not (and, when it cannot be asked, takes the option's word).
 *
 * `load`: the limiter's SCRIPT LOADs (its setup's, once per client: loadScripts), which `auto`
 * makes before it takes the scripts: a server without Lua (Valkey 9.1 with its lua module
 * unloaded) refuses them, and then `auto` rejects with noLuaError's error, taking nothing (asked
 * again at the next call: a server given the module or Lua later is used); or, where it could not
 * ask (NOPERM), takes the module, all that can run there. Any other refusal (NOPERM on SCRIPT
 * LOAD: scripts an administrator loaded may still run) takes the scripts, as before.
 * @param {(() => Promise<unknown>) | undefined} [load]
 * @returns {Promise<'module' | 'script'>}
 */
function resolveBackend(client, send, backend, logger, load = undefined) {
  if (backend === 'script') return Promise.resolve('script');
  let entry = found.get(client);
  if (entry === undefined) {
    entry = { promise: undefined, logged: false, unasked: false };
    const asked = entry;
    /** @type {Promise<'module' | 'script'>} */
    const promise = Promise.resolve()
      .then(() => send(['COMMAND', 'INFO', 'RL.GCRA']))
      .then(
        (reply) => {
          const info = Array.isArray(reply) ? reply[0] : reply;
          return info === null || info === undefined ? 'script' : 'module';
        },
        (error) => {
          // A user whose ACL refuses COMMAND INFO: the server cannot be asked; auto takes the
          // scripts (which such a user is likely given), and says so once.
          if (!noPermission(error)) throw error;
          asked.unasked = true;
          return 'script';
        },
      );
    entry.promise = promise;
    found.set(client, entry);
    promise.catch(() => {
      if (found.get(client) === entry) found.delete(client); // asked again next time
    });
  }
  return entry.promise.then(async (chosen) => {
    if (backend === 'module' && chosen === 'script') {
      if (entry.unasked) return 'module'; // not known: as the option says
      throw new ModuleRequiredError('backend "module"');
    }
    if (backend !== 'auto') return chosen;
    if (chosen === 'script' && load !== undefined) {
      const refused = await load().then(() => undefined, (error) => error);
      if (luaMissing(refused)) {
        const said = String(refused.message);
        if (!entry.unasked) throw noLuaError(said, 'auto');
        withoutLua.set(client, said);
        chosen = 'module';
      }
    }
    if (!entry.logged) {
      entry.logged = true;
      if (entry.unasked && chosen === 'module') {
        logger?.warn?.(
          'ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO), and it has no Lua ' +
            "scripting engine for the script backend: using the module; set backend='module' to say so",
        );
      } else if (entry.unasked) {
        logger?.warn?.(
          'ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO): ' +
            "using the script backend; set backend='module' or 'script' to say which",
        );
      } else {
        logger?.info?.(
          chosen === 'module'
            ? 'ratelimit: the server has the ratelimit module; using the module'
            : 'ratelimit: the server has no ratelimit module; using the script backend',
        );
      }
    }
    return chosen;
  });
}

/** A "no permission" error (NOPERM: the user's ACL refuses the command). */
function noPermission(error) {
  const message = String(error?.message ?? '');
  return message.startsWith('NOPERM') || /\bno permissions?\b/i.test(message);
}

/**
 * Runs a module command (`[command, key, ...words]`) as its script with `send`: EVALSHA by the
 * SHA computed here, and after NOSCRIPT, SCRIPT LOAD and EVALSHA once more. `now`: the test
 * clock's µs, or undefined.
 * @param {number | undefined} [now]
 */
async function evalScript(send, args, now = undefined) {
  const [command, key, ...words] = args;
  const name = SCRIPT_OF[String(command).toUpperCase()];
  if (name === undefined) throw new ModuleRequiredError(command);
  return evalNamed(send, name, [key], words, now);
}

/**
 * Runs RL.LIMIT (`['RL.LIMIT', key, policy, ...options]`) or RL.REFUND (`['RL.REFUND', key,
 * units, ...]`) of a policy whose rules the application gives, as policy.lua or policyrefund.lua
 * over the rule keys of `key`: `EVALSHA <sha> N <rule keys> <rules' words> <options>` (the
 * rules' words for RL.LIMIT only; the policy's name is not sent). `rules`: `{ count, words }`,
 * the words as RL.POLICY.SET takes them. NOSCRIPT as evalScript.
 */
async function evalPolicy(send, args, rules, now = undefined) {
  const [command, key, ...words] = args;
  const name = POLICY_SCRIPT_OF[String(command).toUpperCase()];
  if (name === undefined) throw new ModuleRequiredError(command);
  for (;;) {
    // Every rule key of an earlier, longer policy found before, the number of rules then first.
    const n = Math.max(rules.count, ruleKeysHeld.get(rules) ?? 0);
    const count = n > rules.count ? [String(rules.count)] : [];
    const rest = name === 'policy' ? [...count, ...rules.words, ...words.slice(1)] : words;
    try {
      return await evalNamed(send, name, ruleKeys(key, n), rest, now);
    } catch (error) {
      const wanted = rulekeysWanted(error, n);
      if (wanted === undefined) throw error;
      ruleKeysHeld.set(rules, Math.max(wanted, ruleKeysHeld.get(rules) ?? 0));
    }
  }
}

// Per policy's rules (a RateLimit's `rules`): the most rule keys a key was found to hold, named
// by every later call of those rules.
const ruleKeysHeld = new WeakMap();

/**
 * The policy scripts' `RULEKEYS n` (the first rule key holds a policy of `n` rule keys, more than
 * the `named` keys the call named: a policy that lost rules, whose states a rule may still take):
 * `n`, to call again with; undefined for any other error.
 */
function rulekeysWanted(error, named) {
  const found = /\bRULEKEYS (\d+) /.exec(String(error?.message ?? ''));
  return found && Number(found[1]) > named ? Number(found[1]) : undefined;
}

// EVALSHA of the script `name` over `keys` with `words` (and the test clock), loaded after
// NOSCRIPT and tried once more. `send(args, key)` is given the first key with each command: a
// cluster client routes by it, so the SCRIPT LOAD goes to the node that answered NOSCRIPT (a
// standalone or Sentinel client's `send` ignores it).
async function evalNamed(send, name, keys, words, now) {
  const { source, sha } = scripts()[name];
  const call = ['EVALSHA', sha, String(keys.length), ...keys, ...words];
  if (now !== undefined) call.push('NOW', String(now));
  try {
    return await evalLoading(send, call, source, keys[0]);
  } catch (error) {
    throw await refusedInScript(error, name, keys[0], send);
  }
}

// The EVALSHA `call` of the script `source`, on `key`'s node: after NOSCRIPT, SCRIPT LOAD of it
// there and the call once more.
async function evalLoading(send, call, source, key) {
  try {
    return await send(call, key);
  } catch (error) {
    if (!String(error?.message ?? '').startsWith('NOSCRIPT')) throw error;
    await send(['SCRIPT', 'LOAD', source], key);
    return send(call, key);
  }
}

/**
 * Runs module commands in one MULTI as their scripts with `client` (client.cjs's adapter's
 * `multi`): EVALSHA each. The entries that NOSCRIPT did nothing; from the first of them on, the
 * entries run again in a second MULTI after SCRIPT LOAD of every script it needs
 * (RateLimiterRedis's MULTIs run one script twice, which fails or succeeds both times, or a
 * write then a DRYRUN, which reads again harmlessly). Resolves to the replies; rejects with the
 * first error among them.
 * @param {number | undefined} [now]
 */
async function evalMulti(client, commands, now = undefined) {
  const calls = commands.map((args) => {
    const [command, key, ...words] = args;
    const name = SCRIPT_OF[String(command).toUpperCase()];
    if (name === undefined) throw new ModuleRequiredError(command);
    const call = ['EVALSHA', scripts()[name].sha, '1', key, ...words];
    if (now !== undefined) call.push('NOW', String(now));
    return { name, call };
  });
  // On a cluster, the MULTI goes to the node of the first command's key (the commands of one
  // MULTI share their key).
  const adapter = clientOf(client);
  const key = calls[0].call[3];
  const exec = async (list, load) => {
    const replies = await adapter.multi([...load.map((name) => ['SCRIPT', 'LOAD', scripts()[name].source]), ...list.map((c) => c.call)], key);
    // A SCRIPT LOAD refused (a server without Lua): the reason its calls failed, not their NOSCRIPT.
    const refused = replies.slice(0, load.length).find((r) => r instanceof Error);
    if (refused !== undefined) throw refused;
    return replies.slice(load.length);
  };
  const replies = await exec(calls, []);
  const first = replies.findIndex((r) => r instanceof Error && String(r.message).startsWith('NOSCRIPT'));
  if (first >= 0) {
    const rest = calls.slice(first);
    replies.splice(first, rest.length, ...(await exec(rest, [...new Set(rest.map((c) => c.name))])));
  }
  const failed = replies.findIndex((r) => r instanceof Error);
  if (failed >= 0) {
    const send = (args) => adapter.send(args, key);
    throw await refusedInScript(replies[failed], calls[failed].name, calls[failed].call[3], send);
  }
  return replies;
}

// A command a script runs, refused by the user's ACL: Redis 8.2 and Valkey name the command;
// Redis 7.0 says only "The user executing the script can't run this command or subcommand",
// with the line it was run on when the script did not catch the error (" script: <sha>, on
// @user_script:<line>.").
const ACL_NAMED = /ACL failure in script: User \S+ has no permissions to run the '([^']+)' command/;
const ACL_UNNAMED = /The user executing the script can't run this command or subcommand/;
const ACL_LINE = /script: ([0-9a-f]{40}), on @user_script:(\d+)\./;
// A command on a source line; a command whose refusal a script reports (redis.call, and the
// redis.pcall reads whose errors fetched() raises: the others' errors are let go).
const CALLED = /redis\.p?call\('([A-Z]+)'/g;
const REPORTED = /redis\.call\('([A-Z]+)'|fetched\(redis\.pcall\('([A-Z]+)'/g;

// Which of the commands in ARGV the user may not run on KEYS[1]: the question Redis 7.0 leaves
// open, asked of the server (redis.acl_check_cmd, Redis 7.0 and later, Valkey). Not a limiter's
// script, so not in clients/lua/: the package's own, sent only after such a refusal.
const ACL_PROBE = 'local refused = {}\n' +
  'for i = 1, #ARGV do\n' +
  '  if not redis.acl_check_cmd(ARGV[i], KEYS[1]) then refused[#refused + 1] = ARGV[i] end\n' +
  'end\n' +
  'return refused\n';
const ACL_PROBE_SHA = createHash('sha1').update(ACL_PROBE).digest('hex');

/** The commands `pattern` finds in a script's source, each once, in order. */
function commandsOf(source, pattern) {
  return [...new Set(Array.from(source.matchAll(pattern), (m) => m[1] ?? m[2]))];
}

/**
 * Which of `commands` the user may not run on `key`, asked with ACL_PROBE (loaded after
 * NOSCRIPT); none when that cannot be asked (the probe failed too: the error is then left as
 * the server gave it).
 */
async function refusedCommands(commands, key, send) {
  const call = ['EVALSHA', ACL_PROBE_SHA, '1', key, ...commands];
  try {
    const reply = await evalLoading(send, call, ACL_PROBE, key);
    return Array.isArray(reply) ? reply.map(String) : [];
  } catch {
    return [];
  }
}

/** Words as a list: "A", "A and B", "A, B and C". */
function listed(words) {
  return words.length < 2 ? words.join('') : `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

/**
 * `error`, from the script `name` on `key`, as the package reports it: a command the script
 * runs that the user's ACL refuses is named (the server's word on Redis 8.2 and Valkey; on
 * Redis 7.0 the command on the source line the server gives, else the server asked which of the
 * script's commands the user may not run), with the `+command` that lets it and a pointer to
 * docs/managed.md, the server's text kept at the end; any other error (or one whose command
 * cannot be told) is returned as it is.
 */
async function refusedInScript(error, name, key, send) {
  const said = String(error?.message ?? '');
  const named = ACL_NAMED.exec(said);
  if (!named && !ACL_UNNAMED.test(said)) return error;
  let refused;
  if (named) {
    refused = [named[1].toUpperCase()];
  } else {
    const line = ACL_LINE.exec(said);
    const source = line ? Object.values(scripts()).find((s) => s.sha === line[1])?.source : undefined;
    const onLine = source === undefined ? [] : commandsOf(source.split('\n')[Number(line?.[2]) - 1] ?? '', CALLED);
    refused = onLine.length === 1 ? onLine : await refusedCommands(commandsOf(scripts()[name].source, REPORTED), key, send);
    if (refused.length === 0) return error;
  }
  // The Python package's words (its _script_acl.py), with the key.
  const message = `ratelimit: the ACL of the connection's user refuses ${listed(refused)}, which the script backend's ` +
    `${name} script runs on ${JSON.stringify(key)}: give the user ${refused.map((c) => `+${c.toLowerCase()}`).join(' ')} ` +
    `(docs/managed.md, "An application user's ACL", lists every command the scripts run); the server said: ${said}`;
  return new Error(message, { cause: error });
}

module.exports = {
  scriptsDir,
  SCRIPT_OF,
  POLICY_SCRIPT_OF,
  ruleKeys,
  scriptSource,
  scripts,
  ModuleRequiredError,
  moduleOnly,
  scriptingError,
  moduleError,
  checkBackend,
  TEST_NOW,
  resolveBackend,
  noPermission,
  evalScript,
  evalPolicy,
  evalMulti,
};
