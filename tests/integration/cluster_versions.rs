//! Policy versions no restart can lose, and no runaway version can freeze (docs/cluster.md,
//! Policies): a change made on a primary restarted with no data, from an older RDB
//! or an older AOF wins on every node; a version too far ahead of the clocks, sent by a peer,
//! is refused and counted, and the next change of its name wins; a table poisoned before
//! versions were bounded recovers when it loads; RL.POLICY.FORCE makes a node's policy win
//! over a version ahead; `ratelimit.policy-max-ahead` is the bound. Real clusters of real
//! servers, made with redis-cli; forged messages sent with RL.DEBUG.CLUSTERMSG.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::bus::{changes_message, wall_ms, Forged};
use crate::common::{
    cluster, cluster_with, node_id, policies_converged, policies_count as count,
    policies_info as info, policy_on, wait_for_cluster_agreement, wait_for_cluster_ok, Client,
    Reply, Server,
};

/// Waits (up to `limit`) until every node of `nodes` has the same policies digest and holds
/// `expected` for `name` (as [`policy_on`] shows it, "" for none); how long that took.
#[track_caller]
fn converged(nodes: &[&Server], limit: Duration, name: &str, expected: &str) -> Duration {
    policies_converged(nodes, limit, |n| policy_on(n, name) == expected)
}

/// Waits until every node of `nodes` has received at least `exchanges` more messages of the
/// module than now: several periods of the exchange (each node sends its digest once a period,
/// and answers a differing one), decided by the counters rather than by a sleep.
fn after_exchanges(nodes: &[&Server], exchanges: u64) {
    let from: Vec<u64> = nodes
        .iter()
        .map(|n| count(n, "cluster_messages_received"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now: Vec<u64> = nodes
            .iter()
            .map(|n| count(n, "cluster_messages_received"))
            .collect();
        if now.iter().zip(&from).all(|(n, f)| n - f >= exchanges) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {exchanges} exchanges on every node: received {from:?} then {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A version's clock at `ms` (ms since the epoch in the high 48 bits, a counter in the low 16).
fn clock_at(ms: u64) -> u64 {
    ms << 16
}

/// The largest clock a node takes from a peer now, with `ratelimit.policy-max-ahead` at
/// `ahead_s` (the module's ceiling), read after the node's own.
fn ceiling(ahead_s: u64) -> u64 {
    clock_at(wall_ms() + ahead_s * 1000) | 0xffff
}

/// Ten years in ms.
const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3_600_000;

/// The largest version clock a message can carry.
const RUNAWAY: u64 = u64::MAX;

/// Sends `message` from `from` (as its module's message, so with `from`'s id as the sender)
/// to the node `to` only.
fn forge(from: &Server, to: &Server, message: &[u8]) {
    let target = node_id(to);
    let r = from
        .client()
        .cmd_bytes(&[b"RL.DEBUG.CLUSTERMSG", target.as_bytes(), message]);
    assert_eq!(r, Reply::Int(1), "sent");
}

/// Waits (up to 10 s) until `node` holds a policy named `name`: a message that carried it has
/// been handled, and so has everything the same sender sent before it (one link, in order).
fn wait_for_policy(node: &Server, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while policy_on(node, name).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{name} never reached the node on port {}",
            node.port
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to 10 s) until a line of `node`'s log contains every one of `parts`.
fn wait_for_log_line(node: &Server, parts: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.log();
        if log.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no line with {parts:?} in the log of port {}:\n{log}",
            node.port
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `args` as a client would right after the server answered PING: again on an error a
/// client retries (TRYAGAIN, LOADING, CLUSTERDOWN), for up to 30 s. The reply, and how many
/// tries it took.
fn at_once(node: &Server, args: &[&str]) -> (Reply, usize) {
    const RETRIED: [&str; 3] = ["TRYAGAIN", "LOADING", "CLUSTERDOWN"];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = node.client();
    let mut tries = 1;
    loop {
        let reply = c.cmd(args);
        match &reply {
            Reply::Error(e) if RETRIED.iter().any(|p| e.starts_with(p)) => {
                assert!(Instant::now() < deadline, "{args:?} still answers {e}");
                std::thread::sleep(Duration::from_millis(5));
                tries += 1;
            }
            _ => return (reply, tries),
        }
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// Sets `name` to `words` on `node` and returns the words as the node shows them.
fn set(node: &Server, name: &str, words: &[&str]) -> String {
    let mut args = vec!["RL.POLICY.SET", name];
    args.extend_from_slice(words);
    assert_eq!(node.client().cmd(&args), ok(), "{args:?}");
    policy_on(node, name)
}

/// Sets `name` to `words` on `node` and waits until every node of `nodes` holds it: changes
/// made one after the other, each seen everywhere before the next (so that they follow each
/// other in every version order, the old module's Lamport clock included).
fn set_everywhere(nodes: &[Server], node: usize, name: &str, words: &[&str]) -> String {
    let held = set(&nodes[node], name, words);
    converged(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(20),
        name,
        &held,
    );
    held
}

/// The indexes of `nodes`, lowest node id first: a version's node id breaks ties of its
/// clock, so the tests choose who sets a policy by id, for the old module's ties to go the
/// losing way.
fn by_id(nodes: &[Server]) -> Vec<usize> {
    let ids: Vec<String> = nodes.iter().map(node_id).collect();
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| ids[a].cmp(&ids[b]));
    order
}

/// SAVE on `node`, after the background save in progress if any (a replica's full sync forks
/// one, which the server reaps a moment after the replica is online).
fn save(node: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = node.client();
    loop {
        match c.cmd(&["SAVE"]) {
            Reply::Error(e) if e.contains("in progress") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            reply => return assert_eq!(reply, ok(), "SAVE on port {}", node.port),
        }
    }
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

/// Waits (up to 10 s) until `node`'s AOF holds `text`.
fn wait_for_aof(node: &Server, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !aof_text(node).contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the AOF of port {}: {}",
            node.port,
            aof_text(node)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Copies the files of directory `from` into `to` (an AOF directory has no subdirectories).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    for entry in std::fs::read_dir(from)
        .expect("read the directory")
        .flatten()
    {
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a file");
    }
}

/// An AOF for a cluster node, with every write on disk before its reply, and commands only
/// (no RDB preamble): the tests read and write its text.
const AOF: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--aof-use-rdb-preamble",
    "no",
];

/// Stops each node and starts it again from its files, one at a time, each time waiting until
/// every node knows every other at its address (a restarted node comes back on a new port,
/// which the others learn from it).
fn restart_each(nodes: &mut [Server], before_start: impl Fn(&Server)) {
    for i in 0..nodes.len() {
        nodes[i].stop();
        before_start(&nodes[i]);
        nodes[i].start_again();
        for node in nodes.iter() {
            wait_for_cluster_ok(node);
        }
        wait_for_cluster_agreement(&nodes.iter().collect::<Vec<_>>());
    }
}

// Versions no restart can lose.

/// The words of a policy `api` whose rate and burst are `n`.
fn api(n: &str) -> [&str; 4] {
    ["GCRA", n, n, "1s"]
}

/// What a primary is restarted from, after a kill -9.
#[derive(Clone, Copy, Debug)]
enum Restart {
    /// Nothing: its RDB and AOF deleted (its nodes.conf kept: it is the same node).
    NoData,
    /// An RDB saved before the cluster's last changes.
    OlderRdb,
    /// A copy of its AOF taken before the cluster's last changes.
    OlderAof,
}

/// A primary of a 3-primary, 3-replica cluster is killed with SIGKILL and restarted from
/// `from`, while the cluster holds changes of `api` it has not got (made after its RDB or AOF,
/// or all of them with no data); a policy set on it as soon as it answers PING (retried while
/// it answers TRYAGAIN, until it has caught up with the cluster, as a cluster client does)
/// wins on every node, and is still there after several exchanges. On the module before
/// versions had a wall clock, the restarted node took the change at once with a clock below
/// the cluster's (1 with no data, the old RDB's or AOF's plus one), and it was reverted
/// everywhere, itself included.
fn a_change_on_a_restarted_primary_wins(from: Restart) {
    let extra: &[&str] = match from {
        Restart::OlderAof => &AOF,
        _ => &[],
    };
    let mut nodes = cluster_with(3, 1, extra);
    let restarted = 0;
    assert_eq!(
        nodes[restarted].client().info_field("replication", "role"),
        "master"
    );
    set_everywhere(&nodes, 1, "api", &api("11"));
    // What it restarts from is taken now, before the cluster's last changes.
    let older_aof = nodes[restarted].dir.with_extension("older-aof");
    match from {
        Restart::NoData => {}
        Restart::OlderRdb => save(&nodes[restarted]),
        Restart::OlderAof => {
            // Its AOF holds the change (learned over the bus, written by a timer) at its clock.
            let clock = info(&nodes[restarted], "policy_clock");
            wait_for_aof(&nodes[restarted], &format!("\r\n{clock}\r\n"));
            copy_dir(&nodes[restarted].dir.join("appendonlydir"), &older_aof);
        }
    }
    // Three more changes elsewhere: the cluster's clock is now past anything the restarted
    // node will load, by more than one (no tie for node ids to break).
    set_everywhere(&nodes, 1, "api", &api("22"));
    set_everywhere(&nodes, 2, "api", &api("33"));
    set_everywhere(&nodes, 1, "api", &api("44"));
    nodes[restarted].kill();
    let dir = nodes[restarted].dir.clone();
    match from {
        Restart::NoData => {
            let _ = std::fs::remove_file(dir.join("dump.rdb"));
            let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
            assert!(dir.join("nodes.conf").exists());
        }
        Restart::OlderRdb => assert!(dir.join("dump.rdb").exists()),
        Restart::OlderAof => {
            std::fs::remove_dir_all(dir.join("appendonlydir")).expect("remove its AOF");
            copy_dir(&older_aof, &dir.join("appendonlydir"));
        }
    }
    nodes[restarted].start_again();
    let (reply, tries) = at_once(
        &nodes[restarted],
        &["RL.POLICY.SET", "api", "GCRA", "55", "55", "1s"],
    );
    assert_eq!(reply, ok());
    let words = policy_on(&nodes[restarted], "api");
    assert!(words.contains("55"), "{words}");
    let all: Vec<&Server> = nodes.iter().collect();
    let took = converged(&all, Duration::from_secs(30), "api", &words);
    eprintln!("{from:?}: set after {tries} tries, on all six nodes after {took:?}");
    // And it stays: several exchanges later, every node still holds it.
    after_exchanges(&all, 4);
    converged(&all, Duration::ZERO, "api", &words);
    let _ = std::fs::remove_dir_all(&older_aof);
}

#[test]
fn a_change_on_a_primary_restarted_with_no_data_wins_on_every_node() {
    a_change_on_a_restarted_primary_wins(Restart::NoData);
}

#[test]
fn a_change_on_a_primary_restarted_from_an_older_rdb_wins_on_every_node() {
    a_change_on_a_restarted_primary_wins(Restart::OlderRdb);
}

#[test]
fn a_change_on_a_primary_restarted_from_an_older_aof_wins_on_every_node() {
    a_change_on_a_restarted_primary_wins(Restart::OlderAof);
}

/// Sends `signal` to `node`'s process (SIGSTOP: it answers nothing, as if cut off, until
/// SIGCONT).
fn signal(node: &Server, signal: i32) {
    let pid = node.pid().expect("a running server") as i32;
    // SAFETY: kill(2) on the PID of a server this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// The wall clock itself, with no catching up to help: a primary restarted with no data while
/// the other primaries are cut off (stopped with SIGSTOP) can learn nothing from them; once
/// it sees them failing it has caught up with the nodes it can reach (none), and takes a
/// change. When they return, that change, made later in wall time than the ones they hold,
/// wins on every node. On the module before versions had a wall clock it got clock 1 and was
/// reverted by the first exchange.
#[test]
fn a_change_on_a_primary_restarted_while_the_others_are_cut_off_wins_on_their_return() {
    // A shorter node timeout, so that the cut-off nodes are seen failing sooner.
    let mut nodes = cluster_with(3, 0, &["--cluster-node-timeout", "2000"]);
    set_everywhere(&nodes, 1, "api", &api("11"));
    set_everywhere(&nodes, 2, "api", &api("22"));
    set_everywhere(&nodes, 1, "api", &api("33"));
    signal(&nodes[1], libc::SIGSTOP);
    signal(&nodes[2], libc::SIGSTOP);
    nodes[0].kill();
    let _ = std::fs::remove_file(nodes[0].dir.join("dump.rdb"));
    nodes[0].start_again();
    let (reply, tries) = at_once(
        &nodes[0],
        &["RL.POLICY.SET", "api", "GCRA", "55", "55", "1s"],
    );
    assert_eq!(reply, ok());
    let words = policy_on(&nodes[0], "api");
    assert!(words.contains("55"), "{words}");
    signal(&nodes[1], libc::SIGCONT);
    signal(&nodes[2], libc::SIGCONT);
    let all: Vec<&Server> = nodes.iter().collect();
    let took = converged(&all, Duration::from_secs(30), "api", &words);
    eprintln!("set after {tries} tries, on every node {took:?} after the others returned");
    after_exchanges(&all, 4);
    converged(&all, Duration::ZERO, "api", &words);
}

// Bounded versions.

/// A peer's change at the largest clock, and one at ten years from now, are refused by the
/// node they are sent to (the message's other change is applied), counted and logged; neither
/// reaches any node, and the next RL.POLICY.SET of each name, made on the node of the lowest
/// id, wins everywhere. The module before bounded versions took both; the largest clock froze
/// its name: every later change of it, made on a node of a lower id than the forger's, was
/// reverted on every node.
#[test]
fn a_version_far_ahead_of_the_clocks_is_refused_and_the_next_change_wins_everywhere() {
    let nodes = cluster(3, 0);
    let all: Vec<&Server> = nodes.iter().collect();
    let order = by_id(&nodes);
    let (low, mid, high) = (&nodes[order[0]], &nodes[order[1]], &nodes[order[2]]);
    let forger = node_id(high);
    let words = set(high, "api", &["GCRA", "11", "11", "1s"]);
    converged(&all, Duration::from_secs(20), "api", &words);

    // At 2^64-1, to the middle node, with a change of another name at a small clock. (Nothing
    // else is ever refused in this cluster: the counts are exact.)
    let runaway = changes_message(&[
        Forged::live("api", RUNAWAY, &forger, &["GCRA", "99", "99", "1s"]),
        Forged::live("marker1", 1, &forger, &["FIXEDWINDOW", "1", "1s"]),
    ]);
    forge(high, mid, &runaway);
    wait_for_policy(mid, "marker1");
    assert_eq!(
        policy_on(mid, "api"),
        words,
        "the runaway version was taken"
    );
    assert_eq!(count(mid, "cluster_changes_refused"), 1);
    wait_for_log_line(mid, &[&forger, "ahead of this node's clock"]);

    // At ten years from now, of a name no node holds, to the lowest node.
    let ten_years = changes_message(&[
        Forged::live(
            "later",
            clock_at(wall_ms() + TEN_YEARS_MS),
            &forger,
            &["GCRA", "99", "99", "1s"],
        ),
        Forged::live("marker2", 1, &forger, &["FIXEDWINDOW", "1", "1s"]),
    ]);
    forge(high, low, &ten_years);
    wait_for_policy(low, "marker2");
    assert_eq!(
        policy_on(low, "later"),
        "",
        "the version ten years ahead was taken"
    );
    assert_eq!(count(low, "cluster_changes_refused"), 1);
    wait_for_log_line(low, &[&forger, "ahead of this node's clock"]);

    // Neither reaches any node: the markers do, and everything else is as it was.
    let marker = policy_on(low, "marker2");
    converged(&all, Duration::from_secs(20), "marker2", &marker);
    converged(&all, Duration::from_secs(20), "marker1", &marker);
    after_exchanges(&all, 4);
    converged(&all, Duration::ZERO, "api", &words);
    converged(&all, Duration::ZERO, "later", "");
    for node in &all {
        assert!(
            count(node, "policy_clock") <= ceiling(60),
            "port {}: clock {}",
            node.port,
            info(node, "policy_clock")
        );
    }

    // The next change of each name, on the node of the lowest id, wins everywhere and stays.
    let api = set(low, "api", &["GCRA", "22", "22", "1s"]);
    let later = set(low, "later", &["SLIDINGWINDOW", "22", "1m"]);
    converged(&all, Duration::from_secs(20), "api", &api);
    converged(&all, Duration::from_secs(20), "later", &later);
    after_exchanges(&all, 4);
    converged(&all, Duration::ZERO, "api", &api);
    converged(&all, Duration::ZERO, "later", &later);
}

/// After a table poisoned at the largest clock (`api` and `web` planted on every node with
/// RL.DEBUG.POLICYVERSION, as the module before bounded versions took them from a peer) has
/// been loaded, the next RL.POLICY.SET and RL.POLICY.DEL of those names, made on the node of
/// the lowest id, win on every node.
fn poisoned_table_recovers(nodes: &[Server]) {
    let all: Vec<&Server> = nodes.iter().collect();
    let low = &nodes[by_id(nodes)[0]];
    let api = policy_on(low, "api");
    // Each node loaded the policies: what they hold is kept.
    for node in &all {
        assert_eq!(policy_on(node, "api"), api, "port {}", node.port);
        assert!(!policy_on(node, "web").is_empty(), "port {}", node.port);
    }
    // As a client would, again while the restarted node has not caught up (TRYAGAIN).
    let set = ["RL.POLICY.SET", "api", "GCRA", "22", "22", "1s"];
    assert_eq!(at_once(low, &set).0, ok());
    assert_eq!(at_once(low, &["RL.POLICY.DEL", "web"]).0, Reply::Int(1));
    let api = policy_on(low, "api");
    assert!(api.contains("22"), "{api}");
    converged(&all, Duration::from_secs(20), "api", &api);
    converged(&all, Duration::from_secs(20), "web", "");
    after_exchanges(&all, 4);
    converged(&all, Duration::ZERO, "api", &api);
    converged(&all, Duration::ZERO, "web", "");
    // No clock is left past the bound (the loaded one was dropped, not kept for the next
    // change to count up from).
    for node in &all {
        assert_eq!(info(node, "policy_tombstones"), "1", "port {}", node.port);
        assert!(
            count(node, "policy_clock") <= ceiling(60),
            "port {}: clock {}",
            node.port,
            info(node, "policy_clock")
        );
    }
}

/// `api` and `web`, set on the node of the highest id and held by every node.
fn two_policies(nodes: &[Server]) {
    let all: Vec<&Server> = nodes.iter().collect();
    let high = &nodes[by_id(nodes)[nodes.len() - 1]];
    let api = set(high, "api", &["GCRA", "11", "11", "1s"]);
    let web = set(high, "web", &["FIXEDWINDOW", "11", "1m"]);
    converged(&all, Duration::from_secs(20), "api", &api);
    converged(&all, Duration::from_secs(20), "web", &web);
}

/// Plants the largest clock on `api` and `web` on every node (the digests stay equal: every
/// node holds the same).
fn plant_runaway(nodes: &[Server]) {
    for node in nodes {
        let mut c = node.client();
        for name in ["api", "web"] {
            assert_eq!(
                c.cmd(&["RL.DEBUG.POLICYVERSION", name, &RUNAWAY.to_string()]),
                ok()
            );
        }
        assert_eq!(info(node, "policy_clock"), RUNAWAY.to_string());
    }
}

#[test]
fn a_table_poisoned_at_the_largest_version_recovers_after_a_restart_from_its_rdb() {
    let mut nodes = cluster(3, 0);
    two_policies(&nodes);
    plant_runaway(&nodes);
    for node in &nodes {
        save(node);
    }
    restart_each(&mut nodes, |_| {});
    poisoned_table_recovers(&nodes);
}

/// The AOF the module before bounded versions wrote after it took a runaway version: its
/// RL.POLICY.SYNC, appended to a stopped node's AOF. On that module the node loads it, and
/// the names are frozen as above.
#[test]
fn a_table_poisoned_at_the_largest_version_recovers_after_a_restart_from_its_aof() {
    let mut nodes = cluster_with(3, 0, &AOF);
    two_policies(&nodes);
    let high = &nodes[by_id(&nodes)[2]];
    let (origin, api, web) = (
        node_id(high),
        policy_on(high, "api"),
        policy_on(high, "web"),
    );
    for node in &nodes {
        wait_for_aof(node, "\r\nweb\r\n");
    }
    let words = |rendered: &str| -> Vec<String> {
        rendered
            .trim_matches(|c| c == '[' || c == ']')
            .split(' ')
            .map(str::to_string)
            .collect()
    };
    let poisoned: Vec<Vec<String>> = [("api", &api), ("web", &web)]
        .into_iter()
        .map(|(name, held)| {
            let mut args: Vec<String> = ["RL.POLICY.SYNC", name, &RUNAWAY.to_string(), &origin]
                .map(str::to_string)
                .to_vec();
            args.push("SET".into());
            args.extend(words(held));
            args
        })
        .collect();
    restart_each(&mut nodes, |node| {
        // The last incremental file the manifest names is the one the server appends to. A
        // manifest line is `key value` pairs: `file name seq n type i`, and more keys on newer
        // servers (Redis 8 adds `startoffset`).
        let dir = node.dir.join("appendonlydir");
        let manifest =
            std::fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("the manifest");
        let incr = manifest
            .lines()
            .filter_map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                let value = |key: &str| {
                    words
                        .chunks(2)
                        .find(|pair| pair[0] == key)
                        .and_then(|pair| pair.get(1).copied())
                };
                (value("type") == Some("i"))
                    .then(|| value("file"))
                    .flatten()
            })
            .next_back()
            .expect("an incremental AOF")
            .to_string();
        let mut resp = String::new();
        for args in &poisoned {
            resp.push_str(&format!("*{}\r\n", args.len()));
            for a in args {
                resp.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
        }
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(incr))
            .and_then(|mut f| f.write_all(resp.as_bytes()))
            .expect("append to the AOF");
    });
    poisoned_table_recovers(&nodes);
}

/// The runaway versions go through an AOF rewrite without the RDB preamble (every policy
/// written again as RL.POLICY.SYNC with its version), and a restart loads them from there.
#[test]
fn a_table_poisoned_at_the_largest_version_recovers_after_an_aof_rewrite_and_a_restart() {
    let mut nodes = cluster_with(3, 0, &AOF);
    two_policies(&nodes);
    plant_runaway(&nodes);
    for node in &nodes {
        let mut c = node.client();
        assert!(matches!(c.cmd(&["BGREWRITEAOF"]), Reply::Simple(_)));
        c.wait_for_aof_rewrite();
        wait_for_aof(node, &format!("\r\n{RUNAWAY}\r\n"));
    }
    restart_each(&mut nodes, |_| {});
    poisoned_table_recovers(&nodes);
}

/// RL.POLICY.FORCE. The lowest node's bound is 10 s while a version 45 s ahead reaches the
/// cluster: it refuses that version (for 35 s, long enough for the test), and a plain
/// RL.POLICY.SET on it loses on every other node (its clock is the wall clock's, behind the
/// one they hold). RL.POLICY.FORCE there (with the bound back to the default in the same
/// transaction, so that no exchange between the two brings it the version ahead first) makes
/// its policy win on every node. FORCE of a name held nowhere answers 0; a user without
/// @admin or @dangerous cannot call it.
#[test]
fn rl_policy_force_makes_a_nodes_policy_win_over_a_version_ahead() {
    let nodes = cluster(3, 0);
    let all: Vec<&Server> = nodes.iter().collect();
    let order = by_id(&nodes);
    let (low, mid, high) = (&nodes[order[0]], &nodes[order[1]], &nodes[order[2]]);
    let forger = node_id(high);
    let words = set(high, "api", &["GCRA", "11", "11", "1s"]);
    converged(&all, Duration::from_secs(20), "api", &words);
    let mut c = low.client();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "ratelimit.policy-max-ahead", "10"]),
        ok()
    );

    // 45 s ahead, within the default bound: the middle node takes it, and the highest by the
    // exchange; the lowest refuses it when it is offered. (FORCE stamps 59 s ahead of its own
    // clock, later.)
    let (mid_refused, low_refused) = (
        count(mid, "cluster_changes_refused"),
        count(low, "cluster_changes_refused"),
    );
    let ahead = changes_message(&[Forged::live(
        "api",
        clock_at(wall_ms() + 45_000),
        &forger,
        &["GCRA", "33", "33", "1s"],
    )]);
    forge(high, mid, &ahead);
    let forged = "[GCRA 33 33 1s]";
    converged(&[mid, high], Duration::from_secs(20), "api", forged);
    assert_eq!(count(mid, "cluster_changes_refused"), mid_refused);
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(low, "cluster_changes_refused") == low_refused {
        assert!(
            Instant::now() < deadline,
            "the lowest node was never offered it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(policy_on(low, "api"), words);

    // A plain SET there: OK, and it loses on every other node, exchange after exchange.
    let mine = set(low, "api", &["GCRA", "44", "44", "1s"]);
    after_exchanges(&all, 4);
    assert_eq!(policy_on(low, "api"), mine);
    assert_eq!(policy_on(mid, "api"), forged);
    assert_eq!(policy_on(high, "api"), forged);

    // FORCE: its policy wins on every node, and stays.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    c.cmd(&["CONFIG", "SET", "ratelimit.policy-max-ahead", "60"]);
    c.cmd(&["RL.POLICY.FORCE", "api"]);
    assert_eq!(
        c.cmd(&["EXEC"]),
        Reply::Array(vec![ok(), Reply::Int(1)]),
        "CONFIG SET and RL.POLICY.FORCE in one transaction"
    );
    converged(&all, Duration::from_secs(20), "api", &mine);
    after_exchanges(&all, 4);
    converged(&all, Duration::ZERO, "api", &mine);

    // A name held nowhere (no policy, no tombstone): 0, and nothing changes.
    let digest = info(low, "policies_digest");
    for node in &all {
        assert_eq!(
            node.client().cmd(&["RL.POLICY.FORCE", "nothing"]),
            Reply::Int(0),
            "port {}",
            node.port
        );
    }
    assert_eq!(info(low, "policies_digest"), digest);
    assert_eq!(policy_on(low, "nothing"), "");

    // A deletion can be forced too: the tombstone wins, and the policy stays gone.
    assert_eq!(mid.client().cmd(&["RL.POLICY.DEL", "api"]), Reply::Int(1));
    assert_eq!(mid.client().cmd(&["RL.POLICY.FORCE", "api"]), Reply::Int(1));
    converged(&all, Duration::from_secs(20), "api", "");

    // ACL: it changes the policies, so it is @admin and @dangerous, like RL.POLICY.SET. On
    // Redis 7.0 module commands have no category: a user granted commands by name, as the docs
    // say there, does not have it.
    let mut admin = low.client();
    let mut users: Vec<Vec<&str>> = vec![vec![
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">pw",
        "~*",
        "+rl.limit",
        "+rl.policy.get",
    ]];
    if common::module_acl_categories(&mut admin) {
        users.push(vec![
            "ACL",
            "SETUSER",
            "ops",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-@dangerous",
        ]);
        users.push(vec![
            "ACL", "SETUSER", "noadmin", "on", ">pw", "~*", "+@all", "-@admin",
        ]);
        // As COMMAND INFO says and ACL DRYRUN enforces (Redis 7.2 and 7.4's ACL CAT lists no
        // module command).
        for category in ["admin", "dangerous"] {
            let members = common::module_category_members(&mut admin, category);
            assert!(
                members.contains(&"rl.policy.force".to_string()),
                "{category}: {members:?}"
            );
        }
    }
    for user in &users {
        assert_eq!(admin.cmd(user), ok());
        let mut as_user = Client::connect(low.port);
        assert_eq!(as_user.cmd(&["AUTH", user[2], "pw"]), ok());
        let e = as_user.cmd(&["RL.POLICY.FORCE", "api"]).error();
        assert!(e.starts_with("NOPERM"), "{}: {e}", user[2]);
    }
}

/// `ratelimit.policy-max-ahead` (seconds, 1 to 86400, default 60): at 5 on one node, a peer's
/// change 10 s ahead is refused there (and counted), one 2 s ahead is taken.
#[test]
fn ratelimit_policy_max_ahead_bounds_what_a_node_takes_from_its_peers() {
    let nodes = cluster(3, 0);
    let (target, sender) = (&nodes[1], &nodes[0]);
    let mut c = target.client();
    let setting = |c: &mut Client| {
        c.cmd(&["CONFIG", "GET", "ratelimit.policy-max-ahead"])
            .render()
    };
    assert_eq!(setting(&mut c), "[ratelimit.policy-max-ahead 60]");
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "ratelimit.policy-max-ahead", "5"]),
        ok()
    );
    for bad in ["0", "86401", "-1", "5s"] {
        let r = c.cmd(&["CONFIG", "SET", "ratelimit.policy-max-ahead", bad]);
        assert!(r.is_error(), "{bad}: {r:?}");
    }
    assert_eq!(setting(&mut c), "[ratelimit.policy-max-ahead 5]");

    let id = node_id(sender);
    let message = |name: &str, ahead_ms: u64, marker: &str| {
        changes_message(&[
            Forged::live(
                name,
                clock_at(wall_ms() + ahead_ms),
                &id,
                &["GCRA", "1", "1", "1s"],
            ),
            Forged::live(marker, 1, &id, &["FIXEDWINDOW", "1", "1s"]),
        ])
    };
    forge(sender, target, &message("ahead10", 10_000, "marker1"));
    wait_for_policy(target, "marker1");
    assert_eq!(policy_on(target, "ahead10"), "");
    assert_eq!(count(target, "cluster_changes_refused"), 1);
    wait_for_log_line(target, &[&id, "ahead of this node's clock"]);

    forge(sender, target, &message("ahead2", 2_000, "marker2"));
    wait_for_policy(target, "marker2");
    assert_eq!(policy_on(target, "ahead2"), "[GCRA 1 1 1s]");
    assert_eq!(count(target, "cluster_changes_refused"), 1);
}
