// The types of ratelimit-redis-module/express-rate-limit (express-rate-limit.cjs): those of the main entry's class.
export { ModuleRequiredError, RedisModuleStore } from './index.cjs';
export type { ClientRateLimitInfo, ExpressRateLimitOptionsLike, RedisModuleStoreOptions, RedisModuleStoreStats } from './index.cjs';
