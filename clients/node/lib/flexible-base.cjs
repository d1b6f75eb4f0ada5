// rate-limiter-flexible's own classes, when it is installed beside the package, for
// RateLimiterRedis and RateLimiterRes to extend: its wrappers (RateLimiterUnion,
// RLWrapperBlackAndWhite, RLWrapperTimeouts, RateLimiterQueue, BurstyRateLimiter, an
// insuranceLimiter) check `instanceof` its RateLimiterAbstract or RateLimiterCompatibleAbstract,
// and BurstyRateLimiter a refusal `instanceof` its RateLimiterRes. Without it the package's
// classes extend empty ones: rate-limiter-flexible is never required to load the package.

// @ts-check
'use strict';

/**
 * rate-limiter-flexible's `lib/<name>.js`, resolved from this package (so the copy the
 * application has, when it is hoisted beside it), or undefined when it is not installed.
 * Any other failure to load it is thrown: a broken install is not taken for an absent one.
 * @param {string} name
 * @returns {any}
 */
function fromFlexible(name) {
  const id = `rate-limiter-flexible/lib/${name}`;
  try {
    return require(id);
  } catch (error) {
    if (error?.code === 'MODULE_NOT_FOUND' && String(error.message).includes(id)) return undefined;
    throw error;
  }
}

/** The base of RateLimiterRedis: rate-limiter-flexible's RateLimiterCompatibleAbstract, or none. */
const LimiterBase = fromFlexible('RateLimiterCompatibleAbstract') ?? class RateLimiterCompatible {};

/** The base of RateLimiterRes: rate-limiter-flexible's RateLimiterRes, or none. */
const ResBase = fromFlexible('RateLimiterRes') ?? class RateLimiterResBase {};

module.exports = { LimiterBase, ResBase };
