//! Replication is deterministic: a replica applies the primary's clock reading and expiry,
//! never its own; denied requests, DRYRUN and COST 0 propagate nothing; a promoted replica
//! goes on from the same state.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// Waits until the replica has acknowledged everything the primary sent.
fn sync(p: &mut Client) {
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
}

fn offset(p: &mut Client) -> i64 {
    p.info_field("replication", "master_repl_offset")
        .parse()
        .unwrap()
}

#[test]
fn the_replica_holds_the_primarys_state_exactly() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(T0_MS);
    let mut keys = Vec::new();
    for i in 0..20u64 {
        let key = format!("user:{i}");
        let burst = (i % 5 + 1).to_string();
        let cost = (i % 3).to_string();
        // Periods of minutes: the keys' real TTLs must outlast the test on a busy machine.
        p.cmd(&["RL.GCRA", &key, &burst, "10", "1m", "COST", &cost]);
        p.cmd(&["RL.GCRA", &key, &burst, "10", "1m"]);
        p.cmd(&["RL.GCRA", &key, &burst, "10", "1m", "DRYRUN"]);
        let cell = format!("cell:{}", i % 4);
        p.cmd(&["CL.THROTTLE", &cell, "3", "5", "60", "2"]);
        // Every other algorithm too, on a few shared keys.
        let n = (i % 4).to_string();
        p.cmd(&["RL.TOKENBUCKET", "tb", "30", "3", "1m", "COST", &n]);
        p.cmd(&[
            "RL.TOKENBUCKET",
            "tbi",
            "30",
            "3",
            "1m",
            "INTERVAL",
            "COST",
            &n,
        ]);
        p.cmd(&["RL.LEAKYBUCKET", "lb", "30", "3", "1m", "COST", &n]);
        p.cmd(&["RL.FIXEDWINDOW", "fw", "30", "1h", "COST", &n]);
        p.cmd(&["RL.SLIDINGWINDOW", "sw", "30", "1h", "COST", &n]);
        p.cmd(&["RL.SLIDINGLOG", "sl", "30", "1h", "COST", &n]);
        p.cmd(&["RL.WARMUP", "wu", "3", "1m", "1h", "COST", &n]);
        p.cmd(&["RL.WARMUP", "wuk", "30", "1h", "1h", "COLDFACTOR", "10"]);
        // The primary's clock moves; the replica's stays where it is (real time).
        p.clock_advance(37);
        keys.push(key);
    }
    keys.extend((0..4).map(|i| format!("cell:{i}")));
    keys.extend(["tb", "tbi", "lb", "fw", "sw", "sl", "wu", "wuk"].map(String::from));
    sync(&mut p);
    // Compare with both clocks at the same reading, so derived fields compare too.
    let at = (T0_MS + 5000).to_string();
    p.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    r.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    for key in &keys {
        let on_primary = p.cmd(&["RL.INSPECT", key]);
        assert!(
            matches!(on_primary, Reply::Array(_)),
            "{key}: {on_primary:?}"
        );
        assert_eq!(r.cmd(&["RL.INSPECT", key]), on_primary, "{key}");
        assert_eq!(
            r.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            p.cmd(&["DEBUG", "DIGEST-VALUE", key]),
            "{key}"
        );
        // Both expire at the same absolute time, to the millisecond (PTTLs, read a moment
        // apart, differ by the time between the two reads).
        let expiry = p.cmd(&["PEXPIRETIME", key]);
        assert!(expiry.int() > 0, "{key}: {expiry:?}");
        assert_eq!(r.cmd(&["PEXPIRETIME", key]), expiry, "{key}");
    }
    assert_eq!(r.cmd(&["DBSIZE"]), p.cmd(&["DBSIZE"]));
}

#[test]
fn denied_dryrun_and_cost_zero_propagate_nothing() {
    let (primary, _replica) = common::replicated(Config::default());
    let mut p = primary.client();
    p.clock_set(T0_MS);
    assert_eq!(p.cmd(&["RL.GCRA", "k", "1", "1", "1m"]).ints()[0], 1);
    sync(&mut p);
    let before = offset(&mut p);
    assert_eq!(p.cmd(&["RL.GCRA", "k", "1", "1", "1m"]).ints()[0], 0);
    assert_eq!(
        p.cmd(&["RL.GCRA", "k", "1", "1", "1m", "COST", "5"]).ints()[0],
        0
    );
    assert_eq!(
        p.cmd(&["RL.GCRA", "fresh", "1", "1", "1m", "DRYRUN"])
            .ints()[0],
        1
    );
    assert_eq!(
        p.cmd(&["RL.GCRA", "k", "1", "1", "1m", "COST", "0"]).ints()[0],
        1
    );
    assert_eq!(p.cmd(&["CL.THROTTLE", "k", "0", "1", "60"]).ints()[0], 1);
    assert!(p.cmd(&["RL.GCRA", "k", "x", "1", "1m"]).is_error());
    assert_eq!(
        offset(&mut p),
        before,
        "a denied request, DRYRUN or COST 0 was propagated"
    );
    // An admitted one is.
    p.clock_advance(60_000);
    assert_eq!(p.cmd(&["RL.GCRA", "k", "1", "1", "1m"]).ints()[0], 1);
    assert!(offset(&mut p) > before);
}

#[test]
fn a_promoted_replica_goes_on_from_the_same_state() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(T0_MS);
    for _ in 0..3 {
        p.cmd(&["RL.GCRA", "k", "3", "1", "1m"]);
    }
    sync(&mut p);
    // The replica refuses writes from clients while it is a replica.
    let e = r.cmd(&["RL.GCRA", "k", "3", "1", "1m"]).error();
    assert!(e.starts_with("READONLY"), "{e}");
    assert_eq!(
        r.cmd(&["REPLICAOF", "NO", "ONE"]),
        Reply::Simple("OK".into())
    );
    r.clock_set(T0_MS);
    // Three units of one per minute: the schedule is paid off in 180 s, the next unit fits
    // in 60 s.
    assert_eq!(
        r.cmd(&["RL.GCRA", "k", "3", "1", "1m"]).ints(),
        [0, 3, 0, 60_000, 180_000]
    );
    r.clock_advance(60_000);
    assert_eq!(
        r.cmd(&["RL.GCRA", "k", "3", "1", "1m"]).ints(),
        [1, 3, 0, 0, 180_000]
    );
}

#[test]
fn the_internal_commands_are_refused_on_a_replica_too() {
    let (_primary, replica) = common::replicated(Config::default());
    let mut r = replica.client();
    let e = r
        .cmd(&["RL.REPLAY", "k", "1:1:RL.GCRA:5", "1", "1s"])
        .error();
    assert!(e.starts_with("READONLY") || e.contains("internal"), "{e}");
    assert_eq!(r.cmd(&["EXISTS", "k"]), Reply::Int(0));
}

#[test]
fn a_replicas_own_aof_records_the_replayed_writes() {
    let primary = Server::with(Config::default().extra(&["--repl-diskless-sync-delay", "0"]));
    let mut replica =
        Server::with(Config::default().extra(&["--appendonly", "yes", "--appendfsync", "always"]));
    let (mut p, mut r) = (primary.client(), replica.client());
    r.replicate_from(&primary);
    p.clock_set(T0_MS);
    for i in 0..5 {
        p.cmd(&["RL.GCRA", &format!("k{i}"), "4", "2", "1m", "COST", "3"]);
    }
    sync(&mut p);
    r.clock_set(T0_MS);
    let before: Vec<Reply> = (0..5)
        .map(|i| r.cmd(&["RL.INSPECT", &format!("k{i}")]))
        .collect();
    assert!(matches!(before[4], Reply::Array(_)), "{:?}", before[4]);
    // Restarted on its own (REPLICAOF was not in its config), it loads its own AOF.
    replica.kill();
    replica.start_again();
    let mut r = replica.client();
    r.clock_set(T0_MS);
    let after: Vec<Reply> = (0..5)
        .map(|i| r.cmd(&["RL.INSPECT", &format!("k{i}")]))
        .collect();
    assert_eq!(after, before);
}

/// Propagation borrows the client's argument vector for a moment: inside MULTI/EXEC and
/// inside a Lua script the replica must still get every write, and the client's own view
/// (SLOWLOG, here) must show the command as sent.
#[test]
fn transactions_scripts_and_slowlog_see_the_right_commands() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(T0_MS);
    p.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    p.cmd(&["SLOWLOG", "RESET"]);
    assert_eq!(
        p.cmd(&["RL.GCRA", "plain", "5", "1", "1m", "COST", "2"])
            .ints()[0],
        1
    );
    let log = p.cmd(&["SLOWLOG", "GET", "1"]).render();
    assert!(log.contains("[RL.GCRA plain 5 1 1m COST 2]"), "{log}");

    assert_eq!(p.cmd(&["MULTI"]), Reply::Simple("OK".into()));
    p.cmd(&["RL.GCRA", "tx", "5", "1", "1m"]);
    p.cmd(&["RL.SLIDINGLOG", "tx:log", "5", "1m", "COST", "3"]);
    let exec = p.cmd(&["EXEC"]).render();
    assert_eq!(exec, "[[1 5 4 0 60000] [1 5 2 0 60000]]");

    let script = "return redis.call('RL.TOKENBUCKET', KEYS[1], 5, 1, '1m', 'COST', ARGV[1])";
    let r1 = p.cmd(&["EVAL", script, "1", "lua", "3"]);
    assert_eq!(r1.ints(), [1, 5, 2, 0, 180_000]);
    sync(&mut p);
    r.clock_set(T0_MS);
    for key in ["plain", "tx", "tx:log", "lua"] {
        let on_primary = p.cmd(&["RL.INSPECT", key]);
        assert!(
            matches!(on_primary, Reply::Array(_)),
            "{key}: {on_primary:?}"
        );
        assert_eq!(r.cmd(&["RL.INSPECT", key]), on_primary, "{key}");
    }
}

/// An idle key disappears once it is fresh again: on the primary by its TTL, and on the
/// replica through the DEL the primary sends (replicas do not expire keys themselves).
#[test]
fn idle_keys_expire_on_the_primary_and_then_the_replica() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(T0_MS);
    // Fresh again after 1 ms (1000 per ms, burst 1), and one that lives for an hour.
    p.cmd(&["RL.GCRA", "brief", "1", "1000", "1ms"]);
    p.cmd(&["RL.GCRA", "lasting", "1", "1", "1h"]);
    sync(&mut p);
    let deadline = Instant::now() + Duration::from_secs(10);
    // DBSIZE counts keys a replica still holds, expired or not.
    while p.cmd(&["DBSIZE"]).int() != 1 || r.cmd(&["DBSIZE"]).int() != 1 {
        assert!(Instant::now() < deadline, "the idle key was not expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(r.cmd(&["EXISTS", "brief"]), Reply::Int(0));
    assert_eq!(r.cmd(&["EXISTS", "lasting"]), Reply::Int(1));
}

/// The commands RESP-encoded in `bytes` (an AOF), as lists of arguments.
fn resp_commands(bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(bytes: &'a [u8], at: &mut usize) -> &'a [u8] {
        let end = *at + bytes[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let text = &bytes[*at..end];
        *at = end + 2;
        text
    }
    let number = |text: &[u8]| -> usize { std::str::from_utf8(text).unwrap().parse().unwrap() };
    let mut at = 0;
    let mut commands = Vec::new();
    while at < bytes.len() {
        let header = line(bytes, &mut at);
        assert_eq!(header[0], b'*', "not an array at byte {at}");
        let count = number(&header[1..]);
        let mut args = Vec::new();
        for _ in 0..count {
            let len = number(&line(bytes, &mut at)[1..]);
            args.push(bytes[at..at + len].to_vec());
            at += len + 2;
        }
        commands.push(args);
    }
    commands
}

/// Propagation lends two slots of the client's argument vector to RL.REPLAY for the length
/// of RedisModule_ReplicateVerbatim, then puts the client's strings back. That the server
/// copies the vector there, and reads it again afterwards for MONITOR and SLOWLOG, is a server
/// internal: this pins it on the server under test (make test runs it on each one).
#[test]
fn the_stream_gets_the_replay_and_the_client_keeps_its_own_command() {
    let server =
        Server::with(Config::default().extra(&["--appendonly", "yes", "--appendfsync", "always"]));
    let mut c = server.client();
    c.clock_set(T0_MS);
    c.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let mut monitor = server.client();
    assert_eq!(monitor.cmd(&["MONITOR"]), Reply::Simple("OK".into()));

    let real_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let before = real_ms();
    let reply = c.cmd(&["RL.GCRA", "plain", "5", "1", "1m", "COST", "2"]);
    let after = real_ms();
    assert_eq!(reply.ints(), [1, 5, 3, 0, 120_000]);

    // What the client sent, as MONITOR and SLOWLOG show it once the command is over.
    let seen = monitor.read().text();
    assert!(
        seen.ends_with(r#""RL.GCRA" "plain" "5" "1" "1m" "COST" "2""#),
        "{seen}"
    );
    let log = c.cmd(&["SLOWLOG", "GET", "1"]).render();
    assert!(log.contains("[RL.GCRA plain 5 1 1m COST 2]"), "{log}");

    // What the AOF (the same stream replicas get) holds: the replay, with the primary's clock
    // reading, the expiry on the real clock, the command's name and its first argument.
    let aof_dir = server.dir.join("appendonlydir");
    let mut commands = Vec::new();
    for entry in std::fs::read_dir(&aof_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            commands.extend(resp_commands(&std::fs::read(path).unwrap()));
        }
    }
    let replays: Vec<&Vec<Vec<u8>>> = commands
        .iter()
        .filter(|args| args[0].eq_ignore_ascii_case(b"RL.REPLAY"))
        .collect();
    assert_eq!(replays.len(), 1, "{commands:?}");
    let args: Vec<String> = replays[0]
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(args.len(), 7, "{args:?}");
    assert_eq!(args[..2], ["RL.REPLAY", "plain"]);
    assert_eq!(args[3..], ["1", "1m", "COST", "2"]);
    let carried: Vec<&str> = args[2].split(':').collect();
    assert_eq!(carried.len(), 4, "{args:?}");
    assert_eq!(carried[0], (T0_MS * 1000).to_string());
    let expire_at: u64 = carried[1].parse().unwrap();
    assert!(
        (before + 120_000..=after + 120_000).contains(&expire_at),
        "{expire_at} not in {before}+120000..={after}+120000"
    );
    assert_eq!(carried[2..], ["RL.GCRA", "5"]);
    // No other command was propagated for it (no PEXPIREAT, no client argv).
    assert!(
        !commands
            .iter()
            .any(|args| args[0].eq_ignore_ascii_case(b"RL.GCRA")),
        "{commands:?}"
    );
}
