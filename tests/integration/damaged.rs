//! Damaged data never takes the server down (docs/durability.md): `RESTORE` of thousands of
//! frame-level mutations of every kind of key, compressed and not, each answered with OK or
//! an error while the server goes on; an RDB file whose policy aux data is damaged is
//! refused at start with a log line, never a crash; replicas load a sync without a
//! temporary file (diskless load).
//!
//! `RATELIMIT_DAMAGED_STRIDE=k` tries every k-th mutation and damaged file only (default 1, all
//! of them), from the `RATELIMIT_DAMAGED_OFFSET`-th (default 0): make test (scripts/test.sh)
//! tries them all on its first server, every fourth on each of the others, from offsets that
//! differ from server to server (so that each is tried on a second server too), and every
//! fourth in its runs of the release's module (smoke).

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crate::common::{Client, Config, Reply, Server, T0_MS};

/// CRC-64/Jones as Redis computes it for DUMP payloads and RDB files: the polynomial
/// 0xad93d23594c935a9 (reflected: 0x95ac9329ac4bc9b5), reflected input and output, initial
/// value 0, no final xor. Bit by bit: slow and plain.
fn crc64(bytes: &[u8]) -> u64 {
    const REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[test]
fn the_crc_is_redis_crc64() {
    // The check value Redis' own crc64 test uses.
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

/// A DUMP payload split into its RDB value and its 2-byte RDB version.
struct Dump {
    value: Vec<u8>,
    version: [u8; 2],
}

impl Dump {
    fn parse(payload: &[u8]) -> Dump {
        let n = payload.len();
        assert!(n > 10, "a DUMP payload ends with a version and a CRC");
        let crc = u64::from_le_bytes(payload[n - 8..].try_into().unwrap());
        assert_eq!(crc, crc64(&payload[..n - 8]), "the test's CRC is Redis'");
        Dump {
            value: payload[..n - 10].to_vec(),
            version: [payload[n - 10], payload[n - 9]],
        }
    }

    /// The payload for `value`, with its CRC computed again, so that Redis hands it on.
    fn payload(&self, value: &[u8]) -> Vec<u8> {
        let mut out = value.to_vec();
        out.extend_from_slice(&self.version);
        let crc = crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// An RDB length encoding of `n` in the given width: 6, 14, 32 or 64 bits.
fn length(n: u64, bits: u32) -> Vec<u8> {
    match bits {
        6 => vec![(n & 0x3f) as u8],
        14 => vec![0x40 | ((n >> 8) & 0x3f) as u8, n as u8],
        32 => [&[0x80][..], &(n as u32).to_be_bytes()].concat(),
        _ => [&[0x81][..], &n.to_be_bytes()].concat(),
    }
}

/// Reads an RDB length at `at`: (value, bytes it took), or for an encoded string (the
/// special `11` form) `None` and the form.
fn read_length(b: &[u8], at: usize) -> (Option<u64>, usize) {
    let first = b[at];
    match first >> 6 {
        0 => (Some(u64::from(first & 0x3f)), 1),
        1 => (Some(u64::from(first & 0x3f) << 8 | u64::from(b[at + 1])), 2),
        2 if first == 0x80 => (
            Some(u64::from(u32::from_be_bytes(
                b[at + 1..at + 5].try_into().unwrap(),
            ))),
            5,
        ),
        2 => (
            Some(u64::from_be_bytes(b[at + 1..at + 9].try_into().unwrap())),
            9,
        ),
        _ => (None, 1),
    }
}

/// Our value's frame: type 7 (module, v2), the module id as a 64-bit length (0x81 and 8
/// bytes), the opcode 5 (string), the string, the opcode 0 (EOF).
const STRING_AT: usize = 11;

/// The mutations (or damaged files) of `all` that are tried: every `RATELIMIT_DAMAGED_STRIDE`-th
/// (default 1) from the `RATELIMIT_DAMAGED_OFFSET`-th (default 0, less than the stride).
fn sample<T>(all: impl Iterator<Item = T>) -> impl Iterator<Item = T> {
    let var = |name: &str, default: usize, at_least: usize| {
        std::env::var(name).map_or(default, |s| {
            s.parse()
                .ok()
                .filter(|&k| k >= at_least)
                .unwrap_or_else(|| panic!("{name}: a whole number, {at_least} or more"))
        })
    };
    let stride = var("RATELIMIT_DAMAGED_STRIDE", 1, 1);
    let offset = var("RATELIMIT_DAMAGED_OFFSET", 0, 0);
    assert!(
        offset < stride,
        "RATELIMIT_DAMAGED_OFFSET: less than the stride, {stride}"
    );
    all.skip(offset).step_by(stride)
}

/// The frame-level mutations of `value`, each with a name for the failure message.
fn mutations(value: &[u8]) -> Vec<(String, Vec<u8>)> {
    let n = value.len();
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    assert_eq!((value[0], value[1], value[10]), (7, 0x81, 5), "{value:?}");
    // Truncation: at every length near either end, every third one between.
    for len in 0..n {
        if len < 64 || len + 64 > n || len % 3 == 0 {
            out.push((format!("truncated to {len}"), value[..len].to_vec()));
        }
    }
    // Bit flips: every bit of the frame's head and tail, every bit of a compressed string
    // (the LZF data) up to 4 KB, one bit of every other byte.
    let compressed = value[STRING_AT] == 0xc3;
    for at in 0..n {
        let every_bit = at < 40 || at + 8 > n || (compressed && at < 4096);
        let bits: Vec<u32> = if every_bit {
            (0..8).collect()
        } else {
            vec![at as u32 % 8]
        };
        for bit in bits {
            let mut v = value.to_vec();
            v[at] ^= 1 << bit;
            out.push((format!("bit {bit} of byte {at} flipped"), v));
        }
    }
    // The type byte, the module-id length form and the opcodes set to other values.
    for (at, what) in [
        (0, "type"),
        (1, "module id form"),
        (STRING_AT - 1, "opcode"),
        (n - 1, "EOF opcode"),
    ] {
        for byte in [0u8, 1, 2, 3, 4, 5, 6, 7, 0x40, 0x80, 0x81, 0xc0, 0xc3, 0xff] {
            let mut v = value.to_vec();
            v[at] = byte;
            out.push((format!("{what} byte set to {byte:#x}"), v));
        }
    }
    // The string's lengths grown (and shrunk), in every width: for a plain string its
    // length; for an LZF one its compressed and its uncompressed length.
    let lengths: Vec<(String, usize)> = if compressed {
        let (_, clen_size) = read_length(value, STRING_AT + 1);
        vec![
            ("compressed length".into(), STRING_AT + 1),
            ("uncompressed length".into(), STRING_AT + 1 + clen_size),
        ]
    } else {
        vec![("string length".into(), STRING_AT)]
    };
    for (what, at) in lengths {
        let (Some(len), size) = read_length(value, at) else {
            panic!("no length at {at}");
        };
        let grown = [
            len + 1,
            len + 2,
            len + 9,
            len + 1000,
            len.saturating_sub(1),
            0,
            1 << 31,
            u64::from(u32::MAX),
            1 << 40,
            u64::MAX,
        ];
        for new in grown {
            for bits in [6, 14, 32, 64] {
                if (bits == 6 && new >= 64) || (bits == 14 && new >= 1 << 14) {
                    continue;
                }
                if bits == 32 && new > u64::from(u32::MAX) {
                    continue;
                }
                let v = [&value[..at], &length(new, bits), &value[at + size..]].concat();
                out.push((format!("{what} {len} set to {new} in {bits} bits"), v));
            }
        }
    }
    // Bytes appended after the EOF opcode, and the EOF opcode dropped.
    out.push(("a byte appended".into(), [value, &[0]].concat()));
    out.push(("EOF opcode dropped".into(), value[..n - 1].to_vec()));
    out
}

/// The keys under test: every kind a key can hold, each built by requests at the debug
/// clock T0, and a request that uses a key of that kind (run on a restored value).
fn build_keys(c: &mut Client) -> Vec<(&'static str, Vec<&'static str>)> {
    c.clock_set(T0_MS);
    let ok = Reply::Simple("OK".into());
    assert_eq!(
        c.cmd(&[
            "RL.POLICY.SET",
            "api",
            "GCRA",
            "10",
            "10",
            "1s",
            "FIXEDWINDOW",
            "300",
            "1m",
            "SLIDINGLOG",
            "50",
            "1h",
            "TOKENBUCKET",
            "5",
            "1",
            "1s"
        ]),
        ok
    );
    let keys: Vec<(&str, Vec<&str>)> = vec![
        ("gcra", vec!["RL.GCRA", "m", "10", "3", "1h", "COST", "4"]),
        ("cell", vec!["CL.THROTTLE", "m", "9", "3", "3600", "2"]),
        (
            "tb",
            vec!["RL.TOKENBUCKET", "m", "10", "1", "1s", "COST", "3"],
        ),
        (
            "tbi",
            vec![
                "RL.TOKENBUCKET",
                "m",
                "10",
                "2",
                "1m",
                "INTERVAL",
                "COST",
                "3",
            ],
        ),
        (
            "lb",
            vec!["RL.LEAKYBUCKET", "m", "10", "1", "1s", "COST", "2"],
        ),
        ("fw", vec!["RL.FIXEDWINDOW", "m", "10", "1h", "COST", "3"]),
        ("sw", vec!["RL.SLIDINGWINDOW", "m", "10", "1h", "COST", "3"]),
        ("log", vec!["RL.SLIDINGLOG", "m", "10", "1h", "COST", "2"]),
        ("longlog", vec!["RL.SLIDINGLOG", "m", "100000", "1d"]),
        (
            "warmup",
            vec![
                "RL.WARMUP",
                "m",
                "10",
                "1h",
                "1h",
                "COLDFACTOR",
                "4",
                "COST",
                "3",
            ],
        ),
        ("lease", vec!["RL.CONCURRENCY.ACQUIRE", "m", "5", "1h"]),
        (
            "adaptive",
            vec![
                "RL.CONCURRENCY.ACQUIRE",
                "m",
                "5",
                "1h",
                "ADAPTIVE",
                "GRADIENT2",
            ],
        ),
        ("limit", vec!["RL.LIMIT", "m", "api", "COST", "2"]),
        (
            "blocked",
            vec!["RL.GCRA", "m", "1", "1", "1h", "BLOCK", "1m"],
        ),
    ];
    for (key, request) in &keys {
        let mut args = request.clone();
        args[1] = key;
        match *key {
            // 3000 requests 10 ms apart: a long log of regular gaps, which LZF compresses.
            "longlog" => {
                for _ in 0..3000 {
                    c.send(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
                    c.send(&[b"RL.DEBUG.CLOCK", b"ADVANCE", b"10"]);
                }
                for _ in 0..3000 {
                    assert_eq!(c.read().ints()[0], 1);
                    c.read();
                }
            }
            "lease" | "adaptive" => {
                for id in ["alpha", "beta"] {
                    let r = c.cmd(&[args.as_slice(), &["ID", id]].concat());
                    assert!(
                        matches!(&r, Reply::Array(f) if f[0] == Reply::Int(1)),
                        "{r:?}"
                    );
                }
                let r = c.cmd(&args);
                assert!(
                    matches!(&r, Reply::Array(f) if f[0] == Reply::Int(1)),
                    "{r:?}"
                );
            }
            "blocked" => {
                assert_eq!(c.cmd(&args).ints()[0], 1);
                assert_eq!(c.cmd(&args).ints()[0], 0);
            }
            // redis-cell's reply starts with `limited`.
            "cell" => assert_eq!(c.cmd(&args).ints()[0], 0),
            _ => assert_eq!(c.cmd(&args).ints()[0], 1, "{args:?}"),
        }
    }
    keys
}

fn dump(c: &mut Client, key: &str) -> Vec<u8> {
    match c.cmd(&["DUMP", key]) {
        Reply::Bulk(b) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// RESTOREs `payload` as `m` and checks the server goes on: the reply is OK or an error, an
/// accepted value answers RL.INSPECT and a request of its kind, and PING answers. Whether
/// it was accepted.
fn restore_and_check(c: &mut Client, payload: &[u8], request: &[&str]) -> bool {
    let reply = c.cmd_bytes(&[b"RESTORE", b"m", b"0", payload, b"REPLACE"]);
    let accepted = match &reply {
        Reply::Simple(ok) if ok == "OK" => true,
        Reply::Error(_) => false,
        other => panic!("RESTORE replied {other:?}"),
    };
    if accepted {
        for args in [&["RL.INSPECT", "m"][..], request, &["DEL", "m"]] {
            let r = c.cmd(args);
            assert!(
                !matches!(r, Reply::Other(_)),
                "{args:?} on a restored value: {r:?}"
            );
        }
    }
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));
    accepted
}

/// Every mutation of every key's DUMP, on a server with `rdbcompression` set to
/// `compression`: (mutations tried, accepted).
fn restore_mutations(compression: &str) -> (usize, usize) {
    let server = Server::with(Config::default().extra(&["--rdbcompression", compression]));
    let mut c = server.client();
    let keys = build_keys(&mut c);
    let (mut tried, mut accepted) = (0, 0);
    let mut compressed_log = false;
    for (key, request) in &keys {
        let payload = dump(&mut c, key);
        let original = Dump::parse(&payload);
        if *key == "longlog" {
            compressed_log = original.value[STRING_AT] == 0xc3;
        }
        // The payload as dumped is accepted and holds the same state.
        assert!(restore_and_check(&mut c, &payload, &["RL.INSPECT", "m"]));
        for (what, value) in sample(mutations(&original.value).into_iter()) {
            let payload = original.payload(&value);
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                restore_and_check(&mut c, &payload, request)
            }));
            match outcome {
                Ok(ok) => accepted += usize::from(ok),
                Err(_) => {
                    let log = server.log();
                    let tail: Vec<&str> = log.lines().rev().take(30).collect();
                    panic!(
                        "{key} with {what} (rdbcompression {compression}): the server did \
                         not go on; log:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    );
                }
            }
            tried += 1;
        }
    }
    assert_eq!(
        compressed_log,
        compression == "yes",
        "the long log's string is LZF-compressed exactly when rdbcompression is yes"
    );
    let log = server.log();
    assert!(!log.contains("Guru Meditation"), "{log}");
    (tried, accepted)
}

#[test]
fn restore_of_a_damaged_value_is_an_error_and_the_server_goes_on() {
    for compression in ["yes", "no"] {
        let started = Instant::now();
        let (tried, accepted) = restore_mutations(compression);
        eprintln!(
            "rdbcompression {compression}: {tried} mutations RESTOREd ({accepted} accepted) \
             in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(tried > 5000, "{tried} mutations");
    }
}

/// Where the module's aux data (the policies) sits in an RDB file: from its opcode 0xf7
/// and our module id up to the next opcode, SELECTDB (0xfe), for a file with keys.
fn aux_range(rdb: &[u8], module_id: &[u8]) -> std::ops::Range<usize> {
    let head = [&[0xf7, 0x81][..], module_id].concat();
    let start = rdb
        .windows(head.len())
        .position(|w| w == head)
        .expect("the policies' aux data");
    let end = start
        + rdb[start..]
            .iter()
            .position(|&b| b == 0xfe)
            .expect("SELECTDB");
    start..end
}

/// An RDB file with its trailing CRC computed again.
fn with_crc(rdb: &[u8]) -> Vec<u8> {
    let body = &rdb[..rdb.len() - 8];
    [body, &crc64(body).to_le_bytes()].concat()
}

/// What a start on a damaged file must look like: a server that serves its policies, or
/// an exit (not a signal) whose log names the module and holds no crash report.
fn check_start(rdb: &[u8], what: &str) -> bool {
    let dir = common::fresh_dir("damaged-rdb");
    std::fs::write(dir.join("dump.rdb"), rdb).unwrap();
    match common::try_start_in(Config::default(), dir.clone()) {
        Ok(server) => {
            let mut c = server.client();
            assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()), "{what}");
            let Reply::Array(names) = c.cmd(&["RL.POLICY.LIST"]) else {
                panic!("{what}: RL.POLICY.LIST is not a list");
            };
            for name in names {
                let name = name.text();
                let r = c.cmd(&["RL.LIMIT", "probe", &name]);
                assert!(!matches!(r, Reply::Other(_)), "{what}: {r:?}");
            }
            assert!(!server.log().contains("BUG REPORT"), "{what}");
            true
        }
        Err(log) => {
            // Redis ends with its own check of the file, whose verdict is the status.
            assert!(
                log.starts_with("exited with exit status: "),
                "{what}: the server did not refuse the file cleanly:\n{log}"
            );
            for crash in ["Guru Meditation", "BUG REPORT", "crashed by signal"] {
                assert!(!log.contains(crash), "{what}: {crash}:\n{log}");
            }
            assert!(
                log.contains("ratelimit"),
                "{what}: no line names the module:\n{log}"
            );
            let _ = std::fs::remove_dir_all(&dir);
            false
        }
    }
}

#[test]
fn an_rdb_file_with_damaged_policies_is_refused_at_start_never_a_crash() {
    let started = Instant::now();
    let mut server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let ok = Reply::Simple("OK".into());
    for (name, rules) in [
        (
            "api",
            &["GCRA", "10", "10", "1s", "FIXEDWINDOW", "300", "1m"][..],
        ),
        (
            "login",
            &[
                "SLIDINGLOG",
                "5",
                "15m",
                "TOKENBUCKET",
                "3",
                "1",
                "1m",
                "INTERVAL",
            ],
        ),
        ("x", &["LEAKYBUCKET", "4", "1", "1s"]),
    ] {
        assert_eq!(c.cmd(&[&["RL.POLICY.SET", name][..], rules].concat()), ok);
    }
    assert_eq!(c.cmd(&["RL.LIMIT", "k", "api"]).ints()[0], 1);
    let module_id = dump(&mut c, "k")[2..10].to_vec();
    assert_eq!(c.cmd(&["SAVE"]), ok);
    let rdb = std::fs::read(server.dir.join("dump.rdb")).unwrap();
    server.stop();
    assert_eq!(with_crc(&rdb), rdb, "the test's CRC is Redis'");
    let aux = aux_range(&rdb, &module_id);
    // Each byte of the policies with one bit flipped, then another (the file's CRC made
    // right again). Not the file cut short inside them: the module refuses that too (a
    // short read, logged), but then Redis runs its own RDB check on the file, and that check
    // loops for ever on module data cut short (rdbLoadCheckModuleValue, in Redis 7.0, 8.2
    // and Valkey 8.1 alike), so the server never exits.
    let (mut tried, mut started_ok) = (0, 0);
    for at in sample(aux.clone()) {
        for bit in [at % 8, (at + 3) % 8] {
            let mut damaged = rdb.clone();
            damaged[at] ^= 1 << bit;
            let what = format!("bit {bit} flipped at {at}");
            started_ok += usize::from(check_start(&with_crc(&damaged), &what));
            tried += 1;
        }
    }
    eprintln!(
        "{tried} damaged RDB files ({started_ok} started) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        started_ok < tried,
        "no damage was refused: the mutations missed the policies"
    );
}

/// A replica loads a full sync straight from the socket (`repl-diskless-load`), with every
/// kind of key and the policies, and ends up with the primary's data.
#[test]
fn a_replica_loads_every_kind_of_key_and_the_policies_diskless() {
    for mode in ["swapdb", "on-empty-db"] {
        let primary = Server::with(common::primary_config());
        let mut p = primary.client();
        let keys = build_keys(&mut p);
        let replica = Server::with(Config::default().extra(&["--repl-diskless-load", mode]));
        let mut r = replica.client();
        if mode == "swapdb" {
            // Policies of its own, which the sync replaces.
            r.cmd(&["RL.POLICY.SET", "old", "GCRA", "1", "1", "1s"]);
        }
        r.replicate_from(&primary);
        let log = replica.log();
        assert!(!log.contains("Skipping diskless-load"), "{mode}:\n{log}");
        assert!(
            log.contains("Loading DB in memory"),
            "{mode}: no diskless load:\n{log}"
        );
        for c in [&mut p, &mut r] {
            c.clock_set(T0_MS + 60_000);
        }
        for (key, _) in &keys {
            let digest = |c: &mut Client| c.cmd(&["DEBUG", "DIGEST-VALUE", key]);
            assert_eq!(digest(&mut r), digest(&mut p), "{mode}: {key}");
            assert_eq!(
                r.cmd(&["RL.INSPECT", key]).render(),
                p.cmd(&["RL.INSPECT", key]).render(),
                "{mode}: {key}"
            );
        }
        assert_eq!(
            r.cmd(&["RL.POLICY.LIST"]),
            p.cmd(&["RL.POLICY.LIST"]),
            "{mode}"
        );
        assert_eq!(
            r.cmd(&["RL.POLICY.GET", "api"]),
            p.cmd(&["RL.POLICY.GET", "api"]),
            "{mode}"
        );
    }
}

/// A primary of our own on a loopback port, for a sync no real primary would send: it
/// answers the replica's handshake and sends `rdb` (cut to `send` bytes, then hangs up, when
/// `send` is shorter) as the full sync, once per connection, until dropped.
struct FakePrimary {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakePrimary {
    fn start(rdb: Vec<u8>, send: usize) -> FakePrimary {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut links = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                // Each command is an array of bulk strings; the first names it.
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let n: usize = line.trim_start_matches('*').trim().parse().unwrap_or(0);
                    let mut args = Vec::new();
                    for _ in 0..n {
                        line.clear();
                        reader.read_line(&mut line).unwrap();
                        let len: usize = line.trim_start_matches('$').trim().parse().unwrap();
                        let mut arg = vec![0; len + 2];
                        reader.read_exact(&mut arg).unwrap();
                        arg.truncate(len);
                        args.push(String::from_utf8_lossy(&arg).to_uppercase());
                    }
                    let reply: &[u8] = match args.first().map(String::as_str) {
                        Some("PING") => b"+PONG\r\n",
                        Some("PSYNC") | Some("SYNC") => {
                            let head =
                                format!("+FULLRESYNC {} 0\r\n${}\r\n", "a".repeat(40), rdb.len());
                            let _ = writer.write_all(head.as_bytes());
                            let _ = writer.write_all(&rdb[..send.min(rdb.len())]);
                            break;
                        }
                        _ => b"+OK\r\n",
                    };
                    let _ = writer.write_all(reply);
                }
                if send >= rdb.len() {
                    links.push(writer); // a whole sync: the link stays up
                }
            }
        });
        FakePrimary {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakePrimary {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An RDB file holding one GCRA key, uncompressed, and where that key's state (the codec's
/// blob: its version byte, then its algorithm tag) starts in it.
fn rdb_with_one_key() -> (Vec<u8>, usize) {
    let mut server = Server::with(Config::default().extra(&["--rdbcompression", "no"]));
    let mut c = server.client();
    c.clock_set(T0_MS);
    assert_eq!(c.cmd(&["RL.GCRA", "k", "10", "1", "1h"]).ints()[0], 1);
    let value = Dump::parse(&dump(&mut c, "k")).value;
    assert_eq!(c.cmd(&["SAVE"]), Reply::Simple("OK".into()));
    let rdb = std::fs::read(server.dir.join("dump.rdb")).unwrap();
    server.stop();
    // In the RDB the key's name sits between the type byte and the rest of the value.
    let rest = &value[1..];
    let at = rdb
        .windows(rest.len())
        .position(|w| w == rest)
        .expect("the key's value in the RDB");
    (rdb, at + STRING_AT)
}

/// A replica loading from the socket: a sync cut short inside a limiter value is a read
/// error, which the replica takes for a broken link and retries (before, with no diskless
/// load, or with a module read that had no error handling, the server panicked); a sync
/// whose value is whole but does not decode is corrupt data, which the replica refuses as
/// Redis refuses corrupt data of its own types: a log line and exit status 1, never a crash.
#[test]
fn a_damaged_sync_stream_never_crashes_the_replica() {
    let (rdb, blob) = rdb_with_one_key();
    let replica_of = |primary: &FakePrimary| {
        let port = primary.port.to_string();
        Config::default().extra(&[
            "--repl-diskless-load",
            "on-empty-db",
            "--replicaof",
            "127.0.0.1",
            &port,
        ])
    };
    let wait_for_log = |server: &Server, what: &str| {
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while !server.log().contains(what) {
            assert!(Instant::now() < deadline, "no '{what}':\n{}", server.log());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    // Cut short two bytes into the state: the replica goes on, and tries again.
    let primary = FakePrimary::start(rdb.clone(), blob + 2);
    let mut replica = Server::with(replica_of(&primary));
    wait_for_log(&replica, "assuming connection error, resuming operation");
    assert_eq!(
        replica.client().cmd(&["PING"]),
        Reply::Simple("PONG".into())
    );
    assert!(replica.is_running());
    let log = replica.log();
    assert!(!log.contains("Skipping diskless-load"), "{log}");
    assert!(
        !log.contains("BUG REPORT") && !log.contains("Guru Meditation"),
        "{log}"
    );
    drop(replica);
    drop(primary);
    // Whole, but with an algorithm tag no version knows (the file's CRC made right).
    let mut corrupt = rdb.clone();
    corrupt[blob + 1] = 0x7f;
    let corrupt = with_crc(&corrupt);
    let primary = FakePrimary::start(corrupt.clone(), corrupt.len());
    let outcome = common::try_start_in(replica_of(&primary), common::fresh_dir("replica"));
    let log = match outcome {
        Err(log) => log,
        Ok(mut replica) => {
            let deadline = Instant::now() + std::time::Duration::from_secs(20);
            while replica.is_running() {
                assert!(Instant::now() < deadline, "the replica loaded corrupt data");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            replica.log()
        }
    };
    assert!(
        log.contains("module type 'ratelimit', that the responsible module is not able to load"),
        "{log}"
    );
    assert!(
        log.contains("Terminating server after rdb file reading failure"),
        "{log}"
    );
    assert!(
        !log.contains("BUG REPORT") && !log.contains("Guru Meditation"),
        "{log}"
    );
}
