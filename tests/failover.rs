//! Failover (docs/cluster.md, Failover): a primary with the module and its replica, three real
//! Sentinels (the server binary in sentinel mode, as Debian's redis-sentinel package links it),
//! eight clients spending the quota of 40 `RL.FIXEDWINDOW k 100 1h` keys through whichever node
//! Sentinel names primary, and the primary killed (SIGKILL) halfway. Replication is
//! asynchronous, so admissions the primary acknowledged but had not yet sent are lost and
//! admitted again on the promoted replica: that is measured. With `WAIT 1 100` pipelined after
//! each admission (the packages' `durable` option), an admission counts only once a replica has
//! it, and no key admits more than its limit: that is asserted. Once the replica is promoted,
//! a new server is made its replica, as an operator would (until then `durable` admits
//! nothing).
//!
//! `FAILOVERS` (default 1 per mode) sets how many failovers each mode runs; the figures in
//! docs/cluster.md come from `FAILOVERS=10`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{primary_config, replicated, server_binary, Server, T0_MS};

/// A reply, as far as this test reads them.
#[derive(Debug, Clone, PartialEq)]
enum R {
    Int(i64),
    Text(String),
    Error(String),
    Array(Vec<R>),
    Nil,
}

/// A client that reports a broken connection instead of panicking (the primary dies here).
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(port: u16) -> std::io::Result<Conn> {
        let stream = TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_millis(500),
        )?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(Conn {
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while Conn::open(port).and_then(|mut c| c.cmd(&["PING"])).is_err() {
            assert!(Instant::now() < deadline, "sentinel did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
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
const LIMIT: i64 = 100;

/// A client's connection to whichever node the Sentinels name primary, opened again after
/// any error (the old primary gone, the new one not yet named, or not yet a primary).
fn connect_to_primary(sentinels: &[Sentinel], deadline: Instant) -> Option<Conn> {
    while Instant::now() < deadline {
        for s in sentinels {
            if let Some(port) = s.primary() {
                if let Ok(mut c) = Conn::open(port) {
                    if let Ok(R::Array(role)) = c.cmd(&["ROLE"]) {
                        if role.first() == Some(&R::Text("master".into())) {
                            return Some(c);
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// How a client reaches the primary of its keys now (None until one answers).
type Connect = dyn Fn(Instant) -> Option<Conn> + Send + Sync;

/// Eight clients spend every key's quota (keys `{prefix}k<client>_<n>`) through `connect`;
/// halfway, `kill` runs (the primary dies), then `recover` (waits for the promotion and gives
/// the new primary a replica). What each key admitted in all (acknowledged admissions only,
/// and with `durable` only those a replica acknowledged), over its limit.
fn spend_across_a_kill(
    durable: bool,
    prefix: &str,
    connect: Arc<Connect>,
    kill: impl FnOnce(),
    recover: impl FnOnce(),
) -> Vec<i64> {
    let admitted: Arc<Vec<AtomicU64>> = Arc::new(
        (0..CLIENTS * KEYS_PER_CLIENT)
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let total = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let (connect, admitted, total, errors) = (
                Arc::clone(&connect),
                Arc::clone(&admitted),
                Arc::clone(&total),
                Arc::clone(&errors),
            );
            let prefix = prefix.to_string();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut conn = connect(deadline);
                let mut full = [false; KEYS_PER_CLIENT];
                let mut k = 0;
                while !full.iter().all(|f| *f) && Instant::now() < deadline {
                    let Some(c) = conn.as_mut() else {
                        conn = connect(deadline);
                        continue;
                    };
                    k = (k + 1) % KEYS_PER_CLIENT;
                    if full[k] {
                        continue;
                    }
                    let key = format!("{prefix}k{t}_{k}");
                    let limit = ["RL.FIXEDWINDOW", &key, "100", "1h"];
                    let wait = ["WAIT", "1", "100"];
                    let sent: &[&[&str]] = if durable { &[&limit, &wait] } else { &[&limit] };
                    match c.pipeline(sent) {
                        Ok(replies) => match &replies[0] {
                            R::Array(fields) => {
                                // Counted only when acknowledged, and with `durable` only once a
                                // replica has it (WAIT 1): else the client fails closed.
                                let acked = !durable || replies[1] == R::Int(1);
                                if fields[0] == R::Int(1) {
                                    if acked {
                                        admitted[t * KEYS_PER_CLIENT + k]
                                            .fetch_add(1, Ordering::Relaxed);
                                        total.fetch_add(1, Ordering::Relaxed);
                                    }
                                } else {
                                    full[k] = true;
                                }
                            }
                            // A node no longer the slot's (MOVED) or not yet serving
                            // (CLUSTERDOWN, TRYAGAIN, LOADING): find the primary again.
                            R::Error(e)
                                if ["MOVED", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "READONLY"]
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
    // Halfway through the quota, the primary dies.
    let half = (CLIENTS * KEYS_PER_CLIENT) as u64 * LIMIT as u64 / 2;
    let deadline = Instant::now() + Duration::from_secs(30);
    while total.load(Ordering::Relaxed) < half {
        assert!(Instant::now() < deadline, "no progress before the kill");
        std::thread::sleep(Duration::from_millis(1));
    }
    kill();
    recover();
    for c in clients {
        // Every client spent every key's quota to the end, on the promoted replica.
        assert!(
            c.join().expect("a client failed"),
            "a client did not finish its keys"
        );
    }
    // Errors other than a lost connection or a node not serving the slot yet: none (a node
    // Sentinel or the cluster names primary answers).
    let errors = errors.lock().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    admitted
        .iter()
        .map(|a| a.load(Ordering::Relaxed) as i64 - LIMIT)
        .collect()
}

/// One Sentinel failover: what each key admitted over its limit.
fn one_failover(durable: bool) -> Vec<i64> {
    let (mut primary, replica) = replicated(primary_config());
    for server in [&primary, &replica] {
        server.client().clock_set(T0_MS);
    }
    let sentinels: Arc<Vec<Sentinel>> =
        Arc::new((0..3).map(|_| Sentinel::start(primary.port)).collect());
    // Each Sentinel knows the replica and the two others before anything fails.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sentinels.iter().all(|s| {
        s.master_field("num-slaves").as_deref() == Some("1")
            && s.master_field("num-other-sentinels").as_deref() == Some("2")
    }) {
        assert!(Instant::now() < deadline, "the sentinels did not meet");
        std::thread::sleep(Duration::from_millis(50));
    }
    let watching = Arc::clone(&sentinels);
    let mut spare = None;
    let over = spend_across_a_kill(
        durable,
        "",
        Arc::new(move |deadline| connect_to_primary(&watching, deadline)),
        || primary.kill(),
        || {
            // Once Sentinel has promoted the replica, the operator gives it a replica of its
            // own (with `durable`, until one has the admissions nothing is admitted).
            let deadline = Instant::now() + Duration::from_secs(30);
            while sentinels[0].primary() != Some(replica.port) {
                assert!(Instant::now() < deadline, "no failover");
                std::thread::sleep(Duration::from_millis(20));
            }
            let s = Server::with(primary_config());
            s.client().clock_set(T0_MS);
            s.client().replicate_from(&replica);
            spare = Some(s);
        },
    );
    assert_eq!(
        sentinels[0].primary(),
        Some(replica.port),
        "the replica was not promoted"
    );
    over
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

/// One Redis Cluster failover (three primaries with a replica each, `cluster-node-timeout`
/// 1000): the keys share a slot, its primary is killed, the cluster promotes its replica.
fn one_cluster_failover(durable: bool) -> Vec<i64> {
    // A replica may be promoted however long it was cut off (the default refuses one that was
    // away for longer than ten node timeouts, which a short timeout reaches at once).
    let extra = [
        "--cluster-node-timeout",
        "1000",
        "--cluster-replica-validity-factor",
        "0",
    ];
    let mut nodes = common::cluster_with(3, 1, &extra);
    for n in &nodes {
        n.client().clock_set(T0_MS);
    }
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let slot = nodes[0].client().cmd(&["CLUSTER", "KEYSLOT", "{f}"]).int();
    let primary = cluster_primary(&ports, slot).expect("the slot's primary");
    let dead = nodes.iter().position(|n| n.port == primary).unwrap();
    let replica = ports
        .iter()
        .copied()
        .find(|&p| role(p).is_some_and(|(kind, of)| kind == "slave" && of == Some(primary)))
        .expect("the primary's replica");
    let ports = Arc::new(ports);
    let live = Arc::clone(&ports);
    let mut spare = None;
    let before = Mutex::new(String::new());
    let over = spend_across_a_kill(
        durable,
        "{f}",
        Arc::new(move |deadline| {
            while Instant::now() < deadline {
                if let Some(port) = cluster_primary(&live, slot) {
                    if let Ok(c) = Conn::open(port) {
                        if role(port).is_some_and(|(kind, _)| kind == "master") {
                            return Some(c);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            None
        }),
        || {
            // What the replica holds at the kill (shown when a run loses more than a unit).
            if let Ok(mut c) = Conn::open(replica) {
                let size = c.cmd(&["DBSIZE"]).ok();
                let info = c.cmd(&["INFO", "replication"]).ok();
                *before.lock().unwrap() = format!("{size:?} {info:?}");
            }
            nodes[dead].kill()
        },
        || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while role(replica).map(|(kind, _)| kind) != Some("master".into()) {
                assert!(
                    Instant::now() < deadline,
                    "the replica was not promoted: {:?}",
                    Conn::open(replica).and_then(|mut c| c.cmd(&["CLUSTER", "NODES"]))
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            // The operator gives the promoted replica a replica of its own.
            let s = Server::with(common::cluster_config().extra(&extra));
            s.client().clock_set(T0_MS);
            let id = Conn::open(replica)
                .ok()
                .and_then(|mut c| c.cmd(&["CLUSTER", "MYID"]).ok());
            let Some(R::Text(id)) = id else {
                panic!("no id for the promoted replica")
            };
            let mut c = s.client();
            c.cmd(&["CLUSTER", "MEET", "127.0.0.1", &replica.to_string()]);
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.cmd(&["CLUSTER", "REPLICATE", &id]) != common::Reply::Simple("OK".into()) {
                assert!(
                    Instant::now() < deadline,
                    "the spare did not become a replica"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            spare = Some(s);
        },
    );
    assert_eq!(cluster_primary(&ports, slot), Some(replica));
    if over.iter().any(|o| *o > 1) {
        eprintln!("the replica at the kill: {}", before.lock().unwrap());
    }
    over
}

fn failovers() -> usize {
    std::env::var("FAILOVERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

#[test]
fn across_a_sentinel_failover_asynchronous_replication_loses_the_last_admissions() {
    for run in 0..failovers() {
        let over = one_failover(false);
        let keys_over = over.iter().filter(|o| **o > 0).count();
        let most = over.iter().max().copied().unwrap_or(0);
        let sum: i64 = over.iter().filter(|o| **o > 0).sum();
        eprintln!(
            "without durable, failover {run}: {keys_over} of {} keys over their limit, by {sum} in all, at most {most} on one key",
            over.len()
        );
    }
}

#[test]
fn with_wait_after_each_admission_no_key_admits_more_than_its_limit() {
    for run in 0..failovers() {
        let over = one_failover(true);
        let most = over.iter().max().copied().unwrap_or(0);
        let least = over.iter().min().copied().unwrap_or(0);
        eprintln!("durable, failover {run}: at most {most} over, at least {least} (below the limit: admissions not acknowledged)");
        assert!(over.iter().all(|o| *o <= 0), "{over:?}");
    }
}

#[test]
fn across_a_cluster_failover_the_same_and_wait_keeps_every_count() {
    for run in 0..failovers() {
        let over = one_cluster_failover(false);
        let keys_over = over.iter().filter(|o| **o > 0).count();
        let sum: i64 = over.iter().filter(|o| **o > 0).sum();
        eprintln!(
            "cluster, without durable, failover {run}: {keys_over} of {} keys over, by {sum} in all, at most {} on one",
            over.len(),
            over.iter().max().copied().unwrap_or(0)
        );
        let over = one_cluster_failover(true);
        eprintln!(
            "cluster, durable, failover {run}: at most {} over",
            over.iter().max().copied().unwrap_or(0)
        );
        assert!(over.iter().all(|o| *o <= 0), "{over:?}");
    }
}
