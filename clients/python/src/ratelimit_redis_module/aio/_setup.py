"""The setup of an asyncio limiter: the twin of ``_setup.py``'s ``SyncSetup``, whose module doc
says what a setup does, when it is tried again and how long a request waits for it."""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from typing import Awaitable, Callable

from .._setup import FIRST_PAUSE_S, LAST_PAUSE_S, RETRIED, Failed, Succeeded, check_setup_timeout

__all__ = ["AsyncSetup"]


class AsyncSetup:
    """The setup of an asyncio limiter, run by a task on the running event loop while it has
    steps. A limiter made outside a running loop starts it at its first call (:meth:`start`):
    the middleware does at the ASGI lifespan's startup."""

    def __init__(self, timeout_s: float, failed: Failed, succeeded: Succeeded) -> None:
        self.timeout_s = check_setup_timeout(timeout_s)
        self._failed = failed
        self._succeeded = succeeded
        self._steps: list[Callable[[], Awaitable[None]]] = []
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        #: The loop's time when the attempt in progress began; None between attempts.
        self._running_since: float | None = None
        self._ended = 0
        # Bound to a loop at their first use: made again for another loop.
        self._wake = asyncio.Event()
        self._ended_cond = asyncio.Condition()

    @property
    def done(self) -> bool:
        """No step left (or the limiter closed)."""
        return not self._steps or self._closed

    def add(self, step: Callable[[], Awaitable[None]]) -> None:
        """Queue ``step``; it runs now if a loop is running, else at :meth:`start`."""
        self._steps.append(step)
        self.start()
        if self._task is not None and self._running_since is None:
            self._wake.set()  # a pause after a failure cut short

    def start(self) -> None:
        """Run the steps, if there are any, a loop is running and no task does yet."""
        if self.done:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._loop is not loop:  # the first loop, or another one (a task is bound to its loop)
            self._loop = loop
            self._task = None
            self._running_since = None
            self._wake = asyncio.Event()
            self._ended_cond = asyncio.Condition()
        if self._task is None or self._task.done():
            self._running_since = loop.time()  # as SyncSetup._start
            self._task = loop.create_task(AsyncSetup._run(weakref.ref(self)))

    async def wait(self, trigger: bool = True) -> bool:
        """As ``SyncSetup.wait`` (``_setup.py``)."""
        if self.done:
            return True
        self.start()
        if _in_attempt.get():
            return False  # a step of the setup itself: no waiting for itself
        loop = asyncio.get_running_loop()
        cond = self._ended_cond
        async with cond:
            for _ in range(2 if trigger else 1):
                if self.done:
                    return True
                if self._running_since is None:
                    if not trigger:
                        return False
                    self._wake.set()
                    deadline = loop.time() + self.timeout_s
                else:
                    deadline = self._running_since + self.timeout_s
                target = self._ended + 1
                try:
                    await asyncio.wait_for(
                        cond.wait_for(lambda: self.done or self._ended >= target), max(0.0, deadline - loop.time())
                    )
                except TimeoutError:
                    return self.done
        return self.done

    def close(self) -> None:
        """No more attempts: the task is cancelled."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _attempt(self) -> None:
        _in_attempt.set(True)  # in this attempt's own context (wait_for runs it in a task of its own)
        for step in list(self._steps):
            try:
                await step()
            except RETRIED:
                raise
            except Exception as e:  # refused: the requests do it themselves
                self._failed(e, False)
            self._steps.remove(step)

    @staticmethod
    async def _run(ref: weakref.ReferenceType[AsyncSetup]) -> None:
        """The task: attempts until every step has run, holding the setup only during one (see
        ``SyncSetup._run``)."""
        loop = asyncio.get_running_loop()
        pause = FIRST_PAUSE_S
        while True:
            setup = ref()
            if setup is None or setup.done:
                return
            setup._running_since = loop.time()
            setup._wake.clear()
            error: BaseException | None = None
            try:
                # Bounded: a client without a socket timeout would wait for ever on a hung server.
                await asyncio.wait_for(setup._attempt(), setup.timeout_s)
            except RETRIED as e:
                error = e
            if error is None:  # told before the requests waiting for this attempt go on
                setup._succeeded()
            else:
                setup._failed(error, True)
            async with setup._ended_cond:
                setup._running_since = None
                setup._ended += 1
                setup._ended_cond.notify_all()
            if error is None:
                pause = FIRST_PAUSE_S
                continue
            wake = setup._wake
            del setup, error
            try:
                await asyncio.wait_for(wake.wait(), pause)
            except TimeoutError:
                pass
            pause = min(2 * pause, LAST_PAUSE_S)


#: True inside an asyncio attempt: a step that calls the limiter (a guard's policy) is not to wait
#: for the attempt it is part of.
_in_attempt: contextvars.ContextVar[bool] = contextvars.ContextVar("ratelimit_setup_attempt", default=False)
