//! RL.REFUND (a key gives back units it has taken) and ATMOST (a partial grant), on every
//! algorithm, with the debug clock: worked examples, both protocols, errors, BLOCK, DRYRUN,
//! INFO, and replicas and the AOF holding the same bytes afterwards (docs/commands.md).

use crate::common;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// 2023-11-14T22:13:00Z: a whole minute, for the aligned windows.
const MINUTE: u64 = 1_699_999_980_000;

fn exists(c: &mut Client, key: &str) -> bool {
    c.cmd(&["EXISTS", key]) == Reply::Int(1)
}

/// A server whose debug clock reads `ms`, and a client of it.
fn started_at(ms: u64) -> (Server, Client) {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(ms);
    (server, c)
}

/// The integers `call` replies with `extra` arguments after its own.
fn ints(c: &mut Client, call: &[&str], extra: &[&str]) -> Vec<i64> {
    c.cmd(&[call, extra].concat()).ints()
}

/// The integers `call` replies with `ATMOST` and then `rest` after its own arguments.
fn atmost(c: &mut Client, call: &[&str], rest: &[&str]) -> Vec<i64> {
    c.cmd(&[call, &["ATMOST"], rest].concat()).ints()
}

/// A limiter's RESP3 map: `allowed`; limit, remaining, retry_after_ms and reset_after_ms;
/// then the `extra` fields, in that order.
fn resp3_map(allowed: bool, common: [i64; 4], extra: &[(&str, i64)]) -> Reply {
    let bulk = |t: &str| Reply::Bulk(t.as_bytes().to_vec());
    let names = ["limit", "remaining", "retry_after_ms", "reset_after_ms"];
    let mut fields = vec![(bulk("allowed"), Reply::Bool(allowed))];
    let ints = names.into_iter().zip(common).chain(extra.iter().copied());
    fields.extend(ints.map(|(name, n)| (bulk(name), Reply::Int(n))));
    Reply::Map(fields)
}

/// RL.REFUND with `args`: the units it gives back.
fn refund(c: &mut Client, args: &[&str]) -> i64 {
    c.cmd(&[&["RL.REFUND"][..], args].concat()).int()
}

/// RL.POLICY.SET with the arguments `words` spells, which must succeed.
fn set_policy(c: &mut Client, words: &str) {
    let args: Vec<&str> = words.split_whitespace().collect();
    let reply = c.cmd(&[&["RL.POLICY.SET"][..], &args].concat());
    assert_eq!(reply, Reply::Simple("OK".into()), "{words}");
}

/// The per-rule states RL.INSPECT shows for a policy's key.
fn rules(c: &mut Client, key: &str) -> Vec<Reply> {
    match c.cmd(&["RL.INSPECT", key]).field("rules") {
        Reply::Array(rules) => rules,
        other => panic!("{other:?}"),
    }
}

#[test]
fn gcra_moves_its_schedule_back_exactly_and_never_before_now() {
    let (_server, mut c) = started_at(T0_MS);
    let gcra = ["RL.GCRA", "k", "5", "1", "1s"];
    assert_eq!(ints(&mut c, &gcra, &["COST", "4"]), [1, 5, 1, 0, 4000]);
    // Two of the four fail downstream: the schedule owes two seconds less.
    assert_eq!(refund(&mut c, &["k", "2"]), 2);
    assert_eq!(ints(&mut c, &gcra, &["COST", "0"]), [1, 5, 3, 0, 2000]);
    let pttl = c.pttl("k");
    assert!((1900..=2000).contains(&pttl), "the TTL follows: {pttl}");
    // DRYRUN says what would come back and changes nothing.
    let state = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(refund(&mut c, &["k", "9", "DRYRUN"]), 2);
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), state);
    // Half a second on, 1.5 units are owed: the unit half paid off counts as taken (it is
    // what `remaining` counts), and giving it back leaves the key fresh, not fresher.
    c.clock_advance(500);
    assert_eq!(ints(&mut c, &gcra, &["COST", "0"]), [1, 5, 3, 0, 1500]);
    assert_eq!(refund(&mut c, &["k", "9"]), 2);
    assert!(!exists(&mut c, "k"), "a fresh key goes");
    assert_eq!(refund(&mut c, &["k", "9"]), 0);
    assert_eq!(ints(&mut c, &gcra, &["COST", "5"])[..3], [1, 5, 0]);
    // CL.THROTTLE keys hold the same state and take refunds too.
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "cell", "4", "1", "60", "3"]).ints(),
        [0, 5, 2, -1, 180]
    );
    assert_eq!(refund(&mut c, &["cell", "1"]), 1);
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "cell", "4", "1", "60", "0"]).ints(),
        [0, 5, 3, -1, 120]
    );
}

#[test]
fn token_buckets_get_their_tokens_back() {
    let (_server, mut c) = started_at(T0_MS);
    // Capacity 4, 4 per minute: a token every 15 s.
    let tb = ["RL.TOKENBUCKET", "tb", "4", "4", "1m"];
    assert_eq!(ints(&mut c, &tb, &["COST", "4"]), [1, 4, 0, 0, 60_000]);
    // 7.5 s later half a token is back; one more comes back: 1.5 tokens, full in 37.5 s.
    c.clock_advance(7500);
    assert_eq!(refund(&mut c, &["tb", "1"]), 1);
    assert_eq!(ints(&mut c, &tb, &["COST", "0"]), [1, 4, 1, 0, 37_500]);
    // 2.5 tokens are missing: the half token counts as taken, and the bucket fills up.
    assert_eq!(refund(&mut c, &["tb", "100"]), 3);
    assert!(!exists(&mut c, "tb"));

    // INTERVAL, capacity 3, 3 per minute: the refund keeps the phase.
    c.clock_set(MINUTE);
    let tbi = ["RL.TOKENBUCKET", "tbi", "3", "3", "1m", "INTERVAL"];
    assert_eq!(c.cmd(&tbi).ints(), [1, 3, 2, 0, 60_000]);
    c.clock_advance(10_000);
    assert_eq!(ints(&mut c, &tbi, &["COST", "2"]), [1, 3, 0, 0, 50_000]);
    assert_eq!(refund(&mut c, &["tbi", "1"]), 1);
    assert_eq!(ints(&mut c, &tbi, &["COST", "0"]), [1, 3, 1, 0, 50_000]);
    assert_eq!(atmost(&mut c, &tbi, &["5"]), [1, 3, 0, 0, 50_000, 1]);
}

#[test]
fn a_leaky_bucket_queue_gets_shorter() {
    let (_server, mut c) = started_at(T0_MS);
    // 2 per second (T = 500 ms), a queue of 3.
    let lb = ["RL.LEAKYBUCKET", "lb", "3", "2", "1s"];
    assert_eq!(c.cmd(&lb).ints(), [1, 3, 2, 0, 500, 0]);
    assert_eq!(c.cmd(&lb).ints(), [1, 3, 1, 0, 1000, 500]);
    assert_eq!(c.cmd(&lb).ints(), [1, 3, 0, 0, 1500, 1000]);
    // The last one is cancelled: the next request takes its turn.
    assert_eq!(refund(&mut c, &["lb", "1"]), 1);
    assert_eq!(c.cmd(&lb).ints(), [1, 3, 0, 0, 1500, 1000]);
    // ATMOST adds its field after delay_ms.
    assert_eq!(refund(&mut c, &["lb", "2"]), 2);
    assert_eq!(atmost(&mut c, &lb, &["5"]), [1, 3, 0, 0, 1500, 500, 2]);
    // As on the leaky bucket's page: a queue filled at once, two of it cancelled.
    c.cmd(&["DEL", "lb"]);
    assert_eq!(ints(&mut c, &lb, &["COST", "3"]), [1, 3, 0, 0, 1500, 0]);
    assert_eq!(refund(&mut c, &["lb", "2"]), 2);
    assert_eq!(atmost(&mut c, &lb, &["5"]), [1, 3, 0, 0, 1500, 500, 2]);
}

#[test]
fn windows_lower_their_counts() {
    // Fixed window, 5 per minute.
    let (_server, mut c) = started_at(MINUTE + 10_000);
    let fw = ["RL.FIXEDWINDOW", "fw", "5", "1m"];
    assert_eq!(ints(&mut c, &fw, &["COST", "5"]), [1, 5, 0, 0, 50_000]);
    assert_eq!(refund(&mut c, &["fw", "2"]), 2);
    assert_eq!(atmost(&mut c, &fw, &["10"]), [1, 5, 0, 0, 50_000, 2]);
    // Once the window is over its count counts no more: nothing to give back.
    c.clock_set(MINUTE + 60_000);
    assert_eq!(refund(&mut c, &["fw", "3"]), 0);
    assert_eq!(ints(&mut c, &fw, &["COST", "2"]), [1, 5, 3, 0, 60_000]);
    assert_eq!(refund(&mut c, &["fw", "5"]), 2);
    assert!(!exists(&mut c, "fw"), "a count of 0 is a fresh key");

    // Sliding window, 7 per minute, the worked example: 5 in the previous minute, 3 in
    // this one, 30% into it: 3 + floor(5 × 0.7) = 6.
    c.clock_set(MINUTE);
    let sw = ["RL.SLIDINGWINDOW", "sw", "7", "1m"];
    assert_eq!(ints(&mut c, &sw, &["COST", "5"])[..3], [1, 7, 2]);
    c.clock_set(MINUTE + 61_000);
    assert_eq!(ints(&mut c, &sw, &["COST", "3"])[..3], [1, 7, 0]);
    c.clock_set(MINUTE + 78_000);
    assert_eq!(ints(&mut c, &sw, &["COST", "0"])[..3], [1, 7, 1]);
    // Four back: the 3 of this minute, then 1 of the previous minute's share (3 of 5 at
    // 70%): the previous count becomes the largest whose share is 2, which is 4.
    assert_eq!(refund(&mut c, &["sw", "4"]), 4);
    let state = c.cmd(&["RL.INSPECT", "sw"]);
    assert_eq!(
        (state.field("current"), state.field("previous")),
        (Reply::Int(0), Reply::Int(4))
    );
    assert_eq!(atmost(&mut c, &sw, &["10"]), [1, 7, 0, 0, 90_001, 5]);
}

#[test]
fn a_sliding_log_forgets_its_newest_entries() {
    // 2 per minute, the worked example: 1:00:01 and 1:00:30 pass.
    let (_server, mut c) = started_at(MINUTE + 1000);
    let sl = ["RL.SLIDINGLOG", "sl", "2", "1m"];
    assert_eq!(c.cmd(&sl).ints(), [1, 2, 1, 0, 60_000]);
    c.clock_set(MINUTE + 30_000);
    assert_eq!(c.cmd(&sl).ints(), [1, 2, 0, 0, 60_000]);
    // The request of 1:00:30 failed downstream: its entry goes, so 1:00:50 passes.
    c.clock_set(MINUTE + 40_000);
    assert_eq!(refund(&mut c, &["sl", "1"]), 1);
    let state = c.cmd(&["RL.INSPECT", "sl"]);
    assert_eq!(state.field("entries"), Reply::Int(1));
    c.clock_set(MINUTE + 50_000);
    assert_eq!(c.cmd(&sl).ints(), [1, 2, 0, 0, 60_000]);
    c.clock_set(MINUTE + 55_000);
    assert_eq!(c.cmd(&sl).ints(), [0, 2, 0, 6000, 55_000]);
    // A request of several units gives back part of its cost.
    c.cmd(&["DEL", "sl"]);
    let sl5 = ["RL.SLIDINGLOG", "sl", "5", "1m"];
    assert_eq!(ints(&mut c, &sl5, &["COST", "4"])[..3], [1, 5, 1]);
    assert_eq!(refund(&mut c, &["sl", "3"]), 3);
    assert_eq!(atmost(&mut c, &sl5, &["9"]), [1, 5, 0, 0, 60_000, 4]);
    assert_eq!(refund(&mut c, &["sl", "99"]), 5);
    assert!(!exists(&mut c, "sl"));
}

#[test]
fn every_rule_of_a_policy_gets_the_units_back() {
    let (_server, mut c) = started_at(T0_MS);
    set_policy(&mut c, "api GCRA 10 10 1s FIXEDWINDOW 1000 1d");
    let limit = ["RL.LIMIT", "rl:api:alice", "api"];
    let first = ints(&mut c, &limit, &["COST", "10"]);
    assert_eq!(first[..4], [1, 10, 0, 0]);
    assert_eq!(refund(&mut c, &["rl:api:alice", "4"]), 4);
    let rules_now = rules(&mut c, "rl:api:alice");
    assert_eq!(rules_now[1].field("count"), Reply::Int(6), "{rules_now:?}");
    // ATMOST grants what every rule admits: the GCRA rule's 4.
    let granted = atmost(&mut c, &limit, &["10"]);
    assert_eq!(granted[..4], [1, 10, 0, 0]);
    assert_eq!(granted[5..], [0, 4], "rule, then granted");
    // The day's count is 10 again: 6 kept and 4 granted.
    assert_eq!(
        rules(&mut c, "rl:api:alice")[1].field("count"),
        Reply::Int(10)
    );
    // The fixed window rule binds ATMOST when it has less room.
    set_policy(&mut c, "tight GCRA 10 10 1s FIXEDWINDOW 3 1d");
    // (The day's window ends 6400 s after T0.)
    assert_eq!(
        c.cmd(&["RL.LIMIT", "t", "tight", "ATMOST", "10"]).ints(),
        [1, 3, 0, 0, 6_400_000, 1, 3]
    );
}

#[test]
fn atmost_grants_what_the_key_allows_and_blocks_only_on_nothing() {
    let (_server, mut c) = started_at(T0_MS);
    let gcra = ["RL.GCRA", "k", "5", "1", "1m"];
    assert_eq!(atmost(&mut c, &gcra, &["3"]), [1, 5, 2, 0, 180_000, 3]);
    // DRYRUN computes the grant and writes nothing.
    let state = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(
        atmost(&mut c, &gcra, &["3", "DRYRUN"]),
        [1, 5, 0, 0, 300_000, 2]
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), state);
    // Two are left: ATMOST 3 with BLOCK gets them, and no block starts.
    assert_eq!(
        atmost(&mut c, &gcra, &["3", "BLOCK", "1m"]),
        [1, 5, 0, 0, 300_000, 2]
    );
    // Nothing left: denied, retry_after is the wait for one unit, and now the block starts.
    assert_eq!(
        atmost(&mut c, &gcra, &["3", "DRYRUN"]),
        [0, 5, 0, 60_000, 300_000, 0]
    );
    assert_eq!(
        atmost(&mut c, &gcra, &["3", "BLOCK", "2m"]),
        [0, 5, 0, 120_000, 300_000, 0]
    );
    let blocked = c.cmd(&["RL.INSPECT", "k"]).field("blocked_until_us");
    // A refund gives the units back, and the block stays; the TTL covers it.
    assert_eq!(refund(&mut c, &["k", "5"]), 5);
    assert_eq!(
        c.cmd(&["RL.INSPECT", "k"]).field("blocked_until_us"),
        blocked
    );
    let pttl = c.pttl("k");
    assert!((119_000..=120_000).contains(&pttl), "{pttl}");
    assert_eq!(
        atmost(&mut c, &gcra, &["1"]),
        [0, 5, 0, 120_000, 120_000, 0]
    );
    c.clock_advance(120_000);
    assert_eq!(atmost(&mut c, &gcra, &["9"]), [1, 5, 0, 0, 300_000, 5]);
}

#[test]
fn resp3_maps_name_granted_last_and_refund_replies_an_integer() {
    let (_server, mut c) = started_at(T0_MS);
    assert!(matches!(c.cmd(&["HELLO", "3"]), Reply::Map(_)));
    assert_eq!(
        c.cmd(&["RL.LEAKYBUCKET", "lb", "3", "2", "1s", "ATMOST", "2"]),
        resp3_map(true, [3, 1, 0, 1000], &[("delay_ms", 0), ("granted", 2)])
    );
    assert_eq!(
        c.cmd(&["RL.GCRA", "g", "1", "1", "1m", "ATMOST", "2"]),
        resp3_map(true, [1, 0, 0, 60_000], &[("granted", 1)])
    );
    assert_eq!(refund(&mut c, &["lb", "5"]), 2);
    // Without ATMOST, no granted field.
    assert_eq!(
        c.cmd(&["RL.GCRA", "h", "1", "1", "1m"]),
        resp3_map(true, [1, 0, 0, 60_000], &[])
    );
}

#[test]
fn errors_name_the_argument_and_change_nothing() {
    let (_server, mut c) = started_at(T0_MS);
    c.cmd(&["RL.GCRA", "k", "5", "1", "1m", "COST", "3"]);
    c.cmd(&["RL.CONCURRENCY.ACQUIRE", "lease", "2", "1m", "ID", "a"]);
    c.cmd(&["SET", "s", "x"]);
    let state = c.cmd(&["RL.INSPECT", "k"]);
    let refund_usage =
        "ERR wrong number of arguments for 'RL.REFUND': expected RL.REFUND key units [DRYRUN]";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["RL.REFUND"], refund_usage),
        (vec!["RL.REFUND", "k"], refund_usage),
        (vec!["RL.REFUND", "k", "1", "DRYRUN", "x"], refund_usage),
        (
            vec!["RL.REFUND", "k", "-1"],
            "ERR invalid units: expected an integer from 0 to 1000000000000",
        ),
        (
            vec!["RL.REFUND", "k", "1000000000001"],
            "ERR invalid units: expected an integer from 0 to 1000000000000",
        ),
        (
            vec!["RL.REFUND", "k", "1", "FAST"],
            "ERR unknown option 'FAST' at argument 3: expected DRYRUN",
        ),
        (
            vec!["RL.REFUND", "lease", "1"],
            "ERR RL.REFUND does not apply to a concurrency key: use RL.CONCURRENCY.RELEASE key token",
        ),
        (
            vec!["RL.REFUND", "s", "1"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            vec!["RL.GCRA", "k", "5", "1", "1m", "COST", "1", "ATMOST", "2"],
            "ERR COST and ATMOST cannot be used together: COST n takes exactly n units, ATMOST max \
             as many as the key allows now, up to max",
        ),
        (
            vec!["RL.LIMIT", "k", "p", "ATMOST", "2", "COST", "0"],
            "ERR COST and ATMOST cannot be used together: COST n takes exactly n units, ATMOST max \
             as many as the key allows now, up to max",
        ),
        (
            vec!["RL.GCRA", "k", "5", "1", "1m", "ATMOST", "0"],
            "ERR invalid ATMOST: expected an integer from 1 to 1000000000000",
        ),
        (
            vec!["RL.GCRA", "k", "5", "1", "1m", "ATMOST"],
            "ERR ATMOST needs a value: an integer from 1 to 1000000000000",
        ),
        (
            vec!["RL.GCRA", "k", "5", "1", "1m", "ATMOST", "1", "ATMOST", "1"],
            "ERR ATMOST given more than once",
        ),
        (
            vec!["RL.GCRA", "k", "5", "1", "1m", "FAST"],
            "ERR unknown option 'FAST' at argument 5: expected COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW",
        ),
        // A lease is one unit, and redis-cell's reply has no room for a grant.
        (
            vec!["RL.CONCURRENCY.ACQUIRE", "lease", "2", "1m", "ATMOST", "2"],
            "ERR unknown option 'ATMOST' at argument 4: expected ID token, DRYRUN, SHADOW, ADAPTIVE algorithm, MIN n or MAX n, each once",
        ),
        (
            vec!["CL.THROTTLE", "k", "4", "1", "60", "ATMOST", "2"],
            "ERR wrong number of arguments for 'CL.THROTTLE': expected CL.THROTTLE key max_burst \
             count period [quantity]",
        ),
    ];
    for (call, expected) in cases {
        assert_eq!(c.cmd(&call).error(), expected, "{call:?}");
    }
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), state);
    assert_eq!(c.cmd(&["GET", "s"]), Reply::Bulk(b"x".to_vec()));
    // A missing key and 0 units give back nothing; neither is an error.
    assert_eq!(refund(&mut c, &["nothing", "5"]), 0);
    assert_eq!(refund(&mut c, &["k", "0"]), 0);
    assert!(!exists(&mut c, "nothing"));
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), state);
}

#[test]
fn info_counts_refunds_as_calls() {
    let (_server, mut c) = started_at(T0_MS);
    c.cmd(&["RL.GCRA", "k", "5", "1", "1m", "COST", "3"]);
    c.cmd(&["RL.REFUND", "k", "1"]);
    c.cmd(&["RL.REFUND", "k", "1", "DRYRUN"]);
    c.cmd(&["RL.REFUND", "k", "x"]);
    c.cmd(&["RL.GCRA", "k", "5", "1", "1m", "ATMOST", "9"]);
    c.cmd(&["RL.GCRA", "k", "5", "1", "1m", "ATMOST", "9"]);
    let info = c.cmd(&["INFO", "ratelimit_commandstats"]).text();
    assert!(
        info.contains("ratelimit_rl.refund:calls=3,admitted=0,denied=0,shadow_denied=0,errors=1"),
        "{info}"
    );
    assert!(
        info.contains("ratelimit_rl.gcra:calls=3,admitted=2,denied=1,shadow_denied=0,errors=0"),
        "{info}"
    );
}

/// Refunds and partial grants on every algorithm and a policy, as a workload; the keys.
fn workload(c: &mut Client) -> Vec<&'static str> {
    c.clock_set(MINUTE);
    set_policy(c, "api GCRA 10 10 1m SLIDINGLOG 30 1h");
    let limiters: [&[&str]; 9] = [
        &["RL.GCRA", "gcra", "20", "10", "1m"],
        &["CL.THROTTLE", "cell", "19", "10", "60"],
        &["RL.TOKENBUCKET", "tb", "20", "3", "1m"],
        &["RL.TOKENBUCKET", "tbi", "20", "3", "1m", "INTERVAL"],
        &["RL.LEAKYBUCKET", "lb", "20", "3", "1m"],
        &["RL.FIXEDWINDOW", "fw", "20", "1h"],
        &["RL.SLIDINGWINDOW", "sw", "20", "1h"],
        &["RL.SLIDINGLOG", "sl", "20", "1h"],
        &["RL.LIMIT", "pol", "api"],
    ];
    for i in 0..12u64 {
        for limiter in limiters {
            let key = limiter[1];
            if limiter[0] == "CL.THROTTLE" {
                let quantity = (i % 4).to_string();
                c.cmd(&[limiter, &[quantity.as_str()]].concat());
            } else {
                let atmost = (i % 5 + 1).to_string();
                c.cmd(&[limiter, &["ATMOST", atmost.as_str()]].concat());
                c.cmd(&[limiter, &["ATMOST", "3", "DRYRUN"]].concat());
            }
            let units = (i % 3).to_string();
            c.cmd(&["RL.REFUND", key, &units]);
            c.cmd(&["RL.REFUND", key, "2", "DRYRUN"]);
        }
        c.clock_advance(1777);
    }
    limiters.iter().map(|l| l[1]).collect()
}

/// Each key's RL.INSPECT (at the clock reading `at_ms`), digest and absolute expiry.
fn snapshot(c: &mut Client, keys: &[&str], at_ms: u64) -> Vec<(Reply, Reply, Reply)> {
    c.clock_set(at_ms);
    keys.iter()
        .map(|key| {
            let state = c.cmd(&["RL.INSPECT", key]);
            assert!(matches!(state, Reply::Array(_)), "{key}: {state:?}");
            (
                state,
                c.cmd(&["DEBUG", "DIGEST-VALUE", key]),
                c.cmd(&["PEXPIRETIME", key]),
            )
        })
        .collect()
}

#[test]
fn replicas_hold_the_same_bytes_after_refunds_and_partial_grants() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    let keys = workload(&mut p);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let at = MINUTE + 30_000;
    let on_primary = snapshot(&mut p, &keys, at);
    assert_eq!(snapshot(&mut r, &keys, at), on_primary);
    assert_eq!(r.cmd(&["DBSIZE"]), p.cmd(&["DBSIZE"]));

    // A refund of 0 units, of a missing key, of nothing left, or a DRYRUN sends nothing.
    p.clock_set(MINUTE + 30_000);
    p.cmd(&["RL.GCRA", "once", "1", "1", "1h"]);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let offset = |p: &mut Client| p.info_field("replication", "master_repl_offset");
    let before = offset(&mut p);
    assert_eq!(refund(&mut p, &["once", "0"]), 0);
    assert_eq!(refund(&mut p, &["missing", "3"]), 0);
    assert_eq!(refund(&mut p, &["once", "3", "DRYRUN"]), 1);
    assert_eq!(
        p.cmd(&["RL.GCRA", "once", "1", "1", "1h", "ATMOST", "4"])
            .ints(),
        [0, 1, 0, 3_600_000, 3_600_000, 0]
    );
    assert_eq!(
        offset(&mut p),
        before,
        "a refund that wrote nothing was sent"
    );
    // One that gives back is sent, and the replica deletes the key that is fresh again.
    assert_eq!(refund(&mut p, &["once", "3"]), 1);
    assert_ne!(offset(&mut p), before);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    assert_eq!(r.cmd(&["EXISTS", "once"]), Reply::Int(0));
}

#[test]
fn the_aof_replays_refunds_and_partial_grants_to_the_same_bytes() {
    let mut server =
        Server::with(Config::default().extra(&["--appendonly", "yes", "--appendfsync", "always"]));
    let mut c = server.client();
    let keys = workload(&mut c);
    let at = MINUTE + 30_000;
    let before = snapshot(&mut c, &keys, at);
    server.kill();
    server.start_again();
    let mut c = server.client();
    // The restarted module's clock is real, far from MINUTE: the replay used the readings
    // the AOF carries.
    assert_eq!(snapshot(&mut c, &keys, at), before);
}
