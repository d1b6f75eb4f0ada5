//! Policies, the rules database: named lists of rules that RL.LIMIT checks a key against.
//!
//! Policies belong to the server, not to a key (like Redis functions): every node of a
//! cluster holds its own, so they are applied on every primary (see docs/policies.md), and they
//! reach replicas and persistence like this:
//!
//! - RL.POLICY.SET and RL.POLICY.DEL propagate verbatim to replicas and the AOF;
//! - the RDB (and the RDB preamble of an AOF rewrite) carries them as the data type's aux
//!   data, written before the keys and loaded in place of what the server held;
//! - an AOF rewrite without the RDB preamble writes only keys, so when an AOF rewrite forks,
//!   every policy is propagated again as RL.POLICY.SET: the rewrite's new incremental file,
//!   which is opened before the fork, starts by recreating them. Other forks (BGSAVE, a
//!   replica's full sync) start no new AOF and send nothing.
//!
//! A policy is replaced whole: RL.LIMIT takes the policy's rules (shared, counted by
//! reference) once, so it sees the old policy or the new one, never a mix.

use std::collections::BTreeMap;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redis_module::raw;

use crate::algorithms::policy::Rules;
use crate::args::rules;
use crate::config::SLIDING_LOG_LIMIT_CEILING;

/// The longest policy name, in bytes.
pub const MAX_NAME: usize = 256;

/// A policy: its rules, and the words RL.POLICY.SET gave them (what RL.POLICY.GET answers
/// and what persistence writes, parsed again when loaded).
#[derive(Debug)]
pub struct Policy {
    pub rules: Rules,
    pub words: Vec<Vec<u8>>,
}

type Table = BTreeMap<Vec<u8>, Arc<Policy>>;

static POLICIES: Mutex<Table> = Mutex::new(BTreeMap::new());

fn table() -> MutexGuard<'static, Table> {
    // A panic while the lock was held cannot leave the map half-changed (each change is
    // one insert or remove), so a poisoned lock is still a good table.
    POLICIES.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn get(name: &[u8]) -> Option<Arc<Policy>> {
    table().get(name).cloned()
}

/// Creates or replaces the policy `name`.
pub fn set(name: &[u8], policy: Policy) {
    table().insert(name.to_vec(), Arc::new(policy));
}

/// Deletes the policy `name`; whether it existed.
pub fn delete(name: &[u8]) -> bool {
    table().remove(name).is_some()
}

/// Every policy, in name order.
pub fn all() -> Vec<(Vec<u8>, Arc<Policy>)> {
    table()
        .iter()
        .map(|(name, policy)| (name.clone(), Arc::clone(policy)))
        .collect()
}

/// Subscribes to fork events (see the module documentation). A server without the event
/// API still persists policies in the RDB and the AOF preamble; that is logged.
pub fn init(ctx: *mut raw::RedisModuleCtx) {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FORK_CHILD,
        dataver: 1,
    };
    let async_load = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD,
        dataver: 1,
    };
    // SAFETY: called from the module's load hook with its context.
    let subscribed = unsafe {
        raw::RedisModule_SubscribeToServerEvent.is_some_and(|subscribe| {
            subscribe(ctx, async_load, Some(on_async_load));
            subscribe(ctx, event, Some(on_fork)) == raw::REDISMODULE_OK as c_int
        })
    };
    if !subscribed {
        crate::log::log(
            ctx,
            crate::log::Level::Warning,
            "no fork events on this server: policies persist through the RDB and the AOF \
             preamble, not through an AOF rewrite without the preamble",
        );
    }
}

/// Set when an AOF rewrite forked; cleared by [`flush_pending`].
static PENDING: AtomicBool = AtomicBool::new(false);

/// On the fork of an AOF rewrite: every policy is to be propagated again (see the module
/// docs), from the next context that may propagate: a timer set to fire at once, or an
/// earlier write of this module (which flushes first, so that nothing it propagates can
/// reach the new AOF before the policies it needs). Not from the event itself: it fires
/// inside the command that forked (BGREWRITEAOF, BGSAVE), and propagating from there would
/// propagate that command too.
unsafe extern "C" fn on_fork(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let _ = catch_unwind(|| {
        if subevent != raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
            return;
        }
        let (Some(flags), Some(timer)) = (
            raw::RedisModule_GetContextFlags,
            raw::RedisModule_CreateTimer,
        ) else {
            return;
        };
        if flags(ctx) as u32 & raw::REDISMODULE_CTX_FLAGS_AOF == 0
            || table().is_empty()
            || !aof_rewrite_in_progress(ctx)
        {
            return;
        }
        if !PENDING.swap(true, Ordering::Relaxed) {
            timer(ctx, 0, Some(on_timer), std::ptr::null_mut());
        }
    });
}

/// Whether the child just forked is an AOF rewrite, not an RDB save (BGSAVE, a replica's
/// full sync): only a rewrite starts a new AOF that needs the policies again. The fork
/// event does not say which; the server has set its child's type when the event fires, and
/// INFO's `aof_rewrite_in_progress` is that type. (The persistence event does not do: its
/// `AOF_START` subevent follows the RDB-preamble flag, so a rewrite without the preamble,
/// the one case that needs the policies, is not named; and a background save fires it in
/// the child, where nothing propagated reaches the AOF.) A server that cannot say counts
/// as a rewrite: policies sent again cost bytes, policies lost cost limits.
unsafe fn aof_rewrite_in_progress(ctx: *mut raw::RedisModuleCtx) -> bool {
    let (Some(info), Some(field), Some(free)) = (
        raw::RedisModule_GetServerInfo,
        raw::RedisModule_ServerInfoGetFieldSigned,
        raw::RedisModule_FreeServerInfo,
    ) else {
        return true;
    };
    let data = info(ctx, c"persistence".as_ptr());
    if data.is_null() {
        return true;
    }
    let mut error: c_int = 0;
    let in_progress = field(data, c"aof_rewrite_in_progress".as_ptr(), &mut error);
    free(ctx, data);
    error != 0 || in_progress != 0
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let _ = catch_unwind(|| flush_pending(ctx));
}

/// Propagates every policy as RL.POLICY.SET if a fork asked for it (see [`on_fork`]); a
/// single atomic load otherwise.
pub fn flush_pending(ctx: *mut raw::RedisModuleCtx) {
    if !PENDING.load(Ordering::Relaxed) || !PENDING.swap(false, Ordering::Relaxed) {
        return;
    }
    // SAFETY: ctx is a live context that may propagate (a command's or a timer's).
    unsafe {
        let (Some(replicate), Some(create), Some(free)) = (
            raw::RedisModule_Replicate,
            raw::RedisModule_CreateString,
            raw::RedisModule_FreeString,
        ) else {
            return;
        };
        for (name, policy) in all() {
            let words: Vec<*mut raw::RedisModuleString> = std::iter::once(&name)
                .chain(&policy.words)
                .map(|word| create(ctx, word.as_ptr().cast::<c_char>(), word.len()))
                .collect();
            replicate(
                ctx,
                c"RL.POLICY.SET".as_ptr(),
                c"v".as_ptr(),
                words.as_ptr(),
                words.len(),
            );
            for word in words {
                free(ctx, word);
            }
        }
    }
}

/// Writes every policy before the keys of an RDB: the count, then each name, word count and
/// words.
pub unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    let _ = catch_unwind(|| {
        let policies = all();
        raw::save_unsigned(rdb, policies.len() as u64);
        for (name, policy) in policies {
            raw::save_slice(rdb, &name);
            raw::save_unsigned(rdb, policy.words.len() as u64);
            for word in &policy.words {
                raw::save_slice(rdb, word);
            }
        }
    });
}

/// Reads what [`aux_save`] wrote and replaces the server's policies with it, all at once
/// (or, during a `repl-diskless-load swapdb` sync, when the sync completes: see
/// [`on_async_load`]). Anything that does not read or parse fails the load, with a line in
/// the server's log that says why; the policies held stay as they were.
pub unsafe extern "C" fn aux_load(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
    when: c_int,
) -> c_int {
    const ERR: c_int = raw::REDISMODULE_ERR as c_int;
    if encver != super::ENCODING_VERSION || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        log_io_error(
            rdb,
            "policies of an unknown encoding version or place in the file",
        );
        return ERR;
    }
    catch_unwind(|| match read_policies(rdb) {
        Ok(loaded) => {
            if ASYNC_LOADING.load(Ordering::Relaxed) {
                *staged() = Some(loaded);
            } else {
                *table() = loaded;
            }
            raw::REDISMODULE_OK as c_int
        }
        Err(why) => {
            log_io_error(rdb, why);
            ERR
        }
    })
    .unwrap_or(ERR)
}

/// The policies [`aux_save`] wrote, or what is wrong with them.
fn read_policies(rdb: *mut raw::RedisModuleIO) -> Result<Table, &'static str> {
    const SHORT: &str = "policies cut short (a short read)";
    let mut loaded = Table::new();
    let count = raw::load_unsigned(rdb).map_err(|_| SHORT)?;
    for _ in 0..count {
        let name = raw::load_string_buffer(rdb).map_err(|_| SHORT)?;
        let n = raw::load_unsigned(rdb).map_err(|_| SHORT)?;
        // A rule has at most five words; never allocate for a number alone.
        if n > 5 * crate::algorithms::policy::MAX_RULES as u64 {
            return Err("a policy with more words than its rules can have");
        }
        let mut words: Vec<Vec<u8>> = Vec::new();
        for _ in 0..n {
            let word = raw::load_string_buffer(rdb).map_err(|_| SHORT)?;
            words.push(word.as_ref().to_vec());
        }
        let name = name.as_ref().to_vec();
        if !(1..=MAX_NAME).contains(&name.len()) {
            return Err("a policy name of no or too many bytes");
        }
        let borrowed: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let rules = rules::parse_saved(&borrowed, SLIDING_LOG_LIMIT_CEILING)
            .ok_or("a policy whose rules do not parse")?;
        loaded.insert(name, Arc::new(Policy { rules, words }));
    }
    Ok(loaded)
}

/// Logs why the policies in an RDB were refused (the server then names the module and
/// stops the load).
fn log_io_error(rdb: *mut raw::RedisModuleIO, why: &str) {
    let Ok(text) = std::ffi::CString::new(format!("refusing the RDB's policies: {why}")) else {
        return;
    };
    // SAFETY: the format is "%s" with one NUL-terminated argument; rdb is the live IO.
    unsafe {
        if let Some(log) = raw::RedisModule_LogIOError {
            log(rdb, c"warning".as_ptr(), c"%s".as_ptr(), text.as_ptr());
        }
    }
}

/// Set while a `repl-diskless-load swapdb` sync loads in the background: the server still
/// serves its old data, so the policies the sync brings wait in [`STAGED`] until it
/// completes (and are dropped if it is aborted).
static ASYNC_LOADING: AtomicBool = AtomicBool::new(false);
static STAGED: Mutex<Option<Table>> = Mutex::new(None);

fn staged() -> MutexGuard<'static, Option<Table>> {
    STAGED.lock().unwrap_or_else(PoisonError::into_inner)
}

unsafe extern "C" fn on_async_load(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let _ = catch_unwind(|| match subevent {
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED => {
            *staged() = None;
            ASYNC_LOADING.store(true, Ordering::Relaxed);
        }
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED => {
            ASYNC_LOADING.store(false, Ordering::Relaxed);
            if let Some(loaded) = staged().take() {
                *table() = loaded;
            }
        }
        _ => {
            ASYNC_LOADING.store(false, Ordering::Relaxed);
            *staged() = None;
        }
    });
}
