"""Concurrency leases through the package on the script backend (issue 28; docs/managed.md): ``acquire``,
``release`` and a :class:`Concurrency` limit's ``check`` on a server without the module (backend
``auto`` picks the scripts) answer as the same calls on a server with the module, at the same
instants (the module's debug clock, and the scripts' test-only clock through the limiter's
private ``_script_now``); the guard and the ASGI middleware hold a lease per request in flight
there; adaptive limits still need the module (ModuleRequired, before anything is sent).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, T0_MS, PlainServer, Server
from ratelimit_redis_module import (
    AsyncRateLimiter,
    Concurrency,
    Guard,
    ModuleRequired,
    RateLimiter,
    RateLimitMiddleware,
)


# (what, argument): acquire(limit, lease, options), release(token index or name, options),
# check(options) of a Concurrency limit, or ms for both clocks to move.
STEPS: list[tuple[str, Any]] = [
    ("acquire", (2, "10s", {})),
    ("acquire", (2, "10s", {"token": "worker-7"})),
    ("acquire", (2, "10s", {})),  # refused: two held
    ("acquire", (2, "10s", {"shadow": True})),  # answered allowed, no lease
    ("acquire", (3, "10s", {"dryrun": True})),
    ("advance", 4_000),
    ("acquire", (2, "10s", {"token": "worker-7"})),  # renewed: no second slot
    ("release", ("worker-7", {"rtt": 0.25})),
    ("release", ("worker-7", {"dropped": True})),  # no longer held: False
    ("release", (0, {})),  # the first generated token
    ("release", ("nobody", {})),
    ("check", {}),
    ("check", {"dryrun": True}),
    ("check", {"shadow": True}),
    ("acquire", (1, "5s", {})),  # the limit down: more held than it
    ("acquire", (5, "2s", {"token": "w"})),
    ("advance", 10_001),  # every lease but the last ended
    ("acquire", (1, "5s", {})),
    ("release", ("w", {})),
    ("advance", 60_000),
    ("release", (1, {"rtt": 0.001, "dropped": True})),
    ("acquire", (4, "1m", {"token": "x" * 256})),
]


def run(limiter: RateLimiter, key: str, step: tuple[str, Any], tokens: list[str]) -> Any:
    what, arg = step
    try:
        if what == "acquire":
            limit, lease, options = arg
            d = limiter.acquire(key, limit, lease, **options)
        elif what == "check":
            d = limiter.check(Concurrency(2, "10s"), key, **arg)
        else:
            which, options = arg
            token = tokens[which] if isinstance(which, int) and which < len(tokens) else str(which)
            return limiter.release(key, token, **options)
        if d.token is not None and d.token not in tokens:
            tokens.append(d.token)
        return d
    except redis.ResponseError as error:
        return f"error: {error}"


def test_leases_answer_as_the_module(plain: PlainServer, module_server: Server) -> None:
    """Acquisitions (generated tokens and the caller's, renewals, refusals, SHADOW, DRYRUN),
    releases (held, released, unknown, ended, with RTT and DROPPED) and a Concurrency limit's
    check on the scripts equal the module's field by field, tokens included."""
    now_ms = T0_MS
    module_server.freeze(now_ms)
    key = "lease:seq"
    with plain.client() as p, module_server.client() as m:
        p.delete(key)
        m.delete(key)
        scripts = RateLimiter(p)
        scripts._script_now = lambda: now_ms * 1000
        module = RateLimiter(m, backend="module")
        got_tokens: list[str] = []
        want_tokens: list[str] = []
        answers = []
        for step in STEPS:
            if step[0] == "advance":
                now_ms += step[1]
                module_server.advance(step[1])
                continue
            got, want = run(scripts, key, step, got_tokens), run(module, key, step, want_tokens)
            assert got == want, (step, got, want)
            answers.append(got)
            assert p.exists(key) == m.exists(key), step
            if m.exists(key):
                # The TTL is reset_after on both (real time: a few ms apart at most).
                assert abs(p.pttl(key) - m.pttl(key)) <= 250, step
        assert scripts.stats.backend == "script"
        assert p.type(key) == b"zset"
        assert any(getattr(a, "allowed", None) is False for a in answers)
        assert any(getattr(a, "shadow_denied", None) for a in answers)
        assert True in answers and False in answers
        assert got_tokens[0] == "60a24181e4000-0"


def test_async_leases_on_the_scripts(plain: PlainServer) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=plain.port)
        try:
            await client.delete("async:lease")
            limiter = AsyncRateLimiter(client)
            a = await limiter.acquire("async:lease", 2, "10s")
            b = await limiter.acquire("async:lease", 2, "10s", token="mine")
            assert (a.allowed, a.remaining, b.token) == (True, 1, "mine")
            assert limiter.stats.backend == "script"
            c = await limiter.acquire("async:lease", 2, "10s")
            assert (c.allowed, c.token, c.remaining) == (False, None, 0)
            assert 9000 < c.retry_after_ms <= 10000
            await client.script_flush()  # NOSCRIPT: loaded again
            assert await limiter.release("async:lease", b.token, rtt=0.01, dropped=True) is True
            assert await limiter.release("async:lease", "mine") is False
            assert (await limiter.acquire("async:lease", 2, "10s")).allowed
            with pytest.raises(ModuleRequired, match="adaptive concurrency limit"):
                await limiter.acquire("async:lease", 2, "10s", adaptive="vegas")
        finally:
            await client.aclose()

    asyncio.run(main())


def test_adaptive_limits_still_need_the_module(plain: PlainServer) -> None:
    """Refused with ModuleRequired before anything is sent; plain leases are not."""
    with plain.client() as c:
        limiter = RateLimiter(c, backend="script", setup_timeout=60)
        assert limiter.ready()  # its scripts loaded: counted before
        total = sum(int(v["calls"]) for v in c.info("commandstats").values())
        for call in [
            lambda: limiter.acquire("k", 3, "10s", adaptive="aimd", min=1, max=10),
            lambda: limiter.acquire("k", 3, "10s", adaptive="gradient2", shadow=True),
            lambda: limiter.check(Concurrency(20, "10s", adaptive="vegas"), "k"),
        ]:
            with pytest.raises(ModuleRequired, match="adaptive concurrency limit.*needs the ratelimit module"):
                call()
        assert sum(int(v["calls"]) for v in c.info("commandstats").values()) == total + 1
        guard = Guard(c, Concurrency(20, "10s", adaptive="aimd"), backend="script")
        with pytest.raises(ModuleRequired):  # a configuration error, not failed open
            guard.check("someone")
        c.delete("k")
        assert limiter.acquire("k", 3, "10s").allowed


def test_guard_holds_a_lease_per_request_in_flight(plain: PlainServer, module_server: Server) -> None:
    """The sync guard with Concurrency(2) on the scripts: two requests in flight hold the two
    leases, the third is refused (429, Retry-After the first lease's end), and once one is done
    its lease is released; the verdicts equal the module's at the same instants."""
    module_server.freeze(T0_MS)
    with plain.client() as p, module_server.client() as m:
        p.delete("rl:http:ann")
        m.delete("rl:http:ann")
        guards = [Guard(p, Concurrency(2, "30s"), name="jobs"), Guard(m, Concurrency(2, "30s"), name="jobs", backend="module")]
        guards[0].limiter._script_now = lambda: T0_MS * 1000
        seen: list[list[Any]] = []
        for guard, client in zip(guards, (p, m)):
            out: list[Any] = []
            with guard.in_flight("ann") as first, guard.in_flight("ann") as second:
                out += [first.verdict, second.verdict]
                held = guard.limiter.acquire("rl:http:ann", 2, "30s", dryrun=True)
                assert (held.allowed, held.remaining) == (False, 0)
                with guard.in_flight("ann") as third:
                    out.append(third.verdict)
                    assert third.verdict.status == 429 and third.verdict.lease is None
            # Both released when their blocks ended.
            with guard.in_flight("ann") as again:
                out.append(again.verdict)
                assert again.verdict.status == 200
                one = guard.limiter.acquire("rl:http:ann", 2, "30s", dryrun=True)
                assert (one.allowed, one.remaining) == (True, 0)  # one held, one free (taken by a DRYRUN)
            assert client.exists("rl:http:ann") == 0  # the last release removed the key
            seen.append(out)
        got, want = seen
        assert [v.status for v in got] == [200, 200, 429, 200]
        assert [(v.status, v.headers, v.body, v.decision) for v in got] == [
            (v.status, v.headers, v.body, v.decision) for v in want]
        assert got[0].lease == "60a24181e4000-0" == want[0].lease


def test_middleware_refuses_the_request_over_the_limit_until_one_is_done(plain: PlainServer, serve: Any) -> None:
    """The ASGI middleware with Concurrency(1) on a server without the module: a request in
    flight holds the lease, a second concurrent one is refused (429, Retry-After 30), and when
    the first is done its lease is released and the next is admitted."""
    gate = threading.Event()
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> PlainTextResponse:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return PlainTextResponse("hello")

    with plain.client() as c:
        c.delete("rl:http:127.0.0.1")
    app.add_middleware(RateLimitMiddleware, redis=redis.asyncio.Redis(host="127.0.0.1", port=plain.port),
                       limit=Concurrency(1, "30s"), name="inflight", timeout=PATIENT, setup_timeout=PATIENT)
    http = serve(app)
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(http.get("/slow")))
    worker.start()
    try:
        with plain.client() as c:
            deadline = time.monotonic() + 10
            while c.exists("rl:http:127.0.0.1") == 0:  # waiting for the first request to arrive
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert c.type("rl:http:127.0.0.1") == b"zset"
        status, fields, _ = http.get("/slow")
        assert status == 429
        assert ("retry-after", "30") in fields
        assert ("ratelimit", '"inflight";r=0;t=30') in fields
    finally:
        gate.set()
        worker.join(10)
    assert first[0][0] == 200
    with plain.client() as c:
        deadline = time.monotonic() + 10
        while c.exists("rl:http:127.0.0.1"):  # waiting for the release (the last lease: the key goes)
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert http.get("/slow")[0] == 200


def test_leases_on_a_cluster(plain_cluster: list[Server]) -> None:
    """A cluster without the module (auto picks the scripts). One key, declared: each lease call
    goes to its key's node (NOSCRIPT there loads it there), as the admission scripts do."""
    import redis.cluster

    cluster = plain_cluster
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        limiter = RateLimiter(client)
        keys = [f"cluster:lease:{i}" for i in range(12)]
        assert len({client.get_node_from_key(k).port for k in keys}) == 3
        for k in keys:
            client.delete(k)
        tokens = {k: limiter.acquire(k, 1, "1h").token for k in keys}
        for node in cluster:
            with node.client() as c:
                c.script_flush()
        assert not any(limiter.acquire(k, 1, "1h").allowed for k in keys)
        assert all(limiter.release(k, tokens[k]) for k in keys)
        assert not any(client.exists(k) for k in keys)
    finally:
        client.close()
