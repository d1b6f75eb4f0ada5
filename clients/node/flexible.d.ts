// The types of ratelimit-redis-module/flexible: those of the main entry's classes.
export { ModuleRequiredError, RateLimiterRedis, RateLimiterRes } from './index.js';
export type { RateLimiterRedisOptions } from './index.js';
