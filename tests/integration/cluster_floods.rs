//! Policies on a cluster whose bus a forger reaches (docs/cluster.md, Policies):
//! a flood of PULL and DIGEST messages makes a node send its table at most once an interval
//! per sender, not once a message; a flood of new policies or tombstones stops at
//! `ratelimit.max-policies`; `INFO ratelimit` costs the same whatever the table's size; and a
//! node that has not caught up with the cluster's policies says TRYAGAIN, not "no policy
//! named", for a policy it has not learned yet. Real clusters of real servers; the forged
//! messages are sent with RL.DEBUG.CLUSTERMSG from a node of the cluster, as a forger who
//! writes to its bus port would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::bus::{changes_message, digest_message, pull_message, wall_ms, Content, Forged};
use crate::common::{
    cluster, cluster_config, cluster_with, node_id, policies_converged as converged,
    policies_count as counter, policies_info as info, policy_on, wait_for_cluster_ok, Client,
    ClusterClient, Reply, Server,
};

/// `INFO ratelimit_policies`'s field `name` on `node`, if the module writes it (a module
/// before the field, run as the old code, then fails on what it does, not on a missing field).
fn info_opt(node: &Server, name: &str) -> Option<String> {
    let text = node.client().cmd(&["INFO", "ratelimit_policies"]).text();
    let prefix = format!("ratelimit_{name}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_string())
}

/// Polls `done` every few ms until it holds; fails with `what` after `limit`.
#[track_caller]
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn set_api(node: &Server) {
    let r = node.client().cmd(&[
        "RL.POLICY.SET",
        "api",
        "GCRA",
        "5",
        "5",
        "1s",
        "FIXEDWINDOW",
        "100",
        "1m",
    ]);
    assert_eq!(r, Reply::Simple("OK".into()));
}

/// A version clock of now, as a node stamps a change it makes (docs/cluster.md, Versions:
/// wall ms in the high 48 bits): within any node's bound of how far ahead a version may be.
fn clock_now() -> u64 {
    wall_ms() << 16
}

/// Sends each payload from `from` to `target` with RL.DEBUG.CLUSTERMSG, pipelined, and
/// returns once `target` has read them all: a last message that is not one (`garbage`) goes
/// after them on the same link, and the target handles a link's messages in order, so its
/// refusal (`cluster_messages_refused`) says the others were handled.
fn forge(from: &Server, target: &Server, payloads: &[Vec<u8>]) {
    let target_id = node_id(target);
    let refused = counter(target, "cluster_messages_refused");
    let mut c = from.client();
    let marker = [b"garbage".to_vec()];
    for chunk in payloads.chunks(100).chain([&marker[..]]) {
        for p in chunk {
            c.send(&[b"RL.DEBUG.CLUSTERMSG", target_id.as_bytes(), p]);
        }
        for _ in chunk {
            assert_eq!(c.read(), Reply::Int(1), "a forged message not sent");
        }
    }
    wait_for(
        Duration::from_secs(60),
        "the target read the forged messages",
        || counter(target, "cluster_messages_refused") > refused,
    );
    assert_eq!(counter(target, "cluster_messages_refused"), refused + 1);
}

/// The most names one CHANGES message carries (src/cluster/wire.rs, MAX_CHANGES): a table
/// of n policies goes as ceil(n / 256) messages.
const MAX_CHANGES: usize = 256;

/// docs/cluster.md, Bounded work: a node answers one peer's DIGEST or PULL with its table at
/// most once in this time.
const ANSWER_INTERVAL: Duration = Duration::from_millis(500);

/// docs/cluster.md, Versions: a node that has caught up sends its own DIGEST to one other
/// node once in this time.
const PERIOD: Duration = Duration::from_secs(1);

#[test]
fn a_flood_of_pulls_and_digests_gets_at_most_one_table_an_interval() {
    let nodes = cluster(3, 0);
    let all: Vec<&Server> = nodes.iter().collect();
    // 600 policies: the table goes as 3 CHANGES messages.
    const POLICIES: usize = 600;
    let table_messages = POLICIES.div_ceil(MAX_CHANGES) as u64;
    assert_eq!(table_messages, 3);
    let mut c = nodes[0].client();
    let names: Vec<String> = (0..POLICIES).map(|i| format!("p{i}")).collect();
    for name in &names {
        c.send(&[
            b"RL.POLICY.SET",
            name.as_bytes(),
            b"GCRA",
            b"5",
            b"5",
            b"1s",
        ]);
    }
    for _ in &names {
        assert_eq!(c.read(), Reply::Simple("OK".into()));
    }
    converged(&all, Duration::from_secs(30), |n| {
        info(n, "policies") == POLICIES.to_string()
    });
    let (sender, target) = (&nodes[0], &nodes[1]);
    let digest = u64::from_str_radix(&info(target, "policies_digest"), 16).unwrap();
    let clock: u64 = info(target, "policy_clock").parse().unwrap();
    // 400 PULLs and 400 DIGESTs of a table that differs from the target's, interleaved, in
    // 10 waves 300 ms apart: the flood spans several answer intervals, so that what is
    // bounded is the answers an interval, not the answers at all.
    let (pull, differing) = (
        pull_message(),
        digest_message(digest ^ 0xffff, POLICIES as u32, clock, None),
    );
    let wave: Vec<Vec<u8>> = (0..80)
        .map(|i| {
            if i % 2 == 0 {
                pull.clone()
            } else {
                differing.clone()
            }
        })
        .collect();
    // PING on the target all along, from another client.
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = {
        let (stop, port) = (Arc::clone(&stop), target.port);
        std::thread::spawn(move || {
            let mut c = Client::connect(port);
            let (mut max, mut n) = (Duration::ZERO, 0u32);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
                max = max.max(t.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            (max, n)
        })
    };
    let (sent0, received0) = (
        counter(target, "cluster_messages_sent"),
        counter(target, "cluster_messages_received"),
    );
    let skipped0 = info_opt(target, "cluster_answers_skipped");
    let start = Instant::now();
    for i in 0..10 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        forge(sender, target, &wave);
    }
    let sent = counter(target, "cluster_messages_sent") - sent0;
    let elapsed = start.elapsed();
    let skipped = info_opt(target, "cluster_answers_skipped");
    let received = counter(target, "cluster_messages_received") - received0;
    stop.store(true, Ordering::Relaxed);
    let (ping_max, pings) = pinger.join().expect("PING failed during the flood");
    // The bound, from docs/cluster.md, Bounded work. The flood lasted `elapsed` (from before
    // its first message was sent to after the target had handled all 800). The target
    // answered the sender at most once an answer interval: floor(elapsed / interval) + 2 times
    // at most (+2, not +1, whether the intervals run from the last answer or are fixed
    // windows), each answer at most its table (3 messages) and a PULL. Besides, having caught
    // up, it sends its own DIGEST to one node once a period: floor(elapsed / period) + 1 at
    // most. The other nodes' DIGESTs hold the same table: no answer.
    let answers = (elapsed.as_millis() / ANSWER_INTERVAL.as_millis()) as u64 + 2;
    let own = (elapsed.as_millis() / PERIOD.as_millis()) as u64 + 1;
    let bound = answers * (table_messages + 1) + own;
    eprintln!(
        "flood of 800 over {elapsed:?} (at most {answers} answers): the target received {received}, \
         sent {sent} (bound {bound}), skipped {skipped:?} (before: {skipped0:?}); \
         PING max {ping_max:?} over {pings} PINGs"
    );
    assert!(
        sent <= bound,
        "the target sent {sent} messages for 800 received in {elapsed:?}: more than {bound}"
    );
    // Every forged message but at most one an interval went unanswered, and is counted so.
    let skipped: u64 = skipped
        .expect("no ratelimit_cluster_answers_skipped")
        .parse()
        .unwrap();
    let skipped = skipped - skipped0.unwrap().parse::<u64>().unwrap();
    assert!(
        (800 - answers..=800).contains(&skipped),
        "skipped {skipped} of 800, when at most {answers} could be answered"
    );
    // 400 DIGESTs of the target's own table from a sender that says it has not caught up:
    // each is answered with the target's DIGEST (docs/cluster.md, Catching up: so
    // that a node catching up hears at once), never with a table: a message for a message,
    // of the same size.
    let same = digest_message(digest, POLICIES as u32, clock, Some(0));
    let (sent0, start) = (counter(target, "cluster_messages_sent"), Instant::now());
    forge(sender, target, &vec![same; 400]);
    let sent = counter(target, "cluster_messages_sent") - sent0;
    let own = (start.elapsed().as_millis() / PERIOD.as_millis()) as u64 + 1;
    eprintln!("400 DIGESTs of the same table: the target sent {sent}");
    assert!(sent <= 400 + own, "sent {sent} for 400 DIGESTs");
    // The table did not move, and the target, caught up all along (its own DIGESTs went to
    // one node a period), still exchanges as before.
    assert_eq!(info(target, "policies"), POLICIES.to_string());
    assert_eq!(info(target, "policies_caught_up"), "1");
    converged(&all, Duration::from_secs(5), |_| true);
}

#[test]
fn a_flood_of_new_policies_and_tombstones_stops_at_max_policies() {
    let nodes = cluster(3, 0);
    let all: Vec<&Server> = nodes.iter().collect();
    for node in &all {
        assert_eq!(
            node.client()
                .cmd(&["CONFIG", "SET", "ratelimit.max-policies", "1000"]),
            Reply::Simple("OK".into()),
            "ratelimit.max-policies"
        );
    }
    let (sender, target) = (&nodes[0], &nodes[1]);
    let sender_id = node_id(sender);
    let refused0 = counter(target, "cluster_changes_refused");
    // 100 messages of 256 new policies each: 25,600 names the cluster never had.
    let words: &[&str] = &["GCRA", "1", "1", "1s"];
    let flood: Vec<Vec<u8>> = (0..100)
        .map(|m| {
            let clock = clock_now();
            let changes: Vec<_> = (0..MAX_CHANGES)
                .map(|j| {
                    let name = format!("f{m}.{j}");
                    Forged {
                        name,
                        clock: clock + j as u64,
                        node: sender_id.as_str(),
                        content: Content::Words(words),
                    }
                })
                .collect();
            changes_message(&changes)
        })
        .collect();
    let start = Instant::now();
    forge(sender, target, &flood);
    eprintln!(
        "25,600 forged policies taken or refused in {:?}",
        start.elapsed()
    );
    // The first 1000 are taken, each of the 24,600 others refused and counted.
    assert_eq!(info(target, "policies"), "1000");
    assert_eq!(
        counter(target, "cluster_changes_refused") - refused0,
        24_600
    );
    assert!(
        target.log().contains("policies table is full"),
        "no log line: {}",
        target.log()
    );
    // The other nodes learn the 1000 from the target: their bound takes them all, and they
    // hold nothing the target would refuse.
    converged(&all, Duration::from_secs(15), |n| {
        info(n, "policies") == "1000"
    });
    assert_eq!(
        counter(target, "cluster_changes_refused") - refused0,
        24_600
    );
    // On the full node: a new name is refused, with the spec's error.
    let mut c = target.client();
    let full = "ERR the policies table is full: 1000 policies (ratelimit.max-policies); \
                delete one or raise the setting";
    let r = c.cmd(&["RL.POLICY.SET", "brand-new", "GCRA", "1", "1", "1s"]);
    assert_eq!(r, Reply::Error(full.into()));
    // A name it holds can still change, and the change reaches every node.
    let r = c.cmd(&["RL.POLICY.SET", "f0.0", "GCRA", "2", "2", "1s"]);
    assert_eq!(r, Reply::Simple("OK".into()));
    // Deleting one makes room for a new one; the deleted name is as new a name as any.
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "f0.1"]).int(), 1);
    let r = c.cmd(&["RL.POLICY.SET", "brand-new", "GCRA", "1", "1", "1s"]);
    assert_eq!(r, Reply::Simple("OK".into()));
    let r = c.cmd(&["RL.POLICY.SET", "f0.1", "GCRA", "1", "1", "1s"]);
    assert_eq!(r, Reply::Error(full.into()));
    let changed = policy_on(target, "f0.0");
    assert!(changed.contains('2'), "{changed}");
    converged(&all, Duration::from_secs(15), |n| {
        policy_on(n, "f0.0") == changed
            && policy_on(n, "f0.1").is_empty()
            && !policy_on(n, "brand-new").is_empty()
    });
    for node in &all {
        assert_eq!(info(node, "policies"), "1000");
        assert_eq!(info(node, "policy_tombstones"), "1");
    }
    // Tombstones are bounded too, and no delete is ever refused: 1280 forged deletions of
    // names nobody had, newer than the one tombstone the target holds. It keeps the newest
    // 1000 (by the time of the delete, then the name), the others give way: none refused,
    // and every node, taking the same tombstones, keeps the same ones (the same digest).
    let refused1 = counter(target, "cluster_changes_refused");
    let deletions: Vec<Vec<u8>> = (0..5)
        .map(|m| {
            let (clock, at) = (clock_now(), wall_ms());
            let changes: Vec<_> = (0..MAX_CHANGES)
                .map(|j| {
                    let name = format!("gone{m}.{j}");
                    Forged {
                        name,
                        clock: clock + j as u64,
                        node: sender_id.as_str(),
                        content: Content::Tombstone(at),
                    }
                })
                .collect();
            changes_message(&changes)
        })
        .collect();
    forge(sender, target, &deletions);
    assert_eq!(counter(target, "cluster_changes_refused") - refused1, 0);
    assert_eq!(info(target, "policy_tombstones"), "1000");
    assert_eq!(info(target, "policies"), "1000");
    converged(&all, Duration::from_secs(15), |n| {
        info(n, "policy_tombstones") == "1000"
    });
    // The deleted f0.1 stays deleted everywhere (its tombstone gave way to newer ones).
    for node in &all {
        assert_eq!(policy_on(node, "f0.1"), "");
    }
    // With every node's tombstones full, an operator's delete still works, and reaches
    // every node (each drops its oldest tombstone for it): the advice of the error above
    // ("delete one") holds.
    assert_eq!(c.cmd(&["RL.POLICY.DEL", "f0.2"]).int(), 1);
    converged(&all, Duration::from_secs(15), |n| {
        policy_on(n, "f0.2").is_empty()
    });
    for node in &all {
        assert_eq!(info(node, "policies"), "999");
    }
}

/// The lines of `INFO section` on `c`.
fn info_lines(c: &mut Client, section: &str) -> Vec<String> {
    c.cmd(&["INFO", section])
        .text()
        .lines()
        .map(str::to_string)
        .collect()
}

/// How long `INFO section` takes on `c`, the best of 5.
fn info_time(c: &mut Client, section: &str) -> Duration {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            c.cmd(&["INFO", section]);
            t.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
fn info_ratelimit_is_one_size_whatever_the_number_of_policies() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        c.cmd(&["RL.POLICY.SET", "first", "GCRA", "5", "5", "1s"]),
        Reply::Simple("OK".into())
    );
    let one = (
        info_lines(&mut c, "ratelimit").len(),
        info_lines(&mut c, "ratelimit_policies").len(),
    );
    let small = (
        info_time(&mut c, "ratelimit"),
        info_time(&mut c, "ratelimit_policies"),
        info_time(&mut c, "ratelimit_policystats"),
    );
    // 1200 more, each with two rules.
    for i in 0..1200 {
        let name = format!("flood{i}");
        c.send(&[
            b"RL.POLICY.SET",
            name.as_bytes(),
            b"GCRA",
            b"5",
            b"5",
            b"1s",
            b"FIXEDWINDOW",
            b"100",
            b"1m",
        ]);
    }
    for _ in 0..1200 {
        assert_eq!(c.read(), Reply::Simple("OK".into()));
    }
    assert_eq!(
        c.info_field("ratelimit_policies", "ratelimit_policies"),
        "1201"
    );
    // No per-policy section nor line where a client asks for the module's fields at large:
    // as many lines as with one policy.
    for section in ["ratelimit", "everything", "modules"] {
        let lines = info_lines(&mut c, section);
        for line in &lines {
            assert!(
                !line.starts_with("ratelimit_flood")
                    && !line.starts_with("ratelimit_first")
                    && line != "# ratelimit_policystats"
                    && line != "# ratelimit_rulestats",
                "INFO {section} has a per-policy line: {line}"
            );
        }
    }
    assert_eq!(info_lines(&mut c, "ratelimit").len(), one.0);
    assert_eq!(info_lines(&mut c, "ratelimit_policies").len(), one.1);
    // Asked for by name, the per-policy sections list every policy (and every rule).
    let stats = info_lines(&mut c, "ratelimit_policystats");
    let listed = stats
        .iter()
        .filter(|l| l.starts_with("ratelimit_flood") || l.starts_with("ratelimit_first:"))
        .count();
    assert_eq!(listed, 1201, "{:?}", &stats[..stats.len().min(5)]);
    assert!(stats
        .iter()
        .any(|l| l.starts_with("ratelimit_flood1199:calls=0,")));
    let rules = info_lines(&mut c, "ratelimit_rulestats");
    assert_eq!(
        rules
            .iter()
            .filter(|l| l.starts_with("ratelimit_flood"))
            .count(),
        2400
    );
    let big = (
        info_time(&mut c, "ratelimit"),
        info_time(&mut c, "ratelimit_policies"),
        info_time(&mut c, "ratelimit_policystats"),
    );
    eprintln!(
        "INFO ratelimit / ratelimit_policies / ratelimit_policystats, best of 5: \
         {small:?} with 1 policy, {big:?} with 1201"
    );
}

#[test]
fn a_standalone_server_has_always_caught_up() {
    let server = Server::start();
    assert_eq!(info(&server, "policies_caught_up"), "1");
    assert_eq!(info(&server, "cluster_exchange"), "0");
}

/// How many other nodes `node` knows: CLUSTER NODES's lines but its own and those still in
/// handshake (or without an address), as the module counts them (RM_GetClusterNodesList).
fn others_known(c: &mut Client) -> usize {
    c.cmd(&["CLUSTER", "NODES"])
        .text()
        .lines()
        .filter(|l| {
            let flags = l.split(' ').nth(2).unwrap_or_default();
            !flags.contains("myself") && !flags.contains("handshake") && !flags.contains("noaddr")
        })
        .count()
}

/// The key prefix of the slot moved to the new node: every `{catchup}:...` key is in it.
const TAG: &str = "{catchup}";

/// RL.LIMIT of a key of the new node's slot never used before, with `policy`.
fn limit_fresh(c: &mut Client, i: &mut usize, policy: &str) -> Reply {
    *i += 1;
    c.cmd(&["RL.LIMIT", &format!("{TAG}:{i}"), policy])
}

const NOT_YET: &str = "TRYAGAIN no policy named 'api' on this node yet: it has not caught up \
                       with the cluster's policies since it started";
const NO_API: &str = "ERR no policy named 'api': create it with RL.POLICY.SET api rule [rule ...]";

/// A cluster of 3 primaries holding `api` (node timeout 500 ms, as the probe), and a
/// node started alone that owns the slot of [`TAG`], taken from the cluster (DELSLOTS on its
/// 3 nodes): it serves that slot before it meets them, so that its first moments in the
/// cluster are seen from the first. Not met yet; `prepare` runs on it before the meeting.
fn cluster_and_a_node_alone(prepare: impl FnOnce(&mut Client)) -> (Vec<Server>, Server) {
    let nodes = cluster_with(3, 0, &["--cluster-node-timeout", "500"]);
    set_api(&nodes[0]);
    converged(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(5),
        |n| !policy_on(n, "api").is_empty(),
    );
    let slot = nodes[0].client().cmd(&["CLUSTER", "KEYSLOT", TAG]).int();
    for node in &nodes {
        let r = node
            .client()
            .cmd(&["CLUSTER", "DELSLOTS", &slot.to_string()]);
        assert_eq!(r, Reply::Simple("OK".into()));
    }
    let alone = Server::with(cluster_config().extra(&[
        "--cluster-node-timeout",
        "500",
        "--cluster-require-full-coverage",
        "no",
    ]));
    let mut c = alone.client();
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    let r = c.cmd(&["CLUSTER", "ADDSLOTS", &slot.to_string()]);
    assert_eq!(r, Reply::Simple("OK".into()));
    wait_for_cluster_ok(&alone);
    assert_eq!(others_known(&mut c), 0);
    // Alone, it is the whole cluster: it has nothing to catch up with, and a name it does not
    // hold is no policy.
    assert_eq!(
        limit_fresh(&mut c, &mut 0, "api"),
        Reply::Error(NO_API.into())
    );
    prepare(&mut c);
    (nodes, alone)
}

/// The new node meets the cluster (CLUSTER MEET to its first node).
fn meet(node: &Server, cluster: &[Server]) {
    let r = node
        .client()
        .cmd(&["CLUSTER", "MEET", "127.0.0.1", &cluster[0].port.to_string()]);
    assert_eq!(r, Reply::Simple("OK".into()));
}

/// After the meeting, the cluster's nodes own [`TAG`]'s slot through the new one: a cluster
/// client on the first node reaches it, and RL.LIMIT answers there.
fn limit_through_the_cluster(nodes: &[Server], added: &Server) {
    for node in nodes.iter().chain([added]) {
        wait_for_cluster_ok(node);
    }
    let mut c = ClusterClient::new(nodes[0].port);
    let r = c.cmd(&["RL.LIMIT", &format!("{TAG}:through"), "api"]);
    assert_eq!(r.ints()[..3], [1, 5, 4], "{r:?}");
    assert_eq!(
        added
            .client()
            .cmd(&["EXISTS", &format!("{TAG}:through")])
            .int(),
        1
    );
}

#[test]
fn a_node_that_meets_a_cluster_says_tryagain_not_no_policy_until_it_has_caught_up() {
    let (nodes, added) = cluster_and_a_node_alone(|_| {});
    let alone_caught_up = info_opt(&added, "policies_caught_up");
    meet(&added, &nodes);
    // From the moment it knows another node until it has caught up, RL.LIMIT of `api` (which
    // it has not learned yet) answers TRYAGAIN, or decides once it has the policy: never
    // "no policy named". Checked as often as the loop goes, in that order: a node known
    // stays known.
    let mut c = added.client();
    let (mut i, mut polls, mut not_yet, mut zeros) = (0, 0u32, 0u32, 0u32);
    let mut known_at = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let known = others_known(&mut c);
        let r = limit_fresh(&mut c, &mut i, "api");
        let caught_up = info_opt(&added, "policies_caught_up");
        if known == 0 {
            assert!(
                r == Reply::Error(NO_API.into()) || r == Reply::Error(NOT_YET.into()),
                "alone: {r:?}"
            );
        } else {
            known_at.get_or_insert_with(Instant::now);
            polls += 1;
            match &r {
                Reply::Error(e) if e == NOT_YET => not_yet += 1,
                Reply::Error(e) => panic!(
                    "knowing {known} other nodes (caught_up: {caught_up:?}), RL.LIMIT answers \
                     {e:?}, after {:?} and {polls} tries",
                    known_at.unwrap().elapsed()
                ),
                other => assert_eq!(other.ints()[..3], [1, 5, 4], "{other:?}"),
            }
            if caught_up.as_deref() == Some("0") {
                zeros += 1;
            }
            if caught_up.as_deref() == Some("1") {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not caught up in 15 s: knows {known} nodes, caught_up: {caught_up:?}, {r:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!(
        "caught up {:?} after it knew another node: {polls} tries, {not_yet} TRYAGAIN, \
         {zeros} reads of caught_up:0",
        known_at.unwrap().elapsed()
    );
    assert_eq!(alone_caught_up.as_deref(), Some("1"), "alone");
    // Caught up, it decides.
    let r = limit_fresh(&mut c, &mut i, "api");
    assert_eq!(r.ints()[..3], [1, 5, 4], "{r:?}");
    assert_eq!(policy_on(&added, "api"), policy_on(&nodes[0], "api"));
    limit_through_the_cluster(&nodes, &added);
}

#[test]
fn a_node_held_behind_says_tryagain_until_its_table_is_the_clusters() {
    // The node is held behind for as long as the test wants: alone, it holds a policy of its
    // own and takes at most one (ratelimit.max-policies 1), so it refuses the cluster's `api`
    // and its table cannot be the cluster's until the bound is raised.
    let (nodes, added) = cluster_and_a_node_alone(|c| {
        let r = c.cmd(&["RL.POLICY.SET", "own", "FIXEDWINDOW", "10", "1m"]);
        assert_eq!(r, Reply::Simple("OK".into()));
        let r = c.cmd(&["CONFIG", "SET", "ratelimit.max-policies", "1"]);
        assert_eq!(r, Reply::Simple("OK".into()));
    });
    assert_eq!(info(&added, "policies_caught_up"), "1", "alone");
    meet(&added, &nodes);
    let mut c = added.client();
    wait_for(
        Duration::from_secs(30),
        "the new node knows the 3 others",
        || others_known(&mut c) == 3,
    );
    // It has exchanged (it refused `api`), and has not caught up.
    wait_for(Duration::from_secs(10), "the new node refused api", || {
        counter(&added, "cluster_changes_refused") >= 1
    });
    wait_for(
        Duration::from_secs(10),
        "caught_up:0 on the new node",
        || info(&added, "policies_caught_up") == "0",
    );
    assert!(added.log().contains("policies table is full"));
    let mut i = 0;
    for _ in 0..20 {
        assert_eq!(
            limit_fresh(&mut c, &mut i, "api"),
            Reply::Error(NOT_YET.into())
        );
    }
    // A name it holds works as always.
    let r = limit_fresh(&mut c, &mut i, "own");
    assert_eq!(r.ints()[..3], [1, 10, 9], "{r:?}");
    assert_eq!(info(&added, "policies_caught_up"), "0");
    // RL.POLICY.GET says the same: not nil, which would say there is no such policy.
    assert_eq!(policy_on(&added, "api"), NOT_YET);
    // Room for the cluster's policy: it takes it at an exchange, and catches up.
    let r = c.cmd(&["CONFIG", "SET", "ratelimit.max-policies", "10000"]);
    assert_eq!(r, Reply::Simple("OK".into()));
    wait_for(
        Duration::from_secs(15),
        "caught_up:1 on the new node",
        || info(&added, "policies_caught_up") == "1",
    );
    assert_eq!(policy_on(&added, "api"), policy_on(&nodes[0], "api"));
    let r = limit_fresh(&mut c, &mut i, "api");
    assert_eq!(r.ints()[..3], [1, 5, 4], "{r:?}");
    // Its own policy reached the others, and every node holds the same table.
    let mut everyone: Vec<&Server> = nodes.iter().collect();
    everyone.push(&added);
    converged(&everyone, Duration::from_secs(10), |n| {
        !policy_on(n, "own").is_empty()
    });
    limit_through_the_cluster(&nodes, &added);
}
