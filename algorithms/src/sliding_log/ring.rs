//! The ring: a key's admitted requests packed into 32-bit words, oldest first (the
//! sliding log's module doc, The ring, says why), with the index that keeps pace with it.
//! The words' format and their readers are in `words.rs`.

use std::collections::VecDeque;

use super::index::{Index, Tally, STRIDE};
#[cfg(test)]
use super::words::Entries;
use super::words::{FLAG, MAX_LIMIT, OFFSET_MASK};

/// The admitted requests still remembered, oldest first.
///
/// Invariants (every admitted write keeps them; [`is_valid`] checks them):
/// - `words` is a sequence of entries: either one timestamp word without [`FLAG`] (a request
///   of cost 1), or a timestamp word with [`FLAG`] followed by a cost word in
///   `2..=MAX_LIMIT` (a request of that cost).
/// - An entry's time is `base_us + (word & !FLAG) × unit_us` µs since the Unix epoch; the
///   times never decrease from front to back.
/// - `unit_us` is a power of two. An admitted write leaves it at least
///   [`unit_for`](super::unit_for) the window: that unit, or a coarser one an earlier window
///   needed (see the module doc); after a change to a window that needs a coarser unit, it
///   is the old one until the next admitted write re-encodes the ring.
/// - `total` is the sum of the entries' costs (1 for an unflagged word).
///
/// An empty ring (`total` 0) is a fresh key; `base_us` then does not matter.
///
/// Build one with [`State::new`], which also builds the ring's index; read the fields,
/// but leave changing them to the algorithm, which keeps the index in step with the words.
/// Two states are equal when their words, base, unit and total are (the index follows from
/// the words).
#[derive(Debug, Clone)]
pub struct State {
    /// The entries, oldest first: a timestamp word, and a cost word after a flagged one.
    pub words: VecDeque<u32>,
    /// The instant offsets count from, µs since the Unix epoch.
    pub base_us: u64,
    /// The unit of an offset, in µs.
    pub unit_us: u64,
    /// The units of all the entries.
    pub total: u64,
    /// Boxed: a state sits inside every stored value's enum (a policy key holds one per rule),
    /// so its size is paid by every kind of key; the index is paid only by logs.
    pub(super) index: Box<Index>,
}

impl PartialEq for State {
    fn eq(&self, other: &State) -> bool {
        (&self.words, self.base_us, self.unit_us, self.total)
            == (&other.words, other.base_us, other.unit_us, other.total)
    }
}

impl Eq for State {}

impl State {
    /// A state from its stored fields (a storage layer loading one), with its index: O(words),
    /// like [`is_valid`]. A state that breaks the invariants gets an index too; the algorithm
    /// never panics on it.
    pub fn new(words: VecDeque<u32>, base_us: u64, unit_us: u64, total: u64) -> State {
        let index = Box::new(Index::build(&words));
        State {
            words,
            base_us,
            unit_us,
            total,
            index,
        }
    }

    pub(super) fn empty(base_us: u64, unit_us: u64) -> State {
        State::new(VecDeque::new(), base_us, unit_us, 0)
    }

    pub(super) fn unit(&self) -> u128 {
        u128::from(self.unit_us.max(1))
    }

    /// The time of an entry at `offset`, in µs (u128: never wraps, whatever the state).
    pub(super) fn time_us(&self, offset: u32) -> u128 {
        u128::from(self.base_us) + u128::from(offset & OFFSET_MASK) * self.unit()
    }

    #[cfg(test)]
    pub(super) fn entries(&self) -> Entries<std::collections::vec_deque::Iter<'_, u32>> {
        Entries {
            words: self.words.iter(),
        }
    }

    /// Appends an entry of `cost` units (at least 1) at `offset`, keeping the index in step:
    /// one word for a cost of 1, a flagged word and a cost word otherwise.
    pub(super) fn push(&mut self, offset: u32, cost: u64) {
        // cost <= limit <= MAX_LIMIT: it fits a cost word with the top bit clear.
        let cost_word = u32::try_from(cost.min(MAX_LIMIT)).unwrap_or(OFFSET_MASK);
        let taken = if cost_word > 1 { 2 } else { 1 };
        self.index
            .append(self.words.len(), u64::from(cost_word.max(1)), taken);
        if cost_word > 1 {
            self.words.push_back(offset | FLAG);
            self.words.push_back(cost_word);
        } else {
            self.words.push_back(offset);
        }
        if !self.index.indexed && self.words.len() > STRIDE as usize {
            // Past a walk's length: the checkpoints from now on (tallies restart from this
            // front; only their differences are read).
            *self.index = Index::build(&self.words);
        }
    }

    /// Drops the words from `at` (an entry's first word) on, keeping the index in step: the
    /// checkpoints at or after it go, and the end tally is the one before it. O(STRIDE).
    pub(super) fn cut(&mut self, at: usize) {
        let end = self.index.before(&self.words, at);
        let first = self.index.first_checkpoint();
        let kept = at
            .checked_sub(first)
            .map_or(0, |past| past.div_ceil(STRIDE as usize));
        self.index.checkpoints.truncate(kept);
        self.index.end = end;
        self.words.truncate(at);
    }

    /// Memory follows what is admitted: gives back a ring that is three quarters empty.
    pub(super) fn shrink(&mut self) {
        let capacity = self.words.capacity();
        if capacity > 64 && self.words.len() < capacity / 4 {
            self.words.shrink_to(self.words.len() * 2);
        }
        self.index.shrink();
    }

    /// The newest entry's offset, read from the back: the last word is a cost word exactly
    /// when the word before it carries [`FLAG`] (cost words never do).
    pub(super) fn newest_offset(&self) -> Option<u32> {
        let last = *self.words.back()?;
        let before = self
            .words
            .len()
            .checked_sub(2)
            .and_then(|i| self.words.get(i));
        match before {
            Some(&word) if word & FLAG != 0 => Some(word & OFFSET_MASK),
            _ => Some(last & OFFSET_MASK),
        }
    }
}

/// The heap memory of a key's ring, for MEMORY USAGE: 4 bytes per word of capacity, and
/// 16 per checkpoint of the index (one per 64 words).
pub fn heap_bytes(state: &State) -> usize {
    let checkpoints = state
        .index
        .checkpoints
        .capacity()
        .saturating_mul(std::mem::size_of::<Tally>());
    state
        .words
        .capacity()
        .saturating_mul(std::mem::size_of::<u32>())
        .saturating_add(checkpoints)
        .saturating_add(std::mem::size_of::<Index>())
}

/// Whether a state keeps the invariants documented on [`State`] (for a storage layer that
/// loads one from outside). The algorithm never panics on a state that breaks them, but its
/// decisions are then only as good as the state.
pub fn is_valid(state: &State) -> bool {
    if !state.unit_us.is_power_of_two() {
        return false;
    }
    let mut words = state.words.iter();
    let mut sum: u64 = 0;
    let mut previous = 0;
    while let Some(&word) = words.next() {
        let offset = word & OFFSET_MASK;
        if offset < previous {
            return false;
        }
        previous = offset;
        let cost = if word & FLAG == 0 {
            1
        } else {
            match words.next() {
                Some(&cost) if (2..=MAX_LIMIT).contains(&u64::from(cost)) => u64::from(cost),
                _ => return false,
            }
        };
        sum = sum.saturating_add(cost);
    }
    sum == state.total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sliding_log::tests::{key_after, params, state, S, T0};
    use crate::sliding_log::*;
    use crate::testing::{peek, step, Key};

    #[test]
    fn a_cost_above_one_takes_two_words() {
        let p = params(100, 60_000);
        let key = key_after(&p, &[(0, 1), (5, 7), (9, 1), (9, 40)]);
        let s = state(&key);
        assert_eq!(s.words, [0, 5 | FLAG, 7, 9, 9 | FLAG, 40]);
        assert_eq!((s.base_us, s.unit_us, s.total), (T0, 1, 49));
        assert_eq!(s.newest_offset(), Some(9));
        assert!(is_valid(s));
        let d = peek::<SlidingLog>(&p, &key, T0 + 10, 0);
        assert_eq!(d.remaining, 51);
        // The newest entry read from the back whether it is one word or two.
        let key = key_after(&p, &[(0, 2), (3, 1)]);
        assert_eq!(state(&key).words, [FLAG, 2, 3]);
        assert_eq!(state(&key).newest_offset(), Some(3));
    }

    #[test]
    fn a_hundred_thousand_requests_take_at_most_eight_bytes_each() {
        let n: u64 = 100_000;
        let p = params(n, 60_000);
        let mut key: Key<SlidingLog> = None;
        for i in 0..n {
            assert!(step::<SlidingLog>(&p, &mut key, T0 + i, 1).allowed);
        }
        let s = state(&key);
        assert_eq!(s.words.len() as u64, n);
        // The ring, the index's checkpoints, and the boxed index itself.
        let index = s.index.checkpoints.capacity() * 16 + std::mem::size_of::<Index>();
        let bytes = s.words.capacity() * 4 + index + std::mem::size_of::<State>();
        assert_eq!(heap_bytes(s), s.words.capacity() * 4 + index);
        assert!(bytes as u64 <= 8 * n, "{bytes} bytes for {n} entries");
    }

    #[test]
    fn memory_follows_what_is_admitted() {
        let p = params(100_000, 1000);
        let mut key: Key<SlidingLog> = None;
        for i in 0..10_000 {
            step::<SlidingLog>(&p, &mut key, T0 + i, 1);
        }
        assert!(state(&key).words.capacity() >= 10_000);
        // A second later, one request a second: the ring gives its memory back.
        for i in 1..=10 {
            step::<SlidingLog>(&p, &mut key, T0 + i * S, 1);
        }
        let s = state(&key);
        assert_eq!((s.words.len(), s.total), (1, 1));
        assert!(s.words.capacity() <= 64, "capacity {}", s.words.capacity());
    }
}
