//! Redis Cluster: three primaries on loopback ports, the module on each. Every command takes
//! one key and declares it, so the cluster routes it to the key's slot like any built-in
//! command; resharding moves limiter keys with their state (MIGRATE: DUMP and RESTORE).

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{node_id, ClusterClient, Reply, Server, T0_MS};

/// Three primaries, no replicas.
fn cluster() -> Vec<Server> {
    common::cluster(3, 0)
}

/// The same request on every algorithm, for one key each.
fn requests(i: usize) -> Vec<Vec<String>> {
    let key = |kind: &str| format!("{kind}:{i}");
    [
        vec![
            "RL.GCRA".into(),
            key("gcra"),
            "3".into(),
            "1".into(),
            "1h".into(),
        ],
        vec![
            "CL.THROTTLE".into(),
            key("cell"),
            "2".into(),
            "1".into(),
            "3600".into(),
        ],
        vec![
            "RL.TOKENBUCKET".into(),
            key("tb"),
            "3".into(),
            "1".into(),
            "1h".into(),
        ],
        vec![
            "RL.LEAKYBUCKET".into(),
            key("lb"),
            "3".into(),
            "1".into(),
            "1h".into(),
        ],
        vec!["RL.FIXEDWINDOW".into(), key("fw"), "3".into(), "1d".into()],
        vec![
            "RL.SLIDINGWINDOW".into(),
            key("sw"),
            "3".into(),
            "1d".into(),
        ],
        vec!["RL.SLIDINGLOG".into(), key("sl"), "3".into(), "1h".into()],
        vec![
            "RL.WARMUP".into(),
            key("wu"),
            "1".into(),
            "1h".into(),
            "1h".into(),
        ],
    ]
    .into()
}

fn send(c: &mut ClusterClient, args: &[String]) -> Vec<i64> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match c.cmd(&args) {
        Reply::Array(items) => items.iter().map(Reply::int).collect(),
        other => panic!("{args:?}: {other:?}"),
    }
}

#[test]
fn limits_hold_across_a_cluster_and_keys_keep_state_through_a_reshard() {
    let nodes = cluster();
    for node in &nodes {
        node.client().clock_set(T0_MS);
    }
    let mut c = ClusterClient::new(nodes[0].port);
    const KEYS: usize = 60;
    // Each key admits exactly three, then denies (a warm-up key one, then spaces them):
    // on whichever node holds its slot.
    for i in 0..KEYS {
        for args in requests(i) {
            let admitted: Vec<bool> = (0..4)
                .map(|_| {
                    let r = send(&mut c, &args);
                    if args[0] == "CL.THROTTLE" {
                        r[0] == 0
                    } else {
                        r[0] == 1
                    }
                })
                .collect();
            let expected = if args[0] == "RL.WARMUP" {
                [true, false, false, false]
            } else {
                [true, true, true, false]
            };
            assert_eq!(admitted, expected, "{args:?}");
        }
    }
    // The keys are spread over the three nodes.
    for node in &nodes {
        let keys = node.client().cmd(&["DBSIZE"]).int();
        assert!(keys > 30, "node {} holds {keys} keys", node.port);
    }
    let inspect_all = |c: &mut ClusterClient| -> Vec<Reply> {
        (0..KEYS)
            .flat_map(requests)
            .map(|args| c.cmd(&["RL.INSPECT", &args[1]]))
            .collect()
    };
    let before = inspect_all(&mut c);

    // Reshard a third of node 0's slots to node 1 while clients keep sending (to keys of
    // their own, so the state of the keys above stays as it was).
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let load: Vec<_> = (0..4)
        .map(|t| {
            let (stop, sent, entry) = (Arc::clone(&stop), Arc::clone(&sent), nodes[0].port);
            std::thread::spawn(move || {
                let mut c = ClusterClient::new(entry);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("load:{t}:{}", i % 500);
                    let r = c.cmd(&["RL.GCRA", &key, "1000", "1", "1h"]);
                    assert!(matches!(r, Reply::Array(_)), "{r:?}");
                    sent.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    // Paced, up to a thousand requests a second a client, as in
                    // cluster_policies.rs: unpaced, the four took both cores for the whole
                    // reshard (7.4 of this test's 7.7 s), slowing the reshard they run beside.
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    let (from, to) = (node_id(&nodes[0]), node_id(&nodes[1]));
    let out = std::process::Command::new("redis-cli")
        .args([
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{}", nodes[0].port),
        ])
        .args([
            "--cluster-from",
            &from,
            "--cluster-to",
            &to,
            "--cluster-slots",
            "1800",
        ])
        .args(["--cluster-yes", "--cluster-pipeline", "50"])
        .output()
        .expect("redis-cli --cluster reshard");
    stop.store(true, Ordering::Relaxed);
    for handle in load {
        handle.join().expect("a load client failed");
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        sent.load(Ordering::Relaxed) > 100,
        "no load while resharding"
    );

    // Every key kept its state, wherever it lives now.
    let mut c = ClusterClient::new(nodes[2].port);
    assert_eq!(inspect_all(&mut c), before);
    // And goes on limiting from it: the fourth request is still denied.
    for i in 0..KEYS {
        for args in requests(i) {
            let r = send(&mut c, &args);
            let admitted = if args[0] == "CL.THROTTLE" {
                r[0] == 0
            } else {
                r[0] == 1
            };
            assert!(!admitted, "{args:?} admitted after the reshard");
        }
    }
}
