//! RL.COUNTER: a fixed-window counter kept as a plain integer string whose TTL, set at the
//! first hit, is the window (as INCRBY + PEXPIRE keep it). Every reply case with its exact
//! values, INCRBY's errors changing nothing, the keyspace events, the server's clock (not the
//! debug clock), and the write reaching replicas, the AOF, an RDB reload and a cluster's
//! right node as its result (`SET key count PXAT instant`), never the command.

use crate::common::{self, Client, ClusterClient, Config, Reply, Server, T0_MS};

fn pair(count: i64, pttl: i64) -> Reply {
    Reply::Array(vec![Reply::Int(count), Reply::Int(pttl)])
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

/// The server's clock in ms (`TIME`), the clock a key's TTL runs on.
fn server_ms(c: &mut Client) -> i64 {
    let Reply::Array(time) = c.cmd(&["TIME"]) else {
        panic!("TIME");
    };
    let s: i64 = time[0].text().parse().unwrap();
    let us: i64 = time[1].text().parse().unwrap();
    s * 1000 + us / 1000
}

fn expire_time(c: &mut Client, key: &str) -> i64 {
    c.cmd(&["PEXPIRETIME", key]).int()
}

/// `call` on a key that does not exist yet: the reply is `[count, window]` exactly, and the
/// key expires `window` after the server's clock at the call (between its readings before
/// and after). Returns that instant.
fn made(c: &mut Client, call: &[&str], count: i64, window_ms: i64) -> i64 {
    let before = server_ms(c);
    assert_eq!(c.cmd(call), pair(count, window_ms), "{call:?}");
    let after = server_ms(c);
    let at = expire_time(c, call[1]);
    assert!(
        (before + window_ms..=after + window_ms).contains(&at),
        "{call:?}: expires at {at}, the call ran in [{before}, {after}]"
    );
    at
}

/// `call` on a key with a TTL: the reply is `[count, pttl]`, the TTL kept (the same expiry
/// instant), and `pttl` what is left of it at the call, bounded by the server's clock read
/// before and after.
fn counted(c: &mut Client, call: &[&str], count: i64) {
    let key = call[1];
    let at = expire_time(c, key);
    let before = server_ms(c);
    let reply = c.cmd(call).ints();
    let after = server_ms(c);
    assert_eq!(reply[0], count, "{call:?}");
    assert!(
        (at - after..=at - before).contains(&reply[1]),
        "{call:?}: pttl {} for an expiry at {at}, the call in [{before}, {after}]",
        reply[1]
    );
    assert_eq!(expire_time(c, key), at, "{call:?} moved the expiry");
}

#[test]
fn every_reply_case_with_its_exact_values() {
    let server = Server::start();
    let mut c = server.client();
    // A missing key: made with the count and the window as its TTL; GET reads the count.
    made(&mut c, &["RL.COUNTER", "c", "1m"], 1, 60_000);
    assert_eq!(c.cmd(&["GET", "c"]), bulk("1"));
    counted(&mut c, &["RL.COUNTER", "c", "1m"], 2);
    counted(&mut c, &["RL.COUNTER", "c", "1m", "BY", "5"], 7);
    counted(&mut c, &["rl.counter", "c", "90s", "xx", "by", "-10"], -3);
    assert_eq!(c.cmd(&["GET", "c"]), bulk("-3"));
    // BY 0 reads, whatever XX says.
    counted(&mut c, &["RL.COUNTER", "c", "1m", "BY", "0"], -3);
    counted(&mut c, &["RL.COUNTER", "c", "1m", "XX", "BY", "0"], -3);
    // A missing key: BY 0 and XX write nothing.
    for call in [
        &["RL.COUNTER", "none", "1m", "BY", "0"][..],
        &["RL.COUNTER", "none", "1m", "XX"],
        &["RL.COUNTER", "none", "1m", "BY", "-4", "XX"],
        &["RL.COUNTER", "none", "1m", "XX", "BY", "0"],
    ] {
        assert_eq!(c.cmd(call), pair(0, -2), "{call:?}");
        assert_eq!(c.cmd(&["EXISTS", "none"]), Reply::Int(0), "{call:?}");
    }
    // Any sign, any unit; the bounds of BY.
    made(&mut c, &["RL.COUNTER", "neg", "1500", "BY", "-4"], -4, 1500);
    made(
        &mut c,
        &["RL.COUNTER", "h", "2h", "BY", "1000000000000"],
        1_000_000_000_000,
        7_200_000,
    );
    made(
        &mut c,
        &["RL.COUNTER", "ms", "250ms", "BY", "-1000000000000"],
        -1_000_000_000_000,
        250,
    );
    made(&mut c, &["RL.COUNTER", "d", "3650d"], 1, 315_360_000_000);
    // A key without a TTL: read as it is, then given the window by a write (XX or not).
    for (key, xx) in [("plain", false), ("plain-xx", true)] {
        assert_eq!(c.cmd(&["SET", key, "10"]), ok());
        assert_eq!(c.cmd(&["RL.COUNTER", key, "2s", "BY", "0"]), pair(10, -1));
        assert_eq!(c.pttl(key), -1, "a read gives no TTL");
        let mut call = vec!["RL.COUNTER", key, "2s"];
        if xx {
            call.push("XX");
        }
        made(&mut c, &call, 11, 2000);
    }
    // The extremes of a 64-bit integer, as INCRBY reaches them.
    assert_eq!(c.cmd(&["SET", "max", "9223372036854775807"]), ok());
    made(
        &mut c,
        &["RL.COUNTER", "max", "1m", "BY", "-1"],
        i64::MAX - 1,
        60_000,
    );
    counted(&mut c, &["RL.COUNTER", "max", "1m", "BY", "1"], i64::MAX);
    assert_eq!(c.cmd(&["SET", "min", "-9223372036854775808"]), ok());
    assert_eq!(
        c.cmd(&["RL.COUNTER", "min", "1m", "BY", "0"]),
        pair(i64::MIN, -1)
    );
    // The key is a plain counter that INCR goes on with, and the command with it.
    assert_eq!(c.cmd(&["INCR", "c"]), Reply::Int(-2));
    counted(&mut c, &["RL.COUNTER", "c", "1m"], -1);
    assert_eq!(c.cmd(&["TYPE", "c"]), Reply::Simple("string".into()));
    // RESP3: the same two integers, an array.
    c.cmd(&["HELLO", "3"]);
    counted(&mut c, &["RL.COUNTER", "c", "1m", "BY", "3"], 2);
    assert!(matches!(c.cmd(&["RL.COUNTER", "c", "1m"]), Reply::Array(ref a) if a.len() == 2));
    assert_eq!(c.cmd(&["RL.COUNTER", "r3", "1m", "XX"]), pair(0, -2));
    made(&mut c, &["RL.COUNTER", "r3", "1m"], 1, 60_000);
}

/// What INCRBY does with the same string and increment, RL.COUNTER does: the same count, or
/// the same error.
#[test]
fn the_count_and_the_errors_are_incrbys() {
    let server = Server::start();
    let mut c = server.client();
    let values = [
        "0",
        "1",
        "-1",
        "41",
        "9999",
        "10000",
        "123456789012345",
        "9223372036854775807",
        "9223372036854775806",
        "-9223372036854775808",
        "-9223372036854775807",
        "9223372036854775808",
        "-9223372036854775809",
        "abc",
        "",
        " 1",
        "1 ",
        "+1",
        "01",
        "-0",
        "1.5",
        "1e3",
        "0x10",
    ];
    let increments = ["1", "-1", "1000000000000", "-1000000000000", "7"];
    for value in values {
        for by in increments {
            assert_eq!(c.cmd(&["SET", "ours", value]), ok());
            assert_eq!(c.cmd(&["SET", "theirs", value]), ok());
            let ours = c.cmd(&["RL.COUNTER", "ours", "1m", "BY", by]);
            let theirs = c.cmd(&["INCRBY", "theirs", by]);
            match theirs {
                Reply::Int(n) => {
                    assert_eq!(ours, pair(n, 60_000), "{value:?} BY {by}");
                    assert_eq!(c.cmd(&["GET", "ours"]), c.cmd(&["GET", "theirs"]));
                }
                error => {
                    assert_eq!(ours, error, "{value:?} BY {by}");
                    assert_eq!(c.cmd(&["GET", "ours"]), bulk(value), "an error wrote");
                }
            }
        }
    }
}

/// An error writes nothing: the key's value, encoding and expiry stay; a key of another type
/// (this module's own included) is Redis's WRONGTYPE.
#[test]
fn errors_change_nothing() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(c.cmd(&["SET", "text", "abc", "PX", "600000"]), ok());
    assert_eq!(
        c.cmd(&["SET", "top", "9223372036854775807", "PX", "600000"]),
        ok()
    );
    assert_eq!(c.cmd(&["SET", "bottom", "-9223372036854775808"]), ok());
    assert_eq!(c.cmd(&["SET", "n", "5", "PX", "600000"]), ok());
    assert_eq!(c.cmd(&["LPUSH", "list", "a"]), Reply::Int(1));
    assert_eq!(c.cmd(&["RL.GCRA", "gcra", "5", "5", "1m"]).ints()[0], 1);
    let not_integer = "ERR value is not an integer or out of range";
    let overflow = "ERR increment or decrement would overflow";
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let by = "ERR invalid BY: expected an integer from -1000000000000 to 1000000000000";
    let cases: [(&[&str], &str); 14] = [
        (&["RL.COUNTER", "text", "1m"], not_integer),
        (&["RL.COUNTER", "text", "1m", "BY", "0"], not_integer),
        (&["RL.COUNTER", "text", "1m", "XX"], not_integer),
        (&["RL.COUNTER", "top", "1m"], overflow),
        (&["RL.COUNTER", "bottom", "1m", "BY", "-1"], overflow),
        (&["RL.COUNTER", "list", "1m"], wrongtype),
        (&["RL.COUNTER", "list", "1m", "BY", "0"], wrongtype),
        (&["RL.COUNTER", "gcra", "1m", "XX"], wrongtype),
        (&["RL.COUNTER", "n", "1m", "BY", "1000000000001"], by),
        (&["RL.COUNTER", "n", "1m", "BY", "-0"], by),
        (
            &["RL.COUNTER", "n", "1m", "BY"],
            "ERR BY needs a value: an integer from -1000000000000 to 1000000000000",
        ),
        (
            &["RL.COUNTER", "n", "1m", "XX", "XX"],
            "ERR XX given more than once",
        ),
        (
            &["RL.COUNTER", "n", "0"],
            "ERR invalid window: expected a duration from 1ms to 10 years (315360000000ms): an \
             integer with an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)",
        ),
        (
            &["RL.COUNTER", "n", "1m", "COST", "2"],
            "ERR unknown option 'COST' at argument 3: expected BY n or XX, each once",
        ),
    ];
    let keys = ["text", "top", "bottom", "n", "list", "gcra"];
    // The value (DUMP), the TTL, and the encoding of the keys no write was tried on. A call
    // that writes reads the string through DMA, which holds it as a plain string from then on
    // (what the write in place needs): where the write then fails (not an integer, overflow)
    // the bytes and the TTL are as they were, `OBJECT ENCODING` says `raw`.
    let read_only = ["n", "list", "gcra"];
    let state = |c: &mut Client| -> Vec<Reply> {
        let mut state: Vec<Reply> = keys
            .iter()
            .flat_map(|k| [c.cmd(&["DUMP", k]), c.cmd(&["PEXPIRETIME", k])])
            .collect();
        state.extend(read_only.iter().map(|k| c.cmd(&["OBJECT", "ENCODING", k])));
        state
    };
    let before = state(&mut c);
    for (call, error) in cases {
        assert_eq!(c.cmd(call), Reply::Error(error.into()), "{call:?}");
    }
    assert_eq!(
        c.cmd(&["RL.COUNTER"]).error(),
        "ERR wrong number of arguments for 'RL.COUNTER': expected RL.COUNTER key window [BY n] [XX]"
    );
    assert_eq!(state(&mut c), before);
    assert_eq!(c.cmd(&["GET", "text"]), bulk("abc"));
    assert_eq!(c.cmd(&["GET", "n"]), bulk("5"));
    // Nothing counts as a change to save either, nor does a read; a write does.
    let changes = |c: &mut Client| -> i64 {
        c.info_field("persistence", "rdb_changes_since_last_save")
            .parse()
            .unwrap()
    };
    let unsaved = changes(&mut c);
    assert_eq!(c.cmd(&["RL.COUNTER", "n", "1m", "BY", "0"]).ints()[0], 5);
    assert_eq!(changes(&mut c), unsaved);
    // A read (BY 0) reads as GET does: an integer-encoded value stays one.
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "n"]), bulk("int"));
    assert_eq!(c.cmd(&["RL.COUNTER", "n", "1m"]).ints()[0], 6);
    assert!(changes(&mut c) > unsaved);
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
        if channel.starts_with("__keyevent") {
            out.push(format!(
                "{} {}",
                channel.trim_start_matches("__keyevent@0__:"),
                m[3].text()
            ));
        }
    }
}

/// The events INCRBY and PEXPIRE publish: `incrby` on every write, `expire` when the TTL is
/// set; nothing for a read, an XX miss or an error.
#[test]
fn a_write_publishes_incrby_and_expire_as_incrby_and_pexpire_do() {
    let server = Server::with(Config::default().extra(&["--notify-keyspace-events", "KEA"]));
    let mut c = server.client();
    let mut s = server.client();
    assert!(matches!(
        s.cmd(&["PSUBSCRIBE", "__key*@0__:*"]),
        Reply::Array(_)
    ));
    c.cmd(&["RL.COUNTER", "k", "1m"]);
    c.cmd(&["RL.COUNTER", "k", "1m", "BY", "2"]);
    c.cmd(&["RL.COUNTER", "k", "1m", "BY", "0"]);
    c.cmd(&["RL.COUNTER", "missing", "1m", "XX"]);
    c.cmd(&["RL.COUNTER", "k", "1m", "BY", "1000000000001"]);
    assert_eq!(
        received(&mut c, &mut s),
        ["incrby k", "expire k", "incrby k"]
    );
    // What Redis's own commands publish for the same writes.
    c.cmd(&["INCRBY", "j", "1"]);
    c.cmd(&["PEXPIRE", "j", "60000"]);
    c.cmd(&["INCRBY", "j", "2"]);
    assert_eq!(
        received(&mut c, &mut s),
        ["incrby j", "expire j", "incrby j"]
    );
}

/// The window is the key's TTL on the server's clock: the debug clock moves the module's
/// algorithms, not it.
#[test]
fn the_debug_clock_does_not_move_the_window() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let at = made(&mut c, &["RL.COUNTER", "k", "1m"], 1, 60_000);
    c.clock_advance(3_600_000);
    counted(&mut c, &["RL.COUNTER", "k", "1m"], 2);
    assert_eq!(expire_time(&mut c, "k"), at);
    c.clock_set(T0_MS - 3_600_000);
    made(&mut c, &["RL.COUNTER", "j", "1m"], 1, 60_000);
}

fn offset(p: &mut Client) -> i64 {
    p.info_field("replication", "master_repl_offset")
        .parse()
        .unwrap()
}

/// The writes reach a replica as their result: the same value and the same expiry instant;
/// a read, an XX miss and an error send nothing.
#[test]
fn a_replica_holds_the_same_value_and_expiry_instant() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    let mut monitor = replica.client();
    assert_eq!(monitor.cmd(&["MONITOR"]), ok());
    made(&mut p, &["RL.COUNTER", "a", "10m"], 1, 600_000);
    counted(&mut p, &["RL.COUNTER", "a", "10m", "BY", "-6"], -5);
    assert_eq!(p.cmd(&["SET", "b", "41"]), ok());
    made(&mut p, &["RL.COUNTER", "b", "5m", "XX"], 42, 300_000);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let before = offset(&mut p);
    assert_eq!(p.cmd(&["RL.COUNTER", "a", "10m", "BY", "0"]).ints()[0], -5);
    assert_eq!(p.cmd(&["RL.COUNTER", "none", "10m", "XX"]), pair(0, -2));
    assert!(p.cmd(&["RL.COUNTER", "a", "10m", "BY", "x"]).is_error());
    assert_eq!(
        offset(&mut p),
        before,
        "a read, an XX miss or an error was propagated"
    );
    for key in ["a", "b"] {
        assert_eq!(r.cmd(&["GET", key]), p.cmd(&["GET", key]), "{key}");
        assert_eq!(expire_time(&mut r, key), expire_time(&mut p, key), "{key}");
    }
    // What the replica was sent: SET with the absolute expiry, never the command.
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let line = monitor.read().text();
        if line.contains("\"SET\"") || line.to_ascii_uppercase().contains("RL.COUNTER") {
            seen.push(line);
        }
    }
    let at = |key: &str, p: &mut Client| expire_time(p, key).to_string();
    let expected = [
        format!("\"SET\" \"a\" \"1\" \"PXAT\" \"{}\"", at("a", &mut p)),
        format!("\"SET\" \"a\" \"-5\" \"PXAT\" \"{}\"", at("a", &mut p)),
        // The primary's own SET b 41, as Redis propagates it.
        "\"SET\" \"b\" \"41\"".to_string(),
        format!("\"SET\" \"b\" \"42\" \"PXAT\" \"{}\"", at("b", &mut p)),
    ];
    for (line, expected) in seen.iter().zip(&expected) {
        assert!(
            line.ends_with(expected.as_str()),
            "{line} is not {expected}"
        );
    }
}

/// The AOF (with and without its RDB preamble, replayed after a kill or rewritten) and an
/// RDB reload give back the same value and the same expiry instant.
#[test]
fn the_aof_and_an_rdb_reload_keep_value_and_expiry_instant() {
    for preamble in ["no", "yes"] {
        let mut server = Server::with(common::with_aof(Config::default(), preamble));
        let mut c = server.client();
        made(&mut c, &["RL.COUNTER", "a", "10m", "BY", "3"], 3, 600_000);
        counted(&mut c, &["RL.COUNTER", "a", "10m"], 4);
        assert_eq!(c.cmd(&["SET", "b", "-2"]), ok());
        made(
            &mut c,
            &["RL.COUNTER", "b", "1h", "BY", "-1"],
            -3,
            3_600_000,
        );
        let keys = ["a", "b"];
        let state = |c: &mut Client| -> Vec<(Reply, i64)> {
            keys.iter()
                .map(|k| (c.cmd(&["GET", k]), expire_time(c, k)))
                .collect()
        };
        let before = state(&mut c);
        let aof = std::fs::read_dir(server.dir.join("appendonlydir"))
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().contains(".incr.aof"))
            .expect("an incremental AOF file");
        let text = String::from_utf8_lossy(&std::fs::read(aof.path()).unwrap()).into_owned();
        assert!(!text.to_ascii_uppercase().contains("RL.COUNTER"), "{text}");
        assert!(text.contains("PXAT"), "{text}");
        server.kill();
        server.start_again();
        let mut c = server.client();
        assert_eq!(
            state(&mut c),
            before,
            "preamble {preamble}: replayed after a kill"
        );
        c.cmd(&["BGREWRITEAOF"]);
        c.wait_for_aof_rewrite();
        server.restart();
        let mut c = server.client();
        assert_eq!(state(&mut c), before, "preamble {preamble}: rewritten");
        assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), ok());
        assert_eq!(state(&mut c), before, "preamble {preamble}: DEBUG RELOAD");
    }
}

/// One key, declared: a cluster routes the command to the key's node, which holds the
/// counter; another node answers MOVED.
#[test]
fn a_cluster_routes_it_by_its_key() {
    let nodes = common::cluster(3, 0);
    let mut cc = ClusterClient::new(nodes[0].port);
    let keys: Vec<String> = (0..12).map(|i| format!("user:{i}")).collect();
    for key in &keys {
        assert_eq!(
            cc.cmd(&["RL.COUNTER", key, "10m"]),
            pair(1, 600_000),
            "{key}"
        );
        assert_eq!(cc.cmd(&["RL.COUNTER", key, "10m", "BY", "4"]).ints()[0], 5);
        assert_eq!(cc.cmd(&["GET", key]), bulk("5"), "{key}");
    }
    let mut holders = std::collections::BTreeSet::new();
    for key in &keys {
        let mut moved = 0;
        for node in &nodes {
            let mut c = node.client();
            match c.cmd(&["RL.COUNTER", key, "10m", "BY", "0"]) {
                Reply::Error(e) => {
                    assert!(e.starts_with("MOVED "), "{key}: {e}");
                    moved += 1;
                }
                reply => {
                    assert_eq!(reply.ints()[0], 5, "{key}");
                    holders.insert(node.port);
                }
            }
        }
        assert_eq!(moved, 2, "{key}");
    }
    assert!(
        holders.len() > 1,
        "twelve keys all on one node: {holders:?}"
    );
}
