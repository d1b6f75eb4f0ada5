//! The sliding window counter.
//!
//! The intuition: a fixed window counter lets a client spend its limit at the end of one
//! window and again at the start of the next. The sliding window counter looks back one
//! window length from now instead, without keeping a log: it keeps the counts of the
//! current aligned window and of the one before, and assumes the previous window's units
//! were spread evenly over it. A window length back from now covers the part of the
//! previous window that has not yet slid out, `(window - elapsed) / window` of it, plus all
//! of the current one:
//!
//! `estimate = floor(previous × (window - elapsed) / window) + current`,
//!
//! `elapsed` being the time since the current window began. A request is admitted when
//! `estimate + cost <= limit`, and adds its cost to `current`. Windows are aligned like
//! RL.FIXEDWINDOW's (the arithmetic is shared with it): multiples of the window length since
//! the Unix epoch.
//!
//! Rolling: when now's window is the stored one, the counts are as stored; when it is the
//! next one, `previous = current` and `current = 0`; later, both are 0.
//!
//! The promises: after every admission the estimate is at most `limit`; and since
//! `current <= estimate`, at most `limit` units are admitted in any one aligned window.
//! Over an arbitrary interval of one window length the counter is an estimate, not a bound
//! (RL.SLIDINGLOG is exact).
//!
//! The estimate never increases as time passes: within a window the previous count's share
//! shrinks, and at a roll `current` becomes `previous` at full weight (the floor of
//! `previous × window / window` is `previous`, the same number). So:
//! - `remaining = limit - estimate` after this call (0 if the estimate is above the limit);
//! - `retry_after`, when denied, is the least time at which `estimate + cost <= limit`, in
//!   closed form: within a window with counts `(current, previous)` and
//!   `A = limit - cost - current >= 0`, the request fits from the least elapsed `e` with
//!   `previous × (window - e) < (A + 1) × window`, that is
//!   `e = window - floor(((A + 1) × window - 1) / previous)`; if `current + cost > limit`,
//!   it waits for the next window (where `previous = current`), and never if
//!   `cost > limit`;
//! - `reset_after` is when the estimate is 0 for good: with `current > 0`, in the next
//!   window, from the least `e` with `current × (window - e) < window`; with only
//!   `previous > 0`, within this window; else 0.
//!
//! Everything is exact integer arithmetic in microseconds, in u128 (at most about 2^89 for
//! the largest counts and windows that parse); the spans are whole microseconds.
//!
//! Changing parameters on an existing key: a new limit alone applies to the counts as they
//! are. A new window carries the key's estimate, the units it still counts on its own
//! schedule (`check_new_window`): until a request under the new window is admitted,
//! nothing is written, and every call sees that estimate (rolled and weighted on the stored
//! window) against the new limit, so its `retry_after` and `reset_after` are the least times
//! on that schedule, which never rises. An admitted request writes the estimate plus its
//! cost as the count of now's window under the new length: held at full weight until that
//! window ends, then sliding out over the next, never in the caller's favour. (Until issue
//! 22 the counts were placed in the new window as they were, the previous one weighted on
//! the new window's share, so the estimate rose again at every new window's start and a
//! `retry_after` rounded up to whole ms could land on a refusal.)
//!
//! A stored window that begins after `now` (a clock that went back) has not ended: its
//! counts are taken as now's, never in the caller's favour.

use super::fixed_window::{window_start, window_us};
use super::{keep, Algorithm, Decision, Span};

/// RL.SLIDINGWINDOW's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units admitted per window length (estimated over the sliding window).
    pub limit: u64,
    /// The window's length.
    pub window_ms: u64,
}

/// What a key stores.
///
/// Invariants, as every admitted request writes them: `window_start_us` is a multiple of
/// `window_ms × 1000` (of the parameters stored with it) and not after the clock of the
/// write; `1 <= current <= limit`; `previous <= 10^12` (it was a `current` under some
/// earlier limit, so it can exceed today's limit after a parameter change). A state outside
/// them (a corrupted RDB) never makes the algorithm panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The start of the window `current` counts, in µs since the Unix epoch.
    pub window_start_us: u64,
    /// Units admitted in that window.
    pub current: u64,
    /// Units admitted in the window before it.
    pub previous: u64,
}

/// A key's counts under its own window length, in u128 so nothing can overflow.
#[derive(Debug, Clone, Copy)]
struct Counts {
    start: u128,
    window: u128,
    current: u128,
    previous: u128,
}

/// A stretch of time `[from, to)` over which the rolled counts stay the same.
#[derive(Debug, Clone, Copy)]
struct Segment {
    from: u128,
    to: u128,
    current: u128,
    previous: u128,
}

impl Counts {
    fn stored(params: &Params, state: &State) -> Counts {
        Counts {
            start: u128::from(state.window_start_us),
            window: window_us(params.window_ms),
            current: u128::from(state.current),
            previous: u128::from(state.previous),
        }
    }

    /// The counts from `now` on, rolled on this key's window schedule: as they are until
    /// the window ends, then `(0, current)` for one window, then `(0, 0)` for good. Empty
    /// segments (`from >= to`) are the stages already past.
    fn from(&self, now: u128) -> [Segment; 3] {
        let first_end = self.start + self.window;
        let second_end = first_end + self.window;
        [
            Segment {
                from: now,
                to: first_end,
                current: self.current,
                previous: self.previous,
            },
            Segment {
                from: now.max(first_end),
                to: second_end,
                current: 0,
                previous: self.current,
            },
            Segment {
                from: now.max(second_end),
                to: u128::MAX,
                current: 0,
                previous: 0,
            },
        ]
    }
}

impl Segment {
    fn is_empty(&self) -> bool {
        self.from >= self.to
    }

    /// The estimate at `t` (in this segment), the previous count weighted by what is left
    /// of the aligned `window` that contains `t`.
    fn estimate(&self, window: u128, t: u128) -> u128 {
        let left = window - (t - window_start(t, window));
        (self.previous.saturating_mul(left) / window).saturating_add(self.current)
    }

    /// The least elapsed time into a window from which `floor(previous × (window - e) /
    /// window) <= allowance`: `previous × (window - e) < (allowance + 1) × window`. It is
    /// `window` when no time within a window will do.
    fn least_elapsed(&self, window: u128, allowance: u128) -> u128 {
        if self.previous == 0 {
            return 0;
        }
        let bound = allowance.saturating_add(1).saturating_mul(window) - 1;
        window.saturating_sub(bound / self.previous)
    }

    /// The least time in this segment at which `estimate + cost <= limit`, if any.
    fn first_fit(&self, window: u128, cost: u128, limit: u128) -> Option<u128> {
        let allowance = limit.checked_sub(self.current.saturating_add(cost))?;
        let e = self.least_elapsed(window, allowance);
        if e >= window {
            return None;
        }
        // Every window in the segment has the same profile: the first one (maybe entered
        // part way) or else the next one decides.
        let first = window_start(self.from, window);
        let t = self.from.max(first + e);
        if t < first + window && t < self.to {
            return Some(t);
        }
        let t = first + window + e;
        (t < self.to).then_some(t)
    }

    /// The least time from which the estimate is 0 until this segment ends.
    fn zero_from(&self, window: u128) -> u128 {
        if self.current > 0 {
            return self.to;
        }
        if self.previous == 0 {
            return self.from;
        }
        // The previous count's weight starts afresh at every window: only in the last one
        // that the segment reaches can it fall to 0 for good.
        let last = window_start(self.to - 1, window);
        self.from
            .max(last + self.least_elapsed(window, 0))
            .min(self.to)
    }
}

/// The least time from which the estimate stays 0 (the key is fresh for good).
fn settled(segments: &[Segment; 3], window: u128, now: u128) -> u128 {
    let mut settle = now;
    for segment in segments.iter().rev().filter(|s| !s.is_empty()) {
        settle = segment.zero_from(window);
        if settle > segment.from {
            break;
        }
    }
    settle
}

/// The counts as of `now`, rolled on the key's own schedule (what a check reads).
fn current(held: &Counts, now: u128) -> Segment {
    let segments = held.from(now);
    segments
        .iter()
        .find(|s| !s.is_empty())
        .copied()
        .unwrap_or(segments[2])
}

/// RL.SLIDINGWINDOW's algorithm: [`Algorithm::check`] on two windows' counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow;

impl Algorithm for SlidingWindow {
    type Params = Params;
    type State = State;

    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        match stored {
            Some((old, state)) if old.window_ms != params.window_ms => {
                check_new_window(params, old, state, now_us, cost, write)
            }
            stored => check_counts(params, stored, now_us, cost, write),
        }
    }

    /// `limit - estimate`, the estimate as a check computes it: for a key stored under
    /// another window, its own estimate on its own schedule (`check_new_window`).
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        let now = u128::from(now_us);
        let estimate = match stored {
            Some((old, state)) => {
                current(&Counts::stored(old, state), now).estimate(window_us(old.window_ms), now)
            }
            None => 0,
        };
        u64::try_from(u128::from(params.limit).saturating_sub(estimate)).unwrap_or(0)
    }

    /// What is taken: the estimate now, `current + floor(previous × left / window)`, the
    /// counts rolled to now. Giving back `k` takes them from the current window's count
    /// first (the newest units), then from the previous window's weighted share: the previous
    /// count becomes the largest one whose share now is exactly `k'` lower (never in the
    /// caller's favour: as time passes its share only falls further, and never below what a
    /// smaller count would give). So the estimate now falls by exactly the units given back.
    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        let now = u128::from(now_us);
        let window = window_us(params.window_ms);
        let start = window_start(now, window);
        let here = current(&Counts::stored(params, state), now);
        let units = u128::from(units);
        let from_current = here.current.min(units);
        // What is left of now's window, 1..=window.
        let left = window - (now - start);
        let share = here.previous.saturating_mul(left) / window;
        let from_previous = share.min(units - from_current);
        let previous = if from_previous == 0 {
            here.previous
        } else {
            // The largest p with floor(p × left / window) = share - from_previous: each unit
            // of p adds left / window <= 1, so every share up to the old one is reached.
            let target = share - from_previous;
            ((target + 1).saturating_mul(window) - 1) / left
        }
        .min(here.previous);
        let given = from_current + from_previous;
        if given == 0 {
            return 0;
        }
        *state = State {
            window_start_us: u64::try_from(start).unwrap_or(now_us),
            current: u64::try_from(here.current - from_current).unwrap_or(0),
            previous: u64::try_from(previous).unwrap_or(state.previous),
        };
        u64::try_from(given).unwrap_or(u64::MAX)
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::SlidingWindow(snapshot(params, state, now_us))
    }
}

/// The check for a key stored under the same window (or none): its counts rolled to now
/// and weighted on that window, `params.limit` applied (a new limit alone applies to the
/// counts as they are).
#[inline(always)]
fn check_counts(
    params: &Params,
    stored: Option<(&Params, &mut State)>,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    // A request of no units changes nothing, whoever asks.
    let write = write && cost > 0;
    let now = u128::from(now_us);
    let window = window_us(params.window_ms);
    let start = window_start(now, window);
    let limit = u128::from(params.limit);
    let cost_units = u128::from(cost);
    let held = match &stored {
        Some((old, state)) => Counts::stored(old, state),
        None => Counts {
            start,
            window,
            current: 0,
            previous: 0,
        },
    };
    let segments = held.from(now);
    let here = segments
        .iter()
        .find(|s| !s.is_empty())
        .copied()
        .unwrap_or(segments[2]);
    let estimate = here.estimate(window, now);
    let allowed = estimate.saturating_add(cost_units) <= limit;
    let (after, reset_at) = if allowed && cost > 0 {
        // What the key holds once the request is made: the counts placed in now's
        // window under the new length, the cost added to the current one.
        let made = Counts {
            start,
            window,
            current: here.current + cost_units,
            previous: here.previous,
        };
        let reset_at = settled(&made.from(now), window, now);
        (estimate + cost_units, reset_at)
    } else {
        (estimate, settled(&segments, window, now))
    };
    let retry_after = if allowed {
        Some(Span::ZERO)
    } else if cost > params.limit {
        None
    } else {
        segments
            .iter()
            .filter(|s| !s.is_empty())
            .find_map(|s| s.first_fit(window, cost_units, limit))
            .map(|t| Span::new(t - now, 1))
    };
    let decision = Decision {
        allowed,
        limit: params.limit,
        remaining: u64::try_from(limit.saturating_sub(after)).unwrap_or(0),
        retry_after,
        reset_after: Span::new(reset_at - now, 1),
        delay: None,
    };
    let fresh = if allowed && write {
        // All fit: start <= now, current + cost <= estimate + cost <= limit, and
        // previous is a stored count.
        let new = State {
            window_start_us: u64::try_from(start).unwrap_or(now_us),
            current: u64::try_from(here.current + cost_units).unwrap_or(params.limit),
            previous: u64::try_from(here.previous).unwrap_or(u64::MAX),
        };
        keep(stored.map(|(_, state)| state), new)
    } else {
        None
    };
    (decision, fresh)
}

/// The check for a key stored under another window (issue 22, docs/sliding-window.md): the
/// key lives by its own window until a request under the new one is admitted, so a call sees
/// the units the key still counts, its own estimate on its own schedule, against the new
/// limit; a denial's and a non-writing call's times are on that schedule (its estimate never
/// rises as time passes, so the first instant that fits is the retry, in ms as in µs). An
/// admitted request writes the estimate and its cost as the count of now's window under the
/// new length, which holds them at full weight until that window ends and lets them slide out
/// over the next: never in the caller's favour, and at one instant the units are the same.
#[inline(never)]
fn check_new_window(
    params: &Params,
    own: &Params,
    state: &mut State,
    now_us: u64,
    cost: u64,
    write: bool,
) -> (Decision, Option<State>) {
    // The own schedule under the new limit: the same window, so the counts as they are.
    let mine = Params {
        limit: params.limit,
        window_ms: own.window_ms,
    };
    let (mut decision, _) = check_counts(&mine, Some((own, state)), now_us, cost, false);
    if !(decision.allowed && cost > 0) {
        return (decision, None);
    }
    let now = u128::from(now_us);
    let window = window_us(params.window_ms);
    let start = window_start(now, window);
    let limit = u128::from(params.limit);
    // Admitted: the units now counted, this request's included, at most the limit.
    let counted = limit.saturating_sub(u128::from(decision.remaining));
    let made = Counts {
        start,
        window,
        current: counted,
        previous: 0,
    };
    decision.reset_after = Span::new(settled(&made.from(now), window, now) - now, 1);
    if write {
        *state = State {
            window_start_us: u64::try_from(start).unwrap_or(now_us),
            current: u64::try_from(counted).unwrap_or(params.limit),
            previous: 0,
        };
    }
    (decision, None)
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// The stored current window's start.
    pub window_start_us: u64,
    /// The stored current window's count.
    pub current: u64,
    /// The count of the window before it.
    pub previous: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and counts as of `now_us` (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    Snapshot {
        params: *params,
        window_start_us: state.window_start_us,
        current: state.current,
        previous: state.previous,
        now: SlidingWindow::view_now(params, state, now_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, peek, step, summary, Key};
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// 2023-11-14 02:00:00 UTC in µs: a round minute (and hour), as the examples need.
    const T2: u64 = 1_699_927_200_000_000;
    const SEC: u64 = 1_000_000;

    fn params(limit: u64, window_ms: u64) -> Params {
        Params { limit, window_ms }
    }

    /// Replays requests (µs since T2, cost) on one key; returns each decision.
    fn replay(p: &Params, requests: &[(u64, u64)]) -> Vec<Decision> {
        testing::replay::<SlidingWindow>(p, T2, requests)
    }

    /// The key after some requests.
    fn key_after(p: &Params, requests: &[(u64, u64)]) -> Key<SlidingWindow> {
        testing::key_after::<SlidingWindow>(p, T2, requests)
    }

    /// The worked example of the docs: 7 per minute, 5 requests in the previous minute and 3 in
    /// this one; a request
    /// 30% into this minute sees 3 + floor(5 × 0.7) = 6 and passes; the next is denied.
    #[test]
    fn seven_per_minute_weighs_the_previous_minute() {
        let p = params(7, 60_000);
        let mut requests = vec![(10 * SEC, 1); 5]; // 2:00:10
        requests.extend([(65 * SEC, 1); 3]); // 2:01:05
        requests.extend([(78 * SEC, 1); 2]); // 2:01:18, 30% into the minute
        let got: Vec<_> = replay(&p, &requests).iter().map(summary).collect();
        assert_eq!(
            got,
            vec![
                // 2:00:10: the n admitted so far count in 2:01 at a weight that falls
                // below 1/n (floor 0) at 2:01:00 + 60 s × (1 - 1/n) + 1 µs, when the key is
                // fresh again: 2:01:00.000001 for 1, ..., 2:01:48.000001 for 5.
                (true, 7, 6, 0, 50_001),
                (true, 7, 5, 0, 80_001),
                (true, 7, 4, 0, 90_001),
                (true, 7, 3, 0, 95_001),
                (true, 7, 2, 0, 98_001),
                // 2:01:05: floor(5 × 55 / 60) = 4 of the previous minute, plus this one's.
                (true, 7, 2, 0, 55_001),
                (true, 7, 1, 0, 85_001),
                (true, 7, 0, 0, 95_001),
                // 2:01:18: 3 + floor(5 × 0.7) = 6, so one passes; the next waits 6.000001 s.
                (true, 7, 0, 0, 87_001),
                (false, 7, 0, 6001, 87_001),
            ]
        );
    }

    #[test]
    fn the_first_denial_waits_exactly_and_then_passes() {
        let p = params(7, 60_000);
        let mut history = vec![(10 * SEC, 1); 5];
        history.extend([(65 * SEC, 1); 3]);
        history.push((78 * SEC, 1));
        let key = key_after(&p, &history);
        // current 4, previous 5: the request fits when floor(5 × left / 60 s) <= 2, that is
        // once less than 36 s of the minute is left: 24.000001 s in, 6.000001 s from now.
        let d = peek::<SlidingWindow>(&p, &key, T2 + 78 * SEC, 1);
        assert_eq!(d.retry_after, Some(Span::from_us(6 * SEC + 1)));
        assert!(!peek::<SlidingWindow>(&p, &key, T2 + 84 * SEC, 1).allowed);
        assert!(peek::<SlidingWindow>(&p, &key, T2 + 84 * SEC + 1, 1).allowed);
        // In whole ms, 6001: admitted then, not at 6000.
        assert!(peek::<SlidingWindow>(&p, &key, T2 + 78 * SEC + 6_001_000, 1).allowed);
    }

    #[test]
    fn a_full_current_window_waits_for_the_roll() {
        let p = params(4, 1000);
        let key = key_after(&p, &[(200_000, 4)]);
        // current 4 = limit: no share of the previous count helps; at the next second the
        // 4 become the previous count at full weight, and slide out over that second.
        let d = peek::<SlidingWindow>(&p, &key, T2 + 500_000, 2);
        // floor(4 × left / 1 s) <= 2 once left < 0.75 s: 0.250001 s into the next second.
        assert_eq!(d.retry_after, Some(Span::from_us(750_001)));
        assert!(!peek::<SlidingWindow>(&p, &key, T2 + 1_250_000, 2).allowed);
        assert!(peek::<SlidingWindow>(&p, &key, T2 + 1_250_001, 2).allowed);
        // Fresh once floor(4 × left / 1 s) = 0: left < 0.25 s, 1.750001 s after 2:00:00.
        assert_eq!(d.reset_after, Span::from_us(1_250_001));
    }

    #[test]
    fn cost_above_the_limit_is_never_admitted() {
        let p = params(5, 60_000);
        let mut key = key_after(&p, &[(0, 2)]);
        let before = key;
        let d = step::<SlidingWindow>(&p, &mut key, T2 + SEC, 6);
        assert!(!d.allowed);
        assert_eq!((d.remaining, d.retry_after), (3, None));
        assert_eq!(key, before);
        let mut fresh: Key<SlidingWindow> = None;
        let d = step::<SlidingWindow>(&p, &mut fresh, T2, 6);
        assert_eq!(summary(&d), (false, 5, 5, -1, 0));
        assert_eq!(fresh, None);
    }

    #[test]
    fn a_new_window_carries_the_estimate() {
        // 10 per minute: 4 in 2:00, 6 in 2:01 (by 2:01:30).
        let minute = params(10, 60_000);
        let mut key = key_after(&minute, &[(10 * SEC, 4), (90 * SEC, 6)]);
        // At 2:01:35, 10 per 10 s: the key counts what its own minute says, 6 + floor(4 ×
        // 25 / 60) = 7, so 3 more fit. The request of 2 writes 9 as the count of
        // [2:01:30, 2:01:40), which holds them until 2:01:40 and lets them slide out over
        // the next 10 s: fresh once floor(9 × left / 10 s) = 0, 8.888889 s into it.
        let ten_s = params(10, 10_000);
        let d = step::<SlidingWindow>(&ten_s, &mut key, T2 + 95 * SEC, 2);
        assert!(d.allowed);
        assert_eq!(d.remaining, 1);
        assert_eq!(d.reset_after, Span::from_us(5 * SEC + 8_888_889));
        assert_eq!(
            key,
            Some((
                ten_s,
                State {
                    window_start_us: T2 + 90 * SEC,
                    current: 9,
                    previous: 0
                }
            ))
        );
        // From here on, the new 10 s schedule: 2 more fit once the 9 weigh 8, a microsecond
        // into 2:01:40.
        let d = peek::<SlidingWindow>(&ten_s, &key, T2 + 95 * SEC, 2);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Span::from_us(5 * SEC + 1)));

        // Unwritten, the key keeps its own minute: a shorter window with a smaller limit sees
        // its estimate, which falls as the minute says, and never rises again.
        let key = key_after(&minute, &[(90 * SEC, 10)]); // 2:01, full
        let small = params(5, 10_000);
        let d = peek::<SlidingWindow>(&small, &key, T2 + 95 * SEC, 1);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        // At 2:02 the 10 become the previous count: floor(10 × left / 60 s) <= 4 once
        // left < 30 s, at 2:02:30.000001; 0 once left < 6 s, at 2:02:54.000001.
        assert_eq!(d.retry_after, Some(Span::from_us(55 * SEC + 1)));
        assert!(peek::<SlidingWindow>(&small, &key, T2 + 150 * SEC + 1, 1).allowed);
        assert!(!peek::<SlidingWindow>(&small, &key, T2 + 150 * SEC, 1).allowed);
        assert!(!peek::<SlidingWindow>(&small, &key, T2 + 150 * SEC - 1000, 1).allowed);
        assert_eq!(d.reset_after, Span::from_us(79 * SEC + 1));
        // Before, the counts rolled on the minute but were weighed on the 10 s windows, so the
        // estimate rose again at every one of them: after the retry said (2:02:05.000001),
        // the request was refused again from 2:02:10 to 2:02:15, and so on.
    }

    #[test]
    fn snapshot_reports_the_state() {
        let p = params(7, 60_000);
        let (_, s) = key_after(&p, &[(10 * SEC, 5), (65 * SEC, 3)]).unwrap();
        let snap = snapshot(&p, &s, T2 + 78 * SEC);
        assert_eq!(
            (
                snap.params,
                snap.window_start_us,
                snap.current,
                snap.previous
            ),
            (p, T2 + 60 * SEC, 3, 5)
        );
        assert_eq!(
            (snap.now.remaining, snap.now.reset_after.ceil_ms()),
            (1, 82_001)
        );
    }

    fn any_params() -> impl Strategy<Value = Params> {
        testing::window_params(params)
    }

    fn changing_params() -> impl Strategy<Value = Params> {
        testing::changing_window_params(params)
    }

    proptest! {
        /// After an admission the estimate is at most the limit, and in every aligned
        /// window at most `limit` units are admitted.
        #[test]
        fn never_more_than_limit(p in any_params(), gaps in testing::any_requests()) {
            let mut at = 0;
            let mut key: Key<SlidingWindow> = None;
            let mut per_window: HashMap<u128, u64> = HashMap::new();
            let window = window_us(p.window_ms);
            for (gap, cost) in gaps {
                at += gap;
                let now = T2 + at;
                if step::<SlidingWindow>(&p, &mut key, now, cost).allowed {
                    let estimate = p.limit - peek::<SlidingWindow>(&p, &key, now, 0).remaining;
                    if let (Some((_, s)), true) = (&key, cost > 0) {
                        // The estimate from the counts just written, as the formula says.
                        let left = window_start(u128::from(now), window) + window - u128::from(now);
                        let exact = u128::from(s.previous) * left / window + u128::from(s.current);
                        prop_assert!(exact <= u128::from(p.limit), "estimate {}", exact);
                        prop_assert_eq!(u128::from(estimate), exact);
                    }
                    let n = per_window.entry(window_start(u128::from(now), window)).or_default();
                    *n += cost;
                    prop_assert!(*n <= p.limit, "{} admitted in one window", n);
                }
            }
        }

        /// The estimate never rises while nothing is admitted (so waiting never hurts),
        /// across window rolls too.
        #[test]
        fn the_estimate_never_rises_with_time(
            p in any_params(), gaps in testing::any_requests(), steps in proptest::collection::vec(0u64..2_000_000, 1..20),
        ) {
            let (key, mut t) = testing::after_gaps::<SlidingWindow>(&p, &gaps, T2);
            let mut remaining = peek::<SlidingWindow>(&p, &key, t, 0).remaining;
            for dt in steps {
                t += dt;
                let now = peek::<SlidingWindow>(&p, &key, t, 0).remaining;
                prop_assert!(now >= remaining);
                remaining = now;
            }
        }

        /// With windows of a few ms, every microsecond before retry_after is checked: none
        /// admits the request; and from reset_after on, for three windows, every one shows a
        /// fresh key. Parameters may change (the stored ones are `q`).
        #[test]
        fn retry_and_reset_are_the_least_times_microsecond_by_microsecond(
            q in (1u64..=4, 1u64..=4).prop_map(|(l, w)| params(l, w)),
            p in (1u64..=4, 1u64..=4).prop_map(|(l, w)| params(l, w)),
            gaps in proptest::collection::vec((0u64..3_000, 0u64..4), 1..12),
            later in 0u64..3_000, cost in 1u64..5,
        ) {
            let (key, at) = testing::after_gaps::<SlidingWindow>(&q, &gaps, T2);
            let now = at + later;
            let d = peek::<SlidingWindow>(&p, &key, now, cost);
            if let (false, Some(retry)) = (d.allowed, d.retry_after) {
                let us = retry.ceil_us();
                for t in now..now + us {
                    prop_assert!(!peek::<SlidingWindow>(&p, &key, t, cost).allowed, "admitted at +{}", t - now);
                }
                prop_assert!(peek::<SlidingWindow>(&p, &key, now + us, cost).allowed);
            }
            if !d.allowed {
                let reset = d.reset_after.ceil_us();
                if reset > 0 {
                    prop_assert!(peek::<SlidingWindow>(&p, &key, now + reset - 1, 0).remaining < p.limit);
                }
                for t in now + reset..now + reset + 3 * p.window_ms * 1000 {
                    prop_assert_eq!(peek::<SlidingWindow>(&p, &key, t, 0).remaining, p.limit, "at +{}", t - now);
                }
            }
        }

        /// The same inputs give the same decision; without `write` (DRYRUN, COST 0) or when
        /// denied, the state is untouched; with it, a request decides as its dry run said,
        /// and the key it writes agrees with the reply.
        #[test]
        fn dryrun_decides_like_the_real_request_and_changes_nothing(
            p in any_params(), q in any_params(), start_off in 0u64..100, current in 0u64..25,
            previous in 0u64..25, now in 0u64..20_000_000, cost in 0u64..30,
        ) {
            let start = T2 + start_off * q.window_ms * 1000;
            let key: Key<SlidingWindow> = Some((q, State { window_start_us: start, current, previous }));
            testing::dryrun_decides_like_the_real_request::<SlidingWindow>(&p, &key, T2 + now, cost)?;
        }

        /// Any parameters, states, times and costs: no panic, no wrap.
        #[test]
        fn extremes_never_panic(limit in any::<u64>(), window_ms in any::<u64>(),
                                old_limit in any::<u64>(), old_window_ms in any::<u64>(),
                                window_start_us in any::<u64>(), current in any::<u64>(),
                                previous in any::<u64>(), now in any::<u64>(),
                                cost in any::<u64>(), write in any::<bool>()) {
            let p = params(limit, window_ms);
            let q = params(old_limit, old_window_ms);
            let state = State { window_start_us, current, previous };
            testing::never_panics::<SlidingWindow>(&p, &[&q, &p], &state, now, cost, write);
        }
    }

    testing::properties! {
        SlidingWindow, t0: T2, limit: |p| p.limit;
        retry_after_is_exact(any_params());
        // The estimate need not fall steadily after a change; the times said are still exact.
        retry_after_is_exact_after_a_parameter_change(any_params());
        remaining_is_what_fits_now(any_params());
        fresh_again_after_reset_after(any_params());
        // The counts carry, and the previous count only ever weighs on the estimate.
        one_instant_admits_at_most_the_largest_limit(changing_params());
        largest_cost_is_what_a_dryrun_admits(changing_params(), bound: 21);
        refund_gives_back_exactly(changing_params(), later_within: 20_000_000, later_too: |_| true);
        one_schedule_for_every_reply(changing_params(), long_gap: 60_000_000, later_within: 20_000_000);
    }
}
