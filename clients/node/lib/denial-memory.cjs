// The denial memory: denials remembered in the process until their retry time, so that a caller
// over its limit is refused without a round trip; and its default clock. RateLimit keeps one,
// and RateLimiterRedis's in-memory blocks are one.

// @ts-check
'use strict';

const { fixedResetAt, withResetAt } = require('./fields.cjs');

/**
 * Denials remembered until their retry time, at most `max` of them. A full memory first drops
 * expired entries among the oldest few, else the oldest one: bounded work per insert.
 */
class DenialMemory {
  constructor(max) {
    this.max = max;
    this.entries = new Map(); // key -> { until, resetAt, decision }, oldest first
  }

  get size() {
    return this.entries.size;
  }

  // A remembered denial of `cost` units refuses a request of that cost only: a smaller one may
  // fit, and a larger one may wait longer than the remembered retry time, so both are asked.
  // One remembered with cost undefined (a local budget's refill granted nothing: not even one
  // unit fits) refuses every request of 1 unit or more until its retry time.
  lookup(key, cost, now) {
    const e = this.entries.get(key);
    if (e === undefined) return undefined;
    if (e.until <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return cost === e.cost || (e.cost === undefined && cost > 0) ? e : undefined;
  }

  /**
   * The denial remembered for a request of `cost` units of `key` (lookup) as the decision answered
   * without a round trip at `now`, `remaining` as the caller has it (RateLimit's 0, a local
   * budget's units held); undefined when none refuses it.
   */
  refusal(key, cost, now, remaining = 0) {
    const e = this.lookup(key, cost, now);
    if (e === undefined) return undefined;
    // Whole milliseconds, as the module counts them (the default clock has fractions); the
    // reset instant on the wall clock the one the denial's reply fixed (fields.cjs, RESET_AT).
    return withResetAt({
      ...e.decision,
      remaining,
      retryAfterMs: Math.ceil(e.until - now),
      resetAfterMs: Math.max(0, Math.ceil(e.resetAt - now)),
      local: true,
    }, fixedResetAt(e.decision));
  }

  /** Forgets `key`'s denial: something gave units back to it (RateLimit's refund). */
  forget(key) {
    this.entries.delete(key);
  }

  remember(key, decision, cost, now) {
    if (this.max <= 0 || decision.retryAfterMs < 0) return;
    this.entries.delete(key);
    if (this.entries.size >= this.max) {
      let looked = 0;
      for (const [k, e] of this.entries) {
        if (++looked > 16) break;
        if (e.until <= now) this.entries.delete(k);
      }
      if (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value);
    }
    this.entries.set(key, {
      cost,
      until: now + decision.retryAfterMs,
      resetAt: now + decision.resetAfterMs,
      decision,
    });
  }
}

/** The default clock of a denial memory: monotonic milliseconds. */
const monotonicMs = () => performance.now();

module.exports = { DenialMemory, monotonicMs };
