//! The internal commands that carry writes to replicas and into the AOF. Both are refused
//! from ordinary clients, whatever their ACL: they carry a clock reading or a raw state,
//! and a client that could send them could forge any limiter's state.

use super::{command, replayable, Command, When, ONE_KEY, PRIVILEGED};
use crate::args::syntax::{name, string, KeyUse, KEY};
use crate::dispatch::{self, parse_replay, Call, Mode};
use crate::error::Error;
use crate::response::{Propagate, Reply, Response};
use crate::storage::{codec, Key};

/// Accepted only from the replication link (the primary) or while loading the AOF.
fn internal_only(call: &Call, command: &'static str) -> Result<(), Error> {
    if !call.ctx.replicated_or_loading() {
        return Err(Error::InternalOnly { command });
    }
    Ok(())
}

pub static RL_REPLAY: Command = command! {
    // The name the dispatcher propagates a client's write as.
    name: dispatch::REPLAY,
    flags: c"write",
    acl: PRIVILEGED,
    keys: ONE_KEY,
    when: When::Always,
    replayable: false,
    summary: c"Internal: replays an admitted write with the primary's clock reading; accepted only from replication or the AOF",
    complexity: c"That of the replayed command",
    key: KeyUse::Update,
    args: &[
        KEY,
        string(c"now_us:expire_at_ms:command:arg", c"the primary's clock reading, the key's expiry, the command and its first argument after the key"),
        string(c"arg", c"the command's other arguments").optional().multiple(),
    ],
    handler: rl_replay,
};

/// `RL.REPLAY key now_us:expire_at_ms:command:arg arg...` (internal)
///
/// Runs the admission command `command key arg arg...` with the primary's clock reading
/// `now_us` and sets the key to expire at `expire_at_ms` (absolute, real clock) if it writes.
/// The clock, the command and its first argument after the key share one argument so that
/// the primary can send this with the client's own argument count (see
/// `crate::dispatch`). Reply: whatever the replayed command replies.
pub fn rl_replay(call: &Call) -> Result<Response, Error> {
    internal_only(call, RL_REPLAY.name().as_str())?;
    // Counted under RL.REPLAY; a replayed denial publishes no keyspace event (the mode
    // below marks the response).
    let mut a = RL_REPLAY.syntax.args(call.args)?;
    // Built on the failing branch only: this runs for every write a replica applies.
    let Some(replayed) = parse_replay(a.next()?) else {
        return Err(Error::NotReplayable);
    };
    let Some(command) = replayable(replayed.command) else {
        return Err(Error::NotReplayable);
    };
    // The replayed call: the command, the key (argument 1, the client's), the first argument
    // carried, and the others as they came.
    let key = call.args.get(1).copied().unwrap_or_default();
    let mut args: Vec<&[u8]> = Vec::with_capacity(call.args.len());
    args.extend_from_slice(&[replayed.command, key, replayed.first_arg]);
    args.extend_from_slice(a.rest());
    let inner = Call {
        ctx: call.ctx,
        args: &args,
        key: call.key,
        mode: Mode::Replay {
            now_us: replayed.now_us,
            expire_at_ms: replayed.expire_at_ms,
        },
    };
    (command.handler)(&inner)
}

pub static RL_LOADSTATE: Command = command! {
    name: name!("rl.loadstate"),
    flags: c"write",
    acl: PRIVILEGED,
    keys: ONE_KEY,
    when: When::Always,
    replayable: false,
    summary: c"Internal: sets a key's encoded state, as an AOF rewrite writes it; accepted only from replication or the AOF",
    complexity: c"O(N) where N is the size of the state",
    key: KeyUse::Overwrite,
    args: &[KEY, string(c"state", c"the encoded state")],
    handler: rl_loadstate,
};

/// `RL.LOADSTATE key state` (internal)
///
/// Sets the key's state from its encoding; the AOF rewrite emits it for every limiter key,
/// followed by the key's PEXPIREAT. Reply: OK.
pub fn rl_loadstate(call: &Call) -> Result<Response, Error> {
    internal_only(call, RL_LOADSTATE.name().as_str())?;
    let state = RL_LOADSTATE.syntax.args_bounded(call.args)?.next()?;
    let value = codec::decode(state).map_err(|_| Error::BadState)?;
    let mut key = Key::open(call.ctx, call.key()?, true);
    key.replace(value)?;
    Ok(Response::propagating(Reply::Ok, Propagate::Verbatim))
}
