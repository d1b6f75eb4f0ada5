"""The gateway as Envoy calls it: gRPC ShouldRateLimit with the messages generated from Envoy's
own rls.proto, on envoyproxy/ratelimit's README examples 1 to 11 (the rules files verbatim), a
request's own limits and hits, and its errors. The module's debug clock is frozen at T0_MS
(1,700,000,000 s: 20 s into a minute, 800 s into an hour, 80,000 s into a day), so every
window's remaining time is exact."""

from __future__ import annotations

import grpc
import pytest

from conftest import OK, OVER_LIMIT, descriptor

MINUTE, HOUR, DAY = 2, 3, 4
RESET = {"second": 1, "minute": 40, "hour": 2800, "day": 6400}


def codes(response) -> list[int]:
    return [s.code for s in response.statuses]


def remaining(response) -> list[int]:
    return [s.limit_remaining for s in response.statuses]


def test_example_1_a_limit_per_value(gateways) -> None:
    g = gateways({"mongo.yaml": """
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"""})
    users = descriptor(("database", "users"))
    for i in range(500):
        r = g.should("mongo_cps", users)
        assert (r.overall_code, r.statuses[0].limit_remaining) == (OK, 499 - i)
    r = g.should("mongo_cps", users)
    assert r.overall_code == OVER_LIMIT
    s = r.statuses[0]
    assert (s.code, s.limit_remaining, s.current_limit.requests_per_unit, s.current_limit.unit) == (
        OVER_LIMIT, 0, 500, 1)
    assert s.duration_until_reset.seconds == RESET["second"]
    other = g.should("mongo_cps", descriptor(("database", "other")))
    assert other.overall_code == OK
    assert not other.statuses[0].HasField("current_limit")
    assert other.statuses[0].limit_remaining == 0
    assert g.should("mongo_cps", descriptor(("database", "default"))).statuses[0].limit_remaining == 499


MESSAGING = """
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"""


def test_example_2_a_refused_request_takes_nothing_from_the_others(gateways, redis_server) -> None:
    g = gateways({"messaging.yaml": MESSAGING})
    d1 = descriptor(("message_type", "marketing"), ("to_number", "2061111111"))
    d2 = descriptor(("to_number", "2061111111"))
    for i in range(5):
        r = g.should("messaging", d1, d2)
        assert (r.overall_code, remaining(r)) == (OK, [4 - i, 99 - i])
        assert [s.duration_until_reset.seconds for s in r.statuses] == [RESET["day"]] * 2
    refused = g.should("messaging", d1, d2)
    assert refused.overall_code == OVER_LIMIT
    assert codes(refused) == [OVER_LIMIT, OK]
    # The 100-a-day descriptor was admitted, then given its unit back: 95 remain, as before.
    assert remaining(refused) == [0, 95]
    assert g.should("messaging", d2).statuses[0].limit_remaining == 94
    with redis_server.client() as c:
        state = c.execute_command("RL.INSPECT", "messaging_to_number_2061111111_day")
        assert (state[b"algorithm"], state[b"count"]) == (b"fixedwindow", 6)
        assert c.exists("messaging_message_type_marketing_to_number_2061111111_day") == 1
    # Another number counts apart.
    assert remaining(g.should("messaging", descriptor(("to_number", "2062222222")))) == [99]


def test_example_3_an_exact_value_beats_the_key_alone(gateways) -> None:
    g = gateways({"ip.yaml": """
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
"""})
    one = descriptor(("remote_address", "50.0.0.1"))
    assert [g.should("edge_proxy_per_ip", one).overall_code for _ in range(11)] == [OK] * 10 + [OVER_LIMIT]
    blocked = g.should("edge_proxy_per_ip", descriptor(("remote_address", "50.0.0.5")))
    assert (blocked.overall_code, blocked.statuses[0].limit_remaining) == (OVER_LIMIT, 0)
    labels = 'domain="edge_proxy_per_ip",key1="remote_address_50_0_0_5",key2=""'
    assert g.metric(f"ratelimit_service_rate_limit_over_limit{{{labels}}}") == 1
    assert g.metric(f"ratelimit_service_rate_limit_total_hits{{{labels}}}") == 1


def test_example_4_a_rule_applies_where_the_descriptor_ends(gateways) -> None:
    request = descriptor(("key", "value"), ("subkey", "subvalue"))
    a = gateways({"a.yaml": """
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
"""})
    r = a.should("example4", request)
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    b = gateways({"b.yaml": """
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
"""})
    r = b.should("example4", request)
    assert (r.statuses[0].current_limit.requests_per_unit, r.statuses[0].limit_remaining) == (300, 299)


def test_example_5_unlimited_makes_no_call(gateways, redis_server) -> None:
    g = gateways({"internal.yaml": """
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
"""})
    before = redis_server.calls("rl.fixedwindow")
    r = g.should("internal", descriptor(("ldap", "x")))
    assert (r.overall_code, r.statuses[0].limit_remaining) == (OK, 4294967295)
    assert not r.statuses[0].HasField("current_limit")
    assert redis_server.calls("rl.fixedwindow") == before
    azure = descriptor(("azure", "x"))
    assert [g.should("internal", azure).overall_code for _ in range(101)][-2:] == [OK, OVER_LIMIT]


def test_example_6_shadow_mode_on_a_rule(gateways) -> None:
    g = gateways({"example6.yaml": """
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit:
          requests_per_unit: 10
          unit: second
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
"""})
    a = descriptor(("service", "auth-service"), ("user", "user-a"))
    answers = [g.should("example6", a) for _ in range(15)]
    assert [r.overall_code for r in answers] == [OK] * 15
    assert [r.statuses[0].limit_remaining for r in answers] == list(range(9, -1, -1)) + [0] * 5
    labels = 'domain="example6",key1="service",key2="user_user-a"'
    assert g.metric(f"ratelimit_service_rate_limit_shadow_mode{{{labels}}}") == 5
    assert g.metric(f"ratelimit_service_rate_limit_over_limit{{{labels}}}") == 5
    assert g.metric(f"ratelimit_service_rate_limit_within_limit{{{labels}}}") == 10
    b = descriptor(("service", "auth-service"), ("user", "user-b"))
    assert [g.should("example6", b).overall_code for _ in range(21)][-2:] == [OK, OVER_LIMIT]
    c = g.should("example6", descriptor(("service", "auth-service"), ("user", "user-c")))
    assert c.overall_code == OK and not c.statuses[0].HasField("current_limit")


def test_example_7_replaces_between_descriptors_of_one_request(gateways, redis_server) -> None:
    g = gateways({"example7.yaml": """
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"""})
    first = descriptor(("key_1", "value_1"), ("user", "bkthomps"))
    second = descriptor(("key_2", "value_2"), ("user", "bkthomps"))
    alone = g.should("example7", first)
    assert alone.statuses[0].current_limit.name == "specific_limit"
    assert alone.statuses[0].limit_remaining == 4
    both = [g.should("example7", first, second) for _ in range(11)]
    assert [r.overall_code for r in both] == [OK] * 10 + [OVER_LIMIT]
    assert not both[0].statuses[0].HasField("current_limit")
    assert both[0].statuses[1].limit_remaining == 9
    # The replaced rule was not called: its key still has the one request made alone.
    with redis_server.client() as c:
        state = c.execute_command("RL.INSPECT", "example7_key_1_value_1_user_bkthomps_second")
    assert state[b"count"] == 1


def test_example_8_detailed_metric(gateways) -> None:
    g = gateways({"example8.yaml": """
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
"""})
    for value, limit in [("unspecified_value", 10), ("unspecified_value2", 10), ("value1", 20)]:
        r = g.should("example8", descriptor(("key1", value)))
        assert (r.statuses[0].current_limit.requests_per_unit, r.statuses[0].limit_remaining) == (limit, limit - 1)
    for key in ["key1_unspecified_value", "key1_unspecified_value2", "key1_value1"]:
        assert g.metric(f'ratelimit_service_rate_limit_total_hits{{domain="example8",key1="{key}",key2=""}}') == 1


def test_example_9_wildcards_each_value_its_own_counter(gateways) -> None:
    g = gateways({"example9.yaml": """
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
"""})
    for entry in [("key1", "value1"), ("key1", "value2"), ("key1", "valueXYZ"), ("path", "/api/123/action"),
                  ("route", "/api/v1/resource/123/action")]:
        r = g.should("example9", descriptor(entry))
        assert r.statuses[0].limit_remaining == 19, entry
        assert r.statuses[0].duration_until_reset.seconds == RESET["minute"]
    other = g.should("example9", descriptor(("path", "/api/123/other")))
    assert not other.statuses[0].HasField("current_limit")
    assert g.metric('ratelimit_service_rate_limit_total_hits{domain="example9",key1="key1_value*",key2=""}') == 3


def test_example_10_value_to_metric(gateways) -> None:
    g = gateways({"example10.yaml": """
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
"""})
    r = g.should("example10", descriptor(("route", "api"), ("http_method", "GET"), ("subject_id", "123")))
    assert r.statuses[0].limit_remaining == 59
    # route_api.http_method_GET.subject_id: the first three parts are the labels.
    assert g.metric('ratelimit_service_rate_limit_total_hits{domain="example10",key1="route_api",key2="http_method_GET"}') == 1


def test_example_11_share_threshold(gateways) -> None:
    g = gateways({"example11.yaml": """
domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
"""})
    for name in ["a.pdf"] * 5 + ["b.csv"] * 5:
        assert g.should("example11", descriptor(("files", f"files/{name}"))).overall_code == OK
    over = g.should("example11", descriptor(("files", "files/c.txt")))
    assert over.overall_code == OVER_LIMIT
    assert over.statuses[0].duration_until_reset.seconds == RESET["hour"]
    for _ in range(10):
        assert g.should("example11", descriptor(("files_no_share", "files_no_share/a.pdf"))).overall_code == OK
    assert g.should("example11", descriptor(("files_no_share", "files_no_share/b.csv"))).overall_code == OK


def test_a_requests_own_limit_and_hits(gateways) -> None:
    g = gateways({"messaging.yaml": MESSAGING})
    own = descriptor(("anything", "x"), limit=(3, MINUTE))
    r = g.should("messaging", own, hits=2)
    s = r.statuses[0]
    assert (s.current_limit.requests_per_unit, s.current_limit.unit, s.limit_remaining) == (3, MINUTE, 1)
    assert s.duration_until_reset.seconds == RESET["minute"]
    # 2 more do not fit: refused, nothing taken; the descriptor's own hits_addend 0 only looks.
    assert g.should("messaging", own, hits=2).overall_code == OVER_LIMIT
    look = descriptor(("anything", "x"), limit=(3, MINUTE), hits=0)
    assert remaining(g.should("messaging", look, hits=5)) == [1]
    assert g.metric('ratelimit_service_rate_limit_total_hits{domain="messaging",key1="anything_x",key2=""}') == 4
    # An unknown domain: no limit, even with one sent.
    unknown = g.should("nowhere", own)
    assert unknown.overall_code == OK and not unknown.statuses[0].HasField("current_limit")
    assert g.metric('ratelimit_service_rate_limit_domain_not_found{domain="nowhere"}') == 1


def test_the_request_errors_are_that_services(gateways) -> None:
    g = gateways({"messaging.yaml": MESSAGING})
    for domain, descriptors, text in [
        ("", [descriptor(("k", "v"))], "rate limit domain must not be empty"),
        ("messaging", [], "rate limit descriptor list must not be empty"),
    ]:
        with pytest.raises(grpc.RpcError) as e:
            g.should(domain, *descriptors)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNKNOWN, text)
    assert g.metric('ratelimit_service_should_rate_limit_error{err_type="service_error"}') == 2
