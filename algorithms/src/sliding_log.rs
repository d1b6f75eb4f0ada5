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
//! ring's index, which keeps, every 64 words (`STRIDE`), the units and requests before that
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

// The ring, its index and the regridding, a file each (this one holds the algorithm). What a
// decision calls across those files that the compiler inlined when they were one file
// (`plan`, `admit`, `Index::append`) is `#[inline]`: the split adds no call to a decision.
mod index;
mod regrid;
mod ring;
mod words;

use super::{Algorithm, Decision, Span};
use regrid::{admit, plan, Plan};
use words::{entry_at, is_cost_word, word, OFFSET_MASK};

pub use regrid::unit_for;
pub use ring::{heap_bytes, is_valid, State};
pub use words::{FLAG, MAX_LIMIT};

/// RL.SLIDINGLOG's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units admitted in any window-long interval.
    pub limit: u64,
    /// The window's length.
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

/// RL.SLIDINGLOG's algorithm: [`Algorithm::check`] on the log of what was admitted.
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

    /// The log keeps the invariants documented on [`State`] ([`is_valid`]).
    fn is_valid(_params: &Params, state: &State) -> bool {
        is_valid(state)
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
    /// The parameters the key was written with.
    pub params: Params,
    /// The limit as the log applies it (see the module doc for values above 2^31 - 1).
    pub limit: u64,
    /// Requests the log holds.
    pub entries: u64,
    /// The units of those still in the window.
    pub active: u64,
    /// When the oldest request the log holds was admitted, µs since the Unix epoch (0 when
    /// the log is empty).
    pub oldest_us: u64,
    /// When the newest was (0 when the log is empty).
    pub newest_us: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and log as of `now_us` (RL.INSPECT).
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
mod tests;
