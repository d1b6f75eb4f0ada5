//! Policies that follow a Redis Cluster (docs/cluster.md, Policies): set or deleted on one
//! node, they reach every node, replicas included, over the cluster bus; a node added to the
//! cluster, or stopped while they changed, catches up by itself; two nodes changing one
//! policy at once end with the same winner everywhere; a damaged or forged message is
//! refused and logged. Real clusters of real servers, made with redis-cli.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::bus::{changes_message, fnv, wall_ms, Content, Forged};
use crate::common::{
    cluster, cluster_config, cluster_with, node_id, policies_converged as converged,
    policies_info as info, policy_on, wait_for_cluster_agreement, wait_for_cluster_ok,
    ClusterClient, Reply, Server,
};

const API: [&str; 8] = [
    "RL.POLICY.SET",
    "api",
    "GCRA",
    "5",
    "5",
    "1s",
    "FIXEDWINDOW",
    "100",
];

fn set_api(node: &Server) {
    let mut words = API.to_vec();
    words.push("1m");
    assert_eq!(node.client().cmd(&words), Reply::Simple("OK".into()));
}

#[test]
fn a_policy_set_or_deleted_on_one_node_reaches_every_node_replicas_included() {
    let nodes = cluster(3, 1);
    let all: Vec<&Server> = nodes.iter().collect();
    for node in &all {
        assert_eq!(info(node, "cluster_exchange"), "1");
    }
    set_api(&nodes[0]);
    let took = converged(&all, Duration::from_secs(5), |n| {
        !policy_on(n, "api").is_empty()
    });
    let words = policy_on(&nodes[0], "api");
    for node in &all {
        assert_eq!(policy_on(node, "api"), words);
        assert_eq!(info(node, "policies"), "1");
    }
    eprintln!("set on one primary, on all six nodes after {took:?}");
    // RL.LIMIT on keys of every slot range: no node lacks the policy.
    let mut c = ClusterClient::new(nodes[1].port);
    for i in 0..60 {
        let key = format!("user:{i}");
        let r = c.cmd(&["RL.LIMIT", &key, "api"]);
        assert_eq!(r.ints()[..3], [1, 5, 4], "{key}: {r:?}");
    }
    // Changed on a replica's primary's peer, deleted on another: the same everywhere.
    assert_eq!(
        nodes[2]
            .client()
            .cmd(&["RL.POLICY.SET", "web", "SLIDINGWINDOW", "10", "1m"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(nodes[1].client().cmd(&["RL.POLICY.DEL", "api"]).int(), 1);
    converged(&all, Duration::from_secs(5), |n| {
        policy_on(n, "api").is_empty() && !policy_on(n, "web").is_empty()
    });
    for node in &all {
        assert_eq!(info(node, "policies"), "1");
        assert_eq!(info(node, "policy_tombstones"), "1");
        assert_eq!(info(node, "cluster_messages_refused"), "0");
    }
}

/// A replica's full sync (a replica just added, restarted without its data, or cut off past
/// its primary's backlog) loads the primary's table as it was when the primary forked. A change
/// that reached the replica over the bus after that fork is not in it: the replica keeps it (and
/// a deletion's tombstone), the newer version winning as for every change from elsewhere, rather
/// than holding the older table until the primary's stream or an exchange brings it back (a
/// policy gone from the replica, or a deleted one back, for that while). To hold that moment,
/// the primary here never learns the change: only the replica takes its version (its
/// `policy-max-ahead` is larger; the other nodes refuse it), so that neither the primary's copy,
/// nor its stream, nor an exchange can bring it back.
#[test]
fn a_replicas_full_sync_keeps_what_it_learned_that_its_primarys_copy_lacks() {
    let nodes = cluster(3, 1);
    let all: Vec<&Server> = nodes.iter().collect();
    set_api(&nodes[0]);
    converged(&all, Duration::from_secs(5), |n| {
        !policy_on(n, "api").is_empty()
    });
    let replica = nodes
        .iter()
        .find(|n| n.client().info_field("replication", "role") == "slave")
        .expect("a replica");
    let primary_port: u16 = replica
        .client()
        .info_field("replication", "master_port")
        .parse()
        .unwrap();
    let primary = nodes.iter().find(|n| n.port == primary_port).unwrap();
    let forger = nodes
        .iter()
        .find(|n| n.port != primary.port && n.port != replica.port)
        .unwrap();
    // Its first sync loaded (a primary may list a replica online before it has: Valkey 9.1
    // did), so that the sync below is the one that loads the copy.
    let link_up = |n: &Server| n.client().info_field("replication", "master_link_status") == "up";
    let deadline = Instant::now() + Duration::from_secs(20);
    while !link_up(replica) {
        assert!(Instant::now() < deadline, "the replica's first sync");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Ten minutes ahead: the replica takes it, every other node refuses it.
    assert_eq!(
        replica
            .client()
            .cmd(&["CONFIG", "SET", "ratelimit.policy-max-ahead", "3600"]),
        Reply::Simple("OK".into())
    );
    let (now, sender) = (wall_ms(), node_id(forger));
    let ahead = (now + 600_000) << 16;
    let message = changes_message(&[
        Forged::live("fresh", ahead, &sender, &["GCRA", "7", "7", "1s"]),
        Forged {
            name: "api".into(),
            clock: ahead,
            node: &sender,
            content: Content::Tombstone(now),
        },
    ]);
    // Sent again until the replica holds it: a server may drop a module's message that is the
    // first on a new bus link (docs/cluster.md), and no exchange sends this one again.
    let target = node_id(replica);
    let deadline = Instant::now() + Duration::from_secs(10);
    while policy_on(replica, "fresh").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the replica never took the change"
        );
        let r = forger
            .client()
            .cmd_bytes(&[b"RL.DEBUG.CLUSTERMSG", target.as_bytes(), &message]);
        assert_eq!(r.int(), 1, "sent");
        let sent = Instant::now();
        while policy_on(replica, "fresh").is_empty() && sent.elapsed() < Duration::from_millis(500)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(policy_on(replica, "api"), "");
    assert_eq!(policy_on(primary, "fresh"), "");
    assert!(!policy_on(primary, "api").is_empty());
    // A full sync: the primary takes a new replication id and drops the replica's link, so
    // that the replica cannot continue where it was and loads the primary's copy.
    let full_syncs =
        |n: &Server| -> u64 { n.client().info_field("stats", "sync_full").parse().unwrap() };
    let before = full_syncs(primary);
    let mut c = primary.client();
    assert_eq!(
        c.cmd(&["DEBUG", "CHANGE-REPL-ID"]),
        Reply::Simple("OK".into())
    );
    assert!(c.cmd(&["CLIENT", "KILL", "TYPE", "replica"]).int() >= 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while full_syncs(primary) == before || !link_up(replica) {
        assert!(Instant::now() < deadline, "no full sync of the replica");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Loaded: what it learned is still there, the deletion too.
    assert_eq!(policy_on(replica, "fresh"), "[GCRA 7 7 1s]");
    assert_eq!(policy_on(replica, "api"), "");
    assert_eq!(info(replica, "policies"), "1");
    assert_eq!(info(replica, "policy_tombstones"), "1");
}

#[test]
fn a_node_added_and_resharded_under_rl_limit_traffic_answers_every_request() {
    let nodes = cluster(3, 0);
    set_api(&nodes[0]);
    converged(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(5),
        |n| !policy_on(n, "api").is_empty(),
    );
    // Traffic on RL.LIMIT from four clients, all through, until the reshard is over.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let load: Vec<_> = (0..4)
        .map(|t| {
            let (stop, sent, errors) = (Arc::clone(&stop), Arc::clone(&sent), Arc::clone(&errors));
            let entry = nodes[0].port;
            std::thread::spawn(move || {
                let mut c = ClusterClient::new(entry);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("load:{t}:{}", i % 300);
                    match c.cmd(&["RL.LIMIT", &key, "api"]) {
                        Reply::Array(_) | Reply::Map(_) => {}
                        other => {
                            eprintln!("{key}: {other:?}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    // Paced, up to a thousand requests a second per client: unpaced, the four
                    // took both cores for the whole reshard (18 s of the system's CPU, most of
                    // this file's), slowing the reshard they run beside. Nothing waits on it.
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    // A fourth node, empty: added, then given 1000 slots of the first.
    let added = Server::with(cluster_config());
    let out = std::process::Command::new("redis-cli")
        .args(["--cluster", "add-node"])
        .arg(format!("127.0.0.1:{}", added.port))
        .arg(format!("127.0.0.1:{}", nodes[0].port))
        .output()
        .expect("redis-cli --cluster add-node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    wait_for_cluster_ok(&added);
    let mut everyone: Vec<&Server> = nodes.iter().collect();
    everyone.push(&added);
    wait_for_cluster_agreement(&everyone);
    let out = std::process::Command::new("redis-cli")
        .args(["--cluster", "reshard"])
        .arg(format!("127.0.0.1:{}", nodes[0].port))
        .args(["--cluster-from", &node_id(&nodes[0])])
        .args(["--cluster-to", &node_id(&added)])
        .args([
            "--cluster-slots",
            "1000",
            "--cluster-yes",
            "--cluster-pipeline",
            "50",
        ])
        .output()
        .expect("redis-cli --cluster reshard");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Some traffic after the reshard too, on the new node's slots.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for handle in load {
        handle.join().expect("a load client failed");
    }
    assert!(
        sent.load(Ordering::Relaxed) > 200,
        "no load while resharding"
    );
    assert_eq!(
        errors.load(Ordering::Relaxed),
        0,
        "errors among {} requests",
        sent.load(Ordering::Relaxed)
    );
    let keys = added.client().cmd(&["DBSIZE"]).int();
    assert!(keys > 0, "the new node holds no key");
    assert_eq!(policy_on(&added, "api"), policy_on(&nodes[0], "api"));
}

#[test]
fn two_nodes_setting_one_policy_at_once_end_with_the_same_winner_everywhere() {
    let nodes = cluster(3, 0);
    let all: Vec<&Server> = nodes.iter().collect();
    for round in 0..5 {
        let name = format!("race{round}");
        let (a, b) = (nodes[0].port, nodes[1].port);
        let (na, nb) = (name.clone(), name.clone());
        let first = std::thread::spawn(move || {
            common::Client::connect(a).cmd(&["RL.POLICY.SET", &na, "GCRA", "1", "1", "1s"])
        });
        let second = std::thread::spawn(move || {
            common::Client::connect(b).cmd(&["RL.POLICY.SET", &nb, "GCRA", "2", "2", "1s"])
        });
        assert_eq!(first.join().unwrap(), Reply::Simple("OK".into()));
        assert_eq!(second.join().unwrap(), Reply::Simple("OK".into()));
        converged(&all, Duration::from_secs(5), |n| {
            !policy_on(n, &name).is_empty()
        });
        let winner = policy_on(&nodes[2], &name);
        assert!(winner.contains('1') || winner.contains('2'), "{winner}");
        for node in &all {
            assert_eq!(policy_on(node, &name), winner, "round {round}");
        }
    }
}

#[test]
fn a_node_stopped_while_policies_change_catches_up_after_its_restart() {
    let mut nodes = cluster(3, 0);
    set_api(&nodes[0]);
    assert_eq!(
        nodes[0]
            .client()
            .cmd(&["RL.POLICY.SET", "old", "FIXEDWINDOW", "1", "1s"]),
        Reply::Simple("OK".into())
    );
    converged(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(5),
        |n| !policy_on(n, "old").is_empty(),
    );
    // Node 2 saves what it has, and stops.
    assert_eq!(nodes[2].client().cmd(&["SAVE"]), Reply::Simple("OK".into()));
    nodes[2].stop();
    // Meanwhile: one policy changed, one deleted, one new.
    let mut c = nodes[0].client();
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "api", "GCRA", "7", "7", "1s"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(nodes[1].client().cmd(&["RL.POLICY.DEL", "old"]).int(), 1);
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "new", "SLIDINGLOG", "3", "1m"]),
        Reply::Simple("OK".into())
    );
    // It comes back from its old RDB (on a new port; the cluster learns it).
    nodes[2].start_again();
    let took = converged(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(15),
        |n| {
            policy_on(n, "old").is_empty()
                && policy_on(n, "api").contains('7')
                && !policy_on(n, "new").is_empty()
        },
    );
    eprintln!("caught up {took:?} after its restart");
    assert_eq!(info(&nodes[2], "policies"), "2");
}

#[test]
fn a_damaged_or_forged_message_is_refused_and_logged_never_applied() {
    let nodes = cluster(3, 0);
    set_api(&nodes[0]);
    let all: Vec<&Server> = nodes.iter().collect();
    converged(&all, Duration::from_secs(5), |n| {
        !policy_on(n, "api").is_empty()
    });
    let target = node_id(&nodes[1]);
    let sender = node_id(&nodes[0]);
    let digest = info(&nodes[1], "policies_digest");
    let good = changes_message(&[Forged::live(
        "forged",
        1_000_000,
        &sender,
        &["GCRA", "1", "1", "1s"],
    )]);
    let mut damaged = good.clone();
    let last = damaged.len() - 9;
    damaged[last] ^= 0x20;
    let bad_rules = changes_message(&[Forged::live(
        "forged",
        1_000_000,
        &sender,
        &["GCRA", "0", "1", "1s"],
    )]);
    let unknown_kind = changes_message(&[Forged::live(
        "forged",
        1_000_000,
        &sender,
        &["NEWRULE", "1", "1", "1s"],
    )]);
    let huge_count = {
        let mut m = b"RLP\x01\x03".to_vec();
        m.extend_from_slice(&u32::MAX.to_le_bytes());
        let sum = fnv(&m);
        m.extend_from_slice(&sum.to_le_bytes());
        m
    };
    let refused_before: u64 = info(&nodes[1], "cluster_messages_refused").parse().unwrap();
    let messages: [&[u8]; 6] = [
        b"garbage",
        b"",
        &damaged,
        &bad_rules,
        &unknown_kind,
        &huge_count,
    ];
    let mut c = nodes[0].client();
    for m in messages {
        let r = c.cmd_bytes(&[b"RL.DEBUG.CLUSTERMSG", target.as_bytes(), m]);
        assert_eq!(r.int(), 1, "sent");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let refused: u64 = info(&nodes[1], "cluster_messages_refused").parse().unwrap();
        if refused == refused_before + messages.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "refused {refused}, expected {}",
            refused_before + 6
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(policy_on(&nodes[1], "forged"), "");
    assert_eq!(info(&nodes[1], "policies_digest"), digest);
    assert_eq!(nodes[1].client().cmd(&["PING"]).text(), "PONG");
    // The log line (read until it is there: the file is written by the server process).
    let line = format!("refusing a cluster message from node {sender}: ");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !nodes[1].log().contains(&line) {
        assert!(
            Instant::now() < deadline,
            "no log line in {:?}: {}",
            nodes[1].dir,
            nodes[1].log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The same message well formed is taken: the checks were what refused the others.
    let r = c.cmd_bytes(&[b"RL.DEBUG.CLUSTERMSG", target.as_bytes(), &good]);
    assert_eq!(r.int(), 1);
    converged(&[&nodes[1]], Duration::from_secs(5), |n| {
        policy_on(n, "forged").contains("GCRA")
    });
    // And reaches the others by the exchange.
    converged(&all, Duration::from_secs(5), |n| {
        !policy_on(n, "forged").is_empty()
    });
}

/// Everything in a node's AOF directory (the base and incremental files), as text.
fn aof_text(node: &Server) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(node.dir.join("appendonlydir")) {
        for entry in entries.flatten() {
            text.push_str(&String::from_utf8_lossy(
                &std::fs::read(entry.path()).unwrap_or_default(),
            ));
        }
    }
    text
}

#[test]
fn a_change_learned_over_the_bus_goes_to_the_aof_with_its_version() {
    let nodes = cluster_with(3, 0, &["--appendonly", "yes"]);
    set_api(&nodes[0]);
    let all: Vec<&Server> = nodes.iter().collect();
    converged(&all, Duration::from_secs(5), |n| {
        !policy_on(n, "api").is_empty()
    });
    let (origin, clock) = (node_id(&nodes[0]), info(&nodes[0], "policy_clock"));
    // On every node the AOF holds the change as RL.POLICY.SYNC with the origin's version:
    // the node that made it, and the two that learned it over the bus.
    for node in &all {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let aof = aof_text(node);
            if aof.contains("RL.POLICY.SYNC") && aof.contains(&origin) {
                assert!(aof.contains(&format!("\r\n{clock}\r\n")), "{aof}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no RL.POLICY.SYNC in {}: {aof}",
                node.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
