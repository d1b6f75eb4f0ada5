"""The asyncio guard, what the ASGI middleware uses: the twin of ``guard.py``'s ``Guard``, on
what that module has for both (the verdict, the denial memory, failing open or closed)."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from .._setup import SETUP_TIMEOUT_S
from ..client import Rtt, _is_cluster
from ..fields import XRateLimitReset
from ..guard import _FAILURES, InFlight, Verdict, _GuardBase, _Setup, logger
from ..limit_types import Limit
from ..reply import Decision
from ..stats import Stats
from .client import AsyncRateLimiter, async_client_from_url

__all__ = ["AsyncGuard"]

# Releases under way after their request was cancelled (asyncio keeps only weak references to
# tasks): a cancelled request still gives its lease back.
_releasing: set[asyncio.Future[None]] = set()


class AsyncGuard(_GuardBase):
    """A limit applied to requests, on an asyncio redis-py client; what the ASGI middleware
    uses. The arguments are :class:`~ratelimit_redis_module.Guard`'s, and:

    Args:
        client: a :class:`redis.asyncio.Redis` or :class:`redis.asyncio.cluster.RedisCluster`,
            best made with :func:`~ratelimit_redis_module.async_client_from_url` (a URL here
            makes one, with ``timeout``): with redis-py's default client, every check pays
            the whole ``timeout`` while Redis refuses connections. Or an
            :class:`~ratelimit_redis_module.AsyncRateLimiter` to share.
        timeout: seconds Redis has to answer a check (default 0.05); past it the request
            fails open or closed. With ``durable``, the replicas' acknowledgement is part of
            the check: give ``timeout`` room for ``durable_timeout_ms``. A check that comes
            while the setup runs waits for it first (``setup_timeout``), outside ``timeout``.

    The setup runs in a task, from the guard's creation inside a running event loop, else from
    its first check (the middleware starts it at the ASGI lifespan's startup).
    """

    def __init__(
        self,
        client: Any,
        limit: Limit,
        *,
        name: str | None = None,
        prefix: str = "rl:http:",
        timeout: float = 0.05,
        fail_open: bool = True,
        max_remembered: int = 10_000,
        stats: Stats | None = None,
        clock: Callable[[], float] = time.monotonic,
        durable: int = 0,
        durable_timeout_ms: int = 100,
        backend: str = "auto",
        setup_timeout: float = SETUP_TIMEOUT_S,
        x_ratelimit_reset: XRateLimitReset = "delta",
    ) -> None:
        super().__init__(
            limit, name=name, prefix=prefix, fail_open=fail_open, max_remembered=max_remembered,
            stats=stats, clock=clock, durable=durable, durable_timeout_ms=durable_timeout_ms,
            x_ratelimit_reset=x_ratelimit_reset,
        )
        if isinstance(client, AsyncRateLimiter):  # shared with another guard (a route's own limit)
            self.limiter = client
        else:
            if isinstance(client, str):
                client = async_client_from_url(client, timeout=timeout)
            self.limiter = AsyncRateLimiter(
                client, clock=clock, stats=self.stats, backend=backend, setup_timeout=setup_timeout
            )
        self.timeout = timeout
        self._timeout_s = timeout
        self._prepare(self._setup)

    def _prepare(self, setup: _Setup) -> None:
        """As :meth:`Guard._prepare`, in the setup's task."""
        policy = setup.policy
        if policy is None:
            return
        limiter = self.limiter

        async def step() -> None:
            if await limiter._ask_backend() != "module":
                return
            if setup.rules is None:
                setup.rules = await limiter.policy_get(policy)
                return
            words = limiter._policy_set(["RL.LIMIT", "", policy], getattr(setup.limit, "rule_words", ()))
            if words and not _is_cluster(limiter.client):
                await limiter.client.execute_command(*words)
                limiter._policy_was_set(words)

        limiter._setup.add(step)

    async def _ask(
        self, setup: _Setup, redis_key: str, cost: int, at_most: int | None, shadow: bool
    ) -> tuple[Decision, float]:
        """The module's decision, and the clock's reading when its request was sent."""
        if setup.policy is not None and setup.rules is None:
            setup.rules = await self.limiter.policy_get(setup.policy)
        sent = self.memory.clock()
        decision = await self.limiter.check(
            setup.limit, redis_key, cost=cost, at_most=at_most, shadow=shadow, durable=self.durable,
            durable_timeout_ms=self.durable_timeout_ms,
        )
        return decision, sent

    async def check(
        self, identity: str, cost: int = 1, *, at_most: int | None = None, shadow: bool = False
    ) -> Verdict:
        """Check one request of ``identity`` costing ``cost`` units (``at_most`` and
        ``shadow``: see :meth:`Guard.check`)."""
        setup = self._setup
        redis_key = self.prefix + identity
        plain = at_most is None and not shadow
        if plain:
            remembered = self._recall(setup, redis_key, cost)
            if remembered is not None:
                return remembered
        if not self.limiter._setup.done:
            await self.limiter.ready()  # the setup in progress, or one now: before this check's timeout starts
        try:
            decision, sent = await asyncio.wait_for(
                self._ask(setup, redis_key, cost, at_most, shadow), self.timeout
            )
        except _FAILURES as error:
            return self._failed(error)
        named = self._named(setup, decision)
        probed = None
        units = self._probe(decision, named[1].more, setup)
        if units is not None:
            try:
                probed = await asyncio.wait_for(
                    self.limiter.check(setup.limit, redis_key, cost=units, dryrun=True), self.timeout
                )
            except _FAILURES:
                pass  # the request is decided: only RateLimit's t is left out
        return self._decided(setup, redis_key, cost, decision, sent, plain, named, probed)

    async def flush(self) -> None:
        """Give back every unit the local budgets hold (``RL.REFUND``); failures are logged and
        counted (``stats.refund_failures``)."""
        await self.limiter.flush()

    async def aclose(self) -> None:
        """At shutdown: :meth:`flush`, and stop the local budgets' timer (the middleware does
        it at the ASGI lifespan's shutdown)."""
        await self.limiter.close()

    async def release(self, identity: str, lease: str, *, rtt: Rtt | None = None, dropped: bool = False) -> None:
        """Give back the lease a :class:`Verdict` of a concurrency limit holds (a failure is
        logged: the lease then ends by itself after its duration), with ``rtt`` and
        ``dropped`` (see :meth:`Guard.release`). :meth:`in_flight` does it all."""
        try:
            await asyncio.wait_for(
                self.limiter.release(self.prefix + identity, lease, rtt=rtt, dropped=dropped), self.timeout
            )
        except _FAILURES as error:
            if isinstance(error, asyncio.TimeoutError):
                what = "no answer in time"
            else:
                what = f"{type(error).__name__}: {error}"
            logger.warning("rate limiter: lease %s not released (%s)", lease, what)

    @asynccontextmanager
    async def in_flight(self, identity: str, cost: int = 1, *, shadow: bool = False) -> AsyncIterator[InFlight]:
        """Check one request (:meth:`check`), and for a concurrency limit hold its lease while
        the ``async with`` block serves it, as :meth:`Guard.in_flight` does; what the
        middleware uses. An exception leaving the block, :class:`asyncio.CancelledError`
        included (a request cancelled, a timeout), releases an adaptive lease with
        ``DROPPED``; the release is shielded, so that a cancellation cannot stop it."""
        setup = self._setup
        request = self._in_flight(await self.check(identity, cost, shadow=shadow))
        try:
            yield request
        except BaseException:
            request.dropped = True
            raise
        finally:
            lease = request.verdict.lease
            rtt, dropped = self._release_sample(setup, request)
            if lease is not None:
                releasing = asyncio.ensure_future(self.release(identity, lease, rtt=rtt, dropped=dropped))
                _releasing.add(releasing)
                releasing.add_done_callback(_releasing.discard)
                await asyncio.shield(releasing)
