//! The module's data type: its registration ([`RL_TYPE`]) and the `extern "C"` callbacks
//! Redis calls with a key's value pointer (RDB load and save, AOF rewrite, memory usage,
//! digest, free, copy) or with the policies' aux data in the RDB.
//!
//! Every callback decodes every form of the value pointer, and writes (RDB, AOF, digest) the
//! same bytes whatever the form: the form is the server's own business. Each runs behind a
//! panic guard. Their unsafe blocks take what Redis hands them: a stream or a digest
//! (through `crate::redis`), and the value pointer, borrowed or freed through
//! [`super::pointer`].

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::codec;
use super::compact::Cell;
use super::pointer::{free_raw, Owned, Repr};
use super::policies;
use crate::redis::{Digest, Io, RString};

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
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
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
const LOADSTATE: &std::ffi::CStr = c"RL.LOADSTATE";

/// The type's handle, as Redis registered it (what a key of this type holds).
pub fn raw_type() -> *mut raw::RedisModuleType {
    *RL_TYPE.raw_type.borrow()
}

/// # Safety
/// Redis calls it with the stream it loads from.
unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return ptr::null_mut();
    }
    // SAFETY: the stream Redis passed to this callback, used only while it runs.
    let Some(io) = (unsafe { Io::from_raw(rdb) }) else {
        return ptr::null_mut();
    };
    catch_unwind(|| {
        io.with_bytes(|buffer| match codec::decode(buffer) {
            Ok(record) => Owned::new(record).into_raw(),
            Err(_) => ptr::null_mut(),
        })
        .unwrap_or(ptr::null_mut())
    })
    .unwrap_or(ptr::null_mut())
}

/// # Safety
/// Redis calls it with the stream it saves to and a value of this type.
unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: the stream Redis passed to this callback, used only while it runs.
    let Some(io) = (unsafe { Io::from_raw(rdb) }) else {
        return;
    };
    let _ = catch_unwind(|| {
        // SAFETY: a value of our type (a pointer made by `Owned`), which nothing else
        // touches while Redis saves it.
        let repr = unsafe { Repr::from_raw(value) };
        if let Some(record) = repr.record() {
            io.save_bytes(&codec::encode(&record));
        }
    });
}

/// # Safety
/// Redis calls it with the rewrite's stream, a key's name and its value, of this type.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: the stream and key Redis passed to this callback, used only while it runs.
    let (Some(io), Some(key)) = (unsafe { (Io::from_raw(aof), RString::from_raw(key)) }) else {
        return;
    };
    let _ = catch_unwind(|| {
        // SAFETY: a value of our type, which nothing else touches while Redis rewrites it.
        let repr = unsafe { Repr::from_raw(value) };
        if let Some(record) = repr.record() {
            io.emit_aof(LOADSTATE, key, &codec::encode(&record));
        }
    });
}

/// What a key of this type costs the server beyond what `MEMORY USAGE` counts by itself (the
/// key's name and its entry in the keyspace, at the entry's 24 bytes), so that `MEMORY USAGE`
/// of a key is within 5% of what storing it took (`make bench` and tests/integration/memory.rs check it).
/// Where the name has an entry of its own (Redis 7): the value's object and the module's
/// wrapper around our pointer (16-byte requests), the key's entry in the expiry table (a
/// 24-byte request: every key of ours expires), what the allocator adds to the 24 bytes of its
/// entry in the keyspace, and its share of both tables' buckets: 21 bytes at 100,000 keys (two
/// tables of 2^17 buckets of 8 bytes). Each request is counted at what the server's allocator
/// gives it, asked at load: the layout is the same from Redis 7.0 to 7.4, the allocator is
/// not. Redis's own jemalloc has 8-byte size classes (a 24-byte request takes 24), Debian's
/// 16-byte ones (it takes 32): 77 bytes (Redis 7.4.1 as Redis builds it, Redis Stack's) or 93
/// (Debian's Redis 7.0.15); measured: an inline key of ours takes 116.7 and 132.7 bytes
/// (docs/performance.md, Memory).
/// Redis 8 and Valkey 8 embed the name in the object and need no entries: 52 bytes, measured.
static KEY_OVERHEAD: AtomicUsize = AtomicUsize::new(key_overhead_with_entries(16, 32));
const KEY_OVERHEAD_EMBEDDED: usize = 52;
/// A key's share of the buckets of the keyspace and of the expiry table (see [`KEY_OVERHEAD`]).
const BUCKETS_PER_KEY: usize = 21;

/// [`KEY_OVERHEAD`] where the name has entries, for an allocator that gives a 16-byte request
/// `small` bytes and a 24-byte one `entry`.
const fn key_overhead_with_entries(small: usize, entry: usize) -> usize {
    2 * small + entry + entry.saturating_sub(24) + BUCKETS_PER_KEY
}

/// The spacing of the allocator's size classes up to 8 of them (jemalloc's quantum), which
/// [`size_class`] rounds a cell or a policy's words to: 8 bytes in Redis's own jemalloc (a
/// policy of two rules, 24 bytes, takes 24), 16 in Debian's (it takes 32). Asked at load.
static SIZE_SPACING: AtomicUsize = AtomicUsize::new(16);

/// Sets what [`mem_usage`] counts (at load): for the key around a value, whether the server
/// embeds key names in their objects ([`crate::redis::Ctx::embeds_key_names`]) and what its
/// allocator gives the key's blocks ([`crate::redis::allocated_size`]; without that API,
/// Debian's jemalloc is assumed); for a value's blocks, the spacing of its size classes.
pub fn count_key_overhead(embedded: bool) {
    let allocated = |n: usize| crate::redis::allocated_size(n).unwrap_or(size_class(n));
    let spacing = if allocated(24) == 24 { 8 } else { 16 };
    SIZE_SPACING.store(spacing, Ordering::Relaxed);
    let bytes = if embedded {
        KEY_OVERHEAD_EMBEDDED
    } else {
        key_overhead_with_entries(allocated(16), allocated(24))
    };
    KEY_OVERHEAD.store(bytes, Ordering::Relaxed);
}

/// The bytes the allocator hands out for a request of `n` bytes (jemalloc's size classes: 8,
/// then [`SIZE_SPACING`] apart up to 8 of it, then four to each doubling).
fn size_class(n: usize) -> usize {
    let spacing = SIZE_SPACING.load(Ordering::Relaxed);
    match n {
        0..=8 => 8,
        _ if n <= 8 * spacing => n.next_multiple_of(spacing),
        _ => n.next_multiple_of(1 << ((n - 1).ilog2() - 2)),
    }
}

/// # Safety
/// Redis calls it with a value of this type.
unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    catch_unwind(|| {
        // SAFETY: a value of our type, which nothing else touches while Redis measures it.
        let repr = unsafe { Repr::from_raw(value.cast_mut()) };
        KEY_OVERHEAD.load(Ordering::Relaxed)
            + match repr {
                Repr::Inline(_) => 0,
                Repr::Compact(_) => size_class(std::mem::size_of::<Cell>()),
                Repr::Rules(words) => size_class((words.len() + 1) * 8),
                Repr::Whole(record) => record.value.memory() + std::mem::size_of::<u64>(),
            }
    })
    .unwrap_or(0)
}

/// # Safety
/// Redis calls it with `DEBUG DIGEST`'s digest and a value of this type.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: the digest Redis passed to this callback, used only while it runs.
    let Some(mut md) = (unsafe { Digest::from_raw(md) }) else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a value of our type, which nothing else touches while Redis digests it.
        let repr = unsafe { Repr::from_raw(value) };
        if let Some(record) = repr.record() {
            md.add_sequence(&mut codec::encode(&record));
        }
    }));
}

/// # Safety
/// Redis calls it with a value of this type that it no longer holds (also from its lazy-free
/// thread).
unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: a value of our type that Redis hands back for good: nothing uses it again.
    let _ = catch_unwind(|| unsafe { free_raw(value) });
}

/// # Safety
/// Redis calls it with a value of this type (`COPY`), which it keeps.
unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    catch_unwind(|| {
        // SAFETY: a value of our type, which nothing else touches while Redis copies it.
        let repr = unsafe { Repr::from_raw(value.cast_mut()) };
        repr.duplicate().into_raw()
    })
    .unwrap_or(ptr::null_mut())
}

/// Writes every policy before the keys of an RDB ([`policies::write_aux`]).
///
/// # Safety
/// Redis calls it with the stream it saves to.
unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    // SAFETY: the stream Redis passed to this callback, used only while it runs.
    let Some(io) = (unsafe { Io::from_raw(rdb) }) else {
        return;
    };
    let _ = catch_unwind(|| policies::write_aux(io));
}

/// Reads the policies [`aux_save`] wrote ([`policies::read_aux`]); the load fails when they
/// do not read, or come from another version or place in the file.
///
/// # Safety
/// Redis calls it with the stream it loads from.
unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    const ERR: c_int = raw::REDISMODULE_ERR as c_int;
    // SAFETY: the stream Redis passed to this callback, used only while it runs.
    let Some(io) = (unsafe { Io::from_raw(rdb) }) else {
        return ERR;
    };
    let known = encver == ENCODING_VERSION && when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int;
    match catch_unwind(|| policies::read_aux(io, known)) {
        Ok(Ok(())) => raw::REDISMODULE_OK as c_int,
        _ => ERR,
    }
}
