//! The module's INFO sections, written from the command table and its counters
//! ([`crate::metrics`]), the policies' counters, RL.TOP's summary and the interned parameter
//! table's usage, through the room's [`Info`] (no raw call here); and CONFIG RESETSTAT.

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::InfoContext;

use super::COMMANDS;
use crate::redis::{self, Ctx, Info};
use crate::storage::policies;

/// The names of the dictionary fields, in the order of [`crate::metrics::Stats::values`].
const FIELDS: [&std::ffi::CStr; 5] = [
    c"calls",
    c"admitted",
    c"denied",
    c"shadow_denied",
    c"errors",
];

/// The policies' fields, in the order of [`crate::metrics::PolicyStats::values`].
const POLICY_FIELDS: [&std::ffi::CStr; 4] = [c"calls", c"admitted", c"denied", c"shadow_denied"];

/// The module's INFO callback (`info:` in the registration): the sections
///
/// ```text
/// # ratelimit_commandstats
/// ratelimit_rl.gcra:calls=10,admitted=6,denied=2,shadow_denied=1,errors=1
/// # ratelimit_policies
/// ratelimit_policies:2
/// ratelimit_policy_tombstones:0
/// ratelimit_policies_digest:9f0c4c7a1d2e3b45
/// ratelimit_policy_clock:117093590311108608
/// ratelimit_policies_caught_up:1
/// ratelimit_cluster_exchange:1
/// ratelimit_cluster_messages_sent:12
/// ratelimit_cluster_messages_received:12
/// ratelimit_cluster_messages_refused:0
/// ratelimit_cluster_changes_applied:3
/// ratelimit_cluster_changes_refused:0
/// ratelimit_cluster_answers_skipped:0
/// # ratelimit_top
/// ratelimit_top_counters:3
/// # ratelimit_memory
/// ratelimit_interned_params:2
/// ratelimit_interned_slots:2
/// ratelimit_interned_bytes:283
/// ratelimit_evictable:0
/// ratelimit_maxmemory_policy:noeviction
/// ```
///
/// Shown by `INFO ratelimit`, `INFO ratelimit_<section>`, `INFO modules` and
/// `INFO everything` (not by `INFO` or `INFO all`, which leave module sections out): each
/// costs the same whatever the number of policies. A line per policy and per rule comes only
/// with `INFO ratelimit_policystats` and `INFO ratelimit_rulestats` (asked for by name):
///
/// ```text
/// # ratelimit_policystats
/// ratelimit_api:calls=7,admitted=4,denied=2,shadow_denied=1
/// # ratelimit_rulestats
/// ratelimit_api.0:shadow=0,denied=2
/// ratelimit_api.1:shadow=1,denied=1
/// ```
///
/// A policy's name is written with every byte outside `A-Z a-z 0-9 _ - .` (and `%`) as
/// `%XX`, so a name cannot break INFO's `name:value` lines.
pub fn info(ctx: &InfoContext, _for_crash_report: bool) {
    let info = Info::new(ctx);
    // A panic here would abort the server like one in a command.
    let written = [
        catch_unwind(AssertUnwindSafe(|| write_info(&info))),
        catch_unwind(AssertUnwindSafe(|| write_table(&info))),
        catch_unwind(AssertUnwindSafe(|| write_top(&info))),
        catch_unwind(AssertUnwindSafe(|| write_memory(&info))),
    ];
    // Every section taken: INFO asked for the whole module (`INFO ratelimit`, `INFO modules`,
    // `INFO everything`), which costs the same whatever the number of policies; the sections
    // of a line per policy or rule come only when asked for by name.
    if !written.iter().all(|w| matches!(w, Ok(true))) {
        let _ = catch_unwind(AssertUnwindSafe(|| write_policies(&info)));
    }
}

/// `# ratelimit_policies`: the policies table (live policies, tombstones, its digest, equal on
/// every node of a converged cluster, and its clock) and what the cluster bus carried for it
/// (`crate::cluster`).
fn write_table(info: &Info) -> bool {
    if !info.section(c"policies") {
        return false;
    }
    let (digest, live, tombstones, clock) = policies::summary();
    info.field(c"policies", live as u64);
    info.field(c"policy_tombstones", tombstones as u64);
    if let Ok(text) = CString::new(format!("{digest:016x}")) {
        info.text(c"policies_digest", &text);
    }
    info.field(c"policy_clock", clock);
    info.field(
        c"policies_caught_up",
        u64::from(crate::cluster::caught_up()),
    );
    let counters = &crate::cluster::COUNTERS;
    info.field(c"cluster_exchange", u64::from(crate::cluster::enabled()));
    for (name, value) in [
        (c"cluster_messages_sent", &counters.sent),
        (c"cluster_messages_received", &counters.received),
        (c"cluster_messages_refused", &counters.refused),
        (c"cluster_changes_applied", &counters.applied),
        (c"cluster_changes_refused", &counters.changes_refused),
        (c"cluster_answers_skipped", &counters.answers_skipped),
    ] {
        info.field(name, value.load(std::sync::atomic::Ordering::Relaxed));
    }
    true
}

/// `# ratelimit_memory`: what the interned parameter table holds (see
/// `storage::compact::Interner`): distinct sets, slots, and the bytes they take; and whether
/// the server's `maxmemory-policy` can evict limiter keys (`storage::eviction`).
fn write_memory(info: &Info) -> bool {
    let usage = crate::storage::compact::interner().usage();
    if !info.section(c"memory") {
        return false;
    }
    for (name, value) in [
        (c"interned_params", usage.params),
        (c"interned_slots", usage.slots),
        (c"interned_bytes", usage.bytes),
    ] {
        info.field(name, value as u64);
    }
    // Whether the server can evict limiter keys (an evicted key starts fresh), and its policy.
    let (evictable, policy) = crate::storage::eviction::state();
    info.field(c"evictable", u64::from(evictable));
    if let Ok(policy) = CString::new(policy) {
        info.text(c"maxmemory_policy", &policy);
    }
    true
}

/// `# ratelimit_top`: RL.TOP's counters in use (both generations) and the denials of keys
/// too long to record.
fn write_top(info: &Info) -> bool {
    let (counters, untracked) = crate::denials::usage();
    if !info.section(c"top") {
        return false;
    }
    info.field(c"top_counters", counters as u64);
    info.field(c"top_untracked", untracked);
    true
}

fn write_info(info: &Info) -> bool {
    // Refused when INFO asked for other sections only.
    if !info.section(c"commandstats") {
        return false;
    }
    for command in COMMANDS {
        if !command.stats.is_registered() {
            continue;
        }
        info.begin_dict(command.name().lower());
        for (name, value) in FIELDS.iter().zip(command.stats.values()) {
            info.field(name, value);
        }
        info.end_dict();
    }
    true
}

/// A policy name as INFO shows it: bytes outside `A-Z a-z 0-9 _ - .` as `%XX`.
pub fn escaped(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `# ratelimit_policystats` (one line per policy) and `# ratelimit_rulestats` (one per
/// rule, `<policy>.<index>`): O(policies × rules), under the policies' lock.
fn write_policies(info: &Info) {
    if info.section(c"policystats") {
        policies::for_each(|name, policy| {
            let Ok(name) = CString::new(escaped(name)) else {
                return;
            };
            info.begin_dict(&name);
            for (field, value) in POLICY_FIELDS.iter().zip(policy.stats.values()) {
                info.field(field, value);
            }
            info.end_dict();
        });
    }
    if info.section(c"rulestats") {
        policies::for_each(|name, policy| {
            let name = escaped(name);
            for (i, denied) in policy.stats.rule_denials().enumerate() {
                let Ok(rule) = CString::new(format!("{name}.{i}")) else {
                    continue;
                };
                info.begin_dict(&rule);
                info.field(c"shadow", u64::from(policy.shadow & (1 << i) != 0));
                info.field(c"denied", denied);
                info.end_dict();
            }
        });
    }
}

/// What CONFIG RESETSTAT took from the counters, until the server is seen to have run it.
#[derive(Default)]
struct Taken {
    commands: Vec<[u64; 5]>,
    policies: Vec<(Vec<u8>, Vec<u64>)>,
}

static TAKEN: Mutex<Option<Taken>> = Mutex::new(None);

fn taken() -> MutexGuard<'static, Option<Taken>> {
    TAKEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The command filter saw a client send `CONFIG RESETSTAT`, before the server runs it (or
/// refuses it: ACL, a MULTI that queues it). Every command, policy and rule counter is set to
/// zero at once, so that what follows in the same batch counts from zero, and what they held
/// is kept; a timer then asks the server whether it really reset its own statistics (see
/// [`confirm`]): if not, the counts are added back.
pub fn on_resetstat() {
    let mut guard = taken();
    let t = guard.get_or_insert_with(Taken::default);
    for (i, command) in COMMANDS.iter().enumerate() {
        let values = command.stats.take();
        match t.commands.get_mut(i) {
            Some(held) => held.iter_mut().zip(values).for_each(|(h, v)| *h += v),
            None => t.commands.push(values),
        }
    }
    policies::for_each(|name, policy| t.policies.push((name.to_vec(), policy.stats.take())));
    drop(guard);
    if !redis::soon::<ConfirmReset>() {
        // No timer: keep the reset (the filter saw the command; nothing can check it).
        *taken() = None;
    }
}

/// The timer [`on_resetstat`] sets: [`confirm`].
struct ConfirmReset;

impl redis::Timer for ConfirmReset {
    fn fire(ctx: Ctx<'_>) {
        confirm(ctx);
    }
}

/// Whether the server ran CONFIG RESETSTAT: its own statistics of that subcommand then read
/// `calls=1` with no rejected or failed call (the reset zeroed them, then counted the one
/// call); a refused one leaves them as they were plus one rejected call. If it did not, the
/// counts taken are added back.
fn confirm(ctx: Ctx) {
    let Some(t) = taken().take() else {
        return;
    };
    let stats = ctx.server_info_text(c"commandstats", c"cmdstat_config|resetstat");
    if stats.is_some_and(|s| reset_seen(s.as_bytes())) {
        return;
    }
    for (command, values) in COMMANDS.iter().zip(t.commands) {
        command.stats.restore(values);
    }
    for (name, values) in t.policies {
        if let Some(policy) = policies::get(&name) {
            policy.stats.restore(&values);
        }
    }
}

/// Whether `calls=1,...,rejected_calls=0,failed_calls=0` (fields in any order).
fn reset_seen(stats: &[u8]) -> bool {
    let field = |name: &[u8]| {
        stats
            .split(|&b| b == b',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix(b"="))
    };
    field(b"calls") == Some(b"1")
        && field(b"rejected_calls").is_none_or(|v| v == b"0")
        && field(b"failed_calls").is_none_or(|v| v == b"0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_are_escaped_for_info() {
        assert_eq!(escaped(b"api-v1.free_tier"), "api-v1.free_tier");
        assert_eq!(escaped(b"a:b,c=d\r\n %"), "a%3Ab%2Cc%3Dd%0D%0A%20%25");
        assert_eq!(escaped("é".as_bytes()), "%C3%A9");
    }

    #[test]
    fn a_reset_is_seen_in_the_subcommand_statistics() {
        assert!(reset_seen(
            b"calls=1,usec=3,usec_per_call=3.00,rejected_calls=0,failed_calls=0"
        ));
        assert!(!reset_seen(
            b"calls=1,usec=3,usec_per_call=3.00,rejected_calls=1,failed_calls=0"
        ));
        assert!(!reset_seen(
            b"calls=12,usec=3,usec_per_call=3.00,rejected_calls=0,failed_calls=0"
        ));
        assert!(!reset_seen(b"rejected_calls=1"));
    }
}
