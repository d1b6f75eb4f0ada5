"""Retry-After is a promise, across parameter changes too (issue 22): traffic under one limit,
then the application changes the limit's parameters; a denied request's retry_after_ms (and the
429's Retry-After, RateLimit's t, the denial memory) must be exact: the same request is still
denied 1 ms before it and admitted at it. Real servers, the debug clock and the package's
injected clock moved together (FakeTime); the function API, the Guard and the ASGI middleware
over real HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    AsyncGuard,
    Guard,
    LeakyBucket,
    Limit,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    TokenBucket,
    quota_exceeded_body,
)


@dataclass(frozen=True)
class Case:
    """Three requests under ``before`` on a fresh key (a burst of 3), then ``after``: the
    request under ``after`` is denied, and ``retry_ms`` is the exact wait. For a policy case
    the limit is ``Policy("p")``, whose one rule goes from ``before`` to ``after`` by
    RL.POLICY.SET."""

    before: Limit
    after: Limit
    retry_ms: int
    policy: bool = False


# The figures of /work/notes/issue22-semantics.md: the key's stored schedule governs until a
# request under the new parameters is admitted, so the wait is the stored schedule's.
CASES = [
    pytest.param(Case(GCRA(3, 1, "3s"), GCRA(3, 3, "3s"), 3000), id="gcra-1-to-3-per-3s"),
    pytest.param(Case(GCRA(3, 3, "3s"), GCRA(3, 1, "3s"), 1000), id="gcra-3-to-1-per-3s"),
    pytest.param(Case(TokenBucket(3, 1, "3s"), TokenBucket(3, 3, "3s"), 3000), id="tokenbucket-1-to-3-per-3s"),
    pytest.param(Case(TokenBucket(3, 3, "3s"), TokenBucket(3, 1, "3s"), 1000), id="tokenbucket-3-to-1-per-3s"),
    pytest.param(Case(LeakyBucket(3, 1, "3s"), LeakyBucket(3, 3, "3s"), 3000), id="leakybucket-1-to-3-per-3s"),
    pytest.param(Case(LeakyBucket(3, 3, "3s"), LeakyBucket(3, 1, "3s"), 1000), id="leakybucket-3-to-1-per-3s"),
    pytest.param(Case(GCRA(3, 1, "3s"), GCRA(3, 3, "3s"), 3000, policy=True), id="policy-gcra-1-to-3-per-3s"),
    pytest.param(Case(GCRA(3, 3, "3s"), GCRA(3, 1, "3s"), 1000, policy=True), id="policy-gcra-3-to-1-per-3s"),
]


def use(rl: RateLimiter, case: Case, params: Limit) -> Limit:
    """The limit the application checks with ``params`` in force (for a policy case, set on
    the server first)."""
    if case.policy:
        rl.policy_set("p", params)
        return Policy("p")
    return params


def name_of(case: Case) -> str:
    return "p" if case.policy else "default"


@pytest.mark.parametrize("case", CASES)
def test_function_api_a_client_obeying_retry_after_is_admitted_at_its_first_retry(
    server: Server, case: Case
) -> None:
    time = FakeTime(server)
    rl = RateLimiter(server.client())
    limit = use(rl, case, case.before)
    assert [rl.check(limit, "k").allowed for _ in range(4)] == [True, True, True, False]

    limit = use(rl, case, case.after)
    denied = rl.check(limit, "k")
    assert (denied.allowed, denied.remaining) == (False, 0)
    # A client obeying Retry-After (whole seconds, rounded up) waits that long; the figures
    # here are whole seconds, so the wait is retry_after_ms exactly and the check is tight:
    # 1 ms short of it the same request is still denied, 1 ms from admission; at it, admitted.
    wait_ms = -(-denied.retry_after_ms // 1000) * 1000
    assert wait_ms == denied.retry_after_ms
    time.advance(wait_ms - 1)
    early = rl.check(limit, "k", dryrun=True)
    time.advance(1)
    retried = rl.check(limit, "k")
    assert retried.allowed, f"the retry at Retry-After ({wait_ms} ms) was refused: {retried}"
    assert (early.allowed, early.retry_after_ms) == (False, 1), f"1 ms before Retry-After: {early}"
    assert denied.retry_after_ms == case.retry_ms


@pytest.mark.parametrize("case", CASES)
def test_guard_a_client_obeying_retry_after_is_admitted_at_its_first_retry(server: Server, case: Case) -> None:
    time = FakeTime(server)
    rl = RateLimiter(server.client())
    guard = Guard(server.client(), use(rl, case, case.before), clock=time)
    assert [guard.check("who").status for _ in range(3)] == [200, 200, 200]
    first = guard.check("who")
    assert (first.status, first.source) == (429, "redis")

    guard.limit = use(rl, case, case.after)
    # Not answered by the denial remembered under the old parameters: a round trip.
    verdict = guard.check("who")
    assert (verdict.status, verdict.source) == (429, "redis")
    assert verdict.decision is not None
    fields = dict(verdict.headers)
    seconds = int(fields["retry-after"])
    assert seconds * 1000 == verdict.decision.retry_after_ms
    assert fields["ratelimit"] == f'"{name_of(case)}";r=0;t={seconds}'

    # Asking again meanwhile: refused from memory (a policy's denials are not remembered: from
    # Redis), counted down to the ms.
    calls = server.calls(guard.limit.command)
    time.advance(seconds * 1000 - 1)
    again = guard.check("who")
    assert (again.status, again.source) == (429, "redis" if case.policy else "memory")
    assert again.decision is not None and again.decision.retry_after_ms == 1
    assert (dict(again.headers)["retry-after"], dict(again.headers)["ratelimit"]) == (
        "1", f'"{name_of(case)}";r=0;t=1',
    )
    assert server.calls(guard.limit.command) == calls + case.policy
    early = rl.check(guard.limit, "rl:http:who", dryrun=True)  # what the module itself says

    time.advance(1)
    retried = guard.check("who")
    assert (retried.status, retried.source) == (200, "redis"), f"the retry at Retry-After was refused: {retried}"
    assert (early.allowed, early.retry_after_ms) == (False, 1), f"1 ms before Retry-After: {early}"
    assert seconds * 1000 == case.retry_ms


@pytest.mark.parametrize("case", CASES)
def test_middleware_over_http_a_client_obeying_retry_after_is_admitted_at_its_first_retry(
    server: Server, serve: Any, case: Case
) -> None:
    time = FakeTime(server)
    rl = RateLimiter(server.client())
    guard = AsyncGuard(redis.asyncio.Redis(host="127.0.0.1", port=server.port), use(rl, case, case.before),
                       clock=time, timeout=PATIENT, setup_timeout=PATIENT)
    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    app.add_middleware(RateLimitMiddleware, guard=guard)
    http = serve(app)
    assert [http.get()[0] for _ in range(4)] == [200, 200, 200, 429]

    guard.limit = use(rl, case, case.after)
    calls = server.calls(case.after.command if not case.policy else "RL.LIMIT")
    status, fields, body = http.get()
    assert server.calls(case.after.command if not case.policy else "RL.LIMIT") == calls + 1
    name = name_of(case)
    assert (status, body) == (429, quota_exceeded_body(name))
    seconds = int(dict(fields)["retry-after"])
    assert dict(fields)["ratelimit"] == f'"{name}";r=0;t={seconds}'

    # The client obeys Retry-After: 1 ms short of it, still refused (from memory, and by the
    # module itself); at it, admitted.
    time.advance(seconds * 1000 - 1)
    status, fields, _ = http.get()
    assert (status, dict(fields)["retry-after"], dict(fields)["ratelimit"]) == (429, "1", f'"{name}";r=0;t=1')
    early = rl.check(guard.limit, "rl:http:127.0.0.1", dryrun=True)  # what the module itself says
    time.advance(1)
    status, fields, body = http.get()
    assert (status, body) == (200, b"hello"), f"the retry at Retry-After was refused: {status} {fields}"
    assert (early.allowed, early.retry_after_ms) == (False, 1), f"1 ms before Retry-After: {early}"
    assert seconds * 1000 == case.retry_ms


@pytest.mark.parametrize("policy", [False, True], ids=["gcra", "policy"])
def test_a_denial_remembered_under_other_parameters_refuses_nothing(server: Server, policy: bool) -> None:
    """A larger burst admits at once what the old parameters denied: the denial remembered
    under them must not refuse it locally."""
    time = FakeTime(server)
    rl = RateLimiter(server.client())
    case = Case(GCRA(3, 1, "3s"), GCRA(5, 2, "6s"), 0, policy)
    guard = Guard(server.client(), use(rl, case, case.before), clock=time)
    assert [guard.check("who").source for _ in range(5)] == ["redis"] * 4 + ["redis" if policy else "memory"]

    guard.limit = use(rl, case, case.after)
    verdict = guard.check("who")
    assert (verdict.status, verdict.source) == (200, "redis")
    # 3 units taken carry over: 1 of the 5 left; the fields say the new parameters (a burst of 5
    # earned back in 5 x 6 s / 2).
    assert verdict.decision is not None and verdict.decision.remaining == 1
    assert verdict.headers[0] == ("ratelimit-policy", f'"{name_of(case)}";q=5;w=15')
    # Back to the old parameters: the denial remembered under them was made before the key was
    # written under the new ones, so it says nothing exact any more: a round trip.
    guard.limit = use(rl, case, case.before)
    assert guard.check("who").source == "redis"


def test_a_policy_changed_elsewhere_is_followed_at_once(server: Server) -> None:
    """RL.POLICY.SET from anywhere changes a policy's rules without the guard knowing: a denial
    remembered under the old rules would refuse what the new ones admit at once."""
    FakeTime(server)
    RateLimiter(server.client()).policy_set("p", GCRA(3, 1, "3s"))
    guard = Guard(server.client(), Policy("p"))
    assert [guard.check("who").status for _ in range(4)] == [200, 200, 200, 429]
    with server.client() as elsewhere:
        elsewhere.execute_command("RL.POLICY.SET", "p", "GCRA", "5", "2", "6s")
    verdict = guard.check("who")
    assert (verdict.status, verdict.source) == (200, "redis")


class SlowReplies(redis.Redis):
    """A real client whose replies reach the application ``delay_ms`` after the server
    decided: the fake time moves on while each reply travels."""

    def __init__(self, fake_time: FakeTime, delay_ms: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fake_time = fake_time
        self.delay_ms = delay_ms

    def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        self.fake_time.advance(self.delay_ms)
        return reply


def test_a_denial_is_remembered_from_when_the_request_was_sent(server: Server) -> None:
    """The server decides somewhere between sending and receiving: counted from the reply's
    arrival, the memory would outlast retry_after by the round trip and refuse the client's
    retry itself."""
    time = FakeTime(server)
    guard = Guard(SlowReplies(time, 40, host="127.0.0.1", port=server.port), GCRA(3, 1, "3s"), clock=time)
    assert guard.check("who", cost=3).status == 200              # decided at T0, known at T0+40
    verdict = guard.check("who")                                 # decided at T0+40, known at T0+80
    assert verdict.decision is not None and verdict.decision.retry_after_ms == 2960
    assert dict(verdict.headers)["retry-after"] == "3"
    time.advance(2919)                                           # T0+2999
    again = guard.check("who")
    assert (again.status, again.source) == (429, "memory")
    assert again.decision is not None and again.decision.retry_after_ms == 1
    time.advance(1)                                              # T0+3000: the module admits
    retried = guard.check("who")
    assert (retried.status, retried.source) == (200, "redis")


def test_the_memory_answers_only_a_request_of_the_same_cost(server: Server) -> None:
    """A denial of 1 unit says nothing exact about a request of 2: answered from memory, its
    Retry-After would be 1's, and a client obeying it would be refused again."""
    time = FakeTime(server)
    guard = Guard(server.client(), GCRA(3, 1, "3s"), clock=time)
    assert guard.check("who", cost=3).status == 200
    one = guard.check("who")
    assert (one.status, one.source, dict(one.headers)["retry-after"]) == (429, "redis", "3")
    two = guard.check("who", cost=2)
    assert (two.status, two.source, dict(two.headers)["retry-after"]) == (429, "redis", "6")
    again = guard.check("who", cost=2)
    assert (again.status, again.source, dict(again.headers)["retry-after"]) == (429, "memory", "6")
    time.advance(6000)
    assert guard.check("who", cost=2).status == 200
