"""``RL.COUNTER`` through the package (``RateLimiter.counter``, its asyncio twin) on the module and
on the script backend (clients/lua/counter.lua), and the script held to the module: the same
calls on both, reply for reply (docs/python.md, "A plain counter").

The counter's window is the key's TTL on the server's own clock (the module's debug clock does
not move it), so a PTTL is asserted between bounds measured around the calls: at most the
window, and at least the window less the real time elapsed since the call that set it.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import PlainServer, Server
from ratelimit_redis_module import AsyncRateLimiter, Count, RateLimiter, parse_count
from ratelimit_redis_module.scripts import script_sha, script_source

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "value is not an integer or out of range"  # redis-py drops "ERR "


@pytest.fixture(params=["module", "script"])
def limiter(request: pytest.FixtureRequest, module_server: Server, plain: PlainServer) -> Any:
    server = module_server if request.param == "module" else plain
    client = server.client()
    client.flushall()
    rl = RateLimiter(client, backend=request.param)
    yield rl
    rl.close()
    client.close()


def elapsed_ms(since: float) -> int:
    """Whole ms of real time since ``since`` (time.monotonic()), rounded up."""
    return math.ceil((time.monotonic() - since) * 1000)


def left(ttl_ms: int, window_ms: int, since: float) -> bool:
    """A PTTL read now of a key given ``window_ms`` after ``since``: within the real time since."""
    return window_ms - elapsed_ms(since) - 1 <= ttl_ms <= window_ms


def test_counts_as_incrby_and_pexpire(limiter: RateLimiter) -> None:
    c = limiter.client
    since = time.monotonic()
    assert limiter.counter("rl:c", "10s") == Count(1, 10_000)  # a fresh key: the window exactly
    got = limiter.counter("rl:c", "10s", 4)
    assert got.count == 5 and left(got.ttl_ms, 10_000, since)  # the TTL kept, not set again
    assert c.get("rl:c") == b"5"  # a plain integer string
    assert c.type("rl:c") == b"string"
    read = limiter.counter("rl:c", 10_000, 0)  # a read: no write
    assert read.count == 5 and left(read.ttl_ms, 10_000, since)
    given = limiter.counter("rl:c", "10s", -7)  # given back, below zero as INCRBY goes
    assert given.count == -2 and left(given.ttl_ms, 10_000, since)
    assert c.get("rl:c") == b"-2"
    assert left(c.pttl("rl:c"), 10_000, since)  # the TTL read first, then the time since


def test_no_key(limiter: RateLimiter) -> None:
    c = limiter.client
    assert limiter.counter("rl:none", "1m", 0) == Count(0, -2)
    assert limiter.counter("rl:none", "1m", 3, xx=True) == Count(0, -2)
    assert limiter.counter("rl:none", "1m", -1, xx=True) == Count(0, -2)
    assert c.exists("rl:none") == 0  # neither wrote
    assert limiter.counter("rl:none", "1m", -1) == Count(-1, 60_000)  # without XX: created
    since = time.monotonic()
    assert limiter.counter("rl:x", "1h", 2) == Count(2, 3_600_000)
    got = limiter.counter("rl:x", "1h", 1, xx=True)  # XX on a key: as without
    assert got.count == 3 and left(got.ttl_ms, 3_600_000, since)


def test_a_key_without_a_ttl_gets_the_window(limiter: RateLimiter) -> None:
    c = limiter.client
    c.set("rl:p", 7)
    assert limiter.counter("rl:p", "1m", 0) == Count(7, -1)  # a read leaves it without
    assert c.pttl("rl:p") == -1
    assert limiter.counter("rl:p", "1m") == Count(8, 60_000)  # a write gives it the window
    since = time.monotonic()
    assert left(c.pttl("rl:p"), 60_000, since - 0.001)


def test_errors_change_nothing(limiter: RateLimiter) -> None:
    c = limiter.client
    c.set("rl:bad", "x7")
    c.hset("rl:h", "a", "1")
    for key, said in [("rl:bad", NOT_INTEGER), ("rl:h", WRONGTYPE)]:
        before = c.dump(key)
        for by in (1, 0, -1):
            with pytest.raises(redis.ResponseError) as refused:
                limiter.counter(key, "1m", by)
            assert str(refused.value) == said
        assert c.dump(key) == before and c.pttl(key) == -1
    with pytest.raises(redis.ResponseError, match="invalid window"):
        limiter.counter("rl:w", "0s")
    for by in (10**12 + 1, -(10**12) - 1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="invalid by"):
            limiter.counter("rl:w", "1m", by)  # type: ignore[arg-type]
    assert c.exists("rl:w") == 0


def test_the_widest_by(limiter: RateLimiter) -> None:
    assert limiter.counter("rl:wide", "1m", 10**12).count == 10**12
    assert limiter.counter("rl:wide", "1m", -(10**12)).count == 0


def test_the_scripts_count_below_10_15(plain: PlainServer) -> None:
    """The one range where the script differs (clients/lua/README.md, Ranges): a key of 10^15 or
    more is refused there, nothing written, where the module counts on to 2^63 - 1."""
    with plain.client() as c:
        rl = RateLimiter(c, backend="script")
        c.set("rl:big", 10**15 - 2)
        assert rl.counter("rl:big", "1m", 1).count == 10**15 - 1
        assert rl.counter("rl:big", "1m", 1).count == 10**15
        for by in (0, -1, 1):
            with pytest.raises(redis.ResponseError, match=r"^a count beyond 10\^15 needs the ratelimit module"):
                rl.counter("rl:big", "1m", by)
        assert c.get("rl:big") == b"1000000000000000"
        c.set("rl:big", "-999999999999999")
        assert rl.counter("rl:big", "1m", -1) == Count(-(10**15), 60_000)
        c.set("rl:big", "9223372036854775808")  # past a 64-bit integer: INCRBY's error, as the module's
        with pytest.raises(redis.ResponseError, match=f"^{NOT_INTEGER}$"):
            rl.counter("rl:big", "1m", 0)
        rl.close()


def test_the_reply_is_read_strictly() -> None:
    assert parse_count([3, 1000]) == Count(3, 1000)
    assert parse_count([b"3", b"-2"]) == Count(3, -2)
    for bad in ([3], [3, 1, 2], {"count": 3}, [3, -3], ["x", 1], None):
        with pytest.raises(ValueError, match="^unexpected (RL.COUNTER )?reply"):
            parse_count(bad)


@pytest.mark.parametrize("backend", ["module", "script"])
def test_the_asyncio_twin(backend: str, module_server: Server, plain: PlainServer) -> None:
    server = module_server if backend == "module" else plain

    async def run() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await client.delete("rl:a")
        rl = AsyncRateLimiter(client, backend=backend)
        try:
            assert await rl.counter("rl:a", "5s") == Count(1, 5_000)
            assert (await rl.counter("rl:a", "5s", 2)).count == 3
            assert (await rl.counter("rl:a", "5s", 0)).count == 3
            assert await rl.counter("rl:none", "5s", 1, xx=True) == Count(0, -2)
            assert await client.get("rl:a") == b"3"
        finally:
            await rl.close()
            await client.aclose()

    asyncio.run(run())


# --- the script against the module ----------------------------------------------------------

SEED = 41
STEPS = 400
# Windows no step outlives: a key expiring in real time between two steps could be gone on one
# backend and not yet on the other (their TTLs were set a fraction of a ms apart).
WINDOWS = ["1m", "90s", "10m", "1h", "2d", "600000", "3600000ms"]


def steps(rng: random.Random) -> list[list[str]]:
    """Calls of RL.COUNTER's words after the key (and now and then a change of the key
    itself): BY of every sign and 0, XX, the options in any order and case, bad arguments."""
    out: list[list[str]] = []
    for _ in range(STEPS):
        roll = rng.random()
        if roll < 0.05:
            out.append(["DEL"])
        elif roll < 0.09:
            out.append(["SET", str(rng.choice([0, 5, -3, 10**14, -(10**14) + 1]))])  # below the scripts' 10^15
        elif roll < 0.11:
            out.append(["SET", rng.choice(["x", "05", "-0", " 1", "1.5", "+1", "99999999999999999999", ""])])
        elif roll < 0.16:
            out.append(["CALL", *rng.choice([
                [], ["0"], ["1m", "BY"], ["1m", "BY", "1e3"], ["1m", "BY", str(10**12 + 1)], ["1m", "XX", "XX"],
                ["1m", "BY", "1", "BY", "2"], ["1m", "FOO"], ["1m", "BY", "+1"], ["1m", "BY", "05"], ["11y"],
                ["1m", "xx", "by", "1", "x"], ["1m", "BY", "-0"], ["3651d"], ["1m", "by", "1", "xx", "xx"],
            ])])
        else:
            options: list[list[str]] = []
            by = rng.choice([1, 1, 2, 0, 0, -1, -2, 5, 10**12, -(10**12), rng.randint(-1000, 1000)])
            if by != 1 or rng.random() < 0.2:
                options.append([rng.choice(["BY", "by", "By"]), str(by)])
            if rng.random() < 0.3:
                options.append([rng.choice(["XX", "xx"])])
            rng.shuffle(options)
            out.append(["CALL", rng.choice(WINDOWS), *[w for o in options for w in o]])
    return out


def window_ms(word: str) -> int:
    for unit, scale in (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)):
        if word.endswith(unit) and word[: -len(unit)].isdigit():
            return int(word[: -len(unit)]) * scale
    return int(word)


def test_the_script_gives_the_modules_replies(module_server: Server) -> None:
    """A seeded sequence, each step on the module's key ``m`` and the script's key ``s`` in one
    MULTI/EXEC, with both keys' PTTLs read first: replies (or error texts) equal; where the call
    sets the TTL (a fresh key, or one without a TTL) both reply the window exactly; elsewhere the
    two PTTLs differ by at most the real time between the calls that set the two TTLs plus the
    time between the two calls now (each at most its transaction's round trip, measured); the
    values (GET) and whether each key has a TTL equal after every step."""
    c = module_server.client()
    sha = c.script_load(script_source("counter"))
    assert sha == script_sha("counter")
    c.delete("m", "s")
    set_apart = 0  # ms: at most how far apart in real time the two keys' TTLs were set
    seen = dict.fromkeys(["set the window", "kept", "read", "no key", "no ttl read", "error"], 0)
    for i, (kind, *words) in enumerate(steps(random.Random(SEED))):
        pipe = c.pipeline(transaction=True)
        if kind == "DEL":
            pipe.delete("m", "s")
        elif kind == "SET":
            pipe.set("m", words[0])
            pipe.set("s", words[0])
        else:
            pipe.pttl("m")
            pipe.pttl("s")
            pipe.execute_command("RL.COUNTER", "m", *words)
            pipe.evalsha(sha, 1, "s", *words)
        before = time.monotonic()
        replies = pipe.execute(raise_on_error=False)
        took = elapsed_ms(before)
        after = [c.get("m"), c.get("s"), c.pttl("m") == -1, c.pttl("s") == -1]
        assert after[0] == after[1] and after[2] == after[3], (i, kind, words, after)
        if kind != "CALL":
            continue
        (had_m, had_s), (m, s) = replies[:2], replies[2:]
        assert (had_m < 0) == (had_s < 0) and (had_m == -2) == (had_s == -2), (i, words, had_m, had_s)
        if isinstance(m, Exception) or isinstance(s, Exception):
            assert type(m) is type(s) and str(m) == str(s), (i, words, m, s)
            seen["error"] += 1
            continue
        assert m[0] == s[0], (i, words, m, s)
        if m[1] < 0 or s[1] < 0:
            assert m[1] == s[1], (i, words, m, s)
            seen["no key" if m[1] == -2 else "no ttl read"] += 1
        elif had_m < 0:
            assert m[1] == s[1] == window_ms(words[0]), (i, words, m, s)
            set_apart = took
            seen["set the window"] += 1
        else:
            assert abs(m[1] - s[1]) <= set_apart + took + 1, (i, words, m, s, set_apart, took)
            seen["read" if m[0] == int(after[0] or 0) and "0" in words else "kept"] += 1
    assert all(n > 0 for n in seen.values()), seen
    c.close()
