//! RL.GCRA and its redis-cell compatible twin CL.THROTTLE: the same algorithm and state.

use super::admission;
use crate::args::syntax::{CL_THROTTLE, RL_GCRA};
use crate::args::{self, params, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::gcra::Gcra;

/// `RL.GCRA key burst rate period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Admits up to `burst` units at once, then `rate` units per `period`, one every
/// `period / rate`. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`
/// (a map with a boolean `allowed` for RESP3 clients), and `shadow_denied` with SHADOW.
pub fn rl_gcra(call: &Call) -> Result<Response, Error> {
    let a = admission::arguments(call, &RL_GCRA)?;
    let params = params::gcra(&a[2..5])?;
    let opts = args::options(&a[5..], 5)?;
    Ok(admission::run::<Gcra>(call, c"RL.GCRA", params, opts)?.reply(Extra::None))
}

/// `CL.THROTTLE key max_burst count period [quantity]`
///
/// redis-cell's command: `count` per `period` seconds with bursts of `max_burst + 1`.
/// Reply: `[limited, max_burst + 1, remaining, retry_after_s or -1, reset_after_s]`.
pub fn cl_throttle(call: &Call) -> Result<Response, Error> {
    let a = call.args;
    // redis-cell's reply has no room for `shadow_denied`: SHADOW is refused by name rather
    // than read as a quantity or an extra argument.
    if a.iter().skip(5).any(|w| w.eq_ignore_ascii_case(b"SHADOW")) {
        return Err(Error::ShadowRefused {
            command: "CL.THROTTLE",
        });
    }
    if a.len() != 5 && a.len() != 6 {
        return Err(CL_THROTTLE.arity());
    }
    let (params, quantity) = params::throttle(&a[2..])?;
    let opts = Options {
        cost: quantity,
        ..Options::default()
    };
    Ok(admission::run::<Gcra>(call, c"CL.THROTTLE", params, opts)?.redis_cell())
}
