//! An open key, closed when dropped. Only `storage` uses it: the rest of the module goes
//! through `storage::Key`, which knows what the value behind the pointer is.

use std::os::raw::{c_int, c_void};

use redis_module::raw;

use super::{Ctx, RString};

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    Nothing,
    /// A value of the module data type `ty` (compare with the type's own pointer).
    Module(*mut raw::RedisModuleType),
    /// A Redis string (RL.COUNTER's).
    String,
    /// A value of another Redis type.
    Other,
}

/// A key opened by the running command; closed (also when a panic unwinds) when dropped.
pub struct RawKey<'a> {
    /// Null when the key was opened for reading and does not exist: every function used on
    /// it below accepts that (`KeyType` says empty, `CloseKey` does nothing), and the
    /// writing ones are only reached for a key opened for writing, which is never null.
    ptr: *mut raw::RedisModuleKey,
    ctx: Ctx<'a>,
    name: RString<'a>,
}

impl Drop for RawKey<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            raw::close_key(self.ptr);
        }
    }
}

impl<'a> RawKey<'a> {
    pub(super) fn open(ctx: Ctx<'a>, name: RString<'a>, write: bool) -> RawKey<'a> {
        let mode = if write {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        RawKey {
            ptr: raw::open_key(ctx.raw(), name.raw(), mode),
            ctx,
            name,
        }
    }

    /// What the key holds.
    #[inline]
    pub fn holds(&self) -> Holds {
        if self.ptr.is_null() {
            return Holds::Nothing;
        }
        // SAFETY: the key is open (checked at load: both functions exist).
        unsafe {
            let kind = raw::RedisModule_KeyType.map_or(0, |kind| kind(self.ptr));
            if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                Holds::Nothing
            } else if kind == raw::REDISMODULE_KEYTYPE_STRING as c_int {
                Holds::String
            } else if kind == raw::REDISMODULE_KEYTYPE_MODULE as c_int {
                Holds::Module(
                    raw::RedisModule_ModuleTypeGetType
                        .map_or(std::ptr::null_mut(), |ty| ty(self.ptr)),
                )
            } else {
                Holds::Other
            }
        }
    }

    /// The module value's pointer (call only when [`RawKey::holds`] says `Module`).
    #[inline]
    pub fn value(&self) -> *mut c_void {
        if self.ptr.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the key is open and holds a module value.
        unsafe {
            raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |get| get(self.ptr))
        }
    }

    /// Sets the key's value to `value` of the data type `ty`; Redis owns it from here and
    /// hands it back to the type's `free`. Replacing a value re-creates the key, so its
    /// expiry is gone.
    pub fn set_value(&mut self, ty: *mut raw::RedisModuleType, value: *mut c_void) {
        // SAFETY: the key is open for writing (never null then); `ty` is the module's type.
        unsafe {
            if let Some(set) = raw::RedisModule_ModuleTypeSetValue {
                set(self.ptr, ty, value);
            }
        }
    }

    /// Replaces the key's value, of the data type `ty`, with `value`, keeping the key and its
    /// expiry; returns the old value, which Redis no longer owns (nor frees).
    pub fn replace_value(
        &mut self,
        ty: *mut raw::RedisModuleType,
        value: *mut c_void,
    ) -> *mut c_void {
        let mut old = std::ptr::null_mut();
        // SAFETY: the key is open for writing and holds a value of `ty` (the caller read it).
        unsafe {
            if let Some(replace) = raw::RedisModule_ModuleTypeReplaceValue {
                replace(self.ptr, ty, value, &mut old);
            }
        }
        old
    }

    /// Expires the key at `at_ms`, an absolute time on the real clock (ms since the epoch).
    pub fn expire_at(&mut self, at_ms: u64) {
        let at = i64::try_from(at_ms).unwrap_or(i64::MAX);
        // SAFETY: reads a pointer set once at load (present on every server since 7.0, but
        // looked up like the newer ones: the fallback costs nothing).
        let set_abs = unsafe { raw::RedisModule_SetAbsExpire };
        match set_abs {
            // SAFETY: the key is open for writing and exists.
            Some(set_abs) => unsafe {
                set_abs(self.ptr, at);
            },
            None => {
                raw::set_expire(self.ptr, at.saturating_sub(super::milliseconds()).max(1));
            }
        }
    }

    /// The bytes of the Redis string the key (open for writing) holds, through
    /// `RedisModule_StringDMA` in write mode: a value held as an integer or an embedded string
    /// is first made a plain one of the same bytes (`OBJECT ENCODING` says `raw` after), which
    /// a key about to be written takes anyway. `None`: no string there.
    pub fn string_for_write(&mut self) -> Option<&[u8]> {
        if self.holds() != Holds::String {
            return None;
        }
        let mut len = 0;
        let ptr = raw::string_dma(self.ptr, &mut len, raw::KeyMode::WRITE);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: DMA lends `len` bytes of the key's string until the key is next written or
        // closed; the borrow of `self` ends before either.
        Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }

    /// Sets the key to the Redis string `bytes` (a key of another type, or none, is replaced).
    /// As SET without KEEPTTL, the key loses its TTL: set one after.
    pub fn set_string(&mut self, bytes: &[u8]) {
        let string = self.ctx.create_string(bytes);
        if string.is_null() {
            return;
        }
        // The key is open for writing (never null then); Redis takes its own reference to
        // the string, so this one is freed after.
        raw::string_set(self.ptr, string);
        self.ctx.free_string(string);
    }

    /// When the key expires, in ms since the Unix epoch (`None`: no TTL, or no key).
    pub fn expire_at_ms(&self) -> Option<u64> {
        // Redis 8.2 reads the value's expiry before it checks that there is a value: a key
        // opened for writing that holds nothing would crash it.
        if self.holds() == Holds::Nothing {
            return None;
        }
        // SAFETY: reads a pointer set once at load (Redis 6.2.2 on: looked up all the same).
        let get_abs = unsafe { raw::RedisModule_GetAbsExpire };
        let at = match get_abs {
            // SAFETY: the key is open.
            Some(get_abs) => unsafe { get_abs(self.ptr) },
            None => {
                let ttl = self.ttl_ms()?;
                return u64::try_from(super::milliseconds()).ok()?.checked_add(ttl);
            }
        };
        u64::try_from(at).ok()
    }

    /// The key's TTL in ms as `PTTL` says it (`None`: no TTL, or no key).
    pub fn ttl_ms(&self) -> Option<u64> {
        // As in `expire_at_ms`.
        if self.holds() == Holds::Nothing {
            return None;
        }
        // SAFETY: the key is open (checked at load: the function exists).
        let ttl = unsafe { raw::RedisModule_GetExpire.map_or(-1, |get| get(self.ptr)) };
        u64::try_from(ttl).ok()
    }

    /// Expires the key `ms` from now, as `PEXPIRE` does (the server's clock).
    pub fn expire_in(&mut self, ms: u64) {
        raw::set_expire(self.ptr, i64::try_from(ms).unwrap_or(i64::MAX));
    }

    /// Deletes the key.
    pub fn delete(&mut self) {
        // SAFETY: the key is open for writing.
        unsafe {
            if let Some(delete) = raw::RedisModule_DeleteKey {
                delete(self.ptr);
            }
        }
    }

    /// Signals the key as modified (aborting other clients' `WATCH`, invalidating tracked
    /// copies): the module sets `NO_IMPLICIT_SIGNAL_MODIFIED`, so closing a key does not.
    pub fn signal_modified(&self) {
        // SAFETY: ctx and name are the running command's.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(self.ctx.raw(), self.name.raw());
            }
        }
    }
}
