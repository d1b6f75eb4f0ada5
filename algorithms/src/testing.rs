//! Helpers for the algorithms' unit and property tests.

use super::{Algorithm, Decision, Span};

/// A key as the storage layer keeps it: the parameters it was written with, and state.
pub type Key<A> = Option<(<A as Algorithm>::Params, <A as Algorithm>::State)>;

/// A request that writes when admitted, as a client's request does (COST 0 never writes).
pub fn step<A: Algorithm>(
    params: &A::Params,
    key: &mut Key<A>,
    now_us: u64,
    cost: u64,
) -> Decision {
    match key {
        Some((stored_params, state)) => {
            let before = state.clone();
            let (d, fresh) = A::check(params, Some((stored_params, state)), now_us, cost, cost > 0);
            assert!(fresh.is_none(), "a stored key got a fresh state");
            if d.allowed && cost > 0 {
                *stored_params = params.clone();
            } else {
                assert_eq!(
                    *state, before,
                    "a request that did not write changed the state"
                );
            }
            d
        }
        None => {
            let (d, fresh) = A::check(params, None, now_us, cost, cost > 0);
            assert_eq!(
                fresh.is_some(),
                d.allowed && cost > 0,
                "fresh state iff admitted"
            );
            if let Some(state) = fresh {
                *key = Some((params.clone(), state));
            }
            d
        }
    }
}

/// Replays requests `(µs after base_us, cost)` on one fresh key; returns each decision.
pub fn replay<A: Algorithm>(
    params: &A::Params,
    base_us: u64,
    requests: &[(u64, u64)],
) -> Vec<Decision> {
    let mut key: Key<A> = None;
    requests
        .iter()
        .map(|&(at, cost)| step::<A>(params, &mut key, base_us + at, cost))
        .collect()
}

/// The key after the requests `(µs after base_us, cost)`.
pub fn key_after<A: Algorithm>(
    params: &A::Params,
    base_us: u64,
    requests: &[(u64, u64)],
) -> Key<A> {
    let mut key: Key<A> = None;
    for &(at, cost) in requests {
        step::<A>(params, &mut key, base_us + at, cost);
    }
    key
}

/// The key after requests `(gap in µs, cost)` made one after another from `t0_us`, and
/// the instant of the last (`t0_us` when there are none).
pub fn after_gaps<A: Algorithm>(
    params: &A::Params,
    gaps: &[(u64, u64)],
    t0_us: u64,
) -> (Key<A>, u64) {
    let mut at = t0_us;
    let mut key: Key<A> = None;
    for &(gap, cost) in gaps {
        at += gap;
        step::<A>(params, &mut key, at, cost);
    }
    (key, at)
}

/// The promise of `reset_after`: at `now_us + reset_after` the key is fresh (`limit` units
/// remain), and stays so `later_us` after; a microsecond earlier it is not.
pub fn fresh_again_after_reset_after<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    later_us: u64,
    limit: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let reset = peek::<A>(params, key, now_us, 0).reset_after;
    fresh_at_reset_after::<A>(params, key, now_us, reset, later_us)?;
    proptest::prop_assert_eq!(
        peek::<A>(params, key, now_us + reset.ceil_us(), 0).limit,
        limit
    );
    Ok(())
}

/// The promise of a reply's `reset_after`, `key` being the key as the call left it: a
/// request of no units under the same `params` finds it fresh (nothing left to reset,
/// `remaining == limit`) at `now_us + reset` and `later_us` after, and not fresh a
/// microsecond before.
pub fn fresh_at_reset_after<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    reset: Span,
    later_us: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::prop_assert;
    let us = reset.ceil_us();
    for t in [now_us + us, now_us + us + later_us] {
        let d = peek::<A>(params, key, t, 0);
        prop_assert!(
            d.reset_after.is_zero() && d.remaining == d.limit,
            "not fresh {} µs after a reset_after of {} µs: {:?}",
            t - now_us,
            us,
            d
        );
    }
    if us > 0 {
        let d = peek::<A>(params, key, now_us + us - 1, 0);
        prop_assert!(
            !d.reset_after.is_zero(),
            "already fresh 1 µs before a reset_after of {} µs",
            us
        );
    }
    Ok(())
}

/// One step of a client's traffic on a key, for [`one_schedule`].
#[derive(Debug, Clone)]
pub enum Op {
    /// After `gap_us`, a request under the pool's parameter set `set` (modulo its size):
    /// of `cost` units, or with `atmost`, `ATMOST cost` (a grant of what fits, at least
    /// one unit asked); a `dryrun` writes nothing.
    Call {
        set: usize,
        gap_us: u64,
        cost: u64,
        dryrun: bool,
        atmost: bool,
    },
    /// After `gap_us`, RL.REFUND of `units` (under the key's own parameters).
    Refund { gap_us: u64, units: u64 },
}

/// Traffic for [`one_schedule`]: mostly requests, some at the same instant as the one
/// before, some after long idle gaps; some DRYRUN, some ATMOST, some refunds.
pub fn ops(sets: usize, long_gap_us: u64) -> impl proptest::strategy::Strategy<Value = Vec<Op>> {
    use proptest::prelude::*;
    let gap = prop_oneof![
        3 => Just(0u64),
        4 => 0u64..3_000_000,
        1 => 0u64..long_gap_us.max(1),
    ];
    let op = prop_oneof![
        8 => (0..sets, gap.clone(), 0u64..6, prop::bool::weighted(0.2), prop::bool::weighted(0.15))
            .prop_map(|(set, gap_us, cost, dryrun, atmost)| Op::Call { set, gap_us, cost, dryrun, atmost }),
        1 => (gap, 0u64..4).prop_map(|(gap_us, units)| Op::Refund { gap_us, units }),
    ];
    proptest::collection::vec(op, 1..40)
}

/// Issue 22's promise, for every algorithm: what a reply says is what later calls do,
/// whatever the parameters of the calls before it. Replays `ops` from `t0_us` on one
/// key, with parameter sets from `pool`, and on every reply checks:
/// - a denial's `retry_after` is exact: the same request is denied a millisecond (and a
///   microsecond) before it, admitted at it ([`retry_after_is_exact`]), nothing else
///   happening, also when the key was written under other parameters;
/// - its `reset_after` is exact: the key as the call leaves it (as a real call would
///   leave it, for a DRYRUN) is fresh then, and not before ([`fresh_at_reset_after`]);
/// - RL.INSPECT's view agrees: the key's own view ([`Algorithm::view_now`] under the
///   parameters it is stored with, whose `reset_after` is the key's TTL) does not end before
///   the reply says the key is fresh, and is the reply's when the call's parameters are
///   the key's;
/// - a DRYRUN answers as the real call does.
pub fn one_schedule<A: Algorithm>(
    pool: &[A::Params],
    ops: &[Op],
    t0_us: u64,
    later_us: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let mut key: Key<A> = None;
    let mut at = t0_us;
    for op in ops {
        match *op {
            Op::Refund { gap_us, units } => {
                at += gap_us;
                if let Some((p, s)) = key.as_mut() {
                    A::refund(p, s, at, units);
                }
            }
            Op::Call {
                set,
                gap_us,
                cost,
                dryrun,
                atmost,
            } => {
                at += gap_us;
                let params = &pool[set % pool.len()];
                let cost = if atmost {
                    largest::<A>(params, &key, at).min(cost.max(1)).max(1)
                } else {
                    cost
                };
                let said = peek::<A>(params, &key, at, cost);
                retry_after_is_exact::<A>(params, &key, at, cost, said.limit)?;
                let mut after = key.clone();
                prop_assert_eq!(step::<A>(params, &mut after, at, cost), said);
                fresh_at_reset_after::<A>(params, &after, at, said.reset_after, later_us)?;
                if let Some((stored, state)) = &after {
                    let view = A::view_now(stored, state, at);
                    if stored == params {
                        prop_assert_eq!(view.reset_after.ceil_us(), said.reset_after.ceil_us());
                    }
                    prop_assert!(
                        said.reset_after.ceil_us() <= view.reset_after.ceil_us(),
                        "the reply's reset_after {:?} is after the key's own {:?}",
                        said.reset_after,
                        view.reset_after
                    );
                }
                if !dryrun {
                    key = after;
                }
            }
        }
    }
    Ok(())
}

/// [`one_schedule`] as a property test of an algorithm: expands, in its test module, to
/// `one_schedule_for_every_reply`, over three parameter sets drawn from `$params`.
macro_rules! one_schedule_property {
    (
        $algorithm:ty,
        params: $params:expr,
        t0: $t0:expr,
        long_gap: $long_gap:expr,
        later_within: $later_within:expr $(,)?
    ) => {
        proptest::proptest! {
            /// Issue 22: every reply's retry_after and reset_after are what later calls
            /// find, across parameter changes, DRYRUN, ATMOST and refunds.
            #[test]
            fn one_schedule_for_every_reply(
                pool in proptest::collection::vec($params, 3),
                ops in $crate::testing::ops(3, $long_gap),
                later in 0u64..$later_within,
            ) {
                $crate::testing::one_schedule::<$algorithm>(&pool, &ops, $t0, later)?;
            }
        }
    };
}
pub(crate) use one_schedule_property;

/// A decision as the reply shows it: allowed, limit, remaining, retry_after_ms (-1 when
/// never), reset_after_ms.
pub fn summary(d: &Decision) -> (bool, u64, u64, i64, u64) {
    let retry = d.retry_after.map_or(-1, |s| s.ceil_ms() as i64);
    (
        d.allowed,
        d.limit,
        d.remaining,
        retry,
        d.reset_after.ceil_ms(),
    )
}

/// The property every algorithm promises for `retry_after`: a denied request that can ever
/// fit is admitted `retry_after` (rounded up to whole ms, and to whole µs) from now, and
/// not a millisecond (or microsecond) earlier; one that never can exceeds the limit.
pub fn retry_after_is_exact<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    cost: u64,
    limit: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let d = peek::<A>(params, key, now_us, cost);
    match (d.allowed, d.retry_after) {
        (true, retry) => prop_assert_eq!(retry, Some(super::Span::ZERO)),
        (false, None) => prop_assert!(cost > limit),
        (false, Some(retry)) => {
            let ms = retry.ceil_ms();
            prop_assert!(ms >= 1);
            let later = peek::<A>(params, key, now_us + ms * 1000, cost);
            prop_assert!(later.allowed, "not admitted after retry_after {} ms", ms);
            let earlier = peek::<A>(params, key, now_us + (ms - 1) * 1000, cost);
            prop_assert!(!earlier.allowed, "already admitted at {} ms", ms - 1);
            let us = retry.ceil_us();
            prop_assert!(peek::<A>(params, key, now_us + us, cost).allowed);
            prop_assert!(!peek::<A>(params, key, now_us + us - 1, cost).allowed);
        }
    }
    Ok(())
}

/// Requests `(parameters, cost)` made one after another at the one instant `now_us` on
/// `key`, each writing when admitted; returns the units admitted in total. The documented
/// promise: that
/// total is at most the largest limit among the parameter sets used, whatever the key
/// held before and however the parameters change between the requests.
pub fn admitted_at_one_instant<A: Algorithm>(
    key: &mut Key<A>,
    requests: &[(A::Params, u64)],
    now_us: u64,
) -> u64 {
    requests
        .iter()
        .filter(|(params, cost)| step::<A>(params, key, now_us, *cost).allowed)
        .map(|(_, cost)| cost)
        .sum()
}

/// The documented promise across parameter changes, checked once for every algorithm:
/// after `history` (parameters, gap in µs, cost; each request writing when admitted) from
/// `t0_us`, requests under the parameter sets `sets` at that one instant admit in total at
/// most the largest `limit` among those sets.
pub fn one_instant_admits_at_most_the_largest<A: Algorithm>(
    history: &[(A::Params, u64, u64)],
    sets: &[(A::Params, u64)],
    t0_us: u64,
    limit: fn(&A::Params) -> u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut key: Key<A> = None;
    let mut at = t0_us;
    for (params, gap, cost) in history {
        at += gap;
        step::<A>(params, &mut key, at, *cost);
    }
    let largest = sets.iter().map(|(p, _)| limit(p)).max().unwrap_or(0);
    let admitted = admitted_at_one_instant::<A>(&mut key, sets, at);
    proptest::prop_assert!(admitted <= largest, "admitted {} > {}", admitted, largest);
    Ok(())
}

/// [`Algorithm::largest_cost`] on a key as the tests keep it.
pub fn largest<A: Algorithm>(params: &A::Params, key: &Key<A>, now_us: u64) -> u64 {
    A::largest_cost(params, key.as_ref().map(|(p, s)| (p, s)), now_us)
}

/// The ATMOST promise: the grant is the largest COST a DRYRUN at that instant admits,
/// found here by trying every cost up to `bound` (above any limit used).
pub fn largest_cost_is_what_a_dryrun_admits<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    bound: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let searched = (0..=bound)
        .rev()
        .find(|&cost| peek::<A>(params, key, now_us, cost).allowed)
        .unwrap_or(0);
    proptest::prop_assert_eq!(largest::<A>(params, key, now_us), searched);
    Ok(())
}

/// RL.REFUND's promise at one instant: after admitting `n` units, giving back `k <= n`
/// gives back exactly `k`, and exactly `k` more units are admitted at that instant; giving
/// back all `n` leaves a key that decides as the key did before, at every `later` (µs
/// after, cost) too, when `later_too` (an INTERVAL bucket created by the admission keeps
/// its phase, which a missing key does not have).
pub fn refund_at_one_instant<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    n: u64,
    k: u64,
    later: &[(u64, u64)],
    later_too: bool,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::prop_assert_eq;
    let mut admitted = key.clone();
    if n == 0 || !step::<A>(params, &mut admitted, now_us, n).allowed {
        return Ok(());
    }
    let after = largest::<A>(params, &admitted, now_us);
    let k = k.min(n);
    let mut refunded = admitted.clone();
    if let Some((p, s)) = refunded.as_mut() {
        prop_assert_eq!(A::refund(p, s, now_us, k), k);
    }
    prop_assert_eq!(largest::<A>(params, &refunded, now_us), after + k);
    if k == n && (later_too || key.is_some()) {
        for &(after_us, cost) in later {
            let at = now_us + after_us;
            prop_assert_eq!(
                peek::<A>(params, &refunded, at, cost),
                peek::<A>(params, key, at, cost),
                "at +{} µs, cost {}",
                after_us,
                cost
            );
        }
    }
    Ok(())
}

/// RL.REFUND's promise for more than was taken: the key gives back what it holds as
/// taken (`limit - remaining`, when `taken_is_limit_less_remaining`: not for a policy,
/// whose rules each give back their own) and is then fresh, never fresher; a refund that
/// gives back nothing changes nothing.
pub fn refund_of_more_than_was_taken<A: Algorithm>(
    key: &Key<A>,
    now_us: u64,
    taken_is_limit_less_remaining: bool,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let Some((p, s)) = key else {
        return Ok(());
    };
    let before = A::view_now(p, s, now_us);
    let mut copy = s.clone();
    let given = A::refund(p, &mut copy, now_us, u64::MAX);
    if taken_is_limit_less_remaining {
        prop_assert_eq!(given, before.limit - before.remaining);
    }
    if given == 0 {
        prop_assert_eq!(&copy, s, "a refund of nothing changed the state");
    }
    let fresh = A::view_now(p, &copy, now_us);
    prop_assert_eq!(fresh.remaining, fresh.limit);
    prop_assert!(fresh.reset_after.is_zero(), "not fresh: {:?}", fresh);
    // And never fresher than fresh: a second refund gives back nothing.
    prop_assert_eq!(A::refund(p, &mut copy, now_us, u64::MAX), 0);
    Ok(())
}

/// The ATMOST and RL.REFUND properties, stated once for every algorithm: expands, in an
/// algorithm's test module, to the two property tests `largest_cost_is_what_a_dryrun_admits`
/// and `refund_gives_back_exactly`. The algorithm says only what differs: its parameter
/// strategy, its start instant, the search bound for ATMOST (above any limit the strategy
/// draws), how far `later` instants reach (past a window, for the window algorithms), and
/// when a full refund must decide as a missing key at `later` instants too.
macro_rules! atmost_and_refund_properties {
    (
        $algorithm:ty,
        params: $params:expr,
        t0: $t0:expr,
        bound: $bound:expr,
        later_within: $later_within:expr,
        later_too: $later_too:expr $(,)?
    ) => {
        proptest::proptest! {
            /// ATMOST: the grant is the largest COST a DRYRUN at the same instant admits,
            /// with the key's parameters and after a change to others.
            #[test]
            fn largest_cost_is_what_a_dryrun_admits(
                q in $params, p in $params,
                gaps in proptest::collection::vec((0u64..3_000_000, 0u64..6), 0..40),
                more in 0u64..3_000_000,
            ) {
                let (key, at) = $crate::testing::after_gaps::<$algorithm>(&q, &gaps, $t0);
                $crate::testing::largest_cost_is_what_a_dryrun_admits::<$algorithm>(
                    &q, &key, at + more, $bound,
                )?;
                $crate::testing::largest_cost_is_what_a_dryrun_admits::<$algorithm>(
                    &p, &key, at + more, $bound,
                )?;
            }

            /// RL.REFUND: admit n, give back k <= n, and exactly k more are admitted at that
            /// instant (all n: the key decides as before, then and later); giving back more
            /// than was taken gives back what was taken and leaves the key fresh, never
            /// fresher.
            #[test]
            fn refund_gives_back_exactly(
                p in $params,
                gaps in proptest::collection::vec((0u64..3_000_000, 0u64..6), 0..40),
                more in 0u64..3_000_000, n in 1u64..8, k in 0u64..10,
                later in proptest::collection::vec((0u64..$later_within, 0u64..6), 1..8),
            ) {
                let later_too: fn(&<$algorithm as $crate::Algorithm>::Params) -> bool =
                    $later_too;
                let (key, at) = $crate::testing::after_gaps::<$algorithm>(&p, &gaps, $t0);
                $crate::testing::refund_at_one_instant::<$algorithm>(
                    &p, &key, at + more, n, k, &later, later_too(&p),
                )?;
                $crate::testing::refund_of_more_than_was_taken::<$algorithm>(
                    &key, at + more, true,
                )?;
                $crate::testing::refund_of_more_than_was_taken::<$algorithm>(
                    &key, at + more + 3_000_000, true,
                )?;
            }
        }
    };
}
pub(crate) use atmost_and_refund_properties;

/// A check that does not write (DRYRUN): asserts that it changes nothing.
pub fn peek<A: Algorithm>(params: &A::Params, key: &Key<A>, now_us: u64, cost: u64) -> Decision {
    match key {
        Some((stored_params, state)) => {
            let mut copy = state.clone();
            let (d, fresh) = A::check(
                params,
                Some((stored_params, &mut copy)),
                now_us,
                cost,
                false,
            );
            assert!(fresh.is_none());
            assert_eq!(&copy, state, "a check without write changed the state");
            d
        }
        None => {
            let (d, fresh) = A::check(params, None, now_us, cost, false);
            assert!(fresh.is_none(), "a check without write made a state");
            d
        }
    }
}
