//! Policies and RL.LIMIT: several rules checked at once against one key, all or nothing;
//! policies that change under traffic, survive restarts and reach replicas.

use crate::common;

use crate::common::{Client, Config, Reply, Server};

/// 2023-11-14T00:00:00Z: the start of a day (and of a minute), for the aligned windows.
const DAY: u64 = 1_699_920_000_000;

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// A command's words, written as one line.
fn split(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

fn words(reply: &Reply) -> Vec<String> {
    match reply {
        Reply::Array(items) => items.iter().map(Reply::text).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// A server with the debug clock at [`DAY`], and a client of it.
fn at_midnight() -> (Server, Client) {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(DAY);
    (server, c)
}

/// An API's tiers: 5 a second (bursts of 5), 20 a minute, 30 a day.
fn api_policy(c: &mut Client) {
    let set = split("RL.POLICY.SET api GCRA 5 5 1s FIXEDWINDOW 20 1m FIXEDWINDOW 30 1d");
    assert_eq!(c.cmd(&set), ok());
}

#[test]
fn three_tiers_where_the_minute_then_the_day_binds() {
    let server = Server::start();
    let mut c = server.client();
    api_policy(&mut c);
    c.clock_set(DAY);
    let limit = ["RL.LIMIT", "user:42", "api"];
    // Four requests a second: the per-second rule always has 4 left after each; it binds
    // until the minute has fewer (a tie goes to the earlier rule).
    for i in 0..20u64 {
        let reply = c.cmd(&limit).ints();
        let minute_left = 19 - i as i64;
        if minute_left >= 4 {
            assert_eq!(reply, [1, 5, 4, 0, 200, 0], "request {i}");
        } else {
            let reset = 60_000 - 250 * i as i64;
            assert_eq!(reply, [1, 20, minute_left, 0, reset, 1], "request {i}");
        }
        c.clock_advance(250);
    }
    // The 21st in the minute: refused by the minute rule, until the minute ends.
    assert_eq!(c.cmd(&limit).ints(), [0, 20, 0, 55_000, 55_000, 1]);
    // The next minute: the day has 10 left, then fewer than the per-second rule.
    c.clock_set(DAY + 60_000);
    for j in 0..10u64 {
        let reply = c.cmd(&limit).ints();
        let day_left = 9 - j as i64;
        if day_left >= 4 {
            assert_eq!(reply, [1, 5, 4, 0, 200, 0], "request {j}");
        } else {
            let reset = 86_400_000 - 60_000 - 250 * j as i64;
            assert_eq!(reply, [1, 30, day_left, 0, reset, 2], "request {j}");
        }
        c.clock_advance(250);
    }
    // The per-day rule binds: refused until midnight, whatever the other rules allow.
    let to_midnight = 86_400_000 - 62_500;
    assert_eq!(
        c.cmd(&limit).ints(),
        [0, 30, 0, to_midnight, to_midnight, 2]
    );
    // The key lives until its longest rule is fresh again: midnight, as of the last write
    // (250 ms before the refusal, which wrote nothing).
    let pttl = c.pttl("user:42");
    let ttl = to_midnight + 250;
    assert!(pttl > ttl - 5_000 && pttl <= ttl, "pttl {pttl}");
    // RESP3 clients get a map with the rule's index named.
    c.cmd(&["HELLO", "3"]);
    match c.cmd(&limit) {
        Reply::Map(pairs) => {
            assert_eq!(
                pairs[0],
                (Reply::Bulk(b"allowed".to_vec()), Reply::Bool(false))
            );
            assert_eq!(pairs[5], (Reply::Bulk(b"rule".to_vec()), Reply::Int(2)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refusal_by_the_last_rule_leaves_every_rule_untouched() {
    let (_server, mut c) = at_midnight();
    let set = split("RL.POLICY.SET p GCRA 10 10 1m SLIDINGWINDOW 8 1h FIXEDWINDOW 2 1h");
    assert_eq!(c.cmd(&set), ok());
    let limit = ["RL.LIMIT", "k", "p"];
    assert_eq!(c.cmd(&limit).ints(), [1, 2, 1, 0, 3_600_000, 2]);
    assert_eq!(c.cmd(&limit).ints(), [1, 2, 0, 0, 3_600_000, 2]);
    let before = c.cmd(&["RL.INSPECT", "k"]);
    let pttl = c.pttl("k");
    // Refused by the third rule: the first two admitted it, and count nothing.
    assert_eq!(c.cmd(&limit).ints(), [0, 2, 0, 3_600_000, 3_600_000, 2]);
    for extra in [
        &["DRYRUN"][..],
        &["COST", "0"],
        &["COST", "3"],
        &["BLOCK", "1h", "DRYRUN"],
    ] {
        let mut call = limit.to_vec();
        call.extend_from_slice(extra);
        assert!(matches!(c.cmd(&call), Reply::Array(_)), "{extra:?}");
    }
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), before);
    assert!(c.pttl("k") <= pttl);
    // What RL.INSPECT shows: each rule's own state.
    let rules = match before.field("rules") {
        Reply::Array(rules) => rules,
        other => panic!("{other:?}"),
    };
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].field("algorithm"), Reply::Bulk(b"gcra".to_vec()));
    assert_eq!(rules[0].field("remaining"), Reply::Int(8));
    assert_eq!(rules[1].field("current"), Reply::Int(2));
    assert_eq!(rules[2].field("count"), Reply::Int(2));
    assert_eq!(before.field("algorithm"), Reply::Bulk(b"limit".to_vec()));
    assert_eq!(before.field("binding_rule"), Reply::Int(2));
}

#[test]
fn a_policy_changed_mid_stream_keeps_the_rules_that_stayed() {
    let (_server, mut c) = at_midnight();
    let v1 = split("RL.POLICY.SET p FIXEDWINDOW 10 1h GCRA 100 100 1h");
    assert_eq!(c.cmd(&v1), ok());
    for _ in 0..3 {
        c.cmd(&["RL.LIMIT", "k", "p"]);
    }
    // The hour rule stays; the GCRA rule goes; a minute rule comes.
    let v2 = split("RL.POLICY.SET p fixedwindow 5 1m RL.FixedWindow 10 1h");
    assert_eq!(c.cmd(&v2), ok());
    assert_eq!(
        words(&c.cmd(&["RL.POLICY.GET", "p"])),
        ["FIXEDWINDOW", "5", "1m", "FIXEDWINDOW", "10", "1h"]
    );
    // The new minute rule starts fresh (5 - 1 left), the hour rule goes on (10 - 4 left).
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "p"]).ints(),
        [1, 5, 4, 0, 60_000, 0]
    );
    let state = c.cmd(&["RL.INSPECT", "k"]);
    let Reply::Array(rules) = state.field("rules") else {
        panic!("{state:?}")
    };
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].field("count"), Reply::Int(1));
    assert_eq!(rules[1].field("count"), Reply::Int(4));
    assert_eq!(rules[1].field("window_ms"), Reply::Int(3_600_000));
    // Back to the first policy: its hour rule is still the same rule; GCRA starts again.
    assert_eq!(c.cmd(&v1), ok());
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "p"]).ints(),
        [1, 10, 5, 0, 3_600_000, 0]
    );
}

#[test]
fn policies_are_listed_read_and_deleted() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(c.cmd(&["RL.POLICY.LIST"]), Reply::Array(vec![]));
    assert_eq!(c.cmd(&["RL.POLICY.GET", "none"]), Reply::Nil);
    for name in ["b", "a", "c"] {
        let set = [
            "RL.POLICY.SET",
            name,
            "TOKENBUCKET",
            "10",
            "1",
            "1s",
            "INTERVAL",
        ];
        assert_eq!(c.cmd(&set), ok());
    }
    assert_eq!(words(&c.cmd(&["RL.POLICY.LIST"])), ["a", "b", "c"]);
    assert_eq!(
        words(&c.cmd(&["RL.POLICY.GET", "a"])),
        ["TOKENBUCKET", "10", "1", "1s", "INTERVAL"]
    );
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "b"]), Reply::Int(1));
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "b"]), Reply::Int(0));
    assert_eq!(words(&c.cmd(&["RL.POLICY.LIST"])), ["a", "c"]);
    // A key written under a deleted policy keeps its state; RL.LIMIT with it is an error.
    c.clock_set(DAY);
    c.cmd(&["RL.LIMIT", "k", "a"]);
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "a"]), Reply::Int(1));
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "a"]).error(),
        "ERR no policy named 'a': create it with RL.POLICY.SET a rule [rule ...]"
    );
    assert_eq!(
        c.cmd(&["RL.INSPECT", "k"]).field("remaining"),
        Reply::Int(9)
    );
}

#[test]
fn bad_policies_are_refused_and_change_nothing() {
    let server = Server::start_in(
        Config::default().module_args(&["debug-clock", "yes", "sliding-log-max-limit", "100"]),
        common::fresh_dir("policies"),
    );
    let mut c = server.client();
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "p", "FIXEDWINDOW", "5", "1m"]),
        ok()
    );
    let long = "x".repeat(257);
    let cases: Vec<(Vec<&str>, String)> =
        vec![
        (
            vec!["RL.POLICY.SET", "p"],
            "ERR wrong number of arguments for 'RL.POLICY.SET': expected RL.POLICY.SET name \
             [SHADOW] algorithm argument [argument ...] [[SHADOW] algorithm argument [argument ...] ...], \
             each rule an algorithm and its arguments, as in GCRA 10 10 1s FIXEDWINDOW 5000 1d \
             (SHADOW before a rule: checked and counted, never denying)"
                .into(),
        ),
        (
            vec!["RL.POLICY.SET", "p", "GCRA", "1", "2"],
            "ERR the GCRA rule at argument 2 needs its arguments: GCRA burst rate period".into(),
        ),
        (
            vec!["RL.POLICY.SET", "p", "FIXEDWINDOW", "5", "1m", "GCRA", "1", "0", "1s"],
            "ERR the GCRA rule at argument 5: invalid rate: expected an integer from 1 to \
             1000000000000"
                .into(),
        ),
        (
            vec!["RL.POLICY.SET", "p", "FIXEDWINDOW", "5", "1m", "COST", "3"],
            "ERR unknown algorithm 'COST' at argument 5: expected a rule, one of GCRA, \
             TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or WARMUP with \
             its arguments"
                .into(),
        ),
        (
            vec!["RL.POLICY.SET", "p", "SLIDINGLOG", "101", "1m"],
            "ERR the SLIDINGLOG rule at argument 2: invalid limit: expected an integer from 1 \
             to 100 (the module setting ratelimit.sliding-log-max-limit bounds it)"
                .into(),
        ),
        (
            vec!["RL.POLICY.SET", "p", "CONCURRENCY", "5", "1m"],
            "ERR unknown algorithm 'CONCURRENCY' at argument 2: expected a rule, one of GCRA, \
             TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or WARMUP with \
             its arguments"
                .into(),
        ),
        (
            vec!["RL.POLICY.SET", &long, "FIXEDWINDOW", "5", "1m"],
            "ERR invalid policy name: expected 1 to 256 bytes".into(),
        ),
        (
            vec!["RL.POLICY.SET", "", "FIXEDWINDOW", "5", "1m"],
            "ERR invalid policy name: expected 1 to 256 bytes".into(),
        ),
        (
            vec!["RL.POLICY.GET"],
            "ERR wrong number of arguments for 'RL.POLICY.GET': expected RL.POLICY.GET name"
                .into(),
        ),
        (
            vec!["RL.LIMIT", "k"],
            "ERR wrong number of arguments for 'RL.LIMIT': expected RL.LIMIT key policy \
             [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"
                .into(),
        ),
        (
            vec!["RL.LIMIT", "k", "p", "COST", "x"],
            "ERR invalid COST: expected an integer from 0 to 1000000000000".into(),
        ),
        (
            vec!["RL.LIMIT", "k", "p", "FAST"],
            "ERR unknown option 'FAST' at argument 3: expected COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW"
                .into(),
        ),
    ];
    for (call, error) in cases {
        assert_eq!(c.cmd(&call).error(), error, "{call:?}");
    }
    let mut seventeen = vec!["RL.POLICY.SET", "p"];
    for _ in 0..17 {
        seventeen.extend(["FIXEDWINDOW", "5", "1m"]);
    }
    assert_eq!(
        c.cmd(&seventeen).error(),
        "ERR a policy holds at most 16 rules"
    );
    // The policy is as it was, and no key was made.
    assert_eq!(
        words(&c.cmd(&["RL.POLICY.GET", "p"])),
        ["FIXEDWINDOW", "5", "1m"]
    );
    assert_eq!(c.cmd(&["DBSIZE"]), Reply::Int(0));
    // A key of another algorithm is named in the error.
    c.cmd(&["RL.GCRA", "g", "1", "1", "1m"]);
    assert_eq!(
        c.cmd(&["RL.LIMIT", "g", "p"]).error(),
        "ERR the key holds RL.GCRA state, not RL.LIMIT: use RL.GCRA on it, or another key"
    );
}

#[test]
fn block_locks_every_rule_of_the_key() {
    let (_server, mut c) = at_midnight();
    let set = split("RL.POLICY.SET login FIXEDWINDOW 5 1m FIXEDWINDOW 20 1d");
    assert_eq!(c.cmd(&set), ok());
    let attempt = ["RL.LIMIT", "login:bob", "login", "BLOCK", "15m"];
    for left in (0..5).rev() {
        assert_eq!(c.cmd(&attempt).ints(), [1, 5, left, 0, 60_000, 0]);
    }
    assert_eq!(c.cmd(&attempt).ints(), [0, 5, 0, 900_000, 900_000, 0]);
    c.clock_advance(899_999);
    assert_eq!(c.cmd(&attempt).ints(), [0, 5, 0, 1, 1, 0]);
    c.clock_advance(1);
    // Over: the minute rule is fresh again; the day counted only what was admitted.
    assert_eq!(c.cmd(&attempt).ints(), [1, 5, 4, 0, 60_000, 0]);
    let state = c.cmd(&["RL.INSPECT", "login:bob"]);
    let Reply::Array(rules) = state.field("rules") else {
        panic!("{state:?}")
    };
    assert_eq!(rules[1].field("count"), Reply::Int(6));
}

/// docs/policies.md, "Minimum spacing between requests": a GCRA rule with burst 1 denies a
/// request closer to the previous one than the spacing, and says when it may come.
#[test]
fn minimum_spacing_is_a_gcra_rule_with_burst_1() {
    let (_server, mut c) = at_midnight();
    c.clock_set(1_700_000_000_000);
    assert_eq!(c.cmd(&split("RL.POLICY.SET spaced GCRA 1 1 250ms")), ok());
    let limit = ["RL.LIMIT", "device:7", "spaced"];
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 250, 0]);
    c.clock_advance(100);
    assert_eq!(c.cmd(&limit).ints(), [0, 1, 0, 150, 150, 0]);
    c.clock_advance(149);
    assert_eq!(c.cmd(&limit).ints(), [0, 1, 0, 1, 1, 0]);
    c.clock_advance(1);
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 250, 0]);
    // A request of two units never fits a burst of 1.
    c.clock_advance(250);
    assert_eq!(
        c.cmd(&["RL.LIMIT", "device:7", "spaced", "COST", "2"])
            .ints(),
        [0, 1, 1, -1, 0, 0]
    );
}

/// docs/policies.md, "A warm-up rule": the WARMUP rule binds while it spaces.
#[test]
fn a_warmup_rule_next_to_a_window() {
    let (_server, mut c) = at_midnight();
    c.clock_set(1_700_000_000_000);
    let set = split("RL.POLICY.SET search WARMUP 10 1s 10s COLDFACTOR 3 FIXEDWINDOW 5000 1h");
    assert_eq!(c.cmd(&set), ok());
    let limit = ["RL.LIMIT", "user:9", "search"];
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 398, 0]);
    assert_eq!(c.cmd(&limit).ints(), [0, 1, 0, 298, 398, 0]);
    // The key lives until the hour's window is over: 46 min 40 s from 22:13:20.
    let pttl = c.pttl("user:9");
    assert!(pttl > 2_800_000 - 5_000 && pttl <= 2_800_000, "{pttl}");
}

/// Policies and RL.LIMIT state as a client sees them.
fn observed(c: &mut Client) -> (Vec<String>, Vec<Vec<String>>, Reply) {
    c.clock_set(DAY);
    let names = words(&c.cmd(&["RL.POLICY.LIST"]));
    let rules = names
        .iter()
        .map(|n| words(&c.cmd(&["RL.POLICY.GET", n])))
        .collect();
    (names, rules, c.cmd(&["RL.INSPECT", "user:1"]))
}

/// Sets policies, writes under them, persists the way `how` says, restarts, and checks that
/// the policies and the state came back and that RL.LIMIT goes on from there.
fn survives_restart(config: Config, persist: impl Fn(&mut Client)) {
    let mut server = Server::with(config);
    let mut c = server.client();
    c.clock_set(DAY);
    api_policy(&mut c);
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "gone", "FIXEDWINDOW", "1", "1m"]),
        ok()
    );
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "bin\r\nary", "SLIDINGLOG", "3", "1h"]),
        ok()
    );
    for _ in 0..3 {
        c.cmd(&["RL.LIMIT", "user:1", "api"]);
    }
    persist(&mut c);
    // Written after the snapshot or rewrite: only in the AOF's incremental part, if any.
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "gone"]), Reply::Int(1));
    c.cmd(&["RL.LIMIT", "user:1", "api"]);
    let before = observed(&mut c);
    assert_eq!(before.0, ["api", "bin\r\nary"]);
    if !c.info_field("persistence", "aof_enabled").starts_with('1') {
        c.cmd(&["SAVE"]);
    }
    server.restart();
    let mut c = server.client();
    assert_eq!(observed(&mut c), before);
    c.clock_set(DAY);
    assert_eq!(
        c.cmd(&["RL.LIMIT", "user:1", "api"]).ints(),
        [1, 5, 0, 0, 1000, 0]
    );
}

#[test]
fn policies_survive_an_rdb_restart() {
    survives_restart(Config::default(), |c| assert_eq!(c.cmd(&["SAVE"]), ok()));
}

fn aof(preamble: &str) -> Config {
    Config::default().extra(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble])
}

#[test]
fn policies_survive_an_aof_rewrite_with_the_rdb_preamble() {
    survives_restart(aof("yes"), |c| {
        c.cmd(&["BGREWRITEAOF"]);
        c.wait_for_aof_rewrite();
    });
}

#[test]
fn policies_survive_an_aof_rewrite_without_the_rdb_preamble() {
    survives_restart(aof("no"), |c| {
        c.cmd(&["BGREWRITEAOF"]);
        c.wait_for_aof_rewrite();
    });
}

#[test]
fn policies_survive_an_aof_without_a_rewrite() {
    survives_restart(aof("no"), |_| {});
}

#[test]
fn policies_reach_replicas_by_full_sync_and_by_the_stream() {
    let primary = Server::with(common::primary_config());
    let replica = Server::start();
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(DAY);
    api_policy(&mut p);
    p.cmd(&["RL.LIMIT", "user:1", "api"]);
    // A policy the replica had before it synced is gone after: it takes the primary's.
    assert_eq!(
        r.cmd(&["RL.POLICY.SET", "local", "FIXEDWINDOW", "1", "1m"]),
        ok()
    );
    r.replicate_from(&primary);
    assert_eq!(words(&r.cmd(&["RL.POLICY.LIST"])), ["api"]);
    // Then through the replication stream: a change, a new policy, a deletion, requests.
    let v2 = split("RL.POLICY.SET api GCRA 5 5 1s FIXEDWINDOW 10 1d");
    assert_eq!(p.cmd(&v2), ok());
    assert_eq!(
        p.cmd(&["RL.POLICY.SET", "other", "SLIDINGWINDOW", "3", "1h"]),
        ok()
    );
    for _ in 0..4 {
        p.cmd(&["RL.LIMIT", "user:1", "api"]);
        p.cmd(&["RL.LIMIT", "user:2", "other"]);
        p.clock_advance(100);
    }
    assert_eq!(p.cmd(&["RL.POLICY.DEL", "other"]), Reply::Int(1));
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    assert_eq!(words(&r.cmd(&["RL.POLICY.LIST"])), ["api"]);
    assert_eq!(
        words(&r.cmd(&["RL.POLICY.GET", "api"])),
        words(&p.cmd(&["RL.POLICY.GET", "api"]))
    );
    for key in ["user:1", "user:2"] {
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            p.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            "{key}"
        );
    }
    // A replica refuses policy writes from clients, like any write.
    assert!(r
        .cmd(&["RL.POLICY.SET", "x", "FIXEDWINDOW", "1", "1m"])
        .error()
        .starts_with("READONLY"));
}
