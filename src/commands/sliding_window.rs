//! RL.SLIDINGWINDOW.

use super::{admission, command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::params::{self, WINDOW_PARAMS};
use crate::args::syntax::{admission_args, name, KeyUse};
use crate::args::{AlgorithmCommand, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::sliding_window::{self, SlidingWindow};

pub static RL_SLIDINGWINDOW: Command = command! {
    name: name!("rl.slidingwindow"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with a sliding window counter: this window's count plus the previous one's, weighted",
    complexity: O1,
    key: KeyUse::Update,
    args: admission_args!(WINDOW_PARAMS),
    handler: rl_slidingwindow,
};

impl AlgorithmCommand for SlidingWindow {
    const NAME: &'static str = RL_SLIDINGWINDOW.name().as_str();
}

/// `RL.SLIDINGWINDOW key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// The sliding window counter: the previous aligned window's count, weighted by how much of
/// it still overlaps the sliding window, plus the current one's, at most `limit`.
/// Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_slidingwindow(call: &Call) -> Result<Response, Error> {
    let (params, opts) = parse(call.args)?;
    Ok(
        admission::run::<SlidingWindow>(call, RL_SLIDINGWINDOW.replay_name(), params, opts)?
            .reply(Extra::None),
    )
}

/// RL.SLIDINGWINDOW's arguments (`args[0]` the command's name, `args[1]` the key).
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(sliding_window::Params, Options), Error> {
    let mut a = RL_SLIDINGWINDOW.syntax.args(args)?;
    let params = params::sliding_window(a.next_n()?)?;
    Ok((params, a.options()?))
}
