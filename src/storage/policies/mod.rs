//! Policies, the rules database: named lists of rules that RL.LIMIT checks a key against.
//!
//! Policies belong to the server, not to a key (like Redis functions). Each name holds its
//! latest change with a version (`algorithms::policy_versions`), so that on Redis Cluster every node converges
//! to the same table whatever order changes reach it in (`crate::cluster` carries them over the
//! cluster bus). They reach replicas and persistence like this:
//!
//! - on a standalone server RL.POLICY.SET and RL.POLICY.DEL propagate verbatim to replicas and
//!   the AOF, as they always did; on a cluster node a change (a client's, or one learned over
//!   the bus) propagates as `RL.POLICY.SYNC name clock node SET words... | DEL deleted_at_ms`,
//!   its version with it, so that replicas and the AOF hold the same version;
//! - the RDB (and the RDB preamble of an AOF rewrite) carries them as the data type's aux
//!   data, versions and tombstones included, written before the keys and loaded in place of
//!   what the server held, or on a cluster node merged into it, the newer version of each name
//!   kept (a replica's full sync is its primary's table at the fork, which may lack what the
//!   replica learned over the bus since); an RDB of the format before versions loads too, at
//!   clock 0;
//! - an AOF rewrite without the RDB preamble writes only keys, so when an AOF rewrite forks,
//!   every policy is propagated again as RL.POLICY.SET: the rewrite's new incremental file,
//!   which is opened before the fork, starts by recreating them. Other forks (BGSAVE, a
//!   replica's full sync) start no new AOF and send nothing.
//!
//! A policy is replaced whole: RL.LIMIT takes the policy's rules (shared, counted by
//! reference) once, so it sees the old policy or the new one, never a mix.

use algorithms::policy_versions as versions;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redis_module::raw;

use crate::args::rules;
use crate::config::SLIDING_LOG_LIMIT_CEILING;
use crate::metrics::PolicyStats;
use crate::redis::{Ctx, Io, ServerEvent, Timer};
use algorithms::rule_set::Rules;

pub use versions::{
    ceiling, Bounds, Content, Fnv, Full, Merged, NodeId, Version, Versioned, COUNTER_BITS,
    NODE_ID_LEN, STANDALONE,
};

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

impl versions::Words for Policy {
    fn words(&self) -> &[Vec<u8>] {
        &self.words
    }
}

type Table = versions::Table<Arc<Policy>>;
/// What a name holds: its latest change, a policy or a tombstone, with its version.
pub type Held = Versioned<Arc<Policy>>;
/// Names and their latest changes, as an RDB carries them.
type Names = BTreeMap<Vec<u8>, Held>;

static POLICIES: Mutex<Table> = Mutex::new(Table::new());

fn table() -> MutexGuard<'static, Table> {
    // A panic while the lock was held cannot leave the map half-changed (each change is
    // one insert or remove), so a poisoned lock is still a good table.
    POLICIES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The live policy `name`.
pub fn get(name: &[u8]) -> Option<Arc<Policy>> {
    table().get(name).cloned()
}

/// The counters of a policy that replaces a live one carry over.
fn carry_stats(table: &Table, name: &[u8], incoming: &Held) {
    if let (Some(old), Content::Live(new)) = (table.get(name), &incoming.content) {
        new.stats.carry(&old.stats);
    }
}

/// The server's wall clock in ms: what a version's clock starts from (never the debug clock:
/// versions are compared between nodes).
pub fn wall_ms() -> u64 {
    u64::try_from(crate::redis::milliseconds()).unwrap_or(0)
}

/// What the table takes now from another node: versions up to `ratelimit.policy-max-ahead`
/// ahead of the wall clock, and `ratelimit.max-policies` of each kind.
pub fn bounds() -> Bounds {
    Bounds {
        ceiling: ceiling(wall_ms(), crate::config::policy_max_ahead_ms()),
        max: crate::config::max_policies(),
    }
}

/// Creates or replaces the policy `name`, a change made on this node (`node`, see
/// `crate::cluster::node_id`); a replaced policy's counters carry over. Its version, or the
/// bound reached when it would be a new policy past `ratelimit.max-policies` (`bounded`: a
/// client's change; a replica's stream and the AOF take what the primary, or this server
/// before it restarted, accepted).
pub fn set(name: &[u8], policy: Policy, node: NodeId, bounded: bool) -> Result<Version, Full> {
    let mut table = table();
    if let Some(old) = table.get(name) {
        policy.stats.carry(&old.stats);
    }
    let max = if bounded {
        crate::config::max_policies()
    } else {
        usize::MAX
    };
    table.set_local(name, Arc::new(policy), node, wall_ms(), max)
}

/// Deletes the policy `name`, a change made on this node at `now_ms` (a tombstone is kept on
/// a cluster node, `tombstone`); its version, or None when there was no such policy.
pub fn delete(name: &[u8], node: NodeId, now_ms: u64, tombstone: bool) -> Option<Version> {
    table().delete_local(
        name,
        node,
        now_ms,
        wall_ms(),
        tombstone,
        crate::config::max_policies(),
    )
}

/// RL.POLICY.FORCE: what this node holds for `name` (a policy or a tombstone) stamped by
/// `node` with a version a second under this node's ceiling, so that it wins on every node
/// whose clock is at most that much behind. The new version, or None when `name` holds
/// nothing here.
pub fn force(name: &[u8], node: NodeId) -> Option<Version> {
    let floor = versions::wall_clock(
        (wall_ms() + crate::config::policy_max_ahead_ms()).saturating_sub(1000),
    );
    table().restamp(name, node, floor)
}

/// RL.DEBUG.POLICYVERSION: sets the clock of what `name` holds, with no bound (what a table
/// poisoned before versions were bounded held). Whether `name` holds anything.
pub fn plant(name: &[u8], clock: u64) -> bool {
    table().plant(name, clock)
}

/// A change made on another node, received over the bus: applied when newer than what
/// `name` holds and within [`bounds`], a replaced policy's counters carrying over.
pub fn merge(name: &[u8], incoming: Held, bounds: Bounds) -> Merged {
    let mut table = table();
    carry_stats(&table, name, &incoming);
    table.merge(name, incoming, bounds)
}

/// A change from this node's primary or its own AOF (RL.POLICY.SYNC): as [`merge`], but a
/// version past the ceiling is taken at clock 0 and no count refuses it (see `algorithms::policy_versions`).
pub fn merge_loaded(name: &[u8], incoming: Held) -> Merged {
    let mut table = table();
    carry_stats(&table, name, &incoming);
    let ceiling = bounds().ceiling;
    table.load(name, incoming, ceiling)
}

/// What `name` holds, tombstone included, with its version.
pub fn versioned(name: &[u8]) -> Option<Held> {
    table().versioned(name).cloned()
}

/// Every name with its latest change, tombstones included, in name order.
pub fn all_versioned() -> Vec<(Vec<u8>, Held)> {
    table()
        .all()
        .map(|(name, v)| (name.to_vec(), v.clone()))
        .collect()
}

/// The table's digest, live policies, tombstones and clock (`INFO ratelimit`, and what one
/// cluster node tells another): O(1), kept up to date with each change.
pub fn summary() -> (u64, usize, usize, u64) {
    let table = table();
    (
        table.digest(),
        table.live_count(),
        table.tombstones(),
        table.clock(),
    )
}

/// Drops the tombstones past their time at `now_ms`.
pub fn expire_tombstones(now_ms: u64) -> usize {
    table().expire_tombstones(now_ms)
}

/// Whether a loaded table merges into the one held (`merge_loads`) rather than replaces it.
static MERGE_LOADS: AtomicBool = AtomicBool::new(false);

/// From now on a loaded table (an RDB's, a full sync's) merges into the one held, each name
/// keeping the newer version, instead of replacing it: for a cluster node, whose deletes leave
/// tombstones and whose table the bus exchange changes between syncs. `crate::cluster` calls it
/// when the exchange starts.
pub fn merge_loads() {
    MERGE_LOADS.store(true, Ordering::Relaxed);
}

/// Takes `loaded` (an RDB's, at `clock`), the counters of a live name carrying over; a version
/// past the ceiling is taken at clock 0 (see `algorithms::policy_versions`). On a cluster node it is merged
/// into what the node holds, each name keeping the newer version: a replica's full sync brings
/// its primary's table as of the primary's fork, and what the replica learned over the bus
/// since (a policy, or a deletion's tombstone) would otherwise be gone until the primary's
/// stream or an exchange brought it back. Elsewhere it replaces every name: a standalone
/// server's deletes leave no tombstone, so only the copy says what was deleted.
fn take_loaded(loaded: Names, clock: u64) {
    let ceiling = bounds().ceiling;
    let mut table = table();
    for (name, incoming) in loaded.iter() {
        carry_stats(&table, name, incoming);
    }
    if MERGE_LOADS.load(Ordering::Relaxed) {
        table.load_all(loaded, clock, ceiling);
    } else {
        table.replace_all(loaded, clock, ceiling);
    }
}

/// Runs `f` on every live policy, in name order, under the table's lock (INFO: no copy of
/// the table).
pub fn for_each(mut f: impl FnMut(&[u8], &Policy)) {
    for (name, policy) in table().live() {
        f(name, policy);
    }
}

/// Every live policy, in name order.
pub fn all() -> Vec<(Vec<u8>, Arc<Policy>)> {
    table()
        .live()
        .map(|(name, policy)| (name.to_vec(), Arc::clone(policy)))
        .collect()
}

/// The words of `RL.POLICY.SYNC` for what `name` holds now (see the module docs): name,
/// clock, node, then `SET` and the policy's words or `DEL` and the deletion time. None when
/// the name holds nothing.
pub fn sync_words(name: &[u8]) -> Option<Vec<Vec<u8>>> {
    let held = versioned(name)?;
    let mut words = vec![
        name.to_vec(),
        held.version.clock.to_string().into_bytes(),
        held.version.node.to_vec(),
    ];
    match held.content {
        Content::Live(policy) => {
            words.push(b"SET".to_vec());
            words.extend(policy.words.iter().cloned());
        }
        Content::Tombstone { deleted_at_ms } => {
            words.push(b"DEL".to_vec());
            words.push(deleted_at_ms.to_string().into_bytes());
        }
    }
    Some(words)
}

/// Sends what `name` holds now to replicas and the AOF as `RL.POLICY.SYNC`.
pub fn replicate_sync(ctx: Ctx, name: &[u8]) {
    if let Some(words) = sync_words(name) {
        let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        ctx.replicate(c"RL.POLICY.SYNC", &words);
    }
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
        if !ctx.aof_on() || table().names().is_empty() || !aof_rewrite_in_progress(ctx) {
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
    if ctx.cluster_mode() {
        // With their versions (and the tombstones), as every change of a cluster node goes.
        for (name, _) in all_versioned() {
            replicate_sync(ctx, &name);
        }
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

/// The first number of the aux data since policies have versions: never a count of the
/// format before (which began with the count of policies).
const VERSIONED: u64 = u64::MAX;

/// Writes every policy before the keys of an RDB (the data type's `aux_save`): [`VERSIONED`],
/// the table's clock, the count of names, then each name, its version (clock, node id) and
/// either `0`, a word count and the words, or `1` and a tombstone's deletion time.
pub fn write_aux(io: Io) {
    let (clock, names) = {
        let table = table();
        (table.clock(), table.names().clone())
    };
    io.save_unsigned(VERSIONED);
    io.save_unsigned(clock);
    io.save_unsigned(names.len() as u64);
    for (name, held) in names {
        io.save_bytes(&name);
        io.save_unsigned(held.version.clock);
        io.save_bytes(&held.version.node);
        match held.content {
            Content::Live(policy) => {
                io.save_unsigned(0);
                io.save_unsigned(policy.words.len() as u64);
                for word in &policy.words {
                    io.save_bytes(word);
                }
            }
            Content::Tombstone { deleted_at_ms } => {
                io.save_unsigned(1);
                io.save_unsigned(deleted_at_ms);
            }
        }
    }
}

/// Reads what [`write_aux`] wrote (the data type's `aux_load`; `known`: of this encoding
/// version, before the keys) and takes it as the server's policies ([`take_loaded`]: in place
/// of them, or merged on a cluster node), all at once (or,
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
        Ok((loaded, clock)) => {
            if ASYNC_LOADING.load(Ordering::Relaxed) {
                *staged() = Some((loaded, clock));
            } else {
                take_loaded(loaded, clock);
            }
            Ok(())
        }
        Err(why) => {
            log_io_error(rdb, why);
            Err(())
        }
    }
}

/// A policy's words, parsed as the RDB, the AOF and the cluster bus carry them.
pub fn parse_words(words: Vec<Vec<u8>>) -> Option<Policy> {
    let borrowed: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
    let (rules, shadow) = rules::parse_saved(&borrowed, SLIDING_LOG_LIMIT_CEILING)?;
    Some(Policy::new(rules, shadow, words))
}

/// The policies [`write_aux`] wrote (or the format before versions: at clock 0, written by
/// the standalone id) and the table's clock, or what is wrong with them.
fn read_policies(rdb: Io) -> Result<(Names, u64), &'static str> {
    const SHORT: &str = "policies cut short (a short read)";
    let mut loaded = Names::new();
    let first = rdb.load_unsigned().map_err(|_| SHORT)?;
    let versioned = first == VERSIONED;
    let (clock, count) = if versioned {
        let clock = rdb.load_unsigned().map_err(|_| SHORT)?;
        (clock, rdb.load_unsigned().map_err(|_| SHORT)?)
    } else {
        (0, first)
    };
    for _ in 0..count {
        let name = rdb.load_bytes().map_err(|_| SHORT)?;
        if !(1..=MAX_NAME).contains(&name.len()) {
            return Err("a policy name of no or too many bytes");
        }
        let mut version = Version {
            clock: 0,
            node: STANDALONE,
        };
        let mut tombstone = None;
        if versioned {
            version.clock = rdb.load_unsigned().map_err(|_| SHORT)?;
            let node = rdb.load_bytes().map_err(|_| SHORT)?;
            if node.len() != NODE_ID_LEN {
                return Err("a policy version whose node id is not 40 bytes");
            }
            version.node.copy_from_slice(&node);
            match rdb.load_unsigned().map_err(|_| SHORT)? {
                0 => {}
                1 => tombstone = Some(rdb.load_unsigned().map_err(|_| SHORT)?),
                _ => return Err("a policy that is neither live nor a tombstone"),
            }
        }
        let content = match tombstone {
            Some(deleted_at_ms) => Content::Tombstone { deleted_at_ms },
            None => {
                let n = rdb.load_unsigned().map_err(|_| SHORT)?;
                // A rule has at most five words; never allocate for a number alone.
                if n > 5 * algorithms::rule_set::MAX_RULES as u64 {
                    return Err("a policy with more words than its rules can have");
                }
                let mut words: Vec<Vec<u8>> = Vec::new();
                for _ in 0..n {
                    words.push(rdb.load_bytes().map_err(|_| SHORT)?);
                }
                let policy = parse_words(words).ok_or("a policy whose rules do not parse")?;
                Content::Live(Arc::new(policy))
            }
        };
        loaded.insert(name, Versioned { version, content });
    }
    Ok((loaded, clock))
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
static STAGED: Mutex<Option<(Names, u64)>> = Mutex::new(None);

fn staged() -> MutexGuard<'static, Option<(Names, u64)>> {
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
                if let Some((loaded, clock)) = staged().take() {
                    take_loaded(loaded, clock);
                }
            }
            _ => {
                ASYNC_LOADING.store(false, Ordering::Relaxed);
                *staged() = None;
            }
        }
    }
}
