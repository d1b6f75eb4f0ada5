//! Every error text the module replies with, spelled once.
//!
//! Tests assert these texts exactly, so a change here is a change of the public contract.
//! No variant carries raw client bytes: where an error quotes what the client sent, the
//! text goes through [`quote`] first, so it can hold neither a line break nor a NUL.

use std::fmt;

use algorithms::ranges::MAX_DURATION_MS;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Too few or too many arguments; `usage` is the syntax after the command name.
    Arity {
        command: &'static str,
        usage: String,
    },
    /// A count (burst, rate, COST, ...) that is not an integer in `min..=max`.
    Count {
        arg: &'static str,
        min: u64,
        max: u64,
    },
    /// A signed count (RL.COUNTER's `BY`) that is not an integer from `-max` to `max`.
    SignedCount { arg: &'static str, max: u64 },
    /// A limit above the module setting that bounds it (`sliding-log-max-limit` for
    /// RL.SLIDINGLOG, `concurrency-max-limit` for RL.CONCURRENCY.ACQUIRE).
    CappedLimit { max: u64, setting: &'static str },
    /// A duration that does not parse or is out of range.
    Duration { arg: &'static str },
    /// A whole number of seconds (CL.THROTTLE's period) out of range.
    Seconds { arg: &'static str, max: u64 },
    /// An option that needs a value was the last argument.
    OptionValue {
        option: &'static str,
        expected: &'static str,
    },
    /// The same option given twice.
    OptionTwice { option: &'static str },
    /// COST and ATMOST in one call.
    CostWithAtmost,
    /// MIN or MAX without ADAPTIVE, or MIN above MAX: the whole message.
    AdaptiveBounds { message: &'static str },
    /// RL.REFUND on a concurrency key, whose leases end with RL.CONCURRENCY.RELEASE.
    RefundLease,
    /// An argument where an option was expected.
    UnknownOption {
        position: usize,
        token: String,
        accepted: &'static str,
    },
    /// The key holds a value of another Redis type.
    WrongType,
    /// RL.COUNTER on a string that is not an integer: INCRBY's text.
    NotInteger,
    /// RL.COUNTER's increment takes the value past a 64-bit signed integer: INCRBY's text.
    IncrementOverflow,
    /// The key holds the state of another algorithm.
    OtherAlgorithm {
        stored: &'static str,
        requested: &'static str,
    },
    /// RL.DEBUG.* without `debug-clock yes` at load time.
    DebugClockOff,
    /// A bad RL.DEBUG.CLOCK subcommand or value.
    DebugClockUsage,
    /// An internal command sent by an ordinary client.
    InternalOnly { command: &'static str },
    /// RL.REPLAY naming a command it cannot replay.
    NotReplayable,
    /// RL.LOADSTATE with a state blob that does not decode.
    BadState,
    /// RL.POLICY.SYNC with a change that does not parse.
    BadPolicySync,
    /// A rule of RL.POLICY.SET that does not start with an algorithm name.
    UnknownRule { position: usize, token: String },
    /// A rule with too few arguments; `usage` is what its algorithm takes.
    RuleArity {
        position: usize,
        algorithm: &'static str,
        usage: String,
    },
    /// A bad argument inside a rule: the argument's own error, and where the rule starts.
    InRule {
        position: usize,
        algorithm: &'static str,
        inner: Box<Error>,
    },
    /// More rules than a policy holds.
    TooManyRules { max: usize },
    /// A policy name that is empty or too long.
    PolicyName { max: usize },
    /// RL.LIMIT naming a policy that does not exist.
    NoPolicy { name: String },
    /// RL.LIMIT naming a policy this cluster node does not hold before it has caught up with
    /// the cluster's policies (docs/cluster.md): the client may try again.
    PolicyNotYet { name: String },
    /// A policy change on a cluster node that has not caught up with the cluster's policies:
    /// acknowledged now, it could lose to a change the node has not learned yet.
    PolicyChangeNotYet,
    /// RL.POLICY.SET of a new policy past `ratelimit.max-policies`.
    PoliciesFull { max: usize },
    /// `SHADOW` in a policy not followed by a rule.
    ShadowWithoutRule { position: usize },
    /// A policy whose every rule is a shadow rule.
    OnlyShadowRules,
    /// SHADOW given to a command that does not take it (CL.THROTTLE).
    ShadowRefused { command: &'static str },
    /// A panic caught by the command guard: a bug, reported instead of crashing the server.
    Panic,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Arity { command, usage } => write!(
                f,
                "ERR wrong number of arguments for '{command}': expected {command} {usage}"
            ),
            Error::Count { arg, min, max } => {
                write!(f, "ERR invalid {arg}: expected an integer from {min} to {max}")
            }
            Error::SignedCount { arg, max } => {
                write!(f, "ERR invalid {arg}: expected an integer from -{max} to {max}")
            }
            Error::CappedLimit { max, setting } => write!(
                f,
                "ERR invalid limit: expected an integer from 1 to {max} (the module setting \
                 ratelimit.{setting} bounds it)"
            ),
            Error::Duration { arg } => write!(
                f,
                "ERR invalid {arg}: expected a duration from 1ms to 10 years ({MAX_DURATION_MS}ms): \
                 an integer with an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)"
            ),
            Error::Seconds { arg, max } => {
                write!(f, "ERR invalid {arg}: expected whole seconds from 1 to {max}")
            }
            Error::OptionValue { option, expected } => {
                write!(f, "ERR {option} needs a value: {expected}")
            }
            Error::OptionTwice { option } => write!(f, "ERR {option} given more than once"),
            Error::AdaptiveBounds { message } => write!(f, "ERR {message}"),
            Error::CostWithAtmost => f.write_str(
                "ERR COST and ATMOST cannot be used together: COST n takes exactly n units, ATMOST max \
                 as many as the key allows now, up to max",
            ),
            Error::RefundLease => f.write_str(
                "ERR RL.REFUND does not apply to a concurrency key: use RL.CONCURRENCY.RELEASE key token",
            ),
            Error::UnknownOption {
                position,
                token,
                accepted,
            } => write!(
                f,
                "ERR unknown option '{token}' at argument {position}: expected {accepted}"
            ),
            Error::WrongType => {
                f.write_str("WRONGTYPE Operation against a key holding the wrong kind of value")
            }
            Error::NotInteger => f.write_str("ERR value is not an integer or out of range"),
            Error::IncrementOverflow => f.write_str("ERR increment or decrement would overflow"),
            Error::OtherAlgorithm { stored, requested } => write!(
                f,
                "ERR the key holds {stored} state, not {requested}: use {stored} on it, or another key"
            ),
            Error::DebugClockOff => f.write_str(
                "ERR the debug clock is off: load the module with 'debug-clock yes' to use RL.DEBUG commands",
            ),
            Error::DebugClockUsage => f.write_str(
                "ERR usage: RL.DEBUG.CLOCK SET ms (0 to 253402300799999) | ADVANCE ms (an integer, may be negative, or a duration) | REAL",
            ),
            Error::InternalOnly { command } => write!(
                f,
                "ERR {command} is internal: it is accepted only from the replication stream or the AOF"
            ),
            Error::NotReplayable => {
                f.write_str("ERR RL.REPLAY: the replayed command is not an admission command")
            }
            Error::BadState => f.write_str("ERR RL.LOADSTATE: the state does not decode"),
            Error::BadPolicySync => f.write_str(
                "ERR RL.POLICY.SYNC: expected name clock node SET rule... or name clock node DEL deleted_at_ms",
            ),
            Error::UnknownRule { position, token } => write!(
                f,
                "ERR unknown algorithm '{token}' at argument {position}: expected a rule, one of \
                 GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or WARMUP \
                 with its arguments"
            ),
            Error::RuleArity {
                position,
                algorithm,
                usage,
            } => write!(
                f,
                "ERR the {algorithm} rule at argument {position} needs its arguments: {algorithm} {usage}"
            ),
            Error::InRule {
                position,
                algorithm,
                inner,
            } => {
                let text = inner.to_string();
                let detail = text.strip_prefix("ERR ").unwrap_or(&text);
                write!(f, "ERR the {algorithm} rule at argument {position}: {detail}")
            }
            Error::TooManyRules { max } => write!(f, "ERR a policy holds at most {max} rules"),
            Error::ShadowWithoutRule { position } => write!(
                f,
                "ERR SHADOW at argument {position} must be followed by a rule, as in SHADOW GCRA 5 5 1s"
            ),
            Error::OnlyShadowRules => write!(
                f,
                "ERR a policy needs at least one rule without SHADOW (to try a whole policy, call RL.LIMIT with SHADOW)"
            ),
            Error::ShadowRefused { command } => write!(
                f,
                "ERR {command} does not take SHADOW: its reply is redis-cell's, with no field for it; use RL.GCRA with SHADOW"
            ),

            Error::PolicyName { max } => {
                write!(f, "ERR invalid policy name: expected 1 to {max} bytes")
            }
            Error::NoPolicy { name } => write!(
                f,
                "ERR no policy named '{name}': create it with RL.POLICY.SET {name} rule [rule ...]"
            ),
            Error::PolicyNotYet { name } => write!(
                f,
                "TRYAGAIN no policy named '{name}' on this node yet: it has not caught up with the cluster's policies since it started"
            ),
            Error::PolicyChangeNotYet => f.write_str(
                "TRYAGAIN this node has not caught up with the cluster's policies since it started: a change made now could lose to one it has not learned yet; try again in a moment",
            ),
            Error::PoliciesFull { max } => write!(
                f,
                "ERR the policies table is full: {max} policies (ratelimit.max-policies); delete one or raise the setting"
            ),
            Error::Panic => f.write_str(
                "ERR ratelimit caught an internal error (a bug, please report it) and the server carries on",
            ),
        }
    }
}

impl std::error::Error for Error {}

/// A client's token made safe to quote in an error: printable ASCII only, at most 32 bytes.
pub fn quote(token: &[u8]) -> String {
    const MAX: usize = 32;
    let mut out: String = token
        .iter()
        .take(MAX)
        .map(|&b| {
            if (0x21..0x7f).contains(&b) && b != b'\'' {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    if token.len() > MAX {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_keeps_printable_ascii_and_masks_the_rest() {
        assert_eq!(quote(b"COST"), "COST");
        assert_eq!(quote(b"a\r\nb\0c'd \xff"), "a??b?c?d??");
        assert_eq!(quote(&[b'x'; 40]), format!("{}...", "x".repeat(32)));
    }

    #[test]
    fn texts_never_hold_line_breaks() {
        let all = [
            Error::Duration { arg: "period" }.to_string(),
            Error::DebugClockUsage.to_string(),
            Error::UnknownOption {
                position: 5,
                token: quote(b"\r\n"),
                accepted: "COST n or DRYRUN",
            }
            .to_string(),
        ];
        for text in all {
            assert!(!text.contains('\r') && !text.contains('\n'), "{text}");
        }
    }
}
