"""A route's own limit, over real HTTP (issue 29): ``@limited(limit)`` on an endpoint, as
slowapi's ``@limiter.limit(...)``: the middleware checks that route's requests against its own
limit, on keys of its own, and the other routes against the middleware's; a route in a mount;
two routes under one name sharing their keys; the headers naming the route's limit; exempt
beside them."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, T0_MS, Server
from ratelimit_redis_module import GCRA, FixedWindow, RateLimitMiddleware, Stats, exempt, header, limited


def test_a_route_with_its_own_limit(server: Server, serve: Any) -> None:
    server.freeze(T0_MS)
    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    @app.get("/search")
    @limited(GCRA(3, 1, "1m"))
    async def search() -> PlainTextResponse:
        return PlainTextResponse("found")

    @limited(FixedWindow(2, "1h"), name="export")
    @app.get("/export/{what}")
    async def export(what: str) -> PlainTextResponse:
        return PlainTextResponse(what)

    @app.get("/export-all")
    @limited(FixedWindow(2, "1h"), name="export")
    async def export_all() -> PlainTextResponse:
        return PlainTextResponse("all")

    @app.get("/health")
    @exempt
    async def health() -> PlainTextResponse:
        return PlainTextResponse("ok")

    tools = FastAPI()

    @tools.get("/slow")
    @limited(GCRA(1, 1, "1h"), name="slow")
    async def slow() -> PlainTextResponse:
        return PlainTextResponse("slow")

    app.mount("/tools", tools)
    stats = Stats()
    app.add_middleware(
        RateLimitMiddleware, redis=redis.asyncio.Redis(host="127.0.0.1", port=server.port), limit=GCRA(1, 1, "1m"),
        key=header("x-client-id"), stats=stats, timeout=PATIENT, setup_timeout=PATIENT,
    )
    http = serve(app)
    who = {"X-Client-Id": "ann"}
    # The middleware's own limit: one request a minute, on "/".
    assert http.get("/", headers=who)[0] == 200
    assert http.get("/", headers=who)[0] == 429
    # The search route's: 3 at once, whatever "/" has spent; named after its endpoint.
    statuses = []
    for _ in range(4):
        status, fields, _ = http.get("/search", headers=who)
        statuses.append(status)
        assert dict(fields)["ratelimit-policy"].startswith('"search";q=3'), fields
    assert statuses == [200, 200, 200, 429]
    # Two routes under one name and limit share their keys: 2 in all.
    assert [http.get(p, headers=who)[0] for p in ("/export/a", "/export-all", "/export/b")] == [200, 200, 429]
    # A mount's route; an exempt route untouched; another caller has its own keys.
    assert [http.get("/tools/slow", headers=who)[0] for _ in range(2)] == [200, 429]
    assert http.get("/health", headers=who)[0] == 200
    assert http.get("/search", headers={"X-Client-Id": "bob"})[0] == 200
    with server.client() as c:
        keys = sorted(k.decode() for k in c.keys("rl:http:*"))
    assert keys == ["rl:http:ann", "rl:http:export:ann", "rl:http:search:ann", "rl:http:search:bob",
                    "rl:http:slow:ann"]
    assert (stats.admitted, stats.denied + stats.remembered) == (8, 4)  # one stats for every route


def test_limited_needs_a_name_it_can_give() -> None:
    with pytest.raises(TypeError, match="name="):
        limited(GCRA(1, 1, "1s"))(object())
