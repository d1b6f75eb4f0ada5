// RateLimit: one limit (one algorithm's command, or an RL.LIMIT policy) checked for a key, with
// the denial memory, the timeout and fail open / fail closed; and a concurrency lease given back.

// @ts-check
'use strict';

// The public API's types are index.d.cts's: the options and results below are read and built
// as declared there, so that tsc (tsconfig.json) fails when the two part.
/** @typedef {import('../index.cjs').RateLimitOptions} RateLimitOptions */
/** @typedef {import('../index.cjs').CheckOptions} CheckOptions */
/** @typedef {import('../index.cjs').RefundOptions} RefundOptions */
/** @typedef {import('../index.cjs').ReleaseOptions} ReleaseOptions */
/** @typedef {import('../index.cjs').Decision} Decision */
/** @typedef {import('../index.cjs').Failure} Failure */

const { DenialMemory } = require('./denial-memory.cjs');
const { withResetAt } = require('./fields.cjs');
const { LocalBudget, lapsesAtWindowEnd } = require('./local-budget.cjs');
const { MAX_DURATION_MS, count, moreAfterMs, policyShapes } = require('./limits.cjs');
const { parseReply } = require('./reply.cjs');
const { checkCall, checkFlag, checkOptions } = require('./validations.cjs');
const { clusterKey } = require('./client.cjs');
const { Setup, loadScripts, loadScriptsFor, sender } = require('./setup.cjs');
const {
  ModuleRequiredError,
  POLICY_SCRIPT_OF,
  SCRIPT_OF,
  TEST_NOW,
  evalPolicy,
  evalScript,
  moduleError,
  moduleOnly,
  resolveBackend,
  scriptingError,
} = require('./scripts.cjs');

class TimeoutError extends Error {
  constructor(ms) {
    super(`no answer from Redis within ${ms} ms`);
    this.name = 'TimeoutError';
  }
}

/**
 * An admission that fewer replicas than `durable` acknowledged within `durableTimeoutMs`
 * (WAIT): a failover could lose it, so it is not taken as admitted; the request fails open or
 * closed like any Redis failure.
 */
class NotDurableError extends Error {
  /**
   * @param {number} acked
   * @param {number} wanted
   * @param {number} ms
   */
  constructor(acked, wanted, ms) {
    super(`admitted, but acknowledged by ${acked} of the ${wanted} replicas asked for within ${ms} ms (WAIT): not taken as admitted`);
    this.name = 'NotDurableError';
  }
}

// Options that make a check plain (no atMost, shadow, dryRun nor id), as #check reads them: an
// object of those left out, undefined or false (the middleware passes `{ shadow: false }`).
function plainOptions(o) {
  return (
    typeof o === 'object' &&
    o !== null &&
    o.atMost === undefined &&
    (o.shadow === undefined || o.shadow === false) &&
    (o.dryRun === undefined || o.dryRun === false) &&
    o.id === undefined
  );
}

/** The pause before a call's round trips are sent again after a TRYAGAIN, in ms. */
const TRY_AGAIN_PAUSE_MS = 20;

/**
 * Whether a call whose round trips failed with `error`, `leftMs` of its timeout left, sends them
 * again: the pause before it in ms, or undefined (the error is the call's failure). A TRYAGAIN is
 * the server saying it did not run the command and may later: a cluster node that has not caught
 * up with the cluster's policies since it started or joined, asked for a policy it does not hold
 * yet or for a policy change (docs/cluster.md), or a multi-key command (a policy's rule keys on
 * the scripts) while its slot moves. node-redis follows MOVED and ASK itself, not TRYAGAIN. Sent
 * again only when time is left after the pause for the answer to come.
 * @param {unknown} error
 * @param {number} leftMs
 * @returns {number | undefined}
 */
function retryPauseMs(error, leftMs) {
  const message = error instanceof Error ? error.message : '';
  return message.startsWith('TRYAGAIN') && leftMs > TRY_AGAIN_PAUSE_MS ? TRY_AGAIN_PAUSE_MS : undefined;
}

/**
 * A call's round trips (`attempt()`) within its timeout, `ms`: rejects once `ms` have passed
 * (with TimeoutError, or with the server's last TRYAGAIN when it answered one), and sends them
 * again after a TRYAGAIN while time is left (retryPauseMs). The
 * one place the request path applies the timeout, so every module command it sends goes through
 * here (a check, a local budget's refill, the probe of `t`, a refund, a release). A TRYAGAIN comes
 * from a command the server did not run, and what an attempt did before it is kept by its caller
 * (a policy's RL.POLICY.SET is sent once), so a second attempt repeats no write. The deadline is
 * this process's real time (setTimeout's), not the limiter's `now`, which tests make fake.
 * `attempt` is given `{ expired }`, true once the call has timed out: an attempt still waiting
 * then (for the backend's question, a policy's RL.POLICY.SET) sends nothing more, so that a
 * request already failed open or closed is not counted by Redis later (ioredis keeps a command
 * in flight at a disconnection and sends it again once reconnected, answering it then).
 * @template T
 * @param {(call: { expired: boolean }) => Promise<T>} attempt
 * @param {number} ms
 * @returns {Promise<T>}
 */
async function withTimeout(attempt, ms) {
  const deadline = performance.now() + ms;
  const call = { expired: false };
  let timer;
  let pause;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      call.expired = true;
      reject(new TimeoutError(ms));
    }, ms);
  });
  // The last TRYAGAIN the server answered: should the timeout end the call after it (the
  // round trips sent again not answered in time, or the pause running late), the call fails
  // with what the server said, not with the silence after it.
  let said;
  const spent = timeout.catch((error) => {
    throw said ?? error;
  });
  try {
    for (;;) {
      try {
        return await Promise.race([attempt(call), spent]);
      } catch (error) {
        const wait = retryPauseMs(error, deadline - performance.now());
        if (wait === undefined) throw error;
        said = error;
        // The timer of the timeout is due after the pause (time is left after it): it still
        // ends the call should the pause run late.
        await Promise.race([new Promise((resolve) => { pause = setTimeout(resolve, wait); }), spent]);
      }
    }
  } finally {
    clearTimeout(timer);
    clearTimeout(pause);
  }
}

/**
 * A limiter's counters, all 0 (`backend` known already when it is forced to the scripts).
 * @param {string} backend
 * @returns {import('../index.cjs').RateLimitStats}
 */
function newStats(backend) {
  return {
    calls: 0, // round trips to Redis for a decision
    admitted: 0,
    denied: 0, // refusals, those from the memory included
    deniedLocally: 0, // refusals from the denial memory: round trips saved
    failures: 0, // Redis errors and timeouts
    failOpen: 0, // requests passed because Redis failed
    failClosed: 0, // requests refused because Redis failed
    shadowDenied: 0, // requests with `shadow` the limit would have refused (passed, not admitted)
    notDurable: 0, // of the failures, admissions fewer replicas than `durable` acknowledged in time
    releaseFailures: 0, // concurrency leases not given back (they end by themselves)
    // With localBudget (all 0 without):
    localAdmitted: 0, // admitted from the local budget, without a round trip
    refills: 0, // ATMOST round trips that refill a budget (counted in calls too)
    refunded: 0, // unspent units given back (RL.REFUND, after hold or at flush / close)
    lapsed: 0, // unspent units let go without a refund: their fixed window ended
    refundFailures: 0, // RL.REFUNDs that failed (the limit gets those units back by itself)
    held: 0, // gauge: units held unspent now, over all keys (the under-admission of this process)
    setupFailures: 0, // setups (setup.cjs) that failed or overran setupTimeout, each logged
    // 'module' or 'script' once decided (backend "auto": by the setup, or the first call; undefined before).
    backend: backend === 'script' ? 'script' : undefined,
  };
}

/**
 * One limit: `{ algorithm: 'gcra', burst, rate, period }` (or tokenbucket, leakybucket,
 * fixedwindow, slidingwindow, slidinglog, warmup, concurrency with their own parameters) or
 * `{ policy: 'name' }` for RL.LIMIT (with `rules`, the policy's rules from the application's
 * configuration: run as policy.lua on the scripts, set with RL.POLICY.SET once on the module),
 * either with `block` (a penalty duration: BLOCK; not for concurrency). A concurrency limit
 * may be `adaptive` ('aimd', 'vegas' or 'gradient2', any case; ADAPTIVE), within `min` and `max`
 * (MIN, MAX): its limit then follows what `release` reports, `limit` being where a new key starts. `check(key, cost)` resolves to a decision; it
 * never rejects on a Redis failure (the decision then says `failed` and whether the request
 * passes).
 */
class RateLimit {
  /** @param {RateLimitOptions} options */
  constructor(options = /** @type {RateLimitOptions} */ ({})) {
    const {
      client, prefix, timeout, failMode, denialMemory, logger, now, backend, setupTimeout, durable,
      durableTimeoutMs, limit, localBudget,
    } = checkOptions(options);
    // The kinds of client are told apart at run time (client.cjs, through setup.cjs's sender).
    /** @type {any} */
    this.client = client;
    const how = sender(client);
    this.adapter = how.adapter;
    this.sentinel = how.sentinel;
    this.cluster = how.cluster;
    this.send = how.send;
    this.backendOption = backend;
    // The backend in use once known ('module' or 'script'); the promise of it while asked.
    // (backend "module": once the module is found there, per client).
    /** @type {'module' | 'script' | undefined} */
    this.backend = backend === 'script' ? 'script' : undefined;
    /** @type {Promise<'module' | 'script'> | undefined} */
    this.backendPending = undefined;
    this[TEST_NOW] = undefined;
    this.durable = durable;
    this.durableTimeoutMs = durableTimeoutMs;
    this.prefix = prefix;
    this.timeout = timeout;
    this.failMode = failMode;
    this.logger = logger;
    this.now = now;
    this.memory = new DenialMemory(denialMemory);
    this.stats = newStats(backend);
    // The limit, checked (validations.cjs, CheckedLimit says each field).
    this.name = limit.name;
    this.command = limit.command;
    this.sixth = limit.sixth;
    this.args = limit.args;
    this.block = limit.block;
    this.concurrent = limit.concurrent;
    this.adaptive = limit.adaptive;
    this.algorithm = limit.algorithm;
    this.periodMs = limit.periodMs;
    this.shape = limit.shape;
    this.policy = limit.policy;
    this.rules = limit.rules;
    this.shapes = undefined; // a policy's: the promise of its rules' field shapes (#policyShapes)
    this.policySet = undefined; // backend "module" with rules: the promise of their RL.POLICY.SET
    // A local budget: up to `k` units taken at once (ATMOST), spent within `hold / 2` of their
    // refill or given back then (local-budget.cjs says why half).
    this.budget = localBudget === undefined ? undefined : this.#newBudget(localBudget);
    // The setup (setup.cjs), last: everything it reads is set.
    this.setup = new Setup(client, {
      work: () => this.#setUp(), timeoutMs: setupTimeout, failed: (error) => this.#setupFailed(error),
    });
  }

  /**
   * The local budget of `k` units and `holdMs` (validations.cjs, checkLocalBudget): its refills
   * are this limit's ATMOST calls, within the timeout, and what it gives back its refunds.
   * @param {{ k: number, holdMs: number }} localBudget
   * @returns {LocalBudget}
   */
  #newBudget({ k, holdMs }) {
    return new LocalBudget({
      limiter: this,
      k,
      holdMs,
      ask: async (key, atMost) => {
        await this.setup.pending;
        return withTimeout((call) => this.#ask(key, 1, { atMost }, call), this.timeout);
      },
      refund: (key, n) => this.refund(key, n),
      windowed: lapsesAtWindowEnd(this.algorithm),
    });
  }

  // A setup that failed: logged and counted, never thrown; the requests then ask what they need
  // themselves, within their timeout.
  #setupFailed(error) {
    this.stats.setupFailures += 1;
    // A server where no backend can run (no Lua, no module): the application's to fix, and
    // each request rejects with it; said in its own words.
    if (error instanceof ModuleRequiredError) {
      this.logger?.warn?.(`ratelimit: ${error.message}`);
      return;
    }
    this.logger?.warn?.(
      `ratelimit: the setup of ${this.command} (backend, scripts) failed (${error?.message ?? error}); ` +
        'it runs again when the client is ready again, and until then each request asks what it needs within its timeout',
    );
  }

  // The setup's work: the backend (COMMAND INFO for "auto", once per client); on the scripts,
  // SCRIPT LOAD of this limit's and its refund's (a concurrency limit's: its release's), so that
  // its first call is one EVALSHA; on the module, a policy's rules (RL.POLICY.SET; on a cluster
  // it goes with the first RL.LIMIT's key instead, see #setPolicy).
  async #setUp() {
    const backend = await this.resolveBackend();
    if (backend === 'script') {
      if (moduleOnly(this) !== undefined) return; // refused at the check: nothing to load
      await loadScriptsFor(this.backendOption, () => this.#loadOnce());
    } else if (this.rules !== undefined && !this.cluster) {
      await this.#setPolicy(undefined);
    }
  }

  // SCRIPT LOAD of this limit's script and its refund's (a concurrency limit's: its release's),
  // once per client (loadScripts; a server without Lua refuses them: the setup makes that the
  // script backend's error, loadScriptsFor), the server's refusal as it is.
  #loadOnce() {
    const names = this.policy !== undefined
      ? [POLICY_SCRIPT_OF['RL.LIMIT'], POLICY_SCRIPT_OF['RL.REFUND']]
      : [SCRIPT_OF[this.command], SCRIPT_OF[this.concurrent ? 'RL.CONCURRENCY.RELEASE' : 'RL.REFUND']];
    return loadScripts(this.client, this.send, names);
  }

  /** The local budget's size (k) and hold in ms, or undefined without localBudget. */
  get localBudget() {
    return this.budget === undefined ? undefined : { k: this.budget.k, holdMs: this.budget.holdMs };
  }

  /**
   * Gives back every unit the local budgets hold now (RL.REFUND per key; units whose fixed window
   * has ended lapse); resolves to the units given back. The budgets go on working.
   */
  flush() {
    return this.budget === undefined ? Promise.resolve(0) : this.budget.flush();
  }

  /**
   * At shutdown: no more local budgets (every later check is a round trip), the refills in
   * flight end, then every unit held is given back; resolves to the units given back. Does not
   * close the client (the application's).
   */
  close() {
    return this.budget === undefined ? Promise.resolve(0) : this.budget.close();
  }

  /**
   * The key in Redis for an application key.
   * @param {string} key
   */
  redisKey(key) {
    return `${this.prefix}${key}`;
  }

  // One RL.POLICY.GET for all the requests that need it. A failure (Redis's, or a reply the
  // package cannot read: no such policy, a rule it does not know) is not kept: the request
  // fails as configured, and the next one reads the policy again. On a cluster, sent by `key`,
  // the key of the RL.LIMIT it goes with, so to the node that answers that RL.LIMIT: a node that
  // has not caught up with the cluster's policies (one that has just joined) answers both with
  // TRYAGAIN, and the RL.LIMIT's is the one the call goes by (tried again: withTimeout). The
  // rejection of a reading not awaited is handled (the catch above).
  #policyShapes(key) {
    if (this.shapes === undefined && this.rules !== undefined) this.shapes = Promise.resolve(this.rules.shapes);
    if (this.shapes === undefined) {
      const pending = this.send(['RL.POLICY.GET', /** @type {string} */ (this.policy)], key).then((flat) => {
        if (!Array.isArray(flat)) throw new Error(`no policy named ${JSON.stringify(this.policy)} (RL.POLICY.GET)`);
        return policyShapes(flat);
      });
      this.shapes = pending;
      pending.catch(() => {
        if (this.shapes === pending) this.shapes = undefined;
      });
      return pending;
    }
    return this.shapes;
  }

  /** The backend, 'module' or 'script': decided at the first call (backend "auto"), then kept. */
  resolveBackend() {
    if (this.backend !== undefined) return Promise.resolve(this.backend);
    // "auto" takes the scripts once they are loaded (a server without Lua refuses them); a limit
    // that needs the module loads none (refused at the check).
    const load = moduleOnly(this) === undefined ? () => this.#loadOnce() : undefined;
    this.backendPending ??= resolveBackend(this.client, this.send, this.backendOption, this.logger, load).then(
      (chosen) => {
        this.backend = chosen;
        this.stats.backend = chosen;
        return chosen;
      },
      (error) => {
        this.backendPending = undefined;
        throw error;
      },
    );
    return this.backendPending;
  }

  // A module command (`[command, key, ...words]`) on the backend: as it is, or as its script.
  /**
   * @param {string[]} args
   * @param {(args: string[], key?: string) => Promise<any>} [send]
   * @param {{ expired: boolean }} [call]
   */
  async #run(args, send = this.send, call = undefined) {
    const backend = this.backend ?? (await this.resolveBackend());
    if (call?.expired) throw new TimeoutError(this.timeout); // failed already: nothing sent now
    if (backend === 'module') {
      return send(args).catch((error) => {
        throw moduleError(this.client, error);
      });
    }
    const clock = this[TEST_NOW];
    const now = typeof clock === 'function' ? clock() : undefined;
    try {
      if (this.policy !== undefined) {
        // RL.LIMIT (the probe's too) and RL.REFUND of a policy: over its rules' keys.
        if (this.rules === undefined) throw new ModuleRequiredError(/** @type {string} */ (moduleOnly(this)));
        return await evalPolicy(send, args, this.rules, now);
      }
      return await evalScript(send, args, now);
    } catch (error) {
      throw scriptingError(error, this.backendOption); // a server without Lua: the script backend's error
    }
  }

  // Backend "module" with the rules in the configuration: RL.POLICY.SET of them, once per
  // RateLimit, before its first RL.LIMIT (the application's rules replace the server's policy of
  // that name). A failure is not kept: the request fails as configured, the next one sets again.
  // On a cluster, sent once, to the node of the key whose RL.LIMIT follows (the module sends
  // it on to every other node over the cluster bus).
  #setPolicy(key) {
    const rules = this.rules;
    if (this.policySet === undefined && rules !== undefined) {
      const policy = /** @type {string} */ (this.policy); // a policy's rules: it has a name
      const pending = Promise.resolve().then(() => this.send(['RL.POLICY.SET', policy, ...rules.words], key));
      this.policySet = pending;
      pending.catch(() => {
        if (this.policySet === pending) this.policySet = undefined;
      });
    }
    return this.policySet;
  }

  /**
   * @param {string} key
   * @param {number} cost
   * @param {CheckOptions} options
   * @param {{ expired: boolean }} [call]
   */
  async #ask(key, cost, { atMost, shadow, dryRun, id }, call = undefined) {
    if ((this.backend ?? (await this.resolveBackend())) === 'script') {
      const what = moduleOnly(this);
      if (what !== undefined) throw new ModuleRequiredError(what);
    } else if (this.rules !== undefined) {
      await this.#setPolicy(this.redisKey(key));
    }
    if (call?.expired) throw new TimeoutError(this.timeout); // failed already: nothing sent now
    const args = [this.command, this.redisKey(key), ...this.args, ...this.block];
    /** @type {Array<'granted' | 'shadow_denied'>} */
    const extras = [];
    if (atMost !== undefined) {
      args.push('ATMOST', String(atMost));
      extras.push('granted');
    } else if (cost !== 1 && !this.concurrent) {
      args.push('COST', String(cost));
    }
    if (id !== undefined) args.push('ID', id);
    if (dryRun) args.push('DRYRUN');
    if (shadow) {
      args.push('SHADOW');
      extras.push('shadow_denied');
    }
    if (this.policy === undefined) {
      const [raw, acked] = await this.#sendWaiting(args, dryRun);
      const reply = this.#durable(parseReply(raw, this.sixth, extras), acked);
      const shape = /** @type {NonNullable<typeof this.shape>} */ (this.shape); // set for all but a policy
      const decision = { ...reply, name: this.name, windowSeconds: shape.windowSeconds };
      if (this.concurrent) decision.concurrent = true;
      if (this.adaptive !== undefined) decision.adaptive = this.adaptive;
      return [decision, shape.more];
    }
    // RL.LIMIT, then RL.POLICY.GET when the rules are not known yet, in the same round trip:
    // the RL.LIMIT's failure is the call's (a TRYAGAIN is tried again: withTimeout), the
    // reading's only once the RL.LIMIT has decided.
    const limited = this.#sendWaiting(args, dryRun);
    const read = this.#policyShapes(args[1]);
    const [raw, acked] = await limited;
    const shapes = await read;
    const reply = this.#durable(parseReply(raw, 'rule', extras), acked);
    const rule = /** @type {number} */ (reply.rule); // RL.LIMIT's reply always has it
    // A rule past those read: the policy has grown on the server since; read it again next time.
    if (rule >= shapes.length && this.shapes !== undefined) this.shapes = undefined;
    const name = shapes.length > 1 || rule > 0 ? `${this.name}/${rule}` : this.name;
    // A policy's `remaining` grows when every rule admits one unit more: asked of the module.
    return [{ ...reply, name, windowSeconds: shapes[rule]?.windowSeconds }, 'probe'];
  }

  // The command, and with `durable` (not for a DRYRUN) `WAIT durable durableTimeoutMs` sent in
  // the same round trip on the same connection (WAIT vouches for the writes of its own
  // connection): [reply, replicas that acknowledged]. node-redis's standalone client and
  // ioredis's (a server or a Sentinel setup: one connection each) write what is sent in one tick
  // in order on their connection. node-redis's Sentinel client sends each command on a
  // connection of its pool: the command and its WAIT go as one pipeline (its multi's
  // execAsPipeline, run on one of its connections without the per-call client `use` builds),
  // each command #run sends with a WAIT of its own, and the last WAIT's count is the answer. On a
  // cluster, WAIT goes after the reply, to the node the command was last sent to (by its key: a
  // policy's scripts run on the node of its rule keys).
  async #sendWaiting(args, dryRun) {
    if (this.durable === 0 || dryRun) return [await this.#run(args), undefined];
    // The backend known first, so that the command leaves before WAIT, in the same tick.
    if (this.backend === undefined) await this.resolveBackend();
    const wait = ['WAIT', String(this.durable), String(this.durableTimeoutMs)];
    if (this.cluster) {
      let routed;
      const send = (a, key = clusterKey(a)) => {
        routed = key;
        return this.send(a, key);
      };
      const reply = await this.#run(args, send);
      return [reply, Number(await this.send(wait, routed))];
    }
    if (this.sentinel) {
      // A command sent again (after NOSCRIPT, or RULEKEYS) has its own WAIT in its own pipeline;
      // a SCRIPT LOAD (the server's, whatever the connection) writes no key and needs none.
      let acked;
      const paired = async (/** @type {string[]} */ a) => {
        if (String(a[0]).toUpperCase() === 'SCRIPT') return this.send(a);
        const [reply, count] = await this.adapter.pipeline([a, wait]);
        acked = count;
        return reply;
      };
      const reply = await this.#run(args, paired);
      return [reply, Number(acked)];
    }
    // A command sent again (after NOSCRIPT, or RULEKEYS for a policy that lost rules) writes
    // after that WAIT, which cannot vouch for it: a WAIT of its own follows the reply then.
    let sent = 0;
    const counted = (/** @type {string[]} */ a) => {
      sent += 1;
      return this.send(a);
    };
    const [reply, acked] = await Promise.all([this.#run(args, counted), this.send(wait)]);
    return [reply, Number(sent > 1 ? await this.send(wait) : acked)];
  }

  // An admission fewer replicas than `durable` acknowledged throws (the request then fails as
  // configured); a refusal, a shadow denial or a DRYRUN stands.
  #durable(reply, acked) {
    if (acked !== undefined && reply.allowed && !reply.shadowDenied && acked < this.durable) {
      throw new NotDurableError(acked, this.durable, this.durableTimeoutMs);
    }
    return reply;
  }

  // When an admitted decision's `remaining` grows (RateLimit's `t`), in whole ms: from the reply
  // where it says (limits.cjs moreAfterMs), else asked with a DRYRUN of remaining + 1 units, whose
  // retry_after_ms is exactly that. The request is decided already: a probe that fails or takes
  // longer than the timeout leaves `t` out, nothing else.
  async #moreAfter(key, decision, more) {
    if (more !== 'probe') return moreAfterMs(more, decision);
    if (decision.remaining >= decision.limit) return undefined;
    const args = [this.command, this.redisKey(key), ...this.args, 'COST', String(decision.remaining + 1), 'DRYRUN'];
    try {
      const probe = parseReply(await withTimeout((call) => this.#run(args, this.send, call), this.timeout), this.sixth);
      return probe.retryAfterMs >= 0 ? probe.retryAfterMs : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The decision for one request of `key` costing `cost` units: `{ allowed, name, limit,
   * remaining, retryAfterMs, resetAfterMs, windowSeconds, moreAfterMs, local }` (`moreAfterMs`,
   * when admitted: the ms until `remaining` grows, RateLimit's `t`; absent when it never does or
   * is not known; for a sliding window or log, a warm-up or a policy, found with a second,
   * DRYRUN call), or when Redis failed
   * `{ failed: true, allowed, error }` (allowed per failMode). Options, per call:
   * `atMost`: instead of `cost`, as many units as the key allows now, up to `atMost` (ATMOST;
   * the decision's `granted` says how many; refused when none); `shadow`: the limit is checked
   * and counted but never refuses (SHADOW; the decision's `shadowDenied` says whether it would
   * have); `dryRun`: the decision the call would get, nothing written (DRYRUN; counted in
   * `stats.calls` only); `id`: a concurrency lease's own token (ID; the same token renews its
   * lease). None is answered from the denial memory nor remembered.
   *
   * Not an async function, for the local budget's sake: a plain request its budget covers gets
   * a promise already resolved, without the async function's own promise and the ticks it takes
   * to adopt another; anything else (an invalid argument too: a rejection, never a throw) goes
   * through #check.
   * @param {string} key
   * @param {number} [cost]
   * @param {CheckOptions} [options]
   * @returns {Promise<Decision | Failure>}
   */
  check(key, cost = 1, options = undefined) {
    const budget = this.budget;
    if (budget !== undefined && !budget.closed && Number.isSafeInteger(cost) && cost >= 1 && cost <= budget.k) {
      try {
        if (options === undefined || plainOptions(options)) return budget.take(String(key), cost);
      } catch (error) {
        return Promise.reject(error);
      }
    }
    return this.#check(key, cost, options);
  }

  /**
   * @param {string} key
   * @param {number} cost
   * @param {CheckOptions} [options]
   * @returns {Promise<Decision | Failure>}
   */
  async #check(key, cost, options = {}) {
    const { atMost, shadow, dryRun, id } = checkCall(cost, options, this.concurrent);
    const plain = atMost === undefined && !shadow && !dryRun;
    // From the local budget: a plain request of 1 to k units (a larger one, COST as without).
    // check() serves these itself; kept here for options it did not read as plain.
    if (this.budget !== undefined && plain && !this.budget.closed && cost >= 1 && cost <= this.budget.k) {
      return this.budget.take(String(key), cost);
    }
    const memoryKey = String(key);
    const now = this.now();
    const refusal = plain ? this.memory.refusal(memoryKey, cost, now) : undefined;
    if (refusal !== undefined) {
      this.stats.denied += 1;
      this.stats.deniedLocally += 1;
      return refusal;
    }
    // A setup in flight is waited for first, outside the timeout (setupTimeout bounds it).
    if (this.setup.pending !== undefined) await this.setup.pending;
    this.stats.calls += 1;
    let decision;
    let more;
    try {
      [decision, more] = await withTimeout((call) => this.#ask(key, cost, { atMost, shadow, dryRun, id }, call), this.timeout);
    } catch (error) {
      // What needs the module, on the script backend (or backend "module" without it): the
      // application's configuration, not a Redis failure: rejected, never passed.
      if (error instanceof ModuleRequiredError) {
        this.stats.calls -= 1; // no decision was asked
        throw error;
      }
      return this.#failure(key, error);
    }
    // The reset instant on the wall clock, fixed as the reply arrives (fields.cjs, RESET_AT):
    // X-RateLimit-Reset's epoch form, which the denial memory's answers repeat.
    const resetAtMs = Date.now() + decision.resetAfterMs;
    withResetAt(decision, resetAtMs);
    // A preview is a call only, as the module counts it: nothing admitted, refused or watched.
    if (dryRun) return withResetAt({ ...decision, local: false }, resetAtMs);
    // RateLimit's `t` while admitted (a refusal's is its retry time).
    if (decision.allowed) {
      const ms = await this.#moreAfter(key, decision, more);
      if (ms !== undefined) decision.moreAfterMs = ms;
    }
    if (decision.shadowDenied) {
      this.stats.shadowDenied += 1;
    } else if (decision.allowed) {
      this.stats.admitted += 1;
    } else {
      this.stats.denied += 1;
      // Remembered from `now`, read before the request left: the server decided at some
      // instant between then and the answer, so its retry time is never earlier than
      // now + retry_after_ms (counting from the answer's arrival would refuse for as long as
      // the answer took, past the time the server admits). Not remembered: concurrency (a
      // lease can be released before its retry time) and policies (RL.POLICY.SET can change
      // a policy's rules on the server at any time, unseen by this process, and a denial
      // remembered under the old rules would refuse what the new ones admit).
      // Nor a denial of `atMost` (no cost of its own to match) or under `shadow`.
      if (plain && !this.concurrent && this.policy === undefined) this.memory.remember(memoryKey, decision, cost, now);
    }
    return withResetAt({ ...decision, local: false }, resetAtMs);
  }

  /**
   * The answer to a request whose call failed (a Redis error, the timeout, an admission not
   * durable): counted and logged, and the request passes (fail open) or is refused (fail closed).
   * @param {string} key
   * @param {any} error
   * @returns {Failure}
   */
  #failure(key, error) {
    this.stats.failures += 1;
    if (error instanceof NotDurableError) this.stats.notDurable += 1;
    const passes = this.failMode === 'open';
    if (passes) this.stats.failOpen += 1;
    else this.stats.failClosed += 1;
    this.logger?.warn?.(
      `ratelimit: ${this.command} for ${JSON.stringify(this.redisKey(key))} failed (${error?.message ?? error}); ` +
        `fail ${this.failMode}: the request ${passes ? 'passes' : 'is refused'}`,
    );
    return { failed: true, allowed: passes, error };
  }

  /**
   * Gives back up to `units` of what `key` has taken (RL.REFUND; `dryRun`: says how many it
   * would, writing nothing): for a request that failed downstream, or whose cost was estimated
   * too high. Resolves to the units given back; rejects when Redis fails or does not answer
   * within the timeout (nothing is decided here, so there is nothing to fail open or closed).
   * A denial of `key` remembered by this limit is forgotten once units are given back.
   * @param {string} key
   * @param {number} units
   * @param {RefundOptions} [options]
   * @returns {Promise<number>}
   */
  async refund(key, units, options = {}) {
    const { dryRun = false } = options;
    count(units, 'units', 0);
    checkFlag(dryRun, 'dryRun');
    if (this.concurrent) throw new TypeError('invalid refund: a concurrency limit gives its leases back with release');
    const args = ['RL.REFUND', this.redisKey(key), String(units)];
    if (dryRun) args.push('DRYRUN');
    await this.setup.pending;
    const reply = await withTimeout((call) => this.#run(args, this.send, call), this.timeout);
    const given = Number(reply);
    if (typeof reply !== 'number' || !Number.isSafeInteger(given) || given < 0) {
      throw new Error(`unexpected reply from the module: RL.REFUND answered ${String(reply)}`);
    }
    if (given > 0 && !dryRun) this.memory.forget(String(key));
    return given;
  }

  /**
   * Gives back the lease of an admitted concurrency decision (RL.CONCURRENCY.RELEASE), with
   * what the work it guarded says to an adaptive limit: `rtt`, the milliseconds it took (a
   * number, fractions kept: sent as `RTT <n>us`, whole microseconds, at least 1; left out, the
   * module takes the time since the lease was taken), and `dropped`, that it failed from
   * overload (a 5xx, a timeout, a cancelled request: DROPPED, the limit backs off). A limit that
   * is not adaptive takes both and ignores them. Rejects only on invalid options (TypeError): a
   * Redis failure is logged and counted (`releaseFailures`), and the lease then ends by itself
   * (counted as dropped by an adaptive limit).
   * @param {string} key
   * @param {Decision} decision
   * @param {ReleaseOptions} [options]
   * @returns {Promise<void>}
   */
  async release(key, decision, options = {}) {
    const { rtt, dropped = false } = options ?? {};
    if (rtt !== undefined && (typeof rtt !== 'number' || !(rtt >= 0 && rtt <= MAX_DURATION_MS))) {
      throw new TypeError(`invalid rtt: expected the milliseconds the work took, a number from 0 to 10 years; got ${String(rtt)}`);
    }
    checkFlag(dropped, 'dropped');
    if (!this.concurrent || !decision?.allowed || decision.token === undefined) return;
    const args = ['RL.CONCURRENCY.RELEASE', this.redisKey(key), decision.token];
    if (rtt !== undefined) args.push('RTT', `${Math.max(1, Math.round(rtt * 1000))}us`);
    if (dropped) args.push('DROPPED');
    await this.setup.pending;
    try {
      await withTimeout((call) => this.#run(args, this.send, call), this.timeout); // on the backend the lease was taken on
    } catch (error) {
      this.stats.releaseFailures += 1;
      this.logger?.warn?.(
        `ratelimit: RL.CONCURRENCY.RELEASE for ${JSON.stringify(this.redisKey(key))} failed ` +
          `(${error?.message ?? error}); the lease ends by itself`,
      );
    }
  }
}

module.exports = { NotDurableError, RateLimit, TRY_AGAIN_PAUSE_MS, retryPauseMs, withTimeout };
