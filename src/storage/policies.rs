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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redis_module::raw;

use crate::args::rules;
use crate::config::SLIDING_LOG_LIMIT_CEILING;
use crate::metrics::PolicyStats;
use crate::redis::{Ctx, Io, ServerEvent, Timer};
use algorithms::rule_set::Rules;

/// The longest policy name, in bytes.
pub const MAX_NAME: usize = 256;

/// A policy: its rules, and the words RL.POLICY.SET gave them (what RL.POLICY.GET answers
/// and what persistence writes, parsed again when loaded).
pub struct Policy {
    pub rules: Rules,
    /// Bit `i` set: rule `i` is a shadow rule.
    pub shadow: u32,
    pub words: Vec<Vec<u8>>,
    /// Its counters (`INFO ratelimit`).
    pub stats: PolicyStats,
}

impl Policy {
    pub fn new(rules: Rules, shadow: u32, words: Vec<Vec<u8>>) -> Policy {
        let stats = PolicyStats::new(rules.len());
        Policy {
            rules,
            shadow,
            words,
            stats,
        }
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.rules)
            .field("shadow", &self.shadow)
            .field("words", &self.words)
            .finish()
    }
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

/// Creates or replaces the policy `name`; a replaced policy's counters carry over.
pub fn set(name: &[u8], policy: Policy) {
    let mut table = table();
    if let Some(old) = table.get(name) {
        policy.stats.carry(&old.stats);
    }
    table.insert(name.to_vec(), Arc::new(policy));
}

/// Replaces every policy with `loaded` (an RDB's), the counters of a name kept carrying over.
fn replace_all(loaded: Table) {
    let mut table = table();
    for (name, policy) in loaded.iter() {
        if let Some(old) = table.get(name) {
            policy.stats.carry(&old.stats);
        }
    }
    *table = loaded;
}

/// Runs `f` on every policy, in name order, under the table's lock (INFO: no copy of the
/// table).
pub fn for_each(mut f: impl FnMut(&[u8], &Policy)) {
    for (name, policy) in table().iter() {
        f(name, policy);
    }
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
pub fn init(ctx: Ctx) {
    ctx.subscribe::<AsyncLoad>();
    if !ctx.subscribe::<Fork>() {
        crate::log::log(
            Some(ctx),
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
struct Fork;

impl ServerEvent for Fork {
    const EVENT: u64 = raw::REDISMODULE_EVENT_FORK_CHILD;

    fn fired(ctx: Ctx<'_>, subevent: u64) {
        if subevent != raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
            return;
        }
        if !ctx.aof_on() || table().is_empty() || !aof_rewrite_in_progress(ctx) {
            return;
        }
        if !PENDING.swap(true, Ordering::Relaxed) {
            ctx.timer::<Repropagate>(0);
        }
    }
}

/// Whether the child just forked is an AOF rewrite, not an RDB save (BGSAVE, a replica's
/// full sync): only a rewrite starts a new AOF that needs the policies again. The fork
/// event does not say which; the server has set its child's type when the event fires, and
/// INFO's `aof_rewrite_in_progress` is that type. (The persistence event does not do: its
/// `AOF_START` subevent follows the RDB-preamble flag, so a rewrite without the preamble,
/// the one case that needs the policies, is not named; and a background save fires it in
/// the child, where nothing propagated reaches the AOF.) A server that cannot say counts
/// as a rewrite: policies sent again cost bytes, policies lost cost limits.
fn aof_rewrite_in_progress(ctx: Ctx) -> bool {
    ctx.server_info_signed(c"persistence", c"aof_rewrite_in_progress")
        .is_none_or(|in_progress| in_progress != 0)
}

/// The timer [`Fork`] sets: [`flush_pending`].
struct Repropagate;

impl Timer for Repropagate {
    fn fire(ctx: Ctx<'_>) {
        flush_pending(ctx);
    }
}

/// Propagates every policy as RL.POLICY.SET if a fork asked for it (see [`Fork`]); a
/// single atomic load otherwise. `ctx` is a context that may propagate (a command's or a
/// timer's).
pub fn flush_pending(ctx: Ctx) {
    if !PENDING.load(Ordering::Relaxed) || !PENDING.swap(false, Ordering::Relaxed) {
        return;
    }
    for (name, policy) in all() {
        let words: Vec<&[u8]> = std::iter::once(&name)
            .chain(&policy.words)
            .map(Vec::as_slice)
            .collect();
        ctx.replicate(c"RL.POLICY.SET", &words);
    }
}

/// Writes every policy before the keys of an RDB (the data type's `aux_save`): the count,
/// then each name, word count and words.
pub fn write_aux(io: Io) {
    let policies = all();
    io.save_unsigned(policies.len() as u64);
    for (name, policy) in policies {
        io.save_bytes(&name);
        io.save_unsigned(policy.words.len() as u64);
        for word in &policy.words {
            io.save_bytes(word);
        }
    }
}

/// Reads what [`write_aux`] wrote (the data type's `aux_load`; `known`: of this encoding
/// version, before the keys) and replaces the server's policies with it, all at once (or,
/// during a `repl-diskless-load swapdb` sync, when the sync completes: see [`AsyncLoad`]).
/// Anything that does not read or parse fails the load, with a line in the server's log that
/// says why; the policies held stay as they were.
pub fn read_aux(rdb: Io, known: bool) -> Result<(), ()> {
    if !known {
        log_io_error(
            rdb,
            "policies of an unknown encoding version or place in the file",
        );
        return Err(());
    }
    match read_policies(rdb) {
        Ok(loaded) => {
            if ASYNC_LOADING.load(Ordering::Relaxed) {
                *staged() = Some(loaded);
            } else {
                replace_all(loaded);
            }
            Ok(())
        }
        Err(why) => {
            log_io_error(rdb, why);
            Err(())
        }
    }
}

/// The policies [`write_aux`] wrote, or what is wrong with them.
fn read_policies(rdb: Io) -> Result<Table, &'static str> {
    const SHORT: &str = "policies cut short (a short read)";
    let mut loaded = Table::new();
    let count = rdb.load_unsigned().map_err(|_| SHORT)?;
    for _ in 0..count {
        let name = rdb.load_bytes().map_err(|_| SHORT)?;
        let n = rdb.load_unsigned().map_err(|_| SHORT)?;
        // A rule has at most five words; never allocate for a number alone.
        if n > 5 * algorithms::rule_set::MAX_RULES as u64 {
            return Err("a policy with more words than its rules can have");
        }
        let mut words: Vec<Vec<u8>> = Vec::new();
        for _ in 0..n {
            words.push(rdb.load_bytes().map_err(|_| SHORT)?);
        }
        if !(1..=MAX_NAME).contains(&name.len()) {
            return Err("a policy name of no or too many bytes");
        }
        let borrowed: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let (rules, shadow) = rules::parse_saved(&borrowed, SLIDING_LOG_LIMIT_CEILING)
            .ok_or("a policy whose rules do not parse")?;
        loaded.insert(name, Arc::new(Policy::new(rules, shadow, words)));
    }
    Ok(loaded)
}

/// Logs why the policies in an RDB were refused (the server then names the module and
/// stops the load).
fn log_io_error(rdb: Io, why: &str) {
    if let Ok(text) = std::ffi::CString::new(format!("refusing the RDB's policies: {why}")) {
        rdb.log_error(&text);
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

/// A `repl-diskless-load swapdb` sync: started (policies loaded from now on wait),
/// completed (they replace the server's), or aborted (they are dropped).
struct AsyncLoad;

impl ServerEvent for AsyncLoad {
    const EVENT: u64 = raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD;

    fn fired(_ctx: Ctx<'_>, subevent: u64) {
        match subevent {
            raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED => {
                *staged() = None;
                ASYNC_LOADING.store(true, Ordering::Relaxed);
            }
            raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED => {
                ASYNC_LOADING.store(false, Ordering::Relaxed);
                if let Some(loaded) = staged().take() {
                    replace_all(loaded);
                }
            }
            _ => {
                ASYNC_LOADING.store(false, Ordering::Relaxed);
                *staged() = None;
            }
        }
    }
}
