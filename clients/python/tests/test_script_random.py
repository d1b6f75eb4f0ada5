"""The script backend through the package, on random sequences (issue 28): seeded sequences per
algorithm and for policies with rules, through :class:`RateLimiter` on both backends at the same
instants (the module on its server with the debug clock, the scripts on a plain server with
their test-only clock, ``_script_now``), every decision or refund equal field by field.

The steps: costs 0 to limit + 2, ``at_most``, ``dryrun``, ``shadow``, refunds (and their
``dryrun``), ``block``, limit changes (the same keys under new parameters, as a redeploy makes),
idle gaps from none to several periods, keys deleted as if expired. test_script_equal.py drives
the scripts themselves far harder; this drives them through the package's words and reply
parsing, as Node's test/script-random.test.js does. $SCRIPT_RANDOM_SEQUENCES, $SCRIPT_RANDOM_SEED.
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable

import pytest

from conftest import T0_MS, PlainServer, Server
from ratelimit_redis_module import (
    GCRA,
    FixedWindow,
    LeakyBucket,
    Policy,
    RateLimiter,
    Rule,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
)
from ratelimit_redis_module.scripts import rule_keys

SEED = int(os.environ.get("SCRIPT_RANDOM_SEED", "28"))
SEQUENCES = int(os.environ.get("SCRIPT_RANDOM_SEQUENCES", "30"))
STEPS = 30
PERIODS = {"1s": 1000, "3s": 3000, "10s": 10_000, "1m": 60_000, "999ms": 999, "1001ms": 1001}

Limit = Any
Make = Callable[[random.Random], Limit]


def period(rng: random.Random) -> str:
    return rng.choice(list(PERIODS))


ALGORITHMS: dict[str, Make] = {
    "gcra": lambda r: GCRA(r.randint(1, 6), r.randint(1, 4), period(r)),
    "tokenbucket": lambda r: TokenBucket(r.randint(1, 6), r.randint(1, 3), period(r), interval=r.random() < 0.5),
    "leakybucket": lambda r: LeakyBucket(r.randint(1, 6), r.randint(1, 3), period(r)),
    "fixedwindow": lambda r: FixedWindow(r.randint(1, 6), period(r)),
    "slidingwindow": lambda r: SlidingWindow(r.randint(1, 6), period(r)),
    "slidinglog": lambda r: SlidingLog(r.randint(1, 6), period(r)),
    "warmup": lambda r: Warmup(r.randint(1, 5), period(r), r.choice(["2s", "10s", "30s"]), r.randint(2, 5)),
}


def size(limit: Limit) -> int:
    """The units the limit holds, costs are drawn against it."""
    args = limit.args()
    return int(args[0]) if not isinstance(limit, Warmup) else 3


def span(limit: Limit) -> int:
    """The limit's period or window in ms, gaps are drawn against it."""
    return max(PERIODS.get(a, 0) for a in limit.args())


def policy(r: random.Random, least: int = 1) -> Policy:
    """A policy of ``least`` to 3 rules (a change never drops rules here: see Node's test and
    clients/scripts/README.md, Policies)."""
    rules: list[Any] = [ALGORITHMS[r.choice(list(ALGORITHMS))](r) for _ in range(r.randint(least, 3))]
    for i, rule in enumerate(rules):
        if i and r.random() < 0.15:
            rules[i] = Rule(rule.command.removeprefix("RL."), tuple(rule.args()), shadow=True)
    return Policy("random", rules=tuple(rules))


def run_sequence(name: str, make: Callable[..., Limit], n: int, plain: PlainServer, module_server: Server) -> dict[str, int]:
    r = random.Random(f"{SEED}:{name}:{n}")
    limit = make(r)
    block = r.choice(["1s", "5s", "1m"]) if r.random() < 0.2 else None
    key = f"rand:{name}:{n}"
    now = r.randint(0, 86_400_000)
    counts = {"admitted": 0, "refused": 0, "refunds": 0, "changes": 0}
    history: list[str] = []
    with plain.client() as p, module_server.client() as m:
        scripts, module = RateLimiter(p, backend="script"), RateLimiter(m, backend="module")
        scripts._script_now = lambda: (T0_MS + now) * 1000

        def forget() -> None:
            m.delete(key)
            p.delete(key, *rule_keys(key, 3))

        forget()
        for step in range(STEPS):
            rules = limit.rules if isinstance(limit, Policy) else (limit,)
            longest = max(span(x) if not isinstance(x, Rule) else PERIODS.get(x.args[-1], 60_000) for x in rules)
            g = r.random()
            now += 0 if g < 0.3 else r.randint(1, longest) if g < 0.75 else \
                r.randint(longest, 3 * longest) if g < 0.97 else 86_400_000
            m.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS + now)
            if r.random() < 0.03:
                forget()
                history.append(f"@{now} DEL")
            if r.random() < 0.1:
                limit = make(r, len(limit.rules)) if isinstance(limit, Policy) else make(r)
                counts["changes"] += 1
                history.append(f"@{now} limit {limit!r}")
            most = min(size(x) if not isinstance(x, Rule) else int(x.args[0]) for x in rules)
            if r.random() < 0.12:
                units, dryrun = r.randint(0, most + 1), r.random() < 0.2
                history.append(f"@{now} refund {units} {dryrun}")
                got = scripts.refund(key, units, dryrun=dryrun, limit=limit)
                want = module.refund(key, units, dryrun=dryrun, limit=limit)
                counts["refunds"] += 1
            else:
                options: dict[str, Any] = {"cost": r.choice([0, 1, 1, 1, 2, r.randint(0, most + 2)])}
                if r.random() < 0.15:
                    options = {"at_most": r.randint(1, most + 2)}
                if r.random() < 0.12:
                    options["dryrun"] = True
                if r.random() < 0.12:
                    options["shadow"] = True
                if block is not None:
                    options["block"] = block
                history.append(f"@{now} check {options}")
                got, want = scripts.check(limit, key, **options), module.check(limit, key, **options)
                counts["admitted" if want.allowed else "refused"] += 1
            assert got == want, f"{name} sequence {n} (seed {SEED}), step {step}:\n  " + "\n  ".join(history[-10:])
    return counts


@pytest.mark.parametrize("name", [*ALGORITHMS, "policy"])
def test_random_sequences_through_the_package(name: str, plain: PlainServer, module_server: Server) -> None:
    make = policy if name == "policy" else ALGORITHMS[name]
    totals = {"admitted": 0, "refused": 0, "refunds": 0, "changes": 0}
    for n in range(SEQUENCES):
        for k, v in run_sequence(name, make, n, plain, module_server).items():
            totals[k] += v
    assert all(totals.values()), totals
