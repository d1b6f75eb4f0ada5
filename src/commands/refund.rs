//! RL.REFUND: a key gives back units it has taken.

use super::admission::written;
use super::{command, Command, When, ONE_KEY, WRITE};
use crate::args::syntax::{integer, name, token, KeyUse, KEY};
use crate::args::{self, MAX_COUNT};
use crate::dispatch::Call;
use crate::error::{quote, Error};
use crate::response::{int, Reply, Response};
use crate::storage::Key;

pub static RL_REFUND: Command = command! {
    name: name!("rl.refund"),
    flags: c"write fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Give back units a key has taken (a request that failed downstream, a cost estimated too high); replies the units given back",
    complexity: c"O(1); O(log N) for a sliding log holding N entries; O(R) for a policy key of R rules (O(R log N) with sliding logs)",
    key: KeyUse::Update,
    args: &[
        KEY,
        integer(c"units", c"units to give back, 0 to 10^12"),
        token(c"dryrun", c"DRYRUN", c"reply what would be given back; write and propagate nothing").optional(),
    ],
    handler: rl_refund,
};

/// `RL.REFUND key units [DRYRUN]`
///
/// Gives back up to `units` of what the key has taken (a request that failed downstream, a
/// cost estimated too high): the key is then as it would be had those units not been
/// admitted, never fresher than fresh, under the parameters it was written with; on an
/// RL.LIMIT key every rule gets them back. A BLOCK in force stays; the key's TTL is set again
/// to its new `reset_after`. Propagated like an admission (RL.REPLAY, with this call's clock
/// reading). A missing key, `units` 0, a refund that gives back nothing, and a DRYRUN write
/// and propagate nothing. A concurrency key is an error (use RL.CONCURRENCY.RELEASE).
/// Reply: the units given back (with DRYRUN, what would be).
pub fn rl_refund(call: &Call) -> Result<Response, Error> {
    let (units, dryrun) = parse(call.args)?;
    let (now_us, real_ms) = call.clock();
    let write = !dryrun && units > 0;
    let mut key = Key::open(call.ctx, call.key()?, true);
    let Some(refunded) = key.refund(now_us, units, write)? else {
        return Ok(Response::reply(Reply::Int(0)));
    };
    let reply = Reply::Int(int(refunded.given));
    if !write || refunded.given == 0 {
        return Ok(Response::reply(reply));
    }
    let propagate = written(
        call,
        &mut key,
        RL_REFUND.replay_name(),
        now_us,
        real_ms,
        refunded.reset_after,
        // The algorithms RL.REFUND takes keep nothing past their reset.
        0,
    );
    Ok(Response::propagating(reply, propagate))
}

/// RL.REFUND's arguments (`args[0]` the command's name, `args[1]` the key): the units, and
/// whether it is a DRYRUN.
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(u64, bool), Error> {
    let mut a = RL_REFUND.syntax.args_bounded(args)?;
    let units = args::count(a.next()?, "units", 0, MAX_COUNT)?;
    let position = a.position();
    let dryrun = match a.optional() {
        None => false,
        Some(token) if token.eq_ignore_ascii_case(b"DRYRUN") => true,
        Some(token) => {
            return Err(Error::UnknownOption {
                position,
                token: quote(token),
                accepted: "DRYRUN",
            })
        }
    };
    Ok((units, dryrun))
}
