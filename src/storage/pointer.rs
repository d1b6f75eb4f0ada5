//! The value pointer Redis holds for a key of the data type, and all of storage's unsafe
//! code that looks behind it.
//!
//! A key's value pointer is one of four things (its two low bits tell which; Redis never looks
//! behind a module value's pointer, it only hands it back to the data type's callbacks, and
//! never takes a null one for a value):
//! - an inline word, no pointer at all: an index of interned parameters and an epoch, and
//!   the state (see [`compact`]), for a single-algorithm key whose state fits one;
//! - a block of such words, one per rule, for a policy key whose every rule fits one;
//! - a [`Cell`] of 16 bytes, for a state too large for a word;
//! - a whole [`Record`], for a sliding log, a concurrency limiter, a key under a block, or a
//!   state too large for a cell.
//!
//! A pointer made here is [`Owned`] until Redis holds it (a key's value, or what `rdb_load`
//! and `copy` return). An open key reads and replaces its value through a [`Slot`], which
//! lends it ([`Lent`], then a [`Repr`]) borrowed from the slot, so that no borrow outlives
//! the value; the data type's callbacks borrow what Redis hands them with
//! [`Repr::from_raw`], and `free` frees it with [`free_raw`]. Those two are the only unsafe
//! functions, and every unsafe block of storage but the callbacks' is in this file.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::ptr;
use std::sync::Arc;

use redis_module::raw;

use algorithms::rule_set::{Rules, MAX_RULES};

use super::codec::Record;
use super::compact::interner;
use super::compact::{self, Bases, Cell, Interned};
use super::value::{Stored, Value};
use crate::error::Error;
use crate::redis::{Ctx, Holds, RString, RawKey};

/// The tag in a value pointer's two low bits (heap blocks are at least 8-byte aligned).
const TAG: usize = 3;
/// A `Box<Record>`.
const WHOLE: usize = 0;
/// A `Box<Cell>`.
const COMPACT: usize = 1;
/// No pointer at all: the state itself, an inline word ([`compact::word`]).
const INLINE: usize = 2;
/// A block of 64-bit words: their number, then one inline word per rule of a policy.
const RULES: usize = 3;

// An inline word is a value pointer: pointers must be 64 bits wide.
const _: () = assert!(usize::BITS == 64);

/// What a value pointer stands for, borrowed for `'a`.
pub enum Repr<'a> {
    Inline(u64),
    Compact(&'a mut Cell),
    Rules(&'a mut [u64]),
    Whole(&'a mut Record),
}

impl<'a> Repr<'a> {
    /// What the value pointer `ptr` stands for.
    ///
    /// # Safety
    /// `ptr` is a value pointer made here ([`Owned`]) and not yet freed, and for `'a`
    /// nothing else reads, writes or frees what it points to.
    #[inline]
    pub unsafe fn from_raw(ptr: *mut c_void) -> Repr<'a> {
        let addr = ptr as usize;
        match addr & TAG {
            // SAFETY: (the caller's) a live `Box<Record>` (its tag is 0), lent to us alone.
            WHOLE => Repr::Whole(unsafe { &mut *ptr.cast::<Record>() }),
            INLINE => Repr::Inline(addr as u64),
            // SAFETY: (the caller's) a live `Box<Cell>` under its tag, lent to us alone.
            COMPACT => Repr::Compact(unsafe { &mut *((addr & !TAG) as *mut Cell) }),
            _ => {
                let block = (addr & !TAG) as *mut u64;
                // SAFETY: (the caller's) a live block that `Owned::rules` made under its tag,
                // lent to us alone: its length, then that many words.
                unsafe {
                    let len = *block as usize;
                    Repr::Rules(std::slice::from_raw_parts_mut(block.add(1), len))
                }
            }
        }
    }

    /// The record this stands for (unpacked from a packed form), or `None` for a packed form
    /// whose slot is gone (which would be a bug).
    pub fn record(self) -> Option<Cow<'a, Record>> {
        match self {
            Repr::Whole(record) => Some(Cow::Borrowed(record)),
            packed => packed.value().map(|value| Cow::Owned(Record::new(value))),
        }
    }

    /// The value a packed form stands for (`None` for a whole record, or a slot gone).
    pub fn value(&self) -> Option<Value> {
        self.unpack(None, &mut [0; MAX_RULES])
            .map(|(value, _)| value)
    }

    /// [`Repr::value`], and what [`Held`] keeps for writing it back. `requested` is the
    /// policy a request names, for a policy key (RL.LIMIT): when the key's words hold exactly
    /// its rules, the value shares them instead of a copy, and `bases` gets their slots'
    /// bases.
    pub fn unpack(&self, requested: Option<&Rules>, bases: &mut Bases) -> Option<(Value, Held)> {
        let table = interner();
        match self {
            Repr::Inline(word) => {
                let interned = *table.get(compact::word_parts(*word).0)?;
                Some((
                    compact::unpack_word(&interned, *word),
                    Held::Interned(interned),
                ))
            }
            Repr::Compact(cell) => {
                let interned = *table.get(cell.params)?;
                let value = compact::unpack(&interned, cell.state());
                Some((value, Held::Interned(interned)))
            }
            Repr::Rules(words) => {
                if let Some(rules) = requested {
                    if let Some(states) = compact::rule_states(words, rules, &table, bases) {
                        let value = Value::RuleSet(Stored {
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

    /// A new value pointer of the same form and contents (`COPY`): an inline word is itself
    /// again, with one more reference to its slot.
    pub fn duplicate(&self) -> Owned {
        match self {
            Repr::Inline(word) => {
                interner().retain(compact::word_parts(*word).0);
                Owned::word(*word)
            }
            Repr::Compact(cell) => {
                interner().retain(cell.params);
                Owned::cell(**cell)
            }
            Repr::Rules(words) => {
                let mut table = interner();
                for &word in words.iter() {
                    table.retain(compact::word_parts(word).0);
                }
                Owned::rules(words)
            }
            Repr::Whole(record) => Owned::whole(Record::clone(record)),
        }
    }
}

/// What a read of a packed form keeps so that writing the key back in the same form needs
/// no lock of the table (the common write): the interned parameters an inline word or a
/// cell names (a copy of its slot); for a policy key read under the rules it was written
/// with, those rules (their slots' bases go to the caller's [`Bases`]).
pub enum Held {
    Nothing,
    Interned(Interned),
    Rules(Rules),
}

/// A value pointer made here that Redis does not hold yet: it becomes a key's value
/// ([`Slot::set`], [`Slot::swap`]), or what `rdb_load` or `copy` returns
/// ([`Owned::into_raw`]). One dropped instead leaks.
#[must_use]
pub struct Owned(*mut c_void);

impl Owned {
    /// `record` in the smallest form that holds it exactly: an inline word, a block of rule
    /// words (a policy), a 16-byte cell, else the whole record (a sliding log, a concurrency
    /// limiter, a key under a block, a state too large for the others).
    pub fn new(record: Record) -> Owned {
        if record.blocked_until_us == 0 {
            let mut table = interner();
            if let Some(word) = compact::pack_word(&record.value, None, &mut table) {
                return Owned::word(word);
            }
            if let Value::RuleSet(s) = &record.value {
                if let Some(words) = compact::pack_rules(&s.params, &s.state, &[], &mut table) {
                    return Owned::rules(&words);
                }
            }
            let base = compact::cell_base(&record.value);
            if let Some((params, state)) = compact::pack(&record.value, base) {
                let id = table.acquire(Interned { params, base });
                return Owned::cell(Cell::new(id, state));
            }
        }
        Owned::whole(record)
    }

    /// The inline word `word` (its tag's bits clear), whose slot reference it takes over.
    pub fn word(word: u64) -> Owned {
        Owned((word as usize | INLINE) as *mut c_void)
    }

    /// A new block holding `words` (a policy's rules), whose slot references it takes over.
    pub fn rules(words: &[u64]) -> Owned {
        let mut block = Vec::with_capacity(words.len() + 1);
        block.push(words.len() as u64);
        block.extend_from_slice(words);
        let block = Box::into_raw(block.into_boxed_slice()).cast::<u64>();
        Owned((block as usize | RULES) as *mut c_void)
    }

    /// A new cell, whose slot reference it takes over.
    fn cell(cell: Cell) -> Owned {
        let cell = Box::into_raw(Box::new(cell));
        Owned((cell as usize | COMPACT) as *mut c_void)
    }

    fn whole(record: Record) -> Owned {
        Owned(Box::into_raw(Box::new(record)).cast::<c_void>())
    }

    /// The pointer, for Redis to hold from here (and to hand back to the callbacks).
    pub fn into_raw(self) -> *mut c_void {
        self.0
    }
}

/// Frees the value pointer `ptr` and gives back the slot references it holds (nothing for
/// null).
///
/// # Safety
/// `ptr` is null or a value pointer made here ([`Owned`]) and not yet freed, which nothing
/// uses again.
pub unsafe fn free_raw(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    let addr = ptr as usize;
    // SAFETY: (the caller's) a live value pointer of ours, which nothing else uses.
    match unsafe { Repr::from_raw(ptr) } {
        Repr::Inline(word) => interner().release(compact::word_parts(word).0),
        Repr::Compact(cell) => {
            let id = cell.params;
            // SAFETY: the cell is the `Box<Cell>` that `Owned::cell` leaked, freed once here.
            drop(unsafe { Box::from_raw(cell as *mut Cell) });
            interner().release(id);
        }
        Repr::Rules(words) => {
            let mut table = interner();
            for &word in words.iter() {
                table.release(compact::word_parts(word).0);
            }
            drop(table);
            let block = (addr & !TAG) as *mut u64;
            // SAFETY: the block is the boxed slice of its length and `len` words that
            // `Owned::rules` leaked (its words are no longer borrowed), freed once here.
            unsafe {
                let len = *block as usize;
                drop(Box::from_raw(ptr::slice_from_raw_parts_mut(block, len + 1)));
            }
        }
        // SAFETY: the record is the `Box<Record>` that `Owned::whole` leaked, freed once here.
        Repr::Whole(record) => drop(unsafe { Box::from_raw(record as *mut Record) }),
    }
}

/// A key's value pointer as [`Slot::get`] found it, lent for as long as the slot is
/// borrowed: [`Lent::repr`] tells what it stands for. (Decoded apart from the lookup, where
/// the caller matches it, so that the compiler jumps from the pointer's tag straight to the
/// caller's arms.)
pub struct Lent<'s> {
    ptr: *mut c_void,
    _slot: PhantomData<&'s mut ()>,
}

impl<'s> Lent<'s> {
    /// What the value pointer stands for, borrowed from the slot.
    #[inline]
    pub fn repr(self) -> Repr<'s> {
        // SAFETY: a value of our type is a pointer this module made (`Owned`), alive while
        // the key is open and until its slot replaces or deletes it, which the borrow of the
        // slot rules out for 's; nothing else touches it during the command (a command
        // opens its key once).
        unsafe { Repr::from_raw(self.ptr) }
    }
}

/// The value of an open key, and the only way to it: what [`Slot::get`] lends borrows the
/// slot, and only the slot's `&mut self` methods replace or delete the value, so nothing
/// lent outlives it. Closed (through its [`RawKey`]) when dropped.
pub struct Slot<'a> {
    raw: RawKey<'a>,
    /// The module's data type (the data type's room hands it in, so that this one needs
    /// nothing from it).
    ty: *mut raw::RedisModuleType,
    /// What [`Slot::ptr`] found (`Some(None)`: no key), until the value is set, replaced or
    /// deleted here: [`Slot::prefetch`] reads it first, the update again.
    read: Option<Option<*mut c_void>>,
}

impl<'a> Slot<'a> {
    /// Opens `name`, a key of the data type `ty` or none, for reading, or for reading and
    /// writing. A command opens a key once: two slots of one key open at a time would lend
    /// its value twice (no command does).
    pub fn open(
        ctx: Ctx<'a>,
        name: RString<'a>,
        write: bool,
        ty: *mut raw::RedisModuleType,
    ) -> Slot<'a> {
        Slot {
            raw: ctx.open_key(name, write),
            ty,
            read: None,
        }
    }

    /// The key's value pointer: `None` when the key does not exist, WRONGTYPE when it holds
    /// another Redis type.
    #[inline]
    fn ptr(&mut self) -> Result<Option<*mut c_void>, Error> {
        if let Some(read) = self.read {
            return Ok(read);
        }
        let read = match self.raw.holds() {
            Holds::Nothing => None,
            Holds::Module(ty) if ty == self.ty => Some(self.raw.value()),
            _ => return Err(Error::WrongType),
        };
        self.read = Some(read);
        Ok(read)
    }

    /// WRONGTYPE when the key holds another Redis type.
    pub fn check(&mut self) -> Result<(), Error> {
        self.ptr().map(|_| ())
    }

    /// The key's value as this module made it, lent by the slot: `None` when the key does
    /// not exist, WRONGTYPE when it holds another Redis type.
    #[inline]
    pub fn get(&mut self) -> Result<Option<Lent<'_>>, Error> {
        Ok(self.ptr()?.map(|ptr| Lent {
            ptr,
            _slot: PhantomData,
        }))
    }

    /// Asks the processor to fetch what the key's value pointer points to (a cell, a block
    /// of rule words, a whole record), so that its first read, after the caller's other work
    /// (the clock, the request), does not wait for memory: a key's cell is allocated apart
    /// from the key itself, and at 100,000 keys it is a cache miss.
    pub fn prefetch(&mut self) {
        let Ok(Some(ptr)) = self.ptr() else {
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

    /// Sets the key's value. Replacing a value re-creates the key, so its expiry is gone:
    /// callers set it again.
    pub fn set(&mut self, value: Owned) {
        let ptr = value.into_raw();
        self.read = Some(Some(ptr));
        self.raw.set_value(self.ty, ptr);
    }

    /// Replaces the value of a key that holds one of ours with `value` (another form of it),
    /// keeping the key itself: its name, its entry in the keyspace and its expiry. `set`
    /// would delete the key and add it again, allocating all of those anew; this frees only
    /// the old value, here, with what it holds.
    pub fn swap(&mut self, value: Owned) {
        let ptr = value.into_raw();
        self.read = Some(Some(ptr));
        let old = self.raw.replace_value(self.ty, ptr);
        // SAFETY: Redis hands back the value it held, of our type (else null), and no longer
        // owns it; nothing borrowed from it lives (a `Repr` borrows this slot).
        unsafe { free_raw(old) };
    }

    /// Replaces the key's inline word with `word`, keeping the key and its expiry; the old
    /// value, a word too, needs nothing freed (its slot's reference is the caller's).
    #[inline]
    pub fn replace_word(&mut self, word: u64) {
        let word = Owned::word(word).into_raw();
        self.read = Some(Some(word));
        self.raw.replace_value(self.ty, word);
    }

    /// Expires the key at `at_ms`, an absolute time on the real clock (ms since the epoch).
    pub fn expire_at(&mut self, at_ms: u64) {
        self.raw.expire_at(at_ms);
    }

    /// Deletes the key.
    pub fn delete(&mut self) {
        self.read = Some(None);
        self.raw.delete();
    }

    /// Signals the key as modified (see [`RawKey::signal_modified`]).
    pub fn signal_modified(&self) {
        self.raw.signal_modified();
    }
}
