"""Local budgets (``local_budget=k`` on a limit): units taken from the module ``k`` at a time
with ``ATMOST``, handed out in-process, and given back with ``RL.REFUND`` when unspent after
``hold / 2`` (and at shutdown).

The promise: over any interval, all instances together admit at most what the limit admits
over that interval lengthened by ``hold``; each instance holds at most ``k`` units unspent per
key; a request costs a round trip only when its key's budget is empty.

The rule that keeps it, for every algorithm and a policy: a refill's units are stamped with
``sent`` (this clock, read before the command left) and may be spent until ``sent + hold / 2``;
what is left then is given back with ``RL.REFUND``. A fixed window whose end comes within the
whole hold (``reset_after_ms <= hold``) is the exception: its units may be spent until the
window ends and lapse there (dropped, counted in ``expired``, nothing given back: a refund
would land in the next window); a window ending later is refunded at ``hold / 2`` like the rest,
so the refund has at least ``hold / 2`` to arrive before the window ends. The rule is
:func:`falls_due`, held to the one the algorithms crate checks the promise with
(``falls_due`` in algorithms/src/budget_promise.rs) by clients/lua/conformance/budget.json,
which tests/test_budget_rule.py reads (docs/clients.md, Local budgets).

Why half: a refund gives back the newest units the key counts, which may be another
instance's, so the units left counted can be older than the ones spent by as long as the
refunded ones were held. The time a unit may wait to be spent and the time until its refund add
up, and together they must fit in ``hold``. For a sliding log that is tight (with the whole
``hold`` for each, four instances admit 11 of 10: algorithms/src/budget_promise.rs); a sliding
window also takes the newest units back, and a policy may have either rule. GCRA and the
buckets keep one number of state, so whose units come back matters less to them; they get
the same rule (one rule for all, and then a refund up to ``hold / 2`` late costs them nothing).
A refund that reaches Redis ``x`` late lengthens the promise's interval by ``x`` for a sliding
window or log (or a policy with one).

One refill per key is in flight at a time: the requests that find the budget empty meanwhile
wait for it and are served from it in arrival order (asyncio; threads in the order the lock
gives them). The refill asks ``ATMOST k - held`` (so no more than ``k`` units are ever held);
a request still short after a refill that granted something starts the next one, which a key
that has nothing left refuses, with the module's wait for one unit. A refill that grants
nothing is remembered until its retry time (not a policy's, as the denial memory does not),
and refuses every request of the key meanwhile without a round trip. A request of a cost above
``k`` (or of cost 0), and calls with ``at_most``, ``dryrun`` or ``shadow``, go to the server as
they are.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable

import redis

from .limit_types import FixedWindow, Limit, Policy, Warmup, duration_ms
from .reply import Decision

__all__ = ["BudgetStats", "LocalBudgets", "hold_ms", "MIN_HOLD_MS", "POLICY_PERIOD_MS"]

logger = logging.getLogger("ratelimit_redis_module")

#: The shortest default hold, in ms.
MIN_HOLD_MS = 10
#: The period a policy's default hold is a quarter of (its rules' periods are not read).
POLICY_PERIOD_MS = 1000

_FAILURES = (redis.RedisError, OSError, asyncio.TimeoutError, ValueError)


def hold_ms(limit: Limit) -> int:
    """The ``hold`` of ``limit``'s local budget, in ms (its units are spent within
    ``hold / 2`` of their refill or given back then; see the module's doc): its ``hold`` when
    given, else a quarter of its period or window (GCRA and the buckets: the period; the
    windows and the log: the window; a warm-up: its period; a policy: 1 s), at least 10 ms."""
    given = getattr(limit, "hold", None)
    if given is not None:
        ms = duration_ms(given)
        assert ms is not None  # checked when the limit was made
        return ms
    if isinstance(limit, Policy):
        period = POLICY_PERIOD_MS
    elif isinstance(limit, Warmup):
        period = duration_ms(limit.period) or POLICY_PERIOD_MS
    else:
        period = limit.window_ms() or POLICY_PERIOD_MS
    return max(MIN_HOLD_MS, period // 4)


@dataclass
class BudgetStats:
    """What the local budgets did (the guards' :class:`~ratelimit_redis_module.Stats` has the
    same fields).

    Attributes:
        local_admitted: requests admitted from a local budget without a round trip of their own.
        refills: ``ATMOST`` commands sent to fill a budget.
        refunded: units given back with ``RL.REFUND`` (the module's count: ``hold / 2`` after
            their refill, or at shutdown).
        refund_failures: units that could not be given back (Redis failed): lost to the limit
            until the algorithm frees them by itself.
        expired: units of a fixed window dropped at its end, unspent (when the window ends
            within ``hold`` of their refill: a refund after it would count for the next window).
        held: units held unspent now, all keys together (a gauge): at most ``k`` per key; the
            limit admits this many fewer elsewhere until they are spent or given back.
        backend: the limiter's backend, ``"module"`` or ``"script"``; None until
            ``backend="auto"`` has asked the server (the limiter's setup, from its creation).
        setup_failures: steps of the limiter's setup that failed (each attempt while the
            server does not answer; see :class:`~ratelimit_redis_module.RateLimiter`).
    """

    local_admitted: int = 0
    refills: int = 0
    refunded: int = 0
    refund_failures: int = 0
    expired: int = 0
    held: int = 0
    backend: str | None = None
    setup_failures: int = 0


class _Refill:
    __slots__ = ("event", "task", "reply", "error")

    def __init__(self) -> None:
        self.event: threading.Event | None = None
        self.task: asyncio.Future[tuple[Decision, Decision | None]] | None = None
        self.reply: Decision | None = None
        self.error: BaseException | None = None


class _Budget:
    """One key's budget under one limit."""

    __slots__ = ("bkey", "limit", "key", "batches", "held", "last", "last_us", "denial", "denied_until",
                 "refill", "due")

    def __init__(self, bkey: Hashable, limit: Limit, key: Any) -> None:
        self.bkey = bkey
        self.limit = limit
        self.key = key
        #: [deadline_us, units, lapses]: units taken together, oldest first, spendable until
        #: ``deadline_us`` (exclusive); ``lapses``: the deadline is a fixed window's end, where
        #: they are dropped rather than given back.
        self.batches: deque[list[Any]] = deque()
        self.held = 0
        self.last: Decision | None = None
        self.last_us = 0
        self.denial: Decision | None = None
        self.denied_until = 0
        self.refill: _Refill | None = None
        self.due = 0


def falls_due(limit: Limit, sent_us: int, hold_us: int, reset_after_ms: int) -> tuple[int, bool]:
    """The rule (see the module's doc): when the units of a refill of ``limit`` sent at
    ``sent_us``, under a hold of ``hold_us``, whose reply says ``reset_after_ms``, fall due (µs:
    spent before it), and whether they lapse then (a fixed window ending within the whole
    hold) or are given back then."""
    window_end = sent_us + reset_after_ms * 1000
    if isinstance(limit, FixedWindow) and window_end <= sent_us + hold_us:
        return window_end, True
    return sent_us + hold_us // 2, False


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


class _Core:
    """The budgets' state and arithmetic, without I/O; times in whole microseconds of
    ``clock``."""

    def __init__(self, clock: Callable[[], float], stats: Any) -> None:
        self.clock = clock
        self.stats = stats
        self.table: dict[Hashable, _Budget] = {}
        self.heap: list[tuple[int, int, Hashable]] = []
        self.seq = itertools.count()
        self.due: set[Hashable] = set()

    def now(self) -> int:
        return round(self.clock() * 1_000_000)

    def budget(self, limit: Limit, key: Any) -> _Budget:
        bkey = (limit, key)
        b = self.table.get(bkey)
        if b is None:
            b = self.table[bkey] = _Budget(bkey, limit, key)
        return b

    def expire(self, b: _Budget, now: int, everything: bool = False) -> None:
        """Batches past their deadline (``everything``: all) leave the budget: due to be given
        back, or dropped when their window has ended (at shutdown too: a refund then would
        count for the next window)."""
        while b.batches and (everything or b.batches[0][0] <= now):
            deadline, units, lapses = b.batches.popleft()
            b.held -= units
            self.stats.held -= units
            if lapses and deadline <= now:
                self.stats.expired += units
            else:
                b.due += units
                self.due.add(b.bkey)

    def spend(self, b: _Budget, cost: int, now: int) -> Decision | None:
        """A decision from the budget alone (local), or None when a refill is needed."""
        self.expire(b, now)
        if b.denial is not None:
            if now < b.denied_until:
                d = b.denial
                elapsed = _ceil_ms(now - b.last_us) if now > b.last_us else 0
                retry = _ceil_ms(b.denied_until - now)
                return replace(
                    d, remaining=0, retry_after_ms=retry, reset_after_ms=max(retry, d.reset_after_ms - elapsed),
                    granted=None, local=True,
                )
            b.denial = None
        if b.last is None or b.held < cost:
            return None
        left = cost
        while left:
            batch = b.batches[0]
            taken = min(left, batch[1])
            batch[1] -= taken
            left -= taken
            if batch[1] == 0:
                b.batches.popleft()
        b.held -= cost
        self.stats.held -= cost
        last = b.last
        elapsed = (now - b.last_us) // 1000 if now > b.last_us else 0
        return Decision(
            True, last.limit, b.held + last.remaining, 0, max(0, last.reset_after_ms - elapsed),
            delay_ms=None if last.delay_ms is None else max(0, last.delay_ms - elapsed),
            rule=last.rule, local=True,
        )

    def add(self, b: _Budget, reply: Decision, sent: int, now: int, hold_us: int) -> None:
        """A refill's reply: its granted units join the budget, stamped with ``sent`` (the
        clock before the command left: their deadline is never late). They may be spent until
        ``sent + hold / 2`` and are given back then; a fixed window's, when the window ends
        within the whole hold, until its end, where they lapse."""
        b.last, b.last_us = reply, now
        granted = reply.granted or 0
        if granted > 0:
            deadline, lapses = falls_due(b.limit, sent, hold_us, reply.reset_after_ms)
            b.batches.append([deadline, granted, lapses])
            b.held += granted
            self.stats.held += granted
            b.denial = None
            heapq.heappush(self.heap, (deadline, next(self.seq), b.bkey))
        elif not reply.allowed and reply.retry_after_ms >= 0 and not isinstance(b.limit, Policy):
            # Remembered as the denial memory does (not a policy's: its rules change unseen).
            b.denial, b.denied_until = reply, sent + reply.retry_after_ms * 1000

    def next_deadline(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def collect(self, now: int, everything: bool = False) -> list[tuple[Any, int, Limit]]:
        """The refunds due now (or, ``everything``, all units held): (key, units, limit) each."""
        if everything:
            self.heap.clear()
            for b in self.table.values():
                self.expire(b, now, everything=True)
        while self.heap and self.heap[0][0] <= now:
            _, _, bkey = heapq.heappop(self.heap)
            held = self.table.get(bkey)
            if held is not None:
                self.expire(held, now)
        refunds = []
        for bkey in self.due:
            held = self.table.get(bkey)
            if held is not None and held.due:
                refunds.append((held.key, held.due, held.limit))
                held.due = 0
        self.due.clear()
        for bkey in [k for k, b in self.table.items() if self.idle(b, now)]:
            del self.table[bkey]
        return refunds

    @staticmethod
    def idle(b: _Budget, now: int) -> bool:
        return not b.held and not b.due and b.refill is None and (b.denial is None or b.denied_until <= now)


def _refused(reply: Decision, local: bool) -> Decision:
    return replace(reply, granted=None, local=local)


class LocalBudgets:
    """The local budgets of a synchronous :class:`~ratelimit_redis_module.RateLimiter`: safe to
    share between threads. Units past ``hold / 2`` are given back by a sweeper thread (a
    daemon, started at the first refill, one per limiter, waking at the next deadline)."""

    def __init__(self, refund: Callable[[Any, int, Limit], int], clock: Callable[[], float], stats: Any) -> None:
        self.core = _Core(clock, stats)
        self._refund = refund
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._sweeping = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def held(self) -> int:
        """Units held unspent now, all keys together."""
        return sum(b.held for b in list(self.core.table.values()))

    def check(self, limit: Limit, key: Any, cost: int, send: Callable[[int], Decision]) -> Decision:
        """A request of ``cost`` (1 to ``k``) units: from the budget, or after a refill
        (``send(n)`` runs the limit's command with ``ATMOST n``)."""
        core = self.core
        while True:
            with self._lock:
                b = core.budget(limit, key)
                decision = core.spend(b, cost, core.now())
                if core.due:
                    self._start()
                if decision is not None:
                    if decision.allowed:
                        core.stats.local_admitted += 1
                    return decision
                refill = b.refill
                mine = refill is None
                if refill is None:
                    refill = b.refill = _Refill()
                    refill.event = threading.Event()
                    units = limit.local_budget - b.held  # type: ignore[attr-defined]
            assert refill.event is not None
            if not mine:
                refill.event.wait()
                if refill.error is not None:
                    raise refill.error
                assert refill.reply is not None
                if not refill.reply.granted:
                    return _refused(refill.reply, True)
                continue
            sent = core.now()
            try:
                reply = send(units)
            except BaseException as error:
                with self._lock:
                    b.refill = None
                refill.error = error
                refill.event.set()
                raise
            with self._lock:
                b.refill = None
                core.stats.refills += 1
                now = core.now()
                core.add(b, reply, sent, now, hold_ms(limit) * 1000)
                self._start()
                decision = core.spend(b, cost, now) if reply.granted else None
            refill.reply = reply
            refill.event.set()
            if not reply.granted:
                return _refused(reply, False)
            if decision is not None:
                return replace(decision, local=False)
            # Short after a partial grant: the next refill (which a drained key refuses).

    def _start(self) -> None:
        """Under the lock: make sure the sweeper runs, and wake it (a new deadline, or units due)."""
        if self._closed:
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="ratelimit-local-budget", daemon=True)
            self._thread.start()
        self._wake.notify()

    def _run(self) -> None:
        core = self.core
        while True:
            with self._lock:
                if self._closed:
                    return
                if not core.due:
                    deadline = core.next_deadline()
                    if deadline is None:
                        self._wake.wait()
                        continue
                    wait = (deadline - core.now()) / 1_000_000
                    if wait > 0:
                        self._wake.wait(max(wait, 0.005))
                        continue
            self.sweep()

    def sweep(self) -> int:
        """Give back now the units held past ``hold / 2``; returns the units the module gave
        back. The sweeper does it by itself; tests on a fake clock call it."""
        return self._give_back(everything=False)

    def flush(self) -> int:
        """Give back every unit held (all keys); returns the units the module gave back."""
        return self._give_back(everything=True)

    def close(self) -> int:
        """:meth:`flush`, and stop the sweeper."""
        given = self.flush()
        with self._lock:
            self._closed = True
            self._wake.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        with self._lock:
            self._closed = False
            self._thread = None
        return given

    def _give_back(self, everything: bool) -> int:
        given = 0
        with self._sweeping:
            with self._lock:
                refunds = self.core.collect(self.core.now(), everything)
            for key, units, limit in refunds:
                try:
                    got = int(self._refund(key, units, limit))
                except _FAILURES as error:
                    self.core.stats.refund_failures += units
                    logger.warning("rate limiter: %d units of %r not given back (%s: %s)", units, key,
                                   type(error).__name__, error)
                    continue
                self.core.stats.refunded += got
                given += got
        return given
