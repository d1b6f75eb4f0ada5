"""The rate limiter in a Django project over real HTTP (issue 29): as Django middleware (the
MIDDLEWARE setting, options in RATELIMIT_REDIS_MODULE), and as WSGI middleware around
get_wsgi_application(). Django configured in this process (settings.configure, a URLconf of
this file's views), served by Werkzeug's server on loopback; Redis with the debug clock; every
field asserted exactly. A concurrency lease is held while a streamed body is sent."""

from __future__ import annotations

import socket
import sys
import threading
import types
from typing import Any, Iterator

import django
import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import path
from django.views import View

from conftest import PATIENT, FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    Concurrency,
    FixedWindow,
    Stats,
    WSGIRateLimitMiddleware,
    exempt,
    header,
    limited,
    quota_exceeded_body,
    user,
)
from test_adaptive import inspect_key, released
from test_wsgi import (  # noqa: F401 (serve_wsgi: a fixture)
    PROBLEM, down_then_back, eventually, fields, refusal, serve_wsgi, three_a_minute,
)

HTML = [("content-type", "text/html; charset=utf-8")]
MIDDLEWARE = "ratelimit_redis_module.DjangoRateLimitMiddleware"


def root(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


@limited(GCRA(3, 1, "1m"))
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("found")


@limited(FixedWindow(2, "1h"), name="export")
def export(request: HttpRequest, what: str) -> HttpResponse:
    return HttpResponse(what)


@limited(FixedWindow(2, "1h"), name="export")
def export_all(request: HttpRequest) -> HttpResponse:
    return HttpResponse("all")


@exempt
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@exempt
class Status(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("up")


class Streamed:
    """What the streaming view and a test share: the view's body, asked to (``?hold``), sends
    ``he``, says so, and waits for the gate; then ``llo``, or (``?more``) chunks until the
    server closes it. ``ends`` says how each body ended: ``whole``, or ``closed`` before."""

    def __init__(self) -> None:
        self.sending = threading.Event()
        self.gate = threading.Event()
        self.ends: list[str] = []


streamed = Streamed()


def stream(request: HttpRequest) -> StreamingHttpResponse:
    def body() -> Iterator[bytes]:
        end = "closed"
        try:
            yield b"he"
            if "hold" in request.GET:
                streamed.sending.set()
                streamed.gate.wait(10)
            for _ in range(100_000 if "more" in request.GET else 1):
                yield b"llo"
            end = "whole"
        finally:
            streamed.ends.append(end)

    return StreamingHttpResponse(body(), content_type="text/plain")


def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view failed")


urls = types.ModuleType("wsgi_django_urls")
urls.urlpatterns = [  # type: ignore[attr-defined]
    path("", root),
    path("search", search),
    path("export/<str:what>", export),
    path("export-all", export_all),
    path("health", health),
    path("status", Status.as_view()),
    path("stream", stream),
    path("fail", fail),
]
sys.modules[urls.__name__] = urls
if not settings.configured:
    settings.configure(
        DEBUG=False, ALLOWED_HOSTS=["127.0.0.1"], ROOT_URLCONF=urls.__name__, SECRET_KEY="tests", MIDDLEWARE=[],
        INSTALLED_APPS=[], DATABASES={}, USE_TZ=True,
    )
    django.setup()


class Member:
    """A signed-in user as Django's auth gives one: ``is_authenticated``, ``get_username()``."""

    is_authenticated = True

    def __init__(self, name: str) -> None:
        self.name = name

    def get_username(self) -> str:
        return self.name


class SignIn:
    """Middleware standing in for Django's AuthenticationMiddleware (which needs a database):
    sets ``request.user`` from the X-User header."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "HTTP_X_USER" in request.META:
            request.user = Member(request.META["HTTP_X_USER"])  # type: ignore[assignment]
        return self.get_response(request)  # type: ignore[no-any-return]


def django_app(middleware: list[str], **options: Any) -> WSGIHandler:
    """Django's WSGI handler, its middleware loaded from these settings (as
    get_wsgi_application() makes it, without setting Django up again); the rate limiter's
    timeouts conftest's PATIENT unless given."""
    if options:
        options.setdefault("timeout", PATIENT)
        options.setdefault("setup_timeout", PATIENT)
    settings.MIDDLEWARE = middleware
    settings.RATELIMIT_REDIS_MODULE = options
    return WSGIHandler()


def test_django_middleware_three_a_minute_then_429(server: Server, serve_wsgi: Any) -> None:
    time = FakeTime(server)
    stats = Stats()
    http = serve_wsgi(django_app([MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}", limit=FixedWindow(3, "1m"),
                                 key=header("x-client-id"), stats=stats, clock=time))
    three_a_minute(http, server, time, stats, HTML)


def test_the_user_key_reads_djangos_user(server: Server, serve_wsgi: Any) -> None:
    """user() keys a signed-in request by request.user, an anonymous one by its address."""
    http = serve_wsgi(django_app([f"{__name__}.SignIn", MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}",
                                 limit=FixedWindow(3, "1m"), key=user()))
    assert http.get(headers={"X-User": "amy"}) == (200, HTML + fields("default", 3, 60, 2, 40, 40), b"hello")
    assert http.get(headers={"X-User": "amy"}) == (200, HTML + fields("default", 3, 60, 1, 40, 40), b"hello")
    assert http.get() == (200, HTML + fields("default", 3, 60, 2, 40, 40), b"hello")
    with server.client() as c:
        assert sorted(k.decode() for k in c.keys("rl:http:*")) == ["rl:http:127.0.0.1", "rl:http:user:amy"]


@pytest.mark.parametrize("shape", ["middleware", "wsgi"])
def test_views_with_their_own_limit_and_exempt_views(server: Server, serve_wsgi: Any, shape: str) -> None:
    """The marks found by Django's URL resolver, whether the rate limiter is Django middleware
    or WSGI middleware around Django's handler."""
    stats = Stats()
    options: dict[str, Any] = dict(redis=f"redis://127.0.0.1:{server.port}", limit=GCRA(1, 1, "1m"),
                                   key=header("x-client-id"), stats=stats, timeout=PATIENT, setup_timeout=PATIENT)
    if shape == "middleware":
        app: Any = django_app([MIDDLEWARE], **options)
    else:
        app = WSGIRateLimitMiddleware(django_app([]), **options)
    http = serve_wsgi(app)
    who = {"X-Client-Id": "ann"}
    assert [http.get("/", headers=who)[0] for _ in range(2)] == [200, 429]
    for left in (2, 1, 0):
        assert http.get("/search", headers=who) == (200, HTML + fields("search", 3, 180, left, 60, 60 * (3 - left)),
                                                    b"found")
    body = quota_exceeded_body("search")
    assert http.get("/search", headers=who) == (429, refusal(body, "search", 3, 180, 60, 180), body)
    assert [http.get(p, headers=who)[0] for p in ("/export/a", "/export-all", "/export/b")] == [200, 200, 429]
    # Exempt: a function view and a class-based view's class; untouched, no fields.
    for url, text in (("/health", b"ok"), ("/status", b"up")):
        for _ in range(3):
            assert http.get(url, headers=who) == (200, HTML, text)
    # A path with no view is limited (a 404 costs as any request): refused from memory.
    assert http.get("/nowhere", headers=who)[0] == 429
    with server.client() as c:
        keys = sorted(k.decode() for k in c.keys("rl:http:*"))
    assert keys == ["rl:http:ann", "rl:http:export:ann", "rl:http:search:ann"]
    assert (stats.admitted, stats.denied, stats.remembered) == (6, 3, 1)


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_redis_down_fails_open_or_closed_then_recovers(server: Server, serve_wsgi: Any, fail_open: bool) -> None:
    stats = Stats()
    http = serve_wsgi(django_app([MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}", limit=GCRA(5, 10, "1m"),
                                 key=header("x-client-id"), stats=stats, fail_open=fail_open, timeout=1.0))
    down_then_back(http, server, stats, fail_open, HTML)


@pytest.fixture
def streaming() -> Iterator[Streamed]:
    """The streaming view's gates, new for the test; the gate opened at its end."""
    global streamed
    streamed = Streamed()
    yield streamed
    streamed.gate.set()


def test_a_concurrency_lease_is_held_until_a_streamed_body_is_sent(
    server: Server, serve_wsgi: Any, streaming: Streamed
) -> None:
    """A StreamingHttpResponse: the view has returned, its body is still being sent; the
    lease is held until the server closes the response, not given back when the view
    returns."""
    http = serve_wsgi(django_app([MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}",
                                 limit=Concurrency(1, "1m"), name="inflight", key=header("x-client-id")))
    who = {"X-Client-Id": "hal"}
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(http.get("/stream?hold", headers=who)))
    worker.start()
    try:
        assert streaming.sending.wait(10), "the first body was not sent"
        body = quota_exceeded_body("inflight")
        policy = ("ratelimit-policy", '"inflight";q=1;qu="concurrent-requests"')
        assert http.get("/stream", headers=who) == (429, [
            policy, ("ratelimit", '"inflight";r=0;t=60'), ("x-ratelimit-limit", "1"),
            ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "60"), ("retry-after", "60"),
            ("content-type", PROBLEM), ("content-length", str(len(body))),
        ], body), "a second request was admitted while the first body was being sent"
    finally:
        streaming.gate.set()
        worker.join(10)
    status, got, text = first[0]
    assert (status, text, got[:3]) == (200, b"hello", [
        ("content-type", "text/plain"), policy, ("ratelimit", '"inflight";r=0'),
    ])
    assert streaming.ends == ["whole"]
    with server.client() as c:
        # Released at the close, the key gone with its last lease (the client may have read
        # the last chunk just before the server closed the body).
        eventually(lambda: c.exists("rl:http:hal") == 0, "the lease was not released")
    assert http.get("/stream", headers=who)[:3:2] == (200, b"hello")


def test_a_client_gone_mid_stream_gives_its_lease_back_dropped(
    server: Server, serve_wsgi: Any, streaming: Streamed
) -> None:
    """The client closes its connection while the body streams: the server's next write
    fails, it closes the response, and the lease is released with DROPPED (an adaptive
    limit backs off: AIMD's 4 becomes int(4 * 0.9)); the next request is admitted."""
    http = serve_wsgi(django_app([MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}",
                                 limit=Concurrency(4, "30s", adaptive="aimd", min=1, max=10),
                                 key=header("x-client-id")))
    with socket.create_connection(("127.0.0.1", http.port), timeout=10) as s:
        s.sendall(b"GET /stream?hold&more HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Client-Id: kim\r\n\r\n")
        received = b""
        while b"\r\n\r\n2\r\nhe\r\n" not in received:
            chunk = s.recv(4096)
            assert chunk, f"the connection closed before the first chunk: {received!r}"
            received += chunk
        assert streaming.sending.wait(10), "the body was not sent"
        assert inspect_key(server, "rl:http:kim")["held"] == "1", "the lease was not held while the body streams"
    streaming.gate.set()
    state = released(server, "rl:http:kim")
    assert (state["held"], state["limit"]) == ("0", "3"), "released without DROPPED"
    assert streaming.ends == ["closed"]
    assert http.get("/stream", headers={"X-Client-Id": "kim"})[:3:2] == (200, b"hello")
    assert released(server, "rl:http:kim")["limit"] == "3"  # one in flight of 3: no growth


def test_a_view_that_raises_gives_its_lease_back(server: Server, serve_wsgi: Any) -> None:
    """Django answers the view's exception with a 500: the lease is released with it, so the
    next request is admitted."""
    http = serve_wsgi(django_app([MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}",
                                 limit=Concurrency(1, "1m"), key=header("x-client-id")))
    who = {"X-Client-Id": "ivy"}
    assert http.get("/fail", headers=who)[0] == 500
    with server.client() as c:
        assert c.exists("rl:http:ivy") == 0
    assert http.get("/stream", headers=who)[:3:2] == (200, b"hello")
