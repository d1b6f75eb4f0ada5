"""The pure parts: reply parsing, header values, the denial memory's bound and clock, rules."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ratelimit_redis_module import (
    GCRA,
    Decision,
    DenialMemory,
    FieldShape,
    Policy,
    Rule,
    TokenBucket,
    duration_ms,
    field_shape,
    parse_decision,
    parse_rules,
    rate_limit_headers,
)
from ratelimit_redis_module.aio.guard import AsyncGuard
from ratelimit_redis_module.guard import check_name


def test_parse_resp2_and_resp3_alike() -> None:
    expected = Decision(False, 5, 0, 1000, 5000)
    assert parse_decision([0, 5, 0, 1000, 5000]) == expected
    assert parse_decision({b"allowed": False, b"limit": 5, b"remaining": 0, b"retry_after_ms": 1000,
                           b"reset_after_ms": 5000}) == expected
    assert parse_decision({"allowed": False, "limit": 5, "remaining": 0, "retry_after_ms": 1000,
                           "reset_after_ms": 5000}) == expected
    assert parse_decision([1, 3, 2, 0, 1000, 0], "delay_ms") == Decision(True, 3, 2, 0, 1000, delay_ms=0)
    assert parse_decision({"allowed": True, "limit": 10, "remaining": 9, "retry_after_ms": 0,
                           "reset_after_ms": 100, "rule": 2}, "rule").rule == 2
    assert parse_decision([1, 2, 1, 0, 30000, b"60a24181e4000-0"], "token").token == "60a24181e4000-0"
    assert parse_decision([0, 2, 0, 30000, 30000, None], "token").token is None
    with pytest.raises(ValueError, match="unexpected reply: 4 fields, expected 5"):
        parse_decision([1, 2, 3, 4])
    with pytest.raises(ValueError, match="no reset_after_ms"):
        parse_decision({"allowed": 1, "limit": 1, "remaining": 1, "retry_after_ms": 0})
    with pytest.raises(ValueError, match="limit is b'x', not an integer"):
        parse_decision([1, b"x", 1, 0, 0])


def test_parse_the_fields_atmost_and_shadow_add_in_the_modules_order() -> None:
    assert parse_decision([1, 5, 2, 0, 180000, 3], granted=True) == Decision(True, 5, 2, 0, 180000, granted=3)
    assert parse_decision([1, 3, 0, 1000, 3000, -1, 0, 1], "delay_ms", granted=True, shadow=True) == Decision(
        True, 3, 0, 1000, 3000, delay_ms=-1, granted=0, shadow_denied=True
    )
    assert parse_decision({b"allowed": True, b"limit": 1, b"remaining": 0, b"retry_after_ms": 30000,
                           b"reset_after_ms": 30000, b"token": None, b"shadow_denied": 1}, "token", shadow=True) == (
        Decision(True, 1, 0, 30000, 30000, token=None, shadow_denied=True)
    )
    # The shape the arguments call for, exactly: a field missing, one too many, a flag not 0 or 1.
    with pytest.raises(ValueError, match="unexpected reply: 5 fields, expected 6"):
        parse_decision([1, 5, 2, 0, 180000], granted=True)
    with pytest.raises(ValueError, match="unexpected reply: 6 fields, expected 5"):
        parse_decision([1, 5, 2, 0, 180000, 0])
    with pytest.raises(ValueError, match="no shadow_denied in"):
        parse_decision({"allowed": 1, "limit": 1, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": 0},
                       shadow=True)
    with pytest.raises(ValueError, match="the fields granted too in"):
        parse_decision({"allowed": 1, "limit": 1, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": 0,
                        "granted": 1})
    with pytest.raises(ValueError, match="allowed is 2, not 0 or 1"):
        parse_decision([2, 5, 2, 0, 180000])
    with pytest.raises(ValueError, match="shadow_denied is b'yes', not an integer"):
        parse_decision([1, 5, 2, 0, 180000, b"yes"], shadow=True)


def test_headers_round_seconds_up() -> None:
    admitted = rate_limit_headers("default", Decision(True, 5, 4, 0, 1), 60, more_after_ms=1)
    assert admitted == [
        ("ratelimit-policy", '"default";q=5;w=60'),
        ("ratelimit", '"default";r=4;t=1'),
        ("x-ratelimit-limit", "5"),
        ("x-ratelimit-remaining", "4"),
        ("x-ratelimit-reset", "1"),
    ]
    # Nothing taken: r never grows, so no t.
    fresh = rate_limit_headers("default", Decision(True, 5, 5, 0, 0), None)
    assert fresh[:2] == [("ratelimit-policy", '"default";q=5'), ("ratelimit", '"default";r=5')]
    denied = rate_limit_headers("api/1", Decision(False, 300, 0, 3500, 59001), 60)
    assert denied == [
        ("ratelimit-policy", '"api/1";q=300;w=60'),
        ("ratelimit", '"api/1";r=0;t=4'),
        ("x-ratelimit-limit", "300"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "60"),
        ("retry-after", "4"),
    ]
    never = rate_limit_headers("x", Decision(False, 5, 3, -1, 2000), 1)
    assert never == [
        ("ratelimit-policy", '"x";q=5;w=1'),
        ("ratelimit", '"x";r=3'),
        ("x-ratelimit-limit", "5"),
        ("x-ratelimit-remaining", "3"),
        ("x-ratelimit-reset", "2"),
    ]
    assert rate_limit_headers("jobs", Decision(True, 2, 1, 0, 30000), None, concurrent=True)[:2] == [
        ("ratelimit-policy", '"jobs";q=2;qu="concurrent-requests"'),
        ("ratelimit", '"jobs";r=1'),
    ]
    assert rate_limit_headers('a"b\\c', Decision(True, 1, 0, 0, 1000), None)[0] == (
        "ratelimit-policy", '"a\\"b\\\\c";q=1',
    )


def test_w_is_the_time_to_earn_a_burst_back_and_a_structured_field_integer() -> None:
    assert field_shape("RL.GCRA", ["5", "10", "1m"]) == FieldShape(30, ("spaced", 60_000, 10))
    assert field_shape("tokenbucket", ["4", "2", "10s", "INTERVAL"]) == FieldShape(20, ("interval", 10_000, 2))
    assert field_shape("WARMUP", ["3", "1s", "10s"]) == FieldShape(None, "probe")
    assert field_shape("CONCURRENCY.ACQUIRE", ["2", "10s"]) == FieldShape(None, None)
    # 10^12 a burst, one every 10 years: w would have 21 digits, past the 15 a Structured Field
    # integer may have (RFC 9651), so it is left out.
    assert field_shape("GCRA", ["1000000000000", "1", "3650d"]).window_s is None
    assert field_shape("GCRA", ["999", "1", "3650d"]).window_s == 999 * 3650 * 86400


def test_names_are_printable_ascii() -> None:
    assert check_name("api/0") == "api/0"
    for bad in ["", "caf\u00e9", "a\nb", "tab\t"]:
        with pytest.raises(ValueError, match="invalid limit name"):
            check_name(bad)
    with pytest.raises(ValueError, match="invalid limit name"):
        AsyncGuard(None, GCRA(1, 1, "1s"), name="\u00fcber")
    with pytest.raises(ValueError, match="invalid limit name"):
        AsyncGuard(None, Policy("d\u00e9faut"))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_denial_memory_holds_until_retry_after_then_forgets() -> None:
    clock = Clock()
    memory = DenialMemory(10, clock)
    memory.remember("k", Decision(False, 5, 0, 6000, 30000), 1, "default", 60)
    assert memory.recall("k", 1) == (Decision(False, 5, 0, 6000, 30000), "default", 60)
    clock.now += 0.0015
    assert memory.recall("k", 1) == (Decision(False, 5, 0, 5999, 29999), "default", 60)
    clock.now += 4.9985
    assert memory.recall("k", 1) == (Decision(False, 5, 0, 1000, 25000), "default", 60)
    assert memory.recall("k", 0) is None  # a denial of 1 unit does not refuse 0
    assert memory.recall("k", 2) is None  # nor answer for 2, whose wait is another
    assert memory.recall("other", 1) is None
    clock.now += 1.0
    assert memory.recall("k", 1) is None
    assert len(memory) == 0
    # Admissions and denials that never pass are not remembered.
    memory.remember("a", Decision(True, 5, 4, 0, 6000), 1, "default", 60)
    memory.remember("n", Decision(False, 5, 5, -1, 0), 9, "default", 60)
    assert len(memory) == 0


def test_denial_memory_is_exact_to_the_ms_on_any_clock() -> None:
    """Refused until 1 ms before retry_after, with 1 ms left; forgotten at it. A clock of
    epoch seconds has no float to spare for ms: the memory counts in whole microseconds."""
    ms = 1_700_000_000_000
    memory = DenialMemory(10, lambda: ms / 1000)
    for start in range(0, 350, 7):
        for retry in (1, 999, 1000, 2960, 3000):
            ms = 1_700_000_000_000 + start
            memory.remember("k", Decision(False, 3, 0, retry, 3000), 1, "n", None)
            ms += retry - 1
            assert memory.recall("k", 1) == (Decision(False, 3, 0, 1, 3000 - retry + 1), "n", None), (start, retry)
            ms += 1
            assert memory.recall("k", 1) is None, (start, retry)


def test_denial_memory_counts_from_when_the_request_was_sent() -> None:
    """The server decided somewhere between sending and receiving: the wait counts from the
    sending, so the memory never outlasts the module's own schedule."""
    ms = 1_700_000_000_000
    memory = DenialMemory(10, lambda: ms / 1000)
    sent = ms / 1000
    ms += 40  # the reply arrives 40 ms later
    memory.remember("k", Decision(False, 3, 0, 2960, 8960), 1, "n", 3, sent=sent)
    assert memory.recall("k", 1) == (Decision(False, 3, 0, 2920, 8920), "n", 3)
    ms += 2919
    assert memory.recall("k", 1) == (Decision(False, 3, 0, 1, 6001), "n", 3)
    ms += 1
    assert memory.recall("k", 1) is None
    # A reply that arrives after its retry time has nothing left to remember.
    sent = ms / 1000
    ms += 50
    memory.remember("k", Decision(False, 3, 0, 50, 3000), 1, "n", 3, sent=sent)
    assert len(memory) == 0


def test_denial_memory_matches_the_parameters_and_forgets_on_admission() -> None:
    ms = 1_700_000_000_000
    memory = DenialMemory(10, lambda: ms / 1000)
    old, new = ("RL.GCRA", ("3", "1", "3s")), ("RL.GCRA", ("5", "1", "3s"))
    memory.remember("k", Decision(False, 3, 0, 3000, 9000), 1, "n", 3, params=old)
    assert memory.recall("k", 1, params=new) is None
    assert memory.recall("k", 1) is None
    assert memory.recall("k", 1, params=old) == (Decision(False, 3, 0, 3000, 9000), "n", 3)
    memory.forget("k")
    assert memory.recall("k", 1, params=old) is None
    assert len(memory) == 0


def test_denial_memory_is_bounded_expired_then_oldest_first() -> None:
    clock = Clock()
    memory = DenialMemory(3, clock)
    memory.remember("short", Decision(False, 1, 0, 1000, 1000), 1, "n", None)
    memory.remember("b", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    memory.remember("c", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    clock.now += 2
    memory.remember("d", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    assert [k for k in ("short", "b", "c", "d") if memory.recall(k, 1)] == ["b", "c", "d"]
    memory.remember("e", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    assert [k for k in ("b", "c", "d", "e") if memory.recall(k, 1)] == ["c", "d", "e"]
    assert len(memory) == 3
    # Remembering a key again makes it the newest.
    memory.remember("c", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    memory.remember("f", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    assert [k for k in ("c", "d", "e", "f") if memory.recall(k, 1)] == ["c", "e", "f"]
    off = DenialMemory(0, clock)
    off.remember("x", Decision(False, 1, 0, 60000, 60000), 1, "n", None)
    assert len(off) == 0


def test_rules_and_windows() -> None:
    words = ["GCRA", "10", "10", "1s", "SHADOW", "TOKENBUCKET", "5", "1", "1500", "INTERVAL",
             "WARMUP", "10", "1s", "30s", "COLDFACTOR", "3", "FIXEDWINDOW", "5000", "1d"]
    rules = parse_rules(words)
    assert rules == [
        Rule("GCRA", ("10", "10", "1s")),
        Rule("TOKENBUCKET", ("5", "1", "1500", "INTERVAL"), shadow=True),
        Rule("WARMUP", ("10", "1s", "30s", "COLDFACTOR", "3")),
        Rule("FIXEDWINDOW", ("5000", "1d")),
    ]
    assert [r.window_ms() for r in rules] == [1000, 1500, None, 86_400_000]
    assert [duration_ms(d) for d in ["1500", "1500ms", "90s", "1m", "24h", "1d", "05", "1.5s", "", 0, 250]] == [
        1500, 1500, 90000, 60000, 86_400_000, 86_400_000, None, None, None, None, 250,
    ]
    assert duration_ms(timedelta(seconds=2)) == 2000
    assert duration_ms(timedelta(microseconds=1500)) is None
    assert TokenBucket(5, 1, timedelta(minutes=1), interval=True).args() == ["5", "1", "60000", "INTERVAL"]


def test_no_submodule_is_named_after_the_limits_library() -> None:
    """``limits`` is the best-known Python limiter's package: the module of limit types is
    ``limit_types`` (issue 29), so ``ratelimit_redis_module.limits`` is not one to mistake."""
    import importlib.util

    assert importlib.util.find_spec("ratelimit_redis_module.limits") is None
    assert importlib.util.find_spec("ratelimit_redis_module.limit_types") is not None


def test_the_one_algorithm_methods_take_typed_options() -> None:
    """Issue 29: ``**options`` is typed (``Unpack[CheckOptions]``), so a type checker knows
    ``cost``, ``at_most``... and refuses a misspelt one; every option of ``check`` is in it."""
    import inspect
    import typing

    from ratelimit_redis_module import AsyncRateLimiter, CheckOptions, RateLimiter

    checked = set(inspect.signature(RateLimiter.check).parameters) - {"self", "limit", "key"}
    assert set(typing.get_type_hints(CheckOptions)) == checked
    for cls in (RateLimiter, AsyncRateLimiter):
        for name in ("gcra", "token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log",
                     "warmup", "limit"):
            hint = typing.get_type_hints(getattr(cls, name), include_extras=True)["options"]
            assert hint == typing.Unpack[CheckOptions], (cls.__name__, name, hint)
