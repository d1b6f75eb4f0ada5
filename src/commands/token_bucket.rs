//! RL.TOKENBUCKET.

use super::admission;
use crate::args::params;
use crate::args::syntax::RL_TOKENBUCKET;
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::token_bucket::TokenBucket;

/// `RL.TOKENBUCKET key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// A bucket of `capacity` tokens, full at first, refilled with `refill_amount` tokens per
/// `refill_period` (continuously, or in whole steps at each period with `INTERVAL`); a request
/// takes `COST` tokens. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_tokenbucket(call: &Call) -> Result<Response, Error> {
    let mut a = RL_TOKENBUCKET.args(call.args)?;
    let mut params = params::token_bucket(a.next_n()?, false)?;
    let (opts, flags) = a.options_with(
        &["INTERVAL"],
        "COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or INTERVAL",
    )?;
    params.interval = flags & 1 != 0;
    Ok(admission::run::<TokenBucket>(call, c"RL.TOKENBUCKET", params, opts)?.reply(Extra::None))
}
