"""A limiter's setup: what its first request would otherwise do inside its timeout,
done in the background when the limiter is created: the backend (``COMMAND INFO RL.GCRA`` for
``backend="auto"``), the scripts (``SCRIPT LOAD``, on the script backend), and what its guards
add (a policy's rules: ``RL.POLICY.GET``, or ``RL.POLICY.SET`` of the application's).

A setup is a list of steps, run in order by a thread (:class:`SyncSetup`, for a synchronous
redis-py client) or an asyncio task (its twin ``AsyncSetup``, in ``aio/_setup.py``), each step
dropped once it has run. An attempt that fails because the server did not answer (down, hung, a
connection lost: the client's own timeouts apply) is tried again after a pause that doubles from
50 ms to 5 s; a step that fails otherwise (the server refused it: NOPERM...) is dropped, and the
requests do what it would have done themselves. Either way the failure is logged and counted by
the limiter.

A request waits for the setup only through :meth:`SyncSetup.wait` (the guards, before their own
timeout starts): for the attempt in progress, or for one started at once if none is (a failed
setup waiting to be tried again), for at most ``timeout_s`` after that attempt began, and if that
attempt fails, for one more made at once; then it goes on whatever the outcome, asking what it
still needs itself, as a request did before setups ran, within its own timeout. While the server is down each
attempt fails at once (a refused connection), so a request waits for two refusals, not for
``timeout_s``. The limiter's own calls only wait for an attempt in progress (``trigger=False``).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Callable

import redis

__all__ = ["SETUP_TIMEOUT_S", "RETRIED", "SyncSetup", "check_setup_timeout"]

#: The default ``setup_timeout``: how long a request waits for a setup attempt (and how long an
#: asyncio attempt may take before it counts as failed), in seconds.
SETUP_TIMEOUT_S = 1.0
#: The pause before the second attempt; it doubles after each failure, up to the last.
FIRST_PAUSE_S = 0.05
LAST_PAUSE_S = 5.0

#: The errors after which an attempt is made again: the server did not answer in time, or
#: refused the connection (redis-py's ConnectionError and TimeoutError, and what the socket or
#: asyncio raise: TimeoutError is an OSError).
RETRIED = (redis.ConnectionError, redis.TimeoutError, OSError)

#: What a limiter hears of its setup: ``failed(error, retried)`` after each failed step (``retried``:
#: its attempt is made again), ``succeeded()`` after an attempt that ran every step.
Failed = Callable[[BaseException, bool], None]
Succeeded = Callable[[], None]


def check_setup_timeout(seconds: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
        raise ValueError(f"invalid setup_timeout {seconds!r}: expected a positive number of seconds")
    return float(seconds)


class SyncSetup:
    """The setup of a synchronous limiter, run by a daemon thread while it has steps."""

    def __init__(self, timeout_s: float, failed: Failed, succeeded: Succeeded) -> None:
        self.timeout_s = check_setup_timeout(timeout_s)
        self._failed = failed
        self._succeeded = succeeded
        self._steps: list[Callable[[], None]] = []
        self._closed = False
        self._reset()
        _sync_setups.add(self)

    def _reset(self) -> None:
        """Fresh locks and no thread: at creation, and in a child process after fork() (the
        parent's thread is not there, and a lock it held would stay held)."""
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: The clock's reading when the attempt in progress began; None between attempts.
        self._running_since: float | None = None
        self._ended = 0

    @property
    def done(self) -> bool:
        """No step left (or the limiter closed)."""
        return not self._steps or self._closed

    def add(self, step: Callable[[], None]) -> None:
        """Queue ``step`` and have it run now (a pause after a failure is cut short)."""
        with self._cond:
            self._steps.append(step)
            self._start()
            self._wake.set()

    def _start(self) -> None:
        """Under the lock: a thread to run the steps, if none is running."""
        if self._closed or not self._steps:
            return
        if self._thread is None or not self._thread.is_alive():
            # Its first attempt counts as begun now: a call made before the thread runs waits
            # for it instead of asking the same questions beside it.
            self._running_since = time.monotonic()
            self._thread = threading.Thread(
                target=SyncSetup._run, args=(weakref.ref(self),), name="ratelimit-setup", daemon=True
            )
            self._thread.start()

    def wait(self, trigger: bool = True) -> bool:
        """Wait for the attempt in progress, or (``trigger``) for one made at once if none is,
        for at most ``timeout_s`` after it began; with ``trigger``, when that attempt fails, for
        one more made at once (an attempt a request finds under way may have begun long before
        it, and failed by a timeout of its own). True when the setup is done."""
        if self.done:
            return True
        if threading.current_thread() is self._thread:
            return False  # a step of the setup itself (a guard's, asking the limiter): no waiting for itself
        with self._cond:
            for _ in range(2 if trigger else 1):
                if self.done:
                    return True
                if self._running_since is None:
                    if not trigger:
                        return False
                    self._start()
                    self._wake.set()
                    deadline = time.monotonic() + self.timeout_s
                else:
                    deadline = self._running_since + self.timeout_s
                target = self._ended + 1
                while not self.done and self._ended < target:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return self.done
                    self._cond.wait(left)
            return self.done

    def close(self) -> None:
        """No more attempts; a thread running one ends after it."""
        with self._cond:
            self._closed = True
            self._wake.set()
            self._cond.notify_all()

    def _attempt(self) -> BaseException | None:
        """Run the steps, each dropped once it has run (or the server refused it); the error
        that stopped them, to be tried again, or None."""
        with self._cond:
            steps = list(self._steps)
        for step in steps:
            try:
                step()
            except RETRIED as e:
                return e
            except Exception as e:  # refused: the requests do it themselves
                self._failed(e, False)
            with self._cond:
                self._steps.remove(step)
        return None

    @staticmethod
    def _run(ref: weakref.ReferenceType[SyncSetup]) -> None:
        """The thread: attempts until every step has run. It holds the setup only during an
        attempt: a limiter the application lets go (its setup with it) ends its retries."""
        pause = FIRST_PAUSE_S
        while True:
            setup = ref()
            if setup is None:
                return
            with setup._cond:
                if setup.done:
                    setup._thread = None
                    return
                setup._running_since = time.monotonic()
                setup._wake.clear()
            error = setup._attempt()
            # Told (counted, logged) before the requests waiting for this attempt go on.
            if error is None:
                setup._succeeded()
            else:
                setup._failed(error, True)
            with setup._cond:
                setup._running_since = None
                setup._ended += 1
                setup._cond.notify_all()
            if error is None:
                pause = FIRST_PAUSE_S
                continue
            wake = setup._wake
            del setup, error
            wake.wait(pause)  # cut short by a request that wants it now, or a new step
            pause = min(2 * pause, LAST_PAUSE_S)


# Every SyncSetup, so that a child process made by fork() (a pre-forking server that loaded the
# application first) gets fresh locks and runs what is left in a thread of its own.
_sync_setups: weakref.WeakSet[SyncSetup] = weakref.WeakSet()


def _after_fork() -> None:
    for setup in list(_sync_setups):
        setup._reset()


os.register_at_fork(after_in_child=_after_fork)
