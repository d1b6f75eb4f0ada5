//! What a request's options do, the same for every algorithm: `COST n` and `ATMOST max` (how
//! many units it asks for), `DRYRUN` (whether it writes), `BLOCK duration` (a penalty on the
//! key: [`penalty`]) and `SHADOW` (a would-be denial answered as admitted). The module parses
//! the options; this is what they decide, around an algorithm's own step.
//!
//! One request on a key is [`may_write`], the algorithm's step, then [`settle`]: a block in
//! force answers before the algorithm may write, a denial may start one, and the [`Effect`]
//! tells the caller (the module's storage) what to keep: nothing, the new state, or a block.
//! [`shadowed`] turns a denial into SHADOW's answer.

use crate::{penalty, rule_set, Decision};

/// The options every admission command takes after its positional arguments (README.md,
/// Commands): `[COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Units this request takes (default 1).
    pub cost: u64,
    /// Compute the reply only: write nothing, propagate nothing.
    pub dryrun: bool,
    /// `BLOCK duration`: a denied request blocks the key this long (ms).
    pub block_ms: Option<u64>,
    /// `SHADOW`: a would-be denial writes nothing, starts no BLOCK, and is answered as
    /// admitted with `shadow_denied` 1.
    pub shadow: bool,
    /// `ATMOST n` (instead of COST): take as many units as the key allows now, up to n.
    pub atmost: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cost: 1,
            dryrun: false,
            block_ms: None,
            shadow: false,
            atmost: None,
        }
    }
}

impl Options {
    /// The request these options make at `now_us`: ATMOST asks for at least one unit (the
    /// grant is settled on the key's state, [`grant`]); DRYRUN and COST 0 ask what would
    /// happen, so they do not write; SHADOW never starts a BLOCK (one in force still answers).
    #[inline]
    pub fn request(&self, now_us: u64) -> Request {
        let cost = if self.atmost.is_some() { 1 } else { self.cost };
        Request {
            now_us,
            cost,
            write: cost > 0 && !self.dryrun,
            block_ms: self.block_ms.filter(|_| !self.shadow),
        }
    }
}

/// One request on one key, as [`may_write`] and [`settle`] take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The clock reading every decision of the call uses.
    pub now_us: u64,
    /// The units asked for.
    pub cost: u64,
    /// Whether an admitted request writes (not DRYRUN, COST > 0).
    pub write: bool,
    /// The BLOCK a denial starts, in ms (`None`: none, also under SHADOW).
    pub block_ms: Option<u64>,
}

/// What the caller keeps after [`settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing changes: a denial, or a request that does not write.
    Unchanged,
    /// The request was admitted and writes: the key keeps the new state and the request's
    /// parameters, and a block that was over is gone.
    Counted,
    /// A block in force until this instant (µs) refused the request; nothing changes.
    Blocked(u64),
    /// This denial starts a block until this instant (µs): the key keeps it, and nothing else
    /// changes.
    Blocks(u64),
}

impl Effect {
    /// The end of the block that answered for the key: one in force, or one this request
    /// started. `None` when the algorithm's own decision stands.
    pub fn blocked_until_us(self) -> Option<u64> {
        match self {
            Effect::Blocked(until) | Effect::Blocks(until) => Some(until),
            Effect::Unchanged | Effect::Counted => None,
        }
    }

    /// The key changed (a new state, or a block started), so it expires anew and propagates.
    pub fn writes(self) -> bool {
        matches!(self, Effect::Counted | Effect::Blocks(_))
    }
}

/// What an algorithm's step hands back besides the key's decision (RL.LIMIT's binding rule,
/// an acquisition's token), told when a block answers for the key so that it answers for it
/// too.
pub trait Aside {
    /// A block until `until_us` refuses the request at `now_us`.
    fn blocked(&mut self, _until_us: u64, _now_us: u64) {}
}

impl Aside for () {}

/// A lease's token: a key of leases never takes a BLOCK (the command has no such option).
impl Aside for Option<Vec<u8>> {}

/// The binding rule's own decision is refused as the key's is.
impl Aside for rule_set::Verdict {
    fn blocked(&mut self, until_us: u64, now_us: u64) {
        penalty::apply(&mut self.binding_decision, until_us, now_us);
    }
}

/// Whether the algorithm's step may write for `request` on a key blocked until
/// `blocked_until_us` (0, or any past instant: not blocked; a fresh key is never blocked):
/// only when the request writes and no block is in force. While one is, the step is asked
/// what it would say without writing, and [`settle`] has the block refuse it.
#[inline(always)]
pub fn may_write(blocked_until_us: u64, request: &Request) -> bool {
    request.write && blocked_until_us <= request.now_us
}

/// A request on a key, after its algorithm's step (asked with [`may_write`]) decided
/// `decision` and handed back `aside`: a block in force refuses both ([`penalty::apply`]); a
/// denial that counts may start one ([`penalty::starts`]), which refuses them too. Returns
/// what the key keeps ([`Effect`]). In two steps around the algorithm's own, so that its
/// decision is changed where it lies (the admission path copies nothing more for it).
#[inline(always)]
pub fn settle(
    blocked_until_us: u64,
    request: &Request,
    decision: &mut Decision,
    aside: &mut impl Aside,
) -> Effect {
    let now_us = request.now_us;
    if blocked_until_us > now_us {
        penalty::apply(decision, blocked_until_us, now_us);
        aside.blocked(blocked_until_us, now_us);
        return Effect::Blocked(blocked_until_us);
    }
    if decision.allowed && request.write {
        return Effect::Counted;
    }
    let starts = penalty::starts(
        decision,
        request.cost,
        request.write,
        request.block_ms,
        now_us,
    );
    match starts {
        Some(until) => {
            penalty::apply(decision, until, now_us);
            aside.blocked(until, now_us);
            Effect::Blocks(until)
        }
        None => Effect::Unchanged,
    }
}

/// `ATMOST atmost`: the units a request takes when the key admits at most `largest` now
/// ([`crate::Algorithm::largest_cost`]): `min(atmost, largest)`, or a request of one unit
/// (denied) when that is 0, so that `retry_after` is the wait for one unit and a BLOCK starts
/// only then. Returns `(grant, cost)`.
#[inline]
pub fn grant(atmost: u64, largest: u64) -> (u64, u64) {
    let grant = largest.min(atmost);
    (grant, grant.max(1))
}

/// SHADOW: a denial (which wrote nothing and started no BLOCK) is answered as admitted, the
/// other fields staying the denial's (`retry_after` the wait it would have had). Returns
/// whether SHADOW turned a denial around (the reply's `shadow_denied`).
#[inline]
pub fn shadowed(decision: &mut Decision, shadow: bool) -> bool {
    let denied = shadow && !decision.allowed;
    decision.allowed |= shadow;
    denied
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Span;

    const NOW: u64 = 10_000_000;

    fn decision(allowed: bool, retry_ms: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 5,
            remaining: u64::from(allowed),
            retry_after: retry_ms.map(|ms| Span::from_us(ms * 1000)),
            reset_after: Span::from_us(1_000_000),
            delay: None,
        }
    }

    fn request(opts: Options) -> Request {
        opts.request(NOW)
    }

    #[test]
    fn options_make_the_request() {
        let plain = request(Options::default());
        assert_eq!((plain.cost, plain.write, plain.block_ms), (1, true, None));
        let dry = request(Options {
            dryrun: true,
            ..Options::default()
        });
        assert!(!dry.write, "DRYRUN writes nothing");
        let free = request(Options {
            cost: 0,
            ..Options::default()
        });
        assert!(!free.write, "COST 0 writes nothing");
        let atmost = request(Options {
            cost: 0,
            atmost: Some(9),
            ..Options::default()
        });
        assert_eq!(
            (atmost.cost, atmost.write),
            (1, true),
            "ATMOST asks for one"
        );
        let shadow = request(Options {
            block_ms: Some(5),
            shadow: true,
            ..Options::default()
        });
        assert_eq!(shadow.block_ms, None, "SHADOW starts no block");
        let block = request(Options {
            block_ms: Some(5),
            ..Options::default()
        });
        assert_eq!(block.block_ms, Some(5));
    }

    /// A request on a key blocked until `blocked`, the step answering `step`.
    fn decide(blocked: u64, req: &Request, step: Decision) -> (Decision, bool, Effect) {
        let write = may_write(blocked, req);
        let mut d = step;
        let effect = settle(blocked, req, &mut d, &mut ());
        (d, write, effect)
    }

    #[test]
    fn a_block_in_force_answers_and_the_step_does_not_write() {
        let blocked = NOW + 3_000_000;
        let req = request(Options::default());
        let (d, write, effect) = decide(blocked, &req, decision(true, Some(0)));
        assert!(!write, "asked without writing");
        assert_eq!(effect, Effect::Blocked(blocked));
        assert!(!d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after),
            (0, Some(Span::from_us(3_000_000)))
        );
        assert!(!effect.writes());
    }

    #[test]
    fn an_admitted_write_counts_and_a_counted_denial_may_block() {
        let req = request(Options {
            block_ms: Some(60_000),
            ..Options::default()
        });
        let (_, write, effect) = decide(NOW - 1, &req, decision(true, Some(0)));
        assert!(write);
        assert_eq!(effect, Effect::Counted, "a block that is over is gone");
        let (d, _, effect) = decide(0, &req, decision(false, Some(500)));
        assert_eq!(effect, Effect::Blocks(NOW + 60_000_000));
        assert_eq!(d.retry_after, Some(Span::from_us(60_000_000)));
        assert!(effect.writes());
        let (_, _, effect) = decide(0, &req, decision(false, None));
        assert_eq!(
            effect,
            Effect::Unchanged,
            "a cost that never fits blocks nothing"
        );
        let dry = request(Options {
            dryrun: true,
            block_ms: Some(60_000),
            ..Options::default()
        });
        let (_, write, effect) = decide(0, &dry, decision(false, Some(500)));
        assert!(!write);
        assert_eq!(effect, Effect::Unchanged, "DRYRUN never blocks");
    }

    #[test]
    fn grants_and_shadow() {
        assert_eq!(grant(5, 3), (3, 3));
        assert_eq!(grant(2, 3), (2, 2));
        assert_eq!(grant(5, 0), (0, 1), "nothing fits: a denied request of one");
        let mut d = decision(false, Some(500));
        assert!(shadowed(&mut d, true));
        assert!(d.allowed);
        assert_eq!(d.retry_after, Some(Span::from_us(500_000)));
        let mut d = decision(false, Some(500));
        assert!(!shadowed(&mut d, false));
        assert!(!d.allowed);
        let mut d = decision(true, Some(0));
        assert!(!shadowed(&mut d, true));
    }
}
