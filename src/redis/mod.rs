//! The one room that calls the Redis module API. Everything else talks to Redis through the
//! small safe types here, each tied to the lifetime of what Redis lent it:
//!
//! - [`Ctx`]: a command's (or a timer's, an event's) context: replies, replication, keyspace
//!   notifications, context flags, opening keys, the log;
//! - [`RString`] and [`Argv`]: a command's arguments, read without copying, and the
//!   argument-vector swap that replicates a write without rebuilding it;
//! - [`RawKey`] (in `raw_key.rs`): an open key, which only `storage` uses;
//! - [`Io`], [`Digest`], [`Info`] (in `io.rs`): what the data type's callbacks and the INFO
//!   callback are handed;
//! - command registration, ACL categories and command info (in `command.rs`);
//! - [`KeyReader`] (in `acl.rs`): the calling user's key permissions;
//! - [`watch_resetstat`] (in `filter.rs`): the command filter that sees `CONFIG RESETSTAT`;
//! - [`Timer`] and [`ServerEvent`] (in `events.rs`): timers and server events, each a safe
//!   handler behind an `extern "C"` trampoline, as the commands are behind [`cmd_func`];
//! - [`ClusterReceiver`] (in `cluster.rs`): the module's messages on the cluster bus, sent and
//!   received, and who the cluster's nodes are;
//! - the server's clock, and whether the optional, newer functions exist.
//!
//! The functions every supported server has (Redis 7.0 on) are checked once at load by
//! [`check_api`], which refuses the load, naming what is missing, rather than letting a call
//! abort the server later; after that the crate's own safe wrappers (`raw::open_key`...),
//! which unwrap those pointers, cannot fail. The replies and `RedisModule_ReplicateVerbatim`,
//! called on every request, skip those wrappers and call the checked pointers directly
//! (see [`Ctx::reply_long`]).
//! The functions newer than 7.0 (`RedisModule_CachedMicroseconds`,
//! `RedisModule_SetCommandACLCategories`), and the few with a fallback or nothing to lose
//! (`RedisModule_SetAbsExpire`, the event, timer and server-info functions), are looked up
//! where used and never unwrapped.
//!
//! Unsafe code is in this room and in two files of `storage` only: `storage/pointer.rs`, the
//! value pointer of a key of the data type (its forms, their allocation and freeing, the slot
//! that lends it to an open key), and `storage/data_type.rs`, the data type's `extern "C"`
//! callbacks, which take what Redis hands them. Every other callback (the commands, timers,
//! server events, the command filter) is an `extern "C"` trampoline here around a safe
//! function. Each `unsafe` block says why it is sound (`// SAFETY:`); lib.rs denies
//! `unsafe_op_in_unsafe_fn`, so an `unsafe fn` needs its blocks too, and the algorithms crate
//! forbids unsafe code.

mod acl;
mod cluster;
mod command;
pub mod command_info;
mod events;
mod filter;
mod io;
mod raw_key;

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::slice;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

pub use acl::KeyReader;
pub use cluster::{my_cluster_id, ClusterReceiver, NODE_ID_LEN};
pub use command::{create_command, set_acl_categories, CommandHandle};
pub use events::{ServerEvent, Timer};
pub use filter::{soon, watch_resetstat};
pub use io::{Digest, Info, Io};
pub use raw_key::{Holds, RawKey};

/// A context Redis lent to one call: a command, a timer, an event. `Copy`, and never
/// outlives the call (`'a`).
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    ptr: NonNull<raw::RedisModuleCtx>,
    _call: PhantomData<&'a raw::RedisModuleCtx>,
}

impl<'a> Ctx<'a> {
    /// The context of a callback.
    ///
    /// # Safety
    /// `ptr` is the context Redis passed to the running callback (or null), and the `Ctx` is
    /// used only while that callback runs.
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleCtx) -> Option<Ctx<'a>> {
        NonNull::new(ptr).map(|ptr| Ctx {
            ptr,
            _call: PhantomData,
        })
    }

    /// A context for unit tests, with no server behind it. Without a server every API
    /// pointer is empty, so the calls here that look theirs up do nothing (the context is
    /// never dereferenced); those that go through the crate's wrappers (replies, keys) would
    /// panic, and tests do not reach them.
    #[cfg(test)]
    pub fn detached() -> Ctx<'static> {
        Ctx {
            ptr: NonNull::dangling(),
            _call: PhantomData,
        }
    }

    /// The context of the module's load hook, as the crate hands it over.
    pub fn from_context(ctx: &'a redis_module::Context) -> Option<Ctx<'a>> {
        NonNull::new(ctx.ctx).map(|ptr| Ctx {
            ptr,
            _call: PhantomData,
        })
    }

    #[inline]
    fn raw(self) -> *mut raw::RedisModuleCtx {
        self.ptr.as_ptr()
    }

    /// The context flags (`REDISMODULE_CTX_FLAGS_*`).
    #[inline]
    pub fn flags(self) -> u32 {
        // SAFETY: the context is live for 'a; the pointer is checked at load.
        unsafe { raw::RedisModule_GetContextFlags.map_or(0, |flags| flags(self.raw()) as u32) }
    }

    /// Whether the client speaks RESP3 (`HELLO 3`).
    #[inline]
    pub fn resp3(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
    }

    /// Whether the call comes from the primary (replication link) or the AOF being loaded.
    pub fn replicated_or_loading(self) -> bool {
        self.flags() & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
            != 0
    }

    /// Whether the server has the AOF on.
    pub fn aof_on(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_AOF != 0
    }

    // Replies. Each writes one element of the reply; an array or map header announces how
    // many follow. They call the functions (checked at load) directly: the crate's wrappers
    // convert the status Redis returns (always OK for a command's context) out of line, a
    // call per element of every reply.

    #[inline]
    pub fn reply_array(self, len: usize) {
        // SAFETY: the context is live for 'a; the pointer is checked at load.
        unsafe {
            if let Some(reply) = raw::RedisModule_ReplyWithArray {
                reply(self.raw(), len as _);
            }
        }
    }

    /// A map of `pairs` entries (RESP3); RESP2 clients get a flat array twice as long.
    #[inline]
    pub fn reply_map(self, pairs: usize) {
        // SAFETY: the context is live for 'a; the pointer is checked at load.
        unsafe {
            if let Some(reply) = raw::RedisModule_ReplyWithMap {
                reply(self.raw(), pairs as _);
            }
        }
    }

    #[inline]
    pub fn reply_long(self, n: i64) {
        // SAFETY: the context is live for 'a; the pointer is checked at load.
        unsafe {
            if let Some(reply) = raw::RedisModule_ReplyWithLongLong {
                reply(self.raw(), n);
            }
        }
    }

    /// A boolean (RESP3); 1 or 0 for RESP2 clients.
    #[inline]
    pub fn reply_bool(self, b: bool) {
        // SAFETY: the context is live for 'a; the pointer is checked at load.
        unsafe {
            if let Some(reply) = raw::RedisModule_ReplyWithBool {
                reply(self.raw(), c_int::from(b));
            }
        }
    }

    /// A bulk string; the bytes are copied before this returns.
    #[inline]
    pub fn reply_bytes(self, bytes: &[u8]) {
        // SAFETY: the context is live for 'a; the pointer is checked at load; Redis copies
        // the `len` bytes at `ptr`, which `bytes` holds.
        unsafe {
            if let Some(reply) = raw::RedisModule_ReplyWithStringBuffer {
                reply(self.raw(), bytes.as_ptr().cast::<c_char>(), bytes.len());
            }
        }
    }

    pub fn reply_null(self) {
        // SAFETY: the context is live for 'a; the pointer is checked at load.
        unsafe {
            if let Some(reply) = raw::RedisModule_ReplyWithNull {
                reply(self.raw());
            }
        }
    }

    pub fn reply_ok(self) {
        raw::reply_with_simple_string(self.raw(), c"OK".as_ptr());
    }

    /// An error reply: `text` starts with its error code (`ERR`, `WRONGTYPE`...).
    pub fn reply_error(self, text: &CStr) {
        // SAFETY: the context is live; the text is NUL-terminated and copied by Redis. The
        // crate's `reply_with_error` would unwrap a UTF-8 check and copy it again.
        unsafe {
            if let Some(error) = raw::RedisModule_ReplyWithError {
                error(self.raw(), text.as_ptr());
            }
        }
    }

    // Replication and notification.

    /// Propagates the running command as the client sent it (its argument vector as it is
    /// now: see [`Argv::replicate_swapped`]).
    #[inline]
    pub fn replicate_verbatim(self) {
        // SAFETY: the context is live for 'a; the pointer is checked at load. Called
        // directly, as the replies are.
        unsafe {
            if let Some(replicate) = raw::RedisModule_ReplicateVerbatim {
                replicate(self.raw());
            }
        }
    }

    /// Propagates `command words...` (RL.POLICY.SET from the policies' timer).
    pub fn replicate(self, command: &CStr, words: &[&[u8]]) {
        let strings: Vec<*mut raw::RedisModuleString> =
            words.iter().map(|word| self.create_string(word)).collect();
        // SAFETY: the context is live; `strings` holds `len` strings made here, and "v" tells
        // Redis to read them as a vector; it takes its own references before returning.
        unsafe {
            if let Some(replicate) = raw::RedisModule_Replicate {
                replicate(
                    self.raw(),
                    command.as_ptr(),
                    c"v".as_ptr(),
                    strings.as_ptr(),
                    strings.len(),
                );
            }
        }
        for string in strings {
            self.free_string(string);
        }
    }

    fn create_string(self, bytes: &[u8]) -> *mut raw::RedisModuleString {
        // SAFETY: the context is live; Redis copies the buffer. Checked at load.
        unsafe {
            raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |create| {
                create(self.raw(), bytes.as_ptr().cast::<c_char>(), bytes.len())
            })
        }
    }

    fn free_string(self, string: *mut raw::RedisModuleString) {
        if string.is_null() {
            return;
        }
        // SAFETY: `string` was made by `create_string` with this context and is freed once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeString {
                free(self.raw(), string);
            }
        }
    }

    /// Publishes the module keyspace event `event` on `key` (Redis drops it after one bit
    /// test unless `notify-keyspace-events` asks for module events).
    pub fn notify_module_event(self, event: &CStr, key: RString<'_>) {
        // SAFETY: the context is live, the key one of its strings, the event NUL-terminated.
        unsafe {
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(
                    self.raw(),
                    raw::REDISMODULE_NOTIFY_MODULE as c_int,
                    event.as_ptr(),
                    key.raw(),
                );
            }
        }
    }

    /// Publishes the keyspace event `event` of the class `class` on `key`, as a Redis command
    /// of that class does (RL.COUNTER's `incrby` and `expire`, as INCRBY and PEXPIRE's).
    pub fn notify_keyspace_event(self, class: Event, event: &CStr, key: RString<'_>) {
        let class = match class {
            Event::Generic => raw::REDISMODULE_NOTIFY_GENERIC,
            Event::String => raw::REDISMODULE_NOTIFY_STRING,
        };
        // SAFETY: the context is live, the key one of its strings, the event NUL-terminated.
        unsafe {
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(self.raw(), class as c_int, event.as_ptr(), key.raw());
            }
        }
    }

    /// Reads the Redis string at `name` as `GET` replies it and hands its bytes to `read`
    /// (`None`: no string there). Through `RedisModule_Call`, not the key API: the key API
    /// lends a string's bytes only through `RedisModule_StringDMA`, which first rewrites a
    /// value held as an integer or an embedded string as a plain one (a read that changes
    /// `OBJECT ENCODING` and `MEMORY USAGE`), and on Redis 8.2 leaves a key opened for reading
    /// pointing at the replaced object (the next call on it crashed the server). The call
    /// runs as the module (no ACL check: the command's own key check has passed) and is
    /// counted in `INFO commandstats` as a `GET`.
    pub fn get_string<R>(self, name: RString<'_>, read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        // SAFETY: reads pointers set once at load.
        let pointers = unsafe {
            (
                raw::RedisModule_Call,
                raw::RedisModule_CallReplyType,
                raw::RedisModule_CallReplyStringPtr,
                raw::RedisModule_FreeCallReply,
            )
        };
        let (Some(call), Some(kind), Some(string_ptr), Some(free)) = pointers else {
            return read(None);
        };
        // SAFETY: a live context; "s" tells Redis the one argument is a RedisModuleString,
        // which `name` is (alive for the call). The reply is read while it lives (the bytes
        // are borrowed only inside `read`) and freed once.
        unsafe {
            let reply = call(self.raw(), c"GET".as_ptr(), c"s".as_ptr(), name.raw());
            if reply.is_null() {
                return read(None);
            }
            let mut len = 0;
            let ptr = if kind(reply) == raw::REDISMODULE_REPLY_STRING as c_int {
                string_ptr(reply, &mut len)
            } else {
                std::ptr::null()
            };
            let out = if ptr.is_null() {
                read(None)
            } else {
                read(Some(slice::from_raw_parts(ptr.cast::<u8>(), len)))
            };
            free(reply);
            out
        }
    }

    /// Opens the key `name` for reading, or for reading and writing; closed when dropped.
    #[inline]
    pub fn open_key(self, name: RString<'a>, write: bool) -> RawKey<'a> {
        RawKey::open(self, name, write)
    }

    // The module's load and its callbacks.

    /// Sets the module's options (`REDISMODULE_OPTIONS_*`, all at once).
    pub fn set_module_options(self, options: u32) {
        // SAFETY: the load hook's context.
        unsafe {
            if let Some(set) = raw::RedisModule_SetModuleOptions {
                set(self.raw(), options as c_int);
            }
        }
    }

    /// A signed field of an INFO section (`None`: no such API, section or field).
    pub fn server_info_signed(self, section: &CStr, field: &CStr) -> Option<i64> {
        // SAFETY: reads a pointer set once at load.
        let get = unsafe { raw::RedisModule_ServerInfoGetFieldSigned }?;
        self.with_server_info(section, |data| {
            let mut error: c_int = 0;
            // SAFETY: `data` is live for this call; `field` is a C string.
            let value = unsafe { get(data, field.as_ptr(), &mut error) };
            (error == 0).then_some(value)
        })
    }

    /// A field of an INFO section as text (`None`: no such API, section or field).
    pub fn server_info_text(self, section: &CStr, field: &CStr) -> Option<String> {
        // SAFETY: reads a pointer set once at load.
        let get = unsafe { raw::RedisModule_ServerInfoGetFieldC }?;
        self.with_server_info(section, |data| {
            // SAFETY: `data` is live for this call, and the text it holds is copied before
            // the info data is freed.
            unsafe {
                let text = get(data, field.as_ptr());
                (!text.is_null()).then(|| CStr::from_ptr(text).to_string_lossy().into_owned())
            }
        })
    }

    /// What `read` finds in the INFO `section`, which is fetched, handed to `read` and freed
    /// once (`None`: no such API or section, or `read` found nothing).
    fn with_server_info<R>(
        self,
        section: &CStr,
        read: impl FnOnce(*mut raw::RedisModuleServerInfoData) -> Option<R>,
    ) -> Option<R> {
        // SAFETY: reads pointers set once at load.
        let pointers = unsafe {
            (
                raw::RedisModule_GetServerInfo,
                raw::RedisModule_FreeServerInfo,
            )
        };
        let (Some(info), Some(free)) = pointers else {
            return None;
        };
        // SAFETY: a live context; the info data is freed once, after `read`, which cannot
        // keep it (it is a raw pointer only valid for the call).
        unsafe {
            let data = info(self.raw(), section.as_ptr());
            if data.is_null() {
                return None;
            }
            let value = read(data);
            free(self.raw(), data);
            value
        }
    }

    /// Whether the server keeps a key's name inside its value's object, with no dictionary
    /// entry of its own (Redis 8, Valkey 8): a key then costs less besides its value.
    pub fn embeds_key_names(self) -> bool {
        // Valkey reports a Redis version of 7.2.4, and its own in a field of its own.
        let major = |version: Option<String>| {
            version.and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        };
        let valkey = major(self.server_info_text(c"server", c"valkey_version"));
        let redis = major(self.server_info_text(c"server", c"redis_version"));
        valkey.or(redis).is_some_and(|major| major >= 8)
    }

    /// Writes `message` to the server's log (see [`log`]).
    pub fn log(self, level: &CStr, message: &CStr) {
        log_raw(self.raw(), level, message);
    }
}

/// The class of a keyspace event (`notify-keyspace-events`): `g` generic, `$` string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Generic,
    String,
}

/// The bytes the server's allocator gives a request of `bytes`, as `used_memory` counts them:
/// `RedisModule_MallocSize` of a block allocated here and freed at once (`None`: no such API).
/// A 24-byte request takes 24 bytes on Redis's own jemalloc (built with 8-byte size classes
/// since Redis 4.0) and 32 on Debian's (16-byte classes).
pub fn allocated_size(bytes: usize) -> Option<usize> {
    // SAFETY: reads pointers set once at load.
    let pointers = unsafe {
        (
            raw::RedisModule_Alloc,
            raw::RedisModule_MallocSize,
            raw::RedisModule_Free,
        )
    };
    let (Some(alloc), Some(size), Some(free)) = pointers else {
        return None;
    };
    // SAFETY: a block the server's allocator made, measured while nothing else has it, and
    // freed once.
    unsafe {
        let block = alloc(bytes);
        if block.is_null() {
            return None;
        }
        let allocated = size(block);
        free(block);
        Some(allocated)
    }
}

/// Writes `message` to the server's log without a context (the load hook's log goes here
/// too). The message is the argument of a `%s` format, never the format itself.
pub fn log(level: &CStr, message: &CStr) {
    log_raw(std::ptr::null_mut(), level, message);
}

fn log_raw(ctx: *mut raw::RedisModuleCtx, level: &CStr, message: &CStr) {
    // SAFETY: ctx is a live context or null (the server accepts null for its own log); the
    // format is "%s" with one NUL-terminated argument.
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(ctx, level.as_ptr(), c"%s".as_ptr(), message.as_ptr());
        }
    }
}

/// A Redis string lent for `'a` (a command's argument).
#[derive(Clone, Copy)]
pub struct RString<'a> {
    ptr: NonNull<raw::RedisModuleString>,
    _call: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> RString<'a> {
    #[inline]
    fn raw(self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }

    /// Its bytes, valid while the string lives.
    #[inline]
    pub fn bytes(self) -> &'a [u8] {
        let mut len = 0;
        let ptr = raw::string_ptr_len(self.raw(), &mut len);
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: Redis returns the string's own buffer and length; the string lives for 'a.
        unsafe { slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

/// The argument vector Redis passed to a command: the client's own (`c->argv`).
pub struct Argv<'a> {
    ptr: *mut *mut raw::RedisModuleString,
    len: usize,
    _call: PhantomData<&'a mut [RString<'a>]>,
}

impl<'a> Argv<'a> {
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The argument at `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<RString<'a>> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `ptr` holds `len` strings, alive for the call.
        let string = unsafe { *self.ptr.add(i) };
        NonNull::new(string).map(|ptr| RString {
            ptr,
            _call: PhantomData,
        })
    }

    /// Replicates the command with its name replaced by `name` and its argument 2 by
    /// `carried`, then puts the client's own strings back, so SLOWLOG, MONITOR and all
    /// that follows see what the client sent.
    ///
    /// `RM_Replicate` would look the command name up (an sds copy, a split, a hash) and build
    /// an object per argument, on every admitted request. `RM_ReplicateVerbatim` does
    /// neither: it hands the vector to the propagation queue, which copies the array and takes
    /// a reference to each string. So two slots are swapped for the length of that call;
    /// the argument count and the key's position stay. Nothing happens with fewer than three
    /// arguments.
    pub fn replicate_swapped(&mut self, ctx: Ctx<'_>, name: &SharedString, carried: &[u8]) {
        let name = name.get();
        if self.len < 3 || name.is_null() {
            return;
        }
        let carried = ctx.create_string(carried);
        if carried.is_null() {
            return;
        }
        // SAFETY: the vector is the one Redis passed, `len` (>= 3) strings long, and stays
        // the command's for the whole call (`&mut self`: no reader of it meanwhile; the
        // argument bytes already borrowed point into the client's strings, which are not
        // freed, only taken out of the vector and put back). The swapped-in strings are live
        // while the queue takes its references; the carried string's own reference is
        // released right after.
        unsafe {
            let name_slot = self.ptr;
            let arg_slot = self.ptr.add(2);
            let (client_name, client_arg) = (*name_slot, *arg_slot);
            *name_slot = name;
            *arg_slot = carried;
            ctx.replicate_verbatim();
            *name_slot = client_name;
            *arg_slot = client_arg;
        }
        ctx.free_string(carried);
    }
}

/// A command as Redis runs it: the command table gives each command a type implementing it,
/// and [`cmd_func`] is the `extern "C"` function Redis calls (its `RedisModuleCmdFunc`).
pub trait CmdFunc {
    fn run(ctx: Ctx<'_>, argv: Argv<'_>);
}

/// The `extern "C"` function of the command `F` (registered with [`create_command`]).
pub extern "C" fn cmd_func<F: CmdFunc>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis calls a command's entry point with its live context and `argc` live
    // strings in `argv`, all valid until it returns; neither escapes `F::run`.
    if let Some(ctx) = unsafe { Ctx::from_raw(ctx) } {
        let len = if argv.is_null() {
            0
        } else {
            usize::try_from(argc).unwrap_or(0)
        };
        F::run(
            ctx,
            Argv {
                ptr: argv,
                len,
                _call: PhantomData,
            },
        );
    }
    raw::REDISMODULE_OK as c_int
}

/// A Redis string made once, on first use, and kept for the life of the module (the
/// command name RL.REPLAY swaps into the vector).
pub struct SharedString {
    text: &'static CStr,
    made: AtomicPtr<raw::RedisModuleString>,
}

impl SharedString {
    pub const fn new(text: &'static CStr) -> SharedString {
        SharedString {
            text,
            made: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn get(&self) -> *mut raw::RedisModuleString {
        let made = self.made.load(Ordering::Relaxed);
        if !made.is_null() {
            return made;
        }
        // SAFETY: a NULL context makes a string that no context frees; commands run on the
        // main thread, so it is made once.
        let made = unsafe {
            raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |create| {
                create(
                    std::ptr::null_mut(),
                    self.text.as_ptr(),
                    self.text.to_bytes().len(),
                )
            })
        };
        self.made.store(made, Ordering::Relaxed);
        made
    }
}

/// The server's cached command time in µs, where the server has it (Redis 7.2+).
#[inline]
pub fn cached_micros() -> Option<u64> {
    // SAFETY: the pointer is set once at load and never changes; the function reads the
    // server's clock.
    unsafe {
        raw::RedisModule_CachedMicroseconds.map(|cached| u64::try_from(cached()).unwrap_or(0))
    }
}

/// The server's wall clock in ms.
pub fn milliseconds() -> i64 {
    // SAFETY: as above; checked at load.
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |ms| ms()) }
}

/// Whether the server has `RedisModule_CachedMicroseconds` (Redis 7.2+).
pub fn has_cached_micros() -> bool {
    // SAFETY: reads a pointer set once at load.
    unsafe { raw::RedisModule_CachedMicroseconds }.is_some()
}

/// Whether the server has `RedisModule_SetCommandACLCategories` (Redis 7.2+).
pub fn has_acl_categories() -> bool {
    // SAFETY: reads a pointer set once at load.
    unsafe { raw::RedisModule_SetCommandACLCategories }.is_some()
}

/// Checks, at load, that the server has every module-API function this module calls without
/// a fallback; the name of the first one missing otherwise. Every server from Redis 7.0 on
/// has them all.
pub fn check_api() -> Result<(), &'static str> {
    macro_rules! required {
        ($($name:ident),* $(,)?) => {
            // SAFETY: reads pointers set once at load.
            $(if unsafe { raw::$name }.is_none() {
                return Err(stringify!($name));
            })*
        };
    }
    required!(
        RedisModule_CreateCommand,
        RedisModule_GetContextFlags,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithMap,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithBool,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithSimpleString,
        RedisModule_ReplyWithError,
        RedisModule_ReplicateVerbatim,
        RedisModule_Replicate,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_StringPtrLen,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_ModuleTypeReplaceValue,
        RedisModule_DeleteKey,
        RedisModule_SetExpire,
        RedisModule_GetExpire,
        RedisModule_StringSet,
        RedisModule_Call,
        RedisModule_CallReplyType,
        RedisModule_CallReplyStringPtr,
        RedisModule_FreeCallReply,
        RedisModule_Milliseconds,
        RedisModule_SignalModifiedKey,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_LoadUnsigned,
        RedisModule_LoadStringBuffer,
        // The crate frees a loaded buffer with it.
        RedisModule_Free,
        RedisModule_SaveUnsigned,
        RedisModule_SaveStringBuffer,
        RedisModule_IsIOError,
        RedisModule_EmitAOF,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timer and an event handler that do nothing.
    struct Nothing;

    impl Timer for Nothing {
        fn fire(_: Ctx<'_>) {}
    }

    impl ServerEvent for Nothing {
        const EVENT: u64 = 0;
        fn fired(_: Ctx<'_>, _: u64) {}
    }

    /// A unit test has no server, so no API pointer is set: the same as a server lacking
    /// every function. The load is refused naming one, nothing panics, and the calls that
    /// look their pointer up do nothing.
    #[test]
    fn a_missing_function_is_an_error_not_a_panic() {
        assert_eq!(check_api(), Err("RedisModule_CreateCommand"));
        assert!(!has_cached_micros() && !has_acl_categories());
        assert_eq!(cached_micros(), None);
        let ctx = Ctx::detached();
        assert_eq!(ctx.flags(), 0);
        assert!(!ctx.resp3() && !ctx.replicated_or_loading() && !ctx.aof_on());
        assert_eq!(ctx.server_info_signed(c"persistence", c"x"), None);
        assert!(!ctx.timer::<Nothing>(0) && !ctx.subscribe::<Nothing>());
        ctx.reply_error(c"ERR nothing to reply to");
        ctx.log(c"notice", c"nowhere to log");
        ctx.replicate(c"RL.POLICY.SET", &[b"p", b"GCRA", b"1", b"1", b"1s"]);
    }
}
