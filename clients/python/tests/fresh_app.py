"""The application of test_setup.py's fresh processes: what a user writes, with the package's
defaults (``backend="auto"``, a timeout of 50 ms): a limit in front of "/", served on a free
loopback port. It prints its port once listening (``{"port": n}``), and counts each request as
it reaches it, before the limit, in Redis (``INCR requests``, as an application keeps a hit
counter; waited for, so that the test's proxy reads it before any command the request makes):
the proxy knows from it which commands came before the request.

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

from ratelimit_redis_module import GCRA, AsyncGuard, Guard

URL = os.environ.get("RL_FRESH_REDIS", "")
LIMIT = GCRA(5, 10, "1m")


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

    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, redis=URL, limit=LIMIT)  # type: ignore[method-assign]
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
        RATELIMIT_REDIS_MODULE={"redis": URL, "limit": LIMIT},
    )
    import django as framework
    from django.core.wsgi import get_wsgi_application

    framework.setup()
    serve_wsgi(counted_wsgi(get_wsgi_application()))


def guard() -> None:
    limits = Guard(URL, LIMIT)

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
                    holder["guard"] = AsyncGuard(URL, LIMIT)  # made in the event loop: its setup starts now
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

    app.add_middleware(RateLimitMiddleware, redis=URL, limit=LIMIT)
    serve_asgi(counted_asgi(app))


if __name__ == "__main__":
    {"asgi": asgi, "flask": flask, "django": django, "guard": guard, "asyncguard": asyncguard}[os.environ["RL_FRESH_APP"]]()
