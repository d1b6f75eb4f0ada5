"""The gateway as operators meet it: POST /json and /healthcheck, the rules files reloaded (and a
bad one refused, the rules in force kept), the response headers (envoyproxy/ratelimit's three, or
draft-11's fields), every algorithm behind a rule with the module's debug clock, global shadow
mode, Redis failing (closed, or open) within the deadline, and SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time

import grpc
import pytest

from conftest import OK, OVER_LIMIT, T0_MS, FakeTime, Gateway, Server, descriptor

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 5, name: per_team}
"""


def body(*descriptors: list[tuple[str, str]], **extra: object) -> dict:
    return {
        "domain": "api",
        "descriptors": [{"entries": [{"key": k, "value": v} for k, v in d]} for d in descriptors],
        **extra,
    }


def test_json_as_envoyproxy_ratelimit_serves_it(gateways) -> None:
    g = gateways({"api.yaml": RULES})
    status, answer = g.json(body([("user", "a")], [("team", "t")]))
    assert status == 200
    assert answer == {
        "overallCode": "OK",
        "statuses": [
            {"code": "OK", "currentLimit": {"requestsPerUnit": 2, "unit": "MINUTE"},
             "limitRemaining": 1, "durationUntilReset": "40s"},
            {"code": "OK", "currentLimit": {"name": "per_team", "requestsPerUnit": 5, "unit": "MINUTE"},
             "limitRemaining": 4, "durationUntilReset": "40s"},
        ],
    }
    # hits_addend in either spelling, as a string: 2 more do not fit.
    status, answer = g.json(body([("user", "a")], hits_addend="2"))
    assert status == 429
    assert answer["statuses"] == [
        {"code": "OVER_LIMIT", "currentLimit": {"requestsPerUnit": 2, "unit": "MINUTE"},
         "durationUntilReset": "40s"}]
    status, answer = g.json({"domain": "api", "descriptors": [{"entries": [{"key": "nobody"}]}]})
    assert (status, answer) == (200, {"overallCode": "OK", "statuses": [{"code": "OK"}]})
    for bad in [b"", b"{", b'{"domian": "api"}', b'{"domain": ""}']:
        assert g.json(bad) == (400, b"Bad Request\n"), bad
    assert g.get(g.http_port, "/healthcheck")[:2] == (200, b"OK")


def test_rules_reloaded_and_a_bad_file_refused(gateways) -> None:
    g = gateways({"api.yaml": RULES})
    assert g.metric("ratelimit_service_config_load_success") == 1
    (g.config / "api.yaml").write_text(RULES.replace("requests_per_unit: 2}", "requests_per_unit: 3}"))
    g.wait_metric("ratelimit_service_config_load_success", 2)
    assert "api.user: unit=MINUTE requests_per_unit=3" in g.debug("/rlconfig")
    assert g.should("api", descriptor(("user", "a"))).statuses[0].limit_remaining == 2
    # A bad file beside it: the set is refused, the rules in force stay.
    (g.config / "bad.yaml").write_text("domain: other\ndescriptors:\n  - key: k\n    ratelimit: {}\n")
    g.wait_metric("ratelimit_service_config_load_error", 1)
    assert "config error, unknown key 'ratelimit'" in g.log()
    assert g.should("api", descriptor(("user", "a"))).statuses[0].limit_remaining == 1
    # Fixed: loaded, with the new domain.
    (g.config / "bad.yaml").write_text("domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
    g.wait_metric("ratelimit_service_config_load_success", 3)
    assert g.should("other", descriptor(("k", "v"))).statuses[0].current_limit.requests_per_unit == 1
    assert g.debug("/rlconfig").splitlines() == [
        "api.team: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false",
        "api.user: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false",
        "other.k: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false",
    ]


def test_a_bad_file_at_start_fails_every_request_until_fixed(gateways) -> None:
    g = gateways({"api.yaml": "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
    assert "invalid rate limit unit 'fortnight'" in g.log()
    assert g.metric("ratelimit_service_config_load_error") == 1
    with pytest.raises(grpc.RpcError) as e:
        g.should("api", descriptor(("user", "a")))
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNKNOWN, "no rate limit configuration loaded")
    assert g.json(body([("user", "a")])) == (400, b"Bad Request\n")
    (g.config / "api.yaml").write_text(RULES)
    g.wait_metric("ratelimit_service_config_load_success", 1)
    assert g.should("api", descriptor(("user", "a"))).overall_code == OK


def test_envoyproxy_ratelimits_three_headers(gateways) -> None:
    g = gateways({"api.yaml": RULES}, {"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"})
    r = g.should("api", descriptor(("team", "t")), descriptor(("user", "u")))
    assert [(h.key, h.value) for h in r.response_headers_to_add] == [
        ("RateLimit-Limit", "2"), ("RateLimit-Remaining", "1"), ("X-Reset", "40")]


def test_draft_11_fields(gateways) -> None:
    g = gateways({"api.yaml": RULES}, {"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "RATELIMIT_HEADERS": "draft-11"})
    r = g.should("api", descriptor(("team", "t")), descriptor(("user", "u")))
    assert [(h.key, h.value) for h in r.response_headers_to_add] == [
        ("RateLimit-Policy", '"per_team";q=5;w=60, "api.user";q=2;w=60'),
        ("RateLimit", '"per_team";r=4;t=40, "api.user";r=1;t=40'),
    ]
    g.should("api", descriptor(("user", "u")))
    r = g.should("api", descriptor(("team", "t")), descriptor(("user", "u")))
    assert r.overall_code == OVER_LIMIT
    assert [(h.key, h.value) for h in r.response_headers_to_add] == [
        ("RateLimit-Policy", '"per_team";q=5;w=60, "api.user";q=2;w=60'),
        ("RateLimit", '"per_team";r=4;t=40, "api.user";r=0;t=40'),
        ("Retry-After", "40"),
    ]


ALGORITHMS = """
domain: algo
descriptors:
  - key: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 7, algorithm: sliding_window}
  - key: sliding_log
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
  - key: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 3}
  - key: leaky_bucket
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leaky_bucket, burst: 2}
"""


def test_every_algorithm_behind_a_rule(gateways, redis_server) -> None:
    g = gateways({"algo.yaml": ALGORITHMS}, {"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "RATELIMIT_HEADERS": "draft-11"})
    clock = FakeTime(redis_server)

    def ask(key: str, hits: int = 1):
        return g.should("algo", descriptor((key, "k")), hits=hits)

    # The sliding window counter (docs/sliding-window.md): 7 a minute, 5 in the previous minute and 3 in this
    # one; 30% into it the estimate is 3 + 5 × 0.7 = 6.5, floored to 6: one more passes.
    clock.advance(40_000)  # T0 is 20 s into a minute: now at the next minute's start
    assert ask("sliding_window", 5).overall_code == OK
    clock.advance(78_000)
    assert ask("sliding_window", 3).overall_code == OK
    assert [ask("sliding_window").overall_code for _ in range(2)] == [OK, OVER_LIMIT]
    # The sliding log, 2 a minute: at 1 s and 30 s pass, at 50 s refused, at 100 s passes.
    clock.advance(1_000)
    assert ask("sliding_log").overall_code == OK
    clock.advance(29_000)
    assert ask("sliding_log").overall_code == OK
    clock.advance(20_000)
    refused = ask("sliding_log")
    assert refused.overall_code == OVER_LIMIT
    assert dict((h.key, h.value) for h in refused.response_headers_to_add)["Retry-After"] == "11"
    clock.advance(50_000)
    assert ask("sliding_log").overall_code == OK
    # The token bucket, 4 a minute: four pass, the fifth is refused, 15 s to wait.
    assert [ask("token_bucket").overall_code for _ in range(5)] == [OK] * 4 + [OVER_LIMIT]
    assert dict((h.key, h.value) for h in ask("token_bucket").response_headers_to_add)["Retry-After"] == "15"
    # GCRA, 10 a second with a burst of 3: three at once, then one each 100 ms.
    assert [ask("gcra").overall_code for _ in range(4)] == [OK] * 3 + [OVER_LIMIT]
    clock.advance(100)
    assert [ask("gcra").overall_code for _ in range(2)] == [OK, OVER_LIMIT]
    gcra = ask("gcra")
    assert gcra.statuses[0].current_limit.requests_per_unit == 10
    assert dict((h.key, h.value) for h in gcra.response_headers_to_add)["RateLimit-Policy"] == '"algo.gcra";q=3;w=1'
    # The leaky bucket, 2 a second, 2 queued at most.
    assert [ask("leaky_bucket").overall_code for _ in range(3)] == [OK, OK, OVER_LIMIT]
    with redis_server.client() as c:
        kinds = {k: c.execute_command("RL.INSPECT", f"algo_{k}_k_{u}_{k}")[b"algorithm"]
                 for k, u in [("gcra", "second"), ("token_bucket", "minute"), ("sliding_log", "minute")]}
    assert kinds == {"gcra": b"gcra", "token_bucket": b"tokenbucket", "sliding_log": b"slidinglog"}


def test_global_shadow_mode_answers_ok_and_keeps_the_statuses(gateways) -> None:
    g = gateways({"api.yaml": RULES}, {"SHADOW_MODE": "true"})
    user = descriptor(("user", "a"))
    answers = [g.should("api", user, descriptor(("team", "t"))) for _ in range(3)]
    assert [r.overall_code for r in answers] == [OK] * 3
    assert [s.code for s in answers[2].statuses] == [OVER_LIMIT, OK]
    # Let through, so kept: the team's 3 units stay taken.
    assert answers[2].statuses[1].limit_remaining == 2
    assert g.metric("ratelimit_service_global_shadow_mode") == 1


@pytest.fixture
def own_server(tmp_path):
    s = Server(tmp_path / "own-redis")
    s.freeze(T0_MS)
    yield s
    s.stop()


@pytest.mark.parametrize("fail_open", [False, True])
def test_redis_late_or_gone_within_the_deadline(gateways, own_server, tmp_path, fail_open) -> None:
    env = {"REDIS_TIMEOUT": "300ms", "RATELIMIT_FAIL_OPEN": str(fail_open).lower()}
    g = Gateway(tmp_path / "gw", f"127.0.0.1:{own_server.port}", {"api.yaml": RULES}, env)
    try:
        user = descriptor(("user", "a"))
        assert g.should("api", user).statuses[0].limit_remaining == 1
        own_server.pause()
        try:
            if fail_open:
                r = g.should("api", user)
                assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
                assert g.metric("ratelimit_service_fail_open") == 1
            else:
                with pytest.raises(grpc.RpcError) as e:
                    g.should("api", user)
                assert e.value.code() == grpc.StatusCode.UNKNOWN
                assert e.value.details() == "no answer from Redis within 300ms"
                assert g.json(body([("user", "a")])) == (400, b"Bad Request\n")
            assert g.metric('ratelimit_service_should_rate_limit_error{err_type="redis_error"}') >= 1
        finally:
            own_server.resume()
        # Back: the same connection (or a new one) answers, and the count went on.
        deadline = time.monotonic() + 30
        while True:
            try:
                r = g.should("api", user)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
        assert r.statuses[0].limit_remaining == 0
    finally:
        assert g.stop() == 0, g.log()


def test_sigterm_drains_and_exits(gateways) -> None:
    g = gateways({"api.yaml": RULES})
    assert g.should("api", descriptor(("user", "a"))).overall_code == OK
    g.proc.send_signal(signal.SIGTERM)
    assert g.proc.wait(30) == 0
    assert "stopping: draining in-flight requests" in g.log()


def test_a_wrong_setting_stops_it_at_start(tmp_path, redis_server) -> None:
    g = Gateway(tmp_path, f"127.0.0.1:{redis_server.port}", {}, {"REDIS_TIMEOUT": "soon"}, ready=False)
    assert g.proc.wait(30) == 2
    assert 'REDIS_TIMEOUT="soon"' in g.log()


def test_a_call_that_fails_fails_the_request_and_takes_nothing(gateways, redis_server) -> None:
    g = gateways({"api.yaml": RULES})
    with redis_server.client() as c:
        c.set("api_user_b_minute", "not a limiter")
    with pytest.raises(grpc.RpcError) as e:
        g.should("api", descriptor(("team", "t")), descriptor(("user", "b")))
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert "WRONGTYPE" in e.value.details()
    # The team's descriptor was admitted in the same pipeline, then given its unit back.
    assert g.should("api", descriptor(("team", "t"))).statuses[0].limit_remaining == 4
