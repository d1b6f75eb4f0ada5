"""Adaptive concurrency (issue 26): the ADAPTIVE words a Concurrency limit sends, a release's RTT
and DROPPED moving the module's limit exactly, and the guards and the middleware releasing each
request's lease with its measured latency, DROPPED on a 5xx, an exception, a cancellation or a
client gone away, and refusing with a 503 (load shedding). Against a real server with the
module and its debug clock: latencies come from a FakeTime the handlers advance."""

from __future__ import annotations

import asyncio
import math
import re
import socket
import time
from datetime import timedelta
from typing import Any, Callable

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, ROOT, FakeTime, Server
from ratelimit_redis_module import (
    PROBLEM_JSON,
    AsyncGuard,
    AsyncRateLimiter,
    Concurrency,
    Guard,
    RateLimiter,
    RateLimitMiddleware,
    header,
    load_shed_body,
    rtt_us,
)

AIMD = Concurrency(4, "30s", adaptive="aimd", min=1, max=10)
SHED_BODY = (
    b'{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",'
    b'"title":"Request cannot be satisfied due to temporary server capacity constraints",'
    b'"status":503,"detail":"load shedding: the server is at its adaptive concurrency limit",'
    b'"violated-policies":["default"]}'
)


class Recording:
    """A redis-py client that keeps the words of every command sent through it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.sent: list[list[str]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append([a.decode() if isinstance(a, bytes) else str(a) for a in args])
        return self.client.execute_command(*args, **options)


def fields(q: int, r: int, reset: int, t: int | None = None) -> list[tuple[str, str]]:
    """An adaptive limit's fields: a concurrency limit's, its current limit as q; on a refusal
    t and Retry-After."""
    return [
        ("ratelimit-policy", f'"default";q={q};qu="concurrent-requests"'),
        ("ratelimit", f'"default";r={r}' + ("" if t is None else f";t={t}")),
        ("x-ratelimit-limit", str(q)),
        ("x-ratelimit-remaining", str(r)),
        ("x-ratelimit-reset", str(reset)),
    ] + ([] if t is None else [("retry-after", str(t))])


def inspect_key(server: Server, key: str) -> dict[str, str]:
    with server.client(decode_responses=True) as c:
        reply = c.execute_command("RL.INSPECT", key)
    # A map in RESP3, pairs in RESP2; values as text, as redis-cli shows them.
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2])
    return {k: str(v) for k, v in pairs}


def released(server: Server, key: str) -> dict[str, str]:
    """RL.INSPECT of ``key`` once it holds no lease. The middleware releases a lease after the
    application returns, which is after the client has its whole response: wait for it."""
    deadline = time.monotonic() + 10
    while True:
        state = inspect_key(server, key)
        if state["held"] == "0":
            return state
        assert time.monotonic() < deadline, f"{key}: the lease was not released"
        time.sleep(0.005)


# --- The words sent -------------------------------------------------------------------------


def test_concurrency_sends_adaptive_words_after_limit_and_lease() -> None:
    assert Concurrency(20, "30s").args() == ["20", "30s"]
    assert Concurrency(20, "30s", adaptive="gradient2").args() == ["20", "30s", "ADAPTIVE", "GRADIENT2"]
    assert Concurrency(4, "30s", adaptive="AIMD", min=1, max=10).args() == [
        "4", "30s", "ADAPTIVE", "AIMD", "MIN", "1", "MAX", "10",
    ]
    assert Concurrency(4, timedelta(seconds=2), adaptive="Vegas", max=8).args() == [
        "4", "2000", "ADAPTIVE", "VEGAS", "MAX", "8",
    ]
    assert Concurrency(4, "1s", adaptive="vegas", min=3).args() == ["4", "1s", "ADAPTIVE", "VEGAS", "MIN", "3"]
    # Any case in, lower case kept: equal limits compare equal.
    assert Concurrency(4, "30s", adaptive="AIMD", min=1, max=10) == AIMD
    assert AIMD.adaptive == "aimd"
    with pytest.raises(AttributeError):
        AIMD.limit = 5  # type: ignore[misc]


@pytest.mark.parametrize(("options", "error"), [
    ({"adaptive": "gradient"}, "invalid adaptive 'gradient': expected one of 'aimd', 'vegas', 'gradient2'"),
    ({"adaptive": ""}, "invalid adaptive ''"),
    ({"min": 2}, "min and max bound an adaptive limit: give them with adaptive="),
    ({"max": 2}, "min and max bound an adaptive limit"),
    ({"adaptive": "aimd", "min": 0}, "invalid min 0: expected an int of 1 or more"),
    ({"adaptive": "aimd", "max": -1}, "invalid max -1"),
    ({"adaptive": "aimd", "min": 2.5}, "invalid min 2.5"),
    ({"adaptive": "aimd", "max": True}, "invalid max True"),
    ({"adaptive": "aimd", "min": 11, "max": 10}, "min 11 is above max 10"),
])
def test_concurrency_refuses_bad_adaptive_options(options: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(")):
        Concurrency(4, "30s", **options)


def test_acquire_and_release_send_the_exact_words(server: Server) -> None:
    recording = Recording(server.client(decode_responses=True))
    rl = RateLimiter(recording, backend="module")  # auto would ask COMMAND INFO first
    assert rl.acquire("k", 4, "30s", token="a", adaptive="Aimd", min=1, max=10).allowed
    assert rl.acquire("k", 4, "30s", token="b", adaptive="aimd", min=1, max=10).allowed
    assert rl.release("k", "a", rtt=0.0123456) is True
    assert rl.release("k", "b", rtt=timedelta(milliseconds=3), dropped=True) is True
    assert rl.release("k", "b", dropped=True) is False
    assert rl.release("k", "c") is False
    with pytest.raises(ValueError, match="min 3 is above max 2"):
        rl.acquire("k", 4, "30s", adaptive="aimd", min=3, max=2)
    assert recording.sent == [
        ["RL.CONCURRENCY.ACQUIRE", "k", "4", "30s", "ADAPTIVE", "AIMD", "MIN", "1", "MAX", "10", "ID", "a"],
        ["RL.CONCURRENCY.ACQUIRE", "k", "4", "30s", "ADAPTIVE", "AIMD", "MIN", "1", "MAX", "10", "ID", "b"],
        ["RL.CONCURRENCY.RELEASE", "k", "a", "RTT", "12346us"],
        ["RL.CONCURRENCY.RELEASE", "k", "b", "RTT", "3000us", "DROPPED"],
        ["RL.CONCURRENCY.RELEASE", "k", "b", "DROPPED"],
        ["RL.CONCURRENCY.RELEASE", "k", "c"],
    ]


def test_rtt_is_whole_microseconds_at_least_one() -> None:
    assert rtt_us(0.25) == 250_000
    assert rtt_us(2) == 2_000_000
    assert rtt_us(0.0000014) == 1
    assert rtt_us(0.0000016) == 2
    assert rtt_us(0) == 1
    assert rtt_us(0.0) == 1
    assert rtt_us(timedelta(microseconds=2350)) == 2350
    assert rtt_us(timedelta(0)) == 1
    for bad, error in [(-0.001, ValueError), (math.nan, ValueError), (math.inf, ValueError),
                       (timedelta(microseconds=-5), ValueError), (True, TypeError), ("250ms", TypeError)]:
        with pytest.raises(error):
            rtt_us(bad)


# --- The module's limit, moved by releases --------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
def test_releases_move_an_aimd_limit_exactly(server: Server, protocol: int) -> None:
    """AIMD from 4 (MIN 1, MAX 10): a release that saw 2 in flight (2 * 2 >= 4) grows it to 5;
    a DROPPED one backs off to int(5 * 0.9) = 4."""
    rl = RateLimiter(server.client(protocol=protocol))
    first = rl.acquire("jobs", 4, "30s", adaptive="aimd", min=1, max=10)
    second = rl.acquire("jobs", 4, "30s", adaptive="aimd", min=1, max=10)
    assert (first.limit, first.remaining, second.limit, second.remaining) == (4, 3, 4, 2)
    assert second.token is not None and first.token is not None
    assert rl.release("jobs", second.token, rtt=0.010) is True
    third = rl.acquire("jobs", 4, "30s", adaptive="aimd", min=1, max=10)
    assert (third.allowed, third.limit, third.remaining) == (True, 5, 3)
    assert third.token is not None
    assert rl.release("jobs", third.token, rtt=0.010, dropped=True) is True
    assert inspect_key(server, "jobs")["limit"] == "4"
    assert rl.acquire("jobs", 4, "30s", adaptive="aimd", min=1, max=10).limit == 4
    # A key that is not adaptive takes RTT and DROPPED and ignores them.
    plain = rl.acquire("plain", 2, "30s")
    assert plain.token is not None
    assert rl.release("plain", plain.token, rtt=5.0, dropped=True) is True
    assert rl.acquire("plain", 2, "30s").limit == 2


async def test_asyncio_releases_move_an_aimd_limit_exactly(server: Server) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    try:
        rl = AsyncRateLimiter(client)
        await rl.acquire("jobs", 4, "30s", adaptive="aimd", min=1, max=10)
        second = await rl.acquire("jobs", 4, "30s", adaptive="AIMD", min=1, max=10)
        assert second.token is not None
        assert await rl.release("jobs", second.token, rtt=timedelta(milliseconds=10)) is True
        third = await rl.check(AIMD, "jobs")
        assert (third.limit, third.remaining) == (5, 3)
        assert third.token is not None
        assert await rl.release("jobs", third.token, dropped=True) is True
        assert (await rl.check(AIMD, "jobs", dryrun=True)).limit == 4
    finally:
        await client.aclose()


# --- The guards -----------------------------------------------------------------------------


def test_guard_in_flight_releases_with_the_measured_latency(server: Server) -> None:
    """The block's latency on the guard's clock (a FakeTime moved 250 ms inside it): GRADIENT2's
    short RTT is that sample, exactly."""
    clock = FakeTime(server)
    recording = Recording(server.client())
    guard = Guard(recording, Concurrency(4, "30s", adaptive="gradient2"), prefix="g:", clock=clock)
    assert guard.adaptive and guard.concurrent
    with guard.in_flight("svc") as request:
        assert request.verdict.allowed and request.verdict.lease is not None
        assert (request.verdict.status, request.verdict.headers) == (200, fields(4, 3, 30))
        clock.advance(250)
        request.status = 200
    assert request.rtt == pytest.approx(0.25)
    assert recording.sent[-1] == ["RL.CONCURRENCY.RELEASE", "g:svc", request.verdict.lease, "RTT", "250000us"]
    state = inspect_key(server, "g:svc")
    assert (state["adaptive"], state["held"], state["short_rtt_us"]) == ("gradient2", "0", "250000")
    # done() ends the latency where the response is complete: later work does not count.
    with guard.in_flight("svc") as request:
        clock.advance(40)
        request.done()
        clock.advance(500)
    assert inspect_key(server, "g:svc")["short_rtt_us"] == "40000"


async def test_async_guard_in_flight_releases_with_the_measured_latency(server: Server) -> None:
    clock = FakeTime(server)
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    try:
        guard = AsyncGuard(client, Concurrency(4, "30s", adaptive="gradient2"), prefix="g:", clock=clock,
                           timeout=PATIENT, setup_timeout=PATIENT)
        async with guard.in_flight("svc") as request:
            assert (request.verdict.allowed, request.verdict.headers) == (True, fields(4, 3, 30))
            clock.advance(125)
        assert request.rtt == pytest.approx(0.125)
        assert inspect_key(server, "g:svc")["short_rtt_us"] == "125000"
    finally:
        await client.aclose()


def test_guard_in_flight_drops_on_5xx_and_exceptions(server: Server) -> None:
    guard = Guard(server.client(), AIMD, prefix="a:")
    with guard.in_flight("svc") as request:
        request.status = 200
    assert inspect_key(server, "a:svc")["limit"] == "4"  # 1 in flight of 4: no growth
    with guard.in_flight("svc") as request:
        request.status = 503
    assert inspect_key(server, "a:svc")["limit"] == "3"  # int(4 * 0.9)
    # An exception leaving the block (a timeout among them): int(3 * 0.9), then int(2 * 0.9),
    # which is MIN.
    for error, limit in ((RuntimeError("boom"), "2"), (TimeoutError(), "1")):
        with pytest.raises(type(error)), guard.in_flight("svc"):
            raise error
        assert inspect_key(server, "a:svc")["limit"] == limit


async def test_async_guard_in_flight_drops_on_exception_and_cancellation(server: Server) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    try:
        guard = AsyncGuard(client, AIMD, prefix="a:", timeout=PATIENT, setup_timeout=PATIENT)
        with pytest.raises(asyncio.TimeoutError):
            async with guard.in_flight("svc"):
                await asyncio.wait_for(asyncio.Event().wait(), 0.001)
        assert inspect_key(server, "a:svc")["limit"] == "3"

        entered = asyncio.Event()

        async def serve() -> None:
            async with guard.in_flight("svc"):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(serve())
        await entered.wait()
        assert inspect_key(server, "a:svc")["held"] == "1"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        state = inspect_key(server, "a:svc")
        assert (state["held"], state["limit"]) == ("0", "2")
        async with guard.in_flight("svc") as request:
            request.dropped = True  # overload the application saw itself
        assert inspect_key(server, "a:svc")["limit"] == "1"
    finally:
        await client.aclose()


def test_a_plain_concurrency_lease_is_released_plainly(server: Server) -> None:
    """No RTT nor DROPPED for a limit that is not adaptive (the module would ignore them, and a
    module without adaptive limits refuses them); its refusal stays a 429."""
    recording = Recording(server.client())
    guard = Guard(recording, Concurrency(1, "30s"), prefix="p:")
    with pytest.raises(RuntimeError), guard.in_flight("svc") as request:
        assert guard.check("svc").status == 429
        raise RuntimeError
    assert recording.sent[-1] == ["RL.CONCURRENCY.RELEASE", "p:svc", request.verdict.lease]


def check_refusals(verdicts: Callable[[], Any], clock: FakeTime) -> None:
    """Two refusals of an adaptive limit at its limit of 1, 29.5 s apart: 503, Retry-After
    rounded up, the load-shedding body, the fields of the limit now."""
    v = verdicts()
    assert (v.allowed, v.status, v.headers, v.body, v.lease) == (False, 503, fields(1, 0, 30, t=30), SHED_BODY, None)
    assert v.decision is not None and v.decision.retry_after_ms == 30_000
    clock.advance(29_500)
    v = verdicts()
    assert (v.status, v.headers, v.body) == (503, fields(1, 0, 1, t=1), SHED_BODY)


def test_an_adaptive_refusal_is_a_503_with_retry_after(server: Server) -> None:
    clock = FakeTime(server)
    guard = Guard(server.client(), Concurrency(1, "30s", adaptive="aimd", min=1, max=10), clock=clock)
    with guard.in_flight("svc") as held:
        assert held.verdict.allowed
        check_refusals(lambda: guard.check("svc"), clock)
    assert (guard.stats.admitted, guard.stats.denied, guard.stats.remembered) == (1, 2, 0)
    assert load_shed_body("default") == SHED_BODY


async def test_an_async_adaptive_refusal_is_a_503_with_retry_after(server: Server) -> None:
    clock = FakeTime(server)
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    try:
        guard = AsyncGuard(client, Concurrency(1, "30s", adaptive="vegas", min=1, max=10), clock=clock,
                           timeout=PATIENT, setup_timeout=PATIENT)
        async with guard.in_flight("svc") as held:
            assert held.verdict.allowed
            first = await guard.check("svc")
            clock.advance(29_500)
            second = await guard.check("svc")
        for v, seconds in ((first, 30), (second, 1)):
            assert (v.allowed, v.status, v.headers, v.body) == (False, 503, fields(1, 0, seconds, t=seconds), SHED_BODY)
        assert (guard.stats.admitted, guard.stats.denied, guard.stats.remembered) == (1, 2, 0)
    finally:
        await client.aclose()


# --- The middleware -------------------------------------------------------------------------


def adaptive_app(server: Server, limit: Concurrency, clock: Callable[[], float] = time.monotonic,
                 time_: FakeTime | None = None) -> FastAPI:
    app = FastAPI()

    @app.get("/ok")
    async def ok() -> PlainTextResponse:
        if time_ is not None:
            time_.advance(250)
        return PlainTextResponse("hello")

    @app.get("/sleep")
    async def sleep() -> PlainTextResponse:
        await asyncio.sleep(0.05)
        return PlainTextResponse("slept")

    @app.get("/fail")
    async def fail() -> PlainTextResponse:
        return PlainTextResponse("overloaded", status_code=500)

    @app.get("/unavailable")
    async def unavailable() -> PlainTextResponse:
        raise HTTPException(503)

    @app.get("/raise")
    async def boom() -> PlainTextResponse:
        raise RuntimeError("boom")

    @app.get("/timeout")
    async def timeout() -> PlainTextResponse:
        await asyncio.wait_for(asyncio.Event().wait(), 0.001)
        return PlainTextResponse("never")

    @app.get("/wait-for-disconnect")
    async def wait(request: Request) -> PlainTextResponse:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        return PlainTextResponse("gone")

    app.add_middleware(RateLimitMiddleware, redis=redis.asyncio.Redis(host="127.0.0.1", port=server.port),
                       limit=limit, key=header("x-service"), prefix="mw:", timeout=PATIENT,
                       setup_timeout=PATIENT, clock=clock)
    return app


SVC = {"X-Service": "api"}


def test_middleware_releases_with_the_handlers_latency(server: Server, serve: Any) -> None:
    """The handler's duration, from just before it runs to the end of its response: the FakeTime
    it moves 250 ms (exactly), or a real 50 ms sleep on the default clock."""
    clock = FakeTime(server)
    http = serve(adaptive_app(server, Concurrency(4, "30s", adaptive="gradient2"), clock=clock, time_=clock))
    assert http.get("/ok", headers=SVC) == (
        200, [("content-length", "5"), ("content-type", "text/plain; charset=utf-8")] + fields(4, 3, 30), b"hello",
    )
    state = released(server, "mw:api")
    assert (state["short_rtt_us"], state["long_rtt_us"]) == ("250000", "250000")

    real = serve(adaptive_app(server, Concurrency(4, "30s", adaptive="gradient2")))
    assert real.get("/sleep", headers={"X-Service": "real"})[0] == 200
    short = int(released(server, "mw:real")["short_rtt_us"])
    assert 50_000 <= short < 5_000_000


@pytest.mark.parametrize(("path", "status"), [
    ("/fail", 500), ("/unavailable", 503), ("/raise", 500), ("/timeout", 500),
])
def test_middleware_drops_on_5xx_and_exceptions(server: Server, serve: Any, path: str, status: int) -> None:
    http = serve(adaptive_app(server, AIMD))
    assert http.get("/ok", headers=SVC)[0] == 200
    assert released(server, "mw:api")["limit"] == "4"  # one in flight of 4: no growth
    assert http.get(path, headers=SVC)[0] == status
    assert released(server, "mw:api")["limit"] == "3"  # int(4 * 0.9)


async def test_middleware_drops_a_cancelled_request(server: Server) -> None:
    entered = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        entered.set()
        await asyncio.Event().wait()

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    async def send(message: Any) -> None:
        raise AssertionError(f"nothing is sent: {message}")

    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    try:
        middleware = RateLimitMiddleware(app, redis=client, limit=AIMD, key=header("x-service"), prefix="mw:",
                                         timeout=PATIENT, setup_timeout=PATIENT)
        scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"x-service", b"api")]}
        task = asyncio.create_task(middleware(scope, receive, send))
        await entered.wait()
        assert inspect_key(server, "mw:api")["held"] == "1"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        state = inspect_key(server, "mw:api")
        assert (state["held"], state["limit"]) == ("0", "3")
    finally:
        await client.aclose()


def test_middleware_drops_when_the_client_goes_away(server: Server, serve: Any) -> None:
    http = serve(adaptive_app(server, AIMD))
    with socket.create_connection(("127.0.0.1", http.port), timeout=10) as s:
        s.sendall(b"GET /wait-for-disconnect HTTP/1.1\r\nHost: x\r\nX-Service: api\r\n\r\n")
        deadline = time.monotonic() + 10
        while server.client().exists("mw:api") == 0 or inspect_key(server, "mw:api")["held"] != "1":
            assert time.monotonic() < deadline, "the request never took its lease"
            time.sleep(0.01)
    # Closed before any response: released with DROPPED once the handler has seen it.
    assert released(server, "mw:api")["limit"] == "3"


def test_middleware_refuses_with_a_503_and_retry_after(server: Server, serve: Any) -> None:
    import threading

    gate = threading.Event()
    limit = Concurrency(1, "30s", adaptive="aimd", min=1, max=10)
    app = adaptive_app(server, limit)

    @app.get("/slow")
    async def slow() -> PlainTextResponse:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return PlainTextResponse("hello")

    http = serve(app)
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(http.get("/slow", headers=SVC)))
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while server.client().exists("mw:api") == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # At its limit of 1 (the clock frozen: the lease ends in 30 s): load shed, not a quota.
        assert http.get("/ok", headers=SVC) == (503, fields(1, 0, 30, t=30) + [
            ("content-type", PROBLEM_JSON), ("content-length", str(len(SHED_BODY))),
        ], SHED_BODY)
    finally:
        gate.set()
        worker.join(10)
    assert first[0][0] == 200
    released(server, "mw:api")
    assert http.get("/ok", headers=SVC)[0] == 200


def test_the_readme_example(server: Server, serve: Any) -> None:
    """The package README's Adaptive concurrency app, served against a real server."""
    readme = (ROOT / "clients" / "python" / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if 'adaptive="gradient2"' in b]
    assert len(blocks) == 1
    # The test's server, and timeouts a loaded test machine cannot miss (the page's default 50 ms
    # would fail the request open now and then): conftest's PATIENT.
    url = 'redis="redis://127.0.0.1:6379",'
    assert url in blocks[0]
    patient = f"timeout={PATIENT}, setup_timeout={PATIENT},"
    code = blocks[0].replace(url, f'redis="redis://127.0.0.1:{server.port}", {patient}')
    namespace: dict[str, Any] = {"__name__": "readme_app"}
    exec(compile(code, "README.md", "exec"), namespace)
    http = serve(namespace["app"])
    status, got, body = http.get("/items/7")
    assert (status, body) == (200, b'{"item":7}')
    assert ("ratelimit-policy", '"default";q=20;qu="concurrent-requests"') in got
    state = released(server, "rl:http:api")
    assert (state["adaptive"], state["min"], state["max"]) == ("gradient2", "4", "200")
