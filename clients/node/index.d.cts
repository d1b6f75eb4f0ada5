// Types of ratelimit-redis-module (index.cjs; index.d.ts gives the same to `import`).

import type { IncomingMessage, ServerResponse } from 'node:http';

/** What the package needs of a client: node-redis 5's `createClient()` (RESP2 or RESP3). */
export interface RedisClientLike {
  sendCommand(args: ReadonlyArray<string>): Promise<unknown>;
}

/** node-redis's Sentinel client (createSentinel), which follows a failover by itself. */
export interface RedisSentinelLike {
  sendCommand(isReadonly: boolean | undefined, args: ReadonlyArray<string>): Promise<unknown>;
  getMasterNode(): unknown;
  use<T>(
    fn: (client: { sendCommand(isReadonly: boolean | undefined, args: ReadonlyArray<string>): Promise<unknown> }) => Promise<T>,
  ): Promise<T>;
}

/**
 * node-redis's cluster client (createCluster): each command goes to the primary of its key's
 * slot (`firstKey`; undefined: any node). Told apart by getSlotMaster and nodeClient.
 */
export interface RedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  getSlotMaster(slot: number): unknown;
  nodeClient(node: unknown): unknown;
}

/** node-redis's cluster client as RateLimiterRedis uses it: `multi(key)` to that key's node. */
export interface RedisClusterStoreClientLike extends RedisClusterLike {
  del(key: string): Promise<unknown>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  multi(routing?: string): any;
  isOpen?: boolean;
}

/**
 * ioredis's client (`new Redis()`, for a server or a Sentinel setup) or its `Cluster`, told apart
 * from node-redis's by `pipeline`, `status` and `isCluster`. Structural: ioredis's own types are
 * not needed to use the package (ioredis is an optional peer).
 */
export interface IoredisClientLike {
  status: string;
  isCluster: boolean;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  sendCommand(command: any, ...rest: any[]): unknown;
  pipeline(): unknown;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  on(event: string, listener: (...args: any[]) => void): unknown;
}

/** A node-redis client as RateLimiterRedis uses it (sendCommand, del, multi). */
export interface RedisStoreClientLike extends RedisClientLike {
  del(key: string): Promise<unknown>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  multi(): any;
  isReady?: boolean;
}

/** A duration: milliseconds, or the module's grammar ("1500", "90s", "1m", "24h", "7d"). */
export type Duration = number | string;

/** A penalty (BLOCK): a refused request blocks the key for this long. */
export interface Block {
  block?: Duration;
}

/** How an adaptive concurrency limit moves (ADAPTIVE): Netflix concurrency-limits' AIMDLimit, VegasLimit or Gradient2Limit. */
export type AdaptiveKind = 'aimd' | 'vegas' | 'gradient2';

/**
 * Requests in flight: a lease per admitted request, released when its response ends. With
 * `adaptive` the limit is an estimate the releases move (the latency and drops they report),
 * `limit` only where a new key starts, within `min` and `max` (integers, 1 or more; the module's
 * defaults: 20 to 200 for aimd and gradient2, 1 to 1000 for vegas, widened to include `limit`).
 */
export type ConcurrencyLimit =
  | { algorithm: 'concurrency'; limit: number; lease: Duration; adaptive?: undefined; min?: never; max?: never; block?: never }
  | { algorithm: 'concurrency'; limit: number; lease: Duration; adaptive: AdaptiveKind; min?: number; max?: number; block?: never };

/** One admission algorithm's limit (a policy's rules are these too). */
export type AlgorithmLimit =
  | { algorithm: 'gcra'; burst: number; rate: number; period: Duration }
  | { algorithm: 'tokenbucket'; capacity: number; refillAmount: number; refillPeriod: Duration; interval?: boolean }
  | { algorithm: 'leakybucket'; capacity: number; leakAmount: number; leakPeriod: Duration }
  | { algorithm: 'fixedwindow' | 'slidingwindow' | 'slidinglog'; limit: number; window: Duration }
  /** Guava's SmoothWarmingUp: `rate` per `period` once warm, `coldFactor` (2 to 10, default 3) times slower after idle. */
  | { algorithm: 'warmup'; rate: number; period: Duration; warmup: Duration; coldFactor?: number };

/**
 * A rule of a policy given in the application's configuration (`{ policy, rules }`): an
 * algorithm's limit written as a single limit is (not concurrency; no `block`, which is the
 * policy's; no `localBudget`, which is the limiter's), `shadow: true` for a shadow rule (checked
 * and counted, never refusing). Sent as RL.POLICY.SET takes it: `[SHADOW] GCRA 10 10 1000`.
 */
export type PolicyRule = AlgorithmLimit & { shadow?: boolean; block?: never; localBudget?: never };

/**
 * A policy (RL.LIMIT). With `rules` (1 to 16, at least one not a shadow rule), its rules are the
 * application's: on the script backend they run as policy.lua over one key per rule
 * (`{key}:0` .. `{key}:n-1`, '}' and '%' in the key escaped as %7D and %25; or `key:0` ..
 * when the key has a hash tag of its own), on the
 * module they are set once per RateLimit with RL.POLICY.SET before its first RL.LIMIT, replacing
 * the server's policy of that name. Without `rules`, the policy is the server's (set with
 * RL.POLICY.SET by someone else): module only (ModuleRequiredError on the scripts).
 */
export interface PolicyLimit extends Block {
  policy: string;
  rules?: ReadonlyArray<PolicyRule>;
}

export type Limit = (AlgorithmLimit & Block & { rules?: never }) | ConcurrencyLimit | PolicyLimit;

export interface Logger {
  warn(message: string): void;
  /** The backend chosen by `backend: "auto"`, logged once per client (optional). */
  info?(message: string): void;
}

export interface RateLimitOptions {
  /**
   * node-redis's createClient, createSentinel or createCluster, or ioredis's `new Redis()` (a
   * server or a Sentinel setup) or `new Cluster()` (on a cluster each command to its key's node).
   */
  client: RedisClientLike | RedisSentinelLike | RedisClusterLike | IoredisClientLike;
  limit: Limit;
  /** The name in the fields; default "default", or the policy's; "<name>/<rule>" for a policy of several rules. */
  name?: string;
  /** Prepended to every key in Redis; default "rl:http:". */
  prefix?: string;
  /** Milliseconds to wait for Redis; default 50. */
  timeout?: number;
  /** When Redis fails: "open" (default) lets the request pass, "closed" refuses it (503). */
  failMode?: 'open' | 'closed';
  /**
   * How many denials to remember locally (0: none); default 10,000. A denial is remembered
   * until its retry_after_ms, counted from when the request was sent; a policy's and a
   * concurrency limit's denials are not remembered.
   */
  denialMemory?: number;
  /** Where failures are logged (one warning each); default console. */
  logger?: Logger | null;
  /**
   * Replicas that must have an admission before it counts (WAIT, sent in the same round trip;
   * on a cluster client, to the key's node once the command has answered);
   * one that fewer acknowledged within `durableTimeoutMs` fails open or closed
   * (`stats.notDurable`). Default 0: no wait. Give `timeout` room for `durableTimeoutMs`.
   */
  durable?: number;
  /** How long the replicas have, in ms; default 100. */
  durableTimeoutMs?: number;
  /**
   * "auto" (default): the module when the server has it (`COMMAND INFO RL.GCRA`, asked once per
   * client, by the setup or else before the first command, the choice logged at info level),
   * else the script backend;
   * "module": the module, a check rejecting with ModuleRequiredError where it is missing;
   * "script": the Lua scripts of clients/lua (EVALSHA), for servers that refuse MODULE LOAD.
   * On the scripts, a policy without `rules` (the server's) and adaptive concurrency limits
   * need the module: refused with ModuleRequiredError (in the constructor when "script" is
   * given, else at the check); a policy with `rules` and `shadow` work there as on the module.
   * A server without Lua (Valkey 9.1 with its lua module unloaded) cannot run the scripts:
   * "script" there, and "auto" where the module is missing too, reject each check with one
   * ModuleRequiredError (docs/managed.md, "A server without Lua").
   */
  backend?: 'auto' | 'module' | 'script';
  /**
   * The denial memory's and the local budget's monotonic clock in milliseconds; default
   * performance.now (a test passes a fake clock that moves with the server's).
   */
  now?: () => number;
  /**
   * A local budget of k units per key (an integer, 1 or more; not for a concurrency limit): a
   * plain request of 1 to k units is served in the process from units taken k at a time
   * (ATMOST), without a round trip; one refill in flight per key. A refill's units may be spent
   * until `hold / 2` after it was sent, and what is left is given back then (RL.REFUND), and at
   * `flush()` / `close()`; a fixed window's lapse at its end instead when it comes within the
   * whole `hold`. Half, because a refund gives back the key's newest units, perhaps another
   * instance's: the wait and the refund's delay add up and must fit in `hold` together. All
   * instances together never admit more than the limit would over any interval lengthened by
   * `hold`; at most k units per key and instance are held unspent. Calls with `atMost`,
   * `shadow`, `dryRun` or a cost above k are round trips as without.
   */
  localBudget?: number;
  /**
   * The local budget's hold: its units are spent within `hold / 2` of their refill or given back
   * then (a fixed window's lapse at its end when it comes within `hold`); the promise's interval
   * is lengthened by `hold`. Default a quarter of the limit's period or window (250 ms for a
   * policy), at least 10 ms. Needs `localBudget`.
   */
  hold?: Duration;
  /**
   * Milliseconds the setup may take; default 1000. The setup (the backend, COMMAND INFO for
   * "auto"; on the scripts, SCRIPT LOAD of the limit's; on the module, a policy's rules) runs in
   * the background when the RateLimit is created with a ready client and each time the client
   * becomes ready again. A request that arrives while it runs waits for it, within this bound and
   * outside its own `timeout`; a setup that fails or overruns is logged and counted
   * (`stats.setupFailures`), never thrown, and requests then ask what they need themselves.
   */
  setupTimeout?: number;
}

export interface Decision {
  failed?: false;
  allowed: boolean;
  name: string;
  limit: number;
  remaining: number;
  retryAfterMs: number;
  resetAfterMs: number;
  /**
   * RateLimit-Policy's `w`, in whole seconds, when whole: a window's length, or for GCRA and the
   * buckets the time to earn the whole burst back (burst × period / rate).
   */
  windowSeconds: number | undefined;
  /**
   * When admitted: the ms until `remaining` grows (RateLimit's `t`); absent when it never does
   * (nothing taken) or cannot be told (a concurrency limit).
   */
  moreAfterMs?: number;
  /** For RL.LIMIT: the binding rule's index. */
  rule?: number;
  /** For RL.LEAKYBUCKET: the time until this request's turn. */
  delayMs?: number;
  /** For a call with `atMost`: the units granted (0 when refused). */
  granted?: number;
  /** For a call with `shadow`: the limit would have refused this request (it is answered allowed). */
  shadowDenied?: boolean;
  /** For a concurrency limit: the lease's token, and that the limit counts requests in flight. */
  token?: string;
  concurrent?: boolean;
  /** For an adaptive concurrency limit: its kind (`limit` is then the current estimate). */
  adaptive?: AdaptiveKind;
  /**
   * Answered without a round trip: by the denial memory, or from the local budget (then
   * `remaining`, `resetAfterMs` and `moreAfterMs` are approximate: the units held plus the last
   * refill's reply).
   */
  local: boolean;
}

export interface Failure {
  failed: true;
  /** Whether the request passes (fail open). */
  allowed: boolean;
  error: unknown;
}

export interface RateLimitStats {
  calls: number;
  admitted: number;
  denied: number;
  deniedLocally: number;
  failures: number;
  failOpen: number;
  failClosed: number;
  /** Requests checked with `shadow` that the limit would have refused (passed, not admitted). */
  shadowDenied: number;
  notDurable: number;
  releaseFailures: number;
  /** Local budget: admitted without a round trip. */
  localAdmitted: number;
  /** Local budget: ATMOST round trips that refilled a budget (counted in `calls` too). */
  refills: number;
  /** Local budget: unspent units given back (RL.REFUND). */
  refunded: number;
  /** Local budget: unspent units let go without a refund, their fixed window having ended. */
  lapsed: number;
  /** Local budget: RL.REFUNDs that failed (the limit gets those units back by itself). */
  refundFailures: number;
  /** Local budget, a gauge: units held unspent now, over every key (this process's under-admission). */
  held: number;
  /** The backend in use: undefined until the setup or the first call decides it (backend "auto" or "module"). */
  backend: 'module' | 'script' | undefined;
  /** Setups that failed or did not finish within `setupTimeout` (each logged once). */
  setupFailures: number;
}

/** The options of one call. */
export interface CheckOptions {
  /** Instead of a cost: as many units as the key allows now, up to this (ATMOST; not for concurrency). */
  atMost?: number;
  /** Checked and counted, never refused (SHADOW): the decision says `shadowDenied`. */
  shadow?: boolean;
  /** The decision the call would get, nothing written (DRYRUN); counted in `stats.calls` only. */
  dryRun?: boolean;
  /** A concurrency lease's own token, 1 to 256 bytes (ID): the same token renews its lease. */
  id?: string;
}

/** What the work a lease guarded says to an adaptive limit (ignored by one that is not). */
export interface ReleaseOptions {
  /**
   * The milliseconds the work took (fractions kept; sent as `RTT <n>us`, whole microseconds, at
   * least 1). Left out: the time since the lease was taken.
   */
  rtt?: number;
  /** The work failed from overload (a 5xx, a timeout, a cancelled request): DROPPED, the limit backs off. */
  dropped?: boolean;
}

export interface RefundOptions {
  /** Says how many units would be given back, writing nothing (DRYRUN). */
  dryRun?: boolean;
}

/** An admission fewer replicas than `durable` acknowledged in time (see RateLimitOptions). */
export class NotDurableError extends Error {
  constructor(acked: number, wanted: number, ms: number);
}

/**
 * What needs the ratelimit module, asked where it is missing (the script backend); also the
 * script backend on a server without Lua (Valkey 9.1 with its lua module unloaded), where the
 * module is all that can run (docs/managed.md, "A server without Lua").
 */
export class ModuleRequiredError extends Error {
  /** `what`: what needs the module, the message's subject; `message`: the whole message instead. */
  constructor(what: string, message?: string);
}

export class RateLimit {
  constructor(options: RateLimitOptions);
  readonly stats: RateLimitStats;
  /** An adaptive concurrency limit's kind, lower case; undefined for any other limit. */
  readonly adaptive: AdaptiveKind | undefined;
  redisKey(key: string): string;
  check(key: string, cost?: number, options?: CheckOptions): Promise<Decision | Failure>;
  /**
   * Gives back an admitted concurrency decision's lease, with the work's latency and whether it
   * dropped for an adaptive limit; rejects only on invalid options (a Redis failure is counted in
   * `stats.releaseFailures`, and the lease ends by itself).
   */
  release(key: string, decision: Decision, options?: ReleaseOptions): Promise<void>;
  /**
   * Gives back up to `units` the key has taken (RL.REFUND; a policy with `rules` on the scripts:
   * policyrefund.lua over its rule keys): the units given back; rejects when Redis fails.
   */
  refund(key: string, units: number, options?: RefundOptions): Promise<number>;
  /** The local budget's k and hold, or undefined without `localBudget`. */
  readonly localBudget: { k: number; holdMs: number } | undefined;
  /** Gives back every unit the local budgets hold now; resolves to the units given back. */
  flush(): Promise<number>;
  /**
   * At shutdown: no more local budgets (later checks are round trips), the refills in flight
   * end, then every unit held is given back; resolves to the units given back. The client stays open.
   */
  close(): Promise<number>;
}

export interface MiddlewareOptions extends Partial<RateLimitOptions> {
  /** An existing RateLimit to use instead of the options above. */
  limiter?: RateLimit;
  /** The caller's key; default the remote address (req.ip in Express). */
  key?: (req: IncomingMessage & { ip?: string }) => string;
  /** Units this request costs; default 1. */
  cost?: (req: IncomingMessage) => number;
  /** Check every request (true) or those it says with SHADOW: counted, answered in the fields, never refused. */
  shadow?: boolean | ((req: IncomingMessage) => boolean);
  /** Requests that pass unlimited, with no round trip and no fields (health checks, internal callers). */
  skip?: (req: IncomingMessage & { ip?: string }, res: ServerResponse) => boolean | Promise<boolean>;
  /** X-RateLimit-Reset as delta seconds (`'delta'`, the default) or epoch seconds (`'epoch'`). */
  xRateLimitReset?: XRateLimitReset;
}

export type Middleware = ((
  req: IncomingMessage,
  res: ServerResponse,
  next: (err?: unknown) => void,
) => void) & { limiter: RateLimit };

export function rateLimitMiddleware(options: MiddlewareOptions): Middleware;

/**
 * What X-RateLimit-Reset says: `'delta'`, the seconds until the key is fresh again
 * (ceil(resetAfterMs / 1000)); `'epoch'`, that instant in seconds since the Unix epoch, rounded up
 * (express-rate-limit's legacy field, GitHub's): this process's clock when the reply arrived plus
 * resetAfterMs, the same instant in the denial memory's answers.
 */
export type XRateLimitReset = 'delta' | 'epoch';

export interface HeaderOptions {
  /** X-RateLimit-Reset as delta seconds (the default) or epoch seconds. */
  xRateLimitReset?: XRateLimitReset;
}

export function rateLimitHeaders(decision: Decision, options?: HeaderOptions): Array<[string, string]>;
export function quotaExceededBody(name: string): string;
/** The 503 body of an adaptive concurrency limit's refusal: load shedding (temporary-reduced-capacity). */
export function loadSheddingBody(name: string): string;
export const UNAVAILABLE_BODY: string;
export const QUOTA_EXCEEDED_TYPE: string;
export const REDUCED_CAPACITY_TYPE: string;
export function durationMs(value: Duration, what?: string): number;
export function parseReply(
  reply: unknown,
  sixth?: 'rule' | 'delay_ms' | 'token',
  extras?: ReadonlyArray<'granted' | 'shadow_denied'>,
): Omit<Decision, 'name' | 'windowSeconds' | 'moreAfterMs' | 'local'>;
export function policyWindows(flat: ReadonlyArray<string | Buffer>): Array<number | undefined>;
/** RL.COUNTER's reply, `[count, pttl]` in either protocol, as a Count; anything else throws. */
export function parseCount(reply: unknown): Count;

/** RL.COUNTER's answer: the key's count after the call and its PTTL (-1: no TTL, -2: no key). */
export interface Count {
  count: number;
  ttlMs: number;
}

export interface CounterOptions {
  /** node-redis's createClient, createSentinel or createCluster, or ioredis's Redis or Cluster (each command to its key's node). */
  client: RedisClientLike | RedisSentinelLike | RedisClusterLike | IoredisClientLike;
  /** Prepended to every key; default "". */
  prefix?: string;
  /** "auto" (default), "module" or "script", as RateLimitOptions' backend. */
  backend?: 'auto' | 'module' | 'script';
  /** Milliseconds a call may wait for Redis before it rejects; default 1000. */
  timeout?: number;
  /** Milliseconds the setup (backend, script) may take; default 1000. */
  setupTimeout?: number;
  /** Hears the backend "auto" chose (info) and a failed setup (warn); default console; null: nothing. */
  logger?: Logger | null;
}

export interface CountOptions {
  /** Added to the count: -10^12 to 10^12, default 1; negative gives back, 0 only reads. */
  by?: number;
  /** Write only a key that exists (none: `{ count: 0, ttlMs: -2 }`); default false. */
  xx?: boolean;
}

/**
 * RL.COUNTER: a fixed window kept as a plain integer string (INCRBY, and PEXPIRE at the first
 * hit), the window the key's TTL on the server's clock: `new Counter({ client }).count(key, '1m')`.
 */
export class Counter {
  constructor(options: CounterOptions);
  readonly prefix: string;
  /** 'module' or 'script' once decided; undefined before. */
  readonly backend: 'module' | 'script' | undefined;
  count(key: string, window: Duration, options?: CountOptions): Promise<Count>;
}

/**
 * node-redis's socket.reconnectStrategy for a limiter on the request path: the next attempt 50 to
 * 100 ms after a failed one, whatever the cause (node-redis's default backs off up to 2.2 s).
 */
export function reconnectStrategy(retries: number, cause: Error): number;

/** rate-limiter-flexible's RateLimiterRes. */
export class RateLimiterRes {
  constructor(remainingPoints?: number, msBeforeNext?: number, consumedPoints?: number, isFirstInDuration?: boolean);
  remainingPoints: number;
  msBeforeNext: number;
  consumedPoints: number;
  isFirstInDuration: boolean;
  toJSON(): { remainingPoints: number; msBeforeNext: number; consumedPoints: number; isFirstInDuration: boolean };
  toString(): string;
}

/** Something with rate-limiter-flexible's interface, as insuranceLimiter. */
export interface RateLimiterLike {
  consume(key: string | number, points?: number, options?: object): Promise<unknown>;
  penalty(key: string | number, points?: number, options?: object): Promise<unknown>;
  reward(key: string | number, points?: number, options?: object): Promise<unknown>;
  get(key: string | number, options?: object): Promise<unknown>;
  delete(key: string | number, options?: object): Promise<unknown>;
  block(key: string | number, secDuration: number, options?: object): Promise<unknown>;
}

export interface RateLimiterRedisOptions {
  /** node-redis's createClient or createCluster, or ioredis's `new Redis()` or `new Cluster()`. */
  storeClient: RedisStoreClientLike | RedisClusterStoreClientLike | IoredisClientLike;
  /** As RateLimitOptions' backend (not in rate-limiter-flexible); default "auto". */
  backend?: 'auto' | 'module' | 'script';
  /** Hears the backend "auto" chose (info) and a failed setup (warn); default console; null: nothing. */
  logger?: Logger | null;
  /** As RateLimitOptions' setupTimeout (not in rate-limiter-flexible): a consume waits for the setup this long at most; default 1000. */
  setupTimeout?: number;
  /** Points per duration; default 4. */
  points?: number;
  /** Seconds (whole, as its key's EX: less than one is none); default 1; 0: never reset. */
  duration?: number;
  /** Default "rlflx". */
  keyPrefix?: string;
  /** Seconds a key is blocked for once a consume goes over the points; default 0 (none). */
  blockDuration?: number;
  /** Points consumed at which that block starts (at least points); default 0: the first consume over the points. */
  blockOnConsumed?: number;
  /** Spread admitted consumes over the window: resolve after a delay. */
  execEvenly?: boolean;
  execEvenlyMinDelayMs?: number;
  /** Refuse a key in the process once it has consumed this many points. */
  inMemoryBlockOnConsumed?: number;
  /** Seconds of that in-memory block (default: the window's time left). */
  inMemoryBlockDuration?: number;
  insuranceLimiter?: RateLimiterLike;
  rejectIfRedisNotReady?: boolean;
  /**
   * Not in rate-limiter-flexible: the in-memory blocks' monotonic clock in milliseconds;
   * default performance.now (a test passes a fake clock that moves with the server's).
   */
  now?: () => number;
  /** Accepted and ignored (the client is node-redis either way). */
  useRedisPackage?: boolean;
}

/** rate-limiter-flexible's RateLimiterRedis, on the module. */
export class RateLimiterRedis implements RateLimiterLike {
  constructor(opts: RateLimiterRedisOptions);
  /** 'module' or 'script' once the first call decided it; undefined before. */
  readonly backend: 'module' | 'script' | undefined;
  readonly points: number;
  readonly duration: number;
  readonly keyPrefix: string;
  readonly blockDuration: number;
  readonly blockOnConsumed: number;
  readonly msDuration: number;
  readonly msBlockDuration: number;
  getKey(key: string | number): string;
  parseKey(rlKey: string): string;
  consume(key: string | number, points?: number | string, options?: object): Promise<RateLimiterRes>;
  get(key: string | number, options?: object): Promise<RateLimiterRes | null>;
  delete(key: string | number, options?: object): Promise<boolean>;
  reward(key: string | number, points?: number, options?: object): Promise<RateLimiterRes>;
  penalty(key: string | number, points?: number, options?: object): Promise<RateLimiterRes>;
  block(key: string | number, secDuration: number, options?: object): Promise<RateLimiterRes>;
  /** SET key points EX secDuration (0: no expiry; left out or negative: duration), as rate-limiter-flexible's. */
  set(key: string | number, points: number, secDuration?: number, options?: object): Promise<RateLimiterRes>;
  deleteInMemoryBlockedAll(): void;
}

/** express-rate-limit's ClientRateLimitInfo: what a store's increment and get resolve to. */
export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/**
 * What RedisModuleStore reads of express-rate-limit's options (its `Options`, passed to
 * `init`): the package does not import express-rate-limit, so this is the part of that type it
 * needs, which express-rate-limit's own `Options` fits.
 */
export interface ExpressRateLimitOptionsLike {
  windowMs: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  limit: number | ((...args: any[]) => unknown);
  skipFailedRequests?: boolean;
}

export interface RedisModuleStoreOptions {
  /** node-redis's createClient, createSentinel or createCluster, or ioredis's Redis or Cluster (each command to its key's node). */
  client: RedisClientLike | RedisSentinelLike | RedisClusterLike | IoredisClientLike;
  /** Prepended to express-rate-limit's key; default "rl:erl:" (rate-limit-redis's is "rl:": with it, its keys are read and counted on). */
  prefix?: string;
  /**
   * Left out: express-rate-limit's own window (windowMs from its first hit, every hit counted).
   * Given: one of the module's algorithms decides (express-rate-limit's `limit` must be the number it admits).
   */
  limit?: AlgorithmLimit & Block;
  /** "auto" (default), "module" or "script", as RateLimitOptions' backend. */
  backend?: 'auto' | 'module' | 'script';
  /** Milliseconds a call may wait for Redis before it rejects (express-rate-limit's passOnStoreError decides); default 1000. */
  timeout?: number;
  /** Milliseconds the setup (backend, scripts) may take; default 1000. */
  setupTimeout?: number;
  /** Hears the backend "auto" chose (info) and a failed setup (warn); default console; null: nothing. */
  logger?: Logger | null;
}

export interface RedisModuleStoreStats {
  /** Round trips to Redis. */
  calls: number;
  /** Of those, the ones that failed or timed out (each rejected to express-rate-limit). */
  failures: number;
  /** Setups that failed or did not finish within setupTimeout (each logged). */
  setupFailures: number;
  /** 'module' or 'script' once decided; undefined before. */
  backend: 'module' | 'script' | undefined;
}

/**
 * A store for express-rate-limit (its `Store` interface), backed by the module:
 * `rateLimit({ windowMs, limit, store: new RedisModuleStore({ client }) })`.
 */
export class RedisModuleStore {
  constructor(options: RedisModuleStoreOptions);
  readonly prefix: string;
  /** Keys are shared by every instance (express-rate-limit's double-count check reads it). */
  readonly localKeys: false;
  readonly stats: RedisModuleStoreStats;
  /** 'module' or 'script' once decided; undefined before. */
  readonly backend: 'module' | 'script' | undefined;
  init(options: ExpressRateLimitOptionsLike): void;
  increment(key: string): Promise<ClientRateLimitInfo>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
  get(key: string): Promise<ClientRateLimitInfo | undefined>;
  shutdown(): Promise<void>;
}
