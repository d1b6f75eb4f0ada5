//! Many clients on one key: the module admits exactly the limit, never one more, for every
//! algorithm; a client-side read-then-write limiter, by contrast, admits far more.

use std::sync::{Arc, Barrier};
use std::thread;

use crate::common::{Client, Reply, Server, T0_MS};

const CLIENTS: usize = 16;
const REQUESTS_PER_CLIENT: usize = 40;
const LIMIT: i64 = 100;

/// 16 connections send 40 requests each, pipelined in bursts, to one key with the clock
/// frozen; returns the number admitted.
fn hammer(server: &Server, args: &[&str]) -> i64 {
    let start = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let port = server.port;
            let start = Arc::clone(&start);
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            thread::spawn(move || {
                let mut c = Client::connect(port);
                let bytes: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
                start.wait();
                for _ in 0..REQUESTS_PER_CLIENT {
                    c.send(&bytes);
                }
                (0..REQUESTS_PER_CLIENT)
                    .map(|_| match c.read() {
                        Reply::Array(items) => items[0].int(),
                        other => panic!("{other:?}"),
                    })
                    .sum::<i64>()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

#[test]
fn exactly_the_limit_is_admitted_under_contention() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let limit = LIMIT.to_string();
    let l = limit.as_str();
    let cases: [&[&str]; 7] = [
        &["RL.GCRA", "gcra", l, "1", "1h"],
        &["CL.THROTTLE", "cell", "99", "1", "3600"],
        &["RL.TOKENBUCKET", "tb", l, "1", "1h"],
        &["RL.LEAKYBUCKET", "lb", l, "1", "1h"],
        &["RL.FIXEDWINDOW", "fw", l, "1d"],
        &["RL.SLIDINGWINDOW", "sw", l, "1d"],
        &["RL.SLIDINGLOG", "sl", l, "1h"],
    ];
    for args in cases {
        let admitted = hammer(&server, args);
        if args[0] == "CL.THROTTLE" {
            // redis-cell's first field is "limited": count the admitted ones instead.
            let total = (CLIENTS * REQUESTS_PER_CLIENT) as i64;
            assert_eq!(total - admitted, LIMIT, "{args:?}");
        } else {
            assert_eq!(admitted, LIMIT, "{args:?}");
        }
    }
}

/// The usual client-side limiter: GET the count, compare, SET it back. Sixteen requests that
/// arrive together all read the same count before any writes it back (the barrier makes the
/// interleaving certain rather than likely), so each of them is admitted.
#[test]
fn a_read_then_write_limiter_admits_more_than_its_limit() {
    let server = Server::start();
    let rounds = 10;
    let limit = 5;
    let read = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let port = server.port;
            let read = Arc::clone(&read);
            thread::spawn(move || {
                let mut c = Client::connect(port);
                let mut admitted = 0;
                for _ in 0..rounds {
                    let count = match c.cmd(&["GET", "naive"]) {
                        Reply::Bulk(b) => String::from_utf8(b).unwrap().parse::<i64>().unwrap(),
                        _ => 0,
                    };
                    read.wait();
                    if count < limit {
                        c.cmd(&["SET", "naive", &(count + 1).to_string()]);
                        admitted += 1;
                    }
                    read.wait();
                }
                admitted
            })
        })
        .collect();
    let admitted: i64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    // Each round all 16 read the same count and all pass: 5 rounds × 16 = 80, for a limit of 5.
    assert_eq!(admitted, 80);
}
