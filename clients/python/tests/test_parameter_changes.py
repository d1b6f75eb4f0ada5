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

from conftest import FakeTime, Server
from ratelimit_redis_module import GCRA, Guard, Limit, Policy, RateLimiter


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


def use(rl: RateLimiter, case: Case, params: Limit) -> Limit:
    """The limit the application checks with ``params`` in force (for a policy case, set on
    the server first)."""
    if case.policy:
        rl.policy_set("p", params)
        return Policy("p")
    return params


def name_of(case: Case) -> str:
    return "p" if case.policy else "default"


@pytest.mark.parametrize("policy", [False, True], ids=["gcra", "policy"])
def test_a_denial_remembered_under_other_parameters_refuses_nothing(server: Server, policy: bool) -> None:
    """A larger burst admits at once what the old parameters denied: the denial remembered
    under them must not refuse it locally."""
    time = FakeTime(server)
    rl = RateLimiter(server.client())
    case = Case(GCRA(3, 1, "3s"), GCRA(5, 2, "6s"), 0, policy)
    guard = Guard(server.client(), use(rl, case, case.before), clock=time)
    assert [guard.check("who").source for _ in range(5)] == ["redis"] * 4 + ["memory"]

    guard.limit = use(rl, case, case.after)
    verdict = guard.check("who")
    assert (verdict.status, verdict.source) == (200, "redis")
    # 3 units taken carry over: 1 of the 5 left; the fields say the new parameters.
    assert verdict.decision is not None and verdict.decision.remaining == 1
    assert verdict.headers[0] == ("ratelimit-policy", f'"{name_of(case)}";q=5;w=6')
    # Back to the old parameters: the denial remembered under them was made before the key was
    # written under the new ones, so it says nothing exact any more: a round trip.
    guard.limit = use(rl, case, case.before)
    assert guard.check("who").source == "redis"


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
