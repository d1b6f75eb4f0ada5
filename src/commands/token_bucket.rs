//! RL.TOKENBUCKET.

use super::{admission, command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::params::{self, TOKEN_BUCKET_PARAMS};
use crate::args::syntax::{admission_args, name, KeyUse};
use crate::args::{AlgorithmCommand, Grammar, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Extra, Response};
use algorithms::token_bucket::{self, TokenBucket};

pub static RL_TOKENBUCKET: Command = command! {
    name: name!("rl.tokenbucket"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with a token bucket: capacity tokens, refilled by refill_amount per refill_period",
    complexity: O1,
    key: KeyUse::Update,
    args: admission_args!(TOKEN_BUCKET_PARAMS),
    handler: rl_tokenbucket,
};

impl AlgorithmCommand for TokenBucket {
    const NAME: &'static str = RL_TOKENBUCKET.name().as_str();
}

/// The admission options and `INTERVAL`.
const OPTIONS: Grammar = Grammar {
    flags: &["INTERVAL"],
    accepted: "COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or INTERVAL",
    ..Grammar::ADMISSION
};

/// `RL.TOKENBUCKET key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// A bucket of `capacity` tokens, full at first, refilled with `refill_amount` tokens per
/// `refill_period` (continuously, or in whole steps at each period with `INTERVAL`); a request
/// takes `COST` tokens. Reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn rl_tokenbucket(call: &Call) -> Result<Response, Error> {
    let (params, opts) = parse(call.args)?;
    Ok(
        admission::run::<TokenBucket>(call, RL_TOKENBUCKET.replay_name(), params, opts)?
            .reply(Extra::None),
    )
}

/// RL.TOKENBUCKET's arguments (`args[0]` the command's name, `args[1]` the key).
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(token_bucket::Params, Options), Error> {
    let mut a = RL_TOKENBUCKET.syntax.args(args)?;
    let mut params = params::token_bucket(a.next_n()?, false)?;
    let (opts, flags) = a.options_by(&OPTIONS, |_, _| Ok(()))?;
    params.interval = flags & 1 != 0;
    Ok((params, opts))
}
