"""Redis down, then back: the server stopped by its PID, then started again on the same port.
A limiter sits on the request path: while Redis refuses connections a request must fail fast
(open or closed, as configured), and once Redis is back the very next request must be limited
again. Measured with the package's own counters (``stats.timeouts``: a failure that is not one
ended before the timeout), never with sleeps."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from conftest import Server
from ratelimit_redis_module import GCRA, Guard, RateLimitMiddleware, Stats, client_from_url, header

WHO = {"X-Client-Id": "ada"}


def app_for(client: Any, stats: Stats, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    app.add_middleware(RateLimitMiddleware, redis=client, limit=GCRA(5, 10, "1m"), key=header("x-client-id"),
                       stats=stats, **options)
    return app


def ratelimit(response: tuple[int, list[tuple[str, str]], bytes]) -> str | None:
    """The RateLimit field, if the response has one (a request that was limited)."""
    return dict(response[1]).get("ratelimit")


def test_redis_pys_default_client_pays_the_whole_timeout_while_redis_is_down(server: Server, serve: Any) -> None:
    """What the manual used to recommend, redis.asyncio.Redis(host=...): redis-py retries a
    refused connection 10 times with back-off, so every request waits out the 50 ms."""
    stats = Stats()
    http = serve(app_for(redis.asyncio.Redis(host="127.0.0.1", port=server.port), stats))
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'
    server.stop()
    for _ in range(3):
        assert http.get(headers=WHO) == (200, [("content-length", "5"), ("content-type", "text/plain; charset=utf-8")],
                                         b"hello")
    assert (stats.failures, stats.fail_open, stats.timeouts) == (3, 3, 3)
    server.restart()
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'
    assert stats.failures == 3


def test_a_client_with_no_retry_fails_the_first_request_after_a_restart(server: Server, serve: Any) -> None:
    """What the manual recommended next, retry=Retry(NoBackoff(), 0): it fails at once while
    Redis is down, but the first request after Redis is back fails too, on the pooled
    connection the old server closed."""
    stats = Stats()
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, retry=Retry(NoBackoff(), 0))
    http = serve(app_for(client, stats))
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'
    server.restart()
    assert ratelimit(http.get(headers=WHO)) is None
    assert (stats.failures, stats.timeouts) == (1, 0)
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_the_packages_client_fails_at_once_and_recovers_as_soon_as_redis_is_back(
    server: Server, serve: Any, fail_open: bool
) -> None:
    """The middleware given a URL makes its client with async_client_from_url. Its timeout is
    1 s here, so that a slow first connection cannot fail a request: not one of those made
    while Redis is down waits for it, and together they take less than 50 ms each."""
    stats = Stats()
    http = serve(app_for(f"redis://127.0.0.1:{server.port}", stats, fail_open=fail_open, timeout=1.0))
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'
    # Restarted with no request in between: the first request finds its pooled connection
    # closed by the old server, and is retried at once on a new one.
    server.restart()
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'
    assert stats.failures == 0

    server.stop()
    start = time.monotonic()
    for _ in range(20):
        response = http.get(headers=WHO)
        assert (response[0], ratelimit(response)) == (200 if fail_open else 503, None)
    elapsed = time.monotonic() - start
    # Not one request waited for the timeout; and loosely, by the clock, 20 requests over
    # HTTP took less than 50 ms each.
    assert (stats.failures, stats.timeouts) == (20, 0)
    assert (stats.fail_open, stats.fail_closed) == ((20, 0) if fail_open else (0, 20))
    assert elapsed < 20 * 0.05

    server.restart()
    assert ratelimit(http.get(headers=WHO)) == '"default";r=4;t=6'
    assert stats.failures == 20


def test_the_sync_guard_on_the_packages_client_fails_at_once_and_recovers(server: Server) -> None:
    """The sync guard's only bound is its client's socket timeout: with redis-py's default
    client a check lasts seconds while Redis refuses connections (10 retries with back-off);
    with client_from_url it fails at once."""
    guard = Guard(client_from_url(f"redis://127.0.0.1:{server.port}"), GCRA(5, 10, "1m"))
    assert guard.check("ada").source == "redis"
    server.restart()
    assert (guard.check("ada").source, guard.stats.failures) == ("redis", 0)
    server.stop()
    start = time.monotonic()
    assert [guard.check("ada").source for _ in range(5)] == ["failure"] * 5
    assert (guard.stats.failures, guard.stats.timeouts) == (5, 0)
    assert time.monotonic() - start < 5 * 0.05
    server.restart()
    verdict = guard.check("ada")
    assert (verdict.source, verdict.headers[1]) == ("redis", ("ratelimit", '"default";r=4;t=6'))
    # A URL makes the same client.
    url_guard = Guard(f"redis://127.0.0.1:{server.port}", GCRA(5, 10, "1m"), prefix="url:")
    assert url_guard.check("ada").source == "redis"
