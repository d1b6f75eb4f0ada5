//! The rate-limit algorithms of the ratelimit Redis module: pure state machines.
//!
//! Every algorithm is one step, `(params, state, now, cost) -> (decision, state)`: its
//! [`Algorithm::check`] takes
//! - the request's parameters (what the command's arguments say);
//! - the key's stored parameters and state, `None` for a fresh key (stored parameters that
//!   differ from the request's carry the state over, never in the caller's favour);
//! - one clock reading, `now_us`, in microseconds since the Unix epoch (the module's:
//!   nothing here reads a clock);
//! - the request's `cost` in units, and `write`: whether an admitted request counts (the
//!   module clears it for DRYRUN and COST 0);
//!
//! and returns a [`Decision`] (what the reply says) and the state. Only an admitted request
//! that writes changes the state: a stored state in place, a fresh key's returned as the
//! state to store. A refusal, or a call that does not write, leaves it exactly as it was,
//! so that a primary and its replicas (which see only the writes) hold the same bytes. The
//! same key gives the largest cost admitted now ([`Algorithm::largest_cost`], ATMOST), takes
//! a refund ([`Algorithm::refund`], RL.REFUND) and shows itself as a typed [`Snapshot`]
//! (RL.INSPECT).
//!
//! Nothing here knows Redis (the crate has no dependencies), reads a clock or allocates per
//! call, and no input makes it panic: arithmetic saturates. How a decision or a snapshot
//! becomes a reply is the module's.
//!
//! ```
//! use ratelimit_algorithms::fixed_window::{FixedWindow, Params};
//! use ratelimit_algorithms::{Algorithm, Span};
//!
//! let params = Params { limit: 2, window_ms: 60_000 }; // two a minute
//! let t0 = 1_699_927_200_000_000; // 2023-11-14 02:00:00 UTC, in µs
//!
//! // A fresh key: the request is admitted, and the state to store comes back.
//! let (first, fresh) = FixedWindow::check(&params, None, t0, 1, true);
//! assert_eq!((first.allowed, first.remaining), (true, 1));
//! let mut state = fresh.expect("an admitted request that writes makes a state");
//!
//! // A stored key is updated in place.
//! let (second, none) = FixedWindow::check(&params, Some((&params, &mut state)), t0, 1, true);
//! assert_eq!((second.allowed, second.remaining, none), (true, 0, None));
//!
//! // A refusal says when the same request is admitted, and changes nothing.
//! let before = state;
//! let later = t0 + 20_000_000;
//! let (third, _) = FixedWindow::check(&params, Some((&params, &mut state)), later, 1, true);
//! assert_eq!(third.retry_after, Some(Span::from_us(40_000_000)));
//! assert_eq!(state, before);
//! ```
//!
//! The algorithms, a module each: [`gcra`], [`token_bucket`], [`leaky_bucket`],
//! [`fixed_window`], [`sliding_window`], [`sliding_log`], [`warmup`], [`concurrency`]; and
//! [`rule_set`], a policy's rules at once (RL.LIMIT); [`request`], what the options COST,
//! ATMOST, DRYRUN, BLOCK ([`penalty`]) and SHADOW decide around any of them; and [`ranges`],
//! the ranges the arithmetic is exact over. Beside them, [`counter`]: a fixed window kept as
//! a plain integer string whose TTL is the window (RL.COUNTER), as other libraries keep it.

#![warn(missing_docs)]
// Plain arithmetic on values: no unsafe code belongs here, and the compiler keeps it out.
#![forbid(unsafe_code)]

pub mod adaptive;
pub mod concurrency;
pub mod counter;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod penalty;
pub mod policy_versions;
pub mod ranges;
pub mod request;
pub mod rule_set;
pub mod sliding_log;
pub mod sliding_window;
pub mod space_saving;
pub mod token_bucket;
pub mod warmup;

/// An exact, non-negative span of time: `num / den` microseconds.
///
/// Algorithms that keep time in fractions of a microsecond (GCRA keeps it in units of
/// 1/rate µs so that `period / rate` is exact) report spans in their own unit; the
/// conversions to whole milliseconds or seconds round here, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    num: u128,
    den: u128,
}

impl Span {
    /// No time at all: the `retry_after` of an admitted request, the `reset_after` of a
    /// fresh key.
    pub const ZERO: Span = Span { num: 0, den: 1 };

    /// `num / den` microseconds; a zero `den` is taken as 1.
    pub fn new(num: u128, den: u128) -> Span {
        Span {
            num,
            den: den.max(1),
        }
    }

    /// A whole number of microseconds.
    pub fn from_us(us: u64) -> Span {
        Span::new(u128::from(us), 1)
    }

    /// Whether the span is no time at all.
    pub fn is_zero(&self) -> bool {
        self.num == 0
    }

    /// Whole milliseconds, rounded up: the least whole number of ms that is not shorter.
    #[inline]
    pub fn ceil_ms(&self) -> u64 {
        saturate(ceil_div(self.num, self.den.saturating_mul(1000)))
    }

    /// Whole milliseconds, rounded down.
    #[inline]
    pub fn floor_ms(&self) -> u64 {
        let (n, d) = (self.num, self.den.saturating_mul(1000));
        // In 64 bits when both fit, as in `ceil_div`.
        saturate(match (u64::try_from(n), u64::try_from(d)) {
            (Ok(n), Ok(d)) => u128::from(n / d),
            _ => n / d,
        })
    }

    /// Whole microseconds, rounded up.
    #[inline]
    pub fn ceil_us(&self) -> u64 {
        saturate(ceil_div(self.num, self.den))
    }
}

/// `n / d` rounded up, `d` > 0. In 64 bits when both fit (nearly always: spans are
/// microseconds, times a rate at most), where one division gives quotient and remainder;
/// two 128-bit divisions (quotient, then remainder) otherwise. Every reply rounds two
/// spans, every write its expiry.
#[inline]
fn ceil_div(n: u128, d: u128) -> u128 {
    match (u64::try_from(n), u64::try_from(d)) {
        (Ok(n), Ok(d)) => u128::from(n.div_ceil(d)),
        _ => n.div_ceil(d),
    }
}

fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// What an admission command answers (the reply, README.md), before it becomes a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The most units a fresh key admits at once.
    pub limit: u64,
    /// Units that could still be admitted right now, after this request.
    pub remaining: u64,
    /// Zero when admitted; when denied, how long until the same request would be admitted;
    /// `None` when it never can be (the cost is above the limit).
    pub retry_after: Option<Span>,
    /// How long until the key is fresh again (zero when it is fresh).
    pub reset_after: Span,
    /// RL.LEAKYBUCKET only: how long an admitted request waits for its turn.
    pub delay: Option<Span>,
}

/// A key's parameters and state as of one instant, as typed values: each algorithm's own
/// [`Algorithm::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// RL.GCRA's key.
    Gcra(gcra::Snapshot),
    /// RL.TOKENBUCKET's key.
    TokenBucket(token_bucket::Snapshot),
    /// RL.LEAKYBUCKET's key.
    LeakyBucket(leaky_bucket::Snapshot),
    /// RL.FIXEDWINDOW's key.
    FixedWindow(fixed_window::Snapshot),
    /// RL.SLIDINGWINDOW's key.
    SlidingWindow(sliding_window::Snapshot),
    /// RL.SLIDINGLOG's key.
    SlidingLog(sliding_log::Snapshot),
    /// RL.WARMUP's key.
    Warmup(warmup::Snapshot),
    /// RL.CONCURRENCY.ACQUIRE's key.
    Concurrency(concurrency::Snapshot),
    /// RL.LIMIT's key: a policy's rules at once.
    RuleSet(rule_set::Snapshot),
}

impl Snapshot {
    /// The key as a request of no units would see it at the snapshot's instant.
    pub fn now(&self) -> Decision {
        match self {
            Snapshot::Gcra(s) => s.now,
            Snapshot::TokenBucket(s) => s.now,
            Snapshot::LeakyBucket(s) => s.now,
            Snapshot::FixedWindow(s) => s.now,
            Snapshot::SlidingWindow(s) => s.now,
            Snapshot::SlidingLog(s) => s.now,
            Snapshot::Warmup(s) => s.now,
            Snapshot::Concurrency(s) => s.now,
            Snapshot::RuleSet(s) => s.now,
        }
    }
}

/// An algorithm's pure step. `Params` are what the command's arguments give; `State` is
/// what the key stores between calls.
pub trait Algorithm {
    /// The parameters a request names (a command's arguments, or a policy's rules).
    type Params: Clone + PartialEq + std::fmt::Debug;
    /// What a key stores between calls, besides the parameters it was written with.
    type State: Clone + PartialEq + std::fmt::Debug;

    /// Decides a request of `cost` units at `now_us`.
    ///
    /// `stored` is the key's previous parameters and state (`None`: a fresh key). When they
    /// differ from `params`, the state carries over as the units it has taken, measured with
    /// the new parameters, never in the caller's favour, and the new parameters apply from now
    /// on: at one instant, requests under any sequence of parameter sets admit in total at
    /// most the largest limit among them (docs/algorithms.md, Changing parameters; the tests check
    /// it with
    /// `testing::admitted_at_one_instant`).
    ///
    /// The state changes only when the request is admitted and `write` is set (the caller
    /// clears it for DRYRUN and COST 0): then a stored state is updated in place, and for a
    /// fresh key the new state is returned. A denied request, or any call without `write`,
    /// leaves the state exactly as it was and returns `None`, so that a primary and its
    /// replicas (which see only the writes) hold the same bytes.
    fn check(
        params: &Self::Params,
        stored: Option<(&Self::Params, &mut Self::State)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<Self::State>);

    /// The largest COST that a request of these `params` at `now_us` would be admitted with
    /// (what a DRYRUN at that instant admits), `stored` being the key's previous parameters and
    /// state as [`Algorithm::check`] takes them. Zero when not even one unit fits (and also when
    /// a request of no units is denied, as after a smaller limit). This is the grant of the
    /// `ATMOST n` option before it is capped at `n`. O(1), or O(log n) in the key's state: a
    /// formula, never a search over costs. Admission is monotone in the cost for every
    /// algorithm, so every COST up to this one is admitted too.
    fn largest_cost(
        params: &Self::Params,
        stored: Option<(&Self::Params, &Self::State)>,
        now_us: u64,
    ) -> u64;

    /// RL.REFUND: gives back up to `units` of what the key holds as taken, as of `now_us`,
    /// under the key's own `params` (those it was written with). Returns the units given
    /// back; the state is then what it would be had those units not been admitted, never
    /// fresher than fresh, moved exactly (each algorithm's doc says what "taken" means and
    /// which way it rounds: never in the caller's favour). When it returns 0 the state is
    /// untouched. For a DRYRUN the caller passes a copy.
    fn refund(params: &Self::Params, state: &mut Self::State, now_us: u64, units: u64) -> u64;

    /// The parameters and state as of `now_us`, as typed values (what RL.INSPECT shows; the
    /// module names the fields).
    fn snapshot(params: &Self::Params, state: &Self::State, now_us: u64) -> Snapshot;

    /// The key as of `now_us` (what a request of no units would be told), without writing.
    fn view_now(params: &Self::Params, state: &Self::State, now_us: u64) -> Decision {
        // A check that does not write leaves the state alone; the copy satisfies `&mut`.
        let mut copy = state.clone();
        Self::check(params, Some((params, &mut copy)), now_us, 0, false).0
    }

    /// Whether `state` is one this algorithm could have written under `params`: what a
    /// state read back from bytes (a damaged RDB, a crafted RESTORE) is checked against
    /// before it is used. Every state is, unless the algorithm says otherwise.
    fn is_valid(_params: &Self::Params, _state: &Self::State) -> bool {
        true
    }

    /// How long a key is kept after it is fresh again, in ms: its expiry is the decision's
    /// `reset_after` plus this. Nothing, unless what the key learned is worth keeping (an
    /// adaptive concurrency limit).
    fn kept_ms(_params: &Self::Params) -> u64 {
        0
    }
}

/// A limiter of work in flight rather than of a rate: a request takes a lease, held until it
/// is released or for its longest time, and what a release reports may move the limit (an
/// adaptive limit, [`adaptive`]). Netflix's concurrency-limits splits a limiter from its
/// limit the same way. As an [`Algorithm`], a lease's check is an acquisition with a
/// generated token; the commands acquire and release with the caller's tokens here.
pub trait Lease: Algorithm {
    /// What a release reports of the work its lease covered.
    type Report;

    /// Takes a lease at `now_us`, named `id` or a generated token, keeping
    /// [`Algorithm::check`]'s contract (`stored` is the key's previous parameters and state,
    /// `None` for a fresh key; the state changes only when admitted with `write`, a fresh
    /// key's returned). Also returns the lease's token when admitted and written.
    fn acquire(
        params: &Self::Params,
        stored: Option<(&Self::Params, &mut Self::State)>,
        now_us: u64,
        id: Option<&[u8]>,
        write: bool,
    ) -> (Decision, Option<Self::State>, Option<Vec<u8>>);

    /// Ends the lease named `token` at `now_us`, with what its holder reports; false when no
    /// such lease is held (unknown or ended), and then nothing changes.
    fn release(state: &mut Self::State, token: &[u8], now_us: u64, report: Self::Report) -> bool;

    /// How long until the key's last lease ends, from `now_us`.
    fn reset_after(state: &Self::State, now_us: u64) -> Span;
}

/// Keeps `new` as the key's state: in place for a stored key (`Some`), or returned as a
/// fresh key's state. What [`Algorithm::check`] does with an admitted request that writes.
pub fn keep<S>(stored: Option<&mut S>, new: S) -> Option<S> {
    match stored {
        Some(state) => {
            *state = new;
            None
        }
        None => Some(new),
    }
}

#[cfg(test)]
mod budget_promise;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod vectors;

#[cfg(test)]
mod tests {
    use super::*;

    /// The property tests look for arithmetic that wraps: that needs overflow checks in the
    /// build that runs them (the workspace's Cargo.toml turns them on for this crate, release
    /// included).
    #[test]
    fn tests_run_with_overflow_checks() {
        let max = std::hint::black_box(u64::MAX);
        assert!(std::panic::catch_unwind(|| max + 1).is_err());
    }

    #[test]
    fn span_rounding() {
        let s = Span::new(1_000_001, 1); // 1000.001 ms
        assert_eq!(
            (s.ceil_ms(), s.floor_ms(), s.ceil_us()),
            (1001, 1000, 1_000_001)
        );
        let third = Span::new(1, 3); // a third of a microsecond
        assert_eq!(
            (third.ceil_ms(), third.floor_ms(), third.ceil_us()),
            (1, 0, 1)
        );
        assert_eq!(Span::ZERO.ceil_ms(), 0);
        assert_eq!(Span::new(5, 0).ceil_us(), 5);
        assert_eq!(Span::new(u128::MAX, 1).ceil_ms(), u64::MAX);
        assert_eq!(Span::new(u128::MAX, u128::MAX).ceil_ms(), 1);
        assert_eq!(Span::new(3000, 3).ceil_ms(), 1);
        assert_eq!(Span::new(3001, 3).ceil_ms(), 2);
    }

    proptest::proptest! {
        /// Rounding up is the quotient, plus one when the division leaves a remainder: in
        /// 128 bits, and in the 64-bit fast path (the values shifted down to fit).
        #[test]
        fn ceil_div_is_the_rounded_up_quotient(n: u128, d in 1u128..) {
            for shift in [0, 64, 100, 127] {
                let (n, d) = (n >> shift, (d >> shift).max(1));
                let expected = n / d + u128::from(n % d != 0);
                proptest::prop_assert_eq!(ceil_div(n, d), expected);
            }
        }
    }
}
