//! RL.COUNTER: a fixed-window counter kept as a plain integer string, as INCRBY and PEXPIRE
//! at the window's first hit keep it.

use super::{command, Command, When, O1, ONE_KEY, WRITE};
use crate::args::syntax::{integer, name, token, Arg, KeyUse, KEY, WINDOW};
use crate::args::{duration_ms, signed_count, Grammar, MAX_COUNT};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Propagate, Reply, Response};
use crate::storage::{CounterKey, Written};
use algorithms::counter::{self, Outcome};

pub static RL_COUNTER: Command = command! {
    name: name!("rl.counter"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    // Not an admission: RL.REPLAY replays admissions; this propagates its result (SET).
    replayable: false,
    summary: c"Add to a fixed-window counter kept as a plain integer string whose TTL, set at the window's first hit, is the window; replies [count, pttl]",
    complexity: O1,
    key: KeyUse::Update,
    args: &[KEY, WINDOW, BY, XX],
    handler: rl_counter,
};

const BY: Arg = integer(
    c"n",
    c"add n, -10^12 to 10^12 (default 1): negative gives back, 0 only reads",
)
.after(c"BY")
.optional();
const XX: Arg = token(
    c"xx",
    c"XX",
    c"write only if the key exists: a missing key stays missing",
)
.optional();

/// What `BY` takes, for the error when its value is missing.
const BY_EXPECTED: &str = "an integer from -1000000000000 to 1000000000000";

/// RL.COUNTER's options: its own flag and its own option with a value.
const COUNTER_OPTIONS: Grammar = Grammar {
    counted: false,
    previews: false,
    flags: &["XX"],
    valued: &[("BY", BY_EXPECTED)],
    accepted: "BY n or XX, each once",
};

/// `RL.COUNTER key window [BY n] [XX]`
///
/// Adds `n` (default 1) to the integer in `key`, a plain string as INCRBY keeps it. A
/// missing key is made holding `n` with the TTL `window`; a present key keeps its TTL, or
/// gets `window` if it has none. `BY 0` only reads; with `XX`, a missing key stays missing.
/// The window is the key's TTL on the server's own clock (the debug clock does not move
/// it). A write reaches replicas and the AOF as `SET key count PXAT expire_at_ms`; a read
/// propagates nothing. Reply: `[count, pttl]`, `pttl` as PTTL says it (`-1` no TTL, `-2` no
/// key).
pub fn rl_counter(call: &Call) -> Result<Response, Error> {
    let (window_ms, by, xx) = parse(call.args)?;
    let mut key = CounterKey::open(call.ctx, call.key()?, by != 0);
    let stored = key.read()?;
    match counter::step(stored, by, xx).map_err(|_| Error::IncrementOverflow)? {
        Outcome::Read { count } => Ok(Response::reply(Reply::IntPair(
            count.unwrap_or(0),
            key.pttl(),
        ))),
        Outcome::Write { count, ttl } => {
            let Written {
                ttl_ms,
                expire_at_ms,
            } = key.write(count, ttl, window_ms);
            let ttl_ms = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
            Ok(Response::propagating(
                Reply::IntPair(count, ttl_ms),
                Propagate::SetCounter {
                    count,
                    expire_at_ms,
                },
            ))
        }
    }
}

/// RL.COUNTER's arguments (`args[0]` the command's name, `args[1]` the key): the window in
/// ms, the increment, and whether XX was given.
#[inline(always)]
pub(super) fn parse(args: &[&[u8]]) -> Result<(u64, i64, bool), Error> {
    let mut a = RL_COUNTER.syntax.args(args)?;
    let window_ms = duration_ms(a.next()?, WINDOW.name_str)?;
    let mut by = 1;
    let (_, flags) = a.options_by(&COUNTER_OPTIONS, |_, value| {
        by = signed_count(value, "BY", MAX_COUNT)?;
        Ok(())
    })?;
    Ok((window_ms, by, flags & 1 != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(words: &[&str]) -> Result<(u64, i64, bool), String> {
        let mut args: Vec<&[u8]> = vec![b"RL.COUNTER", b"k"];
        args.extend(words.iter().map(|w| w.as_bytes()));
        parse(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn options_in_any_order_and_case() {
        assert_eq!(parsed(&["1m"]), Ok((60_000, 1, false)));
        assert_eq!(parsed(&["1500", "by", "-3", "xx"]), Ok((1500, -3, true)));
        assert_eq!(parsed(&["2s", "Xx", "BY", "0"]), Ok((2000, 0, true)));
        assert_eq!(
            parsed(&["1s", "BY", "1000000000000"]),
            Ok((1000, MAX_COUNT as i64, false))
        );
    }

    #[test]
    fn bad_arguments_are_the_modules_usual_errors() {
        let cases: [(&[&str], &str); 10] = [
            (
                &[],
                "ERR wrong number of arguments for 'RL.COUNTER': expected RL.COUNTER key window [BY n] [XX]",
            ),
            (
                &["0"],
                "ERR invalid window: expected a duration from 1ms to 10 years (315360000000ms): an integer \
                 with an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)",
            ),
            (
                &["1m", "BY"],
                "ERR BY needs a value: an integer from -1000000000000 to 1000000000000",
            ),
            (
                &["1m", "BY", "1000000000001"],
                "ERR invalid BY: expected an integer from -1000000000000 to 1000000000000",
            ),
            (
                &["1m", "BY", "-0"],
                "ERR invalid BY: expected an integer from -1000000000000 to 1000000000000",
            ),
            (
                &["1m", "BY", "+1"],
                "ERR invalid BY: expected an integer from -1000000000000 to 1000000000000",
            ),
            (&["1m", "BY", "1", "by", "2"], "ERR BY given more than once"),
            (&["1m", "XX", "xx"], "ERR XX given more than once"),
            (
                &["1m", "XX", "NX"],
                "ERR unknown option 'NX' at argument 4: expected BY n or XX, each once",
            ),
            (
                &["1m", "COST", "2"],
                "ERR unknown option 'COST' at argument 3: expected BY n or XX, each once",
            ),
        ];
        for (words, expected) in cases {
            assert_eq!(parsed(words), Err(expected.to_string()), "{words:?}");
        }
    }
}
