//! One version everywhere (issue 29): the crate's (`Cargo.toml`, which the module is built
//! from), the algorithms crate's, the Python package's (`pyproject.toml` and `__version__`), the
//! Node package's (`package.json` and its lock file), the changelog's newest entry, what
//! `MODULE LIST` shows a server that loaded the module, and `COMMAND DOCS`' `since` of every
//! command. A release changes them together, or this test fails.

use std::fs;
use std::path::Path;

use crate::common::{Reply, Server};

/// The crate's version, the one the others must be.
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The quoted value after the first line of `text` that starts with `prefix` (a TOML
/// `version = "..."`, a JSON `"version": "..."`, a Python `__version__ = "..."`).
fn quoted_after(text: &str, prefix: &str, what: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("{what}: no line starting with {prefix}"));
    let value = line
        .split('"')
        .nth(if prefix.starts_with('"') { 3 } else { 1 });
    value
        .unwrap_or_else(|| panic!("{what}: no quoted value in {line:?}"))
        .to_string()
}

/// `MODULE LIST`'s number for a version: major·10000 + minor·100 + patch.
fn module_number(version: &str) -> i64 {
    let parts: Vec<i64> = version
        .split('.')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("version {version}")))
        .collect();
    assert_eq!(parts.len(), 3, "version {version}");
    parts[0] * 10_000 + parts[1] * 100 + parts[2]
}

#[test]
fn every_file_says_the_crates_version() {
    let found = [
        (
            "algorithms/Cargo.toml",
            quoted_after(&read("algorithms/Cargo.toml"), "version =", "algorithms"),
        ),
        (
            "clients/python/pyproject.toml",
            quoted_after(
                &read("clients/python/pyproject.toml"),
                "version =",
                "pyproject",
            ),
        ),
        (
            "clients/python/src/ratelimit_redis_module/__init__.py",
            quoted_after(
                &read("clients/python/src/ratelimit_redis_module/__init__.py"),
                "__version__ =",
                "__init__.py",
            ),
        ),
        (
            "clients/node/package.json",
            quoted_after(
                &read("clients/node/package.json"),
                "\"version\":",
                "package.json",
            ),
        ),
        (
            "clients/node/package-lock.json",
            quoted_after(
                &read("clients/node/package-lock.json"),
                "\"version\":",
                "package-lock.json",
            ),
        ),
    ];
    for (file, version) in &found {
        assert_eq!(
            version, VERSION,
            "{file} says {version}, Cargo.toml {VERSION}"
        );
    }
    // The lock file names the package's version twice: at its top and for the package itself.
    let lock = read("clients/node/package-lock.json");
    let root = lock
        .split("\"\": {")
        .nth(1)
        .expect("package-lock.json: no entry for the package itself");
    assert_eq!(
        quoted_after(root, "\"version\":", "the lock file's package entry"),
        VERSION
    );
    // The changelog's newest entry is this version (released or not), as Keep a Changelog
    // heads it: `## [0.1.0] - 2026-12-01`, or `- Unreleased` until it is out.
    let changelog = read("CHANGELOG.md");
    let newest = changelog
        .lines()
        .find(|l| l.starts_with("## "))
        .expect("CHANGELOG.md has no entry");
    assert!(
        newest.starts_with(&format!("## [{VERSION}] - ")),
        "CHANGELOG.md's newest entry {newest:?} is not {VERSION}"
    );
}

#[test]
fn the_server_shows_the_crates_version() {
    let server = Server::start();
    let mut c = server.client();
    let Reply::Array(modules) = c.cmd(&["MODULE", "LIST"]) else {
        panic!("MODULE LIST");
    };
    let ours: Vec<&Reply> = modules
        .iter()
        .filter(|m| {
            let Reply::Array(fields) = m else {
                return false;
            };
            fields.chunks(2).any(|kv| {
                kv[0] == Reply::Bulk(b"name".to_vec())
                    && kv[1] == Reply::Bulk(b"ratelimit".to_vec())
            })
        })
        .collect();
    assert_eq!(ours.len(), 1, "{modules:?}");
    let Reply::Array(fields) = ours[0] else {
        unreachable!()
    };
    let ver = fields
        .chunks(2)
        .find(|kv| kv[0] == Reply::Bulk(b"ver".to_vec()))
        .map(|kv| kv[1].clone())
        .expect("MODULE LIST: no ver");
    assert_eq!(ver, Reply::Int(module_number(VERSION)));
    // COMMAND DOCS: `since` is the crate's version for every command of the module.
    let Reply::Array(names) = c.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit"]) else {
        panic!("COMMAND LIST");
    };
    assert!(names.len() > 10, "{names:?}");
    for name in names.iter().map(Reply::text) {
        let Reply::Array(pair) = c.cmd(&["COMMAND", "DOCS", &name]) else {
            panic!("COMMAND DOCS {name}");
        };
        let Reply::Array(doc) = &pair[1] else {
            panic!("COMMAND DOCS {name}: {pair:?}");
        };
        let since = doc
            .chunks(2)
            .find(|kv| kv[0] == Reply::Bulk(b"since".to_vec()))
            .map(|kv| kv[1].text())
            .unwrap_or_else(|| panic!("COMMAND DOCS {name}: no since"));
        assert_eq!(since, VERSION, "{name}");
    }
}
