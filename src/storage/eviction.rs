//! Whether the server may evict limiter keys: an evicted key starts fresh, free quota
//! (docs/cluster.md, Eviction). Every limiter key has a TTL, so `volatile-*` policies take them
//! first, and `allkeys-*` take them like any key; only `noeviction` (or no `maxmemory`) keeps
//! them. Read at load and again after every `CONFIG SET`, logged when it becomes a risk, and
//! shown by `INFO ratelimit_memory` (`evictable`, `maxmemory_policy`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use redis_module::raw;

use crate::log::{log, Level};
use crate::redis::{Ctx, ServerEvent};

static EVICTABLE: AtomicBool = AtomicBool::new(false);
static POLICY: Mutex<String> = Mutex::new(String::new());

/// Whether the server's `maxmemory` and `maxmemory-policy` can evict limiter keys, and the
/// policy's name (as INFO shows it).
pub fn state() -> (bool, String) {
    (
        EVICTABLE.load(Ordering::Relaxed),
        POLICY
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
    )
}

/// Whether a server with this `maxmemory` (bytes, 0: none) and policy evicts limiter keys.
pub fn evicts(maxmemory: i64, policy: &str) -> bool {
    maxmemory != 0 && policy != "noeviction"
}

/// Reads the settings now; logs a warning when they became a risk.
fn refresh(ctx: Ctx) {
    let maxmemory = ctx.server_info_signed(c"memory", c"maxmemory").unwrap_or(0);
    let policy = ctx
        .server_info_text(c"memory", c"maxmemory_policy")
        .unwrap_or_default();
    let risky = evicts(maxmemory, &policy);
    let was = EVICTABLE.swap(risky, Ordering::Relaxed);
    if risky && !was {
        log(
            Some(ctx),
            Level::Warning,
            &format!(
                "maxmemory-policy {policy} with maxmemory {maxmemory} can evict limiter keys, and an \
                 evicted key starts fresh (free quota): keep limiter state on a server or database \
                 with maxmemory-policy noeviction (see the module's docs, Eviction)"
            ),
        );
    }
    *POLICY.lock().unwrap_or_else(PoisonError::into_inner) = policy;
}

/// Reads the settings at load and subscribes to config changes.
pub fn init(ctx: Ctx) {
    refresh(ctx);
    ctx.subscribe::<ConfigChanged>();
}

struct ConfigChanged;

impl ServerEvent for ConfigChanged {
    const EVENT: u64 = raw::REDISMODULE_EVENT_CONFIG;

    fn fired(ctx: Ctx<'_>, _subevent: u64) {
        refresh(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::evicts;

    #[test]
    fn only_noeviction_or_no_maxmemory_keeps_limiter_keys() {
        for policy in [
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
        ] {
            assert!(evicts(1 << 20, policy), "{policy}");
            assert!(!evicts(0, policy), "{policy} without maxmemory");
        }
        assert!(!evicts(1 << 20, "noeviction"));
    }
}
