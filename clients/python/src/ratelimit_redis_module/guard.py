"""The guards, framework-agnostic: a check becomes a :class:`Verdict` (the fields and bodies of
``fields``, a denial from ``denial_memory`` without a round trip, the counters of ``stats``), and
a failure of Redis fails open or closed; :class:`InFlight` carries a request to its end. Here
:class:`Guard`, on a synchronous client, and what it shares with its asyncio twin
(``AsyncGuard``, in ``aio/guard.py``)."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import redis

from ._setup import SETUP_TIMEOUT_S
from .client import NotDurable, RateLimiter, Rtt, _is_cluster, client_from_url
from .denial_memory import DenialMemory
from .fields import (
    UNAVAILABLE_BODY,
    XRateLimitReset,
    check_name,
    check_x_ratelimit_reset,
    load_shed_body,
    quota_exceeded_body,
    rate_limit_headers,
)
from .limit_types import Concurrency, FieldShape, Limit, More, Policy, Rule, field_shape, more_after_ms, parse_rules
from .reply import Decision
from .stats import Stats

__all__ = [
    "Verdict",
    "Guard",
    "InFlight",
]

logger = logging.getLogger("ratelimit_redis_module")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with one request.

    Attributes:
        allowed: serve it (admitted, or let through because Redis failed and the guard fails open).
        status: 200 when allowed, else 429 (limited), or 503 (an adaptive concurrency limit
            shedding load, or Redis failed and the guard fails closed).
        headers: header fields (lower-case names) to add to the response, allowed or not;
            empty when Redis failed. For an adaptive concurrency limit, its current limit is
            ``q``, and its 503's ``Retry-After`` is at least 1.
        body: the refusal's ``application/problem+json`` body (empty when allowed).
        decision: the module's reply, or the remembered denial recomputed; None when Redis failed.
        source: ``"redis"``, ``"memory"`` (no round trip), ``"budget"`` (answered from the
            limit's local budget, no round trip of its own) or ``"failure"``.
        lease: for a :class:`~ratelimit_redis_module.Concurrency` limit, the token of the lease
            taken, to give to ``release`` when the response is done.
    """

    allowed: bool
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    decision: Decision | None
    source: str
    lease: str | None = None


@dataclass(slots=True)
class InFlight:
    """One request from its check to the end of its response, as the guards' ``in_flight``
    gives it; for a :class:`~ratelimit_redis_module.Concurrency` limit, what its lease is
    released with at the end of the ``with`` block.

    Attributes:
        verdict: the check's :class:`Verdict`: answer as it says (refused: its status,
            headers and body; nothing is released).
        status: the response's status, for the application to set when it knows it: 500 or
            more releases an adaptive lease with ``DROPPED``.
        dropped: set True to release with ``DROPPED`` whatever the status (work that failed
            from overload, caught inside the block); an exception leaving the block (a
            timeout, a cancellation) sets it.
        rtt: the seconds measured, from the start of the block (just before the handler
            runs) to :meth:`done` or the end of the block; set when the block ends.
    """

    verdict: Verdict
    status: int | None = None
    dropped: bool = False
    rtt: float | None = None
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _start: float = field(default=0.0, repr=False)
    _end: float | None = field(default=None, repr=False)

    def done(self) -> None:
        """The response is complete: its latency ends now (not at the end of the block, after
        work that follows the response, such as background tasks). The first call counts."""
        if self._end is None:
            self._end = self._clock()

    @property
    def finished(self) -> bool:
        """:meth:`done` was called: the response is complete."""
        return self._end is not None

    def _sample(self) -> tuple[float, bool]:
        """The latency (seconds, from the guard's clock) and whether it dropped."""
        end = self._end if self._end is not None else self._clock()
        self.rtt = max(0.0, end - self._start)
        return self.rtt, self.dropped or (self.status is not None and self.status >= 500)


@dataclass(slots=True)
class _Setup:
    """A guard's limit and what follows from it. Replaced whole when the limit is, so that a
    check keeps the one it started with."""

    limit: Limit
    name: str
    policy: str | None
    concurrent: bool
    #: An adaptive concurrency limit: a refusal is load shedding (503), a lease released with
    #: its latency and whether it dropped.
    adaptive: bool
    #: The fields' shape of a limit that is not a policy (a policy's is its binding rule's).
    shape: FieldShape
    #: What a remembered denial must have been made under to answer a request: the command
    #: and its arguments.
    params: tuple[str, tuple[str, ...]]
    #: A policy's rules, read from the server at its first check (for the headers).
    rules: list[Rule] | None = None


class _GuardBase:
    def __init__(
        self,
        limit: Limit,
        *,
        name: str | None,
        prefix: str,
        fail_open: bool,
        max_remembered: int,
        stats: Stats | None,
        clock: Callable[[], float],
        durable: int = 0,
        durable_timeout_ms: int = 100,
        x_ratelimit_reset: XRateLimitReset = "delta",
    ) -> None:
        if durable < 0 or durable_timeout_ms < 0:
            raise ValueError("durable and durable_timeout_ms are 0 or more")
        #: ``X-RateLimit-Reset`` in delta seconds (``"delta"``) or epoch seconds (``"epoch"``).
        self.x_ratelimit_reset = check_x_ratelimit_reset(x_ratelimit_reset)
        self.durable = durable
        self.durable_timeout_ms = durable_timeout_ms
        self._given_name = name
        self._setup = self._set_up(limit)
        self.prefix = prefix
        self.fail_open = fail_open
        self.memory = DenialMemory(max_remembered, clock)
        self.stats = stats if stats is not None else Stats()
        self._timeout_s = 0.0

    def _set_up(self, limit: Limit) -> _Setup:
        policy = limit.name if isinstance(limit, Policy) else None
        name = check_name(self._given_name if self._given_name is not None else (policy or "default"))
        shape = FieldShape(None, "probe") if policy else field_shape(limit.command, limit.args())
        concurrent = isinstance(limit, Concurrency)
        adaptive = isinstance(limit, Concurrency) and limit.adaptive is not None
        setup = _Setup(limit, name, policy, concurrent, adaptive, shape, (limit.command, tuple(limit.args())))
        if isinstance(limit, Policy) and limit.rules:  # the application's: nothing to read from the server
            setup.rules = parse_rules(list(limit.rule_words))
        return setup

    @property
    def limit(self) -> Limit:
        """The limit applied. Assign another to change it while serving (a configuration
        reload): the next check applies it, and a denial remembered under other parameters
        refuses nothing. Assigning a :class:`~ratelimit_redis_module.Policy`, even the same,
        makes the guard read its rules again (after an ``RL.POLICY.SET``), for the names and
        windows of the headers."""
        return self._setup.limit

    @limit.setter
    def limit(self, limit: Limit) -> None:
        self._setup = self._set_up(limit)
        self._prepare(self._setup)

    def _prepare(self, setup: _Setup) -> None:
        """Have the limiter's setup do what the first check of ``setup``'s limit needs besides
        its own command (see the subclasses)."""

    @property
    def name(self) -> str:
        """The limit's name in the headers."""
        return self._setup.name

    @property
    def policy(self) -> str | None:
        """The policy's name, when the limit is a policy."""
        return self._setup.policy

    @property
    def concurrent(self) -> bool:
        """The limit is a :class:`~ratelimit_redis_module.Concurrency` limit."""
        return self._setup.concurrent

    @property
    def adaptive(self) -> bool:
        """The limit is an adaptive :class:`~ratelimit_redis_module.Concurrency` limit: a refusal
        is a 503 (load shedding), with ``Retry-After`` (at least 1) and the RateLimit fields."""
        return self._setup.adaptive

    def _in_flight(self, verdict: Verdict) -> InFlight:
        request = InFlight(verdict, _clock=self.memory.clock)
        request._start = request._clock()
        return request

    @staticmethod
    def _release_sample(setup: _Setup, request: InFlight) -> tuple[Rtt | None, bool]:
        """What a lease is released with: for an adaptive limit, the latency and whether it
        dropped; for any other, nothing (the module would ignore them, and a module without
        adaptive limits refuses them)."""
        rtt, dropped = request._sample()
        return (rtt, dropped) if setup.adaptive else (None, False)

    def _reset_at_ms(self, decision: Decision) -> int | None:
        """With ``x_ratelimit_reset="epoch"``, the instant ``decision``'s key is fresh again, in
        ms since the Unix epoch: the wall clock now (the reply has just arrived) plus its
        ``reset_after_ms``. None for delta seconds."""
        if self.x_ratelimit_reset == "delta":
            return None
        return time.time_ns() // 1_000_000 + decision.reset_after_ms

    def _recall(self, setup: _Setup, redis_key: str, cost: int) -> Verdict | None:
        remembered = self.memory._recall(redis_key, cost, setup.params)
        if remembered is None:
            return None
        decision, name, window_s, reset_at_ms = remembered
        self.stats.remembered += 1
        # The epoch's instant is the one the denial's reply fixed: the time left, counted down on
        # the monotonic clock, added to the wall clock now would give another second now and
        # then (rounding, a step of the wall clock).
        if self.x_ratelimit_reset == "delta":
            reset_at_ms = None
        elif reset_at_ms is None:
            reset_at_ms = self._reset_at_ms(decision)
        headers = rate_limit_headers(name, decision, window_s, reset_at_ms=reset_at_ms)
        return Verdict(False, 429, headers, quota_exceeded_body(name), decision, "memory")

    @staticmethod
    def _named(setup: _Setup, decision: Decision) -> tuple[str, FieldShape]:
        """The name and the fields' shape of a decision: the limit's, or for a policy its
        binding rule's ``w``, and ``t`` asked of the policy as a whole (``remaining`` grows when
        every rule admits one unit more, which no one rule's reply says)."""
        rules = setup.rules
        if setup.policy is None or rules is None:
            return setup.name, setup.shape
        rule = decision.rule if decision.rule is not None else 0
        name = setup.name if len(rules) <= 1 and rule == 0 else f"{setup.name}/{rule}"
        if not 0 <= rule < len(rules):
            # A rule past those read: the policy has grown on the server since. Its window is
            # not known; the next check reads the policy again.
            setup.rules = None
            return name, setup.shape
        return name, FieldShape(field_shape(rules[rule].algorithm, rules[rule].args).window_s, "probe")

    @staticmethod
    def _probe(decision: Decision, more: More, setup: _Setup | None = None) -> int | None:
        """The cost of the DRYRUN that finds when an admitted decision's ``remaining`` grows
        (its retry time is exactly that), when the reply alone does not say; else None. Never
        for a limit with a local budget: a round trip per request is what it saves (``t`` is
        left out)."""
        if setup is not None and getattr(setup.limit, "local_budget", None) is not None:
            return None
        if decision.allowed and more == "probe" and decision.remaining < decision.limit:
            return decision.remaining + 1
        return None

    @staticmethod
    def _more_after(decision: Decision, more: More, probed: Decision | None) -> int | None:
        if not decision.allowed:
            return None
        if more != "probe":
            return more_after_ms(more, decision)
        return probed.retry_after_ms if probed is not None and probed.retry_after_ms >= 0 else None

    def _decided(
        self, setup: _Setup, redis_key: str, cost: int, decision: Decision, sent: float, plain: bool,
        named: tuple[str, FieldShape], probed: Decision | None,
    ) -> Verdict:
        source = "budget" if decision.local else "redis"
        if not decision.local:
            self.stats.round_trips += 1
        name, shape = named
        window_s = shape.window_s
        # An adaptive limit's fields are a concurrency limit's, its current limit as q; its
        # refusal (a 503) says to come back in 1 s at the soonest: at once would be shed again.
        fields = replace(decision, retry_after_ms=max(decision.retry_after_ms, 1)) if setup.adaptive else decision
        reset_at_ms = self._reset_at_ms(decision)
        headers = rate_limit_headers(
            name, fields, window_s, setup.concurrent, self._more_after(decision, shape.more, probed),
            reset_at_ms=reset_at_ms,
        )
        if decision.shadow_denied:
            # Let through as the module answered it; nothing was written.
            self.stats.shadow_denied += 1
            return Verdict(True, 200, headers, b"", decision, source, decision.token)
        if decision.allowed:
            self.stats.admitted += 1
            # The key was written: what was remembered of it says nothing exact any more.
            self.memory.forget(redis_key)
            return Verdict(True, 200, headers, b"", decision, source, decision.token)
        self.stats.denied += 1
        # Not remembered: a concurrency denial (a lease may be released before its retry time),
        # nor a policy's (RL.POLICY.SET, from anywhere, changes its rules unseen: a denial
        # remembered under the old ones would refuse what the new ones admit), nor a denial of
        # ``at_most`` (no cost of its own for a later request to match).
        if plain and not setup.concurrent and setup.policy is None:
            self.memory.remember(
                redis_key, decision, cost, name, window_s, params=setup.params, sent=sent, reset_at_ms=reset_at_ms,
            )
        if setup.adaptive:
            return Verdict(False, 503, headers, load_shed_body(name), decision, source)
        return Verdict(False, 429, headers, quota_exceeded_body(name), decision, source)

    def _failed(self, error: BaseException) -> Verdict:
        self.stats.failures += 1
        if isinstance(error, NotDurable):
            self.stats.not_durable += 1
        if isinstance(error, (asyncio.TimeoutError, redis.TimeoutError)):
            self.stats.timeouts += 1
        if isinstance(error, asyncio.TimeoutError):
            what = f"no answer within {round(self._timeout_s * 1000)} ms"
        else:
            what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        # A reply the package cannot read (a rule kind it does not know, a field too many) is
        # the package's failure, not Redis's: said so, and handled alike.
        failed = "reply not understood" if isinstance(error, ValueError) else "unavailable"
        if self.fail_open:
            self.stats.fail_open += 1
            logger.warning("rate limiter %s (%s); failing open: request let through", failed, what)
            return Verdict(True, 200, [], b"", None, "failure")
        self.stats.fail_closed += 1
        logger.warning("rate limiter %s (%s); failing closed: request refused with 503", failed, what)
        return Verdict(False, 503, [], UNAVAILABLE_BODY, None, "failure")


_FAILURES = (redis.RedisError, OSError, asyncio.TimeoutError, ValueError)


class Guard(_GuardBase):
    """A limit applied to requests, on a synchronous redis-py client (for WSGI or any
    framework): call :meth:`check` with the caller's identity, then answer as the verdict says.

    Args:
        client: a :class:`redis.Redis` or :class:`redis.cluster.RedisCluster`, best made with
            :func:`~ratelimit_redis_module.client_from_url` (a URL here makes one): its
            ``socket_timeout`` is the time Redis has to answer (e.g. 0.05), and it fails at
            once while Redis refuses connections, where redis-py's default client retries
            with back-off for seconds. Or a :class:`~ratelimit_redis_module.RateLimiter` to share
            (its backend, setup and stats; ``backend`` and ``setup_timeout`` are then its own).
        limit: one algorithm's parameters (``GCRA(5, 10, "1m")``...) or ``Policy("api")``.
        name: the limit's name in the headers (default ``"default"``; for a policy, its name,
            and ``"<policy>/<rule>"`` for the binding rule of a policy of several rules).
        prefix: prepended to each identity to make the Redis key.
        fail_open: when Redis fails, let the request through (True) or refuse it with 503.
        max_remembered: how many denials the local memory holds (0 turns it off).
        durable: how many replicas must have an admission before it counts (``WAIT durable
            durable_timeout_ms`` pipelined after the command, one round trip): an admission
            fewer acknowledged in time is a failure (``stats.not_durable``), failed open or
            closed, so that a failover cannot lose a count that was acted on (docs/cluster.md,
            Failover). 0 (the default) does not wait.
        durable_timeout_ms: how long the replicas have (default 100).
        stats: counters to fill (a new :class:`Stats` if None).
        backend: ``"auto"`` (default), ``"module"`` or ``"script"``: see
            :class:`~ratelimit_redis_module.RateLimiter`. A policy or an adaptive concurrency
            limit on the script backend raises :class:`~ratelimit_redis_module.ModuleRequired` at
            the first check (it is not failed open or closed); a plain concurrency limit works
            there as on the module.
        setup_timeout: how long a check waits for the limiter's setup, in seconds (default 1).
            The setup (the backend, the scripts; a policy's rules on the module) starts when
            the guard is created, in the background; a check that comes while it runs waits
            for it before its own time starts (see :class:`~ratelimit_redis_module.RateLimiter`).
        x_ratelimit_reset: ``"delta"`` (the default: ``X-RateLimit-Reset`` is the seconds until
            the key is fresh again) or ``"epoch"`` (that instant in seconds since the Unix epoch,
            rounded up: the wall clock when the reply arrived plus ``reset_after_ms``, the same
            instant in the denial memory's answers); anything else raises ``ValueError``.
    """

    def __init__(
        self,
        client: Any,
        limit: Limit,
        *,
        name: str | None = None,
        prefix: str = "rl:http:",
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
        if isinstance(client, RateLimiter):  # shared with another guard (a route's own limit)
            self.limiter = client
        else:
            self.limiter = RateLimiter(
                client_from_url(client) if isinstance(client, str) else client, clock=clock, stats=self.stats,
                backend=backend, setup_timeout=setup_timeout,
            )
        self._prepare(self._setup)

    def _prepare(self, setup: _Setup) -> None:
        """A policy's rules in the limiter's setup, on the module: the server's read
        (``RL.POLICY.GET``, for the headers' names and windows), or the application's set
        (``RL.POLICY.SET``; on a cluster, with the first check), instead of at the first check."""
        policy = setup.policy
        if policy is None:
            return
        limiter = self.limiter

        def step() -> None:
            if limiter._ask_backend() != "module":
                return
            if setup.rules is None:
                setup.rules = limiter.policy_get(policy)
                return
            words = limiter._policy_set(["RL.LIMIT", "", policy], getattr(setup.limit, "rule_words", ()))
            if words and not _is_cluster(limiter.client):
                limiter.client.execute_command(*words)
                limiter._policy_was_set(words)

        limiter._setup.add(step)

    def flush(self) -> None:
        """Give back every unit the local budgets hold (``RL.REFUND``); failures are logged and
        counted (``stats.refund_failures``)."""
        self.limiter.flush()

    def close(self) -> None:
        """At shutdown: :meth:`flush`, and stop the local budgets' sweeper thread."""
        self.limiter.close()

    def check(self, identity: str, cost: int = 1, *, at_most: int | None = None, shadow: bool = False) -> Verdict:
        """Check one request of ``identity`` costing ``cost`` units.

        Args:
            at_most: instead of ``cost``, take as many units as the key allows now, up to
                ``at_most`` (``ATMOST``; the decision's ``granted`` says how many; refused
                when none).
            shadow: check and count, but never refuse (``SHADOW``): a request the limit would
                refuse is let through, its decision's ``shadow_denied`` saying so (counted in
                ``stats.shadow_denied``); a concurrency limit then takes no lease.

        Neither is answered from the denial memory, nor remembered.
        """
        setup = self._setup
        redis_key = self.prefix + identity
        plain = at_most is None and not shadow
        if plain:
            remembered = self._recall(setup, redis_key, cost)
            if remembered is not None:
                return remembered
        if not self.limiter._setup.done:
            self.limiter.ready()  # the setup in progress, or one now: not inside this check's time
        try:
            if setup.policy is not None and setup.rules is None:
                setup.rules = self.limiter.policy_get(setup.policy)
            sent = self.memory.clock()
            decision = self.limiter.check(
                setup.limit, redis_key, cost=cost, at_most=at_most, shadow=shadow, durable=self.durable,
                durable_timeout_ms=self.durable_timeout_ms,
            )
        except _FAILURES as error:
            return self._failed(error)
        named = self._named(setup, decision)
        probed = None
        units = self._probe(decision, named[1].more, setup)
        if units is not None:
            try:
                probed = self.limiter.check(setup.limit, redis_key, cost=units, dryrun=True)
            except _FAILURES:
                pass  # the request is decided: only RateLimit's t is left out
        return self._decided(setup, redis_key, cost, decision, sent, plain, named, probed)

    def release(self, identity: str, lease: str, *, rtt: Rtt | None = None, dropped: bool = False) -> None:
        """Give back the lease a :class:`Verdict` of a concurrency limit holds (a failure is
        logged: the lease then ends by itself after its duration), with how long the work took
        (``rtt``: seconds, or a timedelta) and whether it ``dropped`` (see
        :meth:`~ratelimit_redis_module.RateLimiter.release`). :meth:`in_flight` does it all."""
        try:
            self.limiter.release(self.prefix + identity, lease, rtt=rtt, dropped=dropped)
        except _FAILURES as error:
            logger.warning("rate limiter: lease %s not released (%s: %s)", lease, type(error).__name__, error)

    @contextmanager
    def in_flight(self, identity: str, cost: int = 1, *, shadow: bool = False) -> Iterator[InFlight]:
        """Check one request (:meth:`check`), and for a concurrency limit hold its lease while
        the ``with`` block serves it, released when the block ends::

            with guard.in_flight(ip) as request:
                if not request.verdict.allowed:
                    return refuse(request.verdict)  # its status, headers and body
                response = handler()
                request.status = response.status_code
                return response

        For an adaptive limit the lease is released with the block's latency (``RTT``, from
        the guard's ``clock``: from the start of the block to :meth:`InFlight.done` or its
        end) and ``DROPPED`` when ``request.status`` is 500 or more, ``request.dropped`` is
        set, or an exception leaves the block (a timeout...). A lease of any other
        concurrency limit is released plainly, as :meth:`release` does.
        """
        setup = self._setup
        request = self._in_flight(self.check(identity, cost, shadow=shadow))
        try:
            yield request
        except BaseException:
            request.dropped = True
            raise
        finally:
            lease = request.verdict.lease
            rtt, dropped = self._release_sample(setup, request)
            if lease is not None:
                self.release(identity, lease, rtt=rtt, dropped=dropped)
