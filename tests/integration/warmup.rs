//! RL.WARMUP against a real server with the debug clock: Guava's classic figures replayed
//! request by request with exact replies, pre-consumption, cool-down, errors, RESP3, the
//! key's TTL, RL.INSPECT, COMMAND DOCS, INFO, a policy with a WARMUP rule, a replica and
//! the durability paths.

use crate::common;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// The classic example: 10 per second, warm-up 10 s, cold factor 3 (the default).
fn classic(c: &mut Client, key: &str, extra: &[&str]) -> Reply {
    let mut args = vec!["RL.WARMUP", key, "10", "1s", "10s"];
    args.extend_from_slice(extra);
    c.cmd(&args)
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// A server whose debug clock reads `ms`, and a client of it.
fn started_at(ms: u64) -> (Server, Client) {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(ms);
    (server, c)
}

/// The command `line` spells, word by word.
fn words(c: &mut Client, line: &str) -> Reply {
    c.cmd(&line.split_whitespace().collect::<Vec<_>>())
}

/// Asserts the key's PTTL is `reset_ms` less the real time since the last write (a little).
fn assert_pttl(c: &mut Client, key: &str, reset_ms: i64) {
    let pttl = c.pttl(key);
    assert!(
        pttl > reset_ms - 5_000 && pttl <= reset_ms,
        "pttl {pttl}, reset {reset_ms}"
    );
}

/// From idle, each request made exactly when the previous one's wait is over: the spacing
/// starts just under the cold interval (298 ms, the area under the line from 300 ms to
/// 296 ms) and falls by 4 ms per request to the stable 100 ms. One ms earlier is denied.
#[test]
fn the_classic_figures_from_idle() {
    let (_server, mut c) = started_at(T0_MS);
    for i in 0..50i64 {
        let spacing = 298 - 4 * i;
        // reset_after: the wait, then one cool-down interval (100 ms) per permit spent.
        let to_cold = 100 * (i + 1);
        assert_eq!(
            classic(&mut c, "k", &[]).ints(),
            [1, 1, 0, 0, spacing + to_cold],
            "request {i}"
        );
        assert_pttl(&mut c, "k", spacing + to_cold);
        c.clock_advance(spacing - 1);
        assert_eq!(classic(&mut c, "k", &[]).ints(), [0, 1, 0, 1, 1 + to_cold]);
        c.clock_advance(1);
    }
    // Warm: 100 ms apart from now on.
    for i in 50..53i64 {
        assert_eq!(
            classic(&mut c, "k", &[]).ints(),
            [1, 1, 0, 0, 100 + 100 * (i + 1)]
        );
        assert_eq!(
            classic(&mut c, "k", &[]).ints(),
            [0, 1, 0, 100, 100 * (i + 2)]
        );
        c.clock_advance(100);
    }
}

/// A large request passes at once when nothing is owed; the next caller pays for it.
#[test]
fn a_large_request_passes_and_later_callers_pay() {
    let (_server, mut c) = started_at(T0_MS);
    // All 100 stored permits: the trapezoid (10 s) and 50 at 100 ms (5 s); then the key
    // cools for the warm-up (10 s).
    assert_eq!(
        classic(&mut c, "k", &["COST", "100"]).ints(),
        [1, 1, 0, 0, 25_000]
    );
    assert_pttl(&mut c, "k", 25_000);
    assert_eq!(classic(&mut c, "k", &[]).ints(), [0, 1, 0, 15_000, 25_000]);
    c.clock_advance(14_999);
    assert_eq!(
        classic(&mut c, "k", &["COST", "5"]).ints(),
        [0, 1, 0, 1, 10_001]
    );
    c.clock_advance(1);
    // Paid: any cost passes; nothing is stored, so 300 units cost 300 × 100 ms.
    assert_eq!(
        classic(&mut c, "k", &["COST", "300"]).ints(),
        [1, 1, 0, 0, 40_000]
    );
}

/// Idle for the warm-up after the schedule is paid, the key is cold again: fresh.
#[test]
fn the_key_cools_back_to_cold_and_expires_then() {
    let (_server, mut c) = started_at(T0_MS);
    classic(&mut c, "k", &["COST", "100"]);
    // Half way through the cool-down.
    c.clock_advance(20_000);
    assert_eq!(
        classic(&mut c, "k", &["COST", "0"]).ints(),
        [1, 1, 1, 0, 5_000]
    );
    let state = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(state.field("stored_micropermits"), Reply::Int(50_000_000));
    c.clock_advance(5_000);
    assert_eq!(classic(&mut c, "k", &["COST", "0"]).ints(), [1, 1, 1, 0, 0]);
    // Cold: the first spacing again.
    assert_eq!(classic(&mut c, "k", &[]).ints(), [1, 1, 0, 0, 398]);
    // A short warm-up: the key expires (in real time) once cold. Max is 0.2 permits, 0.1
    // above the threshold: the permit costs 100 ms plus the triangle above the stable line
    // (0.1 × 200 ms / 2 = 10 ms), 110 ms; then the 20 ms warm-up to cool.
    assert_eq!(
        c.cmd(&["RL.WARMUP", "short", "10", "1s", "20ms"]).ints(),
        [1, 1, 0, 0, 130]
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(c.cmd(&["EXISTS", "short"]), Reply::Int(0));
}

#[test]
fn dryrun_and_cost_zero_write_nothing() {
    let (_server, mut c) = started_at(T0_MS);
    assert_eq!(classic(&mut c, "k", &["DRYRUN"]).ints(), [1, 1, 0, 0, 398]);
    assert_eq!(classic(&mut c, "k", &["COST", "0"]).ints(), [1, 1, 1, 0, 0]);
    assert_eq!(c.cmd(&["EXISTS", "k"]), Reply::Int(0));
    classic(&mut c, "k", &[]);
    let before = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(
        classic(&mut c, "k", &["COST", "0"]).ints(),
        [0, 1, 0, 298, 398]
    );
    assert_eq!(
        classic(&mut c, "k", &["DRYRUN"]).ints(),
        [0, 1, 0, 298, 398]
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), before);
}

#[test]
fn the_cold_factor_sets_the_first_spacing() {
    let (_server, mut c) = started_at(T0_MS);
    // Cold factor 10: the line runs from 1000 ms down to 100 ms over max - threshold
    // = 2 × 10 s / 1.1 s = 18.18 permits, 49.5 ms per permit; the first permit costs the
    // average of 1000 and 950.5 ms: 975.25 ms.
    let r = classic(&mut c, "k", &["COLDFACTOR", "10"]).ints();
    assert_eq!(r[..4], [1, 1, 0, 0]);
    assert_eq!(classic(&mut c, "k", &["coldfactor", "10"]).ints()[3], 976);
    // Cold factor 2: from 200 ms over 66.67 permits, 1.5 ms per permit: 199.25 ms.
    assert_eq!(classic(&mut c, "k2", &["COLDFACTOR", "2"]).ints()[0], 1);
    assert_eq!(classic(&mut c, "k2", &["COLDFACTOR", "2"]).ints()[3], 200);
    c.clock_advance(199);
    assert_eq!(classic(&mut c, "k2", &["COLDFACTOR", "2"]).ints()[3], 1);
    c.clock_advance(1);
    assert_eq!(classic(&mut c, "k2", &["COLDFACTOR", "2"]).ints()[0], 1);
}

#[test]
fn block_works_as_on_the_other_commands() {
    let (_server, mut c) = started_at(T0_MS);
    assert_eq!(classic(&mut c, "k", &["BLOCK", "1m"]).ints()[0], 1);
    assert_eq!(
        classic(&mut c, "k", &["BLOCK", "1m"]).ints(),
        [0, 1, 0, 60_000, 60_000]
    );
    c.clock_advance(1000);
    // The schedule is paid, but the penalty holds.
    assert_eq!(classic(&mut c, "k", &[]).ints()[..4], [0, 1, 0, 59_000]);
}

#[test]
fn errors_name_the_argument_and_range() {
    let (_server, mut c) = started_at(T0_MS);
    let factor = "ERR invalid COLDFACTOR: expected an integer from 2 to 10";
    for bad in ["1", "11", "0", "-3", "3.5", "03"] {
        assert_eq!(classic(&mut c, "k", &["COLDFACTOR", bad]).error(), factor);
    }
    assert_eq!(
        classic(&mut c, "k", &["COLDFACTOR"]).error(),
        "ERR COLDFACTOR needs a value: an integer from 2 to 10"
    );
    assert_eq!(
        classic(&mut c, "k", &["COLDFACTOR", "3", "COLDFACTOR", "3"]).error(),
        "ERR COLDFACTOR given more than once"
    );
    assert_eq!(
        c.cmd(&["RL.WARMUP", "k", "10", "1s"]).error(),
        "ERR wrong number of arguments for 'RL.WARMUP': expected RL.WARMUP key rate period \
         warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"
    );
    assert_eq!(
        c.cmd(&["RL.WARMUP", "k", "0", "1s", "10s"]).error(),
        "ERR invalid rate: expected an integer from 1 to 1000000000000"
    );
    assert!(c
        .cmd(&["RL.WARMUP", "k", "10", "1s", "0"])
        .error()
        .starts_with("ERR invalid warmup: expected a duration from 1ms to 10 years"));
    assert!(classic(&mut c, "k", &["INTERVAL"])
        .error()
        .starts_with("ERR unknown option 'INTERVAL' at argument 5"));
    // Nothing was written by any of them.
    assert_eq!(c.cmd(&["EXISTS", "k"]), Reply::Int(0));
    // A key of another algorithm, and the other way round.
    c.cmd(&["RL.GCRA", "g", "1", "1", "1s"]);
    assert_eq!(
        classic(&mut c, "g", &[]).error(),
        "ERR the key holds RL.GCRA state, not RL.WARMUP: use RL.GCRA on it, or another key"
    );
    classic(&mut c, "w", &[]);
    assert_eq!(
        c.cmd(&["RL.GCRA", "w", "1", "1", "1s"]).error(),
        "ERR the key holds RL.WARMUP state, not RL.GCRA: use RL.WARMUP on it, or another key"
    );
    c.cmd(&["SET", "s", "x"]);
    assert!(classic(&mut c, "s", &[]).error().starts_with("WRONGTYPE"));
}

#[test]
fn the_largest_parameters_are_accepted() {
    let (_server, mut c) = started_at(T0_MS);
    let r = c
        .cmd(&[
            "RL.WARMUP",
            "k",
            "1000000000000",
            "3650d",
            "3650d",
            "COLDFACTOR",
            "10",
            "COST",
            "1000000000000",
        ])
        .ints();
    assert_eq!(r[..4], [1, 1, 0, 0]);
    let r = c.cmd(&["RL.WARMUP", "k", "1", "1ms", "3650d"]).ints();
    assert_eq!(r[..3], [0, 1, 0]);
}

#[test]
fn resp3_gets_a_map() {
    let (_server, mut c) = started_at(T0_MS);
    c.cmd(&["HELLO", "3"]);
    let field = |name: &str, value: Reply| (Reply::Bulk(name.as_bytes().to_vec()), value);
    assert_eq!(
        classic(&mut c, "k", &[]),
        Reply::Map(vec![
            field("allowed", Reply::Bool(true)),
            field("limit", Reply::Int(1)),
            field("remaining", Reply::Int(0)),
            field("retry_after_ms", Reply::Int(0)),
            field("reset_after_ms", Reply::Int(398)),
        ])
    );
    match classic(&mut c, "k", &[]) {
        Reply::Map(pairs) => assert_eq!(pairs[0], field("allowed", Reply::Bool(false))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn inspect_shows_parameters_and_state() {
    let (_server, mut c) = started_at(T0_MS);
    classic(&mut c, "k", &["COLDFACTOR", "3"]);
    c.clock_advance(100);
    let state = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(state.field("algorithm").text(), "warmup");
    let t0_us = (T0_MS * 1000) as i64;
    assert_eq!(
        state.fields(),
        [
            ("limit", 1),
            ("rate", 10),
            ("period_ms", 1000),
            ("warmup_ms", 10_000),
            ("coldfactor", 3),
            ("stored_micropermits", 99_000_000),
            ("max_micropermits", 100_000_000),
            ("next_free_us", t0_us + 298_000),
            ("remaining", 0),
            ("reset_after_ms", 298),
        ]
        .map(|(n, v)| (n.to_string(), v))
    );
}

/// `COMMAND DOCS rl.warmup`: the arguments by name, COLDFACTOR with its token.
#[test]
fn command_docs_describe_the_arguments() {
    let server = Server::start();
    let mut c = server.client();
    let reply = c.cmd(&["COMMAND", "DOCS", "rl.warmup"]);
    let text = reply.render();
    for word in [
        "Guava",
        "key",
        "rate",
        "period",
        "warmup",
        "factor",
        "COLDFACTOR",
        "COST",
        "DRYRUN",
        "BLOCK",
    ] {
        assert!(text.contains(word), "{word} not in {text}");
    }
}

#[test]
fn info_counts_calls_admitted_denied_and_errors() {
    let (_server, mut c) = started_at(T0_MS);
    classic(&mut c, "k", &[]);
    classic(&mut c, "k", &[]);
    classic(&mut c, "k", &["COLDFACTOR", "1"]);
    let info = c.cmd(&["INFO", "ratelimit"]).text();
    assert!(
        info.contains(
            "\r\nratelimit_rl.warmup:calls=3,admitted=1,denied=1,shadow_denied=0,errors=1\r\n"
        ),
        "{info}"
    );
}

#[test]
fn a_policy_with_a_warmup_rule() {
    let (_server, mut c) = started_at(T0_MS);
    let set = "RL.POLICY.SET p warmup 10 1s 10s coldfactor 3 GCRA 100 100 1s";
    assert_eq!(words(&mut c, set), ok());
    assert_eq!(
        c.cmd(&["RL.POLICY.GET", "p"]),
        Reply::Array(
            "WARMUP 10 1s 10s COLDFACTOR 3 GCRA 100 100 1s"
                .split_whitespace()
                .map(|w| Reply::Bulk(w.as_bytes().to_vec()))
                .collect()
        )
    );
    // The warm-up rule binds: it has no request left now, and cools longest.
    let limit = ["RL.LIMIT", "k", "p"];
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 398, 0]);
    assert_eq!(c.cmd(&limit).ints(), [0, 1, 0, 298, 398, 0]);
    c.clock_advance(298);
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 294 + 200, 0]);
    // Without COLDFACTOR, the default; a bad one is named with its rule.
    assert_eq!(words(&mut c, "RL.POLICY.SET q WARMUP 10 1s 10s"), ok());
    assert_eq!(
        words(&mut c, "RL.POLICY.SET q WARMUP 10 1s 10s COLDFACTOR 11").error(),
        "ERR the WARMUP rule at argument 2: invalid COLDFACTOR: expected an integer from 2 to 10"
    );
    assert_eq!(
        words(&mut c, "RL.POLICY.SET q WARMUP 10 1s 10s COLDFACTOR").error(),
        "ERR the WARMUP rule at argument 2: COLDFACTOR needs a value: an integer from 2 to 10"
    );
    assert_eq!(
        words(&mut c, "RL.POLICY.SET q WARMUP 10 1s").error(),
        "ERR the WARMUP rule at argument 2 needs its arguments: WARMUP rate period warmup \
         [COLDFACTOR factor]"
    );
}

#[test]
fn the_replica_holds_the_same_state() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(T0_MS);
    for i in 0..30 {
        let cost = (i % 4).to_string();
        p.cmd(&["RL.WARMUP", "a", "10", "1m", "1h", "COST", &cost]);
        p.cmd(&["RL.WARMUP", "b", "3", "1m", "1h", "COLDFACTOR", "7"]);
        p.clock_advance(173);
    }
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let at = (T0_MS + 60_000).to_string();
    p.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    r.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    for key in ["a", "b"] {
        let on_primary = p.cmd(&["RL.INSPECT", key]);
        assert!(matches!(on_primary, Reply::Array(_)), "{on_primary:?}");
        assert_eq!(r.cmd(&["RL.INSPECT", key]), on_primary);
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            p.cmd(&["DEBUG", "DIGEST-VALUE", key])
        );
        assert_eq!(r.cmd(&["PEXPIRETIME", key]), p.cmd(&["PEXPIRETIME", key]));
    }
}

#[test]
fn aof_replay_dump_restore_and_reload_keep_the_state() {
    let mut server = Server::with(common::with_aof(Config::default(), "no"));
    let mut c = server.client();
    c.clock_set(T0_MS);
    // Hour-long periods, so that the key's real TTL outlasts the restarts. From cold, 7 units
    // take the trapezoid (1 h) and 2 more at 6 min: 72 min; then a write under a new factor.
    assert_eq!(
        c.cmd(&["RL.WARMUP", "k", "10", "1h", "1h", "COST", "7"])
            .ints()[4],
        72 * 60_000 + 7 * 360_000
    );
    c.clock_advance(73 * 60_000);
    assert_eq!(
        c.cmd(&["RL.WARMUP", "k", "10", "1h", "1h", "COLDFACTOR", "5"])
            .ints()[0],
        1
    );
    let at = (T0_MS + 74 * 60_000).to_string();
    c.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    let before = c.cmd(&["RL.INSPECT", "k"]);
    let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", "k"]);
    // DUMP / RESTORE.
    let payload = match c.cmd(&["DUMP", "k"]) {
        Reply::Bulk(b) => b,
        other => panic!("DUMP gave {other:?}"),
    };
    // With the TTL, as MIGRATE sends it (the digest counts whether a key expires).
    let ttl = c.pttl("k").to_string();
    assert_eq!(
        c.cmd_bytes(&[b"RESTORE", b"restored", ttl.as_bytes(), &payload]),
        ok()
    );
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "restored"]), digest);
    assert_eq!(c.cmd(&["RL.INSPECT", "restored"]), before);
    assert_eq!(c.cmd(&["COPY", "k", "copy"]), Reply::Int(1));
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "copy"]), digest);
    assert_eq!(c.cmd(&["RL.INSPECT", "copy"]), before);
    assert!(c.cmd(&["MEMORY", "USAGE", "k"]).int() > 0);
    // RDB round trip.
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), before);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "k"]), digest);
    // The AOF replays the writes with the primary's clock readings.
    server.kill();
    server.start_again();
    let mut c = server.client();
    c.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), before);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "k"]), digest);
}

/// RL.REFUND moves the schedule back one stable interval (100 ms) per unit, not before now,
/// and gives back at most what is owed, rounded up to whole intervals; ATMOST grants any
/// amount while nothing is owed (as any COST is admitted then) and nothing while something is.
#[test]
fn refunds_and_partial_grants() {
    let (_server, mut c) = started_at(T0_MS);
    // From cold, the first request owes 298 ms.
    assert_eq!(classic(&mut c, "w", &[]).ints(), [1, 1, 0, 0, 398]);
    assert_eq!(c.cmd(&["RL.REFUND", "w", "1"]), Reply::Int(1));
    assert_eq!(
        classic(&mut c, "w", &["DRYRUN"]).ints(),
        [0, 1, 0, 198, 298]
    );
    // 198 ms owed: two intervals at most, and the schedule stops at now.
    assert_eq!(c.cmd(&["RL.REFUND", "w", "5"]), Reply::Int(2));
    // Seven at once, paid from the stored permits 92 to 99: 7 × (268 + 296) / 2 = 1974 ms.
    assert_eq!(
        classic(&mut c, "w", &["ATMOST", "7"]).ints(),
        [1, 1, 0, 0, 2774, 7]
    );
    assert_eq!(
        classic(&mut c, "w", &["ATMOST", "7"]).ints(),
        [0, 1, 0, 1974, 2774, 0]
    );
    assert_eq!(c.cmd(&["RL.REFUND", "w", "1", "DRYRUN"]), Reply::Int(1));
    assert_eq!(
        classic(&mut c, "w", &["DRYRUN"]).ints(),
        [0, 1, 0, 1974, 2774]
    );
    // In a policy, the warm-up rule grants anything; the GCRA burst of 5 limits the grant.
    let set = [
        "RL.POLICY.SET",
        "p",
        "WARMUP",
        "10",
        "1s",
        "10s",
        "GCRA",
        "5",
        "5",
        "1s",
    ];
    assert_eq!(c.cmd(&set), ok());
    assert_eq!(
        c.cmd(&["RL.LIMIT", "lk", "p", "ATMOST", "9"]).ints(),
        [1, 1, 0, 0, 1950, 0, 5]
    );
    // 5 × (280 + 300) / 2 = 1450 ms owed to the warm-up rule.
    assert_eq!(
        c.cmd(&["RL.LIMIT", "lk", "p", "ATMOST", "9"]).ints(),
        [0, 1, 0, 1450, 1950, 0, 0]
    );
    assert_eq!(c.cmd(&["RL.REFUND", "lk", "3"]), Reply::Int(3));
}
