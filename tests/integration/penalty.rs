//! The BLOCK penalty: a denied request locks the key for a while, on every admission command,
//! through replication and restarts.

use crate::common;

use crate::common::{Reply, Server, T0_MS};

/// 2023-11-14T22:13:00Z: a whole minute, for the aligned windows.
const MINUTE: u64 = 1_699_999_980_000;

/// The brute-force login case: 5 failed attempts a minute, then locked out for 15 minutes.
#[test]
fn five_failures_a_minute_then_fifteen_minutes_locked_out() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(MINUTE);
    let attempt = ["RL.FIXEDWINDOW", "login:alice", "5", "1m", "BLOCK", "15m"];
    for remaining in (0..5).rev() {
        assert_eq!(c.cmd(&attempt).ints(), [1, 5, remaining, 0, 60_000]);
    }
    // The sixth is denied and starts the block: it says so in retry_after.
    assert_eq!(c.cmd(&attempt).ints(), [0, 5, 0, 900_000, 900_000]);
    let blocked_until = ((MINUTE + 900_000) * 1000) as i64;
    let state = c.cmd(&["RL.INSPECT", "login:alice"]);
    assert_eq!(state.field("blocked_until_us"), Reply::Int(blocked_until));
    let pttl = c.pttl("login:alice");
    assert!(
        (899_900..=900_000).contains(&pttl),
        "the key lives as long as the block: {pttl}"
    );
    // A new minute does not lift it; attempts during the block do not extend it.
    c.clock_advance(600_000);
    assert_eq!(c.cmd(&attempt).ints(), [0, 5, 0, 300_000, 300_000]);
    assert_eq!(
        c.cmd(&["RL.INSPECT", "login:alice"])
            .field("blocked_until_us"),
        Reply::Int(blocked_until)
    );
    c.clock_advance(299_999);
    assert_eq!(c.cmd(&attempt).ints()[..4], [0, 5, 0, 1]);
    // It ends on time.
    c.clock_advance(1);
    assert_eq!(c.cmd(&attempt).ints()[..3], [1, 5, 4]);
}

#[test]
fn dryrun_cost_zero_and_impossible_costs_never_block() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let base = ["RL.GCRA", "k", "2", "1", "1h"];
    c.cmd(&base);
    c.cmd(&base);
    let state = c.cmd(&["RL.INSPECT", "k"]);
    for extra in [
        &["DRYRUN", "BLOCK", "1h"][..],
        &["COST", "0", "BLOCK", "1h"],
        &["COST", "3", "BLOCK", "1h"],
    ] {
        let mut call = base.to_vec();
        call.extend_from_slice(extra);
        // (COST 0 is admitted: it peeks.)
        assert!(matches!(c.cmd(&call), Reply::Array(_)), "{extra:?}");
        assert_eq!(
            c.cmd(&["RL.INSPECT", "k"]),
            state,
            "{extra:?} blocked the key"
        );
    }
    // A real denial with BLOCK does.
    let mut call = base.to_vec();
    call.extend_from_slice(&["BLOCK", "2h"]);
    assert_eq!(c.cmd(&call).ints(), [0, 2, 0, 7_200_000, 7_200_000]);
}

#[test]
fn every_admission_command_takes_block() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(MINUTE);
    let calls: [&[&str]; 7] = [
        &["RL.GCRA", "g", "1", "1", "1m"],
        &["RL.TOKENBUCKET", "t", "1", "1", "1m"],
        &["RL.TOKENBUCKET", "ti", "1", "1", "1m", "INTERVAL"],
        &["RL.LEAKYBUCKET", "l", "1", "1", "1m"],
        &["RL.FIXEDWINDOW", "f", "1", "1m"],
        &["RL.SLIDINGWINDOW", "s", "1", "1m"],
        &["RL.SLIDINGLOG", "o", "1", "1m"],
    ];
    for call in calls {
        let mut blocking = call.to_vec();
        blocking.extend(["BLOCK", "1h"]);
        assert_eq!(c.cmd(&blocking).ints()[0], 1, "{call:?}");
        let denied = c.cmd(&blocking).ints();
        assert_eq!(denied[..5], [0, 1, 0, 3_600_000, 3_600_000], "{call:?}");
        // Long after the algorithm would admit again, the block still refuses.
        c.clock_advance(59 * 60_000);
        assert_eq!(c.cmd(call).ints()[..4], [0, 1, 0, 60_000], "{call:?}");
        c.clock_advance(60_000);
        assert_eq!(c.cmd(call).ints()[0], 1, "{call:?}");
        c.clock_set(MINUTE);
    }
}

#[test]
fn a_block_reaches_replicas_and_survives_a_reload() {
    let (primary, replica) = common::replicated(common::Config::default());
    let mut r = replica.client();
    let mut p = primary.client();
    p.clock_set(T0_MS);
    let call = ["RL.SLIDINGWINDOW", "w", "1", "1h", "BLOCK", "30m"];
    p.cmd(&call);
    let offset = p.info_field("replication", "master_repl_offset");
    assert_eq!(p.cmd(&call).ints()[..4], [0, 1, 0, 1_800_000]);
    // Starting a block is a write: it propagates.
    assert_ne!(p.info_field("replication", "master_repl_offset"), offset);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let state = p.cmd(&["RL.INSPECT", "w"]);
    r.clock_set(T0_MS);
    assert_eq!(r.cmd(&["RL.INSPECT", "w"]), state);
    assert_eq!(r.cmd(&["PEXPIRETIME", "w"]), p.cmd(&["PEXPIRETIME", "w"]));
    // A refused request during the block propagates nothing.
    let offset = p.info_field("replication", "master_repl_offset");
    assert_eq!(p.cmd(&call).ints()[0], 0);
    assert_eq!(p.info_field("replication", "master_repl_offset"), offset);
    assert_eq!(p.cmd(&["DEBUG", "RELOAD"]), Reply::Simple("OK".into()));
    p.clock_set(T0_MS);
    assert_eq!(p.cmd(&["RL.INSPECT", "w"]), state);
}
