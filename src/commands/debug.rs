//! RL.DEBUG.*: a frozen, settable clock for deterministic tests, a forced panic that shows the
//! guard at work, and raw bytes sent as the module's cluster message (what a damaged or
//! forged message does). All refuse to run unless the module was loaded with `debug-clock
//! yes`. They write no key, so they also run on a read-only replica.

use super::{command, Command, When, NO_KEYS, O1, PRIVILEGED};
use crate::args;
use crate::args::syntax::{name, string, KeyUse, CLOCK_CHANGE, PANIC_BLOCKS};
use crate::clock::{self, MAX_DEBUG_MS};
use crate::dispatch::{read_clock, Call};
use crate::error::Error;
use crate::response::{Reply, Response};

pub static RL_DEBUG_CLOCK: Command = command! {
    name: name!("rl.debug.clock"),
    flags: c"admin fast",
    acl: PRIVILEGED,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Freeze, move or release the module's clock, for deterministic tests (only with debug-clock yes)",
    complexity: O1,
    key: KeyUse::None,
    args: &[CLOCK_CHANGE],
    handler: rl_debug_clock,
};

/// `RL.DEBUG.CLOCK SET ms | ADVANCE ms | REAL`
///
/// SET freezes the module's clock at `ms` since the Unix epoch; ADVANCE moves it by `ms`
/// (negative moves it back; from the real time if it was not frozen) and freezes it there;
/// REAL lets it run with the server's clock again. Reply: the clock reading after the
/// change, in ms since the Unix epoch. Key expiry always stays on the real clock.
pub fn rl_debug_clock(call: &Call) -> Result<Response, Error> {
    if !clock::debug_enabled() {
        return Err(Error::DebugClockOff);
    }
    // A subcommand and its value, if any: anything else is the usage error.
    let mut a = RL_DEBUG_CLOCK.syntax.read(call.args);
    let sub = a.optional().unwrap_or_default();
    let value = a.optional();
    let value = match a.finish() {
        Ok(()) => value,
        Err(_) => return Err(Error::DebugClockUsage),
    };
    match value {
        Some(ms) if sub.eq_ignore_ascii_case(b"SET") => {
            let ms = args::count(ms, "ms", 0, MAX_DEBUG_MS).map_err(|_| Error::DebugClockUsage)?;
            clock::freeze_at_us(ms * 1000);
        }
        Some(offset) if sub.eq_ignore_ascii_case(b"ADVANCE") => {
            let Some(offset_ms) = args::offset_ms(offset) else {
                return Err(Error::DebugClockUsage);
            };
            let now_us = i128::from(read_clock().now_us);
            let target = (now_us + i128::from(offset_ms) * 1000).max(0);
            clock::freeze_at_us(u64::try_from(target).unwrap_or(u64::MAX));
        }
        None if sub.eq_ignore_ascii_case(b"REAL") => clock::thaw(),
        _ => return Err(Error::DebugClockUsage),
    }
    Ok(Response::reply(Reply::Int(
        (read_clock().now_us / 1000) as i64,
    )))
}

pub static RL_DEBUG_PANIC: Command = command! {
    name: name!("rl.debug.panic"),
    flags: c"admin",
    acl: PRIVILEGED,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Panic on purpose, to show the guard turns a panic into an error reply (only with debug-clock yes)",
    complexity: O1,
    key: KeyUse::None,
    args: &[PANIC_BLOCKS],
    handler: rl_debug_panic,
};

/// The most blocks of each size RL.DEBUG.PANIC holds: 64 x 16 allocations at most.
const MAX_PANIC_BLOCKS: u64 = 64;

/// `RL.DEBUG.PANIC [blocks]`: panics on purpose, to show that the guard turns a panic into an
/// error reply and the server lives on. Reply: never a value; the guard's error.
///
/// With `blocks`, it first allocates that many blocks of each size from 8 to 128 bytes (in
/// steps of 8) and holds them until the panic unwinds: the unwinder's exception object, which
/// the panic allocates next, then lands at another slot of its size class. A server's
/// allocator may hand out slots of one class at more than one alignment (Redis's own jemalloc
/// has 8-byte steps: a 56-byte block may be 8- but not 16-aligned), so a test that panics with
/// 0, 1, 2... blocks meets every alignment the exception can have there (tests/integration/gcra.rs).
pub fn rl_debug_panic(call: &Call) -> Result<Response, Error> {
    if !clock::debug_enabled() {
        return Err(Error::DebugClockOff);
    }
    let mut a = RL_DEBUG_PANIC.syntax.read(call.args);
    let blocks = match a.optional() {
        Some(word) => args::count(word, "blocks", 0, MAX_PANIC_BLOCKS)?,
        None => 0,
    };
    a.finish()?;
    let held: Vec<Vec<u8>> = (0..blocks)
        .flat_map(|_| (1..=16).map(|eighths| vec![0u8; eighths * 8]))
        .collect();
    std::hint::black_box(&held);
    panic!("RL.DEBUG.PANIC: a deliberate panic");
}

pub static RL_DEBUG_CLUSTERMSG: Command = command! {
    name: name!("rl.debug.clustermsg"),
    flags: c"admin",
    acl: PRIVILEGED,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Send raw bytes as the module's cluster message, to test how nodes refuse damaged or forged ones (only with debug-clock yes)",
    complexity: O1,
    key: KeyUse::None,
    args: &[
        string(c"node", c"the id of the node to send to, or * for every node"),
        string(c"payload", c"the message's bytes, as they are"),
    ],
    handler: rl_debug_clustermsg,
};

/// `RL.DEBUG.CLUSTERMSG node|* payload`: sends `payload` as it is, as the module's message on
/// the cluster bus. Reply: 1 if the server sent it, 0 if not (no cluster, an unknown node).
pub fn rl_debug_clustermsg(call: &Call) -> Result<Response, Error> {
    if !clock::debug_enabled() {
        return Err(Error::DebugClockOff);
    }
    let mut a = RL_DEBUG_CLUSTERMSG.syntax.args_bounded(call.args)?;
    let node = a.next()?;
    let payload = a.next()?;
    let sent = crate::cluster::send_raw(call.ctx, node, payload);
    Ok(Response::reply(Reply::Int(i64::from(sent))))
}

pub static RL_DEBUG_POLICYVERSION: Command = command! {
    name: name!("rl.debug.policyversion"),
    flags: c"admin",
    acl: PRIVILEGED,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Set the version clock of what a policy name holds on this node, with no bound and nothing sent, to test how a poisoned table recovers (only with debug-clock yes)",
    complexity: O1,
    key: KeyUse::None,
    args: &[
        string(c"name", c"the policy's name"),
        string(c"clock", c"the version's clock, 0 to 18446744073709551615"),
    ],
    handler: rl_debug_policyversion,
};

/// `RL.DEBUG.POLICYVERSION name clock`: plants the version clock `clock` on what `name`
/// holds here, as the module before bounded versions could take it from a peer. Reply: OK,
/// or an error when `name` holds nothing.
pub fn rl_debug_policyversion(call: &Call) -> Result<Response, Error> {
    if !clock::debug_enabled() {
        return Err(Error::DebugClockOff);
    }
    let mut a = RL_DEBUG_POLICYVERSION.syntax.args_bounded(call.args)?;
    let name = a.next()?;
    let version = a.next()?;
    let version = crate::digits::digits(version).ok_or(Error::Count {
        arg: "clock",
        min: 0,
        max: u64::MAX,
    })?;
    if !crate::storage::policies::plant(name, version) {
        return Err(Error::NoPolicy {
            name: crate::error::quote(name),
        });
    }
    Ok(Response::reply(Reply::Ok))
}
