//! RL.CONCURRENCY.ACQUIRE and RL.CONCURRENCY.RELEASE: at most `limit` leases at once.

use std::ffi::CStr;

use super::{command, Command, When, ONE_KEY, WRITE};
use crate::args::syntax::{
    name, string, KeyUse, ADAPTIVE, ADAPTIVE_MAX, ADAPTIVE_MIN, DROPPED, DRYRUN, ID, KEY, LEASE,
    LEASES, RTT, SHADOW,
};
use crate::args::AlgorithmCommand;
use crate::args::{params, Cursor};
use crate::dispatch::{Call, Mode};
use crate::error::{quote, Error};
use crate::response::{Admission, Extra, Propagate, Reply, Response};
use crate::storage::{Key, Stored};
use algorithms::adaptive::{self, Kind};
use algorithms::concurrency::{self, Concurrency, Report, State, MAX_TOKEN};

const LEASES_COMPLEXITY: &CStr = c"O(log N) where N is the number of leases held on the key, amortised: a write also drops the leases ended since the last one";

pub static RL_CONCURRENCY_ACQUIRE: Command = command! {
    name: name!("rl.concurrency.acquire"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Take one of limit leases, held until released or for lease at most; the reply carries the lease's token",
    complexity: LEASES_COMPLEXITY,
    key: KeyUse::Update,
    args: &[KEY, LEASES, LEASE, ID, DRYRUN, SHADOW, ADAPTIVE, ADAPTIVE_MIN, ADAPTIVE_MAX],
    handler: rl_concurrency_acquire,
};

impl AlgorithmCommand for Concurrency {
    const NAME: &'static str = RL_CONCURRENCY_ACQUIRE.name().as_str();
}

/// How long an adaptive key outlives its last lease, so that the limit it learned is not
/// forgotten between bursts of work: an hour without a lease, and it starts again at `limit`.
pub const ADAPTIVE_KEEP_MS: u64 = 3_600_000;

/// `RL.CONCURRENCY.ACQUIRE key limit lease [ID token] [DRYRUN] [SHADOW]
/// [ADAPTIVE AIMD|VEGAS|GRADIENT2] [MIN n] [MAX n]`
///
/// Takes one of `limit` slots for at most `lease` (a crashed holder cannot keep it), named
/// `token` or a generated token; the same token renews its own lease. `limit` is bounded by
/// the setting `ratelimit.concurrency-max-limit`, which so bounds the leases a key holds.
/// With ADAPTIVE the limit is the key's estimate (`limit` is where a new key starts), moved
/// by what RELEASE reports, within MIN and MAX (see `algorithms::adaptive`).
/// O(log n) in the leases held (amortised, see `algorithms::concurrency`). Reply: the five
/// fields and the token (nil when denied or DRYRUN), then `shadow_denied` with SHADOW (a
/// would-be denial is answered allowed, with a nil token: no lease was taken).
pub fn rl_concurrency_acquire(call: &Call) -> Result<Response, Error> {
    let mut a = RL_CONCURRENCY_ACQUIRE.syntax.args(call.args)?;
    // A replica replays what its primary admitted, whatever its own setting says.
    let max = match call.mode {
        Mode::Live => crate::config::concurrency_max_limit(),
        Mode::Replay { .. } => crate::config::CONCURRENCY_LIMIT_CEILING,
    };
    let mut params = params::concurrency(a.next_n()?, max)?;
    let Options {
        id,
        dryrun,
        shadow,
        adaptive,
    } = options(&mut a, max)?;
    params.adaptive = adaptive.map(|a| a.bounds(params.limit)).transpose()?;
    let (now_us, real_ms) = call.clock();
    // A DRYRUN asks what would happen: neither an admission nor a denial.
    let write = !dryrun;
    let mut key = Key::open(call.ctx, call.key()?, true);
    let acquired = match key.whole::<Concurrency>()? {
        Some(stored) => {
            let acquired = concurrency::acquire(&params, &mut stored.state, now_us, id, write);
            if acquired.decision.allowed && write {
                stored.params = params;
            }
            acquired
        }
        None => {
            let mut state = State::default();
            let acquired = concurrency::acquire(&params, &mut state, now_us, id, write);
            if acquired.decision.allowed && write {
                key.create::<Concurrency>(Stored { params, state });
            }
            acquired
        }
    };
    let d = &acquired.decision;
    let mut propagate = Propagate::Nothing;
    if d.allowed && write {
        let at = call.expire_at(real_ms, ttl_ms(&params, d.reset_after.ceil_ms()));
        key.expire_at(at);
        propagate = call.propagation(RL_CONCURRENCY_ACQUIRE.replay_name(), now_us, at);
    }
    let token = if write { acquired.token } else { None };
    // SHADOW: a would-be denial takes no lease (token nil: nothing to release) and is
    // answered as admitted.
    let mut decision = acquired.decision;
    let shadow_denied = shadow && !decision.allowed;
    decision.allowed |= shadow;
    let admission = Admission {
        decision,
        extra: Extra::Token(token),
        granted: None,
        preview: dryrun,
        replayed: call.replayed(),
        shadow,
        shadow_denied,
    };
    Ok(Response::propagating(
        Reply::Admission(admission),
        propagate,
    ))
}

/// ACQUIRE's options after its positional arguments.
struct Options<'a> {
    id: Option<&'a [u8]>,
    dryrun: bool,
    shadow: bool,
    adaptive: Option<AdaptiveOption>,
}

/// `ADAPTIVE algorithm [MIN n] [MAX n]` as given.
struct AdaptiveOption {
    kind: Kind,
    min: Option<u32>,
    max: Option<u32>,
}

impl AdaptiveOption {
    /// The bounds, Netflix's defaults for those not given (widened to take in `start`).
    fn bounds(&self, start: u64) -> Result<adaptive::Params, Error> {
        let start = u32::try_from(start).unwrap_or(u32::MAX);
        let bounds = adaptive::Params::with_defaults(self.kind, start, self.min, self.max);
        if bounds.min > bounds.max {
            return Err(Error::AdaptiveBounds {
                message: "MIN is above MAX: an adaptive limit stays within MIN <= MAX (without MAX, the default is 200 for AIMD and GRADIENT2, 1000 for VEGAS, or limit if higher)",
            });
        }
        Ok(bounds)
    }
}

/// Reads ACQUIRE's options: each once, in any order; MIN and MAX (1 to `max`, the lease cap)
/// only with ADAPTIVE.
fn options<'a>(a: &mut Cursor<'a>, max: u64) -> Result<Options<'a>, Error> {
    let (mut id, mut dryrun, mut shadow) = (None, false, false);
    let (mut kind, mut min, mut max_limit) = (None, None, None);
    loop {
        let position = a.position();
        let Some(word) = a.optional() else {
            break;
        };
        if word.eq_ignore_ascii_case(b"ID") {
            if id.is_some() {
                return Err(Error::OptionTwice { option: "ID" });
            }
            let Some(token) = a.optional() else {
                return Err(Error::OptionValue {
                    option: "ID",
                    expected: "a token of 1 to 256 bytes",
                });
            };
            if token.is_empty() || token.len() > MAX_TOKEN {
                return Err(Error::OptionValue {
                    option: "ID",
                    expected: "a token of 1 to 256 bytes",
                });
            }
            id = Some(token);
        } else if word.eq_ignore_ascii_case(b"SHADOW") {
            if shadow {
                return Err(Error::OptionTwice { option: "SHADOW" });
            }
            shadow = true;
        } else if word.eq_ignore_ascii_case(b"DRYRUN") {
            if dryrun {
                return Err(Error::OptionTwice { option: "DRYRUN" });
            }
            dryrun = true;
        } else if word.eq_ignore_ascii_case(b"ADAPTIVE") {
            if kind.is_some() {
                return Err(Error::OptionTwice { option: "ADAPTIVE" });
            }
            kind = Some(match a.optional() {
                Some(k) if k.eq_ignore_ascii_case(b"AIMD") => Kind::Aimd,
                Some(k) if k.eq_ignore_ascii_case(b"VEGAS") => Kind::Vegas,
                Some(k) if k.eq_ignore_ascii_case(b"GRADIENT2") => Kind::Gradient2,
                _ => {
                    return Err(Error::OptionValue {
                        option: "ADAPTIVE",
                        expected: "AIMD, VEGAS or GRADIENT2",
                    })
                }
            });
        } else if word.eq_ignore_ascii_case(b"MIN") || word.eq_ignore_ascii_case(b"MAX") {
            let is_min = word.eq_ignore_ascii_case(b"MIN");
            let (slot, option) = if is_min {
                (&mut min, "MIN")
            } else {
                (&mut max_limit, "MAX")
            };
            if slot.is_some() {
                return Err(Error::OptionTwice { option });
            }
            let n = a
                .optional()
                .and_then(crate::digits::digits)
                .filter(|n| (1..=max).contains(n))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(Error::OptionValue {
                    option,
                    expected: "a limit from 1 to the setting ratelimit.concurrency-max-limit",
                })?;
            *slot = Some(n);
        } else {
            return Err(Error::UnknownOption {
                position,
                token: quote(word),
                accepted: "ID token, DRYRUN, SHADOW, ADAPTIVE algorithm, MIN n or MAX n, each once",
            });
        }
    }
    let adaptive = match kind {
        Some(kind) => Some(AdaptiveOption {
            kind,
            min,
            max: max_limit,
        }),
        None if min.is_some() || max_limit.is_some() => return Err(Error::AdaptiveBounds {
            message:
                "MIN and MAX bound an adaptive limit: give them with ADAPTIVE AIMD|VEGAS|GRADIENT2",
        }),
        None => None,
    };
    Ok(Options {
        id,
        dryrun,
        shadow,
        adaptive,
    })
}

/// A key's time to live from its leases' reset: an adaptive key outlives them by
/// [`ADAPTIVE_KEEP_MS`].
fn ttl_ms(params: &concurrency::Params, reset_ms: u64) -> u64 {
    match params.adaptive {
        Some(_) => reset_ms.saturating_add(ADAPTIVE_KEEP_MS),
        None => reset_ms,
    }
}

pub static RL_CONCURRENCY_RELEASE: Command = command! {
    name: name!("rl.concurrency.release"),
    flags: c"write fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"End a lease taken with RL.CONCURRENCY.ACQUIRE, reporting how long its work took and whether it dropped: 1, or 0 when no such lease is held",
    complexity: LEASES_COMPLEXITY,
    key: KeyUse::Remove,
    args: &[
        KEY,
        string(c"token", c"the token RL.CONCURRENCY.ACQUIRE replied with"),
        RTT,
        DROPPED,
    ],
    handler: rl_concurrency_release,
};

/// `RL.CONCURRENCY.RELEASE key token [RTT duration] [DROPPED]`
///
/// Ends the lease named `token`; on an adaptive key, its sample (RTT, by default the time
/// the lease was held, and DROPPED) moves the limit. Reply: 1, or 0 when no such lease is
/// held (unknown or already ended), and then nothing changes.
pub fn rl_concurrency_release(call: &Call) -> Result<Response, Error> {
    let mut a = RL_CONCURRENCY_RELEASE.syntax.args(call.args)?;
    let token = a.next()?;
    let mut report = Report::default();
    let mut dropped_given = false;
    loop {
        let position = a.position();
        let Some(word) = a.optional() else {
            break;
        };
        if word.eq_ignore_ascii_case(b"RTT") {
            if report.rtt_us.is_some() {
                return Err(Error::OptionTwice { option: "RTT" });
            }
            report.rtt_us = Some(a.optional().and_then(crate::args::duration_us).ok_or(
                Error::OptionValue {
                    option: "RTT",
                    expected: "a duration from 1us to 10 years: a number and us, ms, s, m, h or d (a bare number is ms)",
                },
            )?);
        } else if word.eq_ignore_ascii_case(b"DROPPED") {
            if dropped_given {
                return Err(Error::OptionTwice { option: "DROPPED" });
            }
            dropped_given = true;
            report.dropped = true;
        } else {
            return Err(Error::UnknownOption {
                position,
                token: quote(word),
                accepted: "RTT duration or DROPPED, each once",
            });
        }
    }
    let (now_us, real_ms) = call.clock();
    let mut key = Key::open(call.ctx, call.key()?, true);
    let Some(stored) = key.whole::<Concurrency>()? else {
        return Ok(Response::reply(Reply::Int(0)));
    };
    if !concurrency::release_reporting(&mut stored.state, token, now_us, report) {
        return Ok(Response::reply(Reply::Int(0)));
    }
    let reset_ms = ttl_ms(
        &stored.params,
        concurrency::reset_after(&stored.state, now_us).ceil_ms(),
    );
    let at = call.expire_at(real_ms, reset_ms);
    if reset_ms == 0 {
        key.delete();
    } else {
        key.expire_at(at);
    }
    let propagate = call.propagation(RL_CONCURRENCY_RELEASE.replay_name(), now_us, at);
    Ok(Response::propagating(Reply::Int(1), propagate))
}
