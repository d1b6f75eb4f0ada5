//! Each algorithm's parameters from its positional arguments: what a command takes after
//! its key, and a rule of a policy after its algorithm's name. The arguments are in the
//! order, and named in errors as, the syntax table ([`super::syntax`]) has them.

use super::syntax::{
    BUCKET_CAPACITY, BURST, COUNT, LEAK_AMOUNT, LEAK_PERIOD, LEASE, LEASES, LIMIT, MAX_BURST,
    PERIOD, PERIOD_S, QUANTITY, QUEUE_CAPACITY, RATE, REFILL_AMOUNT, REFILL_PERIOD, WARMUP, WINDOW,
};
use super::{count, duration_ms, positive_count, MAX_COUNT, MAX_DURATION_MS};
use crate::error::Error;
use algorithms::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
    warmup,
};

/// RL.GCRA's parameters.
pub fn gcra(a: &[&[u8]]) -> Result<gcra::Params, Error> {
    Ok(gcra::Params {
        burst: positive_count(a[0], BURST.name_str)?,
        rate: positive_count(a[1], RATE.name_str)?,
        period_ms: duration_ms(a[2], PERIOD.name_str)?,
    })
}

/// CL.THROTTLE's period is whole seconds, up to ten years.
const MAX_PERIOD_S: u64 = MAX_DURATION_MS / 1000;

/// CL.THROTTLE's arguments after the key: the GCRA parameters, and the cost (`quantity`).
pub fn throttle(a: &[&[u8]]) -> Result<(gcra::Params, u64), Error> {
    let max_burst = count(a[0], MAX_BURST.name_str, 0, MAX_COUNT - 1)?;
    let rate = positive_count(a[1], COUNT.name_str)?;
    let period = PERIOD_S.name_str;
    let period_s = count(a[2], period, 1, MAX_PERIOD_S).map_err(|_| Error::Seconds {
        arg: period,
        max: MAX_PERIOD_S,
    })?;
    let quantity = match a.get(3) {
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
pub fn warmup(a: &[&[u8]], cold_factor: Option<&[u8]>) -> Result<warmup::Params, Error> {
    let range = warmup::COLD_FACTORS;
    Ok(warmup::Params {
        rate: positive_count(a[0], RATE.name_str)?,
        period_ms: duration_ms(a[1], PERIOD.name_str)?,
        warmup_ms: duration_ms(a[2], WARMUP.name_str)?,
        cold_factor: match cold_factor {
            Some(n) => count(n, "COLDFACTOR", *range.start(), *range.end())?,
            None => warmup::DEFAULT_COLD_FACTOR,
        },
    })
}

/// A WARMUP rule of a policy: `rate period warmup [COLDFACTOR factor]`.
pub fn warmup_rule(a: &[&[u8]]) -> Result<warmup::Params, Error> {
    let cold_factor = match (a.get(3), a.get(4)) {
        (Some(_), Some(&value)) => Some(value),
        (Some(_), None) => {
            return Err(Error::OptionValue {
                option: "COLDFACTOR",
                expected: COLD_FACTOR_EXPECTED,
            })
        }
        (None, _) => None,
    };
    warmup(&a[..3], cold_factor)
}

/// RL.TOKENBUCKET's parameters, refilled in whole steps when `interval`.
pub fn token_bucket(a: &[&[u8]], interval: bool) -> Result<token_bucket::Params, Error> {
    Ok(token_bucket::Params {
        capacity: positive_count(a[0], BUCKET_CAPACITY.name_str)?,
        refill_amount: positive_count(a[1], REFILL_AMOUNT.name_str)?,
        refill_period_ms: duration_ms(a[2], REFILL_PERIOD.name_str)?,
        interval,
    })
}

/// RL.LEAKYBUCKET's parameters.
pub fn leaky_bucket(a: &[&[u8]]) -> Result<leaky_bucket::Params, Error> {
    Ok(leaky_bucket::Params {
        capacity: positive_count(a[0], QUEUE_CAPACITY.name_str)?,
        leak_amount: positive_count(a[1], LEAK_AMOUNT.name_str)?,
        leak_period_ms: duration_ms(a[2], LEAK_PERIOD.name_str)?,
    })
}

/// RL.FIXEDWINDOW's parameters.
pub fn fixed_window(a: &[&[u8]]) -> Result<fixed_window::Params, Error> {
    Ok(fixed_window::Params {
        limit: positive_count(a[0], LIMIT.name_str)?,
        window_ms: duration_ms(a[1], WINDOW.name_str)?,
    })
}

/// RL.SLIDINGWINDOW's parameters.
pub fn sliding_window(a: &[&[u8]]) -> Result<sliding_window::Params, Error> {
    Ok(sliding_window::Params {
        limit: positive_count(a[0], LIMIT.name_str)?,
        window_ms: duration_ms(a[1], WINDOW.name_str)?,
    })
}

/// RL.SLIDINGLOG's parameters, `limit` at most `max` (the setting `sliding-log-max-limit`).
pub fn sliding_log(a: &[&[u8]], max: u64) -> Result<sliding_log::Params, Error> {
    Ok(sliding_log::Params {
        limit: count(a[0], LIMIT.name_str, 1, max).map_err(|_| Error::CappedLimit {
            max,
            setting: "sliding-log-max-limit",
        })?,
        window_ms: duration_ms(a[1], WINDOW.name_str)?,
    })
}

/// RL.CONCURRENCY.ACQUIRE's parameters, `limit` at most `max` (the setting
/// `concurrency-max-limit`).
pub fn concurrency(a: &[&[u8]], max: u64) -> Result<concurrency::Params, Error> {
    Ok(concurrency::Params {
        limit: count(a[0], LEASES.name_str, 1, max).map_err(|_| Error::CappedLimit {
            max,
            setting: "concurrency-max-limit",
        })?,
        lease_ms: duration_ms(a[1], LEASE.name_str)?,
    })
}
