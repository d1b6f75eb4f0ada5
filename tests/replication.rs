//! Replication is deterministic: a replica applies the primary's clock reading and expiry,
//! never its own; denied requests, DRYRUN and COST 0 propagate nothing; a promoted replica
//! goes on from the same state.

mod common;

use std::time::{Duration, Instant};

use common::{Client, Config, Reply, Server, T0_MS};

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
        // The primary's clock moves; the replica's stays where it is (real time).
        p.clock_advance(37);
        keys.push(key);
    }
    keys.extend((0..4).map(|i| format!("cell:{i}")));
    keys.extend(["tb", "tbi", "lb", "fw", "sw", "sl"].map(String::from));
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
