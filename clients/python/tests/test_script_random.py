"""The script backend through the package, on random sequences (issue 28): seeded sequences per
algorithm and for policies with rules, through :class:`RateLimiter` on both backends at the same
instants (the module on its server with the debug clock, the scripts on a plain server with
their test-only clock, ``_script_now``), every decision or refund equal field by field.

The steps: costs 0 to limit + 2, ``at_most``, ``dryrun``, ``shadow``, refunds (and their
``dryrun``), ``block``, limit changes (the same keys under new parameters, as a redeploy makes;
a policy's anywhere in it: a rule's parameters, rules added, dropped, moved, replaced, a shadow
mark on or off, on the same limiters or new ones), idle gaps from none to several periods, keys
deleted as if expired. test_script_equal.py drives
the scripts themselves far harder; this drives them through the package's words and reply
parsing, as Node's test/script-random.test.js does. $SCRIPT_RANDOM_SEQUENCES, $SCRIPT_RANDOM_SEED.
"""

from __future__ import annotations

import dataclasses
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


# A policy's rule: its algorithm's name, its limit, whether a shadow rule.
PolicyRule = tuple[str, Limit, bool]
MAX_RULES = 4


def new_rule(r: random.Random, shadow: bool = False) -> PolicyRule:
    kind = r.choice(list(ALGORITHMS))
    return kind, ALGORITHMS[kind](r), shadow


def policy_rules(r: random.Random) -> list[PolicyRule]:
    """1 to 3 rules, now and then a shadow one (never all)."""
    rules = [new_rule(r, shadow=r.random() < 0.15) for _ in range(r.randint(1, 3))]
    return enforced(rules)


def enforced(rules: list[PolicyRule]) -> list[PolicyRule]:
    if all(shadow for _, _, shadow in rules):
        rules[0] = (rules[0][0], rules[0][1], False)
    return rules


def changed_rules(r: random.Random, rules: list[PolicyRule]) -> list[PolicyRule]:
    """A change an application makes, anywhere in the policy: a rule's parameter, a rule added,
    dropped, moved, replaced by another (of any algorithm), its shadow mark on or off; or a new
    policy."""
    rules = list(rules)
    i = r.randrange(len(rules))
    kind, limit, shadow = rules[i]
    pick = r.random()
    if pick < 0.25:
        fresh = ALGORITHMS[kind](r)
        name = r.choice([f.name for f in dataclasses.fields(limit) if f.name not in ("local_budget", "hold")])
        rules[i] = (kind, dataclasses.replace(limit, **{name: getattr(fresh, name)}), shadow)
    elif pick < 0.4 and len(rules) < MAX_RULES:
        rules.insert(r.randrange(len(rules) + 1), new_rule(r, shadow=r.random() < 0.15))
    elif pick < 0.65 and len(rules) > 1:
        del rules[i]
    elif pick < 0.75 and len(rules) > 1:
        rules.insert(r.randrange(len(rules)), rules.pop(i))
    elif pick < 0.85:
        rules[i] = new_rule(r, shadow)
    elif pick < 0.93:
        rules[i] = (kind, limit, not shadow)
    else:
        rules = policy_rules(r)
    return enforced(rules)


def as_policy(rules: list[PolicyRule]) -> Policy:
    return Policy("random", rules=tuple(
        Rule(limit.command.removeprefix("RL."), tuple(limit.args()), shadow=True) if shadow else limit
        for _, limit, shadow in rules))


def run_sequence(name: str, make: Make, n: int, plain: PlainServer, module_server: Server) -> dict[str, int]:
    r = random.Random(f"{SEED}:{name}:{n}")
    rules = policy_rules(r) if name == "policy" else None
    limit = as_policy(rules) if rules else make(r)
    block = r.choice(["1s", "5s", "1m"]) if r.random() < 0.2 else None
    key = f"rand:{name}:{n}"
    now = r.randint(0, 86_400_000)
    counts = {"admitted": 0, "refused": 0, "refunds": 0, "changes": 0}
    if rules:
        counts |= {"lost": 0, "redeploys": 0}
    history: list[str] = []
    with plain.client() as p, module_server.client() as m:

        def limiters() -> tuple[RateLimiter, RateLimiter]:
            scripts, module = RateLimiter(p, backend="script"), RateLimiter(m, backend="module")
            scripts._script_now = lambda: (T0_MS + now) * 1000
            return scripts, module

        def forget() -> None:
            m.delete(key)
            p.delete(key, *rule_keys(key, MAX_RULES))

        def persist() -> None:
            """The keys kept from the real clock, which moves on while the sequence's stands. A
            key may expire in real time before its PERSIST (a slow step on a loaded machine), on
            one server and not on the other: then both go, as if expired together."""
            m.persist(key)
            kept = m.exists(key)
            first = rule_keys(key, 1)[0] if rules else key
            with p.pipeline(transaction=False) as pipe:
                for k in [key, *rule_keys(key, MAX_RULES)]:
                    pipe.persist(k)
                pipe.exists(first)
                if pipe.execute()[-1] != kept:
                    forget()
                    history.append(f"@{now} expired in real time on one server: DEL")

        scripts, module = limiters()
        forget()
        for step in range(STEPS):
            limits = [x for _, x, _ in rules] if rules else [limit]
            longest = max(span(x) for x in limits)
            g = r.random()
            now += 0 if g < 0.3 else r.randint(1, longest) if g < 0.75 else \
                r.randint(longest, 3 * longest) if g < 0.97 else 86_400_000
            m.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS + now)
            if r.random() < 0.03:
                forget()
                history.append(f"@{now} DEL")
            if r.random() < (0.15 if rules else 0.1):
                if rules:
                    rules = changed_rules(r, rules)
                    limit = as_policy(rules)
                    if r.random() < 0.5:  # a redeploy: limiters that remember nothing
                        scripts, module = limiters()
                        counts["redeploys"] += 1
                else:
                    limit = make(r)
                counts["changes"] += 1
                history.append(f"@{now} limit {limit!r}")
            if rules:
                # The policy lost rules whose states the keys still hold: the scripts name them all.
                held = p.hget(rule_keys(key, 1)[0], "r")
                counts["lost"] += held is not None and int(held) > len(rules)
            most = min(size(x) for x in ([x for _, x, _ in rules] if rules else [limit]))
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
            persist()
    return counts


@pytest.mark.parametrize("name", [*ALGORITHMS, "policy"])
def test_random_sequences_through_the_package(name: str, plain: PlainServer, module_server: Server) -> None:
    make = ALGORITHMS.get(name, ALGORITHMS["gcra"])
    totals: dict[str, int] = {}
    # Policies: more sequences, their changes being what the algorithms' sequences do not make.
    for n in range(SEQUENCES * (3 if name == "policy" else 1)):
        for k, v in run_sequence(name, make, n, plain, module_server).items():
            totals[k] = totals.get(k, 0) + v
    print(f"\n{name}: {totals}")
    assert all(totals.values()), totals
