//! Sliding log: the exact sliding window.
//!
//! The intuition: remember when every admitted unit was admitted. A request is admitted when
//! the units admitted in the last `window` — the half-open interval `(now - window, now]` —
//! plus its cost are at most `limit`. Nothing is estimated: it is the promise itself, so in no
//! window-long interval are more than `limit` units ever admitted, wherever the interval
//! starts. The price is memory: the key holds one entry per admitted request still in the
//! window. Memory follows what is admitted, never `limit` up front.
//!
//! From the log everything else follows (`active` = units of the entries still in the window):
//! - admitted iff `active + cost <= limit`; `remaining = limit - active` after the call;
//! - `retry_after` when denied: walk the entries from the oldest, adding up their units, to
//!   the first entry whose expiry frees enough (`active - freed + cost <= limit`); the answer
//!   is that entry's time `+ window - now`, exact to the microsecond (never, when
//!   `cost > limit`);
//! - `reset_after = newest entry's time + window - now`: when the newest entry leaves the
//!   window the key is fresh.
//!
//! # The ring
//!
//! Entries are not heap objects: they are packed into a ring of 32-bit words
//! ([`State::words`]), oldest first. A request of cost 1 — the common case — takes one word,
//! its timestamp; a request of cost > 1 takes two: its timestamp with the top bit ([`FLAG`])
//! set, then a word holding the cost. So a key holding `n` unit requests costs about `4n`
//! bytes (at most `8n` with the deque's growth slack), and 100,000 requests fit in
//! under 800 KB.
//!
//! A timestamp word holds 31 bits: an offset from [`State::base_us`] in units of
//! [`State::unit_us`]. The unit is a power of two chosen from the window ([`unit_for`]): the
//! smallest with `window_us / unit_us < 2^29`, so offsets have room for at least four
//! windows. Windows up to 2^29 µs (about 8.9 minutes) are kept to the exact microsecond;
//! longer ones in coarser units (a 10-year window in units of about a second). Times are
//! rounded UP to the unit, so an entry leaves the window a little late, never early: the
//! promise holds for the true request times.
//!
//! Timestamps in the ring never decrease: a new entry is stamped `max(now, newest entry)`.
//! If the clock goes backwards, new entries stay where the newest one was, and the entries
//! made "in the future" stay in the window until the clock has passed them by a whole
//! window: over real time, the promise still holds (a clock that jumps forward and back
//! again is another matter: entries dropped while it was ahead are gone).
//!
//! When a new offset would not fit in 31 bits, the ring is rebased: `base_us` moves forward
//! to the oldest entry still in the window and every entry is rewritten (O(n)), in the
//! window's own unit. Only entries of the last window remain, which span fewer than 2^29
//! units, so this happens at most once every ~2^30 units of time: amortized O(1). (Should
//! the ring ever span more than 2^31 units then, the oldest entries are moved later, to the
//! oldest time that still fits: they stay longer, never shorter.)
//!
//! # Costs
//!
//! Only a writing, admitted check changes the ring: it drops the expired entries from the
//! front, appends the new one and shrinks the deque when it is three quarters empty. A check
//! that does not write (DRYRUN, COST 0) or that is denied changes nothing, and walks
//! nothing either: the first entry in the window is found by a search over the words that
//! gallops from the front then halves (O(log expired words): O(1) while the key is written
//! regularly, O(log entries) after a long idle time), and the units before it come from the
//! ring's index, which keeps, every [`STRIDE`] words, the units and requests before that
//! word (16 bytes per 64 words). A denial's `retry_after` finds the entry that makes room
//! the same way: a binary search over the index, then fewer than `STRIDE` words. So does
//! the admitted write's drop of the expired prefix, which the deque then drains in O(1)
//! amortized.
//!
//! # Changing parameters
//!
//! The log is kept whatever changes; the new parameters apply from now on.
//! - A new `limit` applies to the entries already there: a lower limit denies until enough
//!   of them expire (`remaining` is 0 meanwhile), a higher one admits more at once.
//! - A new `window` re-evaluates every entry still in the ring under the new window: a
//!   shorter window lets old entries go sooner, a longer one keeps them longer. Entries
//!   that an earlier write already dropped (expired under the old window) are gone. If the
//!   new window needs a coarser unit, the next admitted write re-encodes the ring in it
//!   (O(n), once; times round up). A window that would do with a finer unit keeps the
//!   ring's coarser one (entries stay at most one unit longer, never shorter), so windows
//!   that alternate between calls re-encode the ring once, not at every call; the window's
//!   own unit comes back when the ring starts afresh or is rebased.
//!
//! Until a request under the new parameters is admitted, nothing is written: the key lives
//! by the window it was written with, and its TTL is when its newest entry leaves that
//! window. Then it is gone, and every call finds a fresh key (`own_reset`); so a
//! call under a longer window counts the entries as the new window reads them, but no
//! longer than that, and its `retry_after` and `reset_after` are capped there
//! (`within_own_reset`): the least times at which a call finds the request
//! admitted, or the key fresh. A request admitted under the longer window writes it, and
//! from then on the entries count for the whole new window.
//!
//! A `limit` above 2^31 - 1 (the command layer never passes one: its cap is at most 10^9)
//! acts as 2^31 - 1 everywhere, the reply's `limit` included, so that a cost word never has
//! its top bit set and the ring can be read from both ends.

use std::collections::VecDeque;

use super::{Algorithm, Decision, Span};

/// The top bit of a timestamp word: the request cost more than 1, and the next word holds
/// its cost.
pub const FLAG: u32 = 1 << 31;
/// The offset bits of a timestamp word.
const OFFSET_MASK: u32 = FLAG - 1;
/// The largest offset a timestamp word holds, 2^31 - 1 units.
const MAX_OFFSET: u128 = OFFSET_MASK as u128;
/// The largest limit (and so cost) the ring stores: a cost word's top bit stays clear.
pub const MAX_LIMIT: u64 = OFFSET_MASK as u64;
/// Offsets a window may span, at most: `window_us / unit_us < 2^WINDOW_BITS`.
const WINDOW_BITS: u32 = 29;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units admitted in any window-long interval.
    pub limit: u64,
    pub window_ms: u64,
}

impl Params {
    /// The limit as the ring applies it (see the module doc for values above 2^31 - 1).
    fn limit(&self) -> u64 {
        self.limit.min(MAX_LIMIT)
    }

    fn window_us(&self) -> u64 {
        self.window_ms.max(1).saturating_mul(1000)
    }
}

/// The unit of a window's timestamps: the smallest power of two with
/// `window_us / unit_us < 2^29` (1 µs up to 2^29 µs, about 8.9 minutes).
pub fn unit_for(window_us: u64) -> u64 {
    let bits = u64::BITS - window_us.leading_zeros();
    1u64 << bits.saturating_sub(WINDOW_BITS)
}

/// The admitted requests still remembered, oldest first.
///
/// Invariants (every admitted write keeps them; [`is_valid`] checks them):
/// - `words` is a sequence of entries: either one timestamp word without [`FLAG`] (a request
///   of cost 1), or a timestamp word with [`FLAG`] followed by a cost word in
///   `2..=MAX_LIMIT` (a request of that cost).
/// - An entry's time is `base_us + (word & !FLAG) × unit_us` µs since the Unix epoch; the
///   times never decrease from front to back.
/// - `unit_us` is a power of two. An admitted write leaves it at least [`unit_for`] the
///   window: that unit, or a coarser one an earlier window needed (see the module doc);
///   after a change to a window that needs a coarser unit, it is the old one until the next
///   admitted write re-encodes the ring.
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
    pub words: VecDeque<u32>,
    pub base_us: u64,
    pub unit_us: u64,
    pub total: u64,
    /// Boxed: a state sits inside every stored value's enum (a policy key holds one per rule),
    /// so its size is paid by every kind of key; the index is paid only by logs.
    index: Box<Index>,
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

    fn empty(base_us: u64, unit_us: u64) -> State {
        State::new(VecDeque::new(), base_us, unit_us, 0)
    }

    fn unit(&self) -> u128 {
        u128::from(self.unit_us.max(1))
    }

    /// The time of an entry at `offset`, in µs (u128: never wraps, whatever the state).
    fn time_us(&self, offset: u32) -> u128 {
        u128::from(self.base_us) + u128::from(offset & OFFSET_MASK) * self.unit()
    }

    #[cfg(test)]
    fn entries(&self) -> Entries<std::collections::vec_deque::Iter<'_, u32>> {
        Entries {
            words: self.words.iter(),
        }
    }

    /// Appends an entry of `cost` units (at least 1) at `offset`, keeping the index in step:
    /// one word for a cost of 1, a flagged word and a cost word otherwise.
    fn push(&mut self, offset: u32, cost: u64) {
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
    fn cut(&mut self, at: usize) {
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
    fn shrink(&mut self) {
        let capacity = self.words.capacity();
        if capacity > 64 && self.words.len() < capacity / 4 {
            self.words.shrink_to(self.words.len() * 2);
        }
        self.index.shrink();
    }

    /// The newest entry's offset, read from the back: the last word is a cost word exactly
    /// when the word before it carries [`FLAG`] (cost words never do).
    fn newest_offset(&self) -> Option<u32> {
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

/// One request in the ring.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Read by the walk the tests keep as a reference.
    #[cfg_attr(not(test), allow(dead_code))]
    offset: u32,
    cost: u64,
    /// Words it takes: 1 or 2.
    words: usize,
}

/// Reads the entries of a ring from the front. A flagged last word without its cost word
/// (only in a broken state) reads as a request of cost 1.
struct Entries<I> {
    words: I,
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

/// Words between two checkpoints of the [`Index`].
const STRIDE: u64 = 64;

/// Units and requests, counted from when the ring last started afresh. The counts wrap
/// around: only differences are read, and those are exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    units: u64,
    entries: u64,
}

impl Tally {
    fn plus(self, cost: u64) -> Tally {
        Tally {
            units: self.units.wrapping_add(cost),
            entries: self.entries.wrapping_add(1),
        }
    }
}

/// What lets a call that does not write answer without walking the expired entries.
///
/// Word positions are counted from when the ring last started afresh (`first` is the
/// position of the front word), and the index holds, for every position that is a multiple
/// of [`STRIDE`] among the ring's words, the tally of the entries that start before it. With
/// it, the units before any entry are one checkpoint plus a walk of fewer than `STRIDE`
/// words: O(1). 16 bytes per 64 words: 6% on top of the ring.
///
/// A ring of at most `STRIDE` words keeps no checkpoints (a walk of it is as short), so a
/// small log allocates none; the checkpoints are built once the ring grows past `STRIDE`
/// words, and kept from then on (until the ring starts afresh).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Index {
    /// Whether the checkpoints are kept (the ring grew past `STRIDE` words).
    indexed: bool,
    /// The position of the front word.
    first: u64,
    /// The entries before the front word (dropped ones), and before the end of the ring.
    front: Tally,
    end: Tally,
    /// The tallies at the multiples of `STRIDE` in `first..first + words`, in order.
    checkpoints: VecDeque<Tally>,
}

/// The word at `i`, if any. Tests count the words that calls read.
fn word(words: &VecDeque<u32>, i: usize) -> Option<u32> {
    counted(words.get(i)).copied()
}

/// A word read (tests count them; nothing otherwise).
fn counted<T>(word: Option<T>) -> Option<T> {
    #[cfg(test)]
    if word.is_some() {
        tests::WORDS_READ.with(|n| n.set(n.get() + 1));
    }
    word
}

/// The entry that starts at word `i`: its cost and the words it takes. As [`Entries`] reads
/// it: a flagged last word without its cost word counts as a request of cost 1.
fn entry_at(words: &VecDeque<u32>, i: usize) -> Option<(u64, usize)> {
    let first = word(words, i)?;
    if first & FLAG != 0 {
        if let Some(cost) = word(words, i + 1) {
            return Some((u64::from(cost), 2));
        }
    }
    Some((1, 1))
}

/// Whether word `i` is a cost word: the word before it is flagged (cost words never are).
fn is_cost_word(words: &VecDeque<u32>, i: usize) -> bool {
    i > 0 && word(words, i - 1).is_some_and(|before| before & FLAG != 0)
}

impl Index {
    fn build(words: &VecDeque<u32>) -> Index {
        let mut index = Index {
            indexed: words.len() > STRIDE as usize,
            ..Index::default()
        };
        let mut at = 0;
        for entry in (Entries {
            words: words.iter(),
        }) {
            index.append(at, entry.cost, entry.words);
            at += entry.words;
        }
        index
    }

    /// The position of the first checkpoint, relative to the front word (`0..STRIDE`).
    fn first_checkpoint(&self) -> usize {
        // The wrapping difference is below STRIDE: it fits.
        (self.first.wrapping_neg() % STRIDE) as usize
    }

    /// Counts an entry of `cost` units and `words` words appended after `len` words.
    fn append(&mut self, len: usize, cost: u64, words: usize) {
        let start = self.first.wrapping_add(len as u64);
        if self.indexed && start.is_multiple_of(STRIDE) {
            self.checkpoints.push_back(self.end);
        }
        self.end = self.end.plus(cost);
        // A checkpoint on a cost word counts its entry, which started before it.
        if self.indexed && words == 2 && start.wrapping_add(1).is_multiple_of(STRIDE) {
            self.checkpoints.push_back(self.end);
        }
    }

    /// The tally of the entries that start before word `at` (an entry's first word, or the
    /// end): the nearest checkpoint, then fewer than `STRIDE` words.
    fn before(&self, words: &VecDeque<u32>, at: usize) -> Tally {
        let first = self.first_checkpoint();
        let (mut i, mut tally) = match at.checked_sub(first) {
            Some(past) if !self.checkpoints.is_empty() => {
                let k = (past / STRIDE as usize).min(self.checkpoints.len() - 1);
                let i = first + k * STRIDE as usize;
                let tally = self.checkpoints.get(k).copied().unwrap_or_default();
                // A checkpoint on a cost word has counted its entry already.
                (i + usize::from(is_cost_word(words, i)), tally)
            }
            _ => (0, self.front),
        };
        while i < at {
            let Some((cost, taken)) = entry_at(words, i) else {
                break;
            };
            tally = tally.plus(cost);
            i += taken;
        }
        tally
    }

    /// The first entry, from word `from` (an entry's first word) on, by which the entries
    /// from `from` hold at least `units` units: a binary search over the checkpoints, then
    /// fewer than `STRIDE` words.
    fn reaching(&self, words: &VecDeque<u32>, from: usize, units: u64) -> Option<usize> {
        let start = self.before(words, from).units;
        let gone = |tally: Tally| tally.units.wrapping_sub(start);
        let first = self.first_checkpoint();
        // The checkpoints after `from` with fewer than `units` units since `from`: a run.
        let mut lo = match from.checked_sub(first) {
            Some(past) => past.div_ceil(STRIDE as usize),
            None => 0,
        }
        .min(self.checkpoints.len());
        let low = lo;
        let mut hi = self.checkpoints.len();
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let short = self
                .checkpoints
                .get(mid)
                .is_some_and(|&tally| gone(tally) < units);
            if short {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let (mut i, mut so_far) = if lo > low {
            let k = lo - 1;
            let i = first + k * STRIDE as usize;
            let tally = self.checkpoints.get(k).copied().unwrap_or_default();
            (i + usize::from(is_cost_word(words, i)), gone(tally))
        } else {
            (from, 0)
        };
        while let Some((cost, taken)) = entry_at(words, i) {
            so_far = so_far.saturating_add(cost);
            if so_far >= units {
                return Some(i);
            }
            i += taken;
        }
        None
    }

    /// Forgets the `dropped` words at the front (an entry boundary).
    fn drop_front(&mut self, words: &VecDeque<u32>, dropped: usize) {
        let front = self.before(words, dropped);
        // The checkpoints at first_checkpoint() + k × STRIDE < dropped.
        let gone = dropped
            .saturating_sub(self.first_checkpoint())
            .div_ceil(STRIDE as usize);
        self.checkpoints.drain(..gone.min(self.checkpoints.len()));
        self.first = self.first.wrapping_add(dropped as u64);
        self.front = front;
    }

    fn shrink(&mut self) {
        let capacity = self.checkpoints.capacity();
        if capacity > 4 && self.checkpoints.len() < capacity / 4 {
            self.checkpoints.shrink_to(self.checkpoints.len() * 2);
        }
    }
}

/// The ring as of `now`, without changing it: the expired prefix and what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scan {
    /// Words of the expired entries at the front.
    expired_words: usize,
    expired_units: u64,
    /// Units of the entries in the window.
    active: u64,
    /// The oldest entry in the window, if any.
    oldest_offset: Option<u32>,
}

/// Finds the expired prefix: an entry at time `t` is in the window iff `t + window > now`,
/// and times never decrease, so a search over the words finds the first entry in the window
/// (a word's entry starts at it, or at the word before when that one is flagged), and the
/// index counts the units before it. The search gallops from the front (words 0, 1, 3, 7,
/// ...), then halves: O(log expired words), so O(1) while the key is written regularly and
/// O(log words) at worst.
fn scan(state: &State, now_us: u128, window_us: u128) -> Scan {
    let words = &state.words;
    let live = |i: usize| {
        let start = i - usize::from(is_cost_word(words, i));
        word(words, start).is_some_and(|w| state.time_us(w) + window_us > now_us)
    };
    // Every word before `lo` is expired; `hi` is live or the end.
    let (mut lo, mut hi) = (0, 0);
    while hi < words.len() && !live(hi) {
        lo = hi + 1;
        hi = hi.saturating_mul(2).saturating_add(1);
    }
    let mut hi = hi.min(words.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if live(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    // The first live word is its entry's first word (a cost word lives with the word before).
    let oldest_offset = word(words, lo).map(|w| w & OFFSET_MASK);
    let expired_units = state
        .index
        .before(words, lo)
        .units
        .wrapping_sub(state.index.front.units);
    Scan {
        expired_words: lo,
        expired_units,
        active: if oldest_offset.is_some() {
            state.total.saturating_sub(expired_units)
        } else {
            0
        },
        oldest_offset,
    }
}

/// The walk that [`scan`] replaces, kept as the reference it must agree with.
#[cfg(test)]
fn scan_by_walk(state: &State, now_us: u128, window_us: u128) -> Scan {
    let mut expired_words = 0;
    let mut expired_units: u64 = 0;
    let mut oldest_offset = None;
    for entry in state.entries() {
        if state.time_us(entry.offset) + window_us > now_us {
            oldest_offset = Some(entry.offset);
            break;
        }
        expired_words += entry.words;
        expired_units = expired_units.saturating_add(entry.cost);
    }
    Scan {
        expired_words,
        expired_units,
        active: if oldest_offset.is_some() {
            state.total.saturating_sub(expired_units)
        } else {
            0
        },
        oldest_offset,
    }
}

/// How an admitted write lays out the ring (decided before writing, so that a dry run
/// reports the same new entry's time).
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// Nothing left in the window: start afresh with `base_us = now`.
    Fresh,
    /// The ring stays as it is.
    Same,
    /// Every entry is rewritten in the new unit (rounding up, or exactly in a finer unit
    /// after a rebase), then moved `shift` new units back (entries that would go below zero
    /// are raised to zero).
    Reencode { shift: u128 },
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    layout: Layout,
    unit_us: u64,
    base_us: u64,
    /// The new entry's offset from `base_us`, in `unit_us`.
    offset: u32,
    /// The new entry's time, µs.
    time_us: u128,
}

/// An old offset in the new unit, rounded up (exact when the new unit is finer).
fn regrid(offset: u32, from_unit: u128, to_unit: u128) -> u128 {
    let offset = u128::from(offset & OFFSET_MASK);
    if from_unit == to_unit {
        offset
    } else {
        (offset * from_unit).div_ceil(to_unit)
    }
}

/// Where an admitted request at `now` goes: stamped `max(now, newest)` rounded up to the
/// ring's unit; the ring rebased, or re-encoded in a coarser unit, when needed.
///
/// The ring keeps its unit unless the window needs a coarser one ([`unit_for`]): a window
/// change then rewrites the ring once, to the coarser unit, and never back to a finer one
/// while the ring holds entries, so windows that alternate between calls cost nothing
/// beyond the first change. The window's own unit comes back when the ring starts afresh or
/// is rebased, both of which write every entry anyway.
fn plan(state: &State, scan: &Scan, params: &Params, now_us: u64) -> Plan {
    let needed = u128::from(unit_for(params.window_us()));
    let (Some(oldest), Some(newest)) = (scan.oldest_offset, state.newest_offset()) else {
        return Plan {
            layout: Layout::Fresh,
            unit_us: u64::try_from(needed).unwrap_or(u64::MAX),
            base_us: now_us,
            offset: 0,
            time_us: u128::from(now_us),
        };
    };
    let from = state.unit();
    let base = u128::from(state.base_us);
    // The new entry's offset on the grid `base + k × unit`, rounded up (stamp >= newest >=
    // base).
    let offset_in = |to: u128| {
        let newest_us = base + regrid(newest, from, to) * to;
        let stamp_us = u128::from(now_us).max(newest_us);
        (stamp_us - base).div_ceil(to)
    };
    let mut to = from.max(needed);
    let mut k_new = offset_in(to);
    if k_new > MAX_OFFSET && to != needed {
        // A rebase rewrites every entry anyway: in the window's own unit.
        to = needed;
        k_new = offset_in(to);
    }
    let shift = if k_new <= MAX_OFFSET {
        0
    } else {
        regrid(oldest, from, to).max(k_new - MAX_OFFSET)
    };
    let layout = if shift == 0 && from == to {
        Layout::Same
    } else {
        Layout::Reencode { shift }
    };
    Plan {
        layout,
        unit_us: u64::try_from(to).unwrap_or(u64::MAX),
        base_us: u64::try_from(base + shift * to).unwrap_or(u64::MAX),
        offset: u32::try_from((k_new - shift).min(MAX_OFFSET)).unwrap_or(OFFSET_MASK),
        time_us: base + k_new * to,
    }
}

/// The admitted write: drop the expired prefix, lay the ring out as planned, append.
fn admit(state: &mut State, scan: &Scan, plan: &Plan, cost: u64) {
    let expired = scan.expired_words.min(state.words.len());
    state.index.drop_front(&state.words, expired);
    state.words.drain(..expired);
    state.total = state.total.saturating_sub(scan.expired_units);
    match plan.layout {
        Layout::Fresh => {
            state.words.clear();
            state.total = 0;
            *state.index = Index::default();
        }
        Layout::Same => {}
        Layout::Reencode { shift } => {
            let (from, to) = (state.unit(), u128::from(plan.unit_us));
            let mut cost_word_next = false;
            for word in state.words.iter_mut() {
                if cost_word_next {
                    cost_word_next = false;
                    continue;
                }
                let offset = regrid(*word, from, to)
                    .saturating_sub(shift)
                    .min(MAX_OFFSET);
                *word = (*word & FLAG) | u32::try_from(offset).unwrap_or(OFFSET_MASK);
                cost_word_next = *word & FLAG != 0;
            }
        }
    }
    state.base_us = plan.base_us;
    state.unit_us = plan.unit_us;
    state.push(plan.offset, cost);
    state.total = state.total.saturating_add(cost);
    state.shrink();
}

/// When denied with `cost <= limit`: the expiry of the first entry whose units, with those
/// of the older ones, make room. Found with the index: O(log words).
fn retry_after(
    state: &State,
    scan: &Scan,
    limit: u64,
    cost: u64,
    now_us: u128,
    window_us: u128,
) -> Option<Span> {
    let excess = scan.active.saturating_add(cost).saturating_sub(limit);
    let entry = state
        .index
        .reaching(&state.words, scan.expired_words, excess)?;
    let at = state.time_us(word(&state.words, entry)?) + window_us;
    Some(Span::new(at.saturating_sub(now_us), 1))
}

/// The walk that [`retry_after`] replaces, kept as the reference it must agree with.
#[cfg(test)]
fn retry_after_by_walk(
    state: &State,
    scan: &Scan,
    limit: u64,
    cost: u64,
    now_us: u128,
    window_us: u128,
) -> Option<Span> {
    let excess = scan.active.saturating_add(cost).saturating_sub(limit);
    let mut freed: u64 = 0;
    let active = Entries {
        words: state.words.iter().skip(scan.expired_words),
    };
    for entry in active {
        freed = freed.saturating_add(entry.cost);
        if freed >= excess {
            let at = state.time_us(entry.offset) + window_us;
            return Some(Span::new(at.saturating_sub(now_us), 1));
        }
    }
    None
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingLog;

impl Algorithm for SlidingLog {
    type Params = Params;
    type State = State;

    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        // The log carries over any parameter change as it is: the old parameters have
        // nothing to bring up to date, and the entries are read with the new window.
        let own = own_reset(params, stored.as_ref().map(|(o, s)| (*o, &**s)), now_us);
        let mut fresh = None;
        let (state, replaced) = match stored {
            // Fresh under the parameters it was stored with: gone, a fresh key, which an
            // admitted request replaces.
            Some((_, state)) if own.is_some_and(|r| r.is_zero()) => (
                fresh.insert(State::empty(now_us, unit_for(params.window_us()))),
                Some(state),
            ),
            Some((_, state)) => (state, None),
            None => (
                fresh.insert(State::empty(now_us, unit_for(params.window_us()))),
                None,
            ),
        };
        let (mut decision, scan, planned) = decide(params, state, now_us, cost);
        within_own_reset(&mut decision, own, cost);
        match planned {
            Some(planned) if write => {
                admit(state, &scan, &planned, cost);
                match (replaced, fresh) {
                    (Some(stored), Some(new)) => {
                        *stored = new;
                        (decision, None)
                    }
                    (_, fresh) => (decision, fresh),
                }
            }
            _ => (decision, None),
        }
    }

    /// Without the default's copy of the state: the decision reads the ring in place.
    fn view_now(params: &Params, state: &State, now_us: u64) -> Decision {
        decide(params, state, now_us, 0).0
    }

    /// `limit - active`: the units of the entries still in the window, from the scan (the
    /// index), O(log n).
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        let gone = own_reset(params, stored, now_us).is_some_and(|r| r.is_zero());
        let active = match stored {
            Some((_, state)) if !gone => {
                let window_us = u128::from(params.window_us());
                scan(state, u128::from(now_us), window_us).active
            }
            _ => 0,
        };
        params.limit().saturating_sub(active)
    }

    /// What is taken: the units of the entries still in the window. Giving back `k` removes
    /// the newest `k` units: whole entries from the back, and part of the cost of the last
    /// one it reaches. Found with the index, O(log n); the ring is cut at that entry.
    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        let window_us = u128::from(params.window_us());
        let scan = scan(state, u128::from(now_us), window_us);
        let given = scan.active.min(units);
        if given == 0 {
            return 0;
        }
        let keep = scan.active - given;
        if keep == 0 {
            // Nothing left in the window: the ring starts afresh.
            *state = State::empty(state.base_us, state.unit_us);
            return given;
        }
        // The entry by which the oldest entries in the window hold `keep` units: it stays,
        // with what is left of its cost, and everything after it goes.
        let words = &state.words;
        let Some(at) = state.index.reaching(words, scan.expired_words, keep) else {
            return 0;
        };
        let Some(((cost, _), first)) = entry_at(words, at).zip(word(words, at)) else {
            return 0;
        };
        let through = state
            .index
            .before(words, at)
            .units
            .wrapping_sub(state.index.before(words, scan.expired_words).units)
            .wrapping_add(cost);
        // The entries before it hold fewer than `keep` units: 1 <= what stays <= cost.
        let cost = cost - (through - keep);
        state.cut(at);
        state.push(first & OFFSET_MASK, cost);
        state.total = state.total.saturating_sub(given);
        state.shrink();
        given
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::SlidingLog(snapshot(params, state, now_us))
    }
}

/// For a key stored under another window than a call's (issue 22, docs/algorithms.md): how
/// long until the key is fresh under its own parameters, `None` when they are the call's.
///
/// A key lives by the parameters it was written with until a request under others is
/// admitted and writes them; once its newest entry has left its own window it is gone (the
/// storage layer's TTL ends then) and any call finds a fresh key. So a call that writes
/// nothing waits no longer than this for anything ([`within_own_reset`]), and a call under a
/// longer window, which would read the entries longer, starts fresh when it is zero.
fn own_reset(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> Option<Span> {
    match stored {
        Some((own, state)) if own != params => Some(decide(own, state, now_us, 0).0.reset_after),
        _ => None,
    }
}

/// Caps the times of a `decision` made on a key stored under another window, by
/// [`own_reset`]'s `own`, when the call writes nothing (it is denied, or takes no units): at
/// `own` the key is a fresh key, which admits any cost up to the limit and is fresh.
fn within_own_reset(decision: &mut Decision, own: Option<Span>, cost: u64) {
    let Some(own) = own else { return };
    if decision.allowed && cost > 0 {
        return;
    }
    if decision.reset_after.ceil_us() > own.ceil_us() {
        decision.reset_after = own;
    }
    if let Some(retry) = decision.retry_after.as_mut() {
        if retry.ceil_us() > own.ceil_us() {
            *retry = own;
        }
    }
}

/// The decision, and for an admitted request of some units where its entry goes; changes
/// nothing.
fn decide(
    params: &Params,
    state: &State,
    now_us: u64,
    cost: u64,
) -> (Decision, Scan, Option<Plan>) {
    let limit = params.limit();
    let window_us = u128::from(params.window_us());
    let now = u128::from(now_us);
    let scan = scan(state, now, window_us);
    let allowed = cost <= limit && scan.active.saturating_add(cost) <= limit;
    let newest_us = scan
        .oldest_offset
        .and_then(|_| state.newest_offset())
        .map(|offset| state.time_us(offset));
    let (used, newest_us, planned) = if allowed && cost > 0 {
        let planned = plan(state, &scan, params, now_us);
        (scan.active + cost, Some(planned.time_us), Some(planned))
    } else {
        (scan.active, newest_us, None)
    };
    let reset_after = newest_us.map_or(Span::ZERO, |newest| {
        Span::new((newest + window_us).saturating_sub(now), 1)
    });
    let retry_after = if allowed {
        Some(Span::ZERO)
    } else if cost <= limit {
        // Only a broken state (a total above its entries) finds no entry that makes room.
        retry_after(state, &scan, limit, cost, now, window_us).or(Some(reset_after))
    } else {
        None
    };
    let decision = Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(used),
        retry_after,
        reset_after,
        delay: None,
    };
    (decision, scan, planned)
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub params: Params,
    /// The limit as the log applies it (see the module doc for values above 2^31 - 1).
    pub limit: u64,
    /// Requests the log holds, and the units of those still in the window.
    pub entries: u64,
    pub active: u64,
    /// When the oldest and the newest request the log holds were admitted, µs since the
    /// Unix epoch (0 when the log is empty).
    pub oldest_us: u64,
    pub newest_us: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    let window_us = u128::from(params.window_us());
    let time = |offset: Option<u32>| {
        offset.map_or(0, |offset| {
            u64::try_from(state.time_us(offset)).unwrap_or(u64::MAX)
        })
    };
    Snapshot {
        params: *params,
        limit: params.limit(),
        entries: state
            .index
            .end
            .entries
            .wrapping_sub(state.index.front.entries),
        active: scan(state, u128::from(now_us), window_us).active,
        oldest_us: time(word(&state.words, 0)),
        newest_us: time(state.newest_offset()),
        now: SlidingLog::view_now(params, state, now_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, peek, step, summary, Key};
    use proptest::prelude::*;

    /// A round hour (2023-11-14T23:00:00Z) in µs since the Unix epoch, standing for the
    /// worked example's 1:00:00; only differences matter.
    const T0: u64 = 1_700_002_800_000_000;
    const S: u64 = 1_000_000; // a second in µs

    fn params(limit: u64, window_ms: u64) -> Params {
        Params { limit, window_ms }
    }

    /// Replays requests (µs since T0, cost) on one key; returns each decision.
    fn replay(p: &Params, requests: &[(u64, u64)]) -> Vec<Decision> {
        testing::replay::<SlidingLog>(p, T0, requests)
    }

    /// The key after some requests.
    fn key_after(p: &Params, requests: &[(u64, u64)]) -> Key<SlidingLog> {
        testing::key_after::<SlidingLog>(p, T0, requests)
    }

    fn state(key: &Key<SlidingLog>) -> &State {
        &key.as_ref().expect("a stored key").1
    }

    thread_local! {
        /// The ring's words that calls on this thread have read (see [`word`]).
        pub(super) static WORDS_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// The words a closure reads.
    fn words_read<T>(f: impl FnOnce() -> T) -> (T, u64) {
        let before = WORDS_READ.with(|n| n.get());
        let t = f();
        (t, WORDS_READ.with(|n| n.get()) - before)
    }

    /// The index counts, before every entry, what a walk from the front counts, and holds
    /// one checkpoint per multiple of STRIDE among the ring's word positions.
    fn assert_index_follows_the_words(s: &State) {
        let index = &s.index;
        let mut walked = Tally::default();
        let mut at = 0;
        let relative = |t: Tally| Tally {
            units: t.units.wrapping_sub(index.front.units),
            entries: t.entries.wrapping_sub(index.front.entries),
        };
        for entry in s.entries() {
            assert_eq!(
                relative(index.before(&s.words, at)),
                walked,
                "before word {at}"
            );
            walked = walked.plus(entry.cost);
            at += entry.words;
        }
        assert_eq!(relative(index.before(&s.words, at)), walked);
        assert_eq!(relative(index.end), walked);
        if !index.indexed {
            // A small ring keeps no checkpoints, and a longer one always does.
            assert!(index.checkpoints.is_empty());
            assert!(s.words.len() <= STRIDE as usize, "{} words", s.words.len());
            return;
        }
        let positions = (0..s.words.len() as u64)
            .filter(|i| index.first.wrapping_add(*i).is_multiple_of(STRIDE))
            .count();
        assert_eq!(index.checkpoints.len(), positions);
    }

    /// The promise spelled out naively: every admitted request with its true time.
    #[derive(Default)]
    struct Model {
        admitted: Vec<(u64, u64)>,
    }

    impl Model {
        fn active(&self, now: u64, window_us: u64) -> u64 {
            self.admitted
                .iter()
                .filter(|&&(t, _)| u128::from(t) + u128::from(window_us) > u128::from(now))
                .map(|&(_, c)| c)
                .sum()
        }
    }

    /// Never more than `limit` units with true times in `(t - window, t]`, for every
    /// admission time `t`.
    fn assert_promise(admitted: &[(u64, u64)], limit: u64, window_us: u64) {
        for &(t, _) in admitted {
            let units: u64 = admitted
                .iter()
                .filter(|&&(u, _)| u <= t && u + window_us > t)
                .map(|&(_, c)| c)
                .sum();
            assert!(units <= limit, "{units} units in the window ending at {t}");
        }
    }

    #[test]
    fn two_per_minute_as_in_the_spec() {
        // 1:00:01 and 1:00:30 pass, 1:00:50 is denied until 1:01:01, 1:01:40 passes.
        let p = params(2, 60_000);
        let got: Vec<_> = replay(&p, &[(S, 1), (30 * S, 1), (50 * S, 1), (100 * S, 1)])
            .iter()
            .map(summary)
            .collect();
        assert_eq!(
            got,
            vec![
                (true, 2, 1, 0, 60_000),
                (true, 2, 0, 0, 60_000),
                (false, 2, 0, 11_000, 40_000),
                (true, 2, 1, 0, 60_000),
            ]
        );
    }

    #[test]
    fn the_first_denial_waits_exactly_until_the_oldest_entry_leaves() {
        let p = params(2, 60_000);
        let key = key_after(&p, &[(S, 1), (30 * S, 1)]);
        let d = peek::<SlidingLog>(&p, &key, T0 + 50 * S, 1);
        assert_eq!(d.retry_after, Some(Span::from_us(11 * S)));
        // The entry at 1:00:01 is in (now - 60 s, now] until 1:01:01 exclusive.
        assert!(!peek::<SlidingLog>(&p, &key, T0 + 61 * S - 1, 1).allowed);
        let at = peek::<SlidingLog>(&p, &key, T0 + 61 * S, 1);
        assert!(at.allowed);
        assert_eq!(at.remaining, 0);
        // Two at once need both entries gone: until 1:01:30.
        let two = peek::<SlidingLog>(&p, &key, T0 + 50 * S, 2);
        assert_eq!(two.retry_after, Some(Span::from_us(40 * S)));
    }

    #[test]
    fn a_cost_above_the_limit_is_never_admitted_and_changes_nothing() {
        let p = params(5, 1000);
        let mut key = key_after(&p, &[(0, 2)]);
        let before = key.clone();
        let d = step::<SlidingLog>(&p, &mut key, T0 + 10, 6);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, None);
        assert_eq!(d.remaining, 3);
        assert_eq!(key, before);
        // A fresh key too: nothing is created.
        let mut fresh: Key<SlidingLog> = None;
        assert_eq!(step::<SlidingLog>(&p, &mut fresh, T0, 6).retry_after, None);
        assert!(fresh.is_none());
    }

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
    fn a_long_window_rounds_times_up_never_down() {
        // 10 minutes = 6 × 10^8 µs >= 2^29: timestamps in units of 2 µs.
        let p = params(2, 600_000);
        assert_eq!(unit_for(600_000_000), 2);
        let key = key_after(&p, &[(0, 1), (3, 1)]);
        let s = state(&key);
        assert_eq!((s.unit_us, s.words.clone()), (2, VecDeque::from([0, 2])));
        // The request at +3 µs is kept as +4 µs: it leaves the window 1 µs late.
        let w = 600 * S;
        let d = peek::<SlidingLog>(&p, &key, T0 + w + 3, 2);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Span::from_us(1)));
        assert!(peek::<SlidingLog>(&p, &key, T0 + w + 4, 2).allowed);
        // Ten years: units of 2^20 µs, about a second.
        assert_eq!(unit_for(crate::limits::MAX_DURATION_MS * 1000), 1 << 20);
        assert_eq!(unit_for((1 << 29) - 1), 1);
        assert_eq!(unit_for(1 << 29), 2);
        assert_eq!(unit_for(u64::MAX), 1 << 35);
    }

    #[test]
    fn a_jump_of_two_to_the_31_units_starts_the_ring_afresh() {
        let p = params(2, 60_000);
        let jump = 1u64 << 31;
        let mut key = key_after(&p, &[(0, 1), (S, 1)]);
        assert!(step::<SlidingLog>(&p, &mut key, T0 + jump, 1).allowed);
        let s = state(&key);
        assert_eq!(
            (s.base_us, s.words.clone(), s.total),
            (T0 + jump, VecDeque::from([0]), 1)
        );
        let d = step::<SlidingLog>(&p, &mut key, T0 + jump + 1, 1);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        let d = peek::<SlidingLog>(&p, &key, T0 + jump + 2, 1);
        assert_eq!(d.retry_after, Some(Span::from_us(60 * S - 2)));
    }

    #[test]
    fn a_ring_that_outgrows_31_bits_is_rebased_and_decides_the_same() {
        // 3 per minute, a request every 7 s for 3 hours: the ring is never empty, and
        // 2^31 µs (35.8 minutes) passes several times.
        let p = params(3, 60_000);
        let w = 60 * S;
        let mut key: Key<SlidingLog> = None;
        let mut model = Model::default();
        let mut bases = vec![];
        for i in 0..(3 * 3600 / 7) {
            let now = T0 + i * 7 * S + i % 5;
            let d = step::<SlidingLog>(&p, &mut key, now, 1);
            let allowed = model.active(now, w) < 3;
            assert_eq!(d.allowed, allowed, "at step {i}");
            if allowed {
                model.admitted.push((now, 1));
            }
            let s = state(&key);
            assert!(is_valid(s));
            assert!(s
                .words
                .iter()
                .all(|&w| u128::from(w & OFFSET_MASK) <= MAX_OFFSET));
            if bases.last() != Some(&s.base_us) {
                // A rebase, not a fresh start: older entries were kept and moved.
                assert!(bases.is_empty() || s.words.len() >= 2, "at step {i}");
                assert_eq!(s.words[0] & OFFSET_MASK, 0);
                bases.push(s.base_us);
            }
        }
        // Rebased more than once, each time to the oldest entry still in the window.
        assert!(bases.len() >= 5, "{bases:?}");
        assert!(bases.windows(2).all(|b| b[1] - b[0] < 1 << 31));
    }

    #[test]
    fn a_shorter_window_after_the_clock_went_back_keeps_every_entry_as_it_is() {
        // A 10-year window keeps entries an hour apart in ~1 s units; after the clock went
        // back, a 1-second window makes them all "future" entries. The ring keeps its
        // coarser unit (µs would need more than 31 bits for that hour), so nothing moves and
        // nothing is forgotten.
        let long = params(3, crate::limits::MAX_DURATION_MS);
        let unit = unit_for(long.window_us());
        let hour = 3600 * S;
        let mut key = key_after(&long, &[(0, 1), (hour, 1)]);
        let before = state(&key).clone();
        let short = params(3, 1000);
        let back = T0 - S;
        assert_eq!(peek::<SlidingLog>(&short, &key, back, 0).remaining, 1);
        assert!(step::<SlidingLog>(&short, &mut key, back, 1).allowed);
        let s = state(&key);
        assert!(is_valid(s));
        assert_eq!((s.unit_us, s.base_us, s.total), (unit, T0, 3));
        let newest = before.words[1];
        assert_eq!(s.words, [0, newest, newest]);
        assert!(s.time_us(newest) >= u128::from(T0 + hour));
        let d = peek::<SlidingLog>(&short, &key, back, 1);
        assert!(!d.allowed);
        assert_eq!(
            d.reset_after.ceil_us() as u128,
            s.time_us(newest) + 1_000_000 - u128::from(back)
        );
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

    #[test]
    fn a_lower_limit_keeps_the_log_and_denies_until_entries_expire() {
        let ten = params(10, 60_000);
        let key = key_after(&ten, &[(0, 5), (10 * S, 3)]); // 8 of 10 used
        let five = params(5, 60_000);
        let d = peek::<SlidingLog>(&five, &key, T0 + 20 * S, 1);
        assert_eq!((d.allowed, d.limit, d.remaining), (false, 5, 0));
        // The 5 units of t=0 must go: at 60 s, 3 + 1 <= 5.
        assert_eq!(d.retry_after, Some(Span::from_us(40 * S)));
        let twenty = params(20, 60_000);
        assert_eq!(
            peek::<SlidingLog>(&twenty, &key, T0 + 20 * S, 0).remaining,
            12
        );
    }

    #[test]
    fn a_new_window_re_evaluates_the_entries_in_the_ring() {
        let minute = params(2, 60_000);
        let key = key_after(&minute, &[(0, 1), (30 * S, 1)]);
        // A 10-second window at 35 s: the entry at 0 is out, the one at 30 s is in.
        let ten = params(2, 10_000);
        let d = peek::<SlidingLog>(&ten, &key, T0 + 35 * S, 1);
        assert_eq!(
            (d.allowed, d.remaining, d.reset_after),
            (true, 0, Span::from_us(10 * S))
        );
        // A 2-minute window at 70 s: both still count, the first until 120 s. But until a
        // request under it is admitted, the key lives by its own minute: at 90 s it is
        // fresh under it, gone (its TTL ends then), and any request finds a fresh key.
        let two = params(2, 120_000);
        let d = peek::<SlidingLog>(&two, &key, T0 + 70 * S, 1);
        assert_eq!(d.retry_after, Some(Span::from_us(20 * S)));
        assert_eq!(d.reset_after, Span::from_us(20 * S));
        assert!(!peek::<SlidingLog>(&two, &key, T0 + 90 * S - 1, 1).allowed);
        let d = peek::<SlidingLog>(&two, &key, T0 + 90 * S, 1);
        assert_eq!((d.allowed, d.remaining), (true, 1));
        // Admitted under it at 70 s, the request writes the 2-minute window: three entries,
        // the first counting until 120 s.
        let mut written = key.clone();
        let three = params(3, 120_000);
        assert!(step::<SlidingLog>(&three, &mut written, T0 + 70 * S, 1).allowed);
        let d = peek::<SlidingLog>(&three, &written, T0 + 90 * S, 1);
        assert_eq!(d.retry_after, Some(Span::from_us(30 * S)));
        // A 10-minute window needs 2 µs units: the next write re-encodes the ring.
        let mut key = key_after(&minute, &[(0, 1), (3, 1)]);
        let long = params(3, 600_000);
        assert!(step::<SlidingLog>(&long, &mut key, T0 + 5, 1).allowed);
        let s = state(&key);
        assert_eq!(
            (s.base_us, s.unit_us, s.words.clone()),
            (T0, 2, VecDeque::from([0, 2, 3]))
        );
        assert!(is_valid(s));
        // And back to a minute: the ring keeps its 2 µs units (rewriting it to µs would
        // cost O(entries) at every switch between the two windows); the new entry's 7 µs
        // rounds up to 8.
        assert!(step::<SlidingLog>(&params(4, 60_000), &mut key, T0 + 7, 1).allowed);
        let s = state(&key);
        assert_eq!(
            (s.unit_us, s.words.clone()),
            (2, VecDeque::from([0, 2, 3, 4]))
        );
        assert!(is_valid(s));
    }

    /// Issue 12: windows that alternate between calls re-encoded the whole log at every
    /// admitted call (4.75 ms at 999k entries). Now a window change rewrites the ring only
    /// when the window needs a coarser unit: once, however often the windows alternate.
    #[test]
    fn alternating_windows_re_encode_the_ring_at_most_once() {
        let minute = params(1000, 60_000);
        let ten = params(1000, 600_000); // needs 2 µs units
                                         // Entries a µs apart, so that a change of unit rewrites
                                         // their words.
        let requests: Vec<(u64, u64)> = (0..100).map(|i| (i, 1)).collect();
        let mut key = key_after(&minute, &requests);
        let mut rewrites = 0;
        for i in 0..20 {
            let before: Vec<u32> = state(&key).words.iter().copied().collect();
            let p = if i % 2 == 0 { &ten } else { &minute };
            assert!(step::<SlidingLog>(p, &mut key, T0 + 100 + i, 1).allowed);
            let s = state(&key);
            assert!(is_valid(s));
            if s.words.iter().take(before.len()).ne(before.iter()) {
                rewrites += 1;
            }
        }
        assert_eq!(rewrites, 1);
        assert_eq!(state(&key).unit_us, 2);
        // Once the ring starts afresh, it takes the window's own unit again.
        assert!(step::<SlidingLog>(&minute, &mut key, T0 + 61 * S, 1).allowed);
        assert_eq!((state(&key).unit_us, state(&key).words.len()), (1, 1));
    }

    /// Issue 12: a check that does not write walked every expired entry (1 ms a call at a
    /// million entries); now it reads O(log n) words: a binary search, one checkpoint and
    /// fewer than STRIDE words around it.
    #[test]
    fn a_check_that_does_not_write_reads_a_logarithmic_number_of_words() {
        let n: u32 = 1_000_000;
        let hour = 3_600_000;
        let p = params(u64::from(n), hour);
        // A bound for about 20 binary search steps, a checkpoint walk or two and the newest
        // entry.
        let bound = 2 * 2 * 20 + 3 * STRIDE + 8;
        // A million entries at one instant, all expired: the lead's DRYRUN case.
        let all = State::new(vec![0; n as usize].into(), T0, 1, u64::from(n));
        let key: Key<SlidingLog> = Some((p, all));
        let later = T0 + 2 * hour * 1000;
        let (d, read) = words_read(|| peek::<SlidingLog>(&p, &key, later, 1));
        assert_eq!((d.allowed, d.remaining), (true, u64::from(n) - 1));
        assert!(read <= bound, "{read} words read");
        let (snap, read) = words_read(|| snapshot(&p, state(&key), later));
        assert_eq!((snap.entries, snap.active), (u64::from(n), 0));
        assert!(read <= 2 * bound, "{read} words read by the snapshot");
        // All but one expired.
        let mut words = vec![0; n as usize];
        words[n as usize - 1] = 1000; // 1 ms later
        let key: Key<SlidingLog> = Some((p, State::new(words.into(), T0, 1, u64::from(n))));
        let (d, read) = words_read(|| peek::<SlidingLog>(&p, &key, T0 + hour * 1000 + 1, 0));
        assert_eq!(d.remaining, u64::from(n) - 1);
        assert!(read <= bound, "{read} words read");
        // Entries of 3 units (two words each) a µs apart, half of them expired, and a
        // denial whose retry_after is half-way through the live half.
        let entries = n / 2;
        let words: Vec<u32> = (0..entries).flat_map(|i| [i | FLAG, 3]).collect();
        let limit = 3 * u64::from(entries);
        let q = Params {
            limit,
            window_ms: 1000,
        };
        let key: Key<SlidingLog> = Some((q, State::new(words.into(), T0, 1, limit)));
        let now = T0 + S + u64::from(entries / 2); // entries / 2 + 1 expired
        let live = 3 * u64::from(entries - entries / 2 - 1);
        let cost = limit - live + 3 * 1000;
        let (d, read) = words_read(|| peek::<SlidingLog>(&q, &key, now, cost));
        assert_eq!(d.remaining, limit - live);
        // The 1000th live entry has to go: it was made 1000 µs after the oldest live one.
        assert_eq!(d.retry_after, Some(Span::from_us(1000)));
        assert!(read <= bound, "{read} words read");
    }

    /// RL.REFUND and ATMOST on a log of a million entries, half of them expired: the cut is
    /// found through the index and the words after it are dropped without a walk, so both read
    /// O(log n) words, however many units come back.
    #[test]
    fn a_refund_and_a_grant_read_a_logarithmic_number_of_words() {
        let n: u32 = 1_000_000;
        let p = params(2 * u64::from(n), 1000);
        let bound = 2 * 2 * 20 + 4 * STRIDE + 8;
        // An entry every µs for a second; at 1.5 s the first half has expired.
        let words: Vec<u32> = (0..n).collect();
        let mut key: Key<SlidingLog> = Some((p, State::new(words.into(), T0, 1, u64::from(n))));
        let now = T0 + S + u64::from(n / 2);
        let active = u64::from(n / 2 - 1);
        let (largest, read) = words_read(|| testing::largest::<SlidingLog>(&p, &key, now));
        assert_eq!(largest, 2 * u64::from(n) - active);
        assert!(read <= bound, "{read} words read by largest_cost");
        let s = &mut key.as_mut().unwrap().1;
        // Give back a third of what is active: a third of the live entries go.
        let (given, read) = words_read(|| SlidingLog::refund(&p, s, now, active / 3));
        assert_eq!(given, active / 3);
        assert!(read <= bound, "{read} words read by the refund");
        assert_eq!(
            scan(s, u128::from(now), u128::from(p.window_us())).active,
            active - active / 3
        );
        assert_index_follows_the_words(s);
        // And everything else: the ring starts afresh.
        let (given, read) = words_read(|| SlidingLog::refund(&p, s, now, u64::MAX));
        assert_eq!((given, s.total, s.words.len()), (active - active / 3, 0, 0));
        assert!(read <= bound, "{read} words read by the refund");
    }

    /// The search gallops from the front: a key written regularly, with few expired entries,
    /// reads a few words per call whatever the log holds, as the walk did.
    #[test]
    fn a_regular_write_reads_a_constant_number_of_words() {
        let n: u32 = 1_000_000;
        let p = params(2 * u64::from(n), 1000);
        // An entry every µs for a second; at 1 s + 1 µs the first two have expired.
        let words: Vec<u32> = (0..n).collect();
        let mut key: Key<SlidingLog> = Some((p, State::new(words.into(), T0, 1, u64::from(n))));
        let now = T0 + S + 1;
        let (d, read) = words_read(|| peek::<SlidingLog>(&p, &key, now, 0));
        assert_eq!(d.remaining, 2 * u64::from(n) - u64::from(n - 2));
        assert!(read <= 16, "{read} words read");
        let (d, read) = words_read(|| step::<SlidingLog>(&p, &mut key, now, 1));
        assert!(d.allowed);
        assert!(read <= 16, "{read} words read");
        let s = state(&key);
        assert_eq!((s.words.len(), s.total), (n as usize - 1, u64::from(n) - 1));
        assert_index_follows_the_words(s);
    }

    #[test]
    fn snapshot_reports_the_state() {
        let p = params(5, 60_000);
        let (_, s) = key_after(&p, &[(0, 2), (10 * S, 1), (20 * S, 1)]).unwrap();
        let snap = snapshot(&p, &s, T0 + 65 * S);
        assert_eq!((snap.params, snap.limit), (p, 5));
        assert_eq!(
            (snap.entries, snap.active, snap.oldest_us, snap.newest_us),
            (3, 2, T0, T0 + 20 * S)
        );
        assert_eq!(
            (snap.now.remaining, snap.now.reset_after.ceil_ms()),
            (3, 15_000)
        );
        let empty = State::empty(0, 1);
        let snap = snapshot(&p, &empty, T0);
        assert_eq!(
            (snap.entries, snap.active, snap.oldest_us, snap.newest_us),
            (0, 0, 0, 0)
        );
        assert_eq!((snap.now.remaining, snap.now.reset_after.ceil_ms()), (5, 0));
    }

    /// Windows of a few ms to a few s (µs-exact), or of 10 minutes to 10 years (coarser).
    fn any_params() -> impl Strategy<Value = Params> {
        (
            1u64..=20,
            prop_oneof![1u64..=5_000, 600_000u64..=crate::limits::MAX_DURATION_MS],
        )
            .prop_map(|(limit, window_ms)| params(limit, window_ms))
    }

    /// (time since the previous request in thousandths of a window, µs more, cost)
    fn any_gaps() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
        proptest::collection::vec((0u64..600, 0u64..5, 0u64..6), 1..80)
    }

    /// True request times from gaps relative to the window.
    fn requests(p: &Params, gaps: &[(u64, u64, u64)]) -> Vec<(u64, u64)> {
        let w = p.window_us();
        let mut at = 0;
        gaps.iter()
            .map(|&(thousandths, us, cost)| {
                at += w / 1000 * thousandths + us;
                (at, cost)
            })
            .collect()
    }

    fn key_from(p: &Params, gaps: &[(u64, u64, u64)]) -> (Key<SlidingLog>, u64) {
        let reqs = requests(p, gaps);
        let last = reqs.last().map_or(0, |r| r.0);
        (key_after(p, &reqs), T0 + last)
    }

    proptest! {
        /// The promise: in every window-long interval ending at an admission, at most
        /// `limit` units, by the true request times. µs-exact windows decide exactly like
        /// the naive log.
        #[test]
        fn never_more_than_limit_in_any_window(p in any_params(), gaps in any_gaps()) {
            let w = p.window_us();
            let exact = unit_for(w) == 1;
            let mut key: Key<SlidingLog> = None;
            let mut model = Model::default();
            for (at, cost) in requests(&p, &gaps) {
                let now = T0 + at;
                let d = step::<SlidingLog>(&p, &mut key, now, cost);
                if exact {
                    prop_assert_eq!(d.allowed, model.active(now, w) + cost <= p.limit);
                }
                if d.allowed && cost > 0 {
                    model.admitted.push((now, cost));
                }
                if let Some((_, s)) = &key {
                    prop_assert!(is_valid(s));
                }
            }
            assert_promise(&model.admitted, p.limit, w);
        }

        /// The clock may step back (real time goes on): entries stay at the newest time
        /// and the promise holds over real time.
        /// With the limit changing at every request (the window staying), no window-long
        /// interval holds more than the largest limit used.
        #[test]
        fn a_changing_limit_never_admits_more_than_the_largest_in_any_window(
            p in any_params(), gaps in any_gaps(), limits in proptest::collection::vec(1u64..=20, 80),
        ) {
            let mut key: Key<SlidingLog> = None;
            let mut admitted = Vec::new();
            let mut largest = 0;
            for (i, &(at, cost)) in requests(&p, &gaps).iter().enumerate() {
                let q = params(limits[i], p.window_ms);
                largest = largest.max(q.limit);
                if step::<SlidingLog>(&q, &mut key, T0 + at, cost).allowed && cost > 0 {
                    admitted.push((T0 + at, cost));
                }
            }
            assert_promise(&admitted, largest, p.window_us());
        }

        #[test]
        fn a_clock_going_backwards_admits_no_more(
            p in any_params(), gaps in any_gaps(),
            backs in proptest::collection::vec((0u64..10, 0u64..2000), 80),
        ) {
            let w = p.window_us();
            let mut key: Key<SlidingLog> = None;
            let mut admitted = vec![];
            let mut behind = 0; // how far the clock is behind real time, never less
            for (i, (real, cost)) in requests(&p, &gaps).into_iter().enumerate() {
                let (chance, thousandths) = backs[i];
                if chance == 0 {
                    behind += w / 1000 * thousandths;
                }
                let reading = (T0 + real).saturating_sub(behind);
                if step::<SlidingLog>(&p, &mut key, reading, cost).allowed && cost > 0 {
                    admitted.push((T0 + real, cost));
                }
                if let Some((_, s)) = &key {
                    prop_assert!(is_valid(s));
                }
            }
            assert_promise(&admitted, p.limit, w);
        }

        /// retry_after is the least whole number of ms after which the request is admitted.
        #[test]
        fn retry_after_is_exact(p in any_params(), gaps in any_gaps(), cost in 0u64..25) {
            let (key, now) = key_from(&p, &gaps);
            let d = peek::<SlidingLog>(&p, &key, now, cost);
            match (d.allowed, d.retry_after) {
                (true, retry) => prop_assert_eq!(retry, Some(Span::ZERO)),
                (false, None) => prop_assert!(cost > p.limit),
                (false, Some(retry)) => {
                    let ms = retry.ceil_ms();
                    prop_assert!(ms >= 1);
                    let later = peek::<SlidingLog>(&p, &key, now + ms * 1000, cost);
                    prop_assert!(later.allowed, "not admitted after retry_after {} ms", ms);
                    let earlier = peek::<SlidingLog>(&p, &key, now + (ms - 1) * 1000, cost);
                    prop_assert!(!earlier.allowed, "already admitted at {} ms", ms - 1);
                    // And to the µs.
                    let us = retry.ceil_us();
                    prop_assert!(peek::<SlidingLog>(&p, &key, now + us, cost).allowed);
                    prop_assert!(!peek::<SlidingLog>(&p, &key, now + us - 1, cost).allowed);
                }
            }
        }

        /// `remaining` more units fit right now, and not one more.
        #[test]
        fn remaining_is_what_fits_now(p in any_params(), gaps in any_gaps()) {
            let (key, now) = key_from(&p, &gaps);
            let d = peek::<SlidingLog>(&p, &key, now, 0);
            if d.remaining > 0 {
                prop_assert!(peek::<SlidingLog>(&p, &key, now, d.remaining).allowed);
            }
            prop_assert!(!peek::<SlidingLog>(&p, &key, now, d.remaining + 1).allowed);
            // After an admitted request, its own `remaining` is what is left.
            let mut real = key.clone();
            let d = step::<SlidingLog>(&p, &mut real, now, 1);
            if d.allowed {
                prop_assert_eq!(peek::<SlidingLog>(&p, &real, now, 0).remaining, d.remaining);
            }
        }

        /// At now + reset_after, the key is fresh again.
        #[test]
        fn reset_after_leads_to_a_fresh_key(p in any_params(), gaps in any_gaps(), cost in 0u64..6) {
            let (mut key, now) = key_from(&p, &gaps);
            let d = step::<SlidingLog>(&p, &mut key, now, cost);
            let reset = d.reset_after.ceil_us();
            let at = peek::<SlidingLog>(&p, &key, now + reset, 0);
            prop_assert_eq!(at.remaining, p.limit);
            prop_assert_eq!(at.reset_after, Span::ZERO);
            if reset > 0 {
                prop_assert!(peek::<SlidingLog>(&p, &key, now + reset - 1, 0).remaining < p.limit);
            }
        }

        /// Without `write` (DRYRUN, COST 0) or when denied, the state is untouched (`peek`
        /// and `step` assert it); with it, a request decides as its dry run said, also
        /// right after a parameter change.
        #[test]
        fn dryrun_decides_like_the_real_request_and_changes_nothing(
            p in any_params(), q in any_params(), gaps in any_gaps(),
            later in 0u64..3_000, cost in 0u64..30,
        ) {
            let (key, now) = key_from(&q, &gaps);
            let now = now + p.window_us() / 1000 * later;
            let dry = peek::<SlidingLog>(&p, &key, now, cost);
            prop_assert_eq!(dry, peek::<SlidingLog>(&p, &key, now, cost));
            let mut real = key;
            prop_assert_eq!(step::<SlidingLog>(&p, &mut real, now, cost), dry);
            if let Some((_, s)) = &real {
                prop_assert!(is_valid(s));
            }
        }

        /// Extreme parameters, times, costs and states (broken ones too) never panic.
        /// The documented promise (docs/algorithms.md, Changing parameters): at one instant,
        /// requests under any sequence of parameter sets admit in
        /// total at most the largest limit among them, whatever the key held before: every entry
        /// made at this instant is in any window.
        #[test]
        fn one_instant_admits_at_most_the_largest_limit(
            history in proptest::collection::vec((any_params(), 0u64..3_000_000, 0u64..6), 0..20),
            sets in proptest::collection::vec((any_params(), 0u64..6), 1..40),
        ) {
            testing::one_instant_admits_at_most_the_largest::<SlidingLog>(&history, &sets, T0, |p| p.limit)?;
        }

        /// Issue 12: the binary search and the index answer exactly what the walk from the
        /// front answers (expired prefix, units in the window, the oldest entry in it, the
        /// retry time), on rings long enough for many checkpoints, after drops and
        /// rebuilds.
        #[test]
        fn the_index_answers_what_the_walk_answers(
            window_ms in 1u64..=40,
            requests in proptest::collection::vec((0u64..400, 1u64..=4), 1..1500),
            probes in proptest::collection::vec((0u64..50_000, 1u64..=3000, 0u64..3000), 1..12),
        ) {
            let p = params(100_000, window_ms);
            let w = u128::from(p.window_us());
            let mut key: Key<SlidingLog> = None;
            let mut now = T0;
            for (i, &(gap, cost)) in requests.iter().enumerate() {
                now += gap;
                prop_assert!(step::<SlidingLog>(&p, &mut key, now, cost).allowed);
                if i % 97 == 0 {
                    assert_index_follows_the_words(state(&key));
                }
            }
            let s = state(&key);
            assert_index_follows_the_words(s);
            // A state loaded from its fields builds the same index, positions apart.
            let loaded = State::new(s.words.clone(), s.base_us, s.unit_us, s.total);
            assert_index_follows_the_words(&loaded);
            for (later, limit, cost) in probes {
                let at = u128::from(now + later);
                for s in [s, &loaded] {
                    let fast = scan(s, at, w);
                    prop_assert_eq!(fast, scan_by_walk(s, at, w));
                    prop_assert_eq!(
                        retry_after(s, &fast, limit, cost, at, w),
                        retry_after_by_walk(s, &fast, limit, cost, at, w)
                    );
                    // Every excess, whichever entry (and checkpoint) it ends on.
                    for cost in 0..=fast.active + 1 {
                        prop_assert_eq!(
                            retry_after(s, &fast, fast.active, cost, at, w),
                            retry_after_by_walk(s, &fast, fast.active, cost, at, w)
                        );
                    }
                    let snap = snapshot(&p, s, now + later);
                    prop_assert_eq!(snap.entries, s.entries().count() as u64);
                    prop_assert_eq!(snap.active, fast.active);
                }
            }
        }

        #[test]
        fn extremes_never_panic(
            limit in any::<u64>(), window_ms in any::<u64>(), now in any::<u64>(),
            cost in any::<u64>(), write in any::<bool>(),
            words in proptest::collection::vec(any::<u32>(), 0..8),
            base_us in any::<u64>(), unit_us in any::<u64>(), total in any::<u64>(),
        ) {
            let p = params(limit, window_ms);
            let q = params(1, 1);
            let s = State::new(words.into(), base_us, unit_us, total);
            let _ = is_valid(&s);
            let _ = SlidingLog::snapshot(&p, &s, now).now().reset_after.ceil_ms();
            let mut m = s.clone();
            let (d, _) = SlidingLog::check(&p, Some((&q, &mut m)), now, cost, write);
            let _ = (d.retry_after.map(|s| s.ceil_ms()), d.reset_after.ceil_ms());
            let _ = SlidingLog::snapshot(&p, &m, now).now().reset_after.ceil_ms();
            let (d, _) = SlidingLog::check(&p, None, now, cost, write);
            let _ = (d.retry_after.map(|s| s.ceil_ms()), d.reset_after.ceil_ms(), heap_bytes(&m));
        }

        /// The largest valid parameters and far-apart times keep every invariant.
        #[test]
        fn extreme_valid_inputs_keep_the_invariants(
            limit in 1u64..=1_000_000_000, window_ms in 1u64..=crate::limits::MAX_DURATION_MS,
            times in proptest::collection::vec(any::<u64>(), 1..20),
            cost in 1u64..=crate::limits::MAX_COUNT,
        ) {
            let p = params(limit, window_ms);
            let mut key: Key<SlidingLog> = None;
            for now in times {
                step::<SlidingLog>(&p, &mut key, now, cost % (limit + 1));
                if let Some((_, s)) = &key {
                    prop_assert!(is_valid(s));
                }
            }
        }
    }

    // ATMOST and RL.REFUND, as every algorithm states them.
    testing::atmost_and_refund_properties!(
        SlidingLog,
        params: any_params(),
        t0: T0,
        bound: 21,
        later_within: 20_000_000,
        later_too: |_| true,
    );

    proptest! {
        /// Refunds cut the ring at an entry found through the index, and may split the cost of
        /// the entry they stop in: the index still follows the words, the ring stays valid,
        /// and what is active is exactly what was before less what was given back, however
        /// refunds and admissions interleave on a log long enough to hold checkpoints.
        #[test]
        fn refunds_keep_the_ring_and_its_index_exact(
            steps in proptest::collection::vec((0u64..3, 0u64..2_000, 0u64..5, 0u64..40), 1..400),
        ) {
            let p = params(crate::limits::MAX_COUNT.min(MAX_LIMIT), 1000);
            let w = u128::from(p.window_us());
            let mut key: Key<SlidingLog> = None;
            let mut at = T0;
            for (what, gap, cost, units) in steps {
                at += gap;
                if what > 0 || key.is_none() {
                    step::<SlidingLog>(&p, &mut key, at, cost);
                    continue;
                }
                let Some((_, s)) = key.as_mut() else { continue };
                let active = scan(s, u128::from(at), w).active;
                let given = SlidingLog::refund(&p, s, at, units);
                prop_assert_eq!(given, active.min(units));
                prop_assert!(is_valid(s));
                assert_index_follows_the_words(s);
                prop_assert_eq!(scan(s, u128::from(at), w), scan_by_walk(s, u128::from(at), w));
                prop_assert_eq!(scan(s, u128::from(at), w).active, active - given);
            }
        }
    }

    // Issue 22: one schedule for every reply, across parameter changes.
    testing::one_schedule_property!(
        SlidingLog,
        params: any_params(),
        t0: T0,
        long_gap: 60_000_000,
        later_within: 20_000_000,
    );
}
