"""The complete FastAPI app of the manual's Clients page, read from the page and served by
uvicorn against a real server: what the page says it answers is what it answers."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import PATIENT, ROOT, Server

PAGE = ROOT / "docs" / "python.md"


def the_app_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    apps = [b for b in blocks if "app = FastAPI(lifespan=lifespan)" in b]
    assert len(apps) == 1, f"{len(apps)} complete apps on {PAGE}"
    return apps[0]


def patient(code: str) -> str:
    """The page's app with conftest's PATIENT for its timeouts, which a loaded test machine
    cannot miss (the page's 50 ms would fail a request closed now and then). A refused
    connection still fails at once, as the test's last step checks."""
    client = 'async_client_from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))'
    timeout = "    timeout=0.05,\n"
    assert code.count(client) == 1 and code.count(timeout) == 1, "the page's timeouts moved: update patient()"
    code = code.replace(client, f"{client[:-1]}, timeout={PATIENT})")
    return code.replace(timeout, f"    timeout={PATIENT},\n    setup_timeout={PATIENT},\n")


def test_the_complete_fastapi_app_of_the_manual(server: Server, serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{server.port}")
    namespace: dict[str, Any] = {"__name__": "docs_app"}
    exec(compile(patient(the_app_block()), str(PAGE), "exec"), namespace)
    http = serve(namespace["app"], lifespan="on")
    key = {"X-API-Key": "k1"}

    status, fields, body = http.get("/items/7", headers=key)
    assert (status, json.loads(body)) == (200, {"item": 7})
    assert fields[-5:] == [
        ("ratelimit-policy", '"api/0";q=10;w=1'),
        ("ratelimit", '"api/0";r=9;t=1'),
        ("x-ratelimit-limit", "10"),
        ("x-ratelimit-remaining", "9"),
        ("x-ratelimit-reset", "1"),
    ]
    # A report costs 5: 4 left this second; then 5 more are too many.
    assert dict(http.get("/reports", headers=key)[1])["ratelimit"] == '"api/0";r=4;t=1'
    status, fields, body = http.get("/reports", headers=key)
    assert status == 429 and ("retry-after", "1") in fields
    assert body.endswith(b'"violated-policies":["api/0"]}')
    # Without a key, the caller's address is its own subject.
    assert dict(http.get("/items/1")[1])["ratelimit"] == '"api/0";r=9;t=1'

    assert json.loads(http.get("/limiter", headers={"X-API-Key": "k2"})[2]) == {
        "round_trips": 5, "admitted": 4, "denied": 1, "remembered": 0,
        "failures": 0, "timeouts": 0, "fail_open": 0, "fail_closed": 0, "shadow_denied": 0,
        "not_durable": 0, "local_admitted": 0, "refills": 0, "refunded": 0, "refund_failures": 0,
        "expired": 0, "held": 0, "backend": "module", "setup_failures": 0,
    }
    server.stop()
    status, fields, body = http.get("/items/7", headers={"X-API-Key": "k3"})
    assert (status, json.loads(body)["status"]) == (503, 503)
    # The page's client fails at once while Redis refuses connections: no timeout waited for.
    assert (namespace["stats"].failures, namespace["stats"].timeouts) == (1, 0)
