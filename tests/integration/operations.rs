//! Operations: the counters of `INFO ratelimit`, the `ratelimit.denied` keyspace event, the
//! settings (load arguments, `CONFIG SET/GET`), and what the module says about the server
//! version it runs on.

use crate::common;

use std::collections::BTreeMap;

use crate::common::{module_path, modules, Client, Config, Reply, Server, T0_MS};

/// The `INFO` text of `section`.
fn info(c: &mut Client, section: &str) -> String {
    c.cmd(&["INFO", section]).text()
}

/// The lines of the section `ratelimit_commandstats`, as command name -> counters text.
fn commandstats(c: &mut Client) -> BTreeMap<String, String> {
    let text = info(c, "ratelimit_commandstats");
    let mut lines = text.split("\r\n");
    assert_eq!(lines.next(), Some("# ratelimit_commandstats"), "{text:?}");
    lines
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, counters) = line
                .strip_prefix("ratelimit_")
                .and_then(|l| l.split_once(':'))
                .unwrap_or_else(|| panic!("not a counters line: {line:?}"));
            (name.to_string(), counters.to_string())
        })
        .collect()
}

fn counters(calls: u64, admitted: u64, denied: u64, errors: u64) -> String {
    format!("calls={calls},admitted={admitted},denied={denied},shadow_denied=0,errors={errors}")
}

/// The module's registered commands, in lowercase.
fn module_commands(c: &mut Client) -> Vec<String> {
    let Reply::Array(names) = c.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"]) else {
        panic!("COMMAND LIST did not answer an array");
    };
    let mut names: Vec<String> = names.iter().map(Reply::text).collect();
    names.sort();
    names
}

/// Redis's own `cmdstat_<name>` line: (calls, failed_calls).
fn redis_cmdstat(c: &mut Client, name: &str) -> (u64, u64) {
    let text = info(c, "commandstats");
    let Some(line) = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))
    else {
        return (0, 0);
    };
    let field = |f: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {f} in {line}"))
    };
    (field("calls"), field("failed_calls"))
}

/// A scripted sequence over every kind of call, then the exact counters.
#[test]
fn info_counts_calls_admissions_denials_and_errors_per_command() {
    let server = Server::start();
    let mut c = server.client();
    // Before any call: one line per registered command, every counter zero (RL.DEBUG.CLOCK
    // is a command too, so this comes first).
    let before = commandstats(&mut c);
    let names: Vec<String> = before.keys().cloned().collect();
    assert_eq!(names, module_commands(&mut c));
    assert!(
        before.values().all(|v| *v == counters(0, 0, 0, 0)),
        "{before:?}"
    );

    c.clock_set(T0_MS);
    let gcra = ["RL.GCRA", "k", "2", "1", "1m"];
    assert_eq!(c.cmd(&gcra).ints()[0], 1);
    assert_eq!(c.cmd(&gcra).ints()[0], 1);
    assert_eq!(c.cmd(&gcra).ints()[0], 0);
    // Previews count as calls only, denied (DRYRUN) or admitted (COST 0).
    assert_eq!(c.cmd(&[&gcra[..], &["DRYRUN"]].concat()).ints()[0], 0);
    assert_eq!(c.cmd(&[&gcra[..], &["COST", "0"]].concat()).ints()[0], 1);
    // Errors: a bad argument, another type's key, a client sending an internal command.
    assert!(c.cmd(&["RL.GCRA", "k", "x", "1", "1m"]).is_error());
    c.cmd(&["SET", "s", "v"]);
    assert!(c.cmd(&["RL.GCRA", "s", "2", "1", "1m"]).is_error());
    assert!(c
        .cmd(&["RL.REPLAY", "k", "1:1:RL.GCRA:2", "1", "1m"])
        .is_error());
    // A caught panic is an error too.
    assert!(c.cmd(&["RL.DEBUG.PANIC"]).is_error());
    // redis-cell's reply: limited = 1 is a denial.
    assert_eq!(c.cmd(&["CL.THROTTLE", "c", "0", "1", "60"]).ints()[0], 0);
    assert_eq!(c.cmd(&["CL.THROTTLE", "c", "0", "1", "60"]).ints()[0], 1);
    // One admission and one denial for each other algorithm.
    for call in [
        &["RL.TOKENBUCKET", "tb", "1", "1", "1m"][..],
        &["RL.LEAKYBUCKET", "lb", "1", "1", "1m"],
        &["RL.FIXEDWINDOW", "fw", "1", "1m"],
        &["RL.SLIDINGWINDOW", "sw", "1", "1m"],
        &["RL.SLIDINGLOG", "sl", "1", "1m"],
    ] {
        assert_eq!(c.cmd(call).ints()[0], 1, "{call:?}");
        assert_eq!(c.cmd(call).ints()[0], 0, "{call:?}");
    }
    let acquire = ["RL.CONCURRENCY.ACQUIRE", "l", "1", "1m", "ID", "t1"];
    assert_eq!(c.cmd(&acquire).render(), "[1 1 0 0 60000 t1]");
    let other = ["RL.CONCURRENCY.ACQUIRE", "l", "1", "1m", "ID", "t2"];
    assert_eq!(c.cmd(&other).render(), "[0 1 0 60000 60000 (nil)]");
    assert_eq!(
        c.cmd(&[&other[..], &["DRYRUN"]].concat()).render(),
        "[0 1 0 60000 60000 (nil)]"
    );
    assert_eq!(c.cmd(&["RL.CONCURRENCY.RELEASE", "l", "t1"]), Reply::Int(1));
    // RL.LIMIT like every admission command; the policy commands count calls.
    let set = ["RL.POLICY.SET", "p", "FIXEDWINDOW", "1", "1m"];
    assert_eq!(c.cmd(&set), Reply::Simple("OK".into()));
    let limit = ["RL.LIMIT", "lim", "p"];
    assert_eq!(c.cmd(&limit).ints()[0], 1);
    assert_eq!(c.cmd(&limit).ints()[0], 0);
    assert_eq!(c.cmd(&[&limit[..], &["DRYRUN"]].concat()).ints()[0], 0);
    assert!(c.cmd(&["RL.LIMIT", "lim", "nope"]).is_error());
    assert!(matches!(c.cmd(&["RL.INSPECT", "k"]), Reply::Array(_)));
    // Inside a transaction each command counts as itself.
    c.cmd(&["MULTI"]);
    c.cmd(&gcra);
    assert_eq!(c.cmd(&["EXEC"]).render(), "[[0 2 0 60000 120000]]");

    let mut expected: BTreeMap<String, String> = names
        .iter()
        .map(|n| (n.clone(), counters(0, 0, 0, 0)))
        .collect();
    for (name, line) in [
        ("rl.gcra", counters(8, 2, 2, 2)),
        ("cl.throttle", counters(2, 1, 1, 0)),
        ("rl.tokenbucket", counters(2, 1, 1, 0)),
        ("rl.leakybucket", counters(2, 1, 1, 0)),
        ("rl.fixedwindow", counters(2, 1, 1, 0)),
        ("rl.slidingwindow", counters(2, 1, 1, 0)),
        ("rl.slidinglog", counters(2, 1, 1, 0)),
        ("rl.concurrency.acquire", counters(3, 1, 1, 0)),
        ("rl.concurrency.release", counters(1, 0, 0, 0)),
        ("rl.limit", counters(4, 1, 1, 1)),
        ("rl.policy.set", counters(1, 0, 0, 0)),
        ("rl.inspect", counters(1, 0, 0, 0)),
        ("rl.debug.clock", counters(1, 0, 0, 0)),
        ("rl.debug.panic", counters(1, 0, 0, 1)),
        ("rl.replay", counters(1, 0, 0, 1)),
    ] {
        expected.insert(name.to_string(), line);
    }
    assert_eq!(commandstats(&mut c), expected);

    // The exact text, as INFO prints it: a header, then `ratelimit_<command>:` and the
    // counters, in the order of the module's command table.
    let text = info(&mut c, "ratelimit");
    assert!(text.starts_with(
        "# ratelimit_commandstats\r\n\
         ratelimit_rl.gcra:calls=8,admitted=2,denied=2,shadow_denied=0,errors=2\r\n\
         ratelimit_cl.throttle:calls=2,admitted=1,denied=1,shadow_denied=0,errors=0\r\n\
         ratelimit_rl.tokenbucket:calls=2,admitted=1,denied=1,shadow_denied=0,errors=0\r\n"
    ));
    assert!(text.contains(
        "\r\nratelimit_rl.replay:calls=1,admitted=0,denied=0,shadow_denied=0,errors=1\r\n"
    ));
    // The same section by its own name (INFO ratelimit then adds the policy table's, RL.TOP's
    // and the memory sections), and within INFO modules / everything; not in the default INFO
    // or INFO all, which leave module sections out. The sections of a line per policy and
    // per rule come only by name: INFO ratelimit costs the same whatever the policies.
    let section = info(&mut c, "ratelimit_commandstats");
    let others: Vec<String> = ["policies", "top", "memory", "policystats", "rulestats"]
        .iter()
        .map(|s| info(&mut c, &format!("ratelimit_{s}")))
        .collect();
    assert_eq!(text, format!("{section}\r\n{}", others[..3].join("\r\n")));
    assert_eq!(
        others[3],
        "# ratelimit_policystats\r\nratelimit_p:calls=3,admitted=1,denied=1,shadow_denied=0\r\n"
    );
    assert_eq!(
        others[4],
        "# ratelimit_rulestats\r\nratelimit_p.0:shadow=0,denied=1\r\n"
    );
    // Asked for with another section, they come too.
    assert_eq!(
        c.cmd(&["INFO", "ratelimit_top", "ratelimit_policystats"])
            .text(),
        format!("{}\r\n{}", others[1], others[3])
    );
    // The table of one policy on a standalone server: no exchange, no message; its digest 16
    // hex digits (docs/cluster.md).
    let digest = others[0]
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_policies_digest:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        digest.len() == 16
            && digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{digest}"
    );
    // Its clock: the wall clock's ms when the policy was set, in the high 48 bits, and the
    // counter at 0 (the first change of that ms).
    let clock: u64 = others[0]
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_policy_clock:"))
        .unwrap_or_default()
        .parse()
        .unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        clock & 0xffff == 0 && (now_ms - 600_000..=now_ms).contains(&(clock >> 16)),
        "{clock}"
    );
    assert_eq!(
        others[0],
        format!(
            "# ratelimit_policies\r\nratelimit_policies:1\r\nratelimit_policy_tombstones:0\r\n\
             ratelimit_policies_digest:{digest}\r\nratelimit_policy_clock:{clock}\r\n\
             ratelimit_policies_caught_up:1\r\n\
             ratelimit_cluster_exchange:0\r\nratelimit_cluster_messages_sent:0\r\n\
             ratelimit_cluster_messages_received:0\r\nratelimit_cluster_messages_refused:0\r\n\
             ratelimit_cluster_changes_applied:0\r\nratelimit_cluster_changes_refused:0\r\n\
             ratelimit_cluster_answers_skipped:0\r\n"
        )
    );
    let modules = info(&mut c, "modules");
    // Newer servers list modules of their own there too (Redis 8: vectorset), in any order.
    assert!(modules.starts_with("# Modules\r\n"), "{modules}");
    assert!(
        modules
            .lines()
            .any(|line| line.starts_with("module:name=ratelimit,")),
        "{modules}"
    );
    assert!(modules.ends_with(&format!("\r\n\r\n{text}")), "{modules}");
    assert!(info(&mut c, "everything").contains(&text));
    assert!(!info(&mut c, "default").contains("ratelimit_"));
    assert!(!info(&mut c, "all").contains("ratelimit_"));
    assert!(!info(&mut c, "server").contains("ratelimit_"));

    // Redis's own commandstats count the same calls, and its failed_calls are our errors.
    for name in ["rl.gcra", "cl.throttle", "rl.debug.panic", "rl.replay"] {
        let ours = &expected[name];
        let (calls, failed) = redis_cmdstat(&mut c, name);
        assert!(
            ours.starts_with(&format!("calls={calls},"))
                && ours.ends_with(&format!(",errors={failed}")),
            "{name}: ours {ours}, Redis's calls={calls} failed_calls={failed}"
        );
    }
    // CONFIG RESETSTAT resets Redis's statistics and the module's (tests/integration/observe.rs has
    // the details).
    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), Reply::Simple("OK".into()));
    assert_eq!(redis_cmdstat(&mut c, "rl.gcra"), (0, 0));
    let reset: BTreeMap<String, String> = names
        .iter()
        .map(|n| (n.clone(), counters(0, 0, 0, 0)))
        .collect();
    assert_eq!(commandstats(&mut c), reset);
}

#[test]
fn with_cell_compat_off_cl_throttle_has_no_line() {
    let server = Server::with(Config::default().module_args(&["cell-compat", "no"]));
    let mut c = server.client();
    let stats = commandstats(&mut c);
    assert!(!stats.contains_key("cl.throttle"), "{stats:?}");
    assert_eq!(
        stats.keys().cloned().collect::<Vec<_>>(),
        module_commands(&mut c)
    );
}

/// The script for redis_exporter's `--script` option turns the counters into name/value
/// pairs (redis_exporter evaluates it with `EVAL script 0 0`).
#[test]
fn the_redis_exporter_script_exports_every_counter() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    c.cmd(&["RL.GCRA", "k", "1", "1", "1m"]);
    c.cmd(&["RL.GCRA", "k", "1", "1", "1m"]);
    let script = include_str!("../../scripts/redis_exporter.lua");
    let Reply::Array(items) = c.cmd(&["EVAL", script, "0", "0"]) else {
        panic!("the script did not return an array");
    };
    let pairs: Vec<(String, String)> = items
        .chunks(2)
        .map(|kv| match kv {
            [Reply::Bulk(k), Reply::Bulk(v)] => (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ),
            other => panic!("not a pair of strings: {other:?}"),
        })
        .collect();
    let commands = module_commands(&mut c);
    assert_eq!(pairs.len(), commands.len() * 5);
    for (key, value) in [
        ("rl.gcra_calls", "2"),
        ("rl.gcra_admitted", "1"),
        ("rl.gcra_denied", "1"),
        ("rl.gcra_errors", "0"),
        ("rl.debug.clock_calls", "1"),
        ("cl.throttle_denied", "0"),
    ] {
        assert!(
            pairs.contains(&(key.to_string(), value.to_string())),
            "{key}={value} missing from {pairs:?}"
        );
    }
}

/// A subscriber of every keyspace event in db 0.
fn subscriber(server: &Server) -> Client {
    let mut s = server.client();
    let r = s.cmd(&["PSUBSCRIBE", "__key*@0__:*"]);
    assert_eq!(r.render(), "[psubscribe __key*@0__:* 1]");
    s
}

const MARKER: &str = "__keyevent@0__:end-of-test";

/// Bytes as text, non-ASCII escaped: exact, and readable in a failed assertion.
fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Publishes a marker, then reads what `s` received up to it: (channel, message) pairs.
/// Messages reach a subscriber in the order they were published, so everything the
/// commands before the marker published is in the list, with no waiting.
fn received(c: &mut Client, s: &mut Client) -> Vec<(String, String)> {
    c.cmd(&["PUBLISH", MARKER, "x"]);
    let mut out = Vec::new();
    loop {
        let Reply::Array(m) = s.read() else {
            panic!("not a message");
        };
        let [Reply::Bulk(kind), _, Reply::Bulk(channel), Reply::Bulk(message)] = &m[..] else {
            panic!("not a pmessage: {m:?}");
        };
        assert_eq!(kind, b"pmessage");
        if channel == MARKER.as_bytes() {
            return out;
        }
        out.push((shown(channel), shown(message)));
    }
}

/// The two events of a denial on `key` with `K` and `E` on: the key's channel, then the
/// event's.
fn denial(key: &[u8]) -> [(String, String); 2] {
    [
        (
            format!("__keyspace@0__:{}", shown(key)),
            "ratelimit.denied".to_string(),
        ),
        ("__keyevent@0__:ratelimit.denied".to_string(), shown(key)),
    ]
}

#[test]
fn a_subscriber_receives_exactly_the_denials() {
    let server = Server::with(Config::default().extra(&["--notify-keyspace-events", "KEd"]));
    let mut c = server.client();
    let mut s = subscriber(&server);
    c.clock_set(T0_MS);
    let mut expected = Vec::new();

    let gcra = ["RL.GCRA", "a", "1", "1", "1h"];
    assert_eq!(c.cmd(&gcra).ints()[0], 1);
    assert_eq!(c.cmd(&gcra).ints()[0], 0);
    expected.extend(denial(b"a"));
    // Previews and errors publish nothing.
    assert_eq!(c.cmd(&[&gcra[..], &["DRYRUN"]].concat()).ints()[0], 0);
    assert!(c.cmd(&["RL.GCRA", "a", "0", "1", "1h"]).is_error());
    // A denial that starts a BLOCK penalty is published; a COST 0 peek at the blocked key,
    // denied too, is not.
    let blocking = ["RL.GCRA", "b", "1", "1", "1h", "BLOCK", "2h"];
    assert_eq!(c.cmd(&blocking).ints()[0], 1);
    assert_eq!(c.cmd(&blocking).ints()[..4], [0, 1, 0, 7_200_000]);
    expected.extend(denial(b"b"));
    let peek = ["RL.GCRA", "b", "1", "1", "1h", "COST", "0"];
    assert_eq!(c.cmd(&peek).ints()[0], 0);
    // Every admission command, CL.THROTTLE and the concurrency limiter included.
    for (key, call) in [
        ("c", &["CL.THROTTLE", "c", "0", "1", "60"][..]),
        ("tb", &["RL.TOKENBUCKET", "tb", "1", "1", "1m"]),
        ("lb", &["RL.LEAKYBUCKET", "lb", "1", "1", "1m"]),
        ("fw", &["RL.FIXEDWINDOW", "fw", "1", "1m"]),
        ("sw", &["RL.SLIDINGWINDOW", "sw", "1", "1m"]),
        ("sl", &["RL.SLIDINGLOG", "sl", "1", "1m"]),
        ("l", &["RL.CONCURRENCY.ACQUIRE", "l", "1", "1m"]),
    ] {
        assert!(matches!(c.cmd(call), Reply::Array(_)));
        assert!(matches!(c.cmd(call), Reply::Array(_)));
        expected.extend(denial(key.as_bytes()));
    }
    // RL.LIMIT: a denial by any rule is published, a DRYRUN one is not.
    let set = [
        "RL.POLICY.SET",
        "p",
        "GCRA",
        "5",
        "5",
        "1m",
        "FIXEDWINDOW",
        "1",
        "1h",
    ];
    assert_eq!(c.cmd(&set), Reply::Simple("OK".into()));
    assert_eq!(c.cmd(&["RL.LIMIT", "lim", "p"]).ints()[0], 1);
    assert_eq!(c.cmd(&["RL.LIMIT", "lim", "p", "DRYRUN"]).ints()[0], 0);
    assert_eq!(
        c.cmd(&["RL.LIMIT", "lim", "p"]).ints()[..6],
        [0, 1, 0, 2_800_000, 2_800_000, 1]
    );
    expected.extend(denial(b"lim"));
    let acquire_dryrun = ["RL.CONCURRENCY.ACQUIRE", "l", "1", "1m", "DRYRUN"];
    assert_eq!(c.cmd(&acquire_dryrun).render(), "[0 1 0 60000 60000 (nil)]");
    assert!(matches!(c.cmd(&["RL.INSPECT", "a"]), Reply::Array(_)));
    // In a transaction, and on a key of any bytes.
    c.cmd(&["MULTI"]);
    c.cmd(&gcra);
    c.cmd(&["EXEC"]);
    expected.extend(denial(b"a"));
    let key: &[u8] = b"user:\x00\xff \r\n";
    c.cmd_bytes(&[b"RL.GCRA", key, b"1", b"1", b"1h"]);
    c.cmd_bytes(&[b"RL.GCRA", key, b"1", b"1", b"1h"]);
    expected.extend(denial(key));

    assert_eq!(received(&mut c, &mut s), expected);
}

#[test]
fn nothing_is_published_unless_module_events_are_on() {
    let server = Server::start();
    let mut c = server.client();
    let mut s = subscriber(&server);
    c.clock_set(T0_MS);
    let gcra = ["RL.GCRA", "a", "1", "1", "1h"];
    let set = |c: &mut Client, flags: &str| {
        let r = c.cmd(&["CONFIG", "SET", "notify-keyspace-events", flags]);
        assert_eq!(r, Reply::Simple("OK".into()), "{flags}");
    };
    // Off (the default).
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "notify-keyspace-events"]).render(),
        "[notify-keyspace-events ]"
    );
    c.cmd(&gcra);
    assert_eq!(c.cmd(&gcra).ints()[0], 0);
    // Every other class on, but not module events: SET publishes, a denial does not.
    set(&mut c, "KEg$lshzxet");
    assert_eq!(c.cmd(&gcra).ints()[0], 0);
    c.cmd(&["SET", "x", "1"]);
    // Module events without K or E: nothing anywhere.
    set(&mut c, "d");
    assert_eq!(c.cmd(&gcra).ints()[0], 0);
    // Keyspace channel only.
    set(&mut c, "Kd");
    assert_eq!(c.cmd(&gcra).ints()[0], 0);
    // A (all classes) includes module events.
    set(&mut c, "EA");
    assert_eq!(c.cmd(&gcra).ints()[0], 0);

    let [keyspace, keyevent] = denial(b"a");
    assert_eq!(
        received(&mut c, &mut s),
        [
            ("__keyspace@0__:x".to_string(), "set".to_string()),
            ("__keyevent@0__:set".to_string(), "x".to_string()),
            keyspace,
            keyevent,
        ]
    );
}

/// A primary and a replica of it, the replica with every keyspace event on.
fn pair() -> (Server, Server) {
    common::replicated(Config::default().extra(&["--notify-keyspace-events", "KEA"]))
}

/// A replica counts what it replays under RL.REPLAY, never under the client's command, and
/// publishes nothing for a replayed denial: the primary did, for its client.
#[test]
fn a_replica_counts_replays_as_rl_replay_and_publishes_nothing() {
    let (primary, replica) = pair();
    let (mut p, mut r) = (primary.client(), replica.client());
    let mut s = subscriber(&replica);
    p.clock_set(T0_MS);
    let blocking = ["RL.GCRA", "k", "1", "1", "1h", "BLOCK", "2h"];
    assert_eq!(p.cmd(&blocking).ints()[0], 1);
    // Denied, and a write: the block reaches the replica, which replays the denial.
    assert_eq!(p.cmd(&blocking).ints()[0], 0);
    assert_eq!(p.cmd(&[&blocking[..], &["DRYRUN"]].concat()).ints()[0], 0);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]), Reply::Int(1));
    let blocked = p.cmd(&["RL.INSPECT", "k"]).field("blocked_until_us");
    assert_eq!(
        r.cmd(&["RL.INSPECT", "k"]).field("blocked_until_us"),
        blocked
    );

    assert_eq!(commandstats(&mut p)["rl.gcra"], counters(3, 1, 1, 0));
    assert_eq!(commandstats(&mut p)["rl.replay"], counters(0, 0, 0, 0));
    let on_replica = commandstats(&mut r);
    assert_eq!(on_replica["rl.gcra"], counters(0, 0, 0, 0));
    assert_eq!(on_replica["rl.replay"], counters(2, 1, 1, 0));
    // Nothing published on the replica (its subscriber has every class of event on).
    assert_eq!(received(&mut r, &mut s), Vec::<(String, String)>::new());
}

/// Every setting, with its default when no load argument is given.
#[test]
fn config_get_lists_every_setting_with_its_default() {
    let server = Server::with(Config::default().module_args(&[]));
    let mut c = server.client();
    let r = c.cmd(&["CONFIG", "GET", "ratelimit.*"]);
    let Reply::Array(items) = r else {
        panic!("CONFIG GET did not answer an array");
    };
    let settings: BTreeMap<String, String> = items
        .chunks(2)
        .map(|kv| (kv[0].text(), kv[1].text()))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("ratelimit.cell-compat", "yes"),
        ("ratelimit.debug-clock", "no"),
        ("ratelimit.sliding-log-max-limit", "1000000"),
        ("ratelimit.concurrency-max-limit", "100000"),
        ("ratelimit.top-size", "100"),
        ("ratelimit.top-period", "60"),
        ("ratelimit.policy-max-ahead", "60"),
        ("ratelimit.max-policies", "10000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(settings, expected);
}

fn config_get(c: &mut Client, name: &str) -> String {
    let r = c.cmd(&["CONFIG", "GET", name]);
    match &r {
        Reply::Array(kv) if kv.len() == 2 => kv[1].text(),
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

fn config_set(c: &mut Client, name: &str, value: &str) -> Reply {
    c.cmd(&["CONFIG", "SET", name, value])
}

#[test]
fn config_set_round_trips_and_refuses_bad_values_exactly() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let name = "ratelimit.sliding-log-max-limit";
    assert_eq!(config_set(&mut c, name, "5"), Reply::Simple("OK".into()));
    assert_eq!(config_get(&mut c, name), "5");
    // The next command uses it.
    assert_eq!(
        c.cmd(&["RL.SLIDINGLOG", "k", "6", "1m"]).error(),
        "ERR invalid limit: expected an integer from 1 to 5 (the module setting \
         ratelimit.sliding-log-max-limit bounds it)"
    );
    assert_eq!(
        c.cmd(&["RL.SLIDINGLOG", "k", "5", "1m"]).ints(),
        [1, 5, 4, 0, 60_000]
    );
    // Case does not matter to CONFIG.
    assert_eq!(
        config_set(&mut c, "RATELIMIT.SLIDING-LOG-MAX-LIMIT", "1000000000"),
        Reply::Simple("OK".into())
    );
    assert_eq!(config_get(&mut c, name), "1000000000");

    let failed = |arg: &str, why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{arg}') - {why}")
    };
    let range = "argument must be between 1 and 1000000000 inclusive";
    for (value, why) in [
        ("0", range),
        ("-1", range),
        ("1000000001", range),
        ("abc", "argument couldn't be parsed into an integer"),
        ("", "argument couldn't be parsed into an integer"),
        // Redis's own parser: no leading zero, no sign (docs/commands.md, Arguments), as for the
        // load argument.
        ("05", "argument couldn't be parsed into an integer"),
        ("+5", "argument couldn't be parsed into an integer"),
    ] {
        assert_eq!(
            config_set(&mut c, name, value).error(),
            failed(name, why),
            "{value:?}"
        );
    }
    for setting in ["ratelimit.cell-compat", "ratelimit.debug-clock"] {
        for value in ["yes", "no"] {
            assert_eq!(
                config_set(&mut c, setting, value).error(),
                failed(setting, "can't set immutable config"),
                "{setting} {value}"
            );
        }
    }
    assert_eq!(
        config_set(&mut c, "ratelimit.nope", "1").error(),
        "ERR Unknown option or number of arguments for CONFIG SET - 'ratelimit.nope'"
    );
    // Nothing refused changed anything.
    assert_eq!(config_get(&mut c, name), "1000000000");
    assert_eq!(config_get(&mut c, "ratelimit.cell-compat"), "yes");
    assert_eq!(config_get(&mut c, "ratelimit.debug-clock"), "yes");
}

/// A bad load argument refuses the load, with a line in the server log that names it.
#[test]
fn bad_load_arguments_refuse_the_load_with_a_clear_line() {
    for (args, line) in [
        (
            &["sliding-log-max-limit", "abc"][..],
            "sliding-log-max-limit takes a whole number from 1 to 1000000000, not 'abc'",
        ),
        (
            &["sliding-log-max-limit", "0"],
            "sliding-log-max-limit takes a whole number from 1 to 1000000000, not '0'",
        ),
        (
            &["concurrency-max-limit", "10000001"],
            "concurrency-max-limit takes a whole number from 1 to 10000000, not '10000001'",
        ),
        (
            &["sliding-log-max-limit", "05"],
            "sliding-log-max-limit takes a whole number from 1 to 1000000000, not '05'",
        ),
        (
            &["sliding-log-max-limit", "+5"],
            "sliding-log-max-limit takes a whole number from 1 to 1000000000, not '+5'",
        ),
        (
            &["sliding-log-max-limit", "99999999999999999999"],
            "sliding-log-max-limit takes a whole number from 1 to 1000000000, not \
             '99999999999999999999'",
        ),
        (
            &["cell-compat", "maybe"],
            "cell-compat takes yes or no, not 'maybe'",
        ),
        (
            &["debug-clock", "YES"],
            "debug-clock takes yes or no, not 'YES'",
        ),
        (
            &["frobnicate", "yes"],
            "unknown load argument 'frobnicate': expected one of cell-compat, debug-clock, \
             sliding-log-max-limit, concurrency-max-limit, top-size, top-period, \
             policy-max-ahead, max-policies",
        ),
        (
            &["debug-clock", "yes", "cell-compat"],
            "load arguments come in pairs: name value",
        ),
        // Written as it is: a log line is never a printf format.
        (
            &["cell-compat", "%s%s%s%n"],
            "cell-compat takes yes or no, not '%s%s%s%n'",
        ),
    ] {
        match Server::try_with(Config::default().module_args(args)) {
            Ok(_) => panic!("the module loaded with {args:?}"),
            Err(log) => assert!(
                log.contains(&format!("<ratelimit> refusing to load: {line}\n")),
                "{args:?}: {log}"
            ),
        }
    }
}

/// `ratelimit.<name>` directives (redis.conf or the command line) set the settings too; a
/// load argument overrides one.
#[test]
fn directives_set_settings_and_load_arguments_override_them() {
    let server = Server::with(
        Config::default()
            .module_args(&["sliding-log-max-limit", "9"])
            .extra(&[
                "--ratelimit.sliding-log-max-limit",
                "7",
                "--ratelimit.cell-compat",
                "no",
            ]),
    );
    let mut c = server.client();
    assert_eq!(config_get(&mut c, "ratelimit.sliding-log-max-limit"), "9");
    assert_eq!(config_get(&mut c, "ratelimit.cell-compat"), "no");
    assert_eq!(config_get(&mut c, "ratelimit.debug-clock"), "no");
    let e = c.cmd(&["CL.THROTTLE", "k", "1", "1", "1"]).error();
    assert!(e.starts_with("ERR unknown command 'CL.THROTTLE'"), "{e}");
    // A directive out of range refuses to start, as Redis checks it.
    let refused =
        Server::try_with(Config::default().extra(&["--ratelimit.sliding-log-max-limit", "0"]));
    let log = refused.err().expect("the server started");
    assert!(
        log.contains(
            "Issue during loading of configuration ratelimit.sliding-log-max-limit : argument \
             must be between 1 and 1000000000 inclusive"
        ),
        "{log}"
    );
}

/// MODULE LOAD at runtime: a refused load answers Redis's generic error and logs why; the
/// server carries on and a good load then works.
#[test]
fn module_load_refuses_bad_arguments_and_then_loads() {
    let mut config = Config::default().extra(&["--enable-module-command", "yes"]);
    config.load_module = false;
    let server = Server::with(config);
    let mut c = server.client();
    let path = module_path().display().to_string();
    assert_eq!(
        c.cmd(&["MODULE", "LOAD", &path, "sliding-log-max-limit", "1e6"])
            .error(),
        "ERR Error loading the extension. Please check the server logs."
    );
    assert!(server.log().contains(
        "<ratelimit> refusing to load: sliding-log-max-limit takes a whole number from 1 to \
         1000000000, not '1e6'"
    ));
    assert!(!modules(&mut c).iter().any(|(name, _)| name == "ratelimit"));
    assert_eq!(
        c.cmd(&["MODULE", "LOAD", &path, "sliding-log-max-limit", "100"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(config_get(&mut c, "ratelimit.sliding-log-max-limit"), "100");
    assert_eq!(c.cmd(&["RL.GCRA", "k", "1", "1", "1s"]).ints()[0], 1);
    assert_eq!(commandstats(&mut c)["rl.gcra"], counters(1, 1, 0, 0));
}

/// The server's version as (major, minor).
fn version(c: &mut Client) -> (u32, u32) {
    let v = c.info_field("server", "redis_version");
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// Before Redis 7.2 two module-API functions are missing; the module loads anyway and logs
/// what it does instead, once.
#[test]
fn the_log_says_what_an_older_server_lacks() {
    let server = Server::start();
    let mut c = server.client();
    let log = server.log();
    let lines = [
        "<ratelimit> this server has no RedisModule_CachedMicroseconds (Redis 7.2+): the clock \
         reads the system clock in microseconds, once per command\n",
        "<ratelimit> this server has no RedisModule_SetCommandACLCategories (Redis 7.2+): \
         commands belong to no ACL category; grant them to users by name (+rl.gcra ...)\n",
    ];
    let older = version(&mut c) < (7, 2);
    for line in lines {
        assert_eq!(
            log.matches(line).count(),
            usize::from(older),
            "{line}\n{log}"
        );
    }
}
