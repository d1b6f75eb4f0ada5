//! RL.SLIDINGLOG.

use super::{admission, command, Command, When, ONE_KEY, WRITE};
use crate::args::params::{self, WINDOW_PARAMS};
use crate::args::syntax::{admission_args, name, KeyUse};
use crate::args::{AlgorithmCommand, Options};
use crate::dispatch::{Call, Mode};
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::sliding_log::{self, SlidingLog};

pub static RL_SLIDINGLOG: Command = command! {
    name: name!("rl.slidinglog"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with a sliding log: exact, it keeps every admitted request still in the window",
    complexity: c"O(1) amortized for a key written regularly: O(E) for the E expired entries it drops or skips, and O(COST) more for a denial",
    key: KeyUse::Update,
    args: admission_args!(WINDOW_PARAMS),
    handler: rl_slidinglog,
};

impl AlgorithmCommand for SlidingLog {
    const NAME: &'static str = RL_SLIDINGLOG.name().as_str();
}

/// `RL.SLIDINGLOG key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Exact: admits when the units admitted in the last `window` plus COST are at most `limit`.
/// `limit` is bounded by the setting `ratelimit.sliding-log-max-limit`, since the log keeps
/// a few bytes per admitted unit. Reply: `[allowed, limit, remaining, retry_after_ms,
/// reset_after_ms]`.
pub fn rl_slidinglog(call: &Call) -> Result<Response, Error> {
    // A replica replays what its primary admitted, whatever its own setting says.
    let max = match call.mode {
        Mode::Live => crate::config::sliding_log_max_limit(),
        Mode::Replay { .. } => crate::config::SLIDING_LOG_LIMIT_CEILING,
    };
    let (params, opts) = parse(call.args, max)?;
    Ok(
        admission::run::<SlidingLog>(call, RL_SLIDINGLOG.replay_name(), params, opts)?
            .reply(Extra::None),
    )
}

/// RL.SLIDINGLOG's arguments (`args[0]` the command's name, `args[1]` the key), its limit at
/// most `max`.
#[inline(always)]
pub(super) fn parse(args: &[&[u8]], max: u64) -> Result<(sliding_log::Params, Options), Error> {
    let mut a = RL_SLIDINGLOG.syntax.args(args)?;
    let params = params::sliding_log(a.next_n()?, max)?;
    Ok((params, a.options()?))
}
