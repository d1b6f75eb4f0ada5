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
//! - A message that does not decode (`wire.rs`), comes from a node this one does not know, or
//!   carries a policy whose rules do not parse is refused whole, counted and logged (at most
//!   a line a second), never applied.
//!
//! On a standalone server nothing here runs.

pub mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::log::{log, Level};
use crate::redis::{my_cluster_id, ClusterReceiver, Ctx, Timer};
use crate::storage::policies::{self, Content, Held, Merged, NodeId, Versioned, STANDALONE};
use wire::{Change, Message, Summary};

const _: () = assert!(crate::redis::NODE_ID_LEN == policies::NODE_ID_LEN);

/// The module's message type on the cluster bus.
const MESSAGE_TYPE: u8 = b'R';

/// How often a node sends its digest to another.
pub const PERIOD_MS: i64 = 1000;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// What the bus carried, for `INFO ratelimit`.
pub struct Counters {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub refused: AtomicU64,
    pub applied: AtomicU64,
}

pub static COUNTERS: Counters = Counters {
    sent: AtomicU64::new(0),
    received: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    applied: AtomicU64::new(0),
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
    }
}

/// The last time a refusal was logged (ms), so that a flood writes a line a second at most.
static LAST_LOGGED_MS: AtomicU64 = AtomicU64::new(0);

fn refuse(ctx: Ctx, sender: &NodeId, why: &str) {
    COUNTERS.refused.fetch_add(1, Ordering::Relaxed);
    let now = crate::redis::milliseconds().max(0) as u64;
    let last = LAST_LOGGED_MS.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= 1000
        && LAST_LOGGED_MS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        log(
            Some(ctx),
            Level::Warning,
            &format!(
                "refusing a cluster message from node {}: {why} (INFO ratelimit counts them)",
                String::from_utf8_lossy(sender)
            ),
        );
    }
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
        let message = match wire::decode(payload) {
            Ok(message) => message,
            Err(why) => return refuse(ctx, sender, why),
        };
        match message {
            Message::Digest(theirs) => {
                if theirs.digest != summary().digest {
                    send_table(ctx, sender);
                    send(ctx, Some(sender), &Message::Pull);
                }
            }
            Message::Pull => send_table(ctx, sender),
            Message::Changes(changes) => {
                let changes = match parsed(changes) {
                    Ok(changes) => changes,
                    Err(why) => return refuse(ctx, sender, why),
                };
                let mut learned = Vec::new();
                for (name, held) in changes {
                    if policies::merge(&name, held) == Merged::Applied {
                        COUNTERS.applied.fetch_add(1, Ordering::Relaxed);
                        learned.push(name);
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

/// Once a period: drop the tombstones past their time, send the digest to one other node,
/// and set the next period.
struct Exchange;

impl Timer for Exchange {
    fn fire(ctx: Ctx<'_>) {
        policies::expire_tombstones(now_ms());
        let me = my_cluster_id();
        let others: Vec<NodeId> = ctx
            .cluster_nodes()
            .into_iter()
            .filter(|n| Some(*n) != me)
            .collect();
        if !others.is_empty() {
            let target = others[(random() % others.len() as u64) as usize];
            send(ctx, Some(&target), &Message::Digest(summary()));
        }
        ctx.timer::<Exchange>(PERIOD_MS);
    }
}
