//! RL.LEAKYBUCKET.

use super::{admission, command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::params::{self, LEAKY_BUCKET_PARAMS};
use crate::args::syntax::{admission_args, name, KeyUse};
use crate::args::{AlgorithmCommand, Options};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{int, Extra, Response};
use algorithms::leaky_bucket::{self, LeakyBucket};

pub static RL_LEAKYBUCKET: Command = command! {
    name: name!("rl.leakybucket"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request with a leaky bucket: a queue of capacity units draining at a constant rate; the reply says when to act",
    complexity: O1,
    key: KeyUse::Update,
    args: admission_args!(LEAKY_BUCKET_PARAMS),
    handler: rl_leakybucket,
};

impl AlgorithmCommand for LeakyBucket {
    const NAME: &'static str = RL_LEAKYBUCKET.name().as_str();
}

/// `RL.LEAKYBUCKET key capacity leak_amount leak_period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// A queue of at most `capacity` units that drains `leak_amount` units per `leak_period`.
/// Reply: the five fields and a sixth, `delay_ms`: how long an admitted request waits for its
/// turn (0 when the queue was empty), -1 when denied.
pub fn rl_leakybucket(call: &Call) -> Result<Response, Error> {
    let (params, opts) = parse(call.args)?;
    let decided = admission::run::<LeakyBucket>(call, RL_LEAKYBUCKET.replay_name(), params, opts)?;
    let delay_ms = decided
        .decision
        .delay
        .map_or(-1, |span| int(span.ceil_ms()));
    Ok(decided.reply(Extra::DelayMs(delay_ms)))
}

/// RL.LEAKYBUCKET's arguments (`args[0]` the command's name, `args[1]` the key).
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(leaky_bucket::Params, Options), Error> {
    let mut a = RL_LEAKYBUCKET.syntax.args(args)?;
    let params = params::leaky_bucket(a.next_n()?)?;
    Ok((params, a.options()?))
}
