//! The command filter that tells the module of `CONFIG RESETSTAT`, and the timer it sets
//! from the module's own context (a filter runs before the command, which may yet be
//! refused).

use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::{Ctx, Timer};

/// What the command filter calls when a client sends `CONFIG RESETSTAT`, before the server
/// runs (or refuses) it.
static ON_RESETSTAT: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// A context of the module's own that outlives any call (for the timer the filter sets).
static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Registers a command filter that calls `on_resetstat` when a client sends
/// `CONFIG RESETSTAT` (any case, exactly two words); whether the server took it. The filter
/// runs before every command a client sends: it counts the words and stops there for
/// anything but a two-word command.
pub fn watch_resetstat(ctx: Ctx, on_resetstat: fn()) -> bool {
    ON_RESETSTAT.store(on_resetstat as *mut (), Ordering::Relaxed);
    // SAFETY: the load hook's context; the filter is a `'static` function.
    unsafe {
        if let Some(detach) = raw::RedisModule_GetDetachedThreadSafeContext {
            DETACHED.store(detach(ctx.raw()), Ordering::Relaxed);
        }
        raw::RedisModule_RegisterCommandFilter.is_some_and(|register| {
            !register(
                ctx.raw(),
                Some(filter),
                raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
            )
            .is_null()
        })
    }
}

/// Runs `T` from the event loop at once, outside any command (the filter's timer).
pub fn soon<T: Timer>() -> bool {
    let ctx = DETACHED.load(Ordering::Relaxed);
    // SAFETY: the detached context lives as long as the module.
    unsafe { Ctx::from_raw(ctx) }.is_some_and(|ctx| ctx.timer::<T>(0))
}

fn filter_word(fctx: *mut raw::RedisModuleCommandFilterCtx, pos: c_int, word: &[u8]) -> bool {
    // SAFETY: the filter's context, valid during the callback; `pos` below its count.
    unsafe {
        let (Some(get), Some(ptr_len)) = (
            raw::RedisModule_CommandFilterArgGet,
            raw::RedisModule_StringPtrLen,
        ) else {
            return false;
        };
        let s = get(fctx, pos);
        if s.is_null() {
            return false;
        }
        let mut len = 0usize;
        let p: *const c_char = ptr_len(s, &mut len);
        !p.is_null()
            && len == word.len()
            && std::slice::from_raw_parts(p.cast::<u8>(), len).eq_ignore_ascii_case(word)
    }
}

extern "C" fn filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the filter's context, valid during the callback.
        let count = unsafe { raw::RedisModule_CommandFilterArgsCount.map_or(0, |n| n(fctx)) };
        if count != 2 || !filter_word(fctx, 0, b"CONFIG") || !filter_word(fctx, 1, b"RESETSTAT") {
            return;
        }
        let f = ON_RESETSTAT.load(Ordering::Relaxed);
        if !f.is_null() {
            // SAFETY: stored from a `fn()` by watch_resetstat.
            let f: fn() = unsafe { std::mem::transmute::<*mut (), fn()>(f) };
            f();
        }
    });
}
