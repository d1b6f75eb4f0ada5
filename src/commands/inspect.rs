//! RL.INSPECT: read a key's algorithm, parameters and state without changing them.

use super::Call;
use crate::algorithms::int;
use crate::clock;
use crate::error::Error;
use crate::reply;
use crate::storage::Key;

/// `RL.INSPECT key`
///
/// Reply: nil for a missing key; else a map (a flat name, value array for RESP2 clients):
/// `algorithm`, the parameters, the stored state, and `remaining` and `reset_after_ms` as of
/// the module's clock now, and `blocked_until_us` while a `BLOCK` penalty is set.
pub fn rl_inspect(call: &Call) -> Result<(), Error> {
    if call.args.len() != 2 {
        return Err(Error::Arity {
            command: "RL.INSPECT",
            usage: "key",
        });
    }
    let mut key = Key::open(call.ctx, call.key, false);
    match key.snapshot()? {
        None => reply::null(call.ctx),
        Some(entry) => {
            let mut fields = entry.value.describe(clock::read().now_us);
            if entry.blocked_until_us > 0 {
                fields.push(("blocked_until_us", int(entry.blocked_until_us)));
            }
            reply::described(call.ctx, entry.value.kind(), &fields);
        }
    }
    Ok(())
}
