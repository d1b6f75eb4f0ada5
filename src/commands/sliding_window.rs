//! RL.SLIDINGWINDOW.

use super::{admission, Call};
use crate::algorithms::sliding_window::{Params, SlidingWindow};
use crate::args;
use crate::error::Error;
use crate::response::{Extra, Response};

/// `RL.SLIDINGWINDOW key limit window [COST n] [DRYRUN] [BLOCK duration]`
///
/// The sliding window counter: the previous aligned window's count, weighted by how much of
/// it still overlaps the sliding window, plus the current one's, at most `limit`.
/// Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_slidingwindow(call: &Call) -> Result<Response, Error> {
    let a = admission::arguments(
        call,
        3,
        "RL.SLIDINGWINDOW",
        "key limit window [COST n] [DRYRUN] [BLOCK duration]",
    )?;
    let params = params(&a[2..4])?;
    let opts = args::options(&a[4..], 4)?;
    Ok(
        admission::run::<SlidingWindow>(call, c"RL.SLIDINGWINDOW", params, opts)?
            .reply(Extra::None),
    )
}

/// The parameters from `limit window` (also a rule of a policy).
pub fn params(a: &[&[u8]]) -> Result<Params, Error> {
    Ok(Params {
        limit: args::positive_count(a[0], "limit")?,
        window_ms: args::duration_ms(a[1], "window")?,
    })
}
