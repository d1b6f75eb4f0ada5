//! The rule set behind RL.LIMIT: several rules checked at once against the state of one key,
//! all or nothing.
//!
//! A rule set (a policy, as RL.POLICY.SET names one) is a list of rules, each an admission
//! algorithm with its parameters ("10 per second, 300 per minute, 5000 per day"). The key
//! keeps one state per rule, in the order of the rules it was last written with. A request:
//!
//! - is checked by every rule, each on a copy of its state;
//! - is admitted only if every rule admits it; then (when it writes) every rule's new state
//!   is kept; if any rule refuses, no state changes;
//! - is answered with the *binding* rule: when admitted, the one with the fewest remaining
//!   (the one that will refuse first); when denied, the one whose refusal lasts longest (a
//!   rule that can never admit the cost binds first). Ties go to the earlier rule.
//!
//! When a policy changes, each rule of the new policy takes the state of a rule of the same
//! algorithm the key holds, if any (`matches`: identical rules first, then a rule over the
//! same period or window, then in order), and carries it over to its new parameters as its
//! algorithm does for a key (docs/algorithms.md: never in the caller's favour). Only a rule with no
//! state of its algorithm left starts fresh; the state of a rule no longer in the policy is
//! dropped at the next write.

use std::sync::Arc;

use super::fixed_window::{self, FixedWindow};
use super::gcra::{self, Gcra};
use super::leaky_bucket::{self, LeakyBucket};
use super::sliding_log::{self, SlidingLog};
use super::sliding_window::{self, SlidingWindow};
use super::token_bucket::{self, TokenBucket};
use super::warmup::{self, Warmup};
use super::{Algorithm, Decision, Snapshot as AnySnapshot, Span};

/// The most rules a policy holds.
pub const MAX_RULES: usize = 16;

/// Declares [`Rule`] and [`RuleState`] with one variant per algorithm a rule can use, and
/// the dispatch from a rule to its algorithm.
macro_rules! rules {
    ($($variant:ident($algorithm:ty, $module:ident) = $kind:literal;)*) => {
        /// One rule of a policy: an algorithm and its parameters.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Rule {
            $(#[doc = concat!("A ", $kind, " rule, with its parameters.")]
            $variant($module::Params),)*
        }

        /// The state one rule keeps in a key.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum RuleState {
            $(#[doc = concat!("The state of a ", $kind, " rule.")]
            $variant(<$algorithm as Algorithm>::State),)*
        }

        impl Rule {
            /// The rule's algorithm as RL.INSPECT names it.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Rule::$variant(_) => $kind,)*
                }
            }

            /// Checks a request against this rule, with `stored` the rule the key's state was
            /// written under and that state (`None`: fresh), under [`Algorithm::check`]'s
            /// contract: the state carries over to this rule's parameters; with `write`, an
            /// admitted request updates it in place, or returns a fresh rule's new state.
            fn check(
                &self,
                stored: Option<(&Rule, &mut RuleState)>,
                now_us: u64,
                cost: u64,
                write: bool,
            ) -> (Decision, Option<RuleState>) {
                match self {
                    $(Rule::$variant(params) => {
                        let stored = match stored {
                            Some((Rule::$variant(old), RuleState::$variant(s))) => Some((old, s)),
                            _ => None,
                        };
                        let (decision, fresh) =
                            <$algorithm>::check(params, stored, now_us, cost, write);
                        (decision, fresh.map(RuleState::$variant))
                    })*
                }
            }

            /// [`Algorithm::largest_cost`] for this rule, with `stored` as for `check`.
            fn largest_cost(&self, stored: Option<(&Rule, &RuleState)>, now_us: u64) -> u64 {
                match self {
                    $(Rule::$variant(params) => {
                        let stored = match stored {
                            Some((Rule::$variant(old), RuleState::$variant(s))) => Some((old, s)),
                            _ => None,
                        };
                        <$algorithm>::largest_cost(params, stored, now_us)
                    })*
                }
            }

            /// [`Algorithm::refund`] for this rule, the key's `state` having been written under
            /// it; 0 (and nothing changes) if the state is not the rule's.
            fn refund(&self, state: &mut RuleState, now_us: u64, units: u64) -> u64 {
                match (self, state) {
                    $((Rule::$variant(params), RuleState::$variant(s)) => {
                        <$algorithm>::refund(params, s, now_us, units)
                    })*
                    _ => 0,
                }
            }

            /// This rule with `state` as of `now_us` ([`Algorithm::snapshot`]); `None` if the
            /// state is not the rule's (never stored, see `belongs`).
            pub fn snapshot(&self, state: &RuleState, now_us: u64) -> Option<AnySnapshot> {
                match (self, state) {
                    $((Rule::$variant(params), RuleState::$variant(s)) => {
                        Some(<$algorithm>::snapshot(params, s, now_us))
                    })*
                    _ => None,
                }
            }
        }

        impl RuleState {
            /// Whether this is a state of `rule`'s algorithm.
            pub fn belongs(&self, rule: &Rule) -> bool {
                matches!(
                    (rule, self),
                    $((Rule::$variant(_), RuleState::$variant(_)))|*
                )
            }
        }
    };
}

rules! {
    Gcra(Gcra, gcra) = "gcra";
    TokenBucket(TokenBucket, token_bucket) = "tokenbucket";
    LeakyBucket(LeakyBucket, leaky_bucket) = "leakybucket";
    FixedWindow(FixedWindow, fixed_window) = "fixedwindow";
    SlidingWindow(SlidingWindow, sliding_window) = "slidingwindow";
    SlidingLog(SlidingLog, sliding_log) = "slidinglog";
    Warmup(Warmup, warmup) = "warmup";
}

/// The rules of a policy, shared between the policy and the keys written under it.
pub type Rules = Arc<[Rule]>;

/// What every rule said about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The request as a whole: the binding rule's decision, but `reset_after` is the longest
    /// of all the rules' (the key lives until every rule is fresh again).
    pub decision: Decision,
    /// The binding rule's index in the policy.
    pub binding: usize,
    /// The binding rule's own decision.
    pub binding_decision: Decision,
    /// Bit `i` set: rule `i` is a shadow rule that refused the request (see [`step_shadow`]).
    pub shadow_denied: u32,
}

/// Which stored state each rule of `rules` takes (`None`: the rule starts fresh), each old
/// rule's state going to one new rule at most, in three passes over the rules still
/// unmatched, each in the policy's order:
/// 1. an identical rule (same algorithm, same arguments), wherever it stands;
/// 2. a rule of the same algorithm over the same period or window (a changed limit);
/// 3. the first rule left of the same algorithm.
///
/// A rule that takes a changed rule's state carries it over to its own parameters, never in
/// the caller's favour (docs/algorithms.md, Changing parameters). The common case, an unchanged
/// policy, ends after pass 1; and when `old` is `rules` itself (the caller read the key
/// under the very rules it names, as the module's storage does), each rule takes its own
/// place's state without a comparison, which is what pass 1 finds then.
fn matches(rules: &[Rule], old: &[Rule], states: &[RuleState]) -> [Option<usize>; MAX_RULES] {
    let mut found = [None; MAX_RULES];
    let same = std::ptr::eq(rules, old)
        && states.len() == rules.len()
        && rules.iter().zip(states).all(|(r, s)| s.belongs(r));
    if same {
        for (i, slot) in found.iter_mut().take(rules.len()).enumerate() {
            *slot = Some(i);
        }
        return found;
    }
    let mut used = [false; MAX_RULES];
    let passes: [fn(&Rule, &Rule) -> bool; 3] = [
        |o, r| o == r,
        |o, r| o.kind() == r.kind() && o.period_ms() == r.period_ms(),
        |o, r| o.kind() == r.kind(),
    ];
    for pass in passes {
        let mut left = false;
        for (slot, rule) in found.iter_mut().zip(rules) {
            if slot.is_some() {
                continue;
            }
            *slot = old
                .iter()
                .zip(states)
                .zip(&used)
                .position(|((o, s), &u)| !u && s.belongs(rule) && pass(o, rule));
            match *slot {
                Some(j) => used[j] = true,
                None => left = true,
            }
        }
        if !left {
            break;
        }
    }
    found
}

impl Rule {
    /// The rule's period or window, in ms: what makes two rules of one algorithm count the
    /// same span of time.
    fn period_ms(&self) -> u64 {
        match self {
            Rule::Gcra(p) => p.period_ms,
            Rule::TokenBucket(p) => p.refill_period_ms,
            Rule::LeakyBucket(p) => p.leak_period_ms,
            Rule::FixedWindow(p) => p.window_ms,
            Rule::SlidingWindow(p) => p.window_ms,
            Rule::SlidingLog(p) => p.window_ms,
            Rule::Warmup(p) => p.period_ms,
        }
    }
}

/// RL.LIMIT's step: checks a request against every rule of `rules`, with `stored` the rules
/// the key was last written with and their states (`None`: a fresh key), under
/// [`Algorithm::check`]'s contract: the states change only when every rule admits the
/// request and it writes; then a stored key's states are updated (in place when its rules
/// are the policy's, as they are but after a policy change), and a fresh key's are returned.
///
/// Every rule is first asked without writing, on its own state: no copy, however large a
/// sliding log. (A check without `write` decides as the real request would: each
/// algorithm's `dryrun_decides_like_the_real_request` property.) Only if all admit does each
/// count the request.
///
/// # Example
///
/// Ten a second and three a minute: three units are admitted at once; a fourth fits the
/// first rule but not the second, so the policy refuses it, binding on the minute's rule
/// (the wait is the rest of the minute), and no rule counts it.
///
/// ```
/// use std::sync::Arc;
///
/// use ratelimit_algorithms::rule_set::{step, Rule, Rules};
/// use ratelimit_algorithms::{fixed_window, gcra};
///
/// let rules: Rules = Arc::from(vec![
///     Rule::Gcra(gcra::Params { burst: 10, rate: 10, period_ms: 1000 }),
///     Rule::FixedWindow(fixed_window::Params { limit: 3, window_ms: 60_000 }),
/// ]);
/// let t0 = 1_699_927_200_000_000; // a round minute, µs since the Unix epoch
/// let (three, states) = step(&rules, None, t0, 3, true);
/// assert!(three.decision.allowed);
///
/// let mut states = states.expect("an admitted request makes the key's states");
/// let before = states.clone();
/// let (fourth, _) = step(&rules, Some((&rules[..], &mut states)), t0, 1, true);
/// assert!(!fourth.decision.allowed);
/// assert_eq!(fourth.binding, 1);
/// assert_eq!(fourth.decision.retry_after.map(|s| s.ceil_ms()), Some(60_000));
/// assert_eq!(states, before);
/// ```
pub fn step(
    rules: &[Rule],
    stored: Option<(&[Rule], &mut Vec<RuleState>)>,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Verdict, Option<Vec<RuleState>>) {
    step_shadow(rules, 0, stored, now_us, cost, write)
}

/// [`step`] with shadow rules: bit `i` of `shadow` marks rule `i` as a shadow rule, checked
/// like the others but never refusing the request. A shadow rule's refusal is reported in
/// [`Verdict::shadow_denied`]; it takes no part in `allowed` or the binding rule, but its
/// state's `reset_after` does count for the key's. When the request is admitted and writes,
/// a shadow rule counts it only if it admitted it itself (an algorithm's refusal writes
/// nothing), so its state never runs into a debt the algorithm cannot hold, and it goes on
/// measuring what it would admit were it enforced. With `shadow == 0` this is [`step`].
pub fn step_shadow(
    rules: &[Rule],
    shadow: u32,
    stored: Option<(&[Rule], &mut Vec<RuleState>)>,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Verdict, Option<Vec<RuleState>>) {
    let (old, mut states) = match stored {
        Some((old, states)) => (old, Some(states)),
        None => (&[][..], None),
    };
    let found = matches(rules, old, states.as_deref().map_or(&[], Vec::as_slice));
    let mut binding: Option<(usize, Decision)> = None;
    let mut allowed = true;
    let mut reset_after: Option<Span> = None;
    let mut shadow_denied = 0u32;
    for (i, rule) in rules.iter().enumerate() {
        let stored = match (found.get(i).copied().flatten(), states.as_deref_mut()) {
            (Some(j), Some(states)) => old.get(j).zip(states.get_mut(j)),
            _ => None,
        };
        let (decision, _) = rule.check(stored, now_us, cost, false);
        if reset_after.is_none_or(|r| decision.reset_after.ceil_us() > r.ceil_us()) {
            reset_after = Some(decision.reset_after);
        }
        if shadow & (1 << i) != 0 {
            if !decision.allowed {
                shadow_denied |= 1 << i;
            }
            continue;
        }
        allowed &= decision.allowed;
        if binding
            .as_ref()
            .is_none_or(|(_, b)| binds_before(&decision, b))
        {
            binding = Some((i, decision));
        }
    }
    if !allowed && cost > 0 {
        // Refused, the request takes nothing from any rule: the key is fresh when every rule
        // is, each as a request of no units sees it (a rule that alone would admit the cost
        // said when it would be fresh after taking it).
        reset_after = None;
        for (i, rule) in rules.iter().enumerate() {
            let stored = match (found.get(i).copied().flatten(), states.as_deref_mut()) {
                (Some(j), Some(states)) => old.get(j).zip(states.get_mut(j)),
                _ => None,
            };
            let reset = rule.check(stored, now_us, 0, false).0.reset_after;
            if reset_after.is_none_or(|r| reset.ceil_us() > r.ceil_us()) {
                reset_after = Some(reset);
            }
        }
    }
    let (index, binding_decision) = binding.unwrap_or((0, EMPTY));
    let mut decision = binding_decision;
    decision.allowed = allowed;
    decision.reset_after = reset_after.unwrap_or(Span::ZERO);
    let outcome = Verdict {
        decision,
        binding: index,
        binding_decision,
        shadow_denied,
    };
    if !(allowed && write && cost > 0) {
        return (outcome, None);
    }
    let in_place = states.as_ref().is_some_and(|s| s.len() == rules.len())
        && (0..rules.len()).all(|i| found.get(i).copied().flatten() == Some(i));
    match states {
        Some(states) if in_place => {
            for ((rule, old), state) in rules.iter().zip(old).zip(states.iter_mut()) {
                let (decision, _) = rule.check(Some((old, state)), now_us, cost, true);
                if !decision.allowed && old != rule {
                    if let Some(fresh) = shadow_fresh(rule, now_us) {
                        *state = fresh;
                    }
                }
            }
            (outcome, None)
        }
        states => {
            let mut next = Vec::with_capacity(rules.len());
            for (i, rule) in rules.iter().enumerate() {
                let (from, mut state) = match (found.get(i).copied().flatten(), states.as_deref()) {
                    (Some(j), Some(states)) => (old.get(j), states.get(j).cloned()),
                    _ => (None, None),
                };
                let had_state = state.is_some();
                let (decision, fresh) = rule.check(from.zip(state.as_mut()), now_us, cost, true);
                let kept = fresh.or(state);
                // A fresh shadow rule that refused the request has nothing to keep, yet every
                // rule needs its state; a shadow rule changed by the policy that refused it
                // holds a state in its old rule's units. Either starts afresh (`shadow_fresh`).
                let kept = match kept {
                    None if !had_state && shadow & (1 << i) != 0 => shadow_fresh(rule, now_us),
                    Some(_) if !decision.allowed && from != Some(rule) => {
                        shadow_fresh(rule, now_us).or(kept)
                    }
                    kept => kept,
                };
                next.extend(kept);
            }
            match states {
                Some(states) => {
                    *states = next;
                    (outcome, None)
                }
                None => (outcome, Some(next)),
            }
        }
    }
}

/// The state a shadow rule starts afresh with when it refused an admitted request and has no
/// state of its own rule to keep: a request of no units' (or, for an algorithm that keeps none
/// for that, one unit's, the least it can hold). Only a shadow rule refuses a request that is
/// admitted, so only a shadow rule comes here.
fn shadow_fresh(rule: &Rule, now_us: u64) -> Option<RuleState> {
    rule.check(None, now_us, 0, true)
        .1
        .or_else(|| rule.check(None, now_us, 1, true).1)
}

/// The decision of a policy without rules (which RL.POLICY.SET never makes).
const EMPTY: Decision = Decision {
    allowed: true,
    limit: 0,
    remaining: 0,
    retry_after: Some(Span::ZERO),
    reset_after: Span::ZERO,
    delay: None,
};

/// Whether decision `a` binds rather than `b` (found earlier): a refusal over an admission;
/// between refusals, the longer (never is longest); between admissions, fewer remaining.
fn binds_before(a: &Decision, b: &Decision) -> bool {
    match (a.allowed, b.allowed) {
        (false, true) => true,
        (true, false) => false,
        (true, true) => a.remaining < b.remaining,
        (false, false) => match (a.retry_after, b.retry_after) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(x), Some(y)) => x.ceil_us() > y.ceil_us(),
        },
    }
}

/// RL.LIMIT's state as the key's algorithm: the parameters are the rules the key was last
/// written with, the state one entry per rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet;

/// [`Algorithm::largest_cost`] for a policy whose shadow rules are marked in `shadow` (bit
/// `i`: rule `i`, as in [`step_shadow`]): the largest cost every enforced rule admits, each with
/// the state [`step`] would give it. A shadow rule never limits it. O(R).
pub fn largest_cost_enforced(
    params: &Rules,
    shadow: u32,
    stored: Option<(&Rules, &Vec<RuleState>)>,
    now_us: u64,
) -> u64 {
    let (old, states) = match stored {
        Some((old, states)) => (&old[..], &states[..]),
        None => (&[][..], &[][..]),
    };
    let found = matches(params, old, states);
    params
        .iter()
        .enumerate()
        .filter(|(i, _)| *i >= 32 || shadow & (1 << i) == 0)
        .map(|(i, rule)| {
            let stored = found
                .get(i)
                .copied()
                .flatten()
                .and_then(|j| old.get(j).zip(states.get(j)));
            rule.largest_cost(stored, now_us)
        })
        .min()
        .unwrap_or(u64::MAX)
}

impl Algorithm for RuleSet {
    type Params = Rules;
    type State = Vec<RuleState>;

    fn check(
        params: &Rules,
        stored: Option<(&Rules, &mut Vec<RuleState>)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<Vec<RuleState>>) {
        let stored = stored.map(|(old, states)| (&old[..], states));
        let (outcome, fresh) = step(params, stored, now_us, cost, write);
        (outcome.decision, fresh)
    }

    /// The least of the rules' (each with the state [`step`] would give it): the largest
    /// cost that every rule admits. O(R).
    fn largest_cost(params: &Rules, stored: Option<(&Rules, &Vec<RuleState>)>, now_us: u64) -> u64 {
        largest_cost_enforced(params, 0, stored, now_us)
    }

    /// Every rule (those the key was written with) gets the units back, each up to what it
    /// holds as taken; the reply is the most any rule gave back, so 0 means that nothing
    /// changed.
    fn refund(params: &Rules, state: &mut Vec<RuleState>, now_us: u64, units: u64) -> u64 {
        params
            .iter()
            .zip(state.iter_mut())
            .map(|(rule, state)| rule.refund(state, now_us, units))
            .max()
            .unwrap_or(0)
    }

    fn snapshot(params: &Rules, state: &Vec<RuleState>, now_us: u64) -> AnySnapshot {
        // A check of no units writes nothing; the copy satisfies `&mut`.
        let mut copy = state.clone();
        let now = step(params, Some((params, &mut copy)), now_us, 0, false).0;
        AnySnapshot::RuleSet(Snapshot {
            binding: now.binding,
            now: now.decision,
        })
    }
}

/// A policy key as of one instant (each rule's own is [`Rule::snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The binding rule's index in the policy.
    pub binding: usize,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// Heap bytes a key's rules and states hold (for MEMORY USAGE): the states, and the rules
/// (shared with the policy while it is unchanged, but counted here as if not).
pub fn heap_bytes(params: &Rules, state: &[RuleState]) -> usize {
    let log_bytes: usize = state
        .iter()
        .map(|s| match s {
            RuleState::SlidingLog(log) => sliding_log::heap_bytes(log),
            _ => 0,
        })
        .sum();
    std::mem::size_of_val(&**params) + std::mem::size_of_val(state) + log_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, summary};
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000;
    const SECOND: u64 = 1_000_000;

    fn gcra(burst: u64, rate: u64, period_ms: u64) -> Rule {
        Rule::Gcra(gcra::Params {
            burst,
            rate,
            period_ms,
        })
    }

    fn fixed(limit: u64, window_ms: u64) -> Rule {
        Rule::FixedWindow(fixed_window::Params { limit, window_ms })
    }

    fn sliding(limit: u64, window_ms: u64) -> Rule {
        Rule::SlidingWindow(sliding_window::Params { limit, window_ms })
    }

    type Key = testing::Key<RuleSet>;

    fn step(rules: &Rules, key: &mut Key, now_us: u64, cost: u64) -> Decision {
        testing::step::<RuleSet>(rules, key, now_us, cost)
    }

    fn outcome(rules: &Rules, key: &Key, now_us: u64, cost: u64) -> Verdict {
        let mut copy = key.clone();
        let stored = copy.as_mut().map(|(r, s)| (&r[..], s));
        super::step(rules, stored, now_us, cost, false).0
    }

    /// Three tiers: 10 a second, 30 a minute, 50 a day.
    fn tiers() -> Rules {
        Arc::from(vec![
            gcra(10, 10, 1000),
            fixed(30, 60_000),
            fixed(50, 86_400_000),
        ])
    }

    /// Issue 22's table, for a policy: its GCRA rule goes from 1 to 3 per 3 s (RL.POLICY.SET)
    /// after three requests. Before, 1000 ms was said and the request admitted at 3000.
    #[test]
    fn a_denial_after_a_policy_change_says_when_the_request_fits() {
        let before: Rules = Arc::from(vec![gcra(3, 1, 3000), fixed(100, 60_000)]);
        let after: Rules = Arc::from(vec![gcra(3, 3, 3000), fixed(100, 60_000)]);
        let mut key: Key = None;
        for _ in 0..3 {
            assert!(step(&before, &mut key, T0, 1).allowed);
        }
        let o = outcome(&after, &key, T0, 1);
        assert_eq!(o.binding, 0);
        // The key lives until the window rule's minute ends, 40 s after T0.
        assert_eq!(testing::summary(&o.decision), (false, 3, 0, 3000, 40_000));
        assert!(
            !outcome(&after, &key, T0 + 3 * SECOND - 1, 1)
                .decision
                .allowed
        );
        assert!(outcome(&after, &key, T0 + 3 * SECOND, 1).decision.allowed);
    }

    /// A refused request takes nothing from any rule, so the key's reset_after is that of
    /// its rules as they are: here, a fresh key refused by the window rule (COST above its
    /// limit) is still fresh. Before, the bucket rule, which alone would have admitted the
    /// cost, said when it would be full after taking it (2 s).
    #[test]
    fn a_refused_request_is_reset_as_the_rules_stand() {
        let rules: Rules = Arc::from(vec![
            fixed(1, 1000),
            Rule::TokenBucket(token_bucket::Params {
                capacity: 2,
                refill_amount: 1,
                refill_period_ms: 1000,
                interval: false,
            }),
        ]);
        let d = outcome(&rules, &None, T0, 2).decision;
        assert_eq!(testing::summary(&d), (false, 1, 1, -1, 0));
    }

    #[test]
    fn rules_read_under_themselves_match_as_an_equal_copy_does() {
        // Duplicates and a state of another algorithm at one place: the shortcut for the
        // very same rules must find what the passes find for an equal copy.
        let rules = [gcra(1, 1, 1000), gcra(1, 1, 1000), fixed(3, 1000)];
        let g = RuleState::Gcra(gcra::State { tat: 5 });
        let f = RuleState::FixedWindow(fixed_window::State {
            window_start_us: 0,
            count: 1,
        });
        let copy = rules.to_vec();
        for states in [
            vec![g.clone(), g.clone(), f.clone()],
            vec![g.clone(), f.clone(), g.clone()],
            vec![g.clone(), g.clone()],
        ] {
            let shortcut = matches(&rules, &rules, &states);
            assert_eq!(shortcut, matches(&rules, &copy, &states));
            if states.len() == 3 && states[1] == g {
                assert_eq!(&shortcut[..4], &[Some(0), Some(1), Some(2), None]);
            }
        }
    }

    #[test]
    fn admitted_only_when_every_rule_admits_and_the_tightest_binds() {
        let rules = tiers();
        let mut key: Key = None;
        // The first request: the per-second rule has 9 left, the minute 29, the day 49.
        let d = step(&rules, &mut key, T0, 1);
        assert!(d.allowed);
        let o = outcome(&rules, &key, T0, 0);
        assert_eq!((o.binding, o.binding_decision.remaining), (0, 9));
        // Ten at once empties the per-second rule: the eleventh is refused by it alone.
        for _ in 0..9 {
            assert!(step(&rules, &mut key, T0, 1).allowed);
        }
        let refused = outcome(&rules, &key, T0, 1);
        assert!(!refused.decision.allowed);
        assert_eq!(refused.binding, 0);
        assert_eq!(
            summary(&refused.binding_decision),
            (false, 10, 0, 100, 1000)
        );
        // The key lives until the day's window ends.
        let day_start = T0 - T0 % 86_400_000_000;
        assert_eq!(
            refused.decision.reset_after.ceil_us(),
            day_start + 86_400_000_000 - T0
        );
    }

    fn shadow_step(rules: &Rules, shadow: u32, key: &mut Key, now_us: u64, cost: u64) -> Verdict {
        match key {
            Some((old, states)) => {
                let (o, fresh) =
                    super::step_shadow(rules, shadow, Some((&old[..], states)), now_us, cost, true);
                assert!(fresh.is_none());
                *old = Arc::clone(rules);
                o
            }
            None => {
                let (o, fresh) = super::step_shadow(rules, shadow, None, now_us, cost, true);
                if let Some(states) = fresh {
                    assert_eq!(states.len(), rules.len());
                    *key = Some((Arc::clone(rules), states));
                }
                o
            }
        }
    }

    #[test]
    fn a_shadow_rule_never_refuses_and_counts_only_what_it_admits() {
        // Enforced: 10 a second. Shadow: 3 a minute.
        let rules: Rules = Arc::from(vec![gcra(10, 10, 1000), fixed(3, 60_000)]);
        let shadow = 0b10;
        let mut key: Key = None;
        for n in 1..=5u64 {
            let o = shadow_step(&rules, shadow, &mut key, T0, 1);
            assert!(o.decision.allowed, "request {n}");
            assert_eq!(o.binding, 0, "a shadow rule never binds");
            assert_eq!(o.shadow_denied, if n > 3 { 0b10 } else { 0 }, "request {n}");
            assert_eq!(o.binding_decision.remaining, 10 - n);
        }
        // The shadow window holds the 3 it admitted, no debt: its state is its own count.
        let states = &key.as_ref().unwrap().1;
        assert_eq!(states.len(), 2);
        let snap = rules[1].snapshot(&states[1], T0).unwrap();
        assert_eq!(snap.now().remaining, 0);
        // The key lives until the shadow window ends too.
        let o = outcome(&rules, &key, T0, 0);
        let window_start = T0 - T0 % 60_000_000;
        assert_eq!(
            o.decision.reset_after.ceil_us(),
            window_start + 60_000_000 - T0
        );
        // The enforced rule still refuses, whatever the shadow rule says.
        for _ in 0..5 {
            shadow_step(&rules, shadow, &mut key, T0, 1);
        }
        let o = shadow_step(&rules, shadow, &mut key, T0, 1);
        assert!(!o.decision.allowed);
        assert_eq!((o.binding, o.shadow_denied), (0, 0b10));
    }

    #[test]
    fn a_shadow_rule_never_limits_a_partial_grant() {
        // Enforced: a burst of 10. Shadow: 3 a minute. Fresh, every enforced rule admits 10;
        // with the shadow rule counted, the grant would be 3.
        let rules: Rules = Arc::from(vec![gcra(10, 10, 1000), fixed(3, 60_000)]);
        assert_eq!(super::largest_cost_enforced(&rules, 0b10, None, T0), 10);
        assert_eq!(super::largest_cost_enforced(&rules, 0, None, T0), 3);
        assert_eq!(RuleSet::largest_cost(&rules, None, T0), 3);
        // After 4 units, the enforced burst has 6 left.
        let mut key: Key = None;
        let o = shadow_step(&rules, 0b10, &mut key, T0, 4);
        assert!(o.decision.allowed);
        assert_eq!(o.shadow_denied, 0b10);
        let (old, states) = key.as_ref().unwrap();
        let stored = Some((old, states));
        assert_eq!(super::largest_cost_enforced(&rules, 0b10, stored, T0), 6);
        // Counted, the shadow window (fresh, it refused the 4 and so holds the least state it
        // can: one unit) would allow 2.
        assert_eq!(super::largest_cost_enforced(&rules, 0, stored, T0), 2);
        // Only shadow rules: nothing limits the grant (a policy always has an enforced rule).
        assert_eq!(
            super::largest_cost_enforced(&rules, 0b11, None, T0),
            u64::MAX
        );
    }

    #[test]
    fn a_shadow_rule_changed_while_it_refuses_starts_afresh() {
        // A shadow burst of 14 at 9 per 3 s with 10 units taken; then the policy changes it to
        // a burst of 1 at 1 per 3 s, and a request the enforced rule admits comes at once: the
        // changed shadow rule refuses it. Its state cannot stay as it was: a GCRA state counts
        // in units of 1/rate µs of its own rate, and read under the new rate it put the rule's
        // schedule 9 times as far from the epoch (centuries ahead). It starts afresh instead,
        // as a fresh shadow rule that refuses does (found by the script backend's differential
        // test, clients/python/tests/test_script_equal_policy.py).
        let before: Rules = Arc::from(vec![gcra(20, 20, 1000), gcra(14, 9, 3000)]);
        let after: Rules = Arc::from(vec![gcra(20, 20, 1000), gcra(1, 1, 3000)]);
        let mut key: Key = None;
        shadow_step(&before, 0b10, &mut key, T0, 10);
        let o = shadow_step(&after, 0b10, &mut key, T0 + 1000, 1);
        assert!(o.decision.allowed);
        assert_eq!(o.shadow_denied, 0b10);
        let states = &key.as_ref().unwrap().1;
        let snap = after[1].snapshot(&states[1], T0 + 1000).unwrap();
        assert_eq!(snap.now().remaining, 1, "the changed shadow rule is fresh");
        assert_eq!(snap.now().reset_after, Span::ZERO);
        // Moved to another place by the change, the same.
        let moved: Rules = Arc::from(vec![gcra(2, 2, 3000), gcra(20, 20, 1000)]);
        let mut key: Key = None;
        shadow_step(&before, 0b10, &mut key, T0, 10);
        let o = shadow_step(&moved, 0b01, &mut key, T0 + 1000, 1);
        assert!(o.decision.allowed);
        assert_eq!(o.shadow_denied, 0b01);
        let states = &key.as_ref().unwrap().1;
        let snap = moved[0].snapshot(&states[0], T0 + 1000).unwrap();
        assert_eq!(snap.now().remaining, 2, "the changed shadow rule is fresh");
    }

    #[test]
    fn a_fresh_shadow_rule_that_refuses_still_keeps_a_state() {
        // COST 5 on a fresh key: the enforced rule admits, the shadow burst of 2 cannot.
        let rules: Rules = Arc::from(vec![
            gcra(10, 10, 1000),
            gcra(2, 1, 1000),
            fixed(20, 60_000),
        ]);
        let mut key: Key = None;
        let o = shadow_step(&rules, 0b010, &mut key, T0, 5);
        assert!(o.decision.allowed);
        assert_eq!(o.shadow_denied, 0b010);
        let states = &key.as_ref().unwrap().1;
        assert_eq!(states.len(), 3);
        for (rule, state) in rules.iter().zip(states.iter()) {
            assert!(state.belongs(rule));
        }
        // Each state is its own rule's: the window counted 5, the enforced GCRA 5.
        assert_eq!(
            rules[2].snapshot(&states[2], T0).unwrap().now().remaining,
            15
        );
        assert_eq!(
            rules[0].snapshot(&states[0], T0).unwrap().now().remaining,
            5
        );
    }

    #[test]
    fn the_per_day_rule_binds_once_it_has_the_fewest_left() {
        let rules: Rules = Arc::from(vec![
            gcra(10, 10, 1000),
            fixed(300, 60_000),
            fixed(12, 86_400_000),
        ]);
        let mut key: Key = None;
        for i in 0..12 {
            // One request every two seconds: the per-second rule is always full again.
            let d = step(&rules, &mut key, T0 + i * 2 * SECOND, 1);
            assert!(d.allowed, "request {i}");
        }
        let now = T0 + 24 * SECOND;
        let o = outcome(&rules, &key, now, 1);
        assert!(!o.decision.allowed);
        assert_eq!(o.binding, 2);
        assert_eq!(o.binding_decision.limit, 12);
        assert_eq!(o.binding_decision.remaining, 0);
    }

    /// A WARMUP rule spaces the requests a GCRA rule alone would let through at once.
    #[test]
    fn a_warmup_rule_binds_while_the_key_is_cold() {
        let warm = Rule::Warmup(warmup::Params {
            rate: 10,
            period_ms: 1000,
            warmup_ms: 10_000,
            cold_factor: 3,
        });
        let rules: Rules = Arc::from(vec![gcra(10, 10, 1000), warm]);
        let mut key: Key = None;
        assert!(step(&rules, &mut key, T0, 1).allowed);
        let o = outcome(&rules, &key, T0, 1);
        assert_eq!((o.decision.allowed, o.binding), (false, 1));
        assert_eq!(summary(&o.binding_decision), (false, 1, 0, 298, 398));
        // Admitted once the cold interval (just under 300 ms) has passed.
        assert!(!step(&rules, &mut key, T0 + 297_999, 1).allowed);
        assert!(step(&rules, &mut key, T0 + 298_000, 1).allowed);
    }

    #[test]
    fn a_refusal_by_the_last_rule_changes_no_rule() {
        let rules: Rules = Arc::from(vec![gcra(10, 10, 1000), fixed(2, 60_000)]);
        let mut key: Key = None;
        step(&rules, &mut key, T0, 1);
        step(&rules, &mut key, T0, 1);
        let before = key.clone();
        // testing::step asserts a refused request leaves the whole state as it was.
        let d = step(&rules, &mut key, T0, 1);
        assert!(!d.allowed);
        assert_eq!(key, before);
    }

    #[test]
    fn a_request_no_rule_can_ever_admit_binds_over_a_waiting_one() {
        let rules: Rules = Arc::from(vec![gcra(10, 1, 1000), fixed(5, 60_000)]);
        let o = outcome(&rules, &None, T0, 7);
        assert_eq!(o.binding, 1);
        assert_eq!(o.binding_decision.retry_after, None);
    }

    #[test]
    fn rules_keep_their_state_when_the_policy_changes() {
        let old: Rules = Arc::from(vec![gcra(10, 10, 1000), fixed(30, 60_000)]);
        let mut key: Key = None;
        for _ in 0..5 {
            step(&old, &mut key, T0, 1);
        }
        // The minute rule stays (now first), the per-second rule changes, a day rule is
        // added.
        let new: Rules = Arc::from(vec![
            fixed(30, 60_000),
            gcra(20, 20, 1000),
            fixed(100, 86_400_000),
        ]);
        let o = outcome(&new, &key, T0, 0);
        let (_, states) = key.as_ref().unwrap();
        let minute = fixed(30, 60_000).snapshot(&states[1], T0).unwrap();
        assert_eq!(minute.now().remaining, 25);
        // The changed rule keeps the 5 units it owes, now at 20 a second: 15 of 20 left,
        // fewer than the minute's 25, so it binds.
        assert_eq!((o.binding, o.binding_decision.remaining), (1, 15));
        let d = step(&new, &mut key, T0, 1);
        assert!(d.allowed);
        let (rules, states) = key.as_ref().unwrap();
        assert_eq!(rules, &new);
        let now = |i: usize| new[i].snapshot(&states[i], T0).unwrap();
        assert!(matches!(now(1), AnySnapshot::Gcra(g) if g.params.burst == 20));
        assert_eq!((now(1).now().limit, now(1).now().remaining), (20, 14));
        assert_eq!(now(2).now().remaining, 99);
        assert_eq!(now(0).now().remaining, 24);
    }

    /// Issue 12: FIXEDWINDOW 10 1h, then 11 1h, then 10 1h admitted 31 at one instant: each
    /// change started the rule afresh. The rule keeps its count: 11 in all, as a plain key.
    #[test]
    fn a_changed_rule_keeps_its_state_under_the_new_parameters() {
        let policies: Vec<Rules> = [10, 11, 10]
            .iter()
            .map(|&limit| Arc::from(vec![fixed(limit, 3_600_000)]))
            .collect();
        let mut key: Key = None;
        let mut admitted = 0;
        for rules in &policies {
            while step(rules, &mut key, T0, 1).allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 11);
    }

    #[test]
    fn rules_are_matched_identical_first_then_by_period_then_in_order() {
        // 4 used of every rule.
        let old: Rules = Arc::from(vec![
            fixed(10, 1000),
            gcra(10, 10, 1000),
            fixed(1000, 86_400_000),
        ]);
        let mut key: Key = None;
        step(&old, &mut key, T0, 4);
        let new: Rules = Arc::from(vec![
            fixed(2000, 86_400_000), // the day rule's window: its count, 4
            fixed(5, 60_000),        // no window of its own left: the per-second count, 4
            gcra(10, 10, 1000),      // identical: its own state
            fixed(7, 10_000),        // nothing of its algorithm left: fresh
            sliding(5, 1000),        // no rule of its algorithm before: fresh
        ]);
        let o = outcome(&new, &key, T0, 0);
        assert_eq!((o.binding, o.binding_decision.remaining), (1, 1));
        let remaining: Vec<u64> = new
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let found = matches(&new, &old, &key.as_ref().unwrap().1)[i];
                let mut state = found.map(|j| key.as_ref().unwrap().1[j].clone());
                let old_rule = found.map(|j| &old[j]);
                let stored = old_rule.zip(state.as_mut());
                rule.check(stored, T0, 0, false).0.remaining
            })
            .collect();
        assert_eq!(remaining, [1996, 1, 6, 7, 5]);
    }

    #[test]
    fn a_rule_given_twice_keeps_two_states() {
        let rules: Rules = Arc::from(vec![fixed(3, 60_000), fixed(3, 60_000)]);
        let mut key: Key = None;
        step(&rules, &mut key, T0, 1);
        step(&rules, &mut key, T0, 2);
        assert!(!step(&rules, &mut key, T0, 1).allowed);
        assert_eq!(key.as_ref().unwrap().1.len(), 2);
    }

    fn rule_strategy() -> impl Strategy<Value = Rule> {
        let count = 1u64..6;
        let ms = prop_oneof![Just(1000u64), Just(60_000), Just(3_600_000)];
        prop_oneof![
            (count.clone(), count.clone(), ms.clone()).prop_map(|(b, r, p)| gcra(b, r, p)),
            (count.clone(), ms.clone()).prop_map(|(l, w)| fixed(l, w)),
            (count.clone(), ms.clone()).prop_map(|(l, w)| sliding(l, w)),
            (count.clone(), count.clone(), ms.clone()).prop_map(|(c, a, p)| {
                Rule::TokenBucket(token_bucket::Params {
                    capacity: c,
                    refill_amount: a,
                    refill_period_ms: p,
                    interval: false,
                })
            }),
            (count.clone(), ms.clone()).prop_map(|(l, w)| {
                Rule::SlidingLog(sliding_log::Params {
                    limit: l,
                    window_ms: w,
                })
            }),
            (count, ms, 2u64..=10).prop_map(|(r, p, k)| {
                Rule::Warmup(warmup::Params {
                    rate: r,
                    period_ms: p,
                    warmup_ms: 10 * p,
                    cold_factor: k,
                })
            }),
        ]
    }

    /// The most units a fresh key admits at once under `rule`.
    fn limit_of(rule: &Rule) -> u64 {
        rule.check(None, T0, 0, false).0.limit
    }

    /// A rule of algorithm `kind` (0 to 4, in `rule_strategy`'s order) from `pool`, or a
    /// fixed one when the pool has none of it.
    /// The rules whose admission counts units against a limit: every kind but the warm-up,
    /// which admits any cost once its schedule is paid (its ATMOST grant is 10^12 or 0) and
    /// whose refund moves the schedule back by stable intervals, not by the cold premium paid
    /// (docs/warmup.md); its own tests cover both.
    fn counted_rule_strategy() -> impl Strategy<Value = Rule> {
        rule_strategy().prop_filter("a warm-up rule admits any cost once paid", |r| {
            !matches!(r, Rule::Warmup(_))
        })
    }

    fn rule_strategy_kind(kind: usize, pool: &[Rule]) -> Rule {
        let names = [
            "gcra",
            "fixedwindow",
            "slidingwindow",
            "tokenbucket",
            "slidinglog",
        ];
        pool.iter()
            .find(|r| r.kind() == names[kind])
            .cloned()
            .unwrap_or_else(|| match kind {
                0 => gcra(3, 2, 1000),
                1 => fixed(3, 60_000),
                2 => sliding(3, 60_000),
                3 => Rule::TokenBucket(token_bucket::Params {
                    capacity: 3,
                    refill_amount: 1,
                    refill_period_ms: 1000,
                    interval: false,
                }),
                _ => Rule::SlidingLog(sliding_log::Params {
                    limit: 3,
                    window_ms: 1000,
                }),
            })
    }

    proptest! {
        /// All or nothing: a request is admitted exactly when each rule, checked alone on
        /// its own state, admits it; then each rule's state is what it alone would keep; a
        /// refusal keeps every state. The reply is the binding rule's.
        #[test]
        fn the_policy_is_every_rule_at_once(
            rules in proptest::collection::vec(rule_strategy(), 1..4),
            requests in proptest::collection::vec((0u64..5_000_000, 0u64..4), 1..40),
        ) {
            let rules: Rules = Arc::from(rules);
            let mut key: Key = None;
            let mut now = T0;
            for (gap, cost) in requests {
                now += gap;
                let stored = key.as_ref().map(|(r, s)| (&r[..], &s[..]));
                let alone: Vec<(Decision, Option<RuleState>)> = rules
                    .iter()
                    .enumerate()
                    .map(|(i, rule)| {
                        let mut state = stored.map(|(_, s)| s[i].clone());
                        let (decision, fresh) = rule.check(state.as_mut().map(|s| (rule, s)), now, cost, cost > 0);
                        (decision, fresh.or(state))
                    })
                    .collect();
                let o = outcome(&rules, &key, now, cost);
                let every = alone.iter().all(|(d, _)| d.allowed);
                let d = step(&rules, &mut key, now, cost);
                prop_assert_eq!(d.allowed, every);
                prop_assert_eq!(d, o.decision);
                prop_assert_eq!(o.binding_decision, alone[o.binding].0);
                if every && cost > 0 {
                    let (_, states) = key.as_ref().unwrap();
                    for (i, (_, kept)) in alone.iter().enumerate() {
                        prop_assert_eq!(Some(&states[i]), kept.as_ref());
                    }
                }
                // The binding rule: it binds before every earlier rule (ties go to the
                // earlier one) and no later rule binds before it.
                for (i, (other, _)) in alone.iter().enumerate() {
                    if i < o.binding {
                        prop_assert!(binds_before(&o.binding_decision, other));
                    } else {
                        prop_assert!(!binds_before(other, &o.binding_decision));
                    }
                }
            }
        }

        /// The documented promise for policies (docs/algorithms.md, Changing parameters): at one
        /// instant, whatever the key held before, requests under
        /// any sequence of policies whose rules keep their algorithms (each rule's parameters
        /// changing at random) admit in total at most, for every rule, the largest limit
        /// that rule had among them.
        #[test]
        fn one_instant_admits_at_most_each_rules_largest_limit(
            kinds in proptest::collection::vec(0usize..5, 1..4),
            history in proptest::collection::vec((proptest::collection::vec(rule_strategy(), 4), 0u64..5_000_000, 0u64..4), 0..15),
            sets in proptest::collection::vec((proptest::collection::vec(rule_strategy(), 4), 0u64..4), 1..30),
        ) {
            // A policy of `kinds`' algorithms, in that order, with parameters drawn from
            // `pool` (a rule of each algorithm is found by its kind).
            let policy = |pool: &[Rule]| -> Rules {
                let of_kind = |k: usize| rule_strategy_kind(k, pool);
                Arc::from(kinds.iter().map(|&k| of_kind(k)).collect::<Vec<_>>())
            };
            let mut key: Key = None;
            let mut now = T0;
            for (pool, gap, cost) in &history {
                now += gap;
                step(&policy(pool), &mut key, now, *cost);
            }
            let policies: Vec<(Rules, u64)> = sets.iter().map(|(pool, cost)| (policy(pool), *cost)).collect();
            let bound = (0..kinds.len())
                .map(|i| policies.iter().map(|(rules, _)| limit_of(&rules[i])).max().unwrap_or(0))
                .min()
                .unwrap_or(0);
            let admitted = testing::admitted_at_one_instant::<RuleSet>(&mut key, &policies, now);
            prop_assert!(admitted <= bound, "admitted {} > {}", admitted, bound);
        }

        /// One rule alone answers exactly as its own command does.
        #[test]
        fn one_rule_is_its_algorithm(
            burst in 1u64..8, rate in 1u64..8,
            requests in proptest::collection::vec((0u64..3_000_000, 0u64..4), 1..40),
        ) {
            let params = gcra::Params { burst, rate, period_ms: 1000 };
            let rules: Rules = Arc::from(vec![Rule::Gcra(params)]);
            let mut key: Key = None;
            let mut alone: testing::Key<Gcra> = None;
            let mut now = T0;
            for (gap, cost) in requests {
                now += gap;
                let d = step(&rules, &mut key, now, cost);
                let e = testing::step::<Gcra>(&params, &mut alone, now, cost);
                prop_assert_eq!(d, e);
            }
        }
    }

    proptest! {
        /// ATMOST on RL.LIMIT: the grant is the largest COST every rule admits, which is the
        /// largest a DRYRUN of the policy admits, also after the policy changed.
        #[test]
        fn largest_cost_is_what_a_dryrun_admits(
            old in proptest::collection::vec(counted_rule_strategy(), 1..4),
            new in proptest::collection::vec(counted_rule_strategy(), 1..4),
            requests in proptest::collection::vec((0u64..5_000_000, 0u64..4), 0..30),
            more in 0u64..5_000_000,
        ) {
            let (old, new): (Rules, Rules) = (Arc::from(old), Arc::from(new));
            let (key, now) = testing::after_gaps::<RuleSet>(&old, &requests, T0);
            testing::largest_cost_is_what_a_dryrun_admits::<RuleSet>(&old, &key, now + more, 7)?;
            testing::largest_cost_is_what_a_dryrun_admits::<RuleSet>(&new, &key, now + more, 7)?;
        }

        /// RL.REFUND on RL.LIMIT: every rule gets the units back, so after admitting n and
        /// giving back k <= n, exactly k more are admitted at that instant; more than was
        /// taken leaves every rule fresh.
        #[test]
        fn refund_gives_every_rule_its_units_back(
            rules in proptest::collection::vec(counted_rule_strategy(), 1..4),
            requests in proptest::collection::vec((0u64..5_000_000, 0u64..4), 0..30),
            more in 0u64..5_000_000, n in 1u64..6, k in 0u64..8,
            later in proptest::collection::vec((0u64..10_000_000, 0u64..4), 1..6),
        ) {
            let rules: Rules = Arc::from(rules);
            let (key, now) = testing::after_gaps::<RuleSet>(&rules, &requests, T0);
            testing::refund_at_one_instant::<RuleSet>(&rules, &key, now + more, n, k, &later, true)?;
            testing::refund_of_more_than_was_taken::<RuleSet>(&key, now + more, false)?;
        }
    }

    fn policy_strategy() -> impl Strategy<Value = Rules> {
        proptest::collection::vec(rule_strategy(), 1..4).prop_map(Rules::from)
    }

    // Issue 22: one schedule for every reply, across policy changes.
    testing::properties! {
        RuleSet, t0: T0;
        one_schedule_for_every_reply(policy_strategy(), long_gap: 60_000_000, later_within: 20_000_000);
    }
}
