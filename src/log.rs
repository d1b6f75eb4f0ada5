//! The server's log. The message is passed as the argument of a `%s` format, never as the
//! format itself: a load argument or a key could hold `%`, which would make `printf` read
//! arguments that are not there (the `redis-module` crate's own log helpers pass it as the
//! format). A message with a NUL byte is cut there rather than dropped.

use std::ffi::CString;

use crate::redis::{self, Ctx};

/// How much a line matters, as the server's `loglevel` filters it.
#[derive(Debug, Clone, Copy)]
pub enum Level {
    Notice,
    Warning,
}

/// Writes `message` to the server's log, through `ctx` when there is one.
pub fn log(ctx: Option<Ctx>, level: Level, message: &str) {
    let text = message.split('\0').next().unwrap_or_default();
    let Ok(text) = CString::new(text) else {
        return;
    };
    let level = match level {
        Level::Notice => c"notice",
        Level::Warning => c"warning",
    };
    match ctx {
        Some(ctx) => ctx.log(level, &text),
        None => redis::log(level, &text),
    }
}
