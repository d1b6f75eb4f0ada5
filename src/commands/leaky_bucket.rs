//! RL.LEAKYBUCKET.

use super::{admission, Call};
use crate::algorithms::leaky_bucket::LeakyBucket;
use crate::args::syntax::RL_LEAKYBUCKET;
use crate::args::{self, params};
use crate::error::Error;
use crate::reply::{self, int};

/// `RL.LEAKYBUCKET key capacity leak_amount leak_period [COST n] [DRYRUN] [BLOCK duration]`
///
/// A queue of at most `capacity` units that drains `leak_amount` units per `leak_period`.
/// Reply: the five fields and a sixth, `delay_ms`: how long an admitted request waits for its
/// turn (0 when the queue was empty), -1 when denied.
pub fn rl_leakybucket(call: &Call) -> Result<(), Error> {
    let a = admission::arguments(call, &RL_LEAKYBUCKET)?;
    let params = params::leaky_bucket(&a[2..5])?;
    let opts = args::options(&a[5..], 5)?;
    admission::run::<LeakyBucket>(call, c"RL.LEAKYBUCKET", params, opts, |ctx, d| {
        let delay_ms = d.delay.map_or(-1, |span| int(span.ceil_ms()));
        reply::admission(ctx, d, Some(("delay_ms", reply::Extra::Int(delay_ms))))
    })
}
