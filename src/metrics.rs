//! Per-command counters; `commands::info` shows them in `INFO ratelimit`.
//!
//! Every command's entry (`commands`) owns one [`Stats`]; the dispatcher (`crate::dispatch`)
//! counts each call in it: `calls` always, then `errors` for an error reply (a caught panic
//! included), or `admitted`/`denied` for a decision that took effect, which it reads off the
//! handler's response (`Reply::outcome`): a call that only previews (DRYRUN, COST 0) counts
//! as a call only.
//!
//! Cost: commands run on Redis's main thread, one at a time, so a counter is bumped with a
//! plain load and store (no `lock` prefix, no lock). The atomics keep this free of undefined
//! behaviour whatever thread reads them (INFO also runs on the main thread); a second writing
//! thread could only lose counts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// One command's counters, since the module was loaded.
pub struct Stats {
    calls: AtomicU64,
    admitted: AtomicU64,
    denied: AtomicU64,
    shadow_denied: AtomicU64,
    errors: AtomicU64,
    /// Whether the command was registered (CL.THROTTLE is not with `cell-compat no`);
    /// INFO lists only registered commands.
    registered: AtomicBool,
}

impl Stats {
    pub const fn new() -> Stats {
        Stats {
            calls: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            shadow_denied: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            registered: AtomicBool::new(false),
        }
    }

    pub fn registered(&self) {
        self.registered.store(true, Relaxed);
    }

    /// Whether the command was registered: INFO lists only those.
    pub fn is_registered(&self) -> bool {
        self.registered.load(Relaxed)
    }

    pub fn call(&self) {
        bump(&self.calls);
    }

    pub fn error(&self) {
        bump(&self.errors);
    }

    /// Counts what a call that replied without an error decided.
    pub fn outcome(&self, outcome: Counted) {
        match outcome {
            Counted::Admitted => bump(&self.admitted),
            Counted::Denied => bump(&self.denied),
            Counted::ShadowDenied => bump(&self.shadow_denied),
            Counted::Other => {}
        }
    }

    /// `[calls, admitted, denied, shadow_denied, errors]`.
    pub fn values(&self) -> [u64; 5] {
        [
            self.calls.load(Relaxed),
            self.admitted.load(Relaxed),
            self.denied.load(Relaxed),
            self.shadow_denied.load(Relaxed),
            self.errors.load(Relaxed),
        ]
    }

    fn counters(&self) -> [&AtomicU64; 5] {
        [
            &self.calls,
            &self.admitted,
            &self.denied,
            &self.shadow_denied,
            &self.errors,
        ]
    }

    /// Sets every counter to zero, returning what they held (CONFIG RESETSTAT; see
    /// `commands::info`).
    pub fn take(&self) -> [u64; 5] {
        self.counters().map(|c| c.swap(0, Relaxed))
    }

    /// Adds back what [`Stats::take`] returned (a CONFIG RESETSTAT the server refused).
    pub fn restore(&self, values: [u64; 5]) {
        for (counter, value) in self.counters().into_iter().zip(values) {
            counter.store(counter.load(Relaxed).wrapping_add(value), Relaxed);
        }
    }
}

/// One policy's counters: its RL.LIMIT calls and what they decided, and per rule how often
/// it denied the request (for a shadow rule: would have denied a request the others
/// admitted). Kept with the policy: a policy replaced by RL.POLICY.SET keeps its own
/// counters and starts its rules' at zero (the rules are new); a deleted one's are dropped.
pub struct PolicyStats {
    calls: AtomicU64,
    admitted: AtomicU64,
    denied: AtomicU64,
    shadow_denied: AtomicU64,
    rules: Box<[AtomicU64]>,
}

impl PolicyStats {
    pub fn new(rules: usize) -> PolicyStats {
        PolicyStats {
            calls: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            shadow_denied: AtomicU64::new(0),
            rules: (0..rules).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The policy-wide counters of `old` carried into these (a replaced policy).
    pub fn carry(&self, old: &PolicyStats) {
        for (new, old) in self
            .policy_counters()
            .into_iter()
            .zip(old.policy_counters())
        {
            new.store(old.load(Relaxed), Relaxed);
        }
    }

    fn policy_counters(&self) -> [&AtomicU64; 4] {
        [
            &self.calls,
            &self.admitted,
            &self.denied,
            &self.shadow_denied,
        ]
    }

    /// Counts one RL.LIMIT call: its outcome, the rule that denied (`denied_by`, for a
    /// denial or a SHADOW call's would-be denial), and the shadow rules that would have
    /// denied a request the others admitted (bit `i` for rule `i`).
    pub fn count(&self, outcome: Counted, denied_by: Option<usize>, shadow_rules: u32) {
        bump(&self.calls);
        match outcome {
            Counted::Admitted => bump(&self.admitted),
            Counted::Denied => bump(&self.denied),
            Counted::ShadowDenied => bump(&self.shadow_denied),
            Counted::Other => return,
        }
        if let Some(rule) = denied_by.and_then(|i| self.rules.get(i)) {
            bump(rule);
        }
        let mut mask = shadow_rules;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            if let Some(rule) = self.rules.get(i) {
                bump(rule);
            }
            mask &= mask - 1;
        }
    }

    /// `[calls, admitted, denied, shadow_denied]`.
    pub fn values(&self) -> [u64; 4] {
        self.policy_counters().map(|c| c.load(Relaxed))
    }

    /// Each rule's denials, in the policy's order.
    pub fn rule_denials(&self) -> impl Iterator<Item = u64> + '_ {
        self.rules.iter().map(|c| c.load(Relaxed))
    }

    /// Sets every counter to zero, returning what they held: the policy's four, then each
    /// rule's (CONFIG RESETSTAT).
    pub fn take(&self) -> Vec<u64> {
        self.policy_counters()
            .into_iter()
            .chain(self.rules.iter())
            .map(|c| c.swap(0, Relaxed))
            .collect()
    }

    /// Adds back what [`PolicyStats::take`] returned; the rules' only if the policy still has
    /// as many rules.
    pub fn restore(&self, values: &[u64]) {
        let rules_match = values.len() == 4 + self.rules.len();
        let counters = self.policy_counters().into_iter().chain(self.rules.iter());
        for (i, (counter, value)) in counters.zip(values).enumerate() {
            if i < 4 || rules_match {
                counter.store(counter.load(Relaxed).wrapping_add(*value), Relaxed);
            }
        }
    }
}

/// Adds one without a locked instruction: only the main thread writes (see the module doc).
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
}

/// What the running call decided, as far as counting and notifications care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// A request admitted (and written, unless it had nothing to write).
    Admitted,
    /// A request denied.
    Denied,
    /// A request answered as admitted that a limit would have denied: a SHADOW call's
    /// would-be denial (which wrote nothing), or a request a policy's shadow rule would
    /// have denied (which the other rules admitted and wrote).
    ShadowDenied,
    /// No decision (RL.INSPECT, a release, ...), or one that only previewed (DRYRUN, COST 0).
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_calls_outcomes_and_errors() {
        let stats = Stats::new();
        for outcome in [
            Counted::Admitted,
            Counted::Denied,
            Counted::Denied,
            Counted::Other,
        ] {
            stats.call();
            stats.outcome(outcome);
        }
        stats.call();
        stats.outcome(Counted::ShadowDenied);
        stats.call();
        stats.error();
        assert_eq!(stats.values(), [6, 1, 2, 1, 1]);
        let taken = stats.take();
        assert_eq!((taken, stats.values()), ([6, 1, 2, 1, 1], [0; 5]));
        stats.call();
        stats.restore(taken);
        assert_eq!(stats.values(), [7, 1, 2, 1, 1]);
    }

    #[test]
    fn policy_stats_count_rules_and_carry_over() {
        let stats = PolicyStats::new(3);
        stats.count(Counted::Admitted, None, 0);
        stats.count(Counted::Denied, Some(1), 0);
        stats.count(Counted::ShadowDenied, None, 0b101);
        stats.count(Counted::ShadowDenied, Some(0), 0);
        stats.count(Counted::Other, Some(2), 0b100);
        assert_eq!(stats.values(), [5, 1, 1, 2]);
        assert_eq!(stats.rule_denials().collect::<Vec<_>>(), [2, 1, 1]);
        let replaced = PolicyStats::new(1);
        replaced.carry(&stats);
        assert_eq!(replaced.values(), [5, 1, 1, 2]);
        assert_eq!(replaced.rule_denials().collect::<Vec<_>>(), [0]);
        let taken = stats.take();
        assert_eq!(taken, [5, 1, 1, 2, 2, 1, 1]);
        assert_eq!(stats.values(), [0; 4]);
        assert_eq!(stats.rule_denials().collect::<Vec<_>>(), [0, 0, 0]);
        stats.restore(&taken);
        assert_eq!(stats.rule_denials().collect::<Vec<_>>(), [2, 1, 1]);
        replaced.restore(&taken);
        assert_eq!(replaced.values(), [10, 2, 2, 4]);
        assert_eq!(replaced.rule_denials().collect::<Vec<_>>(), [0]);
    }
}
