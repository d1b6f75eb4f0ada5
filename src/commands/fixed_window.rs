//! RL.FIXEDWINDOW.

use super::{admission, command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::params::{self, WINDOW_PARAMS};
use crate::args::syntax::{admission_args, name, KeyUse};
use crate::args::{AlgorithmCommand, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::fixed_window::{self, FixedWindow};

pub static RL_FIXEDWINDOW: Command = command! {
    name: name!("rl.fixedwindow"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with a fixed window counter, windows aligned to the Unix epoch",
    complexity: O1,
    key: KeyUse::Update,
    args: admission_args!(WINDOW_PARAMS),
    handler: rl_fixedwindow,
};

impl AlgorithmCommand for FixedWindow {
    const NAME: &'static str = RL_FIXEDWINDOW.name().as_str();
}

/// `RL.FIXEDWINDOW key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// At most `limit` units per window, windows aligned to multiples of `window` since the Unix
/// epoch. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_fixedwindow(call: &Call) -> Result<Response, Error> {
    let (params, opts) = parse(call.args)?;
    Ok(
        admission::run::<FixedWindow>(call, RL_FIXEDWINDOW.replay_name(), params, opts)?
            .reply(Extra::None),
    )
}

/// RL.FIXEDWINDOW's arguments (`args[0]` the command's name, `args[1]` the key).
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(fixed_window::Params, Options), Error> {
    let mut a = RL_FIXEDWINDOW.syntax.args(args)?;
    let params = params::fixed_window(a.next_n()?)?;
    Ok((params, a.options()?))
}
