"""Local budgets (``local_budget=k``, issue 27) against a real server with the module and the
debug clock: units taken k at a time with ATMOST, served in-process until ``hold / 2`` and given
back with RL.REFUND then (a fixed window's lapse at its end when it comes within ``hold``) and
at shutdown; one refill per key in flight; several real processes on one key
admit exactly what the module counts."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import PATIENT, T0_MS, FakeTime, Server
from ratelimit_redis_module import (
    GCRA,
    AsyncRateLimiter,
    Concurrency,
    FixedWindow,
    Guard,
    LeakyBucket,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    SlidingLog,
    SlidingWindow,
    Stats,
    TokenBucket,
    Warmup,
    hold_ms,
)


def inspect(server: Server, key: str) -> dict[str, Any]:
    """RL.INSPECT as a dict (a policy's rules as a list of dicts)."""
    with server.client(decode_responses=True, protocol=2) as c:
        words = c.execute_command("RL.INSPECT", key)

    def pairs(flat: list[Any]) -> dict[str, Any]:
        out = dict(zip(flat[::2], flat[1::2]))
        if "rules" in out:
            out["rules"] = [pairs(rule) for rule in out["rules"]]
        return out

    return pairs(words)


def taken(state: dict[str, Any]) -> int:
    """Units the key holds as taken: limit - remaining (every rule of a policy: the list)."""
    return int(state["limit"]) - int(state["remaining"])


def test_options_are_checked_and_the_default_hold() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="local_budget"):
            GCRA(5, 1, "1s", local_budget=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give it with local_budget"):
        GCRA(5, 1, "1s", hold="1s")
    with pytest.raises(ValueError, match="invalid hold"):
        FixedWindow(5, "1s", local_budget=2, hold="soon")
    with pytest.raises(ValueError, match="concurrency limit has no local budget"):
        Concurrency(5, "1s", local_budget=2)  # type: ignore[call-arg]
    # A quarter of the period or window, at least 10 ms; a policy's: a quarter of 1 s.
    assert hold_ms(GCRA(5, 1, "1m", local_budget=2)) == 15_000
    assert hold_ms(TokenBucket(5, 1, "20ms", local_budget=2)) == 10
    assert hold_ms(FixedWindow(5, "2s", local_budget=2)) == 500
    assert hold_ms(Warmup(10, "1s", "10s", local_budget=2)) == 250
    assert hold_ms(Policy("api", local_budget=2)) == 250
    assert hold_ms(GCRA(5, 1, "1m", local_budget=2, hold="3ms")) == 3


def test_a_policy_rule_takes_no_budget(server: Server) -> None:
    with pytest.raises(ValueError, match="no local budget"):
        RateLimiter(server.client()).policy_set("p", GCRA(5, 1, "1s", local_budget=2))


def test_a_round_trip_only_when_the_budget_is_empty(server: Server) -> None:
    rl = RateLimiter(server.client())
    limit = GCRA(100, 1, "1h", local_budget=10)
    decisions = [rl.check(limit, "k") for _ in range(25)]
    assert all(d.allowed for d in decisions)
    assert server.calls("rl.gcra") == 3
    assert [i for i, d in enumerate(decisions) if not d.local] == [0, 10, 20]
    # Held locally + the server's remaining at the last refill.
    assert (decisions[0].remaining, decisions[24].remaining) == (99, 75)
    assert (rl.stats.local_admitted, rl.stats.refills, rl.stats.held) == (22, 3, 5)
    assert taken(inspect(server, "k")) == 30
    # A cost above the budget goes to the server as it is; at_most, dryrun and shadow too.
    assert not rl.check(limit, "k", cost=11).local and server.calls("rl.gcra") == 4
    rl.check(limit, "k", dryrun=True)
    assert server.calls("rl.gcra") == 5
    # At shutdown the units held go back: the module counts what was admitted.
    assert rl.close() == 5
    assert (rl.stats.refunded, rl.stats.held) == (5, 0)
    assert taken(inspect(server, "k")) == 25 + 11


def test_a_drained_key_refuses_and_the_refusal_is_remembered(server: Server) -> None:
    clock = FakeTime(server)
    rl = RateLimiter(server.client(), clock=clock)
    limit = GCRA(5, 1, "1s", local_budget=4)
    allowed = [rl.check(limit, "k").allowed for _ in range(5)]
    assert allowed == [True] * 5 and server.calls("rl.gcra") == 2  # 4, then the 1 left
    refused = rl.check(limit, "k")
    assert (refused.allowed, refused.retry_after_ms, refused.local) == (False, 1000, False)
    again = rl.check(limit, "k")
    assert (again.allowed, again.retry_after_ms, again.local) == (False, 1000, True)
    assert server.calls("rl.gcra") == 3
    clock.advance(1000)
    assert rl.check(limit, "k").allowed and server.calls("rl.gcra") == 4
    rl.close()


def test_units_are_spent_until_half_the_hold_then_given_back(server: Server) -> None:
    clock = FakeTime(server)
    rl = RateLimiter(server.client(), clock=clock)
    limit = GCRA(100, 100, "1h", local_budget=10, hold="100ms")  # one unit per 36 s
    assert not rl.check(limit, "k").local
    assert (rl.stats.held, taken(inspect(server, "k"))) == (9, 10)
    clock.advance(49)  # hold / 2 - 1 ms: still spent locally, nothing due
    assert rl.check(limit, "k").local and rl.stats.refills == 1
    rl.sweep()
    assert (rl.stats.held, rl.stats.refunded) == (8, 0)
    clock.advance(1)  # hold / 2: the 8 left go back (the sweeper thread or this sweep; the
    rl.sweep()  # sweep waits for a sweep under way, so the counts below are final)
    assert (rl.stats.held, rl.stats.refunded, taken(inspect(server, "k"))) == (0, 8, 2)
    assert server.calls("rl.refund") == 1
    rl.close()


def test_at_half_the_hold_the_next_request_refills(server: Server) -> None:
    clock = FakeTime(server)
    rl = RateLimiter(server.client(), clock=clock)
    limit = GCRA(100, 100, "1h", local_budget=10, hold="100ms")
    rl.check(limit, "k")
    clock.advance(49)
    assert rl.check(limit, "k").local
    clock.advance(1)
    d = rl.check(limit, "k")
    assert (d.allowed, d.local, rl.stats.refills) == (True, False, 2)
    rl.sweep()
    # The 8 past hold / 2 went back; the new refill's 10 are held but the one spent.
    assert (rl.stats.refunded, rl.stats.held) == (8, 9)
    assert taken(inspect(server, "k")) == 3 + 9
    # Past their deadline, units are never spent: at the next hold / 2 the 9 go back too.
    clock.advance(50)
    assert not rl.check(limit, "k").local and rl.stats.refills == 3
    rl.sweep()
    assert (rl.stats.refunded, taken(inspect(server, "k"))) == (17, 4 + 9)
    rl.close()
    assert taken(inspect(server, "k")) == 4


async def test_the_async_timer_gives_back_at_half_the_hold(server: Server) -> None:
    clock = FakeTime(server)
    rl = AsyncRateLimiter(redis.asyncio.Redis(port=server.port), clock=clock)
    limit = GCRA(100, 100, "1h", local_budget=10, hold="100ms")
    await rl.check(limit, "k")
    clock.advance(49)
    assert (await rl.check(limit, "k")).local
    await rl.sweep()
    assert (rl.stats.held, rl.stats.refunded) == (8, 0)
    clock.advance(1)
    d = await rl.check(limit, "k")  # refills; the 8 are given back by a task of their own
    assert not d.local and rl.stats.refills == 2
    await rl.sweep()
    assert (rl.stats.refunded, rl.stats.held, taken(inspect(server, "k"))) == (8, 9, 3 + 9)
    await rl.close()
    assert taken(inspect(server, "k")) == 3
    await rl.client.aclose()


def module_taken(server: Server, key: str) -> int:
    """The units the module counts as taken on ``key``, as RL.REFUND would give them back
    (a policy: the most of any rule)."""
    with server.client() as c:
        return int(c.execute_command("RL.REFUND", key, 10**12, "DRYRUN"))


HALF_HOLD = {
    "gcra": GCRA(100, 1, "1h", local_budget=10, hold="1s"),
    "tokenbucket": TokenBucket(100, 1, "1h", local_budget=10, hold="1s"),
    "leakybucket": LeakyBucket(100, 1, "1h", local_budget=10, hold="1s"),
    "fixedwindow": FixedWindow(100, "1h", local_budget=10, hold="1s"),  # ends past the hold
    "slidingwindow": SlidingWindow(100, "1h", local_budget=10, hold="1s"),
    "slidinglog": SlidingLog(100, "1h", local_budget=10, hold="1s"),
    "warmup": Warmup(10, "1h", "10h", local_budget=10, hold="1s"),  # 0.5 s pays off nothing
    "policy": Policy("half", local_budget=10, hold="1s"),
}


@pytest.mark.parametrize("kind", list(HALF_HOLD))
def test_every_limit_spends_until_half_the_hold_then_gives_back(server: Server, kind: str) -> None:
    clock = FakeTime(server)
    rl = RateLimiter(server.client(), clock=clock)
    if kind == "policy":
        rl.policy_set("half", GCRA(100, 1, "1h"), SlidingLog(100, "1h"))
    limit = HALF_HOLD[kind]
    assert rl.check(limit, "k").allowed and rl.stats.held == 9
    before = module_taken(server, "k")
    clock.advance(499)
    assert rl.check(limit, "k").local
    rl.sweep()
    assert (rl.stats.held, rl.stats.refunded, module_taken(server, "k")) == (8, 0, before)
    clock.advance(1)
    rl.sweep()
    assert (rl.stats.held, rl.stats.refunded, rl.stats.expired) == (0, 8, 0)
    assert module_taken(server, "k") == before - 8
    rl.close()


def test_the_sweeper_thread_gives_back_by_itself(server: Server) -> None:
    rl = RateLimiter(server.client())  # the real clock; the server's is frozen
    # Held 1 s, given back at 0.5 s: the refill's reply must come back before then (else its
    # units are due at once and another refill follows), which a loaded machine's 50 ms hold
    # did not leave room for (held 9 after the sweeper gave 9 back).
    limit = GCRA(100, 1, "1h", local_budget=10, hold="1s")
    assert rl.check(limit, "k").allowed
    assert rl.stats.refills == 1
    deadline = time.monotonic() + PATIENT
    while rl.stats.refunded < 9:
        assert time.monotonic() < deadline, "no refund from the sweeper"
        time.sleep(0.01)
    assert (rl.stats.held, taken(inspect(server, "k"))) == (0, 1)
    rl.close()


@pytest.mark.parametrize("hold, lapses", [(600, True), (598, False)])
def test_a_fixed_window_lapses_at_its_end_within_the_hold_else_goes_back_at_half(
    server: Server, hold: int, lapses: bool
) -> None:
    clock = FakeTime(server, ms=T0_MS + 400)  # 600 ms left in the 1 s window
    rl = RateLimiter(server.client(), clock=clock)
    limit = FixedWindow(10, "1s", local_budget=4, hold=f"{hold}ms")
    assert not rl.check(limit, "k").local and rl.stats.held == 3
    if lapses:
        # The window ends within the whole hold (600 <= 600): the units are spent until its
        # end, past hold / 2, and lapse there, nothing given back.
        clock.advance(599)
        assert rl.check(limit, "k").local
        assert taken(inspect(server, "k")) == 4
        clock.advance(1)
        rl.sweep()
        assert (rl.stats.expired, rl.stats.refunded, rl.stats.held) == (2, 0, 0)
        assert server.calls("rl.refund") == 0
    else:
        # It ends past the hold (600 > 598): given back at hold / 2 = 299 ms, 301 ms before
        # the window ends.
        clock.advance(298)
        assert rl.check(limit, "k").local
        clock.advance(1)
        rl.sweep()
        assert (rl.stats.expired, rl.stats.refunded, rl.stats.held) == (0, 2, 0)
        assert taken(inspect(server, "k")) == 2
    rl.close()


async def test_a_lapsed_window_is_not_given_back_at_shutdown(server: Server) -> None:
    clock = FakeTime(server, ms=T0_MS + 400)
    rl = AsyncRateLimiter(redis.asyncio.Redis(port=server.port), clock=clock)
    limit = FixedWindow(10, "1s", local_budget=4, hold="10s")
    await rl.check(limit, "k")
    clock.advance(600)
    # Another instance starts the next window; a refund now would lower its count.
    assert RateLimiter(server.client()).check(FixedWindow(10, "1s"), "k").remaining == 9
    assert await rl.close() == 0
    assert (rl.stats.expired, rl.stats.refunded, server.calls("rl.refund")) == (3, 0, 0)
    assert taken(inspect(server, "k")) == 1
    await rl.client.aclose()


async def test_no_stampede_one_refill_for_concurrent_requests(server: Server) -> None:
    rl = AsyncRateLimiter(redis.asyncio.Redis(port=server.port))
    limit = GCRA(1000, 1, "1h", local_budget=64)
    decisions = await asyncio.gather(*(rl.check(limit, "hot") for _ in range(50)))
    assert all(d.allowed for d in decisions)
    assert server.calls("rl.gcra") == 1
    assert [d.local for d in decisions].count(False) == 1 and not decisions[0].local
    assert rl.stats.held == 14
    # Short after the refill: the next one, still one for them all.
    decisions = await asyncio.gather(*(rl.check(limit, "hot") for _ in range(30)))
    assert all(d.allowed for d in decisions) and server.calls("rl.gcra") == 2
    assert await rl.close() == 64 - 16  # the 14 held first, then 16 of a refill of 64
    assert taken(inspect(server, "hot")) == 80
    await rl.client.aclose()


async def test_no_stampede_on_a_refused_refill(server: Server) -> None:
    rl = AsyncRateLimiter(redis.asyncio.Redis(port=server.port))
    await rl.check(GCRA(1, 1, "1h"), "p")  # drained
    limit = GCRA(1, 1, "1h", local_budget=8)
    decisions = await asyncio.gather(*(rl.check(limit, "p") for _ in range(20)))
    assert not any(d.allowed for d in decisions)
    assert server.calls("rl.gcra") == 2
    await rl.close()
    await rl.client.aclose()


def test_no_stampede_with_threads(server: Server) -> None:
    rl = RateLimiter(server.client())
    limit = GCRA(1000, 1, "1h", local_budget=64)
    start = threading.Barrier(16)
    results: list[bool] = []

    def one() -> None:
        start.wait()
        results.append(rl.check(limit, "hot").allowed)

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 16 and server.calls("rl.gcra") == 1
    rl.close()
    assert taken(inspect(server, "hot")) == 16


def test_the_guard_serves_from_the_budget(server: Server) -> None:
    clock = FakeTime(server)
    stats = Stats()
    guard = Guard(server.client(), GCRA(10, 10, "1s", local_budget=4), stats=stats, clock=clock)
    verdicts = [guard.check("u") for _ in range(12)]
    assert [v.status for v in verdicts] == [200] * 10 + [429] * 2
    assert [v.source for v in verdicts[:5]] == ["redis", "budget", "budget", "budget", "redis"]
    # remaining: held + the server's remaining at the last refill.
    assert dict(verdicts[1].headers)["ratelimit"] == '"default";r=8;t=1'
    assert (stats.round_trips, stats.admitted, stats.local_admitted, stats.refills) == (4, 10, 7, 4)
    assert verdicts[10].headers[-1] == ("retry-after", "1")
    guard.close()


def test_the_middleware_gives_back_at_shutdown(server: Server, serve: Any) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    stats = Stats()
    mw = RateLimitMiddleware(
        app, redis=f"redis://127.0.0.1:{server.port}", limit=GCRA(100, 1, "1h", local_budget=16),
        key=lambda scope: "svc", stats=stats, timeout=PATIENT, setup_timeout=PATIENT,
    )
    http = serve(mw, lifespan="on")
    assert [http.get("/")[0] for _ in range(5)] == [200] * 5
    assert (server.calls("rl.gcra"), stats.local_admitted, stats.held) == (1, 4, 11)
    http.stop()
    assert (stats.refunded, stats.held) == (11, 0)
    assert taken(inspect(server, "rl:http:svc")) == 5


# Several real processes on one key.


def worker(port: int, limit: Any, key: str, tries: int, out: Any, close: bool) -> None:
    rl = RateLimiter(redis.Redis(port=port))
    admitted = sum(rl.check(limit, key).allowed for _ in range(tries))
    held = rl.stats.held
    if close:
        rl.close()
    out.put((admitted, held, rl.stats.refills))


LIMITS = {
    "gcra": (GCRA(200, 1, "1h", local_budget=16), "RL.GCRA"),
    "fixedwindow": (FixedWindow(200, "1h", local_budget=16), "RL.FIXEDWINDOW"),
    "policy": (Policy("lb", local_budget=16), "RL.LIMIT"),
}


@pytest.mark.parametrize("kind", list(LIMITS))
def test_processes_admit_exactly_what_the_module_counts(server: Server, kind: str) -> None:
    limit, command = LIMITS[kind]
    if kind == "policy":
        RateLimiter(server.client()).policy_set("lb", GCRA(300, 1, "1h"), FixedWindow(200, "1h"))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(server.port, limit, "shared", 120, out, True)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    admitted = sum(r[0] for r in results)
    refills = sum(r[2] for r in results)
    state = inspect(server, "shared")
    # Never more than the limit; after every process gave back what it held, the module's
    # count is exactly what the processes admitted.
    assert 200 - 4 * 16 <= admitted <= 200
    if kind == "policy":
        assert [taken(rule) for rule in state["rules"]] == [admitted, admitted]
    else:
        assert taken(state) == admitted
    assert server.calls(command) == refills
    if kind != "policy":
        # About one round trip per k admissions, plus a refused refill or two per process at
        # the end (then remembered; a policy's refusal is not, as the denial memory does not).
        assert refills <= admitted // 16 + 4 + 4 * 2


def holder(port: int, limit: Any, ready: Any) -> None:
    rl = RateLimiter(redis.Redis(port=port))
    rl.check(limit, "shared")
    ready.put(rl.stats.held)
    time.sleep(60)


def test_a_killed_process_loses_its_units_until_the_schedule_frees_them(server: Server) -> None:
    # GCRA: burst 20, one unit a second. A process takes 16, spends 1 and is killed holding 15.
    limit = GCRA(20, 1, "1s", local_budget=16, hold="1h")
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Queue()
    proc = ctx.Process(target=holder, args=(server.port, limit, ready))
    proc.start()
    assert ready.get(timeout=30) == 15
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert taken(inspect(server, "shared")) == 16
    rl = RateLimiter(server.client())
    plain = GCRA(20, 1, "1s")
    assert sum(rl.check(plain, "shared").allowed for _ in range(10)) == 4
    # The lost units come back as the GCRA schedule passes: one per emission interval
    # (period / rate), all 15 after 15 s, as if the process had spent them.
    server.advance(15_000)
    assert sum(rl.check(plain, "shared").allowed for _ in range(30)) == 15


def test_a_killed_process_loses_a_fixed_windows_units_until_the_window_ends(server: Server) -> None:
    limit = FixedWindow(20, "1m", local_budget=16, hold="1h")
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Queue()
    proc = ctx.Process(target=holder, args=(server.port, limit, ready))
    proc.start()
    assert ready.get(timeout=30) == 15
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    rl = RateLimiter(server.client())
    plain = FixedWindow(20, "1m")
    assert sum(rl.check(plain, "shared").allowed for _ in range(10)) == 4
    left = int(inspect(server, "shared")["reset_after_ms"])
    server.advance(left)
    assert sum(rl.check(plain, "shared").allowed for _ in range(30)) == 20
