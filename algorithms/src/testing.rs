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

/// Requests `(µs since the previous request, cost)` that make a key's history: up to three
/// seconds apart, of up to five units.
pub fn any_requests() -> impl proptest::strategy::Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0u64..3_000_000, 0u64..6), 1..60)
}

/// A window algorithm's parameters, made by `params(limit, window_ms)`: limits up to 20,
/// windows of 1 ms to 10 s.
pub fn window_params<P: std::fmt::Debug>(
    params: fn(u64, u64) -> P,
) -> impl proptest::strategy::Strategy<Value = P> {
    use proptest::prelude::*;
    (1u64..=20, 1u64..=10_000).prop_map(move |(l, w)| params(l, w))
}

/// A window algorithm's parameters for a key whose parameters change: short windows, and
/// aligned hours and days.
pub fn changing_window_params<P: std::fmt::Debug>(
    params: fn(u64, u64) -> P,
) -> impl proptest::strategy::Strategy<Value = P> {
    use proptest::prelude::*;
    let window = prop_oneof![
        1u64..=10_000,
        Just(3_600_000),
        Just(86_400_000),
        Just(7_000)
    ];
    (1u64..=20, window).prop_map(move |(l, w)| params(l, w))
}

/// `remaining` more units fit right now, and not one more: on `key` as it is, and after a
/// request of `cost` units (which writes when admitted), whose own `remaining` (at most its
/// `limit`) is then what a request of no units finds.
pub fn remaining_is_what_fits_now<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    cost: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let now = peek::<A>(params, key, now_us, 0);
    if now.remaining > 0 {
        prop_assert!(peek::<A>(params, key, now_us, now.remaining).allowed);
    }
    prop_assert!(!peek::<A>(params, key, now_us, now.remaining + 1).allowed);
    let mut after = key.clone();
    let d = step::<A>(params, &mut after, now_us, cost);
    if d.remaining > 0 {
        prop_assert!(peek::<A>(params, &after, now_us, d.remaining).allowed);
    }
    prop_assert!(!peek::<A>(params, &after, now_us, d.remaining + 1).allowed);
    prop_assert!(d.remaining <= d.limit);
    if d.allowed {
        prop_assert_eq!(peek::<A>(params, &after, now_us, 0).remaining, d.remaining);
    }
    Ok(())
}

/// A denial on a key stored under other parameters (`key` as they left it) under `params`:
/// its `retry_after` is exact ([`retry_after_is_exact`]) and no earlier instant (`probe` µs
/// after now, modulo the wait) admits the request; its `reset_after` is when the key is
/// fresh (`limit` units remain) and stays so (`probe` µs later too), and a microsecond
/// before, it is not.
pub fn a_denial_after_a_parameter_change_is_exact<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    cost: u64,
    probe_us: u64,
    limit: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    retry_after_is_exact::<A>(params, key, now_us, cost, limit)?;
    let d = peek::<A>(params, key, now_us, cost);
    if d.allowed {
        return Ok(());
    }
    if let Some(retry) = d.retry_after {
        let us = retry.ceil_us();
        prop_assert!(!peek::<A>(params, key, now_us + probe_us % us, cost).allowed);
    }
    let reset = d.reset_after.ceil_us();
    for t in [now_us + reset, now_us + reset + probe_us] {
        prop_assert_eq!(peek::<A>(params, key, t, 0).remaining, limit);
    }
    if reset > 0 {
        prop_assert!(peek::<A>(params, key, now_us + reset - 1, 0).remaining < limit);
    }
    Ok(())
}

/// A DRYRUN (a check that does not write) decides as the real request does: the same
/// inputs give the same decision, the real request (which writes when admitted) gets it
/// too, and the key it writes then says what the reply said (`remaining`, `reset_after`).
/// `peek` and `step` assert that a call that writes nothing changes nothing. Returns the key
/// as the real request left it.
pub fn dryrun_decides_like_the_real_request<A: Algorithm>(
    params: &A::Params,
    key: &Key<A>,
    now_us: u64,
    cost: u64,
) -> Result<Key<A>, proptest::test_runner::TestCaseError> {
    use proptest::prop_assert_eq;
    let dry = peek::<A>(params, key, now_us, cost);
    prop_assert_eq!(dry, peek::<A>(params, key, now_us, cost));
    let mut real = key.clone();
    prop_assert_eq!(step::<A>(params, &mut real, now_us, cost), dry);
    if dry.allowed && cost > 0 {
        let after = peek::<A>(params, &real, now_us, 0);
        prop_assert_eq!(
            (after.remaining, after.reset_after),
            (dry.remaining, dry.reset_after)
        );
    }
    Ok(real)
}

/// No input makes an algorithm panic or wrap: a request of `cost` at `now_us` under
/// `params` on `state` as stored under each of `stored`, and on a fresh key, every span of
/// the replies rounded, and the snapshots of the state before and after.
pub fn never_panics<A: Algorithm>(
    params: &A::Params,
    stored: &[&A::Params],
    state: &A::State,
    now_us: u64,
    cost: u64,
    write: bool,
) {
    let rounded = |d: Decision| {
        let spans = [d.retry_after, Some(d.reset_after), d.delay];
        spans.map(|s| s.map(|s| (s.ceil_ms(), s.floor_ms(), s.ceil_us())))
    };
    for own in stored {
        let mut s = state.clone();
        let (d, _) = A::check(params, Some((own, &mut s)), now_us, cost, write);
        rounded(d);
        rounded(A::snapshot(own, &s, now_us).now());
    }
    rounded(A::check(params, None, now_us, cost, write).0);
    rounded(A::snapshot(params, state, now_us).now());
}

/// Issue 22's table, for an algorithm of a count, an amount and a period
/// (`params(count, amount, period_ms)`: GCRA's burst and rate, a token bucket's capacity and
/// refill): three requests of one unit at `t0_us` empty a key of 3 per 3 s under 1 per 3 s
/// (or 3), and one more under 3 per 3 s (or 1) at that instant is refused for 3000 ms (or
/// 1000), the key fresh three times as long after; refused a second and a microsecond before
/// then, and admitted then. Before, the reply converted the key once and assumed the new
/// parameters from then on: 1000 ms said for the first, admitted at 3000; 3000 for the
/// second, admitted at 1000.
pub fn issue_22_table<A: Algorithm>(params: fn(u64, u64, u64) -> A::Params, t0_us: u64) {
    for (before, after, retry_ms) in [(1, 3, 3000), (3, 1, 1000)] {
        let (before, after) = (params(3, before, 3000), params(3, after, 3000));
        let key = key_after::<A>(&before, t0_us, &[(0, 1), (0, 1), (0, 1)]);
        let d = peek::<A>(&after, &key, t0_us, 1);
        assert_eq!(summary(&d), (false, 3, 0, retry_ms as i64, 3 * retry_ms));
        let us = retry_ms * 1000;
        assert!(!peek::<A>(&after, &key, t0_us + us - 1000, 1).allowed);
        assert!(!peek::<A>(&after, &key, t0_us + us - 1, 1).allowed);
        assert!(peek::<A>(&after, &key, t0_us + us, 1).allowed);
    }
}

/// The properties the algorithms share, stated once: in an algorithm's test module,
/// `properties! { Algorithm, t0: T0, limit: |p| p.limit; property(params); ... }` expands
/// each property named to the property test of that name, over parameters drawn from its
/// strategy, from the instant `t0`; `limit` (the units a fresh key admits at once) is needed
/// by the properties that name it. The properties, and what else they take:
/// - `retry_after_is_exact(params)` ([`retry_after_is_exact`]; uses `limit`);
/// - `retry_after_is_exact_after_a_parameter_change(params)`
///   ([`a_denial_after_a_parameter_change_is_exact`]; uses `limit`);
/// - `remaining_is_what_fits_now(params)` ([`remaining_is_what_fits_now`]);
/// - `fresh_again_after_reset_after(params)` ([`fresh_again_after_reset_after`]; uses
///   `limit`);
/// - `one_instant_admits_at_most_the_largest_limit(params)`
///   ([`one_instant_admits_at_most_the_largest`]; uses `limit`);
/// - `largest_cost_is_what_a_dryrun_admits(params, bound: n)`: ATMOST, searched up to `n`
///   (above any limit the strategy draws);
/// - `refund_gives_back_exactly(params, later_within: µs, later_too: |p| ...)`: RL.REFUND,
///   later instants reaching `later_within` (past a window, for the window algorithms), and
///   when a full refund must decide as a missing key at them too;
/// - `one_schedule_for_every_reply(params, long_gap: µs, later_within: µs)` ([`one_schedule`]).
macro_rules! properties {
    (@retry_after_is_exact $algorithm:ty, $t0:expr, [$limit:expr], $params:expr) => {
        proptest::proptest! {
            /// retry_after is the least whole number of ms after which the request is
            /// admitted.
            #[test]
            fn retry_after_is_exact(
                p in $params, gaps in $crate::testing::any_requests(), cost in 1u64..25,
            ) {
                let limit: fn(&<$algorithm as $crate::Algorithm>::Params) -> u64 = $limit;
                let (key, at) = $crate::testing::after_gaps::<$algorithm>(&p, &gaps, $t0);
                $crate::testing::retry_after_is_exact::<$algorithm>(&p, &key, at, cost, limit(&p))?;
            }
        }
    };
    (@retry_after_is_exact_after_a_parameter_change $algorithm:ty, $t0:expr, [$limit:expr], $params:expr) => {
        proptest::proptest! {
            /// After a parameter change, retry_after is still the least time after which
            /// the request is admitted (no earlier instant sampled admits it), and
            /// reset_after when the key is fresh, the stored state being what it is.
            #[test]
            fn retry_after_is_exact_after_a_parameter_change(
                q in $params, p in $params, gaps in $crate::testing::any_requests(),
                later in 0u64..5_000_000, cost in 1u64..25, probe in 0u64..1_000_000,
            ) {
                let limit: fn(&<$algorithm as $crate::Algorithm>::Params) -> u64 = $limit;
                let (key, at) = $crate::testing::after_gaps::<$algorithm>(&q, &gaps, $t0);
                $crate::testing::a_denial_after_a_parameter_change_is_exact::<$algorithm>(
                    &p, &key, at + later, cost, probe, limit(&p),
                )?;
            }
        }
    };
    (@remaining_is_what_fits_now $algorithm:ty, $t0:expr, [$($limit:expr)?], $params:expr) => {
        proptest::proptest! {
            /// `remaining` more units fit right now, and not one more; after a request too.
            #[test]
            fn remaining_is_what_fits_now(
                p in $params, gaps in $crate::testing::any_requests(), cost in 0u64..6,
            ) {
                let (key, at) = $crate::testing::after_gaps::<$algorithm>(&p, &gaps, $t0);
                $crate::testing::remaining_is_what_fits_now::<$algorithm>(&p, &key, at, cost)?;
            }
        }
    };
    (@fresh_again_after_reset_after $algorithm:ty, $t0:expr, [$limit:expr], $params:expr) => {
        proptest::proptest! {
            /// At now + reset_after the key is fresh, and stays so; a microsecond earlier it
            /// is not.
            #[test]
            fn fresh_again_after_reset_after(
                p in $params, gaps in $crate::testing::any_requests(), later in 0u64..100_000_000,
            ) {
                let limit: fn(&<$algorithm as $crate::Algorithm>::Params) -> u64 = $limit;
                let (key, at) = $crate::testing::after_gaps::<$algorithm>(&p, &gaps, $t0);
                $crate::testing::fresh_again_after_reset_after::<$algorithm>(
                    &p, &key, at, later, limit(&p),
                )?;
            }
        }
    };
    (@one_instant_admits_at_most_the_largest_limit $algorithm:ty, $t0:expr, [$limit:expr], $params:expr) => {
        proptest::proptest! {
            /// The documented promise (docs/algorithms.md, Changing parameters): at one
            /// instant, requests under any sequence of parameter sets admit in total at most
            /// the largest limit among them, whatever the key held before.
            #[test]
            fn one_instant_admits_at_most_the_largest_limit(
                history in proptest::collection::vec(($params, 0u64..3_000_000, 0u64..6), 0..20),
                sets in proptest::collection::vec(($params, 0u64..6), 1..40),
            ) {
                $crate::testing::one_instant_admits_at_most_the_largest::<$algorithm>(
                    &history, &sets, $t0, $limit,
                )?;
            }
        }
    };
    (@largest_cost_is_what_a_dryrun_admits $algorithm:ty, $t0:expr, [$($limit:expr)?], $params:expr, bound: $bound:expr $(,)?) => {
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
        }
    };
    (@refund_gives_back_exactly $algorithm:ty, $t0:expr, [$($limit:expr)?], $params:expr, later_within: $later_within:expr, later_too: $later_too:expr $(,)?) => {
        proptest::proptest! {
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
    (@one_schedule_for_every_reply $algorithm:ty, $t0:expr, [$($limit:expr)?], $params:expr, long_gap: $long_gap:expr, later_within: $later_within:expr $(,)?) => {
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
    ($algorithm:ty, t0: $t0:expr, limit: $limit:expr; $($property:ident($($args:tt)*);)*) => {
        $($crate::testing::properties!(@$property $algorithm, $t0, [$limit], $($args)*);)*
    };
    ($algorithm:ty, t0: $t0:expr; $($property:ident($($args:tt)*);)*) => {
        $($crate::testing::properties!(@$property $algorithm, $t0, [], $($args)*);)*
    };
}
pub(crate) use properties;

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
