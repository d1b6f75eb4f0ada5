//! The byte encoding of a key's [`Record`] (its [`Value`] and its block), used for the RDB,
//! the AOF rewrite and the digest.
//!
//! Layout (little-endian): one byte of encoding version, one byte naming the algorithm, then
//! that algorithm's parameters and state, field by field. Decoding checks everything: the
//! bytes may come from a `RESTORE` payload a client crafted, so a bad blob is an error, never
//! a panic or a value outside what the commands can produce.

use std::collections::VecDeque;
use std::sync::Arc;

use algorithms::ranges::{MAX_COUNT, MAX_DURATION_MS};
use algorithms::{
    concurrency, fixed_window, gcra, leaky_bucket, rule_set, sliding_log, sliding_window,
    token_bucket, warmup,
};

use super::value::{Stored, Value, Variant};
use algorithms::adaptive::{self, Estimate, Gradient2, Kind, Vegas};
use algorithms::concurrency::Concurrency;
use algorithms::fixed_window::FixedWindow;
use algorithms::gcra::Gcra;
use algorithms::leaky_bucket::LeakyBucket;
use algorithms::sliding_log::SlidingLog;
use algorithms::sliding_window::SlidingWindow;
use algorithms::token_bucket::TokenBucket;
use algorithms::warmup::Warmup;

/// The encoding version this build writes. Bump it when a layout changes, and keep decoding
/// every older version. Version 2 added the key's block (`BLOCK duration`) after the state;
/// version 1 had none.
pub const VERSION: u8 = 2;

const GCRA: u8 = 1;
const TOKEN_BUCKET: u8 = 2;
const LEAKY_BUCKET: u8 = 3;
const FIXED_WINDOW: u8 = 4;
const SLIDING_WINDOW: u8 = 5;
const SLIDING_LOG: u8 = 6;
const CONCURRENCY: u8 = 7;
/// RL.LIMIT: a count, then each rule as the value of a key of its algorithm (tags 1 to 6,
/// and 9).
const LIMIT: u8 = 8;
/// RL.WARMUP (also a rule of an RL.LIMIT value).
const WARMUP: u8 = 9;
/// A concurrency limiter whose leases carry when they began and the leases held then (the
/// samples an adaptive limit takes), and, ADAPTIVE, its algorithm, bounds and estimate.
/// Written for every concurrency key since adaptive limits came; tag 7 still decodes (its
/// leases began a lease before they end, with none in flight).
const LEASES: u8 = 10;

/// The adaptive algorithms' bytes (0: not adaptive).
fn kind_byte(kind: Option<Kind>) -> u8 {
    match kind {
        None => 0,
        Some(Kind::Aimd) => 1,
        Some(Kind::Vegas) => 2,
        Some(Kind::Gradient2) => 3,
    }
}

/// Everything a key of the data type holds: its [`Value`] (an algorithm's parameters and
/// state), and until when a penalty blocks it (0: not blocked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub value: Value,
    pub blocked_until_us: u64,
}

impl Record {
    pub fn new(value: Value) -> Record {
        Record {
            value,
            blocked_until_us: 0,
        }
    }
}

pub fn encode(record: &Record) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(72));
    w.u8(VERSION);
    encode_value(&mut w, &record.value);
    w.u64(record.blocked_until_us);
    w.0
}

fn encode_value(w: &mut Writer, value: &Value) {
    match value {
        Value::Gcra(s) => {
            w.u8(GCRA);
            w.u64s(&[s.params.burst, s.params.rate, s.params.period_ms]);
            w.u128(s.state.tat);
        }
        Value::TokenBucket(s) => {
            w.u8(TOKEN_BUCKET);
            let p = &s.params;
            w.u64s(&[p.capacity, p.refill_amount, p.refill_period_ms]);
            w.u8(u8::from(p.interval));
            w.u128(s.state.scaled_tokens);
            w.u64(s.state.updated_us);
        }
        Value::LeakyBucket(s) => {
            w.u8(LEAKY_BUCKET);
            let p = &s.params;
            w.u64s(&[p.capacity, p.leak_amount, p.leak_period_ms]);
            w.u128(s.state.tat);
        }
        Value::FixedWindow(s) => {
            w.u8(FIXED_WINDOW);
            w.u64s(&[s.params.limit, s.params.window_ms]);
            w.u64s(&[s.state.window_start_us, s.state.count]);
        }
        Value::SlidingWindow(s) => {
            w.u8(SLIDING_WINDOW);
            w.u64s(&[s.params.limit, s.params.window_ms]);
            let st = &s.state;
            w.u64s(&[st.window_start_us, st.current, st.previous]);
        }
        Value::SlidingLog(s) => {
            w.u8(SLIDING_LOG);
            w.u64s(&[s.params.limit, s.params.window_ms]);
            let st = &s.state;
            w.u64s(&[st.base_us, st.unit_us, st.total, st.words.len() as u64]);
            w.0.reserve(st.words.len() * 4);
            for word in &st.words {
                w.0.extend_from_slice(&word.to_le_bytes());
            }
        }
        Value::Concurrency(s) => {
            w.u8(LEASES);
            w.u64s(&[s.params.limit, s.params.lease_ms]);
            let bounds = s.params.adaptive;
            w.u8(kind_byte(bounds.map(|b| b.kind)));
            if let Some(b) = bounds {
                w.u64s(&[u64::from(b.min), u64::from(b.max)]);
            }
            let leases = s.state.leases();
            w.u64s(&[s.state.issued(), leases.len() as u64]);
            for (token, expires_us, start) in leases {
                w.u64s(&[expires_us, start.started_us, u64::from(start.inflight)]);
                w.u64(token.len() as u64);
                w.0.extend_from_slice(token);
            }
            // The estimate: there whenever the parameters are adaptive (both are set by one
            // write); a fresh one at the starting limit otherwise, to keep the blob whole.
            let start = u32::try_from(s.params.limit).unwrap_or(u32::MAX);
            let estimate = bounds.map(|b| match s.state.adaptive() {
                Some((_, e)) if e.kind() == b.kind => e,
                _ => Estimate::new(&b, start, 0),
            });
            match estimate {
                None => {}
                Some(Estimate::Aimd { limit }) => w.u64(limit as u64),
                Some(Estimate::Vegas(v)) => w.u64s(&[
                    v.estimated.to_bits(),
                    v.rtt_noload_ns as u64,
                    v.probe_count as u64,
                    v.probe_jitter.to_bits(),
                    v.seed,
                ]),
                Some(Estimate::Gradient2(g)) => w.u64s(&[
                    g.estimated.to_bits(),
                    g.last_rtt_ns as u64,
                    g.long_rtt.to_bits(),
                    g.long_sum.to_bits(),
                    g.long_count as u64,
                ]),
            }
        }
        Value::Warmup(s) => {
            w.u8(WARMUP);
            let p = &s.params;
            w.u64s(&[p.rate, p.period_ms, p.warmup_ms, p.cold_factor]);
            w.u128(s.state.stored);
            w.u128(s.state.next_free);
        }
        Value::RuleSet(s) => {
            w.u8(LIMIT);
            w.u64(s.params.len() as u64);
            for (rule, state) in s.params.iter().zip(&s.state) {
                // Every stored state is its rule's (the policy step keeps them aligned).
                if let Some(value) = Value::from_rule(rule, state) {
                    encode_value(w, &value);
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError;

pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Reader(bytes);
    let version = r.u8()?;
    if version != 1 && version != 2 {
        return Err(DecodeError);
    }
    let value = decode_value(&mut r, false)?;
    let blocked_until_us = if version >= 2 { r.u64()? } else { 0 };
    if !r.0.is_empty() {
        return Err(DecodeError);
    }
    Ok(Record {
        value,
        blocked_until_us,
    })
}

/// Decodes one value; `in_limit` for a rule of an RL.LIMIT value, which is never itself an
/// RL.LIMIT or a concurrency limiter (checked before anything nests, so a crafted blob
/// cannot recurse).
fn decode_value(r: &mut Reader, in_limit: bool) -> Result<Value, DecodeError> {
    let tag = r.u8()?;
    if in_limit && !(GCRA..=SLIDING_LOG).contains(&tag) && tag != WARMUP {
        return Err(DecodeError);
    }
    let value = match tag {
        GCRA => {
            let params = gcra::Params {
                burst: r.count()?,
                rate: r.count()?,
                period_ms: r.duration_ms()?,
            };
            let state = gcra::State { tat: r.u128()? };
            checked::<Gcra>(params, state)?
        }
        TOKEN_BUCKET => {
            let params = token_bucket::Params {
                capacity: r.count()?,
                refill_amount: r.count()?,
                refill_period_ms: r.duration_ms()?,
                interval: r.bool()?,
            };
            let state = token_bucket::State {
                scaled_tokens: r.u128()?,
                updated_us: r.u64()?,
            };
            checked::<TokenBucket>(params, state)?
        }
        LEAKY_BUCKET => {
            let params = leaky_bucket::Params {
                capacity: r.count()?,
                leak_amount: r.count()?,
                leak_period_ms: r.duration_ms()?,
            };
            let state = leaky_bucket::State { tat: r.u128()? };
            checked::<LeakyBucket>(params, state)?
        }
        FIXED_WINDOW => {
            let params = fixed_window::Params {
                limit: r.count()?,
                window_ms: r.duration_ms()?,
            };
            let state = fixed_window::State {
                window_start_us: r.u64()?,
                count: r.u64()?,
            };
            checked::<FixedWindow>(params, state)?
        }
        SLIDING_WINDOW => {
            let params = sliding_window::Params {
                limit: r.count()?,
                window_ms: r.duration_ms()?,
            };
            let state = sliding_window::State {
                window_start_us: r.u64()?,
                current: r.u64()?,
                previous: r.u64()?,
            };
            checked::<SlidingWindow>(params, state)?
        }
        SLIDING_LOG => {
            let params = sliding_log::Params {
                limit: r.count()?,
                window_ms: r.duration_ms()?,
            };
            let (base_us, unit_us, total) = (r.u64()?, r.u64()?, r.u64()?);
            let len = usize::try_from(r.u64()?).map_err(|_| DecodeError)?;
            // The bytes must be there: never allocate for a number.
            if len.checked_mul(4).is_none_or(|bytes| bytes > r.0.len()) {
                return Err(DecodeError);
            }
            let mut words = VecDeque::with_capacity(len);
            for _ in 0..len {
                words.push_back(r.u32()?);
            }
            let state = sliding_log::State::new(words, base_us, unit_us, total);
            checked::<SlidingLog>(params, state)?
        }
        CONCURRENCY => {
            let params = concurrency::Params {
                limit: r.count()?,
                lease_ms: r.duration_ms()?,
                adaptive: None,
            };
            let issued = r.u64()?;
            let count = r.u64()?;
            // Each lease takes at least 17 bytes: never allocate for a number.
            if count > (r.0.len() / 17) as u64 {
                return Err(DecodeError);
            }
            let mut state = concurrency::State::new(issued);
            for _ in 0..count {
                let expires_us = r.u64()?;
                let token = r.token()?;
                // A lease of this old layout began a lease before it ends, none in flight.
                let start = concurrency::Start {
                    started_us: expires_us.saturating_sub(params.lease_ms.saturating_mul(1000)),
                    inflight: 0,
                };
                // Two leases of one token: never written, so damaged.
                if !state.insert(token, expires_us, start) {
                    return Err(DecodeError);
                }
            }
            checked::<Concurrency>(params, state)?
        }
        LEASES => {
            let mut params = concurrency::Params {
                limit: r.count()?,
                lease_ms: r.duration_ms()?,
                adaptive: None,
            };
            let kind = match r.u8()? {
                0 => None,
                1 => Some(Kind::Aimd),
                2 => Some(Kind::Vegas),
                3 => Some(Kind::Gradient2),
                _ => return Err(DecodeError),
            };
            if let Some(kind) = kind {
                let mut bound = || {
                    u32::try_from(r.count()?)
                        .ok()
                        .filter(|&n| n <= i32::MAX as u32)
                        .ok_or(DecodeError)
                };
                let (min, max) = (bound()?, bound()?);
                params.adaptive = Some(adaptive::Params { kind, min, max });
            }
            let issued = r.u64()?;
            let count = r.u64()?;
            // Each lease takes at least 33 bytes: never allocate for a number.
            if count > (r.0.len() / 33) as u64 {
                return Err(DecodeError);
            }
            let mut state = concurrency::State::new(issued);
            for _ in 0..count {
                let expires_us = r.u64()?;
                let started_us = r.u64()?;
                let inflight = u32::try_from(r.u64()?).map_err(|_| DecodeError)?;
                let token = r.token()?;
                let start = concurrency::Start {
                    started_us,
                    inflight,
                };
                if !state.insert(token, expires_us, start) {
                    return Err(DecodeError);
                }
            }
            if let Some(bounds) = params.adaptive {
                let estimate = match bounds.kind {
                    Kind::Aimd => Estimate::Aimd {
                        limit: i32::try_from(r.u64()?).map_err(|_| DecodeError)?,
                    },
                    Kind::Vegas => Estimate::Vegas(Vegas {
                        estimated: f64::from_bits(r.u64()?),
                        rtt_noload_ns: i64::try_from(r.u64()?).map_err(|_| DecodeError)?,
                        probe_count: i32::try_from(r.u64()?).map_err(|_| DecodeError)?,
                        probe_jitter: f64::from_bits(r.u64()?),
                        seed: r.u64()?,
                    }),
                    Kind::Gradient2 => Estimate::Gradient2(Gradient2 {
                        estimated: f64::from_bits(r.u64()?),
                        last_rtt_ns: i64::try_from(r.u64()?).map_err(|_| DecodeError)?,
                        long_rtt: f64::from_bits(r.u64()?),
                        long_sum: f64::from_bits(r.u64()?),
                        long_count: i32::try_from(r.u64()?).map_err(|_| DecodeError)?,
                    }),
                };
                state.set_adaptive(Some((bounds, estimate)));
            }
            checked::<Concurrency>(params, state)?
        }
        WARMUP => {
            let params = warmup::Params {
                rate: r.count()?,
                period_ms: r.duration_ms()?,
                warmup_ms: r.duration_ms()?,
                cold_factor: r.u64()?,
            };
            let state = warmup::State {
                stored: r.u128()?,
                next_free: r.u128()?,
            };
            checked::<Warmup>(params, state)?
        }
        LIMIT => {
            let count = r.u64()?;
            if !(1..=rule_set::MAX_RULES as u64).contains(&count) {
                return Err(DecodeError);
            }
            let mut rules = Vec::with_capacity(count as usize);
            let mut states = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let (rule, state) = decode_value(r, true)?.into_rule().ok_or(DecodeError)?;
                rules.push(rule);
                states.push(state);
            }
            Value::RuleSet(Stored {
                params: Arc::from(rules),
                state: states,
            })
        }
        _ => return Err(DecodeError),
    };
    Ok(value)
}

/// A value of algorithm `A`, refused when its state is not one `A` could have written under
/// its parameters ([`algorithms::Algorithm::is_valid`]): the rules are the algorithm's, not
/// the codec's.
fn checked<A: Variant>(params: A::Params, state: A::State) -> Result<Value, DecodeError> {
    if !A::is_valid(&params, &state) {
        return Err(DecodeError);
    }
    Ok(A::wrap(Stored { params, state }))
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }

    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }

    fn u64s(&mut self, xs: &[u64]) {
        for &x in xs {
            self.u64(x);
        }
    }

    fn u128(&mut self, x: u128) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
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

    fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError),
        }
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    /// A lease's token: its length, then its bytes (1 to `MAX_TOKEN`).
    fn token(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = usize::try_from(self.u64()?).map_err(|_| DecodeError)?;
        if len == 0 || len > concurrency::MAX_TOKEN || len > self.0.len() {
            return Err(DecodeError);
        }
        let (token, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(token)
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

    fn samples() -> Vec<Value> {
        let mut all = base_samples();
        all.push(limit_sample());
        all
    }

    fn base_samples() -> Vec<Value> {
        vec![
            Value::Gcra(Stored {
                params: gcra::Params {
                    burst: 10,
                    rate: 3,
                    period_ms: 1000,
                },
                state: gcra::State {
                    tat: 5_100_000_000_000_000_001,
                },
            }),
            Value::TokenBucket(Stored {
                params: token_bucket::Params {
                    capacity: 4,
                    refill_amount: 4,
                    refill_period_ms: 60_000,
                    interval: true,
                },
                state: token_bucket::State {
                    scaled_tokens: 120_000_000,
                    updated_us: 17,
                },
            }),
            Value::LeakyBucket(Stored {
                params: leaky_bucket::Params {
                    capacity: 3,
                    leak_amount: 2,
                    leak_period_ms: 1000,
                },
                state: leaky_bucket::State { tat: 99 },
            }),
            Value::FixedWindow(Stored {
                params: fixed_window::Params {
                    limit: 5,
                    window_ms: 60_000,
                },
                state: fixed_window::State {
                    window_start_us: 60_000_000,
                    count: 3,
                },
            }),
            Value::SlidingWindow(Stored {
                params: sliding_window::Params {
                    limit: 7,
                    window_ms: 60_000,
                },
                state: sliding_window::State {
                    window_start_us: 60_000_000,
                    current: 3,
                    previous: 5,
                },
            }),
            Value::SlidingLog(Stored {
                params: sliding_log::Params {
                    limit: 10,
                    window_ms: 60_000,
                },
                state: sliding_log::State::new(
                    VecDeque::from(vec![1, 2 | sliding_log::FLAG, 4, 9]),
                    1_700_000_000_000_000,
                    sliding_log::unit_for(60_000_000),
                    6,
                ),
            }),
            Value::Concurrency(Stored {
                params: concurrency::Params {
                    limit: 3,
                    lease_ms: 30_000,
                    adaptive: None,
                },
                state: {
                    let mut state = concurrency::State::new(4);
                    state.insert(b"job-1", 99, concurrency::Start::default());
                    state
                },
            }),
            Value::Warmup(Stored {
                params: warmup::Params {
                    rate: 10,
                    period_ms: 1000,
                    warmup_ms: 10_000,
                    cold_factor: 3,
                },
                state: warmup::State {
                    stored: 792_000_000,
                    next_free: 17_000_000_000_002_980_000,
                },
            }),
            adaptive_sample(Kind::Aimd),
            adaptive_sample(Kind::Vegas),
            adaptive_sample(Kind::Gradient2),
        ]
    }

    /// An adaptive concurrency key of `kind` that has taken a few samples.
    fn adaptive_sample(kind: Kind) -> Value {
        let params = concurrency::Params {
            limit: 30,
            lease_ms: 1_000,
            adaptive: Some(adaptive::Params {
                kind,
                min: 2,
                max: 90,
            }),
        };
        let mut state = concurrency::State::new(0);
        let t0 = 1_700_000_000_000_000;
        for i in 0..25 {
            let token = concurrency::acquire(&params, &mut state, t0 + i * 10, None, true).token;
            if i % 3 != 0 {
                let report = concurrency::Report {
                    rtt_us: Some(1_000 + i * 100),
                    dropped: i % 7 == 0,
                };
                let token = token.unwrap_or_default();
                concurrency::release_reporting(&mut state, &token, t0 + i * 10 + 5, report);
            }
        }
        assert!(state.adaptive().is_some());
        Value::Concurrency(Stored { params, state })
    }

    /// A concurrency key in the layout before adaptive limits (tag 7: leases without when
    /// they began) decodes, its leases begun a lease before they end, none in flight.
    #[test]
    fn leases_of_the_layout_before_adaptive_limits_decode() {
        let mut blob = vec![2, 7];
        for x in [3u64, 30_000, 4, 1, 99_000_000, 1] {
            blob.extend_from_slice(&x.to_le_bytes());
        }
        blob.push(b'j');
        blob.extend_from_slice(&0u64.to_le_bytes());
        let Ok(Record {
            value: Value::Concurrency(s),
            ..
        }) = decode(&blob)
        else {
            panic!("not decoded: {:?}", decode(&blob));
        };
        let leases: Vec<_> = s.state.leases().collect();
        let start = concurrency::Start {
            started_us: 69_000_000,
            inflight: 0,
        };
        assert_eq!(leases, [(&b"j"[..], 99_000_000, start)]);
        assert_eq!(
            (s.params.limit, s.state.issued(), s.params.adaptive),
            (3, 4, None)
        );
    }

    /// An RL.LIMIT key whose rules are the GCRA, sliding log, fixed window and warm-up
    /// samples.
    fn limit_sample() -> Value {
        let mut rules = Vec::new();
        let mut states = Vec::new();
        for i in [0, 5, 3, 7] {
            let (rule, state) = base_samples()[i].clone().into_rule().unwrap();
            rules.push(rule);
            states.push(state);
        }
        Value::RuleSet(Stored {
            params: Arc::from(rules),
            state: states,
        })
    }

    #[test]
    fn every_algorithm_round_trips() {
        for v in samples() {
            let e = Record {
                value: v.clone(),
                blocked_until_us: 7,
            };
            assert_eq!(decode(&encode(&e)), Ok(e), "{v:?}");
        }
    }

    #[test]
    fn rejects_bad_blobs() {
        for v in samples() {
            let good = encode(&Record::new(v.clone()));
            assert_eq!(decode(&good[..good.len() - 1]), Err(DecodeError), "{v:?}");
            let mut long = good.clone();
            long.push(0);
            assert_eq!(decode(&long), Err(DecodeError), "{v:?}");
            let mut version = good.clone();
            version[0] = 99;
            assert_eq!(decode(&version), Err(DecodeError));
            // Every algorithm's first parameter is a count: zero is out of range.
            let mut zero = good.clone();
            zero[2..10].copy_from_slice(&0u64.to_le_bytes());
            assert_eq!(decode(&zero), Err(DecodeError), "{v:?}");
        }
        let mut tag = encode(&Record::new(samples()[0].clone()));
        tag[1] = 200;
        assert_eq!(decode(&tag), Err(DecodeError));
        assert_eq!(decode(&[]), Err(DecodeError));
    }

    /// Version 1 had no block: it still decodes, unblocked.
    #[test]
    fn version_1_still_decodes() {
        for v in samples() {
            let mut bytes = encode(&Record::new(v.clone()));
            bytes[0] = 1;
            bytes.truncate(bytes.len() - 8);
            assert_eq!(decode(&bytes), Ok(Record::new(v)));
        }
    }

    #[test]
    fn a_sliding_log_must_be_consistent() {
        let log = &samples()[5];
        let good = encode(&Record::new(log.clone()));
        // A total that disagrees with the entries.
        let total_at = 2 + 16 + 16;
        let mut bad_total = good.clone();
        bad_total[total_at..total_at + 8].copy_from_slice(&7u64.to_le_bytes());
        assert_eq!(decode(&bad_total), Err(DecodeError));
        // A length that promises more words than there are: no allocation for it.
        let len_at = total_at + 8;
        let mut bad_len = good.clone();
        bad_len[len_at..len_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(decode(&bad_len), Err(DecodeError));
        // A flagged entry with no count word after it (the last word, before the block).
        let mut dangling = good.clone();
        let last = dangling.len() - 12;
        dangling[last..last + 4].copy_from_slice(&(5 | sliding_log::FLAG).to_le_bytes());
        assert_eq!(decode(&dangling), Err(DecodeError));
    }

    #[test]
    fn a_limit_holds_1_to_16_rules_of_the_six_rate_algorithms() {
        let good = encode(&Record::new(limit_sample()));
        // No rules, or more than a policy holds.
        for count in [0u64, 17, u64::MAX] {
            let mut bad = good.clone();
            bad[2..10].copy_from_slice(&count.to_le_bytes());
            assert_eq!(decode(&bad), Err(DecodeError), "{count}");
        }
        // An RL.LIMIT of one rule, the rule being the value `inner` encodes.
        let one_rule = |inner: &[u8]| {
            let mut blob = good[..2].to_vec();
            blob.extend_from_slice(&1u64.to_le_bytes());
            blob.extend_from_slice(&inner[1..inner.len() - 8]);
            blob.extend_from_slice(&0u64.to_le_bytes());
            decode(&blob)
        };
        // A rule that is itself an RL.LIMIT (which could nest without end), or a lease set.
        assert_eq!(one_rule(&good), Err(DecodeError));
        let leases = encode(&Record::new(samples()[6].clone()));
        assert_eq!(one_rule(&leases), Err(DecodeError));
        // A rate algorithm's rule decodes.
        let gcra = encode(&Record::new(samples()[0].clone()));
        assert!(one_rule(&gcra).is_ok());
    }

    /// Leases are written the first to end first; a blob written in another order (as before
    /// they were kept in that order) decodes to the same state, and two leases of one token
    /// are refused.
    #[test]
    fn leases_decode_in_any_order_and_once_per_token() {
        let mut state = concurrency::State::new(2);
        state.insert(b"a", 100, concurrency::Start::default());
        state.insert(b"b", 200, concurrency::Start::default());
        let value = Value::Concurrency(Stored {
            params: concurrency::Params {
                limit: 3,
                lease_ms: 30_000,
                adaptive: None,
            },
            state,
        });
        let good = encode(&Record::new(value.clone()));
        // Two records of 33 bytes (end, start, in flight, length, one byte of token), then
        // the 8-byte block.
        let records = good.len() - 8 - 66..good.len() - 8;
        let (first, second) = good[records.clone()].split_at(33);
        let mut swapped = good.clone();
        swapped[records.clone()].copy_from_slice(&[second, first].concat());
        assert_ne!(swapped, good);
        assert_eq!(decode(&swapped).map(|e| e.value), Ok(value));
        let mut twice = good.clone();
        twice[records.clone()].copy_from_slice(&[first, first].concat());
        assert_eq!(decode(&twice), Err(DecodeError));
    }

    #[test]
    fn a_token_bucket_cannot_hold_more_than_its_capacity() {
        let mut v = samples()[1].clone();
        if let Value::TokenBucket(s) = &mut v {
            s.state.scaled_tokens = 4 * 60_000_000 + 1;
        }
        assert_eq!(decode(&encode(&Record::new(v))), Err(DecodeError));
    }

    #[test]
    fn a_warmup_key_needs_a_cold_factor_in_range_and_at_most_max_stored() {
        let good = samples()[7].clone();
        for (cold_factor, stored) in [(1, 0), (11, 0), (0, 0), (3, 800_000_001)] {
            let mut v = good.clone();
            if let Value::Warmup(s) = &mut v {
                s.params.cold_factor = cold_factor;
                s.state.stored = stored;
            }
            assert_eq!(decode(&encode(&Record::new(v))), Err(DecodeError));
        }
        let mut cold = good.clone();
        if let Value::Warmup(s) = &mut cold {
            s.state.stored = 800_000_000;
        }
        assert!(decode(&encode(&Record::new(cold))).is_ok());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(e) = decode(&bytes) {
                prop_assert_eq!(decode(&encode(&e)), Ok(e));
            }
        }

        #[test]
        fn mutated_blobs_decode_or_fail_without_panic(which in 0usize..9, at in any::<usize>(), byte in any::<u8>()) {
            let mut bytes = encode(&Record::new(samples()[which].clone()));
            let i = at % bytes.len();
            bytes[i] = byte;
            if let Ok(e) = decode(&bytes) {
                prop_assert_eq!(decode(&encode(&e)), Ok(e));
            }
        }

        #[test]
        fn every_valid_gcra_round_trips(burst in 1..=MAX_COUNT, rate in 1..=MAX_COUNT,
                                        period_ms in 1..=MAX_DURATION_MS, tat in any::<u128>()) {
            let v = Value::Gcra(Stored {
                params: gcra::Params { burst, rate, period_ms },
                state: gcra::State { tat },
            });
            let e = Record::new(v);
            prop_assert_eq!(decode(&encode(&e)), Ok(e));
        }
    }
}
