//! A request that writes nothing (a denial, a DRYRUN, COST 0, a RELEASE of no lease) does
//! not touch its key for other clients: their `WATCH` holds and a RESP3 client tracking the
//! key gets no invalidation (docs/durability.md). Every request that writes does both.

use crate::common::{Client, Reply, Server, T0_MS};

/// Each limiter as `[command, key, args...]` admitting one request per hour; the first
/// request on a fresh key is admitted, the second denied.
const LIMITERS: [&[&str]; 9] = [
    &["RL.GCRA", "k", "1", "1", "1h"],
    &["RL.TOKENBUCKET", "k", "1", "1", "1h"],
    &["RL.LEAKYBUCKET", "k", "1", "1", "1h"],
    &["RL.FIXEDWINDOW", "k", "1", "1h"],
    &["RL.SLIDINGWINDOW", "k", "1", "1h"],
    &["RL.SLIDINGLOG", "k", "1", "1h"],
    &["CL.THROTTLE", "k", "0", "1", "3600"],
    &["RL.LIMIT", "k", "one"],
    &["RL.CONCURRENCY.ACQUIRE", "k", "1", "1h"],
];

fn with(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// The requests on `base`'s key (already holding one admitted request) that write nothing.
fn no_writes(base: &[&str]) -> Vec<Vec<String>> {
    let mut requests = vec![with(base, &[])];
    match base[0] {
        // redis-cell's syntax: a quantity, no options.
        "CL.THROTTLE" => {
            requests.push(with(base, &["0"]));
            requests.extend(no_refunds());
        }
        "RL.CONCURRENCY.ACQUIRE" => {
            requests.push(with(base, &["DRYRUN"]));
            requests.push(vec![
                "RL.CONCURRENCY.RELEASE".into(),
                "k".into(),
                "no-such-lease".into(),
            ]);
        }
        _ => {
            requests.push(with(base, &["DRYRUN"]));
            requests.push(with(base, &["COST", "0"]));
            // A partial grant of nothing is a denial; one under DRYRUN writes nothing.
            requests.push(with(base, &["ATMOST", "3"]));
            requests.push(with(base, &["ATMOST", "3", "DRYRUN"]));
            requests.extend(no_refunds());
        }
    }
    requests.push(vec!["RL.INSPECT".into(), "k".into()]);
    requests
}

/// The refunds that give back nothing or only say what they would: 0 units, a DRYRUN, a
/// missing key.
fn no_refunds() -> Vec<Vec<String>> {
    [["k", "0", ""], ["k", "5", "DRYRUN"], ["missing", "5", ""]]
        .iter()
        .map(|args| {
            let mut request = vec!["RL.REFUND".to_string()];
            request.extend(args.iter().filter(|a| !a.is_empty()).map(|a| a.to_string()));
            request
        })
        .collect()
}

fn send(c: &mut Client, request: &[String]) -> Reply {
    let args: Vec<&str> = request.iter().map(String::as_str).collect();
    c.cmd(&args)
}

fn setup() -> (Server, Client, Client) {
    let server = Server::start();
    let (mut a, mut b) = (server.client(), server.client());
    a.clock_set(T0_MS);
    assert_eq!(
        a.cmd(&["RL.POLICY.SET", "one", "GCRA", "1", "1", "1h"]),
        Reply::Simple("OK".into())
    );
    b.cmd(&["HELLO", "3"]);
    (server, a, b)
}

/// Runs `request` from `a` while `b` WATCHes `k`; whether `b`'s EXEC was aborted.
fn aborts_watch(a: &mut Client, b: &mut Client, request: &[String]) -> (bool, Reply) {
    assert_eq!(b.cmd(&["WATCH", "k"]), Reply::Simple("OK".into()));
    let reply = send(a, request);
    assert_eq!(b.cmd(&["MULTI"]), Reply::Simple("OK".into()));
    assert_eq!(b.cmd(&["PING"]), Reply::Simple("QUEUED".into()));
    let exec = b.cmd(&["EXEC"]);
    match exec {
        Reply::Nil => (true, reply),
        Reply::Array(ref items) if items == &[Reply::Simple("PONG".into())] => (false, reply),
        other => panic!("EXEC replied {other:?}"),
    }
}

/// Runs `request` from `a` while `b` (RESP3, tracking on) has `k` cached; whether `b` was
/// told to invalidate it.
fn invalidates(a: &mut Client, b: &mut Client, request: &[String]) -> (bool, Reply) {
    drain(b);
    // Reading the key makes the server remember it for `b` (again: an invalidation forgets).
    assert!(!b.cmd(&["RL.INSPECT", "k"]).is_error());
    let reply = send(a, request);
    // A push sent for the request arrives before the reply to a later PING.
    match b.cmd(&["PING"]) {
        Reply::Simple(pong) if pong == "PONG" => (false, reply),
        Reply::Array(push) => {
            assert_eq!(
                push,
                vec![
                    Reply::Bulk(b"invalidate".to_vec()),
                    Reply::Array(vec![Reply::Bulk(b"k".to_vec())])
                ]
            );
            assert_eq!(b.read(), Reply::Simple("PONG".into()));
            (true, reply)
        }
        other => panic!("PING replied {other:?}"),
    }
}

/// Reads what was pushed to `b` up to the reply to a PING.
fn drain(b: &mut Client) {
    b.send(&[b"PING"]);
    while b.read() != Reply::Simple("PONG".into()) {}
}

#[test]
fn a_request_that_writes_nothing_aborts_no_watch() {
    let (_server, mut a, mut b) = setup();
    for base in LIMITERS {
        a.cmd(&["DEL", "k"]);
        let (aborted, reply) = aborts_watch(&mut a, &mut b, &with(base, &[]));
        assert!(aborted, "{base:?} admitted on a fresh key: {reply:?}");
        for request in no_writes(base) {
            let (aborted, reply) = aborts_watch(&mut a, &mut b, &request);
            assert!(!reply.is_error(), "{request:?}: {reply:?}");
            assert!(!aborted, "{request:?} wrote nothing but aborted a WATCH");
        }
    }
}

#[test]
fn a_request_that_writes_nothing_invalidates_no_tracked_key() {
    let (_server, mut a, mut b) = setup();
    assert_eq!(
        b.cmd(&["CLIENT", "TRACKING", "on"]),
        Reply::Simple("OK".into())
    );
    for base in LIMITERS {
        a.cmd(&["DEL", "k"]);
        let (told, reply) = invalidates(&mut a, &mut b, &with(base, &[]));
        assert!(told, "{base:?} admitted on a fresh key: {reply:?}");
        for request in no_writes(base) {
            let (told, reply) = invalidates(&mut a, &mut b, &request);
            assert!(!reply.is_error(), "{request:?}: {reply:?}");
            assert!(
                !told,
                "{request:?} wrote nothing but invalidated a tracked key"
            );
        }
    }
}

#[test]
fn every_request_that_writes_aborts_a_watch_and_invalidates() {
    let (_server, mut a, mut b) = setup();
    let mut tracking = {
        let port = _server.port;
        let mut t = Client::connect(port);
        t.cmd(&["HELLO", "3"]);
        assert_eq!(
            t.cmd(&["CLIENT", "TRACKING", "on"]),
            Reply::Simple("OK".into())
        );
        t
    };
    let acquire = |a: &mut Client| a.cmd(&["RL.CONCURRENCY.ACQUIRE", "k", "2", "1h", "ID", "t"]);
    // Each: what sets the key up, then the request that writes.
    let cases: Vec<(Vec<Vec<String>>, Vec<String>)> = vec![
        // An admitted request on a key that holds state.
        (
            vec![with(&["RL.GCRA", "k", "5", "1", "1h"], &[])],
            with(&["RL.GCRA", "k", "5", "1", "1h"], &[]),
        ),
        // A denial that starts a BLOCK.
        (
            vec![with(LIMITERS[0], &[])],
            with(LIMITERS[0], &["BLOCK", "1m"]),
        ),
        // RL.LIMIT admitted on a key that holds its state.
        (vec![], with(&["RL.LIMIT", "k", "one"], &[])),
        // A lease released.
        (
            vec![],
            vec!["RL.CONCURRENCY.RELEASE".into(), "k".into(), "t".into()],
        ),
        // A refund that gives back, and a partial grant.
        (
            vec![with(&["RL.GCRA", "k", "5", "1", "1h"], &["COST", "3"])],
            vec!["RL.REFUND".into(), "k".into(), "2".into()],
        ),
        (
            vec![with(&["RL.GCRA", "k", "5", "1", "1h"], &["COST", "3"])],
            with(&["RL.GCRA", "k", "5", "1", "1h"], &["ATMOST", "9"]),
        ),
    ];
    for (setup, request) in cases {
        a.cmd(&["DEL", "k"]);
        if request[0] == "RL.CONCURRENCY.RELEASE" {
            assert!(!acquire(&mut a).is_error());
        }
        for s in &setup {
            send(&mut a, s);
        }
        let (aborted, reply) = aborts_watch(&mut a, &mut b, &request);
        assert!(!reply.is_error(), "{request:?}: {reply:?}");
        assert!(aborted, "{request:?} wrote but aborted no WATCH");
        // Again, for the tracking client.
        a.cmd(&["DEL", "k"]);
        if request[0] == "RL.CONCURRENCY.RELEASE" {
            acquire(&mut a);
        }
        for s in &setup {
            send(&mut a, s);
        }
        let (told, reply) = invalidates(&mut a, &mut tracking, &request);
        assert!(!reply.is_error(), "{request:?}: {reply:?}");
        assert!(told, "{request:?} wrote but invalidated nothing");
    }
}
