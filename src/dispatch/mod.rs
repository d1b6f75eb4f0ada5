//! The dispatcher: runs one call of a command and does everything its [`Response`] implies.
//!
//! It reads the arguments without copying them, runs the handler behind a guard (an error
//! becomes an error reply, and so does a panic: a panic must never reach Redis, it would
//! abort the server for every client), then, from the response alone: propagates the write
//! (after the handler closed its key; policies a fork asked for first), renders the reply
//! (RESP2 or RESP3), counts the call in the command's counters (`INFO ratelimit`, see
//! [`crate::metrics`]), and publishes a client's denial as the keyspace event
//! `ratelimit.denied`. A command added to the table gets all of it by returning a response.
//!
//! It knows no command: a command's entry (`commands`) hands it the handler and the
//! counters, and the handler gets the [`Call`] (`call.rs`). The one command it names is the
//! one it propagates a client's write as, [`REPLAY`], with [`ReplayText`] (`replay_text.rs`).

mod call;
mod replay_text;

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use call::{read_clock, Call, Handler, Mode};
pub use replay_text::{parse_replay, ReplayText};

use crate::args::syntax::{name, Name};
use crate::error::Error;
use crate::metrics::{Counted, Stats};
use crate::redis::{Argv, Ctx, SharedString};
use crate::response::render;
use crate::response::{Propagate, Response};

/// Arguments above this count are read into a vector; below, onto the stack.
const STACK_ARGS: usize = 12;

/// The keyspace event a denial publishes on its key.
const DENIED_EVENT: &CStr = c"ratelimit.denied";
/// The keyspace event a shadow denial (SHADOW, or a policy's shadow rule) publishes.
const SHADOW_DENIED_EVENT: &CStr = c"ratelimit.shadow_denied";

/// The internal command that carries a client's write to replicas and the AOF (its entry is
/// `commands::replay::RL_REPLAY`, which reads what [`ReplayText`] wrote).
pub const REPLAY: Name = name!("rl.replay");

/// [`REPLAY`] as the Redis string swapped into the client's argument vector.
pub static REPLAY_NAME: SharedString = SharedString::new(REPLAY.upper());

/// Runs one call of a command (see the module docs).
pub fn run(ctx: Ctx, mut argv: Argv, handler: Handler, stats: &Stats) {
    stats.call();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // By reference: the response stays where the handler wrote it (a move would copy
        // its couple of hundred bytes again).
        let result = call(ctx, &argv, handler);
        let Ok(response) = &result else {
            return result.map(|_| (Counted::Other, None));
        };
        propagate(ctx, &mut argv, response.propagate);
        render::reply(ctx, &response.reply);
        let event = if response.reply.publishes_denial() {
            Some(DENIED_EVENT)
        } else if response.reply.publishes_shadow_denial() {
            Some(SHADOW_DENIED_EVENT)
        } else {
            None
        };
        Ok::<_, Error>((response.reply.outcome(), event))
    }));
    match outcome {
        Ok(Ok((counted, event))) => {
            stats.outcome(counted);
            if let Some(event) = event {
                // Only for a client's own request: RL.REPLAY marks its calls (a replica or
                // the AOF replaying a BLOCK denial publishes nothing; the primary did). Redis
                // sends it to `__keyspace@<db>__:<key>` and
                // `__keyevent@<db>__:ratelimit.denied` only when `notify-keyspace-events`
                // has `d` (or `A`) with `K` or `E`, and drops it after one bit test otherwise.
                // A shadow denial's event is `ratelimit.shadow_denied`, under the same flags.
                // A real denial is also recorded for RL.TOP (O(log S), see crate::top).
                if let Some(key) = argv.get(1) {
                    if event == DENIED_EVENT && crate::denials::enabled() {
                        crate::denials::record(key.bytes(), read_clock().now_us);
                    }
                    ctx.notify_module_event(event, key);
                }
            }
        }
        Ok(Err(e)) => {
            stats.error();
            render::error(ctx, &e);
        }
        Err(_) => {
            stats.error();
            render::error(ctx, &Error::Panic);
        }
    }
}

/// Reads the arguments (onto the stack when they are few) and runs the handler.
fn call(ctx: Ctx, argv: &Argv, handler: Handler) -> Result<Response, Error> {
    let count = argv.len();
    let mut stack: [&[u8]; STACK_ARGS] = [&[]; STACK_ARGS];
    let heap: Vec<&[u8]>;
    let args: &[&[u8]] = if count <= STACK_ARGS {
        for (i, slot) in stack.iter_mut().enumerate().take(count) {
            *slot = argv.get(i).map_or(&[][..], |s| s.bytes());
        }
        &stack[..count]
    } else {
        heap = (0..count)
            .map(|i| argv.get(i).map_or(&[][..], |s| s.bytes()))
            .collect();
        &heap
    };
    let call = Call {
        ctx,
        args,
        key: argv.get(1),
        mode: Mode::Live,
    };
    handler(&call)
}

/// Sends what the response says to replicas and the AOF. Policies a fork asked to propagate
/// go first (RL.LIMIT's replay needs its policy).
///
/// A client's write goes as `RL.REPLAY key now_us:expire_at_ms:COMMAND:arg2 arg3...`, so
/// that replicas and the AOF apply the primary's clock reading and expiry, never their own;
/// it is sent by swapping two slots of the client's own argument vector for the length of
/// `RM_ReplicateVerbatim` (see [`Argv::replicate_swapped`]): no command lookup, no object
/// per argument, on every admitted request. A replica replaying it passes it on verbatim
/// (for its own AOF).
fn propagate(ctx: Ctx, argv: &mut Argv, propagate: Propagate) {
    match propagate {
        Propagate::Nothing => {}
        Propagate::Verbatim => {
            crate::storage::policies::flush_pending(ctx);
            ctx.replicate_verbatim();
        }
        Propagate::PolicyChange => {
            crate::storage::policies::flush_pending(ctx);
            if let Some(name) = argv.get(1) {
                crate::storage::policies::replicate_sync(ctx, name.bytes());
                crate::cluster::announce(ctx, name.bytes());
            }
        }
        Propagate::SetCounter {
            count,
            expire_at_ms,
        } => {
            let Some(key) = argv.get(1) else {
                return;
            };
            let mut count_text = [0u8; 20];
            let count = crate::digits::decimal(count, &mut count_text);
            let at = expire_at_ms.to_string();
            ctx.replicate(c"SET", &[key.bytes(), count, b"PXAT", at.as_bytes()]);
        }
        Propagate::Replay {
            command,
            now_us,
            expire_at_ms,
        } => {
            crate::storage::policies::flush_pending(ctx);
            // Every admission command has arguments after the key; nothing to carry
            // otherwise.
            let Some(first_arg) = argv.get(2) else {
                return;
            };
            let mut text = ReplayText::new();
            text.write(now_us, expire_at_ms, command.to_bytes(), first_arg.bytes());
            argv.replicate_swapped(ctx, &REPLAY_NAME, text.as_slice());
        }
    }
}
