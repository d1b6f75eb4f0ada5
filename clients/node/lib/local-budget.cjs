// Local budgets (issue 27): a RateLimit with `localBudget: k` takes up to k units of a key at
// once (`ATMOST`), hands them out in the process without a round trip, and gives back what is
// unspent with RL.REFUND once it has been held for `hold / 2` (and at flush / close).
//
// The rule (the same in every package, for every algorithm and for a policy): a batch taken by a
// refill is stamped with `sent`, the clock read before the refill left; its units may be spent
// until `sent + hold / 2`, and what is left is given back then. A fixed window's batch lapses at
// the window's end instead when that end comes within the whole hold (`sent + hold`): nothing is
// given back (the count goes with the window; given back in the next window, the units would
// count for it); otherwise it is given back at `sent + hold / 2` like any other, at least
// hold / 2 before the window ends. The rule is `fallsDue`, held to the one the algorithms crate
// checks the promise with (`falls_due` in algorithms/src/budget_promise.rs) by
// clients/lua/conformance/budget.json, which test/budget-rule.test.js reads (docs/clients.md,
// Local budgets).
//
// Why half: RL.REFUND gives back the newest units the key holds, which may be another instance's.
// What stays counted can then be older than what was spent, by as long as the refunded units were
// held: the wait before spending and the delay of the refund add up, and together they must fit
// in `hold` for the promise (over any interval, all instances together admit at most what the
// limit admits over that interval lengthened by `hold`). A sliding log needs exactly that (with
// the whole hold for each, the algorithms crate's budget_promise test finds 11 admitted of 10);
// GCRA and the buckets, whose state is one number, would not, but get the same rule: one rule,
// and a refund up to hold/2 late costs them nothing. (For a sliding window or log, or a
// policy with such a rule, a refund late by x lengthens the interval by x.)
//
// Per key: the units held, in batches stamped with when they fall due (oldest spent first), the
// last refill's reply, and the requests waiting for a refill (one refill in flight per key; they
// are served in arrival order). Per limit: one FIFO of batches in the order they fall due (the
// order they were taken in: the same hold for all, and a fixed window's end is the same for every
// key) and one unref'd timer for the head: bounded work, no timer per key or per unit.
//
// The path of a request served locally is kept cheap (it is most requests): no closure, no
// object spread, no await; one decision object and one resolved promise per request.

// @ts-check
'use strict';

const { fixedResetAt, withResetAt } = require('./fields.cjs');
const { moreAfterMs } = require('./limits.cjs');

const MIN_DEFAULT_HOLD_MS = 10;

/** A policy's default hold: a quarter of a second (its rules' periods are not known here). */
const POLICY_HOLD_MS = 250;

/**
 * Whether a limit of `algorithm` (lower case; undefined for a policy) is a fixed window, whose
 * units lapse at the window's end when it comes within the hold (fallsDue).
 * @param {string | undefined} algorithm
 */
function lapsesAtWindowEnd(algorithm) {
  return algorithm === 'fixedwindow';
}

/**
 * The rule: the units of a refill sent at `at` (ms, the clock read before it left) under a
 * hold of `holdMs`, whose reply says `resetAfterMs`, fall `due` (spent before it; fractions of a
 * ms kept) and are given back then (`refund`), or, a fixed window's (`windowed`) when the window
 * ends within the whole hold, lapse at its end.
 * @param {boolean} windowed
 * @param {number} at
 * @param {number} holdMs
 * @param {number} resetAfterMs
 * @returns {{ due: number, refund: boolean }}
 */
function fallsDue(windowed, at, holdMs, resetAfterMs) {
  if (windowed && resetAfterMs > 0 && resetAfterMs <= holdMs) {
    return { due: at + resetAfterMs, refund: false };
  }
  return { due: at + holdMs / 2, refund: true };
}

/**
 * The default hold: a quarter of the limit's period or window (GCRA and the buckets: their
 * period; the windows and the log: the window; warm-up: its period), 250 ms for a policy, at
 * least 10 ms. Units are then spent within an eighth of the period (hold / 2) or given back.
 */
function defaultHoldMs(periodMs) {
  if (periodMs === undefined) return POLICY_HOLD_MS;
  return Math.max(MIN_DEFAULT_HOLD_MS, Math.floor(periodMs / 4));
}

class LocalBudget {
  /**
   * `limiter`: the RateLimit (its stats, logger, failMode, now, memory, name); `ask(key, atMost)`:
   * one refill, `[decision, more]` or a rejection (timeout and WAIT included); `refund(key, n)`:
   * RL.REFUND, the units given back. `windowed`: a fixed window, whose units lapse at its end
   * when it comes within the hold (given back after it, they would be taken off the next
   * window's count).
   */
  constructor({ limiter, k, holdMs, ask, refund, windowed }) {
    this.limiter = limiter;
    this.k = k;
    this.holdMs = holdMs;
    this.ask = ask;
    this.giveBack = refund;
    this.windowed = windowed;
    this.entries = new Map(); // key -> { batches, held, waiters, draining, last, more, moreMs }
    this.queue = []; // { key, entry, batch } in the order they fall due
    this.head = 0;
    this.timer = undefined;
    this.timerDue = Infinity;
    this.refunds = new Set(); // RL.REFUNDs in flight, for flush
    this.drains = new Set(); // refills in flight (with their waiters), for close
    this.closed = false;
  }

  get stats() {
    return this.limiter.stats;
  }

  #entry(key) {
    let e = this.entries.get(key);
    if (e === undefined) {
      e = { batches: [], held: 0, waiters: [], draining: false, last: undefined, more: undefined, moreMs: undefined };
      this.entries.set(key, e);
    }
    return e;
  }

  #forgetIfIdle(key, e) {
    if (e.held === 0 && e.waiters.length === 0 && !e.draining && this.entries.get(key) === e) this.entries.delete(key);
  }

  /**
   * A request of `cost` (1 to k) units: served from the budget (a promise already resolved, no
   * round trip), or after a refill.
   */
  take(key, cost) {
    const limiter = this.limiter;
    const now = limiter.now();
    const e = this.entries.get(key);
    if (e !== undefined) {
      const batches = e.batches;
      if (batches.length > 0 && batches[0].due <= now) this.#expire(key, e, now);
      if (e.held >= cost && e.waiters.length === 0) {
        const stats = limiter.stats;
        stats.localAdmitted += 1;
        stats.admitted += 1;
        return Promise.resolve(this.#spend(e, cost, true));
      }
    }
    const denied = this.#remembered(key, cost, now);
    if (denied !== undefined) return Promise.resolve(denied);
    const entry = e ?? this.#entry(key);
    return new Promise((resolve, reject) => {
      entry.waiters.push({ cost, resolve, reject });
      if (!entry.draining) this.#track(this.drains, this.#drain(key, entry));
    });
  }

  // A denial remembered (a refill granted nothing): refused locally until its retry time.
  // Not for a policy, as without a local budget (RL.POLICY.SET can change its rules unseen).
  #remembered(key, cost, now) {
    if (this.limiter.policy !== undefined) return undefined;
    const refusal = this.limiter.memory.refusal(key, cost, now, this.entries.get(key)?.held ?? 0);
    if (refusal === undefined) return undefined;
    this.stats.denied += 1;
    this.stats.deniedLocally += 1;
    return refusal;
  }

  // Serves the waiters of `key` in arrival order, one refill at a time.
  async #drain(key, e) {
    e.draining = true;
    let exhausted; // a refill of this drain that granted nothing: refuses those that do not fit
    // The waiter the last refill was for: it is served from that refill even when `hold / 2` is
    // shorter than the round trip (nothing expires in between), so that every refill that
    // grants something serves someone, and a short grant is followed by one that grants none.
    let refilledFor;
    try {
      while (e.waiters.length > 0) {
        const now = this.limiter.now();
        const w = e.waiters[0];
        if (w !== refilledFor) this.#expire(key, e, now);
        if (e.held >= w.cost) {
          e.waiters.shift();
          this.stats.admitted += 1;
          w.resolve(this.#spend(e, w.cost, false));
          continue;
        }
        const remembered = exhausted === undefined ? this.#remembered(key, w.cost, now) : undefined;
        if (exhausted !== undefined || remembered !== undefined) {
          e.waiters.shift();
          if (remembered !== undefined) {
            w.resolve(remembered);
          } else {
            this.stats.denied += 1;
            w.resolve(withResetAt({ ...exhausted, remaining: e.held, local: false }, fixedResetAt(exhausted)));
          }
          continue;
        }
        // At most k held: ask for what is missing (held < cost <= k, so at least 1).
        const want = this.k - e.held;
        refilledFor = w;
        this.stats.calls += 1;
        this.stats.refills += 1;
        let decision;
        let more;
        try {
          [decision, more] = await this.ask(key, want);
        } catch (error) {
          this.#failAll(key, e, error);
          break;
        }
        // The reset instant, fixed as the reply arrives (fields.cjs, RESET_AT), for a refusal the
        // memory keeps. (A decision served from the budget has none: its resetAfterMs is the
        // refill's, approximate, and it is kept free of anything but its fields.)
        withResetAt(decision, Date.now() + decision.resetAfterMs);
        const granted = decision.granted ?? 0;
        e.last = decision;
        e.more = more;
        // RateLimit's `t` for the decisions served from this reply (the reply alone tells it).
        e.moreMs = more === 'probe' ? undefined : moreAfterMs(more, decision);
        if (granted > 0) {
          this.#add(key, e, granted, now, decision);
        } else {
          const { granted: _, ...refusal } = decision;
          exhausted = withResetAt(refusal, fixedResetAt(decision));
          // Remembered from `now`, read before the refill left (see RateLimit.check).
          if (this.limiter.policy === undefined) this.limiter.memory.remember(key, refusal, undefined, now);
        }
      }
    } finally {
      e.draining = false;
      this.#forgetIfIdle(key, e);
    }
  }

  // A refill failed (Redis error or timeout): every waiter fails open or closed, one warning.
  #failAll(key, e, error) {
    const l = this.limiter;
    // What needs the module, on the script backend: the configuration's error, rejected.
    if (error?.name === 'ModuleRequiredError') {
      for (const w of e.waiters.splice(0)) w.reject(error);
      return;
    }
    this.stats.failures += 1;
    const passes = l.failMode === 'open';
    l.logger?.warn?.(
      `ratelimit: ${l.command} ... ATMOST (local budget refill) for ${JSON.stringify(l.redisKey(key))} failed ` +
        `(${error?.message ?? error}); fail ${l.failMode}: ${e.waiters.length} request(s) ${passes ? 'pass' : 'are refused'}`,
    );
    for (const w of e.waiters.splice(0)) {
      if (passes) this.stats.failOpen += 1;
      else this.stats.failClosed += 1;
      w.resolve({ failed: true, allowed: passes, error });
    }
  }

  // Units granted at `at` (read before the refill left, so never later than the server took
  // them): spendable until, and given back at, at + hold / 2; a fixed window's lapse at its end
  // instead when it comes within the whole hold (at + hold): nothing to give back, the window's
  // count goes with it.
  #add(key, e, n, at, reply) {
    const { due, refund } = fallsDue(this.windowed, at, this.holdMs, reply.resetAfterMs);
    const batch = { n, due, refund };
    e.batches.push(batch);
    e.held += n;
    this.stats.held += n;
    this.queue.push({ key, entry: e, batch });
    this.#schedule();
  }

  // Takes `cost` units, oldest first, and makes the decision: from the last reply, with
  // `remaining` = held + the server's, and `moreAfterMs` (RateLimit's `t`) where that reply tells
  // it (approximate while served locally).
  #spend(e, cost, local) {
    const batches = e.batches;
    let b = batches[0];
    if (b.n > cost) {
      b.n -= cost;
    } else {
      let left = cost;
      while (left > 0) {
        b = batches[0];
        const t = b.n < left ? b.n : left;
        b.n -= t;
        left -= t;
        if (b.n === 0) batches.shift();
      }
    }
    const held = e.held - cost;
    e.held = held;
    this.limiter.stats.held -= cost;
    const last = e.last;
    const d = {
      allowed: true,
      name: last.name,
      limit: last.limit,
      remaining: held + last.remaining,
      retryAfterMs: 0,
      resetAfterMs: last.resetAfterMs,
      windowSeconds: last.windowSeconds,
      local,
    };
    if (last.rule !== undefined) d.rule = last.rule;
    if (e.moreMs !== undefined) d.moreAfterMs = e.moreMs;
    return d;
  }

  // Batches of `key` due by `now`: given back (one RL.REFUND for all of them), or lapsed.
  #expire(key, e, now) {
    let n = 0;
    while (e.batches.length > 0 && e.batches[0].due <= now) {
      const b = e.batches.shift();
      if (b.refund) n += b.n;
      else this.stats.lapsed += b.n;
      e.held -= b.n;
      this.stats.held -= b.n;
      b.n = 0;
    }
    if (n > 0) this.#refund(key, n);
  }

  #refund(key, n) {
    const p = this.giveBack(key, n).then(
      (given) => {
        this.stats.refunded += given;
      },
      (error) => {
        this.stats.refundFailures += 1;
        this.limiter.logger?.warn?.(
          `ratelimit: RL.REFUND of ${n} unspent units for ${JSON.stringify(this.limiter.redisKey(key))} failed ` +
            `(${error?.message ?? error}); the limit gets them back by itself`,
        );
      },
    );
    this.#track(this.refunds, p);
  }

  #track(set, p) {
    set.add(p);
    p.finally(() => set.delete(p));
  }

  // One timer per limit, for the batch that falls due first; unref'd: it never keeps the
  // process alive (close or flush gives back what is held at shutdown).
  #schedule() {
    if (this.closed) return;
    while (this.head < this.queue.length && this.queue[this.head].batch.n === 0) this.head += 1;
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    if (this.head >= this.queue.length) {
      this.queue = [];
      this.head = 0;
      if (this.timer !== undefined) clearTimeout(this.timer);
      this.timer = undefined;
      this.timerDue = Infinity;
      return;
    }
    const due = this.queue[this.head].batch.due;
    if (this.timer !== undefined && this.timerDue <= due) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(() => this.#sweep(), Math.max(1, Math.ceil(due - this.limiter.now())));
    this.timer.unref?.();
  }

  #sweep() {
    this.timer = undefined;
    this.timerDue = Infinity;
    const now = this.limiter.now();
    while (this.head < this.queue.length && this.queue[this.head].batch.due <= now) {
      const { key, entry, batch } = this.queue[this.head];
      this.head += 1;
      if (batch.n > 0) {
        this.#expire(key, entry, now);
        this.#forgetIfIdle(key, entry);
      }
    }
    this.#schedule();
  }

  /** Gives back everything held now (RL.REFUND per key); resolves to the units given back. */
  async flush() {
    const before = this.stats.refunded;
    for (const [key, e] of this.entries) {
      const now = this.limiter.now();
      let n = 0;
      for (const b of e.batches.splice(0)) {
        if (b.refund || b.due > now) n += b.n;
        else this.stats.lapsed += b.n;
        b.n = 0;
      }
      this.stats.held -= e.held;
      e.held = 0;
      if (n > 0) this.#refund(key, n);
      this.#forgetIfIdle(key, e);
    }
    this.#schedule();
    while (this.refunds.size > 0) await Promise.allSettled([...this.refunds]);
    return this.stats.refunded - before;
  }

  /** No more local budgets; the refills in flight end, then everything held is given back. */
  async close() {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    while (this.drains.size > 0) await Promise.allSettled([...this.drains]);
    return this.flush();
  }
}

module.exports = { POLICY_HOLD_MS, defaultHoldMs, fallsDue, lapsesAtWindowEnd, LocalBudget };
