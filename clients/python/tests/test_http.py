"""The ASGI middleware over real HTTP: uvicorn serving a FastAPI app on loopback, Redis with
the debug clock frozen, every header asserted exactly."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    UNAVAILABLE_BODY,
    AsyncGuard,
    Decision,
    Guard,
    FixedWindow,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    SlidingLog,
    Stats,
    Warmup,
    client_ip,
    header,
    quota_exceeded_body,
    rate_limit_headers,
)

MIDNIGHT_MS = 1_699_920_000_000
PLAIN = [("content-length", "5"), ("content-type", "text/plain; charset=utf-8")]
PROBLEM = "application/problem+json"
QUOTA_BODY = (
    b'{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",'
    b'"title":"Request cannot be satisfied as assigned quota has been exceeded",'
    b'"status":429,"violated-policies":["default"]}'
)


def cost_header(scope: Any) -> int:
    for name, value in scope["headers"]:
        if name == b"x-cost":
            return int(value)
    return 1


def app_for(server: Server, patient: bool = True, **options: Any) -> FastAPI:
    """The app, limited by the middleware with ``options``; with conftest's PATIENT for its
    timeouts unless the test sets its own, or keeps the package's defaults (``patient=False``)."""
    app = FastAPI()

    @app.get("/")
    async def root(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    protocol = options.pop("protocol", 2)
    options.setdefault("redis", redis.asyncio.Redis(host="127.0.0.1", port=server.port, protocol=protocol))
    if patient:
        options.setdefault("timeout", PATIENT)
        options.setdefault("setup_timeout", PATIENT)
    app.add_middleware(RateLimitMiddleware, **options)
    return app


def limited(name: str, q: int, w: int | None, r: int, t: int | None, reset: int) -> list[tuple[str, str]]:
    policy = f'"{name}";q={q}' + ("" if w is None else f";w={w}")
    state = f'"{name}";r={r}' + ("" if t is None else f";t={t}")
    return [
        ("ratelimit-policy", policy),
        ("ratelimit", state),
        ("x-ratelimit-limit", str(q)),
        ("x-ratelimit-remaining", str(r)),
        ("x-ratelimit-reset", str(reset)),
    ]


def refused(
    body: bytes, name: str, q: int, w: int | None, t: int | None, reset: int, r: int = 0
) -> list[tuple[str, str]]:
    retry = [] if t is None else [("retry-after", str(t))]
    return limited(name, q, w, r, t, reset) + retry + [
        ("content-type", PROBLEM),
        ("content-length", str(len(body))),
    ]


@pytest.mark.parametrize("protocol", [2, 3])
def test_gcra_headers_429_and_denial_memory(server: Server, serve: Any, protocol: int) -> None:
    stats = Stats()
    http = serve(app_for(server, protocol=protocol, limit=GCRA(5, 10, "1m"), key=header("x-client-id"),
                         cost=cost_header, stats=stats))
    alice = {"X-Client-Id": "alice"}
    # A burst of 5, then one every 6 s: the legacy reset counts up by 6 s a request, and one unit
    # comes back 6 s later each time (t). q/w = 5 per 30 s, the 10 a minute it admits.
    for i in range(1, 6):
        assert http.get(headers=alice) == (200, PLAIN + limited("default", 5, 30, 5 - i, 6, 6 * i), b"hello")
    assert quota_exceeded_body("default") == QUOTA_BODY
    assert http.get(headers=alice) == (429, refused(QUOTA_BODY, "default", 5, 30, 6, 30), QUOTA_BODY)
    assert (stats.round_trips, stats.admitted, stats.denied, stats.remembered) == (6, 5, 1, 0)

    # Refused again from memory, with no round trip, the same headers (t rounded up).
    calls = server.calls("rl.gcra")
    for _ in range(3):
        assert http.get(headers=alice) == (429, refused(QUOTA_BODY, "default", 5, 30, 6, 30), QUOTA_BODY)
    assert server.calls("rl.gcra") == calls
    assert (stats.round_trips, stats.remembered) == (6, 3)

    # Another caller has its own limit.
    assert http.get(headers={"X-Client-Id": "bob"}) == (200, PLAIN + limited("default", 5, 30, 4, 6, 6), b"hello")
    # A cost above the burst never passes: no t, no Retry-After, and not remembered.
    for _ in range(2):
        assert http.get(headers={"X-Client-Id": "carol", "X-Cost": "6"}) == (
            429, refused(QUOTA_BODY, "default", 5, 30, None, 0, r=5), QUOTA_BODY,
        )
    assert server.calls("rl.gcra") == calls + 3
    # A remembered denial of 1 unit does not refuse 0 units (a request that costs nothing).
    assert http.get(headers={**alice, "X-Cost": "0"})[0] == 200


Response = tuple[int, list[tuple[str, str]], bytes]


def timed(send: Callable[[], Response]) -> tuple[Response, int, int]:
    """``send()``'s response, with the wall clock (ms since the epoch) read before and after it."""
    before = time.time_ns() // 1_000_000
    response = send()
    return response, before, time.time_ns() // 1_000_000


def epoch_reset(response: Response, before: int, after: int, ms: int) -> int:
    """X-RateLimit-Reset in epoch seconds for a key fresh ``ms`` after the reply, which came
    between ``before`` and ``after``: ceil((that instant + ms) / 1000), in whole seconds."""
    value = dict(response[1])["x-ratelimit-reset"]
    assert value.isdigit(), f"X-RateLimit-Reset {value!r} is not whole seconds"
    low, high = -(-(before + ms) // 1000), -(-(after + ms) // 1000)
    assert low <= int(value) <= high, f"X-RateLimit-Reset {value} is not {ms} ms after the reply: {low}..{high}"
    return int(value)


def test_x_ratelimit_reset_epoch_the_same_instant_from_the_denial_memory(server: Server, serve: Any) -> None:
    clock = FakeTime(server)
    stats = Stats()
    http = serve(app_for(server, limit=GCRA(5, 10, "1m"), key=header("x-client-id"), stats=stats, clock=clock,
                         x_ratelimit_reset="epoch"))
    alice = {"X-Client-Id": "alice"}
    # The burst of the test above: every other field as there, X-RateLimit-Reset the wall
    # clock's epoch seconds 6 s more each time.
    for i in range(1, 6):
        response, before, after = timed(lambda: http.get(headers=alice))
        reset = epoch_reset(response, before, after, 6000 * i)
        assert response == (200, PLAIN + limited("default", 5, 30, 5 - i, 6, reset), b"hello")
    response, before, after = timed(lambda: http.get(headers=alice))
    instant = epoch_reset(response, before, after, 30_000)
    assert response == (429, refused(QUOTA_BODY, "default", 5, 30, 6, instant), QUOTA_BODY)
    calls = server.calls("rl.gcra")
    # From the memory, 2.5 s then 5999 ms later on its clock (t and Retry-After counted down;
    # delta seconds would say 28 and 25): the instant the reply fixed, not the wall clock now
    # plus the time left, which gives an earlier second here (the package's monotonic clock
    # moves, the wall clock does not, as after a step of the wall clock).
    clock.ms += 2_500
    assert http.get(headers=alice) == (429, refused(QUOTA_BODY, "default", 5, 30, 4, instant), QUOTA_BODY)
    clock.ms += 3_499
    assert http.get(headers=alice) == (429, refused(QUOTA_BODY, "default", 5, 30, 1, instant), QUOTA_BODY)
    assert server.calls("rl.gcra") == calls
    assert (stats.round_trips, stats.remembered) == (6, 2)
    # At the retry time Redis is asked again: admitted, a new instant 30 s after its reply.
    clock.ms += 1
    server.advance(6_000)
    response, before, after = timed(lambda: http.get(headers=alice))
    assert response[0] == 200
    epoch_reset(response, before, after, 30_000)


def test_x_ratelimit_reset_is_delta_or_epoch(server: Server, serve: Any) -> None:
    """"delta" by default; anything else than the two refused when the middleware (or a guard)
    is made, the option and the values named; and an option the guard given does not have."""
    url = f"redis://127.0.0.1:{server.port}"
    bad: Any
    for bad in ("seconds", "Epoch", "", 1, None):
        message = f"invalid x_ratelimit_reset {bad!r}: expected 'delta' or 'epoch'"
        for make in (
            lambda: RateLimitMiddleware(FastAPI(), redis=url, limit=GCRA(5, 10, "1m"), x_ratelimit_reset=bad),
            lambda: AsyncGuard(url, GCRA(5, 10, "1m"), x_ratelimit_reset=bad),
            lambda: Guard(url, GCRA(5, 10, "1m"), x_ratelimit_reset=bad),
        ):
            with pytest.raises(ValueError) as refusal:
                make()
            assert str(refusal.value) == message
    guard = AsyncGuard(url, GCRA(5, 10, "1m"))
    assert guard.x_ratelimit_reset == "delta"
    with pytest.raises(ValueError) as refusal:
        RateLimitMiddleware(FastAPI(), guard=guard, x_ratelimit_reset="epoch")
    assert str(refusal.value) == "x_ratelimit_reset='epoch' differs from the guard's 'delta': give it to the guard"
    RateLimitMiddleware(FastAPI(), guard=guard, x_ratelimit_reset="delta")
    # The fields alone: delta seconds, or an instant given in ms since the epoch, rounded up.
    decision = Decision(True, 5, 4, 0, 6000)
    assert rate_limit_headers("default", decision, 30)[-1] == ("x-ratelimit-reset", "6")
    assert rate_limit_headers("default", decision, 30, reset_at_ms=1_764_514_650_001)[-1] == (
        "x-ratelimit-reset", "1764514651",
    )
    assert rate_limit_headers("default", decision, 30, reset_at_ms=1_764_514_650_000)[-1] == (
        "x-ratelimit-reset", "1764514650",
    )
    # "delta" said: the default's fields.
    http = serve(app_for(server, limit=GCRA(5, 10, "1m"), key=header("x-client-id"), x_ratelimit_reset="delta"))
    assert http.get(headers={"X-Client-Id": "bo"}) == (200, PLAIN + limited("default", 5, 30, 4, 6, 6), b"hello")


def test_rounding_and_window_left_out_when_not_whole_seconds(server: Server, serve: Any) -> None:
    # 2 at once, then 2 per 3500 ms: the emission interval is 1750 ms; w is not whole seconds.
    http = serve(app_for(server, limit=GCRA(2, 2, "3500ms"), name="burst", key=header("x-client-id")))
    who = {"X-Client-Id": "dave"}
    assert http.get(headers=who) == (200, PLAIN + limited("burst", 2, None, 1, 2, 2), b"hello")
    # The key fresh in 3500 ms (reset 4), one unit back in 1750 (t 2).
    assert http.get(headers=who) == (200, PLAIN + limited("burst", 2, None, 0, 2, 4), b"hello")
    body = quota_exceeded_body("burst")
    assert http.get(headers=who) == (429, refused(body, "burst", 2, None, 2, 4), body)


def test_policy_names_the_binding_rule(server: Server, serve: Any) -> None:
    server.freeze(MIDNIGHT_MS)
    rl = RateLimiter(server.client())
    rl.policy_set("api", GCRA(10, 10, "1s"), FixedWindow(300, "1m"), FixedWindow(5000, "1d"))
    rl.policy_set("tiers", GCRA(10, 10, "1s"), FixedWindow(3, "1m"))
    rl.policy_set("solo", SlidingLog(2, "1m"))
    api = serve(app_for(server, limit=Policy("api"), key=header("x-client-id"), cost=cost_header))
    who = {"X-Client-Id": "erin"}
    assert api.get(headers=who) == (200, PLAIN + limited("api/0", 10, 1, 9, 1, 1), b"hello")
    assert api.get(headers={**who, "X-Cost": "9"}) == (200, PLAIN + limited("api/0", 10, 1, 0, 1, 1), b"hello")
    body = quota_exceeded_body("api/0")
    assert body.endswith(b'"violated-policies":["api/0"]}')
    assert api.get(headers=who) == (429, refused(body, "api/0", 10, 1, 1, 1), body)

    # The minute rule (index 1) has fewer left, so it binds: its window, its reset.
    tiers = serve(app_for(server, limit=Policy("tiers"), key=header("x-client-id"), cost=cost_header))
    who = {"X-Client-Id": "fred"}
    assert tiers.get(headers=who) == (200, PLAIN + limited("tiers/1", 3, 60, 2, 60, 60), b"hello")
    assert tiers.get(headers={**who, "X-Cost": "2"}) == (200, PLAIN + limited("tiers/1", 3, 60, 0, 60, 60), b"hello")
    body = quota_exceeded_body("tiers/1")
    assert tiers.get(headers=who) == (429, refused(body, "tiers/1", 3, 60, 60, 60), body)

    # A policy of one rule is named as it is.
    solo = serve(app_for(server, limit=Policy("solo"), key=header("x-client-id")))
    who = {"X-Client-Id": "gina"}
    assert solo.get(headers=who) == (200, PLAIN + limited("solo", 2, 60, 1, 60, 60), b"hello")


def test_warmup_says_q_1_and_no_window(server: Server, serve: Any) -> None:
    """A warm-up admits one request at a time, spaced by an interval that changes as it warms:
    q=1 and no w; from idle at 10 a second, 398 ms to the next one, then 298 ms to wait."""
    http = serve(app_for(server, limit=Warmup(10, "1s", "10s"), key=header("x-client-id")))
    who = {"X-Client-Id": "wendy"}
    assert http.get(headers=who) == (200, PLAIN + limited("default", 1, None, 0, 1, 1), b"hello")
    assert http.get(headers=who) == (429, refused(QUOTA_BODY, "default", 1, None, 1, 1), QUOTA_BODY)


def test_shadow_checks_and_counts_but_never_refuses(server: Server, serve: Any) -> None:
    """With ``shadow`` (here: the requests with X-Shadow), a request the limit would refuse is
    let through with the denial's fields, counted in stats.shadow_denied, writing nothing;
    it is neither answered from the denial memory nor remembered."""
    stats = Stats()
    http = serve(app_for(server, limit=GCRA(2, 2, "1m"), key=header("x-client-id"), stats=stats,
                         shadow=lambda scope: (b"x-shadow", b"1") in scope["headers"]))
    who, watched = {"X-Client-Id": "sam"}, {"X-Client-Id": "sam", "X-Shadow": "1"}
    assert http.get(headers=who) == (200, PLAIN + limited("default", 2, 60, 1, 30, 30), b"hello")
    assert http.get(headers=who) == (200, PLAIN + limited("default", 2, 60, 0, 30, 60), b"hello")
    assert http.get(headers=watched) == (200, PLAIN + limited("default", 2, 60, 0, 30, 60), b"hello")
    assert (stats.admitted, stats.shadow_denied, stats.denied) == (2, 1, 0)
    # The shadow request wrote nothing: the next is refused for the same 30 s, and remembered.
    assert http.get(headers=who) == (429, refused(QUOTA_BODY, "default", 2, 60, 30, 60), QUOTA_BODY)
    calls = server.calls("rl.gcra")
    assert http.get(headers=watched) == (200, PLAIN + limited("default", 2, 60, 0, 30, 60), b"hello")
    assert server.calls("rl.gcra") == calls + 1
    assert http.get(headers=who) == (429, refused(QUOTA_BODY, "default", 2, 60, 30, 60), QUOTA_BODY)
    assert server.calls("rl.gcra") == calls + 1
    assert (stats.admitted, stats.shadow_denied, stats.denied, stats.remembered) == (2, 2, 1, 1)


def test_guard_grants_at_most_what_the_key_allows(server: Server) -> None:
    """``at_most``: the decision's ``granted``; a grant of nothing is refused, not remembered
    (a later request has a cost of its own)."""
    from ratelimit_redis_module import Guard

    guard = Guard(server.client(), GCRA(5, 1, "1m"), name="batch")
    v = guard.check("q", at_most=3)
    assert (v.status, v.decision and v.decision.granted, v.headers) == (200, 3, limited("batch", 5, 300, 2, 60, 180))
    v = guard.check("q", at_most=3)
    assert (v.status, v.decision and v.decision.granted, v.headers) == (200, 2, limited("batch", 5, 300, 0, 60, 300))
    v = guard.check("q", at_most=3)
    assert (v.status, v.decision and v.decision.granted) == (429, 0)
    assert v.headers == limited("batch", 5, 300, 0, 60, 300) + [("retry-after", "60")]
    assert [guard.check("q").source for _ in range(2)] == ["redis", "memory"]


def test_client_ip_is_the_default_key_and_no_key_means_no_limit(server: Server, serve: Any) -> None:
    http = serve(app_for(server, limit=FixedWindow(3, "1m"), prefix="ip:"))
    # T0 is 20 s into its minute.
    assert http.get() == (200, PLAIN + limited("default", 3, 60, 2, 40, 40), b"hello")
    with server.client() as c:
        assert c.exists("ip:127.0.0.1") == 1
    unlimited = serve(app_for(server, limit=FixedWindow(3, "1m"), key=header("x-api-key", fallback=None)))
    assert unlimited.get() == (200, PLAIN, b"hello")
    assert client_ip({"client": ("10.0.0.1", 1234)}) == "10.0.0.1"


TIMED_OUT_OPEN = "rate limiter unavailable (no answer within 50 ms); failing open: request let through"
TIMED_OUT_CLOSED = "rate limiter unavailable (no answer within 50 ms); failing closed: request refused with 503"
DEFAULT_POLICY = ("ratelimit-policy", '"default";q=5;w=30')
UNAVAILABLE_FIELDS = [("content-type", PROBLEM), ("content-length", str(len(UNAVAILABLE_BODY)))]


def until_decided(http: Any, headers: dict[str, str]) -> tuple[int, int]:
    """Requests until one is decided by Redis (it carries the policy's field): (its status, how
    many before it failed open or closed). With the package's default timeout of 50 ms, a loaded
    machine (make test's runs side by side) can leave any request unanswered in time, the first
    after a reconnection most of all; the test waits for the event, a decided request, and counts
    what it took instead of assuming it came at once."""
    for failed in range(100):
        status, fields, _ = http.get(headers=headers)
        if DEFAULT_POLICY in fields:
            return status, failed
        assert (status, fields) in [(200, PLAIN), (503, UNAVAILABLE_FIELDS)]
    raise AssertionError("100 requests, none decided by Redis")


def test_fail_open_and_closed_when_redis_hangs_then_dies(
    server: Server, serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratelimit_redis_module")
    open_stats, closed_stats = Stats(), Stats()
    # Without retries, a refused connection fails at once (redis-py retries by default, and
    # its back-off then outlasts the 50 ms timeout).
    no_retry = redis.asyncio.Redis(host="127.0.0.1", port=server.port, protocol=2, retry=Retry(NoBackoff(), 0))
    # The package's default timeouts (patient=False): their 50 ms is what the hang costs.
    opened = serve(app_for(server, patient=False, redis=no_retry, limit=GCRA(5, 10, "1m"),
                           key=header("x-client-id"), stats=open_stats))
    closed = serve(app_for(server, patient=False, limit=GCRA(5, 10, "1m"), key=header("x-client-id"),
                           stats=closed_stats, fail_open=False))
    a, b = {"X-Client-Id": "a"}, {"X-Client-Id": "b"}
    # Limited, each (the exact fields of a decided request: the tests above, with patient
    # timeouts; a request that timed out here may still have been counted).
    assert until_decided(opened, a)[0] == 200
    assert until_decided(closed, b)[0] == 200
    late_open, late_closed = open_stats.failures, closed_stats.failures

    # Hung (SIGSTOP): each check times out after 50 ms (the warnings say so). That an answer
    # comes at all from a stopped server is the timeout's doing; how soon, the machine decides.
    server.pause()
    try:
        assert opened.get(headers=a) == (200, PLAIN, b"hello")
        assert closed.get(headers=b) == (503, UNAVAILABLE_FIELDS, UNAVAILABLE_BODY)
    finally:
        server.resume()
    assert UNAVAILABLE_BODY == (
        b'{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",'
        b'"title":"Rate limiter unavailable","status":503}'
    )
    # Back: limited again (the request that timed out may have been counted when Redis woke).
    status, back = until_decided(opened, a)
    assert status == 200

    # Dead (killed): the connection is refused.
    server.stop()
    assert opened.get(headers=a) == (200, PLAIN, b"hello")
    assert closed.get(headers=b)[0] == 503
    # Each app: the hang's failure and the dead server's, and those the load made before and after.
    failed_open, failed_closed = late_open + 1 + back + 1, late_closed + 1 + 1
    assert (open_stats.failures, open_stats.fail_open, open_stats.fail_closed) == (failed_open, failed_open, 0)
    assert (closed_stats.failures, closed_stats.fail_open, closed_stats.fail_closed) == (failed_closed, 0, failed_closed)
    warnings = [r.getMessage() for r in caplog.records if r.name == "ratelimit_redis_module"]
    # In order: what the machine's load took before the hang (none on an idle one), the hang's
    # two, what it took to be decided again, then the dead server's two.
    head = [TIMED_OUT_OPEN] * late_open + [TIMED_OUT_CLOSED] * late_closed + [TIMED_OUT_OPEN, TIMED_OUT_CLOSED]
    assert warnings[: len(head)] == head
    assert warnings[len(head) : -2] == [TIMED_OUT_OPEN] * back
    assert warnings[-2].startswith("rate limiter unavailable (ConnectionError: ")
    assert "Error 111 connecting to 127.0.0.1" in warnings[-2]
    assert warnings[-2].endswith("; failing open: request let through")
    # The closed app's client retries a refused connection (redis-py's default), past 50 ms.
    assert warnings[-1] == TIMED_OUT_CLOSED


def test_a_remembered_denial_holds_while_redis_is_down(server: Server, serve: Any) -> None:
    stats = Stats()
    http = serve(app_for(server, limit=GCRA(1, 1, "1m"), key=header("x-client-id"), stats=stats, fail_open=True))
    who = {"X-Client-Id": "frank"}
    assert http.get(headers=who)[0] == 200
    body = quota_exceeded_body("default")
    assert http.get(headers=who) == (429, refused(body, "default", 1, 60, 60, 60), body)
    server.stop()
    assert http.get(headers=who) == (429, refused(body, "default", 1, 60, 60, 60), body)
    assert (stats.remembered, stats.failures) == (1, 0)


def test_concurrency_limit_releases_the_lease_when_the_response_is_done(server: Server, serve: Any) -> None:
    import asyncio
    import threading

    from ratelimit_redis_module import Concurrency

    gate = threading.Event()
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> PlainTextResponse:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return PlainTextResponse("hello")

    app.add_middleware(RateLimitMiddleware, redis=redis.asyncio.Redis(host="127.0.0.1", port=server.port),
                       limit=Concurrency(1, "30s"), name="inflight", key=header("x-client-id"), timeout=PATIENT,
                       setup_timeout=PATIENT)
    http = serve(app)
    who = {"X-Client-Id": "hank"}
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(http.get("/slow", headers=who)))
    worker.start()
    with server.client() as c:
        deadline = time.monotonic() + 10
        while c.exists("rl:http:hank") == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    # One request in flight: the second is refused until the lease ends (30 s, the clock frozen)
    # or is released; not remembered, since a release may come sooner.
    body = quota_exceeded_body("inflight")
    policy = ("ratelimit-policy", '"inflight";q=1;qu="concurrent-requests"')
    status, fields, got = http.get("/slow", headers=who)
    assert (status, got) == (429, body)
    assert fields[:2] == [policy, ("ratelimit", '"inflight";r=0;t=30')]
    assert ("retry-after", "30") in fields
    gate.set()
    worker.join(10)
    assert first[0][0] == 200
    # No t while admitted: a slot comes back when its holder's response ends, which nobody can
    # tell in advance.
    assert first[0][1][2:4] == [policy, ("ratelimit", '"inflight";r=0')]
    # Released when the first response was done (the clock is frozen, so the lease could not
    # have ended by itself): the next is admitted.
    status, fields, _ = http.get("/slow", headers=who)
    assert (status, fields[2:4]) == (200, [policy, ("ratelimit", '"inflight";r=0')])


def test_sync_guard_for_any_framework(server: Server) -> None:
    """The sync Guard (WSGI and the like): its client's socket_timeout is the time Redis has."""
    from redis.backoff import NoBackoff as SyncNoBackoff
    from redis.retry import Retry as SyncRetry

    from ratelimit_redis_module import Guard

    client = server.client(socket_timeout=0.05, retry=SyncRetry(SyncNoBackoff(), 0))
    opened = Guard(client, GCRA(2, 2, "1m"), name="api")
    closed = Guard(client, GCRA(2, 2, "1m"), name="api", fail_open=False, prefix="closed:")
    v = opened.check("ivy", cost=2)
    assert (v.allowed, v.status, v.body, v.source) == (True, 200, b"", "redis")
    assert v.headers == limited("api", 2, 60, 0, 30, 60)
    v = opened.check("ivy")
    assert (v.allowed, v.status, v.body, v.source) == (False, 429, quota_exceeded_body("api"), "redis")
    assert opened.check("ivy").source == "memory"
    server.pause()
    try:
        v = opened.check("jay")
        assert (v.allowed, v.status, v.headers, v.source) == (True, 200, [], "failure")
        v = closed.check("jay")
        assert (v.allowed, v.status, v.headers, v.body) == (False, 503, [], UNAVAILABLE_BODY)
    finally:
        server.resume()
    assert (opened.stats.failures, opened.stats.fail_open, closed.stats.fail_closed) == (1, 1, 1)
