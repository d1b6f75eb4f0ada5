//! The regridding: the unit a window's timestamps are kept in, and where an admitted
//! request goes: the ring kept as it is, started afresh, rebased when an offset would not
//! fit in 31 bits, or re-encoded in a coarser unit (the sliding log's module doc, The ring
//! and Changing parameters).

use super::index::Index;
use super::ring::State;
use super::words::{FLAG, MAX_OFFSET, OFFSET_MASK};
use super::{Params, Scan};

/// Offsets a window may span, at most: `window_us / unit_us < 2^WINDOW_BITS`.
const WINDOW_BITS: u32 = 29;

/// The unit of a window's timestamps: the smallest power of two with
/// `window_us / unit_us < 2^29` (1 µs up to 2^29 µs, about 8.9 minutes).
pub fn unit_for(window_us: u64) -> u64 {
    let bits = u64::BITS - window_us.leading_zeros();
    1u64 << bits.saturating_sub(WINDOW_BITS)
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
pub(super) struct Plan {
    layout: Layout,
    unit_us: u64,
    base_us: u64,
    /// The new entry's offset from `base_us`, in `unit_us`.
    offset: u32,
    /// The new entry's time, µs.
    pub(super) time_us: u128,
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
#[inline]
pub(super) fn plan(state: &State, scan: &Scan, params: &Params, now_us: u64) -> Plan {
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
#[inline]
pub(super) fn admit(state: &mut State, scan: &Scan, plan: &Plan, cost: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sliding_log::tests::{key_after, params, state, Model, S, T0};
    use crate::sliding_log::*;
    use crate::testing::{peek, step, Key};
    use std::collections::VecDeque;

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
        assert_eq!(unit_for(crate::ranges::MAX_DURATION_MS * 1000), 1 << 20);
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
        let long = params(3, crate::ranges::MAX_DURATION_MS);
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
}
