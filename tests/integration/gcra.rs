//! RL.GCRA, CL.THROTTLE, RL.INSPECT and the debug commands against a real redis-server,
//! with the module's debug clock: exact replies.

use crate::common;

use crate::common::{modules, Config, Reply, Server, T0_MS};

fn gcra(c: &mut common::Client, key: &str, extra: &[&str]) -> Vec<i64> {
    let mut args = vec!["RL.GCRA", key, "5", "1", "1s"];
    args.extend_from_slice(extra);
    c.cmd(&args).ints()
}

#[test]
fn burst_then_exact_denial_then_refill() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    for (i, remaining) in [4, 3, 2, 1, 0].into_iter().enumerate() {
        let reset = 1000 * (i as i64 + 1);
        assert_eq!(gcra(&mut c, "k", &[]), [1, 5, remaining, 0, reset]);
    }
    // The sixth is due when the first unit has drained: exactly one second from now.
    assert_eq!(gcra(&mut c, "k", &[]), [0, 5, 0, 1000, 5000]);
    c.clock_advance(999);
    assert_eq!(gcra(&mut c, "k", &[]), [0, 5, 0, 1, 4001]);
    c.clock_advance(1);
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 0, 0, 5000]);
    // 3.5 s later, 3.5 s of the schedule remain after this request: one unit is left.
    c.clock_advance(2500);
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 1, 0, 3500]);
    // Once the whole schedule has drained, the key is fresh again.
    c.clock_advance(10_000);
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 4, 0, 1000]);
}

#[test]
fn cost_takes_units_and_above_the_burst_never_fits() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // Above the burst: denied for good, -1, and a fresh key stays absent.
    assert_eq!(gcra(&mut c, "k", &["COST", "6"]), [0, 5, 5, -1, 0]);
    assert_eq!(c.cmd(&["EXISTS", "k"]), Reply::Int(0));
    assert_eq!(gcra(&mut c, "k", &["COST", "3"]), [1, 5, 2, 0, 3000]);
    assert_eq!(gcra(&mut c, "k", &["COST", "3"]), [0, 5, 2, 1000, 3000]);
    assert_eq!(gcra(&mut c, "k", &["cost", "6"]), [0, 5, 2, -1, 3000]);
    // COST 0 peeks: admitted, nothing taken.
    assert_eq!(gcra(&mut c, "k", &["COST", "0"]), [1, 5, 2, 0, 3000]);
    assert_eq!(gcra(&mut c, "k", &["COST", "2"]), [1, 5, 0, 0, 5000]);
}

#[test]
fn dryrun_touches_nothing() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(gcra(&mut c, "k", &["DRYRUN"]), [1, 5, 4, 0, 1000]);
    assert_eq!(c.cmd(&["EXISTS", "k"]), Reply::Int(0));
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 4, 0, 1000]);
    let before = c.cmd(&["RL.INSPECT", "k"]);
    let pttl_before = c.pttl("k");
    assert_eq!(
        gcra(&mut c, "k", &["DRYRUN", "COST", "2"]),
        [1, 5, 2, 0, 3000]
    );
    assert_eq!(gcra(&mut c, "k", &["dryrun"]), [1, 5, 3, 0, 2000]);
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), before);
    // Not extended to the 2000 or 3000 ms a real request would have set.
    assert!(c.pttl("k") <= pttl_before, "DRYRUN moved the TTL");
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 3, 0, 2000]);
}

#[test]
fn the_keys_ttl_is_reset_after_on_the_real_clock() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(gcra(&mut c, "k", &["COST", "3"]), [1, 5, 2, 0, 3000]);
    // PTTL counts down in real time from reset_after_ms; the gap is the real time between
    // the two commands (well under 100 ms).
    let pttl = c.pttl("k");
    assert!(
        (2900..=3000).contains(&pttl),
        "PTTL {pttl}, reset_after 3000"
    );
    // Frozen debug time does not expire keys: the TTL stays on the real clock.
    c.clock_advance(60_000);
    assert!(c.pttl("k") > 2900);
    // A key fresh after 1 ms (1000 per ms, burst 1) is gone soon after.
    let r = c.cmd(&["RL.GCRA", "short", "1", "1000", "1ms"]).ints();
    assert_eq!(r, [1, 1, 0, 0, 1]);
    assert!(c.pttl("short") <= 1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(c.cmd(&["EXISTS", "short"]), Reply::Int(0));
}

#[test]
fn inspect_shows_parameters_and_state_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), Reply::Nil);
    gcra(&mut c, "k", &["COST", "2"]);
    let r = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(r.field("algorithm").text(), "gcra");
    let tat_us = (T0_MS as i64 + 2000) * 1000;
    let expected: Vec<(String, i64)> = [
        ("limit", 5),
        ("burst", 5),
        ("rate", 1),
        ("period_ms", 1000),
        ("tat_us", tat_us),
        ("remaining", 3),
        ("reset_after_ms", 2000),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), *v))
    .collect();
    assert_eq!(r.fields(), expected);
    // remaining and reset_after_ms are as of the module's clock now.
    c.clock_advance(1500);
    let r = c.cmd(&["RL.INSPECT", "k"]);
    assert_eq!(r.field("remaining"), Reply::Int(4));
    assert_eq!(r.field("reset_after_ms"), Reply::Int(500));
    assert_eq!(r.field("tat_us"), Reply::Int(tat_us));
    assert_eq!(
        c.cmd(&["RL.INSPECT", "k", "extra"]).error(),
        "ERR wrong number of arguments for 'RL.INSPECT': expected RL.INSPECT key"
    );
}

#[test]
fn new_parameters_keep_the_state() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "10", "10", "1s", "COST", "8"])
            .ints(),
        [1, 10, 2, 0, 800]
    );
    // 800 ms of schedule is owed; with a burst of 5 a unit fits 400 ms from now.
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "5", "10", "1s"]).ints(),
        [0, 5, 0, 400, 800]
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]).field("burst"), Reply::Int(10));
    c.clock_advance(400);
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "5", "10", "1s"]).ints(),
        [1, 5, 0, 0, 500]
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]).field("burst"), Reply::Int(5));
}

#[test]
fn another_type_is_wrongtype_and_stays_as_it_was() {
    let server = Server::start();
    let mut c = server.client();
    c.cmd(&["SET", "s", "x"]);
    c.cmd(&["PEXPIRE", "s", "100000"]);
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    assert_eq!(c.cmd(&["RL.GCRA", "s", "5", "1", "1s"]).error(), wrongtype);
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "s", "4", "1", "1"]).error(),
        wrongtype
    );
    assert_eq!(c.cmd(&["RL.INSPECT", "s"]).error(), wrongtype);
    assert_eq!(c.cmd(&["GET", "s"]), Reply::Bulk(b"x".to_vec()));
    assert!(c.pttl("s") > 99_000);
}

#[test]
fn bad_arguments_get_errors_that_name_them_and_change_nothing() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 4, 0, 1000]);
    let state = c.cmd(&["RL.INSPECT", "k"]);
    let count = |arg: &str, min: u64| {
        format!("ERR invalid {arg}: expected an integer from {min} to 1000000000000")
    };
    let duration = |arg: &str| {
        format!(
            "ERR invalid {arg}: expected a duration from 1ms to 10 years (315360000000ms): an \
             integer with an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)"
        )
    };
    let arity = "ERR wrong number of arguments for 'RL.GCRA': expected RL.GCRA key burst rate \
                 period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]";
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["RL.GCRA"], arity.into()),
        (vec!["RL.GCRA", "k", "5", "1"], arity.into()),
        (vec!["RL.GCRA", "k", "0", "1", "1s"], count("burst", 1)),
        (vec!["RL.GCRA", "k", "-1", "1", "1s"], count("burst", 1)),
        (vec!["RL.GCRA", "k", "1000000000001", "1", "1s"], count("burst", 1)),
        (vec!["RL.GCRA", "k", "5", "1.5", "1s"], count("rate", 1)),
        (vec!["RL.GCRA", "k", "5", "0x10", "1s"], count("rate", 1)),
        (vec!["RL.GCRA", "k", "5", "", "1s"], count("rate", 1)),
        (vec!["RL.GCRA", "k", "5", "1", "0"], duration("period")),
        (vec!["RL.GCRA", "k", "5", "1", "1w"], duration("period")),
        (vec!["RL.GCRA", "k", "5", "1", "3651d"], duration("period")),
        (vec!["RL.GCRA", "k", "5", "1", "1s", "COST"], "ERR COST needs a value: an integer from 0 to 1000000000000".into()),
        (vec!["RL.GCRA", "k", "5", "1", "1s", "COST", "-1"], count("COST", 0)),
        (vec!["RL.GCRA", "k", "5", "1", "1s", "COST", "1", "COST", "1"], "ERR COST given more than once".into()),
        (vec!["RL.GCRA", "k", "5", "1", "1s", "DRYRUN", "DRYRUN"], "ERR DRYRUN given more than once".into()),
        (vec!["RL.GCRA", "k", "5", "1", "1s", "FAST"], "ERR unknown option 'FAST' at argument 5: expected COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW".into()),
        (vec!["RL.GCRA", "k", "5", "1", "1s", "DRYRUN", "x\r\ny"], "ERR unknown option 'x??y' at argument 6: expected COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW".into()),
        (vec!["CL.THROTTLE", "k", "4", "1"], "ERR wrong number of arguments for 'CL.THROTTLE': expected CL.THROTTLE key max_burst count period [quantity]".into()),
        (vec!["CL.THROTTLE", "k", "4", "1", "1", "1", "1"], "ERR wrong number of arguments for 'CL.THROTTLE': expected CL.THROTTLE key max_burst count period [quantity]".into()),
        (vec!["CL.THROTTLE", "k", "-1", "1", "1"], count("max_burst", 0).replace("1000000000000", "999999999999")),
        (vec!["CL.THROTTLE", "k", "4", "0", "1"], count("count", 1)),
        (vec!["CL.THROTTLE", "k", "4", "1", "1s"], "ERR invalid period: expected whole seconds from 1 to 315360000".into()),
        (vec!["CL.THROTTLE", "k", "4", "1", "1", "-2"], count("quantity", 0)),
    ];
    for (args, expected) in &cases {
        assert_eq!(&c.cmd(args).error(), expected, "{args:?}");
    }
    assert_eq!(c.cmd(&["RL.INSPECT", "k"]), state);
    assert_eq!(c.cmd(&["DBSIZE"]), Reply::Int(1));
}

#[test]
fn resp3_clients_get_a_map_with_a_boolean() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert!(matches!(c.cmd(&["HELLO", "3"]), Reply::Map(_)));
    let map = |allowed: bool, nums: [i64; 4]| {
        Reply::Map(vec![
            (Reply::Bulk(b"allowed".to_vec()), Reply::Bool(allowed)),
            (Reply::Bulk(b"limit".to_vec()), Reply::Int(nums[0])),
            (Reply::Bulk(b"remaining".to_vec()), Reply::Int(nums[1])),
            (Reply::Bulk(b"retry_after_ms".to_vec()), Reply::Int(nums[2])),
            (Reply::Bulk(b"reset_after_ms".to_vec()), Reply::Int(nums[3])),
        ])
    };
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "1", "1", "1s"]),
        map(true, [1, 0, 0, 1000])
    );
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "1", "1", "1s"]),
        map(false, [1, 0, 1000, 1000])
    );
    // CL.THROTTLE keeps redis-cell's array for every protocol.
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "k", "0", "1", "1"]).ints(),
        [1, 1, 0, 1, 1]
    );
    match c.cmd(&["RL.INSPECT", "k"]) {
        Reply::Map(pairs) => {
            assert_eq!(
                pairs[0],
                (
                    Reply::Bulk(b"algorithm".to_vec()),
                    Reply::Bulk(b"gcra".to_vec())
                )
            );
            assert_eq!(pairs.len(), 8);
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

/// redis-cell's own unit-test table (max_burst 4, 1 per second), sent to CL.THROTTLE with
/// the debug clock: limited, limit, remaining, retry_after_s, reset_after_s.
#[test]
fn cl_throttle_gives_redis_cells_replies() {
    let server = Server::start();
    let mut c = server.client();
    let cases: [(u64, &str, [i64; 5]); 15] = [
        (0, "6", [1, 5, 5, -1, 0]),
        (0, "1", [0, 5, 4, -1, 1]),
        (0, "1", [0, 5, 3, -1, 2]),
        (0, "1", [0, 5, 2, -1, 3]),
        (0, "1", [0, 5, 1, -1, 4]),
        (0, "1", [0, 5, 0, -1, 5]),
        (0, "1", [1, 5, 0, 1, 5]),
        (3000, "1", [0, 5, 2, -1, 3]),
        (3100, "1", [0, 5, 1, -1, 4]), // reset_after 3.9 s rounds up
        (4000, "1", [0, 5, 1, -1, 4]),
        (8000, "1", [0, 5, 4, -1, 1]),
        (9500, "1", [0, 5, 4, -1, 1]),
        (9500, "0", [0, 5, 4, -1, 1]),
        (9500, "2", [0, 5, 2, -1, 3]),
        (9500, "5", [1, 5, 2, 3, 3]),
    ];
    for (at_ms, quantity, expected) in cases {
        c.clock_set(T0_MS + at_ms);
        let r = c.cmd(&["CL.THROTTLE", "k", "4", "1", "1", quantity]).ints();
        assert_eq!(r, expected, "at {at_ms} ms, quantity {quantity}");
    }
    // The default quantity is 1, and RL.GCRA sees the same state under its own name.
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "k", "4", "1", "1"]).ints(),
        [0, 5, 1, -1, 4]
    );
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "5", "1", "1s"]).ints(),
        [1, 5, 0, 0, 5000]
    );
}

#[test]
fn cell_compat_no_leaves_cl_throttle_unregistered() {
    let server =
        Server::with(Config::default().module_args(&["cell-compat", "no", "debug-clock", "yes"]));
    let mut c = server.client();
    let e = c.cmd(&["CL.THROTTLE", "k", "4", "1", "1"]).error();
    assert!(e.starts_with("ERR unknown command 'CL.THROTTLE'"), "{e}");
    assert_eq!(c.cmd(&["RL.GCRA", "k", "5", "1", "1s"]).ints()[0], 1);
    let r = c.cmd(&["CONFIG", "GET", "ratelimit.cell-compat"]);
    assert_eq!(
        r,
        Reply::Array(vec![
            Reply::Bulk(b"ratelimit.cell-compat".to_vec()),
            Reply::Bulk(b"no".to_vec())
        ])
    );
}

#[test]
fn without_the_debug_clock_the_debug_commands_refuse() {
    let server = Server::with(Config::default().module_args(&[]));
    let mut c = server.client();
    let off = "ERR the debug clock is off: load the module with 'debug-clock yes' to use RL.DEBUG commands";
    assert_eq!(c.cmd(&["RL.DEBUG.CLOCK", "SET", "1000"]).error(), off);
    assert_eq!(c.cmd(&["RL.DEBUG.CLOCK", "REAL"]).error(), off);
    assert_eq!(c.cmd(&["RL.DEBUG.PANIC"]).error(), off);
    let e = c
        .cmd(&["CONFIG", "SET", "ratelimit.debug-clock", "yes"])
        .error();
    assert!(e.contains("can't set immutable config"), "{e}");
    // The real clock: a fresh key's reply does not depend on the time.
    assert_eq!(
        c.cmd(&["CL.THROTTLE", "k", "4", "1", "1"]).ints(),
        [0, 5, 4, -1, 1]
    );
}

#[test]
fn the_debug_clock_sets_advances_and_goes_back_to_real() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(c.cmd(&["RL.DEBUG.CLOCK", "SET", "1000"]), Reply::Int(1000));
    assert_eq!(
        c.cmd(&["RL.DEBUG.CLOCK", "ADVANCE", "90s"]),
        Reply::Int(91_000)
    );
    assert_eq!(
        c.cmd(&["rl.debug.clock", "advance", "-1000"]),
        Reply::Int(90_000)
    );
    assert_eq!(c.cmd(&["RL.DEBUG.CLOCK", "ADVANCE", "-1d"]), Reply::Int(0));
    let real = c.cmd(&["RL.DEBUG.CLOCK", "REAL"]).int();
    assert!(real > T0_MS as i64, "the real clock reads {real}");
    let usage = "ERR usage: RL.DEBUG.CLOCK SET ms (0 to 253402300799999) | ADVANCE ms (an integer, may be negative, or a duration) | REAL";
    for bad in [
        &["RL.DEBUG.CLOCK"][..],
        &["RL.DEBUG.CLOCK", "SET"],
        &["RL.DEBUG.CLOCK", "SET", "-1"],
        &["RL.DEBUG.CLOCK", "SET", "253402300800000"],
        &["RL.DEBUG.CLOCK", "ADVANCE", "x"],
        &["RL.DEBUG.CLOCK", "REAL", "1"],
        &["RL.DEBUG.CLOCK", "STOP"],
    ] {
        assert_eq!(c.cmd(bad).error(), usage, "{bad:?}");
    }
}

#[test]
fn a_panic_becomes_an_error_and_the_server_lives_on() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 4, 0, 1000]);
    // The key's TTL runs in real time (1 s) while the debug clock stands: kept from it, so
    // that a slow panic (a loaded machine unwinding) cannot let the key lapse.
    assert_eq!(c.cmd(&["PERSIST", "k"]).int(), 1);
    let e = c.cmd(&["RL.DEBUG.PANIC"]).error();
    assert_eq!(e, CAUGHT);
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 3, 0, 2000]);
}

const CAUGHT: &str =
    "ERR ratelimit caught an internal error (a bug, please report it) and the server carries on";

/// The unwinder's exception object is wherever the server's allocator puts it: Redis's own
/// jemalloc (Redis 8.2 here) hands out 56-byte blocks 8-aligned as well as 16-aligned, and an
/// unwinder that takes the exception to be 16-aligned (LLVM's libunwind, which the release
/// once carried inside) crashed the server on an 8-aligned one: `RL.DEBUG.PANIC n` holds n
/// blocks of each small size while it panics, so the exception meets each alignment in turn.
#[test]
fn a_panic_is_caught_wherever_the_allocator_puts_the_exception() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    for blocks in 0..16 {
        let e = c.cmd(&["RL.DEBUG.PANIC", &blocks.to_string()]).error();
        assert_eq!(e, CAUGHT, "with {blocks} blocks held");
        assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    }
    assert_eq!(gcra(&mut c, "k", &[]), [1, 5, 4, 0, 1000]);
    assert_eq!(
        c.cmd(&["RL.DEBUG.PANIC", "65"]).error(),
        "ERR invalid blocks: expected an integer from 0 to 64"
    );
    assert_eq!(
        c.cmd(&["RL.DEBUG.PANIC", "1", "2"]).error(),
        "ERR wrong number of arguments for 'RL.DEBUG.PANIC': expected RL.DEBUG.PANIC [blocks]"
    );
}

#[test]
fn the_internal_commands_are_refused_from_clients() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(
        c.cmd(&["RL.REPLAY", "k", "1:1:RL.GCRA:5", "1", "1s"])
            .error(),
        "ERR RL.REPLAY is internal: it is accepted only from the replication stream or the AOF"
    );
    assert_eq!(
        c.cmd(&["RL.LOADSTATE", "k", "x"]).error(),
        "ERR RL.LOADSTATE is internal: it is accepted only from the replication stream or the AOF"
    );
    assert_eq!(c.cmd(&["EXISTS", "k"]), Reply::Int(0));
}

#[test]
fn load_arguments_are_checked() {
    for (args, message) in [
        (&["debug-clock", "maybe"][..], "debug-clock takes yes or no"),
        (
            &["frobnicate", "yes"][..],
            "unknown load argument 'frobnicate'",
        ),
        (&["debug-clock"][..], "load arguments come in pairs"),
    ] {
        match Server::try_with(Config::default().module_args(args)) {
            Ok(_) => panic!("the module loaded with {args:?}"),
            Err(log) => assert!(log.contains(message), "{args:?}: {log}"),
        }
    }
}

#[test]
fn keys_may_hold_any_bytes() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let key: &[u8] = b"user:\x00\xff\r\n";
    let r = c.cmd_bytes(&[b"RL.GCRA", key, b"2", b"1", b"1m"]);
    assert_eq!(r.ints(), [1, 2, 1, 0, 60_000]);
    assert_eq!(
        c.cmd_bytes(&[b"RL.INSPECT", key]).field("remaining"),
        Reply::Int(1)
    );
}

#[test]
fn the_module_is_listed_with_its_commands() {
    let server = Server::start();
    let mut c = server.client();
    let ours: Vec<_> = modules(&mut c)
        .into_iter()
        .filter(|(name, _)| name == "ratelimit")
        .collect();
    // Cargo.toml's version, as major·10000 + minor·100 + patch (0.1.0 is 100).
    let part = |p: &str| p.parse::<i64>().unwrap();
    let version = part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"));
    assert_eq!(version, 100);
    assert_eq!(ours, [("ratelimit".to_string(), version)]);
    let text = c
        .cmd(&["COMMAND", "INFO", "rl.gcra", "rl.inspect"])
        .render();
    for flag in ["write", "denyoom", "fast", "readonly"] {
        assert!(text.contains(flag), "{flag} missing from {text}");
    }
    // The key is the first argument, so cluster redirection and ACL key patterns apply.
    let keys = c.cmd(&["COMMAND", "GETKEYS", "RL.GCRA", "user:1", "5", "1", "1s"]);
    assert_eq!(keys, Reply::Array(vec![Reply::Bulk(b"user:1".to_vec())]));
}
