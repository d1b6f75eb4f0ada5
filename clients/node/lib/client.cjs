// The client an application gives the package, behind one interface: node-redis 5's three
// clients (createClient, createSentinel, createCluster) and ioredis's two (`new Redis()`, for a
// server or a Sentinel setup, and `new Cluster()`). The rest of the package sends commands as
// words through `clientOf(client)`, whatever the client; the client's own ways (node-redis's
// sendCommand forms, ioredis's Command objects, their MULTIs, events and readiness) are here only.
//
// The interface, an Adapter:
// - `kind`: 'node-redis' or 'ioredis'; `cluster`: a cluster client; `sentinel`: node-redis's
//   Sentinel client (whose commands run on leased connections).
// - `send(args, key)`: a command's words; on a cluster to the primary of `key`'s slot (left
//   out: the key the command declares, clusterKey: none, any node), elsewhere to the one
//   server. Resolves to its reply (RESP2 or RESP3, as the client reads it), rejects with the
//   server's error.
// - `multi(commands, key)`: the commands in one MULTI (on a cluster, to `key`'s node; the first
//   command's key when left out); resolves to the replies, a command's error in its place as an
//   Error; rejects when the MULTI itself fails (EXECABORT).
// - `pipeline(commands, key)`: the commands sent together on one connection, in order, no MULTI;
//   resolves to the replies, rejects with the first command's error.
// - `primaries()`: a `send(args)` for each primary (a cluster's, or the one server).
// - `ready()`: whether the client can take commands now; `onReady(fn)`: `fn` at each time it
//   becomes ready (a reconnection included: a server that restarted has an empty script cache).
//
// ioredis's `keyPrefix` option: ioredis prefixes the keys of the commands it knows (EVALSHA's,
// DEL's) but not a module command's, whose keys it cannot tell. The adapter sends ioredis Command
// objects built without it and prefixes every key it sends itself (a module command's key,
// EVALSHA's declared keys, DEL's: keyPositions), so that the key in Redis is `<keyPrefix><the package's key>` on both
// backends alike, as ioredis's own commands (RateLimiterRedis's `delete`) name it; on a cluster
// the slot is the prefixed key's, as ioredis routes its own commands.

// @ts-check
'use strict';

/**
 * Whether `client` is an ioredis client (Redis or Cluster): it has `pipeline`, a `status`
 * string and an `isCluster` boolean (node-redis's clients have none of these).
 */
function isIoredis(client) {
  return typeof client?.pipeline === 'function' && typeof client?.status === 'string' && typeof client?.isCluster === 'boolean';
}

/**
 * Whether `client` is node-redis's cluster client (createCluster): its sendCommand takes
 * (firstKey, isReadonly, args) and its multi(routing) a key; it alone has getSlotMaster and
 * nodeClient (the Sentinel client has getMasterNode, the standalone client neither).
 */
function isNodeRedisCluster(client) {
  return typeof client?.getMasterNode !== 'function' && typeof client?.getSlotMaster === 'function' &&
    typeof client?.nodeClient === 'function';
}

/** Whether `client` is a cluster client, node-redis's (createCluster) or ioredis's (Cluster). */
function isCluster(client) {
  return isNodeRedisCluster(client) || (isIoredis(client) && client.isCluster === true);
}

// The plain commands of one key the package sends (RateLimiterRedis's SET of a block, INCRBY and
// PTTL of a window that never ends), the key their first argument.
const ONE_KEY = new Set(['SET', 'INCRBY', 'PTTL', 'GET']);

/**
 * The key a command is routed by on a cluster client when none is given: a module command's
 * (`[command, key, ...]`), EVALSHA's (and EVAL's) first declared key; none (any node) for what
 * declares none: COMMAND INFO, RL.POLICY.GET and RL.POLICY.SET (policies are the cluster's: the
 * module spreads a change over the cluster bus; RateLimit sends its SET with the key of the
 * RL.LIMIT that follows). WAIT and SCRIPT LOAD are sent with the key of the command before them.
 * @param {ReadonlyArray<string>} args
 * @returns {string | undefined}
 */
function clusterKey(args) {
  const command = String(args[0]).toUpperCase();
  if (command === 'EVALSHA' || command === 'EVAL') return Number(args[2]) > 0 ? args[3] : undefined;
  if (command.startsWith('RL.') && !command.startsWith('RL.POLICY.')) return args[1];
  if (ONE_KEY.has(command)) return args[1];
  return undefined;
}

/**
 * The positions of the keys in a command the package sends (a module command's key, EVALSHA's
 * declared keys, DEL's: express-rate-limit's resetKey), for ioredis's keyPrefix.
 * @param {ReadonlyArray<string>} args
 * @returns {number[]}
 */
function keyPositions(args) {
  const command = String(args[0]).toUpperCase();
  if (command === 'EVALSHA' || command === 'EVAL') {
    const n = Number(args[2]);
    return Array.from({ length: Number.isSafeInteger(n) && n > 0 ? n : 0 }, (_, i) => 3 + i);
  }
  if (command.startsWith('RL.') && !command.startsWith('RL.POLICY.')) return [1];
  if (ONE_KEY.has(command)) return [1];
  if (command === 'DEL') return args.slice(1).map((_, i) => 1 + i);
  return [];
}

/** @typedef {(args: string[], key?: string) => Promise<any>} Send */

/**
 * @typedef {object} Adapter
 * @property {'node-redis' | 'ioredis'} kind
 * @property {boolean} cluster
 * @property {boolean} sentinel
 * @property {Send} send
 * @property {(commands: string[][], key?: string) => Promise<unknown[]>} multi
 * @property {(commands: string[][], key?: string) => Promise<unknown[]>} pipeline
 * @property {() => Promise<Array<(args: string[]) => Promise<any>>>} primaries
 * @property {() => boolean} ready
 * @property {(fn: () => void) => void} onReady
 * @property {(key: string) => string} redisKey the key in Redis for a key the package sends
 */

// node-redis's MULTI replies: exec() rejects with the replies when any is an error (a
// MultiErrorReply's `replies`), resolves to them otherwise.
async function execReplies(multi, asPipeline = false) {
  try {
    return await (asPipeline ? multi.execAsPipeline() : multi.exec());
  } catch (error) {
    if (!asPipeline && Array.isArray(error?.replies)) return error.replies;
    throw error;
  }
}

/**
 * node-redis 5's clients.
 * @returns {Adapter}
 */
function nodeRedis(client) {
  const sentinel = typeof client.getMasterNode === 'function';
  const cluster = isNodeRedisCluster(client);
  /** @type {Send} */
  let send = (args) => client.sendCommand(args);
  if (sentinel) send = (args) => client.sendCommand(false, args);
  else if (cluster) send = (args, key = clusterKey(args)) => client.sendCommand(key, false, args);
  const batch = (asPipeline) => async (commands, key = clusterKey(commands[0])) => {
    const multi = cluster ? client.multi(key) : client.multi();
    for (const args of commands) {
      if (cluster) multi.addCommand(undefined, false, args);
      else multi.addCommand(args);
    }
    return execReplies(multi, asPipeline);
  };
  // The Sentinel client's multi: addCommand(isReadonly, args); its cluster client's:
  // addCommand(firstKey, isReadonly, args), the MULTI's node chosen by multi(routing).
  const sentinelBatch = (asPipeline) => async (commands) => {
    const multi = client.multi();
    for (const args of commands) multi.addCommand(false, args);
    return execReplies(multi, asPipeline);
  };
  return {
    kind: 'node-redis',
    cluster,
    sentinel,
    send,
    multi: sentinel ? sentinelBatch(false) : batch(false),
    pipeline: sentinel ? sentinelBatch(true) : batch(true),
    async primaries() {
      if (!cluster) return [(args) => send(args)];
      return Promise.all(client.masters.map(async (node) => {
        const c = await client.nodeClient(node);
        return (args) => c.sendCommand(args);
      }));
    },
    ready() {
      if (cluster) return client.isOpen === true && Array.isArray(client.masters) && client.masters.length > 0;
      return client.isReady === true;
    },
    // The standalone and Sentinel clients say 'ready' at each connection (a reconnection
    // included), the cluster client 'connect' once its slots are known.
    onReady(fn) {
      if (typeof client.on === 'function') client.on(cluster ? 'connect' : 'ready', fn);
    },
    redisKey: (key) => key,
  };
}

/**
 * ioredis's Command class, taken from the client itself (a Redis instance's constructor has it
 * as `Redis.Command`; a Cluster's nodes are Redis instances), else from the ioredis package
 * beside this one.
 */
function commandClass(client) {
  const own = client.constructor?.Command;
  if (typeof own === 'function') return own;
  try {
    const node = client.nodes?.('all')?.[0];
    if (typeof node?.constructor?.Command === 'function') return node.constructor.Command;
  } catch {
    // not connected yet: no nodes
  }
  return require('ioredis').Command;
}

/**
 * ioredis's clients: `new Redis()` (a server, or a Sentinel setup: the same client, connected
 * to the primary the sentinels name) and `new Cluster()`. RESP2 only: replies are arrays,
 * integers and strings (read as UTF-8), as the package reads RESP2.
 * @returns {Adapter}
 */
function ioredis(client) {
  const cluster = client.isCluster === true;
  const prefix = typeof client.options?.keyPrefix === 'string' ? client.options.keyPrefix : '';
  const redisKey = (key) => `${prefix}${key}`;
  // A Command for `args`, its keys prefixed (keyPrefix); on a cluster, routed to `key`'s slot
  // (clusterKey's when left out; none: any node).
  let Command; // ioredis's Command class, found at the first command (commandClass)
  const command = (args, key = clusterKey(args)) => {
    Command ??= commandClass(client);
    const words = args.map(String);
    if (prefix !== '') for (const i of keyPositions(words)) words[i] = redisKey(words[i]);
    const c = new Command(words[0], words.slice(1), { replyEncoding: 'utf8' });
    // ioredis routes a Command by the slot of its first key (Command#getSlot, from its `keys`,
    // which it reads from the command's definition when not set: none for a module command).
    if (cluster) c.keys = key === undefined ? [] : [redisKey(key)];
    return c;
  };
  /** @type {Send} */
  const send = (args, key) => client.sendCommand(command(args, key));
  // The pipeline's replies, [[error, reply], ...] as ioredis gives them: errors in place.
  const batch = (transaction) => async (commands, key = clusterKey(commands[0])) => {
    const p = transaction ? client.multi() : client.pipeline();
    for (const args of commands) p.sendCommand(command(args, key));
    const results = await p.exec();
    if (!Array.isArray(results)) throw new Error('the MULTI was discarded (a WATCHed key changed)');
    return results.map(([error, reply]) => (error ? error : reply));
  };
  const multi = batch(true);
  const plain = batch(false);
  return {
    kind: 'ioredis',
    cluster,
    sentinel: false,
    send,
    multi,
    async pipeline(commands, key) {
      const replies = await plain(commands, key);
      const failed = replies.find((r) => r instanceof Error);
      if (failed !== undefined) throw failed;
      return replies;
    },
    async primaries() {
      if (!cluster) return [(args) => send(args)];
      return client.nodes('master').map((node) => (args) => node.sendCommand(command(args, undefined)));
    },
    ready: () => client.status === 'ready',
    // ioredis's Redis says 'ready' at each connection (a reconnection, or the Sentinel setup's new
    // primary, included), its Cluster once it knows its slots.
    onReady(fn) {
      client.on('ready', fn);
    },
    redisKey,
  };
}

// One adapter per client, however many limiters share it.
const adapters = new WeakMap();

/**
 * The adapter of `client` (node-redis's or ioredis's), made once per client. `client` must be
 * one of the five the package takes (validations.cjs checkClient, setup.cjs checkStoreClient).
 * @param {any} client
 * @returns {Adapter}
 */
function clientOf(client) {
  let adapter = adapters.get(client);
  if (adapter === undefined) {
    adapter = isIoredis(client) ? ioredis(client) : nodeRedis(client);
    adapters.set(client, adapter);
  }
  return adapter;
}

module.exports = { clientOf, clusterKey, isCluster, isIoredis };
