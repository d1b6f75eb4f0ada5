//! Every command's syntax, written once: its arguments with their names and types, its
//! summary and complexity, and what it does with its key.
//!
//! This one table drives
//! - the wrong-number-of-arguments errors ([`Syntax::arity`], [`Syntax::required`]): the
//!   usage after the command name is rendered from the arguments;
//! - `COMMAND DOCS` and `COMMAND INFO` (`commands::docs` hands each entry to `redis::docs`,
//!   which lowers it for Redis);
//! - the policy grammar (`args::rules`): a rule takes its algorithm command's positional
//!   arguments and flags, and its arity error shows them;
//! - the names the parameter parsers (`args::params`) give a bad argument in its error.
//!
//! The table is written for every command of the module, including those the command table
//! may not register (CL.THROTTLE with `cell-compat no`). No Redis types here: the raw form
//! Redis takes is built in `redis::docs`.

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
    const fn new(
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

    const fn note(mut self, note: &'static str) -> Syntax {
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
    /// usage is rendered then: only an error needs it).
    pub fn arity(&self) -> Error {
        Error::Arity {
            command: self.name.as_str(),
            usage: self.usage(),
        }
    }

    /// The syntax of a policy rule of this algorithm, after its name.
    pub fn rule_usage(&self) -> String {
        self.rule_args()
            .map(render_one)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A rule's arguments: the command's, less the key and the options every admission
    /// command takes.
    fn rule_args(&self) -> impl Iterator<Item = &'static Arg> {
        self.args.iter().filter(|a| {
            !matches!(a.kind, Kind::Key)
                && ![COST.name, DRYRUN.name, BLOCK.name, SHADOW.name].contains(&a.name)
        })
    }

    /// How many positional arguments a rule of this algorithm takes.
    pub fn rule_positional(&self) -> usize {
        self.rule_args().filter(|a| !a.optional).count()
    }

    /// The options with a value a rule of this algorithm may add after them (`COLDFACTOR`).
    pub fn rule_valued(&self) -> impl Iterator<Item = &'static str> {
        self.rule_args().filter_map(|a| match a.kind {
            Kind::Token => None,
            _ if a.optional => a.token_str,
            _ => None,
        })
    }

    /// The words a rule of this algorithm may add after them (`INTERVAL`).
    pub fn rule_flags(&self) -> impl Iterator<Item = &'static str> {
        self.rule_args().filter_map(|a| match a.kind {
            Kind::Token if a.optional => a.token_str,
            _ => None,
        })
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
fn render(args: &[Arg]) -> String {
    args.iter().map(render_one).collect::<Vec<_>>().join(" ")
}

fn render_one(arg: &Arg) -> String {
    let mut one = match (arg.kind, arg.token_str) {
        (Kind::Token, Some(word)) => word.to_string(),
        (Kind::Block(subargs), _) => render(subargs),
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
    token_str: Option<&'static str>,
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
        Err(_) => panic!("the syntax table is ASCII"),
    }
}

const fn arg(name: &'static CStr, kind: Kind, summary: &'static CStr) -> Arg {
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

const fn integer(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, Kind::Integer, summary)
}

const fn string(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, Kind::String, summary)
}

/// A word alone, like `DRYRUN`, named after it in lowercase.
const fn token(name: &'static CStr, word: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, Kind::Token, summary).after(word)
}

impl Arg {
    const fn after(mut self, word: &'static CStr) -> Arg {
        self.token = Some(word);
        self.token_str = Some(text(word));
        self
    }

    const fn optional(mut self) -> Arg {
        self.optional = true;
        self
    }

    const fn multiple(mut self) -> Arg {
        self.multiple = true;
        self
    }
}

const KEY: Arg = arg(c"key", Kind::Key, c"the limiter's key");
const DURATION: &CStr =
    c"a duration from 1ms to 10 years: an integer with an optional unit ms, s, m, h or d (a bare number is ms)";

/// The options every admission command takes. `COST n` or `ATMOST n`, one of the two: how
/// many units the request takes.
const COST: Arg = arg(
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
const DRYRUN: Arg = token(
    c"dryrun",
    c"DRYRUN",
    c"reply as if the request were made; write and propagate nothing",
)
.optional();
const BLOCK: Arg = string(
    c"duration",
    c"a penalty: if this request is denied, the key refuses every request for this duration",
)
.after(c"BLOCK")
.optional();
const SHADOW: Arg = token(
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

/// The positional arguments of the window algorithms, then the options.
const WINDOW_ARGS: &[Arg] = &[KEY, LIMIT, WINDOW, COST, DRYRUN, BLOCK, SHADOW];

const O1: &CStr = c"O(1)";
const LEASES_COMPLEXITY: &CStr = c"O(log N) where N is the number of leases held on the key, amortised: a write also drops the leases ended since the last one";
const RULES_COMPLEXITY: &CStr = c"O(R) where R is the number of rules";
const POLICY_NAME: Arg = string(c"name", c"the policy's name");

#[rustfmt::skip]
pub static RL_GCRA: Syntax = Syntax::new(
    name!("rl.gcra"),
    c"Admit or deny a request with GCRA: up to burst units at once, then rate units per period, evenly spaced",
    O1,
    KeyUse::Update,
    &[KEY, BURST, RATE, PERIOD, COST, DRYRUN, BLOCK, SHADOW],
);

#[rustfmt::skip]
pub static CL_THROTTLE: Syntax = Syntax::new(
    name!("cl.throttle"),
    c"Admit or deny a request with GCRA, redis-cell compatible: its arguments, its reply in seconds",
    O1,
    KeyUse::Update,
    &[KEY, MAX_BURST, COUNT, PERIOD_S, QUANTITY],
);

#[rustfmt::skip]
pub static RL_TOKENBUCKET: Syntax = Syntax::new(
    name!("rl.tokenbucket"),
    c"Admit or deny a request with a token bucket: capacity tokens, refilled by refill_amount per refill_period",
    O1,
    KeyUse::Update,
    &[KEY, BUCKET_CAPACITY, REFILL_AMOUNT, REFILL_PERIOD, INTERVAL, COST, DRYRUN, BLOCK, SHADOW],
);

#[rustfmt::skip]
pub static RL_LEAKYBUCKET: Syntax = Syntax::new(
    name!("rl.leakybucket"),
    c"Admit or deny a request with a leaky bucket: a queue of capacity units draining at a constant rate; the reply says when to act",
    O1,
    KeyUse::Update,
    &[KEY, QUEUE_CAPACITY, LEAK_AMOUNT, LEAK_PERIOD, COST, DRYRUN, BLOCK, SHADOW],
);

#[rustfmt::skip]
pub static RL_FIXEDWINDOW: Syntax = Syntax::new(
    name!("rl.fixedwindow"),
    c"Admit or deny a request with a fixed window counter, windows aligned to the Unix epoch",
    O1,
    KeyUse::Update,
    WINDOW_ARGS,
);

#[rustfmt::skip]
pub static RL_SLIDINGWINDOW: Syntax = Syntax::new(
    name!("rl.slidingwindow"),
    c"Admit or deny a request with a sliding window counter: this window's count plus the previous one's, weighted",
    O1,
    KeyUse::Update,
    WINDOW_ARGS,
);

#[rustfmt::skip]
pub static RL_SLIDINGLOG: Syntax = Syntax::new(
    name!("rl.slidinglog"),
    c"Admit or deny a request with a sliding log: exact, it keeps every admitted request still in the window",
    c"O(1) amortized for a key written regularly: O(E) for the E expired entries it drops or skips, and O(COST) more for a denial",
    KeyUse::Update,
    WINDOW_ARGS,
);

#[rustfmt::skip]
pub static RL_WARMUP: Syntax = Syntax::new(
    name!("rl.warmup"),
    c"Admit or deny a request with Guava's SmoothWarmingUp: after idle, spaced by the cold interval at first, speeding up to rate per period over the warm-up",
    O1,
    KeyUse::Update,
    &[KEY, RATE, PERIOD, WARMUP, COLDFACTOR, COST, DRYRUN, BLOCK, SHADOW],
);

#[rustfmt::skip]
pub static RL_CONCURRENCY_ACQUIRE: Syntax = Syntax::new(
    name!("rl.concurrency.acquire"),
    c"Take one of limit leases, held until released or for lease at most; the reply carries the lease's token",
    LEASES_COMPLEXITY,
    KeyUse::Update,
    &[KEY, LEASES, LEASE, ID, DRYRUN, SHADOW],
);

#[rustfmt::skip]
pub static RL_CONCURRENCY_RELEASE: Syntax = Syntax::new(
    name!("rl.concurrency.release"),
    c"End a lease taken with RL.CONCURRENCY.ACQUIRE: 1, or 0 when no such lease is held",
    LEASES_COMPLEXITY,
    KeyUse::Remove,
    &[KEY, string(c"token", c"the token RL.CONCURRENCY.ACQUIRE replied with")],
);

#[rustfmt::skip]
pub static RL_INSPECT: Syntax = Syntax::new(
    name!("rl.inspect"),
    c"Show a limiter key's algorithm, parameters and state, changing nothing",
    c"O(1); O(N) for a sliding log holding N entries; O(log N) for a concurrency key holding N leases",
    KeyUse::Read,
    &[KEY],
);

#[rustfmt::skip]
pub static RL_LIMIT: Syntax = Syntax::new(
    name!("rl.limit"),
    c"Admit or deny a request against every rule of a policy, all or nothing; the reply is the binding rule's",
    c"O(R) where R is the number of rules in the policy",
    KeyUse::Update,
    &[KEY, string(c"policy", c"the name of a policy set with RL.POLICY.SET"), COST, DRYRUN, BLOCK, SHADOW],
);

#[rustfmt::skip]
pub static RL_REFUND: Syntax = Syntax::new(
    name!("rl.refund"),
    c"Give back units a key has taken (a request that failed downstream, a cost estimated too high); replies the units given back",
    c"O(1); O(log N) for a sliding log holding N entries; O(R) for a policy key of R rules (O(R log N) with sliding logs)",
    KeyUse::Update,
    &[
        KEY,
        integer(c"units", c"units to give back, 0 to 10^12"),
        token(c"dryrun", c"DRYRUN", c"reply what would be given back; write and propagate nothing").optional(),
    ],
);

#[rustfmt::skip]
pub static RL_POLICY_SET: Syntax = Syntax::new(
    name!("rl.policy.set"),
    c"Create or replace a policy: a named list of rules, each an algorithm and its arguments",
    RULES_COMPLEXITY,
    KeyUse::None,
    &[
        POLICY_NAME,
        arg(c"rule", Kind::Block(&[
            token(c"shadow", c"SHADOW", c"a shadow rule: checked and counted, but it never denies").optional(),
            string(c"algorithm", c"an algorithm, as its command is named without RL. (gcra, tokenbucket, ...)"),
            string(c"argument", c"the algorithm's positional arguments, as its command takes them after the key").multiple(),
        ]), c"an algorithm and its arguments").multiple(),
    ],
)
.note(", each rule an algorithm and its arguments, as in GCRA 10 10 1s FIXEDWINDOW 5000 1d (SHADOW before a rule: checked and counted, never denying)");

#[rustfmt::skip]
pub static RL_POLICY_GET: Syntax = Syntax::new(
    name!("rl.policy.get"),
    c"Show the rules of a policy",
    RULES_COMPLEXITY,
    KeyUse::None,
    &[POLICY_NAME],
);

#[rustfmt::skip]
pub static RL_POLICY_DEL: Syntax = Syntax::new(
    name!("rl.policy.del"),
    c"Delete a policy",
    RULES_COMPLEXITY,
    KeyUse::None,
    &[POLICY_NAME],
);

#[rustfmt::skip]
pub static RL_POLICY_LIST: Syntax = Syntax::new(
    name!("rl.policy.list"),
    c"List the names of the policies",
    c"O(P) where P is the number of policies",
    KeyUse::None,
    &[],
);

#[rustfmt::skip]
pub static RL_TOP: Syntax = Syntax::new(
    name!("rl.top"),
    c"List the keys denied most often lately, with their counts and error bounds, those the caller may read",
    c"O(S log S) where S is the summary's size (ratelimit.top-size)",
    KeyUse::None,
    &[integer(c"k", c"how many keys at most, 1 to 100000 (default 10)").after(c"COUNT").optional()],
);

#[rustfmt::skip]
pub static RL_DEBUG_CLOCK: Syntax = Syntax::new(
    name!("rl.debug.clock"),
    c"Freeze, move or release the module's clock, for deterministic tests (only with debug-clock yes)",
    O1,
    KeyUse::None,
    &[arg(c"change", Kind::OneOf(&[
        integer(c"ms", c"freeze the clock at ms since the Unix epoch, 0 to 253402300799999").after(c"SET"),
        string(c"offset", c"move the clock by ms or a duration, negative to move it back, and freeze it").after(c"ADVANCE"),
        token(c"real", c"REAL", c"let the clock run with the server's clock again"),
    ]), c"how to change the clock")],
);

#[rustfmt::skip]
pub static RL_DEBUG_PANIC: Syntax = Syntax::new(
    name!("rl.debug.panic"),
    c"Panic on purpose, to show the guard turns a panic into an error reply (only with debug-clock yes)",
    O1,
    KeyUse::None,
    &[],
);

#[rustfmt::skip]
pub static RL_REPLAY: Syntax = Syntax::new(
    name!("rl.replay"),
    c"Internal: replays an admitted write with the primary's clock reading; accepted only from replication or the AOF",
    c"That of the replayed command",
    KeyUse::Update,
    &[
        KEY,
        string(c"now_us:expire_at_ms:command:arg", c"the primary's clock reading, the key's expiry, the command and its first argument after the key"),
        string(c"arg", c"the command's other arguments").optional().multiple(),
    ],
);

#[rustfmt::skip]
pub static RL_LOADSTATE: Syntax = Syntax::new(
    name!("rl.loadstate"),
    c"Internal: sets a key's encoded state, as an AOF rewrite writes it; accepted only from replication or the AOF",
    c"O(N) where N is the size of the state",
    KeyUse::Overwrite,
    &[KEY, string(c"state", c"the encoded state")],
);

/// The syntax of every command of the module.
pub static ALL: [&Syntax; 22] = [
    &RL_GCRA,
    &CL_THROTTLE,
    &RL_TOKENBUCKET,
    &RL_LEAKYBUCKET,
    &RL_FIXEDWINDOW,
    &RL_SLIDINGWINDOW,
    &RL_SLIDINGLOG,
    &RL_WARMUP,
    &RL_CONCURRENCY_ACQUIRE,
    &RL_CONCURRENCY_RELEASE,
    &RL_INSPECT,
    &RL_LIMIT,
    &RL_REFUND,
    &RL_POLICY_SET,
    &RL_POLICY_GET,
    &RL_POLICY_DEL,
    &RL_POLICY_LIST,
    &RL_TOP,
    &RL_DEBUG_CLOCK,
    &RL_DEBUG_PANIC,
    &RL_REPLAY,
    &RL_LOADSTATE,
];

/// The syntax of the command named `name` (any case).
pub fn find(name: &[u8]) -> Option<&'static Syntax> {
    ALL.iter()
        .copied()
        .find(|syntax| syntax.name.lower().to_bytes().eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The usage texts the arity errors showed when each command spelled its own; the
    /// integration tests assert a few of them through a server, this pins them all.
    #[test]
    fn usages_render_as_they_were_written() {
        let expected = [
            (&RL_GCRA, "RL.GCRA", "key burst rate period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (&CL_THROTTLE, "CL.THROTTLE", "key max_burst count period [quantity]"),
            (
                &RL_TOKENBUCKET,
                "RL.TOKENBUCKET",
                "key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
            ),
            (
                &RL_LEAKYBUCKET,
                "RL.LEAKYBUCKET",
                "key capacity leak_amount leak_period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
            ),
            (&RL_FIXEDWINDOW, "RL.FIXEDWINDOW", "key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (&RL_SLIDINGWINDOW, "RL.SLIDINGWINDOW", "key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (&RL_SLIDINGLOG, "RL.SLIDINGLOG", "key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (
                &RL_WARMUP,
                "RL.WARMUP",
                "key rate period warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]",
            ),
            (&RL_CONCURRENCY_ACQUIRE, "RL.CONCURRENCY.ACQUIRE", "key limit lease [ID token] [DRYRUN] [SHADOW]"),
            (&RL_CONCURRENCY_RELEASE, "RL.CONCURRENCY.RELEASE", "key token"),
            (&RL_INSPECT, "RL.INSPECT", "key"),
            (&RL_REFUND, "RL.REFUND", "key units [DRYRUN]"),
            (&RL_LIMIT, "RL.LIMIT", "key policy [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]"),
            (
                &RL_POLICY_SET,
                "RL.POLICY.SET",
                "name [SHADOW] algorithm argument [argument ...] [[SHADOW] algorithm argument [argument ...] ...], \
                 each rule an algorithm and its arguments, as in GCRA 10 10 1s FIXEDWINDOW 5000 1d \
                 (SHADOW before a rule: checked and counted, never denying)",
            ),
            (&RL_POLICY_GET, "RL.POLICY.GET", "name"),
            (&RL_POLICY_DEL, "RL.POLICY.DEL", "name"),
            (&RL_POLICY_LIST, "RL.POLICY.LIST", "(no arguments)"),
            (&RL_TOP, "RL.TOP", "[COUNT k]"),
            (&RL_REPLAY, "RL.REPLAY", "key now_us:expire_at_ms:command:arg [arg ...]"),
            (&RL_LOADSTATE, "RL.LOADSTATE", "key state"),
        ];
        for (syntax, command, usage) in expected {
            let usage = usage.to_string();
            assert_eq!(syntax.arity(), Error::Arity { command, usage });
        }
    }

    #[test]
    fn rules_take_the_positional_arguments_and_flags() {
        let expected: [(&'static Syntax, &str, usize, &[&str]); 7] = [
            (&RL_GCRA, "burst rate period", 3, &[]),
            (
                &RL_TOKENBUCKET,
                "capacity refill_amount refill_period [INTERVAL]",
                3,
                &["INTERVAL"],
            ),
            (&RL_LEAKYBUCKET, "capacity leak_amount leak_period", 3, &[]),
            (&RL_FIXEDWINDOW, "limit window", 2, &[]),
            (&RL_SLIDINGWINDOW, "limit window", 2, &[]),
            (&RL_SLIDINGLOG, "limit window", 2, &[]),
            (&RL_WARMUP, "rate period warmup [COLDFACTOR factor]", 3, &[]),
        ];
        for (syntax, usage, n, flags) in expected {
            assert_eq!(syntax.rule_usage(), usage, "{}", syntax.name);
            assert_eq!(syntax.rule_positional(), n, "{}", syntax.name);
            assert_eq!(syntax.rule_flags().collect::<Vec<_>>(), flags);
        }
        assert_eq!(RL_WARMUP.rule_valued().collect::<Vec<_>>(), ["COLDFACTOR"]);
        assert_eq!(RL_TOKENBUCKET.rule_valued().count(), 0);
    }

    #[test]
    fn required_counts_the_arguments_that_are_not_optional() {
        assert_eq!(RL_GCRA.required, 4);
        assert_eq!(RL_FIXEDWINDOW.required, 3);
        assert_eq!(RL_CONCURRENCY_ACQUIRE.required, 3);
        assert_eq!(RL_LIMIT.required, 2);
        assert_eq!(find(b"RL.GCRA").map(|s| s.name.lower()), Some(c"rl.gcra"));
    }

    #[test]
    fn most_counts_every_optional_word() {
        let expected = [
            (&RL_REFUND, Some(3)),
            (&CL_THROTTLE, Some(5)),
            (&RL_INSPECT, Some(1)),
            (&RL_CONCURRENCY_RELEASE, Some(2)),
            (&RL_POLICY_LIST, Some(0)),
            (&RL_TOP, Some(2)),
            (&RL_DEBUG_CLOCK, Some(2)),
            (&RL_GCRA, Some(10)),
            (&RL_POLICY_SET, None),
            (&RL_REPLAY, None),
        ];
        for (syntax, most) in expected {
            assert_eq!(syntax.most, most, "{}", syntax.name);
        }
    }
}
