"""A storage for the ``limits`` library (and so for flask-limiter and slowapi) on the module:
``RatelimitStorage``, registered with ``limits`` under the schemes ``ratelimit+redis://``,
``ratelimit+rediss://``, ``ratelimit+redis+unix://``, ``ratelimit+redis+sentinel://`` and
``ratelimit+redis+cluster://`` when this module is imported (``limits`` has no entry points: its
registry takes a storage class when the class is created). Importing it also imports the asyncio
twin, ``aio/limits_storage.py``, whose ``async+ratelimit+...`` schemes ``limits.aio`` takes.

Each hit is one command on the key (the script backend's ``EVALSHA`` where the module is
refused):

- fixed window (``incr``): ``RL.COUNTER key <expiry>s BY amount``, limits' own format: a plain
  integer string whose TTL is set at its first hit (limits' ``INCRBY`` + ``EXPIRE``), so ``GET``
  reads it and, with ``key_prefix="LIMITS"``, the keys are those of limits' own Redis storage (a
  denied hit is counted, as limits counts it);
- moving window (``acquire_entry``): ``RL.SLIDINGLOG key limit <expiry>s COST amount``;
- sliding window counter (``acquire_sliding_window_entry``): ``RL.SLIDINGWINDOW key limit
  <expiry>s COST amount``, whose windows are aligned on the epoch (limits' memory and memcached
  storages align them so; its Redis storage starts them at the first hit).

The reads answer in limits' terms: ``get`` and ``get_expiry`` of a fixed window from ``RL.COUNTER
key 1 BY 0`` (the count and the PTTL, writing nothing); of the other keys, and the windows'
(``get_moving_window``, ``get_sliding_window``), from ``RL.INSPECT`` (the script backend: the key's hash and a ``DRYRUN`` check) or
``DRYRUN`` checks, writing nothing. docs/limits.md says what each answer is and where it differs
from limits' own Redis storage.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any, NamedTuple

import redis
import redis.cluster
import redis.sentinel
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from .client import RateLimiter
from .reply import Count, Decision, _text
from .scripts import BACKENDS

__all__ = ["RatelimitStorage", "DEFAULT_PREFIX", "SCHEMES"]

#: The keys' prefix unless ``key_prefix`` says otherwise: ``rl:`` so that the ACL pattern the
#: manual gives the application (``~rl:*``) covers them.
DEFAULT_PREFIX = "rl:limits"

#: The schemes, sync, as limits' Redis storages name theirs with ``ratelimit+`` in front.
SCHEMES = [
    "ratelimit+redis",
    "ratelimit+rediss",
    "ratelimit+redis+unix",
    "ratelimit+redis+sentinel",
    "ratelimit+redis+cluster",
]

#: The query parameters the storage reads from the URI (and removes before redis-py sees it).
_OWN_PARAMETERS = ("backend", "key_prefix")


class _Peek(NamedTuple):
    """A key's state in the terms the reads need: its algorithm, limit, what remains now, the ms
    until it is fresh, and for a sliding window its stored window (µs) and counts."""

    algorithm: str
    limit: int
    remaining: int
    reset_after_ms: int
    window_ms: int = 0
    window_start_us: int = 0
    current: int = 0
    previous: int = 0


class _Target(NamedTuple):
    """What a storage URI names: the kind of client, its redis-py URL or locations, and the
    storage's own settings."""

    kind: str  # "standalone", "sentinel" or "cluster"
    url: str
    locations: list[tuple[str, int]]
    service: str
    username: str | None
    password: str | None
    backend: str
    key_prefix: str


def parse_uri(uri: str, options: dict[str, Any], async_: bool = False) -> _Target:
    """Split a storage URI (``[async+]ratelimit+<redis scheme>://...``) into what makes the
    client and the storage's settings (``backend``, ``key_prefix``: from the options, else the
    URI's query, else ``"auto"`` and :data:`DEFAULT_PREFIX`); the options it takes are removed
    from ``options``."""
    parsed = urllib.parse.urlsplit(uri)
    scheme = parsed.scheme
    if async_:
        if not scheme.startswith("async+"):
            raise ValueError(f"invalid storage URI {uri!r}: the asyncio storage's schemes start with async+ratelimit+")
        scheme = scheme.removeprefix("async+")
    if scheme not in SCHEMES:
        raise ValueError(f"invalid storage URI {uri!r}: expected one of {', '.join(s + '://' for s in SCHEMES)}")
    query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
    settings: dict[str, str] = {}
    for name in _OWN_PARAMETERS:
        if name in options:
            settings[name] = str(options.pop(name))
        elif name in query:
            settings[name] = query[name][-1]
    rest = urllib.parse.urlencode([(k, v) for k, vs in query.items() if k not in _OWN_PARAMETERS for v in vs])
    backend = settings.get("backend", "auto")
    if backend not in BACKENDS:
        raise ValueError(f"invalid backend {backend!r} in storage URI {uri!r}: expected 'auto', 'module' or 'script'")
    key_prefix = settings.get("key_prefix", DEFAULT_PREFIX)
    inner = scheme.removeprefix("ratelimit+")
    locations: list[tuple[str, int]] = []
    netloc = parsed.netloc.rpartition("@")[2]
    if inner in ("redis+sentinel", "redis+cluster"):
        for location in filter(None, (part.strip() for part in netloc.split(","))):
            host, _, port = location.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"invalid storage URI {uri!r}: {location!r} is not host:port")
            locations.append((host.strip("[]"), int(port)))
    service = ""
    if inner == "redis+sentinel":
        service = str(options.pop("service_name", "")) or parsed.path.strip("/")
        if not service:
            raise ValueError(
                f"invalid storage URI {uri!r}: a Sentinel URI names its service "
                "(ratelimit+redis+sentinel://host:port/<service>, or the option service_name)"
            )
        if not locations:
            raise ValueError(f"invalid storage URI {uri!r}: no Sentinel named (host:port)")
    if inner == "redis+cluster" and not locations and "startup_nodes" not in options:
        raise ValueError(f"invalid storage URI {uri!r}: no cluster node named (host:port, or the option startup_nodes)")
    url = urllib.parse.urlunsplit(
        ("unix" if inner == "redis+unix" else inner, parsed.netloc, parsed.path, rest, parsed.fragment)
    )
    username = urllib.parse.unquote(parsed.username) if parsed.username else None
    password = urllib.parse.unquote(parsed.password) if parsed.password else None
    kind = {"redis+sentinel": "sentinel", "redis+cluster": "cluster"}.get(inner, "standalone")
    return _Target(kind, url, locations, service, username, password, backend, key_prefix)


def _credentials(target: _Target, options: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if target.username is not None and "username" not in options:
        found["username"] = target.username
    if target.password is not None and "password" not in options:
        found["password"] = target.password
    return found


def sync_client(target: _Target, options: dict[str, Any]) -> redis.Redis | redis.cluster.RedisCluster:
    """The redis-py client a storage URI names, with ``options`` passed to redis-py as they are
    (limits' storages do the same)."""
    if target.kind == "cluster":
        nodes = options.pop("startup_nodes", None) or [
            redis.cluster.ClusterNode(h, p) for h, p in target.locations  # type: ignore[no-untyped-call]
        ]
        return redis.cluster.RedisCluster(startup_nodes=nodes, **_credentials(target, options), **options)
    if target.kind == "sentinel":
        sentinel_options = options.pop("sentinel_kwargs", None)
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            target.locations, sentinel_kwargs=sentinel_options, **options
        )
        primary: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            target.service, **_credentials(target, options)
        )
        return primary
    return redis.Redis.from_url(target.url, **options)


def redis_key(prefix: str, key: str) -> str:
    """The Redis key of limits' ``key``."""
    return f"{prefix}:{key}"


def seconds(expiry: int) -> str:
    """limits' expiry (whole seconds) as a duration for the module."""
    if isinstance(expiry, bool) or not isinstance(expiry, int) or expiry < 1:
        raise ValueError(f"invalid expiry {expiry!r}: expected whole seconds, at least 1")
    return f"{expiry}s"


#: ``RL.COUNTER``'s window for a read (``BY 0``), which sets no TTL: any valid duration.
READ_WINDOW = "1"


def other_key(error: redis.ResponseError) -> bool:
    """``RL.COUNTER``'s refusal of a key that is not a plain string (a moving or sliding
    window's, which the reads then take from ``RL.INSPECT``)."""
    return str(error).startswith("WRONGTYPE")


def counter_expiry(count: Count) -> float:
    """limits' ``get_expiry`` of a fixed window: now plus its TTL in whole seconds as Redis'
    ``TTL`` rounds it (limits' Redis storage reads ``TTL``; no key or no TTL: now)."""
    return time.time() + max((count.ttl_ms + 500) // 1000, 0)


def _fields(reply: Any) -> dict[str, str]:
    """RL.INSPECT's reply (a RESP2 name, value array or a RESP3 map) as text."""
    if isinstance(reply, dict):
        return {_text(k): _text(v) for k, v in reply.items()}
    if isinstance(reply, list) and len(reply) % 2 == 0:
        return {_text(reply[i]): _text(reply[i + 1]) for i in range(0, len(reply), 2)}
    raise ValueError(f"unexpected RL.INSPECT reply: {reply!r}")


def inspected(reply: Any) -> _Peek | None:
    """The module's RL.INSPECT reply as a :class:`_Peek` (None: no key)."""
    if reply is None:
        return None
    f = _fields(reply)
    try:
        return _Peek(
            f["algorithm"], int(f["limit"]), int(f["remaining"]), int(f["reset_after_ms"]),
            int(f.get("window_ms", 0)), int(f.get("window_start_us", 0)), int(f.get("current", 0)),
            int(f.get("previous", 0)),
        )
    except (KeyError, ValueError) as error:
        raise ValueError(f"unexpected RL.INSPECT reply: {reply!r}") from error


#: The script backend's hash layouts (clients/lua/README.md, State) the storage writes.
_LAYOUTS = {"tb1": "tokenbucket", "sw1": "slidingwindow", "sl1": "slidinglog", "fw1": "fixedwindow"}


def hashed(fields: dict[Any, Any], key: str) -> tuple[str, list[int], dict[str, int]] | None:
    """The script backend's hash of ``key`` (HGETALL): its algorithm, parameters and state
    (None: no key). A key of another layout is an error naming it."""
    if not fields:
        return None
    f = {_text(k): _text(v) for k, v in fields.items()}
    layout = f.get("a", "")
    if layout not in _LAYOUTS:
        raise ValueError(
            f"the key {key!r} holds the script backend's {layout or 'unknown'!r} state, which this storage does not "
            f"write: expected one of {', '.join(_LAYOUTS)}"
        )
    params = [int(word) for word in f.get("p", "").split()]
    state: dict[str, int] = {name: int(f[name]) for name in ("s", "c", "v") if name in f}
    return _LAYOUTS[layout], params, state


def peeked(algorithm: str, params: list[int], state: dict[str, int], decision: Decision) -> _Peek:
    """A script-backend key as a :class:`_Peek`: its hash and a DRYRUN check of it."""
    window_ms = params[1] if algorithm in ("slidingwindow", "slidinglog", "fixedwindow") else 0
    return _Peek(
        algorithm, decision.limit, decision.remaining, decision.reset_after_ms, window_ms,
        state.get("s", 0), state.get("c", 0), state.get("v", 0),
    )


def sliding_window(peek: _Peek | None, key: str) -> tuple[int, float, int, float]:
    """limits' ``get_sliding_window`` answer from a sliding window's state: the previous
    window's count and the seconds until its weight is gone (the end of the current window),
    the current window's count and the seconds until it is gone too (a window later), as
    limits' Redis storage gives them (its two keys' counts and TTLs). Where now falls in the
    window is read from ``time.time()``, as limits' strategies read it for their reset times
    (the counts are the server's)."""
    if peek is None or peek.reset_after_ms == 0:
        return 0, 0.0, 0, 0.0
    if peek.algorithm != "slidingwindow":
        raise ValueError(f"the key {key!r} holds a {peek.algorithm} limit, not a sliding window counter")
    window = peek.window_ms * 1000
    start = peek.window_start_us
    now = max(start, round(time.time() * 1_000_000))
    if now < start + window:
        elapsed, previous, current = now - start, peek.previous, peek.current
    elif now < start + 2 * window:
        elapsed, previous, current = now - start - window, peek.current, 0
    else:
        return 0, 0.0, 0, 0.0
    return previous, (window - elapsed) / 1e6, current, (2 * window - elapsed) / 1e6


def window_start(oldest: Decision, expiry: int) -> float:
    """The moving window's start (epoch seconds): when its oldest unit was taken, ``expiry``
    before it leaves, which a DRYRUN check of one unit more than remains says
    (``retry_after_ms``), counted from ``time.time()`` as limits counts it; in whole µs, so that
    limits' ``start + expiry`` is the float that its own storage gives."""
    now_us = round(time.time() * 1_000_000)
    return (now_us + oldest.retry_after_ms * 1000 - expiry * 1_000_000) / 1_000_000


def expiry_at(peek: _Peek | None) -> float:
    """limits' ``get_expiry``: now plus the key's TTL in whole seconds as Redis' ``TTL`` rounds
    it (limits' Redis storage reads ``TTL``), the TTL being the ms until the key is fresh."""
    if peek is None:
        return time.time()
    return time.time() + (peek.reset_after_ms + 500) // 1000


def held(peek: _Peek | None) -> int:
    """limits' ``get``: the units a peeked key holds (its limit less what remains), 0 for no key."""
    return 0 if peek is None else peek.limit - peek.remaining


class _Prefixed:
    """What both storages (this one and its asyncio twin) answer alike, whatever their client:
    their keys under ``key_prefix`` and redis-py's errors as the ones limits wraps."""

    key_prefix: str

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return redis.RedisError

    def _key(self, key: str) -> str:
        return redis_key(self.key_prefix, key)


class RatelimitStorage(_Prefixed, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """A ``limits`` storage on the ratelimit module: the fixed window, the moving window and the
    sliding window counter, one command per hit, on redis-py (standalone, Sentinel or Cluster).
    ``TimestampedSlidingWindow`` says, as limits' memory and memcached storages say it, that its
    sliding windows are aligned on the epoch (limits' strategies and tests read it so).

    Args:
        uri: ``ratelimit+redis://host:port/db``, ``ratelimit+rediss://...``,
            ``ratelimit+redis+unix:///path.sock``, ``ratelimit+redis+sentinel://host:port[,host:port]/service``
            or ``ratelimit+redis+cluster://host:port[,host:port]``; the query may carry
            ``backend`` and ``key_prefix``.
        key_prefix: put before every key, with ``:`` (default ``rl:limits``).
        backend: ``"auto"`` (the module if the server has it, else the script backend),
            ``"module"`` or ``"script"``.
        wrap_exceptions: limits' option: Redis errors raised as ``limits.errors.StorageError``.
        options: given to redis-py's client as they are (``service_name`` and
            ``sentinel_kwargs`` for Sentinel, ``startup_nodes`` for a cluster).
    """

    STORAGE_SCHEME = SCHEMES

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        own = dict(options)
        target = parse_uri(uri, own)
        self.key_prefix = target.key_prefix
        #: The redis-py client.
        self.client = sync_client(target, own)
        #: The package's limiter on that client, which sends each command (and picks the backend).
        self.limiter = RateLimiter(self.client, backend=target.backend)

    def _backend(self) -> str:
        self.limiter.ready()
        if self.limiter.backend is None:
            self.limiter._ask_backend()
        return self.limiter.backend or "module"

    def _peek(self, key: str) -> _Peek | None:
        k = self._key(key)
        if self._backend() == "module":
            return inspected(self.limiter.client.execute_command("RL.INSPECT", k))
        found = hashed(self.client.hgetall(k), k)
        if found is None:
            return None
        algorithm, params, state = found
        return peeked(algorithm, params, state, self._dry(k, algorithm, params))

    def _dry(self, k: str, algorithm: str, params: list[int]) -> Decision:
        if algorithm == "tokenbucket":
            return self.limiter.token_bucket(
                k, params[0], params[1], params[2], interval=bool(params[3]), cost=0, dryrun=True
            )
        check = {
            "slidingwindow": self.limiter.sliding_window, "slidinglog": self.limiter.sliding_log,
            "fixedwindow": self.limiter.fixed_window,
        }[algorithm]
        return check(k, params[0], params[1], cost=0, dryrun=True)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Count ``amount`` hits in the key's window (``expiry`` seconds from its first hit, on
        the server's clock); the count so far, denied hits included, as limits' Redis storage
        counts them (``RL.COUNTER``: the key is limits' plain integer string)."""
        return self.limiter.counter(self._key(key), seconds(expiry), amount).count

    def get(self, key: str) -> int:
        """The units the key holds now: a fixed window's count, a moving window's entries in
        the window, a sliding window's weighted count (rounded down); 0 for no key."""
        try:
            return self.limiter.counter(self._key(key), READ_WINDOW, 0).count
        except redis.ResponseError as error:
            if not other_key(error):
                raise
        return held(self._peek(key))

    def get_expiry(self, key: str) -> float:
        """When the key is fresh again (epoch seconds), as limits' Redis storage gives it: now
        plus the whole seconds of its TTL."""
        try:
            return counter_expiry(self.limiter.counter(self._key(key), READ_WINDOW, 0))
        except redis.ResponseError as error:
            if not other_key(error):
                raise
        return expiry_at(self._peek(key))

    def check(self) -> bool:
        """Whether Redis answers ``PING``."""
        try:
            return bool(self.client.ping())
        except Exception:  # limits' storages answer False for any failure
            return False

    def reset(self) -> int | None:
        """Delete every key under this storage's prefix (``SCAN`` in batches of 1000, on each
        primary of a cluster) and say how many; other keys are left alone."""
        pattern = f"{_glob_escape(self.key_prefix)}:*"
        deleted = 0
        batch: list[Any] = []
        for found in self.client.scan_iter(match=pattern, count=1000):
            batch.append(found)
            if len(batch) == 1000:
                deleted += self._delete(batch)
                batch = []
        return deleted + self._delete(batch)

    def _delete(self, keys: list[Any]) -> int:
        if not keys:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for k in keys:
            pipe.delete(k)
        return sum(int(n) for n in pipe.execute())

    def clear(self, key: str) -> None:
        """Forget the key: its next hit starts afresh."""
        self.client.delete(self._key(key))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """The moving window: admit ``amount`` when the units of the last ``expiry`` seconds
        leave room (``RL.SLIDINGLOG``)."""
        return self.limiter.sliding_log(self._key(key), limit, seconds(expiry), cost=amount).allowed

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """The moving window's start (when its oldest unit was taken) and its units, from two
        ``DRYRUN`` checks: none in it gives (now, 0)."""
        k = self._key(key)
        d = self.limiter.sliding_log(k, limit, seconds(expiry), cost=0, dryrun=True)
        units = d.limit - d.remaining
        if units == 0:
            return time.time(), 0
        oldest = self.limiter.sliding_log(k, limit, seconds(expiry), cost=d.remaining + 1, dryrun=True)
        return window_start(oldest, expiry), units

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """The sliding window counter: admit ``amount`` when the weighted count leaves room
        (``RL.SLIDINGWINDOW``, windows aligned on the epoch)."""
        return self.limiter.sliding_window(self._key(key), limit, seconds(expiry), cost=amount).allowed

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        """(previous count, seconds its weight lasts, current count, seconds it lasts)."""
        return sliding_window(self._peek(key), self._key(key))

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        """Forget the key (one key holds both windows)."""
        self.clear(key)


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


# One import registers both: the asyncio twin's schemes too.
from .aio import limits_storage as _aio_limits_storage  # noqa: E402,F401
