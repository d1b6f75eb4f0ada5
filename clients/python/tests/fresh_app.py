"""The application of test_setup.py's fresh processes: what a user writes, with the package's
defaults (``backend="auto"``) but for the timeouts (a minute, ``PATIENT``): a limit in front of
"/", served on a free loopback port. It prints its port once listening (``{"port": n}``), and
counts each request as it reaches it, before the limit, in Redis (``INCR requests``, as an
application keeps a hit counter; waited for, so that the test's proxy reads it before any command
the request makes): the proxy knows from it which commands came before the request.

$RL_FRESH_APP says which application: ``asgi`` (FastAPI, ``app.add_middleware(RateLimitMiddleware,
...)``, under uvicorn with its lifespan), ``flask`` (``app.wsgi_app = WSGIRateLimitMiddleware(...)``,
Werkzeug's threaded server), ``django`` (``DjangoRateLimitMiddleware`` in MIDDLEWARE, the options
in RATELIMIT_REDIS_MODULE, Werkzeug's server), ``guard`` (a plain WSGI application calling
:class:`Guard` itself) or ``asyncguard`` (a plain ASGI application calling :class:`AsyncGuard`
itself, under uvicorn). $RL_FRESH_REDIS is the server's address (the test's proxy).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import redis
import redis.asyncio

from ratelimit_redis_module import GCRA, AsyncGuard, Guard, client_from_url

URL = os.environ.get("RL_FRESH_REDIS", "")
LIMIT = GCRA(5, 10, "1m")
#: The timeouts of every limiter here, a check's and the setup's, in seconds: tests/conftest.py's
#: PATIENT (this runs in a process of its own). The defaults (50 ms, 1 s) would fail the first
#: request open now and then on a loaded test machine; a minute is a hang, not a busy machine.
PATIENT = 60.0


def listening() -> socket.socket:
    """A socket listening on a free loopback port, its port printed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    return sock


def counted_wsgi(app: Any) -> Any:
    """``app``, each request counted in Redis before it goes in."""
    counter = redis.Redis.from_url(URL)

    def counting(environ: Any, start_response: Any) -> Any:
        counter.incr("requests")
        return app(environ, start_response)

    return counting


def counted_asgi(app: Any) -> Any:
    counter = redis.asyncio.Redis.from_url(URL)

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await counter.incr("requests")
        await app(scope, receive, send)

    return counting


def hello_wsgi(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def serve_wsgi(app: Any) -> None:
    from werkzeug.serving import make_server

    sock = listening()  # kept: its file descriptor is the server's
    server = make_server("127.0.0.1", 0, app, threaded=True, fd=sock.fileno())
    server.serve_forever()


def serve_asgi(app: Any) -> None:
    import uvicorn

    sock = listening()
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="auto")).run(sockets=[sock])


def flask() -> None:
    from flask import Flask

    from ratelimit_redis_module import WSGIRateLimitMiddleware

    app = Flask(__name__)

    @app.route("/")
    def root() -> str:
        return "hello"

    app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=URL, limit=LIMIT, timeout=PATIENT, setup_timeout=PATIENT,
    )
    serve_wsgi(counted_wsgi(app))


def django() -> None:
    from django.conf import settings
    from django.http import HttpRequest, HttpResponse
    from django.urls import path

    def root(request: HttpRequest) -> HttpResponse:
        return HttpResponse("hello", content_type="text/plain")

    sys.modules[__name__].urlpatterns = [path("", root)]  # type: ignore[attr-defined]
    settings.configure(
        DEBUG=False, ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, SECRET_KEY="fresh",
        MIDDLEWARE=["ratelimit_redis_module.DjangoRateLimitMiddleware"],
        RATELIMIT_REDIS_MODULE={"redis": URL, "limit": LIMIT, "timeout": PATIENT, "setup_timeout": PATIENT},
    )
    import django as framework
    from django.core.wsgi import get_wsgi_application

    framework.setup()
    serve_wsgi(counted_wsgi(get_wsgi_application()))


def guard() -> None:
    # The sync guard takes no timeout: its client's socket timeout is the time Redis has.
    limits = Guard(client_from_url(URL, timeout=PATIENT), LIMIT, setup_timeout=PATIENT)

    def app(environ: Any, start_response: Any) -> list[bytes]:
        verdict = limits.check(environ["REMOTE_ADDR"])
        if not verdict.allowed:
            start_response(f"{verdict.status} Refused", verdict.headers)
            return [verdict.body]
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5"), *verdict.headers])
        return [b"hello"]

    serve_wsgi(counted_wsgi(app))


def asyncguard() -> None:
    holder: dict[str, AsyncGuard] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # Made in the event loop: its setup starts now.
                    holder["guard"] = AsyncGuard(URL, LIMIT, timeout=PATIENT, setup_timeout=PATIENT)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        verdict = await holder["guard"].check(scope["client"][0])
        fields = [(k.encode(), v.encode()) for k, v in verdict.headers]
        if not verdict.allowed:
            await send({"type": "http.response.start", "status": verdict.status, "headers": fields})
            await send({"type": "http.response.body", "body": verdict.body})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5"), *fields]})
        await send({"type": "http.response.body", "body": b"hello"})

    serve_asgi(counted_asgi(app))


def asgi() -> None:
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    from ratelimit_redis_module import RateLimitMiddleware

    app = FastAPI()

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("hello")

    app.add_middleware(RateLimitMiddleware, redis=URL, limit=LIMIT, timeout=PATIENT, setup_timeout=PATIENT)
    serve_asgi(counted_asgi(app))


if __name__ == "__main__":
    {"asgi": asgi, "flask": flask, "django": django, "guard": guard, "asyncguard": asyncguard}[os.environ["RL_FRESH_APP"]]()
