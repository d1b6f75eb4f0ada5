//! The commands: each parses its arguments and returns a [`Response`], what happened; the
//! dispatcher ([`crate::dispatch`]) renders it, counts it, publishes a denial and propagates
//! the write. No handler writes a reply or calls Redis itself.
//!
//! Every command is registered through [`register`] from one table, [`COMMANDS`], whose
//! entries run their handler through [`crate::dispatch::run`].

mod admission;
mod concurrency;
mod debug;
mod docs;
mod fixed_window;
mod gcra;
mod info;
mod inspect;
mod leaky_bucket;
mod limit;
mod policy;
mod refund;
mod replay;
mod sliding_log;
mod sliding_window;
mod token_bucket;
mod top;
mod warmup;

use std::ffi::CStr;
use std::os::raw::c_int;

pub use info::{info, on_resetstat};

use crate::dispatch::Handler;
use crate::log;
use crate::metrics::Stats;
use crate::redis::{self, Argv, CommandHandle, Ctx};

/// When a command is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// Only with `cell-compat yes` (the default).
    CellCompat,
}

pub struct Command {
    pub name: &'static CStr,
    pub flags: &'static CStr,
    /// Its ACL categories on Redis 7.2 and later.
    pub acl: &'static CStr,
    /// First key, last key, step (1, 1, 1: the key is the first argument).
    pub keys: (c_int, c_int, c_int),
    pub when: When,
    /// RL.REPLAY may replay it (the admission commands).
    pub replayable: bool,
    pub handler: Handler,
    /// Its calls, admissions, denials and errors (`INFO ratelimit`).
    pub stats: &'static Stats,
    cmd_func: CommandHandle,
}

/// A table entry: the command, its counters (a static of its own, so that every entry gets
/// them, whatever is added to the table), and the `extern "C"` entry point that runs its
/// handler through the dispatcher.
macro_rules! command {
    ($name:literal, $flags:literal, $acl:expr, $keys:expr, $when:expr, $replayable:expr, $handler:path) => {{
        static STATS: Stats = Stats::new();
        struct Func;
        impl redis::CmdFunc for Func {
            fn run(ctx: Ctx<'_>, argv: Argv<'_>) {
                crate::dispatch::run(ctx, argv, $handler, &STATS)
            }
        }
        Command {
            name: $name,
            flags: $flags,
            acl: $acl,
            keys: $keys,
            when: $when,
            replayable: $replayable,
            handler: $handler,
            stats: &STATS,
            cmd_func: redis::cmd_func::<Func>,
        }
    }};
}

const KEY: (c_int, c_int, c_int) = (1, 1, 1);
const NO_KEYS: (c_int, c_int, c_int) = (0, 0, 0);

/// ACL categories (Redis 7.2 and later). They are set, not implied by the flags: on Redis 8.2
/// and Valkey 8.1 a module command is in exactly the categories it is given, whatever its
/// flags (`tests/security.rs` checks `ACL CAT` on both).
const WRITE: &CStr = c"write fast";
const READ: &CStr = c"read";
const READ_FAST: &CStr = c"read fast";
/// Policies are server configuration: changing one needs more than `@write` (docs/security.md). The
/// commands stay flagged `write`, so a read-only replica refuses them to its clients and the
/// primary propagates them like any write.
const CONFIG: &CStr = c"admin dangerous";
/// The debug clock and the internal commands.
const PRIVILEGED: &CStr = c"admin dangerous";

/// Every command of the module: name, flags, ACL categories, key positions, when it is
/// registered, whether RL.REPLAY may replay it, and its handler.
#[rustfmt::skip]
pub static COMMANDS: &[Command] = &[
    command!(c"rl.gcra",                 c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  gcra::rl_gcra),
    command!(c"cl.throttle",             c"write deny-oom fast",  WRITE,       KEY,      When::CellCompat,  true,  gcra::cl_throttle),
    command!(c"rl.tokenbucket",          c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  token_bucket::rl_tokenbucket),
    command!(c"rl.leakybucket",          c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  leaky_bucket::rl_leakybucket),
    command!(c"rl.fixedwindow",          c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  fixed_window::rl_fixedwindow),
    command!(c"rl.slidingwindow",        c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  sliding_window::rl_slidingwindow),
    command!(c"rl.slidinglog",           c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  sliding_log::rl_slidinglog),
    command!(c"rl.warmup",               c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  warmup::rl_warmup),
    command!(c"rl.concurrency.acquire",  c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  concurrency::rl_concurrency_acquire),
    command!(c"rl.concurrency.release",  c"write fast",           WRITE,       KEY,      When::Always,      true,  concurrency::rl_concurrency_release),
    command!(c"rl.limit",                c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  limit::rl_limit),
    command!(c"rl.refund",               c"write fast",           WRITE,       KEY,      When::Always,      true,  refund::rl_refund),
    command!(c"rl.policy.set",           c"write deny-oom",       CONFIG,      NO_KEYS,  When::Always,      false, policy::rl_policy_set),
    command!(c"rl.policy.get",           c"readonly fast",        READ_FAST,   NO_KEYS,  When::Always,      false, policy::rl_policy_get),
    command!(c"rl.policy.del",           c"write fast",           CONFIG,      NO_KEYS,  When::Always,      false, policy::rl_policy_del),
    command!(c"rl.policy.list",          c"readonly",             READ,        NO_KEYS,  When::Always,      false, policy::rl_policy_list),
    command!(c"rl.top",                  c"readonly",             READ,        NO_KEYS,  When::Always,      false, top::rl_top),
    command!(c"rl.inspect",              c"readonly fast",        READ_FAST,   KEY,      When::Always,      false, inspect::rl_inspect),
    command!(c"rl.debug.clock",          c"admin fast",           PRIVILEGED,  NO_KEYS,  When::Always,      false, debug::rl_debug_clock),
    command!(c"rl.debug.panic",          c"admin",                PRIVILEGED,  NO_KEYS,  When::Always,      false, debug::rl_debug_panic),
    command!(c"rl.replay",               c"write",                PRIVILEGED,  KEY,      When::Always,      false, replay::rl_replay),
    command!(c"rl.loadstate",            c"write",                PRIVILEGED,  KEY,      When::Always,      false, replay::rl_loadstate),
];

/// Registers the commands of [`COMMANDS`]; `cell_compat` decides CL.THROTTLE.
pub fn register(ctx: Ctx, cell_compat: bool) -> Result<(), String> {
    for command in COMMANDS {
        if command.when == When::CellCompat && !cell_compat {
            continue;
        }
        if !redis::create_command(
            ctx,
            command.name,
            command.cmd_func,
            command.flags,
            command.keys,
        ) {
            return Err(format!("could not register {:?}", command.name));
        }
        command.stats.registered();
        set_acl_categories(ctx, command);
        docs::describe(ctx, command);
    }
    Ok(())
}

/// On Redis 7.2 and later, puts a command in its ACL categories (see [`COMMANDS`]), so that
/// `+@write` grants the admission commands and not a policy change, and `-@dangerous` takes
/// the debug and internal commands away. Redis 7.0 has no ACL categories for module commands
/// (the function is absent): grant the commands by name. A failure here is logged, not
/// fatal: the command works, it just sits in no category.
fn set_acl_categories(ctx: Ctx, command: &Command) {
    if redis::set_acl_categories(ctx, command.name, command.acl) == Some(false) {
        let message = format!("no ACL categories for {:?}", command.name);
        log::log(Some(ctx), log::Level::Warning, &message);
    }
}

/// The replayable command named `name` (any case).
pub fn replayable(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.replayable && c.name.to_bytes().eq_ignore_ascii_case(name))
}

/// Handlers without a server: a call's arguments in, a [`Response`] out. The context is
/// detached (no server behind it), so these are the handlers and paths that answer before
/// opening a key.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{Call, Mode};
    use crate::response::{Propagate, Reply};

    fn call<'a>(args: &'a [&'a [u8]]) -> Call<'a> {
        Call {
            ctx: Ctx::detached(),
            args,
            key: None,
            mode: Mode::Live,
        }
    }

    fn words(items: &[&str]) -> Reply {
        Reply::Strings(items.iter().map(|w| w.as_bytes().to_vec()).collect())
    }

    #[test]
    fn policy_commands_reply_and_propagate_by_value() {
        let name: &[u8] = b"handler-unit-test";
        let set = policy::rl_policy_set(&call(&[
            b"RL.POLICY.SET",
            name,
            b"gcra",
            b"10",
            b"5",
            b"1s",
            b"rl.fixedwindow",
            b"100",
            b"1h",
        ]))
        .unwrap();
        assert_eq!(set.reply, Reply::Ok);
        assert_eq!(set.propagate, Propagate::Verbatim);

        let get = policy::rl_policy_get(&call(&[b"RL.POLICY.GET", name])).unwrap();
        let expected = words(&["GCRA", "10", "5", "1s", "FIXEDWINDOW", "100", "1h"]);
        assert_eq!(get.reply, expected);
        assert_eq!(get.propagate, Propagate::Nothing);

        let list = policy::rl_policy_list(&call(&[b"RL.POLICY.LIST"])).unwrap();
        match list.reply {
            Reply::Strings(names) => assert!(names.iter().any(|n| n == name)),
            other => panic!("RL.POLICY.LIST replied {other:?}"),
        }

        let del = policy::rl_policy_del(&call(&[b"RL.POLICY.DEL", name])).unwrap();
        assert_eq!(del.reply, Reply::Int(1));
        assert_eq!(del.propagate, Propagate::Verbatim);
        let again = policy::rl_policy_del(&call(&[b"RL.POLICY.DEL", name])).unwrap();
        assert_eq!(again.reply, Reply::Int(0));
        assert_eq!(
            again.propagate,
            Propagate::Nothing,
            "nothing deleted, nothing sent"
        );
        let gone = policy::rl_policy_get(&call(&[b"RL.POLICY.GET", name])).unwrap();
        assert_eq!(gone.reply, Reply::Nil);
    }

    #[test]
    fn bad_arguments_are_errors_before_any_key_is_opened() {
        let cases: [(Handler, &[&[u8]], &str); 7] = [
            (
                gcra::rl_gcra,
                &[b"RL.GCRA", b"k", b"0", b"5", b"1s"],
                "ERR invalid burst: expected an integer from 1 to 1000000000000",
            ),
            (
                gcra::cl_throttle,
                &[b"CL.THROTTLE", b"k", b"1"],
                "ERR wrong number of arguments for 'CL.THROTTLE': expected CL.THROTTLE key max_burst count \
                 period [quantity]",
            ),
            (
                fixed_window::rl_fixedwindow,
                &[b"RL.FIXEDWINDOW", b"k", b"5", b"1m", b"COST", b"-1"],
                "ERR invalid COST: expected an integer from 0 to 1000000000000",
            ),
            (
                warmup::rl_warmup,
                &[b"RL.WARMUP", b"k", b"10", b"1s", b"10s", b"COLDFACTOR", b"11"],
                "ERR invalid COLDFACTOR: expected an integer from 2 to 10",
            ),
            (
                warmup::rl_warmup,
                &[b"RL.WARMUP", b"k", b"10", b"1s", b"10s", b"DRYRUN", b"COLDFACTOR"],
                "ERR COLDFACTOR needs a value: an integer from 2 to 10",
            ),
            (
                limit::rl_limit,
                &[b"RL.LIMIT", b"k", b"nope"],
                "ERR no policy named 'nope': create it with RL.POLICY.SET nope rule [rule ...]",
            ),
            (
                inspect::rl_inspect,
                &[b"RL.INSPECT"],
                "ERR wrong number of arguments for 'RL.INSPECT': expected RL.INSPECT key",
            ),
        ];
        for (handler, args, expected) in cases {
            let error = handler(&call(args)).unwrap_err();
            assert_eq!(error.to_string(), expected, "{:?}", args[0]);
        }
    }
}
