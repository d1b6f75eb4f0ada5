"""Requests the middleware lets through untouched, over real HTTP: a route marked with
``exempt`` (slowapi's ``@limiter.exempt``), above or below its route's decorator, with path
parameters, in a mount or a whole mounted app; and those ``skip(scope)`` names
(express-rate-limit's ``skip``). No check, no headers, no round trip; every other request
limited as before."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, Server
from ratelimit_redis_module import GCRA, RateLimitMiddleware, Stats, exempt, header


def limited(response: tuple[int, list[tuple[str, str]], bytes]) -> bool:
    """The response carries the rate-limit fields."""
    return any(name in ("ratelimit", "ratelimit-policy") for name, _ in response[1])


def test_exempt_routes_and_skipped_requests_pass_untouched(server: Server, serve: Any) -> None:
    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    @exempt
    @app.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/items/{item}")
    @exempt
    async def item(item: int) -> dict[str, int]:
        return {"item": item}

    @app.post("/items/{item}")
    async def change(item: int) -> dict[str, int]:
        return {"changed": item}

    internal = FastAPI()

    @internal.get("/stats")
    async def internal_stats() -> PlainTextResponse:
        return PlainTextResponse("stats")

    tools = FastAPI()

    @tools.get("/open")
    @exempt
    async def tools_open() -> PlainTextResponse:
        return PlainTextResponse("open")

    @tools.get("/closed")
    async def tools_closed() -> PlainTextResponse:
        return PlainTextResponse("closed")

    app.mount("/internal", exempt(internal))
    app.mount("/tools", tools)
    stats = Stats()
    app.add_middleware(
        RateLimitMiddleware, redis=redis.asyncio.Redis(host="127.0.0.1", port=server.port), limit=GCRA(1, 1, "1m"),
        key=header("x-client-id"), stats=stats, skip=lambda scope: (b"x-internal", b"1") in scope["headers"],
        timeout=PATIENT, setup_timeout=PATIENT,  # what is checked is which requests are: a slow one must not fail
    )
    http = serve(app)
    who = {"X-Client-Id": "ann"}
    first = http.get(headers=who)
    assert first[0] == 200 and limited(first)
    assert http.get(headers=who)[0] == 429
    calls = server.calls("rl.gcra")
    for path, body in [("/health", b"ok"), ("/items/7", b'{"item":7}'), ("/internal/stats", b"stats"),
                       ("/tools/open", b"open")]:
        for _ in range(3):
            status, fields, got = http.get(path, headers=who)
            assert (status, got, limited((status, fields, got))) == (200, body, False), path
    # Skipped: a request of an internal caller, on any route.
    status, fields, got = http.get("/", headers={**who, "X-Internal": "1"})
    assert (status, got, limited((status, fields, got))) == (200, b"hello", False)
    assert server.calls("rl.gcra") == calls
    assert (stats.round_trips, stats.admitted, stats.denied, stats.remembered) == (2, 1, 1, 0)
    # The same path under another method, a mount's other route and a path no route has are
    # limited (refused from the denial memory).
    assert http.request("POST", "/items/7", headers=who)[0] == 429
    assert http.get("/tools/closed", headers=who)[0] == 429
    assert http.get("/nowhere", headers=who)[0] == 429
    assert stats.remembered == 3


def test_exempt_routes_of_an_app_the_middleware_wraps_directly(server: Server, serve: Any) -> None:
    """RateLimitMiddleware(app, ...) served as it is: the scope has no app yet when the
    middleware runs; it looks the route up in the app it wraps."""
    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    @app.get("/health")
    @exempt
    async def health() -> PlainTextResponse:
        return PlainTextResponse("ok")

    http = serve(RateLimitMiddleware(app, redis=redis.asyncio.Redis(host="127.0.0.1", port=server.port),
                                     limit=GCRA(1, 1, "1m"), key=header("x-client-id"), timeout=PATIENT,
                                     setup_timeout=PATIENT))
    who = {"X-Client-Id": "bo"}
    assert [http.get(headers=who)[0] for _ in range(2)] == [200, 429]
    assert [http.get("/health", headers=who)[0] for _ in range(2)] == [200, 200]


def test_exempt_needs_something_that_takes_an_attribute() -> None:
    with pytest.raises(TypeError, match="cannot mark 7 as exempt: it takes no attributes"):
        exempt(7)
