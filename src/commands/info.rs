//! The module's INFO sections, written from the command table and its counters
//! ([`crate::metrics`]) and the interned parameter table's usage, through the room's
//! [`Info`] (no raw call here).

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::InfoContext;

use super::COMMANDS;
use crate::redis::Info;

/// The names of the dictionary fields, in the order of [`crate::metrics::Stats::values`].
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
        if !command.stats.is_registered() {
            continue;
        }
        info.begin_dict(command.name);
        for (name, value) in FIELDS.iter().zip(command.stats.values()) {
            info.field(name, value);
        }
        info.end_dict();
    }
}
