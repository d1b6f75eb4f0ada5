// The types of ratelimit-redis-module/flexible for `import` (flexible.js): those of flexible.cjs.
export * from './flexible.cjs';
