"""RateLimit-Policy and RateLimit for every algorithm, against a real server with the debug clock:
the cases of clients/http-fields-cases.json (which the Node package's tests read too, so both
packages give the same fields), through both guards, and for each ``t`` the promise itself,
asked of the module."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import PATIENT, FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    AsyncGuard,
    Concurrency,
    FixedWindow,
    Guard,
    LeakyBucket,
    Limit,
    Policy,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Verdict,
    Warmup,
)

CASES = json.loads((Path(__file__).resolve().parents[2] / "http-fields-cases.json").read_text())
T0 = CASES["t0_ms"]


def limit_of(command: str, args: list[str]) -> Limit:
    """The package's limit for a case's command and arguments."""
    counts = [int(a) if a.isdigit() else a for a in args]
    if command == "RL.LIMIT":
        return Policy(args[0])
    if command == "RL.TOKENBUCKET":
        return TokenBucket(*counts[:3], interval="INTERVAL" in args[3:])
    classes: dict[str, Any] = {
        "RL.GCRA": GCRA, "RL.LEAKYBUCKET": LeakyBucket, "RL.FIXEDWINDOW": FixedWindow,
        "RL.SLIDINGWINDOW": SlidingWindow, "RL.SLIDINGLOG": SlidingLog, "RL.WARMUP": Warmup,
        "RL.CONCURRENCY.ACQUIRE": Concurrency,
    }
    return classes[command](*counts)  # type: ignore[no-any-return]


def test_the_cases_cover_every_algorithm_and_burst_below_equal_and_above_rate() -> None:
    commands = {c["command"] for c in CASES["cases"]}
    assert {
        "RL.GCRA", "RL.TOKENBUCKET", "RL.LEAKYBUCKET", "RL.FIXEDWINDOW", "RL.SLIDINGWINDOW",
        "RL.SLIDINGLOG", "RL.WARMUP", "RL.CONCURRENCY.ACQUIRE", "RL.LIMIT",
    } <= commands
    for command in ("RL.GCRA", "RL.TOKENBUCKET", "RL.LEAKYBUCKET"):
        signs = sorted(
            (int(c["args"][0]) > int(c["args"][1])) - (int(c["args"][0]) < int(c["args"][1]))
            for c in CASES["cases"] if c["command"] == command and len(c["args"]) == 3
        )
        assert signs == [-1, 0, 1], command


def admits(c: redis.Redis, case: dict[str, Any], key: str, units: int, ms: int) -> bool:
    """Whether ``units`` are admitted at ``ms`` after T0 (a DRYRUN: nothing written)."""
    c.execute_command("RL.DEBUG.CLOCK", "SET", T0 + ms)
    words = [case["command"], key, *case["args"]]
    if case["command"] != "RL.CONCURRENCY.ACQUIRE":
        words += ["COST", str(units)]
    reply = c.execute_command(*words, "DRYRUN")
    allowed = reply.get(b"allowed", reply.get("allowed")) if isinstance(reply, dict) else reply[0]
    return bool(allowed)


def check_step(c: redis.Redis, case: dict[str, Any], key: str, step: dict[str, Any], verdict: Verdict) -> None:
    fields = dict(verdict.headers)
    cost = step.get("cost", 1)
    assert [verdict.status, fields.get("ratelimit-policy"), fields.get("ratelimit"), fields.get("retry-after")] == [
        step["status"], step.get("policy", case["policy"]), step["ratelimit"], step.get("retry_after"),
    ], f"at {step['at']} ms, cost {cost}"
    # The promise: t seconds from now, r + 1 units pass (the request itself when refused), and
    # not a second sooner.
    m = re.search(r";r=(\d+)(?:;t=(\d+))?$", fields["ratelimit"])
    assert m is not None
    if m.group(2) is not None:
        units = int(m.group(1)) + 1 if verdict.allowed else cost
        t = int(m.group(2)) * 1000
        assert not admits(c, case, key, units, step["at"] + t - 1000), f"{units} units at {step['at']} + t - 1 s"
        assert admits(c, case, key, units, step["at"] + t), f"{units} units at {step['at']} + t"
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0 + step["at"])


@pytest.mark.parametrize("n", range(len(CASES["cases"])), ids=[c["name"] for c in CASES["cases"]])
@pytest.mark.parametrize("guard", ["sync", "async"])
def test_fields(server: Server, n: int, guard: str) -> None:
    case = CASES["cases"][n]
    time = FakeTime(server, ms=T0)
    limit = limit_of(case["command"], case["args"])
    prefix = f"rl:fields:{guard}:{n}:"
    with server.client() as c:
        if "setup" in case:
            c.execute_command(*case["setup"])
        if guard == "sync":
            sync = Guard(server.client(socket_timeout=PATIENT), limit, prefix=prefix, clock=time, setup_timeout=PATIENT)
            for step in case["steps"]:
                if T0 + step["at"] > time.ms:
                    time.advance(T0 + step["at"] - time.ms)
                verdict = sync.check("k", step.get("cost", 1))
                check_step(c, case, prefix + "k", step, verdict)
        else:
            async def run() -> None:
                client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
                try:
                    guarded = AsyncGuard(client, limit, prefix=prefix, clock=time, timeout=PATIENT,
                                         setup_timeout=PATIENT)
                    for step in case["steps"]:
                        if T0 + step["at"] > time.ms:
                            time.advance(T0 + step["at"] - time.ms)
                        verdict = await guarded.check("k", step.get("cost", 1))
                        check_step(c, case, prefix + "k", step, verdict)
                finally:
                    await client.aclose()

            asyncio.run(run())
