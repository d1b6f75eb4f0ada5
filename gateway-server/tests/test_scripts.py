"""The gateway where the server has no module (managed Redis and Valkey refuse MODULE LOAD):
each call is the client packages' Lua script that stands for it (clients/lua, reply for reply
the module's), loaded at start and loaded again where a server forgot it."""

from __future__ import annotations

from pathlib import Path

from conftest import OK, OVER_LIMIT, Gateway, descriptor, harness

# GCRA and a window over a year: no decision here depends on when the test runs (a GCRA
# emission interval of 36.5 days; the year's window ends on a fixed date, and its count is read
# before and after within the test).
RULES = """
domain: api
descriptors:
  - key: burst
    rate_limit: {unit: year, requests_per_unit: 10, algorithm: gcra, burst: 3}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 100}
  - key: log
    rate_limit: {unit: year, requests_per_unit: 2, algorithm: sliding_log}
"""


def test_the_script_backend(tmp_path: Path) -> None:
    server = harness.PlainServer(tmp_path / "plain")
    g = Gateway(tmp_path / "gw", f"127.0.0.1:{server.port}", {"api.yaml": RULES})
    try:
        assert "the script backend" in g.log()
        burst = descriptor(("burst", "b"))
        assert [g.should("api", burst).overall_code for _ in range(4)] == [OK, OK, OK, OVER_LIMIT]
        yearly = descriptor(("yearly", "y"))
        first = g.should("api", yearly).statuses[0]
        assert first.limit_remaining == 99
        assert 0 < first.duration_until_reset.seconds <= 365 * 86400
        # Refused by the GCRA rule: the year's unit is given back (refund.lua).
        refused = g.should("api", burst, yearly)
        assert refused.overall_code == OVER_LIMIT
        assert refused.statuses[1].limit_remaining == 99
        assert g.should("api", yearly).statuses[0].limit_remaining == 98
        with server.client() as c:
            assert c.exists("api_yearly_y_year", "api_burst_b_year_gcra") == 2
            assert server.calls("evalsha") == 9 and server.calls("eval") == 0
            # A server that forgot the scripts (a restart, SCRIPT FLUSH): NOSCRIPT, then EVAL,
            # which leaves the script there for the next EVALSHA.
            c.script_flush()
        log = descriptor(("log", "l"))
        assert [g.should("api", log).overall_code for _ in range(3)] == [OK, OK, OVER_LIMIT]
        assert server.calls("eval") == 1
        assert g.should("api", yearly).statuses[0].limit_remaining == 97
        assert server.calls("eval") == 2
    finally:
        assert g.stop() == 0, g.log()
        server.stop()


def test_the_module_asked_for_where_there_is_none(tmp_path: Path) -> None:
    server = harness.PlainServer(tmp_path / "plain")
    try:
        g = Gateway(tmp_path / "gw", f"127.0.0.1:{server.port}", {"api.yaml": RULES},
                    {"RATELIMIT_BACKEND": "module"}, ready=False)
        assert g.proc.wait(60) == 1
        assert "RATELIMIT_BACKEND=module: the ratelimit module is not loaded in Redis" in g.log()
    finally:
        server.stop()
