"""Policies whose rules the application gives (``Policy(name, rules=...)``) on both backends
(issue 28; SPEC §8): on the script backend one script over a key per rule (``{key}:0``...,
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
import redis.cluster

from conftest import ROOT, T0_MS, PlainServer, Server
from ratelimit_redis_module import (
    GCRA,
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
