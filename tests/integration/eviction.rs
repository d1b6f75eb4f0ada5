//! Eviction (docs/cluster.md, Eviction): under `maxmemory` with an evicting policy a limiter key
//! is evicted like any key with a TTL, and starts fresh, free quota; `INFO ratelimit_memory`
//! says when the server's policy can do that; with `noeviction` the state stays and a request
//! that needs memory gets Redis's OOM error.

use crate::common;

use crate::common::{Client, Reply, Server, T0_MS};

fn memory_field(c: &mut Client, name: &str) -> String {
    c.info_field("ratelimit_memory", &format!("ratelimit_{name}"))
}

#[test]
fn info_says_when_the_servers_policy_can_evict_limiter_keys() {
    let server = Server::start();
    let mut c = server.client();
    let state = |c: &mut Client| {
        (
            memory_field(c, "evictable"),
            memory_field(c, "maxmemory_policy"),
        )
    };
    // No maxmemory: nothing is evicted, whatever the policy.
    assert_eq!(state(&mut c), ("0".into(), "noeviction".into()));
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    assert_eq!(state(&mut c), ("0".into(), "allkeys-lru".into()));
    c.cmd(&["CONFIG", "SET", "maxmemory", "100mb"]);
    assert_eq!(state(&mut c), ("1".into(), "allkeys-lru".into()));
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    assert_eq!(state(&mut c), ("1".into(), "volatile-ttl".into()));
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    assert_eq!(state(&mut c), ("0".into(), "noeviction".into()));
    assert!(
        server
            .log()
            .contains("can evict limiter keys, and an evicted key starts fresh"),
        "{}",
        server.log()
    );
    // Set at start: read at load.
    let started = Server::with(common::Config::default().extra(&[
        "--maxmemory",
        "64mb",
        "--maxmemory-policy",
        "volatile-lru",
    ]));
    let mut s = started.client();
    assert_eq!(state(&mut s), ("1".into(), "volatile-lru".into()));
}

/// A key that refuses and a 2 MB value of no TTL, then `maxmemory` set 512 KB below what the
/// server uses, under `policy`: what the key answers then (the eviction runs first), whether it
/// still exists, and what it answers once the value is deleted.
fn exhaust_fill_and_ask(policy: &str) -> (Reply, i64, Reply) {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let ask = |c: &mut Client| c.cmd(&["RL.GCRA", "victim", "1", "1", "1h"]);
    assert_eq!(ask(&mut c).ints(), [1, 1, 0, 0, 3_600_000]);
    assert_eq!(ask(&mut c).ints(), [0, 1, 0, 3_600_000, 3_600_000]);
    let filler = vec![b'x'; 2 * 1024 * 1024];
    assert_eq!(
        c.cmd_bytes(&[b"SET", b"filler", &filler]),
        Reply::Simple("OK".into())
    );
    let used: i64 = c.info_field("memory", "used_memory").parse().unwrap();
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", policy]);
    c.cmd(&[
        "CONFIG",
        "SET",
        "maxmemory",
        &(used - 512 * 1024).to_string(),
    ]);
    let over = ask(&mut c);
    let exists = c.cmd(&["EXISTS", "victim"]).int();
    c.cmd(&["DEL", "filler"]);
    let after = ask(&mut c);
    (over, exists, after)
}

#[test]
fn an_evicted_limiter_key_starts_fresh() {
    // volatile-ttl: the limiter key is the only key with a TTL, so it goes, surely (under
    // allkeys-* it is a candidate like any key; which goes first is the policy's sampling).
    for policy in ["volatile-ttl", "volatile-lru", "volatile-random"] {
        let (over, exists, after) = exhaust_fill_and_ask(policy);
        // Evicted: while memory is still over, the request gets the OOM error (RL.GCRA is
        // deny-oom), and once there is room it is admitted, the refusal forgotten.
        assert_eq!(exists, 0, "{policy}");
        assert!(over.error().starts_with("OOM "), "{policy}: {over:?}");
        assert_eq!(after.ints(), [1, 1, 0, 0, 3_600_000], "{policy}");
    }
}

#[test]
fn noeviction_keeps_limiter_state_and_answers_oom_while_memory_is_full() {
    let (over, exists, after) = exhaust_fill_and_ask("noeviction");
    assert_eq!(exists, 1);
    assert!(over.error().starts_with("OOM "), "{over:?}");
    // The state stayed: still refused.
    assert_eq!(after.ints(), [0, 1, 0, 3_600_000, 3_600_000]);
}
