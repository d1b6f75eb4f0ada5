#!/usr/bin/env python3
"""Local budgets (issue 27), Python package: one hot key, N processes, plain checks against a
local budget of k units (``GCRA(..., local_budget=k)``). Prints a markdown table: admissions per
second, round trips (the module's own count of RL.GCRA and RL.REFUND calls, INFO commandstats)
per admitted request, and the latency each check adds (p50, p99).

Targets (the contract): round trips per admission <= 1/k + 1%; admissions/s >= 10x plain.

    clients/python/.venv/bin/python scripts/bench_local_budget_python.py [--seconds 3]
        [--procs 4] [--k 64] [--url redis://127.0.0.1:6379]

Without --url it starts its own redis-server ($RATELIMIT_SERVER, else redis-server) with the
module ($RATELIMIT_MODULE, else target/release/libratelimit.so) on a free loopback port.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

import redis  # noqa: E402

from ratelimit_redis_module import GCRA, RateLimiter  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    directory = tempfile.mkdtemp(prefix="bench-lb-")
    server = os.environ.get("RATELIMIT_SERVER") or shutil.which("redis-server") or "redis-server"
    module = os.environ.get("RATELIMIT_MODULE") or str(ROOT / "target/release/libratelimit.so")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
         "--appendonly", "no", "--loadmodule", module],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return proc, url, directory
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("redis-server with the module did not start")
            time.sleep(0.05)


def worker(url: str, k: int | None, seconds: float, go: object, out: object) -> None:
    # Never binds: every check is admitted. The default hold (250 ms) has unspent units given
    # back 125 ms after their refill, which a hot loop never reaches: the refund is at close.
    limit = GCRA(10**9, 10**9, "1s", local_budget=k)
    rl = RateLimiter(redis.Redis.from_url(url))
    rl.check(GCRA(10**9, 10**9, "1s"), "warm")  # the connection made before timing
    go.wait()  # type: ignore[attr-defined]
    samples: list[int] = []
    admitted = 0
    end = time.perf_counter() + seconds
    clock = time.perf_counter_ns
    while True:
        t0 = clock()
        if rl.check(limit, "hot").allowed:
            admitted += 1
        samples.append(clock() - t0)
        if t0 > end * 1e9:
            break
    rl.close()
    out.put((admitted, samples))  # type: ignore[attr-defined]


def calls(client: redis.Redis, *commands: str) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands)


def run(url: str, k: int | None, procs: int, seconds: float) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.delete("hot")
    before = calls(client, "rl.gcra", "rl.refund")
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=worker, args=(url, k, seconds, go, out)) for _ in range(procs)]
    for w in workers:
        w.start()
    time.sleep(0.5)
    started = time.perf_counter()
    go.set()
    results = [out.get(timeout=seconds + 60) for _ in workers]
    elapsed = time.perf_counter() - started
    for w in workers:
        w.join(30)
    # The warm-up checks are not counted.
    trips = calls(client, "rl.gcra", "rl.refund") - before - procs
    admitted = sum(r[0] for r in results)
    latencies = sorted(s for r in results for s in r[1])

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1000

    return {
        "admitted": admitted,
        "per_s": admitted / min(elapsed, seconds + 0.05) if elapsed else 0.0,
        "trips_per": trips / admitted if admitted else float("nan"),
        "p50": pct(0.50),
        "p99": pct(0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    proc = directory = None
    url = args.url
    if url is None:
        proc, url, directory = start_server()
    try:
        plain = run(url, None, args.procs, args.seconds)
        local = run(url, args.k, args.procs, args.seconds)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
            shutil.rmtree(directory or "", ignore_errors=True)
    print(f"One hot key, {args.procs} processes, {args.seconds:g} s each mode, sync RateLimiter "
          f"(redis-py {redis.__version__}, Python {sys.version.split()[0]}).\n")
    print("| mode | admitted | admissions/s | round trips per admission | p50 µs/check | p99 µs/check |")
    print("|---|---|---|---|---|---|")
    for name, r in (("plain", plain), (f"local_budget={args.k}", local)):
        print(f"| {name} | {r['admitted']:.0f} | {r['per_s']:,.0f} | {r['trips_per']:.4f} | "
              f"{r['p50']:.1f} | {r['p99']:.1f} |")
    target = 1 / args.k + 0.01
    speedup = local["per_s"] / plain["per_s"] if plain["per_s"] else float("nan")
    print(f"\nspeed-up {speedup:.1f}x (target >= 10x); round trips per admission "
          f"{local['trips_per']:.4f} (target <= 1/k + 1% = {target:.4f}).")


if __name__ == "__main__":
    main()
