//! The concurrency limiter: at most `limit` leases held at once.
//!
//! A client acquires a lease before work and releases it after; a lease also ends by itself
//! `lease` after it was taken, so a client that crashes cannot hold a slot for ever. A lease
//! is named by a token: the caller's own (`ID token`, which also lets it renew a lease it
//! holds), or one generated here. Generated tokens are `<now in µs, hex>-<number of tokens
//! issued on this key, hex>`: unique per key, and the same on a replica that replays the
//! request with the primary's clock reading, so nothing random needs replicating.
//!
//! A request is admitted when fewer than `limit` leases are active (or when it renews an
//! active lease of its own token); `retry_after` is when the first active lease ends;
//! `reset_after` is when the last one does. Memory follows the leases held, never `limit`.
//! Parameters that change keep the leases held, with the expiries they were given.

use super::{int, Algorithm, Decision, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    pub limit: u64,
    pub lease_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub token: Vec<u8>,
    /// When the lease ends by itself, µs since the Unix epoch.
    pub expires_us: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The leases taken and not yet dropped (some may have ended: only a write drops them).
    pub leases: Vec<Lease>,
    /// Tokens generated on this key so far.
    pub issued: u64,
}

/// The longest token a caller may name a lease with.
pub const MAX_TOKEN: usize = 256;

/// What an acquisition answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub decision: Decision,
    /// The lease's token, when admitted.
    pub token: Option<Vec<u8>>,
}

fn active(state: &State, now_us: u64) -> impl Iterator<Item = &Lease> {
    state.leases.iter().filter(move |l| l.expires_us > now_us)
}

fn generated(now_us: u64, issued: u64) -> Vec<u8> {
    format!("{now_us:x}-{issued:x}").into_bytes()
}

fn decision(params: &Params, state: &State, now_us: u64, allowed: bool) -> Decision {
    let held = active(state, now_us).count() as u64;
    let first_end = active(state, now_us).map(|l| l.expires_us).min();
    let last_end = active(state, now_us)
        .map(|l| l.expires_us)
        .max()
        .unwrap_or(now_us);
    Decision {
        allowed,
        limit: params.limit,
        remaining: params.limit.saturating_sub(held),
        retry_after: if allowed {
            Some(Span::ZERO)
        } else {
            first_end.map(|end| Span::from_us(end - now_us))
        },
        reset_after: Span::from_us(last_end - now_us),
        delay: None,
    }
}

/// Acquires a lease at `now_us`, named `id` or a generated token. Changes `state` only when
/// admitted and `write` is set (dropping ended leases then too).
pub fn acquire(
    params: &Params,
    state: &mut State,
    now_us: u64,
    id: Option<&[u8]>,
    write: bool,
) -> Acquired {
    let expires_us = now_us.saturating_add(params.lease_ms.saturating_mul(1000));
    let held = active(state, now_us).count() as u64;
    let renewing = id.is_some_and(|id| active(state, now_us).any(|l| l.token == id));
    let allowed = renewing || held < params.limit;
    if !allowed {
        return Acquired {
            decision: decision(params, state, now_us, false),
            token: None,
        };
    }
    let token = match id {
        Some(id) => id.to_vec(),
        None => generated(now_us, state.issued),
    };
    if !write {
        // What the request would be told, without taking anything.
        let mut copy = state.clone();
        return acquire_into(params, &mut copy, now_us, &token, id.is_none(), expires_us);
    }
    acquire_into(params, state, now_us, &token, id.is_none(), expires_us)
}

fn acquire_into(
    params: &Params,
    state: &mut State,
    now_us: u64,
    token: &[u8],
    generated: bool,
    expires_us: u64,
) -> Acquired {
    state
        .leases
        .retain(|l| l.expires_us > now_us && l.token != token);
    state.leases.push(Lease {
        token: token.to_vec(),
        expires_us,
    });
    if generated {
        state.issued = state.issued.saturating_add(1);
    }
    Acquired {
        decision: decision(params, state, now_us, true),
        token: Some(token.to_vec()),
    }
}

/// Releases the active lease named `token`; false when there is none (unknown or ended),
/// and then nothing changes.
pub fn release(state: &mut State, token: &[u8], now_us: u64) -> bool {
    if !active(state, now_us).any(|l| l.token == token) {
        return false;
    }
    state
        .leases
        .retain(|l| l.expires_us > now_us && l.token != token);
    true
}

/// How long until the last active lease ends (zero: the key may go).
pub fn reset_after(state: &State, now_us: u64) -> Span {
    let last = active(state, now_us)
        .map(|l| l.expires_us)
        .max()
        .unwrap_or(now_us);
    Span::from_us(last - now_us)
}

/// Heap bytes the leases take, for MEMORY USAGE.
pub fn heap_bytes(state: &State) -> usize {
    state.leases.capacity() * std::mem::size_of::<Lease>()
        + state
            .leases
            .iter()
            .map(|l| l.token.capacity())
            .sum::<usize>()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency;

impl Algorithm for Concurrency {
    type Params = Params;
    type State = State;
    const NAME: &'static str = "RL.CONCURRENCY.ACQUIRE";

    /// An acquisition with a generated token (the commands call [`acquire`] itself, which
    /// also takes the caller's token and answers the lease's).
    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        _cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        match stored {
            Some((_, state)) => (acquire(params, state, now_us, None, write).decision, None),
            None => {
                let mut fresh = State::default();
                let acquired = acquire(params, &mut fresh, now_us, None, write);
                let keep = acquired.decision.allowed && write;
                (acquired.decision, keep.then_some(fresh))
            }
        }
    }

    fn describe(params: &Params, state: &State, now_us: u64) -> Vec<(&'static str, i64)> {
        let now = decision(params, state, now_us, true);
        vec![
            ("limit", int(params.limit)),
            ("lease_ms", int(params.lease_ms)),
            ("held", int(params.limit.saturating_sub(now.remaining))),
            ("issued", int(state.issued)),
            ("remaining", int(now.remaining)),
            ("reset_after_ms", int(now.reset_after.ceil_ms())),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000;
    const P: Params = Params {
        limit: 2,
        lease_ms: 1000,
    };

    #[test]
    fn at_most_limit_leases_then_the_first_to_end_frees_a_slot() {
        let mut s = State::default();
        let a = acquire(&P, &mut s, T0, None, true);
        let b = acquire(&P, &mut s, T0 + 100_000, None, true);
        assert_eq!((a.decision.remaining, b.decision.remaining), (1, 0));
        assert_eq!(a.token.as_deref(), Some(&b"60a24181e4000-0"[..]));
        assert_ne!(a.token, b.token);
        let c = acquire(&P, &mut s, T0 + 200_000, None, true);
        assert!(!c.decision.allowed);
        assert_eq!(c.token, None);
        assert_eq!(c.decision.retry_after.unwrap().ceil_ms(), 800);
        assert_eq!(c.decision.reset_after.ceil_ms(), 900);
        // a's lease ends at T0 + 1 s.
        assert!(
            acquire(&P, &mut s, T0 + 1_000_000, None, true)
                .decision
                .allowed
        );
    }

    #[test]
    fn release_frees_a_slot_and_unknown_or_ended_tokens_change_nothing() {
        let mut s = State::default();
        let a = acquire(&P, &mut s, T0, Some(b"job-1"), true);
        assert_eq!(a.token.as_deref(), Some(&b"job-1"[..]));
        acquire(&P, &mut s, T0, Some(b"job-2"), true);
        let before = s.clone();
        assert!(!release(&mut s, b"job-9", T0));
        assert!(!release(&mut s, b"job-1", T0 + 1_000_000), "ended");
        assert_eq!(s, before);
        assert!(release(&mut s, b"job-1", T0 + 10));
        assert_eq!(s.leases.len(), 1);
        assert!(acquire(&P, &mut s, T0 + 20, None, true).decision.allowed);
    }

    #[test]
    fn the_same_token_renews_its_lease_without_a_second_slot() {
        let mut s = State::default();
        acquire(&P, &mut s, T0, Some(b"job"), true);
        acquire(&P, &mut s, T0, Some(b"other"), true);
        let renewed = acquire(&P, &mut s, T0 + 500_000, Some(b"job"), true);
        assert!(renewed.decision.allowed);
        assert_eq!(s.leases.len(), 2);
        assert_eq!(renewed.decision.reset_after.ceil_ms(), 1000);
    }

    #[test]
    fn without_write_nothing_changes() {
        let mut s = State::default();
        acquire(&P, &mut s, T0, None, true);
        let before = s.clone();
        let dry = acquire(&P, &mut s, T0 + 5, None, false);
        assert!(dry.decision.allowed);
        assert_eq!(s, before);
    }

    proptest! {
        /// Never more than `limit` active leases, whatever the order of acquisitions,
        /// releases and time.
        #[test]
        fn never_more_than_limit_held(limit in 1u64..6, ops in proptest::collection::vec((0u8..3, 0u64..400_000, 0usize..4), 1..80)) {
            let p = Params { limit, lease_ms: 1000 };
            let mut s = State::default();
            let mut now = T0;
            let mut tokens: Vec<Vec<u8>> = Vec::new();
            for (kind, gap, pick) in ops {
                now += gap;
                match kind {
                    0 => if let Some(t) = acquire(&p, &mut s, now, None, true).token { tokens.push(t) },
                    1 => { let id = format!("id{pick}"); acquire(&p, &mut s, now, Some(id.as_bytes()), true); }
                    _ => if let Some(t) = tokens.get(pick) { release(&mut s, &t.clone(), now); },
                }
                prop_assert!(active(&s, now).count() as u64 <= limit);
            }
        }

        /// SPEC §3 for leases: parameters that change keep the leases held. At one instant,
        /// acquisitions under any sequence of parameter sets take at most the largest limit
        /// among them; over time, the leases held never exceed the largest limit used.
        #[test]
        fn changing_parameters_never_hold_more_than_the_largest_limit(
            ops in proptest::collection::vec((1u64..6, 1u64..2_000, 0u64..400_000), 1..80),
            sets in proptest::collection::vec((1u64..6, 1u64..2_000), 1..20),
        ) {
            let mut s = State::default();
            let mut now = T0;
            let mut largest = 0;
            for (limit, lease_ms, gap) in ops {
                now += gap;
                largest = largest.max(limit);
                acquire(&Params { limit, lease_ms }, &mut s, now, None, true);
                prop_assert!(active(&s, now).count() as u64 <= largest);
            }
            let held = active(&s, now).count() as u64;
            let at_instant = sets.iter().map(|&(limit, _)| limit).max().unwrap_or(0);
            let taken = sets
                .iter()
                .filter(|&&(limit, lease_ms)| {
                    acquire(&Params { limit, lease_ms }, &mut s, now, None, true).decision.allowed
                })
                .count() as u64;
            prop_assert!(taken <= at_instant);
            prop_assert!(active(&s, now).count() as u64 <= held.max(at_instant));
        }

        #[test]
        fn extremes_never_panic(limit in any::<u64>(), lease_ms in any::<u64>(), now in any::<u64>(), expires in any::<u64>(), issued in any::<u64>()) {
            let p = Params { limit, lease_ms };
            let mut s = State { leases: vec![Lease { token: b"t".to_vec(), expires_us: expires }], issued };
            let a = acquire(&p, &mut s, now, None, true);
            let _ = (a.decision.reset_after.ceil_ms(), Concurrency::describe(&p, &s, now));
            release(&mut s, b"t", now);
        }
    }
}
