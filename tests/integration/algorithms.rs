//! Every admission command against a real redis-server with the debug clock: the worked
//! examples of the docs (each algorithm's page) with exact replies, the first denial's
//! retry_after, recovery, COST
//! above the limit, DRYRUN, PTTL, RL.INSPECT, and keys holding another algorithm's state.

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// 2023-11-14T22:13:00Z: a whole minute, for the aligned windows.
const MINUTE: u64 = 1_699_999_980_000;

fn call(c: &mut Client, args: &[&str]) -> Vec<i64> {
    let r = c.cmd(args);
    match r {
        Reply::Array(_) => r.ints(),
        other => panic!("{args:?} gave {other:?}"),
    }
}

fn at(c: &mut Client, ms: u64) {
    c.clock_set(ms);
}

#[test]
fn token_bucket_four_per_minute() {
    let server = Server::start();
    let mut c = server.client();
    at(&mut c, T0_MS);
    let tb = ["RL.TOKENBUCKET", "k", "4", "4", "1m"];
    assert_eq!(call(&mut c, &tb), [1, 4, 3, 0, 15_000]);
    assert_eq!(call(&mut c, &tb), [1, 4, 2, 0, 30_000]);
    assert_eq!(call(&mut c, &tb), [1, 4, 1, 0, 45_000]);
    assert_eq!(call(&mut c, &tb), [1, 4, 0, 0, 60_000]);
    assert_eq!(call(&mut c, &tb), [0, 4, 0, 15_000, 60_000]);
    // One token back after 15 s; half of one after 7.5 s more.
    c.clock_advance(15_000);
    assert_eq!(call(&mut c, &tb), [1, 4, 0, 0, 60_000]);
    c.clock_advance(7_500);
    assert_eq!(call(&mut c, &tb), [0, 4, 0, 7_500, 52_500]);
    let mut cost5 = tb.to_vec();
    cost5.extend(["COST", "5"]);
    assert_eq!(call(&mut c, &cost5), [0, 4, 0, -1, 52_500]);
}

#[test]
fn token_bucket_with_interval_refills_whole_steps() {
    let server = Server::start();
    let mut c = server.client();
    let tb = ["RL.TOKENBUCKET", "k", "3", "3", "1m", "INTERVAL"];
    at(&mut c, MINUTE);
    assert_eq!(call(&mut c, &tb), [1, 3, 2, 0, 60_000]);
    at(&mut c, MINUTE + 10_000);
    assert_eq!(call(&mut c, &tb), [1, 3, 1, 0, 50_000]);
    at(&mut c, MINUTE + 30_000);
    assert_eq!(call(&mut c, &tb), [1, 3, 0, 0, 30_000]);
    at(&mut c, MINUTE + 55_000);
    assert_eq!(call(&mut c, &tb), [0, 3, 0, 5_000, 5_000]);
    at(&mut c, MINUTE + 60_000);
    assert_eq!(call(&mut c, &tb), [1, 3, 2, 0, 60_000]);
    let e = c
        .cmd(&[
            "RL.TOKENBUCKET",
            "k",
            "3",
            "3",
            "1m",
            "INTERVAL",
            "INTERVAL",
        ])
        .error();
    assert_eq!(e, "ERR INTERVAL given more than once");
    let e = c
        .cmd(&["RL.TOKENBUCKET", "k", "3", "3", "1m", "EVERY"])
        .error();
    assert_eq!(
        e,
        "ERR unknown option 'EVERY' at argument 5: expected COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or INTERVAL"
    );
}

#[test]
fn leaky_bucket_tells_each_request_when_to_act() {
    let server = Server::start();
    let mut c = server.client();
    at(&mut c, T0_MS);
    // 2 per minute: one every 30 s. (Minutes, so the keys' real TTLs outlast the test.)
    let lb = ["RL.LEAKYBUCKET", "k", "3", "2", "1m"];
    assert_eq!(call(&mut c, &lb), [1, 3, 2, 0, 30_000, 0]);
    assert_eq!(call(&mut c, &lb), [1, 3, 1, 0, 60_000, 30_000]);
    assert_eq!(call(&mut c, &lb), [1, 3, 0, 0, 90_000, 60_000]);
    assert_eq!(call(&mut c, &lb), [0, 3, 0, 30_000, 90_000, -1]);
    c.clock_advance(30_000);
    assert_eq!(call(&mut c, &lb), [1, 3, 0, 0, 90_000, 60_000]);
    let mut cost4 = lb.to_vec();
    cost4.extend(["COST", "4"]);
    assert_eq!(call(&mut c, &cost4), [0, 3, 0, -1, 90_000, -1]);
    // RESP3: the sixth field is named.
    c.cmd(&["HELLO", "3"]);
    match c.cmd(&lb) {
        Reply::Map(pairs) => {
            assert_eq!(pairs.len(), 6);
            assert_eq!(
                pairs[5],
                (Reply::Bulk(b"delay_ms".to_vec()), Reply::Int(-1))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fixed_window_allows_the_known_edge_burst() {
    let server = Server::start();
    let mut c = server.client();
    let fw = ["RL.FIXEDWINDOW", "k", "5", "1m"];
    at(&mut c, MINUTE + 59_000);
    for remaining in (0..5).rev() {
        assert_eq!(call(&mut c, &fw), [1, 5, remaining, 0, 1000]);
    }
    assert_eq!(call(&mut c, &fw), [0, 5, 0, 1000, 1000]);
    at(&mut c, MINUTE + 60_000);
    for remaining in (0..5).rev() {
        assert_eq!(call(&mut c, &fw), [1, 5, remaining, 0, 60_000]);
    }
    at(&mut c, MINUTE + 61_000);
    assert_eq!(call(&mut c, &fw), [0, 5, 0, 59_000, 59_000]);
    let mut cost6 = fw.to_vec();
    cost6.extend(["COST", "6"]);
    assert_eq!(call(&mut c, &cost6), [0, 5, 0, -1, 59_000]);
}

#[test]
fn sliding_window_weights_the_previous_window() {
    let server = Server::start();
    let mut c = server.client();
    let sw = ["RL.SLIDINGWINDOW", "k", "7", "1m"];
    at(&mut c, MINUTE + 10_000);
    let mut cost5 = sw.to_vec();
    cost5.extend(["COST", "5"]);
    assert_eq!(call(&mut c, &cost5)[..3], [1, 7, 2]);
    at(&mut c, MINUTE + 65_000);
    let mut cost3 = sw.to_vec();
    cost3.extend(["COST", "3"]);
    // 3 + floor(5 × 55/60) = 3 + 4 = 7.
    assert_eq!(call(&mut c, &cost3)[..3], [1, 7, 0]);
    // 30% into this minute: 3 + floor(5 × 0.7) = 6, so one more passes...
    at(&mut c, MINUTE + 78_000);
    // ...and the estimate is then 7: the next needs floor(5 × (60 - e)/60) <= 2, which holds
    // once e > 24 s, 6.000001 s from now; the key is fresh once floor(4 × (60 - e')/60) is 0
    // in the next minute, e' > 45 s.
    assert_eq!(call(&mut c, &sw), [1, 7, 0, 0, 87_001]);
    assert_eq!(call(&mut c, &sw), [0, 7, 0, 6_001, 87_001]);
    c.clock_advance(6_000);
    assert_eq!(call(&mut c, &sw)[..4], [0, 7, 0, 1]);
    c.clock_advance(1);
    assert_eq!(call(&mut c, &sw)[..3], [1, 7, 0]);
}

#[test]
fn sliding_log_is_exact() {
    let server = Server::start();
    let mut c = server.client();
    let sl = ["RL.SLIDINGLOG", "k", "2", "1m"];
    at(&mut c, MINUTE + 1_000);
    assert_eq!(call(&mut c, &sl), [1, 2, 1, 0, 60_000]);
    at(&mut c, MINUTE + 30_000);
    assert_eq!(call(&mut c, &sl), [1, 2, 0, 0, 60_000]);
    at(&mut c, MINUTE + 50_000);
    assert_eq!(call(&mut c, &sl), [0, 2, 0, 11_000, 40_000]);
    at(&mut c, MINUTE + 100_000);
    assert_eq!(call(&mut c, &sl), [1, 2, 1, 0, 60_000]);
    let mut cost3 = sl.to_vec();
    cost3.extend(["COST", "3"]);
    assert_eq!(call(&mut c, &cost3), [0, 2, 1, -1, 60_000]);
}

#[test]
fn the_sliding_log_limit_is_bounded_by_a_setting() {
    let server = Server::with(Config::default().module_args(&[
        "debug-clock",
        "yes",
        "sliding-log-max-limit",
        "1000",
    ]));
    let mut c = server.client();
    let bound = |max: u64| {
        format!(
            "ERR invalid limit: expected an integer from 1 to {max} (the module setting \
             ratelimit.sliding-log-max-limit bounds it)"
        )
    };
    assert_eq!(
        c.cmd(&["RL.SLIDINGLOG", "k", "1001", "1m"]).error(),
        bound(1000)
    );
    assert_eq!(call(&mut c, &["RL.SLIDINGLOG", "k", "1000", "1m"])[0], 1);
    let r = c.cmd(&["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "5000"]);
    assert_eq!(r, Reply::Simple("OK".into()));
    assert_eq!(call(&mut c, &["RL.SLIDINGLOG", "k", "5000", "1m"])[0], 1);
    assert_eq!(
        c.cmd(&["RL.SLIDINGLOG", "k", "5001", "1m"]).error(),
        bound(5000)
    );
    let r = c.cmd(&["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "0"]);
    assert!(r.is_error(), "{r:?}");
    let r = c.cmd(&["CONFIG", "GET", "ratelimit.sliding-log-max-limit"]);
    assert_eq!(r.render(), "[ratelimit.sliding-log-max-limit 5000]");
}

/// What every admission command shares, checked for each: DRYRUN touches nothing, the PTTL
/// is reset_after, COST above the limit is -1, and RL.INSPECT names the algorithm.
#[test]
fn every_command_shares_the_contract() {
    let server = Server::start();
    let mut c = server.client();
    let commands: [(&str, &[&str], &str, usize); 6] = [
        ("RL.GCRA", &["4", "4", "1m"], "gcra", 5),
        ("RL.TOKENBUCKET", &["4", "4", "1m"], "tokenbucket", 5),
        ("RL.LEAKYBUCKET", &["4", "4", "1m"], "leakybucket", 6),
        ("RL.FIXEDWINDOW", &["4", "1m"], "fixedwindow", 5),
        ("RL.SLIDINGWINDOW", &["4", "1m"], "slidingwindow", 5),
        ("RL.SLIDINGLOG", &["4", "1m"], "slidinglog", 5),
    ];
    for (name, params, kind, fields) in commands {
        at(&mut c, MINUTE + 30_000);
        let key = format!("key:{kind}");
        let args = |extra: &[&'static str]| {
            let mut a = vec![name, key.as_str()];
            a.extend_from_slice(params);
            a.extend_from_slice(extra);
            a
        };
        // DRYRUN on a missing key creates nothing.
        let dry = call(&mut c, &args(&["DRYRUN"]));
        assert_eq!(dry.len(), fields, "{name}");
        assert_eq!(dry[..4], [1, 4, 3, 0], "{name}");
        assert_eq!(c.cmd(&["EXISTS", &key]), Reply::Int(0), "{name}");
        // The real request decides as its dry run said, and the PTTL is reset_after.
        let real = call(&mut c, &args(&[]));
        assert_eq!(real, dry, "{name}");
        let pttl = c.pttl(&key);
        assert!(
            real[4] - 100 <= pttl && pttl <= real[4],
            "{name}: PTTL {pttl}, reset_after {}",
            real[4]
        );
        // DRYRUN on an existing key leaves state and TTL as they were.
        let state = c.cmd(&["RL.INSPECT", &key]);
        assert_eq!(state.field("algorithm").text(), kind, "{name}");
        assert_eq!(state.field("limit"), Reply::Int(4), "{name}");
        assert_eq!(state.field("remaining"), Reply::Int(3), "{name}");
        let dry = call(&mut c, &args(&["DRYRUN", "COST", "3"]));
        assert_eq!(dry[..4], [1, 4, 0, 0], "{name}");
        assert_eq!(c.cmd(&["RL.INSPECT", &key]), state, "{name}");
        assert!(c.pttl(&key) <= pttl, "{name}: DRYRUN moved the TTL");
        // COST above the limit never fits.
        let over = call(&mut c, &args(&["COST", "5"]));
        assert_eq!(over[..4], [0, 4, 3, -1], "{name}");
        // Take the rest, and the next is denied with a positive retry_after.
        assert_eq!(
            call(&mut c, &args(&["COST", "3"]))[..3],
            [1, 4, 0],
            "{name}"
        );
        let denied = call(&mut c, &args(&[]));
        assert_eq!(denied[..3], [0, 4, 0], "{name}");
        assert!(denied[3] > 0, "{name}: {denied:?}");
        // At retry_after it passes, a millisecond earlier it does not.
        c.clock_advance(denied[3] - 1);
        assert_eq!(call(&mut c, &args(&["DRYRUN"]))[0], 0, "{name}");
        c.clock_advance(1);
        assert_eq!(call(&mut c, &args(&[]))[0], 1, "{name}");
        // Long after, the key is fresh again.
        c.clock_advance(3_600_000);
        assert_eq!(
            call(&mut c, &args(&["DRYRUN", "COST", "0"]))[..3],
            [1, 4, 4],
            "{name}"
        );
    }
}

#[test]
fn a_key_holding_another_algorithm_is_an_error_naming_both() {
    let server = Server::start();
    let mut c = server.client();
    at(&mut c, T0_MS);
    call(&mut c, &["RL.TOKENBUCKET", "k", "4", "4", "1m"]);
    let state = c.cmd(&["RL.INSPECT", "k"]);
    let cases: [(&[&str], &str); 5] = [
        (&["RL.GCRA", "k", "4", "4", "1m"], "RL.GCRA"),
        (&["CL.THROTTLE", "k", "3", "4", "60"], "RL.GCRA"),
        (&["RL.LEAKYBUCKET", "k", "4", "4", "1m"], "RL.LEAKYBUCKET"),
        (&["RL.FIXEDWINDOW", "k", "4", "1m"], "RL.FIXEDWINDOW"),
        (&["RL.SLIDINGLOG", "k", "4", "1m"], "RL.SLIDINGLOG"),
    ];
    for (args, requested) in cases {
        assert_eq!(
            c.cmd(args).error(),
            format!(
                "ERR the key holds RL.TOKENBUCKET state, not {requested}: use RL.TOKENBUCKET \
                 on it, or another key"
            )
        );
    }
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), state);
}

#[test]
fn inspect_shows_every_algorithms_parameters_and_state() {
    let server = Server::start();
    let mut c = server.client();
    at(&mut c, MINUTE);
    call(
        &mut c,
        &["RL.TOKENBUCKET", "tb", "10", "2", "1m", "COST", "3"],
    );
    call(
        &mut c,
        &["RL.LEAKYBUCKET", "lb", "10", "2", "1m", "COST", "3"],
    );
    call(&mut c, &["RL.FIXEDWINDOW", "fw", "10", "1m", "COST", "3"]);
    call(&mut c, &["RL.SLIDINGWINDOW", "sw", "10", "1m", "COST", "3"]);
    call(&mut c, &["RL.SLIDINGLOG", "sl", "10", "1m", "COST", "3"]);
    call(&mut c, &["RL.SLIDINGLOG", "sl", "10", "1m"]);
    let expect: [(&str, &[(&str, i64)]); 5] = [
        (
            "tb",
            &[
                ("limit", 10),
                ("capacity", 10),
                ("refill_amount", 2),
                ("refill_period_ms", 60_000),
                ("remaining", 7),
                ("reset_after_ms", 90_000),
            ],
        ),
        (
            "lb",
            &[
                ("limit", 10),
                ("capacity", 10),
                ("leak_amount", 2),
                ("leak_period_ms", 60_000),
                ("queued", 3),
                ("remaining", 7),
                ("reset_after_ms", 90_000),
            ],
        ),
        (
            "fw",
            &[
                ("limit", 10),
                ("window_ms", 60_000),
                ("count", 3),
                ("remaining", 7),
                ("reset_after_ms", 60_000),
            ],
        ),
        (
            "sw",
            &[
                ("limit", 10),
                ("window_ms", 60_000),
                ("current", 3),
                ("previous", 0),
                ("remaining", 7),
            ],
        ),
        (
            "sl",
            &[
                ("limit", 10),
                ("window_ms", 60_000),
                ("entries", 2),
                ("active", 4),
                ("remaining", 6),
                ("reset_after_ms", 60_000),
            ],
        ),
    ];
    for (key, fields) in expect {
        let r = c.cmd(&["RL.INSPECT", key]);
        for (name, value) in fields {
            assert_eq!(
                r.field(name),
                Reply::Int(*value),
                "{key}.{name} in {}",
                r.render()
            );
        }
    }
}
