//! One call of a command as its handler sees it: the context, the arguments, and whether a
//! client sent it or RL.REPLAY replays it (with the primary's clock reading and expiry).

use std::ffi::CStr;

use crate::clock::{self, Reading};
use crate::error::Error;
use crate::redis::{self, Ctx, RString};
use crate::response::{Propagate, Response};

/// The module's clock, read once now: the server's cached command time where the server has
/// one (Redis 7.2+), else the system clock; the debug clock when a test froze it.
#[inline]
pub fn read_clock() -> Reading {
    clock::read(redis::cached_micros())
}

/// A command's handler: a parsed call to what happened.
pub type Handler = fn(&Call) -> Result<Response, Error>;

/// How a command runs: for a client, or replayed from the replication stream or the AOF
/// with the primary's clock reading and the key's absolute expiry time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Live,
    Replay { now_us: u64, expire_at_ms: u64 },
}

/// One call of a command.
pub struct Call<'a> {
    pub ctx: Ctx<'a>,
    /// The arguments as the command sees them: `[name, key, ...]`.
    pub args: &'a [&'a [u8]],
    /// The key argument as a Redis string (`None` when the call has no key).
    pub key: Option<RString<'a>>,
    pub mode: Mode,
}

impl<'a> Call<'a> {
    /// The key argument (every keyed command checks its arity first, so a missing key is
    /// a bug).
    pub fn key(&self) -> Result<RString<'a>, Error> {
        // Not `ok_or`: that would build and drop an error on every call.
        match self.key {
            Some(key) => Ok(key),
            None => Err(Error::Panic),
        }
    }

    /// Whether RL.REPLAY runs this call (a write of the primary or the AOF).
    pub fn replayed(&self) -> bool {
        matches!(self.mode, Mode::Replay { .. })
    }

    /// How a write of this call reaches replicas and the AOF: a client's as RL.REPLAY with
    /// the clock reading `now_us` and the key's expiry; a replayed one passed on verbatim.
    pub fn propagation(&self, command: &'static CStr, now_us: u64, expire_at_ms: u64) -> Propagate {
        match self.mode {
            Mode::Live => Propagate::Replay {
                command,
                now_us,
                expire_at_ms,
            },
            Mode::Replay { .. } => Propagate::Verbatim,
        }
    }

    /// The clock reading decisions use, and the real time in ms that expiry counts from: the
    /// module's clock for a client's call; the primary's reading when replayed (which also
    /// carries the absolute expiry, see [`Call::expire_at`]).
    pub fn clock(&self) -> (u64, u64) {
        match self.mode {
            Mode::Live => {
                let reading = read_clock();
                (reading.now_us, reading.real_ms)
            }
            Mode::Replay { now_us, .. } => (now_us, 0),
        }
    }

    /// When a key written by this call expires: `reset_ms` after `real_ms` (from
    /// [`Call::clock`]), or the primary's absolute expiry when replayed.
    pub fn expire_at(&self, real_ms: u64, reset_ms: u64) -> u64 {
        match self.mode {
            Mode::Live => real_ms.saturating_add(reset_ms),
            Mode::Replay { expire_at_ms, .. } => expire_at_ms,
        }
    }
}
