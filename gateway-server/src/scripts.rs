//! The script backend: where the server has no module, each call is sent as the client
//! packages' Lua script that stands for it (`clients/lua`, built into the binary),
//! `EVALSHA` with the SHA-1 the server gave at start, `EVAL` with the whole text on a node that
//! does not have it yet (`NOSCRIPT`: nothing ran).

use std::collections::HashMap;

use gateway::scripts::{assemble, script_for, COMMANDS};

macro_rules! lua {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../clients/lua/", $name, ".lua")))),*]
    };
}

/// The scripts a plan's commands need.
const ENTRIES: &[(&str, &str)] = lua!(
    "fixedwindow",
    "slidingwindow",
    "slidinglog",
    "gcra",
    "tokenbucket",
    "leakybucket",
    "refund"
);

/// The parts they name.
const PARTS: &[(&str, &str)] = lua!(
    "lib/anykey",
    "lib/common",
    "lib/fast",
    "lib/fixedwindow",
    "lib/fixedwindow_fast",
    "lib/gcra",
    "lib/gcra_fast",
    "lib/gcra_go",
    "lib/leakybucket",
    "lib/leakybucket_go",
    "lib/slidinglog",
    "lib/slidinglog_fast",
    "lib/slidingwindow",
    "lib/slidingwindow_fast",
    "lib/tokenbucket",
    "lib/tokenbucket_fast",
    "lib/warmup",
);

/// Each command's script: its text and its SHA-1.
pub struct Scripts {
    by_command: HashMap<&'static str, (String, String)>,
}

impl Scripts {
    /// Every command's script text, assembled (a part missing is a build's mistake).
    pub fn texts() -> Vec<(&'static str, String)> {
        COMMANDS
            .iter()
            .map(|command| {
                let name = script_for(command).expect("a script per command");
                let entry = ENTRIES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, t)| *t)
                    .expect("the script is built in");
                let part = |n: &str| {
                    PARTS
                        .iter()
                        .find(|(p, _)| p.strip_prefix("lib/") == Some(n))
                        .map(|(_, t)| *t)
                };
                (
                    *command,
                    assemble(entry, part).expect("its parts are built in"),
                )
            })
            .collect()
    }

    /// The scripts, with the SHA-1 `SCRIPT LOAD` gave each.
    pub fn new(loaded: Vec<(&'static str, String, String)>) -> Scripts {
        Scripts {
            by_command: loaded
                .into_iter()
                .map(|(command, text, sha)| (command, (text, sha)))
                .collect(),
        }
    }

    /// A call as `EVALSHA` of its script.
    pub fn evalsha(&self, call: &[String]) -> Vec<String> {
        match self.by_command.get(call[0].as_str()) {
            Some((_, sha)) => gateway::scripts::evalsha(call, sha).unwrap_or_else(|| call.to_vec()),
            None => call.to_vec(),
        }
    }

    /// A call as `EVAL` of its script's text.
    pub fn eval(&self, call: &[String]) -> Vec<String> {
        match self.by_command.get(call[0].as_str()) {
            Some((text, _)) => {
                let mut out = vec!["EVAL".to_string(), text.clone(), "1".to_string()];
                out.extend(call[1..].iter().cloned());
                out
            }
            None => call.to_vec(),
        }
    }
}
