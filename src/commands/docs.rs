//! What `COMMAND DOCS` and `COMMAND INFO` say about each command: a summary, the complexity,
//! every argument with its type, and the key spec. `redis-cli` builds its argument hints from
//! this, as for built-in commands.
//!
//! The table [`DOCS`] is keyed by command name and written for every command of the module,
//! including those the command table may not register (CL.THROTTLE with `cell-compat no`).
//! [`describe`] hands one entry to Redis right after the command is created, through the
//! room's `redis::docs`, which holds the vocabulary the table is written in and lowers it to
//! what `RedisModule_SetCommandInfo` takes.
//!
//! Nothing here can stop the module from loading: a command without an entry, a server
//! without `RedisModule_SetCommandInfo` (before Redis 7.0), or an entry Redis refuses is
//! logged, and the command works as before, only without docs.
//!
//! The arity is always -1 ("at least the name"): Redis then never answers a wrong argument
//! count itself, and every command keeps its own error, which names its syntax. (An arity of
//! 0 also means -1 on Redis 7.0, but would mean -2 for a command with subcommands.)

use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use super::Command;
use crate::redis::docs::{arg, integer, string, token, Arg, Doc, KeyUse, Kind};
use crate::redis::{self, Ctx};

/// The module version that introduced the commands: all of them come with the first release.
const SINCE: &CStr = c"1.0.0";

/// See the module docs: the commands check their own argument counts.
const ARITY: c_int = -1;

const KEY: Arg = arg(c"key", Kind::Key, c"the limiter's key");
const DURATION: &CStr =
    c"a duration from 1ms to 10 years: an integer with an optional unit ms, s, m, h or d (a bare number is ms)";

const COST: Arg = integer(
    c"n",
    c"units this request takes, 0 to 10^12 (default 1); COST 0 checks without taking",
)
.after(c"COST")
.optional();
const DRYRUN: Arg = token(
    c"dryrun",
    c"DRYRUN",
    c"reply as if the request were made; write and propagate nothing",
)
.optional();
const BLOCK: Arg = string(
    c"duration",
    c"a penalty: if this request is denied, the key refuses every request for this duration",
)
.after(c"BLOCK")
.optional();

/// The positional arguments of the window algorithms, then the options.
const WINDOW_ARGS: &[Arg] = &[
    KEY,
    integer(c"limit", c"the most units admitted in a window, 1 to 10^12"),
    string(c"window", DURATION),
    COST,
    DRYRUN,
    BLOCK,
];

const O1: &CStr = c"O(1)";

/// The documentation of every command of the module.
#[rustfmt::skip]
pub static DOCS: &[Doc] = &[
    Doc {
        name: "rl.gcra",
        summary: c"Admit or deny a request with GCRA: up to burst units at once, then rate units per period, evenly spaced",
        complexity: O1,
        key: KeyUse::Update,
        args: &[
            KEY,
            integer(c"burst", c"the most units admitted at once, 1 to 10^12"),
            integer(c"rate", c"units per period, 1 to 10^12"),
            string(c"period", DURATION),
            COST,
            DRYRUN,
            BLOCK,
        ],
    },
    Doc {
        name: "cl.throttle",
        summary: c"Admit or deny a request with GCRA, redis-cell compatible: its arguments, its reply in seconds",
        complexity: O1,
        key: KeyUse::Update,
        args: &[
            KEY,
            integer(c"max_burst", c"the burst less one, 0 to 10^12 - 1"),
            integer(c"count", c"units per period, 1 to 10^12"),
            integer(c"period", c"whole seconds, 1 to 315360000 (10 years)"),
            integer(c"quantity", c"units this request takes, 0 to 10^12 (default 1)").optional(),
        ],
    },
    Doc {
        name: "rl.tokenbucket",
        summary: c"Admit or deny a request with a token bucket: capacity tokens, refilled by refill_amount per refill_period",
        complexity: O1,
        key: KeyUse::Update,
        args: &[
            KEY,
            integer(c"capacity", c"the most tokens the bucket holds, 1 to 10^12"),
            integer(c"refill_amount", c"tokens added per refill_period, 1 to 10^12"),
            string(c"refill_period", DURATION),
            token(c"interval", c"INTERVAL", c"refill the whole refill_amount at each full refill_period, not continuously").optional(),
            COST,
            DRYRUN,
            BLOCK,
        ],
    },
    Doc {
        name: "rl.leakybucket",
        summary: c"Admit or deny a request with a leaky bucket: a queue of capacity units draining at a constant rate; the reply says when to act",
        complexity: O1,
        key: KeyUse::Update,
        args: &[
            KEY,
            integer(c"capacity", c"the most units queued, the one being served included, 1 to 10^12"),
            integer(c"leak_amount", c"units drained per leak_period, 1 to 10^12"),
            string(c"leak_period", DURATION),
            COST,
            DRYRUN,
            BLOCK,
        ],
    },
    Doc {
        name: "rl.fixedwindow",
        summary: c"Admit or deny a request with a fixed window counter, windows aligned to the Unix epoch",
        complexity: O1,
        key: KeyUse::Update,
        args: WINDOW_ARGS,
    },
    Doc {
        name: "rl.slidingwindow",
        summary: c"Admit or deny a request with a sliding window counter: this window's count plus the previous one's, weighted",
        complexity: O1,
        key: KeyUse::Update,
        args: WINDOW_ARGS,
    },
    Doc {
        name: "rl.slidinglog",
        summary: c"Admit or deny a request with a sliding log: exact, it keeps every admitted request still in the window",
        complexity: c"O(1) amortized for a key written regularly: O(E) for the E expired entries it drops or skips, and O(COST) more for a denial",
        key: KeyUse::Update,
        args: WINDOW_ARGS,
    },
    Doc {
        name: "rl.concurrency.acquire",
        summary: c"Take one of limit leases, held until released or for lease at most; the reply carries the lease's token",
        complexity: c"O(log N) where N is the number of leases held on the key, amortised: a write also drops the leases ended since the last one",
        key: KeyUse::Update,
        args: &[
            KEY,
            integer(c"limit", c"the most leases held at once, 1 to the setting ratelimit.concurrency-max-limit (default 100000)"),
            string(c"lease", DURATION),
            string(c"token", c"name the lease (1 to 256 bytes); the same token renews its own lease").after(c"ID").optional(),
            DRYRUN,
        ],
    },
    Doc {
        name: "rl.concurrency.release",
        summary: c"End a lease taken with RL.CONCURRENCY.ACQUIRE: 1, or 0 when no such lease is held",
        complexity: c"O(log N) where N is the number of leases held on the key, amortised: a write also drops the leases ended since the last one",
        key: KeyUse::Remove,
        args: &[KEY, string(c"token", c"the token RL.CONCURRENCY.ACQUIRE replied with")],
    },
    Doc {
        name: "rl.inspect",
        summary: c"Show a limiter key's algorithm, parameters and state, changing nothing",
        complexity: c"O(1); O(N) for a sliding log holding N entries; O(log N) for a concurrency key holding N leases",
        key: KeyUse::Read,
        args: &[KEY],
    },
    Doc {
        name: "rl.limit",
        summary: c"Admit or deny a request against every rule of a policy, all or nothing; the reply is the binding rule's",
        complexity: c"O(R) where R is the number of rules in the policy",
        key: KeyUse::Update,
        args: &[
            KEY,
            string(c"policy", c"the name of a policy set with RL.POLICY.SET"),
            COST,
            DRYRUN,
            BLOCK,
        ],
    },
    Doc {
        name: "rl.policy.set",
        summary: c"Create or replace a policy: a named list of rules, each an algorithm and its arguments",
        complexity: c"O(R) where R is the number of rules",
        key: KeyUse::None,
        args: &[
            string(c"name", c"the policy's name"),
            arg(c"rule", Kind::Block(&[
                string(c"algorithm", c"an algorithm, as its command is named without RL. (gcra, tokenbucket, ...)"),
                string(c"argument", c"the algorithm's positional arguments, as its command takes them after the key").multiple(),
            ]), c"an algorithm and its arguments").multiple(),
        ],
    },
    Doc {
        name: "rl.policy.get",
        summary: c"Show the rules of a policy",
        complexity: c"O(R) where R is the number of rules",
        key: KeyUse::None,
        args: &[string(c"name", c"the policy's name")],
    },
    Doc {
        name: "rl.policy.del",
        summary: c"Delete a policy",
        complexity: c"O(R) where R is the number of rules",
        key: KeyUse::None,
        args: &[string(c"name", c"the policy's name")],
    },
    Doc {
        name: "rl.policy.list",
        summary: c"List the names of the policies",
        complexity: c"O(P) where P is the number of policies",
        key: KeyUse::None,
        args: &[],
    },
    Doc {
        name: "rl.debug.clock",
        summary: c"Freeze, move or release the module's clock, for deterministic tests (only with debug-clock yes)",
        complexity: O1,
        key: KeyUse::None,
        args: &[arg(c"change", Kind::OneOf(&[
            integer(c"ms", c"freeze the clock at ms since the Unix epoch, 0 to 253402300799999").after(c"SET"),
            string(c"offset", c"move the clock by ms or a duration, negative to move it back, and freeze it").after(c"ADVANCE"),
            token(c"real", c"REAL", c"let the clock run with the server's clock again"),
        ]), c"how to change the clock")],
    },
    Doc {
        name: "rl.debug.panic",
        summary: c"Panic on purpose, to show the guard turns a panic into an error reply (only with debug-clock yes)",
        complexity: O1,
        key: KeyUse::None,
        args: &[],
    },
    Doc {
        name: "rl.replay",
        summary: c"Internal: replays an admitted write with the primary's clock reading; accepted only from replication or the AOF",
        complexity: c"That of the replayed command",
        key: KeyUse::Update,
        args: &[
            KEY,
            string(c"now_us:expire_at_ms:command:arg", c"the primary's clock reading, the key's expiry, the command and its first argument after the key"),
            string(c"arg", c"the command's other arguments").optional().multiple(),
        ],
    },
    Doc {
        name: "rl.loadstate",
        summary: c"Internal: sets a key's encoded state, as an AOF rewrite writes it; accepted only from replication or the AOF",
        complexity: c"O(N) where N is the size of the state",
        key: KeyUse::Overwrite,
        args: &[KEY, string(c"state", c"the encoded state")],
    },
];

/// The documentation of the command named `name` (any case).
pub fn find(name: &[u8]) -> Option<&'static Doc> {
    DOCS.iter()
        .find(|doc| doc.name.as_bytes().eq_ignore_ascii_case(name))
}

/// What [`describe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Described,
    /// The table has no entry for the command (a bug: a unit test checks for it).
    NoDocs,
    /// The server has no `RedisModule_SetCommandInfo` (before Redis 7.0).
    NoApi,
    /// Redis refused the entry (it logs why), or something failed here.
    Refused,
}

/// The server lacks the API: said once, not once per command.
static NO_API_LOGGED: AtomicBool = AtomicBool::new(false);

/// Gives Redis the documentation of `command`, just created. Never fails the load: whatever
/// goes wrong is logged and the command runs without docs.
pub fn describe(ctx: Ctx, command: &Command) -> Outcome {
    let outcome = catch_unwind(AssertUnwindSafe(|| set_info(ctx, command)));
    let outcome = outcome.unwrap_or(Outcome::Refused);
    let name = command.name.to_string_lossy();
    match outcome {
        Outcome::Described => {}
        Outcome::NoDocs => log(
            ctx,
            &format!("ratelimit: no COMMAND DOCS entry for {name}: it loads without docs"),
        ),
        Outcome::NoApi => {
            if !NO_API_LOGGED.swap(true, Ordering::Relaxed) {
                log(
                    ctx,
                    "ratelimit: this server has no RedisModule_SetCommandInfo (Redis 7.0 added it): \
                     the commands load without COMMAND DOCS and COMMAND INFO details",
                );
            }
        }
        Outcome::Refused => log(
            ctx,
            &format!("ratelimit: Redis refused the COMMAND DOCS of {name}: it loads without docs"),
        ),
    }
    outcome
}

fn set_info(ctx: Ctx, command: &Command) -> Outcome {
    let Some(doc) = find(command.name.to_bytes()) else {
        return Outcome::NoDocs;
    };
    match redis::docs::set_command_docs(ctx, command.name, doc, SINCE, ARITY) {
        None => Outcome::NoApi,
        Some(true) => Outcome::Described,
        Some(false) => Outcome::Refused,
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

    #[test]
    fn every_command_has_docs() {
        for command in COMMANDS {
            let name = command.name.to_str().unwrap();
            assert!(
                find(name.as_bytes()).is_some(),
                "{name} has no entry in DOCS"
            );
        }
    }

    #[test]
    fn the_key_spec_agrees_with_the_command_table() {
        for command in COMMANDS {
            let name = command.name.to_str().unwrap();
            let doc = find(name.as_bytes()).unwrap();
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
        for doc in DOCS {
            assert!(!seen.contains(&doc.name), "{} twice", doc.name);
            seen.push(doc.name);
            assert_eq!(doc.name, doc.name.to_lowercase());
            assert!(!doc.summary.is_empty() && !doc.complexity.is_empty());
            let keys = doc
                .args
                .iter()
                .filter(|a| matches!(a.kind, Kind::Key))
                .count();
            if doc.key == KeyUse::None {
                assert_eq!(keys, 0, "{}", doc.name);
                check(doc.name, doc.args);
            } else {
                assert_eq!(keys, 1, "{}", doc.name);
                assert!(matches!(doc.args[0].kind, Kind::Key), "{}", doc.name);
                assert!(!doc.args[0].optional && !doc.args[0].multiple);
                check(doc.name, &doc.args[1..]);
            }
            if doc.key != KeyUse::None {
                let flags = doc.key.flags();
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
            assert_eq!(describe(Ctx::detached(), command), Outcome::NoApi);
        }
    }
}
