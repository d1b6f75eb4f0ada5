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
    "Policy",
    "Concurrency",
    "Rule",
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
class Rule:
    """One rule of a policy, as RL.POLICY.GET shows it.

    Attributes:
        algorithm: upper case, without the ``RL.`` prefix (``"GCRA"``, ``"FIXEDWINDOW"``...).
        args: its arguments, as words.
        shadow: the rule is marked ``SHADOW`` (checked and counted, never denies).
    """

    algorithm: str
    args: tuple[str, ...]
    shadow: bool = False

    def window_ms(self) -> int | None:
        """The rule's window or refill period in ms, when its algorithm has one."""
        index = _PERIOD_ARG.get(self.algorithm)
        if index is None or index >= len(self.args):
            return None
        return duration_ms(self.args[index])


# How many arguments each rule takes (a token bucket may add INTERVAL), and which is its period.
_ARITY = {"GCRA": 3, "TOKENBUCKET": 3, "LEAKYBUCKET": 3, "FIXEDWINDOW": 2, "SLIDINGWINDOW": 2, "SLIDINGLOG": 2}
_PERIOD_ARG = {"GCRA": 2, "TOKENBUCKET": 2, "LEAKYBUCKET": 2, "FIXEDWINDOW": 1, "SLIDINGWINDOW": 1, "SLIDINGLOG": 1}


def parse_rules(words: list[str]) -> list[Rule]:
    """Split RL.POLICY.GET's words into rules.

    An algorithm this package does not know takes the words up to the next one it knows (its
    window is then unknown), so a newer module's rules still count in the right positions.
    """
    rules: list[Rule] = []
    i, shadow = 0, False
    while i < len(words):
        word = words[i].upper()
        i += 1
        if word == "SHADOW":
            shadow = True
            continue
        arity = _ARITY.get(word)
        if arity is None:
            start = i
            while i < len(words) and words[i].upper() not in _ARITY and words[i].upper() != "SHADOW":
                i += 1
            rules.append(Rule(word, tuple(words[start:i]), shadow))
        else:
            args = words[i : i + arity]
            i += arity
            if word == "TOKENBUCKET" and i < len(words) and words[i].upper() == "INTERVAL":
                args.append(words[i])
                i += 1
            rules.append(Rule(word, tuple(args), shadow))
        shadow = False
    return rules
