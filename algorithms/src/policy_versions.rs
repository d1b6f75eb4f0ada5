//! The policies table with a version on every name, so that every node of a cluster ends up
//! with the same table whatever order the changes reach it in (docs/cluster.md, Policies).
//!
//! A change made here (RL.POLICY.SET or DEL from a client) gets the version `(clock, node)`:
//! a hybrid logical clock, the larger of one more than the largest clock the table has seen
//! (its own changes and every change merged from elsewhere) and the wall clock
//! ([`wall_clock`]: ms in the high 48 bits, a counter in the low 16), with the id of the node
//! that made it. So a node restarted with no data, or from an old RDB, still stamps its next
//! change later than any change made before it in wall time, and that change wins.
//!
//! A change from elsewhere replaces what the table holds for its name only when it is newer:
//! a higher clock, then a higher node id, then (the same version for two contents, which only
//! a node restarted from an old RDB could write) the higher content digest. That order is
//! total and every node applies it, so all converge to the same winner. A delete in a cluster
//! leaves a tombstone, a version with no rules, kept for [`TOMBSTONE_TTL_MS`] so that an older
//! SET arriving late cannot bring the policy back; on a standalone server a delete just
//! removes.
//!
//! Bounds ([`Bounds`]): a change from elsewhere whose clock is ahead of the wall clock by more
//! than a setting is refused (a node's bug or a forgery would otherwise win over every later
//! change, for good), and one loaded from the node's own RDB or AOF that far ahead is taken at
//! clock 0, so that the next change of its name wins; the live policies are at most a
//! setting's number, and the tombstones too (the newest kept: a delete always succeeds). The
//! counts and the digest are kept up to date with each change, so that reading them costs the
//! same whatever the table's size.
//!
//! Pure: no Redis, no clock (times are handed in), no I/O; generic over what a policy is, so
//! that its tests use plain words.

use std::collections::{BTreeMap, BTreeSet};

/// The length of a Redis Cluster node id (40 hex characters).
pub const NODE_ID_LEN: usize = 40;

/// How long a tombstone is kept: a node away (stopped, partitioned) for longer than this and
/// holding the deleted policy brings it back when it returns (docs/cluster.md says so).
pub const TOMBSTONE_TTL_MS: u64 = 24 * 3_600_000;

/// A node id as 40 bytes (the standalone server's is all `0`).
pub type NodeId = [u8; NODE_ID_LEN];

/// The node id a standalone server writes its versions with.
pub const STANDALONE: NodeId = [b'0'; NODE_ID_LEN];

/// The bits of a clock below its milliseconds: a counter for changes within one ms.
pub const COUNTER_BITS: u32 = 16;

/// The clock a version made at `wall_ms` starts from (its counter at 0).
pub fn wall_clock(wall_ms: u64) -> u64 {
    wall_ms.min(u64::MAX >> COUNTER_BITS) << COUNTER_BITS
}

/// The largest clock a node takes at `wall_ms` when versions may be `ahead_ms` ahead.
pub fn ceiling(wall_ms: u64, ahead_ms: u64) -> u64 {
    wall_clock(wall_ms.saturating_add(ahead_ms)) | ((1 << COUNTER_BITS) - 1)
}

/// A change's version: compared by clock, then node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The hybrid logical clock of the change ([`wall_clock`]).
    pub clock: u64,
    /// The node that made it.
    pub node: NodeId,
}

/// What a policy is, for the table: its words, which the digest covers.
pub trait Words {
    /// The policy's words, as RL.POLICY.SET took them.
    fn words(&self) -> &[Vec<u8>];
}

/// A policy shared between the table and the keys written under it.
impl<T: Words + ?Sized> Words for std::sync::Arc<T> {
    fn words(&self) -> &[Vec<u8>] {
        (**self).words()
    }
}

/// What a name holds: a policy, or a tombstone since `deleted_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content<P> {
    /// A policy.
    Live(P),
    /// A delete, kept for [`TOMBSTONE_TTL_MS`] in a cluster.
    Tombstone {
        /// When the delete was made, ms on the wall clock.
        deleted_at_ms: u64,
    },
}

impl<P> Content<P> {
    fn is_live(&self) -> bool {
        matches!(self, Content::Live(_))
    }
}

/// A name's content and the version of the change that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<P> {
    /// The version of the change that wrote it.
    pub version: Version,
    /// What it wrote.
    pub content: Content<P>,
}

/// FNV-1a, 64 bits: the same on every platform and build, which a digest compared between
/// nodes needs (std's hasher is neither stable nor specified).
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv::new()
    }
}

impl Fnv {
    /// The hash of nothing (FNV's offset basis).
    pub const fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// `bytes` hashed in, as they are.
    pub fn bytes(mut self, bytes: &[u8]) -> Fnv {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// A length-prefixed field, so that ("ab", "c") and ("a", "bc") differ.
    pub fn field(self, bytes: &[u8]) -> Fnv {
        self.bytes(&(bytes.len() as u64).to_le_bytes()).bytes(bytes)
    }

    /// `n` hashed in, as its 8 little-endian bytes.
    pub fn u64(self, n: u64) -> Fnv {
        self.bytes(&n.to_le_bytes())
    }

    /// The hash.
    pub fn finish(self) -> u64 {
        self.0
    }
}

impl<P: Words> Versioned<P> {
    /// The digest of the content alone (a tombstone's is 0; its time is not part of it).
    fn content_digest(&self) -> u64 {
        match &self.content {
            Content::Live(p) => p
                .words()
                .iter()
                .fold(Fnv::new().u64(1), |h, w| h.field(w))
                .finish(),
            Content::Tombstone { .. } => 0,
        }
    }

    /// Whether `self` wins over `other` for the same name (the total order of the module docs).
    pub fn newer_than(&self, other: &Versioned<P>) -> bool {
        (self.version, self.content_digest()) > (other.version, other.content_digest())
    }

    /// What the table's digest adds for `name` holding `self`.
    fn entry_digest(&self, name: &[u8]) -> u64 {
        Fnv::new()
            .field(name)
            .u64(self.version.clock)
            .bytes(&self.version.node)
            .u64(self.content_digest())
            .finish()
    }
}

/// What a table takes: versions up to `ceiling` (a clock, see [`ceiling`]), and at most
/// `max` live policies and the `max` newest tombstones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The highest clock a change from elsewhere may carry.
    pub ceiling: u64,
    /// The most live policies, and the most tombstones.
    pub max: usize,
}

#[cfg(test)]
impl Bounds {
    /// No bound (the tests').
    pub const NONE: Bounds = Bounds {
        ceiling: u64::MAX,
        max: usize::MAX,
    };
}

/// What became of a change from elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// It was newer: the name now holds it.
    Applied,
    /// The table already held it, or something newer.
    Stale,
    /// Refused: its clock is past the ceiling.
    Ahead,
    /// Refused: it would add a live policy past the bound.
    Full,
}

/// Why a change made here was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// The bound reached.
    pub max: usize,
}

/// The table: each name's latest change, the largest clock seen, and running counts and
/// digest.
#[derive(Debug, Clone)]
pub struct Table<P> {
    names: BTreeMap<Vec<u8>, Versioned<P>>,
    clock: u64,
    live: usize,
    /// The tombstones by deletion time, then name: the oldest first, to expire them and to
    /// drop the oldest past the bound, without a scan.
    graves: BTreeSet<(u64, Vec<u8>)>,
    /// The sum (wrapping) of every name's [`Versioned::entry_digest`]: the same for the same
    /// table whatever order it was built in, and changed in O(1) by each change.
    digest: u64,
}

impl<P> Default for Table<P> {
    fn default() -> Self {
        Table::new()
    }
}

impl<P> Table<P> {
    /// An empty table.
    pub const fn new() -> Table<P> {
        Table {
            names: BTreeMap::new(),
            clock: 0,
            live: 0,
            graves: BTreeSet::new(),
            digest: 0,
        }
    }

    /// The policy `name`, if it is live.
    pub fn get(&self, name: &[u8]) -> Option<&P> {
        match &self.names.get(name)?.content {
            Content::Live(p) => Some(p),
            Content::Tombstone { .. } => None,
        }
    }

    /// What `name` holds, tombstone included.
    pub fn versioned(&self, name: &[u8]) -> Option<&Versioned<P>> {
        self.names.get(name)
    }

    /// Every live policy, in name order.
    pub fn live(&self) -> impl Iterator<Item = (&[u8], &P)> {
        self.names.iter().filter_map(|(name, v)| match &v.content {
            Content::Live(p) => Some((name.as_slice(), p)),
            Content::Tombstone { .. } => None,
        })
    }

    /// Every name, tombstones included, in name order.
    pub fn all(&self) -> impl Iterator<Item = (&[u8], &Versioned<P>)> {
        self.names.iter().map(|(name, v)| (name.as_slice(), v))
    }

    /// How many policies are live.
    pub fn live_count(&self) -> usize {
        self.live
    }

    /// How many tombstones are kept.
    pub fn tombstones(&self) -> usize {
        self.graves.len()
    }

    /// The largest clock seen.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Every name and what it holds, tombstones included (what an RDB saves).
    pub fn names(&self) -> &BTreeMap<Vec<u8>, Versioned<P>> {
        &self.names
    }

    fn next_version(&mut self, node: NodeId, floor: u64) -> Version {
        self.clock = self.clock.saturating_add(1).max(floor);
        Version {
            clock: self.clock,
            node,
        }
    }
}

impl<P: Words> Table<P> {
    /// Puts `incoming` under `name`, keeping the counts and the digest.
    fn put(&mut self, name: &[u8], incoming: Versioned<P>) {
        self.count(&incoming, name, true);
        if let Some(old) = self.names.insert(name.to_vec(), incoming) {
            self.count(&old, name, false);
        }
    }

    /// Removes `name`, keeping the counts and the digest.
    fn take(&mut self, name: &[u8]) {
        if let Some(old) = self.names.remove(name) {
            self.count(&old, name, false);
        }
    }

    fn count(&mut self, v: &Versioned<P>, name: &[u8], added: bool) {
        let digest = v.entry_digest(name);
        match (&v.content, added) {
            (Content::Live(_), true) => self.live += 1,
            (Content::Live(_), false) => self.live -= 1,
            (Content::Tombstone { deleted_at_ms }, true) => {
                self.graves.insert((*deleted_at_ms, name.to_vec()));
            }
            (Content::Tombstone { deleted_at_ms }, false) => {
                self.graves.remove(&(*deleted_at_ms, name.to_vec()));
            }
        }
        self.digest = if added {
            self.digest.wrapping_add(digest)
        } else {
            self.digest.wrapping_sub(digest)
        };
    }

    /// Whether `name` may come to hold `content` under the bound `max`: a new live policy
    /// needs fewer than `max` live ones (replacing a live one, or deleting one, always may).
    fn room(&self, name: &[u8], content: &Content<P>, max: usize) -> bool {
        let was_live = self.names.get(name).is_some_and(|v| v.content.is_live());
        !content.is_live() || was_live || self.live < max
    }

    /// Whether a tombstone of a name this table does not hold, deleted at `deleted_at_ms`,
    /// would be dropped at once under `max` (see [`Table::trim_graves`]): it is older than
    /// every one kept.
    fn too_old_to_keep(&self, name: &[u8], content: &Content<P>, max: usize) -> bool {
        match content {
            Content::Tombstone { deleted_at_ms } if !self.names.contains_key(name) => {
                self.graves.len() >= max
                    && self
                        .graves
                        .first()
                        .is_some_and(|oldest| (*deleted_at_ms, name) <= (oldest.0, &oldest.1[..]))
            }
            _ => false,
        }
    }

    /// Keeps the `max` newest tombstones (by deletion time, then name), dropping the oldest:
    /// a delete always succeeds, and the tombstones stay bounded. Every node applies the same
    /// rule, so nodes that hold the same tombstones keep the same ones.
    fn trim_graves(&mut self, max: usize) {
        while self.graves.len() > max {
            let Some((_, oldest)) = self.graves.first().cloned() else {
                break;
            };
            self.take(&oldest);
        }
    }

    /// A policy set here, by the node `node`, at `wall_ms`: its version, or the bound reached
    /// when it would be a live policy past `max`.
    pub fn set_local(
        &mut self,
        name: &[u8],
        policy: P,
        node: NodeId,
        wall_ms: u64,
        max: usize,
    ) -> Result<Version, Full> {
        let content = Content::Live(policy);
        if !self.room(name, &content, max) {
            return Err(Full { max });
        }
        let version = self.next_version(node, wall_clock(wall_ms));
        self.put(name, Versioned { version, content });
        Ok(version)
    }

    /// A policy deleted here, by `node`, at `now_ms` (the module clock, the tombstone's time)
    /// and `wall_ms`: its version, or None when `name` was not live (nothing changes then).
    /// With `tombstone`, the name keeps a tombstone (a cluster's; the oldest tombstones past
    /// `max` are dropped, see `Table::trim_graves`); else it is removed (a standalone
    /// server's).
    pub fn delete_local(
        &mut self,
        name: &[u8],
        node: NodeId,
        now_ms: u64,
        wall_ms: u64,
        tombstone: bool,
        max: usize,
    ) -> Option<Version> {
        self.get(name)?;
        let version = self.next_version(node, wall_clock(wall_ms));
        if !tombstone {
            self.take(name);
            return Some(version);
        }
        let content = Content::Tombstone {
            deleted_at_ms: now_ms,
        };
        self.put(name, Versioned { version, content });
        self.trim_graves(max);
        Some(version)
    }

    /// Stamps what `name` holds (a policy or a tombstone) with a version of at least `floor`,
    /// made here by `node`: RL.POLICY.FORCE. The new version, or None when `name` holds
    /// nothing.
    pub fn restamp(&mut self, name: &[u8], node: NodeId, floor: u64) -> Option<Version> {
        let held = self.names.remove(name)?;
        self.count(&held, name, false);
        let version = self.next_version(node, floor);
        self.put(
            name,
            Versioned {
                version,
                content: held.content,
            },
        );
        Some(version)
    }

    /// Sets the clock of what `name` holds to `clock`, and the table's to at least that, with
    /// no bound: what a table poisoned before versions were bounded held (RL.DEBUG only).
    /// Whether `name` holds anything.
    pub fn plant(&mut self, name: &[u8], clock: u64) -> bool {
        let Some(mut held) = self.names.remove(name) else {
            return false;
        };
        self.count(&held, name, false);
        held.version.clock = clock;
        self.clock = self.clock.max(clock);
        self.put(name, held);
        true
    }

    /// Removes the tombstones older than [`TOMBSTONE_TTL_MS`] at `now_ms`; how many. O(1)
    /// when none is due (the oldest first).
    pub fn expire_tombstones(&mut self, now_ms: u64) -> usize {
        let mut expired = 0;
        while let Some((deleted_at_ms, name)) = self.graves.first().cloned() {
            if now_ms.saturating_sub(deleted_at_ms) < TOMBSTONE_TTL_MS {
                break;
            }
            self.take(&name);
            expired += 1;
        }
        expired
    }

    /// A change from elsewhere (another node): applied when it is newer than what `name`
    /// holds, within `bounds`. The clock moves up to its clock when it is within the ceiling.
    pub fn merge(&mut self, name: &[u8], incoming: Versioned<P>, bounds: Bounds) -> Merged {
        if incoming.version.clock > bounds.ceiling {
            return Merged::Ahead;
        }
        self.clock = self.clock.max(incoming.version.clock);
        if let Some(held) = self.names.get(name) {
            if !incoming.newer_than(held) {
                return Merged::Stale;
            }
        }
        if !self.room(name, &incoming.content, bounds.max) {
            return Merged::Full;
        }
        if self.too_old_to_keep(name, &incoming.content, bounds.max) {
            return Merged::Stale;
        }
        self.put(name, incoming);
        self.trim_graves(bounds.max);
        Merged::Applied
    }

    /// A change loaded from this node's own AOF or sent by its primary: as [`Table::merge`],
    /// but one past the ceiling is taken at clock 0 (see the module docs) and no bound on the
    /// count refuses it (the primary, or the node before it restarted, took it).
    pub fn load(&mut self, name: &[u8], mut incoming: Versioned<P>, ceiling: u64) -> Merged {
        if incoming.version.clock > ceiling {
            incoming.version.clock = 0;
        }
        self.merge(
            name,
            incoming,
            Bounds {
                ceiling,
                max: usize::MAX,
            },
        )
    }

    /// Takes `names` whole (an RDB's, with its `clock`): versions past `ceiling` at clock 0,
    /// and the larger of the two clocks within the ceiling: a clock never goes back, so a
    /// change made after a reload is newer than any this node made before.
    pub fn replace_all(
        &mut self,
        names: BTreeMap<Vec<u8>, Versioned<P>>,
        clock: u64,
        ceiling: u64,
    ) {
        let mut largest = [self.clock, clock]
            .into_iter()
            .filter(|&c| c <= ceiling)
            .max()
            .unwrap_or(0);
        self.names = BTreeMap::new();
        self.digest = 0;
        self.live = 0;
        self.graves = BTreeSet::new();
        for (name, mut v) in names {
            if v.version.clock > ceiling {
                v.version.clock = 0;
            }
            largest = largest.max(v.version.clock);
            self.put(&name, v);
        }
        self.clock = largest;
    }

    /// Takes `names` (an RDB's, with its `clock`) into what the table holds, each as
    /// [`Table::load`] takes a change: kept where newer, a version past `ceiling` at clock 0,
    /// no bound on the count. A cluster node's load: its table is a set of versioned changes,
    /// which an RDB can add to but never take back (a replica's full sync brings its primary's
    /// table as of the primary's fork, older than what the replica may have learned since over
    /// the bus). O(n log n) for n names, as [`Table::replace_all`].
    pub fn load_all(&mut self, names: BTreeMap<Vec<u8>, Versioned<P>>, clock: u64, ceiling: u64) {
        if clock <= ceiling {
            self.clock = self.clock.max(clock);
        }
        for (name, v) in names {
            self.load(&name, v, ceiling);
        }
    }

    /// The digest of the whole table (names, versions, contents, tombstones included): equal
    /// on two nodes exactly when they hold the same table (bar a collision). O(1): kept up to
    /// date with each change.
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct W(Vec<Vec<u8>>);

    impl Words for W {
        fn words(&self) -> &[Vec<u8>] {
            &self.0
        }
    }

    fn w(text: &str) -> W {
        W(text.split(' ').map(|s| s.as_bytes().to_vec()).collect())
    }

    fn node(c: u8) -> NodeId {
        [c; NODE_ID_LEN]
    }

    fn live(clock: u64, n: u8, text: &str) -> Versioned<W> {
        Versioned {
            version: Version {
                clock,
                node: node(n),
            },
            content: Content::Live(w(text)),
        }
    }

    fn merge(t: &mut Table<W>, name: &[u8], v: Versioned<W>) -> Merged {
        t.merge(name, v, Bounds::NONE)
    }

    fn set(t: &mut Table<W>, name: &[u8], text: &str, n: u8, wall_ms: u64) -> Version {
        t.set_local(name, w(text), node(n), wall_ms, usize::MAX)
            .unwrap()
    }

    /// The digest as the sum of every entry's, computed afresh.
    fn recomputed(t: &Table<W>) -> u64 {
        t.all()
            .fold(0u64, |d, (n, v)| d.wrapping_add(v.entry_digest(n)))
    }

    #[test]
    fn a_local_change_is_one_past_every_clock_seen_or_the_wall_clock() {
        let mut t = Table::new();
        assert_eq!(set(&mut t, b"api", "GCRA 1 1 1s", b'a', 0).clock, 1);
        assert_eq!(
            merge(&mut t, b"web", live(41, b'b', "FIXEDWINDOW 5 1m")),
            Merged::Applied
        );
        let v = set(&mut t, b"api", "GCRA 2 2 1s", b'a', 0);
        assert_eq!(
            v,
            Version {
                clock: 42,
                node: node(b'a')
            }
        );
        assert_eq!(t.get(b"api"), Some(&w("GCRA 2 2 1s")));
        // The wall clock, when it is ahead: ms in the high bits, the counter at 0; twice in
        // one ms, the counter moves.
        assert_eq!(set(&mut t, b"api", "GCRA 3 3 1s", b'a', 5).clock, 5 << 16);
        assert_eq!(
            set(&mut t, b"api", "GCRA 4 4 1s", b'a', 5).clock,
            (5 << 16) + 1
        );
    }

    #[test]
    fn a_node_restarted_with_nothing_stamps_its_next_change_after_the_clusters() {
        // The cluster's table: a change made at 1000 ms by node b.
        let mut cluster = Table::new();
        let theirs = set(&mut cluster, b"api", "GCRA 1 1 1s", b'b', 1000);
        // Node a restarts empty (its clock at 0) and sets the policy at 1001 ms, before it
        // has heard from anyone: its change is newer, and wins where the two meet.
        let mut restarted = Table::new();
        let mine = set(&mut restarted, b"api", "GCRA 2 2 1s", b'a', 1001);
        assert!(mine > theirs);
        let held = restarted.versioned(b"api").unwrap().clone();
        assert_eq!(merge(&mut cluster, b"api", held), Merged::Applied);
        assert_eq!(cluster.get(b"api"), Some(&w("GCRA 2 2 1s")));
        let theirs = cluster.versioned(b"api").unwrap().clone();
        assert_eq!(merge(&mut restarted, b"api", theirs), Merged::Stale);
    }

    #[test]
    fn the_newer_change_wins_whatever_the_order_of_arrival() {
        let changes = [
            (b"p".as_slice(), live(3, b'a', "GCRA 1 1 1s")),
            (b"p", live(3, b'b', "GCRA 2 2 1s")),
            (
                b"p",
                Versioned {
                    version: Version {
                        clock: 4,
                        node: node(b'a'),
                    },
                    content: Content::Tombstone { deleted_at_ms: 7 },
                },
            ),
            (b"p", live(2, b'z', "GCRA 3 3 1s")),
            (b"q", live(1, b'a', "GCRA 4 4 1s")),
            // The same version twice with two contents: the higher digest wins everywhere.
            (b"r", live(9, b'c', "FIXEDWINDOW 1 1m")),
            (b"r", live(9, b'c', "FIXEDWINDOW 2 1m")),
        ];
        type Seen = (u64, Vec<(Vec<u8>, Versioned<W>)>);
        let mut reference: Option<Seen> = None;
        // Every order of the seven (5040): the same table, the same digest, and the running
        // digest equal to one computed afresh.
        let mut order: Vec<usize> = (0..changes.len()).collect();
        let mut count = 0;
        permute(&mut order, 0, &mut |order| {
            count += 1;
            let mut t = Table::new();
            for &i in order {
                let (name, change) = &changes[i];
                merge(&mut t, name, change.clone());
            }
            assert_eq!(t.digest(), recomputed(&t));
            let seen = (
                t.digest(),
                t.all().map(|(n, v)| (n.to_vec(), v.clone())).collect(),
            );
            match &reference {
                None => reference = Some(seen),
                Some(r) => assert_eq!(r, &seen, "order {order:?}"),
            }
        });
        assert_eq!(count, 5040);
        let (_, names) = reference.unwrap();
        assert_eq!(names[0].1.content, Content::Tombstone { deleted_at_ms: 7 });
        assert_eq!(names[1].1, live(1, b'a', "GCRA 4 4 1s"));
        let fw2 = live(9, b'c', "FIXEDWINDOW 2 1m");
        let fw1 = live(9, b'c', "FIXEDWINDOW 1 1m");
        let winner = if fw2.newer_than(&fw1) { fw2 } else { fw1 };
        assert_eq!(names[2].1, winner);
    }

    fn permute(items: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
        if k == items.len() {
            f(items);
            return;
        }
        for i in k..items.len() {
            items.swap(k, i);
            permute(items, k + 1, f);
            items.swap(k, i);
        }
    }

    #[test]
    fn a_delete_keeps_a_tombstone_in_a_cluster_and_removes_on_a_standalone_server() {
        let mut t = Table::new();
        set(&mut t, b"a", "GCRA 1 1 1s", b'a', 0);
        t.set_local(b"b", w("GCRA 1 1 1s"), STANDALONE, 0, 10)
            .unwrap();
        assert_eq!(t.delete_local(b"x", node(b'a'), 5, 0, true, 10), None);
        let v = t.delete_local(b"a", node(b'a'), 5, 0, true, 10).unwrap();
        assert_eq!(v.clock, 3);
        assert!(t.delete_local(b"b", STANDALONE, 5, 0, false, 10).is_some());
        assert_eq!((t.live_count(), t.tombstones()), (0, 1));
        // An older SET arriving late does not bring it back.
        assert_eq!(
            merge(&mut t, b"a", live(2, b'z', "GCRA 9 9 1s")),
            Merged::Stale
        );
        assert_eq!(t.get(b"a"), None);
        // The tombstone goes after its time.
        assert_eq!(t.expire_tombstones(5 + TOMBSTONE_TTL_MS - 1), 0);
        assert_eq!(t.expire_tombstones(5 + TOMBSTONE_TTL_MS), 1);
        assert_eq!(t.names().len(), 0);
        assert_eq!((t.live_count(), t.tombstones(), t.digest()), (0, 0, 0));
    }

    #[test]
    fn the_digest_covers_names_versions_contents_and_tombstones() {
        let mut a = Table::new();
        let mut b = Table::new();
        assert_eq!(a.digest(), b.digest());
        merge(&mut a, b"p", live(1, b'a', "GCRA 1 1 1s"));
        assert_ne!(a.digest(), b.digest());
        merge(&mut b, b"p", live(1, b'a', "GCRA 1 1 1s"));
        assert_eq!(a.digest(), b.digest());
        let mut c = b.clone();
        merge(&mut c, b"p", live(1, b'a', "GCRA 1 1 2s"));
        let mut d = b.clone();
        merge(&mut d, b"p", live(1, b'b', "GCRA 1 1 1s"));
        let mut e = b.clone();
        e.delete_local(b"p", node(b'a'), 0, 0, true, 10);
        let digests = [b.digest(), c.digest(), d.digest(), e.digest()];
        for i in 0..4 {
            for j in 0..i {
                assert_ne!(digests[i], digests[j], "{i} {j}");
            }
        }
        for t in [&b, &c, &d, &e] {
            assert_eq!(t.digest(), recomputed(t));
        }
        // ("ab", "c") and ("a", "bc") are two contents.
        assert_ne!(
            live(1, b'a', "ab c").content_digest(),
            live(1, b'a', "a bc").content_digest()
        );
    }

    #[test]
    fn a_reload_never_moves_the_clock_back() {
        let mut t: Table<W> = Table::new();
        merge(&mut t, b"p", live(50, b'a', "GCRA 1 1 1s"));
        let mut saved = BTreeMap::new();
        saved.insert(b"q".to_vec(), live(7, b'a', "GCRA 1 1 1s"));
        t.replace_all(saved, 8, u64::MAX);
        assert_eq!(t.clock(), 50);
        assert_eq!(set(&mut t, b"q", "GCRA 2 2 1s", b'a', 0).clock, 51);
        assert_eq!((t.live_count(), t.digest()), (1, recomputed(&t)));
    }

    #[test]
    fn a_load_into_a_cluster_nodes_table_keeps_what_is_newer_there() {
        // The replica learned a new name and a deletion after its primary's copy was made.
        let mut t: Table<W> = Table::new();
        merge(&mut t, b"api", live(5, b'a', "GCRA 1 1 1s"));
        merge(&mut t, b"web", live(8, b'b', "GCRA 2 2 1s"));
        let grave = Versioned {
            version: Version {
                clock: 9,
                node: node(b'b'),
            },
            content: Content::Tombstone { deleted_at_ms: 3 },
        };
        merge(&mut t, b"api", grave.clone());
        let mut copy = BTreeMap::new();
        copy.insert(b"api".to_vec(), live(5, b'a', "GCRA 1 1 1s"));
        copy.insert(b"old".to_vec(), live(2, b'a', "GCRA 3 3 1s"));
        copy.insert(b"new".to_vec(), live(u64::MAX, b'z', "GCRA 4 4 1s"));
        t.load_all(copy, 6, 100);
        assert_eq!(t.versioned(b"api"), Some(&grave));
        assert_eq!(t.get(b"web"), Some(&w("GCRA 2 2 1s")));
        assert_eq!(t.get(b"old"), Some(&w("GCRA 3 3 1s")));
        // Past the ceiling: at clock 0, as a load takes it.
        assert_eq!(t.versioned(b"new").unwrap().version.clock, 0);
        assert_eq!(t.clock(), 9);
        assert_eq!((t.live_count(), t.tombstones()), (3, 1));
        assert_eq!(t.digest(), recomputed(&t));
    }

    #[test]
    fn a_version_past_the_ceiling_is_refused_and_the_table_keeps_going() {
        let now = 1_000_000;
        let bounds = Bounds {
            ceiling: ceiling(now, 60_000),
            max: 100,
        };
        let mut t = Table::new();
        set(&mut t, b"api", "GCRA 1 1 1s", b'a', now);
        let before = (t.clock(), t.digest());
        for clock in [
            u64::MAX,
            wall_clock(now + 10 * 365 * 86_400_000),
            ceiling(now, 60_000) + 1,
        ] {
            assert_eq!(
                t.merge(b"api", live(clock, b'z', "GCRA 9 9 1s"), bounds),
                Merged::Ahead
            );
        }
        assert_eq!((t.clock(), t.digest()), before);
        // At the ceiling itself: taken.
        let top = ceiling(now, 60_000);
        assert_eq!(
            t.merge(b"api", live(top, b'z', "GCRA 9 9 1s"), bounds),
            Merged::Applied
        );
        // And the next change made here still wins, one past it.
        assert_eq!(set(&mut t, b"api", "GCRA 2 2 1s", b'a', now).clock, top + 1);
    }

    #[test]
    fn a_poisoned_table_loads_at_clock_zero_and_its_next_change_wins() {
        let now = 1_000_000;
        let top = ceiling(now, 60_000);
        let mut poisoned = BTreeMap::new();
        poisoned.insert(b"api".to_vec(), live(u64::MAX, b'z', "GCRA 9 9 1s"));
        poisoned.insert(b"web".to_vec(), live(wall_clock(now), b'b', "GCRA 1 1 1s"));
        let mut t = Table::new();
        t.replace_all(poisoned, u64::MAX, top);
        assert_eq!(t.versioned(b"api").unwrap().version.clock, 0);
        assert_eq!(t.clock(), wall_clock(now));
        assert_eq!(t.get(b"api"), Some(&w("GCRA 9 9 1s")));
        // Another node loaded the same: the change made here wins there.
        let mut other = t.clone();
        let v = set(&mut t, b"api", "GCRA 2 2 1s", b'a', now);
        let held = t.versioned(b"api").unwrap().clone();
        assert_eq!(
            other.merge(
                b"api",
                held,
                Bounds {
                    ceiling: top,
                    max: 10
                }
            ),
            Merged::Applied
        );
        assert_eq!(other.versioned(b"api").unwrap().version, v);
        // From an AOF or a primary, one at a time: the same.
        let mut loaded = Table::new();
        assert_eq!(
            loaded.load(b"api", live(u64::MAX, b'z', "GCRA 9 9 1s"), top),
            Merged::Applied
        );
        assert_eq!(
            (
                loaded.clock(),
                loaded.versioned(b"api").unwrap().version.clock
            ),
            (0, 0)
        );
    }

    #[test]
    fn live_policies_are_bounded_and_the_newest_tombstones_kept_so_a_delete_always_succeeds() {
        let bounds = Bounds {
            ceiling: u64::MAX,
            max: 2,
        };
        let mut t = Table::new();
        t.set_local(b"a", w("GCRA 1 1 1s"), node(b'a'), 0, 2)
            .unwrap();
        t.set_local(b"b", w("GCRA 1 1 1s"), node(b'a'), 0, 2)
            .unwrap();
        assert_eq!(
            t.set_local(b"c", w("GCRA 1 1 1s"), node(b'a'), 0, 2),
            Err(Full { max: 2 })
        );
        assert_eq!(
            t.merge(b"c", live(99, b'z', "GCRA 1 1 1s"), bounds),
            Merged::Full
        );
        // Replacing one is always room.
        assert!(t
            .set_local(b"a", w("GCRA 2 2 1s"), node(b'a'), 0, 2)
            .is_ok());
        assert_eq!(
            t.merge(b"b", live(99, b'z', "GCRA 3 3 1s"), bounds),
            Merged::Applied
        );
        // Tombstones of unknown names from elsewhere: two kept; then a newer one takes the
        // oldest's place, and one older than both is dropped as stale.
        let grave = |clock, at| Versioned {
            version: Version {
                clock,
                node: node(b'z'),
            },
            content: Content::<W>::Tombstone { deleted_at_ms: at },
        };
        assert_eq!(t.merge(b"x", grave(100, 10), bounds), Merged::Applied);
        assert_eq!(t.merge(b"y", grave(100, 20), bounds), Merged::Applied);
        assert_eq!(t.merge(b"z", grave(100, 30), bounds), Merged::Applied);
        assert!(t.versioned(b"x").is_none());
        assert_eq!(t.merge(b"w", grave(100, 5), bounds), Merged::Stale);
        assert!(t.versioned(b"w").is_none());
        // A delete from elsewhere of a live policy, the tombstones full: applied (the oldest,
        // y, gives way), as a delete made here is.
        assert_eq!(t.merge(b"b", grave(200, 40), bounds), Merged::Applied);
        assert!(t.versioned(b"y").is_none());
        assert!(t.delete_local(b"a", node(b'a'), 50, 0, true, 2).is_some());
        assert_eq!((t.live_count(), t.tombstones()), (0, 2));
        assert!(t.versioned(b"z").is_none());
        let kept: Vec<&[u8]> = t.all().map(|(n, _)| n).collect();
        assert_eq!(kept, [b"a".as_slice(), b"b"]);
        assert_eq!(t.digest(), recomputed(&t));
        // Two tables that took the same tombstones in other orders keep the same ones.
        let graves = [(b"p", 1), (b"q", 2), (b"r", 3), (b"s", 4)];
        let mut forward = Table::<W>::new();
        let mut backward = Table::<W>::new();
        for (name, at) in graves {
            forward.merge(name, grave(7, at), bounds);
        }
        for (name, at) in graves.iter().rev() {
            backward.merge(*name, grave(7, *at), bounds);
        }
        assert_eq!(forward.digest(), backward.digest());
        assert_eq!(forward.tombstones(), 2);
    }

    #[test]
    fn a_restamp_makes_what_a_name_holds_newer_than_the_floor() {
        let mut t = Table::new();
        set(&mut t, b"api", "GCRA 1 1 1s", b'a', 10);
        t.delete_local(b"api", node(b'a'), 5, 10, true, 10).unwrap();
        let v = t.restamp(b"api", node(b'a'), 1 << 40).unwrap();
        assert_eq!(v.clock, 1 << 40);
        assert_eq!(
            t.versioned(b"api").unwrap().content,
            Content::Tombstone { deleted_at_ms: 5 }
        );
        assert_eq!(t.restamp(b"nothing", node(b'a'), 1 << 40), None);
        assert!(t.plant(b"api", u64::MAX));
        assert_eq!(t.clock(), u64::MAX);
        assert_eq!(t.digest(), recomputed(&t));
    }
}
