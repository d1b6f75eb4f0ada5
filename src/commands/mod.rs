//! The commands: each parses its arguments and returns a [`Response`], what happened; the
//! dispatcher ([`crate::dispatch`]) renders it, counts it, publishes a denial and propagates
//! the write. No handler writes a reply or calls Redis itself.
//!
//! Each command is one entry, a [`Command`] written with [`command!`] above its handler:
//! its name (once), flags, ACL categories, key positions, when it is registered, whether
//! RL.REPLAY may replay it, its syntax (COMMAND DOCS, the arity errors, the cursor its
//! handler reads its arguments with) and its handler. [`register`] registers every entry of
//! [`COMMANDS`]; each runs its handler through [`crate::dispatch::run`].
//!
//! [`Response`]: crate::response::Response

mod admission;
mod concurrency;
mod counter;
mod debug;
mod docs;
#[cfg(test)]
mod error_vectors;
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

use crate::args::syntax::{Name, Syntax};
use crate::dispatch::Handler;
use crate::log;
use crate::metrics::Stats;
use crate::redis::{self, CommandHandle, Ctx};

/// When a command is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// Only with `cell-compat yes` (the default).
    CellCompat,
}

/// One command of the module: everything about it, in one entry (see [`command!`]).
pub struct Command {
    /// Its name, summary, complexity, key use and arguments.
    pub syntax: Syntax,
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

impl Command {
    pub const fn name(&self) -> Name {
        self.syntax.name
    }

    /// Its name as RL.REPLAY carries a write of it to replicas and the AOF (upper case).
    pub const fn replay_name(&self) -> &'static CStr {
        self.syntax.name.upper()
    }
}

/// A command's entry: its fields, in this order, with its syntax's (`summary`,
/// `complexity`, `key`, `args`, and `note` if any) among them; the entry gets its counters
/// (a static of its own, so that no entry can lack them) and the `extern "C"` function that
/// runs its handler through the dispatcher.
macro_rules! command {
    (
        name: $name:expr,
        flags: $flags:expr,
        acl: $acl:expr,
        keys: $keys:expr,
        when: $when:expr,
        replayable: $replayable:expr,
        summary: $summary:expr,
        complexity: $complexity:expr,
        key: $key:expr,
        args: $args:expr,
        $(note: $note:expr,)?
        handler: $handler:path $(,)?
    ) => {{
        static STATS: $crate::metrics::Stats = $crate::metrics::Stats::new();
        struct Func;
        impl $crate::redis::CmdFunc for Func {
            fn run(ctx: $crate::redis::Ctx<'_>, argv: $crate::redis::Argv<'_>) {
                $crate::dispatch::run(ctx, argv, $handler, &STATS)
            }
        }
        $crate::commands::Command {
            syntax: $crate::args::syntax::Syntax::new($name, $summary, $complexity, $key, $args)
                $(.note($note))?,
            flags: $flags,
            acl: $acl,
            keys: $keys,
            when: $when,
            replayable: $replayable,
            handler: $handler,
            stats: &STATS,
            cmd_func: $crate::redis::cmd_func::<Func>,
        }
    }};
}
use command;

/// The key is the first argument: first, last, step.
const ONE_KEY: (c_int, c_int, c_int) = (1, 1, 1);
const NO_KEYS: (c_int, c_int, c_int) = (0, 0, 0);

/// ACL categories (Redis 7.2 and later). They are set, not implied by the flags: on Redis 8.2
/// and Valkey 8.1 a module command is in exactly the categories it is given, whatever its
/// flags (`tests/integration/security.rs` checks `ACL CAT` on both).
const WRITE: &CStr = c"write fast";
const READ: &CStr = c"read";
const READ_FAST: &CStr = c"read fast";
/// Policies are server configuration: changing one needs more than `@write` (docs/security.md). The
/// commands stay flagged `write`, so a read-only replica refuses them to its clients and the
/// primary propagates them like any write.
const CONFIG: &CStr = c"admin dangerous";
/// The debug clock and the internal commands.
const PRIVILEGED: &CStr = c"admin dangerous";

/// The complexity of most commands.
const O1: &CStr = c"O(1)";

/// Every command of the module, in the order they are registered (and listed by INFO).
pub static COMMANDS: [&Command; 27] = [
    &gcra::RL_GCRA,
    &gcra::CL_THROTTLE,
    &token_bucket::RL_TOKENBUCKET,
    &leaky_bucket::RL_LEAKYBUCKET,
    &fixed_window::RL_FIXEDWINDOW,
    &sliding_window::RL_SLIDINGWINDOW,
    &sliding_log::RL_SLIDINGLOG,
    &warmup::RL_WARMUP,
    &concurrency::RL_CONCURRENCY_ACQUIRE,
    &concurrency::RL_CONCURRENCY_RELEASE,
    &limit::RL_LIMIT,
    &refund::RL_REFUND,
    &counter::RL_COUNTER,
    &policy::RL_POLICY_SET,
    &policy::RL_POLICY_GET,
    &policy::RL_POLICY_DEL,
    &policy::RL_POLICY_LIST,
    &policy::RL_POLICY_SYNC,
    &policy::RL_POLICY_FORCE,
    &top::RL_TOP,
    &inspect::RL_INSPECT,
    &debug::RL_DEBUG_CLOCK,
    &debug::RL_DEBUG_PANIC,
    &debug::RL_DEBUG_CLUSTERMSG,
    &debug::RL_DEBUG_POLICYVERSION,
    &replay::RL_REPLAY,
    &replay::RL_LOADSTATE,
];

/// Registers the commands of [`COMMANDS`]; `cell_compat` decides CL.THROTTLE.
pub fn register(ctx: Ctx, cell_compat: bool) -> Result<(), String> {
    for command in COMMANDS {
        if command.when == When::CellCompat && !cell_compat {
            continue;
        }
        let name = command.name().lower();
        if !redis::create_command(ctx, name, command.cmd_func, command.flags, command.keys) {
            return Err(format!("could not register {name:?}"));
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
    let name = command.name().lower();
    if redis::set_acl_categories(ctx, name, command.acl) == Some(false) {
        let message = format!("no ACL categories for {name:?}");
        log::log(Some(ctx), log::Level::Warning, &message);
    }
}

/// The replayable command named `name` (any case).
pub fn replayable(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .copied()
        .find(|c| c.replayable && c.name().lower().to_bytes().eq_ignore_ascii_case(name))
}

/// Handlers without a server: a call's arguments in, a [`Response`] out. The context is
/// detached (no server behind it), so these are the handlers and paths that answer before
/// opening a key.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{Call, Mode};
    use crate::error::Error;
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

    /// The usage texts the arity errors showed when each command spelled its own; the
    /// integration tests assert a few of them through a server, this pins them all.
    #[test]
    fn usages_render_as_they_were_written() {
        let expected = [
            (&gcra::RL_GCRA, "RL.GCRA", "key burst rate period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (&gcra::CL_THROTTLE, "CL.THROTTLE", "key max_burst count period [quantity]"),
            (
                &token_bucket::RL_TOKENBUCKET,
                "RL.TOKENBUCKET",
                "key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
            ),
            (
                &leaky_bucket::RL_LEAKYBUCKET,
                "RL.LEAKYBUCKET",
                "key capacity leak_amount leak_period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
            ),
            (&fixed_window::RL_FIXEDWINDOW, "RL.FIXEDWINDOW", "key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (&sliding_window::RL_SLIDINGWINDOW, "RL.SLIDINGWINDOW", "key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (&sliding_log::RL_SLIDINGLOG, "RL.SLIDINGLOG", "key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (
                &warmup::RL_WARMUP,
                "RL.WARMUP",
                "key rate period warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
            ),
            (&concurrency::RL_CONCURRENCY_ACQUIRE, "RL.CONCURRENCY.ACQUIRE", "key limit lease [ID token] [DRYRUN] [SHADOW] [ADAPTIVE <AIMD | VEGAS | GRADIENT2>] [MIN min] [MAX max]"),
            (&concurrency::RL_CONCURRENCY_RELEASE, "RL.CONCURRENCY.RELEASE", "key token [RTT rtt] [DROPPED]"),
            (&inspect::RL_INSPECT, "RL.INSPECT", "key"),
            (&refund::RL_REFUND, "RL.REFUND", "key units [DRYRUN]"),
            (&counter::RL_COUNTER, "RL.COUNTER", "key window [BY n] [XX]"),
            (&limit::RL_LIMIT, "RL.LIMIT", "key policy [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (
                &policy::RL_POLICY_SET,
                "RL.POLICY.SET",
                "name [SHADOW] algorithm argument [argument ...] [[SHADOW] algorithm argument [argument ...] ...], \
                 each rule an algorithm and its arguments, as in GCRA 10 10 1s FIXEDWINDOW 5000 1d \
                 (SHADOW before a rule: checked and counted, never denying)",
            ),
            (&policy::RL_POLICY_GET, "RL.POLICY.GET", "name"),
            (&policy::RL_POLICY_DEL, "RL.POLICY.DEL", "name"),
            (&policy::RL_POLICY_LIST, "RL.POLICY.LIST", "(no arguments)"),
            (&top::RL_TOP, "RL.TOP", "[COUNT k]"),
            (&replay::RL_REPLAY, "RL.REPLAY", "key now_us:expire_at_ms:command:arg [arg ...]"),
            (&replay::RL_LOADSTATE, "RL.LOADSTATE", "key state"),
        ];
        for (entry, command, usage) in expected {
            let usage = usage.to_string();
            assert_eq!(entry.syntax.arity(), Error::Arity { command, usage });
        }
    }

    #[test]
    fn required_counts_the_arguments_that_are_not_optional() {
        assert_eq!(gcra::RL_GCRA.syntax.required, 4);
        assert_eq!(fixed_window::RL_FIXEDWINDOW.syntax.required, 3);
        assert_eq!(concurrency::RL_CONCURRENCY_ACQUIRE.syntax.required, 3);
        assert_eq!(limit::RL_LIMIT.syntax.required, 2);
        assert_eq!(
            replayable(b"RL.GCRA").map(|c| c.name().lower()),
            Some(c"rl.gcra")
        );
        assert!(replayable(b"RL.POLICY.SET").is_none());
    }

    #[test]
    fn most_counts_every_optional_word() {
        let expected = [
            (&refund::RL_REFUND, Some(3)),
            (&gcra::CL_THROTTLE, Some(5)),
            (&inspect::RL_INSPECT, Some(1)),
            (&concurrency::RL_CONCURRENCY_RELEASE, Some(5)),
            (&policy::RL_POLICY_LIST, Some(0)),
            (&top::RL_TOP, Some(2)),
            (&debug::RL_DEBUG_CLOCK, Some(2)),
            (&gcra::RL_GCRA, Some(10)),
            (&policy::RL_POLICY_SET, None),
            (&replay::RL_REPLAY, None),
        ];
        for (entry, most) in expected {
            assert_eq!(entry.syntax.most, most, "{}", entry.name());
        }
    }

    /// The names the errors give a key's algorithm ("the key holds RL.GCRA state, not
    /// RL.TOKENBUCKET"), byte for byte those the algorithms crate used to spell.
    #[test]
    fn each_algorithm_is_named_by_its_command() {
        use crate::args::AlgorithmCommand;
        use algorithms::{
            concurrency::Concurrency, fixed_window::FixedWindow, gcra::Gcra,
            leaky_bucket::LeakyBucket, rule_set::RuleSet, sliding_log::SlidingLog,
            sliding_window::SlidingWindow, token_bucket::TokenBucket, warmup::Warmup,
        };
        let names = [
            Gcra::NAME,
            TokenBucket::NAME,
            LeakyBucket::NAME,
            FixedWindow::NAME,
            SlidingWindow::NAME,
            SlidingLog::NAME,
            Concurrency::NAME,
            RuleSet::NAME,
            Warmup::NAME,
        ];
        let expected = [
            "RL.GCRA",
            "RL.TOKENBUCKET",
            "RL.LEAKYBUCKET",
            "RL.FIXEDWINDOW",
            "RL.SLIDINGWINDOW",
            "RL.SLIDINGLOG",
            "RL.CONCURRENCY.ACQUIRE",
            "RL.LIMIT",
            "RL.WARMUP",
        ];
        assert_eq!(names, expected);
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
