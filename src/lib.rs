//! ratelimit: native, atomic rate limiting for Redis.
//!
//! The layout, from the inside out; each room uses only rooms above it in this list (and
//! none takes anything back from this file):
//! - [`algorithms`]: the crate ratelimit-algorithms (algorithms/): pure state machines,
//!   `(params, state, now, cost) -> (decision, state)`, and the limits (largest count,
//!   longest duration); no Redis, no clock, no I/O, no panics, and no command names.
//! - [`digits`]: an integer as Redis writes it, read once for args and config (a leaf).
//! - [`error`]: every error text, spelled once (a leaf: it uses only the limits).
//! - [`args`]: the grammar: counts, durations, options, the cursor a command reads its
//!   arguments with, each algorithm's parameters, the policy rules, and what a command's
//!   syntax is made of.
//! - [`config`]: the settings and the load arguments.
//! - [`clock`]: the one place time enters (the server's clock is handed in).
//! - [`redis`]: the one room that calls the Redis module API, behind safe types tied to the
//!   lifetime of what Redis lent (a context, a key, a stream); it lowers a command's syntax
//!   to COMMAND DOCS.
//! - [`log`], [`compat`], [`metrics`]: the server log, the API fallbacks, and the counters.
//! - [`response`]: what a handler returns, and its rendering (RESP2/RESP3).
//! - [`storage`]: the data type and the only code that opens keys or sets expiry.
//! - [`denials`]: RL.TOP's summary of the keys denied most.
//! - [`cluster`]: policies that follow a Redis Cluster: each change sent to every node, and a
//!   digest exchange once a second that brings a node that missed any up to date, over the
//!   cluster bus (its wire format in `cluster/wire.rs`).
//! - [`dispatch`]: one call of a command ([`dispatch::Call`]) and its running: behind the
//!   panic guard, then what its response says: propagates (RL.REPLAY's text), renders it,
//!   counts it ([`metrics`]), publishes a denial.
//! - [`commands`]: one entry per command (name, flags, syntax, handler...) and its handler:
//!   parse, then storage, algorithm, storage; each returns a [`response`]. COMMAND DOCS from
//!   the entries, and the INFO sections.
//!
//! This file holds the registration only: the `redis_module!` table, the load hook and the
//! module options.
//!
//! Unsafe code is in [`redis`], and in storage's value pointer and data-type callbacks
//! (`storage/pointer.rs`, `storage/data_type.rs`) only, and the compiler keeps it there: the
//! crate denies `unsafe_code`, and only those three rooms allow it. Every operation it does is
//! in an `unsafe` block with its `// SAFETY:` reason, also inside an `unsafe fn`.

#![deny(unsafe_code, unsafe_op_in_unsafe_fn)]
// Every unsafe block says why it is sound, every unsafe fn what its caller must hold (clippy,
// which `make lint` and `make test` run with warnings denied).
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
// A cdylib: its only public API is the one Redis loads. Its docs are the map of its private
// rooms, built with `--document-private-items` (`make lint`), so they link to private items.
#![allow(rustdoc::private_intra_doc_links)]

mod args;
mod clock;
mod cluster;
mod commands;
mod compat;
mod config;
mod denials;
mod digits;
mod dispatch;
mod error;
mod log;
mod metrics;
// The module API's room: every call into Redis (see its docs).
#[allow(unsafe_code)]
mod redis;
mod response;
mod storage;

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::configuration::ConfigurationFlags;
// The `info:` handler's expansion names InfoContext and RedisResult.
use redis_module::{raw, redis_module, Context, InfoContext, RedisResult, RedisString, Status};

// The Redis allocator aborts outside a server: unit and property tests use the system one.
#[cfg(not(test))]
use redis_module::alloc::RedisAlloc as ModuleAllocator;
#[cfg(test)]
use std::alloc::System as ModuleAllocator;

use commands::info;
use storage::RL_TYPE;

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
    if let Err(message) = config::apply_load_args(args) {
        log::log(
            Some(ctx),
            log::Level::Warning,
            &format!("refusing to load: {message}"),
        );
        return Status::Err;
    }
    compat::log_fallbacks(ctx);
    storage::count_key_overhead(ctx.embeds_key_names());
    set_module_options(ctx);
    if config::debug_clock() {
        clock::enable_debug();
    }
    match commands::register(ctx, config::cell_compat()) {
        Ok(()) => {
            storage::policies::init(ctx);
            storage::eviction::init(ctx);
            cluster::init(ctx);
            if !redis::watch_resetstat(ctx, commands::on_resetstat) {
                log::log(
                    Some(ctx),
                    log::Level::Warning,
                    "no command filter on this server: CONFIG RESETSTAT leaves the module's counters as they are",
                );
            }
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

/// The module's version as `MODULE LIST` shows it: `Cargo.toml`'s major·10000 + minor·100 +
/// patch (0.1.0 is 100), the one version of the project.
pub const MODULE_VERSION: i32 = {
    const fn number(text: &str) -> i32 {
        let bytes = text.as_bytes();
        let mut n = 0;
        let mut i = 0;
        while i < bytes.len() {
            n = n * 10 + (bytes[i] - b'0') as i32;
            i += 1;
        }
        n
    }
    number(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + number(env!("CARGO_PKG_VERSION_PATCH"))
};

redis_module! {
    name: "ratelimit",
    version: MODULE_VERSION,
    allocator: (ModuleAllocator, ModuleAllocator),
    data_types: [RL_TYPE],
    init: init,
    info: info,
    configurations: [
        i64: [
            [
                "sliding-log-max-limit",
                &config::SLIDING_LOG_MAX_LIMIT,
                config::SLIDING_LOG_MAX_LIMIT_DEFAULT,
                1,
                config::SLIDING_LOG_LIMIT_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "concurrency-max-limit",
                &config::CONCURRENCY_MAX_LIMIT,
                config::CONCURRENCY_MAX_LIMIT_DEFAULT,
                1,
                config::CONCURRENCY_LIMIT_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "top-size",
                &config::TOP_SIZE,
                config::TOP_SIZE_DEFAULT,
                0,
                config::TOP_SIZE_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "top-period",
                &config::TOP_PERIOD,
                config::TOP_PERIOD_DEFAULT,
                1,
                config::TOP_PERIOD_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "policy-max-ahead",
                &config::POLICY_MAX_AHEAD,
                config::POLICY_MAX_AHEAD_DEFAULT,
                1,
                config::POLICY_MAX_AHEAD_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "max-policies",
                &config::MAX_POLICIES,
                config::MAX_POLICIES_DEFAULT,
                1,
                config::MAX_POLICIES_CEILING as i64,
                ConfigurationFlags::DEFAULT,
                None
            ],
        ],
        string: [],
        bool: [
            ["cell-compat", &config::CELL_COMPAT, true, ConfigurationFlags::IMMUTABLE, None],
            ["debug-clock", &config::DEBUG_CLOCK, false, ConfigurationFlags::IMMUTABLE, None],
        ],
        enum: [],
        // Load arguments are checked and applied by `init` (see apply_load_args).
        module_args_as_configuration: false,
    ]
}
