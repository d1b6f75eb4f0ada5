//! The error vectors: bad arguments of the admission commands and RL.REFUND, each with the
//! exact error text the module replies with, for `clients/lua/conformance/errors.json` (the
//! scripts must give the same text, byte for byte: clients/lua/README.md, "Calling
//! convention"). The texts come from the commands' own parsers (each command's `parse`, the
//! code its handler runs before it reads the clock or the key) and `Error`'s Display, so they
//! need no server. The test fails when the committed file is not what the module says;
//! `RATELIMIT_WRITE_VECTORS=1 cargo test --release -p ratelimit --lib error_vectors` writes it
//! anew.
//!
//! Left out: arguments the module accepts (only errors are vectors), the scripts' own
//! refusals where they differ by design (a sliding log's limit is parsed with the setting at
//! its default, 1000000, the scripts' fixed bound: README.md, "Ranges"), a trailing
//! `NOW <µs>`, which the scripts read as their test clock, and the policies' and leases'
//! errors (their parsers need more than the words: a policy's rules, the lease cap's setting).

use std::path::PathBuf;

use super::{counter, fixed_window, gcra, leaky_bucket, refund, sliding_log, sliding_window};
use super::{token_bucket, warmup};
use crate::error::Error;

/// A command's parser over its words after the key: `Err` with the module's error, or `Ok`.
type Parse = fn(&[&[u8]]) -> Result<(), Error>;

/// The words with the command's name and a key before them, as a call holds them.
fn call(
    name: &str,
    words: &[&[u8]],
    parse: impl Fn(&[&[u8]]) -> Result<(), Error>,
) -> Option<Error> {
    let mut args: Vec<&[u8]> = vec![name.as_bytes(), b"key"];
    args.extend_from_slice(words);
    parse(&args).err()
}

/// Each command: its script, its name, its parser, its valid positional words, and which of
/// them are durations (the rest are counts).
struct Command {
    script: &'static str,
    name: &'static str,
    parse: Parse,
    valid: &'static [&'static str],
    durations: &'static [usize],
    /// Options of its own, valid, that the bad options are mixed with.
    own: &'static [&'static [&'static str]],
}

const COMMANDS: [Command; 7] = [
    Command {
        script: "gcra",
        name: "RL.GCRA",
        parse: |a| gcra::parse(a).map(drop),
        valid: &["5", "10", "1s"],
        durations: &[2],
        own: &[],
    },
    Command {
        script: "tokenbucket",
        name: "RL.TOKENBUCKET",
        parse: |a| token_bucket::parse(a).map(drop),
        valid: &["10", "2", "1m"],
        durations: &[2],
        own: &[&["INTERVAL"]],
    },
    Command {
        script: "leakybucket",
        name: "RL.LEAKYBUCKET",
        parse: |a| leaky_bucket::parse(a).map(drop),
        valid: &["3", "2", "1m"],
        durations: &[2],
        own: &[],
    },
    Command {
        script: "fixedwindow",
        name: "RL.FIXEDWINDOW",
        parse: |a| fixed_window::parse(a).map(drop),
        valid: &["100", "1h"],
        durations: &[1],
        own: &[],
    },
    Command {
        script: "slidingwindow",
        name: "RL.SLIDINGWINDOW",
        parse: |a| sliding_window::parse(a).map(drop),
        valid: &["100", "1h"],
        durations: &[1],
        own: &[],
    },
    Command {
        script: "slidinglog",
        name: "RL.SLIDINGLOG",
        // The setting at its default: the scripts' bound (README.md, "Ranges").
        parse: |a| {
            let max = crate::config::SLIDING_LOG_MAX_LIMIT_DEFAULT as u64;
            sliding_log::parse(a, max).map(drop)
        },
        valid: &["100", "1h"],
        durations: &[1],
        own: &[],
    },
    Command {
        script: "warmup",
        name: "RL.WARMUP",
        parse: |a| warmup::parse(a).map(drop),
        valid: &["10", "1s", "10s"],
        durations: &[1, 2],
        own: &[&["COLDFACTOR", "4"]],
    },
];

/// Words that are not a count from 1 to 10^12.
const BAD_COUNTS: [&str; 9] = [
    "0",
    "-1",
    "abc",
    "1.5",
    "1000000000001",
    "",
    "+5",
    "99999999999999999999999",
    "07",
];

/// Words that are not a duration from 1 ms to ten years (and some that are).
const BAD_DURATIONS: [&str; 10] = [
    "0",
    "0ms",
    "-1s",
    "1x",
    "1.5s",
    "3651d",
    "1us",
    "s",
    "",
    "315360000001",
];

/// Options (with the valid positional words before them) that the module refuses.
const BAD_OPTIONS: [&[&str]; 24] = [
    &["COST"],
    &["COST", "-1"],
    &["COST", "x"],
    &["COST", "1000000000001"],
    &["ATMOST"],
    &["ATMOST", "0"],
    &["ATMOST", "1000000000001"],
    &["COST", "1", "ATMOST", "2"],
    &["atmost", "2", "cost", "0"],
    &["COST", "1", "COST", "2"],
    &["DRYRUN", "dryrun"],
    &["BLOCK"],
    &["BLOCK", "0"],
    &["BLOCK", "1x"],
    &["BLOCK", "1s", "BLOCK", "2s"],
    &["SHADOW", "shadow"],
    &["FOO"],
    &["DRYRUN", "FOO", "1"],
    &["INTERVAL", "INTERVAL"],
    &["INTERVAL"],
    &["COLDFACTOR"],
    &["COLDFACTOR", "1"],
    &["COLDFACTOR", "11"],
    &["COLDFACTOR", "4", "COLDFACTOR", "4"],
];

/// Every error vector, one per line: `[script, words, error]`.
fn generate() -> String {
    let mut lines = Vec::new();
    let mut push = |script: &str, words: &[&str], error: Error| {
        let words: Vec<String> = words.iter().map(|w| json(w)).collect();
        let line = format!(
            "[{}, [{}], {}]",
            json(script),
            words.join(", "),
            json(&error.to_string())
        );
        // The same words drawn twice are one vector.
        if !lines.contains(&line) {
            lines.push(line);
        }
    };
    for c in &COMMANDS {
        let parse = |words: &[&str]| {
            let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            call(c.name, &bytes, c.parse)
        };
        // Too few arguments.
        for n in 0..c.valid.len() {
            if let Some(e) = parse(&c.valid[..n]) {
                push(c.script, &c.valid[..n], e);
            }
        }
        // Each positional word bad, alone and with a bad option after it (which error first).
        for i in 0..c.valid.len() {
            let bad: &[&str] = if c.durations.contains(&i) {
                &BAD_DURATIONS
            } else {
                &BAD_COUNTS
            };
            for (k, word) in bad.iter().enumerate() {
                let mut words = c.valid.to_vec();
                words[i] = word;
                if k % 3 == 0 {
                    words.extend(BAD_OPTIONS[k % BAD_OPTIONS.len()]);
                }
                if let Some(e) = parse(&words) {
                    push(c.script, &words, e);
                }
            }
        }
        // Each bad option, alone, after a good one, and before the command's own.
        for (k, option) in BAD_OPTIONS.iter().enumerate() {
            let mut words = c.valid.to_vec();
            words.extend(*option);
            if let Some(e) = parse(&words) {
                push(c.script, &words, e);
            }
            let mut words = c.valid.to_vec();
            words.extend(["DRYRUN"]);
            words.extend(*option);
            if let Some(e) = parse(&words) {
                push(c.script, &words, e);
            }
            if let Some(own) = c.own.get(k % c.own.len().max(1)) {
                let mut words = c.valid.to_vec();
                words.extend(*option);
                words.extend(*own);
                if let Some(e) = parse(&words) {
                    push(c.script, &words, e);
                }
            }
        }
    }
    // The sliding log's limit beyond the setting's default.
    for limit in ["1000001", "1000000000000"] {
        let words = [limit, "1h"];
        let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        if let Some(e) = call("RL.SLIDINGLOG", &bytes, COMMANDS[5].parse) {
            push("slidinglog", &words, e);
        }
    }
    // RL.REFUND.
    let refunds: [&[&str]; 10] = [
        &[],
        &["-1"],
        &["x"],
        &["1000000000001"],
        &["1", "FOO"],
        &["1", "DRYRUN", "DRYRUN"],
        &["1", "dryrun", "x"],
        &["", "DRYRUN"],
        &["1.5"],
        &["2", "COST"],
    ];
    for words in refunds {
        let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        if let Some(e) = call("RL.REFUND", &bytes, |a| refund::parse(a).map(drop)) {
            push("refund", words, e);
        }
    }
    // RL.COUNTER: its window, BY and XX (the key's own errors, WRONGTYPE, not an integer and
    // overflow, need a key: tests/integration/counter.rs has them).
    let counters: [&[&str]; 22] = [
        &[],
        &["0"],
        &["0ms"],
        &["-1s"],
        &["1x"],
        &["3651d"],
        &[""],
        &["1m", "BY"],
        &["1m", "BY", "x"],
        &["1m", "BY", "-0"],
        &["1m", "BY", "+1"],
        &["1m", "BY", "01"],
        &["1m", "BY", "1.5"],
        &["1m", "BY", "1000000000001"],
        &["1m", "BY", "-1000000000001"],
        &["1m", "by", "1", "BY", "2"],
        &["1m", "XX", "xx"],
        &["1m", "NX"],
        &["1m", "XX", "COST", "1"],
        &["1m", "DRYRUN"],
        &["0", "BY", "x"],
        &["1m", "BY", "x", "FOO"],
    ];
    for words in counters {
        let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        if let Some(e) = call("RL.COUNTER", &bytes, |a| counter::parse(a).map(drop)) {
            push("counter", words, e);
        }
    }
    format!(
        "{{\"generator\": \"src/commands/error_vectors.rs\", \"errors\": [\n{}\n]}}\n",
        lines.join(",\n")
    )
}

/// A JSON string.
fn json(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn the_committed_errors_are_what_the_module_says() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/lua/conformance/errors.json");
    let text = generate();
    if std::env::var_os("RATELIMIT_WRITE_VECTORS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not what the module's parsers say now: if the change is meant, write it anew \
         (RATELIMIT_WRITE_VECTORS=1 cargo test --release -p ratelimit --lib error_vectors) and \
         make the scripts agree",
        path.display()
    );
}

/// The grammar every copy spells (the scripts' `lib/common.lua`, Python's `limit_types.py`,
/// Node's `lib/limits.cjs`): the ranges, and durations and counts as the module reads them,
/// each text with what the module makes of it (`null`: refused), for
/// `clients/lua/conformance/grammar.json`. The packages' tests read it
/// (`clients/python/tests/test_grammar.py`, `clients/node/test/grammar.test.js`).
fn grammar() -> String {
    use crate::args::{duration_ms, positive_count, MAX_COUNT, MAX_DURATION_MS};
    let ms = |text: &str| duration_ms(text.as_bytes(), "d").ok();
    let n = |text: &str| positive_count(text.as_bytes(), "n").ok();
    let number = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    let max_days = MAX_DURATION_MS / 86_400_000;
    let durations: Vec<String> = [
        "1",
        "1500",
        "1500ms",
        "1500MS",
        "90s",
        "90S",
        "1m",
        "1M",
        "24h",
        "7d",
        "7D",
        "315360000000",
        "315360000001",
        "315360000s",
        "315360001s",
        "5256000m",
        "5256001m",
        "87600h",
        "87601h",
        "3650d",
        "3651d",
        "0",
        "0s",
        "00",
        "01s",
        "05",
        "-5",
        "+5",
        "1.5s",
        "1e3",
        "5x",
        "5 s",
        " 5",
        "5us",
        "ms",
        "s",
        "",
        "0x10",
        "99999999999999999999999",
    ]
    .iter()
    .map(|t| format!("[{}, {}]", json(t), number(ms(t))))
    .collect();
    let counts: Vec<String> = [
        "1",
        "5",
        "1000000000000",
        "1000000000001",
        "999999999999",
        "0",
        "00",
        "01",
        "-1",
        "+1",
        "1.0",
        "1e3",
        " 1",
        "1 ",
        "",
        "0x10",
        "9007199254740993",
        "18446744073709551616",
    ]
    .iter()
    .map(|t| format!("[{}, {}]", json(t), number(n(t))))
    .collect();
    format!(
        "{{\"generator\": \"src/commands/error_vectors.rs\",\n \"max_count\": {MAX_COUNT}, \
         \"max_duration_ms\": {MAX_DURATION_MS}, \"max_duration_days\": {max_days},\n \
         \"durations\": [\n  {}\n ],\n \"counts\": [\n  {}\n ]}}\n",
        durations.join(",\n  "),
        counts.join(",\n  ")
    )
}

#[test]
fn the_committed_grammar_is_what_the_module_reads() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/lua/conformance/grammar.json");
    let text = grammar();
    if std::env::var_os("RATELIMIT_WRITE_VECTORS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not what the module's grammar reads now: if the change is meant, write it anew \
         (RATELIMIT_WRITE_VECTORS=1 cargo test --release -p ratelimit --lib error_vectors) and \
         make the packages agree",
        path.display()
    );
}
