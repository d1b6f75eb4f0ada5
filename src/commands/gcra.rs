//! RL.GCRA and its redis-cell compatible twin CL.THROTTLE: the same algorithm and state.

use super::admission;
use crate::args::syntax::{CL_THROTTLE, RL_GCRA};
use crate::args::{params, Options};
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
    let mut a = RL_GCRA.args(call.args)?;
    let params = params::gcra(a.next_n()?)?;
    let opts = a.options()?;
    Ok(admission::run::<Gcra>(call, c"RL.GCRA", params, opts)?.reply(Extra::None))
}

/// `CL.THROTTLE key max_burst count period [quantity]`
///
/// redis-cell's command: `count` per `period` seconds with bursts of `max_burst + 1`.
/// Reply: `[limited, max_burst + 1, remaining, retry_after_s or -1, reset_after_s]`.
pub fn cl_throttle(call: &Call) -> Result<Response, Error> {
    // redis-cell's reply has no room for `shadow_denied`: SHADOW after the required
    // arguments is refused by name rather than read as a quantity or an extra argument.
    let after_required = call.args.get(1 + CL_THROTTLE.required..);
    if after_required.is_some_and(|a| a.iter().any(|w| w.eq_ignore_ascii_case(b"SHADOW"))) {
        return Err(Error::ShadowRefused {
            command: "CL.THROTTLE",
        });
    }
    let mut a = CL_THROTTLE.args_bounded(call.args)?;
    let (params, quantity) = params::throttle(a.next_n()?, a.optional())?;
    let opts = Options {
        cost: quantity,
        ..Options::default()
    };
    Ok(admission::run::<Gcra>(call, c"CL.THROTTLE", params, opts)?.redis_cell())
}
