//! The argument grammar shared by every command: counts, durations with units, the
//! options `COST n`, `ATMOST n`, `DRYRUN` and `BLOCK duration`; the [`Cursor`] a command
//! reads its arguments with; each algorithm's parameters ([`params`]), the policy rules
//! ([`rules`]), and what a command's syntax is made of ([`syntax`]). Pure functions over
//! byte slices; no Redis types. Uses only the algorithms (their types and limits) and the
//! error texts.

mod cursor;
pub mod params;
pub mod rules;
pub mod syntax;

pub use cursor::Cursor;
pub use params::AlgorithmCommand;

use crate::digits::{digits, signed};
use crate::error::{quote, Error};

/// The largest count and the longest duration: the algorithms' ranges are the grammar's.
pub use algorithms::ranges::{MAX_COUNT, MAX_DURATION_MS};

/// Parses a decimal integer in `min..=max`, written as Redis writes it; anything else (signs,
/// spaces, hex, floats, leading zeros, overflow) is an error naming `arg`.
pub fn count(bytes: &[u8], arg: &'static str, min: u64, max: u64) -> Result<u64, Error> {
    // The error is built on the failing branch only (`ok_or` would build one and drop it
    // on every count of every request: `Error` has drop glue, called out of line).
    match digits(bytes) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Error::Count { arg, min, max }),
    }
}

/// A count from 1 to 10^12.
pub fn positive_count(bytes: &[u8], arg: &'static str) -> Result<u64, Error> {
    count(bytes, arg, 1, MAX_COUNT)
}

/// Parses a signed integer from `-max` to `max`, written as Redis writes it (RL.COUNTER's
/// `BY`): as [`count`], with an optional leading `-` (`-0` is refused, as Redis refuses it).
pub fn signed_count(bytes: &[u8], arg: &'static str, max: u64) -> Result<i64, Error> {
    match signed(bytes) {
        Some(n) if n.unsigned_abs() <= max => Ok(n),
        _ => Err(Error::SignedCount { arg, max }),
    }
}

/// Parses a duration: a positive integer with an optional unit `ms`, `s`, `m`, `h` or `d`
/// (any case); a bare number is milliseconds. Returns milliseconds, from 1 to ten years.
pub fn duration_ms(bytes: &[u8], arg: &'static str) -> Result<u64, Error> {
    let err = || Error::Duration { arg };
    let split = bytes
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(bytes.len());
    let (number, unit) = bytes.split_at(split);
    // Case-insensitive without allocating: this runs on every request.
    let scale: u64 = match unit {
        b"" => 1,
        [m, s] if m.eq_ignore_ascii_case(&b'm') && s.eq_ignore_ascii_case(&b's') => 1,
        [b's' | b'S'] => 1_000,
        [b'm' | b'M'] => 60_000,
        [b'h' | b'H'] => 3_600_000,
        [b'd' | b'D'] => 86_400_000,
        _ => return Err(err()),
    };
    let n = digits(number).ok_or_else(err)?;
    match n.checked_mul(scale) {
        Some(ms) if (1..=MAX_DURATION_MS).contains(&ms) => Ok(ms),
        _ => Err(err()),
    }
}

/// Parses RELEASE's `RTT`: a duration as [`duration_ms`] takes it, or a number of
/// microseconds with the unit `us` (a round trip is often under a millisecond). Returns
/// microseconds, from 1 to ten years; `None` when it is not one.
pub fn duration_us(bytes: &[u8]) -> Option<u64> {
    match bytes {
        [number @ .., u, s] if u.eq_ignore_ascii_case(&b'u') && s.eq_ignore_ascii_case(&b's') => {
            digits(number).filter(|us| (1..=MAX_DURATION_MS * 1000).contains(us))
        }
        _ => duration_ms(bytes, "RTT").ok().map(|ms| ms * 1000),
    }
}

/// A signed offset in milliseconds: `0`, a duration, or `-` and a duration.
pub fn offset_ms(bytes: &[u8]) -> Option<i64> {
    if bytes == b"0" {
        return Some(0);
    }
    let (sign, rest) = match bytes.split_first() {
        Some((b'-', rest)) => (-1, rest),
        _ => (1, bytes),
    };
    let ms = duration_ms(rest, "offset").ok()?;
    i64::try_from(ms).ok().map(|ms| sign * ms)
}

/// The options every admission command takes after its positional arguments: what they
/// decide is the algorithms crate's ([`algorithms::request`]), reading them is this grammar's.
pub use algorithms::request::Options;

const ACCEPTED_OPTIONS: &str = "COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW";

/// The value after the option `option` at `rest[i]`: an error naming it when it was `given`
/// already, or when no value follows (`expected` says what it must be).
#[inline]
fn option_value<'a>(
    rest: &[&'a [u8]],
    i: usize,
    option: &'static str,
    expected: &'static str,
    given: bool,
) -> Result<&'a [u8], Error> {
    if given {
        return Err(Error::OptionTwice { option });
    }
    match rest.get(i + 1) {
        Some(value) => Ok(value),
        None => Err(Error::OptionValue { option, expected }),
    }
}

/// What a command takes after its positional arguments, in any order, each at most once,
/// case-insensitive: the shared options it takes, its own flags (bit `i` of the parsed mask
/// set when `flags[i]` was given), and its own options with a value (each value handed to
/// the command as it is read, so that errors come in the order of the words).
#[derive(Debug, Clone, Copy)]
pub struct Grammar {
    /// `COST n`, `ATMOST max` and `BLOCK duration`: every admission command but
    /// RL.CONCURRENCY.ACQUIRE (one lease a request, never blocked).
    pub counted: bool,
    /// `DRYRUN` and `SHADOW`: every admission command.
    pub previews: bool,
    /// The command's own flags (RL.TOKENBUCKET's `INTERVAL`).
    pub flags: &'static [&'static str],
    /// The command's own options with a value: the word, and what the value must be (the
    /// error when it is missing).
    pub valued: &'static [(&'static str, &'static str)],
    /// Every option the command takes, for the error on any other word.
    pub accepted: &'static str,
}

impl Grammar {
    /// The options of every admission command, and none of its own.
    pub const ADMISSION: Grammar = Grammar {
        counted: true,
        previews: true,
        flags: &[],
        valued: &[],
        accepted: ACCEPTED_OPTIONS,
    };
}

/// Parses `rest` by `grammar`; `first_position` is the argument number of `rest[0]` (the key
/// being argument 1), for the error texts. `value(i, bytes)` gets the value of
/// `grammar.valued[i]` when it is read, and may refuse it. Returns the shared options (their
/// defaults where the grammar does not take them) and the mask of the flags given. Inlined
/// into each command's parser, where the grammar is a constant.
#[inline(always)]
fn parse_options<'a>(
    rest: &[&'a [u8]],
    first_position: usize,
    grammar: &Grammar,
    mut value: impl FnMut(usize, &'a [u8]) -> Result<(), Error>,
) -> Result<(Options, u32), Error> {
    let mut opts = Options::default();
    let (mut seen_cost, mut seen_dryrun) = (false, false);
    let (mut mask, mut valued_seen) = (0u32, 0u32);
    let mut i = 0;
    while i < rest.len() {
        let token = rest[i];
        if grammar.counted {
            if token.eq_ignore_ascii_case(b"COST") {
                let expected = "an integer from 0 to 1000000000000";
                let value = option_value(rest, i, "COST", expected, seen_cost)?;
                seen_cost = true;
                opts.cost = count(value, "COST", 0, MAX_COUNT)?;
                i += 2;
                continue;
            }
            if token.eq_ignore_ascii_case(b"ATMOST") {
                let expected = "an integer from 1 to 1000000000000";
                let value = option_value(rest, i, "ATMOST", expected, opts.atmost.is_some())?;
                opts.atmost = Some(positive_count(value, "ATMOST")?);
                i += 2;
                continue;
            }
            if token.eq_ignore_ascii_case(b"BLOCK") {
                let expected = "a duration from 1ms to 10 years";
                let value = option_value(rest, i, "BLOCK", expected, opts.block_ms.is_some())?;
                opts.block_ms = Some(duration_ms(value, "BLOCK")?);
                i += 2;
                continue;
            }
        }
        if grammar.previews && token.eq_ignore_ascii_case(b"SHADOW") {
            if opts.shadow {
                return Err(Error::OptionTwice { option: "SHADOW" });
            }
            opts.shadow = true;
            i += 1;
            continue;
        }
        if let Some(at) = grammar
            .valued
            .iter()
            .position(|(word, _)| token.eq_ignore_ascii_case(word.as_bytes()))
        {
            let (word, expected) = grammar.valued[at];
            let given = valued_seen & (1 << at) != 0;
            value(at, option_value(rest, i, word, expected, given)?)?;
            valued_seen |= 1 << at;
            i += 2;
            continue;
        }
        if grammar.previews && token.eq_ignore_ascii_case(b"DRYRUN") {
            if seen_dryrun {
                return Err(Error::OptionTwice { option: "DRYRUN" });
            }
            seen_dryrun = true;
            opts.dryrun = true;
            i += 1;
            continue;
        }
        match grammar
            .flags
            .iter()
            .position(|f| token.eq_ignore_ascii_case(f.as_bytes()))
        {
            Some(bit) if mask & (1 << bit) != 0 => {
                return Err(Error::OptionTwice {
                    option: grammar.flags[bit],
                })
            }
            Some(bit) => mask |= 1 << bit,
            None => {
                return Err(Error::UnknownOption {
                    position: first_position + i,
                    token: quote(token),
                    accepted: grammar.accepted,
                })
            }
        }
        i += 1;
    }
    if seen_cost && opts.atmost.is_some() {
        return Err(Error::CostWithAtmost);
    }
    Ok((opts, mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// [`Cursor::options`] of `rest`, `first_position` the argument number of `rest[0]`.
    fn options(rest: &[&[u8]], first_position: usize) -> Result<Options, Error> {
        parse_options(rest, first_position, &Grammar::ADMISSION, |_, _| Ok(())).map(|(o, _)| o)
    }

    /// The admission options and the command's own `flags`.
    fn options_with(
        rest: &[&[u8]],
        first_position: usize,
        flags: &'static [&'static str],
        accepted: &'static str,
    ) -> Result<(Options, u32), Error> {
        let grammar = Grammar {
            flags,
            accepted,
            ..Grammar::ADMISSION
        };
        parse_options(rest, first_position, &grammar, |_, _| Ok(()))
    }

    /// The admission options and the command's own option `word` with a value.
    fn options_with_value<'a>(
        rest: &[&'a [u8]],
        first_position: usize,
        valued: &'static [(&'static str, &'static str)],
        accepted: &'static str,
    ) -> Result<(Options, Option<&'a [u8]>), Error> {
        let grammar = Grammar {
            valued,
            accepted,
            ..Grammar::ADMISSION
        };
        let mut value = None;
        parse_options(rest, first_position, &grammar, |_, v| {
            value = Some(v);
            Ok(())
        })
        .map(|(o, _)| (o, value))
    }

    #[test]
    fn signed_counts_are_bounded_both_ways() {
        assert_eq!(
            signed_count(b"-1000000000000", "BY", MAX_COUNT),
            Ok(-1_000_000_000_000)
        );
        assert_eq!(
            signed_count(b"1000000000000", "BY", MAX_COUNT),
            Ok(1_000_000_000_000)
        );
        assert_eq!(signed_count(b"0", "BY", MAX_COUNT), Ok(0));
        let err = Err(Error::SignedCount {
            arg: "BY",
            max: MAX_COUNT,
        });
        for bad in [
            &b"1000000000001"[..],
            b"-1000000000001",
            b"-0",
            b"+1",
            b"01",
            b"1.5",
            b"",
            b"-",
            b"-9223372036854775808",
        ] {
            assert_eq!(signed_count(bad, "BY", MAX_COUNT), err, "{:?}", bad);
        }
    }

    #[test]
    fn durations_with_and_without_units() {
        let cases: [(&[u8], u64); 8] = [
            (b"1500", 1500),
            (b"1500ms", 1500),
            (b"90s", 90_000),
            (b"1m", 60_000),
            (b"24h", 86_400_000),
            (b"7d", 604_800_000),
            (b"2S", 2000),
            (b"3650d", MAX_DURATION_MS),
        ];
        for (text, ms) in cases {
            assert_eq!(duration_ms(text, "period"), Ok(ms), "{:?}", text);
        }
    }

    #[test]
    fn bad_durations_name_the_argument() {
        let bad: [&[u8]; 15] = [
            b"",
            b"05",
            b"01s",
            b"00ms",
            b"0",
            b"0s",
            b"-5",
            b"1.5s",
            b"ms",
            b"5x",
            b"5 s",
            b"3651d",
            b"0x10",
            b"+5",
            b"99999999999999999999999",
        ];
        for text in bad {
            assert_eq!(
                duration_ms(text, "period"),
                Err(Error::Duration { arg: "period" }),
                "{:?}",
                text
            );
        }
    }

    #[test]
    fn counts_are_bounded_integers() {
        assert_eq!(positive_count(b"1", "burst"), Ok(1));
        assert_eq!(positive_count(b"1000000000000", "burst"), Ok(MAX_COUNT));
        let err = Err(Error::Count {
            arg: "burst",
            min: 1,
            max: MAX_COUNT,
        });
        for bad in [
            &b"0"[..],
            b"1000000000001",
            b"-1",
            b"1e3",
            b"",
            b" 1",
            b"05",
            b"00",
            b"+5",
            b"18446744073709551616",
        ] {
            assert_eq!(positive_count(bad, "burst"), err, "{:?}", bad);
        }
    }

    #[test]
    fn options_in_any_order_and_case() {
        let o = options(&[b"dryrun", b"cost", b"7"], 5).unwrap();
        assert_eq!(
            o,
            Options {
                cost: 7,
                dryrun: true,
                block_ms: None,
                shadow: false,
                atmost: None,
            }
        );
        let o = options(&[b"shadow", b"BLOCK", b"1s"], 5).unwrap();
        assert_eq!((o.shadow, o.block_ms), (true, Some(1000)));
        assert_eq!(
            options(&[b"SHADOW", b"shadow"], 5),
            Err(Error::OptionTwice { option: "SHADOW" })
        );
        let o = options(&[b"atmost", b"1000000000000", b"DRYRUN"], 5).unwrap();
        assert_eq!((o.cost, o.atmost, o.dryrun), (1, Some(MAX_COUNT), true));
        let o = options(&[b"block", b"15m", b"COST", b"2"], 5).unwrap();
        assert_eq!((o.cost, o.block_ms), (2, Some(900_000)));
        assert_eq!(
            options(&[b"BLOCK"], 5),
            Err(Error::OptionValue {
                option: "BLOCK",
                expected: "a duration from 1ms to 10 years"
            })
        );
        assert_eq!(
            options(&[b"BLOCK", b"1m", b"BLOCK", b"1m"], 5),
            Err(Error::OptionTwice { option: "BLOCK" })
        );
        assert_eq!(
            options(&[b"BLOCK", b"0"], 5),
            Err(Error::Duration { arg: "BLOCK" })
        );
        assert_eq!(options(&[], 5).unwrap(), Options::default());
        assert_eq!(options(&[b"COST", b"0"], 5).unwrap().cost, 0);
    }

    #[test]
    fn option_errors() {
        assert_eq!(
            options(&[b"COST"], 5),
            Err(Error::OptionValue {
                option: "COST",
                expected: "an integer from 0 to 1000000000000"
            })
        );
        assert_eq!(
            options(&[b"COST", b"1", b"COST", b"2"], 5),
            Err(Error::OptionTwice { option: "COST" })
        );
        assert_eq!(
            options(&[b"DRYRUN", b"DRYRUN"], 5),
            Err(Error::OptionTwice { option: "DRYRUN" })
        );
        assert_eq!(
            options(&[b"DRYRUN", b"FAST"], 5),
            Err(Error::UnknownOption {
                position: 6,
                token: "FAST".into(),
                accepted: ACCEPTED_OPTIONS
            })
        );
    }

    #[test]
    fn atmost_is_a_count_and_excludes_cost() {
        let exclusive = Err(Error::CostWithAtmost);
        assert_eq!(options(&[b"COST", b"2", b"ATMOST", b"5"], 5), exclusive);
        assert_eq!(options(&[b"ATMOST", b"5", b"cost", b"0"], 5), exclusive);
        let count = Err(Error::Count {
            arg: "ATMOST",
            min: 1,
            max: MAX_COUNT,
        });
        for bad in [&b"0"[..], b"-1", b"1000000000001", b"x"] {
            assert_eq!(options(&[b"ATMOST", bad], 5), count, "{bad:?}");
        }
        assert_eq!(
            options(&[b"ATMOST"], 5),
            Err(Error::OptionValue {
                option: "ATMOST",
                expected: "an integer from 1 to 1000000000000"
            })
        );
        assert_eq!(
            options(&[b"ATMOST", b"1", b"ATMOST", b"2"], 5),
            Err(Error::OptionTwice { option: "ATMOST" })
        );
    }

    #[test]
    fn offsets_may_be_negative() {
        assert_eq!(offset_ms(b"0"), Some(0));
        assert_eq!(offset_ms(b"1500"), Some(1500));
        assert_eq!(offset_ms(b"-2h"), Some(-7_200_000));
        assert_eq!(offset_ms(b"--1"), None);
        assert_eq!(offset_ms(b"-"), None);
    }

    #[test]
    fn command_flags_are_options_too() {
        const FLAGS: &[&str] = &["INTERVAL"];
        let flags = FLAGS;
        let accepted = "COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or INTERVAL";
        let (o, mask) = options_with(&[b"cost", b"2", b"interval"], 5, flags, accepted).unwrap();
        assert_eq!((o.cost, mask), (2, 1));
        let (_, mask) = options_with(&[], 5, flags, accepted).unwrap();
        assert_eq!(mask, 0);
        assert_eq!(
            options_with(&[b"INTERVAL", b"INTERVAL"], 5, flags, accepted),
            Err(Error::OptionTwice { option: "INTERVAL" })
        );
        assert_eq!(
            options_with(&[b"EVERY"], 5, flags, accepted),
            Err(Error::UnknownOption {
                position: 5,
                token: "EVERY".into(),
                accepted
            })
        );
    }

    #[test]
    fn a_command_option_with_a_value() {
        let accepted = "COST n, DRYRUN, BLOCK duration or COLDFACTOR factor";
        let parse = |rest: &[&'static [u8]]| {
            options_with_value(
                rest,
                5,
                &[("COLDFACTOR", "an integer from 2 to 10")],
                accepted,
            )
        };
        let (o, v) = parse(&[b"cost", b"2", b"coldfactor", b"4"]).unwrap();
        assert_eq!((o.cost, v), (2, Some(&b"4"[..])));
        assert_eq!(parse(&[]).unwrap().1, None);
        assert_eq!(
            parse(&[b"COLDFACTOR"]),
            Err(Error::OptionValue {
                option: "COLDFACTOR",
                expected: "an integer from 2 to 10"
            })
        );
        assert_eq!(
            parse(&[b"COLDFACTOR", b"3", b"COLDFACTOR", b"3"]),
            Err(Error::OptionTwice {
                option: "COLDFACTOR"
            })
        );
        assert_eq!(
            parse(&[b"INTERVAL"]),
            Err(Error::UnknownOption {
                position: 5,
                token: "INTERVAL".into(),
                accepted
            })
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = duration_ms(&bytes, "period");
            let _ = positive_count(&bytes, "burst");
            let _ = options(&[&bytes, &bytes], 5);
        }

        #[test]
        fn every_count_in_range_round_trips(n in 1u64..=MAX_COUNT) {
            prop_assert_eq!(positive_count(n.to_string().as_bytes(), "rate"), Ok(n));
        }
    }
}
