// ratelimit-redis-module/flexible: rate-limiter-flexible's RateLimiterRedis and RateLimiterRes,
// backed by the module (lib/flexible.cjs), on a subpath of their own, so that an application
// moving from rate-limiter-flexible changes one line:
//   const { RateLimiterRedis } = require('ratelimit-redis-module/flexible');
// The package's main entry exports the same classes; flexible.js is this file for `import`.

// @ts-check
'use strict';

const { RateLimiterRedis, RateLimiterRes } = require('./lib/flexible.cjs');
const { ModuleRequiredError } = require('./lib/scripts.cjs');

module.exports = { ModuleRequiredError, RateLimiterRedis, RateLimiterRes };

// What binds flexible.d.cts to this file, for tsc -p . (in a type, './flexible.cjs' is
// flexible.d.cts): every declared member is here, fitting its declaration, and nothing more.
/** @typedef {typeof import('./flexible.cjs')} Declared */
/** @type {Declared} */
const declared = module.exports;
/** @type {Record<Exclude<keyof typeof module.exports, keyof Declared>, never>} */
const undeclared = {};
