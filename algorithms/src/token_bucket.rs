//! The token bucket, refilled continuously or (with `INTERVAL`) a whole amount at a time.
//!
//! The intuition: a bucket holds up to `capacity` tokens and starts full. A request of
//! `cost` units takes `cost` tokens if the bucket holds that many, and is denied otherwise
//! (taking nothing). Tokens come back over time at `refill_amount` per `refill_period`, and
//! what would overflow the bucket is lost. So a key admits a burst of `capacity` at once, and
//! in the long run `refill_amount` per `refill_period`.
//!
//! Two ways to refill:
//! - **Continuous** (the default): the tokens flow back smoothly. After `e` µs the bucket has
//!   gained `refill_amount × e / period_us` tokens, fractions included: 4 per minute means one
//!   token every 15 s, and 7.5 s after a request half a token is already back.
//! - **`INTERVAL`**: the tokens come back in whole batches: `refill_amount` at once at every
//!   full `refill_period` since the last refill. The phase is anchored at the request that
//!   creates the key (its first refill is one period later) and moves by whole periods, so the
//!   refills keep falling on the same beat however the requests arrive.
//!
//! ## Exactness
//!
//! Continuous refills make fractional tokens (3 per second is a token every 333333.3 µs), so
//! the bucket counts in units of `1 / period_us` of a token: `capacity` is `capacity ×
//! period_us` units, a request takes `cost × period_us` units, and `e` µs refill exactly
//! `refill_amount × e` units. Every comparison is exact integer arithmetic in u128 (at most
//! about 2^88 for the largest counts and periods that parse). A span that brings back `d`
//! units is `d / refill_amount` µs, reported as that exact fraction ([`Span`]). The INTERVAL
//! bucket keeps the same units but only ever holds whole tokens (multiples of `period_us`).
//!
//! ## The reply
//!
//! With `tokens` the bucket's content now (after refilling up to now):
//! - admitted when `tokens >= cost`; `limit = capacity`; `remaining = floor(tokens)` after
//!   the request;
//! - continuous: `retry_after = (cost - tokens) / refill_amount × period` when denied, and
//!   `reset_after = (capacity - tokens) / refill_amount × period`, the time until full;
//! - INTERVAL: when denied, `retry_after` is the time until the `k`-th next refill, `k =
//!   ceil((cost - tokens) / refill_amount)`; `reset_after` is the time until the refill that
//!   fills the bucket (zero when full);
//! - `retry_after` is `None` when `cost > capacity`: the bucket can never hold that much.
//!
//! A full bucket is a fresh key: it decides exactly like one, except that an INTERVAL key
//! keeps its phase. When the storage layer lets a full key expire, the next request anchors a
//! new phase at its own time, which only ever moves the next refill later.
//!
//! ## The promise
//!
//! Over any span `[t0, t1]`, the units admitted are at most `capacity` (what the bucket could
//! hold at `t0`) plus what refilled in between: continuous, `floor(refill_amount × (t1 - t0)
//! / period)`; INTERVAL, `refill_amount ×` the number of refills (boundaries counted from the
//! anchor) in `(t0, t1]`.
//!
//! ## Changing parameters
//!
//! When a key's stored parameters differ from the request's, the bucket is first refilled up
//! to now under the OLD parameters, then converted, never in the caller's favour:
//! - the tokens are clamped to the new capacity (a larger capacity does not add tokens);
//! - a new period changes the unit, and the tokens are rescaled rounding DOWN;
//! - a new `refill_amount` simply refills at the new rate from now on;
//! - continuous to INTERVAL keeps the whole tokens (the fraction is dropped) and anchors the
//!   phase at now: the first batch comes one new period later;
//! - INTERVAL to continuous keeps the tokens and refills continuously from now (the part of a
//!   period since the last refill is forfeit);
//! - INTERVAL with a new period also anchors the phase at now; INTERVAL with the same period
//!   keeps its phase (the next boundary brings the new `refill_amount`).
//!
//! A full bucket converts to a fresh key, under any parameters: the storage layer lets a key
//! expire once it is full (its TTL is the time until full), and the next call finds none.
//!
//! Until a request is admitted under the new parameters, nothing is written: each call
//! converts anew at its own time, with the old parameters governing the refill up to then.
//! So a call that writes nothing (refused, COST 0, or a DRYRUN of either) under the new
//! parameters tells the times on the key's own bucket: a request of `cost` fits once the
//! conversion made then holds `cost` tokens, which is when the own bucket holds them (the
//! rescaling rounds down by less than a unit of the new period, never a whole token), or
//! is full (a fresh key, for a cost above the old capacity); the key is fresh once the own
//! bucket holds the new capacity, or is full (`State::own_wait`). An admitted request's
//! times are on the bucket it writes. Every reply's `retry_after` and `reset_after` are
//! thus what later calls find (issue 22).
//!
//! A clock that goes backwards (a reading before the stored instant) refills nothing and
//! never moves the stored instant back, so no time is refilled twice.

use super::{keep, Algorithm, Decision, Span};

/// RL.TOKENBUCKET's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// The most tokens the bucket holds, and the limit: a fresh key starts full.
    pub capacity: u64,
    /// Tokens that come back per refill period.
    pub refill_amount: u64,
    /// How often `refill_amount` comes back, in milliseconds (1 ms to ten years).
    pub refill_period_ms: u64,
    /// Refill the whole `refill_amount` at each full period instead of continuously.
    pub interval: bool,
}

impl Params {
    /// The refill period in µs: also the number of units one token is counted in.
    fn period_us(&self) -> u128 {
        u128::from(self.refill_period_ms.max(1)).saturating_mul(1000)
    }

    fn amount(&self) -> u128 {
        u128::from(self.refill_amount.max(1))
    }

    /// `tokens` whole tokens, in units of `1 / period_us` of a token.
    fn scaled(&self, tokens: u64) -> u128 {
        u128::from(tokens).saturating_mul(self.period_us())
    }

    /// A full bucket, in units.
    fn full(&self) -> u128 {
        self.scaled(self.capacity)
    }
}

/// The bucket. Valid values: `scaled_tokens <= capacity × period_us` (with `period_us =
/// refill_period_ms × 1000`), and with INTERVAL also `scaled_tokens % period_us == 0`;
/// `updated_us` may be any instant. Anything else (a corrupted RDB) is clamped to the
/// capacity and, with INTERVAL, rounded down to whole tokens when read; it never panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The tokens in the bucket at `updated_us`, in units of `1 / period_us` of a token
    /// (tokens × period_us), so that a continuous refill never loses a fraction.
    pub scaled_tokens: u128,
    /// Continuous: the instant (µs since the Unix epoch) `scaled_tokens` was computed at.
    /// INTERVAL: the last refill boundary, i.e. the phase anchor; the next refill is at
    /// `updated_us + period_us`.
    pub updated_us: u64,
}

impl State {
    /// A fresh key at `now_us`: full, and (INTERVAL) its phase anchored at this request.
    fn fresh(params: &Params, now_us: u64) -> State {
        State {
            scaled_tokens: params.full(),
            updated_us: now_us,
        }
    }

    /// The bucket refilled up to `now_us` under `p`. A reading before `updated_us` refills
    /// nothing and leaves `updated_us` where it is.
    fn refilled(&self, p: &Params, now_us: u64) -> State {
        let period = p.period_us();
        let full = p.full();
        let tokens = self.scaled_tokens.min(full);
        let elapsed_us = now_us.saturating_sub(self.updated_us);
        if p.interval {
            let whole = tokens - tokens % period;
            let periods = u128::from(elapsed_us) / period;
            let refill = periods.saturating_mul(p.amount()).saturating_mul(period);
            // At most `elapsed_us`, so it fits.
            let advanced_us = u64::try_from(periods.saturating_mul(period)).unwrap_or(elapsed_us);
            State {
                scaled_tokens: whole.saturating_add(refill).min(full),
                updated_us: self.updated_us.saturating_add(advanced_us),
            }
        } else {
            let refill = p.amount().saturating_mul(u128::from(elapsed_us));
            State {
                scaled_tokens: tokens.saturating_add(refill).min(full),
                updated_us: self.updated_us.max(now_us),
            }
        }
    }

    /// A bucket already refilled up to `now_us` under `old`, converted to `new` (see the
    /// module doc): rescaled down, re-anchored where the mode or the beat changes, clamped.
    fn converted(&self, old: &Params, new: &Params, now_us: u64) -> State {
        if old == new {
            return *self;
        }
        if self.scaled_tokens >= old.full() {
            // Full under its own parameters: a fresh key, as the storage layer lets it expire
            // then (its TTL is the time until full) and the next request finds none.
            return State::fresh(new, self.updated_us.max(now_us));
        }
        let (old_period, new_period) = (old.period_us(), new.period_us());
        let mut tokens = self.scaled_tokens;
        if old_period != new_period {
            let whole = (tokens / old_period).saturating_mul(new_period);
            let frac = (tokens % old_period).saturating_mul(new_period) / old_period;
            tokens = whole.saturating_add(frac);
        }
        let now_or_later = self.updated_us.max(now_us);
        let updated_us = match (old.interval, new.interval) {
            (false, true) => {
                tokens -= tokens % new_period;
                now_or_later
            }
            (true, false) => now_or_later,
            (true, true) if old_period != new_period => now_or_later,
            _ => self.updated_us,
        };
        State {
            scaled_tokens: tokens.min(new.full()),
            updated_us,
        }
    }

    /// For this bucket, refilled up to `now_us` under the `own` parameters it is stored with
    /// and read by a call under other parameters that writes nothing: how long until the
    /// conversion made then finds `tokens` whole tokens (a request of that cost admitted, or
    /// with the new capacity, the key fresh).
    ///
    /// Converted, `x` units of the old bucket become `floor(x × P' / P)` units of the new one
    /// (whole tokens with INTERVAL), which hold `tokens` whole tokens exactly when `x >=
    /// tokens × P`; and a full old bucket is a fresh key under any parameters. So it is the
    /// time until the own bucket holds `min(tokens, own capacity)` tokens, refilling under
    /// its own parameters.
    fn own_wait(&self, own: &Params, tokens: u64, now_us: u64) -> Span {
        self.time_until(own, own.scaled(tokens.min(own.capacity)), now_us)
    }

    /// How long from `now_us` until this bucket (refilled up to `now_us`) holds `target`
    /// units, `target` being at most full; zero when it already does.
    #[inline(always)]
    fn time_until(&self, p: &Params, target: u128, now_us: u64) -> Span {
        if self.scaled_tokens >= target {
            return Span::ZERO;
        }
        let deficit = target - self.scaled_tokens;
        // After a clock step back, the bucket's content is as of an instant still ahead.
        let ahead_us = u128::from(self.updated_us.saturating_sub(now_us));
        if p.interval {
            let period = p.period_us();
            let refills = deficit.div_ceil(period).div_ceil(p.amount());
            let at_us = u128::from(self.updated_us).saturating_add(refills.saturating_mul(period));
            Span::new(at_us.saturating_sub(u128::from(now_us)), 1)
        } else {
            let amount = p.amount();
            Span::new(
                ahead_us.saturating_mul(amount).saturating_add(deficit),
                amount,
            )
        }
    }
}

/// RL.TOKENBUCKET's algorithm: [`Algorithm::check`] on the tokens a key holds.
///
/// # Example
///
/// A bucket of ten refilled one a second, emptied at once: 2.5 s later two whole tokens
/// are back, so a request of three is refused for the half second until the third, and one
/// of two is admitted. (With `interval` the tokens would come back a whole second's worth at
/// a time, on the second after the bucket's first request.)
///
/// ```
/// use ratelimit_algorithms::token_bucket::{Params, TokenBucket};
/// use ratelimit_algorithms::{Algorithm, Span};
///
/// let params = Params { capacity: 10, refill_amount: 1, refill_period_ms: 1000, interval: false };
/// let t0 = 1_700_000_000_000_000; // µs since the Unix epoch
/// let (empty, state) = TokenBucket::check(&params, None, t0, 10, true);
/// assert_eq!((empty.allowed, empty.remaining), (true, 0));
///
/// let mut state = state.expect("an admitted request makes the key's state");
/// let later = t0 + 2_500_000;
/// let (three, _) = TokenBucket::check(&params, Some((&params, &mut state)), later, 3, true);
/// assert_eq!((three.allowed, three.remaining), (false, 2));
/// assert_eq!(three.retry_after, Some(Span::from_us(500_000)));
///
/// let (two, _) = TokenBucket::check(&params, Some((&params, &mut state)), later, 2, true);
/// assert_eq!((two.allowed, two.remaining), (true, 0));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket;

impl Algorithm for TokenBucket {
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
            Some((_, state)) => decide(
                params,
                state.refilled(params, now_us),
                Some(state),
                now_us,
                cost,
                write,
            ),
            None => decide(
                params,
                State::fresh(params, now_us),
                None,
                now_us,
                cost,
                write,
            ),
        }
    }

    /// The whole tokens in the bucket now (refilled, then converted as a check converts it).
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        let bucket = match stored {
            Some((old, state)) => state.refilled(old, now_us).converted(old, params, now_us),
            None => State::fresh(params, now_us),
        };
        u64::try_from(bucket.scaled_tokens / params.period_us()).unwrap_or(u64::MAX)
    }

    /// What is taken: the tokens missing from a full bucket once refilled up to now,
    /// `ceil(capacity - tokens)`, a token partly refilled counting as a whole one (as
    /// `remaining` counts it). Giving back `k` of them puts exactly `k` tokens back, never
    /// above the capacity; an INTERVAL bucket keeps its phase.
    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        let bucket = state.refilled(params, now_us);
        let full = params.full();
        let period = params.period_us();
        let given = full
            .saturating_sub(bucket.scaled_tokens)
            .div_ceil(period)
            .min(u128::from(units));
        if given == 0 {
            return 0;
        }
        *state = State {
            // given × period <= what is missing + period: no overflow.
            scaled_tokens: (bucket.scaled_tokens + given * period).min(full),
            updated_us: bucket.updated_us,
        };
        u64::try_from(given).unwrap_or(u64::MAX)
    }

    /// The bucket holds at most `capacity` tokens.
    fn is_valid(params: &Params, state: &State) -> bool {
        let full = u128::from(params.capacity) * u128::from(params.refill_period_ms) * 1000;
        state.scaled_tokens <= full
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::TokenBucket(snapshot(params, state, now_us))
    }
}

/// [`Algorithm::check`] on `bucket`, the key's bucket as of now under `params` (refilled, and
/// converted when it was stored under others; a fresh one for a missing key), `stored_state`
/// being where the key keeps it: its times are on the bucket the request leaves.
#[inline(always)]
fn decide(
    params: &Params,
    bucket: State,
    stored_state: Option<&mut State>,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    let need = params.scaled(cost);
    let allowed = bucket.scaled_tokens >= need;
    let after = State {
        scaled_tokens: if allowed {
            bucket.scaled_tokens - need
        } else {
            bucket.scaled_tokens
        },
        updated_us: bucket.updated_us,
    };
    let retry_after = if allowed {
        Some(Span::ZERO)
    } else {
        (cost <= params.capacity).then(|| bucket.time_until(params, need, now_us))
    };
    let remaining = after.scaled_tokens / params.period_us();
    let decision = Decision {
        allowed,
        limit: params.capacity,
        remaining: u64::try_from(remaining).unwrap_or(u64::MAX),
        retry_after,
        reset_after: after.time_until(params, params.full(), now_us),
        delay: None,
    };
    let fresh = if allowed && write {
        keep(stored_state, after)
    } else {
        None
    };
    (decision, fresh)
}

/// [`Algorithm::check`] on a key stored under other parameters (`own`) than the request's.
/// The decision is [`decide`]'s; but a call that writes nothing (refused, or of no units)
/// leaves the key on its own schedule, and later calls convert it anew at their own instant,
/// so its times are read on the key's own bucket ([`State::own_wait`]). An admitted request's
/// times are on the bucket it writes. Out of line: the common request, under the key's own
/// parameters, never comes here.
#[inline(never)]
fn changed(
    params: &Params,
    own: &Params,
    state: &mut State,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    let bucket = state.refilled(own, now_us);
    let (mut decision, fresh) = decide(
        params,
        bucket.converted(own, params, now_us),
        Some(state),
        now_us,
        cost,
        write,
    );
    if !(decision.allowed && cost > 0) {
        if !decision.allowed {
            decision.retry_after =
                (cost <= params.capacity).then(|| bucket.own_wait(own, cost, now_us));
        }
        decision.reset_after = bucket.own_wait(own, params.capacity, now_us);
    }
    (decision, fresh)
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// Whole tokens stored (as of `updated_us`, not refilled to now).
    pub tokens: u64,
    /// The instant the stored tokens are counted at: the last refill with `interval`.
    pub updated_us: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and tokens as of `now_us` (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    let tokens = state.scaled_tokens / params.period_us();
    Snapshot {
        params: *params,
        tokens: u64::try_from(tokens).unwrap_or(u64::MAX),
        updated_us: state.updated_us,
        now: TokenBucket::view_now(params, state, now_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, peek, step, summary, Key};
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000; // a clock reading in µs
    const S: u64 = 1_000_000; // a second in µs

    fn params(capacity: u64, refill_amount: u64, refill_period_ms: u64) -> Params {
        Params {
            capacity,
            refill_amount,
            refill_period_ms,
            interval: false,
        }
    }

    fn interval(capacity: u64, refill_amount: u64, refill_period_ms: u64) -> Params {
        Params {
            interval: true,
            ..params(capacity, refill_amount, refill_period_ms)
        }
    }

    /// Replays requests (µs since T0, cost) on one key; returns each decision.
    fn replay(p: &Params, requests: &[(u64, u64)]) -> Vec<Decision> {
        testing::replay::<TokenBucket>(p, T0, requests)
    }

    /// The key after some requests.
    fn key_after(p: &Params, requests: &[(u64, u64)]) -> Key<TokenBucket> {
        testing::key_after::<TokenBucket>(p, T0, requests)
    }

    /// The same length of time, whatever the fraction's form.
    fn same(a: Option<Span>, b: Option<Span>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => a.num * b.den == b.num * a.den,
            (a, b) => a == b,
        }
    }

    /// The worked example of the docs: capacity 4, 4 per minute: four pass at t=0, the fifth waits
    /// 15 s.
    #[test]
    fn four_per_minute_admits_four_then_waits_fifteen_seconds() {
        let p = params(4, 4, 60_000);
        let got: Vec<_> = replay(&p, &[(0, 1); 5]).iter().map(summary).collect();
        assert_eq!(
            got,
            vec![
                (true, 4, 3, 0, 15_000),
                (true, 4, 2, 0, 30_000),
                (true, 4, 1, 0, 45_000),
                (true, 4, 0, 0, 60_000),
                (false, 4, 0, 15_000, 60_000),
            ]
        );
        // The retry is exact, and the request passes then, not a microsecond before.
        let d = replay(&p, &[(0, 4), (0, 1)]);
        assert!(same(d[1].retry_after, Some(Span::from_us(15 * S))));
        let key = key_after(&p, &[(0, 4)]);
        assert!(!peek::<TokenBucket>(&p, &key, T0 + 15 * S - 1, 1).allowed);
        let later = peek::<TokenBucket>(&p, &key, T0 + 15 * S, 1);
        assert_eq!(summary(&later), (true, 4, 0, 0, 60_000));
    }

    /// The worked example of the docs: INTERVAL, capacity 3, 3 per minute.
    #[test]
    fn interval_refills_the_whole_amount_on_the_minute() {
        let p = interval(3, 3, 60_000);
        let requests = [(0, 1), (10 * S, 1), (30 * S, 1), (55 * S, 1), (60 * S, 1)];
        let got: Vec<_> = replay(&p, &requests).iter().map(summary).collect();
        assert_eq!(
            got,
            vec![
                (true, 3, 2, 0, 60_000),
                (true, 3, 1, 0, 50_000),
                (true, 3, 0, 0, 30_000),
                (false, 3, 0, 5_000, 5_000),
                (true, 3, 2, 0, 60_000),
            ]
        );
        // Full again at 60 s: a cost-0 look shows a fresh bucket.
        let key = key_after(&p, &requests[..4]);
        let full = peek::<TokenBucket>(&p, &key, T0 + 60 * S, 0);
        assert_eq!(summary(&full), (true, 3, 3, 0, 0));
        assert!(!peek::<TokenBucket>(&p, &key, T0 + 60 * S - 1, 1).allowed);
    }

    #[test]
    fn interval_waits_for_as_many_refills_as_needed() {
        // 2 per 10 s, capacity 5, emptied at t=0: 5 tokens need three refills (30 s).
        let p = interval(5, 2, 10_000);
        let key = key_after(&p, &[(0, 5)]);
        let d = peek::<TokenBucket>(&p, &key, T0 + 4 * S, 5);
        assert_eq!(summary(&d), (false, 5, 0, 26_000, 26_000));
        let d = peek::<TokenBucket>(&p, &key, T0 + 4 * S, 3);
        assert_eq!(summary(&d), (false, 5, 0, 16_000, 26_000));
        // Several periods of silence refill several batches, up to the capacity.
        assert_eq!(peek::<TokenBucket>(&p, &key, T0 + 25 * S, 0).remaining, 4);
        assert_eq!(peek::<TokenBucket>(&p, &key, T0 + 95 * S, 0).remaining, 5);
        // The phase stays on the beat: after a request at 25 s, the next refill is at 30 s.
        let key = key_after(&p, &[(0, 5), (25 * S, 4)]);
        assert_eq!(
            peek::<TokenBucket>(&p, &key, T0 + 30 * S - 1, 0).remaining,
            0
        );
        assert_eq!(peek::<TokenBucket>(&p, &key, T0 + 30 * S, 0).remaining, 2);
    }

    #[test]
    fn cost_above_capacity_is_never_admitted_and_changes_nothing() {
        for p in [params(4, 4, 60_000), interval(4, 4, 60_000)] {
            let d = replay(&p, &[(0, 5)]);
            assert_eq!(summary(&d[0]), (false, 4, 4, -1, 0));
            let key = key_after(&p, &[(0, 1)]);
            let mut same = key;
            let d = step::<TokenBucket>(&p, &mut same, T0 + S, 5);
            assert_eq!((d.allowed, d.retry_after), (false, None));
            assert_eq!(same, key);
        }
    }

    #[test]
    fn a_third_of_a_second_stays_exact() {
        // 3 per second, capacity 1: the token is back after exactly 1/3 s.
        let p = params(1, 3, 1000);
        let d = replay(&p, &[(0, 1), (0, 1)]);
        assert!(same(d[1].retry_after, Some(Span::new(1_000_000, 3))));
        assert_eq!(d[1].retry_after.map(|s| s.ceil_ms()), Some(334));
        assert!(!replay(&p, &[(0, 1), (333_333, 1)])[1].allowed);
        assert!(replay(&p, &[(0, 1), (333_334, 1)])[1].allowed);
        // The fractions left over are kept: after emptying a bucket of 2, requests a third
        // of a second apart (rounded to the µs either way) all pass.
        let p = params(2, 3, 1000);
        let d = replay(&p, &[(0, 2), (333_334, 1), (666_667, 1), (1_000_000, 1)]);
        assert!(d.iter().all(|d| d.allowed));
        // 3000 tokens at 3 per second take exactly 1000 s to come back: no error accumulates.
        let p = params(3000, 3, 1000);
        let d = replay(&p, &[(0, 3000)]);
        assert!(same(Some(d[0].reset_after), Some(Span::from_us(1000 * S))));
    }

    #[test]
    fn a_million_per_second_is_one_microsecond_apart() {
        let p = params(1, 1_000_000, 1000);
        let d = replay(&p, &[(0, 1), (0, 1), (1, 1), (1, 1), (2, 1)]);
        let allowed: Vec<_> = d.iter().map(|d| d.allowed).collect();
        assert_eq!(allowed, [true, false, true, false, true]);
    }

    #[test]
    fn a_clock_step_back_refills_nothing_twice() {
        let p = params(2, 1, 1000);
        let mut key = key_after(&p, &[(10 * S, 2)]); // empty at 10 s
                                                     // At 9 s (one second back), the bucket is as
                                                     // empty as at 10 s: a token is due in 2 s.
        let d = step::<TokenBucket>(&p, &mut key, T0 + 9 * S, 1);
        assert_eq!(summary(&d), (false, 2, 0, 2_000, 3_000));
        // At 11 s one token is back.
        assert!(step::<TokenBucket>(&p, &mut key, T0 + 11 * S, 1).allowed);
        // INTERVAL: the refill stays on its boundary.
        let p = interval(2, 2, 1000);
        let key = key_after(&p, &[(10 * S, 2)]);
        let d = peek::<TokenBucket>(&p, &key, T0 + 9 * S, 1);
        assert_eq!(summary(&d), (false, 2, 0, 2_000, 2_000));
    }

    #[test]
    fn a_smaller_capacity_clamps_and_a_larger_one_adds_nothing_until_full() {
        let big = params(10, 10, 1000);
        let key = key_after(&big, &[(0, 2)]); // 8 left
        let small = params(5, 10, 1000);
        let d = peek::<TokenBucket>(&small, &key, T0, 0);
        assert_eq!(summary(&d), (true, 5, 5, 0, 0));
        // A larger capacity adds no token; a request of no units writes nothing, so the key
        // refills by its own parameters, full in 0.2 s, and a full bucket is a fresh key
        // (the storage layer lets it expire then) under any parameters.
        let bigger = params(20, 10, 1000);
        let d = peek::<TokenBucket>(&bigger, &key, T0, 0);
        assert_eq!(summary(&d), (true, 20, 8, 0, 200));
        assert_eq!(
            peek::<TokenBucket>(&bigger, &key, T0 + 199_999, 0).remaining,
            9
        );
        let d = peek::<TokenBucket>(&bigger, &key, T0 + 200_000, 0);
        assert_eq!(summary(&d), (true, 20, 20, 0, 0));
        // So a request of more than the old capacity is told to wait until then.
        let d = peek::<TokenBucket>(&bigger, &key, T0, 15);
        assert_eq!(summary(&d), (false, 20, 8, 200, 200));
    }

    /// Issue 22's table, for the token bucket: emptied under one set of parameters, then
    /// asked under another, the denial says when the conversion made then admits.
    #[test]
    fn a_denial_under_new_parameters_says_when_the_request_fits() {
        testing::issue_22_table::<TokenBucket>(params, T0);
    }

    #[test]
    fn parameter_changes_refill_under_the_old_then_convert() {
        // Continuous, 1 per second, capacity 10, emptied at 0; 2.5 s later: 2.5 tokens.
        let old = params(10, 1, 1000);
        let key = key_after(&old, &[(0, 10)]);
        let now = T0 + 2_500_000;

        // A new amount refills at the new rate once a request under it is admitted: until
        // then nothing is written and the old one refills: the missing half token in 0.5 s.
        let faster = params(10, 4, 1000);
        let d = peek::<TokenBucket>(&faster, &key, now, 3);
        assert_eq!(d.remaining, 2);
        assert!(same(d.retry_after, Some(Span::from_us(500_000))));

        // A new period rescales: 2.5 tokens stay 2.5 tokens, and at 3 per 3 s the missing
        // half token takes 0.5 s.
        let rescaled = params(10, 3, 3000);
        let d = peek::<TokenBucket>(&rescaled, &key, now, 3);
        assert_eq!(d.remaining, 2);
        assert!(same(d.retry_after, Some(Span::from_us(500_000))));
        // 1/3 of a token at a 7 ms period: 7000/3 units, rounded down to 2333.
        let third = State {
            scaled_tokens: 1000, // a third of a token at a 3 ms period
            updated_us: T0,
        };
        let converted = third.converted(&params(10, 1, 3), &params(10, 1, 7), T0);
        assert_eq!(converted.scaled_tokens, 2333);

        // Continuous to INTERVAL: the whole 2 tokens are kept and the phase starts now.
        let batches = interval(10, 1, 1000);
        let mut k = key;
        let d = step::<TokenBucket>(&batches, &mut k, now, 1);
        assert_eq!((d.allowed, d.remaining), (true, 1));
        let (_, s) = k.unwrap();
        assert_eq!(s.updated_us, now);
        assert_eq!(
            peek::<TokenBucket>(&batches, &k, now + S - 1, 0).remaining,
            1
        );
        assert_eq!(peek::<TokenBucket>(&batches, &k, now + S, 0).remaining, 2);

        // INTERVAL to continuous: tokens kept, continuous refill from the request that writes
        // it (the part of a period since the last boundary is forfeit then); until then the
        // batches come: the third token at 3 s.
        let ik = key_after(&batches, &[(0, 10)]);
        let d = peek::<TokenBucket>(&old, &ik, now, 3);
        assert_eq!(d.remaining, 2);
        assert!(same(d.retry_after, Some(Span::from_us(S / 2))));
        let mut k = ik;
        step::<TokenBucket>(&old, &mut k, now, 1);
        let d = peek::<TokenBucket>(&old, &k, now, 3);
        assert!(same(d.retry_after, Some(Span::from_us(2 * S))));

        // INTERVAL, same period, a new amount: the phase is kept (next refill at 3 s).
        let more = interval(10, 5, 1000);
        let mut k = ik;
        step::<TokenBucket>(&more, &mut k, now, 1);
        assert_eq!(k.unwrap().1.updated_us, T0 + 2 * S);
        assert_eq!(peek::<TokenBucket>(&more, &k, T0 + 3 * S, 0).remaining, 6);

        // INTERVAL, a new period: the phase starts now.
        let slower = interval(10, 1, 4000);
        let mut k = ik;
        step::<TokenBucket>(&slower, &mut k, now, 1);
        assert_eq!(k.unwrap().1.updated_us, now);
        let d = peek::<TokenBucket>(&slower, &k, now, 0);
        assert_eq!(d.remaining, 1);
        assert!(same(Some(d.reset_after), Some(Span::from_us(9 * 4 * S))));
    }

    #[test]
    fn snapshot_reports_the_state() {
        let p = params(4, 4, 60_000);
        let (_, s) = key_after(&p, &[(0, 3)]).unwrap();
        let snap = snapshot(&p, &s, T0 + 20 * S);
        assert_eq!(
            (
                snap.params,
                snap.tokens,
                snap.updated_us,
                snap.now.remaining
            ),
            (p, 1, T0, 2)
        );
        assert_eq!(snap.now.reset_after.ceil_ms(), 25_000);
        // With `interval`, the instant is the last refill's.
        let p = interval(3, 3, 60_000);
        let (_, s) = key_after(&p, &[(0, 1), (70 * S, 3)]).unwrap();
        let snap = snapshot(&p, &s, T0 + 100 * S);
        assert_eq!(
            (
                snap.params,
                snap.tokens,
                snap.updated_us,
                snap.now.remaining
            ),
            (p, 0, T0 + 60 * S, 0)
        );
        assert_eq!(snap.now.reset_after.ceil_ms(), 20_000);
    }

    fn any_params() -> impl Strategy<Value = Params> {
        // Refill amounts below the capacity too, so that refills do not simply fill it up.
        let amount = prop_oneof![1u64..=5, 1u64..=2_000];
        (1u64..=20, amount, 1u64..=10_000, any::<bool>()).prop_map(|(c, a, p, i)| Params {
            capacity: c,
            refill_amount: a,
            refill_period_ms: p,
            interval: i,
        })
    }

    /// Absolute request times (µs since T0) from gaps.
    fn timeline(gaps: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut at = 0;
        gaps.iter()
            .map(|&(gap, cost)| {
                at += gap;
                (at, cost)
            })
            .collect()
    }

    /// The key after the requests, and the time of the last one.
    fn history(p: &Params, gaps: &[(u64, u64)]) -> (Key<TokenBucket>, u64) {
        let requests = timeline(gaps);
        let last = requests.last().map_or(0, |r| r.0);
        (key_after(p, &requests), last)
    }

    proptest! {
        /// Continuous: over any [t0, t1], admitted units <= capacity + floor(amount ×
        /// (t1 - t0) / period), i.e. admitted × period_us <= capacity × period_us + amount ×
        /// (t1 - t0).
        #[test]
        fn continuous_never_more_than_capacity_plus_refill(
            p in any_params(), gaps in testing::any_requests(),
        ) {
            let p = Params { interval: false, ..p };
            let requests = timeline(&gaps);
            let decisions = replay(&p, &requests);
            let admitted: Vec<u128> = decisions.iter().zip(&requests)
                .map(|(d, r)| if d.allowed { u128::from(r.1) } else { 0 }).collect();
            let period = u128::from(p.refill_period_ms) * 1000;
            for i in 0..requests.len() {
                let mut units = 0;
                for j in i..requests.len() {
                    units += admitted[j];
                    let span = u128::from(requests[j].0 - requests[i].0);
                    let bound = u128::from(p.capacity) * period + u128::from(p.refill_amount) * span;
                    prop_assert!(units * period <= bound, "{} units in [{}, {}]", units, i, j);
                }
            }
        }

        /// Continuous, with the parameters changing at every request: never more than the
        /// largest capacity plus what refilled, each gap at the rate of the parameters the key
        /// was stored with then (a change rescales the tokens down and clamps them).
        #[test]
        fn changing_parameters_never_refill_more_than_the_time_allows(
            requests in proptest::collection::vec((any_params(), 0u64..3_000_000, 0u64..6), 1..60),
        ) {
            // Every period divides an hour: what refills is counted in 1/hour-µs tokens.
            const HOUR_US: u128 = 3_600_000_000;
            let periods = [1u64, 7, 1000, 3000, 5000, 60_000, 3_600_000];
            let requests: Vec<(Params, u64, u64)> = requests
                .into_iter()
                .map(|(p, gap, cost)| {
                    let period = periods[(p.refill_period_ms % 7) as usize];
                    (Params { interval: false, refill_period_ms: period, ..p }, gap, cost)
                })
                .collect();
            let largest = requests.iter().map(|(p, _, _)| p.capacity).max().unwrap_or(0);
            let mut key: Key<TokenBucket> = None;
            let (mut at, mut admitted, mut refilled) = (0, 0u128, 0u128);
            for (p, gap, cost) in requests {
                if let Some((stored, _)) = &key {
                    let per_token = HOUR_US / (u128::from(stored.refill_period_ms) * 1000);
                    refilled += u128::from(gap) * u128::from(stored.refill_amount) * per_token;
                }
                at += gap;
                if step::<TokenBucket>(&p, &mut key, T0 + at, cost).allowed {
                    admitted += u128::from(cost);
                }
                prop_assert!(admitted * HOUR_US <= u128::from(largest) * HOUR_US + refilled,
                    "admitted {} > {} + {}/{}", admitted, largest, refilled, HOUR_US);
            }
        }

        /// INTERVAL: over any [t0, t1], admitted units <= capacity + amount × the refill
        /// boundaries (anchor + k × period, k >= 1) in (t0, t1].
        #[test]
        fn interval_never_more_than_capacity_plus_refills(
            p in any_params(), gaps in testing::any_requests(),
        ) {
            let p = Params { interval: true, ..p };
            let requests = timeline(&gaps);
            let mut key: Key<TokenBucket> = None;
            let mut anchor = None;
            let mut admitted = Vec::new();
            for &(at, cost) in &requests {
                let d = step::<TokenBucket>(&p, &mut key, T0 + at, cost);
                if anchor.is_none() && key.is_some() {
                    anchor = Some(at);
                }
                admitted.push(if d.allowed { u128::from(cost) } else { 0 });
            }
            let Some(anchor) = anchor else { return Ok(()); };
            let period = p.refill_period_ms * 1000;
            let beats = |t: u64| u128::from(t.saturating_sub(anchor) / period);
            for i in 0..requests.len() {
                let mut units = 0;
                for j in i..requests.len() {
                    units += admitted[j];
                    let refills = beats(requests[j].0) - beats(requests[i].0);
                    let bound = u128::from(p.capacity) + u128::from(p.refill_amount) * refills;
                    prop_assert!(units <= bound, "{} units in [{}, {}]", units, i, j);
                }
            }
        }

        /// At now + reset_after the bucket is full (a cost-0 look shows remaining == limit),
        /// and a microsecond earlier it is not.
        #[test]
        fn reset_after_is_when_it_is_full(p in any_params(), gaps in testing::any_requests()) {
            let (key, at) = history(&p, &gaps);
            let d = peek::<TokenBucket>(&p, &key, T0 + at, 0);
            let us = d.reset_after.ceil_us();
            let then = peek::<TokenBucket>(&p, &key, T0 + at + us, 0);
            prop_assert_eq!((then.remaining, then.reset_after), (then.limit, Span::ZERO));
            if us > 0 {
                let before = peek::<TokenBucket>(&p, &key, T0 + at + us - 1, 0);
                prop_assert!(!before.reset_after.is_zero());
            }
        }

        /// The same inputs give the same decision; without `write` (DRYRUN, COST 0) or when
        /// denied, the state is untouched (`peek` and `step` assert it); with it, a request
        /// decides as its dry run said. Stored parameters may differ from the request's.
        #[test]
        fn dryrun_decides_like_the_real_request_and_changes_nothing(
            p in any_params(), q in any_params(), tokens in 0u64..30, frac in 0u64..10_000_000,
            updated in 0u64..10_000_000, now in 0u64..20_000_000, cost in 0u64..30,
        ) {
            let period = u128::from(q.refill_period_ms) * 1000;
            let frac = if q.interval { 0 } else { u128::from(frac) % period };
            let state = State {
                scaled_tokens: (u128::from(tokens.min(q.capacity)) * period + frac).min(q.full()),
                updated_us: T0 + updated,
            };
            let key: Key<TokenBucket> = Some((q, state));
            testing::dryrun_decides_like_the_real_request::<TokenBucket>(&p, &key, T0 + now, cost)?;
            // A fresh key too.
            testing::dryrun_decides_like_the_real_request::<TokenBucket>(&p, &None, T0 + now, cost)?;
        }

        /// A parameter change never adds tokens: right after it, no more fit than under the
        /// old parameters, nor more than the new capacity; but a full bucket is a fresh key
        /// under any parameters (the storage layer lets it expire when full).
        #[test]
        fn a_parameter_change_never_adds_tokens(
            p in any_params(), q in any_params(), gaps in testing::any_requests(), later in 0u64..5_000_000,
        ) {
            let (key, at) = history(&q, &gaps);
            // (A key that was never written is fresh under any parameters.)
            prop_assume!(key.is_some());
            let old = peek::<TokenBucket>(&q, &key, T0 + at + later, 0);
            let new = peek::<TokenBucket>(&p, &key, T0 + at + later, 0);
            if old.remaining == q.capacity && p != q {
                prop_assert_eq!(new.remaining, p.capacity);
            } else {
                prop_assert!(new.remaining <= old.remaining.min(p.capacity));
            }
        }

        /// Extreme parameters (corrupted ones too), states, times and costs never panic.
        #[test]
        fn extremes_never_panic(
            capacity in any::<u64>(), amount in any::<u64>(), period in any::<u64>(),
            interval in any::<bool>(), old in (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()),
            now in any::<u64>(), tokens in any::<u128>(), updated in any::<u64>(),
            cost in any::<u64>(), write in any::<bool>(),
        ) {
            let p = Params { capacity, refill_amount: amount, refill_period_ms: period, interval };
            let q = Params { capacity: old.0, refill_amount: old.1, refill_period_ms: old.2, interval: old.3 };
            let state = State { scaled_tokens: tokens, updated_us: updated };
            testing::never_panics::<TokenBucket>(&p, &[&q, &p], &state, now, cost, write);
        }

        /// Valid extremes: the largest counts and periods that parse stay exact enough that
        /// a fresh key admits its capacity and denies one more.
        #[test]
        fn the_largest_valid_parameters_still_decide(
            capacity in 1u64..=crate::ranges::MAX_COUNT, amount in 1u64..=crate::ranges::MAX_COUNT,
            period in 1u64..=crate::ranges::MAX_DURATION_MS, interval in any::<bool>(), now in any::<u64>(),
        ) {
            let p = Params { capacity, refill_amount: amount, refill_period_ms: period, interval };
            let mut key: Key<TokenBucket> = None;
            prop_assert!(step::<TokenBucket>(&p, &mut key, now, capacity).allowed);
            let d = step::<TokenBucket>(&p, &mut key, now, 1);
            prop_assert!(!d.allowed);
            prop_assert!(d.retry_after.is_some_and(|r| !r.is_zero()));
        }
    }

    testing::properties! {
        TokenBucket, t0: T0, limit: |p| p.capacity;
        retry_after_is_exact(any_params());
        remaining_is_what_fits_now(any_params());
        // Tokens are clamped to the new capacity, never added.
        one_instant_admits_at_most_the_largest_limit(any_params());
        largest_cost_is_what_a_dryrun_admits(any_params(), bound: 21);
        // After a full refund an INTERVAL bucket keeps the phase its admission gave it, which
        // a missing key does not have: only a continuous bucket decides as the missing key
        // at later instants.
        refund_gives_back_exactly(any_params(), later_within: 5_000_000, later_too: |p| !p.interval);
        one_schedule_for_every_reply(any_params(), long_gap: 60_000_000, later_within: 5_000_000);
    }
}
