"""The local memory of denials: a refused request remembered in-process until its
``retry_after``, so that a client that keeps asking is refused without a round trip."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable

from .reply import Decision

__all__ = ["DenialMemory"]


@dataclass(slots=True)
class _Denial:
    until_us: int
    reset_until_us: int
    limit: int
    cost: int
    params: Hashable
    name: str
    window_s: int | None
    #: The reset instant in ms since the Unix epoch, as the denial's reply fixed it (the
    #: guard's ``x_ratelimit_reset="epoch"``), or None.
    reset_at_ms: int | None = None


def _us(seconds: float) -> int:
    """A clock reading in whole microseconds: the memory's arithmetic is integer, so that a
    figure is exact to the ms whatever the clock's magnitude (epoch seconds leave a float no
    room for ms sums)."""
    return round(seconds * 1_000_000)


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


class DenialMemory:
    """Denials remembered in-process until their ``retry_after``, so a client that keeps
    asking is refused without a round trip.

    A remembered denial answers only the same request: the same key, the same cost and the
    same parameters (``params``, compared by equality), and its figure is the module's,
    counted down. A request of another cost or under other parameters goes to Redis: its wait
    is another, and a larger burst may admit it at once. The wait counts from when the request
    was ``sent`` (the server decided after that), so a denial is never remembered past the
    module's own retry time; at most it ends a round trip early, which costs a round trip.

    At most ``max_entries`` entries, one per key: when full, expired entries go first, then
    the oldest. A denial that can never pass (``retry_after_ms == -1``) is not remembered.
    Times come from ``clock`` (seconds, monotonic), counted in whole microseconds. Safe to
    share between threads (a WSGI server's).
    """

    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 0:
            raise ValueError(f"invalid max_entries {max_entries}: expected 0 or more")
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[Hashable, _Denial] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(
        self, key: Hashable, decision: Decision, cost: int, name: str, window_s: int | None, *,
        params: Hashable = None, sent: float | None = None, reset_at_ms: int | None = None,
    ) -> None:
        """Remember a denial of ``key`` (a refused ``decision`` for ``cost`` units under the
        parameters ``params``), replacing what the key had; ``sent`` is the clock's reading
        when the request was sent (default: now); ``reset_at_ms``, the reset instant on the wall
        clock (ms since the epoch) to answer with, unchanged, while it is remembered."""
        if decision.allowed or decision.retry_after_ms < 0 or self.max_entries == 0:
            return
        with self._lock:
            now = _us(self.clock())
            start = now if sent is None else min(now, _us(sent))
            until = start + decision.retry_after_ms * 1000
            self._entries.pop(key, None)
            if until <= now:
                return
            entry = _Denial(
                until, start + decision.reset_after_ms * 1000, decision.limit, cost, params, name, window_s,
                reset_at_ms,
            )
            # Insertion order is roughly expiry order: expired entries at the front go first,
            # then, while still full, the oldest. O(1) per call, amortised.
            while self._entries and next(iter(self._entries.values())).until_us <= now:
                self._entries.popitem(last=False)
            while len(self._entries) >= self.max_entries:
                self._entries.popitem(last=False)
            self._entries[key] = entry

    def recall(self, key: Hashable, cost: int, params: Hashable = None) -> tuple[Decision, str, int | None] | None:
        """The remembered denial of ``key``, recomputed for now, if it is one of ``cost`` units
        under ``params`` and its retry time has not come: the decision, with ``remaining`` 0
        and the times left rounded up to whole ms, the limit's name and its window."""
        found = self._recall(key, cost, params)
        return None if found is None else found[:3]

    def _recall(
        self, key: Hashable, cost: int, params: Hashable = None,
    ) -> tuple[Decision, str, int | None, int | None] | None:
        """As :meth:`recall`, and the reset instant remembered with the denial (``reset_at_ms``)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = _us(self.clock())
        if entry.until_us <= now:
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            return None
        if cost != entry.cost or params != entry.params:
            return None
        retry_ms = _ceil_ms(entry.until_us - now)
        reset_ms = max(retry_ms, _ceil_ms(entry.reset_until_us - now))
        return Decision(False, entry.limit, 0, retry_ms, reset_ms), entry.name, entry.window_s, entry.reset_at_ms

    def forget(self, key: Hashable) -> None:
        """Forget the denial remembered for ``key``, if any (the key was written since: an
        admission changes every wait)."""
        if key in self._entries:
            with self._lock:
                self._entries.pop(key, None)
