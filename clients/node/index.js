// ratelimit-redis-module: the ratelimit Redis module in a Node service, on node-redis 5.
//
// This file only gathers the public API; each concept has a file of its own in lib/:
// - rate-limit.js, RateLimit: one limit (one algorithm's command, or an RL.LIMIT policy) checked
//   for a key, with the local denial memory (denial-memory.js), the timeout and fail open /
//   fail closed; with `localBudget`, units taken k at a time and handed out in the process
//   (local-budget.js).
// - middleware.js, rateLimitMiddleware: Express/Connect middleware (plain node:http works too)
//   that turns the decision into the HTTP fields of docs/clients.md.
// - fields.js: those fields, RateLimit-Policy and RateLimit
//   (draft-ietf-httpapi-ratelimit-headers-11), X-RateLimit-*, and on a refusal 429 with
//   Retry-After and an application/problem+json body (quotaExceededBody, UNAVAILABLE_BODY), and
//   an adaptive concurrency limit's 503 (loadSheddingBody).
// - flexible.js, RateLimiterRedis and RateLimiterRes: rate-limiter-flexible's interface, backed
//   by the module, so that its users switch by changing one constructor.
// - scripts.js: the script backend (backend "auto" where the server has no module, or
//   "script"): each command run as its Lua script of clients/scripts/ (EVALSHA), and
//   ModuleRequiredError for what needs the module there.
// - limits.js: the module's durations (durationMs), each algorithm's command and parameters,
//   and a policy's windows (policyWindows); reply.js: the module's reply (parseReply).
// - reconnect.js: reconnectStrategy, node-redis's reconnect strategy that suits a limiter on
//   the request path (back within 100 ms of Redis).
//
// The package imports no other package: the application passes its own node-redis client.

export { durationMs, policyWindows } from './lib/limits.js';
export { parseReply } from './lib/reply.js';
export {
  QUOTA_EXCEEDED_TYPE,
  REDUCED_CAPACITY_TYPE,
  UNAVAILABLE_BODY,
  loadSheddingBody,
  quotaExceededBody,
  rateLimitHeaders,
} from './lib/fields.js';
export { NotDurableError, RateLimit } from './lib/rate-limit.js';
export { rateLimitMiddleware } from './lib/middleware.js';
export { ModuleRequiredError } from './lib/scripts.js';
export { RateLimiterRedis, RateLimiterRes } from './lib/flexible.js';
export { reconnectStrategy } from './lib/reconnect.js';
