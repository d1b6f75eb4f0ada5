//! RL.GCRA and its redis-cell compatible twin CL.THROTTLE: the same algorithm and state.

use super::{admission, Call};
use crate::algorithms::gcra::{Gcra, Params};
use crate::args::{self, Options, MAX_COUNT, MAX_DURATION_MS};
use crate::error::Error;
use crate::response::{Extra, Response};

const GCRA_USAGE: &str = "key burst rate period [COST n] [DRYRUN] [BLOCK duration]";

/// `RL.GCRA key burst rate period [COST n] [DRYRUN] [BLOCK duration]`
///
/// Admits up to `burst` units at once, then `rate` units per `period`, one every
/// `period / rate`. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`
/// (a map with a boolean `allowed` for RESP3 clients).
pub fn rl_gcra(call: &Call) -> Result<Response, Error> {
    let a = admission::arguments(call, 4, "RL.GCRA", GCRA_USAGE)?;
    let params = params(&a[2..5])?;
    let opts = args::options(&a[5..], 5)?;
    Ok(admission::run::<Gcra>(call, c"RL.GCRA", params, opts)?.reply(Extra::None))
}

/// The parameters from `burst rate period` (also a GCRA rule of a policy).
pub fn params(a: &[&[u8]]) -> Result<Params, Error> {
    Ok(Params {
        burst: args::positive_count(a[0], "burst")?,
        rate: args::positive_count(a[1], "rate")?,
        period_ms: args::duration_ms(a[2], "period")?,
    })
}

const THROTTLE_USAGE: &str = "key max_burst count period [quantity]";
/// CL.THROTTLE's period is whole seconds, up to ten years.
const MAX_PERIOD_S: u64 = MAX_DURATION_MS / 1000;

/// `CL.THROTTLE key max_burst count period [quantity]`
///
/// redis-cell's command: `count` per `period` seconds with bursts of `max_burst + 1`.
/// Reply: `[limited, max_burst + 1, remaining, retry_after_s or -1, reset_after_s]`.
pub fn cl_throttle(call: &Call) -> Result<Response, Error> {
    let a = call.args;
    if a.len() != 5 && a.len() != 6 {
        return Err(Error::Arity {
            command: "CL.THROTTLE",
            usage: THROTTLE_USAGE,
        });
    }
    let max_burst = args::count(a[2], "max_burst", 0, MAX_COUNT - 1)?;
    let count = args::positive_count(a[3], "count")?;
    let period_s = args::count(a[4], "period", 1, MAX_PERIOD_S).map_err(|_| Error::Seconds {
        arg: "period",
        max: MAX_PERIOD_S,
    })?;
    let quantity = match a.get(5) {
        Some(q) => args::count(q, "quantity", 0, MAX_COUNT)?,
        None => 1,
    };
    let params = Params {
        burst: max_burst + 1,
        rate: count,
        period_ms: period_s * 1000,
    };
    let opts = Options {
        cost: quantity,
        ..Options::default()
    };
    Ok(admission::run::<Gcra>(call, c"CL.THROTTLE", params, opts)?.redis_cell())
}
