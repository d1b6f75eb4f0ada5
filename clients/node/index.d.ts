// Types of ratelimit-redis-module for `import` (index.js): those of index.cjs, which index.js
// re-exports.
export * from './index.cjs';
