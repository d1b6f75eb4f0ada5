"""The WSGI middleware around a plain WSGI application, over real HTTP (Werkzeug's server in a
thread, on a free loopback port); and what the Flask and Django tests share: that server.

Here: the functions of the environ (key, cost, skip, shadow), a concurrency lease held until
the server closes the response body, and the options checked."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import pytest
from werkzeug.serving import make_server

from conftest import PATIENT, FakeTime, Http, Server
from ratelimit_redis_module import (
    GCRA,
    UNAVAILABLE_BODY,
    Concurrency,
    DjangoRateLimitMiddleware,
    Stats,
    WSGIRateLimitMiddleware,
    client_ip,
    header,
    quota_exceeded_body,
    user,
)

PROBLEM = "application/problem+json"
# What a response of the plain app below carries before the rate limiter's fields.
PLAIN = [("content-type", "text/plain"), ("content-length", "5")]


class WsgiHttp(Http):
    """Werkzeug's threaded WSGI server on a free loopback port, in a thread of this process;
    requests as :class:`conftest.Http` makes them (its __init__, which starts uvicorn, is not
    called)."""

    def __init__(self, app: Any) -> None:
        self.wsgi = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.wsgi.server_port
        self.thread = threading.Thread(target=self.wsgi.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def request(
        self, method: str, path: str = "/", headers: dict[str, str] | None = None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """As :meth:`conftest.Http.request`, without the hop-by-hop fields Werkzeug's server
        adds (Connection: close, and chunked framing for a body of no stated length); the
        application sent neither."""
        status, got, body = super().request(method, path, headers)
        return status, [(k, v) for k, v in got if k not in ("connection", "transfer-encoding")], body

    def stop(self) -> None:
        self.wsgi.shutdown()
        self.thread.join(10)
        self.wsgi.server_close()


@pytest.fixture
def serve_wsgi() -> Iterator[Callable[[Any], WsgiHttp]]:
    """serve_wsgi(app) serves a WSGI app; every server started is stopped at the end."""
    started: list[WsgiHttp] = []

    def start(app: Any) -> WsgiHttp:
        started.append(WsgiHttp(app))
        return started[-1]

    yield start
    for h in started:
        h.stop()


def fields(name: str, q: int, w: int | None, r: int, t: int | None, reset: int) -> list[tuple[str, str]]:
    """The rate limiter's fields of a limited response, in their order."""
    return [
        ("ratelimit-policy", f'"{name}";q={q}' + ("" if w is None else f";w={w}")),
        ("ratelimit", f'"{name}";r={r}' + ("" if t is None else f";t={t}")),
        ("x-ratelimit-limit", str(q)),
        ("x-ratelimit-remaining", str(r)),
        ("x-ratelimit-reset", str(reset)),
    ]


def refusal(body: bytes, name: str, q: int, w: int | None, t: int, reset: int) -> list[tuple[str, str]]:
    """The fields of a 429, in their order (as the ASGI middleware sends them)."""
    return fields(name, q, w, 0, t, reset) + [
        ("retry-after", str(t)), ("content-type", PROBLEM), ("content-length", str(len(body))),
    ]


def three_a_minute(http: Http, server: Server, time: FakeTime, stats: Stats, ok: list[tuple[str, str]]) -> None:
    """What a framework's app limited to 3 a minute (``FixedWindow(3, "1m")``, keyed by
    X-Client-Id, on ``time``) answers "/" (``hello``, with the fields ``ok``): T0 is 20 s into
    its minute, so each window has 40 s left; the 4th request is refused, the 5th from the
    denial memory; the module's key is rl:http:<caller>; another caller has its own."""
    alice = {"X-Client-Id": "alice"}
    for left in (2, 1, 0):
        assert http.get(headers=alice) == (200, ok + fields("default", 3, 60, left, 40, 40), b"hello")
    body = quota_exceeded_body("default")
    assert http.get(headers=alice) == (429, refusal(body, "default", 3, 60, 40, 40), body)
    calls = server.calls("rl.fixedwindow")
    assert http.get(headers=alice) == (429, refusal(body, "default", 3, 60, 40, 40), body)
    assert server.calls("rl.fixedwindow") == calls
    assert (stats.round_trips, stats.admitted, stats.denied, stats.remembered) == (4, 3, 1, 1)
    with server.client(decode_responses=True, protocol=2) as c:
        flat = c.execute_command("RL.INSPECT", "rl:http:alice")
    state = dict(zip(flat[::2], flat[1::2]))
    assert (state["limit"], state["remaining"]) == (3, 0)
    assert http.get(headers={"X-Client-Id": "bob"}) == (200, ok + fields("default", 3, 60, 2, 40, 40), b"hello")
    time.advance(40_000)  # the next window
    assert http.get(headers=alice) == (200, ok + fields("default", 3, 60, 2, 60, 60), b"hello")


def down_then_back(http: Http, server: Server, stats: Stats, fail_open: bool, ok: list[tuple[str, str]]) -> None:
    """What a framework's app limited to ``GCRA(5, 10, "1m")``, keyed by X-Client-Id, its
    client made from a URL (client_from_url), answers "/" while Redis is stopped and once it
    is back: each request fails at once (no timeout waited for), open (untouched) or closed
    (503); the first after Redis is back is limited."""
    who = {"X-Client-Id": "ada"}
    assert http.get(headers=who) == (200, ok + fields("default", 5, 30, 4, 6, 6), b"hello")
    server.stop()
    closed = (503, [("content-type", PROBLEM), ("content-length", str(len(UNAVAILABLE_BODY)))], UNAVAILABLE_BODY)
    for _ in range(3):
        assert http.get(headers=who) == ((200, ok, b"hello") if fail_open else closed)
    assert (stats.failures, stats.timeouts, stats.fail_open, stats.fail_closed) == (
        (3, 0, 3, 0) if fail_open else (3, 0, 0, 3)
    )
    server.restart()
    assert http.get(headers=who) == (200, ok + fields("default", 5, 30, 4, 6, 6), b"hello")


def eventually(condition: Callable[[], bool], failure: str) -> None:
    """Wait (10 s at most) for what another thread does: the server's, serving a request."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.005)


def hello(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def test_the_functions_of_the_environ(server: Server, serve_wsgi: Any) -> None:
    """key, cost, skip and shadow are the ASGI middleware's, given the WSGI environ."""
    stats = Stats()
    app = WSGIRateLimitMiddleware(
        hello, redis=f"redis://127.0.0.1:{server.port}", limit=GCRA(5, 10, "1m"), key=header("x-client-id"),
        cost=lambda environ: int(environ.get("HTTP_X_COST", 1)), skip=lambda environ: environ["PATH_INFO"] == "/ping",
        shadow=lambda environ: "HTTP_X_SHADOW" in environ, stats=stats, timeout=PATIENT, setup_timeout=PATIENT,
    )
    http = serve_wsgi(app)
    who = {"X-Client-Id": "ada"}
    assert http.get(headers=who) == (200, PLAIN + fields("default", 5, 30, 4, 6, 6), b"hello")
    assert http.get(headers={**who, "X-Cost": "4"}) == (200, PLAIN + fields("default", 5, 30, 0, 6, 30), b"hello")
    # Shadow: would be refused, let through with the fields.
    assert http.get(headers={**who, "X-Shadow": "1"}) == (200, PLAIN + fields("default", 5, 30, 0, 6, 30), b"hello")
    body = quota_exceeded_body("default")
    assert http.get(headers=who) == (429, refusal(body, "default", 5, 30, 6, 30), body)
    # Skipped: untouched, no round trip.
    assert http.get("/ping", headers=who) == (200, PLAIN, b"hello")
    assert (stats.round_trips, stats.admitted, stats.denied, stats.shadow_denied) == (4, 2, 1, 1)
    with server.client() as c:
        assert c.exists("rl:http:ada") == 1


def test_x_ratelimit_reset_epoch(server: Server, serve_wsgi: Any) -> None:
    """x_ratelimit_reset="epoch", as the ASGI middleware's (test_http.py): X-RateLimit-Reset the
    reset instant in seconds since the epoch, rounded up, the same while the denial memory
    answers, whatever its clock says since."""
    clock = FakeTime(server)
    app = WSGIRateLimitMiddleware(
        hello, redis=f"redis://127.0.0.1:{server.port}", limit=GCRA(1, 1, "1m"), key=header("x-client-id"),
        clock=clock, timeout=PATIENT, setup_timeout=PATIENT, x_ratelimit_reset="epoch",
    )
    http = serve_wsgi(app)
    who = {"X-Client-Id": "ada"}
    stamps = []
    for _ in range(2):
        before = time.time_ns() // 1_000_000
        stamps.append((http.get(headers=who), before, time.time_ns() // 1_000_000))
    # Admitted, then refused: the key fresh 60 s after each reply.
    resets = [int(dict(got[1])["x-ratelimit-reset"]) for got, _, _ in stamps]
    for reset, (_, before, after) in zip(resets, stamps):
        assert -(-(before + 60_000) // 1000) <= reset <= -(-(after + 60_000) // 1000)
    assert stamps[0][0] == (200, PLAIN + fields("default", 1, 60, 0, 60, resets[0]), b"hello")
    body = quota_exceeded_body("default")
    assert stamps[1][0] == (429, refusal(body, "default", 1, 60, 60, resets[1]), body)
    calls = server.calls("rl.gcra")
    clock.ms += 30_000  # the memory's clock only: 30 s left
    assert http.get(headers=who) == (429, refusal(body, "default", 1, 60, 30, resets[1]), body)
    assert server.calls("rl.gcra") == calls
    with pytest.raises(ValueError, match="^invalid x_ratelimit_reset 'utc': expected 'delta' or 'epoch'$"):
        WSGIRateLimitMiddleware(hello, redis="redis://127.0.0.1:1", limit=GCRA(1, 1, "1s"), x_ratelimit_reset="utc")


def test_the_key_functions_read_an_environ_as_they_read_a_scope() -> None:
    environ = {"REMOTE_ADDR": "10.0.0.7", "HTTP_X_API_KEY": "k1", "CONTENT_TYPE": "text/csv", "REMOTE_USER": "amy"}
    scope = {"type": "http", "client": ("10.0.0.7", 5000), "headers": [(b"x-api-key", b"k1")]}
    assert client_ip(environ) == client_ip(scope) == "10.0.0.7"
    assert header("X-Api-Key")(environ) == header("x-api-key")(scope) == "k1"
    assert header("content-type")(environ) == "text/csv"
    assert header("x-other")(environ) == "10.0.0.7"
    assert header("x-other", fallback=None)(environ) is None
    assert user()(environ) == "user:amy"
    assert user()({"REMOTE_ADDR": "10.0.0.8"}) == "10.0.0.8"
    assert client_ip({}) is None


def test_a_concurrency_lease_is_held_until_the_server_closes_the_body(server: Server, serve_wsgi: Any) -> None:
    """A streamed body: the lease is held while it is sent, and given back when the server
    closes it, not when the application returns its iterable."""
    gate = threading.Event()
    closed = threading.Event()

    def slow(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body() -> Iterator[bytes]:
            try:
                yield b"he"
                gate.wait(10)
                yield b"llo"
            finally:
                closed.set()

        return body()

    app = WSGIRateLimitMiddleware(slow, redis=f"redis://127.0.0.1:{server.port}", limit=Concurrency(1, "30s"),
                                  name="inflight", key=header("x-client-id"), timeout=PATIENT,
                                  setup_timeout=PATIENT)
    http = serve_wsgi(app)
    who = {"X-Client-Id": "hal"}
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(http.get(headers=who)))
    worker.start()
    with server.client() as c:
        eventually(lambda: c.exists("rl:http:hal") == 1, "the first request took no lease")
        # The application has returned its iterable; its body is still being sent.
        body = quota_exceeded_body("inflight")
        policy = ("ratelimit-policy", '"inflight";q=1;qu="concurrent-requests"')
        assert http.get(headers=who) == (429, [
            policy, ("ratelimit", '"inflight";r=0;t=30'), ("x-ratelimit-limit", "1"),
            ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "30"), ("retry-after", "30"),
            ("content-type", PROBLEM), ("content-length", str(len(body))),
        ], body)
        gate.set()
        worker.join(10)
        assert closed.wait(10)
        # The frozen clock cannot end the lease: it was released at the close.
        status, got, text = first[0]
        assert (status, text, got[1:3]) == (200, b"hello", [policy, ("ratelimit", '"inflight";r=0')])
        # Released, the key gone with its last lease (the client may have read the last
        # chunk just before the server closed the body).
        eventually(lambda: c.exists("rl:http:hal") == 0, "the lease was not released")
    assert http.get(headers=who)[0] == 200


def test_options_are_checked(server: Server) -> None:
    with pytest.raises(TypeError, match="WSGIRateLimitMiddleware needs redis= and limit= \\(or guard=\\)"):
        WSGIRateLimitMiddleware(hello, limit=GCRA(1, 1, "1s"))
    # A Django settings dict is checked as a signature would be.
    with pytest.raises(TypeError, match="DjangoRateLimitMiddleware got unknown options: keys, timout"):
        DjangoRateLimitMiddleware(hello, redis="redis://127.0.0.1:1", limit=GCRA(1, 1, "1s"), timout=1, keys=None)


def test_neither_flask_nor_django_is_needed(server: Server) -> None:
    """In a process where Flask, Werkzeug and Django cannot be imported, the package imports
    and limits a plain WSGI app, routes marked or not (the marks are looked for only in a
    Flask app or Django's handler)."""
    script = f"""
import sys
for name in ("flask", "werkzeug", "django"):
    sys.modules[name] = None  # import fails
from ratelimit_redis_module import GCRA, WSGIRateLimitMiddleware, exempt
exempt(lambda: None)  # a mark: routes are looked up from now on
app = WSGIRateLimitMiddleware(lambda environ, start: start("200 OK", []) or [b"hi"],
                              redis="redis://127.0.0.1:{server.port}", limit=GCRA(1, 1, "1m"),
                              timeout={PATIENT}, setup_timeout={PATIENT})
seen = []
body = app({{"REMOTE_ADDR": "10.1.1.1", "PATH_INFO": "/"}}, lambda status, headers, exc_info=None: seen.append(
    (status, [name for name, _ in headers])))
print(seen, b"".join(body))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "[('200 OK', ['ratelimit-policy', 'ratelimit', 'x-ratelimit-limit', 'x-ratelimit-remaining', "
        "'x-ratelimit-reset'])] b'hi'\n"
    )
