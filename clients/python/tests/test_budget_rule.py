"""The local budgets' rule held to the algorithms crate: for every case of
clients/lua/conformance/budget.json (written by algorithms/src/budget_promise.rs from the rule
its model checks, ``falls_due``), the package's ``falls_due`` says when a refill's units fall
due and whether they lapse or are given back, as the crate does. A limit of each kind is made
here with the package's own classes, and the hold is in µs as the budgets pass it. No server."""

from __future__ import annotations

import json
from pathlib import Path

from ratelimit_redis_module.budget import falls_due
from ratelimit_redis_module.limit_types import (
    GCRA,
    FixedWindow,
    LeakyBucket,
    Limit,
    Policy,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
)

BUDGET = json.loads(
    (Path(__file__).resolve().parents[3] / "clients" / "lua" / "conformance" / "budget.json").read_text()
)

#: A limit with a local budget of each kind of budget.json, by its command.
LIMITS: dict[str, Limit] = {
    "RL.GCRA": GCRA(10, 10, "1s", local_budget=5),
    "RL.TOKENBUCKET": TokenBucket(10, 10, "1s", local_budget=5),
    "RL.TOKENBUCKET INTERVAL": TokenBucket(10, 10, "1s", interval=True, local_budget=5),
    "RL.LEAKYBUCKET": LeakyBucket(10, 10, "1s", local_budget=5),
    "RL.FIXEDWINDOW": FixedWindow(10, "1s", local_budget=5),
    "RL.SLIDINGWINDOW": SlidingWindow(10, "1s", local_budget=5),
    "RL.SLIDINGLOG": SlidingLog(10, "1s", local_budget=5),
    "RL.WARMUP": Warmup(10, "1s", "10s", local_budget=5),
    "RL.LIMIT": Policy("api", local_budget=5),
}


def test_every_kind_is_a_limit_of_that_command() -> None:
    kinds = {case["kind"] for case in BUDGET["cases"]}
    assert kinds == set(LIMITS)
    for kind, limit in LIMITS.items():
        command, *flag = kind.split()
        assert limit.command == command and limit.args()[3:] == flag, kind


def test_every_case_falls_due_as_the_crate_says() -> None:
    differ = []
    for case in BUDGET["cases"]:
        got = falls_due(LIMITS[case["kind"]], case["sent_us"], case["hold_ms"] * 1000, case["reset_after_ms"])
        if got != (case["due_us"], case["lapses"]):
            differ.append((case, got))
    assert not differ, (
        f"{len(differ)} of {len(BUDGET['cases'])} cases differ; the first (the crate's case, the package's "
        f"(due_us, lapses)): {differ[0]}"
    )
    # The file covers the edges: each kind, a window's end below, at and above the hold, odd holds.
    fixed = [c for c in BUDGET["cases"] if c["kind"] == "RL.FIXEDWINDOW"]
    assert {c["reset_after_ms"] - c["hold_ms"] > 0 for c in fixed} == {True, False}
    assert any(c["reset_after_ms"] == c["hold_ms"] for c in fixed)
    assert any(c["hold_ms"] % 2 == 1 and not c["lapses"] for c in BUDGET["cases"])
