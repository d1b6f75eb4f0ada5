//! RL.CONCURRENCY.ACQUIRE and RL.CONCURRENCY.RELEASE: at most `limit` leases at once.

use std::ffi::CStr;

use super::{admission, command, Command, When, ONE_KEY, WRITE};
use crate::args::syntax::{
    name, string, KeyUse, ADAPTIVE, ADAPTIVE_MAX, ADAPTIVE_MIN, DROPPED, DRYRUN, ID, KEY, LEASE,
    LEASES, RTT, SHADOW,
};
use crate::args::{params, AlgorithmCommand, Grammar};
use crate::dispatch::{Call, Mode};
use crate::error::Error;
use crate::response::{Extra, Reply, Response};
use crate::storage::Key;
use algorithms::adaptive::{self, Kind};
use algorithms::concurrency::{self, Concurrency, Report, MAX_TOKEN};
use algorithms::{Algorithm, Lease};

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

/// `RL.CONCURRENCY.ACQUIRE key limit lease [ID token] [DRYRUN] [SHADOW]
/// [ADAPTIVE AIMD|VEGAS|GRADIENT2] [MIN n] [MAX n]`
///
/// Takes one of `limit` slots for at most `lease` (a crashed holder cannot keep it), named
/// `token` or a generated token; the same token renews its own lease. `limit` is bounded by
/// the setting `ratelimit.concurrency-max-limit`, which so bounds the leases a key holds.
/// With ADAPTIVE the limit is the key's estimate (`limit` is where a new key starts), moved
/// by what RELEASE reports, within MIN and MAX (see `algorithms::adaptive`).
/// O(log n) in the leases held (amortised, see `algorithms::concurrency`). The request goes
/// the way of every admission ([`admission::run_with`]) with the lease's step
/// ([`Lease::acquire`]). Reply: the five fields and the token (nil when denied or DRYRUN),
/// then `shadow_denied` with SHADOW (a would-be denial is answered allowed, with a nil token:
/// no lease was taken).
pub fn rl_concurrency_acquire(call: &Call) -> Result<Response, Error> {
    let mut a = RL_CONCURRENCY_ACQUIRE.syntax.args(call.args)?;
    // A replica replays what its primary admitted, whatever its own setting says.
    let max = match call.mode {
        Mode::Live => crate::config::concurrency_max_limit(),
        Mode::Replay { .. } => crate::config::CONCURRENCY_LIMIT_CEILING,
    };
    let mut params = params::concurrency(a.next_n()?, max)?;
    let (mut id, mut adaptive) = (None, AdaptiveOption::default());
    let (opts, _) = a.options_by(&ACQUIRE_OPTIONS, |option, value| match option {
        0 => {
            id = Some(token(value)?);
            Ok(())
        }
        1 => adaptive.kind(value),
        _ => adaptive.bound(option == 2, value, max),
    })?;
    params.adaptive = adaptive.bounds(params.limit)?;
    let acquire = |params: &concurrency::Params,
                   stored: Option<(&concurrency::Params, &mut concurrency::State)>,
                   now_us,
                   _cost,
                   write| Concurrency::acquire(params, stored, now_us, id, write);
    let mut decided = admission::run_with::<Concurrency, _>(
        call,
        RL_CONCURRENCY_ACQUIRE.replay_name(),
        params,
        opts,
        acquire,
        Concurrency::largest_cost,
    )?;
    let token = decided.aside.take();
    Ok(decided.reply(Extra::Token(token)))
}

/// ACQUIRE's options: DRYRUN and SHADOW, and its own with a value (their order is the
/// option numbers the parser hands back).
const ACQUIRE_OPTIONS: Grammar = Grammar {
    counted: false,
    previews: true,
    flags: &[],
    valued: &[
        ("ID", "a token of 1 to 256 bytes"),
        ("ADAPTIVE", "AIMD, VEGAS or GRADIENT2"),
        ("MIN", BOUND_EXPECTED),
        ("MAX", BOUND_EXPECTED),
    ],
    accepted: "ID token, DRYRUN, SHADOW, ADAPTIVE algorithm, MIN n or MAX n, each once",
};

const BOUND_EXPECTED: &str = "a limit from 1 to the setting ratelimit.concurrency-max-limit";

/// `ID token`: 1 to [`MAX_TOKEN`] bytes.
fn token(value: &[u8]) -> Result<&[u8], Error> {
    match value.len() {
        1..=MAX_TOKEN => Ok(value),
        _ => Err(Error::OptionValue {
            option: "ID",
            expected: "a token of 1 to 256 bytes",
        }),
    }
}

/// `ADAPTIVE algorithm [MIN n] [MAX n]` as given.
#[derive(Default)]
struct AdaptiveOption {
    kind: Option<Kind>,
    min: Option<u32>,
    max: Option<u32>,
}

impl AdaptiveOption {
    /// `ADAPTIVE`'s value.
    fn kind(&mut self, value: &[u8]) -> Result<(), Error> {
        self.kind = Some(match value {
            k if k.eq_ignore_ascii_case(b"AIMD") => Kind::Aimd,
            k if k.eq_ignore_ascii_case(b"VEGAS") => Kind::Vegas,
            k if k.eq_ignore_ascii_case(b"GRADIENT2") => Kind::Gradient2,
            _ => {
                return Err(Error::OptionValue {
                    option: "ADAPTIVE",
                    expected: "AIMD, VEGAS or GRADIENT2",
                })
            }
        });
        Ok(())
    }

    /// `MIN n` (`is_min`) or `MAX n`: 1 to `max`, the lease cap.
    fn bound(&mut self, is_min: bool, value: &[u8], max: u64) -> Result<(), Error> {
        let option = if is_min { "MIN" } else { "MAX" };
        let n = crate::digits::digits(value)
            .filter(|n| (1..=max).contains(n))
            .and_then(|n| u32::try_from(n).ok())
            .ok_or(Error::OptionValue {
                option,
                expected: BOUND_EXPECTED,
            })?;
        *(if is_min { &mut self.min } else { &mut self.max }) = Some(n);
        Ok(())
    }

    /// The bounds, Netflix's defaults for those not given (widened to take in `start`);
    /// `None` without ADAPTIVE, where MIN and MAX are an error.
    fn bounds(&self, start: u64) -> Result<Option<adaptive::Params>, Error> {
        let Some(kind) = self.kind else {
            if self.min.is_some() || self.max.is_some() {
                return Err(Error::AdaptiveBounds {
                    message: "MIN and MAX bound an adaptive limit: give them with ADAPTIVE AIMD|VEGAS|GRADIENT2",
                });
            }
            return Ok(None);
        };
        let start = u32::try_from(start).unwrap_or(u32::MAX);
        let bounds = adaptive::Params::with_defaults(kind, start, self.min, self.max);
        if bounds.min > bounds.max {
            return Err(Error::AdaptiveBounds {
                message: "MIN is above MAX: an adaptive limit stays within MIN <= MAX (without MAX, the default is 200 for AIMD and GRADIENT2, 1000 for VEGAS, or limit if higher)",
            });
        }
        Ok(Some(bounds))
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
    let (_, dropped) = a.options_by(&RELEASE_OPTIONS, |_, value| {
        report.rtt_us = Some(crate::args::duration_us(value).ok_or(Error::OptionValue {
            option: "RTT",
            expected: RTT_EXPECTED,
        })?);
        Ok(())
    })?;
    report.dropped = dropped & 1 != 0;
    let (now_us, real_ms) = call.clock();
    let mut key = Key::open(call.ctx, call.key()?, true);
    let Some(stored) = key.whole::<Concurrency>()? else {
        return Ok(Response::reply(Reply::Int(0)));
    };
    if !Concurrency::release(&mut stored.state, token, now_us, report) {
        return Ok(Response::reply(Reply::Int(0)));
    }
    let reset_after = Concurrency::reset_after(&stored.state, now_us);
    let params = stored.params;
    let propagate = admission::written(
        call,
        &mut key,
        RL_CONCURRENCY_RELEASE.replay_name(),
        now_us,
        real_ms,
        reset_after,
        Concurrency::kept_ms(&params),
    );
    Ok(Response::propagating(Reply::Int(1), propagate))
}

/// RELEASE's options: `RTT duration` and `DROPPED`, none of the admission options.
const RELEASE_OPTIONS: Grammar = Grammar {
    counted: false,
    previews: false,
    flags: &["DROPPED"],
    valued: &[("RTT", RTT_EXPECTED)],
    accepted: "RTT duration or DROPPED, each once",
};

const RTT_EXPECTED: &str =
    "a duration from 1us to 10 years: a number and us, ms, s, m, h or d (a bare number is ms)";
