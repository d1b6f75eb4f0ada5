//! The integration-test harness: real `redis-server` processes with the built module, each
//! on a free loopback port with its own directory, stopped by PID when dropped (also when a
//! test fails); and a small RESP2/RESP3 client that shows replies exactly as sent.
//!
//! Tests never `use` the crate: they see the module only through the server.

#![allow(dead_code)]

pub mod bus;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The module under test: $RATELIMIT_MODULE, or the release build (`make test` builds it).
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("RATELIMIT_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libratelimit.so")
        });
    assert!(
        path.exists(),
        "{} is missing: run `make test` (or `cargo build --release` first)",
        path.display()
    );
    path
}

/// The server binary the tests start: $RATELIMIT_SERVER (`make test` sets it to Redis 8.2's
/// and Valkey 8.1's in turn), else `redis-server` from PATH (Debian's Redis 7.0).
pub fn server_binary() -> PathBuf {
    std::env::var_os("RATELIMIT_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().unwrap().port()
}

/// A free port for a cluster node: at most 55535, so that its cluster bus port (10000 above)
/// exists (Redis refuses to start a cluster node above it: "Redis port number too high"), with
/// that bus port free too. About four in five ephemeral ports qualify.
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under target/tmp for one server's files.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/tmp")
        .join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test dir");
    dir
}

/// How to start a server.
#[derive(Clone)]
pub struct Config {
    /// Arguments after the module path in --loadmodule.
    pub module_args: Vec<String>,
    /// More redis-server arguments, e.g. ["--appendonly", "yes"].
    pub extra: Vec<String>,
    /// Whether to load the module at all.
    pub load_module: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            module_args: vec!["debug-clock".into(), "yes".into()],
            extra: vec![],
            load_module: true,
        }
    }
}

impl Config {
    pub fn module_args(mut self, args: &[&str]) -> Self {
        self.module_args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn extra(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|s| s.to_string()));
        self
    }
}

pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    pub config: Config,
    child: Option<Child>,
}

impl Server {
    /// A server with the module loaded and the debug clock on.
    pub fn start() -> Server {
        Server::with(Config::default())
    }

    pub fn with(config: Config) -> Server {
        let dir = fresh_dir("server");
        Server::start_in(config, dir)
    }

    /// Starts a server on a new free port with its files in `dir`.
    pub fn start_in(config: Config, dir: PathBuf) -> Server {
        let mut server = Server {
            port: 0,
            dir,
            config,
            child: None,
        };
        server
            .launch()
            .unwrap_or_else(|log| panic!("redis-server did not start:\n{log}"));
        server
    }

    /// Tries to start; on failure returns the server's log (for tests of refused loads).
    pub fn try_with(config: Config) -> Result<Server, String> {
        let mut server = Server {
            port: 0,
            dir: fresh_dir("server"),
            config,
            child: None,
        };
        server.launch()?;
        Ok(server)
    }

    /// Starts the process; a port taken between choosing it and binding it (tests run in
    /// parallel) is retried on another.
    fn launch(&mut self) -> Result<(), String> {
        let mut tries = 0;
        loop {
            match self.launch_once() {
                Err(log) if log.contains("Address already in use") && tries < 5 => tries += 1,
                other => return other,
            }
        }
    }

    fn launch_once(&mut self) -> Result<(), String> {
        self.port = if self.config.extra.iter().any(|a| a == "--cluster-enabled") {
            free_cluster_port()
        } else {
            free_port()
        };
        let mut args: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--logfile".into(),
            "redis.log".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--enable-debug-command".into(),
            "yes".into(),
        ];
        if self.config.load_module {
            args.push("--loadmodule".into());
            args.push(module_path().display().to_string());
            args.extend(self.config.module_args.iter().cloned());
        }
        args.extend(self.config.extra.iter().cloned());
        let child = Command::new(server_binary())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", server_binary().display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(format!("exited with {status}; log:\n{}", self.log()));
            }
            // Tests run in parallel and a free port can be handed to two of them: the server
            // answering must be ours (its process id), not another test's, which may also be
            // going away right now.
            match probe(self.port) {
                Some(pid) if Some(pid) == self.pid() => return Ok(()),
                Some(_) => {
                    let log = self.log();
                    self.kill();
                    return Err(format!(
                        "Address already in use: another server answered; {log}"
                    ));
                }
                None => {}
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!("no PONG within 15 s; log:\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        // Lossy: a server may log bytes that are not UTF-8 (a message's content), and the rest
        // of its log must still be readable.
        std::fs::read(self.dir.join("redis.log"))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn client(&self) -> Client {
        Client::connect(self.port)
    }

    /// Stops the server with SIGTERM (a clean shutdown) and waits for it.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
    }

    /// Kills the server with SIGKILL: no shutdown work at all.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
    }

    fn signal(&mut self, sig: i32) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the PID of a child we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, sig);
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if child.try_wait().unwrap().is_some() {
                    return;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Stops the server and starts it again with the same directory (and its files), on a
    /// new free port.
    pub fn restart(&mut self) {
        self.stop();
        self.launch()
            .unwrap_or_else(|log| panic!("redis-server did not restart:\n{log}"));
    }

    /// Starts the server again after `stop` or `kill`.
    pub fn start_again(&mut self) {
        self.launch()
            .unwrap_or_else(|log| panic!("redis-server did not restart:\n{log}"));
    }

    /// Waits until the server has loaded its data (after a restart with a big AOF).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().unwrap().is_none(),
            None => false,
        }
    }
}

/// The process id of the redis-server answering PING on `port`, if one does.
fn probe(port: u16) -> Option<u32> {
    use std::io::Read;
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .ok()?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if !text.starts_with("+PONG") {
            return None;
        }
        if let Some(rest) = text.split("process_id:").nth(1) {
            if let Some(line) = rest.split("\r\n").next().filter(|_| rest.contains("\r\n")) {
                return line.trim().parse().ok();
            }
        }
    }
    None
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A reply, as the server sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Bool(bool),
    Double(String),
    Other(String),
}

impl Reply {
    pub fn int(&self) -> i64 {
        match self {
            Reply::Int(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    /// The integers of an array reply.
    pub fn ints(&self) -> Vec<i64> {
        match self {
            Reply::Array(items) => items.iter().map(Reply::int).collect(),
            other => panic!("expected an array of integers, got {other:?}"),
        }
    }

    pub fn error(&self) -> String {
        match self {
            Reply::Error(e) => e.clone(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    pub fn text(&self) -> String {
        match self {
            Reply::Simple(s) => s.clone(),
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("expected a string, got {other:?}"),
        }
    }

    /// The reply as readable text, strings unquoted, for `contains` checks.
    pub fn render(&self) -> String {
        match self {
            Reply::Simple(s) | Reply::Error(s) | Reply::Double(s) | Reply::Other(s) => s.clone(),
            Reply::Int(n) => n.to_string(),
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Nil => "(nil)".into(),
            Reply::Bool(b) => b.to_string(),
            Reply::Array(items) => {
                let inner: Vec<String> = items.iter().map(Reply::render).collect();
                format!("[{}]", inner.join(" "))
            }
            Reply::Map(pairs) => {
                let inner: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{}: {}", k.render(), v.render()))
                    .collect();
                format!("{{{}}}", inner.join(", "))
            }
        }
    }

    /// A flat name, value, ... array (RESP2) as pairs of name and integer; the
    /// `algorithm` value is skipped.
    pub fn fields(&self) -> Vec<(String, i64)> {
        let items = match self {
            Reply::Array(items) => items.clone(),
            other => panic!("expected a flat array, got {other:?}"),
        };
        items
            .chunks(2)
            .filter_map(|pair| {
                let name = pair[0].text();
                match &pair[1] {
                    Reply::Int(n) => Some((name, *n)),
                    _ => None,
                }
            })
            .collect()
    }

    /// One field of a flat name, value, ... array.
    pub fn field(&self, name: &str) -> Reply {
        match self {
            Reply::Array(items) => items
                .chunks(2)
                .find(|pair| pair[0].text() == name)
                .map(|pair| pair[1].clone())
                .unwrap_or_else(|| panic!("no field {name} in {self:?}")),
            other => panic!("expected a flat array, got {other:?}"),
        }
    }
}

pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// Commands sent and not yet written: written in one go by the next read (or once
    /// `WRITE_AT` bytes wait), so that a pipeline of a thousand commands is a few writes and
    /// the server a few reads, not a segment and a syscall on each side per command.
    pending: Vec<u8>,
}

/// How many bytes of sent commands wait before they are written without a read.
const WRITE_AT: usize = 64 * 1024;

impl Client {
    pub fn connect(port: u16) -> Client {
        Client::try_connect(port).unwrap_or_else(|e| panic!("connect 127.0.0.1:{port}: {e}"))
    }

    pub fn try_connect(port: u16) -> std::io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            pending: Vec::new(),
        })
    }

    pub fn cmd(&mut self, args: &[&str]) -> Reply {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd_bytes(&bytes)
    }

    pub fn cmd_bytes(&mut self, args: &[&[u8]]) -> Reply {
        self.send(args);
        self.read()
    }

    /// Sends a command without reading its reply (for pipelining): it is written with the
    /// commands after it, at the latest when a reply is read.
    pub fn send(&mut self, args: &[&[u8]]) {
        let out = &mut self.pending;
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        if self.pending.len() >= WRITE_AT {
            self.flush();
        }
    }

    /// Writes the commands sent so far.
    pub fn flush(&mut self) {
        if !self.pending.is_empty() {
            self.writer
                .write_all(&self.pending)
                .expect("write to redis");
            self.pending.clear();
        }
    }

    pub fn read(&mut self) -> Reply {
        self.flush();
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("read from redis");
        assert!(n > 0, "the server closed the connection");
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Reply::Simple(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().expect("integer")),
            "$" | "=" => {
                let len: i64 = rest.parse().expect("length");
                if len < 0 {
                    return Reply::Nil;
                }
                let mut buf = vec![0; len as usize + 2];
                std::io::Read::read_exact(&mut self.reader, &mut buf).expect("bulk");
                buf.truncate(len as usize);
                Reply::Bulk(buf)
            }
            "*" | "~" | ">" => {
                let len: i64 = rest.parse().expect("length");
                if len < 0 {
                    return Reply::Nil;
                }
                Reply::Array((0..len).map(|_| self.read()).collect())
            }
            "%" => {
                let len: usize = rest.parse().expect("length");
                Reply::Map((0..len).map(|_| (self.read(), self.read())).collect())
            }
            "_" => Reply::Nil,
            "#" => Reply::Bool(rest == "t"),
            "," => Reply::Double(rest.into()),
            _ => Reply::Other(line.into()),
        }
    }

    /// Sets the module's debug clock (ms since the Unix epoch).
    pub fn clock_set(&mut self, ms: u64) {
        let r = self.cmd(&["RL.DEBUG.CLOCK", "SET", &ms.to_string()]);
        assert_eq!(r, Reply::Int(ms as i64));
    }

    pub fn clock_advance(&mut self, ms: i64) {
        let r = self.cmd(&["RL.DEBUG.CLOCK", "ADVANCE", &ms.to_string()]);
        assert!(matches!(r, Reply::Int(_)), "{r:?}");
    }

    pub fn pttl(&mut self, key: &str) -> i64 {
        self.cmd(&["PTTL", key]).int()
    }

    /// A field of INFO, as text.
    pub fn info_field(&mut self, section: &str, name: &str) -> String {
        let info = self.cmd(&["INFO", section]).text();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in INFO {section}"))
            .trim()
            .to_string()
    }

    /// Makes this client's server a replica of `primary` and waits until the link is up and
    /// any AOF rewrite the sync started is over.
    pub fn replicate_from(&mut self, primary: &Server) {
        let port = primary.port.to_string();
        assert_eq!(
            self.cmd(&["REPLICAOF", "127.0.0.1", &port]),
            Reply::Simple("OK".into())
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.info_field("replication", "master_link_status") != "up"
            || self.info_field("persistence", "aof_rewrite_in_progress") != "0"
        {
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        // And online as its primary sees it (see `wait_until_online`).
        wait_until_online(&mut primary.client());
    }

    /// Waits for the AOF rewrite in progress or scheduled to end, and checks it succeeded.
    pub fn wait_for_aof_rewrite(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.info_field("persistence", "aof_rewrite_in_progress") != "0"
            || self.info_field("persistence", "aof_rewrite_scheduled") != "0"
        {
            assert!(Instant::now() < deadline, "the AOF rewrite did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            self.info_field("persistence", "aof_last_bgrewrite_status"),
            "ok"
        );
    }
}

/// `config` with an AOF written on every write (`appendfsync always`: with everysec a loaded
/// machine may postpone writing it for up to two seconds) and its RDB preamble `yes` or `no`.
pub fn with_aof(config: Config, preamble: &str) -> Config {
    config.extra(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ])
}

/// A primary for the replication tests: it starts a full sync at once (by default it waits
/// 5 s for more replicas to come).
pub fn primary_config() -> Config {
    Config::default().extra(&["--repl-diskless-sync-delay", "0"])
}

/// A primary, and a replica of it started with `replica`, in sync.
pub fn replicated(replica: Config) -> (Server, Server) {
    let primary = Server::with(primary_config());
    let replica = Server::with(replica);
    replica.client().replicate_from(&primary);
    (primary, replica)
}

/// The arguments of a Redis Cluster node (its own nodes.conf in its directory).
pub fn cluster_config() -> Config {
    Config::default().extra(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
        "--repl-diskless-sync-delay",
        "0",
    ])
}

/// A Redis Cluster of `primaries` primaries with `replicas` replicas each, made with
/// `redis-cli --cluster create` (the primaries first, in slot order, then the replicas) and
/// up: every node says `cluster_state:ok`.
pub fn cluster(primaries: usize, replicas: usize) -> Vec<Server> {
    cluster_with(primaries, replicas, &[])
}

/// [`cluster`], each node started with the `extra` arguments too.
pub fn cluster_with(primaries: usize, replicas: usize, extra: &[&str]) -> Vec<Server> {
    let nodes: Vec<Server> = (0..primaries * (1 + replicas))
        .map(|_| Server::with(cluster_config().extra(extra)))
        .collect();
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for node in &nodes {
        wait_for_cluster_ok(node);
    }
    // Every node knows every other (gossip after `--cluster create` takes a moment: a replica
    // that only its primary knows gets no vote once that primary is dead).
    wait_for_cluster_agreement(&nodes.iter().collect::<Vec<_>>());
    // Every node caught up with the cluster's policies (it refuses policy changes until then:
    // docs/cluster.md, Catching up).
    for node in &nodes {
        wait_for_caught_up(node);
    }
    // Every replica in sync with its primary, as the primary sees it (a failover before that
    // loses every key: see `wait_until_online`).
    for node in &nodes {
        let mut c = node.client();
        if c.info_field("replication", "role") == "master" && node_has_replicas(&mut c) {
            wait_until_online(&mut c);
        }
    }
    nodes
}

/// Waits (up to 30 s) until `node` says it has caught up with the cluster's policies
/// (`ratelimit_policies_caught_up:1`).
pub fn wait_for_caught_up(node: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = node.client();
    while c.info_field("ratelimit_policies", "ratelimit_policies_caught_up") != "1" {
        assert!(
            Instant::now() < deadline,
            "node {} has not caught up: {}",
            node.port,
            c.cmd(&["INFO", "ratelimit_policies"]).text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether this primary has replicas configured (CLUSTER NODES lists one of it).
fn node_has_replicas(c: &mut Client) -> bool {
    let me = c.cmd(&["CLUSTER", "MYID"]).text();
    c.cmd(&["CLUSTER", "NODES"])
        .text()
        .lines()
        .any(|l| l.split(' ').nth(3) == Some(me.as_str()))
}

/// Waits (up to 30 s) until this primary reports every replica `state=online`. A replica that
/// says `master_link_status:up` has loaded its first sync, but after a diskless sync its primary
/// sends it nothing until the replica's first `REPLCONF ACK` (up to a second later): a primary
/// killed in that window loses every write since the sync (measured: docs/cluster.md, Failover).
pub fn wait_until_online(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = c.cmd(&["INFO", "replication"]).text();
        let replicas: Vec<&str> = info.lines().filter(|l| l.starts_with("slave")).collect();
        if !replicas.is_empty() && replicas.iter().all(|l| l.contains("state=online")) {
            return;
        }
        assert!(Instant::now() < deadline, "a replica is not online: {info}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to 30 s) until `node` says `cluster_state:ok`.
pub fn wait_for_cluster_ok(node: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = node.client();
    while !c
        .cmd(&["CLUSTER", "INFO"])
        .text()
        .contains("cluster_state:ok")
    {
        assert!(Instant::now() < deadline, "the cluster did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 30 s) until every node of `nodes` knows every other (CLUSTER NODES lists the
/// same ids on each, none in handshake) and `redis-cli --cluster check` passes: after
/// `add-node`, before a `reshard`, whose `CLUSTER SETSLOT ... NODE` fails on a node that has
/// not met the new one yet.
pub fn wait_for_cluster_agreement(nodes: &[&Server]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let known = |node: &Server| -> Option<Vec<String>> {
        let text = node.client().cmd(&["CLUSTER", "NODES"]).text();
        let mut ids = Vec::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 3 || fields[2].contains("handshake") || fields[2].contains("noaddr") {
                return None;
            }
            ids.push(fields[0].to_string());
        }
        ids.sort();
        Some(ids)
    };
    loop {
        let views: Vec<Option<Vec<String>>> = nodes.iter().map(|n| known(n)).collect();
        let agree = views.iter().all(|v| v.is_some() && v == &views[0])
            && views[0]
                .as_ref()
                .is_some_and(|ids| ids.len() == nodes.len());
        if agree {
            let out = Command::new("redis-cli")
                .args([
                    "--cluster",
                    "check",
                    &format!("127.0.0.1:{}", nodes[0].port),
                ])
                .output()
                .expect("redis-cli --cluster check");
            if out.status.success() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the nodes do not agree: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The node's id (CLUSTER MYID).
pub fn node_id(server: &Server) -> String {
    server.client().cmd(&["CLUSTER", "MYID"]).text()
}

/// A clock reading for tests: 2023-11-14T22:13:20Z.
pub const T0_MS: u64 = 1_700_000_000_000;

/// A client for a Redis Cluster: one connection per node, following MOVED and ASK
/// redirections as cluster-aware clients do.
pub struct ClusterClient {
    nodes: std::collections::HashMap<u16, Client>,
    /// The node to try first.
    pub entry: u16,
}

impl ClusterClient {
    pub fn new(entry: u16) -> ClusterClient {
        ClusterClient {
            nodes: std::collections::HashMap::new(),
            entry,
        }
    }

    fn node(&mut self, port: u16) -> &mut Client {
        self.nodes
            .entry(port)
            .or_insert_with(|| Client::connect(port))
    }

    /// Sends a command for `key`'s slot, following up to 5 redirections.
    pub fn cmd(&mut self, args: &[&str]) -> Reply {
        let mut port = self.entry;
        let mut asking = false;
        for _ in 0..5 {
            let node = self.node(port);
            if asking {
                node.cmd(&["ASKING"]);
            }
            let reply = node.cmd(args);
            match &reply {
                Reply::Error(e) if e.starts_with("MOVED ") || e.starts_with("ASK ") => {
                    asking = e.starts_with("ASK ");
                    let target = e.rsplit(' ').next().unwrap_or_default();
                    port = target
                        .rsplit(':')
                        .next()
                        .unwrap_or_default()
                        .parse()
                        .unwrap();
                    if !asking {
                        self.entry = port;
                    }
                }
                Reply::Error(e) if e.starts_with("TRYAGAIN") => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => return reply,
            }
        }
        panic!("too many redirections for {args:?}");
    }
}

/// The modules `MODULE LIST` shows, as (name, version), in the order given. Newer servers
/// load modules of their own (Redis 8 ships `vectorset` and others): look for ours by name.
pub fn modules(c: &mut Client) -> Vec<(String, i64)> {
    module_list(c, |field| (field("name").text(), field("ver").int()))
}

/// Each entry of `MODULE LIST`, as `read` makes it of the entry's fields (`field("path")`...).
pub fn module_list<T>(c: &mut Client, read: impl Fn(&dyn Fn(&str) -> Reply) -> T) -> Vec<T> {
    let Reply::Array(entries) = c.cmd(&["MODULE", "LIST"]) else {
        panic!("MODULE LIST is not an array");
    };
    entries
        .iter()
        .map(|entry| {
            let Reply::Array(fields) = entry else {
                panic!("a MODULE LIST entry is not an array: {entry:?}");
            };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0].text() == name)
                    .map(|pair| pair[1].clone())
                    .unwrap_or_else(|| panic!("no {name} in {entry:?}"))
            };
            read(&field)
        })
        .collect()
}

/// Whether the server puts module commands in ACL categories (Redis 7.2 and later, and every
/// Valkey, which reports `redis_version:7.2.4`); Redis 7.0 has no categories for them.
pub fn module_acl_categories(c: &mut Client) -> bool {
    let version = c.info_field("server", "redis_version");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 2)
}

/// The module's commands (lower case, sorted) in the ACL category `category` (no `@`), as the
/// server says and enforces it. Not from `ACL CAT`: Redis 7.2 and 7.4 leave module commands out
/// of its list (acl.c's `aclCatWithFlags` skipped them until Redis 8.0, redis/redis#13489),
/// while they are in their categories and checked there. So: the commands of `MODULE LIST`'s
/// `ratelimit` (`COMMAND LIST FILTERBY MODULE`) whose `COMMAND INFO` names the category, which
/// must be exactly those that `ACL DRYRUN` lets a user of `+@category` alone run; and where
/// `ACL CAT` lists module commands (Redis 8, Valkey), its list must be the same.
pub fn module_category_members(c: &mut Client, category: &str) -> Vec<String> {
    let Reply::Array(names) = c.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"]) else {
        panic!("COMMAND LIST FILTERBY MODULE ratelimit is not an array");
    };
    let names: Vec<String> = names.iter().map(Reply::text).collect();
    assert!(names.contains(&"rl.gcra".to_string()), "{names:?}");
    let mut info = vec!["COMMAND", "INFO"];
    info.extend(names.iter().map(String::as_str));
    let Reply::Array(entries) = c.cmd(&info) else {
        panic!("COMMAND INFO is not an array");
    };
    let tag = format!("@{category}");
    let mut by_info = Vec::new();
    let mut arities = Vec::new();
    for entry in &entries {
        // name, arity, flags, first key, last key, step, ACL categories, ...
        let Reply::Array(fields) = entry else {
            panic!("a COMMAND INFO entry is not an array: {entry:?}");
        };
        let Reply::Array(categories) = &fields[6] else {
            panic!("no ACL categories in {entry:?}");
        };
        let name = fields[0].text();
        if categories.iter().any(|c| c.text() == tag) {
            by_info.push(name.clone());
        }
        arities.push((name, fields[1].int()));
    }
    by_info.sort();
    let user = format!("probe-{category}");
    let rule = format!("+@{category}");
    assert_eq!(
        c.cmd(&["ACL", "SETUSER", &user, "on", "nopass", "~*", &rule]),
        Reply::Simple("OK".into())
    );
    let mut by_dryrun = Vec::new();
    for (name, arity) in &arities {
        let mut call = vec!["ACL", "DRYRUN", &user, name];
        call.extend(std::iter::repeat_n("x", arity.unsigned_abs() as usize - 1));
        match c.cmd(&call) {
            Reply::Simple(ok) if ok == "OK" => by_dryrun.push(name.clone()),
            Reply::Bulk(b)
                if String::from_utf8_lossy(&b)
                    .ends_with(&format!("no permissions to run the '{name}' command")) => {}
            other => panic!("ACL DRYRUN {user} {name}: {other:?}"),
        }
    }
    by_dryrun.sort();
    assert_eq!(c.cmd(&["ACL", "DELUSER", &user]), Reply::Int(1));
    assert_eq!(
        by_info, by_dryrun,
        "@{category}: COMMAND INFO's members, then those ACL DRYRUN lets +@{category} run"
    );
    let Reply::Array(listed) = c.cmd(&["ACL", "CAT", category]) else {
        panic!("ACL CAT {category} is not an array");
    };
    let mut listed: Vec<String> = listed
        .iter()
        .map(Reply::text)
        .filter(|n| names.contains(n))
        .collect();
    listed.sort();
    if !listed.is_empty() {
        assert_eq!(
            listed, by_info,
            "@{category}: ACL CAT's members, then COMMAND INFO's"
        );
    }
    by_info
}

/// Tries to start a server on the files already in `dir` (an RDB or AOF put there by the
/// test); on failure returns what `launch` says: how the process exited, and its log.
pub fn try_start_in(config: Config, dir: PathBuf) -> Result<Server, String> {
    let mut server = Server {
        port: 0,
        dir,
        config,
        child: None,
    };
    server.launch()?;
    Ok(server)
}

/// What `RL.POLICY.GET name` answers on `node`, as text ("" for nil).
pub fn policy_on(node: &Server, name: &str) -> String {
    match node.client().cmd(&["RL.POLICY.GET", name]) {
        Reply::Nil => String::new(),
        other => other.render(),
    }
}

/// `INFO ratelimit_policies`'s field `ratelimit_<name>` on `node`.
pub fn policies_info(node: &Server, name: &str) -> String {
    node.client()
        .info_field("ratelimit_policies", &format!("ratelimit_{name}"))
}

/// [`policies_info`] as a number.
pub fn policies_count(node: &Server, name: &str) -> u64 {
    let text = policies_info(node, name);
    text.parse()
        .unwrap_or_else(|_| panic!("ratelimit_{name} is not a number: {text}"))
}

/// Waits until every node of `nodes` has the same policies digest and `check` holds on each;
/// how long that took. Fails after `limit`, with each node's digest and sizes.
#[track_caller]
pub fn policies_converged(
    nodes: &[&Server],
    limit: Duration,
    check: impl Fn(&Server) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let digests: Vec<String> = nodes
            .iter()
            .map(|n| policies_info(n, "policies_digest"))
            .collect();
        if digests.iter().all(|d| d == &digests[0]) && nodes.iter().all(|n| check(n)) {
            return start.elapsed();
        }
        let sizes: Vec<(String, String)> = nodes
            .iter()
            .map(|n| {
                (
                    policies_info(n, "policies"),
                    policies_info(n, "policy_tombstones"),
                )
            })
            .collect();
        assert!(
            start.elapsed() < limit,
            "not converged after {limit:?}: digests {digests:?}, (policies, tombstones) {sizes:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
