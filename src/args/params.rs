//! Each algorithm's parameters from its positional arguments: what a command takes after
//! its key (read with a [`super::Cursor`]), and a rule of a policy after its algorithm's
//! name. The arguments are in the order, and named in errors as, the syntax
//! ([`super::syntax`]) has them.

use super::syntax::{
    Arg, BUCKET_CAPACITY, BURST, COLDFACTOR, COUNT, INTERVAL, LEAK_AMOUNT, LEAK_PERIOD, LEASE,
    LEASES, LIMIT, MAX_BURST, PERIOD, PERIOD_S, QUANTITY, QUEUE_CAPACITY, RATE, REFILL_AMOUNT,
    REFILL_PERIOD, WARMUP, WINDOW,
};
use super::{count, duration_ms, positive_count, MAX_COUNT, MAX_DURATION_MS};
use crate::error::Error;
use algorithms::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    warmup,
};

/// An algorithm as the module's commands run it: the pure algorithm
/// ([`algorithms::Algorithm`], which names no command) and the command that runs it, as the
/// errors spell it ("the key holds RL.GCRA state, not RL.TOKENBUCKET") and a policy's rules
/// take it (`GCRA`). Each command's entry implements it (in `commands`) with its own name.
pub trait AlgorithmCommand: algorithms::Algorithm {
    /// The command's name upper case (`RL.GCRA`).
    const NAME: &'static str;
}

/// GCRA's parameters, as RL.GCRA takes them after its key and a GCRA rule after its name.
pub const GCRA_PARAMS: &[Arg] = &[BURST, RATE, PERIOD];
/// The token bucket's, with the flag `INTERVAL`.
pub const TOKEN_BUCKET_PARAMS: &[Arg] = &[BUCKET_CAPACITY, REFILL_AMOUNT, REFILL_PERIOD, INTERVAL];
/// The leaky bucket's.
pub const LEAKY_BUCKET_PARAMS: &[Arg] = &[QUEUE_CAPACITY, LEAK_AMOUNT, LEAK_PERIOD];
/// The fixed window's, the sliding window's and the sliding log's.
pub const WINDOW_PARAMS: &[Arg] = &[LIMIT, WINDOW];
/// Warm-up's, with the option `COLDFACTOR factor`.
pub const WARMUP_PARAMS: &[Arg] = &[RATE, PERIOD, WARMUP, COLDFACTOR];

/// RL.GCRA's parameters.
pub fn gcra(&[burst, rate, period]: &[&[u8]; 3]) -> Result<gcra::Params, Error> {
    Ok(gcra::Params {
        burst: positive_count(burst, BURST.name_str)?,
        rate: positive_count(rate, RATE.name_str)?,
        period_ms: duration_ms(period, PERIOD.name_str)?,
    })
}

/// CL.THROTTLE's period is whole seconds, up to ten years.
const MAX_PERIOD_S: u64 = MAX_DURATION_MS / 1000;

/// CL.THROTTLE's arguments after the key: the GCRA parameters, and the cost (`quantity`).
pub fn throttle(
    &[max_burst, rate, period_s]: &[&[u8]; 3],
    quantity: Option<&[u8]>,
) -> Result<(gcra::Params, u64), Error> {
    let max_burst = count(max_burst, MAX_BURST.name_str, 0, MAX_COUNT - 1)?;
    let rate = positive_count(rate, COUNT.name_str)?;
    let period = PERIOD_S.name_str;
    let period_s = count(period_s, period, 1, MAX_PERIOD_S).map_err(|_| Error::Seconds {
        arg: period,
        max: MAX_PERIOD_S,
    })?;
    let quantity = match quantity {
        Some(q) => count(q, QUANTITY.name_str, 0, MAX_COUNT)?,
        None => 1,
    };
    let params = gcra::Params {
        burst: max_burst + 1,
        rate,
        period_ms: period_s * 1000,
    };
    Ok((params, quantity))
}

/// What `COLDFACTOR` takes, for the error when its value is missing.
pub const COLD_FACTOR_EXPECTED: &str = "an integer from 2 to 10";

/// RL.WARMUP's parameters: `rate period warmup`, and the value of `COLDFACTOR` if given.
pub fn warmup(
    &[rate, period, warmup]: &[&[u8]; 3],
    cold_factor: Option<&[u8]>,
) -> Result<warmup::Params, Error> {
    let range = warmup::COLD_FACTORS;
    Ok(warmup::Params {
        rate: positive_count(rate, RATE.name_str)?,
        period_ms: duration_ms(period, PERIOD.name_str)?,
        warmup_ms: duration_ms(warmup, WARMUP.name_str)?,
        cold_factor: match cold_factor {
            Some(n) => count(n, "COLDFACTOR", *range.start(), *range.end())?,
            None => warmup::DEFAULT_COLD_FACTOR,
        },
    })
}

/// A WARMUP rule of a policy: `rate period warmup [COLDFACTOR factor]`.
pub fn warmup_rule(a: &[&[u8]]) -> Result<warmup::Params, Error> {
    // The rule's words were counted before they were read: fewer is a bug.
    let Some((positional, option)) = a.split_first_chunk::<3>() else {
        return Err(Error::Panic);
    };
    let cold_factor = match option {
        [] => None,
        [_, value, ..] => Some(*value),
        [_] => {
            return Err(Error::OptionValue {
                option: "COLDFACTOR",
                expected: COLD_FACTOR_EXPECTED,
            })
        }
    };
    warmup(positional, cold_factor)
}

/// RL.TOKENBUCKET's parameters, refilled in whole steps when `interval`.
pub fn token_bucket(
    &[capacity, amount, period]: &[&[u8]; 3],
    interval: bool,
) -> Result<token_bucket::Params, Error> {
    Ok(token_bucket::Params {
        capacity: positive_count(capacity, BUCKET_CAPACITY.name_str)?,
        refill_amount: positive_count(amount, REFILL_AMOUNT.name_str)?,
        refill_period_ms: duration_ms(period, REFILL_PERIOD.name_str)?,
        interval,
    })
}

/// RL.LEAKYBUCKET's parameters.
pub fn leaky_bucket(
    &[capacity, amount, period]: &[&[u8]; 3],
) -> Result<leaky_bucket::Params, Error> {
    Ok(leaky_bucket::Params {
        capacity: positive_count(capacity, QUEUE_CAPACITY.name_str)?,
        leak_amount: positive_count(amount, LEAK_AMOUNT.name_str)?,
        leak_period_ms: duration_ms(period, LEAK_PERIOD.name_str)?,
    })
}

/// RL.FIXEDWINDOW's parameters.
pub fn fixed_window(&[limit, window]: &[&[u8]; 2]) -> Result<fixed_window::Params, Error> {
    Ok(fixed_window::Params {
        limit: positive_count(limit, LIMIT.name_str)?,
        window_ms: duration_ms(window, WINDOW.name_str)?,
    })
}

/// RL.SLIDINGWINDOW's parameters.
pub fn sliding_window(&[limit, window]: &[&[u8]; 2]) -> Result<sliding_window::Params, Error> {
    Ok(sliding_window::Params {
        limit: positive_count(limit, LIMIT.name_str)?,
        window_ms: duration_ms(window, WINDOW.name_str)?,
    })
}

/// RL.SLIDINGLOG's parameters, `limit` at most `max` (the setting `sliding-log-max-limit`).
pub fn sliding_log(&[limit, window]: &[&[u8]; 2], max: u64) -> Result<sliding_log::Params, Error> {
    Ok(sliding_log::Params {
        limit: count(limit, LIMIT.name_str, 1, max).map_err(|_| Error::CappedLimit {
            max,
            setting: "sliding-log-max-limit",
        })?,
        window_ms: duration_ms(window, WINDOW.name_str)?,
    })
}

/// RL.CONCURRENCY.ACQUIRE's parameters, `limit` at most `max` (the setting
/// `concurrency-max-limit`).
pub fn concurrency(&[limit, lease]: &[&[u8]; 2], max: u64) -> Result<concurrency::Params, Error> {
    Ok(concurrency::Params {
        limit: count(limit, LEASES.name_str, 1, max).map_err(|_| Error::CappedLimit {
            max,
            setting: "concurrency-max-limit",
        })?,
        lease_ms: duration_ms(lease, LEASE.name_str)?,
        adaptive: None,
    })
}
