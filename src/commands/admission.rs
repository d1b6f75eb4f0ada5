//! The path every admission command shares once its arguments are parsed:
//! clock → storage load → algorithm → storage save, TTL, propagation → reply.

use std::ffi::CStr;
use std::os::raw::c_char;

use redis_module::raw;

use super::{Call, Ctx, Mode, RawString};
use crate::algorithms::Decision;
use crate::args::syntax::Syntax;
use crate::args::Options;
use crate::error::Error;
use crate::metrics;
use crate::storage::{Key, Request, Variant};

/// The internal command that carries a write to replicas and the AOF.
pub const REPLAY: &CStr = c"RL.REPLAY";

/// The arguments of an admission command, or, when fewer than its `syntax` requires, the
/// arity error that shows that syntax.
pub fn arguments<'a>(call: &Call<'a>, syntax: &'static Syntax) -> Result<&'a [&'a [u8]], Error> {
    if call.args.len() <= syntax.required {
        return Err(syntax.arity());
    }
    Ok(call.args)
}

/// Runs a parsed admission request of algorithm `A` and replies with `reply`.
///
/// `name` is the command as it will be replayed. A request writes (and propagates) only
/// when it is admitted, takes at least one unit, and is not a DRYRUN; a denied request or a
/// DRYRUN leaves the keyspace, the replication stream and the AOF as they were. A DRYRUN or
/// COST 0 request is a preview: INFO counts it as a call only, and its denial publishes no
/// keyspace event.
pub fn run<A: Variant>(
    call: &Call,
    name: &'static CStr,
    params: A::Params,
    opts: Options,
    reply: impl FnOnce(Ctx, &Decision),
) -> Result<(), Error> {
    run_with::<A>(call, name, params, opts, A::check, reply)
}

/// [`run`] with the algorithm's step given: `check` takes what [`Algorithm::check`] takes
/// and keeps its contract (RL.LIMIT's step also notes the binding rule for its reply).
///
/// [`Algorithm::check`]: crate::algorithms::Algorithm::check
pub fn run_with<A: Variant>(
    call: &Call,
    name: &'static CStr,
    params: A::Params,
    opts: Options,
    check: impl FnOnce(
        &A::Params,
        Option<(&A::Params, &mut A::State)>,
        u64,
        u64,
        bool,
    ) -> (Decision, Option<A::State>),
    reply: impl FnOnce(Ctx, &Decision),
) -> Result<(), Error> {
    if call.key.is_null() {
        return Err(Error::Panic);
    }
    let (now_us, real_ms) = call.clock();
    let write = opts.cost > 0 && !opts.dryrun;
    if !write {
        // DRYRUN and COST 0 ask what would happen: neither an admission nor a denial.
        metrics::preview();
    }
    let request = Request {
        now_us,
        cost: opts.cost,
        write,
        block_ms: opts.block_ms,
    };
    let mut key = Key::open(call.ctx, call.key, true);
    let (decision, wrote) = key.update::<A>(&params, request, |stored, write| {
        check(&params, stored, now_us, opts.cost, write)
    })?;
    if wrote {
        let expire_at_ms = call.expire_at(real_ms, decision.reset_after.ceil_ms());
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

/// Sends the write to replicas and the AOF as
/// `RL.REPLAY key now_us:expire_at_ms:COMMAND:arg2 arg3...`, so that they apply the primary's
/// clock reading and expiry, never their own. A replica replaying it passes it on verbatim
/// (for its own AOF).
///
/// This runs on every admitted request, and `RM_Replicate` costs more than the rest of the
/// command: it looks the command name up (an sds copy, a split, a hash) and builds an object
/// per argument. `RM_ReplicateVerbatim` does neither: it hands the client's argument vector
/// (`c->argv`, which Redis passes to module commands as `argv`) to the propagation queue,
/// which copies the array and takes a reference to each string. So for the length of that
/// call, two slots of the vector are swapped: the command name for `RL.REPLAY`, and the
/// argument after the key for one that also carries the clock and the command's name, which
/// keeps the argument count and the key's position. Then the client's own strings are put
/// back, so SLOWLOG, MONITOR and everything after the command see what the client sent.
pub fn propagate(call: &Call, name: &'static CStr, now_us: u64, expire_at_ms: u64) {
    // Policies a fork asked to propagate go first (RL.LIMIT's replay needs its policy).
    crate::storage::policies::flush_pending(call.ctx);
    // SAFETY: ctx is the running command's context.
    let verbatim = || unsafe {
        raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx);
    };
    if let Mode::Replay { .. } = call.mode {
        verbatim();
        return;
    }
    let Some(&first_arg) = call.args.get(2) else {
        // Every admission command has arguments after the key; nothing to carry otherwise.
        return;
    };
    let text = write_replay(now_us, expire_at_ms, name.to_bytes(), first_arg);
    let text = text.as_slice();
    // SAFETY: `argv` is the vector Redis passed, `args.len()` (>= 3) strings long, and it
    // stays ours for the whole call. The swapped-in strings are live while the queue takes
    // its references; the clock string's own reference is released right after.
    unsafe {
        let carried = raw::RedisModule_CreateString.unwrap()(
            call.ctx,
            text.as_ptr().cast::<c_char>(),
            text.len(),
        );
        let name_slot = call.argv;
        let arg_slot = call.argv.add(2);
        let (client_name, client_arg) = (*name_slot, *arg_slot);
        *name_slot = replay_name();
        *arg_slot = carried;
        verbatim();
        *name_slot = client_name;
        *arg_slot = client_arg;
        raw::RedisModule_FreeString.unwrap()(call.ctx, carried);
    }
}

/// RL.REPLAY's carried argument, built in one pass: on the stack when it fits (always, but
/// for a client's very long first argument), else on the heap.
struct ReplayText {
    stack: [u8; 128],
    len: usize,
    heap: Vec<u8>,
}

impl ReplayText {
    fn as_slice(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        }
    }
}

/// `n` in decimal, into the end of `digits`; returns where it starts.
fn decimal(digits: &mut [u8; 20], mut n: u64) -> usize {
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return k;
        }
    }
}

/// `now_us:expire_at_ms:command:first_arg`.
fn write_replay(now_us: u64, expire_at_ms: u64, command: &[u8], first_arg: &[u8]) -> ReplayText {
    let (mut now, mut expire) = ([0u8; 20], [0u8; 20]);
    let now_at = decimal(&mut now, now_us);
    let expire_at = decimal(&mut expire, expire_at_ms);
    let parts: [&[u8]; 7] = [
        &now[now_at..],
        b":",
        &expire[expire_at..],
        b":",
        command,
        b":",
        first_arg,
    ];
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = ReplayText {
        stack: [0; 128],
        len: 0,
        heap: Vec::new(),
    };
    if total <= out.stack.len() {
        for part in parts {
            out.stack[out.len..out.len + part.len()].copy_from_slice(part);
            out.len += part.len();
        }
    } else {
        out.heap = parts.concat();
    }
    out
}

/// What RL.REPLAY's third argument carries.
#[derive(Debug, PartialEq, Eq)]
pub struct Replayed<'a> {
    pub now_us: u64,
    pub expire_at_ms: u64,
    pub command: &'a [u8],
    pub first_arg: &'a [u8],
}

/// Parses what [`write_replay`] wrote (the argument after the command may hold colons).
pub fn parse_replay(text: &[u8]) -> Option<Replayed<'_>> {
    let mut parts = text.splitn(4, |&b| b == b':');
    let number =
        |part: Option<&[u8]>| -> Option<u64> { std::str::from_utf8(part?).ok()?.parse().ok() };
    Some(Replayed {
        now_us: number(parts.next())?,
        expire_at_ms: number(parts.next())?,
        command: parts.next()?,
        first_arg: parts.next()?,
    })
}

/// `RL.REPLAY` as a Redis string, created once and kept for the life of the module.
fn replay_name() -> RawString {
    use std::sync::atomic::{AtomicPtr, Ordering};
    static NAME: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
    let name = NAME.load(Ordering::Relaxed);
    if !name.is_null() {
        return name;
    }
    // SAFETY: a NULL context makes a string no context frees; commands run on the main
    // thread, so it is made once.
    let name = unsafe {
        raw::RedisModule_CreateString.unwrap()(
            std::ptr::null_mut(),
            REPLAY.as_ptr(),
            REPLAY.to_bytes().len(),
        )
    };
    NAME.store(name, Ordering::Relaxed);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replayed_argument_round_trips() {
        for (now, expire, command, arg) in [
            (0, 0, &b"RL.GCRA"[..], &b"5"[..]),
            (
                1_700_000_000_123_456,
                1_700_000_060_124,
                b"CL.THROTTLE",
                b"a:b:c",
            ),
            (u64::MAX, u64::MAX, b"RL.SLIDINGLOG", b""),
        ] {
            let out = write_replay(now, expire, command, arg);
            let expected = Replayed {
                now_us: now,
                expire_at_ms: expire,
                command,
                first_arg: arg,
            };
            assert_eq!(parse_replay(out.as_slice()), Some(expected));
        }
        // A long first argument spills to the heap and still round-trips.
        let long = vec![b'x'; 300];
        let out = write_replay(1, 2, b"RL.GCRA", &long);
        assert_eq!(parse_replay(out.as_slice()).unwrap().first_arg, &long[..]);
        assert_eq!(parse_replay(b"12:13:RL.GCRA"), None);
        assert_eq!(parse_replay(b"x:13:RL.GCRA:5"), None);
        assert_eq!(parse_replay(b"-1:2:RL.GCRA:5"), None);
    }
}
