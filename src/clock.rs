//! The one place time enters the module.
//!
//! A command takes one [`Reading`] and every decision in that call uses it. The reading is
//! the server's clock, or, when the module was loaded with `debug-clock yes` and a test froze
//! it with `RL.DEBUG.CLOCK`, the frozen time. Key expiry always follows the real clock, so a
//! reading also carries the real time in milliseconds for setting absolute expiry times.
//!
//! The server's own clock is handed in by the caller (`redis::cached_micros`, through
//! `dispatch::Call::clock`): this room knows time, not Redis.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The latest time the debug clock may be set to: 9999-12-31T23:59:59.999Z, in ms.
pub const MAX_DEBUG_MS: u64 = 253_402_300_799_999;

/// Set once at load from the `debug-clock` argument; RL.DEBUG.* refuse to run without it.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Whether the debug clock is frozen, and at what reading (µs since the Unix epoch).
static FROZEN: AtomicBool = AtomicBool::new(false);
static FROZEN_US: AtomicU64 = AtomicU64::new(0);

/// One reading of the clock.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// What decisions use: µs since the Unix epoch (the debug clock when it is frozen).
    pub now_us: u64,
    /// The real time in ms since the Unix epoch, for key expiry.
    pub real_ms: u64,
}

/// Reads the clock once. `server_us` is the server's cached command time in µs where the
/// server has one (Redis 7.2+); without it, the system clock is read (Redis 7.0 has only
/// millisecond clocks in the module API).
pub fn read(server_us: Option<u64>) -> Reading {
    let real_us = server_us.unwrap_or_else(system_now_us);
    let now_us = if FROZEN.load(Ordering::Relaxed) {
        FROZEN_US.load(Ordering::Relaxed)
    } else {
        real_us
    };
    Reading {
        now_us,
        real_ms: real_us / 1000,
    }
}

/// The system clock in µs since the Unix epoch.
fn system_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub fn enable_debug() {
    ENABLED.store(true, Ordering::Relaxed);
}

pub fn debug_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Freezes the debug clock at `us` since the Unix epoch (at most [`MAX_DEBUG_MS`]).
pub fn freeze_at_us(us: u64) {
    FROZEN_US.store(us.min(MAX_DEBUG_MS * 1000), Ordering::Relaxed);
    FROZEN.store(true, Ordering::Relaxed);
}

/// Lets the clock run in real time again.
pub fn thaw() {
    FROZEN.store(false, Ordering::Relaxed);
}
