"""Retry-After is a promise, across parameter changes too (issue 22): traffic under one limit,
then the application changes the limit's parameters; a denied request's retry_after_ms (and the
429's Retry-After, RateLimit's t, the denial memory) must be exact: the same request is still
denied 1 ms before it and admitted at it. Real servers, the debug clock and the package's
injected clock moved together (FakeTime); the function API, the Guard and the ASGI middleware
over real HTTP."""

from __future__ import annotations

from typing import Any

import redis

from conftest import FakeTime, Server
from ratelimit_redis_module import GCRA, Guard


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
