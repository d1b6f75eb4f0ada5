"""slowapi on the module, over real HTTP (docs/limits.md): a FastAPI app whose slowapi
``Limiter`` takes ``ratelimit+redis://`` as its storage URI, with slowapi's own pieces
(``default_limits`` through ``SlowAPIMiddleware``, ``@limiter.limit("2/minute")`` with its own
key function, ``exempt_when``, ``@limiter.exempt``, ``_rate_limit_exceeded_handler`` for the
429, its ``X-RateLimit-*`` and ``Retry-After`` headers), under each of limits' three
strategies, on the module and on the script backend. uvicorn on loopback; one fake clock (the
debug clock, the scripts' ``NOW``, ``time.time`` for slowapi and limits); the headers exactly
as slowapi computes them from limits' answers (``X-RateLimit-Reset`` = 1 + the reset time, a
float; ``Retry-After`` = int(that - now)).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.middleware import SlowAPIMiddleware
from slowapi.util import get_remote_address

import ratelimit_redis_module.limits_storage  # noqa: F401  (registers the schemes)
from conftest import Server
from limits_apps import STRATEGIES, end_windows, fields_for, first_resets, limited, on_clock, storage_uri
from test_limits_storage import A, Clock


def make_app(uri: str, strategy: str) -> tuple[FastAPI, Limiter]:
    limiter = Limiter(
        key_func=get_remote_address, storage_uri=uri, strategy=strategy, headers_enabled=True,
        default_limits=["3/minute"],
    )
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
    app.add_middleware(SlowAPIMiddleware)

    @app.get("/")
    async def root(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    @app.get("/search")
    @limiter.limit("2/minute", key_func=lambda request: request.headers.get("x-api-key", "anonymous"))
    async def search(request: Request) -> PlainTextResponse:
        return PlainTextResponse("found")

    @app.get("/admin")
    @limiter.limit("1/minute", exempt_when=lambda request: request.headers.get("x-admin") == "yes")
    async def admin(request: Request) -> PlainTextResponse:
        return PlainTextResponse("admin")

    @app.get("/health")
    @limiter.exempt
    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return app, limiter


def expect(limit: int, remaining: int, reset: float) -> dict[str, str]:
    """slowapi's headers for limits' window stats (reset time, remaining)."""
    return fields_for(limit, remaining, 1 + reset)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_slowapi_app(
    strategy: str, backend: tuple[str, Server], monkeypatch: pytest.MonkeyPatch, serve: Any
) -> None:
    clock = Clock(monkeypatch, [backend[1]])
    app, limiter = make_app(storage_uri(backend), strategy)
    storage = on_clock(limiter._storage, clock)
    http = serve(app)

    # default_limits through the middleware: 3 a minute per address.
    since = time.monotonic()
    for left in (2, 1, 0):
        assert limited(http, "/") in [(200, expect(3, left, r), b"hello") for r in first_resets(strategy, since)]
    status, fields, body = limited(http, "/")
    assert status == 429
    assert json.loads(body) == {"error": "Rate limit exceeded: 3 per 1 minute"}

    # A route's own limit and key function, and the 429 handler's headers.
    for key in ("k1", "k2"):
        assert [limited(http, "/search", {"x-api-key": key})[0] for _ in range(2)] == [200, 200]
        status, fields, body = limited(http, "/search", {"x-api-key": key})
        assert status == 429 and fields in [expect(2, 0, r) for r in first_resets(strategy, since)]
        assert json.loads(body) == {"error": "Rate limit exceeded: 2 per 1 minute"}

    # exempt_when: the admin header passes without counting; others get 1 a minute.
    assert [limited(http, "/admin", {"x-admin": "yes"})[0] for _ in range(3)] == [200, 200, 200]
    assert [limited(http, "/admin")[0] for _ in range(2)] == [200, 429]

    # @limiter.exempt: never limited, no headers.
    assert [limited(http, "/health") for _ in range(5)] == [(200, {}, b"ok")] * 5

    clock.advance(80_000)
    # Fresh keys, which Redis would have expired (all four; the sliding window's estimates of
    # 3 and 2 hits are 2 and 1 still, so only "/admin"'s single hit is gone); the fixed window's
    # are its real TTLs, ended by an event.
    assert clock.expire(storage) + end_windows(storage) == (1 if strategy == "sliding-window-counter" else 4)
    since = time.monotonic()
    status, fields, _ = limited(http, "/")
    assert status == 200 and fields in [expect(3, {"sliding-window-counter": 0}.get(strategy, 2), r) for r in {
        "fixed-window": first_resets(strategy, since, A + 80), "moving-window": {A + 140},
        "sliding-window-counter": {A + 80 + 40 % 20},
    }[strategy]]
    assert storage.reset() == (3 if strategy == "sliding-window-counter" else 1)
