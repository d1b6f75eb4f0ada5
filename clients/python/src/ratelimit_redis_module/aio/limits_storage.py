"""The asyncio twin of ``limits_storage.py``: ``AsyncRatelimitStorage``, a ``limits.aio``
storage on the module, registered under ``async+ratelimit+redis://``, ``async+ratelimit+rediss://``,
``async+ratelimit+redis+unix://``, ``async+ratelimit+redis+sentinel://`` and
``async+ratelimit+redis+cluster://`` (slowapi's and ``limits.aio``'s strategies take it). The
commands, the answers and the URI are those of the synchronous storage, whose module holds what
both use; importing either module registers both.
"""

from __future__ import annotations

import time
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
from limits.aio.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from ..limits_storage import (
    READ_WINDOW,
    SCHEMES,
    _credentials,
    _glob_escape,
    _Peek,
    _Prefixed,
    _Target,
    counter_expiry,
    expiry_at,
    hashed,
    held,
    inspected,
    other_key,
    parse_uri,
    peeked,
    seconds,
    sliding_window,
    window_start,
)
from ..reply import Decision
from .client import AsyncRateLimiter

__all__ = ["AsyncRatelimitStorage", "ASYNC_SCHEMES"]

#: The asyncio storage's schemes: the synchronous ones with ``async+`` in front, as limits names
#: its own.
ASYNC_SCHEMES = [f"async+{scheme}" for scheme in SCHEMES]


def async_client(target: _Target, options: dict[str, Any]) -> redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster:
    """The asyncio twin of ``limits_storage.sync_client``."""
    if target.kind == "cluster":
        nodes = options.pop("startup_nodes", None) or [
            redis.asyncio.cluster.ClusterNode(h, p) for h, p in target.locations
        ]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **_credentials(target, options), **options)
    if target.kind == "sentinel":
        sentinel_options = options.pop("sentinel_kwargs", None)
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            target.locations, sentinel_kwargs=sentinel_options, **options
        )
        primary: redis.asyncio.Redis = sentinel.master_for(target.service, **_credentials(target, options))
        return primary
    return redis.asyncio.Redis.from_url(target.url, **options)


class AsyncRatelimitStorage(_Prefixed, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """The asyncio twin of :class:`~ratelimit_redis_module.limits_storage.RatelimitStorage`, on
    ``redis.asyncio`` (the arguments are the same; the URI's scheme starts with ``async+``)."""

    STORAGE_SCHEME = ASYNC_SCHEMES

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        own = dict(options)
        target = parse_uri(uri, own, async_=True)
        self.key_prefix = target.key_prefix
        #: The asyncio redis-py client.
        self.client = async_client(target, own)
        #: The package's asyncio limiter on that client.
        self.limiter = AsyncRateLimiter(self.client, backend=target.backend)

    async def _backend(self) -> str:
        await self.limiter.ready()
        if self.limiter.backend is None:
            await self.limiter._ask_backend()
        return self.limiter.backend or "module"

    async def _peek(self, key: str) -> _Peek | None:
        k = self._key(key)
        if await self._backend() == "module":
            return inspected(await self.limiter.client.execute_command("RL.INSPECT", k))
        found = hashed(await self.client.hgetall(k), k)
        if found is None:
            return None
        algorithm, params, state = found
        return peeked(algorithm, params, state, await self._dry(k, algorithm, params))

    async def _dry(self, k: str, algorithm: str, params: list[int]) -> Decision:
        if algorithm == "tokenbucket":
            return await self.limiter.token_bucket(
                k, params[0], params[1], params[2], interval=bool(params[3]), cost=0, dryrun=True
            )
        check = {
            "slidingwindow": self.limiter.sliding_window, "slidinglog": self.limiter.sliding_log,
            "fixedwindow": self.limiter.fixed_window,
        }[algorithm]
        return await check(k, params[0], params[1], cost=0, dryrun=True)

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """See ``RatelimitStorage.incr``."""
        return (await self.limiter.counter(self._key(key), seconds(expiry), amount)).count

    async def get(self, key: str) -> int:
        """See ``RatelimitStorage.get``."""
        try:
            return (await self.limiter.counter(self._key(key), READ_WINDOW, 0)).count
        except redis.ResponseError as error:
            if not other_key(error):
                raise
        return held(await self._peek(key))

    async def get_expiry(self, key: str) -> float:
        """See ``RatelimitStorage.get_expiry``."""
        try:
            return counter_expiry(await self.limiter.counter(self._key(key), READ_WINDOW, 0))
        except redis.ResponseError as error:
            if not other_key(error):
                raise
        return expiry_at(await self._peek(key))

    async def check(self) -> bool:
        """Whether Redis answers ``PING``."""
        try:
            return bool(await self.client.ping())
        except Exception:  # limits' storages answer False for any failure
            return False

    async def reset(self) -> int | None:
        """See ``RatelimitStorage.reset``."""
        pattern = f"{_glob_escape(self.key_prefix)}:*"
        deleted = 0
        batch: list[Any] = []
        async for found in self.client.scan_iter(match=pattern, count=1000):
            batch.append(found)
            if len(batch) == 1000:
                deleted += await self._delete(batch)
                batch = []
        return deleted + await self._delete(batch)

    async def _delete(self, keys: list[Any]) -> int:
        if not keys:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for k in keys:
            pipe.delete(k)
        return sum(int(n) for n in await pipe.execute())

    async def clear(self, key: str) -> None:
        """See ``RatelimitStorage.clear``."""
        await self.client.delete(self._key(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """See ``RatelimitStorage.acquire_entry``."""
        d = await self.limiter.sliding_log(self._key(key), limit, seconds(expiry), cost=amount)
        return d.allowed

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """See ``RatelimitStorage.get_moving_window``."""
        k = self._key(key)
        d = await self.limiter.sliding_log(k, limit, seconds(expiry), cost=0, dryrun=True)
        units = d.limit - d.remaining
        if units == 0:
            return time.time(), 0
        oldest = await self.limiter.sliding_log(k, limit, seconds(expiry), cost=d.remaining + 1, dryrun=True)
        return window_start(oldest, expiry), units

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """See ``RatelimitStorage.acquire_sliding_window_entry``."""
        d = await self.limiter.sliding_window(self._key(key), limit, seconds(expiry), cost=amount)
        return d.allowed

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        """See ``RatelimitStorage.get_sliding_window``."""
        return sliding_window(await self._peek(key), self._key(key))

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        """See ``RatelimitStorage.clear_sliding_window``."""
        await self.clear(key)
