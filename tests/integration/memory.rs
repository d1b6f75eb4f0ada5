//! What a key costs (docs/performance.md, Memory): `MEMORY USAGE` of every kind of key and
//! every form a value takes (a state inline in the value pointer, a policy's block of words,
//! a 16-byte cell, a whole value) is what storing it took (`used_memory`'s growth): the key's
//! part within 5% on Redis 7.0 and 8% elsewhere, the value's within the allocator's rounding;
//! and a packed key reads back, copies, dumps and digests exactly as it was written, also
//! after its state moved past its epoch.

use crate::common::{Client, Reply, Server, T0_MS};

/// Keys per measure: the keyspace's buckets are then shared as in `make bench`'s 100,000 keys
/// (a power-of-two table at the same fill: Redis's dict of 65,536 buckets against 131,072,
/// Valkey's hashtable of 16,384 buckets of seven against 32,768), at half the cost: 100,000
/// took 14 s of CPU a server, a sixth of the integration tests', 50,000 take 6-7 s (every
/// figure the test prints moved by less than a byte on Redis 7.0, 8.2 and Valkey 8.1).
const KEYS: usize = 50_000;

/// Sends `commands` in batches and checks each reply with `check`.
fn pipeline(c: &mut Client, commands: &[Vec<String>], check: impl Fn(&Reply) -> bool) {
    for chunk in commands.chunks(1000) {
        for command in chunk {
            let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
            c.send(&args);
        }
        for command in chunk {
            let reply = c.read();
            assert!(check(&reply), "{command:?}: {reply:?}");
        }
    }
}

fn used_memory(c: &mut Client) -> i64 {
    c.info_field("memory", "used_memory").parse().unwrap()
}

/// Whether the server is Redis 7.0, where issue 17's figures (a whole key within 5%, and its
/// bytes) were measured, on Debian's jemalloc (16-byte classes: Redis 7.4 as Redis builds it
/// has 8-byte ones, and lays a key out as 7.0 does).
fn is_redis_7_0(c: &mut Client) -> bool {
    let info = c.cmd(&["INFO", "server"]).text();
    !info.contains("valkey_version") && info.contains("redis_version:7.0.")
}

/// Whether the server allocates with jemalloc, whose size classes the module counts its
/// blocks in (`mem_allocator` says `libc` for a server built with `MALLOC=libc`).
fn is_jemalloc(c: &mut Client) -> bool {
    c.info_field("memory", "mem_allocator")
        .starts_with("jemalloc")
}

/// Whether a table of database 0 is being rehashed: `DEBUG HTSTATS` shows Redis's second
/// table as its "rehashing target", and Valkey's "rehashing index" (-1 when none).
fn rehashing(c: &mut Client) -> bool {
    let stats = c.cmd(&["DEBUG", "HTSTATS", "0"]).text();
    stats.contains("rehashing target")
        || stats.lines().any(|line| {
            line.trim()
                .strip_prefix("rehashing index:")
                .is_some_and(|index| index.trim() != "-1")
        })
}

/// Moves on a rehash the writes left under way until it is over, with lookups of the keys
/// (each takes a step of each table's rehash): `used_memory` then counts the tables a key
/// shares once it is stored, not an old table on its way out. Redis's own timer leaves it
/// under way while the keyspace is idle (still so after half a second on Redis 7.0 and 8.2), and
/// the writes end it or not as the hash seed falls: on Redis 8 the growth of an inline key
/// was 92.1 or 86.5 bytes, run to run.
fn finish_rehash(c: &mut Client) {
    for round in 0.. {
        if !rehashing(c) {
            return;
        }
        assert!(
            round < 100,
            "a rehash still under way after {round} rounds of lookups"
        );
        let lookups: Vec<Vec<String>> = (0..KEYS)
            .map(|i| vec!["EXISTS".into(), format!("k:{i}")])
            .collect();
        pipeline(c, &lookups, |r| matches!(r, Reply::Int(_)));
    }
}

/// The mean `MEMORY USAGE` of the `KEYS` keys `k:<i>`: every key, not a sample. (A sample of
/// every thousandth key took the first key of each pipelined batch, whose object glibc's
/// malloc often gives a chunk 16 bytes larger than the others': on Valkey 9.1 the mean of such
/// a sample of policy keys was 136.8 bytes where every key's is 125-127.)
fn usage_of_every_key(c: &mut Client) -> f64 {
    let mut total = 0;
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        for i in chunk {
            let key = format!("k:{i}");
            c.send(&[b"MEMORY", b"USAGE", key.as_bytes(), b"SAMPLES", b"0"]);
        }
        for i in chunk {
            let reply = c.read();
            let Reply::Int(bytes) = reply else {
                panic!("MEMORY USAGE k:{i}: {reply:?}");
            };
            total += bytes;
        }
    }
    total as f64 / KEYS as f64
}

/// (used_memory growth per key, mean MEMORY USAGE) for `KEYS` keys `k:<i>`, each made by
/// the commands `make(i)` (each admitted).
fn per_key(c: &mut Client, make: impl Fn(usize) -> Vec<Vec<String>>) -> (f64, f64) {
    assert_eq!(c.cmd(&["FLUSHALL", "SYNC"]), Reply::Simple("OK".into()));
    c.clock_set(T0_MS);
    let before = used_memory(c);
    let mut commands: Vec<Vec<String>> = Vec::new();
    // Each key's first command for every key, then its second, so that the clock can move
    // between them.
    let steps = make(0).len();
    for step in 0..steps {
        commands.clear();
        commands.extend((0..KEYS).map(|i| make(i).swap_remove(step)));
        // redis-cell's reply says 0 for admitted.
        let yes = Reply::Int(i64::from(commands[0][0] != "CL.THROTTLE"));
        let admitted = |r: &Reply| match r {
            Reply::Array(fields) => fields.first() == Some(&yes),
            Reply::Simple(ok) => ok == "OK",
            _ => false,
        };
        pipeline(c, &commands, admitted);
        c.clock_advance(1);
    }
    finish_rehash(c);
    let growth = (used_memory(c) - before) as f64 / KEYS as f64;
    (growth, usage_of_every_key(c))
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

#[test]
fn memory_usage_is_what_storing_a_key_took_for_every_kind_and_form() {
    let server = Server::start();
    let mut c = server.client();
    let policy =
        words("RL.POLICY.SET api GCRA 100 100 1m FIXEDWINDOW 1000 1h FIXEDWINDOW 10000 1d");
    let policy: Vec<&str> = policy.iter().map(String::as_str).collect();
    assert_eq!(c.cmd(&policy), Reply::Simple("OK".into()));
    let warm = words("RL.POLICY.SET warm WARMUP 10 1h 1h FIXEDWINDOW 1000 1h");
    let warm: Vec<&str> = warm.iter().map(String::as_str).collect();
    assert_eq!(c.cmd(&warm), Reply::Simple("OK".into()));
    let redis_7 = is_redis_7_0(&mut c);
    let jemalloc = is_jemalloc(&mut c);
    // (kind and form, the commands that make key i, the most bytes it may cost on Redis 7.0; the
    // first is a key of the smallest form, whose value allocates nothing)
    type Make = Box<dyn Fn(usize) -> Vec<Vec<String>>>;
    let one = |command: &'static str| -> Make {
        Box::new(move |i| vec![words(&command.replace("KEY", &format!("k:{i}")))])
    };
    let cases: Vec<(&str, Make, Option<f64>)> = vec![
        ("gcra, inline", one("RL.GCRA KEY 10 10 1h"), Some(134.0)),
        (
            "cl.throttle, inline",
            one("CL.THROTTLE KEY 9 10 3600"),
            Some(134.0),
        ),
        (
            "token bucket, inline",
            one("RL.TOKENBUCKET KEY 10 10 1h"),
            Some(134.0),
        ),
        (
            "leaky bucket, inline",
            one("RL.LEAKYBUCKET KEY 10 10 1h"),
            Some(134.0),
        ),
        (
            "fixed window, inline",
            one("RL.FIXEDWINDOW KEY 10 1h"),
            Some(134.0),
        ),
        (
            "sliding window, inline",
            one("RL.SLIDINGWINDOW KEY 10 1h"),
            Some(134.0),
        ),
        (
            // A fresh key after one request: a deficit of whole permits.
            "warm-up, inline",
            one("RL.WARMUP KEY 10 1h 1h"),
            Some(134.0),
        ),
        (
            "policy of three rules, words",
            one("RL.LIMIT KEY api"),
            Some(220.0),
        ),
        (
            // A warm-up rule packs as a key of its own does: two words.
            "policy of a warm-up and a window, words",
            one("RL.LIMIT KEY warm"),
            Some(180.0),
        ),
        (
            // Cold at 6.3 permits (7 an hour, cold factor 4): a request of 7 takes them
            // all, a deficit of a fraction of a permit; the schedule and the stored permits
            // fit 96 bits side by side.
            "warm-up, cell",
            one("RL.WARMUP KEY 7 1h 1h COLDFACTOR 4 COST 7"),
            Some(150.0),
        ),
        (
            // 1000 a second warming up in an hour: 1000 permits below cold is past a word's
            // 255, and the schedule (61 bits from 0) and the stored permits (45) fit a cell
            // only with the schedule measured from an epoch: the cell's entry has one.
            "warm-up, cell of its own epoch",
            one("RL.WARMUP KEY 1000 1s 1h COST 1000"),
            Some(150.0),
        ),
        (
            // A billion a second warming up in ten years stores permits in 93 bits (as a
            // billion a millisecond does: they depend on the count and the warm-up): the 3
            // left would make an epoch of a few ticks. The whole value (COST: a key that lives
            // an hour, past the measure; a billion a millisecond's lived 4 s).
            "warm-up, whole",
            one("RL.WARMUP KEY 1000000000 1s 3650d COST 1000000000000"),
            None,
        ),
        (
            // A fraction of a token (written again 1 ms later) takes a cell.
            "token bucket, cell",
            Box::new(|i| {
                let c = words(&format!("RL.TOKENBUCKET k:{i} 10 10 1h"));
                vec![c.clone(), c]
            }),
            Some(150.0),
        ),
        (
            // A block keeps the whole value.
            "gcra under a block, whole",
            Box::new(|i| {
                let c = words(&format!("RL.GCRA k:{i} 1 1 1h"));
                vec![c, words(&format!("RL.GCRA k:{i} 1 1 1h BLOCK 1h"))]
            }),
            None,
        ),
        (
            "sliding log, one entry",
            one("RL.SLIDINGLOG KEY 10 1h"),
            None,
        ),
        (
            "concurrency, one lease",
            one("RL.CONCURRENCY.ACQUIRE KEY 10 1h"),
            None,
        ),
        (
            "adaptive concurrency, one lease",
            one("RL.CONCURRENCY.ACQUIRE KEY 10 1h ADAPTIVE VEGAS"),
            None,
        ),
    ];
    // `MEMORY USAGE` of a key of ours is the server's count of the key (its name, and on Redis
    // 8 and Valkey the object that embeds it) plus the module's `mem_usage`: what the rest of
    // the key costs the server (a constant for the server's layout) and the value's own blocks.
    // Each part is held to what it can be exact to, on every server; a `mem_usage` a key's
    // worth (an inline key: 92 bytes on Redis 8 and Valkey, 132 on Redis 7.0) off is told:
    //
    // - The key's part, on a key whose value allocates nothing (inline): within 8% of its
    //   growth (5% on Redis 7.0). Measured: Redis 7.0 -0.2%, Valkey 8.1 and 9.1 within 0.8%;
    //   Redis 8 +6% (86.7 bytes a key once its tables' rehash is over, against the 52 bytes
    //   counted for every server that embeds the name, which fit Valkey's 92).
    // - The value's part: `MEMORY USAGE` less an inline key's, against the growth less an
    //   inline key's (the server's part cancels). The module counts a cell or a policy's block
    //   in jemalloc's size classes, 8 or 16 bytes apart as the server's allocator shows at load
    //   (Redis's own jemalloc gives a block of two rules 24 bytes, Debian's 32), and a whole
    //   value at its size, so where the server allocates with jemalloc the two are within 16
    //   bytes (measured within 9; a whole value's blocks are rounded up). A server built with glibc's malloc (the Valkey 8.1 and
    //   9.1 of `make test`) gives each block 8 bytes of header, rounded to 16 and at least 24,
    //   and fits a lease's B-tree nodes tighter than the jemalloc classes the module's count
    //   follows: measured -8 (a cell), -9 to +1 (a policy's block), -16 (a whole value), -32 (a
    //   sliding log), +70 and +63 (a lease, an adaptive one: 6.5% and 5.4% of the count). It
    //   is held to 32 bytes and 8% of the value's count: a key's worth too much is told there
    //   for every form, and too little for every form but a lease, whose count is the same on
    //   every server (the report prints it) and is told on the jemalloc servers.
    //
    // On Redis 7.0 (Debian's jemalloc, 16-byte classes) the whole key is also within 5% of its
    // growth, and no bigger than issue 17's figures. Valkey 9.1 stores a key as Valkey 8.1
    // does (the same growth for every form: 92 bytes an inline key, 116 a policy of two
    // rules), and both count the object with its name in `MEMORY USAGE` of a module key
    // (valkey-io/valkey#2661; measured: a name of 119 bytes adds 112 on both). What failed
    // there was the measure: a sample of the first key of each batch, and glibc's chunks.
    let mut report = Vec::new();
    let mut inline: Option<(f64, f64)> = None;
    for (name, make, ceiling) in &cases {
        let (growth, usage) = if name.contains("under a block") {
            // The second request is denied: count it as made.
            per_key_allowing_denials(&mut c, make)
        } else {
            per_key(&mut c, make)
        };
        let (inline_growth, inline_usage) = *inline.get_or_insert((growth, usage));
        let (said, took) = (usage - inline_usage, growth - inline_growth);
        report.push(format!(
            "{name}: growth {growth:.1}, MEMORY USAGE {usage:.1}; the value's: {took:.1} taken, {said:.1} counted"
        ));
        let fail = |what: &str| format!("{name}: {what}\n{}", report.join("\n"));
        let within = if redis_7 { 0.05 } else { 0.08 };
        if name.ends_with(", inline") || redis_7 {
            assert!(
                (usage / growth - 1.0).abs() <= within,
                "{}",
                fail(&format!(
                    "MEMORY USAGE {usage:.1} for a growth of {growth:.1}"
                ))
            );
        }
        let bound = if jemalloc { 16.0 } else { 32.0 + said * 0.08 };
        assert!(
            (said - took).abs() <= bound,
            "{}",
            fail(&format!(
                "the value counted {said:.1} bytes, took {took:.1} (within {bound:.1})"
            ))
        );
        if let (Some(ceiling), true) = (ceiling, redis_7) {
            assert!(
                growth <= *ceiling,
                "{}",
                fail(&format!("{growth:.1} bytes a key"))
            );
        }
    }
    eprintln!("{}", report.join("\n"));
    // Every entry of the table was given back with the keys.
    assert_eq!(c.cmd(&["FLUSHALL", "SYNC"]), Reply::Simple("OK".into()));
    assert_eq!(
        c.info_field("ratelimit_memory", "ratelimit_interned_params"),
        "0"
    );
}

/// [`per_key`] for a key whose later commands are denied (they still must reply).
fn per_key_allowing_denials(
    c: &mut Client,
    make: &dyn Fn(usize) -> Vec<Vec<String>>,
) -> (f64, f64) {
    assert_eq!(c.cmd(&["FLUSHALL", "SYNC"]), Reply::Simple("OK".into()));
    c.clock_set(T0_MS);
    let before = used_memory(c);
    for step in 0..make(0).len() {
        let commands: Vec<Vec<String>> = (0..KEYS).map(|i| make(i).swap_remove(step)).collect();
        pipeline(c, &commands, |r| matches!(r, Reply::Array(_)));
    }
    finish_rehash(c);
    let growth = (used_memory(c) - before) as f64 / KEYS as f64;
    (growth, usage_of_every_key(c))
}

/// The five fields of an admission reply.
fn fields(r: &Reply) -> Vec<i64> {
    r.ints()
}

#[test]
fn a_state_past_its_epoch_moves_to_a_new_one_exactly() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // The same schedule (burst 10^9, an interval of 1/2^24 s) kept inline (2^24 per second,
    // whose epoch spans 2^46 units of 1/rate µs: about 4 s) and in a cell (2^25 per 2 s:
    // above the rate an inline word takes). Each request of 10^8 units moves the TAT about
    // 6 s on: past its epoch every time.
    let inline = [
        "RL.GCRA",
        "inline",
        "1000000000",
        "16777216",
        "1s",
        "COST",
        "100000000",
    ];
    let cell = [
        "RL.GCRA",
        "cell",
        "1000000000",
        "33554432",
        "2s",
        "COST",
        "100000000",
    ];
    for step in 0..12 {
        let a = c.cmd(&inline);
        let b = c.cmd(&cell);
        assert_eq!(fields(&a), fields(&b), "step {step}");
        c.clock_advance(700);
    }
    // The last replies were denials; the schedule is 59.6 s ahead at most.
    let reply = fields(&c.cmd(&inline));
    assert_eq!(reply[0], 0, "{reply:?}");
    // One entry for each key: the epochs the inline key left were given back.
    assert_eq!(
        c.info_field("ratelimit_memory", "ratelimit_interned_params"),
        "2"
    );
    // Its state is what the cell's is, field by field (only the parameters differ).
    let inspect = |c: &mut Client, key: &str| -> Vec<(String, Reply)> {
        let Reply::Array(items) = c.cmd(&["RL.INSPECT", key]) else {
            panic!("RL.INSPECT");
        };
        items
            .chunks(2)
            .map(|kv| (kv[0].text(), kv[1].clone()))
            .filter(|(k, _)| k != "rate" && k != "period_ms" && k != "tat")
            .collect()
    };
    assert_eq!(inspect(&mut c, "inline"), inspect(&mut c, "cell"));
}

#[test]
fn a_warmup_cell_past_its_epoch_moves_to_a_new_one_exactly() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // 32 a second warming up in ten years, cold factor 10: the stored permits take 58 bits
    // of a cell and the schedule the 38 left, measured from an epoch, a multiple of 2^36
    // ticks of 1/32 µs (36 minutes); the cell moves to a new epoch once its schedule is 2^38
    // ticks (2.4 hours) past it. The key is kept busy for 2.6 hours of its clock: each
    // request at the instant the last refusal's retry_after names, give or take 2 ms, so
    // that it holds a fraction of a permit (a cell). A policy of the same warm-up and a
    // sliding log (a whole value: a log never packs) decides every request alike.
    let policy = "RL.POLICY.SET same WARMUP 32 1s 3650d COLDFACTOR 10 SLIDINGLOG 100000 1ms";
    assert_eq!(
        c.cmd(&policy.split(' ').collect::<Vec<_>>()),
        Reply::Simple("OK".into())
    );
    let warmup: [&[u8]; 7] = [
        b"RL.WARMUP",
        b"wu",
        b"32",
        b"1s",
        b"3650d",
        b"COLDFACTOR",
        b"10",
    ];
    let limit: [&[u8]; 3] = [b"RL.LIMIT", b"whole", b"same"];
    // A token bucket holding a fraction of a token: a cell, under a name as long.
    let bucket = ["RL.TOKENBUCKET", "tb", "10", "10", "1h"];
    c.cmd(&bucket);
    c.clock_advance(1);
    c.cmd(&bucket);
    let usage = |c: &mut Client, key: &str| c.cmd(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
    let cell = usage(&mut c, "tb");
    let (mut x, mut cells, mut admitted) = (12_345u64, 0, 0);
    for step in 0..60_000 {
        // One round trip a step: the last step's clock advance goes with this one's requests.
        c.send(&warmup);
        c.send(&limit);
        if step > 0 {
            assert!(matches!(c.read(), Reply::Int(_)), "the clock advanced");
        }
        let a = fields(&c.read());
        let b = fields(&c.read());
        assert_eq!(a[..], b[..5], "step {step}");
        if step % 1000 == 0 && usage(&mut c, "wu") == cell {
            cells += 1;
        }
        admitted += a[0];
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let wait = if a[0] == 1 {
            1
        } else {
            a[3] + (x >> 33) as i64 % 3
        };
        c.send(&[b"RL.DEBUG.CLOCK", b"ADVANCE", wait.to_string().as_bytes()]);
    }
    assert!(matches!(c.read(), Reply::Int(_)), "the clock advanced");
    assert!(cells >= 55, "a cell at {cells} of 60 looks");
    // The schedule went past the epoch's span: 2^33 µs is 8,589 s.
    let inspect = c.cmd(&["RL.INSPECT", "wu"]);
    let Reply::Array(items) = inspect else {
        panic!("RL.INSPECT");
    };
    let next_free = items
        .chunks(2)
        .find(|kv| kv[0].text() == "next_free_us")
        .map(|kv| kv[1].int())
        .unwrap();
    assert!(
        next_free - (T0_MS as i64) * 1000 > 9_000_000_000,
        "{next_free}"
    );
    assert!(admitted > 25_000, "{admitted}");
    // One entry for each key: the epochs the cell left were given back.
    assert_eq!(
        c.info_field("ratelimit_memory", "ratelimit_interned_params"),
        "2"
    );
}

#[test]
fn a_packed_key_copies_dumps_and_digests_as_it_was_written() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let policy = words("RL.POLICY.SET api GCRA 100 100 1m FIXEDWINDOW 1000 1h SLIDINGWINDOW 50 1s");
    let policy: Vec<&str> = policy.iter().map(String::as_str).collect();
    assert_eq!(c.cmd(&policy), Reply::Simple("OK".into()));
    let keys = [
        ("gcra", "RL.GCRA gcra 10 10 1h"),
        ("tb", "RL.TOKENBUCKET tb 10 10 1h INTERVAL"),
        ("lb", "RL.LEAKYBUCKET lb 10 10 1h"),
        ("fw", "RL.FIXEDWINDOW fw 10 1h"),
        ("sw", "RL.SLIDINGWINDOW sw 10 1h"),
        ("limit", "RL.LIMIT limit api"),
        // A fraction of a token: a cell.
        ("cell", "RL.TOKENBUCKET cell 10 10 1h"),
        // Warm-up keys, written once (a second request would wait for the schedule): a
        // word, a cell, a cell with an epoch and a whole value (as in the test above), and a
        // policy's words.
        ("wu", "RL.WARMUP wu 10 1h 1h"),
        ("wucell", "RL.WARMUP wucell 7 1h 1h COLDFACTOR 4 COST 7"),
        ("wuepoch", "RL.WARMUP wuepoch 1000 1s 1h COST 1000"),
        (
            "wuwhole",
            "RL.WARMUP wuwhole 1000000000 1ms 3650d COST 1000000000000",
        ),
        ("wulimit", "RL.LIMIT wulimit warm"),
    ];
    let warm = words("RL.POLICY.SET warm WARMUP 10 1h 1h FIXEDWINDOW 1000 1h");
    let warm: Vec<&str> = warm.iter().map(String::as_str).collect();
    assert_eq!(c.cmd(&warm), Reply::Simple("OK".into()));
    for (key, command) in keys {
        let command = words(command);
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        assert_eq!(c.cmd(&command).ints()[0], 1);
        c.clock_advance(1);
        if !key.starts_with("wu") {
            assert_eq!(c.cmd(&command).ints()[0], 1);
        }
    }
    for (key, _) in keys {
        let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", key]);
        let inspect = c.cmd(&["RL.INSPECT", key]);
        // COPY: the copy holds the same value and a reference of its own.
        assert_eq!(c.cmd(&["COPY", key, "copy"]), Reply::Int(1));
        assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", "copy"]), digest, "{key}");
        assert_eq!(c.cmd(&["DEL", key]), Reply::Int(1));
        assert_eq!(c.cmd(&["RL.INSPECT", "copy"]), inspect, "{key}");
        // DUMP and RESTORE: the same bytes, and the same digest, whatever epoch it lands in.
        let Reply::Bulk(dump) = c.cmd(&["DUMP", "copy"]) else {
            panic!("DUMP {key}");
        };
        // (With an expiry, which the digest counts too.)
        let ttl = c.pttl("copy").to_string();
        c.clock_advance(3_600_000 * 24 * 400);
        assert_eq!(
            c.cmd_bytes(&[b"RESTORE", key.as_bytes(), ttl.as_bytes(), &dump]),
            Reply::Simple("OK".into())
        );
        assert_eq!(c.cmd(&["DEBUG", "DIGEST-VALUE", key]), digest, "{key}");
        assert_eq!(c.cmd(&["DUMP", key]), Reply::Bulk(dump), "{key}");
        c.cmd(&["DEL", "copy"]);
    }
    // DEBUG RELOAD: saved and loaded back, each the same.
    let digests: Vec<Reply> = keys
        .iter()
        .map(|(key, _)| c.cmd(&["DEBUG", "DIGEST-VALUE", key]))
        .collect();
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Reply::Simple("OK".into()));
    for ((key, _), digest) in keys.iter().zip(&digests) {
        assert_eq!(&c.cmd(&["DEBUG", "DIGEST-VALUE", key]), digest, "{key}");
    }
}

#[test]
fn a_key_takes_its_smallest_form_again_when_its_block_is_over() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let usage = |c: &mut Client, key: &str| c.cmd(&["MEMORY", "USAGE", key]).int();
    assert_eq!(c.cmd(&["RL.GCRA", "k", "1", "1", "1s"]).ints()[0], 1);
    assert_eq!(c.cmd(&["RL.GCRA", "twin", "1", "1", "1s"]).ints()[0], 1);
    let inline = usage(&mut c, "k");
    assert_eq!(usage(&mut c, "twin"), inline);
    // Denied with a block: the whole value, which has room for it.
    let r = c.cmd(&["RL.GCRA", "k", "1", "1", "1s", "BLOCK", "10s"]);
    assert_eq!(r.ints()[0], 0);
    assert!(usage(&mut c, "k") > inline + 64, "{}", usage(&mut c, "k"));
    // Admitted after the block: as small as a key never blocked, and it still expires.
    c.clock_advance(10_000);
    let r = c.cmd(&["RL.GCRA", "k", "1", "1", "1s"]);
    assert_eq!(r.ints(), vec![1, 1, 0, 0, 1000]);
    assert_eq!(usage(&mut c, "k"), inline);
    let pttl = c.pttl("k");
    assert!(pttl > 0 && pttl <= 1000, "{pttl}");
    let tat = c.cmd(&["RL.INSPECT", "k"]).field("tat_us");
    assert_eq!(tat, Reply::Int((T0_MS as i64 + 11_000) * 1000));
}

#[test]
fn a_token_bucket_moves_between_a_word_and_a_cell_as_its_tokens_allow() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let usage = |c: &mut Client| c.cmd(&["MEMORY", "USAGE", "tb"]).int();
    let call = ["RL.TOKENBUCKET", "tb", "10", "10", "1h"];
    assert_eq!(c.cmd(&call).ints()[0], 1);
    let word = usage(&mut c);
    let state = |c: &mut Client| {
        let r = c.cmd(&["RL.INSPECT", "tb"]);
        (r.field("tokens"), r.field("remaining"))
    };
    // 1 ms later a fraction of a token has come back: a cell, 16 bytes more.
    c.clock_advance(1);
    // (2 tokens less 10^4 µs-tokens to refill, at 10 per hour: 719,999 ms.)
    assert_eq!(c.cmd(&call).ints(), vec![1, 10, 8, 0, 719_999]);
    assert_eq!(usage(&mut c), word + 16);
    let in_cell = state(&mut c);
    // Full again an hour later: whole tokens, a word again, with its expiry.
    c.clock_advance(3_600_000);
    assert_eq!(c.cmd(&call).ints(), vec![1, 10, 9, 0, 360_000]);
    assert_eq!(usage(&mut c), word);
    let pttl = c.pttl("tb");
    assert!(pttl > 0 && pttl <= 360_000, "{pttl}");
    assert_ne!(state(&mut c), in_cell);
}

#[test]
fn a_warmup_key_moves_between_a_word_and_a_cell_as_its_permits_allow() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    let usage = |c: &mut Client| c.cmd(&["MEMORY", "USAGE", "wu"]).int();
    let inspect = |c: &mut Client| c.cmd(&["RL.INSPECT", "wu"]);
    let call = ["RL.WARMUP", "wu", "10", "1h", "1h"];
    // Cold, then one permit below: a word.
    assert_eq!(c.cmd(&call).ints()[0], 1);
    let word = usage(&mut c);
    // 18 minutes later (the cold interval, 3 × 6 minutes, is paid), some cool-down came back:
    // a fraction of a permit below cold, less one more permit: a cell, 16 bytes more.
    c.clock_advance(1_080_000);
    assert_eq!(c.cmd(&call).ints()[0], 1);
    assert_eq!(usage(&mut c), word + 16);
    let in_cell = inspect(&mut c);
    // Cold is 10 permits (5 below the threshold, 5 above, from 6 to 18 minutes each): the
    // first request's permit cost 16.8 minutes, 1.2 minutes of idle time gave back 0.2 of a
    // permit, and the second spent one more, from 9.2 to 8.2, in 14.88 minutes.
    assert_eq!(in_cell.field("stored_micropermits"), Reply::Int(8_200_000));
    assert_eq!(
        in_cell.field("next_free_us"),
        Reply::Int((T0_MS as i64 + 1_080_000 + 892_800) * 1000)
    );
    // Read back as written, also after a save and a load.
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Reply::Simple("OK".into()));
    assert_eq!(inspect(&mut c), in_cell);
    assert_eq!(usage(&mut c), word + 16);
    // Cold again two hours later: one permit below after a request, a word again, with its
    // expiry.
    c.clock_advance(7_200_000);
    assert_eq!(c.cmd(&call).ints()[0], 1);
    assert_eq!(usage(&mut c), word);
    let pttl = c.pttl("wu");
    assert!(pttl > 0, "{pttl}");
    assert_ne!(inspect(&mut c), in_cell);
}

/// (used_memory growth per key, mean MEMORY USAGE) for `KEYS` keys `k:<i>`, each made by
/// the commands `make(i)`, whatever they reply (but an error).
fn per_plain_key(c: &mut Client, make: impl Fn(usize) -> Vec<Vec<String>>) -> (f64, f64) {
    assert_eq!(c.cmd(&["FLUSHALL", "SYNC"]), Reply::Simple("OK".into()));
    let before = used_memory(c);
    let commands: Vec<Vec<String>> = (0..KEYS).flat_map(&make).collect();
    pipeline(c, &commands, |r| !r.is_error());
    finish_rehash(c);
    let growth = (used_memory(c) - before) as f64 / KEYS as f64;
    (growth, usage_of_every_key(c))
}

/// RL.COUNTER's key is a plain string with a TTL, as the key of a library's INCR + PEXPIRE:
/// it costs what that key costs where the server embeds the value with the key (Redis 8,
/// Valkey: within 2 bytes), and on Redis 7.x one small string more (the module writes the
/// count as a string of its own, where INCR of a count under 10,000 shares one of Redis's
/// integer objects: 24 bytes on Redis's own jemalloc, 32 on Debian's); a key of the
/// module's type, RL.TOKENBUCKET's as the packages used for the same counter, costs more on
/// every server. `MEMORY USAGE` is Redis's own count for both plain keys.
#[test]
fn a_counter_key_costs_what_an_incr_and_pexpire_key_costs() {
    let server = Server::start();
    let mut c = server.client();
    // Redis 7.x keeps a value's object apart from its key's name; Redis 8 and Valkey embed
    // both in one allocation (an integer in the object's pointer).
    let info = c.cmd(&["INFO", "server"]).text();
    let apart = !info.contains("valkey_version") && info.contains("redis_version:7.");
    let plain = |c: &mut Client, make: &dyn Fn(usize) -> Vec<Vec<String>>| per_plain_key(c, make);
    let incr = plain(&mut c, &|i| {
        vec![
            words(&format!("INCR k:{i}")),
            words(&format!("PEXPIRE k:{i} 3600000")),
        ]
    });
    let counter = plain(&mut c, &|i| vec![words(&format!("RL.COUNTER k:{i} 1h"))]);
    let bucket = plain(&mut c, &|i| {
        vec![words(&format!(
            "RL.TOKENBUCKET k:{i} 1000000000000 1000000000000 1h INTERVAL"
        ))]
    });
    let report = format!(
        "INCR + PEXPIRE: growth {:.1}, MEMORY USAGE {:.1}; RL.COUNTER: growth {:.1}, MEMORY USAGE \
         {:.1}; RL.TOKENBUCKET: growth {:.1}, MEMORY USAGE {:.1}",
        incr.0, incr.1, counter.0, counter.1, bucket.0, bucket.1
    );
    eprintln!("{report}");
    let extra = counter.0 - incr.0;
    if apart {
        assert!((0.0..=33.0).contains(&extra), "{report}");
    } else {
        assert!(extra.abs() <= 2.0, "{report}");
    }
    assert!(counter.0 + 16.0 < bucket.0, "{report}");
}
