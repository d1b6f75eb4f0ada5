//! The byte encoding of a [`Value`], used for the RDB, the AOF rewrite and the digest.
//!
//! Layout (little-endian): one byte of encoding version, one byte naming the algorithm, then
//! that algorithm's fields. Decoding checks everything: the bytes may come from a `RESTORE`
//! payload a client crafted, so a bad blob is an error, never a panic or an absurd value.

use crate::algorithms::gcra;
use crate::args::{MAX_COUNT, MAX_DURATION_MS};

use super::value::{Stored, Value};

/// The encoding version this build writes. Bump it when a layout changes, and keep decoding
/// every older version.
pub const VERSION: u8 = 1;

const TAG_GCRA: u8 = 1;

pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    out.push(VERSION);
    match value {
        Value::Gcra(s) => {
            out.push(TAG_GCRA);
            out.extend_from_slice(&s.params.burst.to_le_bytes());
            out.extend_from_slice(&s.params.rate.to_le_bytes());
            out.extend_from_slice(&s.params.period_ms.to_le_bytes());
            out.extend_from_slice(&s.state.tat.to_le_bytes());
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError;

pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut r = Reader(bytes);
    if r.u8()? != VERSION {
        return Err(DecodeError);
    }
    let value = match r.u8()? {
        TAG_GCRA => {
            let params = gcra::Params {
                burst: r.count()?,
                rate: r.count()?,
                period_ms: r.duration_ms()?,
            };
            let state = gcra::State { tat: r.u128()? };
            Value::Gcra(Stored { params, state })
        }
        _ => return Err(DecodeError),
    };
    if !r.0.is_empty() {
        return Err(DecodeError);
    }
    Ok(value)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        if self.0.len() < N {
            return Err(DecodeError);
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().map_err(|_| DecodeError)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn u128(&mut self) -> Result<u128, DecodeError> {
        Ok(u128::from_le_bytes(self.take()?))
    }

    /// A count in 1..=10^12, as the argument grammar admits.
    fn count(&mut self) -> Result<u64, DecodeError> {
        let n = self.u64()?;
        if (1..=MAX_COUNT).contains(&n) {
            Ok(n)
        } else {
            Err(DecodeError)
        }
    }

    fn duration_ms(&mut self) -> Result<u64, DecodeError> {
        let n = self.u64()?;
        if (1..=MAX_DURATION_MS).contains(&n) {
            Ok(n)
        } else {
            Err(DecodeError)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Value {
        Value::Gcra(Stored {
            params: gcra::Params {
                burst: 10,
                rate: 3,
                period_ms: 1000,
            },
            state: gcra::State {
                tat: 5_100_000_000_000_000_001,
            },
        })
    }

    #[test]
    fn round_trip() {
        let v = sample();
        assert_eq!(decode(&encode(&v)), Ok(v));
    }

    #[test]
    fn rejects_bad_blobs() {
        let good = encode(&sample());
        assert_eq!(decode(&good[..good.len() - 1]), Err(DecodeError));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(DecodeError));
        let mut version = good.clone();
        version[0] = 99;
        assert_eq!(decode(&version), Err(DecodeError));
        let mut tag = good.clone();
        tag[1] = 200;
        assert_eq!(decode(&tag), Err(DecodeError));
        let mut zero_rate = good.clone();
        zero_rate[10..18].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode(&zero_rate), Err(DecodeError));
        assert_eq!(decode(&[]), Err(DecodeError));
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(v) = decode(&bytes) {
                prop_assert_eq!(encode(&v), bytes);
            }
        }

        #[test]
        fn every_valid_value_round_trips(burst in 1..=MAX_COUNT, rate in 1..=MAX_COUNT,
                                         period_ms in 1..=MAX_DURATION_MS, tat in any::<u128>()) {
            let v = Value::Gcra(Stored {
                params: gcra::Params { burst, rate, period_ms },
                state: gcra::State { tat },
            });
            prop_assert_eq!(decode(&encode(&v)), Ok(v));
        }
    }
}
