//! Per-command counters and the `INFO ratelimit` section that shows them.
//!
//! Every entry of the command table owns one [`Stats`]; the dispatcher (`crate::dispatch`)
//! counts each call in it: `calls` always, then `errors` for an error reply (a caught panic
//! included), or `admitted`/`denied` for a decision that took effect, which it reads off the
//! handler's response (`Reply::outcome`): a call that only previews (DRYRUN, COST 0) counts
//! as a call only.
//!
//! Cost: commands run on Redis's main thread, one at a time, so a counter is bumped with a
//! plain load and store (no `lock` prefix, no lock). The atomics keep this free of undefined behaviour whatever thread reads them (INFO also runs
//! on the main thread); a second writing thread could only lose counts.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use redis_module::InfoContext;

use crate::commands::COMMANDS;
use crate::redis::Info;

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
    fn values(&self) -> [u64; 4] {
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

/// The names of the dictionary fields, in the order of [`Stats::values`].
const FIELDS: [&std::ffi::CStr; 4] = [c"calls", c"admitted", c"denied", c"errors"];

/// The module's INFO callback (`info:` in the registration): the section
/// `ratelimit_commandstats`, one line per registered command, in the table's order:
///
/// ```text
/// # ratelimit_commandstats
/// ratelimit_rl.gcra:calls=10,admitted=7,denied=2,errors=1
/// ```
///
/// Shown by `INFO ratelimit`, `INFO ratelimit_commandstats`, `INFO modules` and
/// `INFO everything` (not by `INFO` or `INFO all`, which leave module sections out).
pub fn info(ctx: &InfoContext, _for_crash_report: bool) {
    let info = Info::new(ctx);
    // A panic here would abort the server like one in a command.
    let _ = catch_unwind(AssertUnwindSafe(|| write_info(&info)));
    let _ = catch_unwind(AssertUnwindSafe(|| write_memory(&info)));
}

/// `# ratelimit_memory`: what the interned parameter table holds (see
/// `storage::compact::Interner`): distinct sets, slots, and the bytes they take.
fn write_memory(info: &Info) {
    let usage = crate::storage::compact::interner().usage();
    if !info.section(c"memory") {
        return;
    }
    for (name, value) in [
        (c"interned_params", usage.params),
        (c"interned_slots", usage.slots),
        (c"interned_bytes", usage.bytes),
    ] {
        info.field(name, value as u64);
    }
}

fn write_info(info: &Info) {
    // Refused when INFO asked for other sections only.
    if !info.section(c"commandstats") {
        return;
    }
    for command in COMMANDS {
        if !command.stats.registered.load(Relaxed) {
            continue;
        }
        info.begin_dict(command.name);
        for (name, value) in FIELDS.iter().zip(command.stats.values()) {
            info.field(name, value);
        }
        info.end_dict();
    }
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
