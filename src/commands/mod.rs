//! The commands: each parses its arguments, then hands over to storage and an algorithm.
//!
//! Every command is registered through [`register`] from one table, [`COMMANDS`], and runs
//! behind [`dispatch`]: it reads the arguments without copying them, and turns an error into
//! an error reply and a panic into an error reply too (a panic must never reach Redis: it
//! would abort the server for every client). It also counts the call in the command's own
//! counters (`INFO ratelimit`, see [`crate::metrics`]) and publishes a client's denial as the
//! keyspace event `ratelimit.denied`. Both learn the decision from the admission reply, so a
//! command added to the table gets them by replying through `reply::admission`; one that
//! answers a DRYRUN or COST 0 also calls `metrics::preview()`, as `admission::run` does.

mod admission;
mod concurrency;
mod debug;
mod docs;
mod fixed_window;
mod gcra;
mod info;
mod inspect;
mod leaky_bucket;
mod policy;
mod replay;
mod sliding_log;
mod sliding_window;
mod token_bucket;

use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::slice;

use redis_module::raw;

pub use info::info;

use crate::error::Error;
use crate::metrics::{self, Stats};
use crate::reply;

pub type Ctx = *mut raw::RedisModuleCtx;
pub type RawString = *mut raw::RedisModuleString;
type Handler = fn(&Call) -> Result<(), Error>;
type RawHandler = extern "C" fn(Ctx, *mut RawString, c_int) -> c_int;

/// How a command runs: for a client, or replayed from the replication stream or the AOF
/// with the primary's clock reading and the key's absolute expiry time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Live,
    Replay { now_us: u64, expire_at_ms: u64 },
}

/// One call of a command.
pub struct Call<'a> {
    pub ctx: Ctx,
    /// The arguments as the command sees them: `[name, key, ...]`.
    pub args: &'a [&'a [u8]],
    /// The key argument as a Redis string (null when the call has no key).
    pub key: RawString,
    /// The argument vector Redis passed to the command, `args.len()` long: the client's own
    /// (`c->argv`), which propagation borrows (see `admission::propagate`).
    pub argv: *mut RawString,
    pub mode: Mode,
}

impl Call<'_> {
    /// The clock reading decisions use, and the real time in ms that expiry counts from: the
    /// module's clock for a client's call; the primary's reading when replayed (which also
    /// carries the absolute expiry, see [`Call::expire_at`]).
    pub fn clock(&self) -> (u64, u64) {
        match self.mode {
            Mode::Live => {
                let reading = crate::clock::read();
                (reading.now_us, reading.real_ms)
            }
            Mode::Replay { now_us, .. } => (now_us, 0),
        }
    }

    /// When a key written by this call expires: `reset_ms` after `real_ms` (from
    /// [`Call::clock`]), or the primary's absolute expiry when replayed.
    pub fn expire_at(&self, real_ms: u64, reset_ms: u64) -> u64 {
        match self.mode {
            Mode::Live => real_ms.saturating_add(reset_ms),
            Mode::Replay { expire_at_ms, .. } => expire_at_ms,
        }
    }
}

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
    raw: RawHandler,
}

/// A table entry: the command, its counters (a static of its own, so that every entry gets
/// them, whatever is added to the table), and the `extern "C"` entry point that runs its
/// handler behind [`dispatch`].
macro_rules! command {
    ($name:literal, $flags:literal, $acl:expr, $keys:expr, $when:expr, $replayable:expr, $handler:path) => {{
        static STATS: Stats = Stats::new();
        extern "C" fn trampoline(ctx: Ctx, argv: *mut RawString, argc: c_int) -> c_int {
            dispatch(ctx, argv, argc, $handler, &STATS)
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
            raw: trampoline as RawHandler,
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
/// Policies are server configuration: changing one needs more than `@write` (SPEC §7). The
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
    command!(c"rl.concurrency.acquire",  c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  concurrency::rl_concurrency_acquire),
    command!(c"rl.concurrency.release",  c"write fast",           WRITE,       KEY,      When::Always,      true,  concurrency::rl_concurrency_release),
    command!(c"rl.limit",                c"write deny-oom fast",  WRITE,       KEY,      When::Always,      true,  policy::rl_limit),
    command!(c"rl.policy.set",           c"write deny-oom",       CONFIG,      NO_KEYS,  When::Always,      false, policy::rl_policy_set),
    command!(c"rl.policy.get",           c"readonly fast",        READ_FAST,   NO_KEYS,  When::Always,      false, policy::rl_policy_get),
    command!(c"rl.policy.del",           c"write fast",           CONFIG,      NO_KEYS,  When::Always,      false, policy::rl_policy_del),
    command!(c"rl.policy.list",          c"readonly",             READ,        NO_KEYS,  When::Always,      false, policy::rl_policy_list),
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
        let (first, last, step) = command.keys;
        // SAFETY: called from the module's load hook with its context; the strings are
        // NUL-terminated literals.
        let status = unsafe {
            raw::RedisModule_CreateCommand.unwrap()(
                ctx,
                command.name.as_ptr(),
                Some(command.raw),
                command.flags.as_ptr(),
                first,
                last,
                step,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
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
    // SAFETY: called from the load hook with its context, after the command was created.
    unsafe {
        let (Some(set), Some(get)) = (
            raw::RedisModule_SetCommandACLCategories,
            raw::RedisModule_GetCommand,
        ) else {
            return;
        };
        let handle = get(ctx, command.name.as_ptr());
        if handle.is_null() || set(handle, command.acl.as_ptr()) != raw::REDISMODULE_OK as c_int {
            let message = format!("no ACL categories for {:?}", command.name);
            crate::log::log(ctx, crate::log::Level::Warning, &message);
        }
    }
}

/// The replayable command named `name` (any case).
pub fn replayable(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.replayable && c.name.to_bytes().eq_ignore_ascii_case(name))
}

/// Arguments above this count are read into a vector; below, onto the stack.
const STACK_ARGS: usize = 12;

/// Runs one call of a command: reads the arguments, runs the handler, replies with the
/// error it returned or with [`Error::Panic`] for a panic, counts the call in `stats`, and
/// publishes a denial (see [`notify_denied`]).
fn dispatch(ctx: Ctx, argv: *mut RawString, argc: c_int, handler: Handler, stats: &Stats) -> c_int {
    stats.call();
    let enclosing = metrics::begin();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let argc = usize::try_from(argc).unwrap_or(0);
        // SAFETY: Redis passes argc valid strings that outlive the call.
        let strings: &[RawString] = if argv.is_null() || argc == 0 {
            &[]
        } else {
            unsafe { slice::from_raw_parts(argv, argc) }
        };
        let mut stack: [&[u8]; STACK_ARGS] = [&[]; STACK_ARGS];
        let heap: Vec<&[u8]>;
        let args: &[&[u8]] = if strings.len() <= STACK_ARGS {
            for (slot, &s) in stack.iter_mut().zip(strings) {
                *slot = bytes(s);
            }
            &stack[..strings.len()]
        } else {
            heap = strings.iter().map(|&s| bytes(s)).collect();
            &heap
        };
        let call = Call {
            ctx,
            args,
            key: strings.get(1).copied().unwrap_or(std::ptr::null_mut()),
            argv,
            mode: Mode::Live,
        };
        handler(&call)
    }));
    let record = metrics::end(enclosing);
    match outcome {
        Ok(Ok(())) => {
            stats.outcome(record.outcome());
            if record.publishes_denial() && argc >= 2 && !argv.is_null() {
                // SAFETY: argv holds argc >= 2 strings; the key is the first argument.
                notify_denied(ctx, unsafe { *argv.add(1) });
            }
        }
        Ok(Err(e)) => {
            stats.error();
            reply::error(ctx, &e);
        }
        Err(_) => {
            stats.error();
            reply::error(ctx, &Error::Panic);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// The keyspace event a denial publishes on its key.
const DENIED_EVENT: &CStr = c"ratelimit.denied";

/// Publishes `ratelimit.denied` on `key`, a module keyspace event: Redis sends it to
/// `__keyspace@<db>__:<key>` and `__keyevent@<db>__:ratelimit.denied` only when
/// `notify-keyspace-events` has `d` (or `A`) with `K` or `E`, and drops it otherwise after
/// one bit test. Only for a client's own request: RL.REPLAY marks its calls (a replica or
/// the AOF replaying a BLOCK denial publishes nothing; the primary did, for its client).
fn notify_denied(ctx: Ctx, key: RawString) {
    if key.is_null() {
        return;
    }
    // SAFETY: ctx is the running command's context and key one of its arguments; the
    // function exists on every supported server, checked anyway.
    unsafe {
        if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
            notify(
                ctx,
                raw::REDISMODULE_NOTIFY_MODULE,
                DENIED_EVENT.as_ptr(),
                key,
            );
        }
    }
}

/// The bytes of a Redis string, valid while the string lives.
fn bytes<'a>(s: RawString) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: s is a live argument string; Redis returns its buffer and length.
    unsafe {
        let ptr = raw::RedisModule_StringPtrLen.unwrap()(s, &mut len);
        if ptr.is_null() {
            &[]
        } else {
            slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }
}

/// The context flags of the running command.
fn context_flags(ctx: Ctx) -> u32 {
    // SAFETY: ctx is the running command's context.
    unsafe { raw::RedisModule_GetContextFlags.map_or(0, |flags| flags(ctx) as u32) }
}
