//! The path every admission command shares once its arguments are parsed:
//! clock → storage load → algorithm → storage save and TTL → what to reply and propagate.

use std::ffi::CStr;

use crate::args::Options;
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Admission, Extra, Propagate, Reply, Response};
use crate::storage::{Key, Updated, Variant};
use algorithms::request::{self, Aside, Request};
use algorithms::{Decision, Span};

/// What [`run`] decided, before it becomes a reply: the decision, what the algorithm's step
/// handed back besides it (`aside`: RL.LIMIT's binding rule), the BLOCK that answered, and
/// what the dispatcher needs.
pub struct Decided<T = ()> {
    pub decision: Decision,
    pub aside: T,
    /// The end of the BLOCK penalty that answered for the key (one in force, or one this
    /// request started), on the clock of `now_us`; `None` when the algorithm's decision stands.
    pub blocked_until_us: Option<u64>,
    /// `ATMOST n`: the units granted.
    granted: Option<u64>,
    preview: bool,
    replayed: bool,
    /// The call gave SHADOW.
    shadow: bool,
    /// A policy's shadow rule would have denied the request (set by RL.LIMIT).
    pub shadow_rule_denied: bool,
    propagate: Propagate,
}

impl<T> Decided<T> {
    fn admission(self, extra: Extra) -> Admission {
        let mut decision = self.decision;
        let shadow_denied =
            request::shadowed(&mut decision, self.shadow) || self.shadow_rule_denied;
        Admission {
            decision,
            extra,
            granted: self.granted,
            preview: self.preview,
            replayed: self.replayed,
            shadow: self.shadow,
            shadow_denied,
        }
    }

    /// The five-field reply, with `extra` as its sixth field.
    pub fn reply(self, extra: Extra) -> Response {
        let propagate = self.propagate;
        Response::propagating(Reply::Admission(self.admission(extra)), propagate)
    }

    /// redis-cell's reply.
    pub fn redis_cell(self) -> Response {
        let propagate = self.propagate;
        Response::propagating(Reply::RedisCell(self.admission(Extra::None)), propagate)
    }
}

/// Runs a parsed admission request of algorithm `A`.
///
/// `name` is the command as it will be replayed. A request writes (and propagates) only
/// when it is admitted, takes at least one unit, and is not a DRYRUN; a denied request or a
/// DRYRUN leaves the keyspace, the replication stream and the AOF as they were. A DRYRUN or
/// COST 0 request is a preview: INFO counts it as a call only, and its denial publishes no
/// keyspace event.
///
/// With `ATMOST n`, the request takes `min(n, A::largest_cost(..))` units, the largest grant
/// the key allows at this instant (the same state and clock reading a replica replays with,
/// so it grants the same); when that is 0, it is a request of one unit, denied, so that
/// `retry_after` is the wait for one unit and a `BLOCK` starts only then.
///
/// Inlined into its handler, as [`run_with`] is: returned through one more frame, the
/// decision (over a hundred bytes) is copied once more, and whether the compiler inlines
/// it by itself changes with unrelated code.
#[inline(always)]
pub fn run<A: Variant>(
    call: &Call,
    name: &'static CStr,
    params: A::Params,
    opts: Options,
) -> Result<Decided, Error> {
    run_with::<A, ()>(
        call,
        name,
        params,
        opts,
        |params, stored, now_us, cost, write| {
            let (decision, state) = A::check(params, stored, now_us, cost, write);
            (decision, state, ())
        },
        A::largest_cost,
    )
}

/// [`run`] with the algorithm's step given: `check` takes what [`Algorithm::check`] takes
/// and keeps its contract, and may hand back something besides (RL.LIMIT's binding rule);
/// `largest` is [`Algorithm::largest_cost`] or what stands for it (RL.LIMIT's leaves its
/// shadow rules out: they never limit a grant).
///
/// [`Algorithm::check`]: algorithms::Algorithm::check
/// [`Algorithm::largest_cost`]: algorithms::Algorithm::largest_cost
#[inline(always)]
pub fn run_with<A: Variant, T: Aside>(
    call: &Call,
    name: &'static CStr,
    params: A::Params,
    opts: Options,
    check: impl FnOnce(
        &A::Params,
        Option<(&A::Params, &mut A::State)>,
        u64,
        u64,
        bool,
    ) -> (Decision, Option<A::State>, T),
    largest: impl FnOnce(&A::Params, Option<(&A::Params, &A::State)>, u64) -> u64,
) -> Result<Decided<T>, Error> {
    let name_arg = call.key()?;
    // The key first: what its value points to is fetched while the clock is read.
    let mut key = Key::open(call.ctx, name_arg, true);
    key.prefetch();
    let (now_us, real_ms) = call.clock();
    let request = opts.request(now_us);
    let (updated, granted) = match opts.atmost {
        None => {
            let updated = key.update::<A, T>(&params, request, |stored, write| {
                check(&params, stored, now_us, opts.cost, write)
            })?;
            (updated, None)
        }
        Some(atmost) => {
            let (updated, grant) =
                update_at_most::<A, T>(&mut key, &params, request, atmost, check, largest)?;
            // A blocked key refuses whatever the algorithm would grant.
            let granted = if updated.decision.allowed { grant } else { 0 };
            (updated, Some(granted))
        }
    };
    let Updated {
        decision,
        aside,
        effect,
    } = updated;
    let propagate = if effect.writes() {
        let kept_ms = A::kept_ms(&params);
        written(
            call,
            &mut key,
            name,
            now_us,
            real_ms,
            decision.reset_after,
            kept_ms,
        )
    } else {
        Propagate::Nothing
    };
    Ok(Decided {
        decision,
        aside,
        blocked_until_us: effect.blocked_until_us(),
        granted,
        preview: !request.write,
        replayed: call.replayed(),
        shadow: opts.shadow,
        shadow_rule_denied: false,
        propagate,
    })
}

/// After a call of `name` wrote `key` at `now_us` (the server's clock read as `real_ms`): the
/// key expires when it is fresh again, `reset_after` from now, and `kept_ms` later
/// ([`algorithms::Algorithm::kept_ms`]), or goes at once if that is now; and the write goes to
/// replicas and the AOF with that clock reading and expiry.
#[inline]
pub fn written(
    call: &Call,
    key: &mut Key,
    name: &'static CStr,
    now_us: u64,
    real_ms: u64,
    reset_after: Span,
    kept_ms: u64,
) -> Propagate {
    let ttl_ms = reset_after.ceil_ms().saturating_add(kept_ms);
    let expire_at_ms = call.expire_at(real_ms, ttl_ms);
    if ttl_ms == 0 {
        key.delete();
    } else {
        key.expire_at(expire_at_ms);
    }
    call.propagation(name, now_us, expire_at_ms)
}

/// [`Key::update`] for `ATMOST atmost`: the request takes `min(atmost, largest(..))`
/// units, computed on the state the update reads, or is a denied request of one unit when
/// that is 0. Also returns the grant (before a block in force refuses it). Out of line, so that
/// the path of every request without ATMOST stays as it was.
#[inline(never)]
fn update_at_most<A: Variant, T: Aside>(
    key: &mut Key,
    params: &A::Params,
    request: Request,
    atmost: u64,
    check: impl FnOnce(
        &A::Params,
        Option<(&A::Params, &mut A::State)>,
        u64,
        u64,
        bool,
    ) -> (Decision, Option<A::State>, T),
    largest: impl FnOnce(&A::Params, Option<(&A::Params, &A::State)>, u64) -> u64,
) -> Result<(Updated<T>, u64), Error> {
    let now_us = request.now_us;
    let mut grant = 0;
    let updated = key.update::<A, T>(params, request, |stored, write| {
        let stored_ref = stored.as_ref().map(|(p, s)| (*p, &**s));
        let cost;
        (grant, cost) = request::grant(atmost, largest(params, stored_ref, now_us));
        check(params, stored, now_us, cost, write)
    })?;
    Ok((updated, grant))
}
