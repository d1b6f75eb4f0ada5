//! RL.GCRA and its redis-cell compatible twin CL.THROTTLE: the same algorithm and state.

use super::{admission, command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::params::{self, GCRA_PARAMS};
use crate::args::syntax::{
    admission_args, name, KeyUse, COUNT, KEY, MAX_BURST, PERIOD_S, QUANTITY,
};
use crate::args::{AlgorithmCommand, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::gcra::{self, Gcra};

pub static RL_GCRA: Command = command! {
    name: name!("rl.gcra"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with GCRA: up to burst units at once, then rate units per period, evenly spaced",
    complexity: O1,
    key: KeyUse::Update,
    args: admission_args!(GCRA_PARAMS),
    handler: rl_gcra,
};

/// A GCRA key is RL.GCRA's (CL.THROTTLE's too: the same state).
impl AlgorithmCommand for Gcra {
    const NAME: &'static str = RL_GCRA.name().as_str();
}

/// `RL.GCRA key burst rate period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Admits up to `burst` units at once, then `rate` units per `period`, one every
/// `period / rate`. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`
/// (a map with a boolean `allowed` for RESP3 clients), and `shadow_denied` with SHADOW.
pub fn rl_gcra(call: &Call) -> Result<Response, Error> {
    let (params, opts) = parse(call.args)?;
    Ok(admission::run::<Gcra>(call, RL_GCRA.replay_name(), params, opts)?.reply(Extra::None))
}

/// RL.GCRA's arguments (`args[0]` the command's name, `args[1]` the key), before the key is read.
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(gcra::Params, Options), Error> {
    let mut a = RL_GCRA.syntax.args(args)?;
    let params = params::gcra(a.next_n()?)?;
    Ok((params, a.options()?))
}

pub static CL_THROTTLE: Command = command! {
    name: name!("cl.throttle"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::CellCompat,
    replayable: true,
    summary: c"Admit or deny a request with GCRA, redis-cell compatible: its arguments, its reply in seconds",
    complexity: O1,
    key: KeyUse::Update,
    args: &[KEY, MAX_BURST, COUNT, PERIOD_S, QUANTITY],
    handler: cl_throttle,
};

/// `CL.THROTTLE key max_burst count period [quantity]`
///
/// redis-cell's command: `count` per `period` seconds with bursts of `max_burst + 1`.
/// Reply: `[limited, max_burst + 1, remaining, retry_after_s or -1, reset_after_s]`.
pub fn cl_throttle(call: &Call) -> Result<Response, Error> {
    // redis-cell's reply has no room for `shadow_denied`: SHADOW after the required
    // arguments is refused by name rather than read as a quantity or an extra argument.
    let after_required = call.args.get(1 + CL_THROTTLE.syntax.required..);
    if after_required.is_some_and(|a| a.iter().any(|w| w.eq_ignore_ascii_case(b"SHADOW"))) {
        return Err(Error::ShadowRefused {
            command: CL_THROTTLE.name().as_str(),
        });
    }
    let mut a = CL_THROTTLE.syntax.args_bounded(call.args)?;
    let (params, quantity) = params::throttle(a.next_n()?, a.optional())?;
    let opts = Options {
        cost: quantity,
        ..Options::default()
    };
    Ok(admission::run::<Gcra>(call, CL_THROTTLE.replay_name(), params, opts)?.redis_cell())
}
