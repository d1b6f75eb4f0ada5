"""The rate limiter in a Django project over real HTTP (issue 29): as Django middleware (the
MIDDLEWARE setting, options in RATELIMIT_REDIS_MODULE), and as WSGI middleware around
get_wsgi_application(). Django configured in this process (settings.configure, a URLconf of
this file's views), served by Werkzeug's server on loopback; Redis with the debug clock; every
field asserted exactly."""

from __future__ import annotations

import sys
import types
from typing import Any

import django
import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views import View

from conftest import FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    FixedWindow,
    Stats,
    WSGIRateLimitMiddleware,
    exempt,
    header,
    limited,
    quota_exceeded_body,
    user,
)
from test_wsgi import down_then_back, fields, refusal, serve_wsgi, three_a_minute  # noqa: F401 (a fixture)

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


urls = types.ModuleType("wsgi_django_urls")
urls.urlpatterns = [  # type: ignore[attr-defined]
    path("", root),
    path("search", search),
    path("export/<str:what>", export),
    path("export-all", export_all),
    path("health", health),
    path("status", Status.as_view()),
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
    get_wsgi_application() makes it, without setting Django up again)."""
    settings.MIDDLEWARE = middleware
    settings.RATELIMIT_REDIS_MODULE = options
    return WSGIHandler()


def test_django_middleware_three_a_minute_then_429(server: Server, serve_wsgi: Any) -> None:
    time = FakeTime(server)
    stats = Stats()
    http = serve_wsgi(django_app([MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}", limit=FixedWindow(3, "1m"),
                                 key=header("x-client-id"), stats=stats, clock=time, timeout=1.0))
    three_a_minute(http, server, time, stats, HTML)


def test_the_user_key_reads_djangos_user(server: Server, serve_wsgi: Any) -> None:
    """user() keys a signed-in request by request.user, an anonymous one by its address."""
    http = serve_wsgi(django_app([f"{__name__}.SignIn", MIDDLEWARE], redis=f"redis://127.0.0.1:{server.port}",
                                 limit=FixedWindow(3, "1m"), key=user(), timeout=1.0))
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
                                   key=header("x-client-id"), stats=stats, timeout=1.0)
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
