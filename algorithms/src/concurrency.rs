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
//! active lease of its own token); `retry_after` is when the first active lease ends, or,
//! when more than `limit` are held (the limit went down), when enough have ended: the
//! `(held - limit + 1)`-th to end, found by walking that many leases in order of their ends
//! (O(log n + held - limit), on a refusal only, bounded by the key's lease cap);
//! `reset_after` is when the last one does. Memory follows the leases held, never `limit`.
//! Parameters that change keep the leases held, with the expiries they were given.
//!
//! The leases are kept twice, ordered by token and ordered by when they end, so that a call
//! costs O(log n) in the n leases held: finding a token, the first and the last to end, and
//! taking or dropping one are each a B-tree step. A lease that has ended stays until the next
//! write (a DRYRUN or a denial writes nothing), which drops every ended lease: each lease is
//! dropped once, so that is amortised O(log n) per acquisition, and a read skips the ended
//! leases at the front of the order (O(k) for the k that ended since the last write).

use std::cell::Cell;
use std::collections::BTreeMap;

use super::adaptive::{self, Estimate, Sample};
use super::{Algorithm, Decision, Span};

/// RL.CONCURRENCY.ACQUIRE's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// The most leases held at once; with `adaptive`, where a new key's limit starts.
    pub limit: u64,
    /// How long a lease lasts unless it is released (or renewed) first.
    pub lease_ms: u64,
    /// `ADAPTIVE`: the limit follows the samples RELEASE reports (see [`adaptive`]).
    pub adaptive: Option<adaptive::Params>,
}

/// When a lease began, and the leases held then (its own included): the sample its
/// release or its end reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Start {
    /// When the lease was taken, µs since the Unix epoch.
    pub started_us: u64,
    /// Leases held once it was taken.
    pub inflight: u32,
}

/// The leases a key holds, and how many tokens it has generated. Boxed: the value of every
/// key of the module is as large as the largest state, and this one is the largest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State(Box<Leases>);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Leases {
    /// When each lease ends, µs since the Unix epoch, by token.
    by_token: BTreeMap<Box<[u8]>, u64>,
    /// The same leases as (end, token): the first to end first; and when each began.
    by_end: BTreeMap<(u64, Box<[u8]>), Start>,
    /// The bytes of every token, once (for MEMORY USAGE).
    token_bytes: usize,
    /// Tokens generated on this key so far.
    issued: u64,
    /// An adaptive key's bounds and estimate, as of its last write: the leases that ended
    /// since are samples still to take (see [`pending`]). Boxed: most keys are not adaptive,
    /// and every key's value is as large as the largest state.
    adaptive: Option<Box<Adaptive>>,
    /// How many leases had ended at the time of the last read (see [`pending`]).
    ended: EndedCount,
}

/// An adaptive key's bounds and estimate.
#[derive(Debug, Clone)]
struct Adaptive {
    params: adaptive::Params,
    estimate: Estimate,
    /// The estimate once the leases [`EndedCount`] counts have taken their samples (a cache
    /// of it, as that count is).
    pending: Cell<Option<Estimate>>,
}

impl PartialEq for Adaptive {
    fn eq(&self, other: &Adaptive) -> bool {
        (self.params, self.estimate) == (other.params, other.estimate)
    }
}

impl Eq for Adaptive {}

/// How many leases had ended by a time, counted by a read (and an adaptive key's estimate
/// once their samples are taken, in [`Adaptive::pending`]): a read at a later time counts on
/// from there, so reads without a write in between (DRYRUNs, denials) skip each ended lease
/// once, not once per read. Not part of the state: never encoded, never compared, forgotten
/// by every change of the leases.
#[derive(Debug, Clone, Default)]
struct EndedCount(Cell<Option<(u64, usize)>>);

impl PartialEq for EndedCount {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EndedCount {}

/// The sample a lease that ran out reports: dropped, its RTT the time from the lease's first
/// acquisition to its end (a renewal moves the end, never the start).
fn expired(end_us: u64, start: &Start) -> Sample {
    Sample {
        rtt_ns: rtt_ns(end_us.saturating_sub(start.started_us)),
        inflight: i32::try_from(start.inflight).unwrap_or(i32::MAX),
        dropped: true,
    }
}

/// µs as the samples' ns, at least 1 (Netflix's Vegas refuses an RTT of 0).
fn rtt_ns(us: u64) -> i64 {
    i64::try_from(us.saturating_mul(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// The leases ended by `now_us` (those at the front of `by_end`), and an adaptive key's
/// estimate once each has reported its sample as a drop, in the order they ended: counted on
/// from the last read's when time has not gone back since (O(log n) plus the leases that
/// ended since).
fn pending(state: &State, now_us: u64) -> (usize, Option<Estimate>) {
    let adaptive = state.0.adaptive.as_deref();
    let cached = adaptive.map(|a| a.pending.get());
    let (from, mut count, mut estimate) = match (state.0.ended.0.get(), cached) {
        (Some((at, count)), None) if at <= now_us => (at.checked_add(1), count, None),
        (Some((at, count)), Some(Some(e))) if at <= now_us => (at.checked_add(1), count, Some(e)),
        _ => (Some(0), 0, adaptive.map(|a| a.estimate)),
    };
    if let Some(from) = from {
        for ((end, _), start) in state
            .0
            .by_end
            .range((from, Box::<[u8]>::default())..)
            .take_while(|((end, _), _)| *end <= now_us)
        {
            count += 1;
            if let (Some(e), Some(a)) = (estimate.as_mut(), adaptive) {
                e.update(&a.params, expired(*end, start));
            }
        }
    }
    state.0.ended.0.set(Some((now_us, count)));
    if let Some(a) = adaptive {
        a.pending.set(estimate);
    }
    (count, estimate)
}

fn ended(state: &State, now_us: u64) -> usize {
    pending(state, now_us).0
}

/// The seed of a new Vegas estimate: from the call's clock reading and the key's count of
/// tokens, which a replica replaying the call has too.
fn seed(state: &State, now_us: u64) -> u64 {
    now_us ^ state.0.issued.rotate_left(32)
}

/// What a call with `params` at `now_us` finds the key's limit to be: the leases that ended
/// have reported their samples; a key that turns adaptive (or changes algorithm) starts an
/// estimate at `params.limit` (or at its current limit), and new bounds clamp it. `None`
/// for a key that is not adaptive under `params`.
fn adapted(params: &Params, state: &State, now_us: u64) -> Option<(adaptive::Params, Estimate)> {
    let bounds = params.adaptive?;
    let (_, current) = pending(state, now_us);
    let estimate = match current {
        Some(mut e) if e.kind() == bounds.kind => {
            e.clamp(&bounds);
            e
        }
        Some(e) => Estimate::new(
            &bounds,
            u32::try_from(e.limit()).unwrap_or(u32::MAX),
            seed(state, now_us),
        ),
        None => Estimate::new(
            &bounds,
            u32::try_from(params.limit).unwrap_or(u32::MAX),
            seed(state, now_us),
        ),
    };
    Some((bounds, estimate))
}

/// The limit a call with `params` answers with: the adaptive estimate's, else `params.limit`.
fn limit_of(params: &Params, adapted: &Option<(adaptive::Params, Estimate)>) -> u64 {
    adapted.map_or(params.limit, |(_, e)| e.limit())
}

impl State {
    /// A state with no lease and `issued` tokens generated so far.
    pub fn new(issued: u64) -> State {
        State(Box::new(Leases {
            issued,
            ..Leases::default()
        }))
    }

    /// Tokens generated on this key so far.
    pub fn issued(&self) -> u64 {
        self.0.issued
    }

    /// An adaptive key's bounds and estimate as of its last write (the leases that ended
    /// since have not taken their samples yet).
    pub fn adaptive(&self) -> Option<(adaptive::Params, Estimate)> {
        self.0.adaptive.as_deref().map(|a| (a.params, a.estimate))
    }

    /// Sets the bounds and estimate, as decoding a stored state does (and a write).
    pub fn set_adaptive(&mut self, adaptive: Option<(adaptive::Params, Estimate)>) {
        self.forget_reads();
        match (self.0.adaptive.as_deref_mut(), adaptive) {
            // In place: an adaptive key's every acquisition sets them.
            (Some(a), Some((params, estimate))) => {
                a.params = params;
                a.estimate = estimate;
            }
            (_, adaptive) => {
                self.0.adaptive = adaptive.map(|(params, estimate)| {
                    Box::new(Adaptive {
                        params,
                        estimate,
                        pending: Cell::new(None),
                    })
                })
            }
        }
    }

    /// Forgets what reads counted (the leases or the estimate changed).
    fn forget_reads(&self) {
        self.0.ended.0.set(None);
        if let Some(a) = &self.0.adaptive {
            a.pending.set(None);
        }
    }

    /// Adds the lease `token` ending at `expires_us`, as decoding a stored state does; false
    /// (and nothing changes) when the token already names a lease.
    pub fn insert(&mut self, token: &[u8], expires_us: u64, start: Start) -> bool {
        if self.0.by_token.contains_key(token) {
            return false;
        }
        self.put(token, expires_us, start);
        true
    }

    /// The leases, ended ones included, as (token, end, start), the first to end first: the
    /// order they are stored in, so that equal states encode equally.
    pub fn leases(&self) -> impl ExactSizeIterator<Item = (&[u8], u64, Start)> {
        self.0
            .by_end
            .iter()
            .map(|((end, token), start)| (&token[..], *end, *start))
    }

    fn put(&mut self, token: &[u8], expires_us: u64, start: Start) {
        self.forget_reads();
        let token: Box<[u8]> = token.into();
        self.0.token_bytes += token.len();
        self.0.by_end.insert((expires_us, token.clone()), start);
        self.0.by_token.insert(token, expires_us);
    }

    /// Removes `token`'s lease, answering when it began.
    fn remove(&mut self, token: &[u8]) -> Option<Start> {
        self.forget_reads();
        let (token, end) = self.0.by_token.remove_entry(token)?;
        self.0.token_bytes -= token.len();
        self.0.by_end.remove(&(end, token))
    }

    /// Drops every lease that has ended by `now_us`, and stores the adaptive estimate their
    /// samples made (from [`pending`], which a write calls first).
    fn drop_ended(&mut self, now_us: u64) {
        let (_, estimate) = pending(self, now_us);
        if let (Some(a), Some(estimate)) = (self.0.adaptive.as_deref_mut(), estimate) {
            a.estimate = estimate;
        }
        self.forget_reads();
        while let Some(((end, _), _)) = self.0.by_end.first_key_value() {
            if *end > now_us {
                break;
            }
            if let Some(((_, token), _)) = self.0.by_end.pop_first() {
                self.0.token_bytes -= token.len();
                self.0.by_token.remove(&token);
            }
        }
    }

    /// When `token`'s lease ends, if it is active at `now_us`.
    fn active_end(&self, token: &[u8], now_us: u64) -> Option<u64> {
        self.0
            .by_token
            .get(token)
            .copied()
            .filter(|&end| end > now_us)
    }
}

/// The longest token a caller may name a lease with.
pub const MAX_TOKEN: usize = 256;

/// What an acquisition answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The reply's fields.
    pub decision: Decision,
    /// The lease's token, when admitted.
    pub token: Option<Vec<u8>>,
}

/// The active leases at `now_us`: how many, and when the first and the last of them end.
/// With `renewal`, as if that token's lease ended then instead (a lease added if it has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    count: u64,
    first_end: Option<u64>,
    last_end: Option<u64>,
}

fn held(state: &State, now_us: u64, renewal: Option<(&[u8], u64)>) -> Held {
    let replaced =
        renewal.and_then(|(token, _)| state.active_end(token, now_us).map(|end| (end, token)));
    let is_replaced = |end: u64, token: &[u8]| replaced == Some((end, token));
    // The first active lease (the renewed one aside): the first to end after now.
    let first_end = now_us.checked_add(1).and_then(|after| {
        state
            .0
            .by_end
            .range((after, Box::<[u8]>::default())..)
            .take(2)
            .find(|((end, token), _)| !is_replaced(*end, token))
            .map(|((end, _), _)| *end)
    });
    let last_end = state
        .0
        .by_end
        .keys()
        .rev()
        .take(2)
        .find(|(end, token)| !is_replaced(*end, token))
        .map(|(end, _)| *end)
        .filter(|&end| end > now_us);
    let mut count = (state.0.by_end.len() - ended(state, now_us)) as u64;
    let (mut first_end, mut last_end) = (first_end, last_end);
    if let Some((_, new_end)) = renewal {
        if replaced.is_none() {
            count += 1;
        }
        if new_end > now_us {
            first_end = Some(first_end.map_or(new_end, |e| e.min(new_end)));
            last_end = Some(last_end.map_or(new_end, |e| e.max(new_end)));
        }
    }
    Held {
        count,
        first_end,
        last_end,
    }
}

fn generated(now_us: u64, issued: u64) -> Vec<u8> {
    format!("{now_us:x}-{issued:x}").into_bytes()
}

fn decision(limit: u64, held: Held, now_us: u64, allowed: bool) -> Decision {
    let last_end = held.last_end.unwrap_or(now_us);
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(held.count),
        retry_after: if allowed {
            Some(Span::ZERO)
        } else {
            held.first_end.map(|end| Span::from_us(end - now_us))
        },
        reset_after: Span::from_us(last_end - now_us),
        delay: None,
    }
}

/// Acquires a lease at `now_us`, named `id` or a generated token. Changes `state` only when
/// admitted and `write` is set (dropping ended leases then too, and storing an adaptive
/// key's estimate with their samples taken). O(log n) in the leases held, plus the leases
/// that ended since the last write (see the module's doc).
pub fn acquire(
    params: &Params,
    state: &mut State,
    now_us: u64,
    id: Option<&[u8]>,
    write: bool,
) -> Acquired {
    let expires_us = now_us.saturating_add(params.lease_ms.saturating_mul(1000));
    let adapted = adapted(params, state, now_us);
    let limit = limit_of(params, &adapted);
    let now = held(state, now_us, None);
    let renewing = id.is_some_and(|id| state.active_end(id, now_us).is_some());
    let allowed = renewing || now.count < limit;
    if !allowed {
        let mut refused = decision(limit, now, now_us, false);
        if now.count > limit {
            // More leases than the limit (it went down): a lease frees only when enough of
            // them have ended, the (count - limit + 1)-th to end.
            let nth = usize::try_from(now.count - limit).unwrap_or(usize::MAX);
            refused.retry_after = state
                .0
                .by_end
                .range((now_us.saturating_add(1), Box::<[u8]>::default())..)
                .nth(nth)
                .map(|((end, _), _)| Span::from_us(end - now_us));
        }
        return Acquired {
            decision: refused,
            token: None,
        };
    }
    let token = match id {
        Some(id) => id.to_vec(),
        None => generated(now_us, state.0.issued),
    };
    if !write {
        // What the request would be told, without taking anything.
        let after = held(state, now_us, Some((&token, expires_us)));
        return Acquired {
            decision: decision(limit, after, now_us, true),
            token: Some(token),
        };
    }
    state.drop_ended(now_us);
    state.set_adaptive(adapted);
    // A renewal keeps when its work began; a new lease counts itself in flight.
    let start = state.remove(&token).unwrap_or(Start {
        started_us: now_us,
        inflight: u32::try_from(now.count.saturating_add(1)).unwrap_or(u32::MAX),
    });
    state.put(&token, expires_us, start);
    if id.is_none() {
        state.0.issued = state.0.issued.saturating_add(1);
    }
    Acquired {
        decision: decision(limit, held(state, now_us, None), now_us, true),
        token: Some(token),
    }
}

/// What RELEASE reports of the work its lease covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// `RTT`: how long the work took, µs; by default the time since the lease was taken.
    pub rtt_us: Option<u64>,
    /// `DROPPED`: it failed from overload.
    pub dropped: bool,
}

/// Releases the active lease named `token`; false when there is none (unknown or ended),
/// and then nothing changes. Drops the ended leases too, as every write does.
pub fn release(state: &mut State, token: &[u8], now_us: u64) -> bool {
    release_reporting(state, token, now_us, Report::default())
}

/// [`release`], and on an adaptive key the lease's sample: `report`'s RTT (or the time the
/// lease was held), the leases held when it was taken, and whether it dropped; taken after
/// the samples of the leases that ended before now.
pub fn release_reporting(state: &mut State, token: &[u8], now_us: u64, report: Report) -> bool {
    if state.active_end(token, now_us).is_none() {
        return false;
    }
    state.drop_ended(now_us);
    let Some(start) = state.remove(token) else {
        return false;
    };
    if let Some(a) = state.0.adaptive.as_deref_mut() {
        let held_us = now_us.saturating_sub(start.started_us);
        a.estimate.update(
            &a.params,
            Sample {
                rtt_ns: rtt_ns(report.rtt_us.unwrap_or(held_us)),
                inflight: i32::try_from(start.inflight).unwrap_or(i32::MAX),
                dropped: report.dropped,
            },
        );
    }
    true
}

/// How long until the last active lease ends (zero: the key may go). O(1).
pub fn reset_after(state: &State, now_us: u64) -> Span {
    let last = state
        .0
        .by_end
        .last_key_value()
        .map_or(now_us, |((end, _), _)| (*end).max(now_us));
    Span::from_us(last - now_us)
}

/// Heap bytes the leases take, for MEMORY USAGE: each token twice (and the allocator's
/// rounding, about 8 bytes each), and each entry of the two B-trees (about two and a half
/// times its size, for the nodes' spare room), but at least one node per tree (a node holds
/// eleven entries: 320 bytes by token, 512 by end, where each lease also says when it
/// began); and the boxes of the state. Within 5% of `used_memory` at one lease and at 300k.
pub fn heap_bytes(state: &State) -> usize {
    // The boxed state, and an adaptive key's bounds and estimate.
    let boxes = std::mem::size_of::<Leases>()
        + state
            .0
            .adaptive
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<Adaptive>());
    let leases = state.0.by_end.len();
    if leases == 0 {
        return boxes;
    }
    let tree = |entry: usize, node: usize| (leases * entry * 5 / 2).max(node);
    let by_token = tree(std::mem::size_of::<(Box<[u8]>, u64)>(), 320);
    let by_end = tree(std::mem::size_of::<((u64, Box<[u8]>), Start)>(), 512);
    boxes + by_token + by_end + (state.0.token_bytes + leases * 8) * 2
}

/// RL.CONCURRENCY.ACQUIRE as an [`Algorithm`]: one lease a request, whatever its cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency;

impl Algorithm for Concurrency {
    type Params = Params;
    type State = State;

    /// An acquisition with a generated token (RL.CONCURRENCY.ACQUIRE goes through
    /// [`super::Lease::acquire`], which also takes the caller's token and answers the lease's).
    fn check(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        _cost: u64,
        write: bool,
    ) -> (Decision, Option<State>) {
        let (decision, fresh, _) =
            <Concurrency as super::Lease>::acquire(params, stored, now_us, None, write);
        (decision, fresh)
    }

    /// The leases free now, `limit - held`. (ACQUIRE takes one lease whatever the cost and
    /// takes no ATMOST: this is what the key has room for, not a cost it would admit.)
    fn largest_cost(params: &Params, stored: Option<(&Params, &State)>, now_us: u64) -> u64 {
        match stored {
            Some((_, state)) => {
                let limit = limit_of(params, &adapted(params, state, now_us));
                limit.saturating_sub(held(state, now_us, None).count)
            }
            None => limit_of(params, &adapted(params, &State::default(), now_us)),
        }
    }

    /// Nothing: a lease is given back by RL.CONCURRENCY.RELEASE with its token, and the
    /// module refuses RL.REFUND on a concurrency key.
    fn refund(_params: &Params, _state: &mut State, _now_us: u64, _units: u64) -> u64 {
        0
    }

    fn snapshot(params: &Params, state: &State, now_us: u64) -> super::Snapshot {
        super::Snapshot::Concurrency(snapshot(params, state, now_us))
    }

    /// Every lease began before it ends; an adaptive key's bounds hold `min <= max`, its
    /// state holds them, and its estimate lies within them.
    fn is_valid(params: &Params, state: &State) -> bool {
        let leases = state
            .0
            .by_end
            .iter()
            .all(|((end, _), start)| start.started_us <= *end);
        let adaptive = match (params.adaptive, state.adaptive()) {
            (None, None) => true,
            (Some(bounds), Some((held, estimate))) => {
                bounds.min <= bounds.max && held == bounds && estimate.is_valid(&bounds)
            }
            _ => false,
        };
        leases && adaptive
    }

    /// An adaptive key outlives its last lease by [`ADAPTIVE_KEEP_MS`].
    fn kept_ms(params: &Params) -> u64 {
        match params.adaptive {
            Some(_) => ADAPTIVE_KEEP_MS,
            None => 0,
        }
    }
}

/// How long an adaptive key outlives its last lease, so that the limit it learned is not
/// forgotten between bursts of work: an hour without a lease, and it starts again at `limit`.
pub const ADAPTIVE_KEEP_MS: u64 = 3_600_000;

impl super::Lease for Concurrency {
    type Report = Report;

    #[inline]
    fn acquire(
        params: &Params,
        stored: Option<(&Params, &mut State)>,
        now_us: u64,
        id: Option<&[u8]>,
        write: bool,
    ) -> (Decision, Option<State>, Option<Vec<u8>>) {
        let (acquired, fresh) = match stored {
            Some((_, state)) => (acquire(params, state, now_us, id, write), None),
            None => {
                let mut fresh = State::default();
                let acquired = acquire(params, &mut fresh, now_us, id, write);
                let keep = acquired.decision.allowed && write;
                (acquired, keep.then_some(fresh))
            }
        };
        // A DRYRUN takes no lease: it has no token to name.
        let token = acquired.token.filter(|_| write);
        (acquired.decision, fresh, token)
    }

    fn release(state: &mut State, token: &[u8], now_us: u64, report: Report) -> bool {
        release_reporting(state, token, now_us, report)
    }

    fn reset_after(state: &State, now_us: u64) -> Span {
        reset_after(state, now_us)
    }
}

/// A key's parameters and state as of one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// The parameters the key was written with.
    pub params: Params,
    /// Leases held now.
    pub held: u64,
    /// Tokens generated on the key so far.
    pub issued: u64,
    /// An adaptive key's bounds and estimate now (the leases ended since its last write
    /// counted as drops).
    pub adaptive: Option<(adaptive::Params, Estimate)>,
    /// The key as an acquisition would see it, without taking a lease.
    pub now: Decision,
}

/// The key's parameters and leases as of `now_us` (RL.INSPECT).
pub fn snapshot(params: &Params, state: &State, now_us: u64) -> Snapshot {
    let adapted = adapted(params, state, now_us);
    let held = held(state, now_us, None);
    Snapshot {
        params: *params,
        held: held.count,
        issued: state.0.issued,
        adaptive: adapted,
        now: decision(limit_of(params, &adapted), held, now_us, true),
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
        adaptive: None,
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
        assert_eq!(s.leases().len(), 1);
        assert!(acquire(&P, &mut s, T0 + 20, None, true).decision.allowed);
    }

    #[test]
    fn the_same_token_renews_its_lease_without_a_second_slot() {
        let mut s = State::default();
        acquire(&P, &mut s, T0, Some(b"job"), true);
        acquire(&P, &mut s, T0, Some(b"other"), true);
        let renewed = acquire(&P, &mut s, T0 + 500_000, Some(b"job"), true);
        assert!(renewed.decision.allowed);
        assert_eq!(s.leases().len(), 2);
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
            let p = Params { limit, lease_ms: 1000, adaptive: None };
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
                prop_assert!(s.leases().filter(|(_, end, _)| *end > now).count() as u64 <= limit);
            }
        }

        /// The documented promise for leases (docs/algorithms.md, Changing parameters): parameters
        /// that change keep the leases held. At one instant,
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
                acquire(&Params { limit, lease_ms, adaptive: None }, &mut s, now, None, true);
                prop_assert!(s.leases().filter(|(_, end, _)| *end > now).count() as u64 <= largest);
            }
            let held = s.leases().filter(|(_, end, _)| *end > now).count() as u64;
            let at_instant = sets.iter().map(|&(limit, _)| limit).max().unwrap_or(0);
            let taken = sets
                .iter()
                .filter(|&&(limit, lease_ms)| {
                    acquire(&Params { limit, lease_ms, adaptive: None }, &mut s, now, None, true).decision.allowed
                })
                .count() as u64;
            prop_assert!(taken <= at_instant);
            prop_assert!(s.leases().filter(|(_, end, _)| *end > now).count() as u64 <= held.max(at_instant));
        }

        #[test]
        fn extremes_never_panic(limit in any::<u64>(), lease_ms in any::<u64>(), now in any::<u64>(), expires in any::<u64>(), issued in any::<u64>()) {
            let p = Params { limit, lease_ms, adaptive: None };
            let mut s = State::new(issued);
            s.insert(b"t", expires, Start::default());
            let a = acquire(&p, &mut s, now, None, true);
            let _ = (a.decision.reset_after.ceil_ms(), Concurrency::snapshot(&p, &s, now).now().reset_after.ceil_ms());
            release(&mut s, b"t", now);
        }
    }

    /// The plain model the B-trees replace: a list of leases, scanned whole on every call.
    #[derive(Clone, Default)]
    struct Model {
        leases: Vec<(Vec<u8>, u64)>,
        issued: u64,
    }

    impl Model {
        fn active(&self, now: u64) -> impl Iterator<Item = &(Vec<u8>, u64)> {
            self.leases.iter().filter(move |(_, end)| *end > now)
        }

        fn decision(&self, p: &Params, now: u64, allowed: bool) -> Decision {
            let held = self.active(now).count() as u64;
            let first = self.active(now).map(|l| l.1).min();
            let last = self.active(now).map(|l| l.1).max().unwrap_or(now);
            Decision {
                allowed,
                limit: p.limit,
                remaining: p.limit.saturating_sub(held),
                retry_after: if allowed {
                    Some(Span::ZERO)
                } else {
                    first.map(|end| Span::from_us(end - now))
                },
                reset_after: Span::from_us(last - now),
                delay: None,
            }
        }

        fn acquire(&mut self, p: &Params, now: u64, id: Option<&[u8]>, write: bool) -> Acquired {
            let expires = now.saturating_add(p.lease_ms.saturating_mul(1000));
            let held = self.active(now).count() as u64;
            let renewing = id.is_some_and(|id| self.active(now).any(|l| l.0 == id));
            if !(renewing || held < p.limit) {
                return Acquired {
                    decision: self.decision(p, now, false),
                    token: None,
                };
            }
            let token = id.map_or_else(|| generated(now, self.issued), <[u8]>::to_vec);
            let mut after = self.clone();
            after.leases.retain(|l| l.1 > now && l.0 != token);
            after.leases.push((token.clone(), expires));
            if id.is_none() {
                after.issued = after.issued.saturating_add(1);
            }
            let decision = after.decision(p, now, true);
            if write {
                *self = after;
            }
            Acquired {
                decision,
                token: Some(token),
            }
        }
    }

    proptest! {
        /// Every acquisition, DRYRUN, release and reset is what the plain model answers, and
        /// the leases held are the model's, whatever the order, the tokens, the lease times
        /// (which may shrink) and the clock (which may go back).
        #[test]
        fn the_btrees_answer_what_a_plain_list_does(
            limit in 1u64..6,
            ops in proptest::collection::vec((0u8..5, 0u64..600_000, 0usize..4, 1u64..3000, any::<bool>()), 1..120),
        ) {
            let mut s = State::default();
            let mut m = Model::default();
            let mut now = T0;
            for (kind, gap, pick, lease_ms, back) in ops {
                now = if back { now.saturating_sub(gap / 4) } else { now + gap };
                let p = Params { limit, lease_ms, adaptive: None };
                let token = format!("id{pick}");
                match kind {
                    // With a generated token or the caller's; written, or a DRYRUN.
                    0..=3 => {
                        let id = (kind % 2 == 1).then_some(token.as_bytes());
                        let write = kind < 2;
                        prop_assert_eq!(acquire(&p, &mut s, now, id, write), m.acquire(&p, now, id, write));
                    }
                    _ => {
                        let expected = m.active(now).any(|l| l.0 == token.as_bytes());
                        if expected {
                            m.leases.retain(|l| l.1 > now && l.0 != token.as_bytes());
                        }
                        prop_assert_eq!(release(&mut s, token.as_bytes(), now), expected);
                    }
                }
                prop_assert_eq!(reset_after(&s, now), m.decision(&p, now, true).reset_after);
                let mut model: Vec<(Vec<u8>, u64)> = m.leases.clone();
                model.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
                let ours: Vec<(Vec<u8>, u64)> = s.leases().map(|(t, e, _)| (t.to_vec(), e)).collect();
                prop_assert_eq!(ours, model);
                prop_assert_eq!(s.issued(), m.issued);
            }
        }
    }

    fn small_params() -> impl Strategy<Value = Params> {
        (1u64..6, 1u64..5_000).prop_map(|(limit, lease_ms)| Params {
            limit,
            lease_ms,
            adaptive: None,
        })
    }

    proptest! {
        /// Issue 22: a refusal's retry_after is exact, also after the limit went down (then
        /// more than one lease must end): acquisitions under changing parameters, and at every
        /// instant the same acquisition is refused a microsecond (and a millisecond) before
        /// retry_after and admitted at it. (Every acquisition asks for one lease; its reply
        /// counts the lease it takes, so `one_schedule`'s freshness check does not apply.)
        #[test]
        fn retry_after_is_exact_across_parameter_changes(
            pool in proptest::collection::vec(small_params(), 3),
            calls in proptest::collection::vec((0usize..3, 0u64..3_000_000, prop::bool::weighted(0.2)), 1..40),
        ) {
            let mut key: crate::testing::Key<Concurrency> = None;
            let mut at = T0;
            for (set, gap, dryrun) in calls {
                at += gap;
                let p = &pool[set];
                crate::testing::retry_after_is_exact::<Concurrency>(p, &key, at, 1, p.limit)?;
                if !dryrun {
                    crate::testing::step::<Concurrency>(p, &mut key, at, 1);
                }
            }
        }
    }

    mod adaptive_keys {
        use super::*;
        use crate::adaptive::{Kind, Params as Bounds};

        fn aimd(limit: u64, min: u32, max: u32) -> Params {
            Params {
                limit,
                lease_ms: 1000,
                adaptive: Some(Bounds {
                    kind: Kind::Aimd,
                    min,
                    max,
                }),
            }
        }

        fn rtt(ms: u64) -> Report {
            Report {
                rtt_us: Some(ms * 1000),
                dropped: false,
            }
        }

        #[test]
        fn the_limit_starts_at_limit_and_moves_with_what_release_reports() {
            let p = aimd(4, 1, 10);
            let mut s = State::default();
            let a = acquire(&p, &mut s, T0, None, true);
            assert_eq!((a.decision.limit, a.decision.remaining), (4, 3));
            let b = acquire(&p, &mut s, T0, None, true);
            let (a, b) = (a.token.unwrap(), b.token.unwrap());
            // The first lease began with 1 in flight: 1 × 2 < 4, no growth.
            assert!(release_reporting(&mut s, &a, T0 + 10, rtt(5)));
            assert_eq!(acquire(&p, &mut s, T0 + 10, None, false).decision.limit, 4);
            // The second with 2: 2 × 2 >= 4, + 1.
            assert!(release_reporting(&mut s, &b, T0 + 20, rtt(5)));
            assert_eq!(acquire(&p, &mut s, T0 + 20, None, false).decision.limit, 5);
            // A dropped sample backs off: (int) (5 × 0.9) = 4.
            let c = acquire(&p, &mut s, T0 + 30, None, true).token.unwrap();
            let dropped = Report {
                rtt_us: Some(5_000),
                dropped: true,
            };
            assert!(release_reporting(&mut s, &c, T0 + 40, dropped));
            let d = acquire(&p, &mut s, T0 + 50, None, false).decision;
            assert_eq!((d.limit, d.remaining), (4, 3));
            // A static acquisition turns the key static, leases kept.
            let st = Params {
                adaptive: None,
                ..p
            };
            assert_eq!(acquire(&st, &mut s, T0 + 60, None, true).decision.limit, 4);
            assert_eq!(s.adaptive(), None);
        }

        #[test]
        fn a_lease_that_runs_out_is_a_dropped_sample_seen_by_reads_before_the_write() {
            let p = aimd(10, 1, 100);
            let mut s = State::default();
            for _ in 0..3 {
                acquire(&p, &mut s, T0, None, true);
            }
            let before = s.clone();
            // A second later the three have run out: three drops, 10 → 9 → 8 → 7.
            let after = T0 + 1_000_000;
            let dry = acquire(&p, &mut s, after, None, false).decision;
            assert_eq!((dry.limit, dry.remaining), (7, 6));
            assert_eq!(snapshot(&p, &s, after).now.limit, 7);
            assert_eq!(s, before, "a read wrote");
            let taken = acquire(&p, &mut s, after, None, true).decision;
            assert_eq!((taken.limit, taken.remaining), (7, 6));
            assert_eq!(s.adaptive().map(|(_, e)| e.limit()), Some(7));
            assert_eq!(s.leases().len(), 1);
        }

        #[test]
        fn without_rtt_the_sample_is_the_time_the_lease_was_held() {
            let p = Params {
                limit: 20,
                lease_ms: 60_000,
                adaptive: Some(Bounds {
                    kind: Kind::Aimd,
                    min: 1,
                    max: 100,
                }),
            };
            let mut s = State::default();
            let t = acquire(&p, &mut s, T0, None, true).token.unwrap();
            // Held 5.000001 s: over AIMD's timeout, a drop: (int) (20 × 0.9) = 18.
            assert!(release(&mut s, &t, T0 + 5_000_001));
            assert_eq!(s.adaptive().map(|(_, e)| e.limit()), Some(18));
            let t = acquire(&p, &mut s, T0 + 5_000_001, None, true)
                .token
                .unwrap();
            // Held exactly 5 s: not over it (1 in flight of 18: no growth).
            assert!(release(&mut s, &t, T0 + 10_000_001));
            assert_eq!(s.adaptive().map(|(_, e)| e.limit()), Some(18));
        }

        #[test]
        fn a_new_algorithm_starts_from_the_current_limit_and_new_bounds_clamp_it() {
            let mut s = State::default();
            acquire(&aimd(50, 1, 100), &mut s, T0, None, true);
            let narrower = aimd(50, 1, 30);
            let d = acquire(&narrower, &mut s, T0 + 1, None, false).decision;
            assert_eq!(d.limit, 30);
            let mut vegas = narrower;
            vegas.adaptive = Some(Bounds {
                kind: Kind::Vegas,
                min: 1,
                max: 1000,
            });
            acquire(&aimd(50, 1, 30), &mut s, T0 + 2, None, true);
            let d = acquire(&vegas, &mut s, T0 + 3, None, true).decision;
            assert_eq!(d.limit, 30);
            assert_eq!(
                s.adaptive().map(|(b, e)| (b.kind, e.kind())),
                Some((Kind::Vegas, Kind::Vegas))
            );
        }

        /// The model: leases as a list, and an estimate fed every sample in time order (the
        /// leases that ran out first, by end then token, then the call's own).
        struct Model {
            leases: Vec<(Vec<u8>, u64, u64, u32)>,
            estimate: Option<(Bounds, Estimate)>,
        }

        impl Model {
            fn expire(&mut self, now: u64) {
                let mut ended: Vec<_> =
                    self.leases.iter().filter(|l| l.1 <= now).cloned().collect();
                ended.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
                for (_, end, started, inflight) in ended {
                    if let Some((b, e)) = self.estimate.as_mut() {
                        e.update(
                            b,
                            Sample {
                                rtt_ns: ((end - started) * 1000).max(1) as i64,
                                inflight: inflight as i32,
                                dropped: true,
                            },
                        );
                    }
                }
                self.leases.retain(|l| l.1 > now);
            }
        }

        proptest! {
            #[test]
            fn every_sample_reaches_the_estimate_in_time_order(
                kind in 0usize..3,
                start in 1u64..40,
                ops in proptest::collection::vec((0u8..4, 0u64..700_000, 0usize..6, 1u64..2_000_000), 1..120),
            ) {
                let kind = [Kind::Aimd, Kind::Vegas, Kind::Gradient2][kind];
                let bounds = Bounds { kind, min: 1, max: 60 };
                let p = Params { limit: start, lease_ms: 1000, adaptive: Some(bounds) };
                let mut s = State::default();
                let mut m = Model { leases: Vec::new(), estimate: None };
                let mut now = T0;
                let mut tokens: Vec<Vec<u8>> = Vec::new();
                for (op, gap, pick, rtt_us) in ops {
                    now += gap;
                    match op {
                        0 | 1 => {
                            let dry = acquire(&p, &mut s, now, None, false);
                            let before = s.clone();
                            let a = acquire(&p, &mut s, now, None, true);
                            prop_assert_eq!(&dry.decision, &a.decision);
                            m.expire(now);
                            if m.estimate.is_none() {
                                m.estimate = Some((bounds, Estimate::new(&bounds, start as u32, seed(&before, now))));
                            }
                            let limit = m.estimate.map(|(_, e)| e.limit()).unwrap();
                            prop_assert_eq!(a.decision.limit, limit);
                            prop_assert_eq!(a.decision.allowed, (m.leases.len() as u64) < limit);
                            if let Some(t) = a.token {
                                m.leases.push((t.clone(), now + 1_000_000, now, m.leases.len() as u32 + 1));
                                tokens.push(t);
                            } else {
                                prop_assert_eq!(&s, &before);
                            }
                        }
                        _ => {
                            let Some(t) = tokens.get(pick).cloned() else { continue };
                            let report = Report { rtt_us: Some(rtt_us), dropped: op == 3 };
                            let released = release_reporting(&mut s, &t, now, report);
                            let held = m.leases.iter().position(|l| l.0 == t && l.1 > now);
                            prop_assert_eq!(released, held.is_some());
                            if let Some(i) = held {
                                m.expire(now);
                                let i = m.leases.iter().position(|l| l.0 == t).unwrap_or(i);
                                let (_, _, _, inflight) = m.leases.remove(i);
                                if let Some((b, e)) = m.estimate.as_mut() {
                                    e.update(b, Sample { rtt_ns: (rtt_us * 1000) as i64, inflight: inflight as i32, dropped: op == 3 });
                                }
                            }
                        }
                    }
                    let seen = snapshot(&p, &s, now).adaptive.map(|(_, e)| e);
                    let mut later = Model { leases: m.leases.clone(), estimate: m.estimate };
                    later.expire(now);
                    if m.estimate.is_some() {
                        prop_assert_eq!(seen, later.estimate.map(|(_, e)| e));
                    }
                }
            }
        }
    }
}
