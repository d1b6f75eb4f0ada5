"""The gateway on Redis Sentinel (REDIS_TYPE=sentinel): it asks the Sentinels for the primary,
and when a failover demotes that primary (its writes refused READONLY), it asks again and sends the
request to the new one. The primary, its replica and three real Sentinels are the Python package's
failover harness (clients/python/tests/test_failover.py)."""

from __future__ import annotations

from pathlib import Path

import grpc

from conftest import OK, Gateway, descriptor, package_test_module

failover = package_test_module("package_failover", "test_failover.py")
watched = failover.watched
until = failover.until

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
"""


def test_a_failover_followed(watched, tmp_path: Path) -> None:
    primary, replica, sentinels, _ = watched
    urls = ",".join(f"127.0.0.1:{s.port}" for s in sentinels)
    g = Gateway(tmp_path / "gw", f"main,{urls}", {"api.yaml": RULES}, {"REDIS_TYPE": "sentinel"})
    try:
        user = descriptor(("user", "a"))
        assert [g.should("api", user).statuses[0].limit_remaining for _ in range(3)] == [99, 98, 97]
        # The replica has the three (replication: WAIT for it), then Sentinel swaps the two.
        with primary.client() as c:
            assert c.execute_command("WAIT", 1, 60_000) == 1
        with sentinels[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", "main")
        until("the replica promoted", lambda: all(s.primary_port() == replica.port for s in sentinels))
        until("the old primary a replica", lambda: failover.replication(primary.port)["role"] == "slave")
        # The next request meets the demoted primary: refused READONLY (nothing taken), it is
        # sent again to the primary Sentinel names now; or its connection was closed (Sentinel
        # closes the clients of a demoted primary): it fails, as any Redis failure does (it
        # may have been taken), and the next goes to the new primary.
        try:
            r = g.should("api", user)
            failed = 0
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNKNOWN
            r = g.should("api", user)
            failed = 1
        assert r.overall_code == OK
        with replica.client() as c:
            count = c.execute_command("RL.INSPECT", "api_user_a_hour")[b"count"]
        assert r.statuses[0].limit_remaining == 100 - count
        assert 4 <= count <= 4 + failed
        assert "Sentinel: connected to the primary it names now" in g.log()
    finally:
        assert g.stop() == 0, g.log()
