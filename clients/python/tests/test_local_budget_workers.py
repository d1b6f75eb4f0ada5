"""Local budgets (issue 27) in real server workers: ``uvicorn local_budget_app:app --workers 4``
as a subprocess on its own free loopback port, the package's middleware with ``local_budget=16``
on one key all the workers share, for GCRA, a fixed window and a policy, against a real server
with the module (its debug clock held still).

Many concurrent connections (so that several workers serve); the 200s and 429s are counted.
SIGTERM stops uvicorn gracefully: each worker's lifespan shutdown gives back what it holds, and
the module then counts exactly the 200s. A worker killed with SIGKILL while it holds units
loses exactly those: the module counts the 200s plus what that worker reported it held.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, free_port, package_test
from ratelimit_redis_module import GCRA, FixedWindow, RateLimiter

APP_DIR = Path(__file__).resolve().parent
WORKERS = 4
KINDS = ["gcra", "fixedwindow", "policy"]


class Uvicorn:
    """``uvicorn local_budget_app:app --workers 4`` on a free loopback port, its log read."""

    def __init__(self, redis_port: int, kind: str, hold: str | None = None) -> None:
        env = {
            **os.environ, "RL_BUDGET_REDIS": f"redis://127.0.0.1:{redis_port}", "RL_BUDGET_KIND": kind,
            "RL_BUDGET_HOLD": hold or "", "PYTHONPATH": str(APP_DIR),
        }
        for _ in range(3):
            self.port = free_port()
            self.lines: list[str] = []
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "local_budget_app:app", "--app-dir", str(APP_DIR),
                 "--workers", str(WORKERS), "--host", "127.0.0.1", "--port", str(self.port),
                 "--lifespan", "on", "--log-level", "info", "--no-access-log"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                env=env, cwd=APP_DIR,
            )
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
            if self.wait_for("Application startup complete.", WORKERS, exited_ok=True):
                return
            self.stop()
        raise RuntimeError("uvicorn did not start:\n" + "".join(self.lines[-30:]))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, text: str, n: int, exited_ok: bool = False, timeout: float = 30) -> bool:
        """Until the log has ``text`` ``n`` times; False if uvicorn exited first (``exited_ok``)."""
        deadline = time.monotonic() + timeout
        while self.count(text) < n:
            if self.proc.poll() is not None and exited_ok:
                return False
            assert time.monotonic() < deadline, f"{n} x {text!r} not logged:\n" + "".join(self.lines[-30:])
            time.sleep(0.05)
        return True

    def get(self, path: str = "/") -> tuple[int, int, bytes]:
        """One GET on a new connection (any worker may take it): status, worker PID, body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, int(resp.getheader("x-worker-pid") or 0), resp.read()
        finally:
            conn.close()

    def burst(self, n: int, connections: int = 16) -> list[tuple[int, int]]:
        """``n`` requests over ``connections`` concurrent clients: (status, PID) each."""
        with ThreadPoolExecutor(connections) as pool:
            return [(status, pid) for status, pid, _ in pool.map(lambda _: self.get(), range(n))]

    def reports(self, workers: int = WORKERS, tries: int = 800) -> dict[int, dict[str, Any]]:
        """Every worker's counters (``/held``, asked on new connections until each answered)."""
        found: dict[int, dict[str, Any]] = {}
        for _ in range(tries):
            report = json.loads(self.get("/held")[2])
            found[report["pid"]] = report
            if len(found) == workers:
                return found
        raise AssertionError(f"only {len(found)} of {workers} workers answered /held")

    def stop(self) -> int | None:
        """SIGTERM, as a process manager stops it: graceful, every worker's lifespan shuts down."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(10)
        return self.proc.returncode


def set_up(server: Server, kind: str) -> None:
    if kind == "policy":
        RateLimiter(server.client()).policy_set("workers", GCRA(400, 1, "1h"), FixedWindow(300, "1h"))


def counted(server: Server) -> list[int]:
    """The module's own count of units taken on the shared key (a policy: each rule's)."""
    with server.client(decode_responses=True, protocol=2) as c:
        flat = c.execute_command("RL.INSPECT", "rl:http:shared")
    state = dict(zip(flat[::2], flat[1::2]))
    rules = [dict(zip(r[::2], r[1::2])) for r in state["rules"]] if "rules" in state else [state]
    return [int(r["limit"]) - int(r["remaining"]) for r in rules]


def served(responses: list[tuple[int, int]]) -> int:
    return sum(status == 200 for status, _ in responses)


@package_test
@pytest.mark.parametrize("kind", KINDS)
def test_workers_admit_exactly_what_the_module_counts_after_sigterm(server: Server, kind: str) -> None:
    set_up(server, kind)
    app = Uvicorn(server.port, kind)
    try:
        # 150 + 4 workers x 16 held <= 300: nothing refused yet.
        first = app.burst(150)
        assert served(first) == 150
        # Then past the limit: 429s, once every worker's budget and the key are drained.
        second = app.burst(250)
    finally:
        code = app.stop()
    responses = first + second
    ok, refused = served(responses), sum(status == 429 for status, _ in responses)
    assert ok + refused == 400 and refused >= 100 and ok >= 300 - WORKERS * 16
    assert len({pid for status, pid in responses if status == 200}) > 1, "one worker served everything"
    assert code == 0
    assert app.count("Application shutdown complete.") == WORKERS
    # Every worker gave back what it held at its lifespan's shutdown: the module counts the 200s.
    assert counted(server) == [ok] * (2 if kind == "policy" else 1)


@package_test
@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_worker_loses_exactly_what_it_held(server: Server, kind: str) -> None:
    set_up(server, kind)
    app = Uvicorn(server.port, kind, hold="1h")  # no unit goes back by the timer meanwhile
    try:
        assert served(app.burst(150)) == 150
        # While the workers hold units, the module counts the 200s and what they hold.
        reports = app.reports()
        held = sum(r["held"] for r in reports.values())
        assert sum(r["admitted"] for r in reports.values()) == 150
        assert counted(server)[0] - 150 == held <= WORKERS * 16
        victim = max(reports.values(), key=lambda r: r["held"])
        assert 0 < victim["held"] < held, "no worker, or only one, holds units"
        os.kill(victim["pid"], signal.SIGKILL)
        # uvicorn replaces it; the new worker holds nothing.
        app.wait_for("Application startup complete.", WORKERS + 1)
        assert counted(server)[0] == 150 + held
    finally:
        code = app.stop()
    assert code == 0
    assert app.count("Application shutdown complete.") == WORKERS
    # The others gave back theirs at their lifespan's shutdown; the killed worker's units stay
    # taken until the algorithm frees them (this GCRA: one an hour, its emission interval; the
    # window: at its end; the policy: each rule as its algorithm does).
    assert counted(server) == [150 + victim["held"]] * (2 if kind == "policy" else 1)
