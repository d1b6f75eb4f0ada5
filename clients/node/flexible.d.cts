// The types of ratelimit-redis-module/flexible (flexible.cjs): those of the main entry's classes.
export { ModuleRequiredError, RateLimiterRedis, RateLimiterRes } from './index.cjs';
export type { RateLimiterRedisOptions } from './index.cjs';
