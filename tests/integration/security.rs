//! Least privilege, memory limits and clock trouble, against real servers.

use crate::common;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// Every admission command, with parameters that admit 3 at once, on `key`.
fn admissions(key: &str) -> Vec<Vec<String>> {
    let k = key.to_string();
    let v = |args: &[&str]| -> Vec<String> {
        let mut call = vec![args[0].to_string(), k.clone()];
        call.extend(args[1..].iter().map(|a| a.to_string()));
        call
    };
    vec![
        v(&["RL.GCRA", "3", "1", "1h"]),
        v(&["CL.THROTTLE", "2", "1", "3600"]),
        v(&["RL.TOKENBUCKET", "3", "1", "1h"]),
        v(&["RL.LEAKYBUCKET", "3", "1", "1h"]),
        v(&["RL.FIXEDWINDOW", "3", "1d"]),
        v(&["RL.SLIDINGWINDOW", "3", "1d"]),
        v(&["RL.SLIDINGLOG", "3", "1h"]),
        v(&["RL.WARMUP", "1", "1h", "1h"]),
        v(&["RL.LIMIT", "p3"]),
    ]
}

/// The policy the RL.LIMIT call of [`admissions`] names: 3 an hour, like the others.
fn policy(c: &mut Client) {
    let set = [
        "RL.POLICY.SET",
        "p3",
        "GCRA",
        "3",
        "1",
        "1h",
        "FIXEDWINDOW",
        "10",
        "1d",
    ];
    assert_eq!(c.cmd(&set), Reply::Simple("OK".into()));
}

fn send(c: &mut Client, call: &[String]) -> Reply {
    let args: Vec<&str> = call.iter().map(String::as_str).collect();
    c.cmd(&args)
}

/// Whether an admission reply admitted (CL.THROTTLE's first field is "limited").
fn admitted(call: &[String], reply: &Reply) -> bool {
    let first = reply.ints()[0];
    if call[0] == "CL.THROTTLE" {
        first == 0
    } else {
        first == 1
    }
}

/// The recipe for Redis 7.0 in docs/security.md: the commands by name, the keys by pattern.
const RECIPE: &[&str] = &[
    "ACL",
    "SETUSER",
    "limiter",
    "on",
    ">secret",
    "~rl:*",
    "+rl.gcra",
    "+rl.tokenbucket",
    "+rl.leakybucket",
    "+rl.fixedwindow",
    "+rl.slidingwindow",
    "+rl.slidinglog",
    "+rl.warmup",
    "+rl.inspect",
    "+cl.throttle",
    "+rl.concurrency.acquire",
    "+rl.concurrency.release",
    "+rl.limit",
    "+rl.refund",
    "+rl.counter",
    "+rl.policy.get",
    "+rl.policy.list",
];

#[test]
fn acl_key_patterns_and_command_grants_apply_to_every_command() {
    let server = Server::start();
    let mut admin = server.client();
    admin.clock_set(T0_MS);
    policy(&mut admin);
    assert_eq!(admin.cmd(RECIPE), Reply::Simple("OK".into()));
    assert_eq!(
        admin.cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "+get", "+set"]),
        Reply::Simple("OK".into())
    );
    let mut limiter = server.client();
    assert_eq!(
        limiter.cmd(&["AUTH", "limiter", "secret"]),
        Reply::Simple("OK".into())
    );
    for (i, call) in admissions("rl:user:1").into_iter().enumerate() {
        let mut call = call;
        call[1] = format!("rl:user:{i}");
        assert!(admitted(&call, &send(&mut limiter, &call)), "{call:?}");
        let e = limiter.cmd(&["RL.INSPECT", &call[1]]);
        assert!(matches!(e, Reply::Array(_)), "{e:?}");
        // Any other key: NOPERM, through every command.
        call[1] = format!("other:{i}");
        let e = send(&mut limiter, &call).error();
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }
    let e = limiter.cmd(&["RL.INSPECT", "other:1"]).error();
    assert!(e.starts_with("NOPERM"), "{e}");
    // It reads the policies, and cannot change them.
    assert_eq!(
        limiter.cmd(&["RL.POLICY.LIST"]),
        Reply::Array(vec![Reply::Bulk(b"p3".to_vec())])
    );
    let e = limiter
        .cmd(&["RL.POLICY.SET", "p3", "FIXEDWINDOW", "1000", "1s"])
        .error();
    assert!(e.starts_with("NOPERM"), "{e}");
    assert!(limiter
        .cmd(&["GET", "rl:user:1"])
        .error()
        .starts_with("NOPERM"));
    // A user without the commands cannot run them, on any key.
    let mut app = server.client();
    assert_eq!(app.cmd(&["AUTH", "app", "pw"]), Reply::Simple("OK".into()));
    for call in admissions("rl:user:9") {
        let e = send(&mut app, &call).error();
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }
    assert_eq!(
        admin.cmd(&["EXISTS", "rl:user:9", "other:1"]),
        Reply::Int(0)
    );
    // The internal commands are refused whatever the ACL: even a user with every right.
    let e = admin
        .cmd(&["RL.REPLAY", "rl:x", "1:1:RL.GCRA:5", "1", "1h"])
        .error();
    assert!(e.contains("is internal"), "{e}");
    let e = admin.cmd(&["RL.LOADSTATE", "rl:x", "\x01\x01"]).error();
    assert!(e.contains("is internal"), "{e}");
    let e = admin
        .cmd(&["RL.POLICY.SYNC", "p3", "9", ZERO_NODE, "DEL", "0"])
        .error();
    assert!(e.contains("is internal"), "{e}");
}

/// A node id (the standalone one) for RL.POLICY.SYNC.
const ZERO_NODE: &str = "0000000000000000000000000000000000000000";

/// On Redis 7.0, what a `+@all` user must be refused by name (docs/security.md, Access control).
const SEVEN_ZERO_REVOKE: [&str; 10] = [
    "-rl.policy.set",
    "-rl.policy.del",
    "-rl.policy.force",
    "-rl.debug.clock",
    "-rl.debug.panic",
    "-rl.debug.clustermsg",
    "-rl.debug.policyversion",
    "-rl.replay",
    "-rl.loadstate",
    "-rl.policy.sync",
];

/// What docs/security.md promises of an application user: it runs every admission command,
/// RL.LIMIT,
/// RL.INSPECT and the policy reads on its keys, and gets NOPERM for a policy change, the
/// debug commands and the internal ones; the default user (every right) does all of them.
fn application_user_checks_limits_only(server: &Server, user: &str) {
    let mut admin = server.client();
    admin.clock_set(T0_MS);
    policy(&mut admin);
    let mut app = server.client();
    assert_eq!(app.cmd(&["AUTH", user, "pw"]), Reply::Simple("OK".into()));
    for (i, mut call) in admissions("rl:").into_iter().enumerate() {
        call[1] = format!("rl:{user}:{i}");
        assert!(admitted(&call, &send(&mut app, &call)), "{user}: {call:?}");
    }
    let lease = ["RL.CONCURRENCY.ACQUIRE", "rl:lease", "2", "1m", "ID", "job"];
    assert_eq!(app.cmd(&lease).render(), "[1 2 1 0 60000 job]", "{user}");
    assert_eq!(
        app.cmd(&["RL.CONCURRENCY.RELEASE", "rl:lease", "job"]),
        Reply::Int(1),
        "{user}"
    );
    assert!(matches!(
        app.cmd(&["RL.INSPECT", "rl:x"]),
        Reply::Nil | Reply::Array(_)
    ));
    assert_eq!(
        app.cmd(&["RL.POLICY.LIST"]),
        Reply::Array(vec![Reply::Bulk(b"p3".to_vec())])
    );
    assert!(matches!(app.cmd(&["RL.POLICY.GET", "p3"]), Reply::Array(_)));
    let forbidden: [&[&str]; 11] = [
        &["RL.POLICY.SET", "p3", "FIXEDWINDOW", "1000000000000", "1s"],
        &["RL.POLICY.SET", "new", "FIXEDWINDOW", "1", "1s"],
        &["RL.POLICY.DEL", "p3"],
        &["RL.POLICY.FORCE", "p3"],
        &["RL.DEBUG.POLICYVERSION", "p3", "1"],
        &["RL.DEBUG.CLOCK", "SET", "0"],
        &["RL.DEBUG.PANIC"],
        &["RL.REPLAY", "rl:x", "1:1:RL.GCRA:5", "1", "1h"],
        &["RL.LOADSTATE", "rl:x", "\x01\x01"],
        &["RL.DEBUG.CLUSTERMSG", "*", "x"],
        &["RL.POLICY.SYNC", "p3", "9", ZERO_NODE, "DEL", "0"],
    ];
    for call in forbidden {
        let e = app.cmd(call).error();
        assert!(e.starts_with("NOPERM"), "{user}: {call:?}: {e}");
    }
    // The policy is as it was, and the default user may change it.
    assert_eq!(admin.cmd(&["RL.POLICY.LIST"]).render(), "[p3]");
    assert_eq!(
        admin.cmd(&["RL.POLICY.SET", "p3", "GCRA", "3", "1", "1h"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(admin.cmd(&["RL.POLICY.DEL", "p3"]), Reply::Int(1));
    assert_eq!(admin.cmd(&["RL.DEBUG.CLOCK", "SET", "0"]), Reply::Int(0));
}

/// docs/security.md on every server: policies are server configuration, so `+@read +@write` does
/// not
/// reach RL.POLICY.SET or RL.POLICY.DEL (they are `@admin @dangerous`, like the debug and
/// internal commands). Redis 7.0 puts module commands in no category: there the README's
/// per-command rule does the same, and `+@read +@write` alone grants none of them.
#[test]
fn an_application_user_checks_limits_but_cannot_change_policies() {
    let server = Server::start();
    let mut admin = server.client();
    let categories = common::module_acl_categories(&mut admin);
    let mut recipe: Vec<&str> = RECIPE.to_vec();
    recipe[2] = "recipe";
    recipe[4] = ">pw";
    assert_eq!(admin.cmd(&recipe), Reply::Simple("OK".into()));
    let by_category = [
        "ACL", "SETUSER", "app", "on", ">pw", "~rl:*", "+@read", "+@write",
    ];
    assert_eq!(admin.cmd(&by_category), Reply::Simple("OK".into()));
    application_user_checks_limits_only(&server, "recipe");
    if categories {
        application_user_checks_limits_only(&server, "app");
        // Each category's members as COMMAND INFO says and ACL DRYRUN enforces them (Redis 7.2
        // and 7.4's ACL CAT lists no module command).
        let members = common::module_category_members;
        let privileged = [
            "rl.debug.clock",
            "rl.debug.clustermsg",
            "rl.debug.panic",
            "rl.debug.policyversion",
            "rl.loadstate",
            "rl.policy.del",
            "rl.policy.force",
            "rl.policy.set",
            "rl.policy.sync",
            "rl.replay",
        ];
        assert_eq!(members(&mut admin, "admin"), privileged);
        assert_eq!(members(&mut admin, "dangerous"), privileged);
        assert_eq!(
            members(&mut admin, "write"),
            [
                "cl.throttle",
                "rl.concurrency.acquire",
                "rl.concurrency.release",
                "rl.counter",
                "rl.fixedwindow",
                "rl.gcra",
                "rl.leakybucket",
                "rl.limit",
                "rl.refund",
                "rl.slidinglog",
                "rl.slidingwindow",
                "rl.tokenbucket",
                "rl.warmup",
            ]
        );
        assert_eq!(
            members(&mut admin, "read"),
            ["rl.inspect", "rl.policy.get", "rl.policy.list", "rl.top"]
        );
    }
    // An operator-like user `+@all -@dangerous`: on 7.2+ that takes the policy changes, the
    // debug and the internal commands away; on 7.0 `+@all` grants every module command, so
    // the README's rule names them.
    let mut rule = vec![
        "ACL",
        "SETUSER",
        "ops",
        "on",
        ">pw",
        "~*",
        "+@all",
        "-@dangerous",
    ];
    if !categories {
        rule.extend(SEVEN_ZERO_REVOKE);
    }
    assert_eq!(admin.cmd(&rule), Reply::Simple("OK".into()));
    let mut ops = server.client();
    assert_eq!(ops.cmd(&["AUTH", "ops", "pw"]), Reply::Simple("OK".into()));
    assert_eq!(ops.cmd(&["RL.GCRA", "k", "1", "1", "1s"]).ints()[0], 1);
    for call in [
        &["RL.POLICY.SET", "x", "GCRA", "1", "1", "1s"][..],
        &["RL.POLICY.DEL", "x"],
        &["RL.POLICY.FORCE", "x"],
        &["RL.DEBUG.CLOCK", "REAL"],
        &["RL.DEBUG.PANIC"],
        &["RL.DEBUG.POLICYVERSION", "x", "1"],
        &["RL.REPLAY", "k", "1:1:RL.GCRA:5", "1", "1h"],
        &["RL.LOADSTATE", "k", "x"],
    ] {
        let e = ops.cmd(call).error();
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }
    if !categories {
        let mut app = server.client();
        assert_eq!(app.cmd(&["AUTH", "app", "pw"]), Reply::Simple("OK".into()));
        for call in admissions("rl:app") {
            let e = send(&mut app, &call).error();
            assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
        }
    }
}

#[test]
fn out_of_memory_refuses_writes_and_eviction_starts_keys_fresh() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    policy(&mut c);
    for mut call in admissions("before") {
        call[1] = format!("before:{}", call[0]);
        assert!(admitted(&call, &send(&mut c, &call)));
    }
    let state = c.cmd(&["RL.INSPECT", "before:RL.GCRA"]);
    // noeviction and no room: every admission command answers OOM; reads still work.
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    c.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    for call in admissions("k") {
        let e = send(&mut c, &call).error();
        assert!(e.starts_with("OOM"), "{call:?}: {e}");
    }
    assert_eq!(c.cmd(&["RL.INSPECT", "before:RL.GCRA"]), state);
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    // With an eviction policy, evicted limiter keys simply start fresh.
    c.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    for i in 0..2000 {
        c.cmd(&["RL.GCRA", &format!("many:{i}"), "3", "1", "1h", "COST", "3"]);
    }
    let used: i64 = c.info_field("memory", "used_memory").parse().unwrap();
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    c.cmd(&["CONFIG", "SET", "maxmemory", &(used - 100_000).to_string()]);
    c.cmd(&["RL.GCRA", "trigger", "3", "1", "1h"]);
    let evicted: i64 = c.info_field("stats", "evicted_keys").parse().unwrap();
    assert!(evicted > 0, "nothing was evicted");
    let gone = (0..2000)
        .map(|i| format!("many:{i}"))
        .find(|k| c.cmd(&["EXISTS", k]) == Reply::Int(0))
        .expect("an evicted limiter key");
    // Its burst was spent; evicted, it admits again from a full burst.
    assert_eq!(
        c.cmd(&["RL.GCRA", &gone, "3", "1", "1h"]).ints(),
        [1, 3, 2, 0, 3_600_000]
    );
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
}

/// Clocks jump: backwards after a failover to a slower machine or an NTP step, forwards
/// after a suspend. A limiter must not hand out a second allowance because time went back,
/// and must work again once time moves on.
#[test]
fn the_clock_jumping_back_or_forward_never_admits_extra() {
    let server = Server::start();
    let mut c = server.client();
    policy(&mut c);
    for call in admissions("jump") {
        let name = call[0].clone();
        let mut call = call;
        call[1] = format!("jump:{name}");
        // Three each, but a warm-up key: one, then it spaces them (an hour apart when cold).
        let allowance = if name == "RL.WARMUP" { 1 } else { 3 };
        c.clock_set(T0_MS);
        let first: usize = (0..6)
            .filter(|_| admitted(&call, &send(&mut c, &call)))
            .count();
        assert_eq!(first, allowance, "{name}");
        // Back an hour, a day, thirty days: nothing more in (almost) no wall-clock time.
        for back_ms in [3_600_000u64, 86_400_000, 30 * 86_400_000] {
            c.clock_set(T0_MS - back_ms);
            let extra = (0..6)
                .filter(|_| admitted(&call, &send(&mut c, &call)))
                .count();
            assert_eq!(extra, 0, "{name}: {extra} admitted {back_ms} ms back");
        }
        // Forward years: a fresh allowance, and limiting again after it.
        c.clock_set(T0_MS + 3 * 365 * 86_400_000);
        let later = (0..6)
            .filter(|_| admitted(&call, &send(&mut c, &call)))
            .count();
        assert_eq!(later, allowance, "{name}");
        // Back to the first allowance's time: still nothing more.
        c.clock_set(T0_MS);
        let extra = (0..6)
            .filter(|_| admitted(&call, &send(&mut c, &call)))
            .count();
        assert_eq!(extra, 0, "{name}: back after the jump forward");
    }
    // The extremes of the debug clock never panic.
    for ms in ["0", "253402300799999"] {
        c.cmd(&["RL.DEBUG.CLOCK", "SET", ms]);
        for mut call in admissions("extreme") {
            call[1] = format!("extreme:{}", call[0]);
            assert!(
                matches!(send(&mut c, &call), Reply::Array(_)),
                "{call:?} at {ms}"
            );
        }
    }
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
}

/// No number a client types makes the module allocate for it: a key costs what was admitted.
#[test]
fn no_parameter_allocates_in_proportion_to_what_the_client_typed() {
    let server = Server::with(Config::default().module_args(&[
        "debug-clock",
        "yes",
        "sliding-log-max-limit",
        "1000000000",
    ]));
    let mut c = server.client();
    c.clock_set(T0_MS);
    c.cmd(&["RL.SLIDINGLOG", "small", "10", "3650d"]);
    c.cmd(&["RL.SLIDINGLOG", "huge", "1000000000", "3650d"]);
    let small = c.cmd(&["MEMORY", "USAGE", "small"]).int();
    let huge = c.cmd(&["MEMORY", "USAGE", "huge"]).int();
    assert_eq!(huge, small, "the largest limit costs what one entry costs");
    // One entry: the key around it (MEMORY USAGE counts its name, object and expiry, about
    // 133 bytes), the ring's first words and the boxed header of a log's index (no
    // checkpoint below 64 words): about 340 bytes; a parameter allocated for would be
    // megabytes.
    assert!(huge < 360, "{huge} bytes for one entry");
    // A COST of a million in one request is one entry, not a million.
    c.cmd(&[
        "RL.SLIDINGLOG",
        "huge",
        "1000000000",
        "3650d",
        "COST",
        "1000000",
    ]);
    assert!(c.cmd(&["MEMORY", "USAGE", "huge"]).int() < 360);
    for (key, call) in [
        (
            "g",
            vec!["RL.GCRA", "g", "1000000000000", "1000000000000", "3650d"],
        ),
        (
            "t",
            vec![
                "RL.TOKENBUCKET",
                "t",
                "1000000000000",
                "1",
                "3650d",
                "COST",
                "1000000000000",
            ],
        ),
        (
            "w",
            vec![
                "RL.FIXEDWINDOW",
                "w",
                "1000000000000",
                "3650d",
                "COST",
                "999999999999",
            ],
        ),
    ] {
        assert!(matches!(c.cmd(&call), Reply::Array(_)), "{call:?}");
        let bytes = c.cmd(&["MEMORY", "USAGE", key]).int();
        assert!(bytes < 300, "{key}: {bytes}");
    }
    // The bound itself is a setting, refused out of range.
    let e = c.cmd(&[
        "CONFIG",
        "SET",
        "ratelimit.sliding-log-max-limit",
        "1000000001",
    ]);
    assert!(e.is_error(), "{e:?}");
}
