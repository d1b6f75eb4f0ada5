//! The only code that opens keys or sets expiry: the module data type, its persistence
//! callbacks, and key access for the commands.
//!
//! A key's value pointer is one of four things (its two low bits tell which; Redis never looks
//! behind a module value's pointer, it only hands it back to the callbacks here, and never
//! takes a null one for a value):
//! - an inline word, no pointer at all: an index of interned parameters and an epoch, and
//!   the state (see [`compact`]), for a single-algorithm key whose state fits one;
//! - a block of such words, one per rule, for a policy key whose every rule fits one;
//! - a [`compact::Cell`] of 16 bytes, for a state too large for a word;
//! - a whole [`Value`], for a sliding log, a concurrency limiter, a key under a block, or a
//!   state too large for a cell.
//!
//! Every callback decodes every form, and writes (RDB, AOF, digest) the same bytes whatever
//! the form: the form is the server's own business.

pub mod codec;
pub mod compact;
pub mod policies;
pub mod value;

use std::borrow::Cow;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::error::Error;
use crate::redis::{Ctx, Digest, Holds, Io, RString, RawKey};
use algorithms::rule_set::{Rules, MAX_RULES};
use algorithms::{penalty, Decision, Span};
pub use codec::Entry;
use compact::{interner, Bases, Cell, Interned};
pub use value::{Stored, Value, Variant};

/// The RDB encoding version of the data type (`encver`): the blob inside carries its own
/// version too (see [`codec`]), so this changes only if the RDB framing itself changes.
const ENCODING_VERSION: i32 = 1;

/// The data type: its name is exactly nine characters, as Redis requires.
pub static RL_TYPE: RedisType = RedisType::new(
    "ratelimit",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(policies::aux_load),
        aux_save: Some(policies::aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as i32,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    },
);

/// The internal command that the AOF rewrite emits to recreate a key's state.
pub const LOADSTATE: &std::ffi::CStr = c"RL.LOADSTATE";

fn raw_type() -> *mut raw::RedisModuleType {
    *RL_TYPE.raw_type.borrow()
}

/// The tag in a value pointer's two low bits (heap blocks are at least 8-byte aligned).
const TAG: usize = 3;
/// A `Box<Entry>`.
const WHOLE: usize = 0;
/// A `Box<Cell>`.
const COMPACT: usize = 1;
/// No pointer at all: the state itself, an inline word ([`compact::word`]).
const INLINE: usize = 2;
/// A block of 64-bit words: their number, then one inline word per rule of a policy.
const RULES: usize = 3;

// An inline word is a value pointer: pointers must be 64 bits wide.
const _: () = assert!(usize::BITS == 64);

/// What a value pointer stands for.
enum Repr<'a> {
    Inline(u64),
    Compact(&'a mut Cell),
    Rules(&'a mut [u64]),
    Whole(&'a mut Entry),
}

/// # Safety
/// `ptr` is a value pointer this module made with [`into_raw`] (or [`copy`]), not yet freed.
unsafe fn repr<'a>(ptr: *mut c_void) -> Repr<'a> {
    let addr = ptr as usize;
    match addr & TAG {
        WHOLE => Repr::Whole(&mut *ptr.cast::<Entry>()),
        INLINE => Repr::Inline(addr as u64),
        COMPACT => Repr::Compact(&mut *((addr & !TAG) as *mut Cell)),
        _ => {
            let block = (addr & !TAG) as *mut u64;
            let len = *block as usize;
            Repr::Rules(std::slice::from_raw_parts_mut(block.add(1), len))
        }
    }
}

/// A value pointer to a new block holding `words` (a policy's rules).
fn rules_block(words: &[u64]) -> *mut c_void {
    let mut block = Vec::with_capacity(words.len() + 1);
    block.push(words.len() as u64);
    block.extend_from_slice(words);
    let block = Box::into_raw(block.into_boxed_slice()).cast::<u64>();
    (block as usize | RULES) as *mut c_void
}

/// Frees a block of rule words (not the references its words hold).
///
/// # Safety
/// `addr` is a [`RULES`] pointer [`rules_block`] made, not used again.
unsafe fn free_rules_block(addr: usize) {
    let block = (addr & !TAG) as *mut u64;
    let len = *block as usize;
    drop(Box::from_raw(ptr::slice_from_raw_parts_mut(block, len + 1)));
}

/// A value pointer for `entry`, in the smallest form that holds it exactly: an inline word,
/// a block of rule words (a policy), a 16-byte cell, else the whole entry (a sliding log, a
/// concurrency limiter, a key under a block, a state too large for the others).
fn into_raw(entry: Entry) -> *mut c_void {
    if entry.blocked_until_us == 0 {
        let mut table = interner();
        if let Some(word) = compact::pack_word(&entry.value, None, &mut table) {
            return (word as usize | INLINE) as *mut c_void;
        }
        if let Value::Limit(s) = &entry.value {
            if let Some(words) = compact::pack_rules(&s.params, &s.state, &[], &mut table) {
                return rules_block(&words);
            }
        }
        let base = compact::cell_base(&entry.value);
        if let Some((params, state)) = compact::pack(&entry.value, base) {
            let id = table.acquire(Interned { params, base });
            let cell = Box::into_raw(Box::new(Cell::new(id, state)));
            return (cell as usize | COMPACT) as *mut c_void;
        }
    }
    Box::into_raw(Box::new(entry)).cast::<c_void>()
}

/// The value behind a pointer (unpacked from a packed form), or `None` for a packed form
/// whose entry is gone (which would be a bug).
///
/// # Safety
/// As for [`repr`].
unsafe fn value_of<'a>(ptr: *mut c_void) -> Option<Cow<'a, Entry>> {
    entry_of(repr(ptr))
}

/// The value a [`Repr`] holds (unpacked from a packed form), or `None` for a packed form
/// whose entry is gone (which would be a bug).
fn entry_of(repr: Repr<'_>) -> Option<Cow<'_, Entry>> {
    match repr {
        Repr::Whole(entry) => Some(Cow::Borrowed(entry)),
        packed => unpacked(&packed).map(|value| Cow::Owned(Entry::new(value))),
    }
}

/// The value a packed form stands for (`None` for a whole entry, or an entry gone).
fn unpacked(repr: &Repr<'_>) -> Option<Value> {
    unpacked_with_entry(repr, None, &mut [0; MAX_RULES]).map(|(value, _)| value)
}

/// What a read of a packed form keeps so that writing the key back in the same form needs
/// no lock of the table (the common write): the entry an inline word or a cell names (a
/// copy); for a policy key read under the rules it was written with, those rules (their
/// entries' bases go to the caller's [`Bases`]).
enum Held {
    Nothing,
    Entry(Interned),
    Rules(Rules),
}

/// [`unpacked`], and what [`Held`] keeps for writing it back. `requested` is the policy a
/// request names, for a policy key (RL.LIMIT): when the key's words hold exactly its rules,
/// the value shares them instead of a copy, and `bases` gets their entries' bases.
fn unpacked_with_entry(
    repr: &Repr<'_>,
    requested: Option<&Rules>,
    bases: &mut Bases,
) -> Option<(Value, Held)> {
    let table = interner();
    match repr {
        Repr::Inline(word) => {
            let entry = *table.get(compact::word_parts(*word).0)?;
            Some((compact::unpack_word(&entry, *word), Held::Entry(entry)))
        }
        Repr::Compact(cell) => {
            let entry = *table.get(cell.params)?;
            let value = compact::unpack(&entry, cell.state());
            Some((value, Held::Entry(entry)))
        }
        Repr::Rules(words) => {
            if let Some(rules) = requested {
                if let Some(states) = compact::rule_states(words, rules, &table, bases) {
                    let value = Value::Limit(Stored {
                        params: Arc::clone(rules),
                        state: states,
                    });
                    return Some((value, Held::Rules(Arc::clone(rules))));
                }
            }
            compact::unpack_rules(words, &table).map(|v| (v, Held::Nothing))
        }
        Repr::Whole(_) => None,
    }
}

/// # Safety
/// As for [`repr`]; the pointer is not used again.
unsafe fn free_raw(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    let addr = ptr as usize;
    match repr(ptr) {
        Repr::Inline(word) => interner().release(compact::word_parts(word).0),
        Repr::Compact(cell) => {
            let id = cell.params;
            drop(Box::from_raw(cell as *mut Cell));
            interner().release(id);
        }
        Repr::Rules(words) => {
            let mut table = interner();
            for &word in words.iter() {
                table.release(compact::word_parts(word).0);
            }
            drop(table);
            free_rules_block(addr);
        }
        Repr::Whole(entry) => drop(Box::from_raw(entry as *mut Entry)),
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return ptr::null_mut();
    }
    // SAFETY: the stream Redis passed to this callback.
    let Some(io) = Io::from_raw(rdb) else {
        return ptr::null_mut();
    };
    catch_unwind(|| {
        io.with_bytes(|buffer| match codec::decode(buffer) {
            Ok(value) => into_raw(value),
            Err(_) => ptr::null_mut(),
        })
        .unwrap_or(ptr::null_mut())
    })
    .unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: the stream Redis passed to this callback.
    let Some(io) = Io::from_raw(rdb) else {
        return;
    };
    let _ = catch_unwind(|| {
        if let Some(value) = value_of(value) {
            io.save_bytes(&codec::encode(&value));
        }
    });
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: the stream and key Redis passed to this callback.
    let (Some(io), Some(key)) = (Io::from_raw(aof), RString::from_raw(key)) else {
        return;
    };
    let _ = catch_unwind(|| {
        if let Some(value) = value_of(value) {
            io.emit_aof(LOADSTATE, key, &codec::encode(&value));
        }
    });
}

/// What a key of this type costs the server beyond what `MEMORY USAGE` counts by itself (the
/// key's name and its entry in the keyspace), so that `MEMORY USAGE` of a key is within 5% of
/// what storing it took (`make bench` and tests/memory.rs check it). On Redis 7: the value's
/// object and the module's wrapper around our pointer (16 bytes each), the key's entry in the
/// expiry table (24 bytes: every key of ours expires), and its share of both tables' buckets
/// and of the allocator's rounding, measured at 37 bytes a key (docs/performance.md, Memory).
/// Redis 8 and Valkey 8 embed the name in the object and need no entries: 52 bytes, measured.
static KEY_OVERHEAD: AtomicUsize = AtomicUsize::new(KEY_OVERHEAD_WITH_ENTRIES);
const KEY_OVERHEAD_WITH_ENTRIES: usize = 16 + 16 + 24 + 37;
const KEY_OVERHEAD_EMBEDDED: usize = 52;

/// Sets what [`mem_usage`] counts for the key around a value (at load): whether the server
/// embeds key names in their objects ([`crate::redis::Ctx::embeds_key_names`]).
pub fn count_key_overhead(embedded: bool) {
    let bytes = if embedded {
        KEY_OVERHEAD_EMBEDDED
    } else {
        KEY_OVERHEAD_WITH_ENTRIES
    };
    KEY_OVERHEAD.store(bytes, Ordering::Relaxed);
}

/// The bytes the allocator hands out for a request of `n` bytes (jemalloc's size classes).
fn size_class(n: usize) -> usize {
    match n {
        0..=8 => 8,
        9..=128 => n.next_multiple_of(16),
        _ => n.next_multiple_of(1 << ((n - 1).ilog2() - 2)),
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    catch_unwind(|| {
        KEY_OVERHEAD.load(Ordering::Relaxed)
            + match repr(value.cast_mut()) {
                Repr::Inline(_) => 0,
                Repr::Compact(_) => size_class(std::mem::size_of::<Cell>()),
                Repr::Rules(words) => size_class((words.len() + 1) * 8),
                Repr::Whole(entry) => entry.value.memory() + std::mem::size_of::<u64>(),
            }
    })
    .unwrap_or(0)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: the digest Redis passed to this callback.
    let Some(mut md) = Digest::from_raw(md) else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(value) = value_of(value) {
            md.add_sequence(&mut codec::encode(&value));
        }
    }));
}

unsafe extern "C" fn free(value: *mut c_void) {
    let _ = catch_unwind(|| free_raw(value));
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    catch_unwind(AssertUnwindSafe(|| match repr(value.cast_mut()) {
        Repr::Inline(word) => {
            interner().retain(compact::word_parts(word).0);
            value.cast_mut()
        }
        Repr::Compact(cell) => {
            interner().retain(cell.params);
            let copy = Box::into_raw(Box::new(*cell));
            (copy as usize | COMPACT) as *mut c_void
        }
        Repr::Rules(words) => {
            let mut table = interner();
            for &word in words.iter() {
                table.retain(compact::word_parts(word).0);
            }
            rules_block(words)
        }
        Repr::Whole(entry) => Box::into_raw(Box::new(entry.clone())).cast::<c_void>(),
    }))
    .unwrap_or(ptr::null_mut())
}

/// What a request brings besides its algorithm's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub now_us: u64,
    pub cost: u64,
    /// Whether an admitted request writes (not DRYRUN, COST > 0).
    pub write: bool,
    /// `BLOCK duration`, in ms.
    pub block_ms: Option<u64>,
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
    raw: RawKey<'a>,
    modified: bool,
    /// What [`Key::raw_value`] found (`Some(None)`: no key), until the value is set,
    /// replaced or deleted here: [`Key::prefetch`] reads it first, the update again.
    read: Option<Option<*mut c_void>>,
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if self.modified {
            self.raw.signal_modified();
        }
        // `raw` closes the key after this.
    }
}

impl<'a> Key<'a> {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: Ctx<'a>, name: RString<'a>, write: bool) -> Key<'a> {
        Key {
            raw: ctx.open_key(name, write),
            modified: false,
            read: None,
        }
    }

    /// Asks the processor to fetch what the key's value pointer points to (a cell, a block
    /// of rule words, a whole value), so that its first read, in [`Key::update`] after the
    /// caller's other work (the clock, the request), does not wait for memory: a key's cell
    /// is allocated apart from the key itself, and at 100,000 keys it is a cache miss.
    pub fn prefetch(&mut self) {
        let Ok(Some(ptr)) = self.raw_value() else {
            return;
        };
        let addr = ptr as usize;
        if addr & TAG == INLINE {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults, whatever the address; this one is a live value's.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>((addr & !TAG) as *const i8);
        }
    }

    /// The key's value pointer: `None` when the key does not exist, WRONGTYPE when it holds
    /// another Redis type.
    fn raw_value(&mut self) -> Result<Option<*mut c_void>, Error> {
        if let Some(read) = self.read {
            return Ok(read);
        }
        let read = match self.raw.holds() {
            Holds::Nothing => None,
            Holds::Module(ty) if ty == raw_type() => Some(self.raw.value()),
            _ => return Err(Error::WrongType),
        };
        self.read = Some(read);
        Ok(read)
    }

    /// The key's value as this module made it: `None` when the key does not exist,
    /// WRONGTYPE when it holds another Redis type. Borrowed from the open key.
    fn stored(&mut self) -> Result<Option<Repr<'_>>, Error> {
        match self.raw_value()? {
            None => Ok(None),
            // SAFETY: a value of our type is a pointer this module made (`into_raw`), alive
            // while the key is open; the borrow of the key keeps anything else here from
            // touching it, and nothing else does during the command.
            Some(ptr) => Ok(Some(unsafe { repr(ptr) })),
        }
    }

    /// A copy of the key's value (`None`: no key), for reading it whole (RL.INSPECT).
    pub fn snapshot(&mut self) -> Result<Option<Entry>, Error> {
        match self.stored()? {
            None => Ok(None),
            Some(repr) => entry_of(repr)
                .map(|v| Some(v.into_owned()))
                .ok_or(Error::Panic),
        }
    }

    /// Decides a request of algorithm `A` on this key: `step` gets the key's stored
    /// parameters and state (`None` for a fresh key) and whether it may write, and returns the
    /// decision, changing the state only when the request is admitted and writes (the
    /// algorithms' contract), and anything else it hands back (`T`, returned as is: RL.LIMIT's
    /// binding rule). When the request writes and is admitted, the key then holds
    /// `params` and the new state. A blocked key refuses everything until its block ends; a
    /// denied request may start a block ([`penalty`]). Returns the decision, whether the
    /// key changed (and so must expire anew and propagate). A key holding another
    /// algorithm's state is an error naming both; nothing changes on any error.
    pub fn update<A: Variant, T>(
        &mut self,
        params: &A::Params,
        request: Request,
        step: impl FnOnce(Option<(&A::Params, &mut A::State)>, bool) -> (Decision, Option<A::State>, T),
    ) -> Result<(Decision, bool, T), Error> {
        let outcome = self.decide::<A, T>(params, request, step);
        if let Ok((_, true, _)) = outcome {
            self.modified = true;
        }
        outcome
    }

    /// [`Key::update`] without the bookkeeping of what changed.
    fn decide<A: Variant, T>(
        &mut self,
        params: &A::Params,
        request: Request,
        step: impl FnOnce(Option<(&A::Params, &mut A::State)>, bool) -> (Decision, Option<A::State>, T),
    ) -> Result<(Decision, bool, T), Error> {
        let Request {
            now_us,
            cost,
            write,
            block_ms,
        } = request;
        // The error for a key of another algorithm, built only then.
        let other = |stored: &'static str| {
            Err(Error::OtherAlgorithm {
                stored,
                requested: A::NAME,
            })
        };
        let Some(ptr) = self.raw_value()? else {
            // A fresh key denies only what can never fit, which starts no block.
            let (decision, fresh, aside) = step(None, write);
            if let (true, Some(state)) = (decision.allowed && write, fresh) {
                let stored = Stored {
                    params: params.clone(),
                    state,
                };
                self.set(into_raw(Entry::new(A::wrap(stored))));
                return Ok((decision, true, aside));
            }
            return Ok((decision, false, aside));
        };
        // SAFETY: a value of our type is a pointer this module made, alive while the key is
        // open; nothing else touches it during the command, and what `repr` borrows is not
        // used after the key's value is replaced (`set`, `replace_value`).
        match unsafe { repr(ptr) } {
            Repr::Whole(entry) => {
                let name = entry.value.algorithm_name();
                let Some(stored) = A::get_mut(&mut entry.value) else {
                    return other(name);
                };
                let blocked = entry.blocked_until_us;
                if blocked > now_us {
                    let (mut decision, _, aside) =
                        step(Some((&stored.params, &mut stored.state)), false);
                    penalty::apply(&mut decision, blocked, now_us);
                    return Ok((decision, false, aside));
                }
                let (mut decision, _, aside) =
                    step(Some((&stored.params, &mut stored.state)), write);
                if decision.allowed && write {
                    stored.params = params.clone();
                    if blocked != 0 {
                        // The block is over: the key takes the smallest form it fits again
                        // (the whole entry is freed as it is swapped out).
                        let kept =
                            matches!(entry.value, Value::SlidingLog(_) | Value::Concurrency(_));
                        if !kept {
                            let value = entry.value.clone();
                            self.swap(into_raw(Entry::new(value)));
                            return Ok((decision, true, aside));
                        }
                        entry.blocked_until_us = 0;
                    }
                    return Ok((decision, true, aside));
                }
                match penalty::starts(&decision, cost, write, block_ms, now_us) {
                    Some(until) => {
                        entry.blocked_until_us = until;
                        penalty::apply(&mut decision, until, now_us);
                        Ok((decision, true, aside))
                    }
                    None => Ok((decision, false, aside)),
                }
            }
            packed => {
                let requested = A::policy_rules(params);
                let mut bases = [0; MAX_RULES];
                let (mut value, held) =
                    unpacked_with_entry(&packed, requested, &mut bases).ok_or(Error::Panic)?;
                let name = value.algorithm_name();
                let Some(stored) = A::get_mut(&mut value) else {
                    return other(name);
                };
                let (mut decision, _, aside) =
                    step(Some((&stored.params, &mut stored.state)), write);
                if !(decision.allowed && write) {
                    // A block keeps the whole entry (a packed form has no room for it).
                    return match penalty::starts(&decision, cost, write, block_ms, now_us) {
                        Some(until) => {
                            penalty::apply(&mut decision, until, now_us);
                            self.swap(into_raw(Entry {
                                value,
                                blocked_until_us: until,
                            }));
                            Ok((decision, true, aside))
                        }
                        None => {
                            compact::recycle(value);
                            Ok((decision, false, aside))
                        }
                    };
                }
                stored.params = params.clone();
                self.repack(packed, &held, &bases, value);
                Ok((decision, true, aside))
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
        let Some(ptr) = self.raw_value()? else {
            return Ok(None);
        };
        // SAFETY: as in `decide`: a pointer this module made, alive while the key is open;
        // what `repr` borrows is not used after the key's value is replaced.
        let refunded = match unsafe { repr(ptr) } {
            Repr::Whole(entry) => {
                if matches!(entry.value, Value::Concurrency(_)) {
                    return Err(Error::RefundLease);
                }
                let mut copy;
                let value = if write {
                    &mut entry.value
                } else {
                    copy = entry.value.clone();
                    &mut copy
                };
                let given = value.refund(now_us, units);
                let mut now = value.view_now(now_us);
                penalty::apply(&mut now, entry.blocked_until_us, now_us);
                Refunded {
                    given,
                    reset_after: now.reset_after,
                }
            }
            packed => {
                // A packed form holds no block and no concurrency limiter.
                let mut bases = [0; MAX_RULES];
                let (mut value, held) =
                    unpacked_with_entry(&packed, None, &mut bases).ok_or(Error::Panic)?;
                let given = value.refund(now_us, units);
                let reset_after = value.view_now(now_us).reset_after;
                if write && given > 0 {
                    // The refund changes no parameters: the key keeps its form when the new
                    // state fits it, else takes the one that holds it.
                    self.repack(packed, &held, &bases, value);
                }
                Refunded { given, reset_after }
            }
        };
        if write && refunded.given > 0 {
            self.modified = true;
        }
        Ok(Some(refunded))
    }

    /// Stores `value` in place of the packed form `old`: in the same form when it still fits
    /// (keeping its table entries when it can), else in whatever form [`into_raw`] picks.
    /// `held` and `bases` are what the read of `old` kept ([`unpacked_with_entry`]).
    fn repack(&mut self, mut old: Repr<'_>, held: &Held, bases: &Bases, value: Value) {
        // The common writes: the same form and entries, no lock.
        match (&mut old, held, &value) {
            (Repr::Inline(word), Held::Entry(entry), _) => {
                let id = compact::word_parts(*word).0;
                if let Some(new) = compact::refit(&value, id, entry) {
                    self.replace_word(new);
                    return;
                }
            }
            (Repr::Compact(cell), Held::Entry(entry), _) if !compact::fits_inline(&value) => {
                if let Some((params, state)) = compact::pack(&value, entry.base) {
                    if params == entry.params {
                        **cell = Cell::new(cell.params, state);
                        return;
                    }
                }
            }
            (Repr::Rules(words), Held::Rules(rules), Value::Limit(s)) => {
                // The rules the words were read under are still the value's.
                let same = Arc::ptr_eq(rules, &s.params);
                if same && compact::refit_rules(words, rules, &s.state, bases) {
                    compact::recycle(value);
                    return;
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
                    drop(table);
                    self.replace_word(new);
                    return;
                }
            }
            Repr::Compact(cell) => {
                let fits_inline = compact::pack_word(&value, None, &mut table);
                if let Some(word) = fits_inline {
                    // Back to the smallest form (the cell is freed as it is swapped out).
                    drop(table);
                    self.swap((word as usize | INLINE) as *mut c_void);
                    return;
                }
                // The cell's entry when it still holds the state (the same parameters, and
                // a warm-up schedule still within its epoch), else the entry it takes anew.
                let kept = table.get(cell.params).and_then(|entry| {
                    let (params, state) = compact::pack(&value, entry.base)?;
                    (params == entry.params).then_some(state)
                });
                if let Some(state) = kept {
                    *cell = Cell::new(cell.params, state);
                    return;
                }
                let base = compact::cell_base(&value);
                if let Some((params, state)) = compact::pack(&value, base) {
                    let id = table.acquire(Interned { params, base });
                    table.release(cell.params);
                    *cell = Cell::new(id, state);
                    return;
                }
            }
            Repr::Rules(words) => {
                if let Value::Limit(s) = &value {
                    if s.state.len() == words.len() {
                        let packed = compact::pack_rules(&s.params, &s.state, words, &mut table);
                        if let Some(new) = packed {
                            compact::release_replaced(words, &new, &mut table);
                            words.copy_from_slice(&new);
                            return;
                        }
                    } else if let Some(new) =
                        compact::pack_rules(&s.params, &s.state, &[], &mut table)
                    {
                        // Another number of rules: a new block (the old one is freed as it is
                        // swapped out).
                        drop(table);
                        self.swap(rules_block(&new));
                        return;
                    }
                }
            }
            Repr::Whole(_) => {}
        }
        // No longer fits its form: the old one is freed as it is swapped out.
        drop(table);
        self.swap(into_raw(Entry::new(value)));
    }

    /// The key's state for an algorithm whose values never pack (the concurrency limiter),
    /// for commands that work on it directly; `None` when the key does not exist. A caller
    /// that changes the state then sets the key's expiry or deletes it, which marks the key
    /// modified.
    pub fn whole<A: Variant>(&mut self) -> Result<Option<&mut Stored<A>>, Error> {
        let Some(repr) = self.stored()? else {
            return Ok(None);
        };
        let value: &mut Value = match repr {
            Repr::Whole(entry) => &mut entry.value,
            packed => {
                // A packed value is another algorithm's: name it in the error.
                let value = unpacked(&packed).ok_or(Error::Panic)?;
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

    /// Creates the key with `stored` (it did not exist).
    pub fn create<A: Variant>(&mut self, stored: Stored<A>) {
        self.set(into_raw(Entry::new(A::wrap(stored))));
    }

    /// Replaces the key's value with `entry` (RL.LOADSTATE); WRONGTYPE for another type.
    pub fn replace(&mut self, entry: Entry) -> Result<(), Error> {
        self.raw_value()?;
        self.set(into_raw(entry));
        Ok(())
    }

    /// Replaces the key's inline word with `word`, keeping the key and its expiry; the old
    /// value, a word too, needs nothing freed (its entry's reference is the caller's).
    fn replace_word(&mut self, word: u64) {
        self.modified = true;
        let word = (word as usize | INLINE) as *mut c_void;
        self.read = Some(Some(word));
        self.raw.replace_value(raw_type(), word);
    }

    /// Replaces the value of a key that holds one of ours with `ptr` (another form of it),
    /// keeping the key itself: its name, its entry in the keyspace and its expiry. `set` would
    /// delete the key and add it again, allocating all of those anew; this frees only the old
    /// value, here, with what it holds.
    fn swap(&mut self, ptr: *mut c_void) {
        self.modified = true;
        self.read = Some(Some(ptr));
        let old = self.raw.replace_value(raw_type(), ptr);
        // SAFETY: the key held a value of our type (the caller read it), which Redis handed
        // back and no longer owns; nothing borrowed from it is used after this.
        unsafe { free_raw(old) };
    }

    /// Sets the key's value pointer. Replacing a value re-creates the key, so its expiry is
    /// gone: callers set it again.
    fn set(&mut self, ptr: *mut c_void) {
        self.modified = true;
        self.read = Some(Some(ptr));
        self.raw.set_value(raw_type(), ptr);
    }

    /// Expires the key at `at_ms`, an absolute time on the real clock (ms since the epoch).
    pub fn expire_at(&mut self, at_ms: u64) {
        self.modified = true;
        self.raw.expire_at(at_ms);
    }

    /// Deletes the key (a fresh key needs no state).
    pub fn delete(&mut self) {
        self.modified = true;
        self.read = Some(None);
        self.raw.delete();
    }
}
