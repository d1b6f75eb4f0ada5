"""What the ASGI and the WSGI middleware share: the route marks (``exempt``, ``limited``), the
key functions, the refusal's fields, and which guard checks a request.

A "request" here is the mapping the server hands the application: an ASGI scope or a WSGI
environ (Django's ``request.META`` is one). The key functions read either, so that one
configuration (``key=header("x-api-key")``) moves from FastAPI to Flask or Django unchanged.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Generic, Mapping, MutableMapping, TypedDict, TypeVar, Union

from ._setup import SETUP_TIMEOUT_S
from .fields import PROBLEM_JSON, XRateLimitReset, check_x_ratelimit_reset
from .aio.guard import AsyncGuard
from .guard import Guard, Verdict
from .stats import Stats
from .limit_types import Limit

#: An ASGI scope or a WSGI environ.
Request = MutableMapping[str, Any]
#: Maps a request (ASGI scope or WSGI environ) to the caller's identity, or None to leave it
#: unlimited.
KeyFunc = Callable[[Request], Union[str, None]]
#: A cost in units, or a function of the request that gives it.
CostFunc = Union[int, Callable[[Request], int]]
#: True or False for every request, or a function of the request saying which requests.
ScopeFlag = Union[bool, Callable[[Request], bool]]
#: A function of the request: True for a request the middleware lets through untouched.
SkipFunc = Callable[[Request], bool]

_Marked = TypeVar("_Marked")
_EXEMPT = "__ratelimit_exempt__"
_LIMIT = "__ratelimit_limit__"
# How many endpoints `exempt` and `limited` have marked: until one is, no route is looked up
# (a lookup costs a routing pass per request, for nothing when no route is marked).
_marked = 0


def exempt(endpoint: _Marked) -> _Marked:
    """Mark a route's endpoint or view, or an ASGI app to be mounted, as exempt from the
    middleware, as slowapi's ``@limiter.exempt`` does: its requests pass untouched, with no
    check, no headers and no round trip (health checks, metrics, internal callers). Above or
    below the route's decorator::

        @app.get("/health")          # FastAPI; Flask: @app.route("/health")
        @exempt
        async def health() -> dict: ...

        app.mount("/internal", exempt(internal_app))

    The ASGI middleware finds the route the way Starlette's router will (a Starlette or
    FastAPI application, mounts included): the first route whose path and method match. The
    WSGI middleware finds a Flask view with the app's own URL adapter, and a Django view
    (a function, or a class-based view's class) with the request's URL resolver. Elsewhere,
    use the middleware's ``skip``.
    """
    global _marked
    try:
        setattr(endpoint, _EXEMPT, True)
    except (AttributeError, TypeError):
        raise TypeError(f"cannot mark {endpoint!r} as exempt: it takes no attributes") from None
    _marked += 1
    return endpoint


def limited(limit: Limit, *, name: str | None = None) -> Callable[[_Marked], _Marked]:
    """A route's own limit, as slowapi's ``@limiter.limit(...)`` gives one: the middleware
    checks the route's requests against ``limit`` instead of its own, on keys of their own
    (the middleware's prefix, ``name``, ``:``, the caller's key), with the middleware's key
    function, cost, shadow and failure settings; the headers name the limit ``name``.
    ``name`` defaults to the endpoint's ``__name__``; routes marked with the same name and
    limit share their keys. Above or below the route's decorator::

        @app.get("/search")          # FastAPI; Flask: @app.route("/search")
        @limited(GCRA(5, 10, "1m"))
        async def search() -> dict: ...

    The route is found as for :func:`exempt`.
    """

    def mark(endpoint: _Marked) -> _Marked:
        global _marked
        label = name if name is not None else getattr(endpoint, "__name__", None)
        if not isinstance(label, str) or not label:
            raise TypeError(f"cannot name the limit of {endpoint!r}: give limited(..., name=...)")
        try:
            setattr(endpoint, _LIMIT, (limit, label))
        except (AttributeError, TypeError):
            raise TypeError(f"cannot mark {endpoint!r} with a limit: it takes no attributes") from None
        _marked += 1
        return endpoint

    return mark


def mark_of(thing: Any) -> Any:
    """What ``exempt`` (True) or ``limited`` (the limit and its name) put on ``thing``, or None."""
    if getattr(thing, _EXEMPT, False) is True:
        return True
    return getattr(thing, _LIMIT, None)


def view_mark(view: Any) -> Any:
    """The mark of a view function, or else of the class it was made from (Flask's and
    Django's ``as_view()`` put the class in ``view_class``), so that a class-based view can be
    marked on its class."""
    mark = mark_of(view)
    return mark if mark is not None else mark_of(getattr(view, "view_class", None))


def client_ip(request: Mapping[str, Any]) -> str | None:
    """The peer's address, as the server gives it: the ASGI scope's ``client``, or the WSGI
    environ's ``REMOTE_ADDR``. Behind a proxy, have the server or a middleware set it from the
    proxy's headers (uvicorn's ``--forwarded-allow-ips``, Werkzeug's ``ProxyFix`` outside the
    rate limiter): a key read from ``X-Forwarded-For`` unchecked is the client's to choose."""
    client = request.get("client")
    if client:
        return str(client[0])
    address = request.get("REMOTE_ADDR")
    return str(address) if address else None


def _environ_name(name: str) -> str:
    """The WSGI environ's key of the request header ``name`` (CGI's spelling)."""
    upper = name.upper().replace("-", "_")
    return upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + upper


def header(name: str, fallback: KeyFunc | None = client_ip) -> KeyFunc:
    """A key function reading the request header ``name`` (e.g. an API key), or ``fallback``
    when the request has none."""
    wanted = name.lower().encode("latin-1")
    environ_name = _environ_name(name)

    def key(request: Request) -> str | None:
        fields = request.get("headers")
        if fields is not None:  # an ASGI scope
            for field, value in fields:
                if field.lower() == wanted and value:
                    return str(value.decode("latin-1"))
        else:
            value = request.get(environ_name)
            if value:
                return str(value)
        return fallback(request) if fallback else None

    return key


def user(fallback: KeyFunc | None = client_ip) -> KeyFunc:
    """A key function reading the authenticated user: the one Starlette's
    ``AuthenticationMiddleware`` puts in ``scope["user"]`` (its ``identity``, else its
    ``display_name``), Django's ``request.user`` (its ``get_username()``; the Django middleware
    hands it over as ``user``), or a WSGI environ's ``REMOTE_USER`` (set by the server or an
    authentication middleware in front); else ``fallback``, for an anonymous request. Add the
    rate limiter inside (after) the authentication middleware."""

    def key(request: Request) -> str | None:
        who = request.get("user")
        if who is not None and getattr(who, "is_authenticated", False):
            identity: Any
            try:
                identity = who.identity
            except (AttributeError, NotImplementedError):
                identity = getattr(who, "display_name", None)
            if not identity and callable(getattr(who, "get_username", None)):
                identity = who.get_username()
            if identity:
                return "user:" + str(identity)
        remote = request.get("REMOTE_USER")
        if remote:
            return "user:" + str(remote)
        return fallback(request) if fallback else None

    return key


def refusal_headers(verdict: Verdict) -> list[tuple[str, str]]:
    """The fields of a refusal: the verdict's, then its problem body's type and length."""
    return verdict.headers + [("content-type", PROBLEM_JSON), ("content-length", str(len(verdict.body)))]


G = TypeVar("G", Guard, AsyncGuard)


class Options(TypedDict, total=False):
    """The middleware's options besides the application, ``redis``, ``limit`` and ``guard``
    (the same for ASGI, WSGI and Django; each documented on the ASGI middleware)."""

    key: KeyFunc
    name: str | None
    prefix: str
    cost: CostFunc
    skip: SkipFunc | None
    shadow: ScopeFlag
    timeout: float
    fail_open: bool
    max_remembered: int
    durable: int
    durable_timeout_ms: int
    stats: Stats | None
    clock: Callable[[], float]
    backend: str
    setup_timeout: float
    x_ratelimit_reset: XRateLimitReset


class Limiting(Generic[G]):
    """The options both middleware take, and the choice of the guard that checks a request:
    the middleware's own, a ``limited`` route's (made at its first request, sharing the
    middleware's client, settings and stats), or none. A subclass says how to make a guard
    (:meth:`_new_guard`) and how to find a request's route."""

    def __init__(self, redis: Any, limit: Limit | None, guard: G | None, options: Options) -> None:
        # The options may come from a settings dict (Django's), which no signature checks.
        unknown = sorted(set(options) - Options.__optional_keys__)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown options: {', '.join(unknown)}")
        max_remembered = options.get("max_remembered", 10_000)
        if guard is None:
            # Checked before the guard is made (its setup starts with it).
            x_ratelimit_reset = check_x_ratelimit_reset(options.get("x_ratelimit_reset", "delta"))
            if redis is None or limit is None:
                raise TypeError(f"{type(self).__name__} needs redis= and limit= (or guard=)")
            guard = self._new_guard(
                redis, limit, options.get("timeout", 0.05), name=options.get("name"),
                prefix=options.get("prefix", "rl:http:"), fail_open=options.get("fail_open", True),
                max_remembered=max_remembered, stats=options.get("stats"),
                clock=options.get("clock", time.monotonic), durable=options.get("durable", 0),
                durable_timeout_ms=options.get("durable_timeout_ms", 100), backend=options.get("backend", "auto"),
                setup_timeout=options.get("setup_timeout", SETUP_TIMEOUT_S), x_ratelimit_reset=x_ratelimit_reset,
            )
        elif "x_ratelimit_reset" in options and options["x_ratelimit_reset"] != guard.x_ratelimit_reset:
            # The guard makes the fields: an option it does not have would be dropped silently.
            raise ValueError(
                f"x_ratelimit_reset={options['x_ratelimit_reset']!r} differs from the guard's "
                f"{guard.x_ratelimit_reset!r}: give it to the guard"
            )
        self.guard: G = guard
        self.key: KeyFunc = options.get("key", client_ip)
        self.cost: CostFunc = options.get("cost", 1)
        self.shadow: ScopeFlag = options.get("shadow", False)
        self.skip: SkipFunc | None = options.get("skip")
        self._max_remembered = max_remembered
        # The guards of the routes marked with `limited`, by (name, limit), made at first use.
        self._routes: dict[tuple[str, Limit], G] = {}

    def _new_guard(self, redis: Any, limit: Limit, timeout: float, **options: Any) -> G:
        raise NotImplementedError

    @property
    def stats(self) -> Stats:
        """The counters: round trips, admitted, denied, remembered, failures..."""
        return self.guard.stats

    def _guard_for(self, request: Request, find_mark: Callable[[], Any]) -> G | None:
        """The guard that checks this request: the middleware's, a ``limited`` route's own, or
        None for a request let through untouched (``skip``, an ``exempt`` route).
        ``find_mark`` gives the mark of the request's route (see :func:`mark_of`), or None."""
        if self.skip is not None and self.skip(request):
            return None
        if not _marked:
            return self.guard
        mark = find_mark()
        if mark is True:
            return None
        return self._route_guard(*mark) if mark is not None else self.guard

    def _route_guard(self, limit: Limit, name: str) -> G:
        guard = self._routes.get((name, limit))
        if guard is None:
            base = self.guard
            # The base's limiter itself (its client, backend, setup and stats): the timeout only
            # bounds an async guard's checks (a sync guard's client has its own socket timeout).
            made = self._new_guard(
                base.limiter, limit, getattr(base, "timeout", 0.05), name=name,
                prefix=f"{base.prefix}{name}:", fail_open=base.fail_open, max_remembered=self._max_remembered,
                stats=base.stats, clock=base.memory.clock, durable=base.durable,
                durable_timeout_ms=base.durable_timeout_ms, backend=base.limiter.backend_option,
                x_ratelimit_reset=base.x_ratelimit_reset,
            )
            # Two threads of a WSGI server may make one at once: both keep the first.
            guard = self._routes.setdefault((name, limit), made)
        return guard

    def _terms(self, request: Request) -> tuple[str, int, bool] | None:
        """The request's identity, cost and shadow flag, or None to leave it unlimited."""
        identity = self.key(request)
        if identity is None:
            return None
        cost = self.cost(request) if callable(self.cost) else self.cost
        shadow = self.shadow(request) if callable(self.shadow) else self.shadow
        return identity, cost, bool(shadow)
