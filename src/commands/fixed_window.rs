//! RL.FIXEDWINDOW.

use super::admission;
use crate::args::params;
use crate::args::syntax::RL_FIXEDWINDOW;
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::fixed_window::FixedWindow;

/// `RL.FIXEDWINDOW key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// At most `limit` units per window, windows aligned to multiples of `window` since the Unix
/// epoch. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_fixedwindow(call: &Call) -> Result<Response, Error> {
    let mut a = RL_FIXEDWINDOW.args(call.args)?;
    let params = params::fixed_window(a.next_n()?)?;
    let opts = a.options()?;
    Ok(admission::run::<FixedWindow>(call, c"RL.FIXEDWINDOW", params, opts)?.reply(Extra::None))
}
