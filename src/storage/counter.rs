//! RL.COUNTER's key: a plain Redis string holding a decimal integer, with a TTL that is its
//! window, as INCRBY and PEXPIRE leave it (so `GET` reads the count). Safe code only: the
//! key's string and expiry are reached through [`RawKey`].

use crate::digits::{decimal, signed};
use crate::error::Error;
use crate::redis::{Ctx, Event, Holds, RString, RawKey};
use algorithms::counter::{Stored, Ttl};

/// What a write left on the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The key's TTL in ms after the write, as `PTTL` says it.
    pub ttl_ms: u64,
    /// When the key expires, in ms since the Unix epoch: what replicas and the AOF get.
    pub expire_at_ms: u64,
}

/// An open counter key. Closed when dropped; signalled as modified then if it was written
/// (the module sets `NO_IMPLICIT_SIGNAL_MODIFIED`: a read or an error aborts no `WATCH`).
pub struct CounterKey<'a> {
    raw: RawKey<'a>,
    ctx: Ctx<'a>,
    name: RString<'a>,
    /// Opened for writing.
    write: bool,
    /// When the key expires (ms since the Unix epoch) as `read` found it.
    expire_at_ms: Option<u64>,
    modified: bool,
}

impl Drop for CounterKey<'_> {
    fn drop(&mut self) {
        if self.modified {
            self.raw.signal_modified();
        }
    }
}

impl<'a> CounterKey<'a> {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: Ctx<'a>, name: RString<'a>, write: bool) -> CounterKey<'a> {
        CounterKey {
            raw: ctx.open_key(name, write),
            ctx,
            name,
            write,
            expire_at_ms: None,
            modified: false,
        }
    }

    /// The integer the key holds and whether it has a TTL (`None`: no key). A key of
    /// another type (this module's own included) is `WRONGTYPE`; a string that is not an
    /// integer as INCRBY reads one is INCRBY's error.
    ///
    /// A key open for writing (a call that writes unless it fails) lends its string's bytes
    /// through DMA (a read through `GET`, `RedisModule_Call`, cost 3,800 instructions of the
    /// 18,486 a call took), which makes a value held as an integer or an embedded string a
    /// plain one first: the write then replaces it, and a failed write (not an integer,
    /// overflow) leaves the same bytes and TTL with `OBJECT ENCODING` `raw`. A read-only call
    /// (`BY 0`) reads it as `GET` does, leaving its encoding as it is. (DMA reads of a key
    /// opened for reading left Redis 8.2's key handle on the replaced object.)
    pub fn read(&mut self) -> Result<Option<Stored>, Error> {
        match self.raw.holds() {
            Holds::Nothing => Ok(None),
            Holds::String => {
                let value = if self.write {
                    self.raw.string_for_write().and_then(signed)
                } else {
                    self.ctx
                        .get_string(self.name, |bytes| bytes.and_then(signed))
                };
                let value = value.ok_or(Error::NotInteger)?;
                self.expire_at_ms = self.raw.expire_at_ms();
                Ok(Some(Stored {
                    value,
                    has_ttl: self.expire_at_ms.is_some(),
                }))
            }
            Holds::Module(_) | Holds::Other => Err(Error::WrongType),
        }
    }

    /// The key's TTL as `PTTL` replies it: ms, `-1` without one, `-2` without a key.
    pub fn pttl(&self) -> i64 {
        if self.raw.holds() == Holds::Nothing {
            return -2;
        }
        match self.raw.ttl_ms() {
            None => -1,
            Some(ms) => i64::try_from(ms).unwrap_or(i64::MAX),
        }
    }

    /// Sets the key (open for writing, read first) to `count`, with the TTL `ttl` (kept, or
    /// `window_ms` from now on the server's clock, as PEXPIRE sets it), and publishes the
    /// keyspace events INCRBY and PEXPIRE publish: `incrby`, and `expire` when a TTL is set.
    ///
    /// The key gets a new string (a short one, which the server embeds in one allocation with
    /// its object, and on Redis 8 and Valkey with the key's name) and its TTL again: rewriting
    /// the string in place through DMA would cost 43% fewer instructions a call (10,557 against
    /// 18,486 with the read through `GET`, callgrind, `scripts/callgrind_calls.sh`), but leaves
    /// it a plain string in an allocation of its own, 24 bytes more a key on Valkey 8.1 by
    /// `MEMORY USAGE` (64 against 40, where a key of INCR and PEXPIRE takes 40).
    pub fn write(&mut self, count: i64, ttl: Ttl, window_ms: u64) -> Written {
        let mut text = [0u8; 20];
        self.raw.set_string(decimal(count, &mut text));
        self.modified = true;
        let kept = match ttl {
            Ttl::Keep => self.expire_at_ms,
            Ttl::Window => None,
        };
        match kept {
            // Setting a string drops the TTL: the kept one is set again.
            Some(at_ms) => self.raw.expire_at(at_ms),
            None => self.raw.expire_in(window_ms),
        }
        self.ctx
            .notify_keyspace_event(Event::String, c"incrby", self.name);
        if kept.is_none() {
            self.ctx
                .notify_keyspace_event(Event::Generic, c"expire", self.name);
        }
        Written {
            ttl_ms: match kept {
                Some(_) => self.raw.ttl_ms().unwrap_or(0),
                None => window_ms,
            },
            expire_at_ms: match kept {
                Some(at_ms) => at_ms,
                None => self.raw.expire_at_ms().unwrap_or(0),
            },
        }
    }
}
