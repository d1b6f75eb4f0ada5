//! RL.WARMUP.

use super::{admission, command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::params::{self, WARMUP_PARAMS};
use crate::args::syntax::{admission_args, name, KeyUse};
use crate::args::{AlgorithmCommand, Grammar, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::warmup::{self, Warmup};

pub static RL_WARMUP: Command = command! {
    name: name!("rl.warmup"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with Guava's SmoothWarmingUp: after idle, spaced by the cold interval at first, speeding up to rate per period over the warm-up",
    complexity: O1,
    key: KeyUse::Update,
    args: admission_args!(WARMUP_PARAMS),
    handler: rl_warmup,
};

impl AlgorithmCommand for Warmup {
    const NAME: &'static str = RL_WARMUP.name().as_str();
}

/// The admission options and `COLDFACTOR factor`.
const OPTIONS: Grammar = Grammar {
    valued: &[("COLDFACTOR", params::COLD_FACTOR_EXPECTED)],
    accepted: "COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or COLDFACTOR factor",
    ..Grammar::ADMISSION
};

/// `RL.WARMUP key rate period warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Guava's SmoothWarmingUp: `rate` per `period` once warm; after idle the spacing starts at
/// `COLDFACTOR` (default 3) times `period / rate` and falls to it over `warmup`. A request of
/// any cost is admitted when nothing is owed; later requests pay for it.
/// Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`, limit 1, remaining 1
/// when a request would be admitted now.
pub fn rl_warmup(call: &Call) -> Result<Response, Error> {
    let (params, opts) = parse(call.args)?;
    Ok(admission::run::<Warmup>(call, RL_WARMUP.replay_name(), params, opts)?.reply(Extra::None))
}

/// RL.WARMUP's arguments (`args[0]` the command's name, `args[1]` the key).
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(warmup::Params, Options), Error> {
    let mut a = RL_WARMUP.syntax.args(args)?;
    // Read now, parsed after the options: an unknown option is the error a call sees first.
    let positional = a.next_n()?;
    let mut cold_factor = None;
    let (opts, _) = a.options_by(&OPTIONS, |_, value| {
        cold_factor = Some(value);
        Ok(())
    })?;
    Ok((params::warmup(positional, cold_factor)?, opts))
}
