//! Adaptive concurrency limits against real servers: RL.CONCURRENCY.ACQUIRE ... ADAPTIVE and
//! RELEASE ... RTT / DROPPED move a key's limit exactly as Netflix's classes move theirs
//! (the values below are worked from their formulas), and the key replicates, persists and
//! restores bit for bit. Time is the module's debug clock.

use crate::common;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// An acquisition's five fields and its token.
fn acquire(c: &mut Client, args: &[&str]) -> (Vec<i64>, String) {
    let mut call = vec!["RL.CONCURRENCY.ACQUIRE"];
    call.extend_from_slice(args);
    match c.cmd(&call) {
        Reply::Array(items) => (
            items[..5].iter().map(Reply::int).collect(),
            match &items[5] {
                Reply::Nil => String::new(),
                token => token.text(),
            },
        ),
        other => panic!("{call:?}: {other:?}"),
    }
}

fn release(c: &mut Client, key: &str, token: &str, options: &[&str]) -> i64 {
    let mut call = vec!["RL.CONCURRENCY.RELEASE", key, token];
    call.extend_from_slice(options);
    c.cmd(&call).int()
}

fn field(c: &mut Client, key: &str, name: &str) -> Reply {
    c.cmd(&["RL.INSPECT", key]).field(name)
}

const AIMD: [&str; 7] = ["4", "10s", "ADAPTIVE", "AIMD", "MIN", "1", "MAX"];

fn aimd(key: &str) -> Vec<&str> {
    let mut args = vec![key];
    args.extend_from_slice(&AIMD);
    args.push("10");
    args
}

#[test]
fn an_aimd_limit_moves_with_what_release_reports_and_with_leases_that_run_out() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let k = aimd("svc");
    // A new key starts at `limit`.
    let (r, a) = acquire(&mut c, &k);
    assert_eq!(r, [1, 4, 3, 0, 10_000]);
    let (r, b) = acquire(&mut c, &k);
    assert_eq!(r, [1, 4, 2, 0, 10_000]);
    // The first lease began with 1 in flight (1 × 2 < 4): no growth.
    assert_eq!(release(&mut c, "svc", &a, &["RTT", "250us"]), 1);
    assert_eq!(acquire(&mut c, &[&k[..], &["DRYRUN"]].concat()).0[1], 4);
    // The second with 2 (2 × 2 >= 4): + 1.
    assert_eq!(release(&mut c, "svc", &b, &["RTT", "3ms"]), 1);
    let (r, d) = acquire(&mut c, &k);
    assert_eq!(r, [1, 5, 4, 0, 10_000]);
    // DROPPED backs off: (int) (5 × 0.9) = 4.
    assert_eq!(release(&mut c, "svc", &d, &["DROPPED"]), 1);
    assert_eq!(field(&mut c, "svc", "limit"), Reply::Int(4));
    // So does an RTT over AIMD's 5 s timeout.
    let (_, e) = acquire(&mut c, &k);
    assert_eq!(release(&mut c, "svc", &e, &["RTT", "5001ms"]), 1);
    assert_eq!(field(&mut c, "svc", "limit"), Reply::Int(3));
    // Leases that run out are dropped samples, seen by reads before any write: two leases
    // end at +10 s, 3 → 2 → 1 (the MIN).
    acquire(&mut c, &k);
    acquire(&mut c, &k);
    let before = c.cmd(&["RL.INSPECT", "svc"]);
    assert_eq!(before.field("held"), Reply::Int(2));
    c.clock_advance(10_000);
    assert_eq!(field(&mut c, "svc", "limit"), Reply::Int(1));
    assert_eq!(
        acquire(&mut c, &[&k[..], &["DRYRUN"]].concat()).0,
        [1, 1, 0, 0, 10_000]
    );
    c.clock_advance(-10_000);
    assert_eq!(c.cmd(&["RL.INSPECT", "svc"]), before, "a read wrote");
    c.clock_advance(10_000);
    let (r, _) = acquire(&mut c, &k);
    assert_eq!(r, [1, 1, 0, 0, 10_000]);
    // Full at 1: a refusal says when the lease ends.
    c.clock_advance(4_000);
    assert_eq!(
        acquire(&mut c, &k),
        (vec![0, 1, 0, 6_000, 6_000], String::new())
    );
    // The key outlives its leases by an hour, so what it learned survives an idle gap (PTTL
    // is in real time: the last write's lease of 10 s plus 3600 s, less what the test took).
    let pttl = c.pttl("svc");
    assert!((3_609_000..=3_610_000).contains(&pttl), "{pttl}");
    // The inspection of an adaptive key.
    let inspect = c.cmd(&["RL.INSPECT", "svc"]);
    assert_eq!(inspect.field("adaptive"), Reply::Bulk(b"aimd".to_vec()));
    let fields: Vec<(String, i64)> = inspect.fields();
    let named = |n: &str| fields.iter().find(|(f, _)| f == n).map(|(_, v)| *v);
    assert_eq!(
        ["limit", "start", "min", "max", "held", "remaining"].map(named),
        [Some(1), Some(4), Some(1), Some(10), Some(1), Some(0)]
    );
}

#[test]
fn vegas_and_gradient2_show_their_estimates() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // Vegas from 20: the first sample is the no-load RTT; with no queue (the same RTT) and
    // at least half the limit in flight, it grows by beta = 6 × log10 = 6.
    let vegas = ["v", "20", "1m", "ADAPTIVE", "VEGAS"];
    let mut tokens: Vec<String> = (0..10).map(|_| acquire(&mut c, &vegas).1).collect();
    let tenth = tokens.pop().unwrap_or_default();
    assert_eq!(release(&mut c, "v", &tenth, &["RTT", "10ms"]), 1);
    assert_eq!(field(&mut c, "v", "rtt_noload_us"), Reply::Int(10_000));
    assert_eq!(field(&mut c, "v", "limit"), Reply::Int(20));
    let (_, again) = acquire(&mut c, &vegas); // the tenth in flight again
    assert_eq!(release(&mut c, "v", &again, &["RTT", "10ms"]), 1);
    let inspect = c.cmd(&["RL.INSPECT", "v"]);
    assert_eq!(inspect.field("adaptive"), Reply::Bulk(b"vegas".to_vec()));
    assert_eq!(inspect.field("limit"), Reply::Int(26));
    assert_eq!(inspect.field("estimated_limit_milli"), Reply::Int(26_000));
    assert_eq!(inspect.field("probe_count"), Reply::Int(2));
    assert_eq!(
        (inspect.field("min"), inspect.field("max")),
        (Reply::Int(1), Reply::Int(1000))
    );
    // A queue (twice the no-load RTT: ceil(26 × 0.5) = 13 > beta), with half the limit in
    // flight (13 leases): − log10 = − 1.
    for _ in 0..3 {
        acquire(&mut c, &vegas);
    }
    let (_, q) = acquire(&mut c, &vegas);
    assert_eq!(release(&mut c, "v", &q, &["RTT", "20ms"]), 1);
    assert_eq!(field(&mut c, "v", "limit"), Reply::Int(25));

    // Gradient2 from 20 (MIN 20 by default): 20 × 0.8 + (20 × 1 + 4) × 0.2 = 20.8.
    let g2 = ["g", "20", "1m", "ADAPTIVE", "GRADIENT2"];
    let mut tokens: Vec<String> = (0..11).map(|_| acquire(&mut c, &g2).1).collect();
    let last = tokens.pop().unwrap_or_default();
    assert_eq!(release(&mut c, "g", &last, &["RTT", "10ms"]), 1);
    let inspect = c.cmd(&["RL.INSPECT", "g"]);
    assert_eq!(
        inspect.field("adaptive"),
        Reply::Bulk(b"gradient2".to_vec())
    );
    assert_eq!(inspect.field("estimated_limit_milli"), Reply::Int(20_800));
    assert_eq!(inspect.field("limit"), Reply::Int(20));
    assert_eq!(inspect.field("short_rtt_us"), Reply::Int(10_000));
    assert_eq!(inspect.field("long_rtt_us"), Reply::Int(10_000));
    // Without RTT the sample is the time the lease was held: 40 ms on the module's clock.
    let (_, t) = acquire(&mut c, &g2);
    c.clock_advance(40);
    assert_eq!(release(&mut c, "g", &t, &[]), 1);
    assert_eq!(field(&mut c, "g", "short_rtt_us"), Reply::Int(40_000));
    // long = (10 + 40) / 2 = 25 ms
    assert_eq!(field(&mut c, "g", "long_rtt_us"), Reply::Int(25_000));
}

/// A renewal (ACQUIRE again with the lease's own ID) keeps when the work began and the leases
/// held then: the sample is the whole time since the first acquisition, whether the lease runs
/// out or is released without RTT, not the last renewal's lease.
#[test]
fn a_renewed_lease_reports_the_time_since_its_first_acquisition() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // Gradient2 shows each sample's RTT as short_rtt_us. A lease of 1 s, renewed after 700 ms,
    // runs out at +1.7 s: the sample is 1.7 s (the lease's length would be 1 s).
    let w = ["g", "20", "1s", "ADAPTIVE", "GRADIENT2", "ID", "w"];
    assert_eq!(acquire(&mut c, &w), (vec![1, 20, 19, 0, 1_000], "w".into()));
    c.clock_advance(700);
    assert_eq!(acquire(&mut c, &w), (vec![1, 20, 19, 0, 1_000], "w".into()));
    c.clock_advance(999);
    assert_eq!(field(&mut c, "g", "short_rtt_us"), Reply::Int(0));
    c.clock_advance(1);
    let ended = c.cmd(&["RL.INSPECT", "g"]);
    assert_eq!(ended.field("held"), Reply::Int(0));
    assert_eq!(ended.field("short_rtt_us"), Reply::Int(1_700_000));
    assert_eq!(ended.field("long_rtt_us"), Reply::Int(1_700_000));
    // Released without RTT: 300 ms, a renewal, 200 ms more: 500 ms (not 200).
    let x = ["g", "20", "1s", "ADAPTIVE", "GRADIENT2", "ID", "x"];
    acquire(&mut c, &x);
    c.clock_advance(300);
    acquire(&mut c, &x);
    c.clock_advance(200);
    assert_eq!(release(&mut c, "g", "x", &[]), 1);
    assert_eq!(field(&mut c, "g", "short_rtt_us"), Reply::Int(500_000));

    // The leases in flight are the first acquisition's too. AIMD from 4 grows when at least
    // half the limit was in flight as the lease began: w began alone (1 × 2 < 4) and is
    // renewed with 3 held; its sample does not grow the limit.
    let a = ["a", "4", "1m", "ADAPTIVE", "AIMD", "MIN", "1", "MAX", "10"];
    acquire(&mut c, &[&a[..], &["ID", "w"]].concat());
    let (r, second) = acquire(&mut c, &a);
    assert_eq!(r, [1, 4, 2, 0, 60_000]);
    acquire(&mut c, &a);
    let (r, _) = acquire(&mut c, &[&a[..], &["ID", "w"]].concat());
    assert_eq!(r, [1, 4, 1, 0, 60_000]);
    assert_eq!(release(&mut c, "a", "w", &["RTT", "1ms"]), 1);
    assert_eq!(field(&mut c, "a", "limit"), Reply::Int(4));
    // The second lease began with 2 in flight (2 × 2 >= 4): + 1.
    assert_eq!(release(&mut c, "a", &second, &["RTT", "1ms"]), 1);
    assert_eq!(field(&mut c, "a", "limit"), Reply::Int(5));
}

/// Vegas as Netflix's `VegasLimit._update`: a sample below the no-load RTT becomes the no-load
/// RTT and moves nothing else, dropped or not; a dropped sample otherwise lowers the limit
/// whatever the leases in flight; only a sample that is not dropped is ignored below half the
/// limit in flight. Every sample counts toward the next probe.
#[test]
fn vegas_takes_a_dropped_sample_below_the_no_load_rtt_as_the_no_load_rtt_only() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let vegas = ["v", "20", "1m", "ADAPTIVE", "VEGAS"];
    // Ten leases, taken with 1 to 10 in flight.
    let mut tokens: Vec<String> = (0..10).map(|_| acquire(&mut c, &vegas).1).collect();
    let mut next = || tokens.pop().unwrap_or_default();
    let state = |c: &mut Client| {
        let inspect = c.cmd(&["RL.INSPECT", "v"]);
        [
            "limit",
            "estimated_limit_milli",
            "rtt_noload_us",
            "probe_count",
        ]
        .map(|name| inspect.field(name).int())
    };
    // The first sample (10 in flight) is the no-load RTT.
    assert_eq!(release(&mut c, "v", &next(), &["RTT", "10ms"]), 1);
    assert_eq!(state(&mut c), [20, 20_000, 10_000, 1]);
    // Dropped, below the no-load RTT (9 in flight): the new no-load RTT, the limit unchanged.
    assert_eq!(release(&mut c, "v", &next(), &["RTT", "5ms", "DROPPED"]), 1);
    assert_eq!(state(&mut c), [20, 20_000, 5_000, 2]);
    // Dropped, at the no-load RTT, with 8 in flight (8 × 2 < 20): − log10(20) = − 1.
    assert_eq!(release(&mut c, "v", &next(), &["RTT", "5ms", "DROPPED"]), 1);
    assert_eq!(state(&mut c), [19, 19_000, 5_000, 3]);
    // Not dropped, with 7 in flight (7 × 2 < 19): ignored, but counted toward the probe.
    assert_eq!(release(&mut c, "v", &next(), &["RTT", "50ms"]), 1);
    assert_eq!(state(&mut c), [19, 19_000, 5_000, 4]);
    // A lease that runs out is a dropped sample: one of 2 ms (7 in flight) is below the
    // no-load RTT, and only becomes it.
    let (r, _) = acquire(&mut c, &["v", "20", "2ms", "ADAPTIVE", "VEGAS"]);
    assert_eq!(r, [1, 19, 12, 0, 60_000]);
    c.clock_advance(2);
    assert_eq!(state(&mut c), [19, 19_000, 2_000, 5]);
    // The six leases of 1 m left run out at +1 m: six samples of 60 s, dropped, − 1 each.
    c.clock_advance(60_000 - 2);
    assert_eq!(state(&mut c), [13, 13_000, 2_000, 11]);
}

/// Gradient2 as Netflix's `Gradient2Limit._update`: a sample with fewer than half the limit in
/// flight does not move the limit but still feeds the long-term RTT (and is the short RTT),
/// and DROPPED changes nothing.
#[test]
fn gradient2_samples_below_half_in_flight_still_feed_the_long_term_rtt() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let g2 = ["g", "20", "1m", "ADAPTIVE", "GRADIENT2"];
    let state = |c: &mut Client| {
        let inspect = c.cmd(&["RL.INSPECT", "g"]);
        ["estimated_limit_milli", "short_rtt_us", "long_rtt_us"]
            .map(|name| inspect.field(name).int())
    };
    // Two leases taken alone (1 in flight of 20), the second dropped: the limit stays, the
    // long-term RTT is their mean.
    let (_, t) = acquire(&mut c, &g2);
    assert_eq!(release(&mut c, "g", &t, &["RTT", "10ms"]), 1);
    assert_eq!(state(&mut c), [20_000, 10_000, 10_000]);
    let (_, t) = acquire(&mut c, &g2);
    assert_eq!(release(&mut c, "g", &t, &["RTT", "16ms", "DROPPED"]), 1);
    assert_eq!(state(&mut c), [20_000, 16_000, 13_000]);
    // With 11 in flight, 30 ms: long = (10 + 16 + 30) / 3 = 18.67 ms, gradient = 1.5 × 18.67
    // / 30 = 0.933, limit = 20 × 0.8 + (20 × 0.933 + 4) × 0.2 = 20.533 (from 30 ms alone the
    // gradient would be 1 and the limit 20.8).
    let mut tokens: Vec<String> = (0..11).map(|_| acquire(&mut c, &g2).1).collect();
    let last = tokens.pop().unwrap_or_default();
    assert_eq!(release(&mut c, "g", &last, &["RTT", "30ms"]), 1);
    assert_eq!(state(&mut c), [20_533, 30_000, 18_666]);
}

/// Vegas' probe jitter is drawn from a seed made of the clock reading of the call that made
/// the estimate and the key's count of tokens issued so far: two keys made adaptive at the
/// same instant probe at different counts when one had issued tokens before.
#[test]
fn the_vegas_jitter_seed_mixes_in_the_tokens_issued() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    acquire(&mut c, &["fresh", "20", "1m", "ADAPTIVE", "VEGAS"]);
    for _ in 0..3 {
        acquire(&mut c, &["plain", "20", "1m"]);
    }
    acquire(&mut c, &["plain", "20", "1m", "ADAPTIVE", "VEGAS"]);
    // SplitMix64 from 1700000000000000 (µs) and from 1700000000000000 ^ (3 << 32): jitter
    // 0.85883... and 0.52719..., × 30 × 20 rounded up.
    assert_eq!(field(&mut c, "fresh", "probe_at"), Reply::Int(516));
    assert_eq!(field(&mut c, "plain", "probe_at"), Reply::Int(317));
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let (_, token) = acquire(&mut c, &aimd("k"));
    let before = c.cmd(&["RL.INSPECT", "k"]);
    let rtt = "ERR RTT needs a value: a duration from 1us to 10 years: a number and us, ms, s, m, h or d (a bare number is ms)";
    let cases: [(&[&str], &str); 11] = [
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "MIN", "2"], "ERR MIN and MAX bound an adaptive limit: give them with ADAPTIVE AIMD|VEGAS|GRADIENT2"),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "ADAPTIVE", "AIMD", "MIN", "5", "MAX", "3"], "ERR MIN is above MAX: an adaptive limit stays within MIN <= MAX (without MAX, the default is 200 for AIMD and GRADIENT2, 1000 for VEGAS, or limit if higher)"),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "ADAPTIVE", "CUBIC"], "ERR ADAPTIVE needs a value: AIMD, VEGAS or GRADIENT2"),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "ADAPTIVE"], "ERR ADAPTIVE needs a value: AIMD, VEGAS or GRADIENT2"),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "ADAPTIVE", "AIMD", "ADAPTIVE", "VEGAS"], "ERR ADAPTIVE given more than once"),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "ADAPTIVE", "AIMD", "MIN", "0"], "ERR MIN needs a value: a limit from 1 to the setting ratelimit.concurrency-max-limit"),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "4", "10s", "ADAPTIVE", "AIMD", "MAX", "100001"], "ERR MAX needs a value: a limit from 1 to the setting ratelimit.concurrency-max-limit"),
        (&["RL.CONCURRENCY.RELEASE", "k", &token, "RTT", "0"], rtt),
        (&["RL.CONCURRENCY.RELEASE", "k", &token, "RTT", "1.5ms"], rtt),
        (&["RL.CONCURRENCY.RELEASE", "k", &token, "DROPPED", "DROPPED"], "ERR DROPPED given more than once"),
        (&["RL.CONCURRENCY.RELEASE", "k", &token, "FAST"], "ERR unknown option 'FAST' at argument 3: expected RTT duration or DROPPED, each once"),
    ];
    for (call, error) in cases {
        assert_eq!(c.cmd(call).error(), error, "{call:?}");
        assert_eq!(c.cmd(&["RL.INSPECT", "k"]), before, "{call:?}");
    }
    // RTT and DROPPED on a key that is not adaptive: accepted, and nothing to move.
    let (_, plain) = acquire(&mut c, &["plain", "2", "1m"]);
    assert_eq!(
        release(&mut c, "plain", &plain, &["RTT", "7us", "DROPPED"]),
        1
    );
}

/// Ops on keys of the three algorithms: acquisitions, releases with RTTs and drops, leases
/// that run out, a change of algorithm and of bounds.
fn workload(c: &mut Client) -> Vec<&'static str> {
    c.clock_set(T0_MS);
    let keys = ["a:aimd", "a:vegas", "a:g2"];
    let kinds = ["AIMD", "VEGAS", "GRADIENT2"];
    for (key, kind) in keys.iter().zip(kinds) {
        let args = [*key, "30", "2s", "ADAPTIVE", kind, "MIN", "2", "MAX", "90"];
        let mut held: Vec<String> = Vec::new();
        for i in 0..200u64 {
            c.clock_advance(3);
            let (r, token) = acquire(c, &args);
            if r[0] == 1 {
                held.push(token);
            }
            if i % 3 != 0 && !held.is_empty() {
                let token = held.remove((i as usize * 7) % held.len());
                let rtt = format!("{}us", 500 + (i * 997) % 20_000);
                let mut options = vec!["RTT", rtt.as_str()];
                if i % 11 == 0 {
                    options.push("DROPPED");
                }
                release(c, key, &token, &options);
            }
        }
    }
    // Some run out; then a change of algorithm and one of bounds.
    c.clock_advance(2_500);
    acquire(
        c,
        &[
            "a:aimd", "30", "2s", "ADAPTIVE", "VEGAS", "MIN", "2", "MAX", "90",
        ],
    );
    acquire(
        c,
        &[
            "a:g2",
            "30",
            "2s",
            "ADAPTIVE",
            "GRADIENT2",
            "MIN",
            "5",
            "MAX",
            "12",
        ],
    );
    keys.to_vec()
}

fn inspections(c: &mut Client, keys: &[&str]) -> Vec<Reply> {
    keys.iter().map(|k| c.cmd(&["RL.INSPECT", k])).collect()
}

#[test]
fn adaptive_keys_replicate_persist_and_restore_bit_for_bit() {
    let (primary, replica) = common::replicated(Config::default());
    let mut p = primary.client();
    let mut r = replica.client();
    let keys = workload(&mut p);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let at = T0_MS + 10_000;
    p.clock_set(at);
    r.clock_set(at);
    let state = inspections(&mut p, &keys);
    assert!(
        state.iter().all(|s| s.field("adaptive") != Reply::Nil),
        "{state:?}"
    );
    assert_eq!(inspections(&mut r, &keys), state);
    for key in &keys {
        let digest = p.cmd(&["DEBUG", "DIGEST-VALUE", key]);
        assert_eq!(r.cmd(&["DEBUG", "DIGEST-VALUE", key]), digest, "{key}");
        // DUMP / RESTORE: the same state under another name.
        let Reply::Bulk(dump) = p.cmd(&["DUMP", key]) else {
            panic!("no dump of {key}")
        };
        let copy = format!("{key}:copy");
        let r = p.cmd_bytes(&[b"RESTORE", copy.as_bytes(), b"0", &dump]);
        assert_eq!(r, Reply::Simple("OK".into()));
        // (DEBUG DIGEST-VALUE counts whether the key expires.)
        let at = p.cmd(&["PEXPIRETIME", key]).int().to_string();
        assert_eq!(p.cmd(&["PEXPIREAT", &copy, &at]), Reply::Int(1));
        assert_eq!(p.cmd(&["DEBUG", "DIGEST-VALUE", &copy]), digest, "{key}");
    }
    // An RDB reload.
    assert_eq!(p.cmd(&["DEBUG", "RELOAD"]), Reply::Simple("OK".into()));
    p.clock_set(at);
    assert_eq!(inspections(&mut p, &keys), state);
}

#[test]
fn the_aof_replays_adaptive_keys_to_the_same_state_and_its_rewrite_keeps_it() {
    let mut server = Server::with(common::with_aof(Config::default(), "no"));
    let mut c = server.client();
    let keys = workload(&mut c);
    let at = T0_MS + 10_000;
    c.clock_set(at);
    let before = inspections(&mut c, &keys);
    server.kill();
    server.start_again();
    let mut c = server.client();
    c.clock_set(at);
    assert_eq!(inspections(&mut c, &keys), before, "replayed");
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]).text(),
        "Background append only file rewriting started"
    );
    c.wait_for_aof_rewrite();
    server.kill();
    server.start_again();
    let mut c = server.client();
    c.clock_set(at);
    assert_eq!(inspections(&mut c, &keys), before, "rewritten");
}
