//! The path every admission command shares once its arguments are parsed:
//! clock → storage load → algorithm → storage save, TTL, propagation → reply.

use std::ffi::CStr;
use std::os::raw::{c_char, c_longlong};

use redis_module::raw;

use super::{Call, Ctx, Mode};
use crate::algorithms::Decision;
use crate::args::Options;
use crate::clock;
use crate::error::Error;
use crate::storage::{Key, Stored, Variant};

/// The internal command that carries a write to replicas and the AOF.
pub const REPLAY: &CStr = c"RL.REPLAY";

/// The arguments of an admission command with `positional` arguments after its name (the
/// key included), or the arity error naming its syntax.
pub fn arguments<'a>(
    call: &Call<'a>,
    positional: usize,
    command: &'static str,
    usage: &'static str,
) -> Result<&'a [&'a [u8]], Error> {
    if call.args.len() <= positional {
        return Err(Error::Arity { command, usage });
    }
    Ok(call.args)
}

/// Runs a parsed admission request of algorithm `A` and replies with `reply`.
///
/// `name` is the command as it will be replayed. A request writes (and propagates) only
/// when it is admitted, takes at least one unit, and is not a DRYRUN; a denied request or a
/// DRYRUN leaves the keyspace, the replication stream and the AOF as they were.
pub fn run<A: Variant>(
    call: &Call,
    name: &'static CStr,
    params: A::Params,
    opts: Options,
    reply: impl FnOnce(Ctx, &Decision),
) -> Result<(), Error> {
    if call.key.is_null() {
        return Err(Error::Panic);
    }
    let (now_us, expire_base_ms) = match call.mode {
        Mode::Live => {
            let reading = clock::read();
            (reading.now_us, reading.real_ms)
        }
        Mode::Replay { now_us, .. } => (now_us, 0),
    };
    let write = opts.cost > 0 && !opts.dryrun;
    let mut key = Key::open(call.ctx, call.key, true);
    let (decision, fresh) = match key.stored::<A>()? {
        Some(stored) => {
            let (decision, fresh) = A::check(
                &params,
                Some((&stored.params, &mut stored.state)),
                now_us,
                opts.cost,
                write,
            );
            if decision.allowed && write {
                stored.params = params.clone();
            }
            (decision, fresh)
        }
        None => A::check(&params, None, now_us, opts.cost, write),
    };
    if decision.allowed && write {
        let expire_at_ms = match call.mode {
            Mode::Live => expire_base_ms.saturating_add(decision.reset_after.ceil_ms()),
            Mode::Replay { expire_at_ms, .. } => expire_at_ms,
        };
        if let Some(state) = fresh {
            key.write(A::wrap(Stored { params, state }));
        }
        if decision.reset_after.is_zero() {
            key.delete();
        } else {
            key.expire_at(expire_at_ms);
        }
        drop(key);
        propagate(call, name, now_us, expire_at_ms);
    }
    reply(call.ctx, &decision);
    Ok(())
}

/// Sends the write to replicas and the AOF as `RL.REPLAY key now_us expire_at_ms name args`,
/// so that they apply the primary's clock reading and expiry, never their own. A replica
/// replaying it passes it on verbatim (for its own AOF).
fn propagate(call: &Call, name: &CStr, now_us: u64, expire_at_ms: u64) {
    // SAFETY: ctx, the key and the tail strings are the live arguments of this call; the
    // format matches the arguments: s = string, l = long long, c = C string, v = vector.
    unsafe {
        match call.mode {
            Mode::Live => {
                raw::RedisModule_Replicate.unwrap()(
                    call.ctx,
                    REPLAY.as_ptr(),
                    c"sllcv".as_ptr(),
                    call.key,
                    now_us as c_longlong,
                    expire_at_ms as c_longlong,
                    name.as_ptr().cast::<c_char>(),
                    call.tail.as_ptr(),
                    call.tail.len(),
                );
            }
            Mode::Replay { .. } => {
                raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx);
            }
        }
    }
}
