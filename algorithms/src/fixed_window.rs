//! The fixed window counter.
//!
//! The intuition: time is cut into windows of equal length, aligned to multiples of the
//! window length since the Unix epoch (a one-minute window resets on the round minute, a
//! one-hour window on the hour, for every key alike). Each key counts the units admitted in
//! the window it is in, and a request is admitted while that count plus its cost stays
//! within the limit. When the next window begins, the count starts again from zero.
//!
//! That is the whole promise: in every aligned window, at most `limit` units are admitted.
//! It is not a promise about every interval of that length: a client can spend the whole
//! limit at the end of one window and again at the start of the next (the known edge burst;
//! RL.SLIDINGWINDOW smooths it).
//!
//! With `window_us = window_ms × 1000` and `start = now - now % window_us`:
//! - admitted when `count + cost <= limit`, where `count` is the stored count if the stored
//!   window has not ended yet, else 0;
//! - `remaining = limit - count` after this call;
//! - `retry_after = end of the window - now` when denied (the count is back to 0 then), and
//!   never when `cost > limit`;
//! - `reset_after = end of the window - now` while the count is above 0, else 0.
//!
//! Everything is exact integer arithmetic in microseconds (u128, so that no window length
//! or clock reading can overflow); the window ends on a whole millisecond, so the reply's
//! `retry_after_ms` and `reset_after_ms` are exact too.
//!
//! Changing parameters on an existing key: if `now` is still inside the stored window
//! (`[window_start, window_start + old window)`), its count carries over into the window
//! that contains `now` under the new length, and the new limit applies to it, so nothing
//! admitted is forgotten (with a smaller limit the key may stay full until that window
//! ends). If the stored window has ended, the key is fresh. Until a request is admitted
//! under the new parameters the stored state is what it was, so a denial waits for the end
//! of the *stored* window, the time at which that count stops counting.
//!
//! A stored window that begins after `now` (a clock that went back, say after a failover to
//! a replica whose clock is behind) has not ended either: its count carries into now's
//! window in the same way, never in the caller's favour.
//!
//! The window arithmetic (`window_us`, `window_start`) is shared with RL.SLIDINGWINDOW.

use super::{keep, Algorithm, Decision, Span};

/// A window length in microseconds; a zero length (which no command accepts) is taken as
/// one millisecond, and u128 leaves room for any length in ms.
pub(super) fn window_us(window_ms: u64) -> u128 {
    u128::from(window_ms.max(1)) * 1000
}

/// The start of the aligned window of length `window_us` that contains `t_us`: the
/// greatest multiple of the length, counted from the Unix epoch, that is not after `t_us`.
pub(super) fn window_start(t_us: u128, window_us: u128) -> u128 {
    t_us - t_us % window_us.max(1)
}

/// RL.FIXEDWINDOW's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units admitted per aligned window.
    pub limit: u64,
    /// The window's length.
    pub window_ms: u64,
}

/// What a key stores.
///
/// Invariants, as every admitted request writes them: `window_start_us` is a multiple of
/// `window_ms × 1000` (of the parameters stored with it) and not after the clock of the
/// write; `1 <= count <= limit`. A state outside them (a corrupted RDB) never makes the
/// algorithm panic: a window that has not ended is counted as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The start of the window the count belongs to, in µs since the Unix epoch.
    pub window_start_us: u64,
    /// Units admitted in that window.
    pub count: u64,
}

/// The stored count if its window (under the length it was written with) has not ended at
/// `now_us`, else 0: what [`Algorithm::check`] counts.
fn counting(stored: &Params, state: &State, now_us: u64) -> u64 {
    let end = u128::from(state.window_start_us) + window_us(stored.window_ms);
    if u128::from(now_us) < end {
        state.count
    } else {
        0
    }
}

/// RL.FIXEDWINDOW's algorithm: [`Algorithm::check`] on a window's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow;

impl Algorithm for FixedWindow {
    type Params = Params;
    type State = State;

    fn check(
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
        // The stored count counts until its own window ends (under the length it was
        // written with); `counted_until` is that end, when it still counts.
        let (count, counted_until) = match &stored {
            Some((old, state)) => {
                let end = u128::from(state.window_start_us) + window_us(old.window_ms);
                if now < end {
                    (u128::from(state.count), end)
                } else {
                    (0, now)
                }
            }
            None => (0, now),
        };
        let allowed = count.saturating_add(cost_units) <= limit;
        let (used, reset_at) = if allowed && cost > 0 {
            // The request's units belong to now's window, which holds them until it ends.
            (count + cost_units, start + window)
        } else if count > 0 {
            (count, counted_until)
        } else {
            (0, now)
        };
        let retry_after = if allowed {
            Some(Span::ZERO)
        } else if cost > params.limit {
            None
        } else {
            // Denied with cost <= limit: the count is above 0 and stops counting then.
            Some(Span::new(counted_until - now, 1))
        };
        let decision = Decision {
            allowed,
            limit: params.limit,
            remaining: u64::try_from(limit.saturating_sub(used)).unwrap_or(0),
            retry_after,
            reset_after: Span::new(reset_at - now, 1),
            delay: None,
        };
        let fresh = if allowed && write {
            // Both fit: start <= now, and used <= limit.
            let new = State {
                window_start_us: u64::try_from(start).unwrap_or(now_us),
                count: u64::try_from(used).unwrap_or(params.limit),
            };
            keep(stored.map(|(_, state)| state), new)
        } else {
            None
        };
        (decision, fresh)
    }

    /// `limit - count`, the count being the stored one while its window lasts.
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        let count = match stored {
            Some((old, state)) => counting(old, state, now_us),
            None => 0,
        };
        params.limit.saturating_sub(count)
    }

    /// What is taken: the window's count while the window lasts (nothing once it has
    /// ended). Giving back `k` lowers it by exactly `k`, never below 0.
    fn refund(params: &Params, state: &mut State, now_us: u64, units: u64) -> u64 {
        let given = counting(params, state, now_us).min(units);
        state.count -= given;
        given
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::FixedWindow(snapshot(params, state, now_us))
    }
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// The stored window's start (as stored, even once the window is over).
    pub window_start_us: u64,
    /// The stored window's count (as stored, even once the window is over).
    pub count: u64,
    /// The key as a request of no units would see it.
    pub now: Decision,
}

/// The key's parameters and state as of `now_us` (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    Snapshot {
        params: *params,
        window_start_us: state.window_start_us,
        count: state.count,
        now: FixedWindow::view_now(params, state, now_us),
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
        testing::replay::<FixedWindow>(p, T2, requests)
    }

    /// The key after some requests.
    fn key_after(p: &Params, requests: &[(u64, u64)]) -> Key<FixedWindow> {
        testing::key_after::<FixedWindow>(p, T2, requests)
    }

    #[test]
    fn window_arithmetic() {
        assert_eq!(window_us(60_000), 60_000_000);
        assert_eq!(window_us(0), 1000);
        assert_eq!(window_us(u64::MAX), u128::from(u64::MAX) * 1000);
        let minute = window_us(60_000);
        let t = u128::from(T2);
        assert_eq!(window_start(t, minute), t);
        assert_eq!(window_start(t + 59_999_999, minute), t);
        assert_eq!(window_start(t + 60_000_000, minute), t + 60_000_000);
        assert_eq!(window_start(5, 0), 5);
        assert_eq!(window_start(t, window_us(u64::MAX)), 0);
    }

    /// The worked example of the docs: 5 per minute; 5 at 2:00:59 and 5 at 2:01:00 all pass (the
    /// edge burst), a
    /// sixth at 2:01:01 is denied until 2:02:00.
    #[test]
    fn five_per_minute_edge_burst() {
        let p = params(5, 60_000);
        let mut requests = vec![(59 * SEC, 1); 5];
        requests.extend([(60 * SEC, 1); 5]);
        requests.push((61 * SEC, 1));
        let got: Vec<_> = replay(&p, &requests).iter().map(summary).collect();
        assert_eq!(
            got,
            vec![
                (true, 5, 4, 0, 1000),
                (true, 5, 3, 0, 1000),
                (true, 5, 2, 0, 1000),
                (true, 5, 1, 0, 1000),
                (true, 5, 0, 0, 1000),
                (true, 5, 4, 0, 60_000),
                (true, 5, 3, 0, 60_000),
                (true, 5, 2, 0, 60_000),
                (true, 5, 1, 0, 60_000),
                (true, 5, 0, 0, 60_000),
                (false, 5, 0, 59_000, 59_000),
            ]
        );
    }

    #[test]
    fn denied_until_the_next_window_then_admitted() {
        let p = params(5, 60_000);
        let key = key_after(&p, &[(60 * SEC, 5)]);
        let d = peek::<FixedWindow>(&p, &key, T2 + 61 * SEC + 250_000, 1);
        assert!(!d.allowed);
        // Exactly 58.75 s to the round minute 2:02:00.
        assert_eq!(d.retry_after, Some(Span::from_us(58_750_000)));
        assert!(!peek::<FixedWindow>(&p, &key, T2 + 120 * SEC - 1, 1).allowed);
        let at_2_02 = peek::<FixedWindow>(&p, &key, T2 + 120 * SEC, 1);
        assert_eq!(summary(&at_2_02), (true, 5, 4, 0, 60_000));
    }

    #[test]
    fn cost_above_the_limit_is_never_admitted() {
        let p = params(5, 60_000);
        let mut key = key_after(&p, &[(0, 2)]);
        let before = key;
        let d = step::<FixedWindow>(&p, &mut key, T2 + SEC, 6);
        assert_eq!(summary(&d), (false, 5, 3, -1, 59_000));
        assert_eq!(key, before);
        // A fresh key too, and no state is made.
        let mut fresh: Key<FixedWindow> = None;
        let d = step::<FixedWindow>(&p, &mut fresh, T2, 6);
        assert_eq!(summary(&d), (false, 5, 5, -1, 0));
        assert_eq!(fresh, None);
    }

    #[test]
    fn a_parameter_change_carries_the_count_into_the_new_window() {
        // 10 per minute, 4 used at 2:00:30.
        let minute = params(10, 60_000);
        let mut key = key_after(&minute, &[(30 * SEC, 4)]);
        // At 2:00:35, 6 per 10 s: the 4 carry into [2:00:30, 2:00:40), so 2 more fit.
        let ten_s = params(6, 10_000);
        let d = step::<FixedWindow>(&ten_s, &mut key, T2 + 35 * SEC, 2);
        assert_eq!(summary(&d), (true, 6, 0, 0, 5000));
        assert_eq!(
            key,
            Some((
                ten_s,
                State {
                    window_start_us: T2 + 30 * SEC,
                    count: 6
                }
            ))
        );
        let d = step::<FixedWindow>(&ten_s, &mut key, T2 + 36 * SEC, 1);
        assert_eq!(summary(&d), (false, 6, 0, 4000, 4000));
        assert!(step::<FixedWindow>(&ten_s, &mut key, T2 + 40 * SEC, 6).allowed);

        // Once the stored window has ended, the key is fresh under the new parameters.
        let key = key_after(&minute, &[(30 * SEC, 9)]);
        let d = peek::<FixedWindow>(&params(3, 10_000), &key, T2 + 60 * SEC, 3);
        assert_eq!(summary(&d), (true, 3, 0, 0, 10_000));

        // A smaller limit with the stored window still running: full, and (nothing being
        // written) full until the stored minute ends, not just the new 10 s window.
        let key = key_after(&minute, &[(30 * SEC, 9)]);
        let small = params(5, 10_000);
        let d = peek::<FixedWindow>(&small, &key, T2 + 45 * SEC, 0);
        assert_eq!(summary(&d), (false, 5, 0, 15_000, 15_000));
        assert!(!peek::<FixedWindow>(&small, &key, T2 + 60 * SEC - 1, 1).allowed);
        assert!(peek::<FixedWindow>(&small, &key, T2 + 60 * SEC, 5).allowed);
    }

    #[test]
    fn a_clock_that_went_back_still_counts_the_stored_window() {
        let p = params(5, 60_000);
        let key = key_after(&p, &[(60 * SEC, 5)]); // the window 2:01
        let d = peek::<FixedWindow>(&p, &key, T2 + 59 * SEC, 1); // 2:00:59
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Span::from_us(61 * SEC)));
    }

    #[test]
    fn snapshot_reports_the_state() {
        let p = params(5, 60_000);
        let (_, s) = key_after(&p, &[(10 * SEC, 2)]).unwrap();
        let snap = snapshot(&p, &s, T2 + 20 * SEC);
        assert_eq!(
            (
                snap.params,
                snap.window_start_us,
                snap.count,
                snap.now.remaining
            ),
            (p, T2, 2, 3)
        );
        assert_eq!(snap.now.reset_after.ceil_ms(), 40_000);
        // After the window: the same state reads as fresh.
        let snap = snapshot(&p, &s, T2 + 60 * SEC);
        assert_eq!((snap.now.remaining, snap.now.reset_after.ceil_ms()), (5, 0));
    }

    fn any_params() -> impl Strategy<Value = Params> {
        testing::window_params(params)
    }

    fn changing_params() -> impl Strategy<Value = Params> {
        testing::changing_window_params(params)
    }

    proptest! {
        /// In every aligned window, at most `limit` units are admitted.
        #[test]
        fn never_more_than_limit_per_aligned_window(p in any_params(), gaps in testing::any_requests()) {
            let mut at = 0;
            let mut key: Key<FixedWindow> = None;
            let mut per_window: HashMap<u128, u64> = HashMap::new();
            let window = window_us(p.window_ms);
            for (gap, cost) in gaps {
                at += gap;
                let now = T2 + at;
                if step::<FixedWindow>(&p, &mut key, now, cost).allowed {
                    let n = per_window.entry(window_start(u128::from(now), window)).or_default();
                    *n += cost;
                    prop_assert!(*n <= p.limit, "{} admitted in one window", n);
                }
            }
        }

        /// The same inputs give the same decision; without `write` (DRYRUN, COST 0) or when
        /// denied, the state is untouched; with it, a request decides as its dry run said,
        /// and the key it writes agrees with the reply.
        #[test]
        fn dryrun_decides_like_the_real_request_and_changes_nothing(
            p in any_params(), q in any_params(), start_off in 0u64..100, count in 0u64..25,
            now in 0u64..20_000_000, cost in 0u64..30,
        ) {
            let start = T2 + start_off * q.window_ms * 1000;
            let key: Key<FixedWindow> = Some((q, State { window_start_us: start, count }));
            testing::dryrun_decides_like_the_real_request::<FixedWindow>(&p, &key, T2 + now, cost)?;
        }

        /// Any parameters, states, times and costs: no panic, no wrap.
        #[test]
        fn extremes_never_panic(limit in any::<u64>(), window_ms in any::<u64>(),
                                old_limit in any::<u64>(), old_window_ms in any::<u64>(),
                                window_start_us in any::<u64>(), count in any::<u64>(),
                                now in any::<u64>(), cost in any::<u64>(), write in any::<bool>()) {
            let p = params(limit, window_ms);
            let q = params(old_limit, old_window_ms);
            let state = State { window_start_us, count };
            testing::never_panics::<FixedWindow>(&p, &[&q, &p], &state, now, cost, write);
        }
    }

    testing::properties! {
        FixedWindow, t0: T2, limit: |p| p.limit;
        retry_after_is_exact(any_params());
        retry_after_is_exact_after_a_parameter_change(any_params());
        remaining_is_what_fits_now(any_params());
        fresh_again_after_reset_after(any_params());
        // Windows of different lengths that all contain now, and the count carries.
        one_instant_admits_at_most_the_largest_limit(changing_params());
        largest_cost_is_what_a_dryrun_admits(changing_params(), bound: 21);
        refund_gives_back_exactly(changing_params(), later_within: 20_000_000, later_too: |_| true);
        one_schedule_for_every_reply(changing_params(), long_gap: 60_000_000, later_within: 20_000_000);
    }
}
