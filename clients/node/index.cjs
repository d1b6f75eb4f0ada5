// ratelimit-redis-module: the ratelimit Redis module in a Node service, on node-redis 5.
//
// This file only gathers the public API; each concept has a file of its own in lib/:
// - rate-limit.cjs, RateLimit: one limit (one algorithm's command, or an RL.LIMIT policy) checked
//   for a key, with the local denial memory (denial-memory.cjs), the timeout and fail open /
//   fail closed; with `localBudget`, units taken k at a time and handed out in the process
//   (local-budget.cjs).
// - middleware.cjs, rateLimitMiddleware: Express/Connect middleware (plain node:http works too)
//   that turns the decision into the HTTP fields of docs/node.md.
// - fields.cjs: those fields, RateLimit-Policy and RateLimit
//   (draft-ietf-httpapi-ratelimit-headers-11), X-RateLimit-*, and on a refusal 429 with
//   Retry-After and an application/problem+json body (quotaExceededBody, UNAVAILABLE_BODY), and
//   an adaptive concurrency limit's 503 (loadSheddingBody); X-RateLimit-Reset as delta or epoch
//   seconds (xRateLimitReset), the epoch's instant fixed on a decision when its reply arrives.
// - flexible.cjs, RateLimiterRedis and RateLimiterRes: rate-limiter-flexible's interface, backed
//   by the module, so that its users switch by changing one constructor.
// - express-store.cjs, RedisModuleStore: a store for express-rate-limit (its Store interface),
//   one module call per request, so that its users swap `store:` and keep their options.
// - counter.cjs, Counter: RL.COUNTER, a fixed window kept as a plain integer string (the format
//   rate-limiter-flexible, express-rate-limit's Redis stores and limits keep), which both run.
// - scripts.cjs: the script backend (backend "auto" where the server has no module, or
//   "script"): each command run as its Lua script of clients/lua/ (EVALSHA), and
//   ModuleRequiredError for what needs the module there.
// - limits.cjs: the module's durations (durationMs), each algorithm's command and parameters,
//   and a policy's windows (policyWindows); reply.cjs: the module's replies (parseReply,
//   parseCount).
// - reconnect.cjs: reconnectStrategy, node-redis's reconnect strategy that suits a limiter on
//   the request path (back within 100 ms of Redis).
//
// The package imports no other package: the application passes its own node-redis client.
//
// The implementation is CommonJS, so that `require` loads it on every supported Node (18.19 and
// 20 before 20.19 cannot `require` an ES module); index.js, the `import` entry, re-exports this
// very object's members: one copy of each class, whichever way it was loaded (no dual package).
// The types are index.d.cts: the two constants at the end make tsc (tsconfig.json) hold this
// object to them, and lib/ reads its options through the same declared types.

// @ts-check
'use strict';

const { durationMs, policyWindows } = require('./lib/limits.cjs');
const { parseCount, parseReply } = require('./lib/reply.cjs');
const {
  QUOTA_EXCEEDED_TYPE,
  REDUCED_CAPACITY_TYPE,
  UNAVAILABLE_BODY,
  loadSheddingBody,
  quotaExceededBody,
  rateLimitHeaders,
} = require('./lib/fields.cjs');
const { NotDurableError, RateLimit } = require('./lib/rate-limit.cjs');
const { rateLimitMiddleware } = require('./lib/middleware.cjs');
const { ModuleRequiredError } = require('./lib/scripts.cjs');
const { RateLimiterRedis, RateLimiterRes } = require('./lib/flexible.cjs');
const { RedisModuleStore } = require('./lib/express-store.cjs');
const { Counter } = require('./lib/counter.cjs');
const { reconnectStrategy } = require('./lib/reconnect.cjs');

module.exports = {
  Counter,
  ModuleRequiredError,
  NotDurableError,
  QUOTA_EXCEEDED_TYPE,
  REDUCED_CAPACITY_TYPE,
  RateLimit,
  RateLimiterRedis,
  RateLimiterRes,
  RedisModuleStore,
  UNAVAILABLE_BODY,
  durationMs,
  loadSheddingBody,
  parseCount,
  parseReply,
  policyWindows,
  quotaExceededBody,
  rateLimitHeaders,
  rateLimitMiddleware,
  reconnectStrategy,
};

// What binds index.d.cts to this file, for tsc -p . (in a type, './index.cjs' is index.d.cts):
// every declared member is here with a type that fits its declaration, and nothing here is left
// undeclared. Two constants, no work.
/** @typedef {typeof import('./index.cjs')} Declared */
/** @type {Declared} */
const declared = module.exports;
/** @type {Record<Exclude<keyof typeof module.exports, keyof Declared>, never>} */
const undeclared = {};
