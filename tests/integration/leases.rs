//! RL.CONCURRENCY.ACQUIRE / RELEASE against real servers: at most `limit` leases held.

use crate::common;

use std::sync::{Arc, Barrier};

use crate::common::{Client, Reply, Server, T0_MS};

fn acquire(c: &mut Client, args: &[&str]) -> (Vec<i64>, Reply) {
    let mut call = vec!["RL.CONCURRENCY.ACQUIRE"];
    call.extend_from_slice(args);
    match c.cmd(&call) {
        Reply::Array(items) => {
            let ints = items[..5].iter().map(Reply::int).collect();
            (ints, items[5].clone())
        }
        other => panic!("{call:?}: {other:?}"),
    }
}

#[test]
fn leases_are_held_released_renewed_and_end_by_themselves() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let (r, a) = acquire(&mut c, &["jobs", "2", "30s"]);
    assert_eq!(
        (r, a.text()),
        (vec![1, 2, 1, 0, 30_000], "60a24181e4000-0".to_string())
    );
    c.clock_advance(1000);
    let (r, b) = acquire(&mut c, &["jobs", "2", "30s"]);
    assert_eq!(r, [1, 2, 0, 0, 30_000]);
    // Full: the first lease ends in 29 s.
    assert_eq!(
        acquire(&mut c, &["jobs", "2", "30s"]),
        (vec![0, 2, 0, 29_000, 30_000], Reply::Nil)
    );
    // Releasing an unknown token answers 0 and changes nothing.
    let state = c.cmd(&["RL.INSPECT", "jobs"]);
    assert_eq!(
        c.cmd(&["RL.CONCURRENCY.RELEASE", "jobs", "nope"]),
        Reply::Int(0)
    );
    assert_eq!(
        c.cmd(&["RL.CONCURRENCY.RELEASE", "missing", "nope"]),
        Reply::Int(0)
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "jobs"]), state);
    // Releasing a held one frees its slot.
    assert_eq!(
        c.cmd(&["RL.CONCURRENCY.RELEASE", "jobs", &b.text()]),
        Reply::Int(1)
    );
    assert_eq!(
        c.cmd(&["RL.CONCURRENCY.RELEASE", "jobs", &b.text()]),
        Reply::Int(0)
    );
    let (r, _) = acquire(&mut c, &["jobs", "2", "30s", "ID", "worker-7"]);
    assert_eq!(r, [1, 2, 0, 0, 30_000]);
    // The same token renews its own lease, without a second slot.
    c.clock_advance(10_000);
    let (r, t) = acquire(&mut c, &["jobs", "2", "30s", "ID", "worker-7"]);
    assert_eq!(
        (r, t.text()),
        (vec![1, 2, 0, 0, 30_000], "worker-7".to_string())
    );
    // A crashed holder's lease ends by itself: a's at T0 + 30 s.
    c.clock_set(T0_MS + 30_000);
    let (r, _) = acquire(&mut c, &["jobs", "2", "30s", "DRYRUN"]);
    assert_eq!(r[..3], [1, 2, 0]);
    assert_eq!(c.cmd(&["RL.INSPECT", "jobs"]).field("held"), Reply::Int(1));
    assert_eq!(
        c.cmd(&["RL.CONCURRENCY.RELEASE", "jobs", &a.text()]),
        Reply::Int(0),
        "an ended lease is not released again"
    );
    let e = c
        .cmd(&["RL.CONCURRENCY.ACQUIRE", "jobs", "2", "30s", "ID"])
        .error();
    assert_eq!(e, "ERR ID needs a value: a token of 1 to 256 bytes");
    let e = c
        .cmd(&["RL.CONCURRENCY.ACQUIRE", "jobs", "0", "30s"])
        .error();
    assert_eq!(
        e,
        "ERR invalid limit: expected an integer from 1 to 100000 (the module setting \
         ratelimit.concurrency-max-limit bounds it)"
    );
    c.cmd(&["HELLO", "3"]);
    match c.cmd(&["RL.CONCURRENCY.ACQUIRE", "other", "1", "1m", "ID", "x"]) {
        Reply::Map(pairs) => assert_eq!(
            pairs[5],
            (Reply::Bulk(b"token".to_vec()), Reply::Bulk(b"x".to_vec()))
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sixteen_clients_hold_exactly_the_limit() {
    let server = Server::start();
    server.client().clock_set(T0_MS);
    let start = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (port, start) = (server.port, Arc::clone(&start));
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                start.wait();
                let mut tokens = Vec::new();
                for _ in 0..10 {
                    if let (r, Reply::Bulk(t)) = acquire(&mut c, &["pool", "5", "1h"]) {
                        assert_eq!(r[0], 1);
                        tokens.push(t);
                    }
                }
                tokens
            })
        })
        .collect();
    let mut tokens: Vec<Vec<u8>> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(tokens.len(), 5);
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 5, "tokens are unique");
}

#[test]
fn leases_replicate_with_their_generated_tokens_and_survive_a_reload() {
    let (primary, replica) = common::replicated(common::Config::default());
    let mut r = replica.client();
    let mut p = primary.client();
    p.clock_set(T0_MS);
    let (_, first) = acquire(&mut p, &["l", "3", "1h"]);
    p.clock_advance(5);
    acquire(&mut p, &["l", "3", "1h", "ID", "mine"]);
    acquire(&mut p, &["l", "3", "1h"]);
    assert_eq!(
        p.cmd(&["RL.CONCURRENCY.RELEASE", "l", &first.text()]),
        Reply::Int(1)
    );
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    r.clock_set(T0_MS + 5);
    p.clock_set(T0_MS + 5);
    let state = p.cmd(&["RL.INSPECT", "l"]);
    assert_eq!(state.field("held"), Reply::Int(2));
    assert_eq!(r.cmd(&["RL.INSPECT", "l"]), state);
    assert_eq!(
        r.cmd(&["DEBUG", "DIGEST-VALUE", "l"]),
        p.cmd(&["DEBUG", "DIGEST-VALUE", "l"])
    );
    assert_eq!(r.cmd(&["PEXPIRETIME", "l"]), p.cmd(&["PEXPIRETIME", "l"]));
    // The replica releases the same generated token the primary handed out.
    let (_, third) = acquire(&mut p, &["l", "3", "1h"]);
    assert_eq!(
        p.cmd(&["RL.CONCURRENCY.RELEASE", "l", &third.text()]),
        Reply::Int(1)
    );
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let state = p.cmd(&["RL.INSPECT", "l"]);
    assert_eq!(state.field("issued"), Reply::Int(3));
    assert_eq!(r.cmd(&["RL.INSPECT", "l"]), state);
    assert_eq!(p.cmd(&["DEBUG", "RELOAD"]), Reply::Simple("OK".into()));
    p.clock_set(T0_MS + 5);
    assert_eq!(p.cmd(&["RL.INSPECT", "l"]), state);
}

/// `limit` is bounded by the setting `concurrency-max-limit` (default 100000, 1 to 10^7, a
/// load argument or CONFIG SET), so a key never holds more leases than it. Like the sliding
/// log's cap: a lowered cap leaves the keys as they are, refuses a request whose limit is
/// above it, and applies to clients only (a replica replays what its primary admitted).
#[test]
fn the_lease_cap_bounds_limit_and_a_lowered_cap_keeps_what_is_held() {
    let capped = |max: u64| {
        format!(
            "ERR invalid limit: expected an integer from 1 to {max} (the module setting \
             ratelimit.concurrency-max-limit bounds it)"
        )
    };
    let (primary, replica) = common::replicated(common::Config::default().module_args(&[
        "debug-clock",
        "yes",
        "concurrency-max-limit",
        "1",
    ]));
    let mut c = primary.client();
    c.clock_set(T0_MS);
    let call = ["RL.CONCURRENCY.ACQUIRE", "k", "100001", "1m"];
    assert_eq!(c.cmd(&call).error(), capped(100_000));
    assert_eq!(
        acquire(&mut c, &["k", "100000", "1m"]).0,
        [1, 100_000, 99_999, 0, 60_000]
    );
    let set = |c: &mut Client, value: &str| {
        c.cmd(&["CONFIG", "SET", "ratelimit.concurrency-max-limit", value])
    };
    assert_eq!(set(&mut c, "3"), Reply::Simple("OK".into()));
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "ratelimit.concurrency-max-limit"])
            .render(),
        "[ratelimit.concurrency-max-limit 3]"
    );
    assert_eq!(
        c.cmd(&["RL.CONCURRENCY.ACQUIRE", "k", "4", "1m"]).error(),
        capped(3)
    );
    for _ in 0..3 {
        assert_eq!(acquire(&mut c, &["held", "3", "1m"]).0[0], 1);
    }
    // Lowered: the three leases stay; a limit above the cap is refused and changes nothing.
    assert_eq!(set(&mut c, "2"), Reply::Simple("OK".into()));
    let state = c.cmd(&["RL.INSPECT", "held"]);
    assert_eq!(state.field("held"), Reply::Int(3));
    let e = c.cmd(&["RL.CONCURRENCY.ACQUIRE", "held", "3", "1m", "ID", "x"]);
    assert_eq!(e.error(), capped(2));
    assert_eq!(c.cmd(&["RL.INSPECT", "held"]), state);
    assert_eq!(
        acquire(&mut c, &["held", "2", "1m"]),
        (vec![0, 2, 0, 60_000, 60_000], Reply::Nil)
    );
    // Out of range: refused by CONFIG SET.
    for bad in ["0", "10000001", "05"] {
        assert!(set(&mut c, bad).is_error(), "{bad}");
    }
    // The replica, loaded with a cap of 1, holds what the primary admitted.
    assert_eq!(c.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let mut r = replica.client();
    r.clock_set(T0_MS);
    assert_eq!(r.cmd(&["RL.INSPECT", "held"]), state);
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "ratelimit.concurrency-max-limit"])
            .render(),
        "[ratelimit.concurrency-max-limit 1]"
    );
}
