//! The sliding log as an algorithm: the worked examples, parameter changes, and its
//! promises as property tests (the ring, its index and the regridding have their own
//! tests, next to them, which use the helpers here).

use super::*;
use crate::testing::{self, peek, step, summary, Key};
use proptest::prelude::*;
use std::collections::VecDeque;

/// A round hour (2023-11-14T23:00:00Z) in µs since the Unix epoch, standing for the
/// worked example's 1:00:00; only differences matter.
pub(super) const T0: u64 = 1_700_002_800_000_000;
pub(super) const S: u64 = 1_000_000; // a second in µs

pub(super) fn params(limit: u64, window_ms: u64) -> Params {
    Params { limit, window_ms }
}

/// Replays requests (µs since T0, cost) on one key; returns each decision.
fn replay(p: &Params, requests: &[(u64, u64)]) -> Vec<Decision> {
    testing::replay::<SlidingLog>(p, T0, requests)
}

/// The key after some requests.
pub(super) fn key_after(p: &Params, requests: &[(u64, u64)]) -> Key<SlidingLog> {
    testing::key_after::<SlidingLog>(p, T0, requests)
}

pub(super) fn state(key: &Key<SlidingLog>) -> &State {
    &key.as_ref().expect("a stored key").1
}

/// The promise spelled out naively: every admitted request with its true time.
#[derive(Default)]
pub(super) struct Model {
    pub(super) admitted: Vec<(u64, u64)>,
}

impl Model {
    pub(super) fn active(&self, now: u64, window_us: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(t, _)| u128::from(t) + u128::from(window_us) > u128::from(now))
            .map(|&(_, c)| c)
            .sum()
    }
}

/// Never more than `limit` units with true times in `(t - window, t]`, for every
/// admission time `t`.
fn assert_promise(admitted: &[(u64, u64)], limit: u64, window_us: u64) {
    for &(t, _) in admitted {
        let units: u64 = admitted
            .iter()
            .filter(|&&(u, _)| u <= t && u + window_us > t)
            .map(|&(_, c)| c)
            .sum();
        assert!(units <= limit, "{units} units in the window ending at {t}");
    }
}

#[test]
fn two_per_minute_as_in_the_spec() {
    // 1:00:01 and 1:00:30 pass, 1:00:50 is denied until 1:01:01, 1:01:40 passes.
    let p = params(2, 60_000);
    let got: Vec<_> = replay(&p, &[(S, 1), (30 * S, 1), (50 * S, 1), (100 * S, 1)])
        .iter()
        .map(summary)
        .collect();
    assert_eq!(
        got,
        vec![
            (true, 2, 1, 0, 60_000),
            (true, 2, 0, 0, 60_000),
            (false, 2, 0, 11_000, 40_000),
            (true, 2, 1, 0, 60_000),
        ]
    );
}

#[test]
fn the_first_denial_waits_exactly_until_the_oldest_entry_leaves() {
    let p = params(2, 60_000);
    let key = key_after(&p, &[(S, 1), (30 * S, 1)]);
    let d = peek::<SlidingLog>(&p, &key, T0 + 50 * S, 1);
    assert_eq!(d.retry_after, Some(Span::from_us(11 * S)));
    // The entry at 1:00:01 is in (now - 60 s, now] until 1:01:01 exclusive.
    assert!(!peek::<SlidingLog>(&p, &key, T0 + 61 * S - 1, 1).allowed);
    let at = peek::<SlidingLog>(&p, &key, T0 + 61 * S, 1);
    assert!(at.allowed);
    assert_eq!(at.remaining, 0);
    // Two at once need both entries gone: until 1:01:30.
    let two = peek::<SlidingLog>(&p, &key, T0 + 50 * S, 2);
    assert_eq!(two.retry_after, Some(Span::from_us(40 * S)));
}

#[test]
fn a_cost_above_the_limit_is_never_admitted_and_changes_nothing() {
    let p = params(5, 1000);
    let mut key = key_after(&p, &[(0, 2)]);
    let before = key.clone();
    let d = step::<SlidingLog>(&p, &mut key, T0 + 10, 6);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, None);
    assert_eq!(d.remaining, 3);
    assert_eq!(key, before);
    // A fresh key too: nothing is created.
    let mut fresh: Key<SlidingLog> = None;
    assert_eq!(step::<SlidingLog>(&p, &mut fresh, T0, 6).retry_after, None);
    assert!(fresh.is_none());
}

#[test]
fn a_lower_limit_keeps_the_log_and_denies_until_entries_expire() {
    let ten = params(10, 60_000);
    let key = key_after(&ten, &[(0, 5), (10 * S, 3)]); // 8 of 10 used
    let five = params(5, 60_000);
    let d = peek::<SlidingLog>(&five, &key, T0 + 20 * S, 1);
    assert_eq!((d.allowed, d.limit, d.remaining), (false, 5, 0));
    // The 5 units of t=0 must go: at 60 s, 3 + 1 <= 5.
    assert_eq!(d.retry_after, Some(Span::from_us(40 * S)));
    let twenty = params(20, 60_000);
    assert_eq!(
        peek::<SlidingLog>(&twenty, &key, T0 + 20 * S, 0).remaining,
        12
    );
}

#[test]
fn a_new_window_re_evaluates_the_entries_in_the_ring() {
    let minute = params(2, 60_000);
    let key = key_after(&minute, &[(0, 1), (30 * S, 1)]);
    // A 10-second window at 35 s: the entry at 0 is out, the one at 30 s is in.
    let ten = params(2, 10_000);
    let d = peek::<SlidingLog>(&ten, &key, T0 + 35 * S, 1);
    assert_eq!(
        (d.allowed, d.remaining, d.reset_after),
        (true, 0, Span::from_us(10 * S))
    );
    // A 2-minute window at 70 s: both still count, the first until 120 s. But until a
    // request under it is admitted, the key lives by its own minute: at 90 s it is
    // fresh under it, gone (its TTL ends then), and any request finds a fresh key.
    let two = params(2, 120_000);
    let d = peek::<SlidingLog>(&two, &key, T0 + 70 * S, 1);
    assert_eq!(d.retry_after, Some(Span::from_us(20 * S)));
    assert_eq!(d.reset_after, Span::from_us(20 * S));
    assert!(!peek::<SlidingLog>(&two, &key, T0 + 90 * S - 1, 1).allowed);
    let d = peek::<SlidingLog>(&two, &key, T0 + 90 * S, 1);
    assert_eq!((d.allowed, d.remaining), (true, 1));
    // Admitted under it at 70 s, the request writes the 2-minute window: three entries,
    // the first counting until 120 s.
    let mut written = key.clone();
    let three = params(3, 120_000);
    assert!(step::<SlidingLog>(&three, &mut written, T0 + 70 * S, 1).allowed);
    let d = peek::<SlidingLog>(&three, &written, T0 + 90 * S, 1);
    assert_eq!(d.retry_after, Some(Span::from_us(30 * S)));
    // A 10-minute window needs 2 µs units: the next write re-encodes the ring.
    let mut key = key_after(&minute, &[(0, 1), (3, 1)]);
    let long = params(3, 600_000);
    assert!(step::<SlidingLog>(&long, &mut key, T0 + 5, 1).allowed);
    let s = state(&key);
    assert_eq!(
        (s.base_us, s.unit_us, s.words.clone()),
        (T0, 2, VecDeque::from([0, 2, 3]))
    );
    assert!(is_valid(s));
    // And back to a minute: the ring keeps its 2 µs units (rewriting it to µs would
    // cost O(entries) at every switch between the two windows); the new entry's 7 µs
    // rounds up to 8.
    assert!(step::<SlidingLog>(&params(4, 60_000), &mut key, T0 + 7, 1).allowed);
    let s = state(&key);
    assert_eq!(
        (s.unit_us, s.words.clone()),
        (2, VecDeque::from([0, 2, 3, 4]))
    );
    assert!(is_valid(s));
}

#[test]
fn snapshot_reports_the_state() {
    let p = params(5, 60_000);
    let (_, s) = key_after(&p, &[(0, 2), (10 * S, 1), (20 * S, 1)]).unwrap();
    let snap = snapshot(&p, &s, T0 + 65 * S);
    assert_eq!((snap.params, snap.limit), (p, 5));
    assert_eq!(
        (snap.entries, snap.active, snap.oldest_us, snap.newest_us),
        (3, 2, T0, T0 + 20 * S)
    );
    assert_eq!(
        (snap.now.remaining, snap.now.reset_after.ceil_ms()),
        (3, 15_000)
    );
    let empty = State::empty(0, 1);
    let snap = snapshot(&p, &empty, T0);
    assert_eq!(
        (snap.entries, snap.active, snap.oldest_us, snap.newest_us),
        (0, 0, 0, 0)
    );
    assert_eq!((snap.now.remaining, snap.now.reset_after.ceil_ms()), (5, 0));
}

/// Windows of a few ms to a few s (µs-exact), or of 10 minutes to 10 years (coarser).
fn any_params() -> impl Strategy<Value = Params> {
    (
        1u64..=20,
        prop_oneof![1u64..=5_000, 600_000u64..=crate::ranges::MAX_DURATION_MS],
    )
        .prop_map(|(limit, window_ms)| params(limit, window_ms))
}

/// (time since the previous request in thousandths of a window, µs more, cost)
fn any_gaps() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    proptest::collection::vec((0u64..600, 0u64..5, 0u64..6), 1..80)
}

/// True request times from gaps relative to the window.
fn requests(p: &Params, gaps: &[(u64, u64, u64)]) -> Vec<(u64, u64)> {
    let w = p.window_us();
    let mut at = 0;
    gaps.iter()
        .map(|&(thousandths, us, cost)| {
            at += w / 1000 * thousandths + us;
            (at, cost)
        })
        .collect()
}

fn key_from(p: &Params, gaps: &[(u64, u64, u64)]) -> (Key<SlidingLog>, u64) {
    let reqs = requests(p, gaps);
    let last = reqs.last().map_or(0, |r| r.0);
    (key_after(p, &reqs), T0 + last)
}

proptest! {
    /// The promise: in every window-long interval ending at an admission, at most
    /// `limit` units, by the true request times. µs-exact windows decide exactly like
    /// the naive log.
    #[test]
    fn never_more_than_limit_in_any_window(p in any_params(), gaps in any_gaps()) {
        let w = p.window_us();
        let exact = unit_for(w) == 1;
        let mut key: Key<SlidingLog> = None;
        let mut model = Model::default();
        for (at, cost) in requests(&p, &gaps) {
            let now = T0 + at;
            let d = step::<SlidingLog>(&p, &mut key, now, cost);
            if exact {
                prop_assert_eq!(d.allowed, model.active(now, w) + cost <= p.limit);
            }
            if d.allowed && cost > 0 {
                model.admitted.push((now, cost));
            }
            if let Some((_, s)) = &key {
                prop_assert!(is_valid(s));
            }
        }
        assert_promise(&model.admitted, p.limit, w);
    }

    /// With the limit changing at every request (the window staying), no window-long
    /// interval holds more than the largest limit used.
    #[test]
    fn a_changing_limit_never_admits_more_than_the_largest_in_any_window(
        p in any_params(), gaps in any_gaps(), limits in proptest::collection::vec(1u64..=20, 80),
    ) {
        let mut key: Key<SlidingLog> = None;
        let mut admitted = Vec::new();
        let mut largest = 0;
        for (i, &(at, cost)) in requests(&p, &gaps).iter().enumerate() {
            let q = params(limits[i], p.window_ms);
            largest = largest.max(q.limit);
            if step::<SlidingLog>(&q, &mut key, T0 + at, cost).allowed && cost > 0 {
                admitted.push((T0 + at, cost));
            }
        }
        assert_promise(&admitted, largest, p.window_us());
    }

    /// The clock may step back (real time goes on): entries stay at the newest time
    /// and the promise holds over real time.
    #[test]
    fn a_clock_going_backwards_admits_no_more(
        p in any_params(), gaps in any_gaps(),
        backs in proptest::collection::vec((0u64..10, 0u64..2000), 80),
    ) {
        let w = p.window_us();
        let mut key: Key<SlidingLog> = None;
        let mut admitted = vec![];
        let mut behind = 0; // how far the clock is behind real time, never less
        for (i, (real, cost)) in requests(&p, &gaps).into_iter().enumerate() {
            let (chance, thousandths) = backs[i];
            if chance == 0 {
                behind += w / 1000 * thousandths;
            }
            let reading = (T0 + real).saturating_sub(behind);
            if step::<SlidingLog>(&p, &mut key, reading, cost).allowed && cost > 0 {
                admitted.push((T0 + real, cost));
            }
            if let Some((_, s)) = &key {
                prop_assert!(is_valid(s));
            }
        }
        assert_promise(&admitted, p.limit, w);
    }

    /// retry_after is the least whole number of ms after which the request is admitted.
    #[test]
    fn retry_after_is_exact(p in any_params(), gaps in any_gaps(), cost in 0u64..25) {
        let (key, now) = key_from(&p, &gaps);
        testing::retry_after_is_exact::<SlidingLog>(&p, &key, now, cost, p.limit)?;
    }

    /// `remaining` more units fit right now, and not one more.
    #[test]
    fn remaining_is_what_fits_now(p in any_params(), gaps in any_gaps()) {
        let (key, now) = key_from(&p, &gaps);
        testing::remaining_is_what_fits_now::<SlidingLog>(&p, &key, now, 1)?;
    }

    /// At now + reset_after, the key is fresh again.
    #[test]
    fn reset_after_leads_to_a_fresh_key(p in any_params(), gaps in any_gaps(), cost in 0u64..6) {
        let (mut key, now) = key_from(&p, &gaps);
        let d = step::<SlidingLog>(&p, &mut key, now, cost);
        let reset = d.reset_after.ceil_us();
        let at = peek::<SlidingLog>(&p, &key, now + reset, 0);
        prop_assert_eq!(at.remaining, p.limit);
        prop_assert_eq!(at.reset_after, Span::ZERO);
        if reset > 0 {
            prop_assert!(peek::<SlidingLog>(&p, &key, now + reset - 1, 0).remaining < p.limit);
        }
    }

    /// Without `write` (DRYRUN, COST 0) or when denied, the state is untouched (`peek`
    /// and `step` assert it); with it, a request decides as its dry run said, also
    /// right after a parameter change.
    #[test]
    fn dryrun_decides_like_the_real_request_and_changes_nothing(
        p in any_params(), q in any_params(), gaps in any_gaps(),
        later in 0u64..3_000, cost in 0u64..30,
    ) {
        let (key, now) = key_from(&q, &gaps);
        let now = now + p.window_us() / 1000 * later;
        let real = testing::dryrun_decides_like_the_real_request::<SlidingLog>(&p, &key, now, cost)?;
        if let Some((_, s)) = &real {
            prop_assert!(is_valid(s));
        }
    }

    /// Extreme parameters, times, costs and states (broken ones too) never panic.
    #[test]
    fn extremes_never_panic(
        limit in any::<u64>(), window_ms in any::<u64>(), now in any::<u64>(),
        cost in any::<u64>(), write in any::<bool>(),
        words in proptest::collection::vec(any::<u32>(), 0..8),
        base_us in any::<u64>(), unit_us in any::<u64>(), total in any::<u64>(),
    ) {
        let p = params(limit, window_ms);
        let q = params(1, 1);
        let s = State::new(words.into(), base_us, unit_us, total);
        let _ = is_valid(&s);
        let _ = SlidingLog::snapshot(&p, &s, now).now().reset_after.ceil_ms();
        let mut m = s.clone();
        let (d, _) = SlidingLog::check(&p, Some((&q, &mut m)), now, cost, write);
        let _ = (d.retry_after.map(|s| s.ceil_ms()), d.reset_after.ceil_ms());
        let _ = SlidingLog::snapshot(&p, &m, now).now().reset_after.ceil_ms();
        let (d, _) = SlidingLog::check(&p, None, now, cost, write);
        let _ = (d.retry_after.map(|s| s.ceil_ms()), d.reset_after.ceil_ms(), heap_bytes(&m));
    }

    /// The largest valid parameters and far-apart times keep every invariant.
    #[test]
    fn extreme_valid_inputs_keep_the_invariants(
        limit in 1u64..=1_000_000_000, window_ms in 1u64..=crate::ranges::MAX_DURATION_MS,
        times in proptest::collection::vec(any::<u64>(), 1..20),
        cost in 1u64..=crate::ranges::MAX_COUNT,
    ) {
        let p = params(limit, window_ms);
        let mut key: Key<SlidingLog> = None;
        for now in times {
            step::<SlidingLog>(&p, &mut key, now, cost % (limit + 1));
            if let Some((_, s)) = &key {
                prop_assert!(is_valid(s));
            }
        }
    }
}

testing::properties! {
    SlidingLog, t0: T0, limit: |p| p.limit;
    // Every entry made at this instant is in any window.
    one_instant_admits_at_most_the_largest_limit(any_params());
    largest_cost_is_what_a_dryrun_admits(any_params(), bound: 21);
    refund_gives_back_exactly(any_params(), later_within: 20_000_000, later_too: |_| true);
    one_schedule_for_every_reply(any_params(), long_gap: 60_000_000, later_within: 20_000_000);
}
