// ratelimit-redis-module/flexible: rate-limiter-flexible's RateLimiterRedis and RateLimiterRes,
// backed by the module (lib/flexible.js), on a subpath of their own, so that an application
// moving from rate-limiter-flexible changes one import:
//   import { RateLimiterRedis } from 'ratelimit-redis-module/flexible';
// The package's main entry exports the same classes.

export { RateLimiterRedis, RateLimiterRes } from './lib/flexible.js';
export { ModuleRequiredError } from './lib/scripts.js';
