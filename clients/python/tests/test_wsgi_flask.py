"""The WSGI middleware in a Flask app over real HTTP (issue 29): ``app.wsgi_app`` wrapped, as
Flask documents for WSGI middleware; Werkzeug's server on loopback, Redis with the debug clock,
every field asserted exactly. A limit of 3 a minute, the 4th request refused; ``@limited`` and
``@exempt`` views (a function in either decorator order, a blueprint's, a class-based view's
class); the caller's address as the default key; Redis down, failing open or closed."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Blueprint, Flask
from flask.views import MethodView

from conftest import PATIENT, T0_MS, FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    FixedWindow,
    Stats,
    WSGIRateLimitMiddleware,
    exempt,
    header,
    limited,
    quota_exceeded_body,
)
from test_wsgi import down_then_back, fields, refusal, serve_wsgi, three_a_minute  # noqa: F401 (a fixture)

HTML = [("content-type", "text/html; charset=utf-8"), ("content-length", "5")]


def flask_app(server: Server, **options: Any) -> Flask:
    """An app of one route, "/", its wsgi_app wrapped with the options given (the timeouts
    conftest's PATIENT unless given)."""
    app = Flask(__name__)

    @app.route("/")
    def root() -> str:
        return "hello"

    options.setdefault("redis", f"redis://127.0.0.1:{server.port}")
    options.setdefault("timeout", PATIENT)
    options.setdefault("setup_timeout", PATIENT)
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, **options)  # type: ignore[method-assign]
    return app


def test_three_a_minute_then_429_with_exact_fields(server: Server, serve_wsgi: Any) -> None:
    time = FakeTime(server)
    stats = Stats()
    http = serve_wsgi(flask_app(server, limit=FixedWindow(3, "1m"), key=header("x-client-id"), stats=stats,
                                clock=time))
    three_a_minute(http, server, time, stats, HTML)


def test_views_with_their_own_limit_and_exempt_views(server: Server, serve_wsgi: Any) -> None:
    server.freeze(T0_MS)
    app = Flask(__name__)

    @app.route("/")
    def root() -> str:
        return "hello"

    @app.route("/search")
    @limited(GCRA(3, 1, "1m"))
    def search() -> str:
        return "found"

    @limited(FixedWindow(2, "1h"), name="export")
    @app.route("/export/<what>")
    def export(what: str) -> str:
        return what

    @app.route("/export-all")
    @limited(FixedWindow(2, "1h"), name="export")
    def export_all() -> str:
        return "all"

    @app.route("/health")
    @exempt
    def health() -> str:
        return "ok"

    @exempt
    class Status(MethodView):
        def get(self) -> str:
            return "up"

    app.add_url_rule("/status", view_func=Status.as_view("status"))
    tools = Blueprint("tools", __name__, url_prefix="/tools")

    @tools.route("/slow")
    @limited(GCRA(1, 1, "1h"), name="slow")
    def slow() -> str:
        return "slow"

    app.register_blueprint(tools)
    stats = Stats()
    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=f"redis://127.0.0.1:{server.port}", limit=GCRA(1, 1, "1m"),
        key=header("x-client-id"), stats=stats, timeout=PATIENT, setup_timeout=PATIENT,
    )
    http = serve_wsgi(app)
    who = {"X-Client-Id": "ann"}
    # The middleware's own limit: one a minute, on "/".
    assert [http.get("/", headers=who)[0] for _ in range(2)] == [200, 429]
    # The search view's: 3 at once, named after the view function, whatever "/" has spent.
    for left in (2, 1, 0):
        assert http.get("/search", headers=who) == (
            200, [("content-type", "text/html; charset=utf-8"), ("content-length", "5")]
            + fields("search", 3, 180, left, 60, 60 * (3 - left)), b"found",
        )
    body = quota_exceeded_body("search")
    assert http.get("/search", headers=who) == (429, refusal(body, "search", 3, 180, 60, 180), body)
    # Two views under one name and limit share their keys: 2 in all.
    assert [http.get(p, headers=who)[0] for p in ("/export/a", "/export-all", "/export/b")] == [200, 200, 429]
    # A blueprint's view; exempt views (a function, a class) untouched: no fields.
    assert [http.get("/tools/slow", headers=who)[0] for _ in range(2)] == [200, 429]
    for path, text in (("/health", b"ok"), ("/status", b"up")):
        for _ in range(3):
            status, got, answer = http.get(path, headers=who)
            assert (status, answer, [k for k, _ in got]) == (200, text, ["content-type", "content-length"])
    # Another caller has its own keys; a path with no view, or a method the view has not, is
    # limited as any other request (refused from the denial memory).
    assert http.get("/search", headers={"X-Client-Id": "bob"})[0] == 200
    assert http.get("/nowhere", headers=who)[0] == 429
    assert http.request("POST", "/health", headers=who)[0] == 429
    with server.client() as c:
        keys = sorted(k.decode() for k in c.keys("rl:http:*"))
    assert keys == ["rl:http:ann", "rl:http:export:ann", "rl:http:search:ann", "rl:http:search:bob",
                    "rl:http:slow:ann"]
    assert (stats.admitted, stats.denied, stats.remembered) == (8, 4, 2)  # one stats for every view


def test_the_callers_address_is_the_default_key(server: Server, serve_wsgi: Any) -> None:
    http = serve_wsgi(flask_app(server, limit=FixedWindow(3, "1m"), prefix="ip:"))
    assert http.get() == (200, HTML + fields("default", 3, 60, 2, 40, 40), b"hello")
    with server.client() as c:
        assert c.exists("ip:127.0.0.1") == 1
    # No key: unlimited, untouched.
    unlimited = serve_wsgi(flask_app(server, limit=FixedWindow(3, "1m"), key=header("x-api-key", fallback=None)))
    assert unlimited.get() == (200, HTML, b"hello")


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_redis_down_fails_open_or_closed_then_recovers(server: Server, serve_wsgi: Any, fail_open: bool) -> None:
    stats = Stats()
    http = serve_wsgi(flask_app(server, limit=GCRA(5, 10, "1m"), key=header("x-client-id"), stats=stats,
                                fail_open=fail_open, timeout=1.0))
    down_then_back(http, server, stats, fail_open, HTML)
