"""What the tests of a web framework's limiter on the ``limits`` storage share
(test_flask_limiter.py, test_slowapi.py): limits' three strategies, each app's set-up (its
storage URI on the backend's server, and the storage its limiter made checked to be ours, on the
fake clock and emptied), the reset times a fresh key may show and the fixed windows ended by an
event (their window is the key's real TTL, which the fake clock does not move), and the
rate-limit fields of a response. The ``backend`` fixture (the
module's server or a plain one) is conftest.py's; the clock is test_limits_storage.Clock.
"""

from __future__ import annotations

import time
from typing import Any

from conftest import Server
from ratelimit_redis_module.limits_storage import RatelimitStorage
from test_limits_storage import A, Clock, end_window, whole_seconds_left

STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter"]


def storage_uri(backend: tuple[str, Server]) -> str:
    """The storage URI an app is given: the backend's server, that backend forced."""
    name, server = backend
    return f"ratelimit+redis://127.0.0.1:{server.port}?backend={name}"


def on_clock(storage: Any, clock: Clock) -> RatelimitStorage:
    """The storage an app's limiter made from ``storage_uri`` (flask-limiter's
    ``limiter.storage``, slowapi's ``limiter._storage``): ours, its scripts on ``clock`` (their
    ``NOW``; the module's server is on it already), and emptied."""
    assert isinstance(storage, RatelimitStorage)
    storage.limiter._script_now = clock.us
    storage.reset()
    return storage


def first_reset(strategy: str) -> float:
    """When a fresh key's first minute resets (epoch seconds), the clock at A: A + 60 (the moving
    window's oldest hit is now), A for the sliding window counter (aligned, A a round minute:
    limits' reset for one hit in the current window is now + its TTL % 60 = now + 120 % 60)."""
    return A if strategy == "sliding-window-counter" else A + 60


def first_resets(strategy: str, since: float, at: float = A) -> set[float]:
    """The reset times a fresh key's first minute may show, the fake clock at ``at``: for the
    fixed window, whose window is the key's TTL on the server's clock, ``at`` plus the whole
    seconds left of it, read between bounds of the real time since ``since`` (time.monotonic()
    before the key's first hit); for the others, :func:`first_reset`'s."""
    if strategy == "fixed-window":
        return {at + s for s in whole_seconds_left(60_000, since)}
    return {first_reset(strategy)}


def end_windows(storage: RatelimitStorage) -> int:
    """End every fixed window of the storage now (test_limits_storage.end_window: its keys are
    the plain strings), as their TTLs would; how many."""
    ended = 0
    for k in storage.client.scan_iter(match=f"{storage.key_prefix}:*"):
        if storage.client.type(k) == b"string":
            end_window(storage, k.decode().removeprefix(f"{storage.key_prefix}:"))
            ended += 1
    return ended


def fields_for(limit: int, remaining: int, reset: float) -> dict[str, str]:
    """The fields a framework sends, ``reset`` being its ``X-RateLimit-Reset`` (each computes it
    from limits' reset time its own way) and ``Retry-After`` the whole seconds from now to it."""
    return {
        "x-ratelimit-limit": str(limit), "x-ratelimit-remaining": str(remaining),
        "x-ratelimit-reset": str(reset), "retry-after": str(int(reset - time.time())),
    }


def limited(http: Any, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET ``path``: the status, the ``X-RateLimit-*`` and ``Retry-After`` fields, the body."""
    status, fields, body = http.get(path, headers)
    return status, {k: v for k, v in fields if k.startswith("x-ratelimit") or k == "retry-after"}, body
