//! What a command's syntax is made of: its [`Name`], its arguments with their names and
//! types, its summary and complexity, and what it does with its key. Each command's entry
//! (`commands`) holds its [`Syntax`], written once, which drives
//! - the wrong-number-of-arguments errors ([`Syntax::arity`], [`Syntax::required`]): the
//!   usage after the command name is rendered from the arguments;
//! - the [`Cursor`] the command reads its arguments with ([`Syntax::args`]);
//! - `COMMAND DOCS` and `COMMAND INFO` (`commands::docs` hands each entry to `redis::command_info`,
//!   which lowers it for Redis).
//!
//! The arguments shared by several commands are here: the key, the options every admission
//! command takes, and each algorithm's parameters, which the parameter parsers
//! (`args::params`) name in their errors and a policy's rules (`args::rules`) take. No Redis
//! types here: the raw form Redis takes is built in `redis::command_info`.

use std::ffi::CStr;

use super::Cursor;
use crate::error::Error;

/// What a command does with its key (the first argument), as its key spec tells ACLs,
/// `COMMAND INFO` and Redis Cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// No key.
    None,
    /// Reads the state, replies from it and updates it: `RW ACCESS UPDATE`, as Redis gives
    /// INCR (the reply's `remaining` and `reset_after_ms` come from the stored state).
    Update,
    /// Removes part of the value (a lease): `RW DELETE`, as Redis gives SREM.
    Remove,
    /// Reads the state and replies with it, changing nothing: `RO ACCESS`.
    Read,
    /// Replaces the whole value: `OW UPDATE`, as Redis gives RESTORE.
    Overwrite,
}

/// A command's name, written once (lower case, as it is registered) and spelt upper case
/// for the errors and the replication stream; both are made when compiled, by [`name!`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name {
    lower: &'static CStr,
    upper: &'static CStr,
}

impl Name {
    /// The name as the command is registered (`rl.gcra`).
    pub const fn lower(self) -> &'static CStr {
        self.lower
    }

    /// The name upper case (`RL.GCRA`), as RL.REPLAY carries it.
    pub const fn upper(self) -> &'static CStr {
        self.upper
    }

    /// The name upper case, as the errors spell it (`RL.GCRA`).
    pub const fn as_str(self) -> &'static str {
        match self.upper.to_str() {
            Ok(text) => text,
            Err(_) => panic!("a command's name is ASCII"),
        }
    }

    /// Made by [`name!`]: `lower` and `upper` are its two spellings, each with its NUL.
    #[doc(hidden)]
    pub const fn from_spellings(lower: &'static [u8], upper: &'static [u8]) -> Name {
        let (Ok(lower), Ok(upper)) = (
            CStr::from_bytes_with_nul(lower),
            CStr::from_bytes_with_nul(upper),
        ) else {
            panic!("a command's name holds no NUL");
        };
        Name { lower, upper }
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `text` upper case, in an array of its length (ASCII: the names are).
#[doc(hidden)]
pub const fn ascii_upper<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    assert!(bytes.len() == N);
    let mut upper = [0; N];
    let mut i = 0;
    while i < N {
        upper[i] = bytes[i].to_ascii_uppercase();
        i += 1;
    }
    upper
}

/// A command's [`Name`] from its lower-case literal: `name!("rl.gcra")`.
macro_rules! name {
    ($lower:literal) => {{
        const LOWER: &str = concat!($lower, "\0");
        const UPPER: [u8; LOWER.len()] = $crate::args::syntax::ascii_upper(LOWER);
        $crate::args::syntax::Name::from_spellings(LOWER.as_bytes(), &UPPER)
    }};
}
pub(crate) use name;

/// One command's syntax and documentation.
#[derive(Debug)]
pub struct Syntax {
    /// The command's name.
    pub name: Name,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub key: KeyUse,
    pub args: &'static [Arg],
    /// The arguments a call needs after the command's name (those not optional), the key
    /// included.
    pub required: usize,
    /// The most arguments a call takes after the name, every optional one given (`None`: no
    /// bound, an argument repeats).
    pub most: Option<usize>,
    /// Said after the usage in the arity error (RL.POLICY.SET's example).
    note: &'static str,
}

impl Syntax {
    pub const fn new(
        name: Name,
        summary: &'static CStr,
        complexity: &'static CStr,
        key: KeyUse,
        args: &'static [Arg],
    ) -> Syntax {
        let mut required = 0;
        let mut i = 0;
        while i < args.len() {
            if !args[i].optional {
                required += 1;
            }
            i += 1;
        }
        Syntax {
            name,
            summary,
            complexity,
            key,
            args,
            required,
            most: most_words(args),
            note: "",
        }
    }

    /// `note` is said after the usage in the arity error.
    pub const fn note(mut self, note: &'static str) -> Syntax {
        self.note = note;
        self
    }

    /// The usage after the name, as the arity error shows it.
    fn usage(&self) -> String {
        let mut usage = if self.args.is_empty() {
            "(no arguments)".to_string()
        } else {
            render(self.args)
        };
        usage.push_str(self.note);
        usage
    }

    /// A cursor over a call's arguments (`words[0]` is the command's name), after the key
    /// (the call holds it as a Redis string); the count is not checked.
    pub fn read<'a>(&'static self, words: &'a [&'a [u8]]) -> Cursor<'a> {
        let first = match self.key {
            KeyUse::None => 1,
            _ => 2,
        };
        Cursor::new(words, first, self)
    }

    /// [`Syntax::read`], when the call has at least the arguments the syntax requires (the
    /// options that may follow are read by the command); the arity error otherwise.
    #[inline]
    pub fn args<'a>(&'static self, words: &'a [&'a [u8]]) -> Result<Cursor<'a>, Error> {
        if words.len() <= self.required {
            return Err(self.arity());
        }
        Ok(self.read(words))
    }

    /// [`Syntax::args`], when the call also has no more arguments than the syntax lists.
    pub fn args_bounded<'a>(&'static self, words: &'a [&'a [u8]]) -> Result<Cursor<'a>, Error> {
        if self.most.is_some_and(|most| words.len() > most + 1) {
            return Err(self.arity());
        }
        self.args(words)
    }

    /// The error for a call with too few or too many arguments, naming the syntax (the
    /// usage is rendered then: only an error needs it). Out of line: no request that
    /// succeeds comes here.
    #[cold]
    #[inline(never)]
    pub fn arity(&self) -> Error {
        Error::Arity {
            command: self.name.as_str(),
            usage: self.usage(),
        }
    }
}

/// The most words `args` take (`None`: any number): a token before a value is a word of
/// its own, a group takes its longest choice or all its members.
const fn most_words(args: &[Arg]) -> Option<usize> {
    let mut total = 0;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg.multiple {
            return None;
        }
        let words = match arg.kind {
            // The word alone (its token).
            Kind::Token => Some(1),
            Kind::OneOf(subargs) => {
                let mut longest = Some(0);
                let mut j = 0;
                while j < subargs.len() {
                    longest = match (longest, most_words(std::slice::from_ref(&subargs[j]))) {
                        (Some(a), Some(b)) if b > a => Some(b),
                        (Some(a), Some(_)) => Some(a),
                        _ => None,
                    };
                    j += 1;
                }
                longest
            }
            Kind::Block(subargs) => most_words(subargs),
            Kind::Key | Kind::Integer | Kind::String => Some(1),
        };
        let Some(words) = words else {
            return None;
        };
        let before = match (arg.kind, arg.token) {
            (Kind::Token, _) | (_, None) => 0,
            (_, Some(_)) => 1,
        };
        total += words + before;
        i += 1;
    }
    Some(total)
}

/// The usage of `args`, as the errors spell it: the names in order, a token before its
/// value (`COST n`), an optional argument in brackets, a repeated one followed by
/// `[name ...]`.
pub fn render(args: &[Arg]) -> String {
    args.iter().map(render_one).collect::<Vec<_>>().join(" ")
}

fn render_one(arg: &Arg) -> String {
    let mut one = match (arg.kind, arg.token_str) {
        (Kind::Token, Some(word)) => word.to_string(),
        (Kind::Block(subargs), _) => render(subargs),
        (Kind::OneOf(subargs), Some(word)) => format!(
            "{word} <{}>",
            subargs
                .iter()
                .map(render_one)
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        (Kind::OneOf(subargs), _) => subargs
            .iter()
            .map(render_one)
            .collect::<Vec<_>>()
            .join(" | "),
        (_, Some(word)) => format!("{word} {}", arg.name_str),
        (_, None) => arg.name_str.to_string(),
    };
    match (arg.optional, arg.multiple) {
        (false, false) => {}
        (false, true) => one = format!("{one} [{one} ...]"),
        (true, false) => one = format!("[{one}]"),
        (true, true) => one = format!("[{one} ...]"),
    }
    one
}

/// An argument as `COMMAND DOCS` shows it.
#[derive(Debug, Clone, Copy)]
pub struct Arg {
    /// The placeholder, as the command's usage spells it (`burst`, `n` in `COST n`).
    pub name: &'static CStr,
    /// The same, as the errors name it.
    pub name_str: &'static str,
    pub kind: Kind,
    /// The word before the value (`COST`), or the whole argument for a [`Kind::Token`].
    pub token: Option<&'static CStr>,
    /// The same, as the errors name it.
    pub token_str: Option<&'static str>,
    pub summary: &'static CStr,
    pub optional: bool,
    pub multiple: bool,
}

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Key,
    Integer,
    /// Any string: a duration with its unit, a token, a name.
    String,
    /// A word alone, like `DRYRUN`.
    Token,
    /// Exactly one of the sub-arguments.
    OneOf(&'static [Arg]),
    /// The sub-arguments together, in order.
    Block(&'static [Arg]),
}

impl Kind {
    pub fn subargs(self) -> &'static [Arg] {
        match self {
            Kind::OneOf(subargs) | Kind::Block(subargs) => subargs,
            _ => &[],
        }
    }
}

/// A C string's text, at compile time (the table's strings are ASCII).
const fn text(s: &'static CStr) -> &'static str {
    match s.to_str() {
        Ok(text) => text,
        Err(_) => panic!("a syntax is ASCII"),
    }
}

pub const fn arg(name: &'static CStr, kind: Kind, summary: &'static CStr) -> Arg {
    Arg {
        name,
        name_str: text(name),
        kind,
        token: None,
        token_str: None,
        summary,
        optional: false,
        multiple: false,
    }
}

pub const fn integer(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, Kind::Integer, summary)
}

pub const fn string(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, Kind::String, summary)
}

/// A word alone, like `DRYRUN`, named after it in lowercase.
pub const fn token(name: &'static CStr, word: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, Kind::Token, summary).after(word)
}

impl Arg {
    /// The word before the value (`COST n`).
    pub const fn after(mut self, word: &'static CStr) -> Arg {
        self.token = Some(word);
        self.token_str = Some(text(word));
        self
    }

    pub const fn optional(mut self) -> Arg {
        self.optional = true;
        self
    }

    pub const fn multiple(mut self) -> Arg {
        self.multiple = true;
        self
    }
}

pub const KEY: Arg = arg(c"key", Kind::Key, c"the limiter's key");
pub const DURATION: &CStr =
    c"a duration from 1ms to 10 years: an integer with an optional unit ms, s, m, h or d (a bare number is ms)";

/// The options every admission command takes. `COST n` or `ATMOST n`, one of the two: how
/// many units the request takes.
pub const COST: Arg = arg(
    c"amount",
    Kind::OneOf(&[
        integer(
            c"n",
            c"units this request takes, 0 to 10^12 (default 1); COST 0 checks without taking",
        )
        .after(c"COST"),
        integer(
            c"max",
            c"a partial grant: take as many units as the key allows now, up to max (1 to 10^12); the reply gains granted",
        )
        .after(c"ATMOST"),
    ]),
    c"how many units the request takes",
)
.optional();
pub const DRYRUN: Arg = token(
    c"dryrun",
    c"DRYRUN",
    c"reply as if the request were made; write and propagate nothing",
)
.optional();
pub const BLOCK: Arg = string(
    c"duration",
    c"a penalty: if this request is denied, the key refuses every request for this duration",
)
.after(c"BLOCK")
.optional();
pub const SHADOW: Arg = token(
    c"shadow",
    c"SHADOW",
    c"decide and count, but answer a denial as admitted with shadow_denied 1, writing nothing and starting no BLOCK",
)
.optional();

// The algorithms' parameters, which the parameter parsers name in their errors.
pub const BURST: Arg = integer(c"burst", c"the most units admitted at once, 1 to 10^12");
pub const RATE: Arg = integer(c"rate", c"units per period, 1 to 10^12");
pub const PERIOD: Arg = string(c"period", DURATION);
pub const MAX_BURST: Arg = integer(c"max_burst", c"the burst less one, 0 to 10^12 - 1");
pub const COUNT: Arg = integer(c"count", c"units per period, 1 to 10^12");
pub const PERIOD_S: Arg = integer(c"period", c"whole seconds, 1 to 315360000 (10 years)");
pub const QUANTITY: Arg = integer(
    c"quantity",
    c"units this request takes, 0 to 10^12 (default 1)",
)
.optional();
pub const BUCKET_CAPACITY: Arg =
    integer(c"capacity", c"the most tokens the bucket holds, 1 to 10^12");
pub const REFILL_AMOUNT: Arg = integer(
    c"refill_amount",
    c"tokens added per refill_period, 1 to 10^12",
);
pub const REFILL_PERIOD: Arg = string(c"refill_period", DURATION);
pub const INTERVAL: Arg = token(
    c"interval",
    c"INTERVAL",
    c"refill the whole refill_amount at each full refill_period, not continuously",
)
.optional();
pub const QUEUE_CAPACITY: Arg = integer(
    c"capacity",
    c"the most units queued, the one being served included, 1 to 10^12",
);
pub const LEAK_AMOUNT: Arg = integer(c"leak_amount", c"units drained per leak_period, 1 to 10^12");
pub const LEAK_PERIOD: Arg = string(c"leak_period", DURATION);
pub const LIMIT: Arg = integer(c"limit", c"the most units admitted in a window, 1 to 10^12");
pub const WINDOW: Arg = string(c"window", DURATION);
pub const LEASES: Arg = integer(
    c"limit",
    c"the most leases held at once, 1 to the setting ratelimit.concurrency-max-limit (default 100000)",
);
pub const LEASE: Arg = string(c"lease", DURATION);
pub const ID: Arg = string(
    c"token",
    c"name the lease (1 to 256 bytes); the same token renews its own lease",
)
.after(c"ID")
.optional();
pub const ADAPTIVE: Arg = arg(
    c"algorithm",
    Kind::OneOf(&[
        token(c"aimd", c"AIMD", c"Netflix's AIMDLimit: +1 while half the limit is in use, x 0.9 on a drop"),
        token(c"vegas", c"VEGAS", c"Netflix's VegasLimit: follows the queue estimated from the RTT over the no-load RTT"),
        token(
            c"gradient2",
            c"GRADIENT2",
            c"Netflix's Gradient2Limit: the gradient of a long-term RTT over the sample's, plus a queue of 4",
        ),
    ]),
    c"the limit adapts to the samples RL.CONCURRENCY.RELEASE reports; limit is where a new key starts",
)
.after(c"ADAPTIVE")
.optional();
pub const ADAPTIVE_MIN: Arg = integer(
    c"min",
    c"with ADAPTIVE, the lowest the limit goes, 1 to the setting ratelimit.concurrency-max-limit (default Netflix's: 20, Vegas 1, or limit if lower)",
)
.after(c"MIN")
.optional();
pub const ADAPTIVE_MAX: Arg = integer(
    c"max",
    c"with ADAPTIVE, the highest the limit goes, MIN to the setting ratelimit.concurrency-max-limit (default Netflix's: 200, Vegas 1000, or limit if higher)",
)
.after(c"MAX")
.optional();
pub const RTT: Arg = string(
    c"rtt",
    c"how long the work took: a duration, or microseconds with us (default: the time since the lease was taken); moves an adaptive limit",
)
.after(c"RTT")
.optional();
pub const DROPPED: Arg = token(
    c"dropped",
    c"DROPPED",
    c"the work failed from overload (timeout, 5xx, cancelled): an adaptive limit backs off",
)
.optional();

pub const WARMUP: Arg = string(
    c"warmup",
    c"how long the limiter takes from cold to the stable rate, and to cool back when idle: a duration from 1ms to 10 years",
);
pub const COLDFACTOR: Arg = integer(
    c"factor",
    c"the cold interval as a multiple of the stable one (period / rate), 2 to 10 (default 3)",
)
.after(c"COLDFACTOR")
.optional();

/// RL.DEBUG.CLOCK's one argument: one of three changes to the clock.
pub const CLOCK_CHANGE: Arg = arg(
    c"change",
    Kind::OneOf(&[
        integer(
            c"ms",
            c"freeze the clock at ms since the Unix epoch, 0 to 253402300799999",
        )
        .after(c"SET"),
        string(
            c"offset",
            c"move the clock by ms or a duration, negative to move it back, and freeze it",
        )
        .after(c"ADVANCE"),
        token(
            c"real",
            c"REAL",
            c"let the clock run with the server's clock again",
        ),
    ]),
    c"how to change the clock",
);

/// RL.DEBUG.PANIC's one argument: how much of the heap to hold while it panics.
pub const PANIC_BLOCKS: Arg = integer(
    c"blocks",
    c"hold this many blocks of each size from 8 to 128 bytes while panicking (0 to 64), so that the unwinder's exception lands elsewhere in the heap",
)
.optional();

/// The options every admission command takes after its parameters, in any order.
pub const ADMISSION_OPTIONS: [Arg; 4] = [COST, DRYRUN, BLOCK, SHADOW];

/// An admission command's arguments: the key, the algorithm's `params` (or RL.LIMIT's
/// policy), then [`ADMISSION_OPTIONS`]; `N` is their count (see [`admission_args!`]).
pub const fn admission<const N: usize>(params: &[Arg]) -> [Arg; N] {
    assert!(N == 1 + params.len() + ADMISSION_OPTIONS.len());
    let mut args = [KEY; N];
    let mut i = 0;
    while i < params.len() {
        args[1 + i] = params[i];
        i += 1;
    }
    let mut j = 0;
    while j < ADMISSION_OPTIONS.len() {
        args[1 + params.len() + j] = ADMISSION_OPTIONS[j];
        j += 1;
    }
    args
}

/// [`admission`] as a `&'static [Arg]`, counted when compiled: `admission_args!(params)`.
macro_rules! admission_args {
    ($params:expr) => {{
        const PARAMS: &[$crate::args::syntax::Arg] = $params;
        const ARGS: [$crate::args::syntax::Arg;
            1 + PARAMS.len() + $crate::args::syntax::ADMISSION_OPTIONS.len()] =
            $crate::args::syntax::admission(PARAMS);
        &ARGS
    }};
}
pub(crate) use admission_args;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_spelt_both_ways_from_one_literal() {
        const NAME: Name = name!("rl.concurrency.acquire");
        assert_eq!(NAME.lower(), c"rl.concurrency.acquire");
        assert_eq!(NAME.upper(), c"RL.CONCURRENCY.ACQUIRE");
        assert_eq!(NAME.as_str(), "RL.CONCURRENCY.ACQUIRE");
        assert_eq!(NAME.to_string(), "RL.CONCURRENCY.ACQUIRE");
    }

    #[test]
    fn an_admission_command_takes_the_key_its_parameters_then_the_options() {
        let args: &[Arg] = admission_args!(&[BURST, RATE, PERIOD]);
        let names: Vec<&str> = args.iter().map(|a| a.name_str).collect();
        assert_eq!(
            names,
            ["key", "burst", "rate", "period", "amount", "dryrun", "duration", "shadow"]
        );
        assert!(matches!(args[0].kind, Kind::Key));
    }

    #[test]
    fn most_counts_every_optional_word() {
        const ONE_OF: Arg = arg(c"change", Kind::OneOf(&[BURST.after(c"SET"), SHADOW]), c"x");
        let cases: [(&[Arg], Option<usize>); 6] = [
            (&[], Some(0)),
            (&[KEY, BURST], Some(2)),
            (&[KEY, BURST, QUANTITY, DRYRUN], Some(4)),
            (&[KEY, COST, BLOCK], Some(5)),
            (&[ONE_OF], Some(2)),
            (&[KEY, RATE.multiple()], None),
        ];
        for (args, most) in cases {
            assert_eq!(most_words(args), most, "{args:?}");
        }
    }
}
