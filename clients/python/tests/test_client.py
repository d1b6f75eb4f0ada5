"""The function API against a real server with the debug clock frozen: every admission
command with COST, RESP2 and RESP3 alike, sync and asyncio."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import Server
from ratelimit_redis_module import (
    GCRA,
    AsyncRateLimiter,
    Concurrency,
    Decision,
    FixedWindow,
    LeakyBucket,
    Policy,
    RateLimiter,
    Rule,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
    parse_decision,
)

MIDNIGHT_MS = 1_699_920_000_000  # 2023-11-14T00:00:00Z
CLIENTS = [
    pytest.param({"protocol": 2}, id="resp2"),
    pytest.param({"protocol": 3}, id="resp3"),
    pytest.param({"protocol": 2, "decode_responses": True}, id="resp2-decoded"),
    pytest.param({"protocol": 3, "decode_responses": True}, id="resp3-decoded"),
]


def d(allowed: int, limit: int, remaining: int, retry: int, reset: int, **extra: Any) -> Decision:
    return Decision(bool(allowed), limit, remaining, retry, reset, **extra)


@pytest.mark.parametrize("options", CLIENTS)
def test_gcra_burst_then_denied_then_admitted_a_second_later(server: Server, options: dict[str, Any]) -> None:
    rl = RateLimiter(server.client(**options))
    assert rl.gcra("user:42", 5, 1, "1s") == d(1, 5, 4, 0, 1000)
    assert rl.gcra("user:42", 5, 1, "1s", cost=4) == d(1, 5, 0, 0, 5000)
    assert rl.gcra("user:42", 5, 1, "1s") == d(0, 5, 0, 1000, 5000)
    # A cost above the burst can never pass.
    assert rl.gcra("user:42", 5, 1, "1s", cost=6) == d(0, 5, 0, -1, 5000)
    server.advance(1000)
    assert rl.gcra("user:42", 5, 1, 1000) == d(1, 5, 0, 0, 5000)


@pytest.mark.parametrize("options", CLIENTS)
def test_every_algorithm_with_cost(server: Server, options: dict[str, Any]) -> None:
    rl = RateLimiter(server.client(**options))
    # Token bucket, capacity 4, 4 a minute: 4 pass, the fifth waits 15 s for a token.
    assert rl.token_bucket("tb", 4, 4, "1m", cost=3) == d(1, 4, 1, 0, 45000)
    assert rl.token_bucket("tb", 4, 4, "1m") == d(1, 4, 0, 0, 60000)
    assert rl.token_bucket("tb", 4, 4, "1m") == d(0, 4, 0, 15000, 60000)
    # With INTERVAL, a whole batch each period.
    assert rl.token_bucket("tbi", 3, 3, "1m", interval=True, cost=3) == d(1, 3, 0, 0, 60000)
    assert rl.token_bucket("tbi", 3, 3, "1m", interval=True) == d(0, 3, 0, 60000, 60000)
    # Leaky bucket: the sixth field says when to act.
    assert rl.leaky_bucket("lb", 3, 1, "1s") == d(1, 3, 2, 0, 1000, delay_ms=0)
    assert rl.leaky_bucket("lb", 3, 1, "1s", cost=2) == d(1, 3, 0, 0, 3000, delay_ms=1000)
    assert rl.leaky_bucket("lb", 3, 1, "1s") == d(0, 3, 0, 1000, 3000, delay_ms=-1)
    # Fixed window of a minute: T0 is 20 s into its minute.
    assert rl.fixed_window("fw", 5, "1m", cost=5) == d(1, 5, 0, 0, 40000)
    assert rl.fixed_window("fw", 5, "1m") == d(0, 5, 0, 40000, 40000)
    assert rl.sliding_window("sw", 7, "1m", cost=7) == d(1, 7, 0, 0, 91429)
    assert rl.sliding_log("sl", 2, "1m", cost=2) == d(1, 2, 0, 0, 60000)
    assert rl.sliding_log("sl", 2, "1m") == d(0, 2, 0, 60000, 60000)
    # DRYRUN answers without counting.
    assert rl.gcra("g", 2, 1, "1s", dryrun=True, cost=2) == d(1, 2, 0, 0, 2000)
    assert rl.gcra("g", 2, 1, "1s") == d(1, 2, 1, 0, 1000)


@pytest.mark.parametrize("options", CLIENTS)
def test_policy_limit_names_the_binding_rule(server: Server, options: dict[str, Any]) -> None:
    server.freeze(MIDNIGHT_MS)
    rl = RateLimiter(server.client(**options))
    rl.policy_set("api", GCRA(10, 10, "1s"), FixedWindow(300, "1m"), FixedWindow(5000, "1d"))
    assert rl.policy_get("api") == [
        Rule("GCRA", ("10", "10", "1s")),
        Rule("FIXEDWINDOW", ("300", "1m")),
        Rule("FIXEDWINDOW", ("5000", "1d")),
    ]
    assert rl.policy_get("nope") is None
    assert rl.limit("user:42", "api") == d(1, 10, 9, 0, 100, rule=0)
    assert rl.limit("user:42", "api", cost=9) == d(1, 10, 0, 0, 1000, rule=0)
    assert rl.limit("user:42", "api") == d(0, 10, 0, 100, 1000, rule=0)


@pytest.mark.parametrize("options", CLIENTS)
def test_concurrency_leases(server: Server, options: dict[str, Any]) -> None:
    rl = RateLimiter(server.client(**options))
    assert rl.acquire("jobs", 2, "30s") == d(1, 2, 1, 0, 30000, token="60a24181e4000-0")
    assert rl.acquire("jobs", 2, "30s", token="worker-7") == d(1, 2, 0, 0, 30000, token="worker-7")
    assert rl.acquire("jobs", 2, "30s") == d(0, 2, 0, 30000, 30000, token=None)
    assert rl.release("jobs", "worker-7") is True
    assert rl.release("jobs", "worker-7") is False
    assert rl.acquire("jobs", 2, "30s", dryrun=True).allowed is True


def test_refund_gives_units_back(server: Server) -> None:
    """RL.REFUND key units: the units given back (0 for a missing key)."""
    rl = RateLimiter(server.client())
    assert rl.gcra("r", 5, 1, "1s", cost=5) == d(1, 5, 0, 0, 5000)
    assert rl.refund("r", 2) == 2
    assert rl.gcra("r", 5, 1, "1s", dryrun=True) == d(1, 5, 1, 0, 4000)
    assert rl.refund("missing", 3) == 0


def test_errors_are_redis_errors(server: Server) -> None:
    rl = RateLimiter(server.client())
    with pytest.raises(redis.ResponseError, match="no policy named 'none'"):
        rl.limit("k", "none")
    with pytest.raises(redis.ResponseError, match="burst"):
        rl.gcra("k", 0, 1, "1s")


@pytest.mark.parametrize("options", CLIENTS)
async def test_asyncio_client(server: Server, options: dict[str, Any]) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, **options)
    rl = AsyncRateLimiter(client)
    try:
        assert await rl.gcra("a", 5, 1, "1s", cost=5) == d(1, 5, 0, 0, 5000)
        assert await rl.gcra("a", 5, 1, "1s") == d(0, 5, 0, 1000, 5000)
        assert await rl.token_bucket("tb", 4, 4, "1m") == d(1, 4, 3, 0, 15000)
        assert await rl.leaky_bucket("lb", 3, 1, "1s") == d(1, 3, 2, 0, 1000, delay_ms=0)
        assert await rl.fixed_window("fw", 5, "1m") == d(1, 5, 4, 0, 40000)
        assert await rl.sliding_window("sw", 7, "1m") == d(1, 7, 6, 0, 40001)
        assert await rl.sliding_log("sl", 2, "1m") == d(1, 2, 1, 0, 60000)
        await rl.policy_set("p", SlidingLog(3, "1m"), TokenBucket(10, 1, "1s"))
        assert await rl.policy_get("p") == [Rule("SLIDINGLOG", ("3", "1m")), Rule("TOKENBUCKET", ("10", "1", "1s"))]
        assert await rl.limit("pk", "p", cost=3) == d(1, 3, 0, 0, 60000, rule=0)
        lease = await rl.acquire("jobs", 1, "10s")
        assert lease == d(1, 1, 0, 0, 10000, token="60a24181e4000-0")
        assert await rl.release("jobs", lease.token or "") is True
    finally:
        await client.aclose()


async def test_asyncio_refund(server: Server) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    rl = AsyncRateLimiter(client)
    try:
        assert await rl.sliding_log("r", 3, "1m", cost=3) == d(1, 3, 0, 0, 60000)
        assert await rl.refund("r", 1) == 1
        assert await rl.sliding_log("r", 3, "1m") == d(1, 3, 0, 0, 60000)
        assert await rl.refund("missing", 1) == 0
    finally:
        await client.aclose()


@pytest.mark.parametrize("options", CLIENTS)
def test_warmup_as_the_manual_shows_it_and_as_the_command_answers(server: Server, options: dict[str, Any]) -> None:
    """docs/commands.md's session: from idle, at 10 a second with a 10 s warm-up, spaced by
    the cold interval (398 ms); then COLDFACTOR 5, request by request as RL.WARMUP answers
    on a twin key."""
    rl = RateLimiter(server.client(**options))
    assert rl.warmup("api:search", 10, "1s", "10s") == d(1, 1, 0, 0, 398)
    assert rl.warmup("api:search", 10, "1s", "10s") == d(0, 1, 0, 298, 398)
    limit = Warmup(10, "1s", timedelta(seconds=10), cold_factor=5)
    assert limit.args() == ["10", "1s", "10000", "COLDFACTOR", "5"] and limit.window_ms() is None
    answers = []
    with server.client() as c:
        for _ in range(8):
            direct = parse_decision(c.execute_command("RL.WARMUP", "twin", "10", "1s", "10s", "COLDFACTOR", "5"))
            answers.append(rl.check(limit, "cf5"))
            assert answers[-1] == direct
            server.advance(250)
    assert {a.allowed for a in answers} == {True, False}
    # As a policy's rule.
    rl.policy_set("warm", Warmup(10, "1s", "10s", 3), FixedWindow(5000, "1h"))
    assert rl.policy_get("warm") == [
        Rule("WARMUP", ("10", "1s", "10s", "COLDFACTOR", "3")), Rule("FIXEDWINDOW", ("5000", "1h")),
    ]


async def test_asyncio_warmup(server: Server) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, protocol=3)
    rl = AsyncRateLimiter(client)
    try:
        assert await rl.warmup("api:search", 10, "1s", "10s", cold_factor=3) == d(1, 1, 0, 0, 398)
        assert await rl.check(Warmup(10, "1s", "10s"), "api:search") == d(0, 1, 0, 298, 398)
    finally:
        await client.aclose()


@pytest.mark.parametrize("options", CLIENTS)
def test_atmost_and_shadow_as_the_manual_shows_them(server: Server, options: dict[str, Any]) -> None:
    """docs/commands.md's sessions: ATMOST grants what the key allows, up to the most asked
    (a grant of nothing denies, and only then does BLOCK start); SHADOW answers a would-be
    denial as admitted, writing nothing."""
    rl = RateLimiter(server.client(**options))
    assert rl.gcra("k", 5, 1, "1m", at_most=3) == d(1, 5, 2, 0, 180000, granted=3)
    assert rl.gcra("k", 5, 1, "1m", at_most=3, block="1m") == d(1, 5, 0, 0, 300000, granted=2)
    assert rl.gcra("k", 5, 1, "1m", at_most=3, block="2m") == d(0, 5, 0, 120000, 300000, granted=0)
    with pytest.raises(ValueError, match="give cost or at_most, not both"):
        rl.gcra("k", 5, 1, "1m", cost=2, at_most=3)

    server.freeze(1_699_999_980_000)
    assert rl.gcra("user:7", 2, 1, "1s") == d(1, 2, 1, 0, 1000)
    assert rl.gcra("user:7", 2, 1, "1s") == d(1, 2, 0, 0, 2000)
    assert rl.gcra("user:7", 2, 1, "1s", shadow=True) == d(1, 2, 0, 1000, 2000, shadow_denied=True)
    assert rl.gcra("user:7", 2, 1, "1s") == d(0, 2, 0, 1000, 2000)
    assert rl.gcra("user:7", 2, 1, "1s", block="1m", shadow=True) == d(1, 2, 0, 1000, 2000, shadow_denied=True)
    assert rl.acquire("jobs", 1, "30s", token="a", shadow=True) == d(1, 1, 0, 0, 30000, token="a", shadow_denied=False)
    assert rl.acquire("jobs", 1, "30s", token="b", shadow=True) == d(
        1, 1, 0, 30000, 30000, token=None, shadow_denied=True
    )
    # ATMOST and SHADOW together: granted first, then shadow_denied.
    assert rl.gcra("user:7", 2, 1, "1s", at_most=2, shadow=True) == d(
        1, 2, 0, 1000, 2000, granted=0, shadow_denied=True
    )
    with pytest.raises(ValueError, match="a concurrency limit takes one lease per request"):
        rl.check(Concurrency(1, "30s"), "jobs", at_most=1)


def test_refund_dryrun_says_what_it_would_give_back(server: Server) -> None:
    rl = RateLimiter(server.client())
    assert rl.fixed_window("r", 5, "1m", cost=4).remaining == 1
    assert rl.refund("r", 9, dryrun=True) == 4
    assert rl.fixed_window("r", 5, "1m", cost=0).remaining == 1  # COST 0 looks without taking
    assert rl.refund("r", 3) == 3
    assert rl.fixed_window("r", 5, "1m", cost=0).remaining == 4


# Every admission limit of the package, and the options it sends with each.
LIMITS = [
    pytest.param(GCRA(3, 1, "1s"), id="gcra"),
    pytest.param(TokenBucket(3, 1, "1s"), id="tokenbucket"),
    pytest.param(TokenBucket(3, 3, "1s", interval=True), id="tokenbucket-interval"),
    pytest.param(LeakyBucket(3, 1, "1s"), id="leakybucket"),
    pytest.param(FixedWindow(3, "1s"), id="fixedwindow"),
    pytest.param(SlidingWindow(3, "1s"), id="slidingwindow"),
    pytest.param(SlidingLog(3, "1s"), id="slidinglog"),
    pytest.param(Warmup(10, "1s", "2s"), id="warmup"),
    pytest.param(Warmup(10, "1s", "2s", cold_factor=7), id="warmup-coldfactor"),
    pytest.param(Policy("p"), id="policy"),
    pytest.param(Concurrency(3, "1s"), id="concurrency"),
]
CALLS: list[dict[str, Any]] = [
    {}, {"cost": 2}, {"at_most": 2}, {"dryrun": True}, {"block": "2s"}, {"shadow": True},
    {"at_most": 4, "shadow": True}, {"cost": 0, "dryrun": True, "block": 1500, "shadow": True},
]


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("limit", LIMITS)
def test_every_limit_with_every_option_answers_as_its_command(server: Server, limit: Any, protocol: int) -> None:
    """The package's decision and the command's own reply on a twin key, call by call,
    100 ms apart: every option the package sends reaches the module, and each reply's extra
    fields are read in the module's order."""
    server.freeze(1_700_000_000_000)
    rl = RateLimiter(server.client(protocol=protocol))
    rl.policy_set("p", GCRA(3, 1, "1s"), FixedWindow(5, "2s"))
    concurrent = isinstance(limit, Concurrency)
    with server.client(protocol=protocol) as c:
        for i in range(12):
            for options in CALLS:
                if concurrent and ({"cost", "at_most", "block"} & options.keys()):
                    continue
                words = [limit.command, "twin", *limit.args()]
                if concurrent:
                    words += ["DRYRUN"] if options.get("dryrun") else []
                    words += ["SHADOW"] if options.get("shadow") else []
                else:
                    words += (["COST", str(options["cost"])] if "cost" in options else [])
                    words += (["ATMOST", str(options["at_most"])] if "at_most" in options else [])
                    words += (["DRYRUN"] if options.get("dryrun") else [])
                    words += (["BLOCK", str(options["block"])] if "block" in options else [])
                    words += (["SHADOW"] if options.get("shadow") else [])
                direct = parse_decision(c.execute_command(*words), limit.extra, granted="at_most" in options,
                                        shadow=bool(options.get("shadow")))
                got = rl.check(limit, "pkg", **options)
                if concurrent:
                    # Each lease has its own token (named by the clock and a counter).
                    assert (got.token is None) == (direct.token is None)
                    got = Decision(got.allowed, got.limit, got.remaining, got.retry_after_ms, got.reset_after_ms,
                                   token=direct.token, shadow_denied=got.shadow_denied)
                assert got == direct, (i, options)
            server.advance(100)
