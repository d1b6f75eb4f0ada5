//! The server's log. The message is passed as the argument of a `%s` format, never as the
//! format itself: a load argument or a key could hold `%`, which would make `printf` read
//! arguments that are not there (the `redis-module` crate's own log helpers pass it as the
//! format). A message with a NUL byte is cut there rather than dropped.

use std::ffi::CString;
use std::os::raw::c_char;

use redis_module::raw;

/// How much a line matters, as the server's `loglevel` filters it.
#[derive(Debug, Clone, Copy)]
pub enum Level {
    Notice,
    Warning,
}

/// Writes `message` to the server's log; nothing when there is no server (unit tests).
pub fn log(ctx: *mut raw::RedisModuleCtx, level: Level, message: &str) {
    let text = message.split('\0').next().unwrap_or_default();
    let Ok(text) = CString::new(text) else {
        return;
    };
    let level = match level {
        Level::Notice => c"notice",
        Level::Warning => c"warning",
    };
    // SAFETY: the format is "%s" and its one argument a NUL-terminated string; ctx is the
    // caller's context (or null, which the server accepts for its own log).
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(
                ctx,
                level.as_ptr(),
                c"%s".as_ptr(),
                text.as_ptr() as *const c_char,
            );
        }
    }
}
