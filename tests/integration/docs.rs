//! What `COMMAND DOCS` and `COMMAND INFO` say about the module's commands: the summary and
//! every argument (which `redis-cli` turns into hints as you type), the key spec (which ACLs,
//! `COMMAND GETKEYS` and Redis Cluster use), and an arity that leaves argument-count errors
//! to the commands themselves.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{Client, Config, Reply, Server};

/// The commands of the module on this server, lowercase, sorted.
fn module_commands(c: &mut Client) -> Vec<String> {
    let list = c.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"]);
    let Reply::Array(names) = list else {
        panic!("COMMAND LIST: {list:?}");
    };
    let mut names: Vec<String> = names.iter().map(Reply::text).collect();
    names.sort();
    names
}

/// The value of `name` in a flat name, value, ... array (RESP2's form of a map).
fn get(reply: &Reply, name: &str) -> Option<Reply> {
    let Reply::Array(items) = reply else {
        panic!("expected a flat map, got {reply:?}");
    };
    items
        .chunks(2)
        .find(|pair| pair[0] == Reply::Bulk(name.as_bytes().to_vec()))
        .map(|pair| pair[1].clone())
}

fn text(reply: &Reply, name: &str) -> String {
    get(reply, name)
        .unwrap_or_else(|| panic!("no {name} in {reply:?}"))
        .text()
}

fn items(reply: &Reply) -> Vec<Reply> {
    match reply {
        Reply::Array(items) => items.clone(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// `COMMAND DOCS name`: the one command's docs, as a flat map.
fn docs(c: &mut Client, name: &str) -> Reply {
    let reply = c.cmd(&["COMMAND", "DOCS", name]);
    let pair = items(&reply);
    assert_eq!(pair.len(), 2, "COMMAND DOCS {name}: {reply:?}");
    assert_eq!(pair[0].text(), name.to_lowercase());
    pair[1].clone()
}

/// An argument as `(name, type, token, flags)`.
fn describe(arg: &Reply) -> (String, String, Option<String>, Vec<String>) {
    let flags = get(arg, "flags")
        .map(|f| items(&f).iter().map(Reply::text).collect())
        .unwrap_or_default();
    (
        text(arg, "name"),
        text(arg, "type"),
        get(arg, "token").map(|t| t.text()),
        flags,
    )
}

/// The syntax an argument stands for, written the way the commands' own usage lines are:
/// `COST n`, `[DRYRUN]`, `arg [arg ...]`, `SET ms | ADVANCE offset | REAL`.
fn syntax(arg: &Reply) -> String {
    let (name, kind, token, flags) = describe(arg);
    let subargs = || -> Vec<String> {
        items(&get(arg, "arguments").expect("sub-arguments"))
            .iter()
            .map(syntax)
            .collect()
    };
    let mut s = match kind.as_str() {
        "pure-token" => token.clone().expect("a token's word"),
        "oneof" => match &token {
            // A one-of after a word (ADAPTIVE <AIMD | VEGAS | GRADIENT2>), as redis-cli shows it.
            Some(word) => format!("{word} <{}>", subargs().join(" | ")),
            None => subargs().join(" | "),
        },
        "block" => subargs().join(" "),
        _ => match &token {
            Some(word) => format!("{word} {name}"),
            None => name,
        },
    };
    if flags.iter().any(|f| f == "multiple") {
        s = format!("{s} [{s} ...]");
    }
    if flags.iter().any(|f| f == "optional") {
        s = format!("[{s}]");
    }
    s
}

fn args(c: &mut Client, name: &str) -> Vec<Reply> {
    get(&docs(c, name), "arguments")
        .map(|a| items(&a))
        .unwrap_or_default()
}

#[test]
fn command_docs_describe_rl_gcra_argument_by_argument() {
    let server = Server::start();
    let mut c = server.client();
    let doc = docs(&mut c, "RL.GCRA");
    assert_eq!(
        text(&doc, "summary"),
        "Admit or deny a request with GCRA: up to burst units at once, then rate units per \
         period, evenly spaced"
    );
    // One version: Cargo.toml's.
    assert_eq!(text(&doc, "since"), env!("CARGO_PKG_VERSION"));
    assert_eq!(text(&doc, "group"), "module");
    assert_eq!(text(&doc, "module"), "ratelimit");
    assert_eq!(text(&doc, "complexity"), "O(1)");
    let s = |x: &str| x.to_string();
    let optional = vec![s("optional")];
    let described: Vec<_> = args(&mut c, "rl.gcra").iter().map(describe).collect();
    assert_eq!(
        described,
        vec![
            (s("key"), s("key"), None, vec![]),
            (s("burst"), s("integer"), None, vec![]),
            (s("rate"), s("integer"), None, vec![]),
            (s("period"), s("string"), None, vec![]),
            (s("amount"), s("oneof"), None, optional.clone()),
            (
                s("dryrun"),
                s("pure-token"),
                Some(s("DRYRUN")),
                optional.clone()
            ),
            (
                s("duration"),
                s("string"),
                Some(s("BLOCK")),
                optional.clone()
            ),
            (s("shadow"), s("pure-token"), Some(s("SHADOW")), optional),
        ]
    );
    // COST or ATMOST, one of the two.
    let amount: Vec<_> = items(&get(&args(&mut c, "rl.gcra")[4], "arguments").unwrap())
        .iter()
        .map(describe)
        .collect();
    assert_eq!(
        amount,
        vec![
            (s("n"), s("integer"), Some(s("COST")), vec![]),
            (s("max"), s("integer"), Some(s("ATMOST")), vec![]),
        ]
    );
    // The key argument points at the key spec.
    let key = &args(&mut c, "rl.gcra")[0];
    assert_eq!(get(key, "key_spec_index"), Some(Reply::Int(0)));
    // Every argument says what it takes.
    for arg in args(&mut c, "rl.gcra") {
        assert!(!text(&arg, "summary").is_empty(), "{arg:?}");
    }
    let period = &args(&mut c, "rl.gcra")[3];
    assert!(
        text(period, "summary").contains("optional unit ms, s, m, h or d"),
        "{period:?}"
    );
}

#[test]
fn groups_and_tokens_are_described() {
    let server = Server::start();
    let mut c = server.client();
    // RL.DEBUG.CLOCK takes one of three forms.
    let clock = args(&mut c, "rl.debug.clock");
    assert_eq!(clock.len(), 1);
    assert_eq!(describe(&clock[0]).1, "oneof");
    assert_eq!(syntax(&clock[0]), "SET ms | ADVANCE offset | REAL");
    // INTERVAL is a word alone, among the options.
    let bucket: Vec<String> = args(&mut c, "rl.tokenbucket").iter().map(syntax).collect();
    assert_eq!(
        bucket.join(" "),
        "key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"
    );
    let throttle: Vec<String> = args(&mut c, "cl.throttle").iter().map(syntax).collect();
    assert_eq!(throttle.join(" "), "key max_burst count period [quantity]");
    let types: Vec<String> = args(&mut c, "cl.throttle")
        .iter()
        .map(|a| describe(a).1)
        .collect();
    assert_eq!(types, ["key", "integer", "integer", "integer", "integer"]);
    // The internal commands say so.
    for name in ["rl.replay", "rl.loadstate"] {
        let summary = text(&docs(&mut c, name), "summary");
        assert!(summary.starts_with("Internal: "), "{name}: {summary}");
    }
}

/// Every command the module registers has docs; a command added without an entry in the
/// docs table fails here (and in the unit test that walks the command table).
#[test]
fn every_module_command_has_a_summary_and_its_arguments() {
    let server = Server::start();
    let mut c = server.client();
    let names = module_commands(&mut c);
    for expected in [
        "cl.throttle",
        "rl.concurrency.acquire",
        "rl.concurrency.release",
        "rl.debug.clock",
        "rl.debug.panic",
        "rl.fixedwindow",
        "rl.gcra",
        "rl.inspect",
        "rl.leakybucket",
        "rl.loadstate",
        "rl.replay",
        "rl.slidinglog",
        "rl.slidingwindow",
        "rl.tokenbucket",
        "rl.warmup",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    // The commands that take no argument at all.
    let argumentless = ["rl.policy.list"];
    for name in &names {
        let doc = docs(&mut c, name);
        for field in ["summary", "since", "complexity"] {
            assert!(!text(&doc, field).is_empty(), "{name}: no {field}");
        }
        assert_eq!(text(&doc, "module"), "ratelimit");
        let args = get(&doc, "arguments")
            .map(|a| items(&a))
            .unwrap_or_default();
        if argumentless.contains(&name.as_str()) {
            assert!(args.is_empty(), "{name}: {args:?}");
        } else {
            assert!(!args.is_empty(), "{name} has no arguments in COMMAND DOCS");
        }
        // A command with a key names it first, and declares where it is.
        let info = items(&c.cmd(&["COMMAND", "INFO", name]))[0].clone();
        let first_key = items(&info)[3].int();
        if first_key == 1 {
            assert_eq!(describe(&args[0]).1, "key", "{name}");
        } else {
            assert!(args.iter().all(|a| describe(a).1 != "key"), "{name}");
        }
    }
}

/// The syntax the docs give is the syntax the command's own arity error gives, for every
/// command that has one: the docs follow the parser.
#[test]
fn the_docs_spell_the_syntax_the_command_parses() {
    let server = Server::start();
    let mut c = server.client();
    let mut checked = Vec::new();
    for name in module_commands(&mut c) {
        let upper = name.to_uppercase();
        let reply = c.cmd(&[&upper]);
        let Reply::Error(e) = reply else { continue };
        let prefix = format!("ERR wrong number of arguments for '{upper}': expected {upper} ");
        let Some(usage) = e.strip_prefix(&prefix) else {
            continue;
        };
        let documented: Vec<String> = args(&mut c, &name).iter().map(syntax).collect();
        // The error may go on to explain (RL.POLICY.SET gives an example rule).
        let documented = documented.join(" ");
        assert!(
            usage == documented || usage.starts_with(&format!("{documented}, ")),
            "{name}: documented {documented:?}, the error says {usage:?}"
        );
        checked.push(name);
    }
    for expected in [
        "cl.throttle",
        "rl.concurrency.acquire",
        "rl.concurrency.release",
        "rl.fixedwindow",
        "rl.gcra",
        "rl.inspect",
        "rl.leakybucket",
        "rl.slidinglog",
        "rl.slidingwindow",
        "rl.tokenbucket",
        "rl.warmup",
    ] {
        assert!(
            checked.iter().any(|c| c == expected),
            "{expected}: {checked:?}"
        );
    }
}

#[test]
fn command_info_declares_one_key_at_argument_one() {
    let server = Server::start();
    let mut c = server.client();
    let info = |c: &mut Client, name: &str| items(&c.cmd(&["COMMAND", "INFO", name]))[0].clone();
    let key_spec = |info: &Reply| -> (Vec<String>, Reply, Reply) {
        let specs = items(&items(info)[8]);
        assert_eq!(specs.len(), 1, "{info:?}");
        let spec = &specs[0];
        let flags = items(&get(spec, "flags").unwrap())
            .iter()
            .map(Reply::text)
            .collect();
        (
            flags,
            get(spec, "begin_search").unwrap(),
            get(spec, "find_keys").unwrap(),
        )
    };
    let gcra = info(&mut c, "rl.gcra");
    let fields = items(&gcra);
    assert_eq!(fields[0].text(), "rl.gcra");
    assert_eq!(
        fields[1],
        Reply::Int(-1),
        "arity: the command checks its own"
    );
    let flags: Vec<String> = items(&fields[2]).iter().map(Reply::text).collect();
    assert_eq!(flags, ["write", "denyoom", "module", "fast"]);
    assert_eq!(
        (fields[3].int(), fields[4].int(), fields[5].int()),
        (1, 1, 1)
    );
    let (flags, begin, find) = key_spec(&gcra);
    assert_eq!(flags, ["RW", "access", "update"]);
    assert_eq!(text(&begin, "type"), "index");
    assert_eq!(
        get(&get(&begin, "spec").unwrap(), "index"),
        Some(Reply::Int(1))
    );
    assert_eq!(text(&find, "type"), "range");
    let range = get(&find, "spec").unwrap();
    assert_eq!(get(&range, "lastkey"), Some(Reply::Int(0)));
    assert_eq!(get(&range, "keystep"), Some(Reply::Int(1)));

    assert_eq!(key_spec(&info(&mut c, "rl.inspect")).0, ["RO", "access"]);
    assert_eq!(
        key_spec(&info(&mut c, "rl.concurrency.release")).0,
        ["RW", "delete"]
    );
    assert_eq!(key_spec(&info(&mut c, "rl.loadstate")).0, ["OW", "update"]);
    for name in [
        "rl.tokenbucket",
        "rl.leakybucket",
        "rl.fixedwindow",
        "rl.slidingwindow",
        "rl.slidinglog",
        "rl.warmup",
        "cl.throttle",
        "rl.concurrency.acquire",
        "rl.replay",
    ] {
        assert_eq!(
            key_spec(&info(&mut c, name)).0,
            ["RW", "access", "update"],
            "{name}"
        );
    }
    // No key, no key spec.
    let clock = info(&mut c, "rl.debug.clock");
    assert_eq!((items(&clock)[3].int(), items(&clock)[4].int()), (0, 0));
    assert!(items(&items(&clock)[8]).is_empty(), "{clock:?}");
    // Every command leaves its argument count to itself.
    for name in module_commands(&mut c) {
        assert_eq!(items(&info(&mut c, &name))[1], Reply::Int(-1), "{name}");
    }
}

#[test]
fn command_getkeys_finds_the_key() {
    let server = Server::start();
    let mut c = server.client();
    let key = |c: &mut Client, call: &[&str]| {
        let mut args = vec!["COMMAND", "GETKEYS"];
        args.extend_from_slice(call);
        c.cmd(&args)
    };
    let k = Reply::Array(vec![Reply::Bulk(b"k".to_vec())]);
    assert_eq!(key(&mut c, &["RL.GCRA", "k", "1", "1", "1s"]), k);
    assert_eq!(key(&mut c, &["RL.INSPECT", "k"]), k);
    assert_eq!(key(&mut c, &["CL.THROTTLE", "k", "4", "1", "1"]), k);
    assert_eq!(key(&mut c, &["RL.CONCURRENCY.RELEASE", "k", "token"]), k);
    assert_eq!(
        key(
            &mut c,
            &[
                "RL.TOKENBUCKET",
                "k",
                "10",
                "1",
                "1s",
                "INTERVAL",
                "COST",
                "2"
            ]
        ),
        k
    );
}

/// With an arity of -1, Redis never answers a wrong argument count itself: the command's
/// own error, which names its syntax, reaches the client.
#[test]
fn argument_count_errors_stay_the_commands_own() {
    let server = Server::start();
    let mut c = server.client();
    for (call, error) in [
        (
            vec!["RL.GCRA"],
            "ERR wrong number of arguments for 'RL.GCRA': expected RL.GCRA key burst rate \
             period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
        ),
        (
            vec!["rl.gcra", "k"],
            "ERR wrong number of arguments for 'RL.GCRA': expected RL.GCRA key burst rate \
             period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
        ),
        (
            vec!["RL.INSPECT"],
            "ERR wrong number of arguments for 'RL.INSPECT': expected RL.INSPECT key",
        ),
        (
            vec!["RL.INSPECT", "a", "b"],
            "ERR wrong number of arguments for 'RL.INSPECT': expected RL.INSPECT key",
        ),
        (
            vec!["RL.CONCURRENCY.RELEASE", "k"],
            "ERR wrong number of arguments for 'RL.CONCURRENCY.RELEASE': expected \
             RL.CONCURRENCY.RELEASE key token [RTT rtt] [DROPPED]",
        ),
        (
            vec!["RL.DEBUG.CLOCK"],
            "ERR usage: RL.DEBUG.CLOCK SET ms (0 to 253402300799999) | ADVANCE ms (an \
             integer, may be negative, or a duration) | REAL",
        ),
    ] {
        assert_eq!(c.cmd(&call).error(), error, "{call:?}");
    }
}

/// The key specs reach ACLs: RL.INSPECT only reads its key, so a read-only key pattern
/// grants it; an admission command reads and updates, so it needs both; a release only
/// removes a lease, so a write-only pattern grants it.
#[test]
fn acl_read_and_write_key_patterns_follow_the_key_specs() {
    let server = Server::start();
    let mut admin = server.client();
    let ok = Reply::Simple("OK".into());
    assert_eq!(admin.cmd(&["RL.GCRA", "rl:k", "5", "1", "1s"]).ints()[0], 1);
    for (user, pattern) in [("reader", "%R~rl:*"), ("writer", "%W~rl:*")] {
        let setuser = [
            "ACL",
            "SETUSER",
            user,
            "on",
            ">pw",
            pattern,
            "+rl.inspect",
            "+rl.gcra",
            "+rl.concurrency.release",
        ];
        assert_eq!(admin.cmd(&setuser), ok);
    }
    let mut reader = server.client();
    assert_eq!(reader.cmd(&["AUTH", "reader", "pw"]), ok);
    assert!(matches!(
        reader.cmd(&["RL.INSPECT", "rl:k"]),
        Reply::Array(_)
    ));
    for call in [
        vec!["RL.GCRA", "rl:k", "5", "1", "1s"],
        vec!["RL.CONCURRENCY.RELEASE", "rl:lease", "token"],
    ] {
        let e = reader.cmd(&call).error();
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }
    let mut writer = server.client();
    assert_eq!(writer.cmd(&["AUTH", "writer", "pw"]), ok);
    for call in [
        vec!["RL.INSPECT", "rl:k"],
        vec!["RL.GCRA", "rl:k", "5", "1", "1s"],
    ] {
        let e = writer.cmd(&call).error();
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }
    assert_eq!(
        writer.cmd(&["RL.CONCURRENCY.RELEASE", "rl:lease", "token"]),
        Reply::Int(0)
    );
}

/// The docs never stand in the way of loading: with CL.THROTTLE left out, the others are
/// documented as before, and the log has no complaint from the module about docs.
#[test]
fn docs_follow_the_commands_registered() {
    let server = Server::with(Config::default().module_args(&["cell-compat", "no"]));
    let mut c = server.client();
    let names = module_commands(&mut c);
    assert!(!names.iter().any(|n| n == "cl.throttle"), "{names:?}");
    assert_eq!(
        c.cmd(&["COMMAND", "DOCS", "cl.throttle"]),
        Reply::Array(vec![])
    );
    assert!(!args(&mut c, "rl.gcra").is_empty());
    let log = server.log();
    assert!(!log.contains("COMMAND DOCS"), "{log}");
    assert!(!log.contains("Invalid command info"), "{log}");
}

/// A pseudo-terminal: the side a program under test reads and writes as its terminal, and
/// the side the test types into and reads the screen from.
fn pty() -> (File, File) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty(3) fills in two new file descriptors, which the Files then own.
    unsafe {
        let rc = libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        );
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        (File::from_raw_fd(master), File::from_raw_fd(slave))
    }
}

/// The test's side of a pseudo-terminal: it types, and reads the screen. It answers the
/// cursor-position queries a line editor sends (`ESC [6n`) as a terminal would.
struct Terminal {
    keyboard: File,
    screen: String,
    output: mpsc::Receiver<Vec<u8>>,
    answered: usize,
}

impl Terminal {
    fn new(side: File) -> Terminal {
        let (tx, output) = mpsc::channel::<Vec<u8>>();
        let mut screen_side = side.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = screen_side.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Terminal {
            keyboard: side,
            screen: String::new(),
            output,
            answered: 0,
        }
    }

    fn type_in(&mut self, keys: &str) {
        self.keyboard.write_all(keys.as_bytes()).unwrap();
    }

    /// The screen's text without its escape sequences (colours, cursor moves).
    fn text(&self) -> String {
        let mut out = String::new();
        let mut chars = self.screen.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Waits until `text` is on the screen; false after 15 s without it.
    fn wait_for(&mut self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.text().contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(bytes) => self.screen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => return false,
            }
            let queries = self.screen.matches("\x1b[6n").count();
            while self.answered < queries {
                self.type_in("\x1b[1;80R");
                self.answered += 1;
            }
        }
        true
    }
}

/// redis-cli reads COMMAND DOCS: typed in a terminal, `help RL.GCRA` shows the syntax the
/// docs give, and so does the hint after a command's name. This drives the real redis-cli
/// in a pseudo-terminal.
#[test]
fn redis_cli_shows_the_syntax_from_the_docs() {
    let server = Server::start();
    let (side, tty) = pty();
    let mut cli = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .env("TERM", "xterm")
        .stdin(Stdio::from(tty.try_clone().unwrap()))
        .stdout(Stdio::from(tty.try_clone().unwrap()))
        .stderr(Stdio::from(tty))
        .spawn()
        .expect("run redis-cli");
    let mut terminal = Terminal::new(side);
    let prompt = format!("127.0.0.1:{}> ", server.port);
    // (redis-cli writes a choice without spaces around the bar.)
    let syntax =
        "RL.GCRA key burst rate period [COST n|ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]";
    let help_shown = terminal.wait_for(&prompt) && {
        terminal.type_in("help RL.GCRA\r");
        terminal.wait_for(&format!("\n  {syntax}\r\r\n  summary: Admit or deny"))
            // The next prompt, once the line editor has its answers: only then type on.
            && terminal.wait_for(&format!("group: module\r\r\n\r\r\n{prompt}"))
    };
    let hinted = help_shown && {
        terminal.type_in("RL.CONCURRENCY.RELEASE ");
        terminal.wait_for("RL.CONCURRENCY.RELEASE key token")
    };
    let _ = cli.kill();
    let _ = cli.wait();
    let screen = terminal.text();
    assert!(
        help_shown,
        "no help line for RL.GCRA; the screen:\n{screen:?}"
    );
    assert!(
        hinted,
        "no hint for RL.CONCURRENCY.RELEASE; the screen:\n{screen:?}"
    );
}
