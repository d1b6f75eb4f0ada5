"""Local budgets (`local_budget:` in a rule): a hot descriptor's units taken from the module a
batch at a time with ATMOST and spent in the service without a round trip each; given back with
RL.REFUND when unspent half a `hold` after their refill and at SIGTERM; a fixed window's
dropped at its end when it comes within the hold; put back in the budget when the request is
refused by another descriptor. Counted from the module's side: INFO commandstats' calls, and
what the key has left (a DRYRUN), with the module's clock frozen."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import OK, OVER_LIMIT, descriptor

RULES = """
domain: hot
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 100, local_budget: 5, hold: 1h}
  - key: api_day
    rate_limit: {unit: day, requests_per_unit: 100, local_budget: 5, hold: 1h}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shared
    rate_limit: {unit: minute, requests_per_unit: 10, local_budget: 4, hold: 1h}
  - key: paced
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra, burst: 2, local_budget: 4, hold: 1h}
  - key: brief
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window, local_budget: 5, hold: 200ms}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 100, local_budget: 5, hold: 2s}
  - key: crowd
    rate_limit: {unit: minute, requests_per_unit: 1000, local_budget: 8, hold: 1h}
"""


def calls(server, command: str) -> int:
    """The calls of a command so far (INFO commandstats)."""
    with server.client() as c:
        return int(c.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def left(server, key: str, limit: int, algorithm: str = "RL.FIXEDWINDOW") -> int:
    """What a key of `limit` a minute has left, from the module (DRYRUN takes nothing; its
    reply counts the request it did not make)."""
    with server.client() as c:
        reply = c.execute_command(algorithm, key, str(limit), "60s", "DRYRUN")
    if isinstance(reply, dict):  # RESP3
        return int(reply[b"remaining"]) + int(reply[b"allowed"])
    return reply[2] + reply[0]


def ask(g, *keys: str, hits: int = 0):
    return g.should("hot", *(descriptor((k, "x")) for k in keys), hits=hits)


@pytest.mark.parametrize("backend", ["module", "script"])
def test_one_refill_serves_the_budget_and_sigterm_gives_back_the_rest(gateways, redis_server, backend) -> None:
    g = gateways({"hot.yaml": RULES}, {"RATELIMIT_BACKEND": backend})
    command = "rl.fixedwindow" if backend == "module" else "evalsha"
    # The scripts read the server's real clock (the module's debug clock is the module's): a
    # day's window, which a test's seconds cross only at midnight UTC, not a minute's.
    api = "api" if backend == "module" else "api_day"
    before = calls(redis_server, command)
    # One ATMOST 5 takes five units; the four requests after it are answered here. What remains
    # is what the budget holds and what the key has left, as without a budget.
    assert [ask(g, api).statuses[0].limit_remaining for _ in range(5)] == [99, 98, 97, 96, 95]
    assert calls(redis_server, command) - before == 1
    # The sixth refills; a request of more units than the budget goes to Redis as it is.
    assert ask(g, api).statuses[0].limit_remaining == 94
    assert ask(g, api, hits=7).statuses[0].limit_remaining == 83
    assert calls(redis_server, command) - before == 3
    assert (g.metric("ratelimit_local_budget_local_admitted"), g.metric("ratelimit_local_budget_refills"),
            g.metric("ratelimit_local_budget_held")) == (4, 2, 4)
    # SIGTERM: the four units held are given back before it exits; the next instance's refill
    # finds them (83 + 4 left, 5 of them taken, 1 spent).
    assert g.stop() == 0
    assert ask(gateways({"hot.yaml": RULES}, {"RATELIMIT_BACKEND": backend}), api).statuses[0].limit_remaining == 86
    if backend == "module":
        assert left(redis_server, "hot_api_x_minute", 100) == 82


def test_a_refused_request_puts_its_units_back_in_the_budget(gateways, redis_server) -> None:
    g = gateways({"hot.yaml": RULES})
    before = calls(redis_server, "rl.fixedwindow")
    assert ask(g, "api", "user").overall_code == OK
    # The user's limit refuses the second: the api's unit goes back to the budget, not Redis.
    refused = ask(g, "api", "user")
    assert refused.overall_code == OVER_LIMIT
    assert [s.limit_remaining for s in refused.statuses] == [99, 0]
    assert [ask(g, "api").statuses[0].limit_remaining for _ in range(4)] == [98, 97, 96, 95]
    # One refill, and the user's two calls.
    assert calls(redis_server, "rl.fixedwindow") - before == 3
    assert left(redis_server, "hot_api_x_minute", 100) == 95


def test_instances_together_admit_the_limit_exactly(gateways, redis_server) -> None:
    a, b = gateways({"hot.yaml": RULES}), gateways({"hot.yaml": RULES})
    # 10 a minute, budgets of 4: a takes 4, b 4, then a the last 2; b's next refill gets none.
    admitted = {id(a): 0, id(b): 0}
    for _ in range(10):
        for g in (a, b):
            admitted[id(g)] += ask(g, "shared").overall_code == OK
    assert (admitted[id(a)], admitted[id(b)]) == (6, 4)
    assert left(redis_server, "hot_shared_x_minute", 10) == 0


def test_a_refill_that_gets_nothing_refuses_without_a_round_trip(gateways, redis_server) -> None:
    g = gateways({"hot.yaml": RULES})
    # GCRA, 10 a minute with a burst of 2: the first refill gets 2, the next none (one unit
    # comes back every 6 s), and that refusal stands for its retry time.
    assert [ask(g, "paced").overall_code for _ in range(3)] == [OK, OK, OVER_LIMIT]
    before = calls(redis_server, "rl.gcra")
    refused = [ask(g, "paced") for _ in range(3)]
    assert [r.overall_code for r in refused] == [OVER_LIMIT] * 3
    assert calls(redis_server, "rl.gcra") == before
    assert 0 < refused[-1].statuses[0].duration_until_reset.seconds <= 12


def test_unspent_units_are_given_back_half_a_hold_after_their_refill(gateways, redis_server) -> None:
    g = gateways({"hot.yaml": RULES})
    assert ask(g, "brief").overall_code == OK
    # hold 200ms: the four left are given back 100 ms after the refill left.
    g.wait_metric("ratelimit_local_budget_refunded", 4)
    assert left(redis_server, "hot_brief_x_minute_sliding_window", 100, "RL.SLIDINGWINDOW") == 99
    assert g.metric("ratelimit_local_budget_held") == 0


def test_a_fixed_windows_units_lapse_at_its_end_within_the_hold(gateways, redis_server) -> None:
    g = gateways({"hot.yaml": RULES})
    # A window of a second ends within the hold (2s): its units are spent until it ends and
    # dropped there, not given back (a refund then would count for the next window).
    assert ask(g, "second").overall_code == OK
    g.wait_metric("ratelimit_local_budget_expired", 4)
    assert g.metric("ratelimit_local_budget_refunded") == 0


def test_requests_at_once_share_one_refill_per_batch(gateways, redis_server) -> None:
    g = gateways({"hot.yaml": RULES})
    # 64 requests, 16 at a time, on an empty budget of 8: a request that finds a refill in
    # flight waits for it, so every refill is of 8 and there are 64 / 8 of them.
    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda _: ask(g, "crowd").overall_code, range(64)))
    assert codes == [OK] * 64
    assert g.metric("ratelimit_local_budget_refills") == 8
    assert left(redis_server, "hot_crowd_x_minute", 1000) == 1000 - 64


def test_a_bad_budget_is_refused_with_the_old_rules_kept(gateways) -> None:
    g = gateways({"hot.yaml": RULES})
    (g.config / "hot.yaml").write_text(RULES.replace("local_budget: 5, hold: 1h", "local_budget: 5, hold: soon"))
    g.wait_metric("ratelimit_service_config_load_error", 1)
    assert "invalid hold 'soon'" in g.log()
    assert ask(g, "api").statuses[0].limit_remaining == 99


def test_a_request_with_one_budget_twice_waits_for_no_one(gateways, redis_server) -> None:
    g = gateways({"hot.yaml": RULES}, {"REDIS_TIMEOUT": "2s"})
    # Two of Envoy's actions can make the same descriptor: the second finds the first's refill
    # in flight, its own request's, and is served from it.
    twice = ask(g, "api", "api")
    assert (twice.overall_code, [s.limit_remaining for s in twice.statuses]) == (OK, [99, 98])
    assert g.metric("ratelimit_local_budget_refills") == 1
