//! The ring's words: how a request is written in 32-bit words (a timestamp word, and a cost
//! word after a flagged one), and the readers of those words that the ring, its index and the
//! algorithm share.

use std::collections::VecDeque;

/// The top bit of a timestamp word: the request cost more than 1, and the next word holds
/// its cost.
pub const FLAG: u32 = 1 << 31;
/// The offset bits of a timestamp word.
pub(super) const OFFSET_MASK: u32 = FLAG - 1;
/// The largest offset a timestamp word holds, 2^31 - 1 units.
pub(super) const MAX_OFFSET: u128 = OFFSET_MASK as u128;
/// The largest limit (and so cost) the ring stores: a cost word's top bit stays clear.
pub const MAX_LIMIT: u64 = OFFSET_MASK as u64;

/// One request in the ring.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// Read by the walk the tests keep as a reference.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) offset: u32,
    pub(super) cost: u64,
    /// Words it takes: 1 or 2.
    pub(super) words: usize,
}

/// Reads the entries of a ring from the front. A flagged last word without its cost word
/// (only in a broken state) reads as a request of cost 1.
pub(super) struct Entries<I> {
    pub(super) words: I,
}

impl<'a, I: Iterator<Item = &'a u32>> Iterator for Entries<I> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let &word = counted(self.words.next())?;
        let offset = word & OFFSET_MASK;
        if word & FLAG != 0 {
            if let Some(&cost) = counted(self.words.next()) {
                return Some(Entry {
                    offset,
                    cost: u64::from(cost),
                    words: 2,
                });
            }
        }
        Some(Entry {
            offset,
            cost: 1,
            words: 1,
        })
    }
}

/// The word at `i`, if any. Tests count the words that calls read.
pub(super) fn word(words: &VecDeque<u32>, i: usize) -> Option<u32> {
    counted(words.get(i)).copied()
}

/// A word read (tests count them; nothing otherwise).
fn counted<T>(word: Option<T>) -> Option<T> {
    #[cfg(test)]
    if word.is_some() {
        WORDS_READ.with(|n| n.set(n.get() + 1));
    }
    word
}

/// The entry that starts at word `i`: its cost and the words it takes. As [`Entries`] reads
/// it: a flagged last word without its cost word counts as a request of cost 1.
pub(super) fn entry_at(words: &VecDeque<u32>, i: usize) -> Option<(u64, usize)> {
    let first = word(words, i)?;
    if first & FLAG != 0 {
        if let Some(cost) = word(words, i + 1) {
            return Some((u64::from(cost), 2));
        }
    }
    Some((1, 1))
}

/// Whether word `i` is a cost word: the word before it is flagged (cost words never are).
pub(super) fn is_cost_word(words: &VecDeque<u32>, i: usize) -> bool {
    i > 0 && word(words, i - 1).is_some_and(|before| before & FLAG != 0)
}

#[cfg(test)]
thread_local! {
    /// The ring's words that calls on this thread have read (see [`word`]).
    pub(super) static WORDS_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The words a closure reads.
#[cfg(test)]
pub(super) fn words_read<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = WORDS_READ.with(|n| n.get());
    let t = f();
    (t, WORDS_READ.with(|n| n.get()) - before)
}
