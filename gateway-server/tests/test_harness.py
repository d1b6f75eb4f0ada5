"""The harness itself: a gateway started while make test's other runs start servers of their own.

A free port is one nothing listened on when the harness asked; another process can take it before
the gateway binds it (make test runs 6 suites side by side, each starting servers on free ports).
The gateway then exits at start ("Address already in use") and the harness starts it again on
other ports, as the package harness's Server does: a fresh run failed on that once
(test_envoy.py, 2026-11-30), the gateway's own behaviour not in question.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

import conftest
from conftest import Gateway


def test_a_port_taken_before_the_gateway_binds_it_is_chosen_again(
    tmp_path: Path, redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # The first port the harness picks is the one taken since; the rest are free.
        picks = iter([port])
        real = conftest.free_port
        monkeypatch.setattr(conftest, "free_port", lambda: next(picks, None) or real())
        g = Gateway(tmp_path, f"127.0.0.1:{redis_server.port}", {})
        try:
            assert port not in (g.http_port, g.grpc_port, g.debug_port)
            assert g.get(g.http_port, "/healthcheck")[0] == 200
        finally:
            assert g.stop() == 0, g.log()
