// ratelimit-redis-module for `import`: the members of index.cjs, the one implementation (what
// each is: index.cjs). Not a second copy: an object made through `require` is an instance of
// the class `import` gives, and the other way round.

export {
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
} from './index.cjs';
