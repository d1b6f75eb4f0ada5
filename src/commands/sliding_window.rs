//! RL.SLIDINGWINDOW.

use super::admission;
use crate::args::params;
use crate::args::syntax::RL_SLIDINGWINDOW;
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::sliding_window::SlidingWindow;

/// `RL.SLIDINGWINDOW key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// The sliding window counter: the previous aligned window's count, weighted by how much of
/// it still overlaps the sliding window, plus the current one's, at most `limit`.
/// Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_slidingwindow(call: &Call) -> Result<Response, Error> {
    let mut a = RL_SLIDINGWINDOW.args(call.args)?;
    let params = params::sliding_window(a.next_n()?)?;
    let opts = a.options()?;
    Ok(
        admission::run::<SlidingWindow>(call, c"RL.SLIDINGWINDOW", params, opts)?
            .reply(Extra::None),
    )
}
