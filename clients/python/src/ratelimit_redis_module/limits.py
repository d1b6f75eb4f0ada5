"""What to limit by: one algorithm's parameters, or the name of a policy (RL.LIMIT)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Protocol, Union

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
    "Rule",
    "RuleKind",
    "RULE_KINDS",
    "duration_ms",
    "parse_rules",
]

#: A duration as the module takes it: an ``int`` of milliseconds, a string with an optional
#: unit (``"1500"``, ``"1500ms"``, ``"90s"``, ``"1m"``, ``"24h"``, ``"1d"``), or a
#: :class:`datetime.timedelta` of whole milliseconds.
Duration = Union[int, str, timedelta]

_UNITS = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([1-9][0-9]*)(ms|s|m|h|d)?", re.IGNORECASE)


def duration_ms(value: Duration) -> int | None:
    """The duration in milliseconds, or None when it is not one the module would accept."""
    if isinstance(value, timedelta):
        ms, rest = divmod(value, timedelta(milliseconds=1))
        return int(ms) if not rest and ms > 0 else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    match = _DURATION.fullmatch(value)
    if not match:
        return None
    return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def _arg(value: Duration) -> str:
    """A duration as a command argument (timedelta as milliseconds)."""
    if isinstance(value, timedelta):
        ms = duration_ms(value)
        if ms is None:
            raise ValueError(f"invalid duration {value!r}: expected a positive whole number of milliseconds")
        return str(ms)
    return str(value)


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
    command: ClassVar[str] = "RL.GCRA"
    extra: ClassVar[str | None] = None

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
    command: ClassVar[str] = "RL.TOKENBUCKET"
    extra: ClassVar[str | None] = None

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
    command: ClassVar[str] = "RL.LEAKYBUCKET"
    extra: ClassVar[str | None] = "delay_ms"

    def args(self) -> list[str]:
        return [str(self.capacity), str(self.leak_amount), _arg(self.leak_period)]

    def window_ms(self) -> int | None:
        return duration_ms(self.leak_period)


@dataclass(frozen=True, slots=True)
class _Window:
    """What the three window commands share: ``COMMAND key limit window``."""

    limit: int
    window: Duration
    command: ClassVar[str]
    extra: ClassVar[str | None] = None

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
    ``limit`` is 1, and it has no fixed window (RateLimit-Policy has no ``w``)."""

    rate: int
    period: Duration
    warmup: Duration
    cold_factor: int | None = None
    command: ClassVar[str] = "RL.WARMUP"
    extra: ClassVar[str | None] = None

    def args(self) -> list[str]:
        words = [str(self.rate), _arg(self.period), _arg(self.warmup)]
        return words if self.cold_factor is None else words + ["COLDFACTOR", str(self.cold_factor)]

    def window_ms(self) -> int | None:
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    """``RL.LIMIT key policy``: every rule of a policy set with RL.POLICY.SET, all or nothing."""

    name: str
    command: ClassVar[str] = "RL.LIMIT"
    extra: ClassVar[str | None] = "rule"

    def args(self) -> list[str]:
        return [self.name]

    def window_ms(self) -> int | None:
        return None


@dataclass(frozen=True, slots=True)
class Concurrency:
    """``RL.CONCURRENCY.ACQUIRE key limit lease``: at most ``limit`` requests in flight, each
    holding a lease until it is released or ``lease`` has passed. The guard and the middleware
    release the lease when the response is done. It takes no ``COST``."""

    limit: int
    lease: Duration
    command: ClassVar[str] = "RL.CONCURRENCY.ACQUIRE"
    extra: ClassVar[str | None] = "token"

    def args(self) -> list[str]:
        return [str(self.limit), _arg(self.lease)]

    def window_ms(self) -> int | None:
        return None


@dataclass(frozen=True, slots=True)
class RuleKind:
    """A kind of policy rule: an algorithm as RL.POLICY.SET takes it and RL.POLICY.GET shows it,
    its name and then the positional parameters its command takes after the key.

    Attributes:
        name: the command's name without ``RL.``, upper case (``"GCRA"``).
        params: its positional parameters, named as its command's (COMMAND DOCS) are.
        period: the index of the one that is its window or refill period (RateLimit-Policy's
            ``w``), or None when it has none (a warm-up's spacing changes as it warms).
        flags: the words it may take alone after them (``INTERVAL``).
        options: the options with a value it may take after them (``COLDFACTOR factor``).
    """

    name: str
    params: tuple[str, ...]
    period: int | None
    flags: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


#: Every rule kind of the module (src/args/rules.rs, docs/policies.md), by name. A rule of
#: any other kind in RL.POLICY.GET's reply is an error: the words after it could not be read.
RULE_KINDS: dict[str, RuleKind] = {
    kind.name: kind
    for kind in (
        RuleKind("GCRA", ("burst", "rate", "period"), 2),
        RuleKind("TOKENBUCKET", ("capacity", "refill_amount", "refill_period"), 2, flags=("INTERVAL",)),
        RuleKind("LEAKYBUCKET", ("capacity", "leak_amount", "leak_period"), 2),
        RuleKind("FIXEDWINDOW", ("limit", "window"), 1),
        RuleKind("SLIDINGWINDOW", ("limit", "window"), 1),
        RuleKind("SLIDINGLOG", ("limit", "window"), 1),
        RuleKind("WARMUP", ("rate", "period", "warmup"), None, options=("COLDFACTOR",)),
    )
}


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
