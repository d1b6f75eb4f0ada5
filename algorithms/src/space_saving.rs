//! RL.TOP's summary: the keys denied most often lately, in bounded memory.
//!
//! Space-Saving (Metwally, Agrawal and El Abbadi, "Efficient computation of frequent and
//! top-k elements in data streams", 2005): at most `size` counters. A denied key already
//! counted gets one more; a new key takes a free counter, or, when all are taken, the
//! counter with the smallest count `m`, which it continues from: count `m + 1`, error `m`
//! (it may have been denied up to `m` times while not counted). So every count is at least
//! the key's true count and at most `error` above it, and every key denied more than
//! `total / size` times holds a counter. While fewer distinct keys were denied than there are
//! counters, every count is exact (error 0).
//!
//! The counters sit in slots, ordered by a binary min-heap of slot numbers by count, with a
//! hash index from key to slot: a denial costs one hash lookup (two when it takes over a
//! counter) and O(log size) swaps of two numbers (a new key replaces the root, the smallest).
//! "Lately" is two generations of one period each (`ratelimit.top-period`,
//! aligned to multiples of the period since the Unix epoch, on the module's clock): the
//! current one and the previous one, so a key's count covers the last one to two periods; a
//! period with no call at all drops both.
//!
//! Key names longer than [`MAX_KEY`] bytes are not recorded (counted in `untracked`), so
//! the memory is at most 2 × size × (MAX_KEY + the entry's overhead), twice over (the heap
//! and the index each own a copy).
//!
//! Uses nothing but the standard library; the module keeps one behind a lock
//! (`src/denials.rs`): the dispatcher records, RL.TOP and INFO read.

use std::collections::HashMap;

/// The longest key name recorded, in bytes.
pub const MAX_KEY: usize = 256;

#[derive(Debug, Clone)]
struct Counter {
    key: Box<[u8]>,
    count: u64,
    error: u64,
    /// Where this counter sits in the heap.
    at: usize,
}

/// One generation: a Space-Saving summary of at most `size` counters. The counters stay in
/// their slots; the heap orders slot numbers by count, and each counter knows its place in
/// it, so a step of the heap moves two numbers and hashes nothing: a denial hashes its key
/// once (twice when it takes over a counter).
#[derive(Debug, Default)]
struct Summary {
    slots: Vec<Counter>,
    heap: Vec<usize>,
    index: HashMap<Box<[u8]>, usize>,
}

impl Summary {
    fn full(&self, size: usize) -> bool {
        self.slots.len() >= size
    }

    fn count_at(&self, at: usize) -> u64 {
        self.slots[self.heap[at]].count
    }

    /// The smallest count, when every counter is taken (else 0: an absent key was never
    /// denied in this generation).
    fn floor(&self, size: usize) -> u64 {
        if self.full(size) && !self.heap.is_empty() {
            self.count_at(0)
        } else {
            0
        }
    }

    fn get(&self, key: &[u8]) -> Option<&Counter> {
        self.index.get(key).map(|&slot| &self.slots[slot])
    }

    fn record(&mut self, key: &[u8], size: usize) {
        if let Some(&slot) = self.index.get(key) {
            let counter = &mut self.slots[slot];
            counter.count = counter.count.saturating_add(1);
            let at = counter.at;
            self.sift_down(at);
            return;
        }
        if size == 0 {
            return;
        }
        let key: Box<[u8]> = key.into();
        if !self.full(size) {
            let slot = self.slots.len();
            let at = self.heap.len();
            self.slots.push(Counter {
                key: key.clone(),
                count: 1,
                error: 0,
                at,
            });
            self.heap.push(slot);
            self.index.insert(key, slot);
            self.sift_up(at);
            return;
        }
        // Every counter taken: the new key takes over the smallest.
        let slot = self.heap[0];
        let counter = &mut self.slots[slot];
        let smallest = counter.count;
        let old = std::mem::replace(&mut counter.key, key.clone());
        counter.count = smallest.saturating_add(1);
        counter.error = smallest;
        self.index.remove(&old);
        self.index.insert(key, slot);
        self.sift_down(0);
    }

    /// The heap orders the counters, each knows its place, and the index names each once.
    #[cfg(test)]
    fn is_consistent(&self) -> bool {
        let ordered =
            (1..self.heap.len()).all(|at| self.count_at((at - 1) / 2) <= self.count_at(at));
        let placed = self
            .heap
            .iter()
            .enumerate()
            .all(|(at, &slot)| self.slots[slot].at == at);
        let indexed = self.index.len() == self.slots.len()
            && self
                .slots
                .iter()
                .enumerate()
                .all(|(slot, c)| self.index.get(&c.key) == Some(&slot));
        ordered && placed && indexed && self.heap.len() == self.slots.len()
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        let (slot_a, slot_b) = (self.heap[a], self.heap[b]);
        self.slots[slot_a].at = a;
        self.slots[slot_b].at = b;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.count_at(parent) <= self.count_at(at) {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            for child in [left, right] {
                if child < self.heap.len() && self.count_at(child) < self.count_at(least) {
                    least = child;
                }
            }
            if least == at {
                return;
            }
            self.swap(at, least);
            at = least;
        }
    }
}

/// One key as RL.TOP lists it: denied at most `count` times lately, and at least
/// `count - error` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key's name.
    pub key: Vec<u8>,
    /// Denials counted, at least the true number.
    pub count: u64,
    /// How far `count` may be above the true number.
    pub error: u64,
}

/// The two generations and the settings they were made with.
#[derive(Debug, Default)]
pub struct Top {
    size: usize,
    period_us: u64,
    /// Where the current generation's period starts (µs since the Unix epoch).
    start_us: u64,
    current: Summary,
    previous: Summary,
    /// Denials of keys too long to record, since the summary was last emptied.
    untracked: u64,
}

impl Top {
    /// An empty summary of at most `size` counters a generation, each generation
    /// `period_us` long.
    pub fn new(size: usize, period_us: u64) -> Top {
        Top {
            size,
            period_us: period_us.max(1),
            ..Top::default()
        }
    }

    /// Whether it was made with these settings (else its owner makes one anew).
    pub fn is_for(&self, size: usize, period_us: u64) -> bool {
        self.size == size && self.period_us == period_us
    }

    /// Moves to the period holding `now_us`: the current generation becomes the previous
    /// one after one period, both are dropped after two. A clock that went back changes
    /// nothing.
    fn rotate(&mut self, now_us: u64) {
        let start = now_us - now_us % self.period_us;
        if start <= self.start_us {
            return;
        }
        if start == self.start_us.saturating_add(self.period_us) {
            self.previous = std::mem::take(&mut self.current);
        } else {
            self.previous = Summary::default();
            self.current = Summary::default();
        }
        self.start_us = start;
    }

    /// Counts one denial of `key` at `now_us`.
    pub fn record(&mut self, key: &[u8], now_us: u64) {
        if key.len() > MAX_KEY {
            self.untracked = self.untracked.saturating_add(1);
            return;
        }
        self.rotate(now_us);
        self.current.record(key, self.size);
    }

    /// Every key counted lately, most denied first (ties in byte order), its count the sum
    /// over both generations. A key missing from a full generation may have been denied
    /// there up to its smallest count: that is added to both its count and its error, so
    /// that `count - error <= true count <= count` holds for every entry.
    pub fn entries(&mut self, now_us: u64) -> Vec<Entry> {
        self.rotate(now_us);
        let size = self.size;
        let (cur_floor, prev_floor) = (self.current.floor(size), self.previous.floor(size));
        let mut merged: HashMap<&[u8], Entry> = HashMap::new();
        for c in &self.current.slots {
            let (count, error) = match self.previous.get(&c.key) {
                Some(p) => (
                    c.count.saturating_add(p.count),
                    c.error.saturating_add(p.error),
                ),
                None => (
                    c.count.saturating_add(prev_floor),
                    c.error.saturating_add(prev_floor),
                ),
            };
            merged.insert(
                &c.key,
                Entry {
                    key: c.key.to_vec(),
                    count,
                    error,
                },
            );
        }
        for p in &self.previous.slots {
            if merged.contains_key(&p.key[..]) {
                continue;
            }
            merged.insert(
                &p.key,
                Entry {
                    key: p.key.to_vec(),
                    count: p.count.saturating_add(cur_floor),
                    error: p.error.saturating_add(cur_floor),
                },
            );
        }
        let mut out: Vec<Entry> = merged.into_values().collect();
        out.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        out
    }

    /// Counters in use in both generations, and the denials of keys too long to record.
    pub fn usage(&self) -> (usize, u64) {
        (
            self.current.heap.len() + self.previous.heap.len(),
            self.untracked,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: u64 = 60_000_000;
    const T0: u64 = 1_700_000_000_000_000 - 1_700_000_000_000_000 % P;

    fn listed(top: &mut Top, now: u64) -> Vec<(String, u64, u64)> {
        top.entries(now)
            .into_iter()
            .map(|e| (String::from_utf8(e.key).unwrap(), e.count, e.error))
            .collect()
    }

    #[test]
    fn exact_while_the_keys_fit() {
        let mut top = Top::new(3, P);
        for (key, n) in [("a", 5), ("b", 2), ("c", 7)] {
            for _ in 0..n {
                top.record(key.as_bytes(), T0);
            }
        }
        assert_eq!(
            listed(&mut top, T0),
            [("c".into(), 7, 0), ("a".into(), 5, 0), ("b".into(), 2, 0)]
        );
    }

    #[test]
    fn a_new_key_takes_the_smallest_counter_with_its_error() {
        let mut top = Top::new(2, P);
        for _ in 0..4 {
            top.record(b"a", T0);
        }
        top.record(b"b", T0);
        top.record(b"b", T0);
        top.record(b"c", T0);
        // c took b's counter (2): count 3, error 2.
        assert_eq!(
            listed(&mut top, T0),
            [("a".into(), 4, 0), ("c".into(), 3, 2)]
        );
    }

    #[test]
    fn two_generations_then_nothing() {
        let mut top = Top::new(4, P);
        top.record(b"a", T0);
        top.record(b"a", T0 + P - 1);
        top.record(b"a", T0 + P);
        top.record(b"b", T0 + P);
        assert_eq!(
            listed(&mut top, T0 + P),
            [("a".into(), 3, 0), ("b".into(), 1, 0)]
        );
        // One period on, the first is gone.
        assert_eq!(
            listed(&mut top, T0 + 2 * P),
            [("a".into(), 1, 0), ("b".into(), 1, 0)]
        );
        assert_eq!(listed(&mut top, T0 + 3 * P), []);
        // A clock that goes back changes nothing.
        top.record(b"z", T0);
        assert_eq!(listed(&mut top, T0), [("z".into(), 1, 0)]);
    }

    #[test]
    fn long_keys_and_size_zero_record_nothing() {
        let mut top = Top::new(2, P);
        top.record(&[b'x'; MAX_KEY + 1], T0);
        top.record(&[b'y'; MAX_KEY], T0);
        assert_eq!(top.usage(), (1, 1));
        let mut none = Top::new(0, P);
        none.record(b"a", T0);
        assert_eq!(none.entries(T0), []);
    }

    proptest! {
        /// Space-Saving's guarantees against an exact count, over two generations.
        #[test]
        fn counts_bound_the_truth(
            size in 1usize..6,
            stream in proptest::collection::vec((0u8..10, 0u64..2), 0..200),
        ) {
            // In the order of time, as the dispatcher records them.
            let mut sorted = stream.clone();
            sorted.sort_by_key(|&(_, g)| g);
            let mut top = Top::new(size, P);
            let mut truth: HashMap<Vec<u8>, u64> = HashMap::new();
            for &(key, generation) in &sorted {
                top.record(&[key], T0 + generation * P);
                *truth.entry(vec![key]).or_default() += 1;
                prop_assert!(top.current.is_consistent() && top.previous.is_consistent());
            }
            let entries = top.entries(T0 + P);
            prop_assert!(entries.len() <= 2 * size);
            for e in &entries {
                let t = truth.get(&e.key).copied().unwrap_or(0);
                prop_assert!(e.count >= t, "{:?} true {}", e, t);
                prop_assert!(e.count - e.error <= t, "{:?} true {}", e, t);
            }
            let distinct = truth.len();
            if distinct <= size {
                // Fewer distinct keys than counters in either generation: exact.
                prop_assert_eq!(entries.len(), distinct);
                prop_assert!(entries.iter().all(|e| e.error == 0 && e.count == truth[&e.key]));
            }
            prop_assert!(entries.windows(2).all(|w| w[0].count >= w[1].count));
        }
    }
}
