//! The client examples in examples/: each HTTP service runs as a child process against a real
//! server with the module, and answers real HTTP requests on loopback. The debug clock is
//! frozen, so every status code and header value is exact.
//!
//! `make test` installs the examples' dependencies first (scripts/deps.sh); without them these
//! tests fail and say so.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{fresh_dir, Reply, Server, T0_MS};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// An example service, killed by PID when dropped (also when a test fails).
struct Service {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Service {
    /// Starts `program args` in `dir` with PORT=0 and REDIS_URL set, and waits (bounded) for
    /// its first stdout line, `listening on http://127.0.0.1:PORT`. The service binds the port
    /// itself, so no other test can take it in between.
    fn start(program: &Path, args: &[&str], dir: &Path, redis_port: u16) -> Service {
        let log = fresh_dir("example").join("stderr.log");
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .env("PORT", "0")
            .env("REDIS_URL", format!("redis://127.0.0.1:{redis_port}"))
            // The Node example's deadline: its 50 ms default failed a request closed on a
            // loaded fresh machine (a 503 where a 200 was due); Redis stopped still fails at once.
            .env("RATELIMIT_TIMEOUT_MS", "10000")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create the service's log"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep the pipe open and drained for as long as the service lives.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let mut service = Service {
            child,
            port: 0,
            log,
        };
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        service.port = line
            .trim()
            .strip_prefix("listening on http://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{} did not say where it listens (stdout: {line:?}); its stderr:\n{}",
                    program.display(),
                    std::fs::read_to_string(&service.log).unwrap_or_default()
                )
            });
        service
    }

    /// GET / with `X-Client-Id: client` (none when `client` is None), on a new connection.
    fn get(&self, client: Option<&str>) -> Response {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let id = client
            .map(|c| format!("X-Client-Id: {c}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{id}Connection: close\r\n\r\n",
            self.port
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap_or_else(|e| {
            panic!(
                "no answer: {e}; the service's stderr:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        });
        Response::parse(&raw)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Response {
    fn parse(raw: &str) -> Response {
        let head = raw.split("\r\n\r\n").next().unwrap_or_default();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_string()))
            .collect();
        Response { status, headers }
    }

    fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The protocol (`resp=2` or `resp=3`) of each connection whose last command was RL.GCRA:
/// the service's, from CLIENT LIST.
fn service_protocols(server: &Server) -> Vec<String> {
    let list = server.client().cmd(&["CLIENT", "LIST"]).text();
    let mut seen: Vec<String> = list
        .lines()
        .filter(|l| l.split(' ').any(|f| f == "cmd=rl.gcra"))
        .filter_map(|l| l.split(' ').find(|f| f.starts_with("resp=")))
        .map(str::to_string)
        .collect();
    seen.dedup();
    seen
}

fn required(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing ({what}): run `make test`, or `bash scripts/deps.sh`, which installs it",
        path.display()
    );
    path
}

/// A service's rate-limit fields (both packages send the same): status, then RateLimit-Policy, RateLimit, X-RateLimit-Limit,
/// -Remaining, -Reset and Retry-After (None when absent).
fn fields(r: &Response) -> (u16, [Option<&str>; 6]) {
    (
        r.status,
        [
            r.header("RateLimit-Policy"),
            r.header("RateLimit"),
            r.header("X-RateLimit-Limit"),
            r.header("X-RateLimit-Remaining"),
            r.header("X-RateLimit-Reset"),
            r.header("Retry-After"),
        ],
    )
}

/// How many times the server ran RL.GCRA (INFO commandstats).
fn gcra_calls(c: &mut common::Client) -> u64 {
    let stats = c.info_field("commandstats", "cmdstat_rl.gcra");
    stats
        .split(',')
        .find_map(|f| f.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no calls in {stats}"))
}

/// The policy both services announce: a burst of 5, then 10 per minute, so a whole burst is
/// earned back in 30 s (q/w is the rate admitted).
const POLICY: Option<&str> = Some("\"default\";q=5;w=30");

/// The emission interval (s): an admitted request's RateLimit t in these tests, where the next
/// unit always comes one interval after the last.
const EMISSION_S: u64 = 6;

/// Asserts `r` is the services' answer under [`POLICY`]: `status`; `remaining` and `reset`
/// (s) in RateLimit and X-RateLimit-*, with a limit of 5; RateLimit's t is the wait `retry`
/// (also Retry-After) when there is one, else the time until one more unit, [`EMISSION_S`].
#[track_caller]
fn assert_answer(r: &Response, status: u16, remaining: u64, reset: u64, retry: Option<u64>) {
    let t = retry.unwrap_or(EMISSION_S);
    let state = format!("\"default\";r={remaining};t={t}");
    let (remaining, reset) = (remaining.to_string(), reset.to_string());
    let retry = retry.map(|s| s.to_string());
    let expected = [
        POLICY,
        Some(state.as_str()),
        Some("5"),
        Some(remaining.as_str()),
        Some(reset.as_str()),
        retry.as_deref(),
    ];
    assert_eq!(fields(r), (status, expected), "{r:?}");
}

/// Both services' start: alice's burst, 5 admitted, each leaving one less and 6 s more until
/// the key is fresh.
fn alice_spends_her_burst(service: &Service) {
    for (remaining, reset) in [(4, 6), (3, 12), (2, 18), (1, 24), (0, 30)] {
        assert_answer(&service.get(Some("alice")), 200, remaining, reset, None);
    }
}

/// Alice's sixth request waits one emission interval: a 429 with t and Retry-After 6, and a
/// problem+json body.
fn alice_is_refused(service: &Service) {
    let r = service.get(Some("alice"));
    assert_answer(&r, 429, 0, 30, Some(6));
    assert_eq!(r.header("Content-Type"), Some("application/problem+json"));
}

/// Without X-Client-Id the client is its address, with a key of its own.
fn the_address_is_the_client(server: &Server, service: &Service) {
    assert_answer(&service.get(None), 200, 4, 6, None);
    let exists = server.client().cmd(&["EXISTS", "rl:http:127.0.0.1"]);
    assert_eq!(exists, Reply::Int(1));
}

/// With Redis gone, the service fails closed: to each of `clients`, a 503 with a problem+json
/// body and no rate-limit fields.
fn fails_closed_without_redis(server: &mut Server, service: &Service, clients: &[Option<&str>]) {
    server.stop();
    for &client in clients {
        let r = service.get(client);
        assert_eq!(fields(&r), (503, [None; 6]), "{r:?}");
        assert_eq!(r.header("Content-Type"), Some("application/problem+json"));
    }
}

/// The Python service (the ratelimit-redis-module middleware): a burst of 5, then 10 per
/// minute, with the draft-11 RateLimit fields, the legacy X-RateLimit-* ones, and a denial
/// remembered in the service until its retry time.
fn python_limits_each_client_over_http(server: &Server, service: &Service) {
    let mut c = server.client();
    c.clock_set(T0_MS);
    alice_spends_her_burst(service);
    alice_is_refused(service);

    // Asked again, even after the server's clock moved on, the service answers from its memory
    // of the denial (its own clock: 6 s), without a round trip.
    let calls = gcra_calls(&mut server.client());
    c.clock_advance(6_000);
    assert_answer(&service.get(Some("alice")), 429, 0, 30, Some(6));
    assert_eq!(gcra_calls(&mut server.client()), calls);

    // Another client has a limit of its own. Seconds are rounded up: after its burst and
    // 2.5 s, 3500 ms to wait is Retry-After 4, and 27500 ms to reset is 28.
    for _ in 0..5 {
        assert_eq!(service.get(Some("bob")).status, 200);
    }
    c.clock_advance(2_500);
    assert_answer(&service.get(Some("bob")), 429, 0, 28, Some(4));

    the_address_is_the_client(server, service);
}

/// With Redis gone, the Python service refuses (it is set to fail closed). A denial it
/// remembers is still a 429.
fn python_fails_closed_without_redis(server: &mut Server, service: &Service) {
    fails_closed_without_redis(server, service, &[Some("carol"), None]);
    assert_eq!(service.get(Some("alice")).status, 429);
}

#[test]
fn python_example_limits_each_client_over_http() {
    let dir = examples_dir().join("python");
    let python = required(
        dir.join(".venv/bin/python"),
        "the Python example's venv with the ratelimit-redis-module package",
    );
    let mut server = Server::start();
    let service = Service::start(&python, &["server.py"], &dir, server.port);
    python_limits_each_client_over_http(&server, &service);
    // It asks for RESP2: the reply it read was the five-integer array.
    assert_eq!(service_protocols(&server), ["resp=2"]);
    python_fails_closed_without_redis(&mut server, &service);
}

/// The Node service's story: the same limit, with the package's fields, and a denial answered
/// from its memory without a round trip. Each caller who is refused is then remembered (in real
/// time, while the test moves the server's clock), so each rounding case has a caller of its own.
fn node_limits_each_client_over_http(server: &Server, service: &Service) {
    let mut c = server.client();
    c.clock_set(T0_MS);
    alice_spends_her_burst(service);
    // Three more callers spend their burst at the same instant.
    for client in ["erin", "grace", "ivan"] {
        for _ in 0..5 {
            assert_eq!(service.get(Some(client)).status, 200);
        }
    }
    let calls = gcra_calls(&mut c);
    alice_is_refused(service);
    // Asked again at once: the same answer from the service's memory, without a round trip.
    assert_answer(&service.get(Some("alice")), 429, 0, 30, Some(6));
    assert_eq!(
        gcra_calls(&mut c),
        calls + 1,
        "the second refusal cost no RL.GCRA"
    );

    // Another client has a limit of its own.
    assert_answer(&service.get(Some("bob")), 200, 4, 6, None);

    // Seconds are rounded up: 3500 ms to wait is 4, 27500 ms to reset is 28.
    c.clock_advance(2_500);
    assert_answer(&service.get(Some("erin")), 429, 0, 28, Some(4));
    // 1 ms early is still too early, and still a whole second to wait.
    c.clock_advance(3_499);
    assert_answer(&service.get(Some("grace")), 429, 0, 25, Some(1));
    c.clock_advance(1);
    assert_answer(&service.get(Some("ivan")), 200, 0, 30, None);

    the_address_is_the_client(server, service);
}

/// With Redis gone, the Node service fails closed. (Not alice: her refusal may still be in the
/// service's memory, answered without Redis.)
fn node_fails_closed_without_redis(server: &mut Server, service: &Service) {
    fails_closed_without_redis(server, service, &[Some("bob"), Some("carol"), None]);
}

#[test]
fn node_example_limits_each_client_over_http_with_resp3() {
    let dir = examples_dir().join("node");
    required(
        dir.join("node_modules/redis/package.json"),
        "the Node example's node_modules with the redis client",
    );
    required(
        dir.join("node_modules/ratelimit-redis-module/package.json"),
        "the Node example's node_modules with the package in clients/node",
    );
    let node = Command::new("node")
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): scripts/deps.sh installs nodejs"));
    assert!(node.status.success(), "node --version failed: {node:?}");
    let mut server = Server::start();
    let service = Service::start(Path::new("node"), &["server.js"], &dir, server.port);
    node_limits_each_client_over_http(&server, &service);
    // The reply it read was the RESP3 map, with `allowed` a boolean.
    assert_eq!(service_protocols(&server), ["resp=3"]);
    node_fails_closed_without_redis(&mut server, &service);
}
