//! The only code that opens keys or sets expiry: the module data type, its persistence
//! callbacks, and key access for the commands.

pub mod codec;
pub mod value;

use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::error::Error;
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
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
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

/// # Safety
/// `value` is a pointer this module stored with `ModuleTypeSetValue`.
unsafe fn value_ref<'a>(value: *mut c_void) -> &'a Value {
    &*value.cast::<Value>()
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
            Ok(value) => Box::into_raw(Box::new(value)).cast::<c_void>(),
            Err(_) => ptr::null_mut(),
        }
    })
    .unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let _ = catch_unwind(|| {
        raw::save_slice(rdb, &codec::encode(value_ref(value)));
    });
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let _ = catch_unwind(|| {
        let blob = codec::encode(value_ref(value));
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
    catch_unwind(|| value_ref(value.cast_mut()).memory()).unwrap_or(0)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let _ = catch_unwind(|| {
        let mut blob = codec::encode(value_ref(value));
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
    if !value.is_null() {
        drop(Box::from_raw(value.cast::<Value>()));
    }
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    catch_unwind(AssertUnwindSafe(|| {
        let copy = value_ref(value.cast_mut()).clone();
        Box::into_raw(Box::new(copy)).cast::<c_void>()
    }))
    .unwrap_or(ptr::null_mut())
}

/// An open key. Closed when dropped, also when a panic unwinds through the command.
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from RedisModule_OpenKey and is closed once.
        unsafe {
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
        Key { ptr: ptr.cast() }
    }

    /// The key's value: `None` when the key does not exist, WRONGTYPE when it holds another
    /// Redis type.
    pub fn value(&mut self) -> Result<Option<&mut Value>, Error> {
        // SAFETY: the key is open; a module value of our type is a Box<Value> we stored.
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
            let value = raw::RedisModule_ModuleTypeGetValue.unwrap()(self.ptr).cast::<Value>();
            Ok(value.as_mut())
        }
    }

    /// The key's state for algorithm `A`, or the error naming both algorithms.
    pub fn stored<A: Variant>(&mut self) -> Result<Option<&mut Stored<A>>, Error> {
        match self.value()? {
            None => Ok(None),
            Some(value) => {
                let stored_name = value.algorithm_name();
                A::get_mut(value).map(Some).ok_or(Error::OtherAlgorithm {
                    stored: stored_name,
                    requested: A::NAME,
                })
            }
        }
    }

    /// Stores `value` (in place when the key already holds one of ours).
    pub fn write(&mut self, value: Value) {
        match self.value() {
            Ok(Some(existing)) => *existing = value,
            _ => {
                let boxed = Box::into_raw(Box::new(value)).cast::<c_void>();
                // SAFETY: the key is open for writing; Redis owns the box from here and
                // hands it back to `free`.
                unsafe {
                    raw::RedisModule_ModuleTypeSetValue.unwrap()(self.ptr, raw_type(), boxed);
                }
            }
        }
    }

    /// Expires the key at `at_ms`, an absolute time on the real clock (ms since the epoch).
    pub fn expire_at(&mut self, at_ms: u64) {
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
        // SAFETY: the key is open for writing.
        unsafe {
            raw::RedisModule_DeleteKey.unwrap()(self.ptr);
        }
    }
}
