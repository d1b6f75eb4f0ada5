"""RL.LIMIT through the middleware over real HTTP, against a real server with the debug clock
frozen: a policy of each rule kind the module has (SHADOW marks and each rule's options
included) limits as RL.LIMIT does, a WARMUP rule among them (docs/policies.md's example); and
nothing passes silently when the package meets a reply it cannot read: the request fails as
configured, logged and counted, and the policy is read again."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, FakeTime, Server
from ratelimit_redis_module import (
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
    Stats,
    field_shape,
    parse_decision,
    parse_rules,
    rate_limit_headers,
)

FIELDS = {"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
          "retry-after"}


class Rewriting:
    """The real asyncio client, with the replies of ``command`` replaced by ``rewrite(reply)``
    while ``rewrite`` is set; ``asked`` counts the calls of each command that went through."""

    def __init__(self, client: redis.asyncio.Redis, command: str) -> None:
        self.client = client
        self.command = command
        self.rewrite: Callable[[Any], Any] | None = None
        self.asked: Counter[str] = Counter()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        self.asked[name] += 1
        reply = await self.client.execute_command(*args, **options)
        return self.rewrite(reply) if name == self.command and self.rewrite is not None else reply


def hello(client: Any, policy: str, **options: Any) -> tuple[FastAPI, Stats]:
    """An app answering hello behind the middleware on ``policy``, the caller being
    X-Client-Id."""
    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    stats = Stats()
    # What is checked is each reply's reading: a slow request must not fail.
    options.setdefault("timeout", PATIENT)
    options.setdefault("setup_timeout", PATIENT)
    app.add_middleware(RateLimitMiddleware, redis=client, limit=Policy(policy),
                       key=lambda scope: dict(scope["headers"]).get(b"x-client-id", b"").decode() or None,
                       prefix=f"rl:policy:{policy}:", stats=stats, **options)
    return app, stats


def limit_fields(response: tuple[int, list[tuple[str, str]], bytes]) -> tuple[int, list[tuple[str, str]]]:
    status, fields, _ = response
    return status, [(k, v) for k, v in fields if k in FIELDS]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ratelimit_redis_module"]


def test_a_policy_with_a_warmup_rule_limits_as_rl_limit_does(server: Server, serve: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """docs/policies.md's example: the warm-up rule binds, limit 1, spaced by the cold
    interval (398 ms, then 298 ms to wait)."""
    caplog.set_level(logging.WARNING, logger="ratelimit_redis_module")
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "search", "WARMUP", "10", "1s", "10s", "COLDFACTOR", "3",
                          "FIXEDWINDOW", "5000", "1h")
    app, stats = hello(redis.asyncio.Redis(host="127.0.0.1", port=server.port), "search")
    http = serve(app)
    who = {"X-Client-Id": "user:9"}
    state = [("ratelimit-policy", '"search/0";q=1'), ("ratelimit", '"search/0";r=0;t=1'),
             ("x-ratelimit-limit", "1"), ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1")]
    assert limit_fields(http.get(headers=who)) == (200, state)
    assert limit_fields(http.get(headers=who)) == (429, state + [("retry-after", "1")])
    assert warnings_of(caplog) == []
    assert (stats.admitted, stats.denied, stats.failures) == (1, 1, 0)


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_a_rule_the_package_does_not_know_is_a_failure_logged_counted_and_read_again(
    server: Server, serve: Any, caplog: pytest.LogCaptureFixture, fail_open: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="ratelimit_redis_module")
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "future", "GCRA", "2", "2", "1s", "FIXEDWINDOW", "5", "1m")
    wrapped = Rewriting(redis.asyncio.Redis(host="127.0.0.1", port=server.port), "RL.POLICY.GET")
    # A module newer than the package: a rule kind it has never seen.
    wrapped.rewrite = lambda words: [*words, b"NEWRULE", b"7"]
    app, stats = hello(wrapped, "future", fail_open=fail_open)
    http = serve(app)
    who = {"X-Client-Id": "f"}
    assert limit_fields(http.get(headers=who)) == (200 if fail_open else 503, [])
    assert warnings_of(caplog) == [
        "rate limiter reply not understood (ValueError: unexpected rule in RL.POLICY.GET's reply: NEWRULE); "
        + ("failing open: request let through" if fail_open else "failing closed: request refused with 503")
    ]
    assert (stats.failures, stats.fail_open, stats.fail_closed) == ((1, 1, 0) if fail_open else (1, 0, 1))
    # Not kept: the next request reads the policy again, and once it reads, limits.
    wrapped.rewrite = None
    assert limit_fields(http.get(headers=who)) == (200, [
        ("ratelimit-policy", '"future/0";q=2;w=1'), ("ratelimit", '"future/0";r=1;t=1'),
        ("x-ratelimit-limit", "2"), ("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", "1"),
    ])
    # Read by the guard's setup (the step given up: the requests do it), then by each request.
    assert wrapped.asked["RL.POLICY.GET"] == 3
    assert len(warnings_of(caplog)) == 1


def test_a_reply_with_a_field_the_package_does_not_know_is_a_failure(
    server: Server, serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratelimit_redis_module")
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "odd", "GCRA", "5", "5", "1s")
    for protocol in (2, 3):
        wrapped = Rewriting(redis.asyncio.Redis(host="127.0.0.1", port=server.port, protocol=protocol), "RL.LIMIT")
        wrapped.rewrite = lambda reply: {**reply, b"novel": 1} if isinstance(reply, dict) else [*reply, 1]
        app, stats = hello(wrapped, "odd", fail_open=False)
        http = serve(app)
        assert http.get(headers={"X-Client-Id": f"o{protocol}"})[0] == 503
        assert stats.fail_closed == 1
        wrapped.rewrite = None
        assert http.get(headers={"X-Client-Id": f"o{protocol}"})[0] == 200
    assert warnings_of(caplog)[0].startswith(
        "rate limiter reply not understood (ValueError: unexpected reply: 7 fields, expected 6: "
        "[1, 5, 4, 0, 200, 0, 1]); failing closed"
    )
    assert warnings_of(caplog)[1].startswith("rate limiter reply not understood (ValueError: unexpected reply: "
                                             "the fields novel too in ")
    assert len(warnings_of(caplog)) == 2


def test_a_policy_set_after_the_first_request_is_read_then_and_one_that_grows_is_read_again(
    server: Server, serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratelimit_redis_module")
    app, stats = hello(redis.asyncio.Redis(host="127.0.0.1", port=server.port), "late")
    http = serve(app)
    who = {"X-Client-Id": "l"}
    assert limit_fields(http.get(headers=who)) == (200, [])
    assert "no policy named 'late'" in warnings_of(caplog)[0]
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "late", "GCRA", "10", "10", "1s")
    gets = server.calls("rl.policy.get")
    assert limit_fields(http.get(headers=who)) == (200, [
        ("ratelimit-policy", '"late";q=10;w=1'), ("ratelimit", '"late";r=9;t=1'),
        ("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", "9"), ("x-ratelimit-reset", "1"),
    ])
    assert server.calls("rl.policy.get") == gets + 1
    # A second rule, binding at once: its index is past the rules read, so its w is not known
    # yet, and the policy is read again for the next request. (T0 is 20 s into its minute.)
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "late", "GCRA", "10", "10", "1s", "FIXEDWINDOW", "1", "1m")
    state = [("x-ratelimit-limit", "1"), ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "40")]
    assert limit_fields(http.get(headers=who)) == (200, [
        ("ratelimit-policy", '"late/1";q=1'), ("ratelimit", '"late/1";r=0;t=40'), *state,
    ])
    assert limit_fields(http.get(headers=who)) == (429, [
        ("ratelimit-policy", '"late/1";q=1;w=60'), ("ratelimit", '"late/1";r=0;t=40'), *state, ("retry-after", "40"),
    ])
    assert server.calls("rl.policy.get") == gets + 2
    assert len(warnings_of(caplog)) == 1 and stats.failures == 1


# Each rule kind of the module (src/args/rules.rs, docs/policies.md), as RL.POLICY.SET takes it,
# with its `w` in whole seconds (field_shape): a window, or the time a bucket takes to earn its
# whole burst back (burst × period / rate); None when not whole seconds.
RULE_KINDS = [
    pytest.param(["GCRA", "3", "1", "1s"], 3, id="GCRA"),
    pytest.param(["TOKENBUCKET", "3", "1", "2s"], 6, id="TOKENBUCKET"),
    pytest.param(["tokenbucket", "3", "3", "2s", "interval"], 2, id="TOKENBUCKET-with-INTERVAL"),
    pytest.param(["LEAKYBUCKET", "3", "1", "1s"], 3, id="LEAKYBUCKET"),
    pytest.param(["FIXEDWINDOW", "3", "10s"], 10, id="FIXEDWINDOW"),
    pytest.param(["SLIDINGWINDOW", "3", "10s"], 10, id="SLIDINGWINDOW"),
    pytest.param(["SLIDINGLOG", "3", "1500ms"], None, id="SLIDINGLOG"),
    pytest.param(["WARMUP", "2", "1s", "10s"], None, id="WARMUP"),
    pytest.param(["RL.WARMUP", "10", "1s", "10s", "coldfactor", "5"], None, id="WARMUP-with-COLDFACTOR"),
]


def w_of(rule: Rule) -> int | None:
    return field_shape(rule.algorithm, rule.args).window_s


@pytest.mark.parametrize(("rule", "w"), RULE_KINDS)
def test_parse_rules_reads_every_rule_kind_shadow_marks_and_options(server: Server, rule: list[str],
                                                                    w: int | None) -> None:
    rl = RateLimiter(server.client())
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "windows", *rule, "SHADOW", *rule, "FIXEDWINDOW", "5", "1m",
                          "SHADOW", "GCRA", "1", "1", "2s")
    rules = rl.policy_get("windows")
    assert rules is not None
    assert [w_of(r) for r in rules] == [w, w, 60, 2]
    assert [r.shadow for r in rules] == [False, True, False, True]
    # As RL.POLICY.GET shows a rule: its name upper case without RL., an option's word upper case.
    kind = rule[0].upper().removeprefix("RL.")
    args = tuple(word.upper() if word.upper() in ("INTERVAL", "COLDFACTOR") else word for word in rule[1:])
    assert rules[:2] == [Rule(kind, args), Rule(kind, args, shadow=True)]


def test_parse_rules_refuses_what_it_cannot_read() -> None:
    for words, message in [
        (["GCRA", "1", "1", "1s", "NEWRULE", "7"], "NEWRULE"),
        (["GCRA", "1", "1"], "GCRA with 2 arguments"),
        (["FIXEDWINDOW", "1", "1s", "SHADOW"], "nothing after SHADOW"),
        (["CONCURRENCY", "1", "1s"], "CONCURRENCY"),
        (["WARMUP", "1", "1s", "1s", "COLDFACTOR"], "WARMUP with COLDFACTOR and no value"),
        (["TOKENBUCKET", "1", "1", "1s", "INTERVAL", "INTERVAL"], "INTERVAL"),
    ]:
        with pytest.raises(ValueError) as raised:
            parse_rules(words)
        assert str(raised.value) == f"unexpected rule in RL.POLICY.GET's reply: {message}", words


@pytest.mark.parametrize(("rule", "w"), RULE_KINDS)
def test_a_policy_of_each_rule_kind_alone_and_as_a_shadow_rule_limits_as_rl_limit_does(
    server: Server, serve: Any, caplog: pytest.LogCaptureFixture, rule: list[str], w: int | None
) -> None:
    caplog.set_level(logging.WARNING, logger="ratelimit_redis_module")
    rl = RateLimiter(server.client())
    with server.client() as c:
        c.execute_command("RL.POLICY.SET", "alone", *rule)
        c.execute_command("RL.POLICY.SET", "shadowed", "SHADOW", *rule, "FIXEDWINDOW", "4", "1m")
    time = FakeTime(server)
    for policy in ("alone", "shadowed"):
        app, stats = hello(redis.asyncio.Redis(host="127.0.0.1", port=server.port), policy)
        http = serve(app)
        rules = rl.policy_get(policy)
        assert rules is not None and w_of(rules[0]) == w
        # The same requests through the middleware and straight to RL.LIMIT on a twin key,
        # 300 ms apart: the same decision and the same fields, request by request.
        for i in range(6):
            status, fields = limit_fields(http.get(headers={"X-Client-Id": "twin"}))
            with server.client() as c:
                d = parse_decision(c.execute_command("RL.LIMIT", f"rl:direct:{policy}", policy), "rule")
                # RateLimit's t while admitted: when the policy admits one unit more than remains.
                more = None
                if d.allowed and d.remaining < d.limit:
                    probe = parse_decision(c.execute_command(
                        "RL.LIMIT", f"rl:direct:{policy}", policy, "COST", d.remaining + 1, "DRYRUN"), "rule")
                    more = probe.retry_after_ms if probe.retry_after_ms >= 0 else None
            assert d.rule is not None
            name = policy if len(rules) == 1 else f"{policy}/{d.rule}"
            expected = rate_limit_headers(name, d, w_of(rules[d.rule]), more_after_ms=more)
            assert (status, fields) == (200 if d.allowed else 429, expected), (policy, i)
            time.advance(300)
        assert warnings_of(caplog) == []
        assert stats.failures == 0 and stats.denied > 0, policy
