//! The module's settings: their statics, read by the commands, and the load arguments that
//! set them. `lib.rs` registers the same statics with Redis (`CONFIG SET/GET
//! ratelimit.<name>`, and `ratelimit.<name>` directives in redis.conf).
//!
//! Uses only the error texts' quoting: the load arguments are read here, not with the
//! commands' grammar (the `args` room), which sits above the settings.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis_module::RedisString;

use crate::error::quote;

/// `cell-compat yes|no` (load time only, default yes): register CL.THROTTLE.
pub(crate) static CELL_COMPAT: AtomicBool = AtomicBool::new(true);
/// `debug-clock yes|no` (load time only, default no): allow RL.DEBUG.* commands.
pub(crate) static DEBUG_CLOCK: AtomicBool = AtomicBool::new(false);

/// `sliding-log-max-limit n` (load time and CONFIG SET): the largest RL.SLIDINGLOG limit.
/// The log keeps a few bytes per admitted unit, so this bounds one key's memory.
pub(crate) static SLIDING_LOG_MAX_LIMIT: AtomicI64 = AtomicI64::new(SLIDING_LOG_MAX_LIMIT_DEFAULT);
pub(crate) const SLIDING_LOG_MAX_LIMIT_DEFAULT: i64 = 1_000_000;
/// The highest value the setting takes (an admitted count must fit the log's 32-bit words).
pub(crate) const SLIDING_LOG_LIMIT_CEILING: u64 = 1_000_000_000;

pub(crate) fn sliding_log_max_limit() -> u64 {
    u64::try_from(SLIDING_LOG_MAX_LIMIT.load(Ordering::Relaxed)).unwrap_or(1)
}

/// `concurrency-max-limit n` (load time and CONFIG SET): the largest RL.CONCURRENCY.ACQUIRE
/// limit. A key holds at most that many leases, so this bounds one key's memory and the
/// work a call that drops ended leases does.
pub(crate) static CONCURRENCY_MAX_LIMIT: AtomicI64 = AtomicI64::new(CONCURRENCY_MAX_LIMIT_DEFAULT);
pub(crate) const CONCURRENCY_MAX_LIMIT_DEFAULT: i64 = 100_000;
/// The highest value the setting takes.
pub(crate) const CONCURRENCY_LIMIT_CEILING: u64 = 10_000_000;

pub(crate) fn concurrency_max_limit() -> u64 {
    u64::try_from(CONCURRENCY_MAX_LIMIT.load(Ordering::Relaxed)).unwrap_or(1)
}

/// `top-size n` (load time and CONFIG SET, 0 to 100000, default 100): the counters of
/// RL.TOP's summary (per generation); 0 records nothing. A change empties the summary.
pub(crate) static TOP_SIZE: AtomicI64 = AtomicI64::new(TOP_SIZE_DEFAULT);
pub(crate) const TOP_SIZE_DEFAULT: i64 = 100;
pub(crate) const TOP_SIZE_CEILING: u64 = 100_000;
/// `top-period seconds` (load time and CONFIG SET, 1 to 86400, default 60): the length of
/// one of RL.TOP's two generations. A change empties the summary.
pub(crate) static TOP_PERIOD: AtomicI64 = AtomicI64::new(TOP_PERIOD_DEFAULT);
pub(crate) const TOP_PERIOD_DEFAULT: i64 = 60;
pub(crate) const TOP_PERIOD_CEILING: u64 = 86_400;

pub(crate) fn top_size() -> usize {
    usize::try_from(TOP_SIZE.load(Ordering::Relaxed)).unwrap_or(0)
}

/// RL.TOP's size and period (µs).
pub(crate) fn top_settings() -> (usize, u64) {
    let seconds = u64::try_from(TOP_PERIOD.load(Ordering::Relaxed))
        .unwrap_or(1)
        .max(1);
    (top_size(), seconds * 1_000_000)
}

/// `policy-max-ahead seconds` (load time and CONFIG SET, 1 to 86400, default 60): how far
/// ahead of this node's wall clock a policy change's version may be when it comes from
/// another node of a cluster; one further ahead is refused (docs/cluster.md, Policies).
pub(crate) static POLICY_MAX_AHEAD: AtomicI64 = AtomicI64::new(POLICY_MAX_AHEAD_DEFAULT);
pub(crate) const POLICY_MAX_AHEAD_DEFAULT: i64 = 60;
pub(crate) const POLICY_MAX_AHEAD_CEILING: u64 = 86_400;

/// The bound of `policy-max-ahead`, in ms.
pub(crate) fn policy_max_ahead_ms() -> u64 {
    u64::try_from(POLICY_MAX_AHEAD.load(Ordering::Relaxed))
        .unwrap_or(1)
        .max(1)
        * 1000
}

/// `max-policies n` (load time and CONFIG SET, 1 to 1000000, default 10000): the most live
/// policies the server holds, and the most tombstones of deleted ones a cluster node keeps.
pub(crate) static MAX_POLICIES: AtomicI64 = AtomicI64::new(MAX_POLICIES_DEFAULT);
pub(crate) const MAX_POLICIES_DEFAULT: i64 = 10_000;
pub(crate) const MAX_POLICIES_CEILING: u64 = 1_000_000;

pub(crate) fn max_policies() -> usize {
    usize::try_from(MAX_POLICIES.load(Ordering::Relaxed)).unwrap_or(1)
}

/// The load arguments the module accepts: the flags take `yes` or `no`, the numbers a whole
/// number in range.
const FLAGS: [(&str, &AtomicBool); 2] =
    [("cell-compat", &CELL_COMPAT), ("debug-clock", &DEBUG_CLOCK)];
const NUMBERS: [(&str, &AtomicI64, u64, u64); 6] = [
    (
        "sliding-log-max-limit",
        &SLIDING_LOG_MAX_LIMIT,
        1,
        SLIDING_LOG_LIMIT_CEILING,
    ),
    (
        "concurrency-max-limit",
        &CONCURRENCY_MAX_LIMIT,
        1,
        CONCURRENCY_LIMIT_CEILING,
    ),
    ("top-size", &TOP_SIZE, 0, TOP_SIZE_CEILING),
    ("top-period", &TOP_PERIOD, 1, TOP_PERIOD_CEILING),
    (
        "policy-max-ahead",
        &POLICY_MAX_AHEAD,
        1,
        POLICY_MAX_AHEAD_CEILING,
    ),
    ("max-policies", &MAX_POLICIES, 1, MAX_POLICIES_CEILING),
];

/// Checks the load arguments, pairs `name value`, and then sets them. Anything wrong
/// refuses the load (and sets nothing), so that a typo never silently runs with a default.
///
/// They are applied here rather than as the settings' registered defaults
/// (`module_args_as_configuration`), because the crate parses those first and refuses a bad
/// number with a message that names neither the argument nor the value. Redis has already
/// set every setting to its default or to its `ratelimit.<name>` directive (from redis.conf
/// or the command line); a load argument overrides the directive.
pub(crate) fn apply_load_args(args: &[RedisString]) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err("load arguments come in pairs: name value".into());
    }
    let mut flags = Vec::new();
    let mut numbers = Vec::new();
    for pair in args.chunks(2) {
        let name = pair[0].as_slice();
        let value = pair[1].as_slice();
        let shown = || quote(value);
        if let Some((name, setting)) = FLAGS.iter().find(|(n, _)| n.as_bytes() == name) {
            let on = match value {
                b"yes" => true,
                b"no" => false,
                _ => return Err(format!("{name} takes yes or no, not '{}'", shown())),
            };
            flags.push((*setting, on));
        } else if let Some((name, setting, min, max)) =
            NUMBERS.iter().find(|(n, _, _, _)| n.as_bytes() == name)
        {
            let n = whole_number(value, *min, *max)
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "{name} takes a whole number from {min} to {max}, not '{}'",
                        shown()
                    )
                })?;
            numbers.push((*setting, n));
        } else {
            let names: Vec<&str> = FLAGS
                .iter()
                .map(|(n, _)| *n)
                .chain(NUMBERS.iter().map(|(n, _, _, _)| *n))
                .collect();
            return Err(format!(
                "unknown load argument '{}': expected one of {}",
                quote(name),
                names.join(", ")
            ));
        }
    }
    for (setting, on) in flags {
        setting.store(on, Ordering::Relaxed);
    }
    for (setting, n) in numbers {
        setting.store(n, Ordering::Relaxed);
    }
    Ok(())
}

/// A whole number in `min..=max`, written as Redis writes integers: digits only, no sign, no
/// leading zero (docs/commands.md, Arguments), as the commands read their counts.
fn whole_number(bytes: &[u8], min: u64, max: u64) -> Option<u64> {
    crate::digits::digits(bytes).filter(|n| (min..=max).contains(n))
}

/// Whether CL.THROTTLE is registered (`cell-compat`).
pub(crate) fn cell_compat() -> bool {
    CELL_COMPAT.load(Ordering::Relaxed)
}

/// Whether the RL.DEBUG commands run (`debug-clock`).
pub(crate) fn debug_clock() -> bool {
    DEBUG_CLOCK.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_are_written_as_redis_writes_them() {
        assert_eq!(whole_number(b"0", 0, 10), Some(0));
        assert_eq!(whole_number(b"10", 0, 10), Some(10));
        assert_eq!(whole_number(b"86400", 1, TOP_PERIOD_CEILING), Some(86_400));
        for bad in [
            &b""[..],
            b"11",
            b"05",
            b"00",
            b"+5",
            b"-1",
            b" 1",
            b"1e3",
            b"1.0",
            b"18446744073709551616",
        ] {
            assert_eq!(whole_number(bad, 0, 10), None, "{bad:?}");
        }
        assert_eq!(whole_number(b"0", 1, 10), None);
    }
}
