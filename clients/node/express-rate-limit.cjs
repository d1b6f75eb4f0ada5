// ratelimit-redis-module/express-rate-limit: RedisModuleStore, a store for express-rate-limit
// backed by the module (lib/express-store.cjs), on a subpath of its own, so that an
// express-rate-limit application swaps its `store:` and nothing else:
//   const { RedisModuleStore } = require('ratelimit-redis-module/express-rate-limit');
// The package's main entry exports the same class; express-rate-limit.js is this file for `import`.

// @ts-check
'use strict';

const { RedisModuleStore } = require('./lib/express-store.cjs');
const { ModuleRequiredError } = require('./lib/scripts.cjs');

module.exports = { ModuleRequiredError, RedisModuleStore };

// What binds express-rate-limit.d.cts to this file, for tsc -p . (in a type,
// './express-rate-limit.cjs' is express-rate-limit.d.cts): every declared member is here,
// fitting its declaration, and nothing more.
/** @typedef {typeof import('./express-rate-limit.cjs')} Declared */
/** @type {Declared} */
const declared = module.exports;
/** @type {Record<Exclude<keyof typeof module.exports, keyof Declared>, never>} */
const undeclared = {};
