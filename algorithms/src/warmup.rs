//! RL.WARMUP: Guava's `SmoothWarmingUp` rate limiter (`RateLimiter.create(rate, warmup)`),
//! in exact integer arithmetic.
//!
//! The intuition: a service that has been idle has cold caches, so the limiter starts slow
//! and speeds up. Requests are spaced by an interval that depends on how "cold" the key is,
//! measured as *stored permits*: a fresh (idle) key holds `max` of them and is spaced by the
//! cold interval `c = coldfactor × s`; each request spends stored permits and the spacing falls
//! along a line to the stable interval `s = period / rate`, reached at `threshold` stored
//! permits; below it every permit costs `s`. Idle time gives permits back (cool-down) until the
//! key is cold again. A request is admitted when the schedule is paid (`next_free <= now`),
//! whatever its cost: later callers pay for it (Guava's pre-consumption, `tryAcquire`).
//!
//! The formulas (Guava's, docs/warmup.md): `threshold = warmup / (2s)`,
//! `max = threshold + 2 × warmup / (s + c)`, the spacing at `x` stored permits is
//! `f(x) = s` for `x <= threshold` and `s + (x - threshold)(c - s)/(max - threshold)` above;
//! taking `k` stored permits costs the area under `f` over `[stored - k, stored]`, and the
//! permits not stored cost `s` each. Cool-down adds `max / warmup` permits per unit of idle time.
//!
//! Exactness. With `s = P/R` (P the period in µs, R the rate) and `c = k·s`:
//! - time is kept in *ticks* of `1/R` µs, as GCRA keeps it: `s` is `P` ticks exactly;
//! - stored permits are kept scaled by `D = 2·P·(1+k)`: then `threshold·D = W·R·(1+k)`,
//!   `max·D = W·R·(5+k)` (W the warm-up in µs), and cool-down adds exactly `5+k` scaled
//!   permits per tick; all integers;
//! - a request of `cost` units costs `cost·P` ticks plus the area above the stable line,
//!   `(k-1)(v-u)(v+u) / (16·W·R·(1+k))` ticks, where `[u, v]` is the part of the scaled stored
//!   range it spends that lies above the threshold (measured from it). That one term is
//!   rounded up to a whole tick: the only rounding, never in the favour of the request it
//!   prices, and the reference model in the tests rounds the same way. (Over a sequence it
//!   shortens the idle time after the request, so less cool-down is credited and a later
//!   request can cost a fraction of a tick less: under a µs against Guava's formulas unrounded,
//!   docs/warmup.md.)
//!
//! Sizes: `max·D < 2^93` for the largest parameters, and the area's numerator can reach
//! `2^190`, so the product is taken 256 bits wide when it does not fit in u128
//! ([`mul_div_ceil`]).
//!
//! Changing parameters (as Guava's `setRate` does): the state is first brought up to now
//! under the parameters it was written with; the stored permits keep their fraction of `max`
//! (rounded up: more stored permits is never faster), and the time still owed converts
//! through the stable interval, as GCRA's TAT does (rounded up). An admitted request of any
//! cost leaves `next_free` after now, so at one instant at most one request is admitted
//! under any sequence of parameter sets (the limit is 1).
//!
//! Until a request under the new parameters is admitted, nothing is written, and each call
//! converts anew at its own instant. A positive owed time converts to a positive one, so a
//! request is admitted once the key's own schedule is paid, whatever the new rate: that is a
//! refusal's `retry_after`; and a call that writes nothing finds the key cold once, besides,
//! its stored permits convert to the new maximum (`State::own_times`). Unlike `setRate`,
//! which converts once and keeps the next free time as a time, a refused call here commits
//! nothing, so what it says is what later calls find (issue 22).

use super::gcra;
use super::ranges::MAX_COUNT;
use super::{keep, Algorithm, Decision, Span};

/// RL.WARMUP's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Permits per period at the stable rate.
    pub rate: u64,
    /// The period `rate` is counted over.
    pub period_ms: u64,
    /// How long the limiter takes to go from cold to the stable rate (and back when idle).
    pub warmup_ms: u64,
    /// The cold interval as a multiple of the stable one, 2 to 10.
    pub cold_factor: u64,
}

/// The default cold factor, Guava's.
pub const DEFAULT_COLD_FACTOR: u64 = 3;
/// The accepted cold factors.
pub const COLD_FACTORS: std::ops::RangeInclusive<u64> = 2..=10;

impl Params {
    /// R: ticks per µs.
    fn rate(&self) -> u128 {
        u128::from(self.rate.max(1))
    }

    /// P: the stable interval in ticks (the period in µs).
    fn interval(&self) -> u128 {
        u128::from(self.period_ms.max(1)) * 1000
    }

    fn warmup_us(&self) -> u128 {
        u128::from(self.warmup_ms.max(1)) * 1000
    }

    fn k(&self) -> u128 {
        u128::from(
            self.cold_factor
                .clamp(*COLD_FACTORS.start(), *COLD_FACTORS.end()),
        )
    }

    /// D: scaled stored permits per permit.
    pub fn scale(&self) -> u128 {
        2 * self.interval() * (1 + self.k())
    }

    // The products below stay under 2^93 for the parameters the grammar accepts (counts to
    // 10^12, durations to ten years); they saturate for any other input rather than panic.

    /// threshold × D = W·R·(1+k).
    fn threshold(&self) -> u128 {
        self.warmup_us()
            .saturating_mul(self.rate())
            .saturating_mul(1 + self.k())
    }

    /// max × D = W·R·(5+k): a cold key's stored permits.
    pub fn max_stored(&self) -> u128 {
        self.warmup_us()
            .saturating_mul(self.rate())
            .saturating_mul(5 + self.k())
    }

    /// Scaled permits that cool-down adds per tick.
    fn cooldown(&self) -> u128 {
        5 + self.k()
    }

    /// 16·W·R·(1+k): the denominator of the area above the stable line, in ticks.
    fn area_den(&self) -> u128 {
        self.threshold().saturating_mul(16)
    }

    fn gcra(&self) -> gcra::Params {
        gcra::Params {
            burst: 1,
            rate: self.rate,
            period_ms: self.period_ms,
        }
    }

    /// A clock reading in ticks.
    fn ticks(&self, now_us: u64) -> u128 {
        u128::from(now_us).saturating_mul(self.rate())
    }
}

/// What a key stores: how cold it is, and when the next request may be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// Stored permits, scaled by [`Params::scale`] (at most [`Params::max_stored`]).
    pub stored: u128,
    /// When the next request may be admitted, in ticks of 1/rate µs since the Unix epoch.
    pub next_free: u128,
}

impl State {
    /// A fresh key at `now`: cold, nothing owed.
    fn fresh(params: &Params, now: u128) -> State {
        State {
            stored: params.max_stored(),
            next_free: now,
        }
    }

    /// Brought up to `now` (ticks) under `params`: idle time since `next_free` gives permits
    /// back (Guava's `resync`).
    fn resynced(&self, params: &Params, now: u128) -> State {
        let max = params.max_stored();
        let stored = self.stored.min(max);
        match now.checked_sub(self.next_free).filter(|&idle| idle > 0) {
            Some(idle) => State {
                stored: stored
                    .saturating_add(idle.saturating_mul(params.cooldown()))
                    .min(max),
                next_free: now,
            },
            None => State {
                stored,
                next_free: self.next_free,
            },
        }
    }

    /// The state under `to` as of `now_us`, for a state written under `from`.
    fn converted(&self, from: &Params, to: &Params, now_us: u64) -> State {
        let now = from.ticks(now_us);
        let here = self.resynced(from, now);
        if from == to {
            return here;
        }
        let next_free = gcra::State {
            tat: here.next_free,
        }
        .converted(&from.gcra(), &to.gcra(), now_us);
        let (old_max, new_max) = (from.max_stored(), to.max_stored());
        let stored = if old_max == new_max {
            here.stored
        } else {
            mul_div_ceil(here.stored, new_max, old_max).min(new_max)
        };
        State { stored, next_free }
    }

    /// For a key stored under `own` parameters, read by a call under `to` that writes
    /// nothing, as of `now_us`: how long until a request under `to` is admitted, and until
    /// the key is fresh under `to` (cold, nothing owed), on the key's own schedule, which
    /// later calls convert anew at their instants.
    ///
    /// Converted at `t`, the time owed stays owed (a positive owed time converts to a positive
    /// one) and the stored permits `x` become `ceil(x × N / M)` of the new maximum `N` (`M`
    /// the old one; capped at `N`). So a request is admitted once the own schedule is paid
    /// (`next_free <= t`), and the key is fresh once, besides, `x × N > (N - 1) × M`, that
    /// is `x >= M - ceil(M / N) + 1` (`M` itself when `N >= M`), which cool-down reaches at
    /// `5 + k` scaled permits per tick after `next_free`.
    fn own_times(&self, own: &Params, to: &Params, now_us: u64) -> (Span, Span) {
        let now = own.ticks(now_us);
        let here = self.resynced(own, now);
        let owed = here.next_free.saturating_sub(now);
        let (old_max, new_max) = (own.max_stored(), to.max_stored());
        let cold_enough = old_max - old_max.div_ceil(new_max.max(1)) + 1;
        let to_cold = cold_enough
            .saturating_sub(here.stored)
            .div_ceil(own.cooldown());
        (
            Span::new(owed, own.rate()),
            Span::new(owed.saturating_add(to_cold), own.rate()),
        )
    }

    /// The state a request sees at `now_us` under `params`.
    fn at(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> State {
        let now = params.ticks(now_us);
        match stored {
            Some((old, state)) => state.converted(old, params, now_us),
            None => State::fresh(params, now),
        }
        .resynced(params, now)
    }
}

/// What a request of `cost` units spends from `stored` scaled permits, and the time it
/// costs in ticks: `cost × s` plus the area above the stable line, rounded up.
fn spend(params: &Params, stored: u128, cost: u64) -> (u128, u128) {
    let wanted = u128::from(cost).saturating_mul(params.scale());
    let taken = wanted.min(stored);
    let threshold = params.threshold();
    let extra = match stored.checked_sub(threshold) {
        Some(v) if v > 0 => {
            let u = (stored - taken).max(threshold) - threshold;
            let k = params.k();
            mul_div_ceil(
                (k - 1).saturating_mul(v - u),
                v.saturating_add(u),
                params.area_den(),
            )
        }
        _ => 0,
    };
    let stable = u128::from(cost).saturating_mul(params.interval());
    (taken, stable.saturating_add(extra))
}

/// `ceil(a × b / d)`, exact for any u128 operands (the product taken 256 bits wide when it
/// does not fit), saturating at `u128::MAX`; a zero `d` is taken as 1.
pub fn mul_div_ceil(a: u128, b: u128, d: u128) -> u128 {
    let d = d.max(1);
    if let Some(p) = a.checked_mul(b) {
        return p / d + u128::from(!p.is_multiple_of(d));
    }
    let (hi, lo) = mul_wide(a, b);
    if hi >= d {
        return u128::MAX;
    }
    // Long division of (hi, lo) by d, one bit at a time; hi < d keeps the quotient in u128.
    let mut rem = hi;
    let mut q: u128 = 0;
    for i in (0..128).rev() {
        let carry = rem >> 127;
        rem = (rem << 1) | ((lo >> i) & 1);
        q <<= 1;
        if carry == 1 || rem >= d {
            rem = rem.wrapping_sub(d);
            q |= 1;
        }
    }
    q.saturating_add(u128::from(rem != 0))
}

/// The 256-bit product of `a` and `b`, as (high, low) halves.
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    const MASK: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & MASK);
    let (b1, b0) = (b >> 64, b & MASK);
    let low = a0 * b0;
    let mid1 = a0 * b1;
    let mid2 = a1 * b0;
    let high = a1 * b1;
    // Sum the middle terms with the carries, 64 bits at a time.
    let mid = (low >> 64) + (mid1 & MASK) + (mid2 & MASK);
    let lo = (low & MASK) | (mid << 64);
    let hi = high + (mid1 >> 64) + (mid2 >> 64) + (mid >> 64);
    (hi, lo)
}

/// RL.WARMUP's algorithm: Guava's `SmoothWarmingUp`, in exact integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warmup;

/// The decision for `state` (as a request sees it at `now`) after an admission or not.
fn decide(params: &Params, before: &State, after: &State, now: u128, allowed: bool) -> Decision {
    let rate = params.rate();
    let owed = after.next_free.saturating_sub(now);
    let to_cold = params
        .max_stored()
        .saturating_sub(after.stored)
        .div_ceil(params.cooldown());
    Decision {
        allowed,
        limit: 1,
        remaining: u64::from(owed == 0),
        retry_after: Some(if allowed {
            Span::ZERO
        } else {
            Span::new(before.next_free.saturating_sub(now), rate)
        }),
        reset_after: Span::new(owed.saturating_add(to_cold), rate),
        delay: None,
    }
}

impl Algorithm for Warmup {
    type Params = Params;
    type State = State;

    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        match stored {
            Some((old, state)) if old != params => changed(params, old, state, now_us, cost, write),
            stored => decide_check(params, stored, now_us, cost, write),
        }
    }

    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        self::largest_cost(params, stored, now_us)
    }

    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        self::refund(params, state, now_us, units)
    }

    /// A cold factor in [`COLD_FACTORS`], and no more stored permits than a cold key holds.
    fn is_valid(params: &Params, state: &State) -> bool {
        COLD_FACTORS.contains(&params.cold_factor) && state.stored <= params.max_stored()
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::Warmup(snapshot(params, state, now_us))
    }
}

/// [`Algorithm::check`]: the state as a request under `params` sees it (converted when the
/// key was stored under others), and the decision on it.
#[inline(always)]
fn decide_check(
    params: &Params,
    stored: Option<(&Params, &mut State)>,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    let now = params.ticks(now_us);
    let (before, state) = match stored {
        Some((old, state)) => (State::at(params, Some((old, &*state)), now_us), Some(state)),
        None => (State::at(params, None, now_us), None),
    };
    let allowed = before.next_free <= now;
    let after = if allowed {
        let (taken, wait) = spend(params, before.stored, cost);
        State {
            stored: before.stored - taken,
            next_free: before.next_free.saturating_add(wait),
        }
    } else {
        before
    };
    let decision = decide(params, &before, &after, now, allowed);
    let fresh = if allowed && write {
        keep(state, after)
    } else {
        None
    };
    (decision, fresh)
}

/// [`Algorithm::check`] on a key stored under other parameters (`own`): the decision is
/// [`decide_check`]'s, but a call that writes nothing leaves the key as it is, so its times
/// are on the key's own schedule ([`State::own_times`]). Out of line: the common request,
/// under the key's own parameters, never comes here.
#[inline(never)]
fn changed(
    params: &Params,
    own: &Params,
    state: &mut State,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    let (retry, reset) = state.own_times(own, params, now_us);
    let (mut decision, fresh) = decide_check(params, Some((own, state)), now_us, cost, write);
    if !(decision.allowed && cost > 0) {
        decision.reset_after = reset;
        if !decision.allowed {
            decision.retry_after = Some(retry);
        }
    }
    (decision, fresh)
}

/// The largest COST a DRYRUN at `now_us` admits: any (10^12) while the schedule is paid,
/// none while it is not.
pub fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
    let state = State::at(params, stored, now_us);
    if state.next_free <= params.ticks(now_us) {
        MAX_COUNT
    } else {
        0
    }
}

/// Gives back up to `units` of what the key has taken, `state` being written under `params`:
/// the schedule moves back by one stable interval per unit, not before now. Returns the units
/// given back: `min(units, ceil(owed / s))` where `owed = next_free - now` (0 when nothing is
/// owed). The stored permits stay as they are: the cold premium those units paid is not
/// given back (the exact premium depends on the order of past requests; keeping it is never
/// in the caller's favour), and the key is not made colder either.
pub fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
    let now = params.ticks(now_us);
    let Some(owed) = state.next_free.checked_sub(now).filter(|&o| o > 0) else {
        return 0;
    };
    let interval = params.interval();
    let given = u128::from(units).min(owed.div_ceil(interval));
    state.next_free = state
        .next_free
        .saturating_sub(given.saturating_mul(interval))
        .max(now);
    u64::try_from(given).unwrap_or(u64::MAX)
}

/// A key's parameters and state as of one instant (brought up to it: cool-down included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// Stored permits, scaled: permits = `stored / scale`.
    pub stored: u128,
    /// Scaled stored permits per permit.
    pub scale: u128,
    /// A cold key's stored permits, scaled.
    pub max_stored: u128,
    /// Stored permits in millionths, rounded down (saturating): what RL.INSPECT shows.
    pub stored_micropermits: u64,
    /// A cold key's stored permits in millionths, rounded down (saturating).
    pub max_micropermits: u64,
    /// When the next request may be admitted, whole µs since the Unix epoch, rounded up.
    pub next_free_us: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and state as of `now_us`, cooled down to it (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    let at = State::at(params, Some((params, state)), now_us);
    let micro = |scaled: u128| {
        u64::try_from(scaled.saturating_mul(1_000_000) / params.scale()).unwrap_or(u64::MAX)
    };
    Snapshot {
        stored_micropermits: micro(at.stored),
        max_micropermits: micro(params.max_stored()),
        params: *params,
        stored: at.stored,
        scale: params.scale(),
        max_stored: params.max_stored(),
        next_free_us: Span::new(at.next_free, params.rate()).ceil_us(),
        now: Warmup::view_now(params, state, now_us),
    }
}

#[cfg(test)]
mod tests;
