//! Work that must not grow without bound (docs/security.md): a fork that is not an AOF rewrite
//! writes nothing into the AOF, and interned parameter sets that no key uses any more are
//! released, whatever removed the keys.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{Client, Config, Reply, Server, T0_MS};

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
    // appendfsync always: with everysec, a server whose background fsync is slow (a loaded
    // machine) postpones writing the AOF buffer for up to two seconds, so the size read after
    // a reply could lag behind what was already propagated.
    let primary = Server::with(common::with_aof(common::primary_config(), "no"));
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

/// `INFO ratelimit_memory`: (distinct parameter sets, slots, bytes) of the interned table.
fn interned(c: &mut Client) -> (u64, u64, u64) {
    let field = |c: &mut Client, name: &str| {
        c.info_field("ratelimit_memory", name)
            .parse::<u64>()
            .unwrap()
    };
    (
        field(c, "ratelimit_interned_params"),
        field(c, "ratelimit_interned_slots"),
        field(c, "ratelimit_interned_bytes"),
    )
}

/// Admits one RL.GCRA request on `key` with rate `rate`: a parameter set of its own.
fn gcra(c: &mut Client, key: &str, rate: u64) {
    let rate = rate.to_string();
    let r = c.cmd(&["RL.GCRA", key, "5", &rate, "1h"]);
    assert_eq!(r.ints()[0], 1, "{key}: {r:?}");
}

/// Waits until the lazy-free thread has freed what FLUSHALL ASYNC handed it.
fn wait_for_lazyfree(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.info_field("memory", "lazyfree_pending_objects") != "0" {
        assert!(Instant::now() < deadline, "lazy free did not finish");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_parameter_set_no_key_uses_is_released_whatever_removed_the_keys() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let ok = Reply::Simple("OK".into());
    assert_eq!(interned(&mut c), (0, 0, 0));
    // DEL, and UNLINK.
    gcra(&mut c, "a", 1);
    gcra(&mut c, "b", 2);
    gcra(&mut c, "c", 2);
    assert_eq!(interned(&mut c).0, 2);
    assert_eq!(c.cmd(&["DEL", "a"]), Reply::Int(1));
    assert_eq!(interned(&mut c).0, 1);
    assert_eq!(c.cmd(&["UNLINK", "b", "c"]), Reply::Int(2));
    assert_eq!(interned(&mut c), (0, 0, 0));
    // Overwritten: by new parameters on the same key, by SET, by RESTORE REPLACE.
    gcra(&mut c, "a", 1);
    gcra(&mut c, "a", 2);
    assert_eq!(interned(&mut c).0, 1);
    assert_eq!(c.cmd(&["SET", "a", "x"]), ok);
    assert_eq!(interned(&mut c), (0, 0, 0));
    c.cmd(&["DEL", "a"]);
    gcra(&mut c, "a", 1);
    gcra(&mut c, "b", 2);
    let Reply::Bulk(dump) = c.cmd(&["DUMP", "b"]) else {
        panic!("DUMP");
    };
    c.cmd(&["DEL", "b"]);
    assert_eq!(
        c.cmd_bytes(&[b"RESTORE", b"a", b"0", &dump, b"REPLACE"]),
        ok
    );
    assert_eq!(interned(&mut c).0, 1);
    // COPY holds a reference of its own; MOVE and SWAPDB keep the key alive.
    assert_eq!(c.cmd(&["COPY", "a", "a2"]), Reply::Int(1));
    assert_eq!(c.cmd(&["DEL", "a"]), Reply::Int(1));
    assert_eq!(interned(&mut c).0, 1);
    assert_eq!(c.cmd(&["MOVE", "a2", "1"]), Reply::Int(1));
    assert_eq!(c.cmd(&["SWAPDB", "0", "1"]), ok);
    assert_eq!(interned(&mut c).0, 1);
    // FLUSHDB and FLUSHALL, sync and async.
    let two = [
        "RL.POLICY.SET",
        "two",
        "GCRA",
        "9",
        "9",
        "1h",
        "FIXEDWINDOW",
        "90",
        "1d",
    ];
    assert_eq!(c.cmd(&two), ok);
    assert_eq!(c.cmd(&["FLUSHDB", "SYNC"]), ok);
    assert_eq!(interned(&mut c), (0, 0, 0));
    for (i, flush) in [
        &["FLUSHDB", "ASYNC"][..],
        &["FLUSHALL", "ASYNC"],
        &["FLUSHALL", "SYNC"],
    ]
    .iter()
    .enumerate()
    {
        for k in 0..100 {
            gcra(&mut c, &format!("k{k}"), 1 + k % 10 + 10 * i as u64);
        }
        assert_eq!(interned(&mut c).0, 10);
        // Keys of a policy: a block of words, one entry per rule, freed the same way.
        for k in 0..100 {
            let r = c.cmd(&["RL.LIMIT", &format!("p{k}"), "two"]);
            assert_eq!(r.ints()[0], 1, "{r:?}");
        }
        assert_eq!(interned(&mut c).0, 12);
        assert_eq!(c.cmd(flush), ok);
        wait_for_lazyfree(&mut c);
        assert_eq!(interned(&mut c), (0, 0, 0), "{flush:?}");
    }
    // Expiry: a key whose TTL has passed is gone when it is next looked at.
    gcra(&mut c, "e", 7);
    assert_eq!(c.cmd(&["PEXPIRE", "e", "1"]), Reply::Int(1));
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.cmd(&["EXISTS", "e"]) != Reply::Int(0) {
        assert!(Instant::now() < deadline, "the key did not expire");
    }
    assert_eq!(interned(&mut c), (0, 0, 0));
}

/// 50,000 distinct parameter sets, each on a key of its own, then every key gone: the
/// server's memory is back where it was.
#[test]
fn fifty_thousand_parameter_sets_dropped_leave_no_memory_behind() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let used = |c: &mut Client| -> i64 { c.info_field("memory", "used_memory").parse().unwrap() };
    // One round first, so that what the server keeps for itself once is counted in both.
    for round in 0..2 {
        let before = used(&mut c);
        // A period of its own per key, i + 1 hours: no key expires (in real time) while
        // the test runs.
        for i in 0..50_000u64 {
            let (key, period) = (format!("k{i}"), format!("{}h", i + 1));
            c.send(&[b"RL.GCRA", key.as_bytes(), b"5", b"1", period.as_bytes()]);
        }
        for _ in 0..50_000 {
            assert_eq!(c.read().ints()[0], 1);
        }
        let (params, slots, bytes) = interned(&mut c);
        assert_eq!((params, slots), (50_000, 50_000));
        let full = used(&mut c);
        assert_eq!(c.cmd(&["FLUSHALL", "SYNC"]), Reply::Simple("OK".into()));
        let after = used(&mut c);
        eprintln!(
            "round {round}: used_memory {before} -> {full} with 50000 sets ({bytes} bytes \
             interned) -> {after} after FLUSHALL: {} bytes kept",
            after - before
        );
        assert_eq!(interned(&mut c), (0, 0, 0));
        if round == 1 {
            assert!(after - before < 64 * 1024, "{} bytes kept", after - before);
        }
    }
}
