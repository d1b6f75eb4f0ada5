//! RL.INSPECT: read a key's algorithm, parameters and state without changing them.

use super::Call;
use crate::clock;
use crate::error::Error;
use crate::reply;
use crate::storage::Key;

/// `RL.INSPECT key`
///
/// Reply: nil for a missing key; else a map (a flat name, value array for RESP2 clients):
/// `algorithm`, the parameters, the stored state, and `remaining` and `reset_after_ms` as of
/// the module's clock now.
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
        Some(value) => {
            let fields = value.describe(clock::read().now_us);
            reply::described(call.ctx, value.kind(), &fields);
        }
    }
    Ok(())
}
