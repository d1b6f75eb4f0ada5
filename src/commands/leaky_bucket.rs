//! RL.LEAKYBUCKET.

use super::admission;
use crate::args::params;
use crate::args::syntax::RL_LEAKYBUCKET;
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{int, Extra, Response};
use algorithms::leaky_bucket::LeakyBucket;

/// `RL.LEAKYBUCKET key capacity leak_amount leak_period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// A queue of at most `capacity` units that drains `leak_amount` units per `leak_period`.
/// Reply: the five fields and a sixth, `delay_ms`: how long an admitted request waits for its
/// turn (0 when the queue was empty), -1 when denied.
pub fn rl_leakybucket(call: &Call) -> Result<Response, Error> {
    let mut a = RL_LEAKYBUCKET.args(call.args)?;
    let params = params::leaky_bucket(a.next_n()?)?;
    let opts = a.options()?;
    let decided = admission::run::<LeakyBucket>(call, c"RL.LEAKYBUCKET", params, opts)?;
    let delay_ms = decided
        .decision
        .delay
        .map_or(-1, |span| int(span.ceil_ms()));
    Ok(decided.reply(Extra::DelayMs(delay_ms)))
}
