//! The leaky bucket as a queue: requests join a queue of at most `capacity` units that drains
//! at `leak_amount` units per `leak_period`, with no background drip.
//!
//! Each admitted request is told when its turn comes (`delay`): the caller waits that long
//! and then acts, so the work leaves the bucket at a constant rate, one emission interval
//! `T = leak_period / leak_amount` apart, however bursty the arrivals were. A request that
//! would overflow the queue (the unit being served included) is denied.
//!
//! The state is the time the queue will be empty, the same single instant GCRA keeps as its
//! TAT, and the admission test is GCRA's: with the queue holding `ceil((TAT - now) / T)`
//! units, `cost` more fit when `max(TAT, now) - now + cost × T <= capacity × T` (the two
//! agree because `capacity - cost` is a whole number). So the arithmetic is [`gcra`]'s,
//! exact in units of `1/leak_amount` µs, and this file adds what differs: the delay. A
//! request's turn starts when everything queued before it has left, `max(TAT, now)`; the
//! delay is that minus now (zero when the queue was empty).
//!
//! Parameters that change keep the units queued, as GCRA keeps the units its TAT owes: the
//! drain time is converted through the emission interval (`gcra::State::converted`), so
//! the units already queued drain at the new rate from now on, each a new interval long, and
//! a smaller capacity may deny until the queue has drained below it.

use super::gcra::{self, Gcra};
use super::{Algorithm, Decision, Span};

/// RL.LEAKYBUCKET's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// The most units the queue holds, the one being served included.
    pub capacity: u64,
    /// Units that leave per period.
    pub leak_amount: u64,
    /// The period `leak_amount` is counted over.
    pub leak_period_ms: u64,
}

impl Params {
    fn gcra(&self) -> gcra::Params {
        gcra::Params {
            burst: self.capacity,
            rate: self.leak_amount,
            period_ms: self.leak_period_ms,
        }
    }
}

/// When the queue will be empty: GCRA's TAT, in units of 1/leak_amount µs.
pub type State = gcra::State;

/// RL.LEAKYBUCKET's algorithm: GCRA's admission, and each admitted request's `delay`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakyBucket;

impl Algorithm for LeakyBucket {
    type Params = Params;
    type State = State;

    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        let queue = params.gcra();
        let stored = stored.map(|(old, state)| (old.gcra(), state));
        // How long the units already queued take to leave: this request's wait.
        let now = queue.scaled(now_us);
        let wait = match &stored {
            Some((old, state)) => state.converted(old, &queue, now_us).max(now) - now,
            None => 0,
        };
        let (mut decision, fresh) = match stored {
            Some((old, state)) => Gcra::check(&queue, Some((&old, state)), now_us, cost, write),
            None => Gcra::check(&queue, None, now_us, cost, write),
        };
        decision.delay = decision.allowed.then(|| Span::new(wait, queue.rate()));
        (decision, fresh)
    }

    /// GCRA's: the units that still fit in the queue.
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        let old = stored.map(|(old, state)| (old.gcra(), state));
        Gcra::largest_cost(
            &params.gcra(),
            old.as_ref().map(|(old, state)| (old, *state)),
            now_us,
        )
    }

    /// GCRA's: the newest units queued leave the queue (a unit being served counts as queued
    /// until it has left), so the queue empties `k` emission intervals sooner, never before
    /// now.
    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        Gcra::refund(&params.gcra(), state, now_us, units)
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::LeakyBucket(snapshot(params, state, now_us))
    }
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// When the queue is empty, whole µs since the Unix epoch, rounded up.
    pub empty_at_us: u64,
    /// Units queued now.
    pub queued: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and queue as of `now_us` (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    let now = LeakyBucket::view_now(params, state, now_us);
    Snapshot {
        params: *params,
        empty_at_us: Span::new(state.tat, params.gcra().rate()).ceil_us(),
        queued: params.capacity.saturating_sub(now.remaining),
        now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, peek, step, Key};
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000;

    fn params(capacity: u64, leak_amount: u64, leak_period_ms: u64) -> Params {
        Params {
            capacity,
            leak_amount,
            leak_period_ms,
        }
    }

    fn delay_ms(d: &Decision) -> i64 {
        d.delay.map_or(-1, |s| s.ceil_ms() as i64)
    }

    #[test]
    fn a_burst_is_spread_one_interval_apart() {
        // 2 per second: T = 500 ms; a queue of 3.
        let p = params(3, 2, 1000);
        let mut key: Key<LeakyBucket> = None;
        let got: Vec<_> = (0..4)
            .map(|_| {
                let d = step::<LeakyBucket>(&p, &mut key, T0, 1);
                (
                    d.allowed,
                    d.remaining,
                    delay_ms(&d),
                    d.reset_after.ceil_ms(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (true, 2, 0, 500),
                (true, 1, 500, 1000),
                (true, 0, 1000, 1500),
                (false, 0, -1, 1500),
            ]
        );
        // The fourth fits once the first has left.
        let d = peek::<LeakyBucket>(&p, &key, T0, 1);
        assert_eq!(d.retry_after.unwrap().ceil_ms(), 500);
        let d = step::<LeakyBucket>(&p, &mut key, T0 + 500_000, 1);
        assert_eq!((d.allowed, delay_ms(&d)), (true, 1000));
        // After the queue has drained, the wait is zero again.
        let d = step::<LeakyBucket>(&p, &mut key, T0 + 10_000_000, 1);
        assert_eq!((d.allowed, delay_ms(&d), d.remaining), (true, 0, 2));
    }

    #[test]
    fn cost_above_the_capacity_never_fits() {
        let p = params(3, 1, 1000);
        let mut key: Key<LeakyBucket> = None;
        let d = step::<LeakyBucket>(&p, &mut key, T0, 4);
        assert!(!d.allowed);
        assert_eq!((d.retry_after, d.delay), (None, None));
        assert!(key.is_none());
    }

    #[test]
    fn a_third_of_a_second_apart_exactly() {
        let p = params(10, 3, 1000);
        let mut key: Key<LeakyBucket> = None;
        let delays: Vec<_> = (0..4)
            .map(|_| step::<LeakyBucket>(&p, &mut key, T0, 1).delay.unwrap())
            .collect();
        assert_eq!(delays[3], Span::new(3_000_000, 3)); // exactly 1 s
        assert_eq!(delays[1].ceil_ms(), 334);
        assert_eq!(delays[2].ceil_ms(), 667);
    }

    #[test]
    fn a_smaller_capacity_keeps_the_queue() {
        let big = params(10, 1, 1000);
        let mut key: Key<LeakyBucket> = None;
        step::<LeakyBucket>(&big, &mut key, T0, 6);
        let small = params(4, 1, 1000);
        let d = peek::<LeakyBucket>(&small, &key, T0, 1);
        assert!(!d.allowed);
        // 6 queued, room for 4: three must leave first.
        assert_eq!(d.retry_after.unwrap().ceil_ms(), 3000);
    }

    /// Issue 12: a full queue of 10 at 1 per second, then the same capacity at 1 per hour,
    /// admitted 19: the drain time, kept as a time, held a fraction of one hour-long turn.
    /// The ten units queued stay queued, now an hour apart.
    #[test]
    fn a_slower_leak_keeps_the_units_queued() {
        let second = params(10, 1, 1000);
        let hour = params(10, 1, 3_600_000);
        let mut key: Key<LeakyBucket> = None;
        let mut requests = vec![(second, 1); 10];
        requests.extend(vec![(hour, 1); 10]);
        assert_eq!(
            testing::admitted_at_one_instant::<LeakyBucket>(&mut key, &requests, T0),
            10
        );
        // No room under the hour (ten owed hours); nothing is written, so the queue keeps
        // draining by the second until a request under the hour is admitted: one unit has
        // left after a second, and a request then fits.
        let d = peek::<LeakyBucket>(&hour, &key, T0, 1);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after.unwrap().ceil_ms()),
            (false, 0, 1_000)
        );
        assert!(!peek::<LeakyBucket>(&hour, &key, T0 + 999_999, 1).allowed);
        assert!(peek::<LeakyBucket>(&hour, &key, T0 + 1_000_000, 1).allowed);
    }

    /// Issue 22's table, for the leaky bucket: 3000 and 1000 ms, as GCRA.
    #[test]
    fn a_denial_under_new_parameters_says_when_the_request_fits() {
        for (before, after, retry_ms) in [
            (params(3, 1, 3000), params(3, 3, 3000), 3000),
            (params(3, 3, 3000), params(3, 1, 3000), 1000),
        ] {
            let mut key: Key<LeakyBucket> = None;
            for _ in 0..3 {
                step::<LeakyBucket>(&before, &mut key, T0, 1);
            }
            let d = peek::<LeakyBucket>(&after, &key, T0, 1);
            assert_eq!(d.retry_after.unwrap().ceil_ms(), retry_ms);
            assert_eq!(d.reset_after.ceil_ms(), 3 * retry_ms);
            assert!(!peek::<LeakyBucket>(&after, &key, T0 + retry_ms * 1000 - 1, 1).allowed);
            assert!(peek::<LeakyBucket>(&after, &key, T0 + retry_ms * 1000, 1).allowed);
        }
    }

    #[test]
    fn snapshot_reports_the_queue() {
        let p = params(3, 2, 1000);
        let mut key: Key<LeakyBucket> = None;
        step::<LeakyBucket>(&p, &mut key, T0, 2);
        let (_, state) = key.unwrap();
        let snap = snapshot(&p, &state, T0 + 250_000);
        assert_eq!(
            (
                snap.params,
                snap.empty_at_us,
                snap.queued,
                snap.now.remaining
            ),
            (p, T0 + 1_000_000, 2, 1)
        );
        assert_eq!(snap.now.reset_after.ceil_ms(), 750);
    }

    fn any_params() -> impl Strategy<Value = Params> {
        (1u64..=20, 1u64..=2_000, 1u64..=10_000).prop_map(|(c, a, p)| params(c, a, p))
    }

    proptest! {
        /// Admitted units are scheduled back to back, one emission interval each, exactly as
        /// an ideal queue would serve them, and never more than `capacity` units are queued.
        #[test]
        fn turns_are_exactly_one_interval_apart(p in any_params(),
                gaps in proptest::collection::vec((0u64..2_000_000, 1u64..4), 1..60)) {
            let mut key: Key<LeakyBucket> = None;
            let mut at = 0;
            // When the ideal queue is empty again, in units of 1/leak_amount µs.
            let mut queue_end: Option<u128> = None;
            let interval = u128::from(p.leak_period_ms) * 1000;
            for (gap, cost) in gaps {
                at += gap;
                let now = u128::from(T0 + at) * u128::from(p.leak_amount);
                let start = queue_end.map_or(now, |end| end.max(now));
                let end = start + u128::from(cost) * interval;
                let d = step::<LeakyBucket>(&p, &mut key, T0 + at, cost);
                prop_assert_eq!(d.allowed, end - now <= u128::from(p.capacity) * interval);
                if d.allowed {
                    prop_assert_eq!(d.delay, Some(Span::new(start - now, u128::from(p.leak_amount))));
                    queue_end = Some(end);
                } else {
                    prop_assert_eq!(d.delay, None);
                }
            }
        }

        #[test]
        fn dryrun_decides_like_the_real_request_and_changes_nothing(p in any_params(),
                gaps in proptest::collection::vec((0u64..2_000_000, 0u64..4), 1..30), cost in 0u64..25) {
            let (key, at) = testing::after_gaps::<LeakyBucket>(&p, &gaps, T0);
            testing::dryrun_decides_like_the_real_request::<LeakyBucket>(&p, &key, at, cost)?;
        }

        #[test]
        fn extremes_never_panic(capacity in any::<u64>(), amount in any::<u64>(), period in any::<u64>(),
                                now in any::<u64>(), tat in any::<u128>(), cost in any::<u64>()) {
            let p = params(capacity, amount, period);
            let q = params(1, 1, 1);
            testing::never_panics::<LeakyBucket>(&p, &[&q], &State { tat }, now, cost, true);
        }
    }

    testing::properties! {
        LeakyBucket, t0: T0, limit: |p| p.capacity;
        // Whatever the queue held before.
        one_instant_admits_at_most_the_largest_limit(any_params());
        largest_cost_is_what_a_dryrun_admits(any_params(), bound: 21);
        refund_gives_back_exactly(any_params(), later_within: 5_000_000, later_too: |_| true);
        one_schedule_for_every_reply(any_params(), long_gap: 60_000_000, later_within: 5_000_000);
    }
}
