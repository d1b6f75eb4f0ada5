//! The module's INFO sections, written from the command table and its counters
//! ([`crate::metrics`]) and the interned parameter table's usage.

use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, InfoContext};

use super::COMMANDS;

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
    // A panic here would abort the server like one in a command.
    let _ = catch_unwind(AssertUnwindSafe(|| write_info(ctx.ctx)));
    let _ = catch_unwind(AssertUnwindSafe(|| write_memory(ctx.ctx)));
}

/// `# ratelimit_memory`: what the interned parameter table holds (see
/// `storage::compact::Interner`): distinct sets, slots, and the bytes they take.
fn write_memory(ctx: *mut raw::RedisModuleInfoCtx) {
    let usage = crate::storage::compact::interner().usage();
    // SAFETY: as in `write_info`.
    unsafe {
        let (Some(section), Some(field)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoAddFieldULongLong,
        ) else {
            return;
        };
        if section(ctx, c"memory".as_ptr()) != raw::REDISMODULE_OK as i32 {
            return;
        }
        for (name, value) in [
            (c"interned_params", usage.params),
            (c"interned_slots", usage.slots),
            (c"interned_bytes", usage.bytes),
        ] {
            field(ctx, name.as_ptr(), value as u64);
        }
    }
}

fn write_info(ctx: *mut raw::RedisModuleInfoCtx) {
    // SAFETY: the function pointers are set once at load; ctx is the INFO call's context,
    // and every name is a NUL-terminated literal or a command name from the table.
    unsafe {
        let (Some(section), Some(begin_dict), Some(field), Some(end_dict)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoBeginDictField,
            raw::RedisModule_InfoAddFieldULongLong,
            raw::RedisModule_InfoEndDictField,
        ) else {
            return;
        };
        // Refused when INFO asked for other sections only.
        if section(ctx, c"commandstats".as_ptr()) != raw::REDISMODULE_OK as i32 {
            return;
        }
        for command in COMMANDS {
            if !command.stats.is_registered() {
                continue;
            }
            begin_dict(ctx, command.name.as_ptr());
            for (name, value) in FIELDS.iter().zip(command.stats.values()) {
                field(ctx, name.as_ptr().cast::<c_char>(), value);
            }
            end_dict(ctx);
        }
    }
}
