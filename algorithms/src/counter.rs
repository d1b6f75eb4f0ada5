//! A fixed-window counter kept as a plain integer (RL.COUNTER): what `INCRBY` and a
//! `PEXPIRE` at the first hit do, in one step.
//!
//! Libraries that users already run (rate-limiter-flexible, express-rate-limit's Redis stores,
//! `limits`) keep a fixed window as a plain integer string whose TTL, set when the window's
//! first hit creates it, is the window: the count is the string, the window's end its expiry.
//! This is that step, apart from the key: given what the key holds, the increment and `XX`
//! (write only if the key exists), it says what to write and what to reply. The window is the
//! key's TTL on the server's clock, so no clock reading comes in here; the module keeps the
//! TTL.
//!
//! ```
//! use ratelimit_algorithms::counter::{step, Outcome, Stored, Ttl};
//!
//! // The window's first hit: the key is made with the window as its TTL.
//! assert_eq!(step(None, 1, false), Ok(Outcome::Write { count: 1, ttl: Ttl::Window }));
//! // Later hits count on and keep the TTL.
//! let stored = Stored { value: 1, has_ttl: true };
//! assert_eq!(step(Some(stored), 1, false), Ok(Outcome::Write { count: 2, ttl: Ttl::Keep }));
//! // BY 0 reads; XX on a missing key writes nothing.
//! assert_eq!(step(Some(stored), 0, false), Ok(Outcome::Read { count: Some(1) }));
//! assert_eq!(step(None, 5, true), Ok(Outcome::Read { count: None }));
//! ```

/// What the key holds: an integer, and whether it has a TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The integer the key's string holds.
    pub value: i64,
    /// Whether the key has a TTL.
    pub has_ttl: bool,
}

/// The TTL a write leaves on the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// The TTL the key has, unchanged.
    Keep,
    /// The window from now: the key is new, or had no TTL (as rate-limiter-flexible's
    /// script gives one to a key that lost it).
    Window,
}

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing is written (BY 0, or XX on a missing key): the reply is the key's count and
    /// TTL as they are; `None` when there is no key.
    Read {
        /// The stored value, `None` when the key does not exist.
        count: Option<i64>,
    },
    /// The key is set to `count`, with the TTL `ttl`.
    Write {
        /// The new value.
        count: i64,
        /// The TTL it keeps or gets.
        ttl: Ttl,
    },
}

/// The stored value plus the increment is beyond a 64-bit signed integer (INCRBY refuses it
/// too): nothing is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

/// One call on a key that holds `stored` (`None`: no key): add `by` (any sign; 0 only reads),
/// and write only if the key exists when `xx`.
pub fn step(stored: Option<Stored>, by: i64, xx: bool) -> Result<Outcome, Overflow> {
    match stored {
        _ if by == 0 => Ok(Outcome::Read {
            count: stored.map(|s| s.value),
        }),
        None if xx => Ok(Outcome::Read { count: None }),
        None => Ok(Outcome::Write {
            count: by,
            ttl: Ttl::Window,
        }),
        Some(Stored { value, has_ttl }) => Ok(Outcome::Write {
            count: value.checked_add(by).ok_or(Overflow)?,
            ttl: if has_ttl { Ttl::Keep } else { Ttl::Window },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn stored(value: i64, has_ttl: bool) -> Option<Stored> {
        Some(Stored { value, has_ttl })
    }

    fn write(count: i64, ttl: Ttl) -> Result<Outcome, Overflow> {
        Ok(Outcome::Write { count, ttl })
    }

    fn read(count: Option<i64>) -> Result<Outcome, Overflow> {
        Ok(Outcome::Read { count })
    }

    #[test]
    fn a_missing_key_is_made_with_the_window_unless_xx() {
        assert_eq!(step(None, 1, false), write(1, Ttl::Window));
        assert_eq!(step(None, -3, false), write(-3, Ttl::Window));
        assert_eq!(step(None, 7, true), read(None));
        assert_eq!(step(None, -7, true), read(None));
    }

    #[test]
    fn by_zero_reads_whatever_the_key_holds() {
        assert_eq!(step(None, 0, false), read(None));
        assert_eq!(step(None, 0, true), read(None));
        assert_eq!(step(stored(5, true), 0, false), read(Some(5)));
        // A key without a TTL is read as it is: a read gives it none.
        assert_eq!(step(stored(-5, false), 0, true), read(Some(-5)));
    }

    #[test]
    fn a_present_key_counts_on_and_keeps_its_ttl_or_gets_the_window() {
        assert_eq!(step(stored(5, true), 2, false), write(7, Ttl::Keep));
        assert_eq!(step(stored(5, true), -6, true), write(-1, Ttl::Keep));
        assert_eq!(step(stored(5, false), 1, false), write(6, Ttl::Window));
        assert_eq!(step(stored(5, false), 1, true), write(6, Ttl::Window));
    }

    #[test]
    fn overflow_of_a_64_bit_integer_is_refused_either_way() {
        assert_eq!(step(stored(i64::MAX, true), 1, false), Err(Overflow));
        assert_eq!(step(stored(i64::MIN, true), -1, false), Err(Overflow));
        assert_eq!(
            step(stored(i64::MAX - 1, true), 1, false),
            write(i64::MAX, Ttl::Keep)
        );
        assert_eq!(
            step(stored(i64::MIN + 1, true), -1, true),
            write(i64::MIN, Ttl::Keep)
        );
        // A read of the extremes is not an overflow.
        assert_eq!(step(stored(i64::MIN, true), 0, false), read(Some(i64::MIN)));
    }
}
