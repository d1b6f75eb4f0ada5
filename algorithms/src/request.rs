//! What a request's options do, the same for every algorithm: `COST n` and `ATMOST max` (how
//! many units it asks for), `DRYRUN` (whether it writes), `BLOCK duration` (a penalty on the
//! key: [`penalty`]) and `SHADOW` (a would-be denial answered as admitted). The module parses
//! the options; this is what they decide, around an algorithm's own step.
//!
//! [`decide`] runs one request on a key: a block in force answers before the algorithm may
//! write, a denial may start one, and the [`Effect`] tells the caller (the module's storage)
//! what to keep: nothing, the new state, or a block. [`shadowed`] turns a denial into
//! SHADOW's answer.

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

/// One request on one key, as [`decide`] takes it.
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

/// What the caller keeps after [`decide`].
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

/// Decides `request` on a key blocked until `blocked_until_us` (0, or any past instant: not
/// blocked; a fresh key is never blocked). `step(write)` is the algorithm's step (what
/// [`crate::Algorithm::check`] does, handing back the state `S` and anything else `T`): while a
/// block is in force it is asked what it would say without writing, and the block refuses
/// it ([`penalty::apply`]); otherwise it decides, and a denial that counts may start a block
/// ([`penalty::starts`]). Returns the decision, what the step handed back, and what the key
/// keeps ([`Effect`]).
#[inline(always)]
pub fn decide<S, T: Aside>(
    blocked_until_us: u64,
    request: &Request,
    step: impl FnOnce(bool) -> (Decision, S, T),
) -> (Decision, S, T, Effect) {
    let Request {
        now_us,
        cost,
        write,
        block_ms,
    } = *request;
    if blocked_until_us > now_us {
        let (mut decision, state, mut aside) = step(false);
        penalty::apply(&mut decision, blocked_until_us, now_us);
        aside.blocked(blocked_until_us, now_us);
        return (decision, state, aside, Effect::Blocked(blocked_until_us));
    }
    let (mut decision, state, mut aside) = step(write);
    if decision.allowed && write {
        return (decision, state, aside, Effect::Counted);
    }
    match penalty::starts(&decision, cost, write, block_ms, now_us) {
        Some(until) => {
            penalty::apply(&mut decision, until, now_us);
            aside.blocked(until, now_us);
            (decision, state, aside, Effect::Blocks(until))
        }
        None => (decision, state, aside, Effect::Unchanged),
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

    #[test]
    fn a_block_in_force_answers_and_the_step_does_not_write() {
        let blocked = NOW + 3_000_000;
        let req = request(Options::default());
        let (d, (), (), effect) = decide(blocked, &req, |write| {
            assert!(!write, "asked without writing");
            (decision(true, Some(0)), (), ())
        });
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
        let (_, (), (), effect) = decide(NOW - 1, &req, |_| (decision(true, Some(0)), (), ()));
        assert_eq!(effect, Effect::Counted, "a block that is over is gone");
        let (d, (), (), effect) = decide(0, &req, |_| (decision(false, Some(500)), (), ()));
        assert_eq!(effect, Effect::Blocks(NOW + 60_000_000));
        assert_eq!(d.retry_after, Some(Span::from_us(60_000_000)));
        assert!(effect.writes());
        let (_, (), (), effect) = decide(0, &req, |_| (decision(false, None), (), ()));
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
        let (_, (), (), effect) = decide(0, &dry, |_| (decision(false, Some(500)), (), ()));
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
