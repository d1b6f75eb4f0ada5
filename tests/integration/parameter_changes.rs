//! docs/algorithms.md, Changing parameters: a parameter change is never in the caller's favour. At
//! one instant, requests
//! under any sequence of parameter sets admit in total at most the largest limit among them,
//! for every algorithm on a plain key and for a policy's rules when RL.POLICY.SET changes
//! them, also while the policy flips under load; and what a replica holds after a change is
//! what its primary holds.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// Whether a reply admitted the request: `allowed` is 1, or for CL.THROTTLE `limited` is 0.
fn admitted(command: &str, reply: &Reply) -> bool {
    let first = match reply {
        Reply::Array(items) => items[0].int(),
        other => panic!("{command}: {other:?}"),
    };
    if command == "CL.THROTTLE" {
        first == 0
    } else {
        first == 1
    }
}

/// Sends each command until it is denied (at most 100 times each), at the one frozen
/// instant; returns the number admitted in all.
fn admitted_until_denied(c: &mut Client, commands: &[&[&str]]) -> i64 {
    let mut total = 0;
    for &command in commands {
        let mut denied = false;
        for _ in 0..100 {
            if admitted(command[0], &c.cmd(command)) {
                total += 1;
            } else {
                denied = true;
                break;
            }
        }
        assert!(denied, "{command:?} never denied");
    }
    total
}

fn frozen() -> (Server, Client) {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    (server, c)
}

/// Issue 12's single-key examples, for every algorithm: a limit of 10 over a second, then
/// the same limit over an hour, then 12 over an hour. Before, GCRA, CL.THROTTLE and
/// RL.LEAKYBUCKET admitted 10 + 9 + 2 = 21 (the TAT, kept as a time, owed a fraction of one
/// hour-long interval); every algorithm now admits 10 and then 2 more, the largest limit,
/// but the token bucket, whose larger capacity adds no token.
#[test]
fn a_longer_period_hands_out_no_units_again_on_any_algorithm() {
    let (_server, mut c) = frozen();
    let cases: [[&[&str]; 3]; 9] = [
        [
            &["RL.GCRA", "gcra", "10", "1", "1s"],
            &["RL.GCRA", "gcra", "10", "1", "1h"],
            &["RL.GCRA", "gcra", "12", "1", "1h"],
        ],
        [
            &["CL.THROTTLE", "cell", "9", "1", "1"],
            &["CL.THROTTLE", "cell", "9", "1", "3600"],
            &["CL.THROTTLE", "cell", "11", "1", "3600"],
        ],
        [
            &["RL.LEAKYBUCKET", "lb", "10", "1", "1s"],
            &["RL.LEAKYBUCKET", "lb", "10", "1", "1h"],
            &["RL.LEAKYBUCKET", "lb", "12", "1", "1h"],
        ],
        [
            &["RL.TOKENBUCKET", "tb", "10", "1", "1s"],
            &["RL.TOKENBUCKET", "tb", "10", "1", "1h"],
            &["RL.TOKENBUCKET", "tb", "12", "1", "1h"],
        ],
        [
            &["RL.TOKENBUCKET", "tbi", "10", "1", "1s", "INTERVAL"],
            &["RL.TOKENBUCKET", "tbi", "10", "1", "1h", "INTERVAL"],
            &["RL.TOKENBUCKET", "tbi", "12", "1", "1h", "INTERVAL"],
        ],
        [
            &["RL.FIXEDWINDOW", "fw", "10", "1s"],
            &["RL.FIXEDWINDOW", "fw", "10", "1h"],
            &["RL.FIXEDWINDOW", "fw", "12", "1h"],
        ],
        [
            &["RL.SLIDINGWINDOW", "sw", "10", "1s"],
            &["RL.SLIDINGWINDOW", "sw", "10", "1h"],
            &["RL.SLIDINGWINDOW", "sw", "12", "1h"],
        ],
        [
            &["RL.SLIDINGLOG", "sl", "10", "1s"],
            &["RL.SLIDINGLOG", "sl", "10", "1h"],
            &["RL.SLIDINGLOG", "sl", "12", "1h"],
        ],
        [
            &["RL.CONCURRENCY.ACQUIRE", "cc", "10", "1s"],
            &["RL.CONCURRENCY.ACQUIRE", "cc", "10", "1h"],
            &["RL.CONCURRENCY.ACQUIRE", "cc", "12", "1h"],
        ],
    ];
    for commands in cases {
        assert_eq!(
            admitted_until_denied(&mut c, &commands[..2]),
            10,
            "{commands:?}"
        );
        let more = if commands[0][0] == "RL.TOKENBUCKET" {
            0
        } else {
            2
        };
        assert_eq!(
            admitted_until_denied(&mut c, &commands[2..]),
            more,
            "{commands:?}"
        );
    }
    // What the GCRA key tells: ten units owed at an hour each, two more since.
    assert_eq!(
        c.cmd(&["RL.GCRA", "gcra", "12", "1", "1h"]).ints(),
        [0, 12, 0, 3_600_000, 43_200_000]
    );
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "cell", "11", "1", "3600"]).ints(),
        [1, 12, 0, 3600, 43_200]
    );
    // And back under the second: the twelve units owed would be twelve seconds' worth once
    // written, but a request of no units writes nothing: the key keeps its hour, fresh in
    // twelve (issue 22: every call converts anew at its own instant, so that is what later
    // calls find). A request of one unit fits once a conversion finds eleven owed, an hour
    // from now on the key's own schedule.
    assert_eq!(
        c.cmd(&["RL.GCRA", "gcra", "12", "1", "1s", "COST", "0"])
            .ints(),
        [1, 12, 0, 0, 43_200_000]
    );
    assert_eq!(
        c.cmd(&["RL.GCRA", "gcra", "12", "1", "1s"]).ints(),
        [0, 12, 0, 3_600_000, 43_200_000]
    );
}

/// Issue 12: FIXEDWINDOW 10 1h, then 11 1h, then 10 1h at one instant; a plain key admits
/// 11, and so does every algorithm's key with the limit going 10, 11, 10.
#[test]
fn a_limit_that_goes_up_and_down_admits_the_largest_once() {
    let (_server, mut c) = frozen();
    let cases: [[&[&str]; 3]; 8] = [
        [
            &["RL.GCRA", "gcra", "10", "1", "1h"],
            &["RL.GCRA", "gcra", "11", "1", "1h"],
            &["RL.GCRA", "gcra", "10", "1", "1h"],
        ],
        [
            &["CL.THROTTLE", "cell", "9", "1", "3600"],
            &["CL.THROTTLE", "cell", "10", "1", "3600"],
            &["CL.THROTTLE", "cell", "9", "1", "3600"],
        ],
        [
            &["RL.LEAKYBUCKET", "lb", "10", "1", "1h"],
            &["RL.LEAKYBUCKET", "lb", "11", "1", "1h"],
            &["RL.LEAKYBUCKET", "lb", "10", "1", "1h"],
        ],
        [
            &["RL.TOKENBUCKET", "tb", "10", "1", "1h"],
            &["RL.TOKENBUCKET", "tb", "11", "1", "1h"],
            &["RL.TOKENBUCKET", "tb", "10", "1", "1h"],
        ],
        [
            &["RL.FIXEDWINDOW", "fw", "10", "1h"],
            &["RL.FIXEDWINDOW", "fw", "11", "1h"],
            &["RL.FIXEDWINDOW", "fw", "10", "1h"],
        ],
        [
            &["RL.SLIDINGWINDOW", "sw", "10", "1h"],
            &["RL.SLIDINGWINDOW", "sw", "11", "1h"],
            &["RL.SLIDINGWINDOW", "sw", "10", "1h"],
        ],
        [
            &["RL.SLIDINGLOG", "sl", "10", "1h"],
            &["RL.SLIDINGLOG", "sl", "11", "1m"],
            &["RL.SLIDINGLOG", "sl", "10", "1h"],
        ],
        [
            &["RL.CONCURRENCY.ACQUIRE", "cc", "10", "1h"],
            &["RL.CONCURRENCY.ACQUIRE", "cc", "11", "1h"],
            &["RL.CONCURRENCY.ACQUIRE", "cc", "10", "1h"],
        ],
    ];
    for commands in cases {
        // The token bucket's larger capacity adds no token: 10 in all; the others 11.
        let expected = if commands[0][0] == "RL.TOKENBUCKET" {
            10
        } else {
            11
        };
        assert_eq!(
            admitted_until_denied(&mut c, &commands),
            expected,
            "{commands:?}"
        );
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// Issue 12: the same through a policy. Each RL.POLICY.SET started the changed rule afresh
/// in every key, so 10, then 11, then 10 admitted 31; the rule now keeps its count.
#[test]
fn a_policy_whose_limit_goes_up_and_down_admits_the_largest_once() {
    let (_server, mut c) = frozen();
    let limit: &[&str] = &["RL.LIMIT", "k", "p"];
    let mut total = 0;
    for n in ["10", "11", "10"] {
        assert_eq!(c.cmd(&["RL.POLICY.SET", "p", "FIXEDWINDOW", n, "1h"]), ok());
        total += admitted_until_denied(&mut c, &[limit]);
    }
    assert_eq!(total, 11);
    // The rule keeps its count under its new limit: 11 of 10, so 0 remaining.
    let hour_left = 3_600_000 - (T0_MS % 3_600_000) as i64;
    assert_eq!(c.cmd(limit).ints(), [0, 10, 0, hour_left, hour_left, 0]);
    // A rule of another algorithm is a new rule: it starts fresh.
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "p", "SLIDINGWINDOW", "10", "1h"]),
        ok()
    );
    assert_eq!(admitted_until_denied(&mut c, &[limit]), 10);
}

const WORKERS: usize = 32;
const REQUESTS_PER_WORKER: usize = 40;

/// Issue 12: 32 connections send RL.LIMIT while another flips the policy between limits 20
/// and 21. Before, every flip started the rule afresh in the key, and 300+ passed. At one
/// frozen instant the rule's count is every unit admitted, so no request passes once it is
/// 21, nor under 20 once it is 20: at most 21 in all, and at least 20 (more requests than
/// that are sent, and one is refused only at 20 or more).
#[test]
fn a_policy_flipping_under_load_admits_at_most_its_largest_limit() {
    let (server, mut c) = frozen();
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "flip", "FIXEDWINDOW", "20", "1h"]),
        ok()
    );
    let start = Arc::new(Barrier::new(WORKERS + 1));
    let done = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (port, start, done) = (server.port, Arc::clone(&start), Arc::clone(&done));
        thread::spawn(move || {
            let mut c = Client::connect(port);
            start.wait();
            let mut flips = 0u64;
            while !done.load(Ordering::Relaxed) || flips < 2 {
                let n = if flips.is_multiple_of(2) { "21" } else { "20" };
                let reply = c.cmd(&["RL.POLICY.SET", "flip", "FIXEDWINDOW", n, "1h"]);
                assert_eq!(reply, Reply::Simple("OK".into()));
                flips += 1;
            }
            flips
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (port, start) = (server.port, Arc::clone(&start));
            thread::spawn(move || {
                let mut c = Client::connect(port);
                start.wait();
                (0..REQUESTS_PER_WORKER)
                    .filter(|_| admitted("RL.LIMIT", &c.cmd(&["RL.LIMIT", "k", "flip"])))
                    .count() as i64
            })
        })
        .collect();
    let raced: i64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    done.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips >= 2, "the policy flipped {flips} times");
    assert!(
        (20..=21).contains(&raced),
        "admitted {raced} while flipping"
    );
    // Under 21, whatever the race left: exactly 21 in all, and the key's count says so.
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "flip", "FIXEDWINDOW", "21", "1h"]),
        ok()
    );
    let after = admitted_until_denied(&mut c, &[&["RL.LIMIT", "k", "flip"]]);
    assert_eq!(raced + after, 21);
    let state = c.cmd(&["RL.INSPECT", "k"]);
    let Reply::Array(rules) = state.field("rules") else {
        panic!("{state:?}")
    };
    assert_eq!(rules[0].field("count"), Reply::Int(21));
}

/// The conversion happens at the primary's clock reading, which RL.REPLAY carries: after
/// changes of parameters and of a policy, the replica holds the primary's state exactly.
#[test]
fn a_replica_holds_the_converted_state_exactly() {
    let (primary, replica) = common::replicated(Config::default());
    let (mut p, mut r) = (primary.client(), replica.client());
    p.clock_set(T0_MS);
    assert_eq!(
        p.cmd(&[
            "RL.POLICY.SET",
            "p",
            "GCRA",
            "10",
            "10",
            "1m",
            "FIXEDWINDOW",
            "10",
            "1h"
        ]),
        ok()
    );
    for i in 0..6u64 {
        // Periods of minutes: the keys' real TTLs must outlast the test on a busy machine.
        let period = ["1m", "10m", "7m"][(i % 3) as usize];
        p.cmd(&["RL.GCRA", "gcra", "10", "3", period, "COST", "2"]);
        p.cmd(&["RL.LEAKYBUCKET", "lb", "10", "3", period, "COST", "2"]);
        p.cmd(&["RL.SLIDINGLOG", "sl", "50", ["1m", "10m"][(i % 2) as usize]]);
        p.cmd(&["RL.LIMIT", "pk", "p"]);
        let rate = (7 + i).to_string();
        assert_eq!(
            p.cmd(&[
                "RL.POLICY.SET",
                "p",
                "GCRA",
                "10",
                &rate,
                "10m",
                "FIXEDWINDOW",
                &rate,
                "1d"
            ]),
            ok()
        );
        p.clock_advance(333);
    }
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let at = (T0_MS + 5000).to_string();
    p.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    r.cmd(&["RL.DEBUG.CLOCK", "SET", &at]);
    for key in ["gcra", "lb", "sl", "pk"] {
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
    }
}
