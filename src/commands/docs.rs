//! What `COMMAND DOCS` and `COMMAND INFO` say about each command: a summary, the complexity,
//! every argument with its type, and the key spec. `redis-cli` builds its argument hints from
//! this, as for built-in commands.
//!
//! What it says comes from the command's syntax, in its entry (`args::syntax` has what a
//! syntax is made of), which also renders the arity errors. [`describe`] hands it to Redis
//! right after the command is created, through the room's `redis::command_info`, which lowers it to
//! what `RedisModule_SetCommandInfo` takes.
//!
//! Nothing here can stop the module from loading: a server without
//! `RedisModule_SetCommandInfo` (before Redis 7.0), or an entry Redis refuses, is logged,
//! and the command works as before, only without docs.
//!
//! The arity is always -1 ("at least the name"): Redis then never answers a wrong argument
//! count itself, and every command keeps its own error, which names its syntax. (An arity of
//! 0 also means -1 on Redis 7.0, but would mean -2 for a command with subcommands.)

use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use super::Command;
use crate::redis::{self, Ctx};

/// The module version that introduced the commands: all of them come with the first release,
/// the version of `Cargo.toml` (which `MODULE LIST` shows, as a number).
const SINCE: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(since) => since,
        Err(_) => panic!("the package version holds a NUL byte"),
    };

/// See the module docs: the commands check their own argument counts.
const ARITY: c_int = -1;

/// What [`describe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Documented {
    Described,
    /// The server has no `RedisModule_SetCommandInfo` (before Redis 7.0).
    NoApi,
    /// Redis refused the entry (it logs why), or something failed here.
    Refused,
}

/// The server lacks the API: said once, not once per command.
static NO_API_LOGGED: AtomicBool = AtomicBool::new(false);

/// Gives Redis the documentation of `command`, just created. Never fails the load: whatever
/// goes wrong is logged and the command runs without docs.
pub fn describe(ctx: Ctx, command: &Command) -> Documented {
    let outcome = catch_unwind(AssertUnwindSafe(|| set_info(ctx, command)));
    let outcome = outcome.unwrap_or(Documented::Refused);
    let name = command.name().lower().to_string_lossy();
    match outcome {
        Documented::Described => {}
        Documented::NoApi => {
            if !NO_API_LOGGED.swap(true, Ordering::Relaxed) {
                log(
                    ctx,
                    "ratelimit: this server has no RedisModule_SetCommandInfo (Redis 7.0 added it): \
                     the commands load without COMMAND DOCS and COMMAND INFO details",
                );
            }
        }
        Documented::Refused => log(
            ctx,
            &format!("ratelimit: Redis refused the COMMAND DOCS of {name}: it loads without docs"),
        ),
    }
    outcome
}

fn set_info(ctx: Ctx, command: &Command) -> Documented {
    let name = command.name().lower();
    match redis::command_info::set_command_docs(ctx, name, &command.syntax, SINCE, ARITY) {
        None => Documented::NoApi,
        Some(true) => Documented::Described,
        Some(false) => Documented::Refused,
    }
}

/// A warning in the server's log; nothing when there is no server (unit tests).
fn log(ctx: Ctx, message: &str) {
    crate::log::log(Some(ctx), crate::log::Level::Warning, message);
}

#[cfg(test)]
mod tests {
    use redis_module::raw;

    use super::super::{When, COMMANDS, NO_KEYS};
    use super::*;
    use crate::args::syntax::{Arg, KeyUse, Kind};
    use crate::redis::command_info::key_flags;

    /// A command's docs, its arity error and RL.REPLAY's text name it as it is registered.
    #[test]
    fn every_command_is_documented_under_its_own_name() {
        for command in COMMANDS {
            let name = command.name().lower().to_str().unwrap();
            assert!(!command.syntax.summary.is_empty(), "{name}");
            let upper = name.to_ascii_uppercase();
            assert_eq!(command.replay_name().to_str(), Ok(upper.as_str()));
            match command.syntax.arity() {
                crate::error::Error::Arity { command, .. } => assert_eq!(command, upper),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_key_spec_agrees_with_the_command_table() {
        for command in COMMANDS {
            let name = command.name().lower().to_str().unwrap();
            let doc = &command.syntax;
            let flags = command.flags.to_str().unwrap();
            let expected = if command.keys == NO_KEYS {
                vec![KeyUse::None]
            } else if flags.split(' ').any(|f| f == "readonly") {
                vec![KeyUse::Read]
            } else {
                vec![KeyUse::Update, KeyUse::Remove, KeyUse::Overwrite]
            };
            assert!(expected.contains(&doc.key), "{name}: {:?}", doc.key);
        }
        assert!(COMMANDS.iter().any(|c| c.when == When::CellCompat));
    }

    /// The rules `RM_SetCommandInfo` checks, so that Redis never refuses an entry; and
    /// what the docs promise: one key, first.
    #[test]
    fn every_entry_is_one_redis_accepts() {
        fn check(name: &str, args: &[Arg]) {
            let mut names: Vec<&CStr> = args.iter().map(|a| a.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(
                names.len(),
                args.len(),
                "{name}: two arguments share a name"
            );
            for arg in args {
                let what = format!("{name} {:?}", arg.name);
                assert!(!arg.name.is_empty() && !arg.summary.is_empty(), "{what}");
                match arg.kind {
                    Kind::Token => assert!(arg.token.is_some(), "{what}: a token needs its word"),
                    Kind::OneOf(subargs) | Kind::Block(subargs) => {
                        assert!(!subargs.is_empty(), "{what}");
                        check(name, subargs);
                    }
                    Kind::Key => panic!("{what}: a key inside a group"),
                    Kind::Integer | Kind::String => {}
                }
            }
        }
        let mut seen = Vec::new();
        for doc in COMMANDS.iter().map(|c| &c.syntax) {
            assert!(!seen.contains(&doc.name), "{} twice", doc.name);
            seen.push(doc.name);
            let name = doc.name.lower().to_str().unwrap();
            assert_eq!(name, name.to_lowercase());
            assert_eq!(doc.name.as_str(), name.to_uppercase());
            assert!(!doc.summary.is_empty() && !doc.complexity.is_empty());
            let keys = doc
                .args
                .iter()
                .filter(|a| matches!(a.kind, Kind::Key))
                .count();
            if doc.key == KeyUse::None {
                assert_eq!(keys, 0, "{}", doc.name);
                check(name, doc.args);
            } else {
                assert_eq!(keys, 1, "{}", doc.name);
                assert!(matches!(doc.args[0].kind, Kind::Key), "{}", doc.name);
                assert!(!doc.args[0].optional && !doc.args[0].multiple);
                check(name, &doc.args[1..]);
            }
            if doc.key != KeyUse::None {
                let flags = key_flags(doc.key);
                let access = raw::REDISMODULE_CMD_KEY_RO
                    | raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_OW
                    | raw::REDISMODULE_CMD_KEY_RM;
                let write = raw::REDISMODULE_CMD_KEY_INSERT
                    | raw::REDISMODULE_CMD_KEY_DELETE
                    | raw::REDISMODULE_CMD_KEY_UPDATE;
                assert_eq!((flags & u64::from(access)).count_ones(), 1, "{}", doc.name);
                assert!((flags & u64::from(write)).count_ones() <= 1, "{}", doc.name);
            }
        }
    }

    /// Without a server the API pointers are empty: the same path as a server older than
    /// 7.0, which must load the commands without docs rather than fail.
    #[test]
    fn no_api_means_no_docs_and_no_failure() {
        for command in COMMANDS {
            assert_eq!(describe(Ctx::detached(), command), Documented::NoApi);
        }
    }
}
