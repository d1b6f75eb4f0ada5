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

/// A log line that a flood could repeat (a refused cluster message, a full table): written
/// at most once a second for each `Throttle`.
pub struct Throttle {
    /// When it last wrote, in ms since [`monotonic_ms`]'s start; `u64::MAX` for never.
    last_ms: std::sync::atomic::AtomicU64,
}

impl Throttle {
    pub const fn new() -> Throttle {
        Throttle {
            last_ms: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }

    /// Writes the line `message` makes, unless this throttle wrote one less than a second ago.
    pub fn log(&self, ctx: Option<Ctx>, level: Level, message: impl FnOnce() -> String) {
        use std::sync::atomic::Ordering;
        let now = monotonic_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != u64::MAX && now.saturating_sub(last) < 1000 {
            return;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            log(ctx, level, &message());
        }
    }
}

/// Milliseconds on a clock that never goes back (the wall clock can), from its first use.
pub fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}
