//! What the data type's callbacks (RDB, AOF rewrite, digest) and the INFO callback are
//! handed, behind safe methods.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr::NonNull;

use redis_module::{raw, InfoContext};

use super::RString;

/// An RDB or AOF stream lent to one callback.
#[derive(Clone, Copy)]
pub struct Io<'a> {
    ptr: NonNull<raw::RedisModuleIO>,
    _call: PhantomData<&'a raw::RedisModuleIO>,
}

impl<'a> Io<'a> {
    /// # Safety
    /// `ptr` is the stream Redis passed to the running callback, used only while it runs.
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleIO) -> Option<Io<'a>> {
        NonNull::new(ptr).map(|ptr| Io {
            ptr,
            _call: PhantomData,
        })
    }

    fn raw(self) -> *mut raw::RedisModuleIO {
        self.ptr.as_ptr()
    }

    /// An unsigned number, or `Err` on a read error (a damaged stream).
    pub fn load_unsigned(self) -> Result<u64, ()> {
        raw::load_unsigned(self.raw()).map_err(|_| ())
    }

    /// A string's bytes (copied out), or `Err` on a read error.
    pub fn load_bytes(self) -> Result<Vec<u8>, ()> {
        raw::load_string_buffer(self.raw())
            .map(|buffer| buffer.as_ref().to_vec())
            .map_err(|_| ())
    }

    /// Calls `f` with a string's bytes, read in place, or `Err` on a read error.
    pub fn with_bytes<T>(self, f: impl FnOnce(&[u8]) -> T) -> Result<T, ()> {
        raw::load_string_buffer(self.raw())
            .map(|buffer| f(buffer.as_ref()))
            .map_err(|_| ())
    }

    pub fn save_unsigned(self, n: u64) {
        raw::save_unsigned(self.raw(), n);
    }

    pub fn save_bytes(self, bytes: &[u8]) {
        raw::save_slice(self.raw(), bytes);
    }

    /// Writes `command key blob` to a rewritten AOF.
    pub fn emit_aof(self, command: &CStr, key: RString<'_>, blob: &[u8]) {
        // SAFETY: the stream is the rewrite's; "sb" reads one Redis string and one buffer
        // with its length, all live for the call.
        unsafe {
            if let Some(emit) = raw::RedisModule_EmitAOF {
                emit(
                    self.raw(),
                    command.as_ptr(),
                    c"sb".as_ptr(),
                    key.raw(),
                    blob.as_ptr().cast::<c_char>(),
                    blob.len(),
                );
            }
        }
    }

    /// Logs why a load failed, in the server's log (as a `%s` argument, never a format).
    pub fn log_error(self, message: &CStr) {
        // SAFETY: the live stream; the format is "%s" with one NUL-terminated argument.
        unsafe {
            if let Some(log) = raw::RedisModule_LogIOError {
                log(
                    self.raw(),
                    c"warning".as_ptr(),
                    c"%s".as_ptr(),
                    message.as_ptr(),
                );
            }
        }
    }
}

/// A Redis string a callback was handed (the key an AOF rewrite writes).
impl<'a> RString<'a> {
    /// # Safety
    /// `ptr` is a string Redis passed to the running callback, used only while it runs.
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleString) -> Option<RString<'a>> {
        NonNull::new(ptr).map(|ptr| RString {
            ptr,
            _call: PhantomData,
        })
    }
}

/// `DEBUG DIGEST`'s digest lent to one callback.
pub struct Digest<'a> {
    ptr: NonNull<raw::RedisModuleDigest>,
    _call: PhantomData<&'a raw::RedisModuleDigest>,
}

impl<'a> Digest<'a> {
    /// # Safety
    /// `ptr` is the digest Redis passed to the running callback, used only while it runs.
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleDigest) -> Option<Digest<'a>> {
        NonNull::new(ptr).map(|ptr| Digest {
            ptr,
            _call: PhantomData,
        })
    }

    /// Adds `bytes` as one element and ends the sequence.
    pub fn add_sequence(&mut self, bytes: &mut [u8]) {
        // SAFETY: the live digest; the buffer is read during the call only.
        unsafe {
            if let (Some(add), Some(end)) = (
                raw::RedisModule_DigestAddStringBuffer,
                raw::RedisModule_DigestEndSequence,
            ) {
                add(
                    self.ptr.as_ptr(),
                    bytes.as_mut_ptr().cast::<c_char>(),
                    bytes.len(),
                );
                end(self.ptr.as_ptr());
            }
        }
    }
}

/// The INFO callback's context.
pub struct Info<'a> {
    ptr: *mut raw::RedisModuleInfoCtx,
    _call: PhantomData<&'a InfoContext>,
}

impl<'a> Info<'a> {
    pub fn new(ctx: &'a InfoContext) -> Info<'a> {
        Info {
            ptr: ctx.ctx,
            _call: PhantomData,
        }
    }

    /// Starts the section `ratelimit_<name>`; false when INFO asked for other sections.
    pub fn section(&self, name: &CStr) -> bool {
        // SAFETY: the INFO call's live context; the name is NUL-terminated.
        unsafe {
            raw::RedisModule_InfoAddSection.is_some_and(|section| {
                section(self.ptr, name.as_ptr()) == raw::REDISMODULE_OK as i32
            })
        }
    }

    pub fn field(&self, name: &CStr, value: u64) {
        // SAFETY: as above.
        unsafe {
            if let Some(field) = raw::RedisModule_InfoAddFieldULongLong {
                field(self.ptr, name.as_ptr(), value);
            }
        }
    }

    /// A field of text (`name:text`).
    pub fn text(&self, name: &CStr, value: &CStr) {
        // SAFETY: as above; the value is NUL-terminated and only read during the call.
        unsafe {
            if let Some(field) = raw::RedisModule_InfoAddFieldCString {
                field(self.ptr, name.as_ptr(), value.as_ptr().cast_mut());
            }
        }
    }

    /// Starts a dictionary field (`name:a=1,b=2`); [`Info::field`] adds to it until
    /// [`Info::end_dict`].
    pub fn begin_dict(&self, name: &CStr) {
        // SAFETY: as above.
        unsafe {
            if let Some(begin) = raw::RedisModule_InfoBeginDictField {
                begin(self.ptr, name.as_ptr());
            }
        }
    }

    pub fn end_dict(&self) {
        // SAFETY: as above.
        unsafe {
            if let Some(end) = raw::RedisModule_InfoEndDictField {
                end(self.ptr);
            }
        }
    }
}
