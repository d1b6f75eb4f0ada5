"""flask-limiter on the module, over real HTTP (docs/limits.md): a Flask app whose ``Limiter``
takes ``ratelimit+redis://`` as its storage URI, with flask-limiter's own decorators and options
(``default_limits``, ``"5/minute"`` strings, ``@limiter.limit`` with its own key function,
``exempt_when``, ``@limiter.exempt``, an error handler for 429, its ``X-RateLimit-*`` and
``Retry-After`` headers), under each of its three strategies, on the module and on the script
backend. Werkzeug's server on loopback; one fake clock (the debug clock, the scripts' ``NOW``,
``time.time`` for flask-limiter and limits); every header asserted exactly as flask-limiter
computes it from limits' answers (``X-RateLimit-Reset`` = int(reset time) + 1, ``Retry-After``
= that less now).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from flask import Flask, jsonify, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

import ratelimit_redis_module.limits_storage  # noqa: F401  (registers the schemes)
from conftest import Server
from limits_apps import STRATEGIES, end_windows, fields_for, first_resets, limited, on_clock, storage_uri
from ratelimit_redis_module.limits_storage import RatelimitStorage
from test_limits_storage import A, Clock
from test_wsgi import serve_wsgi  # noqa: F401 (a fixture)


def make_app(uri: str, strategy: str) -> tuple[Flask, Limiter]:
    app = Flask(__name__)
    limiter = Limiter(
        get_remote_address, app=app, storage_uri=uri, strategy=strategy, headers_enabled=True,
        default_limits=["3 per minute"],
    )

    @app.route("/")
    def root() -> str:
        return "hello"

    @app.route("/search")
    @limiter.limit("2/minute", key_func=lambda: request.headers.get("X-Api-Key", "anonymous"))
    def search() -> str:
        return "found"

    @app.route("/admin")
    @limiter.limit("1/minute", exempt_when=lambda: request.headers.get("X-Admin") == "yes")
    def admin() -> str:
        return "admin"

    @app.route("/health")
    @limiter.exempt
    def health() -> str:
        return "ok"

    @app.errorhandler(429)
    def too_many(error: Any) -> Any:
        return jsonify(error="rate limited", limit=str(error.description)), 429

    return app, limiter


def expect(limit: int, remaining: int, reset: float) -> dict[str, str]:
    """flask-limiter's headers for limits' window stats (reset time, remaining)."""
    return fields_for(limit, remaining, int(reset + 1))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_flask_limiter_app(
    strategy: str, backend: tuple[str, Server], monkeypatch: pytest.MonkeyPatch, serve_wsgi: Any
) -> None:
    clock = Clock(monkeypatch, [backend[1]])
    app, limiter = make_app(storage_uri(backend), strategy)
    storage = on_clock(limiter.storage, clock)
    http = serve_wsgi(app)

    # default_limits: 3 a minute per address.
    since = time.monotonic()
    for left in (2, 1, 0):
        assert limited(http, "/") in [(200, expect(3, left, r), b"hello") for r in first_resets(strategy, since)]
    status, fields, body = limited(http, "/")
    assert status == 429 and fields in [expect(3, 0, r) for r in first_resets(strategy, since)]
    assert json.loads(body) == {"error": "rate limited", "limit": "3 per 1 minute"}

    # A route's own limit and key function: each API key its own 2 a minute.
    for key in ("k1", "k2"):
        assert [limited(http, "/search", {"X-Api-Key": key})[0] for _ in range(3)] == [200, 200, 429]

    # exempt_when: the admin header passes without counting; others get 1 a minute.
    assert [limited(http, "/admin", {"X-Admin": "yes"})[0] for _ in range(3)] == [200, 200, 200]
    assert [limited(http, "/admin")[0] for _ in range(2)] == [200, 429]

    # @limiter.exempt: never limited, no headers.
    assert [http.get("/health")[0] for _ in range(5)] == [200] * 5
    assert limited(http, "/health")[1] == {}

    # 80 s later each strategy lets the address in again (the sliding window counter: the last
    # minute's 3 hits weigh floor(3 × 40/60) = 2).
    clock.advance(80_000)
    # Fresh keys, which Redis would have expired (all four; the sliding window's estimates of
    # 3 and 2 hits are 2 and 1 still, so only "/admin"'s single hit is gone); the fixed window's
    # are its real TTLs, ended by an event.
    assert clock.expire(storage) + end_windows(storage) == (1 if strategy == "sliding-window-counter" else 4)
    since = time.monotonic()
    status, fields, _ = limited(http, "/")
    assert status == 200 and fields in [expect(3, {"sliding-window-counter": 0}.get(strategy, 2), r) for r in {
        "fixed-window": first_resets(strategy, since, A + 80), "moving-window": {A + 140},
        "sliding-window-counter": {A + 80 + 40 % 20},
    }[strategy]]
    assert storage.reset() == (3 if strategy == "sliding-window-counter" else 1)


@pytest.mark.parametrize(
    "strategy, command",
    [("fixed-window", "RL.COUNTER"), ("moving-window", "RL.SLIDINGLOG"),
     ("sliding-window-counter", "RL.SLIDINGWINDOW")],
)
def test_one_command_per_request(
    strategy: str, command: str, module_server: Server, monkeypatch: pytest.MonkeyPatch, serve_wsgi: Any
) -> None:
    """Without flask-limiter's headers (its default), a request costs one command: the hit.
    (With ``headers_enabled`` it reads the window too, as with limits' own Redis storage.)"""
    clock = Clock(monkeypatch, [module_server])
    app = Flask(__name__)
    limiter = Limiter(
        get_remote_address, app=app, storage_uri=f"ratelimit+redis://127.0.0.1:{module_server.port}",
        strategy=strategy, default_limits=["3 per minute"],
    )

    @app.route("/")
    def root() -> str:
        return "hello"

    storage = limiter.storage
    assert isinstance(storage, RatelimitStorage)
    storage.reset()
    storage.limiter.ready()
    http = serve_wsgi(app)
    before = {c: module_server.calls(c) for c in (command, "RL.INSPECT")}
    assert [http.get("/")[0] for _ in range(5)] == [200, 200, 200, 429, 429]
    assert module_server.calls(command) - before[command] == 5
    assert module_server.calls("RL.INSPECT") == before["RL.INSPECT"]
    clock.advance(0)
    storage.reset()
