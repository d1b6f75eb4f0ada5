//! Hostile input against a real server: 100,000 generated calls, bounded in count and time.
//! The server stays up; every reply is a well-formed admission reply or an error naming what
//! is wrong; and a call that errors changes nothing.

use crate::common::{Client, Reply, Server, T0_MS};

/// xorshift64*: deterministic, so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A command, its valid positional arguments after the key, and its options.
struct Shape {
    name: &'static str,
    positional: &'static [&'static str],
    options: &'static [&'static str],
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "RL.GCRA",
        positional: &["5", "2", "1h"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "RL.TOKENBUCKET",
        positional: &["5", "2", "1h"],
        options: &["DRYRUN", "INTERVAL"],
    },
    Shape {
        name: "RL.LEAKYBUCKET",
        positional: &["5", "2", "1h"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "RL.FIXEDWINDOW",
        positional: &["5", "1d"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "RL.SLIDINGWINDOW",
        positional: &["5", "1d"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "RL.SLIDINGLOG",
        positional: &["5", "1h"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "RL.CONCURRENCY.ACQUIRE",
        positional: &["5", "1h"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "RL.LIMIT",
        positional: &["fuzz"],
        options: &["DRYRUN"],
    },
    Shape {
        name: "CL.THROTTLE",
        positional: &["4", "2", "3600"],
        options: &[],
    },
];

/// Tokens that are no valid count, duration, number of seconds or COST anywhere.
const NEVER_VALID: &[&[u8]] = &[
    b"",
    b"-1",
    b"-0",
    b"1.5",
    b"0x10",
    b"1e3",
    b"abc",
    b" 5",
    b"5 ",
    b"+5",
    b"05",
    b"007s",
    b"\xff\xfe",
    b"\x00",
    b"5\r\n",
    b"99999999999999999999999",
    b"18446744073709551616",
    b"9223372036854775808000",
    b"1000000000000000000",
    b"10y",
    b"5w",
    b"36500d",
    b"999999999999h",
];

/// Tokens for the mixed calls: valid or not, in range or not.
const ANY: &[&[u8]] = &[
    b"0",
    b"1",
    b"2",
    b"7",
    b"1000000000000",
    b"1000000000001",
    b"9223372036854775807",
    b"1ms",
    b"1s",
    b"90s",
    b"1m",
    b"24h",
    b"7d",
    b"3650d",
    b"1500",
    b"0s",
    b"COST",
    b"DRYRUN",
    b"INTERVAL",
    b"BLOCK",
    b"cost",
    b"dryrun",
    b"-5",
    b"",
    b"\xff",
    b"1.0",
];

const KEYS: &[&str] = &[
    "fz:0", "fz:1", "fz:2", "fz:3", "fz:4", "fz:5", "fz:6", "fz:7",
];

/// A valid call of `shape` on `key`.
fn valid(shape: &Shape, key: &str) -> Vec<Vec<u8>> {
    let mut call = vec![shape.name.as_bytes().to_vec(), key.as_bytes().to_vec()];
    call.extend(shape.positional.iter().map(|a| a.as_bytes().to_vec()));
    call
}

/// A call that must fail: a valid one with exactly one thing made wrong.
fn invalid(rng: &mut Rng) -> Vec<Vec<u8>> {
    let shape = rng.pick(SHAPES);
    let key = *rng.pick(KEYS);
    let mut call = valid(shape, key);
    match rng.below(7) {
        // A positional argument that is never valid.
        0 | 1 => {
            let at = 2 + rng.below(shape.positional.len());
            call[at] = (*rng.pick(NEVER_VALID)).to_vec();
        }
        // Too few arguments.
        2 => call.truncate(1 + rng.below(1 + shape.positional.len())),
        // An option that does not exist, or COST without a valid value.
        3 => match rng.below(3) {
            0 => call.push((*rng.pick(&[&b"BLOCK"[..], b"FAST", b"\xff", b"COSTS", b""])).to_vec()),
            1 => call.push(b"COST".to_vec()),
            _ => {
                call.push(b"COST".to_vec());
                call.push((*rng.pick(NEVER_VALID)).to_vec());
            }
        },
        // An option twice.
        4 if !shape.options.is_empty() => {
            let option = (*rng.pick(shape.options)).as_bytes().to_vec();
            call.push(option.clone());
            call.push(option);
        }
        4 => call.push(b"DRYRUN".to_vec()), // CL.THROTTLE takes no options
        // A key of another Redis type, or one holding another algorithm's state.
        5 => {
            call[1] = (*rng.pick(&["str", "hash", "other:gcra"]))
                .as_bytes()
                .to_vec()
        }
        // The internal commands, from a client.
        _ => {
            let internal = *rng.pick(&[&b"RL.REPLAY"[..], b"RL.LOADSTATE"]);
            call[0] = internal.to_vec();
        }
    }
    // "other:gcra" holds GCRA state: only a non-GCRA command errors on it.
    if call.len() > 1
        && call[1] == b"other:gcra"
        && (call[0] == b"RL.GCRA" || call[0] == b"CL.THROTTLE")
    {
        call[1] = b"str".to_vec();
    }
    call
}

/// A call of any kind: mostly valid shapes with random arguments and options.
fn mixed(rng: &mut Rng) -> Vec<Vec<u8>> {
    let shape = rng.pick(SHAPES);
    // Keys of their own: these calls may write, with durations as short as a millisecond.
    let key = format!("mx:{}", rng.below(8));
    let mut call = valid(shape, &key);
    for arg in call.iter_mut().skip(2) {
        if rng.below(3) == 0 {
            *arg = (*rng.pick(ANY)).to_vec();
        }
    }
    for _ in 0..rng.below(4) {
        call.push((*rng.pick(ANY)).to_vec());
    }
    call
}

/// The names the error texts may give for the offending argument.
const ARGUMENTS: &[&str] = &[
    "burst",
    "rate",
    "period",
    "capacity",
    "refill_amount",
    "refill_period",
    "leak_amount",
    "leak_period",
    "limit",
    "window",
    "max_burst",
    "count",
    "quantity",
    "COST",
    "BLOCK",
    "lease",
];

/// Whether `reply` is an error that says what is wrong with the call.
fn names_the_problem(reply: &Reply) -> bool {
    let Reply::Error(e) = reply else {
        return false;
    };
    if let Some(rest) = e.strip_prefix("ERR invalid ") {
        let arg = rest.split(':').next().unwrap_or_default();
        return ARGUMENTS.contains(&arg) && rest.contains(" from ");
    }
    [
        "ERR wrong number of arguments for '",
        "ERR unknown option '",
        "ERR COST needs a value",
        "ERR BLOCK needs a value",
        "ERR ID needs a value",
        "ERR BLOCK given more than once",
        "ERR COST given more than once",
        "ERR DRYRUN given more than once",
        "ERR ID given more than once",
        "ERR INTERVAL given more than once",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "ERR the key holds ",
        "ERR RL.REPLAY is internal",
        "ERR RL.LOADSTATE is internal",
        "ERR no policy named '",
    ]
    .iter()
    .any(|prefix| e.starts_with(prefix))
}

/// Whether `reply` is a well-formed admission reply for `command`.
fn well_formed(command: &[u8], reply: &Reply) -> bool {
    let Reply::Array(items) = reply else {
        return false;
    };
    // RL.CONCURRENCY.ACQUIRE's sixth field is its token, not an integer.
    // RL.LIMIT's sixth is the binding rule's index.
    let fields = if command.eq_ignore_ascii_case(b"RL.LEAKYBUCKET")
        || command.eq_ignore_ascii_case(b"RL.LIMIT")
    {
        6
    } else {
        5
    };
    let ints: Vec<i64> = items
        .iter()
        .filter_map(|i| {
            if let Reply::Int(n) = i {
                Some(*n)
            } else {
                None
            }
        })
        .collect();
    ints.len() == fields
        && (0..=1).contains(&ints[0])
        && ints[1] >= 1
        && ints[2] >= 0
        && ints[2] <= ints[1]
        && ints[3] >= -1
        && ints[4] >= 0
}

/// Everything the failing calls could change, read back: every key they name (a key they
/// created would show as a state where there was none) and the module's clock.
fn snapshot(c: &mut Client) -> Vec<Reply> {
    let mut state = vec![c.cmd(&["GET", "str"]), c.cmd(&["HGETALL", "hash"])];
    for key in KEYS.iter().chain(&["other:gcra"]) {
        state.push(c.cmd(&["RL.INSPECT", key]));
        state.push(c.cmd(&["PEXPIRETIME", key]));
    }
    state.push(c.cmd(&["RL.DEBUG.CLOCK", "ADVANCE", "0"]));
    state
}

fn send_batch(c: &mut Client, calls: &[Vec<Vec<u8>>]) -> Vec<Reply> {
    for call in calls {
        let args: Vec<&[u8]> = call.iter().map(Vec::as_slice).collect();
        c.send(&args);
    }
    calls.iter().map(|_| c.read()).collect()
}

#[test]
fn a_hundred_thousand_hostile_calls() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    c.cmd(&["SET", "str", "x"]);
    c.cmd(&["HSET", "hash", "f", "v"]);
    c.cmd(&["RL.GCRA", "other:gcra", "5", "1", "1h"]);
    let policy = [
        "RL.POLICY.SET",
        "fuzz",
        "GCRA",
        "5",
        "2",
        "1h",
        "FIXEDWINDOW",
        "5",
        "1d",
    ];
    assert_eq!(c.cmd(&policy), Reply::Simple("OK".into()));
    for shape in SHAPES {
        let key = format!("fz:{}", shape.name.len() % KEYS.len());
        let args = valid(shape, &key);
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        c.cmd_bytes(&args);
    }
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    const ROUNDS: usize = 50;
    const BATCH: usize = 1000;
    let started = std::time::Instant::now();
    let mut checked = 0;
    for round in 0..ROUNDS {
        // Calls that must all fail, and change nothing.
        let before = snapshot(&mut c);
        let calls: Vec<_> = (0..BATCH).map(|_| invalid(&mut rng)).collect();
        for (call, reply) in calls.iter().zip(send_batch(&mut c, &calls)) {
            assert!(
                names_the_problem(&reply),
                "round {round}: {call:?} gave {reply:?}"
            );
        }
        assert_eq!(
            snapshot(&mut c),
            before,
            "round {round}: a failing call changed something"
        );
        // Calls of any kind: each reply well formed, or an error that says what is wrong.
        let calls: Vec<_> = (0..BATCH).map(|_| mixed(&mut rng)).collect();
        for (call, reply) in calls.iter().zip(send_batch(&mut c, &calls)) {
            assert!(
                well_formed(&call[0], &reply) || names_the_problem(&reply),
                "round {round}: {call:?} gave {reply:?}"
            );
        }
        assert_eq!(
            c.cmd(&["PING"]),
            Reply::Simple("PONG".into()),
            "round {round}"
        );
        checked += 2 * BATCH;
        // Bounded in time as well as in count.
        assert!(
            started.elapsed().as_secs() < 120,
            "the fuzz run took too long"
        );
    }
    assert_eq!(checked, 100_000);
}

/// The algorithms a rule may name, with how many arguments each takes.
const RULES: &[(&str, usize)] = &[
    ("GCRA", 3),
    ("rl.gcra", 3),
    ("TOKENBUCKET", 3),
    ("LEAKYBUCKET", 3),
    ("FIXEDWINDOW", 2),
    ("SLIDINGWINDOW", 2),
    ("SLIDINGLOG", 2),
    ("CONCURRENCY", 2),
];

/// Random rules, mostly well formed: sometimes an argument never valid, one missing, or a
/// word out of place.
fn random_rules(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    for _ in 0..1 + rng.below(4) {
        let &(name, n) = rng.pick(RULES);
        words.push(name.as_bytes().to_vec());
        for _ in 0..n {
            const VALID: &[&[u8]] = &[b"5", b"2", b"60000"];
            let arg = match rng.below(20) {
                0 => rng.pick(NEVER_VALID),
                1 => continue,
                _ => rng.pick(VALID),
            };
            words.push(arg.to_vec());
        }
        match rng.below(20) {
            0 => words.push(b"INTERVAL".to_vec()),
            1 => words.push((*rng.pick(ANY)).to_vec()),
            _ => {}
        }
    }
    words
}

#[test]
fn random_policies_are_accepted_whole_or_refused_with_a_reason() {
    let server = Server::start();
    let mut c = server.client();
    let first = ["RL.POLICY.SET", "p", "FIXEDWINDOW", "5", "1m"];
    assert_eq!(c.cmd(&first), Reply::Simple("OK".into()));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for round in 0..5000 {
        let mut call: Vec<Vec<u8>> = vec![b"RL.POLICY.SET".to_vec(), b"p".to_vec()];
        call.extend(random_rules(&mut rng));
        let before = c.cmd(&["RL.POLICY.GET", "p"]);
        let args: Vec<&[u8]> = call.iter().map(Vec::as_slice).collect();
        match c.cmd_bytes(&args) {
            Reply::Simple(ok) if ok == "OK" => accepted += 1,
            Reply::Error(e) => {
                assert!(
                    [
                        "ERR the ",
                        "ERR unknown algorithm '",
                        "ERR wrong number of arguments for 'RL.POLICY.SET'",
                        "ERR a policy holds at most",
                    ]
                    .iter()
                    .any(|prefix| e.starts_with(prefix)),
                    "round {round}: {call:?} gave {e}"
                );
                assert_eq!(c.cmd(&["RL.POLICY.GET", "p"]), before, "round {round}");
            }
            other => panic!("round {round}: {call:?} gave {other:?}"),
        }
        // Whatever was accepted is a policy RL.LIMIT can use.
        let reply = c.cmd(&["RL.LIMIT", "k", "p", "DRYRUN"]);
        assert!(
            matches!(reply, Reply::Array(ref items) if items.len() == 6),
            "{reply:?}"
        );
    }
    assert!(
        accepted > 1000,
        "only {accepted} random policies were valid"
    );
}

/// docs/commands.md, Arguments: integers are written as Redis writes them, so a leading zero is
/// refused, in every
/// place an integer is read (counts, durations with units, COST, BLOCK, CL.THROTTLE's
/// arguments, the debug clock, a policy's rules); and an option given twice says so.
#[test]
fn leading_zeros_and_repeated_options_are_refused_by_name() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let count = |arg: &str, min: u64| {
        format!("ERR invalid {arg}: expected an integer from {min} to 1000000000000")
    };
    let duration = |arg: &str| {
        format!(
            "ERR invalid {arg}: expected a duration from 1ms to 10 years (315360000000ms): an \
             integer with an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)"
        )
    };
    let clock = "ERR usage: RL.DEBUG.CLOCK SET ms (0 to 253402300799999) | ADVANCE ms (an \
                 integer, may be negative, or a duration) | REAL";
    #[rustfmt::skip]
    let cases: Vec<(&[&str], String)> = vec![
        (&["RL.GCRA", "k", "05", "1", "1s"], count("burst", 1)),
        (&["RL.GCRA", "k", "5", "01", "1s"], count("rate", 1)),
        (&["RL.GCRA", "k", "5", "1", "01"], duration("period")),
        (&["RL.GCRA", "k", "5", "1", "05s"], duration("period")),
        (&["RL.GCRA", "k", "5", "1", "00ms"], duration("period")),
        (&["RL.GCRA", "k", "5", "1", "1s", "COST", "00"], count("COST", 0)),
        (&["RL.GCRA", "k", "5", "1", "1s", "COST", "01"], count("COST", 0)),
        (&["RL.GCRA", "k", "5", "1", "1s", "BLOCK", "010s"], duration("BLOCK")),
        (&["RL.TOKENBUCKET", "k", "010", "1", "1s"], count("capacity", 1)),
        (&["RL.FIXEDWINDOW", "k", "10", "01m"], duration("window")),
        (&["RL.SLIDINGLOG", "k", "05", "1m"], "ERR invalid limit: expected an integer from 1 to 1000000 (the module setting ratelimit.sliding-log-max-limit bounds it)".into()),
        (&["CL.THROTTLE", "k", "04", "1", "1"], count("max_burst", 0).replace("1000000000000", "999999999999")),
        (&["CL.THROTTLE", "k", "4", "1", "01"], "ERR invalid period: expected whole seconds from 1 to 315360000".into()),
        (&["CL.THROTTLE", "k", "4", "1", "1", "01"], count("quantity", 0)),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "02", "1m"], "ERR invalid limit: expected an integer from 1 to 100000 (the module setting ratelimit.concurrency-max-limit bounds it)".into()),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "2", "01m"], duration("lease")),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "2", "1m", "DRYRUN", "DRYRUN"], "ERR DRYRUN given more than once".into()),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "2", "1m", "ID", "a", "ID", "b"], "ERR ID given more than once".into()),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "2", "1m", "ID", "a", "DRYRUN", "ID", "a"], "ERR ID given more than once".into()),
        (&["RL.CONCURRENCY.ACQUIRE", "k", "2", "1m", "FAST"], "ERR unknown option 'FAST' at argument 4: expected ID token, DRYRUN, SHADOW, ADAPTIVE algorithm, MIN n or MAX n, each once".into()),
        (&["RL.DEBUG.CLOCK", "SET", "01"], clock.into()),
        (&["RL.DEBUG.CLOCK", "ADVANCE", "-05"], clock.into()),
        (&["RL.DEBUG.CLOCK", "ADVANCE", "05s"], clock.into()),
        (&["RL.POLICY.SET", "p", "GCRA", "05", "1", "1s"], "ERR the GCRA rule at argument 2: invalid burst: expected an integer from 1 to 1000000000000".into()),
        (&["RL.POLICY.SET", "p", "FIXEDWINDOW", "5", "01s"], "ERR the FIXEDWINDOW rule at argument 2: invalid window: expected a duration from 1ms to 10 years (315360000000ms): an integer with an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)".into()),
    ];
    for (args, expected) in &cases {
        assert_eq!(&c.cmd(args).error(), expected, "{args:?}");
    }
    // Nothing was written, the clock did not move, and no policy was made.
    assert_eq!(c.cmd(&["DBSIZE"]), Reply::Int(0));
    assert_eq!(c.cmd(&["RL.POLICY.LIST"]), Reply::Array(vec![]));
    assert_eq!(
        c.cmd(&["RL.DEBUG.CLOCK", "ADVANCE", "0"]).int(),
        T0_MS as i64
    );
    // Zero itself, where zero is allowed, and ten are not leading zeros.
    assert_eq!(
        c.cmd(&["RL.GCRA", "k", "10", "10", "10s", "COST", "0"])
            .ints(),
        [1, 10, 10, 0, 0]
    );
    assert_eq!(c.cmd(&["RL.DEBUG.CLOCK", "SET", "0"]).int(), 0);
}
