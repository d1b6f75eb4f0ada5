//! An open key of the data type, for the commands: its state read and written back in
//! whatever form holds it ([`super::pointer`]), its expiry, its deletion. Safe code only:
//! the key's value is reached through a [`Slot`].

use std::sync::Arc;

use super::codec::Record;
use super::compact::interner;
use super::compact::{self, Bases, Cell, Interned};
use super::data_type::raw_type;
use super::pointer::{Held, Owned, Repr, Slot};
use super::value::{Stored, Value, Variant};
use crate::error::Error;
use crate::redis::{Ctx, RString};
use algorithms::request::{self, Aside, Effect, Request};
use algorithms::rule_set::MAX_RULES;
use algorithms::{penalty, Decision, Span};

/// What [`Key::update`] did: the decision, whether the key changed, what the algorithm's step
/// handed back besides the decision, and the BLOCK that answered for the key, if any.
#[derive(Debug, Clone, Copy)]
pub struct Updated<T> {
    /// The key's decision, a block's refusal included.
    pub decision: Decision,
    /// What the step handed back besides its decision (RL.LIMIT's binding rule).
    pub aside: T,
    /// What the key kept ([`request::settle`]): whether it changed (and so must expire anew
    /// and propagate), and the block that answered for it.
    pub effect: Effect,
}

/// What RL.REFUND did to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refunded {
    /// The units given back.
    pub given: u64,
    /// How long until the key is fresh again after the refund, a BLOCK in force included:
    /// the key's new TTL (zero: it is fresh and goes).
    pub reset_after: Span,
}

/// An open key. Closed when dropped, also when a panic unwinds through the command.
///
/// The module sets `NO_IMPLICIT_SIGNAL_MODIFIED`, so closing a key signals nothing: a key
/// that a call changed (its value set, its state updated, its expiry set, or deleted) is
/// signalled as modified when it is closed, which aborts other clients' `WATCH` and
/// invalidates client-side caches; a key only read (a denial, a DRYRUN) is not.
pub struct Key<'a> {
    slot: Slot<'a>,
    modified: bool,
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if self.modified {
            self.slot.signal_modified();
        }
        // `slot` closes the key after this.
    }
}

impl<'a> Key<'a> {
    /// Opens `name` for reading, or for reading and writing. A command opens a key once
    /// (see [`Slot::open`]).
    pub fn open(ctx: Ctx<'a>, name: RString<'a>, write: bool) -> Key<'a> {
        Key {
            slot: Slot::open(ctx, name, write, raw_type()),
            modified: false,
        }
    }

    /// Asks the processor to fetch what the key's value pointer points to (a cell, a block
    /// of rule words, a whole value), so that its first read, in [`Key::update`] after the
    /// caller's other work (the clock, the request), does not wait for memory: a key's cell
    /// is allocated apart from the key itself, and at 100,000 keys it is a cache miss.
    pub fn prefetch(&mut self) {
        self.slot.prefetch();
    }

    /// A copy of the key's value (`None`: no key), for reading it whole (RL.INSPECT).
    pub fn snapshot(&mut self) -> Result<Option<Record>, Error> {
        match self.slot.get()? {
            None => Ok(None),
            Some(lent) => lent
                .repr()
                .record()
                .map(|v| Some(v.into_owned()))
                .ok_or(Error::Panic),
        }
    }

    /// Decides a request of algorithm `A` on this key: `step` gets the key's stored
    /// parameters and state (`None` for a fresh key) and whether it may write, and returns the
    /// decision, changing the state only when the request is admitted and writes (the
    /// algorithms' contract), and anything else it hands back (`T`, returned as is: RL.LIMIT's
    /// binding rule). What the request does around the step (a block in force, a block it
    /// starts, whether it counts) is [`request::may_write`]'s and [`request::settle`]'s; this
    /// keeps what they say: the new state with `params`, or the block. A key holding another
    /// algorithm's state is an error naming both; nothing changes on any error.
    pub fn update<A: Variant, T: Aside>(
        &mut self,
        params: &A::Params,
        request: Request,
        step: impl FnOnce(Option<(&A::Params, &mut A::State)>, bool) -> (Decision, Option<A::State>, T),
    ) -> Result<Updated<T>, Error> {
        let outcome = self.decide::<A, T>(params, request, step);
        if let Ok(updated) = &outcome {
            if updated.effect.writes() {
                self.modified = true;
            }
        }
        outcome
    }

    /// [`Key::update`] without the bookkeeping of what changed.
    fn decide<A: Variant, T: Aside>(
        &mut self,
        params: &A::Params,
        request: Request,
        step: impl FnOnce(Option<(&A::Params, &mut A::State)>, bool) -> (Decision, Option<A::State>, T),
    ) -> Result<Updated<T>, Error> {
        // The error for a key of another algorithm, built only then.
        let other = |stored: &'static str| {
            Err(Error::OtherAlgorithm {
                stored,
                requested: A::NAME,
            })
        };
        let Some(lent) = self.slot.get()? else {
            // A fresh key is never blocked.
            let (mut decision, fresh, mut aside) = step(None, request::may_write(0, &request));
            let effect = request::settle(0, &request, &mut decision, &mut aside);
            if let (Effect::Counted, Some(state)) = (effect, fresh) {
                let stored = Stored {
                    params: params.clone(),
                    state,
                };
                self.set(Owned::new(Record::new(A::wrap(stored))));
            }
            return Ok(Updated {
                decision,
                aside,
                effect,
            });
        };
        match lent.repr() {
            Repr::Whole(record) => {
                let name = record.value.algorithm_name();
                let Some(stored) = A::get_mut(&mut record.value) else {
                    return other(name);
                };
                let blocked = record.blocked_until_us;
                let write = request::may_write(blocked, &request);
                let (mut decision, _, mut aside) =
                    step(Some((&stored.params, &mut stored.state)), write);
                let effect = request::settle(blocked, &request, &mut decision, &mut aside);
                match effect {
                    Effect::Counted => {
                        stored.params = params.clone();
                        if blocked != 0 {
                            // The block is over: the key takes the smallest form it fits
                            // again (the whole record is freed as it is swapped out).
                            let kept = matches!(
                                record.value,
                                Value::SlidingLog(_) | Value::Concurrency(_)
                            );
                            if kept {
                                record.blocked_until_us = 0;
                            } else {
                                let value = record.value.clone();
                                self.swap(Owned::new(Record::new(value)));
                            }
                        }
                    }
                    Effect::Blocks(until) => record.blocked_until_us = until,
                    Effect::Unchanged | Effect::Blocked(_) => {}
                }
                Ok(Updated {
                    decision,
                    aside,
                    effect,
                })
            }
            packed => {
                let requested = A::policy_rules(params);
                let mut bases = [0; MAX_RULES];
                let (mut value, held) = packed.unpack(requested, &mut bases).ok_or(Error::Panic)?;
                let name = value.algorithm_name();
                let Some(stored) = A::get_mut(&mut value) else {
                    return other(name);
                };
                // A packed form holds no block.
                let write = request::may_write(0, &request);
                let (mut decision, _, mut aside) =
                    step(Some((&stored.params, &mut stored.state)), write);
                let effect = request::settle(0, &request, &mut decision, &mut aside);
                match effect {
                    Effect::Counted => {
                        stored.params = params.clone();
                        if let Some(new) = repack(packed, &held, &bases, value) {
                            self.store(new);
                        }
                    }
                    // A block keeps the whole record (a packed form has no room for it).
                    Effect::Blocks(until) => self.swap(Owned::new(Record {
                        value,
                        blocked_until_us: until,
                    })),
                    Effect::Unchanged | Effect::Blocked(_) => compact::recycle(value),
                }
                Ok(Updated {
                    decision,
                    aside,
                    effect,
                })
            }
        }
    }

    /// RL.REFUND: gives back up to `units` of what the key holds as taken, as of `now_us`,
    /// under the parameters it was written with ([`Value::refund`]). `None` when the key does
    /// not exist. With `write`, the key keeps the new state (a BLOCK in force stays); without
    /// (DRYRUN), the refund is made on a copy and nothing changes. A concurrency key is an
    /// error (its leases end with RL.CONCURRENCY.RELEASE); so is another Redis type. The
    /// caller sets the expiry (or deletes a fresh key) when something was given back.
    pub fn refund(
        &mut self,
        now_us: u64,
        units: u64,
        write: bool,
    ) -> Result<Option<Refunded>, Error> {
        let Some(lent) = self.slot.get()? else {
            return Ok(None);
        };
        let refunded = match lent.repr() {
            Repr::Whole(record) => {
                if matches!(record.value, Value::Concurrency(_)) {
                    return Err(Error::RefundLease);
                }
                let mut copy;
                let value = if write {
                    &mut record.value
                } else {
                    copy = record.value.clone();
                    &mut copy
                };
                let given = value.refund(now_us, units);
                let mut now = value.view_now(now_us);
                penalty::apply(&mut now, record.blocked_until_us, now_us);
                Refunded {
                    given,
                    reset_after: now.reset_after,
                }
            }
            packed => {
                // A packed form holds no block and no concurrency limiter.
                let mut bases = [0; MAX_RULES];
                let (mut value, held) = packed.unpack(None, &mut bases).ok_or(Error::Panic)?;
                let given = value.refund(now_us, units);
                let reset_after = value.view_now(now_us).reset_after;
                if write && given > 0 {
                    // The refund changes no parameters: the key keeps its form when the new
                    // state fits it, else takes the one that holds it.
                    if let Some(new) = repack(packed, &held, &bases, value) {
                        self.store(new);
                    }
                }
                Refunded { given, reset_after }
            }
        };
        if write && refunded.given > 0 {
            self.modified = true;
        }
        Ok(Some(refunded))
    }

    /// The key's state for an algorithm whose values never pack (the concurrency limiter),
    /// for commands that work on it directly; `None` when the key does not exist. A caller
    /// that changes the state then sets the key's expiry or deletes it, which marks the key
    /// modified.
    pub fn whole<A: Variant>(&mut self) -> Result<Option<&mut Stored<A>>, Error> {
        let Some(lent) = self.slot.get()? else {
            return Ok(None);
        };
        let value: &mut Value = match lent.repr() {
            Repr::Whole(record) => &mut record.value,
            packed => {
                // A packed value is another algorithm's: name it in the error.
                let value = packed.value().ok_or(Error::Panic)?;
                return Err(Error::OtherAlgorithm {
                    stored: value.algorithm_name(),
                    requested: A::NAME,
                });
            }
        };
        let stored_name = value.algorithm_name();
        A::get_mut(value).map(Some).ok_or(Error::OtherAlgorithm {
            stored: stored_name,
            requested: A::NAME,
        })
    }

    /// Replaces the key's value with `record` (RL.LOADSTATE); WRONGTYPE for another type.
    pub fn replace(&mut self, record: Record) -> Result<(), Error> {
        self.slot.check()?;
        self.set(Owned::new(record));
        Ok(())
    }

    /// Stores a replacement [`repack`] chose: the key is kept, with its expiry. Inlined
    /// into the update, where `repack` used to store it itself (callgrind: 9 instructions
    /// a write less than a call).
    #[inline(always)]
    fn store(&mut self, new: Replacement) {
        self.modified = true;
        match new {
            Replacement::Word(word) => self.slot.replace_word(word),
            Replacement::Value(value) => self.slot.swap(value),
        }
    }

    /// Replaces the value of a key that holds one of ours with `value` (another form of it),
    /// keeping the key and its expiry ([`Slot::swap`]).
    fn swap(&mut self, value: Owned) {
        self.modified = true;
        self.slot.swap(value);
    }

    /// Sets the key's value. Replacing a value re-creates the key, so its expiry is gone:
    /// callers set it again.
    fn set(&mut self, value: Owned) {
        self.modified = true;
        self.slot.set(value);
    }

    /// Expires the key at `at_ms`, an absolute time on the real clock (ms since the epoch).
    pub fn expire_at(&mut self, at_ms: u64) {
        self.modified = true;
        self.slot.expire_at(at_ms);
    }

    /// Deletes the key (a fresh key needs no state).
    pub fn delete(&mut self) {
        self.modified = true;
        self.slot.delete();
    }
}

/// What [`repack`] stores in place of a key's value when it cannot write it in place.
enum Replacement {
    /// An inline word in place of an inline word ([`Slot::replace_word`]).
    Word(u64),
    /// A value of another form or block, the old one freed as it is swapped out.
    Value(Owned),
}

/// Writes `value` in place of the packed form `old`, in the same form, when it still fits
/// (keeping its table slots when it can): `None`. Else what the key is to store instead: a
/// new inline word, or whatever form [`Owned::new`] picks. `held` and `bases` are what the
/// read of `old` kept ([`Repr::unpack`]).
fn repack(mut old: Repr<'_>, held: &Held, bases: &Bases, value: Value) -> Option<Replacement> {
    // The common writes: the same form and slots, no lock.
    match (&mut old, held, &value) {
        (Repr::Inline(word), Held::Interned(interned), _) => {
            let id = compact::word_parts(*word).0;
            if let Some(new) = compact::refit(&value, id, interned) {
                return Some(Replacement::Word(new));
            }
        }
        (Repr::Compact(cell), Held::Interned(interned), _) if !compact::fits_inline(&value) => {
            if let Some((params, state)) = compact::pack(&value, interned.base) {
                if params == interned.params {
                    **cell = Cell::new(cell.params, state);
                    return None;
                }
            }
        }
        (Repr::Rules(words), Held::Rules(rules), Value::RuleSet(s)) => {
            // The rules the words were read under are still the value's.
            let same = Arc::ptr_eq(rules, &s.params);
            if same && compact::refit_rules(words, rules, &s.state, bases) {
                compact::recycle(value);
                return None;
            }
        }
        _ => {}
    }
    let mut table = interner();
    match old {
        Repr::Inline(word) => {
            let id = compact::word_parts(word).0;
            if let Some(new) = compact::pack_word(&value, Some(id), &mut table) {
                if compact::word_parts(new).0 != id {
                    table.release(id);
                }
                return Some(Replacement::Word(new));
            }
        }
        Repr::Compact(cell) => {
            let fits_inline = compact::pack_word(&value, None, &mut table);
            if let Some(word) = fits_inline {
                // Back to the smallest form (the cell is freed as it is swapped out).
                return Some(Replacement::Value(Owned::word(word)));
            }
            // The cell's slot when it still holds the state (the same parameters, and
            // a warm-up schedule still within its epoch), else the slot it takes anew.
            let kept = table.get(cell.params).and_then(|interned| {
                let (params, state) = compact::pack(&value, interned.base)?;
                (params == interned.params).then_some(state)
            });
            if let Some(state) = kept {
                *cell = Cell::new(cell.params, state);
                return None;
            }
            let base = compact::cell_base(&value);
            if let Some((params, state)) = compact::pack(&value, base) {
                let id = table.acquire(Interned { params, base });
                table.release(cell.params);
                *cell = Cell::new(id, state);
                return None;
            }
        }
        Repr::Rules(words) => {
            if let Value::RuleSet(s) = &value {
                if s.state.len() == words.len() {
                    let packed = compact::pack_rules(&s.params, &s.state, words, &mut table);
                    if let Some(new) = packed {
                        compact::release_replaced(words, &new, &mut table);
                        words.copy_from_slice(&new);
                        return None;
                    }
                } else if let Some(new) = compact::pack_rules(&s.params, &s.state, &[], &mut table)
                {
                    // Another number of rules: a new block (the old one is freed as it is
                    // swapped out).
                    return Some(Replacement::Value(Owned::rules(&new)));
                }
            }
        }
        Repr::Whole(_) => {}
    }
    // No longer fits its form: the old one is freed as it is swapped out.
    drop(table);
    Some(Replacement::Value(Owned::new(Record::new(value))))
}
