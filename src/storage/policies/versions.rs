//! The policies table with a version on every name, so that every node of a cluster ends up
//! with the same table whatever order the changes reach it in (docs/cluster.md, Policies).
//!
//! A change made here (RL.POLICY.SET or DEL from a client) gets the version `(clock, node)`:
//! a Lamport clock, one more than the largest clock the table has seen (its own changes and
//! every change merged from elsewhere), and the id of the node that made it. A change from
//! elsewhere replaces what the table holds for its name only when it is newer: a higher
//! clock, then a higher node id, then (the same version for two contents, which only a node
//! restarted from an old RDB can write) the higher content digest. That order is total and
//! every node applies it, so all converge to the same winner. A delete in a cluster leaves a
//! tombstone, a version with no rules, kept for [`TOMBSTONE_TTL_MS`] so that an older SET
//! arriving late cannot bring the policy back; on a standalone server a delete just removes.
//!
//! Pure: no Redis, no clock (times are handed in), no I/O; generic over what a policy is, so
//! that its tests use plain words.

use std::collections::BTreeMap;

/// The length of a Redis Cluster node id (40 hex characters).
pub const NODE_ID_LEN: usize = 40;

/// How long a tombstone is kept: a node away (stopped, partitioned) for longer than this and
/// holding the deleted policy brings it back when it returns (docs/cluster.md says so).
pub const TOMBSTONE_TTL_MS: u64 = 24 * 3_600_000;

/// A node id as 40 bytes (the standalone server's is all `0`).
pub type NodeId = [u8; NODE_ID_LEN];

/// The node id a standalone server writes its versions with.
pub const STANDALONE: NodeId = [b'0'; NODE_ID_LEN];

/// A change's version: compared by clock, then node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub clock: u64,
    pub node: NodeId,
}

/// What a policy is, for the table: its words, which the digest covers.
pub trait Words {
    fn words(&self) -> &[Vec<u8>];
}

/// What a name holds: a policy, or a tombstone since `deleted_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content<P> {
    Live(P),
    Tombstone { deleted_at_ms: u64 },
}

/// A name's content and the version of the change that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<P> {
    pub version: Version,
    pub content: Content<P>,
}

/// FNV-1a, 64 bits: the same on every platform and build, which a digest compared between
/// nodes needs (std's hasher is neither stable nor specified).
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Fnv {
    pub const fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

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

    pub fn u64(self, n: u64) -> Fnv {
        self.bytes(&n.to_le_bytes())
    }

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
}

/// Whether a change from elsewhere was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// It was newer: the name now holds it.
    Applied,
    /// The table already held it, or something newer.
    Stale,
}

/// The table: each name's latest change, and the largest clock seen.
#[derive(Debug, Clone)]
pub struct Table<P> {
    names: BTreeMap<Vec<u8>, Versioned<P>>,
    clock: u64,
}

impl<P> Default for Table<P> {
    fn default() -> Self {
        Table::new()
    }
}

impl<P> Table<P> {
    pub const fn new() -> Table<P> {
        Table {
            names: BTreeMap::new(),
            clock: 0,
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
        self.live().count()
    }

    /// How many tombstones are kept.
    pub fn tombstones(&self) -> usize {
        self.names.len() - self.live_count()
    }

    /// The largest clock seen.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    fn next_version(&mut self, node: NodeId) -> Version {
        self.clock = self.clock.saturating_add(1);
        Version {
            clock: self.clock,
            node,
        }
    }

    /// A policy set here, by the node `node`: its version.
    pub fn set_local(&mut self, name: &[u8], policy: P, node: NodeId) -> Version {
        let version = self.next_version(node);
        self.names.insert(
            name.to_vec(),
            Versioned {
                version,
                content: Content::Live(policy),
            },
        );
        version
    }

    /// A policy deleted here, by `node`, at `now_ms`: its version, or None when `name` was not
    /// live (nothing changes then). With `tombstone`, the name keeps a tombstone (a
    /// cluster's); else it is removed (a standalone server's).
    pub fn delete_local(
        &mut self,
        name: &[u8],
        node: NodeId,
        now_ms: u64,
        tombstone: bool,
    ) -> Option<Version> {
        self.get(name)?;
        let version = self.next_version(node);
        if tombstone {
            self.names.insert(
                name.to_vec(),
                Versioned {
                    version,
                    content: Content::Tombstone {
                        deleted_at_ms: now_ms,
                    },
                },
            );
        } else {
            self.names.remove(name);
        }
        Some(version)
    }

    /// Removes the tombstones older than [`TOMBSTONE_TTL_MS`] at `now_ms`; how many.
    pub fn expire_tombstones(&mut self, now_ms: u64) -> usize {
        let before = self.names.len();
        self.names.retain(|_, v| match v.content {
            Content::Tombstone { deleted_at_ms } => {
                now_ms.saturating_sub(deleted_at_ms) < TOMBSTONE_TTL_MS
            }
            Content::Live(_) => true,
        });
        before - self.names.len()
    }

    /// Takes `names` whole (an RDB's), and the larger of the two clocks: a clock never goes
    /// back, so a change made after a reload is newer than any this node made before.
    pub fn replace_all(&mut self, names: BTreeMap<Vec<u8>, Versioned<P>>, clock: u64) {
        self.names = names;
        self.clock = self.clock.max(clock).max(
            self.names
                .values()
                .map(|v| v.version.clock)
                .max()
                .unwrap_or(0),
        );
    }

    /// Every name and what it holds, tombstones included (what an RDB saves).
    pub fn names(&self) -> &BTreeMap<Vec<u8>, Versioned<P>> {
        &self.names
    }
}

impl<P: Words> Table<P> {
    /// A change from elsewhere (another node, a replica's primary, an AOF): applied when it is
    /// newer than what `name` holds. The clock moves up to its clock either way.
    pub fn merge(&mut self, name: &[u8], incoming: Versioned<P>) -> Merged {
        self.clock = self.clock.max(incoming.version.clock);
        if let Some(held) = self.names.get(name) {
            if !incoming.newer_than(held) {
                return Merged::Stale;
            }
        }
        self.names.insert(name.to_vec(), incoming);
        Merged::Applied
    }

    /// The digest of the whole table (names, versions, contents, tombstones included, in name
    /// order): equal on two nodes exactly when they hold the same table (bar a collision).
    pub fn digest(&self) -> u64 {
        self.names
            .iter()
            .fold(Fnv::new(), |h, (name, v)| {
                h.field(name)
                    .u64(v.version.clock)
                    .bytes(&v.version.node)
                    .u64(v.content_digest())
            })
            .finish()
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

    #[test]
    fn a_local_change_is_one_past_every_clock_seen() {
        let mut t = Table::new();
        assert_eq!(t.set_local(b"api", w("GCRA 1 1 1s"), node(b'a')).clock, 1);
        assert_eq!(
            t.merge(b"web", live(41, b'b', "FIXEDWINDOW 5 1m")),
            Merged::Applied
        );
        let v = t.set_local(b"api", w("GCRA 2 2 1s"), node(b'a'));
        assert_eq!(
            v,
            Version {
                clock: 42,
                node: node(b'a')
            }
        );
        assert_eq!(t.get(b"api"), Some(&w("GCRA 2 2 1s")));
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
        // Every order of the seven (5040): the same table, the same digest.
        let mut order: Vec<usize> = (0..changes.len()).collect();
        let mut count = 0;
        permute(&mut order, 0, &mut |order| {
            count += 1;
            let mut t = Table::new();
            for &i in order {
                let (name, change) = &changes[i];
                t.merge(name, change.clone());
            }
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
        t.set_local(b"a", w("GCRA 1 1 1s"), node(b'a'));
        t.set_local(b"b", w("GCRA 1 1 1s"), STANDALONE);
        assert_eq!(t.delete_local(b"x", node(b'a'), 5, true), None);
        let v = t.delete_local(b"a", node(b'a'), 5, true).unwrap();
        assert_eq!(v.clock, 3);
        assert!(t.delete_local(b"b", STANDALONE, 5, false).is_some());
        assert_eq!((t.live_count(), t.tombstones()), (0, 1));
        // An older SET arriving late does not bring it back.
        assert_eq!(t.merge(b"a", live(2, b'z', "GCRA 9 9 1s")), Merged::Stale);
        assert_eq!(t.get(b"a"), None);
        // The tombstone goes after its time.
        assert_eq!(t.expire_tombstones(5 + TOMBSTONE_TTL_MS - 1), 0);
        assert_eq!(t.expire_tombstones(5 + TOMBSTONE_TTL_MS), 1);
        assert_eq!(t.names().len(), 0);
    }

    #[test]
    fn the_digest_covers_names_versions_contents_and_tombstones() {
        let mut a = Table::new();
        let mut b = Table::new();
        assert_eq!(a.digest(), b.digest());
        a.merge(b"p", live(1, b'a', "GCRA 1 1 1s"));
        assert_ne!(a.digest(), b.digest());
        b.merge(b"p", live(1, b'a', "GCRA 1 1 1s"));
        assert_eq!(a.digest(), b.digest());
        let mut c = b.clone();
        c.merge(b"p", live(1, b'a', "GCRA 1 1 2s"));
        let mut d = b.clone();
        d.merge(b"p", live(1, b'b', "GCRA 1 1 1s"));
        let mut e = b.clone();
        e.delete_local(b"p", node(b'a'), 0, true);
        let digests = [b.digest(), c.digest(), d.digest(), e.digest()];
        for i in 0..4 {
            for j in 0..i {
                assert_ne!(digests[i], digests[j], "{i} {j}");
            }
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
        t.merge(b"p", live(50, b'a', "GCRA 1 1 1s"));
        let mut saved = BTreeMap::new();
        saved.insert(b"q".to_vec(), live(7, b'a', "GCRA 1 1 1s"));
        t.replace_all(saved, 8);
        assert_eq!(t.clock(), 50);
        assert_eq!(t.set_local(b"q", w("GCRA 2 2 1s"), node(b'a')).clock, 51);
    }
}
