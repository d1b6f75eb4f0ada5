"""ASGI middleware for Starlette, FastAPI or any ASGI application.

::

    app.add_middleware(
        RateLimitMiddleware,
        redis="redis://127.0.0.1:6379",   # or async_client_from_url(...)
        limit=GCRA(burst=5, rate=10, period="1m"),
        key=header("x-client-id"),
    )
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Iterable, Mapping, MutableMapping, TypeVar, Union

from .guard import PROBLEM_JSON, AsyncGuard, Stats
from .limit_types import Limit

__all__ = ["RateLimitMiddleware", "KeyFunc", "client_ip", "exempt", "header", "limited", "user"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Maps a request's ASGI scope to the caller's identity, or None to leave it unlimited.
KeyFunc = Callable[[Scope], Union[str, None]]
#: A cost in units, or a function of the scope that gives it.
CostFunc = Union[int, Callable[[Scope], int]]
#: True or False for every request, or a function of the scope saying which requests.
ScopeFlag = Union[bool, Callable[[Scope], bool]]
#: A function of the scope: True for a request the middleware lets through untouched.
SkipFunc = Callable[[Scope], bool]

_Exempted = TypeVar("_Exempted")
_EXEMPT = "__ratelimit_exempt__"
_LIMIT = "__ratelimit_limit__"
# How many endpoints `exempt` and `limited` have marked: until one is, no route is looked up.
_marked = 0


def exempt(endpoint: _Exempted) -> _Exempted:
    """Mark a route's endpoint, or an ASGI app to be mounted, as exempt from
    :class:`RateLimitMiddleware`, as slowapi's ``@limiter.exempt`` does: its requests pass
    untouched, with no check, no headers and no round trip (health checks, metrics, internal
    callers). Above or below the route's decorator::

        @app.get("/health")
        @exempt
        async def health() -> dict: ...

        app.mount("/internal", exempt(internal_app))

    The middleware finds the route the way Starlette's router will (a Starlette or FastAPI
    application, mounts included): the first route whose path and method match. Elsewhere, use
    the middleware's ``skip``.
    """
    global _marked
    try:
        setattr(endpoint, _EXEMPT, True)
    except (AttributeError, TypeError):
        raise TypeError(f"cannot mark {endpoint!r} as exempt: it takes no attributes") from None
    _marked += 1
    return endpoint


def limited(limit: Limit, *, name: str | None = None) -> Callable[[_Exempted], _Exempted]:
    """A route's own limit, as slowapi's ``@limiter.limit(...)`` gives one: the
    :class:`RateLimitMiddleware` checks the route's requests against ``limit`` instead of its
    own, on keys of their own (the middleware's prefix, ``name``, ``:``, the caller's key), with
    the middleware's key function, cost, shadow and failure settings; the headers name the
    limit ``name``. ``name`` defaults to the endpoint's ``__name__``; routes marked with the
    same name and limit share their keys. Above or below the route's decorator::

        @app.get("/search")
        @limited(GCRA(5, 10, "1m"))
        async def search() -> dict: ...

    The route is found as for :func:`exempt`.
    """

    def mark(endpoint: _Exempted) -> _Exempted:
        global _marked
        label = name if name is not None else getattr(endpoint, "__name__", None)
        if not isinstance(label, str) or not label:
            raise TypeError(f"cannot name the limit of {endpoint!r}: give limited(..., name=...)")
        try:
            setattr(endpoint, _LIMIT, (limit, label))
        except (AttributeError, TypeError):
            raise TypeError(f"cannot mark {endpoint!r} with a limit: it takes no attributes") from None
        _marked += 1
        return endpoint

    return mark


def _mark(thing: Any) -> Any:
    """What ``exempt`` (True) or ``limited`` (the limit and its name) put on ``thing``, or None."""
    if getattr(thing, _EXEMPT, False) is True:
        return True
    return getattr(thing, _LIMIT, None)


def _route_mark(routes: Iterable[Any], scope: Scope) -> Any:
    """The mark (see :func:`_mark`) of the route Starlette's router would pick for ``scope``
    (the first that matches it fully, in a mount the first of its routes), or None."""
    for route in routes:
        matches = getattr(route, "matches", None)
        if matches is None:
            continue
        match, child = matches(scope)
        if getattr(match, "name", None) != "FULL":
            continue
        mark = _mark(route)
        if mark is None:
            mark = _mark(child.get("endpoint"))
        if mark is not None:
            return mark
        # A mount: the route its own router will pick, in the scope the mount hands it.
        inner = getattr(route, "routes", None)
        return _route_mark(inner, {**scope, **child}) if inner else None
    return None


def client_ip(scope: Mapping[str, Any]) -> str | None:
    """The peer's address, as the ASGI server gives it (behind a proxy, use the server's
    proxy-headers setting, e.g. uvicorn's ``--forwarded-allow-ips``)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def header(name: str, fallback: KeyFunc | None = client_ip) -> KeyFunc:
    """A key function reading the request header ``name`` (e.g. an API key), or ``fallback``
    when the request has none."""
    wanted = name.lower().encode("latin-1")

    def key(scope: Scope) -> str | None:
        for field, value in scope.get("headers", ()):
            if field.lower() == wanted and value:
                return str(value.decode("latin-1"))
        return fallback(scope) if fallback else None

    return key


def user(fallback: KeyFunc | None = client_ip) -> KeyFunc:
    """A key function reading the authenticated user that Starlette's
    ``AuthenticationMiddleware`` puts in ``scope["user"]`` (its ``identity``, else its
    ``display_name``), or ``fallback`` for an anonymous request. Add it inside (after) the
    authentication middleware."""

    def key(scope: Scope) -> str | None:
        who = scope.get("user")
        if who is not None and getattr(who, "is_authenticated", False):
            identity: Any
            try:
                identity = who.identity
            except (AttributeError, NotImplementedError):
                identity = getattr(who, "display_name", None)
            if identity:
                return "user:" + str(identity)
        return fallback(scope) if fallback else None

    return key


class RateLimitMiddleware:
    """Limits each caller of an ASGI application with the ratelimit module.

    Every HTTP request costs ``cost`` units of its caller's limit, the caller being what
    ``key`` returns. An admitted request gets the RateLimit headers on its response; a refused
    one a 429 with ``Retry-After`` and an ``application/problem+json`` body. A denial is
    remembered in-process until its retry time (not a policy's, whose rules can change unseen),
    so a caller that keeps asking for the same costs no round trip. When Redis does not answer
    within ``timeout``, the request passes without headers (``fail_open=True``, the default)
    or gets a 503; either way it is logged (a warning on the ``ratelimit_redis_module``
    logger) and counted in ``stats``.

    Args:
        app: the ASGI application.
        redis: a Redis URL (``"redis://127.0.0.1:6379"``: the middleware makes its client with
            :func:`~ratelimit_redis_module.async_client_from_url`, which fails at once while
            Redis refuses connections and recovers as soon as it is back), or a
            :class:`redis.asyncio.Redis` or :class:`redis.asyncio.cluster.RedisCluster` (best
            made with that function: redis-py's default client has every request pay the
            whole ``timeout`` while Redis refuses connections).
        limit: one algorithm's parameters (``GCRA(5, 10, "1m")``, ``Warmup(10, "1s", "10s")``...),
            ``Policy("api")``, or
            ``Concurrency(limit, lease)`` (requests in flight: the lease is released when the
            application is done with the request). With ``adaptive=`` (load shedding, the
            limit learnt from latency), the lease is released with the request's latency,
            from just before the application runs to the end of its response, and
            ``DROPPED`` when the response is a 5xx, the application raises, the request is
            cancelled or its client goes away first; a refusal is a 503 (load shedding) with
            ``Retry-After``, and the fields say its current limit.
        key: the caller's identity: :func:`client_ip` (the default), :func:`header`,
            :func:`user`, or any function of the scope (None leaves the request unlimited).
        name: the limit's name in the headers (default ``"default"``, or the policy's name).
        prefix: prepended to the identity to make the Redis key (default ``"rl:http:"``).
        cost: units per request, or a function of the scope giving them.
        skip: a function of the scope, True for a request to let through untouched (no
            check, no headers, no round trip), as express-rate-limit's ``skip``; see also
            :func:`exempt`, to mark a route.
        shadow: True, or a function of the scope saying which requests: the limit is checked
            with ``SHADOW``, counted and answered in the headers, but never refuses (a new
            limit watched on live traffic before it is enforced; ``stats.shadow_denied``
            counts the requests it would have refused).
        timeout: seconds Redis has to answer (default 0.05).
        fail_open: let requests through when Redis fails (default) instead of answering 503.
        max_remembered: how many denials to remember locally (default 10,000; 0: none).
        durable: replicas that must have an admission before it counts (``WAIT``, in the same
            round trip; default 0, off): for limits that must not lose counts in a failover
            (see :class:`AsyncGuard`).
        durable_timeout_ms: how long they have (default 100).
        stats: a :class:`Stats` to fill, so the application can read the counters.
        guard: an :class:`AsyncGuard` to use instead of building one from the arguments above;
            keep it to change the limit while serving (assign its ``limit``).
        backend: ``"auto"`` (default: the module where the server has it, else the script
            backend), ``"module"`` or ``"script"`` (see :class:`RateLimiter`); the choice is in
            ``stats.backend``.

    A limit with a local budget (``GCRA(..., local_budget=64)``) is served from it: a request
    costs a round trip only when its key's budget is empty, and at the ASGI lifespan's
    shutdown every unit held is given back (``RL.REFUND``) before the shutdown completes
    (run the server with lifespan on; else call ``guard.aclose()``).
    """

    def __init__(
        self,
        app: ASGIApp,
        redis: Any = None,
        limit: Limit | None = None,
        *,
        key: KeyFunc = client_ip,
        name: str | None = None,
        prefix: str = "rl:http:",
        cost: CostFunc = 1,
        skip: SkipFunc | None = None,
        shadow: ScopeFlag = False,
        timeout: float = 0.05,
        fail_open: bool = True,
        max_remembered: int = 10_000,
        durable: int = 0,
        durable_timeout_ms: int = 100,
        stats: Stats | None = None,
        guard: AsyncGuard | None = None,
        clock: Callable[[], float] = time.monotonic,
        backend: str = "auto",
    ) -> None:
        self.app = app
        if guard is None:
            if redis is None or limit is None:
                raise TypeError("RateLimitMiddleware needs redis= and limit= (or guard=)")
            guard = AsyncGuard(
                redis, limit, name=name, prefix=prefix, timeout=timeout, fail_open=fail_open,
                max_remembered=max_remembered, stats=stats, clock=clock, durable=durable,
                durable_timeout_ms=durable_timeout_ms, backend=backend,
            )
        self.guard = guard
        self.key = key
        self.cost = cost
        self.shadow = shadow
        self.skip = skip
        self._max_remembered = max_remembered
        # The guards of the routes marked with `limited`, by (name, limit), made at first use.
        self._routes: dict[tuple[str, Limit], AsyncGuard] = {}

    @property
    def stats(self) -> Stats:
        """The counters: round trips, admitted, denied, remembered, failures..."""
        return self.guard.stats

    def _at_shutdown(self, send: Send) -> Send:
        """The lifespan's ``send``: before the application's shutdown is reported complete, the
        local budgets give back every unit they hold (``RL.REFUND``)."""

        async def lifespan_send(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self.guard.aclose()
                for guard in self._routes.values():
                    await guard.aclose()
            await send(message)

        return lifespan_send

    def _guard_for(self, scope: Scope) -> AsyncGuard | None:
        """The guard that checks this request: the middleware's, a ``limited`` route's own, or
        None for a request let through untouched (``skip``, an ``exempt`` route)."""
        if self.skip is not None and self.skip(scope):
            return None
        if not _marked:
            return self.guard
        # The application being served: Starlette puts itself in the scope before its
        # middleware runs; this middleware may also wrap it directly.
        for app in (scope.get("app"), self.app):
            routes = getattr(getattr(app, "router", None), "routes", None)
            if routes is not None:
                mark = _route_mark(routes, scope)
                if mark is True:
                    return None
                return self._route_guard(*mark) if mark is not None else self.guard
        return self.guard

    def _route_guard(self, limit: Limit, name: str) -> AsyncGuard:
        guard = self._routes.get((name, limit))
        if guard is None:
            base = self.guard
            guard = AsyncGuard(
                base.limiter.client, limit, name=name, prefix=f"{base.prefix}{name}:", timeout=base.timeout,
                fail_open=base.fail_open, max_remembered=self._max_remembered, stats=base.stats,
                clock=base.memory.clock, durable=base.durable, durable_timeout_ms=base.durable_timeout_ms,
                backend=base.limiter.backend_option,
            )
            self._routes[(name, limit)] = guard
        return guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._at_shutdown(send))
            return
        guard = self._guard_for(scope) if scope["type"] == "http" else None
        if guard is None:
            await self.app(scope, receive, send)
            return
        identity = self.key(scope)
        if identity is None:
            await self.app(scope, receive, send)
            return
        cost = self.cost(scope) if callable(self.cost) else self.cost
        shadow = self.shadow(scope) if callable(self.shadow) else self.shadow
        async with guard.in_flight(identity, cost, shadow=bool(shadow)) as request:
            verdict = request.verdict
            extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in verdict.headers]
            if not verdict.allowed:
                await send({
                    "type": "http.response.start",
                    "status": verdict.status,
                    "headers": extra + [
                        (b"content-type", PROBLEM_JSON.encode()),
                        (b"content-length", str(len(verdict.body)).encode()),
                    ],
                })
                await send({"type": "http.response.body", "body": verdict.body})
                return
            if verdict.lease is None and not extra:
                await self.app(scope, receive, send)
                return

            async def watched_receive() -> Message:
                message = await receive()
                if message["type"] == "http.disconnect" and not request.finished:
                    # The client went away before its response was complete.
                    request.dropped = True
                return message

            async def watched_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    request.status = int(message["status"])
                    if extra:
                        message = dict(message)
                        message["headers"] = list(message.get("headers", ())) + extra
                await send(message)
                if _completes(message):
                    request.done()

            await self.app(scope, watched_receive if verdict.lease is not None else receive, watched_send)
            if not request.finished:
                # Returned without a complete response: the server answers 500 or cuts it.
                request.dropped = True


def _completes(message: Message) -> bool:
    """The message ends the response: its last body part (or a file sent whole)."""
    kind = message["type"]
    return (kind == "http.response.body" and not message.get("more_body", False)) or kind == "http.response.pathsend"
