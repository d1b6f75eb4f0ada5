//! ratelimit: native, atomic rate limiting for Redis.
//!
//! The layout, from the inside out:
//! - [`algorithms`]: the crate ratelimit-algorithms (algorithms/): pure state machines,
//!   `(params, state, now, cost) -> (decision, state)`; no Redis, no clock, no I/O, no panics.
//! - [`args`], [`error`], [`clock`]: the grammar, the error texts and the one place time
//!   enters, each written once.
//! - [`redis`]: the one room that calls the Redis module API, behind safe types tied to the
//!   lifetime of what Redis lent (a context, a key, a stream).
//! - [`storage`]: the data type and the only code that opens keys or sets expiry.
//! - [`commands`]: parse, then storage, algorithm, storage; each returns a [`response`].
//! - [`dispatch`]: runs a command behind the panic guard and does what its response says:
//!   propagates, renders it ([`reply`]), counts it ([`metrics`]), publishes a denial.
//!
//! This file holds the registration and the module's settings only.

// The pure algorithms are a crate of their own (algorithms/); `crate::algorithms::...` names
// them as before.
use ratelimit_algorithms as algorithms;
mod args;
mod clock;
mod commands;
mod compat;
mod dispatch;
mod error;
mod log;
mod metrics;
mod redis;
mod reply;
mod response;
mod storage;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis_module::configuration::ConfigurationFlags;
// The `info:` handler's expansion names InfoContext and RedisResult.
use redis_module::{raw, redis_module, Context, InfoContext, RedisResult, RedisString, Status};

// The Redis allocator aborts outside a server: unit and property tests use the system one.
#[cfg(not(test))]
use redis_module::alloc::RedisAlloc as ModuleAllocator;
#[cfg(test)]
use std::alloc::System as ModuleAllocator;

use metrics::info;
use storage::RL_TYPE;

/// `cell-compat yes|no` (load time only, default yes): register CL.THROTTLE.
static CELL_COMPAT: AtomicBool = AtomicBool::new(true);
/// `debug-clock yes|no` (load time only, default no): allow RL.DEBUG.* commands.
static DEBUG_CLOCK: AtomicBool = AtomicBool::new(false);

/// `sliding-log-max-limit n` (load time and CONFIG SET): the largest RL.SLIDINGLOG limit.
/// The log keeps a few bytes per admitted unit, so this bounds one key's memory.
static SLIDING_LOG_MAX_LIMIT: AtomicI64 = AtomicI64::new(SLIDING_LOG_MAX_LIMIT_DEFAULT);
const SLIDING_LOG_MAX_LIMIT_DEFAULT: i64 = 1_000_000;
/// The highest value the setting takes (an admitted count must fit the log's 32-bit words).
pub(crate) const SLIDING_LOG_LIMIT_CEILING: u64 = 1_000_000_000;

pub(crate) fn sliding_log_max_limit() -> u64 {
    u64::try_from(SLIDING_LOG_MAX_LIMIT.load(Ordering::Relaxed)).unwrap_or(1)
}

/// `concurrency-max-limit n` (load time and CONFIG SET): the largest RL.CONCURRENCY.ACQUIRE
/// limit. A key holds at most that many leases, so this bounds one key's memory and the
/// work a call that drops ended leases does.
static CONCURRENCY_MAX_LIMIT: AtomicI64 = AtomicI64::new(CONCURRENCY_MAX_LIMIT_DEFAULT);
const CONCURRENCY_MAX_LIMIT_DEFAULT: i64 = 100_000;
/// The highest value the setting takes.
pub(crate) const CONCURRENCY_LIMIT_CEILING: u64 = 10_000_000;

pub(crate) fn concurrency_max_limit() -> u64 {
    u64::try_from(CONCURRENCY_MAX_LIMIT.load(Ordering::Relaxed)).unwrap_or(1)
}

/// The load arguments the module accepts: the flags take `yes` or `no`, the numbers a whole
/// number in range.
const FLAGS: [(&str, &AtomicBool); 2] =
    [("cell-compat", &CELL_COMPAT), ("debug-clock", &DEBUG_CLOCK)];
const NUMBERS: [(&str, &AtomicI64, u64); 2] = [
    (
        "sliding-log-max-limit",
        &SLIDING_LOG_MAX_LIMIT,
        SLIDING_LOG_LIMIT_CEILING,
    ),
    (
        "concurrency-max-limit",
        &CONCURRENCY_MAX_LIMIT,
        CONCURRENCY_LIMIT_CEILING,
    ),
];

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // A panic at load would take the server down with it.
    catch_unwind(AssertUnwindSafe(|| load(ctx, args))).unwrap_or(Status::Err)
}

fn load(ctx: &Context, args: &[RedisString]) -> Status {
    let Some(ctx) = redis::Ctx::from_context(ctx) else {
        return Status::Err;
    };
    if let Err(missing) = redis::check_api() {
        log::log(
            Some(ctx),
            log::Level::Warning,
            &format!("refusing to load: this server has no {missing}"),
        );
        return Status::Err;
    }
    if let Err(message) = apply_load_args(args) {
        log::log(
            Some(ctx),
            log::Level::Warning,
            &format!("refusing to load: {message}"),
        );
        return Status::Err;
    }
    compat::log_fallbacks(ctx);
    set_module_options(ctx);
    if DEBUG_CLOCK.load(Ordering::Relaxed) {
        clock::enable_debug();
    }
    match commands::register(ctx, CELL_COMPAT.load(Ordering::Relaxed)) {
        Ok(()) => {
            storage::policies::init(ctx);
            Status::Ok
        }
        Err(message) => {
            log::log(
                Some(ctx),
                log::Level::Warning,
                &format!("refusing to load: {message}"),
            );
            Status::Err
        }
    }
}

/// The module's options, all set in one call (each call replaces the last):
/// - `HANDLE_IO_ERRORS`: a read error in `rdb_load` or `aux_load` (a damaged `RESTORE`
///   payload, RDB file or sync stream) is the load's error, not a server panic; it is also
///   what lets replicas load a sync without a temporary file (diskless load);
/// - `HANDLE_REPL_ASYNC_LOAD`: policies loaded during a `repl-diskless-load swapdb` sync
///   wait until the sync completes (see `storage::policies`);
/// - `NO_IMPLICIT_SIGNAL_MODIFIED`: a key opened for writing but left unchanged (a denial, a
///   DRYRUN, COST 0) aborts no other client's `WATCH` and invalidates no tracked key; storage
///   signals the keys it really changes.
fn set_module_options(ctx: redis::Ctx) {
    ctx.set_module_options(
        raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
            | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD
            | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED,
    );
}

/// Checks the load arguments, pairs `name value`, and then sets them. Anything wrong
/// refuses the load (and sets nothing), so that a typo never silently runs with a default.
///
/// They are applied here rather than as the settings' registered defaults
/// (`module_args_as_configuration`), because the crate parses those first and refuses a bad
/// number with a message that names neither the argument nor the value. Redis has already
/// set every setting to its default or to its `ratelimit.<name>` directive (from redis.conf
/// or the command line); a load argument overrides the directive.
fn apply_load_args(args: &[RedisString]) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err("load arguments come in pairs: name value".into());
    }
    let mut flags = Vec::new();
    let mut numbers = Vec::new();
    for pair in args.chunks(2) {
        let name = pair[0].as_slice();
        let value = pair[1].as_slice();
        let shown = || error::quote(value);
        if let Some((name, setting)) = FLAGS.iter().find(|(n, _)| n.as_bytes() == name) {
            let on = match value {
                b"yes" => true,
                b"no" => false,
                _ => return Err(format!("{name} takes yes or no, not '{}'", shown())),
            };
            flags.push((*setting, on));
        } else if let Some((name, setting, max)) =
            NUMBERS.iter().find(|(n, _, _)| n.as_bytes() == name)
        {
            // Written as Redis writes integers: no sign, no leading zero (SPEC §1).
            let n = args::count(value, name, 1, *max)
                .ok()
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "{name} takes a whole number from 1 to {max}, not '{}'",
                        shown()
                    )
                })?;
            numbers.push((*setting, n));
        } else {
            let names: Vec<&str> = FLAGS
                .iter()
                .map(|(n, _)| *n)
                .chain(NUMBERS.iter().map(|(n, _, _)| *n))
                .collect();
            return Err(format!(
                "unknown load argument '{}': expected one of {}",
                error::quote(name),
                names.join(", ")
            ));
        }
    }
    for (setting, on) in flags {
        setting.store(on, Ordering::Relaxed);
    }
    for (setting, n) in numbers {
        setting.store(n, Ordering::Relaxed);
    }
    Ok(())
}

redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (ModuleAllocator, ModuleAllocator),
    data_types: [RL_TYPE],
    init: init,
    info: info,
    configurations: [
        i64: [
            [
                "sliding-log-max-limit",
                &SLIDING_LOG_MAX_LIMIT,
                SLIDING_LOG_MAX_LIMIT_DEFAULT,
                1,
                SLIDING_LOG_LIMIT_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "concurrency-max-limit",
                &CONCURRENCY_MAX_LIMIT,
                CONCURRENCY_MAX_LIMIT_DEFAULT,
                1,
                CONCURRENCY_LIMIT_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
        ],
        string: [],
        bool: [
            ["cell-compat", &CELL_COMPAT, true, ConfigurationFlags::IMMUTABLE, None],
            ["debug-clock", &DEBUG_CLOCK, false, ConfigurationFlags::IMMUTABLE, None],
        ],
        enum: [],
        // Load arguments are checked and applied by `init` (see apply_load_args).
        module_args_as_configuration: false,
    ]
}
