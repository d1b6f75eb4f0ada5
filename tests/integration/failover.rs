//! Failover (docs/cluster.md, Failover): what a limit admits when the primary holding its keys
//! dies. Replication is asynchronous: a primary acknowledges an admission before its replica
//! has it, so the admissions it had not sent yet die with it, and the promoted replica admits
//! those units again. Every test here checks that against what the promoted replica held: read
//! once its link to the dead primary is down (nothing more can reach it) and before any client
//! writes to it again, it is the count each key goes on from, exactly.
//!
//! - Redis Cluster, as measured for issue 37: three primaries with a replica each, 40
//!   `RL.FIXEDWINDOW k 100 1h` keys in one slot, eight clients spending their quota through
//!   whichever node serves the slot, the slot's primary killed (SIGKILL) at half the quota. Its
//!   replica synced afresh (as one just added or restarted does) and listed `state=online` on
//!   the primary just before the clients start: what the docs advised waiting for. Without
//!   `durable` a key admits again what the promoted replica lacked: measured. With `WAIT 1 100`
//!   after each admission (the packages' `durable`), an admission counts only once a replica
//!   has it, and no key goes over its limit.
//! - The settings that protect a limit, each shown exactly, with a single client: `durable`
//!   (a replica cut off, then one admission per key only the primary sees: each key over by
//!   exactly one without it, by none with it); the replica's acknowledged offset reaching the
//!   primary's before the primary goes (the promoted replica holds every count);
//!   `min-replicas-to-write` (it refuses admissions while the primary has no good replica, and
//!   does not make an admission wait for one).
//! - What `state=online` says: a replica frozen (SIGSTOP) as soon as its primary lists it
//!   online, the primary's bytes towards it read in the kernel's socket queues: on Redis 7.0
//!   (and at times Valkey 8.1) the primary sends nothing until the replica's next
//!   acknowledgement, and a kill then loses every key's admissions since the sync.
//! - Sentinel: a primary and its replica with the module, three real Sentinels (the server
//!   binary in sentinel mode, as Debian's redis-sentinel package links it), the same clients
//!   through whichever node Sentinel names primary.
//!
//! Once a replica is promoted, a new server is made its replica, as an operator would (until
//! then `durable` admits nothing); it is never promoted itself. Every step waits for an event (a
//! port answering, a field of INFO, a promotion seen in ROLE, an offset reached); the deadlines
//! are hang guards. `FAILOVERS` (default 1) sets how many failovers each measured test runs;
//! the figures in docs/cluster.md come from `FAILOVERS=40` (Redis 7.0) and `FAILOVERS=10`.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{primary_config, replicated, server_binary, Server, T0_MS};

/// A reply, as far as this test reads them.
#[derive(Debug, Clone, PartialEq)]
enum R {
    Int(i64),
    Text(String),
    Error(String),
    Array(Vec<R>),
    Nil,
}

/// A hang guard, not a measure: every event waited for here comes within seconds (a failover
/// takes the cluster's 5 s node timeout and a few seconds more); this turns one that never
/// comes into a failure that says which.
const HANG: Duration = Duration::from_secs(120);

/// Polls `done` until it holds; fails, naming `what`, after [`HANG`].
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !done() {
        assert!(Instant::now() < deadline, "hung: no {what} in {HANG:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client that reports a broken connection instead of panicking (the primary dies here).
struct Conn {
    /// The port it is connected to: which node acknowledged an admission.
    port: u16,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(port: u16) -> std::io::Result<Conn> {
        let stream = TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(5),
        )?;
        // A hang guard: a killed server's connections fail at once.
        stream.set_read_timeout(Some(HANG))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            port,
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Sends every command, then reads a reply for each (a pipeline).
    fn pipeline(&mut self, commands: &[&[&str]]) -> std::io::Result<Vec<R>> {
        let mut out = Vec::new();
        for args in commands {
            out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in *args {
                out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        self.writer.write_all(&out)?;
        commands.iter().map(|_| self.read()).collect()
    }

    fn cmd(&mut self, args: &[&str]) -> std::io::Result<R> {
        Ok(self.pipeline(&[args])?.remove(0))
    }

    fn read(&mut self) -> std::io::Result<R> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end_matches("\r\n");
        let bad = || std::io::Error::from(std::io::ErrorKind::InvalidData);
        let (kind, rest) = line.split_at(1.min(line.len()));
        Ok(match kind {
            "+" => R::Text(rest.into()),
            "-" => R::Error(rest.into()),
            ":" => R::Int(rest.parse().map_err(|_| bad())?),
            "$" => {
                let len: i64 = rest.parse().map_err(|_| bad())?;
                if len < 0 {
                    return Ok(R::Nil);
                }
                let mut buf = vec![0; len as usize + 2];
                self.reader.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                R::Text(String::from_utf8_lossy(&buf).into_owned())
            }
            "*" => {
                let len: i64 = rest.parse().map_err(|_| bad())?;
                if len < 0 {
                    return Ok(R::Nil);
                }
                R::Array((0..len).map(|_| self.read()).collect::<Result<_, _>>()?)
            }
            _ => return Err(bad()),
        })
    }
}

/// `INFO replication` of the node at `port` ("" if it does not answer).
fn replication(port: u16) -> String {
    match Conn::open(port).and_then(|mut c| c.cmd(&["INFO", "replication"])) {
        Ok(R::Text(info)) => info,
        _ => String::new(),
    }
}

/// The value of `name` in an INFO text.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A primary's `INFO replication`: its `master_repl_offset`, and for its replica (the one line
/// `slave0:ip=...,port=...,state=...,offset=...,lag=...`) the state and the offset the replica
/// last acknowledged.
fn primary_offsets(info: &str) -> (i64, Option<(String, i64)>) {
    let own = field(info, "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1);
    let replica = field(info, "slave0").map(|line| {
        let part = |name: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_default()
                .to_string()
        };
        (part("state"), part("offset").parse().unwrap_or(-1))
    });
    (own, replica)
}

/// Sends SIGSTOP or SIGCONT to a server of this test.
fn signal(server: &Server, sig: i32) {
    let pid = server.pid().expect("a running server") as i32;
    // SAFETY: kill(2) on the PID of a child the harness spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// A Sentinel process (the server binary with `--sentinel`), killed by PID when dropped.
struct Sentinel {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Sentinel {
    fn start(primary: u16) -> Sentinel {
        let port = common::free_port();
        let dir = common::fresh_dir("sentinel");
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile sentinel.log\n\
                 sentinel monitor main 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds main 1000\n\
                 sentinel failover-timeout main 10000\n\
                 sentinel parallel-syncs main 1\n",
                dir.display()
            ),
        )
        .unwrap();
        let child = Command::new(server_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sentinel");
        until("sentinel answering", || {
            Conn::open(port).and_then(|mut c| c.cmd(&["PING"])).is_ok()
        });
        Sentinel { port, child, dir }
    }

    /// The port of the node this Sentinel names primary.
    fn primary(&self) -> Option<u16> {
        let mut c = Conn::open(self.port).ok()?;
        match c
            .cmd(&["SENTINEL", "get-master-addr-by-name", "main"])
            .ok()?
        {
            R::Array(a) if a.len() == 2 => match &a[1] {
                R::Text(p) => p.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// A field of `SENTINEL master main`.
    fn master_field(&self, name: &str) -> Option<String> {
        let mut c = Conn::open(self.port).ok()?;
        let R::Array(fields) = c.cmd(&["SENTINEL", "master", "main"]).ok()? else {
            return None;
        };
        fields.chunks(2).find_map(|kv| match kv {
            [R::Text(k), R::Text(v)] if k == name => Some(v.clone()),
            _ => None,
        })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the PID of a child spawned here and not reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const KEYS_PER_CLIENT: usize = 5;
const CLIENTS: usize = 8;
const KEYS: usize = CLIENTS * KEYS_PER_CLIENT;
const LIMIT: i64 = 100;
const HALF: i64 = LIMIT / 2;
/// The packages' `durable` default: `WAIT 1 100` after each admission.
const WAIT: [&str; 3] = ["WAIT", "1", "100"];

/// Key `i` of the 40: `{prefix}k<client>_<n>`, client `i / 5` spending it.
fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}k{}_{}", i / KEYS_PER_CLIENT, i % KEYS_PER_CLIENT)
}

/// The count each key holds on the node at `port`, read once nothing more can reach it from
/// the dead primary: the node is a primary already, or its link is down with no sync under way
/// (a replica reads all its primary sent before it sees the connection closed). A key it does
/// not have holds 0. `READONLY` first: a cluster replica serves reads of its slots only then.
fn held_after_the_kill(port: u16, prefix: &str) -> Vec<i64> {
    until("the replica's link to the dead primary down", || {
        let info = replication(port);
        field(&info, "role") == Some("master")
            || (field(&info, "master_link_status") == Some("down")
                && field(&info, "master_sync_in_progress") == Some("0"))
    });
    let mut c = Conn::open(port).expect("the replica answers");
    let _ = c.cmd(&["READONLY"]);
    (0..KEYS)
        .map(|i| match c.cmd(&["RL.INSPECT", &key(prefix, i)]).unwrap() {
            R::Nil => 0,
            R::Array(fields) => fields
                .chunks(2)
                .find_map(|kv| match kv {
                    [R::Text(k), R::Int(n)] if k == "count" => Some(*n),
                    _ => None,
                })
                .expect("a count"),
            other => panic!("RL.INSPECT {}: {other:?}", key(prefix, i)),
        })
        .collect()
}

/// Per key, what the clients were told was admitted (with `durable`, only admissions a replica
/// acknowledged too), by the primary killed and by the nodes after it; and what the promoted
/// replica held of that key when the primary died.
struct Spent {
    before: Vec<i64>,
    after: Vec<i64>,
    held: Vec<i64>,
}

impl Spent {
    /// Each key's admissions over its limit.
    fn over(&self) -> Vec<i64> {
        (0..KEYS)
            .map(|i| self.before[i] + self.after[i] - LIMIT)
            .collect()
    }

    /// One line of figures: keys over their limit, units over in all, most on one key; and
    /// what the promoted replica held of what the primary acknowledged.
    fn figures(&self) -> String {
        let over = self.over();
        let keys_over = over.iter().filter(|o| **o > 0).count();
        let units: i64 = over.iter().filter(|o| **o > 0).sum();
        let most = over.iter().max().copied().unwrap_or(0);
        let least = over.iter().min().copied().unwrap_or(0);
        let held_keys = self.held.iter().filter(|h| **h > 0).count();
        format!(
            "{keys_over} of {KEYS} keys over, by {units} in all, at most {most} on one (least {least}); \
             the promoted replica held {} of the {} admissions acknowledged before the kill ({held_keys} of {KEYS} keys)",
            self.held.iter().sum::<i64>(),
            self.before.iter().sum::<i64>()
        )
    }

    /// Without `durable`: a key admits again exactly what the promoted replica lacked. It held
    /// at most one admission more than the clients were told (a request answered by the primary
    /// as it died), and the promoted replica admitted exactly the rest of the quota.
    fn check_without_durable(&self) {
        for i in 0..KEYS {
            assert!(
                (0..=self.before[i] + 1).contains(&self.held[i]),
                "key {i}: held {} of {} admitted before the kill",
                self.held[i],
                self.before[i]
            );
            assert_eq!(self.after[i], LIMIT - self.held[i], "key {i}");
        }
    }

    /// With `durable`: every admission counted before the kill is on the promoted replica
    /// (WAIT 1 said a replica had it, and there was one), so no key admits past its limit.
    fn check_durable(&self) {
        for i in 0..KEYS {
            assert!(
                self.before[i] <= self.held[i],
                "key {i}: counted {} before the kill, the promoted replica held {}",
                self.before[i],
                self.held[i]
            );
            assert!(self.after[i] <= LIMIT - self.held[i], "key {i}");
        }
        assert!(self.over().iter().all(|o| *o <= 0), "{:?}", self.over());
    }
}

/// How a client reaches the primary of its keys now (None until one answers).
type Connect = dyn Fn(Instant) -> Option<Conn> + Send + Sync;

/// Eight clients spending every key's quota through `connect`, each its five keys in turn
/// until every one is refused. With `durable`, `WAIT 1 100` follows each admission in the same
/// round trip, and an admission counts only if it answers 1 (else the client fails closed).
struct Spending {
    clients: Vec<std::thread::JoinHandle<bool>>,
    before: Arc<Vec<AtomicU64>>,
    after: Arc<Vec<AtomicU64>>,
    total: Arc<AtomicU64>,
    /// Closed from the kill until the promoted replica's counts are read: no client connects
    /// (to write to it) before that.
    gate: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Spending {
    /// Starts the clients; an admission acknowledged on port `killed` (the primary to be
    /// killed) counts in `before`, on any other node in `after`.
    fn start(durable: bool, prefix: &str, connect: Arc<Connect>, killed: u16) -> Spending {
        let counters =
            || -> Arc<Vec<AtomicU64>> { Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect()) };
        let (before, after) = (counters(), counters());
        let total = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(AtomicBool::new(true));
        let errors = Arc::new(Mutex::new(Vec::<String>::new()));
        let clients = (0..CLIENTS)
            .map(|t| {
                let (connect, before, after, total, gate, errors) = (
                    Arc::clone(&connect),
                    Arc::clone(&before),
                    Arc::clone(&after),
                    Arc::clone(&total),
                    Arc::clone(&gate),
                    Arc::clone(&errors),
                );
                let prefix = prefix.to_string();
                std::thread::spawn(move || {
                    let deadline = Instant::now() + HANG;
                    let reconnect = || -> Option<Conn> {
                        while Instant::now() < deadline {
                            if gate.load(Ordering::SeqCst) {
                                let conn = connect(deadline)?;
                                // One made as the gate closed may be to the promoted replica,
                                // which must not be written to yet.
                                if gate.load(Ordering::SeqCst) {
                                    return Some(conn);
                                }
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        None
                    };
                    let mut conn = reconnect();
                    let mut full = [false; KEYS_PER_CLIENT];
                    let mut port = conn.as_ref().map(|c| c.port);
                    let mut k = 0;
                    // Done when every key is spent on a node other than the killed primary.
                    while !(full.iter().all(|f| *f) && port != Some(killed))
                        && Instant::now() < deadline
                    {
                        let Some(c) = conn.as_mut() else {
                            conn = reconnect();
                            // On another node (the promoted replica), every key is tried again,
                            // as a client would: one spent on the old primary before the kill (a
                            // kill late on a loaded machine) may have room there.
                            let now = conn.as_ref().map(|c| c.port);
                            if now.is_some() && now != port {
                                full = [false; KEYS_PER_CLIENT];
                                port = now;
                            }
                            continue;
                        };
                        if full.iter().all(|f| *f) {
                            // Every key spent on the primary before its kill (a client ahead of
                            // the others on a loaded machine): waits for the kill, then tries
                            // every key on the promoted replica, as a client would.
                            std::thread::sleep(Duration::from_millis(5));
                            let ping: [&str; 1] = ["PING"];
                            if c.pipeline(&[&ping]).is_err() {
                                conn = None;
                            }
                            continue;
                        }
                        k = (k + 1) % KEYS_PER_CLIENT;
                        if full[k] {
                            continue;
                        }
                        let i = t * KEYS_PER_CLIENT + k;
                        let key = key(&prefix, i);
                        let limit = ["RL.FIXEDWINDOW", &key, "100", "1h"];
                        let sent: &[&[&str]] = if durable { &[&limit, &WAIT] } else { &[&limit] };
                        match c.pipeline(sent) {
                            Ok(replies) => match &replies[0] {
                                R::Array(fields) => {
                                    let acked = !durable || replies[1] == R::Int(1);
                                    if fields[0] == R::Int(1) {
                                        if acked {
                                            let by =
                                                if c.port == killed { &before } else { &after };
                                            by[i].fetch_add(1, Ordering::SeqCst);
                                            total.fetch_add(1, Ordering::SeqCst);
                                        }
                                    } else {
                                        full[k] = true;
                                    }
                                }
                                // A node no longer the slot's (MOVED) or not serving yet
                                // (CLUSTERDOWN, TRYAGAIN, LOADING): find the primary again.
                                R::Error(e)
                                    if [
                                        "MOVED",
                                        "CLUSTERDOWN",
                                        "TRYAGAIN",
                                        "LOADING",
                                        "READONLY",
                                    ]
                                    .iter()
                                    .any(|p| e.starts_with(p)) =>
                                {
                                    conn = None;
                                }
                                other => {
                                    errors.lock().unwrap().push(format!("{key}: {other:?}"));
                                    conn = None;
                                }
                            },
                            Err(_) => conn = None,
                        }
                    }
                    full.iter().all(|f| *f)
                })
            })
            .collect();
        Spending {
            clients,
            before,
            after,
            total,
            gate,
            errors,
        }
    }

    /// Returns once half of every key's quota in all has been acknowledged, the gate closed:
    /// the caller kills the primary now.
    fn halfway(&self) {
        let half = KEYS as u64 * HALF as u64;
        until("half the quota spent", || {
            self.total.load(Ordering::SeqCst) >= half
        });
        self.gate.store(false, Ordering::SeqCst);
    }

    /// Lets the clients connect again (the promoted replica's counts read).
    fn resume(&self) {
        self.gate.store(true, Ordering::SeqCst);
    }

    /// Waits for every client to have spent every key's quota to the end; what they were told,
    /// with `held`, what the promoted replica held.
    fn finish(self, held: Vec<i64>) -> Spent {
        for c in self.clients {
            assert!(
                c.join().expect("a client failed"),
                "a client did not finish its keys"
            );
        }
        // Errors other than a lost connection or a node not serving the slot yet: none (a node
        // Sentinel or the cluster names primary answers).
        let errors = self.errors.lock().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let read =
            |v: &Arc<Vec<AtomicU64>>| v.iter().map(|a| a.load(Ordering::SeqCst) as i64).collect();
        Spent {
            before: read(&self.before),
            after: read(&self.after),
            held,
        }
    }
}

/// One Sentinel failover.
fn one_failover(durable: bool) -> Spent {
    let (mut primary, replica) = replicated(primary_config());
    for server in [&primary, &replica] {
        server.client().clock_set(T0_MS);
    }
    let sentinels: Arc<Vec<Sentinel>> =
        Arc::new((0..3).map(|_| Sentinel::start(primary.port)).collect());
    // Each Sentinel knows the replica and the two others before anything fails.
    until("the sentinels knowing the replica and each other", || {
        sentinels.iter().all(|s| {
            s.master_field("num-slaves").as_deref() == Some("1")
                && s.master_field("num-other-sentinels").as_deref() == Some("2")
        })
    });
    let watching = Arc::clone(&sentinels);
    let spending = Spending::start(
        durable,
        "",
        Arc::new(move |deadline| connect_to_primary(&watching, deadline)),
        primary.port,
    );
    spending.halfway();
    primary.kill();
    let held = held_after_the_kill(replica.port, "");
    spending.resume();
    // Once Sentinel has promoted the replica, the operator gives it a replica of its own (with
    // `durable`, until one has the admissions nothing is admitted). Priority 0: Sentinel never
    // promotes it (it would, still empty, were the new primary taken for down while it loads).
    until("Sentinel naming the replica primary", || {
        sentinels[0].primary() == Some(replica.port)
    });
    let spare = Server::with(primary_config().extra(&["--replica-priority", "0"]));
    spare.client().clock_set(T0_MS);
    spare.client().replicate_from(&replica);
    let spent = spending.finish(held);
    assert_eq!(
        sentinels[0].primary(),
        Some(replica.port),
        "the replica was not promoted"
    );
    spent
}

/// A client's connection to whichever node the Sentinels name primary, opened again after
/// any error (the old primary gone, the new one not yet named, or not yet a primary).
fn connect_to_primary(sentinels: &[Sentinel], deadline: Instant) -> Option<Conn> {
    while Instant::now() < deadline {
        for s in sentinels {
            if let Some(port) = s.primary() {
                if role(port).is_some_and(|(kind, _)| kind == "master") {
                    if let Ok(c) = Conn::open(port) {
                        return Some(c);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The port of the primary serving `slot`, as the first node of `ports` that answers says.
fn cluster_primary(ports: &[u16], slot: i64) -> Option<u16> {
    for &port in ports {
        let Ok(mut c) = Conn::open(port) else {
            continue;
        };
        let Ok(R::Array(ranges)) = c.cmd(&["CLUSTER", "SLOTS"]) else {
            continue;
        };
        for range in ranges {
            let R::Array(f) = range else { continue };
            if let (Some(R::Int(start)), Some(R::Int(end)), Some(R::Array(primary))) =
                (f.first(), f.get(1), f.get(2))
            {
                if (*start..=*end).contains(&slot) {
                    if let Some(R::Int(p)) = primary.get(1) {
                        return u16::try_from(*p).ok();
                    }
                }
            }
        }
    }
    None
}

/// The role ROLE gives `port` ("master", "slave"), and for a replica its primary's port.
fn role(port: u16) -> Option<(String, Option<u16>)> {
    let R::Array(r) = Conn::open(port).ok()?.cmd(&["ROLE"]).ok()? else {
        return None;
    };
    let R::Text(kind) = r.first()? else {
        return None;
    };
    let primary = match r.get(2) {
        Some(R::Int(p)) => u16::try_from(*p).ok(),
        _ => None,
    };
    Some((kind.clone(), primary))
}

/// The keys' prefix on a cluster: one hash tag, one slot.
const SLOT_TAG: &str = "{f}";

/// Node arguments of the clusters here. A replica may be promoted however long it was cut off
/// (the default refuses one that was away for longer than ten node timeouts); the node timeout
/// stays the harness's 5 s, so that a live primary on a loaded machine is never taken for
/// failing (the tests kill it at a chosen point).
const CLUSTER_EXTRA: [&str; 2] = ["--cluster-replica-validity-factor", "0"];

/// Three primaries with a replica each (`redis-cli --cluster create`, every replica listed
/// `state=online` on its primary, every node known to every other), the debug clock set on
/// each; the primary serving the keys' slot and its replica.
struct SlotCluster {
    nodes: Vec<Server>,
    ports: Vec<u16>,
    slot: i64,
    primary: usize,
    replica: usize,
}

impl SlotCluster {
    fn start() -> SlotCluster {
        // Every node knows every other when it returns (a replica that only its primary knows
        // gets no vote once that primary is dead).
        let nodes = common::cluster_with(3, 1, &CLUSTER_EXTRA);
        for n in &nodes {
            n.client().clock_set(T0_MS);
        }
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        let slot = nodes[0]
            .client()
            .cmd(&["CLUSTER", "KEYSLOT", SLOT_TAG])
            .int();
        let primary_port = cluster_primary(&ports, slot).expect("the slot's primary");
        let primary = ports.iter().position(|&p| p == primary_port).unwrap();
        let replica = ports
            .iter()
            .position(|&p| {
                role(p).is_some_and(|(kind, of)| kind == "slave" && of == Some(primary_port))
            })
            .expect("the primary's replica");
        SlotCluster {
            nodes,
            ports,
            slot,
            primary,
            replica,
        }
    }

    fn primary_port(&self) -> u16 {
        self.ports[self.primary]
    }

    fn replica_port(&self) -> u16 {
        self.ports[self.replica]
    }

    /// The slot's replica made to sync afresh, a full sync as a replica just added or
    /// restarted makes: the primary takes a new replication id and closes the replica's link,
    /// so the replica's partial resync is refused. Returns as soon as the primary lists it
    /// `state=online` again.
    fn resync(&self) {
        let primary = &self.nodes[self.primary];
        let mut p = primary.client();
        let full_syncs = || -> i64 {
            primary
                .client()
                .info_field("stats", "sync_full")
                .parse()
                .unwrap()
        };
        let before = full_syncs();
        assert_eq!(
            p.cmd(&["DEBUG", "CHANGE-REPL-ID"]),
            common::Reply::Simple("OK".into())
        );
        assert_eq!(
            p.cmd(&["CLIENT", "KILL", "TYPE", "replica"]),
            common::Reply::Int(1)
        );
        until("the replica synced afresh and online", || {
            full_syncs() > before
                && primary_offsets(&replication(primary.port))
                    .1
                    .is_some_and(|(state, _)| state == "online")
        });
    }

    /// Waits until the cluster has promoted the replica (ROLE says master and CLUSTER SLOTS
    /// names it for the slot).
    fn wait_for_the_promotion(&self) {
        let live: Vec<u16> = self
            .ports
            .iter()
            .copied()
            .filter(|&p| p != self.primary_port())
            .collect();
        until("the replica promoted", || {
            role(self.replica_port()).is_some_and(|(kind, _)| kind == "master")
                && cluster_primary(&live, self.slot) == Some(self.replica_port())
        });
    }

    /// A new node made a replica of the promoted one, as an operator would, and online. It
    /// never fails over (cluster-replica-no-failover): it would take over the slot, still
    /// empty, were the new primary taken for failing while it loads.
    fn give_the_promoted_a_replica(&self) -> Server {
        let spare = Server::with(
            common::cluster_config()
                .extra(&CLUSTER_EXTRA)
                .extra(&["--cluster-replica-no-failover", "yes"]),
        );
        spare.client().clock_set(T0_MS);
        let promoted = &self.nodes[self.replica];
        let id = common::node_id(promoted);
        let mut c = spare.client();
        c.cmd(&["CLUSTER", "MEET", "127.0.0.1", &promoted.port.to_string()]);
        // Refused until the spare has heard of the promoted node (gossip after MEET).
        until("the spare made a replica", || {
            c.cmd(&["CLUSTER", "REPLICATE", &id]) == common::Reply::Simple("OK".into())
        });
        common::wait_until_online(&mut promoted.client());
        spare
    }
}

/// One Redis Cluster failover as measured for issue 37 (module docs above), the slot's replica
/// synced afresh just before the clients start; with it, how long after the primary listed that
/// replica online the primary was killed.
fn one_cluster_failover(durable: bool) -> (Spent, Duration) {
    let mut cluster = SlotCluster::start();
    cluster.resync();
    let online = Instant::now();
    let (ports, slot) = (cluster.ports.clone(), cluster.slot);
    let spending = Spending::start(
        durable,
        SLOT_TAG,
        Arc::new(move |deadline| {
            while Instant::now() < deadline {
                if let Some(port) = cluster_primary(&ports, slot) {
                    if role(port).is_some_and(|(kind, _)| kind == "master") {
                        if let Ok(c) = Conn::open(port) {
                            return Some(c);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            None
        }),
        cluster.primary_port(),
    );
    spending.halfway();
    let killed_after = online.elapsed();
    cluster.nodes[cluster.primary].kill();
    let held = held_after_the_kill(cluster.replica_port(), SLOT_TAG);
    spending.resume();
    cluster.wait_for_the_promotion();
    let _spare = cluster.give_the_promoted_a_replica();
    (spending.finish(held), killed_after)
}

/// One admission for each of the 40 keys on `c`, pipelined, each followed by `WAIT 1 100` with
/// `durable`: per key, whether the node admitted it, and whether it counts (with `durable`,
/// only if a replica acknowledged it).
fn admit_each_once(c: &mut Conn, prefix: &str, durable: bool) -> Vec<(bool, bool)> {
    let keys: Vec<String> = (0..KEYS).map(|i| key(prefix, i)).collect();
    let limits: Vec<[&str; 4]> = keys
        .iter()
        .map(|k| ["RL.FIXEDWINDOW", k.as_str(), "100", "1h"])
        .collect();
    let mut commands: Vec<&[&str]> = Vec::new();
    for limit in &limits {
        commands.push(limit);
        if durable {
            commands.push(&WAIT);
        }
    }
    let replies = c.pipeline(&commands).expect("the node answers");
    replies
        .chunks(if durable { 2 } else { 1 })
        .map(|r| {
            let admitted = match &r[0] {
                R::Array(fields) => fields[0] == R::Int(1),
                other => panic!("RL.FIXEDWINDOW: {other:?}"),
            };
            (admitted, admitted && (!durable || r[1] == R::Int(1)))
        })
        .collect()
}

/// Half of every key's quota admitted on `c`, each admission answered 1.
fn spend_half(c: &mut Conn, prefix: &str) {
    for _ in 0..HALF {
        let round = admit_each_once(c, prefix, false);
        assert!(round.iter().all(|(admitted, _)| *admitted), "{round:?}");
    }
}

/// Every key's quota spent to the end on `c`: what each key admitted.
fn spend_the_rest(c: &mut Conn, prefix: &str) -> Vec<i64> {
    let mut admitted = vec![0; KEYS];
    loop {
        let round = admit_each_once(c, prefix, false);
        if round.iter().all(|(a, _)| !a) {
            return admitted;
        }
        for (i, (a, _)) in round.iter().enumerate() {
            admitted[i] += *a as i64;
        }
    }
}

fn failovers() -> usize {
    std::env::var("FAILOVERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

#[test]
fn across_a_cluster_failover_a_key_admits_again_what_the_promoted_replica_lacked() {
    for run in 0..failovers() {
        let (spent, killed_after) = one_cluster_failover(false);
        eprintln!(
            "cluster, without durable, failover {run} (killed {} ms after state=online): {}",
            killed_after.as_millis(),
            spent.figures()
        );
        spent.check_without_durable();
    }
}

#[test]
fn across_a_cluster_failover_wait_after_each_admission_keeps_every_key_within_its_limit() {
    for run in 0..failovers() {
        let (spent, killed_after) = one_cluster_failover(true);
        eprintln!(
            "cluster, durable, failover {run} (killed {} ms after state=online): {}",
            killed_after.as_millis(),
            spent.figures()
        );
        spent.check_durable();
    }
}

/// The replica, once it has acknowledged everything `primary` has, cut off from it: its link
/// closed, and it can no longer authenticate to the primary (a password the primary does not
/// have), so what the primary admits from now on only the primary has.
fn cut_off(primary: &Server, replica: &Server) {
    let mut c = primary.client();
    // A write made after all of the others, acknowledged (a hang guard for a timeout).
    c.cmd(&["SET", &format!("{SLOT_TAG}fence"), "1"]);
    assert_eq!(c.cmd(&["WAIT", "1", "120000"]), common::Reply::Int(1));
    let ok = common::Reply::Simple("OK".into());
    assert_eq!(
        replica
            .client()
            .cmd(&["CONFIG", "SET", "masterauth", "not-the-primary-s"]),
        ok
    );
    assert_eq!(
        c.cmd(&["CLIENT", "KILL", "TYPE", "replica"]),
        common::Reply::Int(1)
    );
    until("the replica cut off", || {
        field(&replication(replica.port), "master_link_status") == Some("down")
            && field(&replication(primary.port), "connected_slaves") == Some("0")
    });
}

/// Half the quota spent on the slot's primary, its replica cut off, one admission per key that
/// only the primary sees (with `durable`, each followed by `WAIT 1 100`), the primary killed, the
/// rest of the quota spent on the promoted replica. Each key's admissions over its limit, and
/// which of the cut's admissions counted.
fn cut_then_failover(durable: bool) -> (Vec<i64>, Vec<i64>) {
    let mut cluster = SlotCluster::start();
    let mut c = Conn::open(cluster.primary_port()).unwrap();
    spend_half(&mut c, SLOT_TAG);
    cut_off(
        &cluster.nodes[cluster.primary],
        &cluster.nodes[cluster.replica],
    );
    let cut = admit_each_once(&mut c, SLOT_TAG, durable);
    // The primary admitted each: only its replica is missing.
    assert!(cut.iter().all(|(admitted, _)| *admitted), "{cut:?}");
    let counted: Vec<i64> = cut.iter().map(|(_, counts)| *counts as i64).collect();
    cluster.nodes[cluster.primary].kill();
    // The replica has every admission before the cut (the fence's WAIT), none of the cut's.
    let held = held_after_the_kill(cluster.replica_port(), SLOT_TAG);
    assert_eq!(held, vec![HALF; KEYS]);
    cluster.wait_for_the_promotion();
    let mut c = Conn::open(cluster.replica_port()).unwrap();
    let rest = spend_the_rest(&mut c, SLOT_TAG);
    // The promoted replica goes on from what it held.
    assert_eq!(rest, vec![LIMIT - HALF; KEYS]);
    let over = (0..KEYS)
        .map(|i| HALF + counted[i] + rest[i] - LIMIT)
        .collect();
    (over, counted)
}

#[test]
fn without_durable_what_only_the_primary_admitted_is_admitted_again() {
    let (over, counted) = cut_then_failover(false);
    // Each admission of the cut was answered and taken, then lost with the primary: every key
    // admits one more than its limit.
    assert_eq!(counted, vec![1; KEYS]);
    assert_eq!(over, vec![1; KEYS]);
}

#[test]
fn durable_counts_no_admission_only_the_primary_had() {
    let (over, counted) = cut_then_failover(true);
    // No replica acknowledged the cut's admissions (WAIT 1 100 answered 0): none was taken as
    // admitted, and no key admits more than its limit.
    assert_eq!(counted, vec![0; KEYS]);
    assert_eq!(over, vec![0; KEYS]);
}

#[test]
fn killed_once_its_replica_acknowledged_the_primarys_offset_no_key_goes_over() {
    let mut cluster = SlotCluster::start();
    // Synced afresh: on Redis 7.0 the primary may not be sending it the stream yet.
    cluster.resync();
    let primary = cluster.primary_port();
    let mut c = Conn::open(primary).unwrap();
    spend_half(&mut c, SLOT_TAG);
    // No more writes; the replica's acknowledged offset (it acknowledges once a second) reaches
    // the primary's own: it has applied everything the primary has.
    let since = Instant::now();
    until("the replica's offset reaching the primary's", || {
        let (own, replica) = primary_offsets(&replication(primary));
        replica.is_some_and(|(state, acked)| state == "online" && acked == own)
    });
    eprintln!(
        "the replica acknowledged the primary's offset {} ms after the last admission",
        since.elapsed().as_millis()
    );
    cluster.nodes[cluster.primary].kill();
    // The promoted replica holds every key's count exactly, and admits the rest of the quota.
    let held = held_after_the_kill(cluster.replica_port(), SLOT_TAG);
    assert_eq!(held, vec![HALF; KEYS]);
    cluster.wait_for_the_promotion();
    let mut c = Conn::open(cluster.replica_port()).unwrap();
    assert_eq!(spend_the_rest(&mut c, SLOT_TAG), vec![LIMIT - HALF; KEYS]);
}

/// The primary's `min_slaves_good_slaves` (INFO replication): its replicas that acknowledged
/// within `min-replicas-max-lag` seconds (the field has this name on Redis 7.0 and 8.2 and on
/// Valkey 8.1).
fn good_replicas(primary: &Server) -> String {
    field(&replication(primary.port), "min_slaves_good_slaves")
        .unwrap_or_default()
        .to_string()
}

/// `RL.INSPECT`'s count of `key` on `server` (None for a missing key).
fn count(server: &Server, key: &str) -> Option<i64> {
    match server.client().cmd(&["RL.INSPECT", key]) {
        common::Reply::Nil => None,
        r => Some(r.field("count").int()),
    }
}

#[test]
fn min_replicas_to_write_refuses_without_a_good_replica_and_does_not_wait_for_one() {
    let primary = Server::with(primary_config().extra(&[
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "10",
    ]));
    primary.client().clock_set(T0_MS);
    let mut p = primary.client();
    let admit = ["RL.FIXEDWINDOW", "k", "100", "1h"];
    let refused = common::Reply::Error("NOREPLICAS Not enough good replicas to write.".into());
    // No replica: refused before the module runs; the key is not even created.
    assert_eq!(good_replicas(&primary), "0");
    assert_eq!(p.cmd(&admit), refused);
    assert_eq!(count(&primary, "k"), None);
    let mut replica = Server::start();
    replica.client().clock_set(T0_MS);
    replica.client().replicate_from(&primary);
    until("a good replica", || good_replicas(&primary) == "1");
    assert_eq!(p.cmd(&admit).ints()[0], 1);
    // A replica that stops reading (frozen: a hung host, a partition) still counts as good for
    // min-replicas-max-lag seconds after its last acknowledgement: the primary admits and
    // answers with no replica holding the admission (WAIT 1 finds none), as without the setting.
    signal(&replica, libc::SIGSTOP);
    assert_eq!(p.cmd(&admit).ints()[0], 1);
    assert_eq!(good_replicas(&primary), "1");
    assert_eq!(p.cmd(&["WAIT", "1", "100"]), common::Reply::Int(0));
    assert_eq!(count(&primary, "k"), Some(2));
    // Past the lag (1 s now), the frozen replica no longer counts: refused, the count unchanged.
    p.cmd(&["CONFIG", "SET", "min-replicas-max-lag", "1"]);
    until("no good replica", || good_replicas(&primary) == "0");
    assert_eq!(p.cmd(&admit), refused);
    assert_eq!(count(&primary, "k"), Some(2));
    // Its next acknowledgement makes it good again.
    signal(&replica, libc::SIGCONT);
    until("a good replica again", || good_replicas(&primary) == "1");
    assert_eq!(p.cmd(&admit).ints()[0], 1);
    // Killed: no good replica from the moment its connection closes.
    replica.kill();
    until("no good replica", || good_replicas(&primary) == "0");
    assert_eq!(p.cmd(&admit), refused);
    assert_eq!(count(&primary, "k"), Some(3));
}

/// The local port of `primary`'s replica's connection to it (`CLIENT LIST TYPE replica`).
fn replica_connection_port(primary: &Server) -> u16 {
    let list = primary
        .client()
        .cmd(&["CLIENT", "LIST", "TYPE", "replica"])
        .text();
    list.split_whitespace()
        .find_map(|f| f.strip_prefix("addr="))
        .and_then(|a| a.rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no replica connection: {list}"))
}

/// The kernel's queues (/proc/net/tcp) on the connection from the server on `port` to its
/// replica connected from local port `replica`: the bytes the server's socket has not had
/// acknowledged yet, and those the replica's socket holds unread.
fn queues_towards(port: u16, replica: u16) -> (u64, u64) {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let (mut unacknowledged, mut unread) = (0, 0);
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port_of = |address: &str| {
            u16::from_str_radix(address.rsplit(':').next().unwrap_or_default(), 16).unwrap_or(0)
        };
        let (local, remote) = (port_of(f[1]), port_of(f[2]));
        let (tx, rx) = f[4].split_once(':').unwrap();
        let hex = |v: &str| u64::from_str_radix(v, 16).unwrap();
        if (local, remote) == (port, replica) {
            unacknowledged = hex(tx);
        }
        if (local, remote) == (replica, port) {
            unread = hex(rx);
        }
    }
    (unacknowledged, unread)
}

/// `master_repl_offset` of the node at `port`: for a replica, how much of its primary's stream
/// it has applied.
fn repl_offset(port: u16) -> i64 {
    field(&replication(port), "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .expect("master_repl_offset")
}

#[test]
fn state_online_does_not_say_the_replica_is_sent_the_stream() {
    // A fresh primary and replica each time, until a primary is seen holding the stream back
    // from a replica it lists online, or 10 syncs. With `ONLINE_SYNCS` set, that many syncs,
    // counted: Redis 7.0 held it back in 113 of 500 (10 to 57 in a hundred, with the machine's
    // load), Valkey 8.1 in 4 of 400, Redis 8.2 in none of 400 (its replica loads the copy over
    // a second connection while the stream flows on the first).
    let counting = std::env::var("ONLINE_SYNCS")
        .ok()
        .and_then(|v| v.parse().ok());
    let syncs: usize = counting.unwrap_or(10);
    let (mut sent_at_once, mut held_back) = (0, 0);
    for sync in 1..=syncs {
        // min-replicas-to-write 1: the replica counts as good throughout.
        let mut primary = Server::with(primary_config().extra(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "60",
        ]));
        let replica = Server::start();
        for s in [&primary, &replica] {
            s.client().clock_set(T0_MS);
        }
        // Returns as soon as the primary lists the replica state=online.
        replica.client().replicate_from(&primary);
        // Frozen at once: from now on it reads and acknowledges nothing, so what it will hold is
        // what the primary sends it before the primary dies (the kernel keeps it for the
        // replica, and hands it over once it runs again).
        signal(&replica, libc::SIGSTOP);
        let link = replica_connection_port(&primary);
        let (offset_0, queues_0) = (
            repl_offset(primary.port),
            queues_towards(primary.port, link),
        );
        let mut c = Conn::open(primary.port).unwrap();
        spend_half(&mut c, "");
        let (offset_1, queues_1) = (
            repl_offset(primary.port),
            queues_towards(primary.port, link),
        );
        // The replica listed online and its last acknowledgement recent: it counts as good, and
        // every admission was taken.
        assert_eq!(good_replicas(&primary), "1");
        primary.kill();
        signal(&replica, libc::SIGCONT);
        let held = held_after_the_kill(replica.port, "");
        // What it had of the primary's stream once its link was down.
        let reached = repl_offset(replica.port);
        assert_eq!(
            replica.client().cmd(&["REPLICAOF", "NO", "ONE"]),
            common::Reply::Simple("OK".into())
        );
        let rest = spend_the_rest(&mut Conn::open(replica.port).unwrap(), "");
        let over: Vec<i64> = rest.iter().map(|r| HALF + r - LIMIT).collect();
        if reached >= offset_1 {
            eprintln!("sync {sync}: the primary sent the stream to the replica it listed online");
            // It has every admission, and no key goes over.
            assert_eq!(held, vec![HALF; KEYS]);
            assert_eq!(over, vec![0; KEYS]);
            sent_at_once += 1;
            continue;
        }
        eprintln!(
            "sync {sync}: the primary listed its replica online and sent it none of {} bytes of \
             stream after; the promoted replica held {} of {} admissions",
            offset_1 - offset_0,
            held.iter().sum::<i64>(),
            HALF * KEYS as i64
        );
        // Nothing of the stream after the freeze: the primary wrote none of it to the
        // connection (nothing more reached the replica's socket, nothing more waits on the
        // primary's), though it lists the replica online and counts it as good.
        assert!(reached <= offset_0, "{reached} of {offset_0}..{offset_1}");
        assert_eq!(queues_1.1, queues_0.1, "bytes reached the replica's socket");
        assert!(queues_1.0 <= queues_0.0, "bytes sent to the replica");
        // Every key's state since the sync is lost: each admits its quota again.
        assert_eq!(held, vec![0; KEYS]);
        assert_eq!(over, vec![HALF; KEYS]);
        held_back += 1;
        if counting.is_none() {
            break;
        }
    }
    eprintln!(
        "of {} syncs, the primary sent the stream at once in {sent_at_once}, held it back in {held_back}",
        sent_at_once + held_back
    );
}

#[test]
fn across_a_sentinel_failover_a_key_admits_again_what_the_promoted_replica_lacked() {
    for run in 0..failovers() {
        let spent = one_failover(false);
        eprintln!(
            "sentinel, without durable, failover {run}: {}",
            spent.figures()
        );
        spent.check_without_durable();
    }
}

#[test]
fn across_a_sentinel_failover_wait_after_each_admission_keeps_every_key_within_its_limit() {
    for run in 0..failovers() {
        let spent = one_failover(true);
        eprintln!("sentinel, durable, failover {run}: {}", spent.figures());
        spent.check_durable();
    }
}
