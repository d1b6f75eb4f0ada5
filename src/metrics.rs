//! Per-command counters; `commands::info` shows them in `INFO ratelimit`.
//!
//! Every entry of the command table owns one [`Stats`]; the dispatcher (`crate::dispatch`)
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
    pub fn outcome(&self, outcome: Outcome) {
        match outcome {
            Outcome::Admitted => bump(&self.admitted),
            Outcome::Denied => bump(&self.denied),
            Outcome::Other => {}
        }
    }

    /// `[calls, admitted, denied, errors]`.
    pub fn values(&self) -> [u64; 4] {
        [
            self.calls.load(Relaxed),
            self.admitted.load(Relaxed),
            self.denied.load(Relaxed),
            self.errors.load(Relaxed),
        ]
    }
}

/// Adds one without a locked instruction: only the main thread writes (see the module doc).
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
}

/// What the running call decided, as far as counting and notifications care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A request admitted (and written, unless it had nothing to write).
    Admitted,
    /// A request denied.
    Denied,
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
            Outcome::Admitted,
            Outcome::Denied,
            Outcome::Denied,
            Outcome::Other,
        ] {
            stats.call();
            stats.outcome(outcome);
        }
        stats.call();
        stats.error();
        assert_eq!(stats.values(), [5, 1, 2, 1]);
    }
}
