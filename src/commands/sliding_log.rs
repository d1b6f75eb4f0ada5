//! RL.SLIDINGLOG.

use super::admission;
use crate::args::params;
use crate::args::syntax::RL_SLIDINGLOG;
use crate::dispatch::{Call, Mode};
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::sliding_log::SlidingLog;

/// `RL.SLIDINGLOG key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Exact: admits when the units admitted in the last `window` plus COST are at most `limit`.
/// `limit` is bounded by the setting `ratelimit.sliding-log-max-limit`, since the log keeps
/// a few bytes per admitted unit. Reply: `[allowed, limit, remaining, retry_after_ms,
/// reset_after_ms]`.
pub fn rl_slidinglog(call: &Call) -> Result<Response, Error> {
    let mut a = RL_SLIDINGLOG.args(call.args)?;
    // A replica replays what its primary admitted, whatever its own setting says.
    let max = match call.mode {
        Mode::Live => crate::config::sliding_log_max_limit(),
        Mode::Replay { .. } => crate::config::SLIDING_LOG_LIMIT_CEILING,
    };
    let params = params::sliding_log(a.next_n()?, max)?;
    let opts = a.options()?;
    Ok(admission::run::<SlidingLog>(call, c"RL.SLIDINGLOG", params, opts)?.reply(Extra::None))
}
