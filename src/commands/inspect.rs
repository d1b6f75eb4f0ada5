//! RL.INSPECT: read a key's algorithm, parameters and state without changing them.

use super::Call;
use crate::algorithms::int;
use crate::clock;
use crate::error::Error;
use crate::response::{Described, Inspection, Reply, Response};
use crate::storage::{Key, Value};

/// `RL.INSPECT key`
///
/// Reply: nil for a missing key; else a map (a flat name, value array for RESP2 clients):
/// `algorithm`, the parameters, the stored state, and `remaining` and `reset_after_ms` as of
/// the module's clock now, and `blocked_until_us` while a `BLOCK` penalty is set. An RL.LIMIT
/// key adds `rules`, the same for each rule of the policy it was last written with.
pub fn rl_inspect(call: &Call) -> Result<Response, Error> {
    if call.args.len() != 2 {
        return Err(Error::Arity {
            command: "RL.INSPECT",
            usage: "key",
        });
    }
    let mut key = Key::open(call.ctx, call.key()?, false);
    let reply = match key.snapshot()? {
        None => Reply::Nil,
        Some(entry) => {
            let now_us = clock::read().now_us;
            let mut fields = entry.value.describe(now_us);
            if entry.blocked_until_us > 0 {
                fields.push(("blocked_until_us", int(entry.blocked_until_us)));
            }
            let rules: Vec<Described> = match &entry.value {
                Value::Limit(s) => s
                    .params
                    .iter()
                    .zip(&s.state)
                    .map(|(rule, state)| (rule.kind(), rule.describe(state, now_us)))
                    .collect(),
                _ => Vec::new(),
            };
            Reply::Inspect(Inspection {
                algorithm: entry.value.kind(),
                fields,
                rules,
            })
        }
    };
    Ok(Response::reply(reply))
}
