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

from typing import Any, Awaitable, Callable, Iterable, MutableMapping, Unpack

from ._http import (
    KeyFunc,
    Limiting,
    Options,
    Request,
    client_ip,
    exempt,
    header,
    limited,
    mark_of,
    refusal_headers,
    user,
)
from .aio.guard import AsyncGuard
from .limit_types import Limit

__all__ = ["RateLimitMiddleware", "KeyFunc", "client_ip", "exempt", "header", "limited", "user"]

Scope = Request
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _route_mark(routes: Iterable[Any], scope: Scope) -> Any:
    """The mark (see :func:`~ratelimit_redis_module._http.mark_of`) of the route Starlette's
    router would pick for ``scope`` (the first that matches it fully, in a mount the first of
    its routes), or None."""
    for route in routes:
        matches = getattr(route, "matches", None)
        if matches is None:
            continue
        match, child = matches(scope)
        if getattr(match, "name", None) != "FULL":
            continue
        mark = mark_of(route)
        if mark is None:
            mark = mark_of(child.get("endpoint"))
        if mark is not None:
            return mark
        # A mount: the route its own router will pick, in the scope the mount hands it.
        inner = getattr(route, "routes", None)
        return _route_mark(inner, {**scope, **child}) if inner else None
    return None


class RateLimitMiddleware(Limiting[AsyncGuard]):
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
        setup_timeout: seconds a request waits for the setup (default 1), outside ``timeout``.
            The setup (the backend; the scripts loaded; a policy's rules on the module) starts
            when the middleware is made inside the running event loop (Starlette and FastAPI
            make it at the first ASGI call: the lifespan's startup), else at its first call;
            a request that comes while it runs waits for it. A setup that fails (Redis down) is
            tried again in the background, logged and counted (``stats.setup_failures``); the
            requests meanwhile fail open or closed as any other.
        x_ratelimit_reset: ``"delta"`` (default: ``X-RateLimit-Reset`` is the seconds until the
            key is fresh again, ceil(reset_after_ms / 1000)) or ``"epoch"`` (that instant in
            seconds since the Unix epoch, rounded up, as express-rate-limit's legacy field and
            GitHub's; the same instant while the denial memory answers); anything else raises
            ``ValueError`` when the middleware is made.

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
        guard: AsyncGuard | None = None,
        **options: Unpack[Options],
    ) -> None:
        self.app = app
        super().__init__(redis, limit, guard, options)

    def _new_guard(self, redis: Any, limit: Limit, timeout: float, **options: Any) -> AsyncGuard:
        return AsyncGuard(redis, limit, timeout=timeout, **options)

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

    def _find_mark(self, scope: Scope) -> Any:
        """The mark of the route the application will pick for ``scope``, or None."""
        # The application being served: Starlette puts itself in the scope before its
        # middleware runs; this middleware may also wrap it directly.
        for app in (scope.get("app"), self.app):
            routes = getattr(getattr(app, "router", None), "routes", None)
            if routes is not None:
                return _route_mark(routes, scope)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The setup, if the middleware was made outside the event loop: at the lifespan's
        # startup, before the first request (a no-op once started or done).
        self.guard.limiter._setup.start()
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._at_shutdown(send))
            return
        guard = self._guard_for(scope, lambda: self._find_mark(scope)) if scope["type"] == "http" else None
        terms = self._terms(scope) if guard is not None else None
        if guard is None or terms is None:
            await self.app(scope, receive, send)
            return
        identity, cost, shadow = terms
        async with guard.in_flight(identity, cost, shadow=shadow) as request:
            verdict = request.verdict
            extra = _raw(verdict.headers)
            if not verdict.allowed:
                await send({
                    "type": "http.response.start",
                    "status": verdict.status,
                    "headers": _raw(refusal_headers(verdict)),
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


def _raw(fields: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """Header fields as ASGI sends them: bytes."""
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in fields]


def _completes(message: Message) -> bool:
    """The message ends the response: its last body part (or a file sent whole)."""
    kind = message["type"]
    return (kind == "http.response.body" and not message.get("more_body", False)) or kind == "http.response.pathsend"
