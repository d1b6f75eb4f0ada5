"""The ``limits`` storage (``ratelimit_redis_module.limits_storage``, docs/limits.md) through
limits' own strategies, sync and asyncio, on the module and on the script backend, standalone,
Cluster and Sentinel.

Time is one fake clock: the servers' debug clocks (the script backend: its test-only ``NOW``,
through the limiter's private ``_script_now``), and ``time.time``, which limits' strategies and
the storage read (the moving window's start, the sliding window's reset time), patched to show
the same instant. The fixed window is the exception: a plain counter (``RL.COUNTER``) whose
window is the key's TTL on the server's own clock, which the debug clock does not move; its
window is ended by an event (the key made to expire, then seen gone) and its reset time asserted
between bounds of the real time measured since the hit that set the TTL. The exact values are those docs/limits.md gives: limits' own answers for the
same hits; the moving window's are checked against limits' own Redis storage on a plain server
under the same clock, hit by hit.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
from limits import RateLimitItemPerMinute, parse
from limits.aio import strategies as aio_strategies
from limits.storage import RedisStorage, storage_from_string
from limits.strategies import (
    FixedWindowRateLimiter,
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)

import ratelimit_redis_module.limits_storage  # noqa: F401  (registers the schemes)
from test_counter import elapsed_ms
from conftest import PlainServer, Server
from ratelimit_redis_module.aio.limits_storage import AsyncRatelimitStorage
from ratelimit_redis_module.limits_storage import RatelimitStorage

#: A round minute (epoch ms), where the module's aligned windows begin.
A_MS = 1_700_000_040_000
A = A_MS / 1000


class Clock:
    """The servers' debug clocks, the scripts' clock and time.time, at one instant."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, servers: list[Server], ms: int = A_MS) -> None:
        self.ms = ms
        self.servers = [s for s in servers if not isinstance(s, PlainServer)]
        for s in self.servers:
            s.freeze(ms)
        monkeypatch.setattr(time, "time", lambda: self.ms / 1000)

    def advance(self, ms: int) -> None:
        self.ms += ms
        for s in self.servers:
            s.advance(ms)

    def us(self) -> int:
        return self.ms * 1000

    def expire(self, storage: RatelimitStorage) -> int:
        """Delete the storage's keys that are fresh by this clock: the keys Redis would have
        expired by now, whose TTL (reset_after_ms, docs/commands.md) runs in real time under the debug
        clock (CONTRIBUTING.md, "Tests"). A token bucket's beat is anchored anew only on a key that expired
        (docs/token-bucket.md), so the fixed window's next window starts at the next hit."""
        gone = 0
        for k in storage.client.scan_iter(match=f"{storage.key_prefix}:*"):
            if storage.client.type(k) == b"string":
                continue  # a fixed window's counter: its TTL is its window (end_window)
            peek = storage._peek(k.decode().removeprefix(f"{storage.key_prefix}:"))
            if peek is not None and peek.reset_after_ms == 0:
                gone += storage.client.delete(k)
        return gone


def whole_seconds_left(window_ms: int, since: float) -> set[int]:
    """A key's TTL in whole seconds as Redis' TTL rounds it (limits' Redis storage reads TTL),
    read now, of a key given ``window_ms`` at some instant after ``since`` (time.monotonic()):
    one value, or two when the real time since crosses a rounding boundary."""
    return set(range((window_ms - elapsed_ms(since) - 1 + 500) // 1000, (window_ms + 500) // 1000 + 1))


def end_window(storage: RatelimitStorage, key: str) -> None:
    """End a fixed window now, as its TTL would: the key made to expire in 1 ms, then seen gone."""
    k = f"{storage.key_prefix}:{key}"
    assert storage.client.pexpire(k, 1)
    while storage.client.exists(k):
        pass


def storage_on(server: Server, clock: Clock, backend: str, **options: Any) -> RatelimitStorage:
    s = storage_from_string(f"ratelimit+redis://127.0.0.1:{server.port}?backend={backend}", **options)
    assert isinstance(s, RatelimitStorage)
    s.limiter._script_now = clock.us
    s.reset()
    return s


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch, backend: tuple[str, Server]) -> Iterator[tuple[RatelimitStorage, Clock]]:
    name, server = backend
    clock = Clock(monkeypatch, [server])
    s = storage_on(server, clock, name)
    yield s, clock
    s.reset()
    s.client.close()


# --- the three strategies, exact ------------------------------------------------------------


def test_fixed_window_counts_from_the_first_hit(setup: tuple[RatelimitStorage, Clock]) -> None:
    storage, clock = setup
    item = parse("5/minute")
    fw = FixedWindowRateLimiter(storage)
    clock.advance(7_000)  # time.time() reads A + 7
    since = time.monotonic()
    assert [fw.hit(item, "u") for _ in range(6)] == [True] * 5 + [False]
    assert not fw.test(item, "u")
    reset, remaining = fw.get_window_stats(item, "u")
    assert remaining == 0 and reset - (A + 7) in whole_seconds_left(60_000, since)  # 60 s from the first hit
    assert storage.get(item.key_for("u")) == 6  # the denied hit is counted, as limits counts it
    assert storage.client.get(f"rl:limits:{item.key_for('u')}") == b"6"  # limits' own plain counter
    clock.advance(30_000)  # the debug clock does not move the window: the key's TTL does
    assert not fw.test(item, "u")
    end_window(storage, item.key_for("u"))  # the window's end: fresh
    assert fw.test(item, "u")
    assert fw.get_window_stats(item, "u") == (A + 37, 5)  # no key: reset now, as limits says
    since = time.monotonic()
    assert fw.hit(item, "u")
    reset, remaining = fw.get_window_stats(item, "u")
    assert remaining == 4 and reset - (A + 37) in whole_seconds_left(60_000, since)
    # The TTL read first, then the time since: the other way round, the milliseconds between the
    # two made a loaded machine's PTTL look older than the time measured (59,992 against 59,994).
    ttl = storage.client.pttl(f"rl:limits:{item.key_for('u')}")
    assert 60_000 - elapsed_ms(since) - 1 <= ttl <= 60_000


def test_fixed_window_costs(setup: tuple[RatelimitStorage, Clock]) -> None:
    storage, clock = setup
    item = parse("5/minute")
    fw = FixedWindowRateLimiter(storage)
    since = time.monotonic()
    assert fw.hit(item, "c", cost=4)
    assert fw.test(item, "c", cost=1) and not fw.test(item, "c", cost=2)
    assert not fw.hit(item, "c", cost=3)  # limits counts it: 7
    assert not fw.hit(item, "c", cost=1)  # 8 > 5, as in limits
    assert storage.get(item.key_for("c")) == 8
    reset, remaining = fw.get_window_stats(item, "c")
    assert remaining == 0 and reset - A in whole_seconds_left(60_000, since)
    since = time.monotonic()
    assert storage.incr("raw", 90, amount=10) == 10
    assert storage.incr("raw", 90, amount=1) == 11
    assert storage.get_expiry("raw") - A in whole_seconds_left(90_000, since)  # TTL rounds as Redis' TTL
    with storage.client.pipeline(transaction=True) as pipe:
        pipe.pexpire("rl:limits:raw", 89_500)  # 89.5 s is 90, as Redis' TTL rounds it
        pipe.pttl("rl:limits:raw")
        assert pipe.execute() == [True, 89_500]
    since = time.monotonic()
    assert storage.get_expiry("raw") - A in whole_seconds_left(89_500, since)
    storage.client.pexpire("rl:limits:raw", 89_499)
    since = time.monotonic()
    assert storage.get_expiry("raw") - A in whole_seconds_left(89_499, since)


def test_the_fixed_windows_keys_are_limits_own(
    monkeypatch: pytest.MonkeyPatch, backend: tuple[str, Server]
) -> None:
    """With ``key_prefix="LIMITS"`` (limits' own), limits' RedisStorage and this storage count on
    the same keys: a limits user's counts in flight carry over, both ways."""
    name, server = backend
    Clock(monkeypatch, [server])
    ours = storage_from_string(f"ratelimit+redis://127.0.0.1:{server.port}?backend={name}&key_prefix=LIMITS")
    theirs = RedisStorage(f"redis://127.0.0.1:{server.port}")
    item = parse("5/minute")
    since = time.monotonic()
    assert [FixedWindowRateLimiter(theirs).hit(item, "carry") for _ in range(2)] == [True, True]
    assert ours.get(item.key_for("carry")) == 2
    assert [FixedWindowRateLimiter(ours).hit(item, "carry") for _ in range(4)] == [True, True, True, False]
    assert theirs.get(item.key_for("carry")) == 6
    assert FixedWindowRateLimiter(theirs).get_window_stats(item, "carry")[1] == 0
    assert ours.get_expiry(item.key_for("carry")) - A in whole_seconds_left(60_000, since)
    assert ours.get_expiry(item.key_for("carry")) == theirs.get_expiry(item.key_for("carry"))
    assert ours.reset() == 1
    ours.client.close()


def test_moving_window_is_the_sliding_log(setup: tuple[RatelimitStorage, Clock]) -> None:
    # The sliding log's worked example (docs/sliding-log.md): 2 per minute, at 0:01, 0:30, 0:50, 1:40.
    storage, clock = setup
    item = parse("2/minute")
    mw = MovingWindowRateLimiter(storage)
    assert mw.get_window_stats(item, "m") == (A + 60, 2)
    clock.advance(1_000)
    assert mw.hit(item, "m")
    assert mw.get_window_stats(item, "m") == (A + 61, 1)
    clock.advance(29_000)
    assert mw.hit(item, "m")
    clock.advance(20_000)
    assert not mw.hit(item, "m")
    assert not mw.test(item, "m")
    assert mw.get_window_stats(item, "m") == (A + 61, 0)
    assert storage.get_moving_window(item.key_for("m"), 2, 60) == (A + 1, 2)
    clock.advance(11_000)  # 1:01: the first has left the window
    assert mw.test(item, "m") and not mw.test(item, "m", cost=2)
    assert mw.get_window_stats(item, "m") == (A + 90, 1)
    clock.advance(39_000)
    assert mw.hit(item, "m")  # 1:40: the one of 0:30 has left too
    assert mw.get_window_stats(item, "m") == (A + 160, 1)
    assert not mw.hit(item, "m", cost=3)  # above the limit: never
    assert mw.hit(item, "m")
    assert storage.get(item.key_for("m")) == 2
    assert mw.get_window_stats(item, "m") == (A + 160, 0)


def test_sliding_window_counter_weights_the_previous_window(setup: tuple[RatelimitStorage, Clock]) -> None:
    # docs/sliding-window.md's example: 7 per minute, 5 in the previous minute; 30% into this one the estimate
    # is floor(5 × 0.7) = 3, so four more pass and the fifth is denied.
    storage, clock = setup
    item = parse("7/minute")
    sw = SlidingWindowCounterRateLimiter(storage)
    assert sw.get_window_stats(item, "s") == (A, 7)
    assert [sw.hit(item, "s") for _ in range(5)] == [True] * 5
    assert storage.get_sliding_window(item.key_for("s"), 60) == (0, 60.0, 5, 120.0)
    clock.advance(78_000)
    assert storage.get_sliding_window(item.key_for("s"), 60) == (5, 42.0, 0, 102.0)
    assert sw.get_window_stats(item, "s") == (A + 78 + 42 % 12, 4)
    assert [sw.hit(item, "s") for _ in range(5)] == [True] * 4 + [False]
    assert not sw.test(item, "s")
    assert storage.get_sliding_window(item.key_for("s"), 60) == (5, 42.0, 4, 102.0)
    # limits: remaining 7 - floor(5 × 42/60 + 4) = 0; reset at the previous window's next
    # unit (42 % (60/5) = 6 s) before the current one's (102 % 60 = 42 s).
    assert sw.get_window_stats(item, "s") == (A + 84, 0)
    clock.advance(6_000)  # floor(5 × 36/60) + 4 = 7: still no room
    assert not sw.test(item, "s")
    clock.advance(12_000)  # floor(5 × 24/60) + 4 = 6: one
    assert sw.test(item, "s") and not sw.test(item, "s", cost=2)
    assert sw.get_window_stats(item, "s").remaining == 1
    clock.advance(84_000)  # both windows gone
    assert storage.get_sliding_window(item.key_for("s"), 60) == (0, 0.0, 0, 0.0)
    sw.clear(item, "s")
    assert storage.get(item.key_for("s")) == 0


def test_moving_window_equals_limits_redis_storage(
    monkeypatch: pytest.MonkeyPatch, backend: tuple[str, Server], plain: PlainServer
) -> None:
    """limits' own RedisStorage (its Lua, on the plain server) and this storage, one fake clock,
    the same hits: every answer equal."""
    name, server = backend
    clock = Clock(monkeypatch, [server])
    ours = storage_on(server, clock, name)
    theirs = RedisStorage(f"redis://127.0.0.1:{plain.port}", key_prefix="theirs")
    theirs.reset()
    item = RateLimitItemPerMinute(4)
    a, b = MovingWindowRateLimiter(ours), MovingWindowRateLimiter(theirs)
    steps = [(0, 1), (1_000, 2), (5_000, 2), (20_000, 1), (35_001, 1), (1_000, 3), (10_000, 1), (61_000, 4),
             (0, 1), (59_999, 1), (2, 1), (30_000, 5), (30_001, 2)]
    for advance, cost in steps:
        clock.advance(advance)
        assert a.test(item, "k", cost=cost) == b.test(item, "k", cost=cost)
        assert a.hit(item, "k", cost=cost) == b.hit(item, "k", cost=cost)
        assert a.get_window_stats(item, "k") == b.get_window_stats(item, "k")
    # The one difference (docs/limits.md): units taken exactly 60 s ago. limits' window is
    # [now - 60 s, now] and still holds them; the sliding log's is (now - 60 s, now].
    clock.advance(59_999)  # the last two units, taken at 253.003 s, are 59.999 s old
    ours_stats, theirs_stats = a.get_window_stats(item, "k"), b.get_window_stats(item, "k")
    assert ours_stats == theirs_stats and theirs_stats.remaining == 2
    assert round(theirs_stats.reset_time, 6) == round(A + 313.003, 6)
    clock.advance(1)
    ours_stats, theirs_stats = a.get_window_stats(item, "k"), b.get_window_stats(item, "k")
    assert (round(ours_stats.reset_time, 6), ours_stats.remaining) == (round(A + 373.003, 6), 4)
    assert (round(theirs_stats.reset_time, 6), theirs_stats.remaining) == (round(A + 313.003, 6), 2)
    theirs.reset()
    ours.reset()


# --- one command per hit --------------------------------------------------------------------


def test_one_command_per_hit(setup: tuple[RatelimitStorage, Clock], backend: tuple[str, Server]) -> None:
    storage, _ = setup
    name, server = backend
    storage.limiter.ready()
    item = parse("3/minute")
    for strategy, command in (
        (FixedWindowRateLimiter, "RL.COUNTER"), (MovingWindowRateLimiter, "RL.SLIDINGLOG"),
        (SlidingWindowCounterRateLimiter, "RL.SLIDINGWINDOW"),
    ):
        counted = command if name == "module" else "EVALSHA"
        before = server.calls(counted)
        limiter = strategy(storage)
        for _ in range(4):
            limiter.hit(item, f"one-{command}")
        assert server.calls(counted) - before == 4


# --- the rest of limits' Storage ------------------------------------------------------------


def test_get_clear_reset_check(setup: tuple[RatelimitStorage, Clock], backend: tuple[str, Server]) -> None:
    storage, _ = setup
    _, server = backend
    assert storage.check()
    assert storage.get("nothing") == 0
    assert storage.get_expiry("nothing") == A
    for i in range(5):
        storage.incr(f"k{i}", 60)
    storage.clear("k0")
    assert storage.get("k0") == 0 and storage.get("k1") == 1
    with server.client() as c:
        c.set("rl:limitsX:other", 1)  # not under the prefix "rl:limits:"
        c.set("someone-else", 1)
        assert storage.reset() == 4
        assert c.exists("rl:limitsX:other", "someone-else") == 2
        c.delete("rl:limitsX:other", "someone-else")


def test_key_prefix_and_wrapped_errors(setup: tuple[RatelimitStorage, Clock], backend: tuple[str, Server]) -> None:
    from limits.errors import StorageError

    storage, clock = setup
    name, server = backend
    other = storage_from_string(
        f"ratelimit+redis://127.0.0.1:{server.port}?backend={name}&key_prefix=app2", wrap_exceptions=True
    )
    assert isinstance(other, RatelimitStorage)
    other.limiter._script_now = clock.us
    other.incr("x", 60)
    with server.client() as c:
        assert c.exists("app2:x") == 1
        c.set("app2:plain", "x")
    with pytest.raises(StorageError, match="value is not an integer or out of range"):
        other.incr("plain", 60)  # a string that is not a counter
    assert other.reset() == 2
    other.client.close()


@pytest.mark.parametrize(
    "uri, said",
    [
        ("ratelimit+memcached://127.0.0.1:1", "unknown storage scheme"),
        ("ratelimit+redis://127.0.0.1:1?backend=lua", "invalid backend 'lua'"),
        ("ratelimit+redis+sentinel://127.0.0.1:1", "a Sentinel URI names its service"),
        ("ratelimit+redis+sentinel:///main", "no Sentinel named"),
        ("ratelimit+redis+cluster://", "no cluster node named"),
        ("ratelimit+redis+cluster://127.0.0.1:x", "'127.0.0.1:x' is not host:port"),
    ],
)
def test_bad_uris_say_what(uri: str, said: str) -> None:
    from limits.errors import ConfigurationError

    with pytest.raises((ValueError, ConfigurationError), match=said.replace("(", r"\(")):
        storage_from_string(uri)


def test_expiry_must_be_whole_seconds(setup: tuple[RatelimitStorage, Clock]) -> None:
    storage, _ = setup
    with pytest.raises(ValueError, match="invalid expiry 0: expected whole seconds, at least 1"):
        storage.incr("k", 0)


# --- asyncio --------------------------------------------------------------------------------


async def test_async_storage_answers_as_the_sync_one(
    monkeypatch: pytest.MonkeyPatch, backend: tuple[str, Server]
) -> None:
    name, server = backend
    clock = Clock(monkeypatch, [server])
    storage = storage_from_string(f"async+ratelimit+redis://127.0.0.1:{server.port}?backend={name}")
    assert isinstance(storage, AsyncRatelimitStorage)
    storage.limiter._script_now = clock.us
    await storage.reset()
    item = parse("2/minute")
    fw = aio_strategies.FixedWindowRateLimiter(storage)
    mw = aio_strategies.MovingWindowRateLimiter(storage)
    sw = aio_strategies.SlidingWindowCounterRateLimiter(storage)
    since = time.monotonic()
    assert [await fw.hit(item, "f") for _ in range(3)] == [True, True, False]
    reset, remaining = await fw.get_window_stats(item, "f")
    assert remaining == 0 and reset - A in whole_seconds_left(60_000, since)
    clock.advance(1_000)
    assert [await mw.hit(item, "m") for _ in range(3)] == [True, True, False]
    assert await mw.get_window_stats(item, "m") == (A + 61, 0)
    assert [await sw.hit(item, "s") for _ in range(3)] == [True, True, False]
    assert await storage.get_sliding_window(item.key_for("s"), 60) == (0, 59.0, 2, 119.0)
    clock.advance(89_000)  # 30 s into the next minute: floor(2 × 0.5) = 1
    assert await sw.get_window_stats(item, "s") == (A + 90 + 30 % 30, 1)
    assert await sw.hit(item, "s") and not await sw.hit(item, "s")
    assert await storage.get(item.key_for("f")) == 3 and await storage.check()  # its window: the real TTL
    assert await storage.reset() == 3
    await storage.client.aclose()


# --- Cluster and Sentinel -------------------------------------------------------------------


def test_cluster(monkeypatch: pytest.MonkeyPatch, cluster: list[Server]) -> None:
    clock = Clock(monkeypatch, cluster)
    storage = storage_from_string(f"ratelimit+redis+cluster://127.0.0.1:{cluster[0].port},127.0.0.1:{cluster[1].port}")
    assert isinstance(storage, RatelimitStorage)
    storage.reset()
    item = parse("2/minute")
    limiters = [FixedWindowRateLimiter(storage), MovingWindowRateLimiter(storage),
                SlidingWindowCounterRateLimiter(storage)]
    for i, limiter in enumerate(limiters):
        for who in range(10):  # keys on every node
            assert [limiter.hit(item, f"{i}-{who}") for _ in range(3)] == [True, True, False]
            assert limiter.get_window_stats(item, f"{i}-{who}")[1] == 0
    assert storage.reset() == 30
    clock.advance(0)
    storage.client.close()


def test_cluster_on_the_script_backend(monkeypatch: pytest.MonkeyPatch, plain_cluster: list[Server]) -> None:
    clock = Clock(monkeypatch, plain_cluster)
    storage = storage_from_string(f"ratelimit+redis+cluster://127.0.0.1:{plain_cluster[0].port}?backend=script")
    assert isinstance(storage, RatelimitStorage)
    storage.limiter._script_now = clock.us
    storage.reset()
    item = parse("2/minute")
    limiters = [FixedWindowRateLimiter(storage), MovingWindowRateLimiter(storage),
                SlidingWindowCounterRateLimiter(storage)]
    for i, limiter in enumerate(limiters):
        for who in range(10):
            since = time.monotonic()
            assert [limiter.hit(item, f"{i}-{who}") for _ in range(3)] == [True, True, False]
            reset, remaining = limiter.get_window_stats(item, f"{i}-{who}")
            assert remaining == 0
            assert reset - A in whole_seconds_left(60_000, since) if i == 0 else reset == (A + 60, A)[i - 1]
    assert storage.reset() == 30
    storage.client.close()


async def test_async_cluster(monkeypatch: pytest.MonkeyPatch, cluster: list[Server]) -> None:
    Clock(monkeypatch, cluster)
    storage = storage_from_string(f"async+ratelimit+redis+cluster://127.0.0.1:{cluster[2].port}")
    assert isinstance(storage, AsyncRatelimitStorage)
    await storage.reset()
    item = parse("2/minute")
    mw = aio_strategies.MovingWindowRateLimiter(storage)
    for who in range(10):
        assert [await mw.hit(item, str(who)) for _ in range(3)] == [True, True, False]
        assert await mw.get_window_stats(item, str(who)) == (A + 60, 0)
    assert await storage.reset() == 10
    await storage.client.aclose()


def test_sentinel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from test_failover import Sentinel

    primary = Server(tmp_path / "primary")
    sentinel = None
    try:
        sentinel = Sentinel(tmp_path / "sentinel", primary.port)
        clock = Clock(monkeypatch, [primary])
        for uri, options in (
            (f"ratelimit+redis+sentinel://127.0.0.1:{sentinel.port}/main", {}),
            (f"ratelimit+redis+sentinel://127.0.0.1:{sentinel.port}", {"service_name": "main"}),
        ):
            storage = storage_from_string(uri, **options)
            assert isinstance(storage, RatelimitStorage)
            item = parse("2/minute")
            fw = FixedWindowRateLimiter(storage)
            since = time.monotonic()
            assert [fw.hit(item, "s") for _ in range(3)] == [True, True, False]
            reset, remaining = fw.get_window_stats(item, "s")
            assert remaining == 0 and reset - A in whole_seconds_left(60_000, since)
            assert storage.reset() == 1
            storage.client.close()

        async def run() -> None:
            storage = storage_from_string(f"async+ratelimit+redis+sentinel://127.0.0.1:{sentinel.port}/main")
            assert isinstance(storage, AsyncRatelimitStorage)
            sw = aio_strategies.SlidingWindowCounterRateLimiter(storage)
            item = parse("2/minute")
            assert [await sw.hit(item, "s") for _ in range(3)] == [True, True, False]
            assert await storage.reset() == 1
            await storage.client.aclose()

        asyncio.run(run())
        clock.advance(0)
    finally:
        if sentinel is not None:
            sentinel.stop()
        primary.stop()


def test_redis_errors_are_raised() -> None:
    storage = storage_from_string("ratelimit+redis://127.0.0.1:1?backend=module", socket_connect_timeout=1)
    assert isinstance(storage, RatelimitStorage)
    assert not storage.check()
    with pytest.raises(redis.ConnectionError):
        storage.incr("k", 60)


def test_the_package_needs_no_limits() -> None:
    """``limits`` is an extra: the package imports without it, and only the storage's module
    asks for it, by name."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['limits'] = None\n"
        "import ratelimit_redis_module\n"
        "try:\n"
        "    import ratelimit_redis_module.limits_storage\n"
        "except ImportError as error:\n"
        "    print('ImportError', error.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ImportError", "limits.storage"]
