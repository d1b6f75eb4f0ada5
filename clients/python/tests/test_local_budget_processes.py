"""Local budgets (issue 27): several real processes on one key, for the algorithms the first
pass did not run that way (token bucket, leaky bucket, sliding window, sliding log, warm-up),
against a real server with the module, its debug clock held still.

While the processes hold units, the module counts as taken exactly what they admitted plus what
they report held (at most processes x k); once every process closed its limiter (RL.REFUND of
what it held), exactly what they admitted.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import redis

from conftest import T0_MS, Server
from ratelimit_redis_module import LeakyBucket, RateLimiter, SlidingLog, SlidingWindow, TokenBucket, Warmup

PROCS = 4
K = 16


def module_taken(server: Server, key: str) -> int:
    """The units the module counts as taken on ``key``: what RL.REFUND would give back."""
    with server.client() as c:
        return int(c.execute_command("RL.REFUND", key, 10**12, "DRYRUN"))


def inspect(server: Server, key: str) -> dict[str, Any]:
    with server.client(decode_responses=True, protocol=2) as c:
        flat = c.execute_command("RL.INSPECT", key)
    return dict(zip(flat[::2], flat[1::2]))


def worker(port: int, limit: Any, tries: int, out: Any, close: Any) -> None:
    rl = RateLimiter(redis.Redis(port=port))
    admitted = sum(rl.check(limit, "shared").allowed for _ in range(tries))
    out.put(("holding", admitted, rl.stats.held))
    close.wait(60)
    given = rl.close()
    out.put(("closed", given, rl.stats.held))


# The limit, the key's limit in units, and the tries per process: 4 x 70 drains 200 with the
# clock still; a warm-up admits one request (of any cost) until its schedule is paid, so one
# refill of 16 is granted, to one process, which spends 10 of it.
LIMITS = {
    "tokenbucket": (TokenBucket(200, 1, "1h", local_budget=K, hold="1h"), 200, 70),
    "leakybucket": (LeakyBucket(200, 1, "1h", local_budget=K, hold="1h"), 200, 70),
    "slidingwindow": (SlidingWindow(200, "1h", local_budget=K, hold="1h"), 200, 70),
    "slidinglog": (SlidingLog(200, "1h", local_budget=K, hold="1h"), 200, 70),
    "warmup": (Warmup(10, "1s", "10s", local_budget=K, hold="1h"), 16, 10),
}


def warm(server: Server) -> None:
    """A warm key (no stored permits) whose schedule is paid now: each unit then costs one
    stable interval, so the module's count (RL.REFUND's) is the units admitted. A cold key
    holds 100 permits here; taking them all owes 15 s."""
    with server.client() as c:
        c.execute_command("RL.WARMUP", "shared", 10, "1s", "10s", "COST", 100)
    state = inspect(server, "shared")
    server.advance(int(state["next_free_us"]) // 1000 - T0_MS)
    state = inspect(server, "shared")
    assert (int(state["stored_micropermits"]), int(state["next_free_us"])) == (0, (T0_MS + 15_000) * 1000)
    assert module_taken(server, "shared") == 0


@pytest.mark.parametrize("kind", list(LIMITS))
def test_processes_hold_and_give_back_exactly_what_the_module_counts(server: Server, kind: str) -> None:
    limit, most, tries = LIMITS[kind]
    if kind == "warmup":
        warm(server)
    ctx = multiprocessing.get_context("fork")
    out, close = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=worker, args=(server.port, limit, tries, out, close)) for _ in range(PROCS)]
    for p in procs:
        p.start()
    try:
        holding = [out.get(timeout=30) for _ in procs]
        assert all(r[0] == "holding" for r in holding)
        admitted = sum(r[1] for r in holding)
        held = sum(r[2] for r in holding)
        # Every process saw the key drained (4 x tries > the limit, the clock still): the
        # module counts the whole limit, of which the processes admitted all but what they hold.
        taken = module_taken(server, "shared")
        assert taken == most
        assert taken - admitted == held <= PROCS * K
        if kind == "warmup":
            assert (admitted, held) == (10, 6)
        close.set()
        closed = [out.get(timeout=30) for _ in procs]
        assert all(r[0] == "closed" and r[2] == 0 for r in closed)
        assert sum(r[1] for r in closed) == held
        assert module_taken(server, "shared") == admitted
    finally:
        close.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
