"""WSGI middleware for Flask, Django or any WSGI application, and Django middleware: the ASGI
middleware's options, fields and route marks on the synchronous client.

Flask (the shape Flask documents for WSGI middleware; the ``@limited`` and ``@exempt`` views
are found with the app's own URL adapter)::

    app.wsgi_app = WSGIRateLimitMiddleware(
        app.wsgi_app, redis="redis://127.0.0.1:6379", limit=GCRA(5, 10, "1m"), key=header("x-client-id"),
    )

Django (the views are found with the request's URL resolver)::

    MIDDLEWARE = [..., "ratelimit_redis_module.DjangoRateLimitMiddleware"]
    RATELIMIT_REDIS_MODULE = {"redis": "redis://127.0.0.1:6379", "limit": GCRA(5, 10, "1m")}

Neither Flask nor Django is imported until a request is routed through one of them, so the
package does not depend on either.
"""

from __future__ import annotations

import importlib
from collections import ChainMap
import sys
from contextlib import ExitStack
from http import HTTPStatus
from typing import Any, Callable, Iterable, Iterator, Protocol, Unpack
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from ._http import Limiting, Options, Request, refusal_headers, view_mark
from .client import client_from_url
from .guard import Guard, InFlight, Verdict
from .limit_types import Limit

__all__ = ["WSGIRateLimitMiddleware", "DjangoRateLimitMiddleware"]


class _DjangoRequest(Protocol):
    """What the Django middleware reads of Django's ``HttpRequest``."""

    META: dict[str, Any]
    path_info: str


class _DjangoResponse(Protocol):
    """What it writes of Django's ``HttpResponse`` (``streaming_content``, ``is_async``: of a
    ``StreamingHttpResponse``)."""

    status_code: int
    streaming: bool
    streaming_content: Iterable[bytes]
    is_async: bool

    def __setitem__(self, header: str, value: str) -> None: ...


def _django(module: str) -> Any:
    """``django.<module>``, imported at the first request that needs it (Django has no types
    for mypy, and the package does not depend on it)."""
    return importlib.import_module("django." + module)


def _status_line(status: int) -> str:
    return f"{status} {HTTPStatus(status).phrase}"


def _django_view(path_info: str, urlconf: Any) -> Any:
    """The view Django's URL resolver gives ``path_info``, or None (no route: Django answers
    404, and the request is limited as any other)."""
    urls = _django("urls")
    try:
        return urls.resolve(path_info, urlconf).func
    except urls.Resolver404:
        return None


def _flask_view(app: Any, environ: WSGIEnvironment) -> Any:
    """The view the Flask app ``app`` routes ``environ`` to, or None: matched with the URL
    adapter Flask makes for the request itself (host and subdomain matching, trusted hosts)."""
    from werkzeug.exceptions import HTTPException

    try:
        # populate_request=False: the throwaway request stays out of the environ that Flask
        # makes its own request from.
        adapter = app.create_url_adapter(app.request_class(environ, populate_request=False))
        rule, _ = adapter.match(return_rule=True)
    except HTTPException:  # no route (404, 405) or a redirect: Flask answers it
        return None
    return app.view_functions.get(rule.endpoint)


def _view(app: Any, environ: WSGIEnvironment) -> Any:
    """The view function the WSGI application ``app`` will route ``environ`` to: a Flask app
    (or its ``wsgi_app``, a method of the app) or Django's WSGI handler; else None."""
    candidates: tuple[Any, ...] = (app, getattr(app, "__self__", None))
    for candidate in candidates:
        if hasattr(candidate, "url_map") and hasattr(candidate, "view_functions"):
            return _flask_view(candidate, environ)
        if hasattr(candidate, "resolve_request") and hasattr(candidate, "request_class"):
            return _django_view(candidate.request_class(environ).path_info, None)
    return None


class _SyncLimiting(Limiting[Guard]):
    """The middleware on the sync guard: how it makes one, and closes them."""

    def _new_guard(self, redis: Any, limit: Limit, timeout: float, **options: Any) -> Guard:
        # The sync guard has no timeout of its own: its client's socket timeout is the bound.
        return Guard(client_from_url(redis, timeout=timeout) if isinstance(redis, str) else redis, limit, **options)

    def close(self) -> None:
        """At shutdown: the local budgets give back every unit they hold (``RL.REFUND``)."""
        for guard in (self.guard, *self._routes.values()):
            guard.close()


class WSGIRateLimitMiddleware(_SyncLimiting):
    """Limits each caller of a WSGI application (Flask, Django's WSGI handler, any other)
    with the ratelimit module, as :class:`~ratelimit_redis_module.RateLimitMiddleware` does an
    ASGI application: the same options, the same fields, 429 body and ``Retry-After``, the
    same failure handling, ``skip``, :func:`~ratelimit_redis_module.exempt` and
    :func:`~ratelimit_redis_module.limited`. The key functions read the WSGI environ
    (:func:`~ratelimit_redis_module.client_ip`: ``REMOTE_ADDR``).

    Args:
        app: the WSGI application; for Flask, ``app.wsgi_app``.
        redis: a Redis URL (the middleware makes its client with
            :func:`~ratelimit_redis_module.client_from_url`, with ``timeout``), or a
            :class:`redis.Redis` or :class:`redis.cluster.RedisCluster`, whose
            ``socket_timeout`` is then the time Redis has (``timeout`` is not used).
        limit: as for the ASGI middleware. A :class:`~ratelimit_redis_module.Concurrency`
            lease is held until the server closes the response (its body sent, or the client
            gone: then ``DROPPED``).
        guard: a :class:`~ratelimit_redis_module.Guard` to use instead of building one.
        options: ``key``, ``name``, ``prefix``, ``cost``, ``skip``, ``shadow``, ``timeout``,
            ``fail_open``, ``max_remembered``, ``durable``, ``durable_timeout_ms``, ``stats``,
            ``clock``, ``backend``: as for the ASGI middleware, the functions taking the
            environ.

    The route marks are read from a Flask app (``app`` is the app or its ``wsgi_app``) or
    Django's WSGI handler; around any other application, use ``skip``. A limit with a local
    budget gives back the units it holds at :meth:`close`; WSGI has no shutdown event, so
    call it at exit.
    """

    def __init__(
        self,
        app: WSGIApplication,
        redis: Any = None,
        limit: Limit | None = None,
        *,
        guard: Guard | None = None,
        **options: Unpack[Options],
    ) -> None:
        self.app = app
        super().__init__(redis, limit, guard, options)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        guard = self._guard_for(environ, lambda: view_mark(_view(self.app, environ)))
        terms = self._terms(environ) if guard is not None else None
        if guard is None or terms is None:
            return self.app(environ, start_response)
        identity, cost, shadow = terms
        flight = ExitStack()
        request = flight.enter_context(guard.in_flight(identity, cost, shadow=shadow))
        verdict = request.verdict
        if verdict.lease is None:
            flight.close()  # nothing held: nothing to release when the response ends
        if not verdict.allowed:
            start_response(_status_line(verdict.status), refusal_headers(verdict))
            return [verdict.body]
        if verdict.lease is None and not verdict.headers:
            return self.app(environ, start_response)

        def started(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            request.status = int(status.split(" ", 1)[0])
            return start_response(status, headers + verdict.headers, exc_info)

        if verdict.lease is None:
            return self.app(environ, started)
        try:
            body = self.app(environ, started)
        except BaseException:
            flight.__exit__(*sys.exc_info())
            raise
        return _Held(body, request, flight)


class _Held:
    """A response body whose request holds a concurrency lease: released when the server
    closes the body (PEP 3333: always, the body sent or not), with ``DROPPED`` when the body
    was not sent whole (the client went away, or the application raised)."""

    def __init__(self, body: Iterable[bytes], request: InFlight, flight: ExitStack) -> None:
        self._body = body
        self._request = request
        self._flight = flight

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._body
        except BaseException:
            self._request.dropped = True
            raise
        self._request.done()

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            if not self._request.finished:
                self._request.dropped = True
            self._flight.close()


class DjangoRateLimitMiddleware(_SyncLimiting):
    """Django middleware limiting each caller, as :class:`WSGIRateLimitMiddleware` does: the
    same options, read from the setting ``RATELIMIT_REDIS_MODULE`` (a dict: ``redis``,
    ``limit``, ``guard``, and the options; the functions taking ``request.META``, Django's
    WSGI environ, with ``request.user`` as ``user``, for
    :func:`~ratelimit_redis_module.user`)::

        MIDDLEWARE = [
            "django.middleware.security.SecurityMiddleware",
            "ratelimit_redis_module.DjangoRateLimitMiddleware",
            ...
        ]
        RATELIMIT_REDIS_MODULE = {"redis": "redis://127.0.0.1:6379", "limit": GCRA(5, 10, "1m")}

    A view marked with :func:`~ratelimit_redis_module.exempt` or
    :func:`~ratelimit_redis_module.limited` (a function, or a class-based view's class) is
    found with the request's URL resolver, before any view runs; a path with no view is
    limited (a 404 costs as any request). A refusal is answered here, so the middleware below
    it and the view do not run. A :class:`~ratelimit_redis_module.Concurrency` lease is held
    until the view returns its response, or for a body streamed from an iterator
    (``StreamingHttpResponse``, ``FileResponse``; not an asynchronous iterator) until the
    server closes the response (its body sent, or the client gone: then ``DROPPED``).
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[Any], Any], **settings: Any) -> None:
        """``settings``: the options themselves, instead of the Django setting (a subclass or
        a test can pass them)."""
        if not settings:
            settings = dict(getattr(_django("conf").settings, "RATELIMIT_REDIS_MODULE", {}))
        self.get_response = get_response
        redis, limit, guard = settings.pop("redis", None), settings.pop("limit", None), settings.pop("guard", None)
        super().__init__(redis, limit, guard, settings)  # type: ignore[arg-type]  # checked there

    def __call__(self, request: _DjangoRequest) -> Any:
        # The functions read the environ, with Django's user beside it for `user()`: the
        # lazy object itself, so that no session is loaded for a key that does not ask.
        meta: Request = ChainMap({"user": getattr(request, "user", None)}, request.META)
        guard = self._guard_for(meta, lambda: view_mark(_django_view(request.path_info, getattr(request, "urlconf", None))))
        terms = self._terms(meta) if guard is not None else None
        if guard is None or terms is None:
            return self.get_response(request)
        identity, cost, shadow = terms
        with ExitStack() as flight:
            held = flight.enter_context(guard.in_flight(identity, cost, shadow=shadow))
            verdict = held.verdict
            if not verdict.allowed:
                return _refusal(verdict)
            response: _DjangoResponse = self.get_response(request)
            held.status = response.status_code
            for name, value in verdict.headers:
                response[name] = value
            if verdict.lease is not None and response.streaming and not response.is_async:
                # Sent after this returns: the lease is held until the server closes the
                # response (Django's close() calls the body's), as the WSGI middleware holds it.
                response.streaming_content = _Held(response.streaming_content, held, flight.pop_all())
            return response


def _refusal(verdict: Verdict) -> Any:
    """The refusal as a Django response."""
    response = _django("http").HttpResponse(verdict.body, status=verdict.status)
    # The fields in the ASGI middleware's order: Django put its Content-Type first.
    del response["Content-Type"]
    for name, value in refusal_headers(verdict):
        response[name] = value
    return response
