"""The function API on an asyncio redis-py client (standalone or
:class:`~redis.asyncio.cluster.RedisCluster`): the twin of ``client.py``'s ``RateLimiter``, on
what that module has for both (each command's arguments, the choice of backend, the replies
parsed), and the asyncio clients set for the request path."""

from __future__ import annotations

import time
from typing import Any, Callable, Union, Unpack

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from .._script_acl import PROBE, PROBE_SHA, probed, refused_in_script, script_commands
from .._setup import SETUP_TIMEOUT_S
from ..budget import BudgetStats
from ..client import (
    CheckOptions,
    Rtt,
    _acquire_args,
    _any_of,
    _Backend,
    _budgeted,
    _check_args,
    _checked_durable,
    _counter_args,
    _has_module,
    _is_cluster,
    _keyless,
    _ModuleCommands,
    _names,
    _no_permission,
    _parse_rules_reply,
    _prepare,
    _release_args,
    _settings,
)
from ..limit_types import (
    GCRA,
    Concurrency,
    Duration,
    FixedWindow,
    LeakyBucket,
    Limit,
    Policy,
    Rule,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
    rule_words,
)
from ..reply import Count, Decision, parse_count, parse_decision
from ..scripts import script_source
from ._setup import AsyncSetup
from .budget import AsyncLocalBudgets

__all__ = ["AsyncRateLimiter", "async_client_from_url", "async_client_from_sentinel"]

#: The redis-py clients :class:`AsyncRateLimiter` takes.
AsyncClient = Union[redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster]


def async_client_from_url(
    url: str = "redis://127.0.0.1:6379", *, timeout: float = 0.05, cluster: bool = False, **options: Any
) -> redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster:
    """An asyncio redis-py client set for a limiter on the request path (for
    :class:`AsyncRateLimiter`, :class:`~ratelimit_redis_module.AsyncGuard` and the
    middleware), as :func:`~ratelimit_redis_module.client_from_url` sets its sync twin: with
    redis-py's default, every request pays the whole guard timeout while Redis refuses
    connections (why: the comment above ``client_from_url``, in ``client.py``)."""
    settings: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": AsyncRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        **options,
    }
    if cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(url, **settings)
    return redis.asyncio.Redis.from_url(url, **settings)


def async_client_from_sentinel(
    sentinels: list[tuple[str, int]], service: str, *, timeout: float = 0.05, **options: Any
) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`~ratelimit_redis_module.client_from_sentinel`."""
    settings = _settings(
        timeout, AsyncRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)), options
    )
    sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinels, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    primary: redis.asyncio.Redis = sentinel.master_for(service, **settings)
    return primary


class _AsyncModuleCommands(_ModuleCommands):
    """:class:`_ModuleCommands` for an asyncio cluster client, whose resolver is a coroutine."""

    async def resolve(self, command_name: str) -> Any:
        if command_name.lower().startswith("rl."):
            return None
        return await self.inner.resolve(command_name)


class AsyncRateLimiter(_Backend):
    """The module's commands on an asyncio redis-py client (:class:`redis.asyncio.Redis` or
    :class:`redis.asyncio.cluster.RedisCluster`). The methods are those of
    :class:`~ratelimit_redis_module.RateLimiter`, as coroutines.

    Its setup (see ``RateLimiter``) runs in a task: started when the limiter is created
    inside a running event loop, else at its first call or :meth:`ready` (the middleware
    starts it at the ASGI lifespan's startup). An attempt that takes longer than
    ``setup_timeout`` counts as failed, and is tried again."""

    def __init__(
        self, client: AsyncClient, *, clock: Callable[[], float] = time.monotonic,
        stats: BudgetStats | None = None, backend: str = "auto", setup_timeout: float = SETUP_TIMEOUT_S,
    ) -> None:
        self.client = _prepare(client, _AsyncModuleCommands)
        self.stats = stats if stats is not None else BudgetStats()
        self._set_backend(backend)
        self.budgets = AsyncLocalBudgets(lambda key, units, limit: self.refund(key, units, limit=limit), clock,
                                         self.stats)
        self._setup_failing = False
        self._setup = AsyncSetup(setup_timeout, self._setup_failed, self._setup_succeeded)
        self._setup.add(self._set_up)

    async def ready(self) -> bool:
        """Wait for the setup, as :meth:`RateLimiter.ready` (and start it, when the limiter was
        made outside a running event loop)."""
        return await self._setup.wait()

    async def _set_up(self) -> None:
        """The setup's own step: the backend, and on the scripts every script loaded."""
        if await self._ask_backend() == "script":
            where = await self._everywhere_async()
            for name in self._setup_scripts():
                try:
                    await self.client.execute_command("SCRIPT LOAD", script_source(name), **where)
                except redis.ResponseError as error:
                    raise self._scripting(error) from error

    async def _everywhere_async(self) -> dict[str, Any]:
        """Where a script is loaded by the setup: every primary of a cluster."""
        return {"target_nodes": await self._primaries()} if _is_cluster(self.client) else {}

    async def check(
        self, limit: Limit, key: str | bytes, *, cost: int = 1, at_most: int | None = None, dryrun: bool = False,
        block: Duration | None = None, shadow: bool = False, durable: int = 0, durable_timeout_ms: int = 100,
    ) -> Decision:
        """Run ``limit``'s command on ``key`` with its options (see :meth:`RateLimiter.check`,
        ``durable`` and local budgets included)."""
        if _budgeted(limit, cost, at_most, dryrun, shadow):
            return await self.budgets.check(
                limit, key, cost,
                lambda units: self._ask(
                    limit, key, at_most=units, block=block, durable=durable, durable_timeout_ms=durable_timeout_ms
                ),
            )
        return await self._ask(
            limit, key, cost=cost, at_most=at_most, dryrun=dryrun, block=block, shadow=shadow, durable=durable,
            durable_timeout_ms=durable_timeout_ms,
        )

    async def sweep(self) -> int:
        """Give back now the units held past ``hold / 2`` (a timer does it by itself)."""
        return await self.budgets.sweep()

    async def flush(self) -> int:
        """Give back every unit the local budgets hold; returns the units given back."""
        return await self.budgets.flush()

    async def close(self) -> int:
        """At shutdown: :meth:`flush`, and stop the local budgets' timer and the setup's task
        (the name of :meth:`RateLimiter.close`, as a coroutine). The redis-py client stays open."""
        self._setup.close()
        return await self.budgets.aclose()

    async def _ask(
        self, limit: Limit, key: str | bytes, *, cost: int = 1, at_most: int | None = None, dryrun: bool = False,
        block: Duration | None = None, shadow: bool = False, durable: int = 0, durable_timeout_ms: int = 100,
    ) -> Decision:
        args = _check_args(limit, key, cost, at_most, dryrun, block, shadow)
        rules = getattr(limit, "rule_words", ())
        if not durable or dryrun:
            reply = await self._send(args, rules)
            return parse_decision(reply, limit.extra, granted=at_most is not None, shadow=shadow)
        if _is_cluster(self.client):
            reply = await self._send(args, rules)
            decision = parse_decision(reply, limit.extra, granted=at_most is not None, shadow=shadow)
            if not decision.allowed:
                return decision
            node = self.client.get_node_from_key(key)
            acked = await self.client.execute_command("WAIT", durable, durable_timeout_ms, target_nodes=node)
        else:
            words, name = await self._words(args, rules)
            loaded = False
            while True:
                pipe = self.client.pipeline(transaction=False)
                pipe.execute_command(*words)
                pipe.execute_command("WAIT", durable, durable_timeout_ms)
                try:
                    reply, acked = await pipe.execute(raise_on_error=True)
                    break
                except redis.ResponseError as error:
                    words, loaded = await self._again(error, words, args, rules, name, loaded)
            decision = parse_decision(reply, limit.extra, granted=at_most is not None, shadow=shadow)
        return _checked_durable(decision, acked, durable, durable_timeout_ms)

    async def _decide(self) -> str:
        """The backend, once the setup's attempt in progress (if any) has ended."""
        await self._setup.wait(trigger=False)
        return await self._ask_backend()

    async def _ask_backend(self) -> str:
        if self._chosen is None:
            if _is_cluster(self.client):
                await self.client.initialize()
            unasked = False
            try:
                reply = await self.client.execute_command("COMMAND INFO", "RL.GCRA", **_keyless(self.client))
            except redis.ResponseError as error:
                if not _no_permission(error):
                    raise
                unasked = True
            else:
                if _has_module(reply):
                    self._chose("module")
            if self._chosen is None:
                self._chose_scripts(await self._load_first(), unasked)
        assert self._chosen is not None
        return self._chosen

    async def _load_first(self) -> redis.ResponseError | None:
        """See :meth:`RateLimiter._load_first`."""
        try:
            await self.client.execute_command(
                "SCRIPT LOAD", script_source(self.SETUP_SCRIPTS[0]), **await self._everywhere_async()
            )
        except redis.ResponseError as error:
            return error
        return None

    async def _load(self, name: str, key: Any) -> None:
        try:
            await self.client.execute_command("SCRIPT LOAD", script_source(name), **self._load_target(key))
        except redis.ResponseError as error:
            raise self._scripting(error) from error

    async def _refusal(self, error: redis.ResponseError, name: str | None, words: list[Any]) -> None:
        """See :meth:`RateLimiter._refusal`."""
        refused = refused_in_script(error, name) if name is not None else None
        if refused is None:
            return
        if not refused.commands:
            probe = ["EVALSHA", PROBE_SHA, 1, words[3], *script_commands(refused.script)]
            try:
                try:
                    probed(refused, await self.client.execute_command(*probe))
                except redis.exceptions.NoScriptError:
                    await self.client.execute_command("SCRIPT LOAD", PROBE, **self._load_target(words[3]))
                    probed(refused, await self.client.execute_command(*probe))
            except redis.RedisError:
                pass  # not told: the error lists the script's commands
        raise refused from error

    async def _send(self, args: list[Any], rules: tuple[str, ...] = ()) -> Any:
        """See :meth:`RateLimiter._send`."""
        words, name = await self._words(args, rules)
        loaded = False
        while True:
            try:
                return await self.client.execute_command(*words)
            except redis.ResponseError as error:
                words, loaded = await self._again(error, words, args, rules, name, loaded)

    async def _words(self, args: list[Any], rules: tuple[str, ...]) -> tuple[list[Any], str | None]:
        """See :meth:`RateLimiter._words`."""
        await self._decide()
        first = self._policy_set(args, rules)
        if first:
            await self.client.execute_command(*first, **_keyless(self.client))
            self._policy_was_set(first)
        return self._wire(args, rules)

    async def _again(self, error: redis.ResponseError, words: list[Any], args: list[Any], rules: tuple[str, ...],
                     name: str | None, loaded: bool) -> tuple[list[Any], bool]:
        """See :meth:`RateLimiter._again`."""
        if isinstance(error, redis.exceptions.NoScriptError):
            if loaded or name is None:
                raise error
            await self._load(name, words[3])
            return words, True
        await self._refusal(error, name, words)
        return self._rewire(error, words, args, rules, name), loaded

    async def _require_module(self, what: str) -> None:
        await self._decide()
        self._refused(what)

    async def gcra(self, key: str | bytes, burst: int, rate: int, period: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.GCRA``."""
        return await self.check(GCRA(burst, rate, period), key, **options)

    async def token_bucket(
        self, key: str | bytes, capacity: int, refill_amount: int, refill_period: Duration,
        interval: bool = False, **options: Unpack[CheckOptions],
    ) -> Decision:
        """``RL.TOKENBUCKET``."""
        return await self.check(TokenBucket(capacity, refill_amount, refill_period, interval), key, **options)

    async def leaky_bucket(
        self, key: str | bytes, capacity: int, leak_amount: int, leak_period: Duration, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.LEAKYBUCKET``."""
        return await self.check(LeakyBucket(capacity, leak_amount, leak_period), key, **options)

    async def fixed_window(self, key: str | bytes, limit: int, window: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.FIXEDWINDOW``."""
        return await self.check(FixedWindow(limit, window), key, **options)

    async def sliding_window(self, key: str | bytes, limit: int, window: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.SLIDINGWINDOW``."""
        return await self.check(SlidingWindow(limit, window), key, **options)

    async def sliding_log(self, key: str | bytes, limit: int, window: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.SLIDINGLOG``."""
        return await self.check(SlidingLog(limit, window), key, **options)

    async def warmup(
        self, key: str | bytes, rate: int, period: Duration, warmup: Duration, cold_factor: int | None = None,
        **options: Unpack[CheckOptions],
    ) -> Decision:
        """``RL.WARMUP``."""
        return await self.check(Warmup(rate, period, warmup, cold_factor), key, **options)

    async def limit(self, key: str | bytes, policy: str, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.LIMIT``."""
        return await self.check(Policy(policy), key, **options)

    async def acquire(
        self, key: str | bytes, limit: int, lease: Duration, *, token: str | None = None, dryrun: bool = False,
        shadow: bool = False, adaptive: str | None = None, min: int | None = None, max: int | None = None,
    ) -> Decision:
        """``RL.CONCURRENCY.ACQUIRE`` (see :meth:`RateLimiter.acquire`)."""
        words = _acquire_args(key, Concurrency(limit, lease, adaptive, min, max), token, dryrun, shadow)
        return parse_decision(await self._send(words), "token", shadow=shadow)

    async def release(self, key: str | bytes, token: str, *, rtt: Rtt | None = None, dropped: bool = False) -> bool:
        """``RL.CONCURRENCY.RELEASE``, with ``rtt`` and ``dropped`` (see :meth:`RateLimiter.release`)."""
        return bool(await self._send(_release_args(key, token, rtt, dropped)))

    async def refund(self, key: str | bytes, units: int, *, dryrun: bool = False, limit: Limit | None = None) -> int:
        """``RL.REFUND``: returns the units given back (``limit``: see :meth:`RateLimiter.refund`)."""
        return int(await self._send(["RL.REFUND", key, str(units), *(["DRYRUN"] if dryrun else [])],
                                    getattr(limit, "rule_words", ())))

    async def counter(self, key: str | bytes, window: Duration, by: int = 1, *, xx: bool = False) -> Count:
        """``RL.COUNTER``: see :meth:`RateLimiter.counter`."""
        return parse_count(await self._send(_counter_args(key, window, by, xx)))

    async def policy_get(self, name: str) -> list[Rule] | None:
        """``RL.POLICY.GET``."""
        await self._require_module("a policy (RL.POLICY.GET)")
        reply = await self.client.execute_command("RL.POLICY.GET", name, **_keyless(self.client))
        return _parse_rules_reply(reply)

    async def _primaries(self) -> Any:
        # An asyncio cluster client learns the cluster's nodes at its first command: until
        # then it knows only its startup node, and a policy would reach that node alone.
        await self.client.initialize()
        return self.client.get_primaries()

    async def policy_set(self, name: str, *rules: Limit | Rule) -> None:
        """``RL.POLICY.SET``; on a cluster client, on every primary."""
        words = ["RL.POLICY.SET", name, *rule_words(rules)]
        await self._require_module("a policy (RL.POLICY.SET)")
        if _is_cluster(self.client):
            await self.client.execute_command(*words, target_nodes=await self._primaries())
        else:
            await self.client.execute_command(*words)

    async def policy_del(self, name: str) -> bool:
        """``RL.POLICY.DEL``; on a cluster client, on every primary."""
        await self._require_module("a policy (RL.POLICY.DEL)")
        if _is_cluster(self.client):
            primaries = await self._primaries()
            return _any_of(await self.client.execute_command("RL.POLICY.DEL", name, target_nodes=primaries))
        return bool(await self.client.execute_command("RL.POLICY.DEL", name))

    async def policy_list(self) -> list[str]:
        """``RL.POLICY.LIST``."""
        await self._require_module("a policy (RL.POLICY.LIST)")
        return _names(await self.client.execute_command("RL.POLICY.LIST", **_keyless(self.client)))
