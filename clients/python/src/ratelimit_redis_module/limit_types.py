"""What to limit by: one algorithm's parameters, or the name of a policy (RL.LIMIT).

(Named ``limit_types``, not ``limits``: ``limits`` is the best-known Python limiter's package,
and a module of the same name here read as if it were that one.)"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Sequence, Union

if TYPE_CHECKING:
    from .reply import Decision

__all__ = [
    "Duration",
    "Limit",
    "GCRA",
    "TokenBucket",
    "LeakyBucket",
    "FixedWindow",
    "SlidingWindow",
    "SlidingLog",
    "Warmup",
    "Policy",
    "Concurrency",
    "ADAPTIVE_KINDS",
    "Rule",
    "RuleKind",
    "RULE_KINDS",
    "FieldShape",
    "field_shape",
    "more_after_ms",
    "duration_ms",
    "parse_rules",
]

#: A duration as the module takes it: an ``int`` of milliseconds, a string with an optional
#: unit (``"1500"``, ``"1500ms"``, ``"90s"``, ``"1m"``, ``"24h"``, ``"1d"``), or a
#: :class:`datetime.timedelta` of whole milliseconds.
Duration = Union[int, str, timedelta]

_UNITS = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([1-9][0-9]*)(ms|s|m|h|d)?", re.IGNORECASE)
#: The longest duration the module takes: ten 365-day years, in milliseconds (held to the
#: module's by tests/test_grammar.py).
MAX_DURATION_MS = 315_360_000_000


def duration_ms(value: Duration) -> int | None:
    """The duration in milliseconds, or None when it is not one the module would accept."""
    if isinstance(value, timedelta):
        ms, rest = divmod(value, timedelta(milliseconds=1))
        ms = int(ms) if not rest else 0
    elif isinstance(value, bool):
        return None
    elif isinstance(value, int):
        ms = value
    else:
        match = _DURATION.fullmatch(value)
        if not match:
            return None
        ms = int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    return ms if 0 < ms <= MAX_DURATION_MS else None


def _arg(value: Duration) -> str:
    """A duration as a command argument (timedelta as milliseconds)."""
    if isinstance(value, timedelta):
        ms = duration_ms(value)
        if ms is None:
            raise ValueError(f"invalid duration {value!r}: expected a positive whole number of milliseconds")
        return str(ms)
    return str(value)


def _check_budget(limit: object, local_budget: int | None, hold: Duration | None) -> None:
    """Refuse a local budget that is not an int of 1 or more, or a ``hold`` that is not a
    duration, or given without a budget."""
    if local_budget is not None and (
        isinstance(local_budget, bool) or not isinstance(local_budget, int) or local_budget < 1
    ):
        raise ValueError(f"invalid local_budget {local_budget!r}: expected an int of 1 or more")
    if hold is not None:
        if local_budget is None:
            raise ValueError("hold is how long a local budget's units are kept: give it with local_budget=")
        if duration_ms(hold) is None:
            raise ValueError(f"invalid hold {hold!r}: expected a positive duration")


class Limit(Protocol):
    """What a limiter checks a key against: a command and its arguments after the key."""

    #: The command, e.g. ``"RL.GCRA"``.
    command: ClassVar[str]
    #: The reply's sixth field, if the command has one (``"delay_ms"``, ``"rule"``).
    extra: ClassVar[str | None]

    def args(self) -> list[str]:
        """The command's arguments after the key, before the options."""
        ...

    def window_ms(self) -> int | None:
        """The window or refill period in ms, where the algorithm has one."""
        ...


@dataclass(frozen=True, slots=True)
class GCRA:
    """``RL.GCRA key burst rate period``: up to ``burst`` at once, then ``rate`` per ``period``."""

    burst: int
    rate: int
    period: Duration
    local_budget: int | None = None
    hold: Duration | None = None
    command: ClassVar[str] = "RL.GCRA"
    extra: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_budget(self, self.local_budget, self.hold)

    def args(self) -> list[str]:
        return [str(self.burst), str(self.rate), _arg(self.period)]

    def window_ms(self) -> int | None:
        return duration_ms(self.period)


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """``RL.TOKENBUCKET key capacity refill_amount refill_period [INTERVAL]``."""

    capacity: int
    refill_amount: int
    refill_period: Duration
    interval: bool = False
    local_budget: int | None = None
    hold: Duration | None = None
    command: ClassVar[str] = "RL.TOKENBUCKET"
    extra: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_budget(self, self.local_budget, self.hold)

    def args(self) -> list[str]:
        words = [str(self.capacity), str(self.refill_amount), _arg(self.refill_period)]
        return words + ["INTERVAL"] if self.interval else words

    def window_ms(self) -> int | None:
        return duration_ms(self.refill_period)


@dataclass(frozen=True, slots=True)
class LeakyBucket:
    """``RL.LEAKYBUCKET key capacity leak_amount leak_period``; the reply has ``delay_ms``."""

    capacity: int
    leak_amount: int
    leak_period: Duration
    local_budget: int | None = None
    hold: Duration | None = None
    command: ClassVar[str] = "RL.LEAKYBUCKET"
    extra: ClassVar[str | None] = "delay_ms"

    def __post_init__(self) -> None:
        _check_budget(self, self.local_budget, self.hold)

    def args(self) -> list[str]:
        return [str(self.capacity), str(self.leak_amount), _arg(self.leak_period)]

    def window_ms(self) -> int | None:
        return duration_ms(self.leak_period)


@dataclass(frozen=True, slots=True)
class _Window:
    """What the three window commands share: ``COMMAND key limit window``."""

    limit: int
    window: Duration
    local_budget: int | None = None
    hold: Duration | None = None
    command: ClassVar[str]
    extra: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_budget(self, self.local_budget, self.hold)

    def args(self) -> list[str]:
        return [str(self.limit), _arg(self.window)]

    def window_ms(self) -> int | None:
        return duration_ms(self.window)


@dataclass(frozen=True, slots=True)
class FixedWindow(_Window):
    """``RL.FIXEDWINDOW key limit window``: windows aligned to the Unix epoch."""

    command: ClassVar[str] = "RL.FIXEDWINDOW"


@dataclass(frozen=True, slots=True)
class SlidingWindow(_Window):
    """``RL.SLIDINGWINDOW key limit window``: the previous window weighted."""

    command: ClassVar[str] = "RL.SLIDINGWINDOW"


@dataclass(frozen=True, slots=True)
class SlidingLog(_Window):
    """``RL.SLIDINGLOG key limit window``: exact, one entry per admitted request."""

    command: ClassVar[str] = "RL.SLIDINGLOG"


@dataclass(frozen=True, slots=True)
class Warmup:
    """``RL.WARMUP key rate period warmup [COLDFACTOR factor]``: Guava's SmoothWarmingUp. Once
    warm, one request per ``period / rate``; after idle the spacing starts at ``cold_factor``
    times that (2 to 10; None: the module's default, 3) and falls back over ``warmup``. Its
    ``limit`` is 1, and RateLimit-Policy's ``w`` is its stable interval, ``period / rate``
    (left out when not whole seconds)."""

    rate: int
    period: Duration
    warmup: Duration
    cold_factor: int | None = None
    local_budget: int | None = None
    hold: Duration | None = None
    command: ClassVar[str] = "RL.WARMUP"
    extra: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_budget(self, self.local_budget, self.hold)

    def args(self) -> list[str]:
        words = [str(self.rate), _arg(self.period), _arg(self.warmup)]
        return words if self.cold_factor is None else words + ["COLDFACTOR", str(self.cold_factor)]

    def window_ms(self) -> int | None:
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    """``RL.LIMIT key policy``: every rule of a policy, all or nothing.

    ``rules``: the policy's rules in the application's configuration (``GCRA(10, 10, "1s")``,
    ``FixedWindow(300, "1m")``, ``Rule("FIXEDWINDOW", ("3", "1m"), shadow=True)``...). On the
    script backend they are checked by one script over a key per rule (``{key}:0``,
    ``{key}:1``...: the keys share a hash tag); on the module, the limiter sets them as the
    server's policy ``name`` (``RL.POLICY.SET``) before its first check of it. Without rules,
    the policy is the one set on the server, which only the module has.

    Raises:
        ValueError: more than 16 rules, only shadow rules, a rule that is a policy, a
            concurrency limit or has a local budget.
    """

    name: str
    local_budget: int | None = None
    hold: Duration | None = None
    rules: tuple[Any, ...] = ()
    command: ClassVar[str] = "RL.LIMIT"
    extra: ClassVar[str | None] = "rule"
    #: The rules as RL.POLICY.SET takes them (``GCRA 10 10 1s ...``); empty without rules.
    rule_words: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_budget(self, self.local_budget, self.hold)
        if self.rules:
            object.__setattr__(self, "rules", tuple(self.rules))
            if len(self.rules) > 16:
                raise ValueError(f"a policy holds at most 16 rules, not {len(self.rules)}")
            if all(isinstance(r, Rule) and r.shadow for r in self.rules):
                raise ValueError("a policy needs at least one rule without SHADOW")
            object.__setattr__(self, "rule_words", tuple(rule_words(self.rules)))

    def args(self) -> list[str]:
        return [self.name]

    def window_ms(self) -> int | None:
        return None


#: The kinds of adaptive concurrency limit (``ADAPTIVE AIMD|VEGAS|GRADIENT2``), as
#: :class:`Concurrency` takes them: Netflix concurrency-limits' AIMDLimit, VegasLimit and
#: Gradient2Limit.
ADAPTIVE_KINDS = ("aimd", "vegas", "gradient2")


def _bound(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"invalid {name} {value!r}: expected an int of 1 or more")


@dataclass(frozen=True, slots=True)
class Concurrency:
    """``RL.CONCURRENCY.ACQUIRE key limit lease [ADAPTIVE kind [MIN n] [MAX n]]``: at most
    ``limit`` requests in flight, each holding a lease until it is released or ``lease`` has
    passed. The guard and the middleware release the lease when the response is done. It takes
    no ``COST``.

    ``adaptive`` (``"aimd"``, ``"vegas"`` or ``"gradient2"``, any case; kept lower case): the
    key's limit is an estimate that the module moves with each release's latency and whether
    it dropped (Netflix concurrency-limits' algorithms), bounded by ``min`` and ``max`` (the
    module's defaults when None: 20 to 200 for AIMD and GRADIENT2, 1 to 1000 for VEGAS, widened
    to include ``limit``); ``limit`` is only where a new key starts. The guard and the
    middleware then release with the request's measured latency (``RTT``), and ``DROPPED`` on
    a 5xx, an exception, a timeout or a cancellation; a refusal is a 503 (load shedding).

    Raises:
        ValueError: an unknown ``adaptive`` kind; ``min`` or ``max`` not an int of 1 or more,
            given without ``adaptive``, or ``min`` above ``max``.
    """

    limit: int
    lease: Duration
    adaptive: str | None = None
    min: int | None = None
    max: int | None = None
    local_budget: int | None = None
    hold: Duration | None = None
    command: ClassVar[str] = "RL.CONCURRENCY.ACQUIRE"
    extra: ClassVar[str | None] = "token"

    def __post_init__(self) -> None:
        if self.local_budget is not None or self.hold is not None:
            raise ValueError(
                "a concurrency limit has no local budget: a lease is taken and released per request, "
                "and RL.CONCURRENCY.ACQUIRE takes neither ATMOST nor RL.REFUND"
            )
        if self.adaptive is not None:
            kind = self.adaptive.lower() if isinstance(self.adaptive, str) else None
            if kind not in ADAPTIVE_KINDS:
                raise ValueError(
                    f"invalid adaptive {self.adaptive!r}: expected one of {', '.join(map(repr, ADAPTIVE_KINDS))}"
                )
            object.__setattr__(self, "adaptive", kind)
        elif self.min is not None or self.max is not None:
            raise ValueError("min and max bound an adaptive limit: give them with adaptive=")
        _bound("min", self.min)
        _bound("max", self.max)
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")

    def args(self) -> list[str]:
        words = [str(self.limit), _arg(self.lease)]
        if self.adaptive is not None:
            words += ["ADAPTIVE", self.adaptive.upper()]
            if self.min is not None:
                words += ["MIN", str(self.min)]
            if self.max is not None:
                words += ["MAX", str(self.max)]
        return words

    def window_ms(self) -> int | None:
        return None


@dataclass(frozen=True, slots=True)
class RuleKind:
    """A kind of policy rule: an algorithm as RL.POLICY.SET takes it and RL.POLICY.GET shows it,
    its name and then the positional parameters its command takes after the key.

    Attributes:
        name: the command's name without ``RL.``, upper case (``"GCRA"``).
        params: its positional parameters, named as its command's (COMMAND DOCS) are.
        period: the index of the one that is its window or refill period, or None when it has
            none (a warm-up's spacing changes as it warms).
        fields: what the HTTP fields say of it (:func:`field_shape`): ``"spaced"`` (GCRA and
            the buckets), ``"fixed"``, ``"sliding"`` (window or log) or ``"warmup"``.
        flags: the words it may take alone after them (``INTERVAL``).
        options: the options with a value it may take after them (``COLDFACTOR factor``).
    """

    name: str
    params: tuple[str, ...]
    period: int | None
    fields: str
    flags: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


#: Every rule kind of the module (src/args/rules.rs, docs/policies.md), by name. A rule of
#: any other kind in RL.POLICY.GET's reply is an error: the words after it could not be read.
RULE_KINDS: dict[str, RuleKind] = {
    kind.name: kind
    for kind in (
        RuleKind("GCRA", ("burst", "rate", "period"), 2, "spaced"),
        RuleKind("TOKENBUCKET", ("capacity", "refill_amount", "refill_period"), 2, "spaced", flags=("INTERVAL",)),
        RuleKind("LEAKYBUCKET", ("capacity", "leak_amount", "leak_period"), 2, "spaced"),
        RuleKind("FIXEDWINDOW", ("limit", "window"), 1, "fixed"),
        RuleKind("SLIDINGWINDOW", ("limit", "window"), 1, "sliding"),
        RuleKind("SLIDINGLOG", ("limit", "window"), 1, "sliding"),
        RuleKind("WARMUP", ("rate", "period", "warmup"), None, "warmup", options=("COLDFACTOR",)),
    )
}


#: How RateLimit's ``t`` is known for a limit (see :class:`FieldShape`).
More = Union[tuple[str, int, int], str, None]


@dataclass(frozen=True, slots=True)
class FieldShape:
    """What the HTTP fields say of one limit.

    Attributes:
        window_s: RateLimit-Policy's ``w`` in whole seconds, chosen so that q/w is the sustained
            rate: a window's length; for GCRA and the buckets the time to earn the whole burst
            back (burst × period / rate); for a warm-up (``q`` 1) its stable interval, period /
            rate. None when not a whole number of seconds, and for concurrency.
        more: how to know when the reply's ``remaining`` grows (RateLimit's ``t``):
            ``("spaced", period_ms, amount)`` (GCRA and the buckets: one unit each period_ms /
            amount, from the reply alone), ``("interval", period_ms, amount)`` (a token bucket
            with INTERVAL: ``amount`` units at each whole period), ``"reset"`` (a fixed window:
            at its end), ``"probe"`` (sliding window and log, warm-up, policy: the reply does
            not say, a DRYRUN asks) or None (concurrency: a lease comes back when its holder
            gives it).
    """

    window_s: int | None
    more: More


#: The largest integer a Structured Field may carry (RFC 9651: 15 digits).
_SF_INTEGER_MAX = 999_999_999_999_999


def _whole_seconds(num: int, den: int) -> int | None:
    """``num / den`` ms in whole seconds; None when not whole, or past a Structured Field
    integer."""
    seconds, rest = divmod(num, den * 1000)
    return seconds if rest == 0 and seconds <= _SF_INTEGER_MAX else None


def field_shape(kind: str, words: Sequence[str]) -> FieldShape:
    """The :class:`FieldShape` of a limit of ``kind`` (a command's name without ``RL.``, any
    case: ``"GCRA"``, ``"CONCURRENCY.ACQUIRE"``...) given its words after the key (counts and
    durations, then its flags and options), as a limit's ``args()`` or a :class:`Rule` has
    them. Any other kind (concurrency) has neither ``w`` nor ``t`` while admitted."""
    rule_kind = RULE_KINDS.get(kind.upper().removeprefix("RL."))
    if rule_kind is None:
        return FieldShape(None, None)
    # The window or period (a warm-up's period, its second word, for its stable interval).
    ms = duration_ms(words[rule_kind.period if rule_kind.period is not None else 1])
    if ms is None:
        return FieldShape(None, None)
    if rule_kind.fields == "spaced":
        burst, amount = int(words[0]), int(words[1])
        interval = any(w.upper() == "INTERVAL" for w in words[3:])
        return FieldShape(_whole_seconds(burst * ms, amount), ("interval" if interval else "spaced", ms, amount))
    if rule_kind.fields == "warmup":
        return FieldShape(_whole_seconds(ms, int(words[0])), "probe")
    return FieldShape(_whole_seconds(ms, 1), "reset" if rule_kind.fields == "fixed" else "probe")


def more_after_ms(more: More, decision: Decision) -> int | None:
    """The ms (whole, rounded up) until ``decision.remaining`` grows, known from the reply alone
    for a limit of this ``more`` (:class:`FieldShape`); None when it never does (``remaining``
    is the limit) or the reply does not say (``"probe"``, concurrency). GCRA and the buckets give
    one unit each T = period_ms / amount and are fresh after ``reset_after_ms``, so the next unit
    comes (limit - remaining - 1) × T before that; an INTERVAL bucket fills at its k-th refill
    from now, k = ceil((limit - remaining) / amount), and the next refill is (k - 1) periods
    before; a fixed window frees its units at its end."""
    if decision.remaining >= decision.limit or decision.reset_after_ms <= 0:
        return None
    missing = decision.limit - decision.remaining
    if more == "reset":
        return decision.reset_after_ms
    if isinstance(more, tuple):
        how, period, amount = more
        if how == "spaced":
            return max(0, -(-(decision.reset_after_ms * amount - (missing - 1) * period) // amount))
        return max(0, decision.reset_after_ms - (-(-missing // amount) - 1) * period)
    return None


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of a policy, as RL.POLICY.GET shows it.

    Attributes:
        algorithm: upper case, without the ``RL.`` prefix (``"GCRA"``, ``"FIXEDWINDOW"``...).
        args: its arguments, as words (its options and flags after the positional ones).
        shadow: the rule is marked ``SHADOW`` (checked and counted, never denies).
    """

    algorithm: str
    args: tuple[str, ...]
    shadow: bool = False

    def window_ms(self) -> int | None:
        """The rule's window or refill period in ms, when its algorithm has one."""
        kind = RULE_KINDS.get(self.algorithm)
        if kind is None or kind.period is None or kind.period >= len(self.args):
            return None
        return duration_ms(self.args[kind.period])


def rule_words(rules: tuple[Any, ...]) -> list[str]:
    """Rules (limits such as ``GCRA(10, 10, "1s")``, or :class:`Rule`) as RL.POLICY.SET takes them."""
    words: list[str] = []
    for rule in rules:
        if isinstance(rule, Rule):
            words += (["SHADOW"] if rule.shadow else []) + [rule.algorithm, *rule.args]
        elif isinstance(rule, (Policy, Concurrency)):
            raise ValueError("a policy's rule is an algorithm, not a policy or a concurrency limit")
        elif getattr(rule, "local_budget", None) is not None:
            raise ValueError("a policy's rule has no local budget: give local_budget= to Policy(name, ...)")
        else:
            words += [rule.command.removeprefix("RL."), *rule.args()]
    return words


def _unexpected(what: str) -> ValueError:
    return ValueError(f"unexpected rule in RL.POLICY.GET's reply: {what}")


def parse_rules(words: list[str]) -> list[Rule]:
    """Split RL.POLICY.GET's words into rules: each an optional ``SHADOW``, a rule kind of
    :data:`RULE_KINDS` (``RL.`` before it and any case accepted, as RL.POLICY.SET does), its
    positional arguments, then its options and flags.

    Raises:
        ValueError: a rule kind the package does not know (a newer module's), a rule cut
            short, or ``SHADOW`` with no rule after it: the words after it could not be read,
            so no rule's position or window would be sure.
    """
    rules: list[Rule] = []
    i = 0
    while i < len(words):
        shadow = words[i].upper() == "SHADOW"
        if shadow:
            i += 1
            if i == len(words):
                raise _unexpected("nothing after SHADOW")
        word = words[i]
        kind = RULE_KINDS.get(word.upper().removeprefix("RL."))
        if kind is None:
            raise _unexpected(word)
        i += 1
        args = words[i : i + len(kind.params)]
        if len(args) < len(kind.params):
            raise _unexpected(f"{word} with {len(args)} arguments")
        i += len(args)
        seen: set[str] = set()
        while i < len(words) and words[i].upper() not in seen:
            extra = words[i].upper()
            if extra in kind.options:
                if i + 1 == len(words):
                    raise _unexpected(f"{word} with {extra} and no value")
                args += words[i : i + 2]
                i += 2
            elif extra in kind.flags:
                args.append(words[i])
                i += 1
            else:
                break
            seen.add(extra)
        rules.append(Rule(kind.name, tuple(args), shadow))
    return rules
