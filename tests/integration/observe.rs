//! Seeing what the limiter does: SHADOW on the admission commands and on a policy's rules,
//! the per-policy and per-rule counters of INFO ratelimit, CONFIG RESETSTAT, and RL.TOP.

use crate::common::{replicated, Client, Config, Reply, Server, T0_MS};

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

fn with(call: &[&str], extra: &[&str]) -> Vec<String> {
    call.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn cmd(c: &mut Client, args: &[String]) -> Reply {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    c.cmd(&refs)
}

fn dump(c: &mut Client, key: &str) -> Reply {
    c.cmd(&["DUMP", key])
}

/// The line of `name` in the INFO section `ratelimit_<section>`, after `ratelimit_<name>:`.
fn info_line(c: &mut Client, section: &str, name: &str) -> Option<String> {
    let text = c.cmd(&["INFO", &format!("ratelimit_{section}")]).text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("ratelimit_{name}:")))
        .map(str::to_string)
}

fn words(r: &Reply) -> Vec<String> {
    match r {
        Reply::Array(items) => items.iter().map(Reply::text).collect(),
        other => panic!("expected an array of strings, got {other:?}"),
    }
}

fn split(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// Every admission command: a would-be denial with SHADOW is the denial's reply with
/// `allowed` 1 and `shadow_denied` 1 appended; it writes nothing; an admission with SHADOW
/// has `shadow_denied` 0.
#[test]
fn shadow_answers_a_denial_as_admitted_and_writes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    for call in [
        &["RL.GCRA", "g", "1", "1", "1m"][..],
        &["RL.TOKENBUCKET", "tb", "1", "1", "1m"],
        &["RL.TOKENBUCKET", "ti", "1", "1", "1m", "INTERVAL"],
        &["RL.LEAKYBUCKET", "lb", "1", "1", "1m"],
        &["RL.FIXEDWINDOW", "fw", "1", "1m"],
        &["RL.SLIDINGWINDOW", "sw", "1", "1m"],
        &["RL.SLIDINGLOG", "sl", "1", "1m"],
        &["RL.WARMUP", "wu", "1", "1m", "10m"],
    ] {
        let first = c.cmd(
            &with(call, &["SHADOW"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let mut ints = first.ints();
        assert_eq!((ints[0], ints.pop()), (1, Some(0)), "{call:?}: {first:?}");
        let before = dump(&mut c, call[1]);
        let shadowed = cmd(&mut c, &with(call, &["SHADOW"])).ints();
        assert_eq!(dump(&mut c, call[1]), before, "{call:?} wrote");
        let denied = c.cmd(call).ints();
        assert_eq!(denied[0], 0, "{call:?}");
        let mut expected = denied.clone();
        expected[0] = 1;
        expected.push(1);
        assert_eq!(shadowed, expected, "{call:?}");
    }
    // The exact replies, for one: the denial's retry_after_ms stays.
    assert_eq!(
        c.cmd(&["RL.GCRA", "g", "1", "1", "1m", "SHADOW"]).ints(),
        [1, 1, 0, 60000, 60000, 1]
    );
    // The options in any order and case; twice is an error.
    assert_eq!(
        c.cmd(&["RL.GCRA", "g", "1", "1", "1m", "shadow", "COST", "1"])
            .ints(),
        [1, 1, 0, 60000, 60000, 1]
    );
    assert_eq!(
        c.cmd(&["RL.GCRA", "g", "1", "1", "1m", "SHADOW", "SHADOW"])
            .error(),
        "ERR SHADOW given more than once"
    );
    // RESP3: a map entry after the command's own fields.
    c.cmd(&["HELLO", "3"]);
    assert_eq!(
        c.cmd(&["RL.LEAKYBUCKET", "lb", "1", "1", "1m", "SHADOW"])
            .render(),
        "{allowed: true, limit: 1, remaining: 0, retry_after_ms: 60000, reset_after_ms: 60000, \
         delay_ms: -1, shadow_denied: 1}"
    );
    assert_eq!(
        c.cmd(&["RL.GCRA", "fresh", "1", "1", "1m", "SHADOW"])
            .render(),
        "{allowed: true, limit: 1, remaining: 0, retry_after_ms: 0, reset_after_ms: 60000, \
         shadow_denied: 0}"
    );
}

#[test]
fn shadow_starts_no_block_a_block_in_force_still_answers_and_dryrun_previews() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let call = ["RL.GCRA", "b", "1", "1", "1m", "BLOCK", "1h", "SHADOW"];
    assert_eq!(c.cmd(&call).ints(), [1, 1, 0, 0, 60000, 0]);
    assert_eq!(c.cmd(&call).ints(), [1, 1, 0, 60000, 60000, 1]);
    // No penalty started: the plain request waits the algorithm's minute, not an hour.
    assert_eq!(c.cmd(&call[..5]).ints(), [0, 1, 0, 60000, 60000]);
    // A real denial with BLOCK starts one; SHADOW then reports it.
    assert_eq!(c.cmd(&call[..7]).ints(), [0, 1, 0, 3600000, 3600000]);
    assert_eq!(c.cmd(&call).ints(), [1, 1, 0, 3600000, 3600000, 1]);
    // DRYRUN with SHADOW: a preview, writing nothing.
    let preview = ["RL.GCRA", "d", "1", "1", "1m", "DRYRUN", "SHADOW"];
    assert_eq!(c.cmd(&preview).ints(), [1, 1, 0, 0, 60000, 0]);
    assert_eq!(c.cmd(&["EXISTS", "d"]), Reply::Int(0));
    // CL.THROTTLE's reply has no room for the field: refused by name.
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "t", "1", "1", "60", "SHADOW"])
            .error(),
        "ERR CL.THROTTLE does not take SHADOW: its reply is redis-cell's, with no field for it; \
         use RL.GCRA with SHADOW"
    );
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "t", "1", "1", "60", "1", "shadow"])
            .error(),
        "ERR CL.THROTTLE does not take SHADOW: its reply is redis-cell's, with no field for it; \
         use RL.GCRA with SHADOW"
    );
    assert_eq!(c.cmd(&["EXISTS", "t"]), Reply::Int(0));
}

#[test]
fn a_shadow_acquire_that_would_be_denied_takes_no_lease() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let acquire = |id: &str| -> Vec<String> {
        with(
            &["RL.CONCURRENCY.ACQUIRE", "c", "1", "1m", "ID", id],
            &["SHADOW"],
        )
    };
    assert_eq!(cmd(&mut c, &acquire("a")).render(), "[1 1 0 0 60000 a 0]");
    assert_eq!(
        cmd(&mut c, &acquire("b")).render(),
        "[1 1 0 60000 60000 (nil) 1]"
    );
    assert_eq!(c.cmd(&["RL.CONCURRENCY.RELEASE", "c", "b"]), Reply::Int(0));
    assert_eq!(c.cmd(&["RL.CONCURRENCY.RELEASE", "c", "a"]), Reply::Int(1));
}

/// What a subscriber of every keyspace event of db 0 received, up to a marker.
fn received(c: &mut Client, s: &mut Client) -> Vec<String> {
    c.cmd(&["PUBLISH", "__keyevent@0__:end", "x"]);
    let mut out = Vec::new();
    loop {
        let Reply::Array(m) = s.read() else {
            panic!("not a message");
        };
        let channel = m[2].text();
        if channel == "__keyevent@0__:end" {
            return out;
        }
        out.push(format!("{channel} {}", m[3].text()));
    }
}

#[test]
fn a_shadow_denial_is_published_and_counted_as_one() {
    let server = Server::with(Config::default().extra(&["--notify-keyspace-events", "KEd"]));
    let mut c = server.client();
    let mut s = server.client();
    s.cmd(&["PSUBSCRIBE", "__key*@0__:*"]);
    c.clock_set(T0_MS);
    let call = ["RL.FIXEDWINDOW", "k", "1", "1m", "SHADOW"];
    c.cmd(&call);
    c.cmd(&call);
    c.cmd(
        &with(&call, &["DRYRUN"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    c.cmd(&call[..4]);
    assert_eq!(
        received(&mut c, &mut s),
        [
            "__keyspace@0__:k ratelimit.shadow_denied",
            "__keyevent@0__:ratelimit.shadow_denied k",
            "__keyspace@0__:k ratelimit.denied",
            "__keyevent@0__:ratelimit.denied k",
        ]
    );
    assert_eq!(
        info_line(&mut c, "commandstats", "rl.fixedwindow").unwrap(),
        "calls=4,admitted=1,denied=1,shadow_denied=1,errors=0"
    );
}

/// A policy with a shadow tier: answered and written as without it, counted per rule.
#[test]
fn a_shadow_rule_never_denies_and_is_counted_per_rule() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let set = split("RL.POLICY.SET api GCRA 10 10 1s SHADOW GCRA 2 1 1s");
    assert_eq!(c.cmd(&set), ok());
    assert_eq!(
        words(&c.cmd(&["RL.POLICY.GET", "api"])),
        split("GCRA 10 10 1s SHADOW GCRA 2 1 1s")
    );
    // Five requests at once: the shadow burst of 2 would deny three; the reply is rule 0's,
    // six fields, as without the shadow rule.
    for n in 1..=5 {
        assert_eq!(
            c.cmd(&["RL.LIMIT", "user:1", "api"]).ints(),
            [1, 10, 10 - n, 0, n * 100, 0],
            "request {n}"
        );
    }
    // With SHADOW, the reply says a rule would have denied.
    assert_eq!(
        c.cmd(&["RL.LIMIT", "user:1", "api", "SHADOW"]).ints(),
        [1, 10, 4, 0, 600, 0, 1]
    );
    assert_eq!(
        info_line(&mut c, "policystats", "api").unwrap(),
        "calls=6,admitted=2,denied=0,shadow_denied=4"
    );
    assert_eq!(
        info_line(&mut c, "rulestats", "api.0").unwrap(),
        "shadow=0,denied=0"
    );
    assert_eq!(
        info_line(&mut c, "rulestats", "api.1").unwrap(),
        "shadow=1,denied=4"
    );
    assert_eq!(
        info_line(&mut c, "commandstats", "rl.limit").unwrap(),
        "calls=6,admitted=2,denied=0,shadow_denied=4,errors=0"
    );
    // The shadow rule counted only the two it admitted: enforced now, it admits again
    // after one interval (no debt of the three it would have denied).
    assert_eq!(
        c.cmd(&split("RL.POLICY.SET api GCRA 10 10 1s GCRA 2 1 1s")),
        ok()
    );
    assert_eq!(
        c.cmd(&["RL.LIMIT", "user:1", "api"]).ints(),
        [0, 2, 0, 1000, 2000, 1]
    );
    c.clock_advance(1000);
    assert_eq!(
        c.cmd(&["RL.LIMIT", "user:1", "api"]).ints(),
        [1, 2, 0, 0, 2000, 1]
    );
    // Replaced: the policy's counters carry over, its rules' start again; denied by rule 1.
    assert_eq!(
        info_line(&mut c, "policystats", "api").unwrap(),
        "calls=8,admitted=3,denied=1,shadow_denied=4"
    );
    assert_eq!(
        info_line(&mut c, "rulestats", "api.1").unwrap(),
        "shadow=0,denied=1"
    );
    // Deleted: its lines go.
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "api"]), Reply::Int(1));
    assert_eq!(info_line(&mut c, "policystats", "api"), None);
    assert_eq!(info_line(&mut c, "rulestats", "api.0"), None);
}

/// ATMOST on a policy grants what the enforced rules admit: a shadow rule that would admit
/// fewer units never shrinks the grant; with SHADOW, the reply says it would have denied.
#[test]
fn a_shadow_rule_never_limits_an_atmost_grant() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let set = split("RL.POLICY.SET api GCRA 10 10 1s SHADOW FIXEDWINDOW 3 1m");
    assert_eq!(c.cmd(&set), ok());
    // [allowed, limit, remaining, retry_after_ms, reset_after_ms, rule, granted, shadow_denied]
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "api", "ATMOST", "8", "SHADOW"])
            .ints(),
        [1, 10, 2, 0, 800, 0, 8, 1]
    );
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "api", "ATMOST", "8"]).ints(),
        [1, 10, 0, 0, 1000, 0, 2]
    );
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "api", "ATMOST", "8"]).ints(),
        [0, 10, 0, 100, 1000, 0, 0]
    );
    // With SHADOW, a grant of nothing is answered as admitted, granting nothing.
    assert_eq!(
        c.cmd(&["RL.LIMIT", "k", "api", "ATMOST", "8", "SHADOW"])
            .ints(),
        [1, 10, 0, 100, 1000, 0, 0, 1]
    );
}

#[test]
fn shadow_in_a_policy_is_checked() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        c.cmd(&split("RL.POLICY.SET p SHADOW GCRA 1 1 1s")).error(),
        "ERR a policy needs at least one rule without SHADOW (to try a whole policy, call \
         RL.LIMIT with SHADOW)"
    );
    assert_eq!(
        c.cmd(&split("RL.POLICY.SET p GCRA 1 1 1s SHADOW")).error(),
        "ERR SHADOW at argument 6 must be followed by a rule, as in SHADOW GCRA 5 5 1s"
    );
    assert!(c
        .cmd(&split(
            "RL.POLICY.SET p GCRA 1 1 1s SHADOW SHADOW GCRA 1 1 1s"
        ))
        .error()
        .starts_with("ERR unknown algorithm 'SHADOW' at argument 7"));
    assert_eq!(c.cmd(&["RL.POLICY.GET", "p"]), Reply::Nil);
    // A name INFO would misread is escaped there.
    assert_eq!(
        c.cmd(&split(
            "RL.POLICY.SET a:b,c GCRA 1 1 1s shadow fixedwindow 1 1m"
        )),
        ok()
    );
    assert_eq!(
        words(&c.cmd(&["RL.POLICY.GET", "a:b,c"])),
        split("GCRA 1 1 1s SHADOW FIXEDWINDOW 1 1m")
    );
    assert_eq!(
        info_line(&mut c, "policystats", "a%3Ab%2Cc").unwrap(),
        "calls=0,admitted=0,denied=0,shadow_denied=0"
    );
    assert_eq!(
        info_line(&mut c, "rulestats", "a%3Ab%2Cc.1").unwrap(),
        "shadow=1,denied=0"
    );
}

const SHADOWED: &str = "RL.POLICY.SET api GCRA 10 10 1s SHADOW FIXEDWINDOW 3 1m";

fn marked(c: &mut Client) {
    assert_eq!(
        words(&c.cmd(&["RL.POLICY.GET", "api"])),
        split("GCRA 10 10 1s SHADOW FIXEDWINDOW 3 1m")
    );
    c.clock_set(T0_MS);
    for _ in 0..4 {
        assert_eq!(c.cmd(&["RL.LIMIT", "fresh", "api"]).ints()[0], 1);
    }
    assert_eq!(
        info_line(c, "rulestats", "api.1").unwrap(),
        "shadow=1,denied=1"
    );
}

#[test]
fn the_shadow_mark_survives_rdb_aof_rewrite_and_replication() {
    // RDB.
    let mut server = Server::start();
    let mut c = server.client();
    assert_eq!(c.cmd(&split(SHADOWED)), ok());
    assert_eq!(c.cmd(&["SAVE"]), ok());
    server.restart();
    marked(&mut server.client());
    // An AOF rewrite without the RDB preamble (policies propagated again as commands).
    let mut server = Server::with(Config::default().extra(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
    ]));
    let mut c = server.client();
    assert_eq!(c.cmd(&split(SHADOWED)), ok());
    c.cmd(&["BGREWRITEAOF"]);
    c.wait_for_aof_rewrite();
    server.restart();
    marked(&mut server.client());
    // A replica, by full sync and by the stream.
    let (primary, replica) = replicated(Config::default());
    let mut p = primary.client();
    assert_eq!(p.cmd(&split(SHADOWED)), ok());
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let mut r = replica.client();
    assert_eq!(
        words(&r.cmd(&["RL.POLICY.GET", "api"])),
        split("GCRA 10 10 1s SHADOW FIXEDWINDOW 3 1m")
    );
}

#[test]
fn config_resetstat_resets_the_modules_counters_when_the_server_runs_it() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(c.cmd(&split("RL.POLICY.SET p FIXEDWINDOW 1 1m")), ok());
    for _ in 0..2 {
        c.cmd(&["RL.LIMIT", "k", "p"]);
        c.cmd(&["RL.GCRA", "g", "1", "1", "1m"]);
    }
    let counted = "calls=2,admitted=1,denied=1,shadow_denied=0,errors=0";
    assert_eq!(
        info_line(&mut c, "commandstats", "rl.gcra").unwrap(),
        counted
    );
    // A user the server refuses CONFIG to: nothing is reset.
    assert_eq!(
        c.cmd(&["ACL", "SETUSER", "app", "on", "nopass", "~*", "+@all", "-config"]),
        ok()
    );
    let mut app = server.client();
    assert_eq!(app.cmd(&["AUTH", "app", "x"]), ok());
    assert!(app
        .cmd(&["CONFIG", "RESETSTAT"])
        .error()
        .starts_with("NOPERM"));
    app.cmd(&["PING"]);
    assert_eq!(
        info_line(&mut c, "commandstats", "rl.gcra").unwrap(),
        counted
    );
    assert_eq!(
        info_line(&mut c, "policystats", "p").unwrap(),
        "calls=2,admitted=1,denied=1,shadow_denied=0"
    );
    // Run: every command, policy and rule counter is zero; a call sent in the same batch,
    // after it, is counted.
    c.send(&[b"CONFIG", b"resetstat"]);
    c.send(&[b"RL.GCRA", b"g", b"1", b"1", b"1m"]);
    assert_eq!(c.read(), ok());
    assert_eq!(c.read().ints()[0], 0);
    assert_eq!(
        info_line(&mut c, "commandstats", "rl.gcra").unwrap(),
        "calls=1,admitted=0,denied=1,shadow_denied=0,errors=0"
    );
    assert_eq!(
        info_line(&mut c, "commandstats", "rl.limit").unwrap(),
        "calls=0,admitted=0,denied=0,shadow_denied=0,errors=0"
    );
    assert_eq!(
        info_line(&mut c, "policystats", "p").unwrap(),
        "calls=0,admitted=0,denied=0,shadow_denied=0"
    );
    assert_eq!(
        info_line(&mut c, "rulestats", "p.0").unwrap(),
        "shadow=0,denied=0"
    );
}

/// RL.TOP as `key count error` lines.
fn top(c: &mut Client, args: &[&str]) -> Vec<String> {
    let call: Vec<&str> = ["RL.TOP"].iter().chain(args).copied().collect();
    match c.cmd(&call) {
        Reply::Array(entries) => entries
            .iter()
            .map(|e| match e {
                Reply::Array(f) => format!("{} {} {}", f[0].text(), f[1].int(), f[2].int()),
                other => panic!("not an entry: {other:?}"),
            })
            .collect(),
        other => panic!("RL.TOP replied {other:?}"),
    }
}

fn deny(c: &mut Client, key: &str, times: usize) {
    for _ in 0..times {
        let r = c.cmd(&["RL.FIXEDWINDOW", key, "1", "1h"]).ints();
        if r[0] == 1 {
            assert_eq!(c.cmd(&["RL.FIXEDWINDOW", key, "1", "1h"]).ints()[0], 0);
        }
    }
}

#[test]
fn rl_top_lists_the_most_denied_keys_exactly_while_they_fit() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert!(top(&mut c, &[]).is_empty());
    deny(&mut c, "a", 3);
    deny(&mut c, "b", 1);
    deny(&mut c, "c", 2);
    // Previews, shadow denials and admissions are not denials.
    c.cmd(&["RL.FIXEDWINDOW", "b", "1", "1h", "DRYRUN"]);
    c.cmd(&["RL.FIXEDWINDOW", "b", "1", "1h", "SHADOW"]);
    assert_eq!(top(&mut c, &[]), ["a 3 0", "c 2 0", "b 1 0"]);
    assert_eq!(top(&mut c, &["COUNT", "2"]), ["a 3 0", "c 2 0"]);
    // The same shape for RESP3 clients.
    c.cmd(&["HELLO", "3"]);
    assert_eq!(top(&mut c, &["count", "1"]), ["a 3 0"]);
    c.cmd(&["HELLO", "2"]);
    // Errors.
    assert_eq!(
        c.cmd(&["RL.TOP", "COUNT", "0"]).error(),
        "ERR invalid COUNT: expected an integer from 1 to 100000"
    );
    assert_eq!(
        c.cmd(&["RL.TOP", "LIMIT", "2"]).error(),
        "ERR unknown option 'LIMIT' at argument 1: expected COUNT k"
    );
    assert_eq!(
        c.cmd(&["RL.TOP", "COUNT"]).error(),
        "ERR wrong number of arguments for 'RL.TOP': expected RL.TOP [COUNT k]"
    );
    // Two counters: c takes b's smallest one (1) and carries it as its error.
    assert_eq!(c.cmd(&["CONFIG", "SET", "ratelimit.top-size", "2"]), ok());
    assert!(top(&mut c, &[]).is_empty(), "a new size starts empty");
    deny(&mut c, "a", 3);
    deny(&mut c, "b", 1);
    deny(&mut c, "c", 2);
    assert_eq!(top(&mut c, &[]), ["a 3 0", "c 3 1"]);
    // Size 0 records nothing.
    assert_eq!(c.cmd(&["CONFIG", "SET", "ratelimit.top-size", "0"]), ok());
    deny(&mut c, "a", 1);
    assert!(top(&mut c, &[]).is_empty());
    assert!(c
        .cmd(&["CONFIG", "SET", "ratelimit.top-size", "100001"])
        .is_error());
}

#[test]
fn rl_top_counts_over_the_current_and_the_previous_period() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "ratelimit.top-period", "60"]),
        ok()
    );
    // T0 is 20 s into a minute.
    c.clock_set(T0_MS);
    deny(&mut c, "a", 2);
    c.clock_advance(40_000);
    deny(&mut c, "a", 1);
    deny(&mut c, "b", 1);
    assert_eq!(top(&mut c, &[]), ["a 3 0", "b 1 0"]);
    c.clock_advance(60_000);
    assert_eq!(top(&mut c, &[]), ["a 1 0", "b 1 0"]);
    c.clock_advance(60_000);
    assert!(top(&mut c, &[]).is_empty());
}

#[test]
fn rl_top_lists_only_the_keys_the_caller_may_read() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    deny(&mut c, "rl:t1:alice", 2);
    deny(&mut c, "rl:t2:bob", 3);
    deny(&mut c, "rl:t1:carol", 1);
    assert_eq!(
        top(&mut c, &[]),
        ["rl:t2:bob 3 0", "rl:t1:alice 2 0", "rl:t1:carol 1 0"]
    );
    for (user, keys) in [("t1", "~rl:t1:*"), ("w1", "%W~rl:*"), ("r1", "%R~rl:t2:*")] {
        assert_eq!(
            c.cmd(&["ACL", "SETUSER", user, "on", ">pw", keys, "+@all"]),
            ok()
        );
    }
    let mut t1 = server.client();
    assert_eq!(t1.cmd(&["AUTH", "t1", "pw"]), ok());
    assert_eq!(top(&mut t1, &[]), ["rl:t1:alice 2 0", "rl:t1:carol 1 0"]);
    assert_eq!(top(&mut t1, &["COUNT", "1"]), ["rl:t1:alice 2 0"]);
    let mut w1 = server.client();
    assert_eq!(w1.cmd(&["AUTH", "w1", "pw"]), ok());
    assert!(
        top(&mut w1, &[]).is_empty(),
        "write access is not read access"
    );
    let mut r1 = server.client();
    assert_eq!(r1.cmd(&["AUTH", "r1", "pw"]), ok());
    assert_eq!(top(&mut r1, &[]), ["rl:t2:bob 3 0"]);
}

/// A rule is counted as the one that denied only when its own decision stood: a refusal that
/// a BLOCK answered (one this request started, or one in force) is the block's, whatever the
/// block's length. Before RL.LIMIT carried the block it applied, it guessed it by comparing
/// the key's reply with the rule's, and counted the rule when they happened to agree (a
/// block ending when the rule's window does).
#[test]
fn a_refusal_a_block_answered_is_not_the_rules() {
    let server = Server::start();
    let mut c = server.client();
    // A whole minute: the window starts now.
    c.clock_set(1_800_000_000_000);
    assert_eq!(c.cmd(&split("RL.POLICY.SET wall FIXEDWINDOW 1 1m")), ok());
    let limit = ["RL.LIMIT", "door", "wall"];
    let blocked = ["RL.LIMIT", "door", "wall", "BLOCK", "1m"];
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 60_000, 0]);
    // The block ends when the window does: the reply is the rule's as well as the block's.
    assert_eq!(c.cmd(&blocked).ints(), [0, 1, 0, 60_000, 60_000, 0]);
    c.clock_advance(1_000);
    assert_eq!(c.cmd(&limit).ints(), [0, 1, 0, 59_000, 59_000, 0]);
    assert_eq!(
        info_line(&mut c, "rulestats", "wall.0").unwrap(),
        "shadow=0,denied=0"
    );
    // Over, both: the rule's own refusal counts.
    c.clock_advance(59_000);
    assert_eq!(c.cmd(&limit).ints(), [1, 1, 0, 0, 60_000, 0]);
    assert_eq!(c.cmd(&limit).ints(), [0, 1, 0, 60_000, 60_000, 0]);
    assert_eq!(
        info_line(&mut c, "rulestats", "wall.0").unwrap(),
        "shadow=0,denied=1"
    );
    assert_eq!(
        info_line(&mut c, "policystats", "wall").unwrap(),
        "calls=5,admitted=2,denied=3,shadow_denied=0"
    );
}
