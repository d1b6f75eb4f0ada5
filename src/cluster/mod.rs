//! Policies that follow the cluster: on Redis Cluster, a policy set or deleted on any node
//! reaches every node over the cluster bus, and a node that missed changes (it joined, it
//! restarted from an old RDB, it was cut off) catches up by itself (docs/cluster.md,
//! Policies).
//!
//! - A change made here (a client's RL.POLICY.SET or DEL) goes at once to every node
//!   ([`announce`]), as a `CHANGES` message with its version.
//! - Once a period ([`PERIOD_MS`]) each node sends its table's digest to one other node, chosen
//!   at random ([`Exchange`]). A node whose own digest differs sends back its whole table and
//!   asks for the sender's (`PULL`): after that exchange the two hold the same table. So a
//!   node that missed anything is brought up to date at its next exchange with any up-to-date
//!   node: within one period of being connected, from its own side.
//! - Each name keeps the newest change by its version (`storage::policies`), so the order in
//!   which messages arrive does not matter. A change learned here on a primary is sent to its
//!   replicas and the AOF as `RL.POLICY.SYNC` (from a timer, the one context that may
//!   propagate outside a command).
//! - Catching up ([`caught_up`]): a node that knows other nodes starts not caught up, sends
//!   its digest to every other node each period, and is caught up once a node that is says
//!   its digest is the same (or every reachable node does, when none is: a cluster started
//!   whole). Until then RL.LIMIT on a name it does not hold answers TRYAGAIN, not "no such
//!   policy". A node alone is caught up, and is not any more when it meets a cluster.
//! - Untrusted peers (the bus has no authentication): a message that does not decode
//!   (`wire.rs`), comes from a node this one does not know, or carries a policy whose rules do
//!   not parse is refused whole; a change whose version is too far ahead of this node's clock,
//!   or that would grow the table past its bound, is refused alone (`storage::policies`).
//!   Each is counted and logged (at most a line a second), never applied. A peer's DIGEST or
//!   PULL is answered at most once per [`ANSWER_INTERVAL_MS`], so that a flood of them cannot
//!   make this node send more than a table per interval to its sender.
//!
//! On a standalone server nothing here runs.

pub mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::log::{log, monotonic_ms, Level, Throttle};
use crate::redis::{my_cluster_id, ClusterReceiver, Ctx, Timer};
use crate::storage::policies::{self, Content, Held, Merged, NodeId, Versioned, STANDALONE};
use wire::{Change, Message, Summary};

const _: () = assert!(crate::redis::NODE_ID_LEN == policies::NODE_ID_LEN);

/// The module's message type on the cluster bus.
const MESSAGE_TYPE: u8 = b'R';

/// How often a node sends its digest to another.
pub const PERIOD_MS: i64 = 1000;

/// The shortest time between two answers (a table, or a digest) to one peer's DIGEST or PULL.
pub const ANSWER_INTERVAL_MS: u64 = 500;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// What the bus carried, for `INFO ratelimit`.
pub struct Counters {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub refused: AtomicU64,
    pub applied: AtomicU64,
    /// Changes refused alone: too far ahead, or past the table's bound.
    pub changes_refused: AtomicU64,
    /// A peer's DIGEST or PULL left unanswered: answered less than an interval before.
    pub answers_skipped: AtomicU64,
}

pub static COUNTERS: Counters = Counters {
    sent: AtomicU64::new(0),
    received: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    applied: AtomicU64::new(0),
    changes_refused: AtomicU64::new(0),
    answers_skipped: AtomicU64::new(0),
};

/// Whether the server runs in a cluster and the module takes part in its policy exchange.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Starts the exchange on a cluster node: the receiver and the periodic timer. Logs and
/// does nothing on a standalone server, or one without the API.
pub fn init(ctx: Ctx) {
    if !ctx.cluster_mode() {
        return;
    }
    if !ctx.receive_cluster_messages::<Receiver>() || !ctx.timer::<Exchange>(PERIOD_MS) {
        log(
            Some(ctx),
            Level::Warning,
            "no cluster message API on this server: set each policy on every node yourself",
        );
        return;
    }
    ENABLED.store(true, Ordering::Relaxed);
    policies::merge_loads();
    look_around(ctx);
}

/// Whether this node has caught up with the cluster's policies since it started (always on
/// a standalone server): see the module docs.
pub fn caught_up() -> bool {
    !enabled() || CAUGHT_UP.load(Ordering::Relaxed)
}

/// [`caught_up`], looking again first whether a node that was alone has met a cluster since
/// the last period (RL.LIMIT on a name it does not hold asks this).
pub fn caught_up_now(ctx: Ctx) -> bool {
    if enabled() && ALONE.load(Ordering::Relaxed) {
        look_around(ctx);
    }
    caught_up()
}

static CAUGHT_UP: AtomicBool = AtomicBool::new(false);
/// Whether this node knew no other node when it last looked.
static ALONE: AtomicBool = AtomicBool::new(false);

/// The nodes that said their digest equals this node's, while it has not caught up: the
/// digest they matched, and who.
static HEARD: Mutex<(u64, Vec<NodeId>)> = Mutex::new((0, Vec::new()));

fn heard() -> MutexGuard<'static, (u64, Vec<NodeId>)> {
    HEARD.lock().unwrap_or_else(PoisonError::into_inner)
}

fn catch_up(ctx: Ctx, how: &str) {
    if !CAUGHT_UP.swap(true, Ordering::Relaxed) {
        heard().1.clear();
        log(
            Some(ctx),
            Level::Notice,
            &format!("caught up with the cluster's policies ({how})"),
        );
    }
}

/// The other nodes this one knows.
fn others(ctx: Ctx) -> Vec<NodeId> {
    let me = my_cluster_id();
    ctx.cluster_nodes()
        .into_iter()
        .filter(|n| Some(*n) != me)
        .collect()
}

/// Updates whether this node is alone: a node alone is caught up (it is the whole cluster);
/// one that was alone and now knows others has met a cluster and is not, until it exchanges.
/// The other nodes it knows.
fn look_around(ctx: Ctx) -> Vec<NodeId> {
    let others = others(ctx);
    if others.is_empty() {
        ALONE.store(true, Ordering::Relaxed);
        CAUGHT_UP.store(true, Ordering::Relaxed);
    } else if ALONE.swap(false, Ordering::Relaxed) {
        CAUGHT_UP.store(false, Ordering::Relaxed);
        heard().1.clear();
    }
    others
}

/// A peer said its digest equals this node's: caught up when the peer is, or when every
/// reachable node has said so (none has caught up: the cluster started whole).
fn heard_equal(ctx: Ctx, sender: &NodeId, digest: u64, theirs_caught_up: bool) {
    if theirs_caught_up {
        return catch_up(ctx, "a node that has said its table is the same");
    }
    {
        let mut heard = heard();
        if heard.0 != digest {
            *heard = (digest, Vec::new());
        }
        if !heard.1.contains(sender) {
            heard.1.push(*sender);
        }
    }
    check_heard_from_all(ctx, &others(ctx));
}

/// Caught up when every other node that is reachable has said its table is the same, or
/// when none is reachable (there is no one to catch up from).
fn check_heard_from_all(ctx: Ctx, others: &[NodeId]) {
    let digest = summary().digest;
    let reachable: Vec<&NodeId> = others
        .iter()
        .filter(|n| ctx.cluster_node_reachable(n))
        .collect();
    if reachable.is_empty() {
        return catch_up(ctx, "no other node is reachable");
    }
    let everyone = {
        let heard = heard();
        heard.0 == digest && reachable.iter().all(|n| heard.1.contains(n))
    };
    if everyone {
        catch_up(ctx, "every reachable node has said its table is the same");
    }
}

/// When this node last answered each peer's DIGEST or PULL (ms, [`monotonic_ms`]).
static ANSWERED: Mutex<Option<HashMap<NodeId, u64>>> = Mutex::new(None);

/// Whether this node may answer `peer` now (and then it counts as answered); counted when
/// not.
fn may_answer(peer: &NodeId) -> bool {
    let now = monotonic_ms();
    let mut answered = ANSWERED.lock().unwrap_or_else(PoisonError::into_inner);
    let answered = answered.get_or_insert_with(HashMap::new);
    match answered.get(peer) {
        Some(&last) if now.saturating_sub(last) < ANSWER_INTERVAL_MS => {
            COUNTERS.answers_skipped.fetch_add(1, Ordering::Relaxed);
            false
        }
        _ => {
            // Only known nodes get here: the map holds at most the cluster's nodes, and
            // forgets those it has not answered for a while.
            if answered.len() > 64 {
                answered.retain(|_, &mut last| now.saturating_sub(last) < 10 * ANSWER_INTERVAL_MS);
            }
            answered.insert(*peer, now);
            true
        }
    }
}

/// The id this node writes its changes' versions with: its cluster node id, or the
/// standalone id.
pub fn node_id() -> NodeId {
    if enabled() {
        my_cluster_id().unwrap_or(STANDALONE)
    } else {
        STANDALONE
    }
}

/// The module clock in ms (the debug clock when frozen): the time of a tombstone.
pub fn now_ms() -> u64 {
    crate::clock::read(crate::redis::cached_micros()).now_us / 1000
}

fn change_of(name: &[u8], held: &Held) -> Change {
    Change {
        name: name.to_vec(),
        version: held.version,
        content: match &held.content {
            Content::Live(policy) => wire::Content::Words(policy.words.clone()),
            Content::Tombstone { deleted_at_ms } => wire::Content::Tombstone {
                deleted_at_ms: *deleted_at_ms,
            },
        },
    }
}

fn send(ctx: Ctx, target: Option<&NodeId>, message: &Message) {
    if ctx.send_cluster_message(target, MESSAGE_TYPE, &wire::encode(message)) {
        COUNTERS.sent.fetch_add(1, Ordering::Relaxed);
    }
}

/// `payload` as it is, as the module's message to the node `target` (`*`: every node):
/// RL.DEBUG.CLUSTERMSG, for the tests of damaged and forged messages. Whether it was sent.
pub fn send_raw(ctx: Ctx, target: &[u8], payload: &[u8]) -> bool {
    let target = if target == b"*" {
        None
    } else {
        let Ok(id) = NodeId::try_from(target) else {
            return false;
        };
        Some(id)
    };
    ctx.send_cluster_message(target.as_ref(), MESSAGE_TYPE, payload)
}

/// A change of `name` made on this node: sent to every node.
pub fn announce(ctx: Ctx, name: &[u8]) {
    if !enabled() {
        return;
    }
    if let Some(held) = policies::versioned(name) {
        send(ctx, None, &Message::Changes(vec![change_of(name, &held)]));
    }
}

/// The whole table to `target`, in messages of at most [`wire::MAX_CHANGES`] names.
fn send_table(ctx: Ctx, target: &NodeId) {
    let all = policies::all_versioned();
    if all.is_empty() {
        // An empty CHANGES still tells the other side there is nothing to pull.
        send(ctx, Some(target), &Message::Changes(Vec::new()));
    }
    for chunk in all.chunks(wire::MAX_CHANGES) {
        let changes = chunk.iter().map(|(n, held)| change_of(n, held)).collect();
        send(ctx, Some(target), &Message::Changes(changes));
    }
}

fn summary() -> Summary {
    let (digest, live, tombstones, clock) = policies::summary();
    Summary {
        digest,
        live: u32::try_from(live).unwrap_or(u32::MAX),
        tombstones: u32::try_from(tombstones).unwrap_or(u32::MAX),
        clock,
        caught_up: caught_up(),
    }
}

/// So that a flood writes a line a second at most.
static REFUSALS_LOGGED: Throttle = Throttle::new();

fn refuse(ctx: Ctx, sender: &NodeId, why: &str) {
    COUNTERS.refused.fetch_add(1, Ordering::Relaxed);
    REFUSALS_LOGGED.log(Some(ctx), Level::Warning, || {
        format!(
            "refusing a cluster message from node {}: {why} (INFO ratelimit counts them)",
            String::from_utf8_lossy(sender)
        )
    });
}

static CHANGES_LOGGED: Throttle = Throttle::new();

/// A change of `name` refused alone (the rest of its message is applied).
fn refuse_change(ctx: Ctx, sender: &NodeId, name: &[u8], clock: u64, merged: Merged) {
    COUNTERS.changes_refused.fetch_add(1, Ordering::Relaxed);
    CHANGES_LOGGED.log(Some(ctx), Level::Warning, || {
        let why = if merged == Merged::Ahead {
            let ahead_ms = (clock >> policies::COUNTER_BITS).saturating_sub(policies::wall_ms());
            let ahead_s = ahead_ms / 1000;
            format!(
                "its version is {ahead_s} s ahead of this node's clock \
                 (ratelimit.policy-max-ahead is {} s)",
                crate::config::policy_max_ahead_ms() / 1000
            )
        } else {
            format!(
                "the policies table is full ({} policies or tombstones, ratelimit.max-policies)",
                crate::config::max_policies()
            )
        };
        format!(
            "refusing a policy change of '{}' from node {}: {why} (INFO ratelimit counts them)",
            crate::error::quote(name),
            String::from_utf8_lossy(sender)
        )
    });
}

/// The changes of a CHANGES message as the table takes them, or why not: every policy must
/// parse, as RL.POLICY.SET would take it, before any is applied.
fn parsed(changes: Vec<Change>) -> Result<Vec<(Vec<u8>, Held)>, &'static str> {
    changes
        .into_iter()
        .map(|c| {
            let content = match c.content {
                wire::Content::Words(words) => Content::Live(Arc::new(
                    policies::parse_words(words).ok_or("a policy whose rules do not parse")?,
                )),
                wire::Content::Tombstone { deleted_at_ms } => Content::Tombstone { deleted_at_ms },
            };
            Ok((
                c.name,
                Versioned {
                    version: c.version,
                    content,
                },
            ))
        })
        .collect()
}

/// Names learned over the bus on a primary, to send to its replicas and the AOF from a timer.
static TO_PROPAGATE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

struct Receiver;

impl ClusterReceiver for Receiver {
    const TYPE: u8 = MESSAGE_TYPE;

    fn received(ctx: Ctx<'_>, sender: &NodeId, payload: &[u8]) {
        COUNTERS.received.fetch_add(1, Ordering::Relaxed);
        if !ctx.knows_cluster_node(sender) {
            return refuse(ctx, sender, "a node this one does not know");
        }
        if ALONE.load(Ordering::Relaxed) {
            // A known node writes: this one has met a cluster since the last period.
            look_around(ctx);
        }
        let message = match wire::decode(payload) {
            Ok(message) => message,
            Err(why) => return refuse(ctx, sender, why),
        };
        match message {
            Message::Digest(theirs) => {
                let mine = summary();
                if theirs.digest != mine.digest {
                    if may_answer(sender) {
                        send_table(ctx, sender);
                        send(ctx, Some(sender), &Message::Pull);
                    }
                } else if !mine.caught_up {
                    heard_equal(ctx, sender, mine.digest, theirs.caught_up);
                } else if !theirs.caught_up {
                    // The same table, and the sender has not caught up: say so, with the flag
                    // (a message for a message: no answer to bound).
                    send(ctx, Some(sender), &Message::Digest(mine));
                }
            }
            Message::Pull => {
                if may_answer(sender) {
                    send_table(ctx, sender);
                }
            }
            Message::Changes(changes) => {
                let changes = match parsed(changes) {
                    Ok(changes) => changes,
                    Err(why) => return refuse(ctx, sender, why),
                };
                let bounds = policies::bounds();
                let mut learned = Vec::new();
                for (name, held) in changes {
                    let clock = held.version.clock;
                    match policies::merge(&name, held, bounds) {
                        Merged::Applied => {
                            COUNTERS.applied.fetch_add(1, Ordering::Relaxed);
                            learned.push(name);
                        }
                        Merged::Stale => {}
                        refused @ (Merged::Ahead | Merged::Full) => {
                            refuse_change(ctx, sender, &name, clock, refused);
                        }
                    }
                }
                if !learned.is_empty() && ctx.is_primary() {
                    let mut queue = TO_PROPAGATE.lock().unwrap_or_else(PoisonError::into_inner);
                    if queue.is_empty() {
                        ctx.timer::<Propagate>(0);
                    }
                    queue.extend(learned);
                }
            }
        }
    }
}

/// Sends the names learned over the bus to this primary's replicas and AOF.
struct Propagate;

impl Timer for Propagate {
    fn fire(ctx: Ctx<'_>) {
        let names =
            std::mem::take(&mut *TO_PROPAGATE.lock().unwrap_or_else(PoisonError::into_inner));
        policies::flush_pending(ctx);
        for name in names {
            policies::replicate_sync(ctx, &name);
        }
    }
}

/// A small generator for picking the node to exchange with (xorshift64*, seeded with the
/// time and this node's id): no cryptography needed, only spread.
static RANDOM: AtomicU64 = AtomicU64::new(0);

fn random() -> u64 {
    let mut x = RANDOM.load(Ordering::Relaxed);
    if x == 0 {
        x = (crate::redis::milliseconds() as u64)
            ^ node_id().iter().fold(0x9e37_79b9_7f4a_7c15_u64, |h, &b| {
                h.rotate_left(5) ^ u64::from(b)
            });
        x |= 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    RANDOM.store(x, Ordering::Relaxed);
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The periods of a tenth a node that has not caught up runs before it goes back to whole
/// periods (two seconds of them).
const FAST_TICKS_MAX: u64 = 20;
static FAST_TICKS: AtomicU64 = AtomicU64::new(0);

/// Once a period: drop the tombstones past their time, send the digest to one other node
/// (to every other node while this one has not caught up), and set the next period.
struct Exchange;

impl Timer for Exchange {
    fn fire(ctx: Ctx<'_>) {
        policies::expire_tombstones(now_ms());
        let others = look_around(ctx);
        if !caught_up() {
            // Nodes may have failed since they were heard from.
            check_heard_from_all(ctx, &others);
        }
        let digest = Message::Digest(summary());
        if caught_up() {
            if !others.is_empty() {
                let target = others[(random() % others.len() as u64) as usize];
                send(ctx, Some(&target), &digest);
            }
        } else {
            for target in &others {
                send(ctx, Some(target), &digest);
            }
        }
        // A node alone has nothing to send, and looks around more often: so that it says it
        // has not caught up soon after it meets a cluster. One that has not caught up sends
        // more often for its first periods: it refuses policy changes until it has.
        let fast = others.is_empty()
            || (!caught_up() && FAST_TICKS.fetch_add(1, Ordering::Relaxed) < FAST_TICKS_MAX);
        if caught_up() {
            FAST_TICKS.store(0, Ordering::Relaxed);
        }
        ctx.timer::<Exchange>(if fast { PERIOD_MS / 10 } else { PERIOD_MS });
    }
}
