//! RL.FIXEDWINDOW.

use super::{admission, Call};
use crate::algorithms::fixed_window::{FixedWindow, Params};
use crate::args;
use crate::error::Error;
use crate::response::{Extra, Response};

/// `RL.FIXEDWINDOW key limit window [COST n] [DRYRUN] [BLOCK duration]`
///
/// At most `limit` units per window, windows aligned to multiples of `window` since the Unix
/// epoch. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_fixedwindow(call: &Call) -> Result<Response, Error> {
    let a = admission::arguments(
        call,
        3,
        "RL.FIXEDWINDOW",
        "key limit window [COST n] [DRYRUN] [BLOCK duration]",
    )?;
    let params = params(&a[2..4])?;
    let opts = args::options(&a[4..], 4)?;
    Ok(admission::run::<FixedWindow>(call, c"RL.FIXEDWINDOW", params, opts)?.reply(Extra::None))
}

/// The parameters from `limit window` (also a rule of a policy).
pub fn params(a: &[&[u8]]) -> Result<Params, Error> {
    Ok(Params {
        limit: args::positive_count(a[0], "limit")?,
        window_ms: args::duration_ms(a[1], "window")?,
    })
}
