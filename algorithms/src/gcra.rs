//! GCRA, the generic cell rate algorithm (virtual scheduling form).
//!
//! The intuition: requests are supposed to arrive one *emission interval* `T = period / rate`
//! apart. The state is a single time, the TAT (theoretical arrival time): when the key's
//! schedule would be fully paid off. A request of `cost` units pushes the TAT `cost × T`
//! further. The key tolerates running ahead of schedule by at most `burst × T`, so a request
//! is admitted when `max(TAT, now) + cost × T - now <= burst × T`.
//!
//! From that one inequality everything else follows:
//! - `remaining = burst - ceil((TAT - now) / T)`: whole intervals of slack still unused;
//! - `retry_after = max(TAT, now) + cost × T - burst × T - now` when denied (never, when
//!   `cost > burst`);
//! - `reset_after = max(TAT, now) - now`: when the schedule is paid off, the key is fresh.
//!
//! Exactness: `T` is rarely a whole number of microseconds (3 per second is 333333.3 µs),
//! so time is kept in units of `1/rate` µs. In those units `T = period_us` exactly, a clock
//! reading `now_us` is `now_us × rate`, and every comparison is exact integer arithmetic in
//! u128 (at most about 2^99 for the largest times, rates and periods that parse).
//!
//! Changing parameters: the TAT stands for units taken, `(TAT - now) / T` intervals still
//! owed, and those carry over: under new parameters the key owes the same units, each one new
//! interval long (`State::converted`, rounded up). So at one instant, requests under any
//! sequence of parameter sets admit in total at most the largest burst among them.
//!
//! Until a request under the new parameters is admitted, nothing is written: the key keeps
//! paying off its TAT at its own interval, and each call converts what is then owed. So a
//! refusal's `retry_after` is when the conversion made then admits: `owed <= (burst' -
//! cost) × T`, the instant `TAT - (burst' - cost) × T` on the key's own schedule, whatever
//! the new interval; and a call that writes nothing is fresh when the own TAT is reached.
//! The times of every reply are thus what later calls find (issue 22).
//!
//! Same decisions as redis-cell's `CL.THROTTLE key (burst-1) rate period`, which keeps the
//! TAT in nanoseconds with `T` truncated to a whole nanosecond; the two can differ only when
//! that truncation matters.

use super::{keep, Algorithm, Decision, Span};

/// RL.GCRA's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units admitted at once from a fresh key (the limit).
    pub burst: u64,
    /// Units that refill per period.
    pub rate: u64,
    /// The period `rate` is counted over.
    pub period_ms: u64,
}

impl Params {
    pub(super) fn rate(&self) -> u128 {
        u128::from(self.rate.max(1))
    }

    /// The emission interval T in units of 1/rate µs: the period in µs.
    fn interval(&self) -> u128 {
        u128::from(self.period_ms.max(1)).saturating_mul(1000)
    }

    /// The tolerance `burst × T`.
    fn tolerance(&self) -> u128 {
        u128::from(self.burst).saturating_mul(self.interval())
    }

    pub(super) fn scaled(&self, us: u64) -> u128 {
        u128::from(us).saturating_mul(self.rate())
    }
}

/// What a key stores: one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The theoretical arrival time, in units of 1/rate µs since the Unix epoch.
    pub tat: u128,
}

impl State {
    /// The TAT under `to`, for a key whose TAT was written under `from`, as of `now_us`.
    ///
    /// What the schedule stands for is the units it has taken: `(TAT - now) / T`, the
    /// intervals still owed. Those carry over, measured with the new interval, so the new
    /// TAT is `now + owed × T'` (in units of 1/rate' µs). Kept as a time instead, a longer
    /// period would turn ten owed units of a second into a fraction of one of an hour, and
    /// admit them again. Rounded up, never in the key's favour; a schedule already paid off
    /// owes nothing. A new burst alone changes nothing here.
    pub(super) fn converted(&self, from: &Params, to: &Params, now_us: u64) -> u128 {
        if from.rate == to.rate && from.period_ms == to.period_ms {
            return self.tat;
        }
        let now_from = from.scaled(now_us);
        let now_to = to.scaled(now_us);
        let Some(owed) = self.tat.checked_sub(now_from).filter(|&owed| owed > 0) else {
            return now_to;
        };
        // owed × T' / T, in two parts so that nothing overflows: T, T' < 2^49.
        let (old, new) = (from.interval(), to.interval());
        let whole = (owed / old).saturating_mul(new);
        let part = (owed % old).saturating_mul(new).div_ceil(old);
        now_to.saturating_add(whole.saturating_add(part))
    }
}

/// A TAT read under the parameters it was written with: the key's own schedule, which a
/// call under other parameters converts at its instant.
struct Schedule<'a> {
    tat: u128,
    params: &'a Params,
}

impl Schedule<'_> {
    /// How long from `now_us` until the schedule owes at most `units` whole intervals of its
    /// own: zero when it already does.
    ///
    /// This is when a conversion admits: converted at `t`, the schedule owes `ceil(owed × T'
    /// / T)` new intervals, `owed = TAT - t` (in its own units), and a request of `cost` under
    /// burst `B'` fits when that plus `cost` is at most `B'`, that is when `owed <= (B' -
    /// cost) × T`: the instant `TAT - (B' - cost) × T`, whatever `T'` is. With `units` 0 it
    /// is when the key is fresh under any parameters (nothing owed converts to nothing).
    fn until_owing(&self, units: u64, now_us: u64) -> Span {
        let slack = u128::from(units).saturating_mul(self.params.interval());
        let at = self.tat.saturating_sub(slack);
        Span::new(
            at.saturating_sub(self.params.scaled(now_us)),
            self.params.rate(),
        )
    }
}

/// RL.GCRA's algorithm: [`Algorithm::check`] on a key's TAT.
///
/// # Example
///
/// Four a minute with a burst of four (the manual's worked example): four units at once are
/// admitted, and a fifth is told to come back in 15 s, when one emission interval has been
/// paid off; the key is fresh again a minute after the burst.
///
/// ```
/// use ratelimit_algorithms::gcra::{Gcra, Params};
/// use ratelimit_algorithms::Algorithm;
///
/// let params = Params { burst: 4, rate: 4, period_ms: 60_000 };
/// let t0 = 1_700_000_000_000_000; // µs since the Unix epoch
/// let (four, state) = Gcra::check(&params, None, t0, 4, true);
/// assert_eq!((four.allowed, four.remaining), (true, 0));
///
/// let mut state = state.expect("an admitted request makes the key's state");
/// let (fifth, _) = Gcra::check(&params, Some((&params, &mut state)), t0, 1, true);
/// assert!(!fifth.allowed);
/// // Kept in units of 1/rate µs, as exact spans; a reply shows them in whole ms.
/// assert_eq!(fifth.retry_after.map(|s| s.ceil_ms()), Some(15_000));
/// assert_eq!(fifth.reset_after.ceil_ms(), 60_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra;

impl Algorithm for Gcra {
    type Params = Params;
    type State = State;

    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        let now = params.scaled(now_us);
        match stored {
            // A new rate or period: the TAT converts (a new burst alone keeps it as it is).
            Some((old, state)) if old.rate != params.rate || old.period_ms != params.period_ms => {
                changed(params, old, state, now_us, cost, write)
            }
            Some((_, state)) => decide(params, state.tat.max(now), Some(state), now, cost, write),
            None => decide(params, now, None, now, cost, write),
        }
    }

    /// `floor((burst × T - (max(TAT, now) - now)) / T)`: the whole intervals of tolerance
    /// left; zero when the schedule already runs past the tolerance (a smaller burst).
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        let now = params.scaled(now_us);
        let tat = match stored {
            Some((old, state)) => state.converted(old, params, now_us).max(now),
            None => now,
        };
        let slack = params.tolerance().saturating_sub(tat - now);
        u64::try_from(slack / params.interval()).unwrap_or(u64::MAX)
    }

    /// What is taken: the units the schedule still owes, `ceil((TAT - now) / T)`, a unit
    /// partly paid off counting as a whole one (as `remaining` counts it). Giving back `k` of
    /// them moves the TAT back by exactly `k × T`, never before now: the schedule is as it
    /// would be without those `k` units, the part of a unit already paid off included.
    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        let now = params.scaled(now_us);
        let Some(owed) = state.tat.checked_sub(now).filter(|&owed| owed > 0) else {
            return 0;
        };
        let interval = params.interval();
        let given = owed.div_ceil(interval).min(u128::from(units));
        if given == 0 {
            return 0;
        }
        // given × T <= owed + T: no overflow.
        state.tat = state.tat.saturating_sub(given * interval).max(now);
        u64::try_from(given).unwrap_or(u64::MAX)
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::Gcra(snapshot(params, state, now_us))
    }
}

/// [`Algorithm::check`] on `tat`, the key's TAT as of `now` (in units of 1/rate µs) under
/// `params`, `stored` being where the key keeps it: its times are on the TAT the request
/// leaves.
#[inline(always)]
fn decide(
    params: &Params,
    tat: u128,
    stored: Option<&mut State>,
    now: u128,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    let interval = params.interval();
    let tolerance = params.tolerance();
    let new_tat = tat.saturating_add(u128::from(cost).saturating_mul(interval));
    let allowed = new_tat - now <= tolerance;
    let (ttl, retry_after) = if allowed {
        (new_tat - now, Some(Span::ZERO))
    } else {
        let retry = (cost <= params.burst).then(|| {
            Span::new(
                new_tat.saturating_sub(tolerance).saturating_sub(now),
                params.rate(),
            )
        });
        (tat - now, retry)
    };
    let used = ttl.div_ceil(interval);
    let remaining = u128::from(params.burst).saturating_sub(used);
    let decision = Decision {
        allowed,
        limit: params.burst,
        remaining: u64::try_from(remaining).unwrap_or(0),
        retry_after,
        reset_after: Span::new(ttl, params.rate()),
        delay: None,
    };
    let fresh = if allowed && write {
        keep(stored, State { tat: new_tat })
    } else {
        None
    };
    (decision, fresh)
}

/// [`Algorithm::check`] on a key stored under another rate or period (`own`): the TAT
/// converted, and the decision [`decide`]'s. But a call that writes nothing (refused, or of
/// no units) leaves the key on its own schedule, and later calls convert it anew at their
/// own instant, so its times are read on the stored TAT ([`Schedule::until_owing`]). An
/// admitted request's times are on the TAT it writes. Out of line: the common request, under
/// the key's own rate and period, never comes here.
#[inline(never)]
fn changed(
    params: &Params,
    own: &Params,
    state: &mut State,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    let schedule = Schedule {
        tat: state.tat,
        params: own,
    };
    let now = params.scaled(now_us);
    let tat = state.converted(own, params, now_us).max(now);
    let (mut decision, fresh) = decide(params, tat, Some(state), now, cost, write);
    if !(decision.allowed && cost > 0) {
        if !decision.allowed {
            decision.retry_after =
                (cost <= params.burst).then(|| schedule.until_owing(params.burst - cost, now_us));
        }
        decision.reset_after = schedule.until_owing(0, now_us);
    }
    (decision, fresh)
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// The TAT in whole µs since the Unix epoch, rounded up.
    pub tat_us: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and TAT as of `now_us` (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    Snapshot {
        params: *params,
        tat_us: Span::new(state.tat, params.rate()).ceil_us(),
        now: Gcra::view_now(params, state, now_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, peek, step, summary, Key};
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000; // a clock reading in µs

    fn params(burst: u64, rate: u64, period_ms: u64) -> Params {
        Params {
            burst,
            rate,
            period_ms,
        }
    }

    /// Replays requests (µs since T0, cost) on one key; returns each decision.
    fn replay(p: &Params, requests: &[(u64, u64)]) -> Vec<Decision> {
        testing::replay::<Gcra>(p, T0, requests)
    }

    /// The key after some requests.
    fn key_after(p: &Params, requests: &[(u64, u64)]) -> Key<Gcra> {
        testing::key_after::<Gcra>(p, T0, requests)
    }

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
    }

    /// The table of redis-cell's own unit test (max_burst 4, 1 per second), replayed.
    #[test]
    fn redis_cell_table() {
        let p = params(5, 1, 1000);
        let s = 1_000_000;
        let cases: [(u64, u64, bool, u64, u64, i64); 15] = [
            // (at µs, cost, limited, remaining, reset_after µs, retry_after µs or -1)
            (0, 6, true, 5, 0, -1),
            (0, 1, false, 4, s, -1),
            (0, 1, false, 3, 2 * s, -1),
            (0, 1, false, 2, 3 * s, -1),
            (0, 1, false, 1, 4 * s, -1),
            (0, 1, false, 0, 5 * s, -1),
            (0, 1, true, 0, 5 * s, s as i64),
            (3_000_000, 1, false, 2, 3 * s, -1),
            (3_100_000, 1, false, 1, 3_900_000, -1),
            (4_000_000, 1, false, 1, 4 * s, -1),
            (8_000_000, 1, false, 4, s, -1),
            (9_500_000, 1, false, 4, s, -1),
            (9_500_000, 0, false, 4, s, -1),
            (9_500_000, 2, false, 2, 3 * s, -1),
            (9_500_000, 5, true, 2, 3 * s, 3 * s as i64),
        ];
        let requests: Vec<_> = cases.iter().map(|c| (c.0, c.1)).collect();
        for (d, c) in replay(&p, &requests).iter().zip(cases.iter()) {
            assert_eq!(!d.allowed, c.2, "{c:?}");
            assert_eq!(d.remaining, c.3, "{c:?}");
            assert_eq!(d.reset_after, Span::new(u128::from(c.4), 1), "{c:?}");
            let retry = match d.retry_after {
                Some(s) if !d.allowed => s.ceil_us() as i64,
                _ => -1,
            };
            assert_eq!(retry, c.5, "{c:?}");
        }
    }

    #[test]
    fn a_third_of_a_second_stays_exact() {
        // 3 per second: T = 333333.3 µs. After a burst of 1, the next request is due at
        // exactly 1/3 s: 333333 µs is too early, 333334 µs is not, and in whole ms it is 334.
        let p = params(1, 3, 1000);
        let d = replay(&p, &[(0, 1), (0, 1)]);
        assert_eq!(d[1].retry_after.unwrap().ceil_ms(), 334);
        assert!(!replay(&p, &[(0, 1), (333_333, 1)])[1].allowed);
        assert!(replay(&p, &[(0, 1), (333_334, 1)])[1].allowed);
        // 3000 units at 3 per second take exactly 1000 s to pay off: no truncation error
        // accumulates (a T truncated to 333333 µs would say 999999 ms).
        let p = params(3000, 3, 1000);
        let d = replay(&p, &[(0, 3000)]);
        assert_eq!(d[0].reset_after.ceil_ms(), 1_000_000);
        assert_eq!(d[0].reset_after.floor_ms(), 1_000_000);
    }

    #[test]
    fn a_million_per_second_is_one_microsecond_apart() {
        let p = params(1, 1_000_000, 1000);
        let d = replay(&p, &[(0, 1), (0, 1), (1, 1), (1, 1), (2, 1)]);
        let allowed: Vec<_> = d.iter().map(|d| d.allowed).collect();
        assert_eq!(allowed, [true, false, true, false, true]);
    }

    #[test]
    fn a_smaller_burst_keeps_the_state() {
        let big = params(10, 10, 1000);
        let key = key_after(&big, &[(0, 8)]); // 8 of 10 used
        let small = params(5, 10, 1000);
        let d = peek::<Gcra>(&small, &key, T0, 1);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        // 800 ms of schedule is owed; with burst 5 the request fits 400 ms from now.
        assert_eq!(d.retry_after.unwrap().ceil_ms(), 400);
    }

    #[test]
    fn a_new_rate_carries_the_units_owed() {
        let three = params(3, 3, 1000);
        let key = key_after(&three, &[(0, 1)]); // one unit owed: TAT = T0 + 1/3 s
        let (_, s) = key.unwrap();
        // At six per second the unit owed is paid off in 1/6 s, rounded up.
        let six = params(3, 6, 1000);
        let tat_us = Span::new(s.converted(&three, &six, T0), 6).ceil_us();
        assert_eq!(tat_us, T0 + 166_667);
        // At one per second: still one unit owed, two remaining. A request of no units
        // writes nothing, so the key stays on its own schedule, paid off in 1/3 s.
        let one = params(3, 1, 1000);
        let d = peek::<Gcra>(&one, &key, T0, 0);
        assert_eq!(summary(&d), (true, 3, 2, 0, 334));
        // A request of one unit writes the unit owed as a whole second, plus its own.
        let d = peek::<Gcra>(&one, &key, T0, 1);
        assert_eq!(summary(&d), (true, 3, 1, 0, 2000));
        // A schedule paid off owes nothing under any parameters.
        let d = peek::<Gcra>(&one, &key, T0 + 400_000, 0);
        assert_eq!(summary(&d), (true, 3, 3, 0, 0));
    }

    /// Issue 12: ten at once under 10 per second, then under 10 per hour, admitted 19: the
    /// TAT, kept as a time, owed a fraction of one hour-long interval. It owes ten.
    #[test]
    fn a_longer_period_does_not_hand_out_the_burst_again() {
        let second = params(10, 1, 1000);
        let hour = params(10, 1, 3_600_000);
        let mut key: Key<Gcra> = None;
        let mut requests = vec![(second, 1); 10];
        requests.extend(vec![(hour, 1); 10]);
        assert_eq!(
            testing::admitted_at_one_instant::<Gcra>(&mut key, &requests, T0),
            10
        );
        // Under the hour the ten units are owed as ten hours: no room. Nothing is written, so
        // the key keeps paying them off by the second: one is paid in a second, and a request
        // made then converts nine owed hours and fits.
        let d = peek::<Gcra>(&hour, &key, T0, 1);
        assert_eq!(summary(&d), (false, 10, 0, 1_000, 10_000));
        assert!(!peek::<Gcra>(&hour, &key, T0 + 999_999, 1).allowed);
        let d = peek::<Gcra>(&hour, &key, T0 + 1_000_000, 1);
        assert_eq!(summary(&d), (true, 10, 0, 0, 36_000_000));
        // Back under the second, they are owed as ten seconds' worth.
        let d = peek::<Gcra>(&second, &key, T0, 0);
        assert_eq!(summary(&d), (true, 10, 0, 0, 10_000));
    }

    /// Issue 22's table: a denial under new parameters says when the same request is admitted,
    /// as later calls convert the key at their own instants.
    #[test]
    fn a_denial_under_new_parameters_says_when_the_request_fits() {
        testing::issue_22_table::<Gcra>(params, T0);
    }

    #[test]
    fn snapshot_reports_the_state() {
        let p = params(5, 1, 1000);
        let (_, s) = key_after(&p, &[(0, 2)]).unwrap();
        let snap = snapshot(&p, &s, T0 + 500_000);
        assert_eq!(
            (snap.params, snap.tat_us, snap.now.limit, snap.now.remaining),
            (p, T0 + 2_000_000, 5, 3)
        );
        assert_eq!(snap.now.reset_after.ceil_ms(), 1500);
    }

    /// Parameters whose periods all divide an hour.
    fn timed_params() -> impl Strategy<Value = Params> {
        let periods = prop::sample::select(vec![1u64, 7, 1000, 3000, 5000, 60_000, 3_600_000]);
        (1u64..=20, 1u64..=2_000, periods).prop_map(|(b, r, p)| params(b, r, p))
    }

    fn any_params() -> impl Strategy<Value = Params> {
        (1u64..=20, 1u64..=2_000, 1u64..=10_000).prop_map(|(b, r, p)| params(b, r, p))
    }

    proptest! {
        /// Never more than `burst + elapsed / T` units admitted, counting from the first request.
        #[test]
        fn never_more_than_burst_plus_elapsed_over_t(p in any_params(), gaps in testing::any_requests()) {
            let mut at = 0;
            let requests: Vec<_> = gaps.iter().map(|&(gap, cost)| { at += gap; (at, cost) }).collect();
            let decisions = replay(&p, &requests);
            let mut admitted: u128 = 0;
            for (d, &(at, cost)) in decisions.iter().zip(requests.iter()) {
                if d.allowed {
                    admitted += u128::from(cost);
                }
                // admitted × T <= burst × T + elapsed, in units of 1/rate µs.
                let interval = u128::from(p.period_ms) * 1000;
                let bound = u128::from(p.burst) * interval + u128::from(at) * u128::from(p.rate);
                prop_assert!(admitted * interval <= bound, "admitted {} at {}", admitted, at);
            }
        }

        /// The same inputs give the same decision; without `write` (DRYRUN, COST 0) or when
        /// denied, the state is untouched; with it, a request decides as its dry run said.
        #[test]
        fn dryrun_decides_like_the_real_request_and_changes_nothing(
            p in any_params(), q in any_params(), tat_off in 0u64..10_000_000,
            now in 0u64..20_000_000, cost in 0u64..30,
        ) {
            let key: Key<Gcra> = Some((q, State { tat: u128::from(T0 + tat_off) * u128::from(q.rate) }));
            testing::dryrun_decides_like_the_real_request::<Gcra>(&p, &key, T0 + now, cost)?;
        }

        /// Across time, with the parameters changing: never more than the largest burst plus
        /// what the intervals in force paid off, each gap at the interval of the parameters
        /// the key was stored with then.
        #[test]
        fn changing_parameters_never_pay_off_more_than_the_time_allows(
            requests in proptest::collection::vec((timed_params(), 0u64..3_000_000, 0u64..6), 1..60),
        ) {
            // Every period divides an hour: what is paid off is counted in 1/hour-µs units.
            const HOUR_US: u128 = 3_600_000_000;
            let mut key: Key<Gcra> = None;
            let mut at = 0;
            let mut admitted: u128 = 0;
            let mut paid: u128 = 0;
            let largest = requests.iter().map(|(p, _, _)| p.burst).max().unwrap_or(0);
            for (p, gap, cost) in requests {
                if let Some((stored, _)) = &key {
                    // gap / T = gap × rate / period_us units paid off, at most.
                    let per_unit = HOUR_US / (u128::from(stored.period_ms) * 1000);
                    paid += u128::from(gap) * u128::from(stored.rate) * per_unit;
                }
                at += gap;
                if step::<Gcra>(&p, &mut key, T0 + at, cost).allowed {
                    admitted += u128::from(cost);
                }
                prop_assert!(admitted * HOUR_US <= u128::from(largest) * HOUR_US + paid,
                    "admitted {} > {} + {}/{}", admitted, largest, paid, HOUR_US);
            }
        }

        /// Extreme parameters, times and costs never panic or wrap.
        #[test]
        fn extremes_never_panic(burst in 1u64..=crate::ranges::MAX_COUNT, rate in 1u64..=crate::ranges::MAX_COUNT,
                                period in 1u64..=crate::ranges::MAX_DURATION_MS, now in any::<u64>(),
                                tat in any::<u128>(), cost in any::<u64>()) {
            let p = params(burst, rate, period);
            let q = params(1, 1, 1);
            testing::never_panics::<Gcra>(&p, &[&q], &State { tat }, now, cost, true);
        }
    }

    testing::properties! {
        Gcra, t0: T0, limit: |p| p.burst;
        retry_after_is_exact(any_params());
        remaining_is_what_fits_now(any_params());
        one_instant_admits_at_most_the_largest_limit(any_params());
        largest_cost_is_what_a_dryrun_admits(any_params(), bound: 21);
        refund_gives_back_exactly(any_params(), later_within: 5_000_000, later_too: |_| true);
        one_schedule_for_every_reply(any_params(), long_gap: 60_000_000, later_within: 5_000_000);
    }
}
