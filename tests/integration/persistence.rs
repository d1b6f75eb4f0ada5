//! State survives what Redis does to data: RDB restarts, AOF replay (which must use the
//! primary's clock reading, not the clock at load time), AOF rewrites with and without the
//! RDB preamble, DUMP/RESTORE, COPY and RENAME.

use crate::common;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// Writes state into keys of every algorithm with the debug clock at T0 and after (COST,
/// INTERVAL and a sliding log with entries of several units included); returns the keys.
fn workload(c: &mut Client) -> Vec<String> {
    c.clock_set(T0_MS);
    let mut keys = Vec::new();
    for i in 0..6 {
        let key = format!("rl:{i}");
        let burst = (i + 2).to_string();
        for _ in 0..=i {
            c.cmd(&["RL.GCRA", &key, &burst, "3", "1m"]);
        }
        let n = i.to_string();
        c.cmd(&["CL.THROTTLE", "cell", "9", "2", "60", &n]);
        c.cmd(&["RL.TOKENBUCKET", "tb", "20", "3", "1m", "COST", &n]);
        c.cmd(&[
            "RL.TOKENBUCKET",
            "tbi",
            "20",
            "3",
            "1m",
            "INTERVAL",
            "COST",
            &n,
        ]);
        c.cmd(&["RL.LEAKYBUCKET", "lb", "20", "3", "1m", "COST", &n]);
        c.cmd(&["RL.FIXEDWINDOW", "fw", "20", "1h", "COST", &n]);
        c.cmd(&["RL.SLIDINGWINDOW", "sw", "20", "1h", "COST", &n]);
        c.cmd(&["RL.SLIDINGLOG", "sl", "20", "1h", "COST", &n]);
        c.cmd(&["RL.SLIDINGLOG", "sl", "20", "1h"]);
        c.cmd(&["RL.WARMUP", "wu", "3", "1h", "1h", "COST", &n]);
        c.cmd(&["RL.WARMUP", "wuk", "7", "1h", "1h", "COLDFACTOR", "7"]);
        c.clock_advance(1234);
        keys.push(key);
    }
    for key in ["cell", "tb", "tbi", "lb", "fw", "sw", "sl", "wu", "wuk"] {
        keys.push(key.into());
    }
    keys
}

/// RL.INSPECT of every key, with the debug clock at `at_ms` so the derived fields compare.
fn snapshot(c: &mut Client, keys: &[String], at_ms: u64) -> Vec<Reply> {
    c.clock_set(at_ms);
    keys.iter().map(|k| c.cmd(&["RL.INSPECT", k])).collect()
}

fn assert_all_present(snap: &[Reply]) {
    for r in snap {
        assert!(matches!(r, Reply::Array(_)), "missing or broken key: {r:?}");
    }
}

#[test]
fn an_rdb_restart_keeps_state_and_ttl() {
    let mut server = Server::start();
    let mut c = server.client();
    let keys = workload(&mut c);
    let at = T0_MS + 10_000;
    let before = snapshot(&mut c, &keys, at);
    assert_all_present(&before);
    let pttl_before = c.pttl("rl:5");
    assert_eq!(c.cmd(&["SAVE"]), Reply::Simple("OK".into()));
    server.restart();
    let mut c = server.client();
    assert_eq!(snapshot(&mut c, &keys, at), before);
    let pttl_after = c.pttl("rl:5");
    assert!(
        pttl_after > 0 && pttl_after <= pttl_before,
        "{pttl_before} then {pttl_after}"
    );
    // The limiter goes on from the restored state: rl:1 (burst 3) used 2 units at T0.
    c.clock_set(T0_MS + 1234);
    let r = c.cmd(&["RL.GCRA", "rl:1", "3", "3", "1m"]).ints();
    assert_eq!(r[..3], [1, 3, 0]);
}

fn aof_config(preamble: &str) -> Config {
    common::with_aof(Config::default(), preamble)
}

#[test]
fn aof_replay_uses_the_primarys_clock_reading() {
    let mut server = Server::with(aof_config("yes"));
    let mut c = server.client();
    let keys = workload(&mut c);
    let at = T0_MS + 10_000;
    let before = snapshot(&mut c, &keys, at);
    assert_all_present(&before);
    // A kill, no shutdown work: everything admitted before it must come back from the AOF.
    server.kill();
    server.start_again();
    let mut c = server.client();
    // The restarted module's clock is real (2026 or later), far from T0: had the replay read
    // it, every TAT would differ.
    assert_eq!(snapshot(&mut c, &keys, at), before);
}

fn rewrite_and_restart(preamble: &str) {
    let mut server = Server::with(aof_config(preamble));
    let mut c = server.client();
    let keys = workload(&mut c);
    let at = T0_MS + 10_000;
    let before = snapshot(&mut c, &keys, at);
    assert_all_present(&before);
    let pttl_before = c.pttl("rl:3");
    c.cmd(&["BGREWRITEAOF"]);
    c.wait_for_aof_rewrite();
    if preamble == "no" {
        // The rewritten base file recreates each key with RL.LOADSTATE and its PEXPIREAT.
        let base = std::fs::read_dir(server.dir.join("appendonlydir"))
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().contains(".base.aof"))
            .expect("a base AOF file");
        let text = String::from_utf8_lossy(&std::fs::read(base.path()).unwrap()).into_owned();
        assert!(
            text.contains("RL.LOADSTATE"),
            "no RL.LOADSTATE in the base AOF"
        );
        assert!(text.contains("PEXPIREAT"), "no PEXPIREAT in the base AOF");
    }
    // Requests after the rewrite go to the new incremental file and replay too.
    c.clock_set(T0_MS + 20_000);
    c.cmd(&["RL.GCRA", "after", "2", "1", "1m"]);
    let after = c.cmd(&["RL.INSPECT", "after"]);
    server.restart();
    let mut c = server.client();
    assert_eq!(snapshot(&mut c, &keys, at), before);
    c.clock_set(T0_MS + 20_000);
    assert_eq!(c.cmd(&["RL.INSPECT", "after"]), after);
    let pttl_after = c.pttl("rl:3");
    assert!(
        pttl_after > 0 && pttl_after <= pttl_before,
        "{pttl_before} then {pttl_after}"
    );
}

#[test]
fn an_aof_rewrite_without_the_rdb_preamble_keeps_state() {
    rewrite_and_restart("no");
}

#[test]
fn an_aof_rewrite_with_the_rdb_preamble_keeps_state() {
    rewrite_and_restart("yes");
}

#[test]
fn dump_restore_copy_and_rename_keep_state_and_ttl() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    c.cmd(&["RL.GCRA", "a", "5", "1", "1m", "COST", "3"]);
    let state = c.cmd(&["RL.INSPECT", "a"]);
    let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", "a"]);

    let payload = match c.cmd(&["DUMP", "a"]) {
        Reply::Bulk(b) => b,
        other => panic!("DUMP gave {other:?}"),
    };
    // With the TTL, as MIGRATE sends it (the digest counts whether a key expires).
    let ttl = c.pttl("a").to_string();
    let r = c.cmd_bytes(&[b"RESTORE", b"b", ttl.as_bytes(), &payload]);
    assert_eq!(r, Reply::Simple("OK".into()));
    assert!(c.pttl("b") > 170_000, "RESTORE keeps the TTL it is given");
    assert_eq!(c.cmd(&["RL.INSPECT", "b"]), state);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "b"]), digest);

    assert_eq!(c.cmd(&["COPY", "a", "c"]), Reply::Int(1));
    assert_eq!(c.cmd(&["RL.INSPECT", "c"]), state);
    assert!(c.pttl("c") > 170_000, "COPY keeps the TTL");
    // The copy is independent of the original.
    c.cmd(&["RL.GCRA", "c", "5", "1", "1m"]);
    assert_eq!(c.cmd(&["RL.INSPECT", "a"]), state);

    assert_eq!(c.cmd(&["RENAME", "a", "d"]), Reply::Simple("OK".into()));
    assert_eq!(c.cmd(&["RL.INSPECT", "d"]), state);
    assert!(c.pttl("d") > 170_000, "RENAME keeps the TTL");

    let usage = c.cmd(&["MEMORY", "USAGE", "d"]).int();
    assert!(usage > 0, "MEMORY USAGE {usage}");
    assert_eq!(c.cmd(&["TYPE", "d"]), Reply::Simple("ratelimit".into()));
}

/// CRC-64/Jones, reflected, as DUMP payloads carry it.
fn crc64(data: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Replaces `from` with `to` (same length) inside a DUMP payload and fixes its checksum.
fn forge(payload: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = payload
        .windows(from.len())
        .position(|w| w == from)
        .expect("the pattern is in the payload");
    let mut out = payload.to_vec();
    out[at..at + to.len()].copy_from_slice(to);
    let body = out.len() - 8;
    let crc = crc64(&out[..body]);
    out[body..].copy_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn a_forged_restore_payload_is_refused_and_the_server_lives() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    // Uncompressed, so the state's bytes can be found in the payload.
    let server = Server::with(Config::default().extra(&["--rdbcompression", "no"]));
    let mut c = server.client();
    c.clock_set(T0_MS);
    c.cmd(&["RL.GCRA", "a", "5", "7", "1m"]);
    let state = c.cmd(&["RL.INSPECT", "a"]);
    let payload = match c.cmd(&["DUMP", "a"]) {
        Reply::Bulk(b) => b,
        other => panic!("DUMP gave {other:?}"),
    };
    // burst 5 and rate 7, as the state encodes them.
    let params: Vec<u8> = [5u64.to_le_bytes(), 7u64.to_le_bytes()].concat();
    // A forged payload that still decodes is accepted: the checksum is right.
    let rate_six: Vec<u8> = [5u64.to_le_bytes(), 6u64.to_le_bytes()].concat();
    let ok = forge(&payload, &params, &rate_six);
    assert_eq!(
        c.cmd_bytes(&[b"RESTORE", b"ok", b"0", &ok]),
        Reply::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "ok"]).field("rate"), Reply::Int(6));
    // One whose values are out of range is refused by the module's decoder.
    let bad_values: [Vec<u8>; 3] = [
        [5u64.to_le_bytes(), 0u64.to_le_bytes()].concat(),
        [0u64.to_le_bytes(), 7u64.to_le_bytes()].concat(),
        [u64::MAX.to_le_bytes(), 7u64.to_le_bytes()].concat(),
    ];
    for bad in &bad_values {
        let forged = forge(&payload, &params, bad);
        let r = c.cmd_bytes(&[b"RESTORE", b"x", b"0", &forged]);
        assert!(r.is_error(), "{r:?}");
    }
    // A bad encoding version too.
    let version = [2u8, 1, 5, 0, 0, 0, 0, 0, 0, 0];
    let forged = forge(&payload, &version, &[9u8, 1, 5, 0, 0, 0, 0, 0, 0, 0]);
    assert!(c.cmd_bytes(&[b"RESTORE", b"x", b"0", &forged]).is_error());
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(c.cmd(&["EXISTS", "x"]), Reply::Int(0));
    assert_eq!(c.cmd(&["RL.INSPECT", "a"]), state);
}

/// Keys are stored compactly when their state packs and whole when it does not; both
/// forms, and a key moving from one to the other, survive everything, and shared
/// parameters outlive the keys that are deleted.
#[test]
fn compact_and_whole_values_survive_reload_copy_and_async_flush() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // Counts past 2^27 do not pack: this sliding window is stored whole.
    c.cmd(&[
        "RL.SLIDINGWINDOW",
        "whole",
        "1000000000",
        "1h",
        "COST",
        "200000000",
    ]);
    c.cmd(&["RL.SLIDINGWINDOW", "small", "1000000000", "1h", "COST", "5"]);
    let compact = c.cmd(&["MEMORY", "USAGE", "small"]).int();
    let whole = c.cmd(&["MEMORY", "USAGE", "whole"]).int();
    assert!(compact < whole, "compact {compact} bytes, whole {whole}");
    // The small one grows past what packs, and moves to the whole form.
    c.cmd(&[
        "RL.SLIDINGWINDOW",
        "small",
        "1000000000",
        "1h",
        "COST",
        "200000000",
    ]);
    assert_eq!(
        c.cmd(&["RL.INSPECT", "small"]).field("current"),
        Reply::Int(200_000_005)
    );
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "small"]).int(), whole);
    // Many keys share one set of parameters; a copy holds it too.
    for i in 0..50 {
        c.cmd(&["RL.GCRA", &format!("g:{i}"), "5", "1", "1h"]);
    }
    assert_eq!(c.cmd(&["COPY", "g:0", "copy"]), Reply::Int(1));
    let state = c.cmd(&["RL.INSPECT", "copy"]);
    for i in 0..50 {
        c.cmd(&["DEL", &format!("g:{i}")]);
    }
    assert_eq!(c.cmd(&["RL.INSPECT", "copy"]), state);
    let before: Vec<Reply> = ["whole", "small", "copy"]
        .iter()
        .map(|k| c.cmd(&["RL.INSPECT", k]))
        .collect();
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Reply::Simple("OK".into()));
    c.clock_set(T0_MS);
    let after: Vec<Reply> = ["whole", "small", "copy"]
        .iter()
        .map(|k| c.cmd(&["RL.INSPECT", k]))
        .collect();
    assert_eq!(after, before);
    // Freed on Redis's lazy-free thread: the server lives on and new keys work.
    assert_eq!(c.cmd(&["FLUSHALL", "ASYNC"]), Reply::Simple("OK".into()));
    assert_eq!(
        c.cmd(&["RL.GCRA", "g:0", "5", "1", "1h"]).ints(),
        [1, 5, 4, 0, 3_600_000]
    );
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
}
