"""The local budgets of an asyncio limiter: the twin of ``budget.py``'s ``LocalBudgets``, on the
same state and arithmetic (its ``_Core``), whose module doc states the promise and the rule that
keeps it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, Awaitable, Callable

from ..budget import _FAILURES, _Budget, _Core, _Refill, _refused, hold_ms, logger
from ..limit_types import Limit
from ..reply import Decision

__all__ = ["AsyncLocalBudgets"]


class AsyncLocalBudgets:
    """The local budgets of an :class:`~ratelimit_redis_module.AsyncRateLimiter`, on one event
    loop. A refill runs as a task of its own, so that a request cancelled while waiting (a
    guard's timeout) does not lose the units it brings; units past ``hold / 2`` are given
    back by a timer (one per limiter, at the next deadline)."""

    def __init__(self, refund: Callable[[Any, int, Limit], Awaitable[int]], clock: Callable[[], float], stats: Any) -> None:
        self.core = _Core(clock, stats)
        self._refund = refund
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._sweeping: asyncio.Lock | None = None
        self._tasks: set[asyncio.Future[Any]] = set()

    @property
    def held(self) -> int:
        """Units held unspent now, all keys together."""
        return sum(b.held for b in self.core.table.values())

    async def check(self, limit: Limit, key: Any, cost: int, send: Callable[[int], Awaitable[Decision]]) -> Decision:
        """A request of ``cost`` (1 to ``k``) units (see :meth:`LocalBudgets.check`)."""
        core = self.core
        while True:
            b = core.budget(limit, key)
            decision = core.spend(b, cost, core.now())
            if core.due:
                self._soon()
            if decision is not None:
                if decision.allowed:
                    core.stats.local_admitted += 1
                return decision
            refill = b.refill
            mine = refill is None
            if refill is None:
                refill = b.refill = _Refill()
                units = limit.local_budget - b.held  # type: ignore[attr-defined]
                refill.task = asyncio.ensure_future(self._refill(b, refill, units, cost, send, hold_ms(limit) * 1000))
                self._keep(refill.task)
            assert refill.task is not None
            reply, first = await asyncio.shield(refill.task)
            if not reply.granted:
                return _refused(reply, not mine)
            if mine and first is not None:
                return first
            # A waiter, or short after a partial grant: from the budget, or the next refill.

    async def _refill(
        self, b: _Budget, refill: _Refill, units: int, cost: int, send: Callable[[int], Awaitable[Decision]],
        hold_us: int,
    ) -> tuple[Decision, Decision | None]:
        core = self.core
        sent = core.now()
        try:
            reply = await send(units)
        finally:
            if b.refill is refill:
                b.refill = None
        core.stats.refills += 1
        now = core.now()
        core.add(b, reply, sent, now, hold_us)
        self._schedule()
        # The request that asked is served first (the others wait on this task, in order).
        first = core.spend(b, cost, now) if reply.granted else None
        return reply, None if first is None else replace(first, local=False)

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)

        def done(t: asyncio.Future[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled():
                t.exception()  # retrieved: raised to whoever awaited it

        task.add_done_callback(done)

    def _schedule(self) -> None:
        """Set the timer for the next deadline (earlier than the one set, if any)."""
        deadline = self.core.next_deadline()
        if deadline is None:
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.001, (deadline - self.core.now()) / 1_000_000)
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        self._keep(asyncio.ensure_future(self.sweep()))

    def _soon(self) -> None:
        """Units found past their deadline on the request path: give them back now, in a task."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = self.core.now()
        self._timer = asyncio.get_running_loop().call_soon(self._fire)  # type: ignore[assignment]

    async def sweep(self) -> int:
        """Give back now the units held past ``hold / 2`` (see :meth:`LocalBudgets.sweep`)."""
        return await self._give_back(everything=False)

    async def flush(self) -> int:
        """Give back every unit held (all keys); returns the units the module gave back."""
        return await self._give_back(everything=True)

    async def aclose(self) -> int:
        """:meth:`flush`, and stop the timer."""
        given = await self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        return given

    async def _give_back(self, everything: bool) -> int:
        if self._sweeping is None:
            self._sweeping = asyncio.Lock()
        given = 0
        async with self._sweeping:
            refunds = self.core.collect(self.core.now(), everything)
            for key, units, limit in refunds:
                try:
                    got = int(await self._refund(key, units, limit))
                except _FAILURES as error:
                    self.core.stats.refund_failures += units
                    logger.warning("rate limiter: %d units of %r not given back (%s: %s)", units, key,
                                   type(error).__name__, error)
                    continue
                self.core.stats.refunded += got
                given += got
        if not everything:
            self._schedule()
        return given
