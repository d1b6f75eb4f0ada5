//! What the module does without the module-API functions that newer servers add.
//!
//! The module loads on Redis 7.0 and later. A function that appeared after 7.0 is looked up
//! where it is used (its pointer is `None` on an older server) and something else is done
//! instead; this table names each one and the fallback, and [`log_fallbacks`] writes one line
//! per missing function to the server log at load, so what a server does is never a guess.

use crate::redis::{self, Ctx};

/// A module-API function newer than Redis 7.0, and what the module does without it.
struct Optional {
    name: &'static str,
    since: &'static str,
    present: fn() -> bool,
    without: &'static str,
}

const OPTIONAL: [Optional; 2] = [
    Optional {
        name: "RedisModule_CachedMicroseconds",
        since: "7.2",
        present: redis::has_cached_micros,
        without: "the clock reads the system clock in microseconds, once per command",
    },
    Optional {
        name: "RedisModule_SetCommandACLCategories",
        since: "7.2",
        present: redis::has_acl_categories,
        without: "commands belong to no ACL category; grant them to users by name \
                  (+rl.gcra ...)",
    },
];

/// Logs, at load, one line for each newer function this server lacks.
pub fn log_fallbacks(ctx: Ctx) {
    for api in OPTIONAL.iter().filter(|api| !(api.present)()) {
        let message = format!(
            "this server has no {} (Redis {}+): {}",
            api.name, api.since, api.without
        );
        crate::log::log(Some(ctx), crate::log::Level::Notice, &message);
    }
}
