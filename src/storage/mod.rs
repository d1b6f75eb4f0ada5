//! The only code that opens keys or sets expiry: the module data type, its persistence
//! callbacks, and key access for the commands.
//!
//! A key's value pointer is one of two things (the low bit tells which; Redis never looks
//! behind a module value's pointer, it only hands it back to the callbacks here):
//! - a [`compact::Cell`] of 16 bytes, interned parameters and a packed state, for every key
//!   whose state packs;
//! - a whole [`Value`], for a sliding log or a state too large to pack.

pub mod codec;
pub mod compact;
pub mod policies;
pub mod value;

use std::borrow::Cow;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::algorithms::{penalty, Decision};
use crate::error::Error;
pub use codec::Entry;
use compact::{interner, Cell};
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

/// The tag on a compact cell's pointer (heap blocks are at least 8-byte aligned).
const COMPACT: usize = 1;

/// What a value pointer points to.
enum Repr<'a> {
    Compact(&'a mut Cell),
    Whole(&'a mut Entry),
}

/// # Safety
/// `ptr` is a value pointer this module made with [`into_raw`], not yet freed.
unsafe fn repr<'a>(ptr: *mut c_void) -> Repr<'a> {
    let addr = ptr as usize;
    if addr & COMPACT != 0 {
        Repr::Compact(&mut *((addr & !COMPACT) as *mut Cell))
    } else {
        Repr::Whole(&mut *ptr.cast::<Entry>())
    }
}

/// A value pointer for `entry`: a compact cell when its state packs and no block is set,
/// else the whole entry.
fn into_raw(entry: Entry) -> *mut c_void {
    if entry.blocked_until_us == 0 {
        if let Some((params, state)) = compact::pack(&entry.value) {
            let id = interner().acquire(params);
            let cell = Box::into_raw(Box::new(Cell::new(id, state)));
            return (cell as usize | COMPACT) as *mut c_void;
        }
    }
    Box::into_raw(Box::new(entry)).cast::<c_void>()
}

/// The value behind a pointer (unpacked from a cell), or `None` for a cell whose parameters
/// are gone (which would be a bug).
///
/// # Safety
/// As for [`repr`].
unsafe fn value_of<'a>(ptr: *mut c_void) -> Option<Cow<'a, Entry>> {
    match repr(ptr) {
        Repr::Whole(entry) => Some(Cow::Borrowed(entry)),
        Repr::Compact(cell) => {
            let params = *interner().get(cell.params)?;
            Some(Cow::Owned(Entry::new(compact::unpack(
                &params,
                cell.state(),
            ))))
        }
    }
}

/// # Safety
/// As for [`repr`]; the pointer is not used again.
unsafe fn free_raw(ptr: *mut c_void) {
    let addr = ptr as usize;
    if addr & COMPACT != 0 {
        let cell = Box::from_raw((addr & !COMPACT) as *mut Cell);
        interner().release(cell.params);
    } else if !ptr.is_null() {
        drop(Box::from_raw(ptr.cast::<Entry>()));
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return ptr::null_mut();
    }
    catch_unwind(|| {
        let Ok(buffer) = raw::load_string_buffer(rdb) else {
            return ptr::null_mut();
        };
        match codec::decode(buffer.as_ref()) {
            Ok(value) => into_raw(value),
            Err(_) => ptr::null_mut(),
        }
    })
    .unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let _ = catch_unwind(|| {
        if let Some(value) = value_of(value) {
            raw::save_slice(rdb, &codec::encode(&value));
        }
    });
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let _ = catch_unwind(|| {
        let Some(value) = value_of(value) else {
            return;
        };
        let blob = codec::encode(&value);
        if let Some(emit) = raw::RedisModule_EmitAOF {
            emit(
                aof,
                LOADSTATE.as_ptr(),
                c"sb".as_ptr(),
                key,
                blob.as_ptr().cast::<c_char>(),
                blob.len(),
            );
        }
    });
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    catch_unwind(|| match repr(value.cast_mut()) {
        Repr::Compact(_) => std::mem::size_of::<Cell>(),
        Repr::Whole(entry) => entry.value.memory() + std::mem::size_of::<u64>(),
    })
    .unwrap_or(0)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let _ = catch_unwind(|| {
        let Some(value) = value_of(value) else {
            return;
        };
        let mut blob = codec::encode(&value);
        if let (Some(add), Some(end)) = (
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestEndSequence,
        ) {
            add(md, blob.as_mut_ptr().cast::<c_char>(), blob.len());
            end(md);
        }
    });
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
        Repr::Compact(cell) => {
            interner().retain(cell.params);
            let copy = Box::into_raw(Box::new(*cell));
            (copy as usize | COMPACT) as *mut c_void
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

/// An open key. Closed when dropped, also when a panic unwinds through the command.
///
/// The module sets `NO_IMPLICIT_SIGNAL_MODIFIED`, so closing a key signals nothing: a key
/// that a call changed (its value set, its state updated, its expiry set, or deleted) is
/// signalled as modified when it is closed, which aborts other clients' `WATCH` and
/// invalidates client-side caches; a key only read (a denial, a DRYRUN) is not.
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    modified: bool,
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from RedisModule_OpenKey and is closed once; ctx and name are
        // the running command's.
        unsafe {
            if self.modified {
                if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                    signal(self.ctx, self.name);
                }
            }
            if let Some(close) = raw::RedisModule_CloseKey {
                close(self.ptr);
            }
        }
    }
}

impl Key {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        write: bool,
    ) -> Key {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and name are the live arguments of the running command.
        let ptr = unsafe { raw::RedisModule_OpenKey.unwrap()(ctx, name.cast(), mode as c_int) };
        Key {
            ptr: ptr.cast(),
            ctx,
            name,
            modified: false,
        }
    }

    /// The key's value pointer: `None` when the key does not exist, WRONGTYPE when it holds
    /// another Redis type.
    fn raw_value(&mut self) -> Result<Option<*mut c_void>, Error> {
        // SAFETY: the key is open.
        unsafe {
            let kind = raw::RedisModule_KeyType.unwrap()(self.ptr);
            if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                return Ok(None);
            }
            if kind != raw::REDISMODULE_KEYTYPE_MODULE as c_int
                || raw::RedisModule_ModuleTypeGetType.unwrap()(self.ptr) != raw_type()
            {
                return Err(Error::WrongType);
            }
            Ok(Some(raw::RedisModule_ModuleTypeGetValue.unwrap()(self.ptr)))
        }
    }

    /// A copy of the key's value (`None`: no key), for reading it whole (RL.INSPECT).
    pub fn snapshot(&mut self) -> Result<Option<Entry>, Error> {
        match self.raw_value()? {
            None => Ok(None),
            // SAFETY: a value of our type is a pointer this module made.
            Some(ptr) => unsafe {
                value_of(ptr)
                    .map(|v| Some(v.into_owned()))
                    .ok_or(Error::Panic)
            },
        }
    }

    /// Decides a request of algorithm `A` on this key: `step` gets the key's stored
    /// parameters and state (`None` for a fresh key) and whether it may write, and returns the
    /// decision, changing the state only when the request is admitted and writes (the
    /// algorithms' contract). When the request writes and is admitted, the key then holds
    /// `params` and the new state. A blocked key refuses everything until its block ends; a
    /// denied request may start a block ([`penalty`]). Returns the decision and whether the
    /// key changed (and so must expire anew and propagate). A key holding another
    /// algorithm's state is an error naming both; nothing changes on any error.
    pub fn update<A: Variant>(
        &mut self,
        params: &A::Params,
        request: Request,
        step: impl FnOnce(Option<(&A::Params, &mut A::State)>, bool) -> (Decision, Option<A::State>),
    ) -> Result<(Decision, bool), Error> {
        let outcome = self.decide::<A>(params, request, step);
        if let Ok((_, true)) = outcome {
            self.modified = true;
        }
        outcome
    }

    /// [`Key::update`] without the bookkeeping of what changed.
    fn decide<A: Variant>(
        &mut self,
        params: &A::Params,
        request: Request,
        step: impl FnOnce(Option<(&A::Params, &mut A::State)>, bool) -> (Decision, Option<A::State>),
    ) -> Result<(Decision, bool), Error> {
        let Request {
            now_us,
            cost,
            write,
            block_ms,
        } = request;
        let other = |value: &Value| Error::OtherAlgorithm {
            stored: value.algorithm_name(),
            requested: A::NAME,
        };
        let Some(ptr) = self.raw_value()? else {
            // A fresh key denies only what can never fit, which starts no block.
            let (decision, fresh) = step(None, write);
            if let (true, Some(state)) = (decision.allowed && write, fresh) {
                let stored = Stored {
                    params: params.clone(),
                    state,
                };
                self.set(into_raw(Entry::new(A::wrap(stored))));
                return Ok((decision, true));
            }
            return Ok((decision, false));
        };
        // SAFETY: a value of our type is a pointer this module made, alive while the key is
        // open; nothing else touches it during the command.
        match unsafe { repr(ptr) } {
            Repr::Whole(entry) => {
                let error = other(&entry.value);
                let stored = A::get_mut(&mut entry.value).ok_or(error)?;
                let blocked = entry.blocked_until_us;
                if blocked > now_us {
                    let (mut decision, _) = step(Some((&stored.params, &mut stored.state)), false);
                    penalty::apply(&mut decision, blocked, now_us);
                    return Ok((decision, false));
                }
                let (mut decision, _) = step(Some((&stored.params, &mut stored.state)), write);
                if decision.allowed && write {
                    stored.params = params.clone();
                    entry.blocked_until_us = 0;
                    return Ok((decision, true));
                }
                match penalty::starts(&decision, cost, write, block_ms, now_us) {
                    Some(until) => {
                        entry.blocked_until_us = until;
                        penalty::apply(&mut decision, until, now_us);
                        Ok((decision, true))
                    }
                    None => Ok((decision, false)),
                }
            }
            Repr::Compact(cell) => {
                let interned = *interner().get(cell.params).ok_or(Error::Panic)?;
                let mut value = compact::unpack(&interned, cell.state());
                let error = other(&value);
                let stored = A::get_mut(&mut value).ok_or(error)?;
                let (mut decision, _) = step(Some((&stored.params, &mut stored.state)), write);
                if !(decision.allowed && write) {
                    // A block keeps the whole entry (a cell has no room for it).
                    return match penalty::starts(&decision, cost, write, block_ms, now_us) {
                        Some(until) => {
                            penalty::apply(&mut decision, until, now_us);
                            self.set(into_raw(Entry {
                                value,
                                blocked_until_us: until,
                            }));
                            Ok((decision, true))
                        }
                        None => Ok((decision, false)),
                    };
                }
                stored.params = params.clone();
                match compact::pack(&value) {
                    Some((packed_params, state)) => {
                        let id = if packed_params == interned {
                            cell.params
                        } else {
                            let mut table = interner();
                            table.release(cell.params);
                            table.acquire(packed_params)
                        };
                        *cell = Cell::new(id, state);
                    }
                    // No longer fits: the key keeps the whole value (the old cell is freed,
                    // and its parameters released, by Redis through `free`).
                    None => self.set(into_raw(Entry::new(value))),
                }
                Ok((decision, true))
            }
        }
    }

    /// The key's state for an algorithm whose values never pack (the concurrency limiter),
    /// for commands that work on it directly; `None` when the key does not exist. A caller
    /// that changes the state then sets the key's expiry or deletes it, which marks the key
    /// modified.
    pub fn whole<A: Variant>(&mut self) -> Result<Option<&mut Stored<A>>, Error> {
        let Some(ptr) = self.raw_value()? else {
            return Ok(None);
        };
        // SAFETY: as in `update`.
        let value: &mut Value = match unsafe { repr(ptr) } {
            Repr::Whole(entry) => &mut entry.value,
            Repr::Compact(cell) => {
                // A packed value is another algorithm's: name it in the error.
                let interned = *interner().get(cell.params).ok_or(Error::Panic)?;
                let value = compact::unpack(&interned, cell.state());
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

    /// Sets the key's value pointer. Replacing a value re-creates the key, so its expiry is
    /// gone: callers set it again.
    fn set(&mut self, ptr: *mut c_void) {
        self.modified = true;
        // SAFETY: the key is open for writing; Redis owns the pointer from here and hands it
        // back to `free`.
        unsafe {
            raw::RedisModule_ModuleTypeSetValue.unwrap()(self.ptr, raw_type(), ptr);
        }
    }

    /// Expires the key at `at_ms`, an absolute time on the real clock (ms since the epoch).
    pub fn expire_at(&mut self, at_ms: u64) {
        self.modified = true;
        let at = i64::try_from(at_ms).unwrap_or(i64::MAX);
        // SAFETY: the key is open for writing and exists.
        unsafe {
            match raw::RedisModule_SetAbsExpire {
                Some(set_abs) => {
                    set_abs(self.ptr, at);
                }
                None => {
                    let now = raw::RedisModule_Milliseconds.unwrap()();
                    raw::RedisModule_SetExpire.unwrap()(self.ptr, at.saturating_sub(now).max(1));
                }
            }
        }
    }

    /// Deletes the key (a fresh key needs no state).
    pub fn delete(&mut self) {
        self.modified = true;
        // SAFETY: the key is open for writing.
        unsafe {
            raw::RedisModule_DeleteKey.unwrap()(self.ptr);
        }
    }
}
