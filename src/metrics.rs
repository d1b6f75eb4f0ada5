//! Per-command counters; `commands::info` shows them in `INFO ratelimit`.
//!
//! Every entry of the command table owns one [`Stats`]; the command guard (`dispatch`) counts
//! each call in it: `calls` always, then `errors` for an error reply (a caught panic
//! included), or `admitted`/`denied` for a decision that took effect. The guard learns the
//! decision from the reply writer (`reply::admission`, `reply::redis_cell`), which records it
//! here with [`decided`]: every admission command, present and future, replies through it.
//! A call that only previews (DRYRUN, COST 0) says so with [`preview`] and counts as a call
//! only.
//!
//! Cost: commands run on Redis's main thread, one at a time, so a counter is bumped with a
//! plain load and store (no `lock` prefix, no lock) and the per-call record is one byte. The
//! atomics keep this free of undefined behaviour whatever thread reads them (INFO also runs
//! on the main thread); a second writing thread could only lose counts.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};

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

/// The running call's record: which decision its reply carried, whether it previewed, and
/// whether it replayed a write of the primary or the AOF.
static RECORD: AtomicU8 = AtomicU8::new(0);
const ADMITTED: u8 = 1;
const DENIED: u8 = 2;
const PREVIEW: u8 = 4;
const REPLAYED: u8 = 8;

/// Starts a call's record; returns the enclosing one, for [`end`] to put back (a command
/// that somehow runs inside another keeps each record apart). A load and a store rather
/// than a swap, which x86 locks: only the main thread runs commands.
pub fn begin() -> u8 {
    let enclosing = RECORD.load(Relaxed);
    RECORD.store(0, Relaxed);
    enclosing
}

/// Ends the call's record, restoring `enclosing` from [`begin`].
pub fn end(enclosing: u8) -> Record {
    let record = RECORD.load(Relaxed);
    RECORD.store(enclosing, Relaxed);
    Record(record)
}

/// What a call recorded, read when it has replied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record(u8);

impl Record {
    /// What to count.
    pub fn outcome(self) -> Outcome {
        if self.0 & PREVIEW != 0 {
            Outcome::Other
        } else if self.0 & DENIED != 0 {
            Outcome::Denied
        } else if self.0 & ADMITTED != 0 {
            Outcome::Admitted
        } else {
            Outcome::Other
        }
    }

    /// Whether the call denied a client's request, which publishes a keyspace event: a
    /// preview does not, nor a replayed denial (the primary published it for its client).
    pub fn publishes_denial(self) -> bool {
        self.outcome() == Outcome::Denied && self.0 & REPLAYED == 0
    }
}

fn mark(bit: u8) {
    RECORD.store(RECORD.load(Relaxed) | bit, Relaxed);
}

/// Records the decision a reply carries.
pub fn decided(allowed: bool) {
    mark(if allowed { ADMITTED } else { DENIED });
}

/// Records that the running call only previews (DRYRUN, COST 0): it counts as a call, not
/// as an admission or a denial, and a denial publishes no keyspace event.
pub fn preview() {
    mark(PREVIEW);
}

/// Records that the running call replays a write from the primary or the AOF (RL.REPLAY):
/// it counts as usual, under RL.REPLAY, and a denial publishes no keyspace event.
pub fn replayed() {
    mark(REPLAYED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_says_what_the_call_decided_and_restores_the_enclosing_one() {
        let outer = begin();
        decided(false);
        let inner = begin();
        decided(true);
        assert_eq!(end(inner).outcome(), Outcome::Admitted);
        let denied = end(outer);
        assert_eq!(denied.outcome(), Outcome::Denied);
        assert!(denied.publishes_denial());

        let saved = begin();
        assert_eq!(end(saved).outcome(), Outcome::Other);

        let saved = begin();
        preview();
        decided(false);
        let previewed = end(saved);
        assert_eq!(
            previewed.outcome(),
            Outcome::Other,
            "a preview is no denial"
        );
        assert!(!previewed.publishes_denial());

        let saved = begin();
        replayed();
        decided(false);
        let replay = end(saved);
        assert_eq!(
            replay.outcome(),
            Outcome::Denied,
            "a replayed denial counts"
        );
        assert!(!replay.publishes_denial(), "but publishes nothing");
    }

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
