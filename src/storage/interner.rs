//! A table of interned values, each distinct value once in a numbered slot, with the number
//! of holders: the packed forms ([`super::compact`]) keep their parameter sets (parameters
//! and an epoch) in one, and a key's inline word or cell holds the slot's id. The table
//! knows nothing of what it holds; `compact` owns the module's one table.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// FNV-1a: parameters are a few integers, and a siphash per new key is not needed here.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Interned values (the module's: parameter sets): each distinct one once, with the number
/// of keys that hold it.
///
/// A set that no key holds any more is released, and so is the memory it took: a freed id
/// is reused lowest first, the slots past the highest id in use are dropped, and the table
/// and the map give their spare capacity back once they are a quarter full. So the table
/// holds as many slots as the highest id in use, and each call costs O(log n) amortized
/// (the rare shrink copies what is left, paid for by the releases before it).
pub struct Interner<T> {
    ids: HashMap<T, u32, BuildHasherDefault<Fnv>>,
    /// Slot `id` holds the value of that id and the keys that hold it (`None`: free).
    slots: Vec<Option<(T, u64)>>,
    /// Free ids below `slots.len()`, taken lowest first.
    free: BTreeSet<u32>,
}

/// What the table holds, for `INFO ratelimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Distinct parameter sets held.
    pub params: usize,
    /// Slots in the table (the highest id in use, plus one).
    pub slots: usize,
    /// Bytes the table, the map and the free list take (their capacity, estimated).
    pub bytes: usize,
}

impl<T> Interner<T> {
    /// An empty table.
    pub const fn new() -> Interner<T> {
        Interner {
            ids: HashMap::with_hasher(BuildHasherDefault::new()),
            slots: Vec::new(),
            free: BTreeSet::new(),
        }
    }
}

impl<T: Hash + Eq + Copy> Interner<T> {
    /// The id of `params`, taking one reference to it.
    pub fn acquire(&mut self, params: T) -> u32 {
        if let Some(&id) = self.ids.get(&params) {
            if let Some(Some((_, refs))) = self.slots.get_mut(id as usize) {
                *refs += 1;
            }
            return id;
        }
        let id = match self.free.pop_first() {
            Some(id) => {
                self.slots[id as usize] = Some((params, 1));
                id
            }
            None => {
                self.slots.push(Some((params, 1)));
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(params, id);
        id
    }

    /// One more reference to `id` (a copied key).
    pub fn retain(&mut self, id: u32) {
        if let Some(Some((_, refs))) = self.slots.get_mut(id as usize) {
            *refs += 1;
        }
    }

    /// Drops one reference to `id`; its slot is freed when no key holds it, and with it the
    /// memory nothing uses any more.
    pub fn release(&mut self, id: u32) {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return;
        };
        let Some((params, refs)) = slot else {
            return;
        };
        *refs -= 1;
        if *refs > 0 {
            return;
        }
        self.ids.remove(params);
        *slot = None;
        self.free.insert(id);
        // Slots past the highest id in use go (each slot is dropped once per push).
        while let Some(None) = self.slots.last() {
            self.slots.pop();
        }
        let len = self.slots.len() as u32;
        if self.free.last().is_some_and(|&last| last >= len) {
            let _ = self.free.split_off(&len);
        }
        if self.slots.len() * 4 < self.slots.capacity() {
            self.slots.shrink_to(self.slots.len() * 2);
        }
        if self.ids.len() * 4 < self.ids.capacity() {
            self.ids.shrink_to(self.ids.len() * 2);
        }
    }

    pub fn get(&self, id: u32) -> Option<&T> {
        self.slots
            .get(id as usize)?
            .as_ref()
            .map(|(params, _)| params)
    }

    /// Distinct parameter sets held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The references to `id` (0: not in use).
    #[cfg(test)]
    pub fn refs(&self, id: u32) -> u64 {
        match self.slots.get(id as usize) {
            Some(Some((_, refs))) => *refs,
            _ => 0,
        }
    }

    pub fn usage(&self) -> Usage {
        use std::mem::size_of;
        // The map's buckets and a control byte each, at 8/7 of its capacity; a B-tree node
        // of the free list holds up to 11 ids in about 64 bytes.
        let map = (self.ids.capacity() * 8 / 7) * (size_of::<(T, u32)>() + 1);
        Usage {
            params: self.ids.len(),
            slots: self.slots.len(),
            bytes: self.slots.capacity() * size_of::<Option<(T, u64)>>()
                + map
                + self.free.len().div_ceil(11) * 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of three integers, as a parameter set is.
    fn set(burst: u64, rate: u64, period_ms: u64) -> (u64, u64, u64) {
        (burst, rate, period_ms)
    }

    #[test]
    fn the_interner_counts_references() {
        let mut t = Interner::new();
        let a = set(1, 2, 3);
        let b = set(1, 2, 4);
        let ia = t.acquire(a);
        assert_eq!(t.acquire(a), ia);
        let ib = t.acquire(b);
        assert_ne!(ia, ib);
        t.retain(ib);
        t.release(ia);
        assert_eq!(t.get(ia), Some(&a));
        t.release(ia);
        assert_eq!((t.get(ia), t.len()), (None, 1));
        // The freed slot is reused.
        let c = set(9, 9, 9);
        assert_eq!(t.acquire(c), ia);
        t.release(ib);
        t.release(ib);
        t.release(ib); // one too many: ignored
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_interner_gives_back_what_nothing_uses() {
        let mut t = Interner::new();
        let nth = |n: u64| set(1, n, 1000);
        let ids: Vec<u32> = (1..=50_000).map(|n| t.acquire(nth(n))).collect();
        let full = t.usage();
        assert_eq!((full.params, full.slots), (50_000, 50_000));
        // The last one stays: the table keeps slots up to it, no more.
        for &id in &ids[..49_999] {
            t.release(id);
        }
        assert_eq!((t.usage().params, t.usage().slots), (1, 50_000));
        // A new set takes the lowest free id.
        assert_eq!(t.acquire(nth(0)), 0);
        t.release(0);
        t.release(ids[49_999]);
        let empty = t.usage();
        assert_eq!((empty.params, empty.slots), (0, 0));
        assert_eq!(empty.bytes, 0, "{full:?} then {empty:?}");
        // Released in any order, all of it goes too.
        let ids: Vec<u32> = (1..=1000).map(|n| t.acquire(nth(n))).collect();
        for &id in ids.iter().step_by(2).chain(ids.iter().skip(1).step_by(2)) {
            t.release(id);
        }
        assert_eq!(t.usage().slots, 0);
        assert_eq!(t.usage().bytes, 0);
    }
}
