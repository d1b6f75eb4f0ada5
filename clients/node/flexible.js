// ratelimit-redis-module/flexible for `import`: the members of flexible.cjs (rate-limiter-flexible's
// classes on a subpath of their own), the main entry's very classes:
//   import { RateLimiterRedis } from 'ratelimit-redis-module/flexible';

export { ModuleRequiredError, RateLimiterRedis, RateLimiterRes } from './flexible.cjs';
