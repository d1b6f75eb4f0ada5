//! Work that must not grow without bound (SPEC §7): a fork that is not an AOF rewrite
//! writes nothing into the AOF, and interned parameter sets that no key uses any more are
//! released, whatever removed the keys.

mod common;

use std::time::{Duration, Instant};

use common::{Client, Config, Reply, Server, T0_MS};

fn aof_size(c: &mut Client) -> u64 {
    c.info_field("persistence", "aof_current_size")
        .parse()
        .unwrap()
}

/// Waits for the background save in progress to end, and checks it succeeded.
fn wait_for_bgsave(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "the BGSAVE did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_status"), "ok");
}

fn set_policies(c: &mut Client, n: usize) {
    for i in 0..n {
        let name = format!("p{i}");
        c.send(&[
            b"RL.POLICY.SET",
            name.as_bytes(),
            b"GCRA",
            b"10",
            b"10",
            b"1s",
            b"FIXEDWINDOW",
            b"300",
            b"1m",
        ]);
    }
    for _ in 0..n {
        assert_eq!(c.read(), Reply::Simple("OK".into()));
    }
}

const POLICIES: usize = 200;

#[test]
fn a_bgsave_or_a_replica_sync_writes_nothing_into_the_aof() {
    let primary = Server::with(common::primary_config().extra(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
    ]));
    let mut c = primary.client();
    c.wait_for_aof_rewrite();
    set_policies(&mut c, POLICIES);
    c.clock_set(T0_MS);
    assert_eq!(c.cmd(&["RL.LIMIT", "k", "p0"]).ints()[0], 1);
    let before = aof_size(&mut c);
    for _ in 0..3 {
        assert_eq!(
            c.cmd(&["BGSAVE"]),
            Reply::Simple("Background saving started".into())
        );
        wait_for_bgsave(&mut c);
        // Anything a fork schedules runs before the server reads the next command.
        assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
        assert_eq!(aof_size(&mut c), before, "a BGSAVE grew the AOF");
    }
    // A replica's full sync forks for the RDB it sends.
    let replica = Server::start();
    replica.client().replicate_from(&primary);
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(aof_size(&mut c), before, "a replica's sync grew the AOF");
    assert_eq!(
        replica.client().cmd(&["RL.POLICY.LIST"]),
        c.cmd(&["RL.POLICY.LIST"])
    );
}

#[test]
fn an_aof_rewrite_without_the_preamble_still_keeps_every_policy() {
    let mut server = Server::with(Config::default().extra(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
    ]));
    let mut c = server.client();
    c.wait_for_aof_rewrite();
    set_policies(&mut c, POLICIES);
    let listed = c.cmd(&["RL.POLICY.LIST"]);
    c.cmd(&["BGSAVE"]);
    wait_for_bgsave(&mut c);
    c.cmd(&["BGREWRITEAOF"]);
    c.wait_for_aof_rewrite();
    // Nothing else written since: the new incremental part holds the policies alone.
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    server.restart();
    let mut c = server.client();
    assert_eq!(c.cmd(&["RL.POLICY.LIST"]), listed);
    let Reply::Array(names) = &listed else {
        panic!("{listed:?}");
    };
    assert_eq!(names.len(), POLICIES);
}
