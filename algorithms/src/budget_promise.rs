//! The client packages' local budgets (docs/clients.md, Local budgets), replayed on the pure
//! algorithms: the promise they make, checked for each algorithm and for a policy.
//!
//! A package takes up to `k` units with `ATMOST` ([`Algorithm::largest_cost`], then a
//! check), hands them to its requests for a while (`spend`), and gives back what is left with
//! `RL.REFUND` ([`Algorithm::refund`]) once that while is over; a fixed window's units lapse at
//! the window's end instead. The promise: in every interval, all instances together admit at
//! most what the limit itself admits in some interval longer by `hold`.
//!
//! What the packages do, and what these tests check: a unit is spent within `hold / 2` of its
//! take or given back then. A fixed window's units are spent until the window ends and lapse
//! there when it ends within the whole `hold` (given back in the next window they would count
//! for it: 11 of 10 found); a fixed window is exact per window, however long they wait in it. Why half:
//! a refund gives back the newest units, which may be another instance's, so the units left
//! counted can be older than the ones spent by as long as the refunded ones were held. The
//! wait and the refund's delay add up, and together they must fit in `hold`. The rule is
//! [`falls_due`]; the packages' copies are held to it by `clients/lua/conformance/budget.json`
//! ([`generate`]).
//! - For a sliding log that is exact: with the whole `hold` for each, three instances admit 11
//!   of 10 in an interval the `hold` does not cover
//!   ([`a_log_refund_at_the_whole_hold_breaks_the_promise`]), and so does a refund that
//!   comes `hold / 2` late. A policy may have such a rule; the sliding window counter takes
//!   the newest units back first too (no break was found there).
//! - GCRA and the buckets (`INTERVAL` included) keep the promise even when the refund comes
//!   `hold / 2` late: their state is one number (a time, or tokens), so whose units a refund
//!   gives back matters less (spent within the whole `hold` and given back three holds late,
//!   a GCRA does break it, by a unit).
//! - A warm-up admits a request of any cost once its schedule is paid (Guava's `tryAcquire`),
//!   so in units the limit has no bound over an instant and there is nothing to check here; a
//!   refill of `k` is one such request, paid for by the next `k` intervals.
//!
//! The schedules are random and adversarial: bursts, idle gaps, and requests held back to the
//! last instant their units may be spent; refunds and requests at one instant in either order.
//! The limit's own most over an interval is found by greedy clients on a fresh key, started at
//! several offsets into a window, at once or after a first unit and a wait (to be just before
//! a window's end or a refill), and followed for twelve periods.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::rule_set::{Rule, RuleSet, Rules};
use super::{
    fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket, Algorithm,
    Decision,
};

type Key<A> = Option<(<A as Algorithm>::Params, <A as Algorithm>::State)>;

/// `ATMOST want`: the units granted (0 when none fits), and the reply.
fn take<A: Algorithm>(p: &A::Params, key: &mut Key<A>, now: u64, want: u64) -> (u64, Decision) {
    let n = A::largest_cost(p, key.as_ref().map(|(sp, s)| (sp, s)), now).min(want);
    if n == 0 {
        return (
            0,
            A::check(p, key.as_mut().map(|(sp, s)| (&*sp, s)), now, 1, false).0,
        );
    }
    let d = match key {
        Some((sp, s)) => {
            let (d, _) = A::check(p, Some((sp, s)), now, n, true);
            *sp = p.clone();
            d
        }
        None => {
            let (d, fresh) = A::check(p, None, now, n, true);
            *key = fresh.map(|s| (p.clone(), s));
            d
        }
    };
    assert!(d.allowed, "largest_cost's grant was refused");
    (n, d)
}

fn refund<A: Algorithm>(key: &mut Key<A>, now: u64, units: u64) {
    if let Some((sp, s)) = key {
        A::refund(sp, s, now, units);
    }
}

/// The admission times of a greedy client on a fresh key: one unit at `start` (alone when
/// `wait` is set), then every unit as soon as it is admitted from `start + wait`, until
/// `start + len`.
fn greedy<A: Algorithm>(p: &A::Params, start: u64, wait: u64, len: u64) -> Vec<u64> {
    let mut key: Key<A> = None;
    let mut times = Vec::new();
    if wait > 0 {
        let (got, _) = take::<A>(p, &mut key, start, 1);
        times.extend(std::iter::repeat_n(start, got as usize));
    }
    let mut t = start + wait;
    loop {
        let (got, _) = take::<A>(p, &mut key, t, 1000);
        assert!(got < 1000, "a grant past the limits used here");
        times.extend(std::iter::repeat_n(t, got as usize));
        let wait = match &key {
            Some((sp, s)) => {
                let mut copy = s.clone();
                let (d, _) = A::check(p, Some((sp, &mut copy)), t, 1, false);
                d.retry_after.map_or(u64::MAX, |r| r.ceil_us()).max(1)
            }
            None => 1,
        };
        match t.checked_add(wait) {
            Some(next) if next <= start + len => t = next,
            _ => return times,
        }
    }
}

/// The most any interval of each length admits, from greedy runs: started at each of
/// `offsets` at once, or after a first unit and a wait of up to two periods (which reaches the
/// most where it is just before a window's end or a bucket's refill and just after).
struct Oracle {
    /// `shortest[c]`: the shortest interval any run admitted more than `c` units in.
    shortest: Vec<u64>,
}

impl Oracle {
    fn new<A: Algorithm>(p: &A::Params, offsets: &[u64], period: u64, len: u64) -> Oracle {
        let waits: Vec<u64> = (0..16)
            .map(|i| i * period / 8)
            .chain([period - 1, 2 * period - 1])
            .collect();
        let mut shortest: Vec<u64> = Vec::new();
        for &o in offsets {
            for &w in &waits {
                let times = greedy::<A>(p, o, w, len);
                if shortest.len() < times.len() {
                    shortest.resize(times.len(), u64::MAX);
                }
                for (c, best) in shortest.iter_mut().enumerate().take(times.len()) {
                    for i in 0..times.len() - c {
                        *best = (*best).min(times[i + c] - times[i]);
                    }
                }
            }
        }
        // c + 1 units within a length hold c within it too.
        for c in (1..shortest.len()).rev() {
            shortest[c - 1] = shortest[c - 1].min(shortest[c]);
        }
        Oracle { shortest }
    }

    /// The most units the limit admits in an interval of `len`.
    fn most(&self, len: u64) -> usize {
        self.shortest.partition_point(|&l| l <= len)
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// When a refill's batch falls due, and what becomes of its units then: [`falls_due`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// The instant (µs) its units are no longer spent from.
    pub at: u64,
    /// Dropped then, never given back (a fixed window's end); otherwise given back with
    /// `RL.REFUND` then.
    pub lapses: bool,
}

/// The packages' rule (docs/clients.md, Local budgets), the one the tests below check: a batch
/// taken by a refill sent at `sent` (the clock read before the command left), under a limit
/// whose hold is `hold`, with the refill's reply saying `reset_after` (all in µs). Its units may
/// be spent until `sent + hold / 2` and are given back then; a fixed window's, when the window
/// ends within the whole `hold` (`reset_after <= hold`), until the window's end, where they
/// lapse (given back in the next window they would count for it).
///
/// Python's `falls_due` (budget.py) and Node's `fallsDue` (local-budget.cjs) are held to it by
/// `clients/lua/conformance/budget.json` ([`generate`]).
pub(crate) fn falls_due(fixed_window: bool, sent: u64, hold: u64, reset_after: u64) -> Due {
    if fixed_window && reset_after <= hold {
        Due {
            at: sent + reset_after,
            lapses: true,
        }
    } else {
        Due {
            at: sent + hold / 2,
            lapses: false,
        }
    }
}

/// How long after its take a fixed window's units reach the window's end, from the reply.
type WindowEnd<P> = fn(&P, &Decision) -> u64;

/// How a package holds its units.
enum Protocol<P> {
    /// The packages' rule, [`falls_due`], with this `hold`; `window_end` for a fixed window.
    Packages {
        hold: u64,
        window_end: Option<WindowEnd<P>>,
    },
    /// Another: a unit may be spent until its take + `spend`, and unspent units go back at
    /// their take + `refund`.
    Other { spend: u64, refund: u64 },
}

impl<P> Protocol<P> {
    /// How long a unit may wait to be spent (outside a window's end): the scale of the
    /// schedules' gaps.
    fn spend(&self) -> u64 {
        match *self {
            Protocol::Packages { hold, .. } => falls_due(false, 0, hold, 0).at,
            Protocol::Other { spend, .. } => spend,
        }
    }

    /// A batch taken at `t` with `reply`: the last instant its units may be spent, when they
    /// are given back, and whether they lapse instead. A unit is spent at the instant its
    /// refund is due too (in either order: a package serves it just before, and its refund
    /// reaches the module just after); a window's end belongs to the next window.
    fn batch(&self, p: &P, t: u64, reply: &Decision) -> (u64, u64, bool) {
        match *self {
            Protocol::Packages { hold, window_end } => {
                let reset_after = window_end.map_or(0, |end| end(p, reply));
                match falls_due(window_end.is_some(), t, hold, reset_after) {
                    Due { at, lapses: true } => (at - 1, at, true),
                    Due { at, lapses: false } => (at, at, false),
                }
            }
            Protocol::Other { spend, refund } => (t + spend, t + refund, false),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Refund { units: u64 },
    Request { instance: usize },
}

/// Instances sharing one key under `protocol`; returns the instants units were spent.
fn run<A: Algorithm>(
    p: &A::Params,
    rng: &mut Rng,
    (instances, k): (usize, u64),
    protocol: &Protocol<A::Params>,
    (t0, horizon): (u64, u64),
) -> Vec<u64> {
    let mut key: Key<A> = None;
    // Each instance's batches: (deadline, units, refund due at, lapses at the deadline).
    let mut held: Vec<Vec<(u64, u64, u64, bool)>> = vec![Vec::new(); instances];
    let mut events = BinaryHeap::new();
    for instance in 0..instances {
        let mut t = t0;
        loop {
            t += match rng.below(4) {
                0 => 0,
                1 => rng.below(protocol.spend() / 4 + 1),
                2 => rng.below(protocol.spend() * 2 + 1),
                _ => rng.below(horizon / 8 + 1),
            };
            if t > t0 + horizon {
                break;
            }
            events.push(Reverse((t, rng.next(), Event::Request { instance })));
        }
    }
    let mut spent = Vec::new();
    while let Some(Reverse((t, _, event))) = events.pop() {
        let instance = match event {
            Event::Refund { units } => {
                refund::<A>(&mut key, t, units);
                continue;
            }
            Event::Request { instance } => instance,
        };
        // Units past their deadline: given back, or (a window's end) dropped.
        for batches in &mut held {
            batches.retain(|&(deadline, units, at, lapses)| {
                if deadline >= t {
                    return true;
                }
                if !lapses {
                    // Due at `at`: if that was before this request, it goes first (below).
                    events.push(Reverse((at, rng.next(), Event::Refund { units })));
                }
                false
            });
        }
        if let Some(Reverse((at, _, Event::Refund { .. }))) = events.peek() {
            if *at < t {
                events.push(Reverse((t, rng.next(), event)));
                continue;
            }
        }
        let batches = &mut held[instance];
        if let Some(batch) = batches.first_mut() {
            batch.1 -= 1;
            if batch.1 == 0 {
                batches.remove(0);
            }
            spent.push(t);
            continue;
        }
        let (got, reply) = take::<A>(p, &mut key, t, k);
        if got == 0 {
            continue;
        }
        spent.push(t);
        if got > 1 {
            let (deadline, at, lapses) = protocol.batch(p, t, &reply);
            batches.push((deadline, got - 1, at, lapses));
            if rng.below(2) == 0 {
                // The rest asked for at the last instant it may be spent.
                for _ in 1..got {
                    events.push(Reverse((deadline, rng.next(), event)));
                }
            }
        }
    }
    spent.sort_unstable();
    spent
}

/// The first interval whose admissions exceed what the limit admits over it lengthened by
/// `hold`: (from, to, admitted, the limit's most).
fn broken(
    spent: &[u64],
    hold: u64,
    most: impl Fn(u64) -> usize,
) -> Option<(u64, u64, usize, usize)> {
    for (i, &from) in spent.iter().enumerate() {
        for (j, &to) in spent.iter().enumerate().skip(i) {
            let allowed = most(to - from + hold);
            if j - i + 1 > allowed {
                return Some((from, to, j - i + 1, allowed));
            }
        }
    }
    None
}

const SECOND: u64 = 1_000_000;

/// Random schedules for limits of a 1 s period or window: `hold` a quarter of it.
fn check_promise<A: Algorithm>(
    make: impl Fn(&mut Rng) -> A::Params,
    protocol: impl Fn(u64) -> Protocol<A::Params>,
    runs: u64,
) -> Result<(), String> {
    let hold = SECOND / 4;
    let mut oracles = std::collections::HashMap::new();
    for seed in 0..runs {
        let mut rng = Rng(seed);
        let p = make(&mut rng);
        let t0 = 1_700_000_000 * SECOND + rng.below(SECOND);
        let k = 1 + rng.below(8);
        let instances = 2 + rng.below(3) as usize;
        let spent = run::<A>(
            &p,
            &mut rng,
            (instances, k),
            &protocol(hold),
            (t0, 4 * SECOND),
        );
        let window = t0 - t0 % SECOND;
        let offsets: Vec<u64> = (0..8)
            .map(|i| window + i * SECOND / 8)
            .chain([window + SECOND - 1])
            .collect();
        // The offsets are whole windows apart from any other seed's: one oracle per limit.
        let oracle = oracles
            .entry(format!("{p:?}"))
            .or_insert_with(|| Oracle::new::<A>(&p, &offsets, SECOND, 12 * SECOND));
        if let Some(b) = broken(&spent, hold, |len| oracle.most(len)) {
            return Err(format!("seed {seed}, {p:?}, k {k}: {b:?}"));
        }
    }
    Ok(())
}

/// What the packages do: a unit is spent within `hold / 2` of its take, and given back then.
fn half<P>(hold: u64) -> Protocol<P> {
    Protocol::Packages {
        hold,
        window_end: None,
    }
}

/// The same, with the refund reaching the module `hold / 2` late.
fn half_late<P>(hold: u64) -> Protocol<P> {
    Protocol::Other {
        spend: hold / 2,
        refund: hold,
    }
}

/// A fixed window's: when the window ends within the whole `hold` (the reply's `reset_after`),
/// its units are spent until then and lapse; otherwise `half`.
fn half_to_window_end(hold: u64) -> Protocol<fixed_window::Params> {
    Protocol::Packages {
        hold,
        window_end: Some(|_, d| d.reset_after.ceil_us()),
    }
}

/// Spent within the whole `hold` and given back at its end.
fn whole<P>(hold: u64) -> Protocol<P> {
    Protocol::Other {
        spend: hold,
        refund: hold,
    }
}

const RUNS: u64 = 300;

fn small(r: &mut Rng) -> u64 {
    1 + r.below(10)
}

fn gcra(r: &mut Rng) -> gcra::Params {
    gcra::Params {
        burst: small(r),
        rate: small(r),
        period_ms: 1000,
    }
}

fn bucket(interval: bool) -> impl Fn(&mut Rng) -> token_bucket::Params {
    move |r| token_bucket::Params {
        capacity: small(r),
        refill_amount: small(r),
        refill_period_ms: 1000,
        interval,
    }
}

fn leaky(r: &mut Rng) -> leaky_bucket::Params {
    leaky_bucket::Params {
        capacity: small(r),
        leak_amount: small(r),
        leak_period_ms: 1000,
    }
}

fn log(r: &mut Rng) -> sliding_log::Params {
    sliding_log::Params {
        limit: small(r),
        window_ms: 1000,
    }
}

fn counter(r: &mut Rng) -> sliding_window::Params {
    sliding_window::Params {
        limit: small(r),
        window_ms: 1000,
    }
}

fn fixed(r: &mut Rng) -> fixed_window::Params {
    fixed_window::Params {
        limit: small(r),
        window_ms: 1000,
    }
}

/// A policy: every rule's own most is a bound, and the search reports the first one broken.
fn policy(r: &mut Rng) -> Rules {
    Arc::from(vec![Rule::Gcra(gcra(r)), Rule::SlidingLog(log(r))])
}

#[test]
fn every_algorithm_keeps_it_with_half_the_hold() {
    check_promise::<gcra::Gcra>(gcra, half, RUNS).unwrap();
    check_promise::<token_bucket::TokenBucket>(bucket(false), half, RUNS).unwrap();
    check_promise::<token_bucket::TokenBucket>(bucket(true), half, RUNS).unwrap();
    check_promise::<leaky_bucket::LeakyBucket>(leaky, half, RUNS).unwrap();
    check_promise::<sliding_window::SlidingWindow>(counter, half, RUNS).unwrap();
    check_promise::<sliding_log::SlidingLog>(log, half, RUNS).unwrap();
    check_promise::<RuleSet>(policy, half, RUNS).unwrap();
    check_promise::<fixed_window::FixedWindow>(fixed, half_to_window_end, RUNS).unwrap();
}

/// GCRA and the buckets keep it with the whole `hold` for each, and with half when the refund
/// comes `hold / 2` late; a sliding log does not, nor a GCRA given back three holds late.
#[test]
fn a_late_refund_costs_the_log_its_promise_but_not_gcra_and_the_buckets() {
    fn either<P>(late: bool) -> fn(u64) -> Protocol<P> {
        if late {
            half_late
        } else {
            whole
        }
    }
    for late in [false, true] {
        check_promise::<gcra::Gcra>(gcra, either(late), RUNS).unwrap();
        check_promise::<token_bucket::TokenBucket>(bucket(false), either(late), RUNS).unwrap();
        check_promise::<token_bucket::TokenBucket>(bucket(true), either(late), RUNS).unwrap();
        check_promise::<leaky_bucket::LeakyBucket>(leaky, either(late), RUNS).unwrap();
    }
    // The search can find a break: the log, the refund late (the 1,110th schedule)...
    let late = check_promise::<sliding_log::SlidingLog>(log, half_late, 2000);
    assert!(late.unwrap_err().starts_with("seed 1110,"));
    let very_late = |hold| Protocol::Other {
        spend: hold,
        refund: 3 * hold,
    };
    let gcra_late = check_promise::<gcra::Gcra>(gcra, very_late, RUNS);
    assert!(gcra_late.unwrap_err().starts_with("seed 138,"));
    // ... and a fixed window whose units are given back in the next window.
    let next = check_promise::<fixed_window::FixedWindow>(fixed, whole, 3000);
    assert!(next.unwrap_err().starts_with("seed 2848,"));
}

/// Why half: with the whole `hold` to wait and the refund at its end, four instances on a
/// sliding log of 10 a minute (`hold` 15 s) admit 15 in 30 s, 11 in an
/// interval of 30 s + `hold` < the window. A takes 5 at 0 s; B takes 5 at 15 s; A gives its 5
/// back at 15 s, which removes B's (the newest); C takes 5 at 30 s and spends them, and B
/// spends its 5 then too; at 60 s A's entries of 0 s leave the window and D is given 5.
#[test]
fn a_log_refund_at_the_whole_hold_breaks_the_promise() {
    type Log = sliding_log::SlidingLog;
    let p = sliding_log::Params {
        limit: 10,
        window_ms: 60_000,
    };
    let t0 = 1_700_000_000 * SECOND;
    let mut key: Key<Log> = None;
    assert_eq!(take::<Log>(&p, &mut key, t0, 5).0, 5);
    assert_eq!(take::<Log>(&p, &mut key, t0 + 15 * SECOND, 5).0, 5);
    refund::<Log>(&mut key, t0 + 15 * SECOND, 5);
    assert_eq!(take::<Log>(&p, &mut key, t0 + 30 * SECOND, 5).0, 5);
    assert_eq!(take::<Log>(&p, &mut key, t0 + 60 * SECOND, 5).0, 5);
    let spent: Vec<u64> = [(30, 10), (60, 5)]
        .iter()
        .flat_map(|&(at, n)| std::iter::repeat_n(t0 + at * SECOND, n))
        .collect();
    let oracle = Oracle::new::<Log>(&p, &[t0], 60 * SECOND, 300 * SECOND);
    assert_eq!(oracle.most(45 * SECOND), 10);
    assert_eq!(
        broken(&spent, 15 * SECOND, |len| oracle.most(len)),
        Some((t0 + 30 * SECOND, t0 + 60 * SECOND, 11, 10))
    );
    // With half the hold for each (7.5 s to spend, given back at 7.5 s), B's take comes
    // before A's refund and its spending by 15 s; the same schedule stays within the promise.
    let mut key: Key<Log> = None;
    take::<Log>(&p, &mut key, t0, 5);
    take::<Log>(&p, &mut key, t0 + 7_500_000, 5);
    refund::<Log>(&mut key, t0 + 7_500_000, 5);
    assert_eq!(take::<Log>(&p, &mut key, t0 + 15 * SECOND, 5).0, 5);
    assert_eq!(take::<Log>(&p, &mut key, t0 + 60 * SECOND, 5).0, 5);
    let spent: Vec<u64> = [(15, 10), (60, 5)]
        .iter()
        .flat_map(|&(at, n)| std::iter::repeat_n(t0 + at * SECOND, n))
        .collect();
    assert_eq!(broken(&spent, 15 * SECOND, |len| oracle.most(len)), None);
}

/// The kinds of limit a package keeps a local budget of, by their command (`INTERVAL`: the
/// token bucket's flag; `RL.LIMIT`: a policy): whether the rule takes each for a fixed window.
/// A concurrency limit has none (a lease per request).
const KINDS: [(&str, bool); 9] = [
    ("RL.GCRA", false),
    ("RL.TOKENBUCKET", false),
    ("RL.TOKENBUCKET INTERVAL", false),
    ("RL.LEAKYBUCKET", false),
    ("RL.FIXEDWINDOW", true),
    ("RL.SLIDINGWINDOW", false),
    ("RL.SLIDINGLOG", false),
    ("RL.WARMUP", false),
    ("RL.LIMIT", false),
];

/// `clients/lua/conformance/budget.json`: [`falls_due`] for every kind, in the packages' units.
/// Each case: the kind, `sent_us` (the clock read before the refill left: Python's in µs,
/// Node's in ms with fractions), `hold_ms` (a whole number of ms in both packages: the odd ones
/// give half a ms), the reply's `reset_after_ms` (at least 1 after a grant: the window has not
/// ended), and what the rule says: `due_us`, when the batch's units are no longer spent, and
/// `lapses` (dropped then) or not (given back then). The reply's `reset_after_ms` and the hold
/// are compared in µs, as the model does.
fn generate() -> String {
    const MS: u64 = 1000;
    let holds: [u64; 12] = [
        1, 2, 10, 11, 15, 249, 250, 999, 1000, 1001, 60_000, 86_400_001,
    ];
    let sents = [
        0,
        1,
        999,
        MS,
        1001,
        123_456_789,
        864_000_000_123,
        86_399_999_999,
    ];
    let mut cases = Vec::new();
    let mut n = 0usize;
    for (command, fixed_window) in KINDS {
        for hold_ms in holds {
            let mut resets = vec![
                1,
                hold_ms / 2,
                hold_ms.div_ceil(2),
                hold_ms - 1,
                hold_ms,
                hold_ms + 1,
                2 * hold_ms,
                315_360_000_000,
            ];
            resets.retain(|&r| r > 0);
            resets.sort_unstable();
            resets.dedup();
            for reset_after_ms in resets {
                let sent_us = sents[n % sents.len()];
                n += 1;
                let due = falls_due(fixed_window, sent_us, hold_ms * MS, reset_after_ms * MS);
                cases.push(format!(
                    "{{\"kind\": \"{command}\", \"sent_us\": {sent_us}, \"hold_ms\": {hold_ms}, \
                     \"reset_after_ms\": {reset_after_ms}, \"due_us\": {}, \"lapses\": {}}}",
                    due.at, due.lapses
                ));
            }
        }
    }
    format!(
        "{{\"generator\": \"algorithms/src/budget_promise.rs\", \"cases\": [\n{}\n]}}\n",
        cases.join(",\n")
    )
}

/// The packages' copies of the rule are held to budget.json; this fails when the committed
/// file is not what [`falls_due`] says (`RATELIMIT_WRITE_VECTORS` set: writes it first).
#[test]
fn the_committed_budget_rule_is_what_the_crate_decides() {
    let text = generate();
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../clients/lua/conformance/budget.json");
    if std::env::var_os("RATELIMIT_WRITE_VECTORS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not what the crate's budget rule (falls_due) says now: if the change is meant, \
         write it anew (RATELIMIT_WRITE_VECTORS=1 cargo test --release -p ratelimit-algorithms \
         --lib budget) and commit it with the change, then make the packages agree",
        path.display()
    );
}
