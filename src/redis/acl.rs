//! The calling user's key permissions (RL.TOP lists only the key names its caller may read),
//! and the command filter that tells the module of `CONFIG RESETSTAT`.

use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::Ctx;

/// The user running a command, to check key names against its ACL; freed when dropped.
pub struct KeyReader<'a> {
    ctx: Ctx<'a>,
    user: NonNull<raw::RedisModuleUser>,
}

impl<'a> KeyReader<'a> {
    /// The calling user of `ctx`; `None` when the server lacks the ACL functions or the
    /// user cannot be found (then the caller may read no key name).
    pub fn caller(ctx: Ctx<'a>) -> Option<KeyReader<'a>> {
        // SAFETY: a live command context; the name is freed once, after the lookup; the
        // user is owned by the KeyReader and freed in Drop.
        unsafe {
            let (Some(name_of), Some(user_of), Some(_), Some(_)) = (
                raw::RedisModule_GetCurrentUserName,
                raw::RedisModule_GetModuleUserFromUserName,
                raw::RedisModule_ACLCheckKeyPermissions,
                raw::RedisModule_FreeModuleUser,
            ) else {
                return None;
            };
            let name = name_of(ctx.raw());
            if name.is_null() {
                return None;
            }
            let user = user_of(name);
            ctx.free_string(name);
            NonNull::new(user).map(|user| KeyReader { ctx, user })
        }
    }

    /// Whether the user may read the key named `key` (its ACL key patterns, `~` or `%R~`).
    pub fn may_read(&self, key: &[u8]) -> bool {
        let name = self.ctx.create_string(key);
        if name.is_null() {
            return false;
        }
        // SAFETY: the user is live (owned), the string made above and freed once.
        let ok = unsafe {
            raw::RedisModule_ACLCheckKeyPermissions.is_some_and(|check| {
                check(
                    self.user.as_ptr(),
                    name,
                    raw::REDISMODULE_CMD_KEY_ACCESS as c_int,
                ) == raw::REDISMODULE_OK as c_int
            })
        };
        self.ctx.free_string(name);
        ok
    }
}

impl Drop for KeyReader<'_> {
    fn drop(&mut self) {
        // SAFETY: the user was made by GetModuleUserFromUserName and is freed once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeModuleUser {
                free(self.user.as_ptr());
            }
        }
    }
}

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

/// Runs `callback` from the event loop at once, outside any command (the filter's timer).
pub fn soon(callback: raw::RedisModuleTimerProc) -> bool {
    let ctx = DETACHED.load(Ordering::Relaxed);
    // SAFETY: the detached context lives as long as the module.
    unsafe { Ctx::from_raw(ctx) }.is_some_and(|ctx| ctx.timer(0, callback))
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
