//! Prometheus, with the parts operators run: Debian's `prometheus-redis-exporter` scraping a
//! real server through scripts/redis_exporter.lua, read over HTTP; and
//! prometheus/ratelimit.rules.yml checked and unit-tested by `promtool` (Debian's
//! `prometheus` package). `scripts/deps.sh test` installs both.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, Server, T0_MS};

/// A program `scripts/deps.sh test` installs; the test fails, saying so, without it.
fn installed(program: &str, package: &str) -> String {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{program} is missing: install Debian's {package} (scripts/deps.sh test does)"
    );
    program.to_string()
}

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .to_string_lossy()
        .into_owned()
}

/// Runs `promtool args`, asserts that it succeeds, and returns what it printed.
fn promtool(args: &[&str]) -> String {
    let run = Command::new(installed("promtool", "prometheus"))
        .args(args)
        .output()
        .expect("run promtool");
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

#[test]
fn the_rules_file_passes_promtool_check_and_its_unit_tests() {
    let rules = repo("prometheus/ratelimit.rules.yml");
    let out = promtool(&["check", "rules", &rules]);
    assert!(out.contains("SUCCESS: 9 rules found"), "{out}");
    let tests = repo("prometheus/ratelimit.rules.test.yml");
    let out = promtool(&["test", "rules", &tests]);
    assert!(out.contains("SUCCESS"), "{out}");
}

/// The exporter, stopped by PID when dropped.
struct Exporter {
    port: u16,
    child: Child,
}

impl Exporter {
    fn start(redis_port: u16) -> Exporter {
        let program = installed("prometheus-redis-exporter", "prometheus-redis-exporter");
        let port = free_port();
        let child = Command::new(program)
            .args([
                "-redis.addr",
                &format!("redis://127.0.0.1:{redis_port}"),
                "-web.listen-address",
                &format!("127.0.0.1:{port}"),
                "-script",
                &repo("scripts/redis_exporter.lua"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus-redis-exporter");
        Exporter { port, child }
    }

    /// GET /metrics over HTTP/1.0, retried until the exporter listens.
    fn scrape(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
                stream.write_all(request.as_bytes()).expect("send");
                let mut response = String::new();
                stream.read_to_string(&mut response).expect("read");
                let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
                assert!(head.starts_with("HTTP/1.0 200"), "{head}");
                return body.to_string();
            }
            assert!(
                self.child.try_wait().expect("exporter status").is_none(),
                "the exporter exited"
            );
            assert!(Instant::now() < deadline, "the exporter did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_real_exporter_exports_the_command_policy_and_rule_counters() {
    let server = Server::start();
    let mut c = server.client();
    c.clock_set(T0_MS);
    // RL.GCRA: admitted, denied, shadow-denied.
    for extra in [&[][..], &[], &["SHADOW"]] {
        c.cmd(&[&["RL.GCRA", "k", "1", "1", "1m"][..], extra].concat());
    }
    // A policy with a shadow rule, and a name INFO escapes: admitted, shadow-denied by
    // rule 1, denied by rule 0.
    let set = [
        "RL.POLICY.SET",
        "api:v1",
        "GCRA",
        "2",
        "1",
        "1m",
        "SHADOW",
        "FIXEDWINDOW",
        "1",
        "1m",
    ];
    c.cmd(&set);
    let limits: Vec<i64> = (0..3)
        .map(|_| c.cmd(&["RL.LIMIT", "p", "api:v1"]).ints()[0])
        .collect();
    assert_eq!(limits, [1, 1, 0]);

    let mut exporter = Exporter::start(server.port);
    let metrics = exporter.scrape();
    for line in [
        // The exporter's own, from Redis's commandstats.
        "redis_commands_total{cmd=\"rl.gcra\"} 3",
        "redis_commands_total{cmd=\"rl.limit\"} 3",
        // The script's: per command,
        "redis_script_values{key=\"rl.gcra_calls\"} 3",
        "redis_script_values{key=\"rl.gcra_admitted\"} 1",
        "redis_script_values{key=\"rl.gcra_denied\"} 1",
        "redis_script_values{key=\"rl.gcra_shadow_denied\"} 1",
        "redis_script_values{key=\"rl.gcra_errors\"} 0",
        "redis_script_values{key=\"rl.limit_calls\"} 3",
        "redis_script_values{key=\"rl.limit_shadow_denied\"} 1",
        // per policy,
        "redis_script_values{key=\"policy:api%3Av1:calls\"} 3",
        "redis_script_values{key=\"policy:api%3Av1:admitted\"} 1",
        "redis_script_values{key=\"policy:api%3Av1:denied\"} 1",
        "redis_script_values{key=\"policy:api%3Av1:shadow_denied\"} 1",
        // per rule.
        "redis_script_values{key=\"rule:api%3Av1.0:shadow\"} 0",
        "redis_script_values{key=\"rule:api%3Av1.0:denied\"} 1",
        "redis_script_values{key=\"rule:api%3Av1.1:shadow\"} 1",
        "redis_script_values{key=\"rule:api%3Av1.1:denied\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing from the scrape:\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("script_values") || l.contains("rl."))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Every registered command has its five series, every policy its four, every rule two.
    let script_series = metrics
        .lines()
        .filter(|l| l.starts_with("redis_script_values{"))
        .count();
    let commands = c
        .cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"])
        .render()
        .split(' ')
        .count();
    assert_eq!(script_series, commands * 5 + 4 + 2 * 2);

    // A second scrape sees what happened since, and CONFIG RESETSTAT's zeros.
    c.cmd(&["RL.LIMIT", "p", "api:v1"]);
    let again = exporter.scrape();
    assert!(again
        .lines()
        .any(|l| l == "redis_script_values{key=\"policy:api%3Av1:denied\"} 2"));
    c.cmd(&["CONFIG", "RESETSTAT"]);
    let reset = exporter.scrape();
    assert!(reset
        .lines()
        .any(|l| l == "redis_script_values{key=\"policy:api%3Av1:calls\"} 0"));
    assert!(reset
        .lines()
        .any(|l| l == "redis_script_values{key=\"rl.gcra_calls\"} 0"));
}
