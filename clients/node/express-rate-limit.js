// ratelimit-redis-module/express-rate-limit for `import`: the members of express-rate-limit.cjs
// (a store for express-rate-limit on a subpath of its own), the main entry's very class:
//   import { RedisModuleStore } from 'ratelimit-redis-module/express-rate-limit';

export { ModuleRequiredError, RedisModuleStore } from './express-rate-limit.cjs';
