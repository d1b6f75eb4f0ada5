// The types of ratelimit-redis-module/express-rate-limit for `import` (express-rate-limit.js): those of express-rate-limit.cjs.
export * from './express-rate-limit.cjs';
