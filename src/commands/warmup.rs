//! RL.WARMUP.

use super::admission;
use crate::args::params;
use crate::args::syntax::RL_WARMUP;
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::warmup::Warmup;

/// `RL.WARMUP key rate period warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Guava's SmoothWarmingUp: `rate` per `period` once warm; after idle the spacing starts at
/// `COLDFACTOR` (default 3) times `period / rate` and falls to it over `warmup`. A request of
/// any cost is admitted when nothing is owed; later requests pay for it.
/// Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`, limit 1, remaining 1
/// when a request would be admitted now.
pub fn rl_warmup(call: &Call) -> Result<Response, Error> {
    let mut a = RL_WARMUP.args(call.args)?;
    // Read now, parsed after the options: an unknown option is the error a call sees first.
    let positional = a.next_n()?;
    let (opts, cold_factor) = a.options_with_value(
        "COLDFACTOR",
        params::COLD_FACTOR_EXPECTED,
        "COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or COLDFACTOR factor",
    )?;
    let params = params::warmup(positional, cold_factor)?;
    Ok(admission::run::<Warmup>(call, c"RL.WARMUP", params, opts)?.reply(Extra::None))
}
