//! Issue 22, "Retry-After is a promise", through the module on a real server with the debug
//! clock (frozen, never a sleep). The reply (docs/commands.md): a denial's `retry_after_ms` is
//! the least whole number of ms after which the same request would be admitted if nothing else
//! happened, and `reset_after_ms` is the time until the key is fresh; both hold for a reply
//! under parameters other than those the key was written with, admitted, denied or DRYRUN
//! (docs/algorithms.md, One schedule).
//!
//! First the table, row by row, with the figures of the one-schedule semantics: the
//! denial's retry_after_ms, the same request denied 1 ms before it and admitted at it, and
//! the denial's reset_after_ms (the stored schedule's, which RL.INSPECT and the key's PTTL
//! show too); CL.THROTTLE's GCRA rows in its seconds. Then the promise as a property:
//! deterministic pseudo-random sequences of calls, costs, ATMOST, DRYRUN, refunds, idle gaps,
//! parameter changes and policy changes, for every algorithm but CL.THROTTLE (whole seconds,
//! no DRYRUN) and for RL.LIMIT, each reply checked by probing the future with DRYRUN and
//! coming back (RL.DEBUG.CLOCK SET). RETRY_AFTER_STEPS and RETRY_AFTER_SEED make the
//! sequences longer or others.

use std::collections::HashMap;
use std::time::Instant;

use crate::common::{Client, Reply, Server, T0_MS};

/// An admission reply (RESP2): the five fields of the reply (docs/commands.md), then the command's own (a leaky
/// bucket's `delay_ms`, RL.LIMIT's `rule`) and the options' (`granted` last).
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    allowed: bool,
    limit: i64,
    remaining: i64,
    retry: i64,
    reset: i64,
    more: Vec<i64>,
}

fn answer(args: &[&str], reply: &Reply) -> Answer {
    let ints: Option<Vec<i64>> = match reply {
        Reply::Array(items) => items
            .iter()
            .map(|i| match i {
                Reply::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    };
    match ints.as_deref() {
        Some([allowed @ (0 | 1), limit, remaining, retry, reset, more @ ..]) => Answer {
            allowed: *allowed == 1,
            limit: *limit,
            remaining: *remaining,
            retry: *retry,
            reset: *reset,
            more: more.to_vec(),
        },
        _ => panic!("{args:?}: not an admission reply: {reply:?}"),
    }
}

fn call(c: &mut Client, args: &[&str]) -> Answer {
    let reply = c.cmd(args);
    answer(args, &reply)
}

/// `args` with DRYRUN added (a probe that writes nothing).
fn dryrun<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut probe = args.to_vec();
    if !probe.iter().any(|a| a.eq_ignore_ascii_case("DRYRUN")) {
        probe.push("DRYRUN");
    }
    probe
}

/// ms from `since` to now on the real clock, rounded up (a key's TTL runs in real time).
fn real_ms_since(since: Instant) -> i64 {
    since.elapsed().as_micros().div_ceil(1000) as i64
}

/// The reply (docs/commands.md) and durability (docs/durability.md): the key's PTTL is `reset` (rounded up) set at its last write, which the
/// caller sent at `written` on the real clock; it has run down by the real time since.
fn assert_pttl(c: &mut Client, key: &str, reset: i64, written: Instant, context: &str) {
    let pttl = c.pttl(key);
    let ran = real_ms_since(written);
    assert!(
        pttl <= reset && pttl >= reset - ran - 1,
        "{context}: PTTL {pttl}, expected {reset} less at most the {ran} ms since the write"
    );
}

/// One row of the table. At T0, `before` is admitted `admitted` times and then denied
/// (the key is full), `change` runs (RL.POLICY.SET, or nothing), and `after` is denied with
/// `retry` and `reset`. The reset is the stored schedule's: RL.INSPECT's, and the key's PTTL
/// less the real time since the last write. Then `after` is denied at T0 + retry - 1 (a
/// DRYRUN, so nothing is written, answering retry 1) and admitted for real at T0 + retry,
/// with `admitted_reply`'s five fields when given.
struct Row<'a> {
    before: &'a [&'a str],
    admitted: usize,
    change: &'a [&'a str],
    after: &'a [&'a str],
    retry: i64,
    reset: i64,
    admitted_reply: Option<[i64; 5]>,
}

/// `written`: when the caller last wrote the key before (on the real clock), or now.
fn replay(c: &mut Client, row: &Row, mut written: Instant) {
    let key = row.before[1];
    let context = format!("{:?} then {:?}", row.before, row.after);
    for i in 0..row.admitted {
        written = Instant::now();
        let a = call(c, row.before);
        assert!(a.allowed, "{context}: call {i} denied: {a:?}");
    }
    let full = call(c, row.before);
    assert!(!full.allowed, "{context}: the key is not full: {full:?}");
    if !row.change.is_empty() {
        assert_eq!(c.cmd(row.change), Reply::Simple("OK".into()), "{context}");
    }
    let denied = call(c, row.after);
    assert!(!denied.allowed, "{context}: {denied:?}");
    assert_eq!(denied.retry, row.retry, "{context}: retry_after_ms");
    assert_eq!(denied.reset, row.reset, "{context}: reset_after_ms");
    let inspect = c.cmd(&["RL.INSPECT", key]);
    assert_eq!(
        inspect.field("reset_after_ms"),
        Reply::Int(row.reset),
        "{context}: RL.INSPECT {inspect:?}"
    );
    assert_pttl(c, key, row.reset, written, &context);

    c.clock_set(T0_MS + row.retry as u64 - 1);
    let early = call(c, &dryrun(row.after));
    assert!(
        !early.allowed && early.retry == 1,
        "{context}: at +{} ms: {early:?}",
        row.retry - 1
    );
    c.clock_set(T0_MS + row.retry as u64);
    let on_time = call(c, row.after);
    assert!(
        on_time.allowed && on_time.retry == 0,
        "{context}: at +{} ms: {on_time:?}",
        row.retry
    );
    if let Some(expected) = row.admitted_reply {
        assert_eq!(
            [
                1,
                on_time.limit,
                on_time.remaining,
                on_time.retry,
                on_time.reset
            ],
            expected,
            "{context}: at +{} ms",
            row.retry
        );
    }
}

/// A server whose debug clock is frozen at T0, and a client of it.
fn frozen() -> (Server, Client) {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    (server, c)
}

/// GCRA, 3 at once then 1 per 3 s, full at T0 (9 s owed); under 3 per 3 s a unit is 1 s. The
/// key stays on its stored schedule until a call under the new rate is admitted: it owes at
/// most 2 units (the new tolerance) from T0 + 3 s, when its own schedule has drained one.
/// Before: retry 1000 (the units converted at T0), and at +1000 denied again.
#[test]
fn gcra_a_faster_rate_admits_when_the_stored_schedule_has_room() {
    let (_server, mut c) = frozen();
    replay(
        &mut c,
        &Row {
            before: &["RL.GCRA", "k", "3", "1", "3s"],
            admitted: 3,
            change: &[],
            after: &["RL.GCRA", "k", "3", "3", "3s"],
            retry: 3000,
            reset: 9000,
            // 2 units owed, each 1 s now: TAT T0 + 5 s, then 6 s after the call.
            admitted_reply: Some([1, 3, 0, 0, 3000]),
        },
        Instant::now(),
    );
}

/// The other way: 3 per 3 s full (3 s owed), then 1 per 3 s. Before: retry 3000, when the
/// key had in fact room at +1000.
#[test]
fn gcra_a_slower_rate_admits_when_the_stored_schedule_has_room() {
    let (_server, mut c) = frozen();
    replay(
        &mut c,
        &Row {
            before: &["RL.GCRA", "k", "3", "3", "3s"],
            admitted: 3,
            change: &[],
            after: &["RL.GCRA", "k", "3", "1", "3s"],
            retry: 1000,
            reset: 3000,
            // 2 units owed at +1 s, 3 s each now: TAT +7 s, then +10 s.
            admitted_reply: Some([1, 3, 0, 0, 9000]),
        },
        Instant::now(),
    );
}

#[test]
fn token_bucket_a_faster_refill_admits_when_the_stored_bucket_has_a_token() {
    let (_server, mut c) = frozen();
    replay(
        &mut c,
        &Row {
            before: &["RL.TOKENBUCKET", "k", "3", "1", "3s"],
            admitted: 3,
            change: &[],
            after: &["RL.TOKENBUCKET", "k", "3", "3", "3s"],
            retry: 3000,
            reset: 9000,
            // 1 token at +3 s, taken: 0 of 3, refilled in 3 s at 3 per 3 s.
            admitted_reply: Some([1, 3, 0, 0, 3000]),
        },
        Instant::now(),
    );
}

#[test]
fn token_bucket_a_slower_refill_admits_when_the_stored_bucket_has_a_token() {
    let (_server, mut c) = frozen();
    replay(
        &mut c,
        &Row {
            before: &["RL.TOKENBUCKET", "k", "3", "3", "3s"],
            admitted: 3,
            change: &[],
            after: &["RL.TOKENBUCKET", "k", "3", "1", "3s"],
            retry: 1000,
            reset: 3000,
            // 1 token at +1 s, taken: 0 of 3, refilled in 9 s at 1 per 3 s.
            admitted_reply: Some([1, 3, 0, 0, 9000]),
        },
        Instant::now(),
    );
}

#[test]
fn leaky_bucket_a_faster_leak_admits_when_the_stored_queue_has_room() {
    let (_server, mut c) = frozen();
    replay(
        &mut c,
        &Row {
            before: &["RL.LEAKYBUCKET", "k", "3", "1", "3s"],
            admitted: 3,
            change: &[],
            after: &["RL.LEAKYBUCKET", "k", "3", "3", "3s"],
            retry: 3000,
            reset: 9000,
            // 2 queued at +3 s, 1 s each now: empty at +5 s, then +6 s.
            admitted_reply: Some([1, 3, 0, 0, 3000]),
        },
        Instant::now(),
    );
}

#[test]
fn leaky_bucket_a_slower_leak_admits_when_the_stored_queue_has_room() {
    let (_server, mut c) = frozen();
    replay(
        &mut c,
        &Row {
            before: &["RL.LEAKYBUCKET", "k", "3", "3", "3s"],
            admitted: 3,
            change: &[],
            after: &["RL.LEAKYBUCKET", "k", "3", "1", "3s"],
            retry: 1000,
            reset: 3000,
            // 2 queued at +1 s, 3 s each now: empty at +7 s, then +10 s.
            admitted_reply: Some([1, 3, 0, 0, 9000]),
        },
        Instant::now(),
    );
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// The policy row: the rule keeps its GCRA state in the key under its new rate.
#[test]
fn a_policy_rule_whose_rate_rises_admits_when_the_stored_schedule_has_room() {
    let (_server, mut c) = frozen();
    assert_eq!(c.cmd(&["RL.POLICY.SET", "p", "GCRA", "3", "1", "3s"]), ok());
    replay(
        &mut c,
        &Row {
            before: &["RL.LIMIT", "k", "p"],
            admitted: 3,
            change: &["RL.POLICY.SET", "p", "GCRA", "3", "3", "3s"],
            after: &["RL.LIMIT", "k", "p"],
            retry: 3000,
            reset: 9000,
            admitted_reply: Some([1, 3, 0, 0, 3000]),
        },
        Instant::now(),
    );
}

#[test]
fn a_policy_rule_whose_rate_falls_admits_when_the_stored_schedule_has_room() {
    let (_server, mut c) = frozen();
    assert_eq!(c.cmd(&["RL.POLICY.SET", "p", "GCRA", "3", "3", "3s"]), ok());
    replay(
        &mut c,
        &Row {
            before: &["RL.LIMIT", "k", "p"],
            admitted: 3,
            change: &["RL.POLICY.SET", "p", "GCRA", "3", "1", "3s"],
            after: &["RL.LIMIT", "k", "p"],
            retry: 1000,
            reset: 3000,
            admitted_reply: Some([1, 3, 0, 0, 9000]),
        },
        Instant::now(),
    );
}

/// CL.THROTTLE shares GCRA's state and its schedule, in seconds (redis-cell's reply:
/// `[limited, limit, remaining, retry_after_s, reset_after_s]`): the GCRA rows again, the
/// retry a whole number of seconds here, denied 1 ms before it and admitted at it (a denial
/// writes nothing, so the probe 1 ms early is a real call; CL.THROTTLE has no DRYRUN).
#[test]
fn cl_throttle_a_new_rate_admits_when_the_stored_schedule_has_room() {
    for (from, to, retry_s, reset_s, admitted) in [
        ("1", "3", 3, 9, [0, 3, 0, -1, 3]),
        ("3", "1", 1, 3, [0, 3, 0, -1, 9]),
    ] {
        let (_server, mut c) = frozen();
        let before = ["CL.THROTTLE", "k", "2", from, "3"];
        let after = ["CL.THROTTLE", "k", "2", to, "3"];
        for i in 0..3 {
            assert_eq!(c.cmd(&before).ints()[0], 0, "{before:?}: call {i}");
        }
        assert_eq!(
            c.cmd(&before).ints()[0],
            1,
            "{before:?}: the key is not full"
        );
        let context = format!("{before:?} then {after:?}");
        assert_eq!(
            c.cmd(&after).ints(),
            [1, 3, 0, retry_s, reset_s],
            "{context}"
        );
        c.clock_set(T0_MS + retry_s as u64 * 1000 - 1);
        assert_eq!(
            c.cmd(&after).ints()[..4],
            [1, 3, 0, 1],
            "{context}: 1 ms early"
        );
        c.clock_set(T0_MS + retry_s as u64 * 1000);
        assert_eq!(c.cmd(&after).ints(), admitted, "{context}: on time");
    }
}

/// docs/warmup.md's model for one request of cost 1 on a cold key (stored = max), in µs as
/// an exact fraction (numerator, denominator): stable interval s = P/r, cold c = f·s, the
/// line from the threshold to max has slope (c − s)/(max − threshold) with max − threshold =
/// 2W/(s + c) = 2W/(s(1 + f)); the area under it over [max − 1, max] is
/// c − (c − s)/(2(max − threshold)) = f·s − (f² − 1)s²/(4W). The key is cold again one
/// cool-down interval W/max = 2s(1 + f)/(5 + f) after that (max = W/s · (1/2 + 2/(1 + f))).
/// Returns (the wait, the time until cold).
fn warmup_first_request_us(
    rate: i128,
    period_us: i128,
    warmup_us: i128,
    f: i128,
) -> [(i128, i128); 2] {
    let (r, p, w) = (rate, period_us, warmup_us);
    let den = 4 * w * r * r;
    let wait = 4 * w * r * f * p - (f * f - 1) * p * p;
    // Over den × (5 + f): the wait, plus 2P(1 + f)/(r(5 + f)) = 8 W r P (1 + f) / that.
    let to_cold = wait * (5 + f) + 8 * w * r * p * (1 + f);
    [(wait, den), (to_cold, den * (5 + f))]
}

fn ceil_ms((num, den): (i128, i128)) -> i64 {
    (num as u128).div_ceil(den as u128 * 1000) as i64
}

/// The warm-up rows. A fresh key is cold: its first request is admitted and the next is due
/// when its schedule is paid (next_free). A call under another rate converts the time owed
/// through the stable interval; the key keeps its stored schedule until such a call is
/// admitted, so the first is admitted at the stored next_free, whatever the new rate, and the
/// denial says so. Before: 696 then denied again at +696 (7 → 21), and 2125 where +709 had
/// room (21 → 7). The expected wait comes from docs/warmup.md's formulas, and also from what
/// RL.INSPECT's next_free_us says before the change.
#[test]
fn warmup_a_new_rate_admits_when_the_stored_schedule_is_paid() {
    for (from, to) in [("7", "21"), ("21", "7")] {
        let (_server, mut c) = frozen();
        let rate: i128 = from.parse().unwrap_or_default();
        let [wait, to_cold] = warmup_first_request_us(rate, 3_000_000, 20_000_000, 5);
        let (retry, reset) = (ceil_ms(wait), ceil_ms(to_cold));
        // The figures the issue measured the first admission at, and the key's time to cold.
        assert_eq!(
            (retry, reset),
            if from == "7" {
                (2088, 2603)
            } else {
                (709, 880)
            }
        );
        let before = ["RL.WARMUP", "k", from, "3s", "20s", "COLDFACTOR", "5"];
        let after = ["RL.WARMUP", "k", to, "3s", "20s", "COLDFACTOR", "5"];
        let written = Instant::now();
        assert!(call(&mut c, &before).allowed, "{before:?}");
        let next_free_us = c.cmd(&["RL.INSPECT", "k"]).field("next_free_us").int();
        let owed_us = next_free_us - (T0_MS as i64) * 1000;
        assert_eq!((owed_us + 999) / 1000, retry, "next_free_us {next_free_us}");
        replay(
            &mut c,
            &Row {
                before: &before,
                admitted: 0,
                change: &[],
                after: &after,
                retry,
                reset,
                admitted_reply: None,
            },
            written,
        );
    }
}

// The property. Each family below is a few keys of one algorithm (or of RL.LIMIT on one
// policy) and a pool of parameter sets (or of the policy's rules). A sequence draws, step by
// step: an idle gap, a refund, a change of the policy, or a request under a set drawn from
// the pool with a random COST (0 included, sometimes more than the limit) or ATMOST, and
// sometimes DRYRUN. Every reply is checked against the future, the clock moved forward for
// DRYRUN probes and SET back afterwards (the debug clock goes back freely; a probe writes
// nothing, so the sequence goes on from the state it left):
//
// - a denial with retry R ≥ 1: the same request (DRYRUN) at +R − 1 ms is denied with retry 1,
//   and at +R ms admitted; a denial with -1 only for a COST above the limit, and such a COST
//   always -1;
// - a reply that describes the key as it is after the call (an admission that wrote, a
//   denial, a COST 0 peek): with reset_after_ms Z ≥ 1, a COST 0 DRYRUN at +Z − 1 ms answers
//   reset_after_ms 1, and at +Z ms remaining == limit and reset_after_ms 0; with Z = 0,
//   remaining == limit now. When the call's parameters are the key's stored ones, RL.INSPECT
//   shows the same remaining and reset_after_ms; after a write, the key's PTTL is Z;
// - an admitted DRYRUN is, half the time, made for real at once: the same reply.
//
// Key TTLs run in real time while the debug clock is frozen: the periods are minutes, so a
// key outlives the test; a write that leaves a key less than 20 s from fresh (a refund that
// leaves a fraction, a window about to end) moves the clock on 30 s, so the key is fresh by
// the debug clock before it can expire by the real one.

/// A parameter set: the words after the key (for a policy, a rule's words), and the `limit`
/// a reply under it shows.
struct Params<'a> {
    words: &'a [&'a str],
    limit: i64,
}

fn p<'a>(words: &'a [&'a str], limit: i64) -> Params<'a> {
    Params { words, limit }
}

enum Pool<'a> {
    /// A command and its parameter sets.
    Plain(&'a str, &'a [Params<'a>]),
    /// RL.LIMIT on a policy of this name, whose rules RL.POLICY.SET changes among these.
    Policy(&'a str, &'a [&'a [Params<'a>]]),
}

struct Family<'a> {
    keys: &'a [&'a str],
    pool: Pool<'a>,
    /// The typical idle gap, ms: about the pool's periods and windows.
    scale_ms: u64,
    /// Whether a call that writes nothing answers the stored schedule's reset_after_ms,
    /// whatever its parameters (GCRA, the leaky bucket).
    stored_reset: bool,
    seed: u64,
}

/// Steps in each family's sequence, and what is added to each family's seed: 120 and 0,
/// unless RETRY_AFTER_STEPS and RETRY_AFTER_SEED say otherwise (a longer hunt).
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy)]
enum Take {
    Cost(i64),
    AtMost(i64),
}

struct Run<'f> {
    c: Client,
    family: &'f Family<'f>,
    rng: u64,
    /// The debug clock, ms.
    now: u64,
    /// The policy's rules now (an index into the pool).
    variant: usize,
    /// The parameter set (or rules) each key was last written under.
    stored: HashMap<&'f str, usize>,
    history: Vec<String>,
    commands: usize,
    moved_on: usize,
    /// Denials whose retry was probed, replies whose reset was, and requests under other
    /// parameters than the key's stored ones (a change in effect).
    retries: usize,
    resets: usize,
    changed: usize,
}

impl<'f> Run<'f> {
    fn seed(&self) -> u64 {
        self.family.seed + setting("RETRY_AFTER_SEED", 0)
    }

    fn next(&mut self) -> u64 {
        self.rng = self
            .rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.rng >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn send(&mut self, args: &[&str]) -> Reply {
        self.commands += 1;
        let reply = self.c.cmd(args);
        self.history
            .push(format!("{} -> {}", args.join(" "), reply.render()));
        reply
    }

    /// Panics with the seed and the commands that led here.
    fn fail(&self, what: String) -> ! {
        let from = self.history.len().saturating_sub(60);
        panic!(
            "seed {}: {what}\nthe last commands (clock at T0 = {T0_MS}):\n{}",
            self.seed(),
            self.history[from..].join("\n")
        );
    }

    fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.fail(what());
        }
    }

    fn clock(&mut self, ms: u64) {
        let at = ms.to_string();
        let reply = self.send(&["RL.DEBUG.CLOCK", "SET", &at]);
        self.check(reply == Reply::Int(ms as i64), || {
            format!("clock {reply:?}")
        });
    }

    fn answer(&mut self, args: &[&str]) -> Answer {
        let reply = self.send(args);
        match std::panic::catch_unwind(|| answer(args, &reply)) {
            Ok(a) => a,
            Err(_) => self.fail(format!("{args:?}: not an admission reply")),
        }
    }

    /// The rules (or the one parameter set) a request under set `set` is checked by.
    fn rules(&self, set: usize) -> &'f [Params<'f>] {
        match self.family.pool {
            Pool::Plain(_, sets) => std::slice::from_ref(&sets[set]),
            Pool::Policy(_, variants) => variants[set],
        }
    }

    /// Whether a rule is a warm-up's, which admits any COST once its schedule is paid.
    fn warmup(&self, rule: &Params) -> bool {
        match self.family.pool {
            Pool::Plain(command, _) => command == "RL.WARMUP",
            Pool::Policy(..) => rule.words[0] == "WARMUP",
        }
    }

    fn step(&mut self) {
        let policy = matches!(self.family.pool, Pool::Policy(..));
        match self.below(100) {
            0..=11 => self.idle(),
            12..=19 => self.refund(),
            20..=29 if policy => self.change_policy(),
            _ => self.request(),
        }
    }

    fn idle(&mut self) {
        let scale = self.family.scale_ms;
        let gap = match self.below(100) {
            0..=24 => 1 + self.below(999),
            25..=64 => 1000 + self.below(scale),
            _ => scale + self.below(3 * scale),
        };
        self.now += gap;
        self.clock(self.now);
    }

    fn key(&mut self) -> &'f str {
        let keys = self.family.keys;
        keys[self.below(keys.len() as u64) as usize]
    }

    fn refund(&mut self) {
        let key = self.key();
        let units = self.below(4) as i64;
        let dry = self.below(5) == 0;
        let units_s = units.to_string();
        let mut args = vec!["RL.REFUND", key, &units_s];
        if dry {
            args.push("DRYRUN");
        }
        let reply = self.send(&args);
        let given = match reply {
            Reply::Int(n) if (0..=units).contains(&n) => n,
            other => self.fail(format!("{args:?}: {other:?}")),
        };
        if !dry && given > 0 {
            let pttl = self.c.pttl(key);
            self.check(pttl != -1, || format!("{key} has no TTL after a refund"));
            self.move_on_if_close(pttl);
        }
    }

    fn change_policy(&mut self) {
        let Pool::Policy(name, variants) = self.family.pool else {
            return;
        };
        self.variant = self.below(variants.len() as u64) as usize;
        let mut args = vec!["RL.POLICY.SET", name];
        for rule in variants[self.variant] {
            args.extend_from_slice(rule.words);
        }
        let reply = self.send(&args);
        self.check(reply == ok(), || format!("{args:?}: {reply:?}"));
    }

    /// A key less than 20 s (real time) from expiring: the debug clock moves on 30 s, past
    /// the key's fresh point, so that its expiry by the real clock changes nothing.
    fn move_on_if_close(&mut self, pttl: i64) {
        if (0..20_000).contains(&pttl) {
            self.moved_on += 1;
            self.now += 30_000;
            self.clock(self.now);
        }
    }

    fn request(&mut self) {
        let key = self.key();
        let set = match self.family.pool {
            Pool::Plain(_, sets) => self.below(sets.len() as u64) as usize,
            Pool::Policy(..) => self.variant,
        };
        let rules = self.rules(set);
        let most = rules.iter().map(|r| r.limit).max().unwrap_or(1);
        let take = match self.below(100) {
            0..=14 => Take::AtMost(1 + self.below(4) as i64),
            15..=24 => Take::Cost(0),
            25..=64 => Take::Cost(1),
            65..=84 => Take::Cost(2),
            85..=94 => Take::Cost(3),
            _ => Take::Cost(most + 1),
        };
        let dry = self.below(5) == 0;
        let mut base: Vec<&str> = Vec::new();
        match self.family.pool {
            Pool::Plain(command, sets) => {
                base.extend([command, key]);
                base.extend_from_slice(sets[set].words);
            }
            Pool::Policy(name, _) => base.extend(["RL.LIMIT", key, name]),
        }
        let n = match take {
            Take::Cost(n) | Take::AtMost(n) => n.to_string(),
        };
        let mut args = base.clone();
        args.extend([
            match take {
                Take::Cost(_) => "COST",
                Take::AtMost(_) => "ATMOST",
            },
            n.as_str(),
        ]);
        if dry {
            args.push("DRYRUN");
        }
        if self.stored.get(key).is_some_and(|&s| s != set) {
            self.changed += 1;
        }
        let written = Instant::now();
        let a = self.answer(&args);
        self.check_fields(&args, set, take, &a);
        let taken = match take {
            Take::Cost(n) => n,
            Take::AtMost(_) => a.more.last().copied().unwrap_or(0),
        };
        // The reply (docs/commands.md): a denial's retry_after_ms is the least whole ms after which the same
        // request is admitted.
        if !a.allowed && a.retry >= 1 {
            self.probe_retry(&args, a.retry);
        }
        let mut writes = a.allowed && !dry && taken >= 1;
        let mut a = a;
        let mut written = written;
        if a.allowed && dry && taken >= 1 && self.below(2) == 0 {
            // A DRYRUN answers as if the request were made: make it, at the same instant.
            let real: Vec<&str> = args.iter().copied().filter(|w| *w != "DRYRUN").collect();
            written = Instant::now();
            let made = self.answer(&real);
            self.check(made == a, || {
                format!("{real:?} answered {made:?}, its DRYRUN {a:?}")
            });
            a = made;
            writes = true;
        }
        // A reply that describes the key as the call leaves it (an admitted DRYRUN of units
        // describes a state that is not there).
        let describes_key = writes || !a.allowed || taken == 0;
        let single = rules.len() == 1;
        let mut pttl = None;
        if writes {
            self.stored.insert(key, set);
            let ttl = self.c.pttl(key);
            let ran = real_ms_since(written);
            // The key's TTL is its reset_after: the largest of its rules' (RL.LIMIT).
            let fits = if single {
                ttl <= a.reset && ttl >= a.reset - ran - 1
            } else {
                ttl >= a.reset - ran - 1
            };
            self.check(fits, || {
                format!("{args:?}: PTTL {ttl} after a write answering {a:?} ({ran} ms ago)")
            });
            pttl = Some(ttl);
        }
        if describes_key {
            let warmup = match self.family.pool {
                Pool::Plain(..) => self.warmup(&rules[0]),
                Pool::Policy(..) => a
                    .more
                    .first()
                    .and_then(|&i| rules.get(i as usize))
                    .is_some_and(|r| self.warmup(r)),
            };
            self.probe_reset(&base, &a, single, warmup);
            if single && self.stored.get(key) == Some(&set) {
                self.inspect_agrees(key, &args, &a, true);
            } else if single && !writes && self.family.stored_reset {
                self.inspect_agrees(key, &args, &a, false);
            }
        }
        if let Some(ttl) = pttl {
            self.move_on_if_close(ttl);
        }
    }

    /// The fields against the request: the limit, retry 0 when admitted, -1 exactly for a
    /// COST no rule (but a warm-up's) can ever admit, ATMOST's grant.
    fn check_fields(&self, args: &[&str], set: usize, take: Take, a: &Answer) {
        let rules = self.rules(set);
        let binding = match self.family.pool {
            Pool::Plain(..) => Some(&rules[0]),
            Pool::Policy(..) => a.more.first().and_then(|&i| rules.get(i as usize)),
        };
        let limit = binding.map(|r| r.limit);
        self.check(limit == Some(a.limit), || {
            format!("{args:?}: {a:?}: the limit of the rule is {limit:?}")
        });
        self.check(a.allowed == (a.retry == 0), || {
            format!("{args:?}: {a:?}: retry_after_ms 0 exactly when admitted")
        });
        self.check(a.retry >= -1, || format!("{args:?}: {a:?}"));
        match take {
            Take::Cost(n) => {
                let never = rules.iter().any(|r| !self.warmup(r) && n > r.limit);
                self.check(never == (a.retry == -1), || {
                    format!("{args:?}: {a:?}: -1 exactly when COST {n} is above a limit")
                });
            }
            Take::AtMost(max) => {
                let granted = a.more.last().copied().unwrap_or(-1);
                self.check(
                    (0..=max).contains(&granted) && a.allowed == (granted >= 1) && a.retry != -1,
                    || format!("{args:?}: {a:?}: granted {granted}"),
                );
            }
        }
    }

    fn probe_retry(&mut self, args: &[&str], retry: i64) {
        self.retries += 1;
        let probe = dryrun(args);
        let now = self.now;
        self.clock(now + retry as u64 - 1);
        let early = self.answer(&probe);
        self.check(!early.allowed && early.retry == 1, || {
            format!(
                "denied with retry_after_ms {retry}, but at +{} ms: {early:?}",
                retry - 1
            )
        });
        self.clock(now + retry as u64);
        let late = self.answer(&probe);
        self.check(late.allowed, || {
            format!("denied with retry_after_ms {retry}, but at +{retry} ms: {late:?}")
        });
        self.clock(now);
    }

    /// The reply (docs/commands.md): reset_after_ms is the time until the key is fresh (remaining == limit). A
    /// policy of several rules answers with its binding rule's fields: the probe says
    /// something only when the same rule binds it.
    /// A warm-up's `remaining` is 1 whenever a request would be admitted now, also while it is
    /// not yet cold again (fresh): for it, remaining == limit says nothing about the reset.
    fn probe_reset(&mut self, base: &[&str], a: &Answer, single: bool, warmup: bool) {
        let same_rule = |p: &Answer| single || p.more.first() == a.more.first();
        self.check(
            (a.reset == 0) == (a.remaining == a.limit) || warmup && a.reset > 0,
            || format!("{a:?}: fresh (remaining == limit) exactly when reset_after_ms is 0"),
        );
        if a.reset == 0 {
            return;
        }
        self.resets += 1;
        let mut peek = base.to_vec();
        peek.extend(["COST", "0", "DRYRUN"]);
        let now = self.now;
        let reset = a.reset as u64;
        self.clock(now + reset - 1);
        let before = self.answer(&peek);
        self.check(!same_rule(&before) || before.reset == 1, || {
            format!(
                "{a:?} says fresh in {reset} ms, but at +{} ms: {before:?}",
                reset - 1
            )
        });
        self.clock(now + reset);
        let then = self.answer(&peek);
        self.check(
            !same_rule(&then) || (then.remaining == then.limit && then.reset == 0),
            || format!("{a:?} says fresh in {reset} ms, but then: {then:?}"),
        );
        self.clock(now);
    }

    /// Under the key's stored parameters (`stored`), RL.INSPECT sees what the reply says.
    /// Under others, for GCRA and the leaky bucket, whose key is fresh under any parameters
    /// exactly when its stored schedule is (no unit owed, an empty queue), a reply that
    /// writes nothing has the stored schedule's reset_after_ms (issue 22's semantics).
    fn inspect_agrees(&mut self, key: &str, args: &[&str], a: &Answer, stored: bool) {
        let inspect = self.send(&["RL.INSPECT", key]);
        let ok = match &inspect {
            Reply::Nil => a.remaining == a.limit && a.reset == 0,
            Reply::Array(_) => {
                (!stored || inspect.field("remaining") == Reply::Int(a.remaining))
                    && inspect.field("reset_after_ms") == Reply::Int(a.reset)
            }
            _ => false,
        };
        self.check(ok, || {
            format!("{args:?} answered {a:?}; RL.INSPECT {key}: {inspect:?}")
        });
    }
}

/// The LCG's first state from a seed: SplitMix64's finalizer, so that seeds 1 apart give
/// unrelated sequences.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

fn run(family: &Family) {
    let server = Server::start();
    let mut run = Run {
        c: server.client(),
        family,
        rng: 0,
        now: T0_MS,
        variant: 0,
        stored: HashMap::new(),
        history: Vec::new(),
        commands: 0,
        moved_on: 0,
        retries: 0,
        resets: 0,
        changed: 0,
    };
    run.rng = splitmix64(run.seed());
    run.clock(T0_MS);
    if let Pool::Policy(..) = family.pool {
        run.change_policy();
    }
    for _ in 0..setting("RETRY_AFTER_STEPS", 120) {
        run.step();
    }
    eprintln!(
        "seed {}: {} commands, {} denials and {} resets probed, {} requests under changed \
         parameters, the clock moved on {} times for a key close to expiring",
        run.seed(),
        run.commands,
        run.retries,
        run.resets,
        run.changed,
        run.moved_on
    );
}

#[test]
fn gcra_keeps_its_promises() {
    run(&Family {
        keys: &["g1", "g2"],
        pool: Pool::Plain(
            "RL.GCRA",
            &[
                p(&["3", "1", "3m"], 3),
                p(&["3", "3", "3m"], 3),
                p(&["5", "2", "5m"], 5),
                p(&["1", "1", "2m"], 1),
                p(&["4", "7", "10m"], 4),
            ],
        ),
        scale_ms: 180_000,
        stored_reset: true,
        seed: 22,
    });
}

#[test]
fn token_buckets_keep_their_promises() {
    run(&Family {
        keys: &["t1", "t2"],
        pool: Pool::Plain(
            "RL.TOKENBUCKET",
            &[
                p(&["3", "1", "3m"], 3),
                p(&["3", "3", "3m"], 3),
                p(&["5", "2", "5m", "INTERVAL"], 5),
                p(&["4", "3", "7m"], 4),
                p(&["3", "1", "3m", "INTERVAL"], 3),
                p(&["6", "5", "10m"], 6),
            ],
        ),
        scale_ms: 180_000,
        stored_reset: false,
        seed: 2201,
    });
}

#[test]
fn leaky_buckets_keep_their_promises() {
    run(&Family {
        keys: &["l1", "l2"],
        pool: Pool::Plain(
            "RL.LEAKYBUCKET",
            &[
                p(&["3", "1", "3m"], 3),
                p(&["3", "3", "3m"], 3),
                p(&["5", "2", "5m"], 5),
                p(&["2", "3", "10m"], 2),
            ],
        ),
        scale_ms: 180_000,
        stored_reset: true,
        seed: 2202,
    });
}

#[test]
fn fixed_windows_keep_their_promises() {
    run(&Family {
        keys: &["f1", "f2"],
        pool: Pool::Plain(
            "RL.FIXEDWINDOW",
            &[
                p(&["3", "10m"], 3),
                p(&["5", "1h"], 5),
                p(&["2", "7m"], 2),
                p(&["4", "10m"], 4),
            ],
        ),
        scale_ms: 600_000,
        stored_reset: false,
        seed: 2203,
    });
}

#[test]
fn sliding_windows_keep_their_promises() {
    run(&Family {
        keys: &["s1", "s2"],
        pool: Pool::Plain(
            "RL.SLIDINGWINDOW",
            &[
                p(&["3", "10m"], 3),
                p(&["5", "1h"], 5),
                p(&["2", "7m"], 2),
                p(&["7", "15m"], 7),
            ],
        ),
        scale_ms: 600_000,
        stored_reset: false,
        seed: 2204,
    });
}

/// Windows up to 8 minutes: a log keeps them to the exact µs (docs/sliding-log.md).
#[test]
fn sliding_logs_keep_their_promises() {
    run(&Family {
        keys: &["o1", "o2"],
        pool: Pool::Plain(
            "RL.SLIDINGLOG",
            &[
                p(&["3", "5m"], 3),
                p(&["5", "8m"], 5),
                p(&["2", "7m"], 2),
                p(&["4", "3m"], 4),
            ],
        ),
        scale_ms: 240_000,
        stored_reset: false,
        seed: 2205,
    });
}

#[test]
fn warmups_keep_their_promises() {
    run(&Family {
        keys: &["w1", "w2"],
        pool: Pool::Plain(
            "RL.WARMUP",
            &[
                p(&["7", "3m", "20m", "COLDFACTOR", "5"], 1),
                p(&["21", "3m", "20m", "COLDFACTOR", "5"], 1),
                p(&["10", "10m", "30m"], 1),
                p(&["3", "5m", "10m", "COLDFACTOR", "2"], 1),
            ],
        ),
        scale_ms: 120_000,
        stored_reset: false,
        seed: 2206,
    });
}

/// The policy: one GCRA rule whose rate RL.POLICY.SET changes.
#[test]
fn a_policy_rule_keeps_its_promises_while_its_rate_changes() {
    run(&Family {
        keys: &["a1", "a2"],
        pool: Pool::Policy(
            "one",
            &[
                &[p(&["GCRA", "3", "1", "3m"], 3)],
                &[p(&["GCRA", "3", "3", "3m"], 3)],
                &[p(&["GCRA", "5", "2", "5m"], 5)],
            ],
        ),
        scale_ms: 180_000,
        stored_reset: true,
        seed: 2207,
    });
}

/// Two rules whose parameters change, and whose algorithms change too (a new rule starts
/// fresh): the reply is the binding rule's.
#[test]
fn a_policy_of_two_rules_keeps_its_promises_while_they_change() {
    run(&Family {
        keys: &["b1", "b2"],
        pool: Pool::Policy(
            "two",
            &[
                &[
                    p(&["GCRA", "3", "1", "3m"], 3),
                    p(&["FIXEDWINDOW", "12", "1h"], 12),
                ],
                &[
                    p(&["GCRA", "3", "3", "3m"], 3),
                    p(&["FIXEDWINDOW", "10", "1h"], 10),
                ],
                &[
                    p(&["GCRA", "5", "2", "5m"], 5),
                    p(&["FIXEDWINDOW", "12", "1h"], 12),
                ],
                &[
                    p(&["TOKENBUCKET", "4", "3", "7m"], 4),
                    p(&["SLIDINGWINDOW", "12", "1h"], 12),
                ],
                &[
                    p(&["WARMUP", "7", "3m", "20m", "COLDFACTOR", "5"], 1),
                    p(&["FIXEDWINDOW", "12", "1h"], 12),
                ],
                &[
                    p(&["LEAKYBUCKET", "3", "1", "3m"], 3),
                    p(&["SLIDINGLOG", "6", "5m"], 6),
                ],
            ],
        ),
        scale_ms: 60_000,
        stored_reset: false,
        seed: 2208,
    });
}

/// A concurrency key whose limit goes down under its leases: three held (taken a second
/// apart, a minute each), then a limit of one. A lease frees only when all three have ended:
/// the third to end, at T0 + 62 s. Before: retry_after said when the first ends (57 s after
/// the call), and the same request was refused then.
#[test]
fn concurrency_a_lower_limit_waits_for_enough_leases_to_end() {
    let (_server, mut c) = frozen();
    // The five fields of an ACQUIRE's reply (a lease token follows when admitted).
    let acquire = |c: &mut Client, args: &[&str]| -> Vec<i64> {
        match c.cmd(args) {
            Reply::Array(items) => items[..5].iter().map(|i| i.int()).collect(),
            other => panic!("{args:?}: {other:?}"),
        }
    };
    for _ in 0..3 {
        assert_eq!(
            acquire(&mut c, &["RL.CONCURRENCY.ACQUIRE", "cc", "3", "1m"])[0],
            1
        );
        c.clock_advance(1000);
    }
    // At T0 + 3 s, under limit 1: the leases end at T0 + 60, 61 and 62 s.
    let lower = ["RL.CONCURRENCY.ACQUIRE", "cc", "1", "1m"];
    assert_eq!(acquire(&mut c, &lower), [0, 1, 0, 59_000, 59_000]);
    c.clock_advance(58_999);
    assert_eq!(acquire(&mut c, &dryrun(&lower))[..4], [0, 1, 0, 1]);
    c.clock_advance(1);
    assert_eq!(acquire(&mut c, &lower)[0], 1);
}
