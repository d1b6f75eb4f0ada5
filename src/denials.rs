//! The server's summary of the keys denied most often lately (RL.TOP): one
//! [`Top`] (Space-Saving, in the algorithms crate) behind a lock, made anew when the settings
//! `ratelimit.top-size` or `ratelimit.top-period` change. The dispatcher records every denial
//! while it is [`enabled`]; RL.TOP and INFO read.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use algorithms::space_saving::Entry;
use algorithms::space_saving::Top;

static TOP: Mutex<Option<Top>> = Mutex::new(None);

/// The summary as the settings now say: a changed `ratelimit.top-size` or
/// `ratelimit.top-period` starts an empty one.
fn top() -> MutexGuard<'static, Option<Top>> {
    TOP.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_top<T>(f: impl FnOnce(&mut Top) -> T) -> T {
    let (size, period_us) = crate::config::top_settings();
    let mut guard = top();
    let top = match &mut *guard {
        Some(top) if top.is_for(size, period_us) => top,
        slot => slot.insert(Top::new(size, period_us)),
    };
    f(top)
}

/// Whether denials are recorded (`ratelimit.top-size` above 0): the dispatcher asks before
/// it reads the clock.
pub fn enabled() -> bool {
    crate::config::top_size() != 0
}

/// Counts a client's denial of `key` at `now_us` (the dispatcher, on every denial, when
/// [`enabled`]).
pub fn record(key: &[u8], now_us: u64) {
    with_top(|top| top.record(key, now_us));
}

/// What RL.TOP lists, before the caller's ACL filter.
pub fn entries(now_us: u64) -> Vec<Entry> {
    with_top(|top| top.entries(now_us))
}

/// Counters in use and untracked denials (INFO).
pub fn usage() -> (usize, u64) {
    top().as_ref().map_or((0, 0), Top::usage)
}
