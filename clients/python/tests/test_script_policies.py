"""Policies whose rules the application gives (``Policy(name, rules=...)``) on both backends
(issue 28; docs/managed.md): on the script backend one script over a key per rule (``{key}:0``...,
one slot), on the module the server's policy, set by the limiter before its first check of it.

The same sequences as test_script_backend.py's, on a plain server through the scripts' test
clock and on a module server at its debug clock, equal field by field (the binding rule's index,
granted and shadow_denied included); refunds and local budgets give back to every rule; the
middleware's 429; a cluster; a policy without rules still needs the module.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster

from conftest import ROOT, T0_MS, PlainServer, Server
from ratelimit_redis_module import (
    GCRA,
    AsyncRateLimiter,
    FixedWindow,
    Guard,
    LeakyBucket,
    ModuleRequired,
    Policy,
    RateLimiter,
    Rule,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
)
from ratelimit_redis_module.scripts import rule_keys
from test_script_backend import STEPS, replay_on_both

POLICIES = [
    Policy("tiers", rules=(GCRA(10, 10, "1s"), FixedWindow(12, "1m"), FixedWindow(5000, "1d"))),
    Policy("spaced", rules=(GCRA(5, 1, "10s"), Rule("SLIDINGLOG", ("3", "10s"), shadow=True))),
    Policy("mixed", rules=(TokenBucket(6, 2, "10s", interval=True), SlidingWindow(8, "30s"),
                           LeakyBucket(9, 3, "10s"), Warmup(4, "10s", "1m"), SlidingLog(7, "1m"))),
]


def test_rule_keys_share_a_slot() -> None:
    """The cases both packages check (clients/policy-rule-keys.json): one slot per key, none
    shared by two keys."""
    cases = json.loads((ROOT / "clients" / "policy-rule-keys.json").read_text())["cases"]
    for key, n, want in cases:
        assert rule_keys(key, n) == want, key
        assert rule_keys(key.encode(), n) == [k.encode() for k in want], key
        assert len({redis.cluster.key_slot(k.encode()) for k in rule_keys(key, 4)}) == 1, key
    everything = [k for key, n, _ in cases for k in rule_keys(key, n)]
    assert len(everything) == len(set(everything))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_a_policy_answers_as_the_module(policy: Policy, plain: PlainServer, module_server: Server) -> None:
    """Admitted, refused (each rule binding in turn), ATMOST, DRYRUN, COST 0 and above the
    limit, BLOCK, refunds to every rule, idle time: equal field by field, the rule index too."""
    key = f"pol:{policy.name}"
    with plain.client() as p:
        p.delete(*rule_keys(key, len(policy.rules)))
    answers, _ = replay_on_both(policy, key, STEPS, plain, module_server)
    assert {a.rule for a in answers if hasattr(a, "rule")} != {None}
    assert any(getattr(a, "allowed", None) is False for a in answers)
    assert any(isinstance(a, int) and a > 0 for a in answers)
    with plain.client() as p:
        keys = rule_keys(key, len(policy.rules))
        assert [p.type(k) for k in keys] == [b"hash"] * len(keys)
        assert len({p.hget(k, "g") for k in keys}) == 1
    with module_server.client() as m:  # the application's rules became the server's policy
        assert m.execute_command("RL.POLICY.GET", policy.name) == [w.encode() for w in policy.rule_words]


def test_the_module_gets_the_policy_once(module_server: Server) -> None:
    """RL.POLICY.SET once per limiter and policy, before its first check; the application's
    rules replace what the server held under that name."""
    policy = Policy("once", rules=(GCRA(3, 1, "1s"), FixedWindow(10, "1m")))
    with module_server.client() as m:
        m.execute_command("RL.POLICY.SET", "once", "GCRA", 1, 1, "1h")
        m.config_resetstat()
        limiter = RateLimiter(m, backend="module")
        decisions = [limiter.check(policy, "once:k") for _ in range(5)]
        assert [d.allowed for d in decisions] == [True, True, True, False, False]
        assert m.info("commandstats")["cmdstat_rl.policy.set"]["calls"] == 1
        assert m.execute_command("RL.POLICY.GET", "once") == [b"GCRA", b"3", b"1", b"1s", b"FIXEDWINDOW", b"10", b"1m"]


def test_a_failed_policy_set_is_sent_again(module_server: Server) -> None:
    """The first RL.POLICY.SET refused (here by the user's ACL): the check raises, and the next
    check sends it again rather than asking for a policy the server never got."""
    policy = Policy("again", rules=(GCRA(3, 1, "1s"),))
    with module_server.client() as admin:
        admin.execute_command("RL.POLICY.DEL", "again")
        admin.execute_command("ACL", "SETUSER", "setter", "reset", "on", ">secret", "~*", "+@all", "-rl.policy.set")
        try:
            with module_server.client(username="setter", password="secret") as c:
                limiter = RateLimiter(c, backend="module")
                with pytest.raises(redis.exceptions.NoPermissionError):
                    limiter.check(policy, "again:k")
                admin.execute_command("ACL", "SETUSER", "setter", "+rl.policy.set")
                assert limiter.check(policy, "again:k").allowed
                assert admin.execute_command("RL.POLICY.GET", "again") == [b"GCRA", b"3", b"1", b"1s"]
        finally:
            admin.execute_command("ACL", "DELUSER", "setter")


def test_rules_are_checked(plain: PlainServer) -> None:
    with pytest.raises(ValueError, match="at most 16 rules"):
        Policy("big", rules=tuple(GCRA(1, 1, "1s") for _ in range(17)))
    with pytest.raises(ValueError, match="without SHADOW"):
        Policy("shadows", rules=(Rule("GCRA", ("1", "1", "1s"), shadow=True),))
    with pytest.raises(ValueError, match="not a policy"):
        Policy("nested", rules=(Policy("inner"),))
    with plain.client() as p:
        with pytest.raises(ModuleRequired, match="RL.LIMIT needs the ratelimit module"):
            RateLimiter(p, backend="script").check(Policy("server-side"), "k")


def test_local_budget_on_a_policy_gives_back_to_every_rule(plain: PlainServer) -> None:
    """A local budget refills with ATMOST over every rule and gives back with the policy's
    refund: after close(), each rule counted exactly the requests admitted."""
    policy = Policy("lb", local_budget=4, rules=(FixedWindow(1000, "1h"), SlidingWindow(1000, "1h")))
    with plain.client() as p:
        keys = rule_keys("lb:k", 2)
        p.delete(*keys)
        limiter = RateLimiter(p, backend="script")
        admitted = sum(limiter.check(policy, "lb:k").allowed for _ in range(7))
        assert admitted == 7
        assert limiter.stats.refills == 2  # 4 + 4 taken, 7 spent
        limiter.close()
        assert int(p.hget(keys[0], "c")) == 7
        assert int(p.hget(keys[1], "c")) == 7


def test_a_guard_answers_as_on_the_module(plain: PlainServer, module_server: Server) -> None:
    """A guard with the application's rules: the same statuses, headers (each rule's window in
    RateLimit-Policy, the binding rule's RateLimit) and bodies on both backends; the module's
    guard reads nothing from the server either (the rules are the application's)."""
    policy = Policy("guarded", rules=(GCRA(10, 10, "1s"), FixedWindow(2, "1h")))
    module_server.freeze(T0_MS)
    with plain.client() as p, module_server.client() as m:
        p.delete(*rule_keys("rl:g:1", 2))
        m.delete("rl:g:1")
        scripts, module = Guard(p, policy, backend="script"), Guard(m, policy, backend="module")
        scripts.limiter._script_now = lambda: T0_MS * 1000
        m.config_resetstat()
        got = [scripts.check("g:1") for _ in range(3)]
        want = [module.check("g:1") for _ in range(3)]
        assert [(v.status, v.headers, v.body, v.decision) for v in got] == \
            [(v.status, v.headers, v.body, v.decision) for v in want]
        assert [v.status for v in got] == [200, 200, 429]
        assert got[2].decision is not None and got[2].decision.rule == 1
        assert "cmdstat_rl.policy.get" not in m.info("commandstats")


def test_a_policy_on_a_cluster(plain_cluster: list[Server]) -> None:
    """A cluster without the module (auto picks the scripts). The rule keys share a slot: one
    script on the key's node; NOSCRIPT there loads it there."""
    cluster = plain_cluster
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        limiter = RateLimiter(client)
        policy = Policy("c", rules=(GCRA(2, 1, "1h"), FixedWindow(5, "1h")))
        keys = [f"cluster:policy:{i}" for i in range(12)]
        assert len({client.get_node_from_key(rule_keys(k, 2)[0]).port for k in keys}) == 3
        for k in keys:
            client.delete(*rule_keys(k, 2))
            assert limiter.check(policy, k).allowed
        for node in cluster:
            with node.client() as c:
                c.script_flush()
        assert [limiter.check(policy, k).remaining for k in keys] == [0] * 12
        assert all(limiter.refund(k, 1, limit=policy) == 1 for k in keys)
    finally:
        client.close()


# Midnight (UTC) after T0: the day's and the minute's windows start here.
MIDNIGHT_MS = T0_MS + 6_400_000


def through_changes(
    plain: PlainServer, module_server: Server, key: str, steps: list[tuple[int, Policy, int]]
) -> list[Any]:
    """``steps`` (ms after midnight, the policy, the cost) on both backends at the same instants,
    a new limiter whenever the policy changes (a redeploy), each pair of decisions equal field by
    field; returns the module's."""
    with plain.client() as p, module_server.client() as m:
        p.delete(*rule_keys(key, 16))
        m.delete(key)
        now_ms, decisions, current = MIDNIGHT_MS, [], None
        module_server.freeze(now_ms)
        scripts = module = RateLimiter(p, backend="script")
        for i, (at_ms, policy, cost) in enumerate(steps):
            if policy is not current:
                scripts, module, current = RateLimiter(p, backend="script"), RateLimiter(m, backend="module"), policy
                scripts._script_now = lambda: now_ms * 1000
            if MIDNIGHT_MS + at_ms != now_ms:
                now_ms = MIDNIGHT_MS + at_ms
                module_server.freeze(now_ms)
            got, want = scripts.check(policy, key, cost=cost), module.check(policy, key, cost=cost)
            assert got == want, (i, at_ms, policy.rule_words, cost, got, want)
            decisions.append(want)
        return decisions


def test_a_policy_that_loses_a_rule_keeps_the_others_state(plain: PlainServer, module_server: Server) -> None:
    """Issue 36: FIXEDWINDOW 3 1m + FIXEDWINDOW 5 1d spends the day's 5 (3 at 0 s, 2 at 60 s);
    the per-minute rule dropped, the day's rule keeps its state: refused until midnight, on the
    scripts as on the module (the scripts matched by position and admitted 5 more that day).
    The minute's rule back: fresh, the day's still spent."""
    both = Policy("day", rules=(FixedWindow(3, "1m"), FixedWindow(5, "1d")))
    day = Policy("day", rules=(FixedWindow(5, "1d"),))
    steps = [(0, both, 1)] * 3 + [(60_000, both, 1)] * 2 + [(120_000, both, 1)] + [(120_000, day, 1)] * 5 + \
        [(180_000, day, 1), (240_000, both, 1)]
    decisions = through_changes(plain, module_server, "lost:day", steps)
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 8
    assert [(d.limit, d.remaining, d.retry_after_ms, d.rule) for d in decisions[6:11]] == [(5, 0, 86_280_000, 0)] * 5
    assert (decisions[12].rule, decisions[12].retry_after_ms) == (1, 86_160_000)


def test_the_docs_tiers_lose_their_middle_rule(plain: PlainServer, module_server: Server) -> None:
    """docs/policies.md's tiers (10/s, 300/min, 5000/day), the day spent in 17 minutes at 10 a
    second; then the per-minute rule dropped, then the rules reordered and the burst changed:
    each rule keeps its state (the day stays spent), on both backends."""
    tiers = Policy("tiers", rules=(GCRA(10, 10, "1s"), FixedWindow(300, "1m"), FixedWindow(5000, "1d")))
    two = Policy("tiers", rules=(GCRA(10, 10, "1s"), FixedWindow(5000, "1d")))
    moved = Policy("tiers", rules=(FixedWindow(5000, "1d"), GCRA(20, 10, "1s")))
    steps = [(minute * 60_000 + s * 1000, tiers, 10) for minute in range(17) for s in range(30)]
    steps += [(16 * 60_000 + s * 1000, two, 10) for s in range(30, 40)]
    steps += [(17 * 60_000 + s * 1000, moved, 10) for s in range(5)]
    decisions = through_changes(plain, module_server, "lost:tiers", steps)
    admitted = sum(10 for d in decisions if d.allowed)
    assert admitted == 5000
    assert not any(d.allowed for d in decisions[-15:])
    assert [(d.limit, d.rule) for d in decisions[-15:]] == [(5000, 1)] * 10 + [(5000, 0)] * 5


def test_a_limiter_names_a_lost_rules_key_after_one_refusal(plain: PlainServer) -> None:
    """The scripts refuse a call that names fewer keys than the first key's generation wrote
    (RULEKEYS); the limiter calls again with them all, and names them in its later calls of the
    same rules (checks and refunds): one refusal per limiter and rules, not per call."""
    both = Policy("rk", rules=(FixedWindow(3, "1m"), FixedWindow(5, "1d")))
    day = Policy("rk", rules=(FixedWindow(5, "1d"),))
    keys = rule_keys("rk:k", 2)
    with plain.client() as p:
        p.delete(*keys)
        before = RateLimiter(p, backend="script")
        assert before.check(both, "rk:k", cost=2).remaining == 1
        assert before.refund("rk:k", 0, limit=both) == 0  # both scripts loaded
        p.config_resetstat()
        limiter = RateLimiter(p, backend="script")
        assert [limiter.check(day, "rk:k").remaining for _ in range(3)] == [2, 1, 0]
        assert p.exists(keys[1]) == 0 and p.hget(keys[0], "r") == b"1"  # the lost rule's key went
        assert limiter.refund("rk:k", 1, limit=day) == 1
        assert p.info("commandstats")["cmdstat_evalsha"]["calls"] == 5
        assert p.info("errorstats")["errorstat_RULEKEYS"]["count"] == 1


async def test_a_lost_rules_key_on_every_path(plain: PlainServer) -> None:
    """RULEKEYS answered on each way a check is sent: AsyncRateLimiter, and with ``durable`` (a
    pipeline with WAIT), sync and async: the day's spent state is found, the check refused."""
    both = Policy("paths", rules=(SlidingWindow(5, "1m"), FixedWindow(5, "1d")))
    day = Policy("paths", rules=(FixedWindow(5, "1d"),))
    keys = rule_keys("paths:k", 2)
    with plain.client() as p:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=plain.port)
        try:
            for path in ("async", "durable", "async durable"):
                p.delete(*keys)
                assert RateLimiter(p, backend="script").check(both, "paths:k", cost=5).remaining == 0
                durable = {"durable": 1, "durable_timeout_ms": 1} if "durable" in path else {}
                if path.startswith("async"):
                    decision = await AsyncRateLimiter(aclient, backend="script").check(day, "paths:k", **durable)
                else:
                    decision = RateLimiter(p, backend="script").check(day, "paths:k", **durable)
                assert (decision.allowed, decision.remaining, decision.limit) == (False, 0, 5), path
        finally:
            await aclient.aclose()
