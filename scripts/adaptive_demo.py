#!/usr/bin/env python3
"""Adaptive concurrency limits under overload: a demonstration and its measurement (issue 26).

Usage: examples/python/.venv/bin/python scripts/adaptive_demo.py --out /tmp/adaptive.json
       python3 scripts/adaptive_svg.py /tmp/adaptive.json docs/concurrency-adaptive.svg
Needs only redis-py and the standard library (either Python venv of the repository will do).

The set-up, all on 127.0.0.1, every process started here and stopped by its PID:
  - redis-server ($RATELIMIT_SERVER, default /usr/bin/redis-server) with the module
    ($RATELIMIT_MODULE, default target/release/libratelimit.so), on a free port;
  - one backend: the shared dependency with a fixed capacity, a pool of C workers each taking
    S per request, FIFO queue in front of them (so latency grows as requests queue). It does
    not know when a caller gives up: a request queued keeps its place and is served anyway
    (wasted work), as in most real servers. C follows a schedule set by this process:
    C, then C/2, then C again, a third of the run each;
  - two service instances (separate processes, plain asyncio HTTP/1.1): each request calls the
    backend with a deadline (--deadline-ms, default 250 ms = 5 x S: AIMD backs off only on
    DROPPED, so the deadline is its only signal): in time -> 200, late -> 504. With a
    limiter, the handler is wrapped by ONE shared key, demo:backend:
        RL.CONCURRENCY.ACQUIRE demo:backend <start> 10s ADAPTIVE <ALG> MIN 1 MAX <max>
    refused -> 503 at once; after the call RL.CONCURRENCY.RELEASE demo:backend <token>
    RTT <us>us, with DROPPED when the deadline passed;
  - several client processes, open loop (each sends at a fixed rate whatever the answers),
    together --load x capacity, alternating between the two instances, each request with its
    own timeout; each records per request its send time, status and latency.
Every 250 ms this process samples the key's limit and held leases (RL.INSPECT) and the
backend's in-flight requests (queued + in service) and capacity.

Runs: none (no limiter), aimd, vegas, gradient2, each --phase-seconds x 3 long. The JSON it
writes holds, per run, the time series and per phase: offered rate, goodput (200s per second),
p50/p99 latency of the 200s, share shed (503), timeouts (504 + client timeouts), the limit
(mean, median, p10, p90), leases held, backend in-flight, Little's law's in-flight
(goodput x mean latency of the 200s) and how long the limit took to follow the phase's
capacity (see `follow_s` in analyse()).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEY = "demo:backend"
SAMPLE_S = 0.25
RUNS = ("none", "aimd", "vegas", "gradient2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# The backend: C workers, service time S, FIFO queue; C changed at run time.
# Line protocol: "R <id>\n" -> "<id>\n" once served; "C <n>\n" -> "ok\n" (new capacity);
# "S\n" -> "<queued> <busy> <capacity> <served>\n".


class Backend:
    def __init__(self, capacity: int, service_s: float) -> None:
        self.capacity = capacity
        self.service_s = service_s
        self.busy = 0
        self.served = 0
        self.queue: deque[tuple[asyncio.Transport, bytes]] = deque()
        self.loop = asyncio.get_running_loop()

    def submit(self, transport: asyncio.Transport, rid: bytes) -> None:
        self.queue.append((transport, rid))
        self.pump()

    def pump(self) -> None:
        while self.busy < self.capacity and self.queue:
            item = self.queue.popleft()
            self.busy += 1
            self.loop.call_later(self.service_s, self.finish, item)

    def finish(self, item: tuple[asyncio.Transport, bytes]) -> None:
        self.busy -= 1
        self.served += 1
        transport, rid = item
        if not transport.is_closing():
            transport.write(rid + b"\n")
        self.pump()


class BackendProtocol(asyncio.Protocol):
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        b = self.backend
        for line in lines:
            if line.startswith(b"R "):
                b.submit(self.transport, line[2:])
            elif line.startswith(b"C "):
                b.capacity = int(line[2:])
                b.pump()
                self.transport.write(b"ok\n")
            elif line == b"S":
                self.transport.write(b"%d %d %d %d\n" % (len(b.queue), b.busy, b.capacity, b.served))


async def backend_main(args: argparse.Namespace) -> None:
    backend = Backend(args.capacity, args.service_ms / 1000)
    server = await asyncio.get_running_loop().create_server(
        lambda: BackendProtocol(backend), "127.0.0.1", args.port)
    async with server:
        await server.serve_forever()


# --------------------------------------------------------------------------------------------
# A service instance: HTTP/1.1 (keep-alive, GET, no body) in front of the backend.


class BackendClient(asyncio.Protocol):
    """One connection to the backend, requests multiplexed by id."""

    def __init__(self) -> None:
        self.waiting: dict[int, asyncio.Future[bool]] = {}
        self.buf = b""
        self.next_id = 0
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            fut = self.waiting.pop(int(line), None)
            if fut is not None and not fut.done():
                fut.set_result(True)

    def _expire(self, rid: int) -> None:
        fut = self.waiting.pop(rid, None)
        if fut is not None and not fut.done():
            fut.set_result(False)

    async def call(self, deadline_s: float) -> bool:
        """True if the backend answered within the deadline (it is not told when we give up)."""
        self.next_id += 1
        rid = self.next_id
        fut = self.loop.create_future()
        self.waiting[rid] = fut
        timer = self.loop.call_later(deadline_s, self._expire, rid)
        self.transport.write(b"R %d\n" % rid)
        ok = await fut
        timer.cancel()
        return ok


def http_response(status: int, reason: str, extra: str = "") -> bytes:
    body = reason.encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n{extra}"
            f"Connection: keep-alive\r\n\r\n").encode() + body


RedisError: Any = Exception  # redis.RedisError once a service has imported redis
OK = http_response(200, "OK")
TIMEOUT = http_response(504, "Gateway Timeout")
ERROR = http_response(500, "Internal Server Error")


class Service:
    def __init__(self, args: argparse.Namespace, backend: BackendClient, db: Any) -> None:
        self.alg = None if args.mode == "none" else args.mode.upper()
        self.deadline_s = args.deadline_ms / 1000
        self.backend = backend
        self.db = db
        self.complained: set[str] = set()
        self.acquire = ["RL.CONCURRENCY.ACQUIRE", KEY, str(args.start), "10s", "ADAPTIVE", self.alg or "",
                        "MIN", str(args.min), "MAX", str(args.max)]

    def complain(self, e: Exception) -> None:
        """Say each kind of Redis error once, on stderr."""
        what = f"{type(e).__name__}: {e}"
        if what not in self.complained:
            self.complained.add(what)
            print(f"service {os.getpid()}: {what}", file=sys.stderr, flush=True)

    async def handle(self) -> bytes:
        if self.alg is None:
            return OK if await self.backend.call(self.deadline_s) else TIMEOUT
        try:
            allowed, _limit, _remaining, retry_ms, _reset, token = await self.db.execute_command(*self.acquire)
        except RedisError as e:
            self.complain(e)
            return ERROR
        if not allowed:
            return http_response(503, "Service Unavailable", f"Retry-After: {max(1, math.ceil(retry_ms / 1000))}\r\n")
        t0 = time.perf_counter()
        ok = await self.backend.call(self.deadline_s)
        rtt_us = max(1, int((time.perf_counter() - t0) * 1e6))
        release = ["RL.CONCURRENCY.RELEASE", KEY, token, "RTT", f"{rtt_us}us"]
        if not ok:
            release.append("DROPPED")
        try:
            await self.db.execute_command(*release)
        except RedisError as e:
            self.complain(e)  # the lease runs out after 10 s and counts as dropped
        return OK if ok else TIMEOUT


class HttpProtocol(asyncio.Protocol):
    def __init__(self, service: Service) -> None:
        self.service = service
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            _, self.buf = self.buf.split(b"\r\n\r\n", 1)
            asyncio.ensure_future(self.respond())

    async def respond(self) -> None:
        reply = await self.service.handle()
        if not self.transport.is_closing():
            self.transport.write(reply)


async def service_main(args: argparse.Namespace) -> None:
    global RedisError
    import redis.asyncio
    RedisError = redis.RedisError
    loop = asyncio.get_running_loop()
    _, backend = await loop.create_connection(BackendClient, "127.0.0.1", args.backend_port)
    # A bounded pool that waits for a free connection (the default one raises "Too many
    # connections" when a stalled process has many requests at once).
    pool = redis.asyncio.BlockingConnectionPool(host="127.0.0.1", port=args.redis_port, protocol=2,
                                                max_connections=32, timeout=5)
    db = redis.asyncio.Redis(connection_pool=pool)
    service = Service(args, backend, db)
    server = await loop.create_server(lambda: HttpProtocol(service), "127.0.0.1", args.port, backlog=4096)
    async with server:
        await server.serve_forever()


# --------------------------------------------------------------------------------------------
# A client: open loop at a fixed rate, keep-alive connections, its own timeout per request.


class HttpClient(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.waiter: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length:]
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(int(head[0].split()[1]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(-1)

    def request(self) -> asyncio.Future[int]:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(b"GET / HTTP/1.1\r\nHost: demo\r\n\r\n")
        return self.waiter


async def client_main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    ports = [int(p) for p in args.ports.split(",")]
    idle: dict[int, list[HttpClient]] = {p: [] for p in ports}
    timeout = args.timeout_ms / 1000
    records: list[tuple[float, int, float]] = []
    pending: set[asyncio.Task[None]] = set()

    async def one(port: int) -> None:
        t0 = time.monotonic()
        conn = None
        try:
            async with asyncio.timeout(timeout):
                if idle[port]:
                    conn = idle[port].pop()
                else:
                    _, conn = await loop.create_connection(HttpClient, "127.0.0.1", port)
                status = await conn.request()
        except TimeoutError:
            status = 0
        except OSError:
            status = -1
        t1 = time.monotonic()
        if conn is not None:
            if status > 0:
                idle[port].append(conn)
            else:
                conn.transport.close()
        records.append((round(t0 - args.t0, 6), status, round(t1 - t0, 6)))

    interval = 1 / args.rate
    # Clients start a fraction of an interval apart, so that they do not send in step.
    next_t = args.t0 + interval * (args.index / max(1, args.clients))
    end = args.t0 + args.duration
    n = 0
    while next_t < end:
        now = time.monotonic()
        if now < next_t:
            await asyncio.sleep(next_t - now)
            continue
        task = asyncio.ensure_future(one(ports[n % len(ports)]))
        pending.add(task)
        task.add_done_callback(pending.discard)
        n += 1
        next_t += interval
    if pending:
        await asyncio.wait(pending)
    Path(args.out).write_text(json.dumps(records, separators=(",", ":")))


# --------------------------------------------------------------------------------------------
# The orchestration: redis-server, then per run a backend, two services, the clients, and the
# sampler in this process.


def server_binary() -> str:
    return os.environ.get("RATELIMIT_SERVER") or "/usr/bin/redis-server"


def module_path() -> str:
    return os.environ.get("RATELIMIT_MODULE") or str(ROOT / "target/release/libratelimit.so")


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not listen on {port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


class Redis:
    """redis-server with the module on a free loopback port, stopped by its PID."""

    def __init__(self, directory: Path) -> None:
        import redis
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory),
                 "--logfile", "redis.log", "--save", "", "--appendonly", "no", "--loadmodule", module_path()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1) as c:
                        if c.info("server")["process_id"] == self.proc.pid:
                            self.client = redis.Redis(host="127.0.0.1", port=self.port, protocol=2,
                                                      decode_responses=True)
                            return
                    break  # someone else's server on that port: try another
                except redis.RedisError:
                    time.sleep(0.02)
            stop(self.proc)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.client.close()
        stop(self.proc)


def spawn(role: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), role, *args],
                            stdin=subprocess.DEVNULL)


def schedule(cfg: dict[str, Any]) -> list[tuple[float, float, int]]:
    """The phases: (start s, end s, capacity)."""
    p, c = cfg["phase_s"], cfg["capacity"]
    return [(0.0, p, c), (p, 2 * p, max(1, c // 2)), (2 * p, 3 * p, c)]


def run_one(mode: str, cfg: dict[str, Any], db: Redis, work: Path) -> dict[str, Any]:
    phases = schedule(cfg)
    duration = phases[-1][1]
    capacity_rps = cfg["capacity"] / (cfg["service_ms"] / 1000)
    rate_each = cfg["load"] * capacity_rps / cfg["clients"]
    db.client.delete(KEY)
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[subprocess.Popen[bytes]] = []
    wall0 = time.monotonic()
    load0 = os.getloadavg()[0]  # the machine is shared: say how busy it was
    try:
        bport = free_port()
        backend = spawn("backend", "--port", str(bport), "--capacity", str(cfg["capacity"]),
                        "--service-ms", str(cfg["service_ms"]))
        procs.append(backend)
        wait_port(bport, backend, "the backend")
        sports = []
        for _ in range(2):
            port = free_port()
            svc = spawn("service", "--port", str(port), "--backend-port", str(bport), "--redis-port",
                        str(db.port), "--mode", mode, "--deadline-ms", str(cfg["deadline_ms"]),
                        "--start", str(cfg["start"]), "--min", str(cfg["min"]), "--max", str(cfg["max"]))
            procs.append(svc)
            wait_port(port, svc, "a service")
            sports.append(port)
        control = socket.create_connection(("127.0.0.1", bport))
        reader = control.makefile("rb")

        def ask(line: bytes) -> bytes:
            control.sendall(line)
            return reader.readline()

        t0 = time.monotonic() + 1.5
        outs = []
        for i in range(cfg["clients"]):
            out = work / f"{mode}-client{i}.json"
            outs.append(out)
            clients.append(spawn("client", "--ports", ",".join(map(str, sports)), "--rate", str(rate_each),
                                 "--t0", repr(t0), "--duration", str(duration), "--timeout-ms",
                                 str(cfg["client_timeout_ms"]), "--out", str(out), "--index", str(i),
                                 "--clients", str(cfg["clients"])))
        samples = []
        k = 0
        phase = 0
        while True:
            at = t0 + k * SAMPLE_S
            if at > t0 + duration + 1e-9:
                break
            now = time.monotonic()
            if now < at:
                time.sleep(at - now)
            t = time.monotonic() - t0
            while phase + 1 < len(phases) and t >= phases[phase + 1][0]:
                phase += 1
                ask(b"C %d\n" % phases[phase][2])
            queued, busy, cap, served = map(int, ask(b"S\n").split())
            limit = held = None
            if mode != "none":
                fields = db.client.execute_command("RL.INSPECT", KEY)
                if fields:
                    info = dict(zip(fields[::2], fields[1::2]))
                    limit, held = int(info["limit"]), int(info["held"])
            samples.append({"t": round(t, 3), "limit": limit, "held": held, "backend_inflight": queued + busy,
                            "backend_busy": busy, "capacity": cap, "served": served})
            k += 1
        for c in clients:
            c.wait(cfg["client_timeout_ms"] / 1000 + 30)
        control.close()
        records = []
        for out in outs:
            records.extend(json.loads(out.read_text()))
    finally:
        for p in clients + procs:
            stop(p)
    result = analyse(mode, cfg, phases, samples, records)
    result["wall_s"] = round(time.monotonic() - wall0, 1)
    result["loadavg_1m_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    result["offered_rps_target"] = round(rate_each * cfg["clients"], 1)
    return result


# --------------------------------------------------------------------------------------------
# The numbers.


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def r(x: float | None, n: int = 1) -> float | None:
    return None if x is None else round(x, n)


def analyse(mode: str, cfg: dict[str, Any], phases: list[tuple[float, float, int]],
            samples: list[dict[str, Any]], records: list[list[float]]) -> dict[str, Any]:
    """Per window of SAMPLE_S (by completion time): p99 and goodput of the 200s; per phase (by
    send time): the summary. follow_s: seconds from the phase's start until the limit's
    running median (samples within 0.5 s either side, in the phase) first comes within 25%
    (at least 2) of the limit's median over the phase's second half (the level it settles at
    in that phase, if it settles: read it beside limit_p10/p90); None for a run without a
    limiter. Little's law: littles_law_inflight = goodput x mean latency of the 200s, the
    in-flight that the 200s alone account for; with the backend busy and nothing queued it is
    C (C/S per second, each taking S)."""
    duration = phases[-1][1]
    nwin = int(round(duration / SAMPLE_S))
    done: list[list[float]] = [[] for _ in range(nwin + 1)]
    for t, status, lat in records:
        if status == 200:
            w = math.ceil((t + lat) / SAMPLE_S - 1e-9)
            if 0 <= w <= nwin:
                done[w].append(lat)
    for s in samples:
        w = int(round(s["t"] / SAMPLE_S))
        lats = done[w] if 0 < w <= nwin else []
        s["p99_ms"] = r(percentile(lats, 0.99) * 1000, 1) if lats else None
        s["goodput_rps"] = round(len(lats) / SAMPLE_S, 1) if w > 0 else None

    out_phases = []
    for i, (a, b, cap) in enumerate(phases):
        rec = [x for x in records if a <= x[0] < b]
        ok = [x[2] for x in rec if x[1] == 200]
        n = len(rec)
        secs = b - a
        ps = [s for s in samples if a <= s["t"] < b or (i == len(phases) - 1 and s["t"] == b)]
        limits = [s["limit"] for s in ps if s["limit"] is not None]
        helds = [s["held"] for s in ps if s["held"] is not None]
        mean_ok = sum(ok) / len(ok) if ok else None
        goodput = len(ok) / secs
        settle = None
        if limits:
            with_limit = [s for s in ps if s["limit"] is not None]
            level = percentile([s["limit"] for s in with_limit if s["t"] >= a + secs / 2], 0.5)
            band = max(0.25 * level, 2)
            for s in with_limit:
                near = [x["limit"] for x in with_limit if abs(x["t"] - s["t"]) <= 0.5 + 1e-9]
                if abs(percentile(near, 0.5) - level) <= band:
                    settle = round(s["t"] - a, 2)
                    break
        out_phases.append({
            "from_s": a, "to_s": b, "capacity": cap,
            "capacity_rps": round(cap / (cfg["service_ms"] / 1000), 1),
            "requests": n,
            "offered_rps": round(n / secs, 1),
            "goodput_rps": round(goodput, 1),
            "goodput_share_of_capacity": round(goodput / (cap / (cfg["service_ms"] / 1000)), 3),
            "p50_ms": r(percentile(ok, 0.5) * 1000 if ok else None),
            "p99_ms": r(percentile(ok, 0.99) * 1000 if ok else None),
            "shed_share": round(sum(1 for x in rec if x[1] == 503) / n, 3) if n else None,
            "timeouts": sum(1 for x in rec if x[1] in (504, 0)),
            "client_timeouts": sum(1 for x in rec if x[1] == 0),
            "errors": sum(1 for x in rec if x[1] not in (200, 503, 504, 0)),
            "statuses": {str(k): sum(1 for x in rec if x[1] == k) for k in sorted({x[1] for x in rec})},
            "limit_mean": r(sum(limits) / len(limits)) if limits else None,
            "limit_median": percentile(limits, 0.5) if limits else None,
            "limit_p10": percentile(limits, 0.1) if limits else None,
            "limit_p90": percentile(limits, 0.9) if limits else None,
            "limit_over_capacity": r(percentile(limits, 0.5) / cap, 2) if limits else None,
            "held_median": percentile(helds, 0.5) if helds else None,
            "backend_inflight_median": percentile([s["backend_inflight"] for s in ps], 0.5),
            "backend_inflight_max": max(s["backend_inflight"] for s in ps),
            "littles_law_inflight": r(goodput * mean_ok, 1) if mean_ok else None,
            "follow_s": settle,
        })
    return {"mode": mode, "phases": out_phases, "samples": samples}


def run_demo(runs: list[str], cfg: dict[str, Any], log: Any = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="adaptive-demo-"))
    db = Redis(work)
    try:
        result = {"config": dict(cfg, runs=runs, sample_s=SAMPLE_S, key=KEY,
                                 capacity_rps=cfg["capacity"] / (cfg["service_ms"] / 1000),
                                 cpus=os.cpu_count(), module=module_path(), server=server_binary(),
                                 redis_version=db.client.info("server")["redis_version"]),
                  "runs": {}}
        for mode in runs:
            result["runs"][mode] = run_one(mode, cfg, db, work)
            if log:
                log(summary_table({"runs": {mode: result["runs"][mode]}, "config": result["config"]}))
        return result
    finally:
        db.stop()
        shutil.rmtree(work, ignore_errors=True)


def summary_table(result: dict[str, Any]) -> str:
    def f(x: Any, fmt: str = "{:.0f}") -> str:
        return "-" if x is None else fmt.format(x)

    lines = ["| run | phase | C | offered/s | goodput/s (% of C/S) | p50 ms | p99 ms | shed % | timeouts "
             "| limit mean; median (p10-p90) | held | Little | follow s | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode, run in result["runs"].items():
        for i, p in enumerate(run["phases"]):
            lim = "-" if p["limit_median"] is None else \
                f"{p['limit_mean']:.1f}; {p['limit_median']:.0f} ({p['limit_p10']:.0f}-{p['limit_p90']:.0f})"
            lines.append(
                f"| {mode} | {p['from_s']:.0f}-{p['to_s']:.0f} s | {p['capacity']} | {p['offered_rps']:.0f} "
                f"| {p['goodput_rps']:.0f} ({100 * p['goodput_share_of_capacity']:.0f}%) | {f(p['p50_ms'])} "
                f"| {f(p['p99_ms'])} | {f(p['shed_share'] and 100 * p['shed_share'])} | {p['timeouts']} | {lim} "
                f"| {f(p['held_median'])} | {f(p['littles_law_inflight'])} | {f(p['follow_s'], '{:.2f}')} "
                f"| {run['wall_s'] if i == 0 else ''} |")
    return "\n".join(lines)


DEFAULTS = {"capacity": 16, "service_ms": 50, "phase_s": 10.0, "load": 2.5, "clients": 3, "deadline_ms": 250,
            "client_timeout_ms": 1000, "start": 20, "min": 1, "max": 200}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role")
    b = sub.add_parser("backend")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--capacity", type=int, required=True)
    b.add_argument("--service-ms", type=float, required=True)
    s = sub.add_parser("service")
    for name in ("--port", "--backend-port", "--redis-port", "--start", "--min", "--max"):
        s.add_argument(name, type=int, required=True)
    s.add_argument("--mode", choices=RUNS, required=True)
    s.add_argument("--deadline-ms", type=float, required=True)
    c = sub.add_parser("client")
    c.add_argument("--ports", required=True)
    c.add_argument("--rate", type=float, required=True)
    c.add_argument("--t0", type=float, required=True)
    c.add_argument("--duration", type=float, required=True)
    c.add_argument("--timeout-ms", type=float, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--index", type=int, default=0)
    c.add_argument("--clients", type=int, default=1)
    ap.add_argument("--out", help="the JSON to write (default: stdout gets only the table)")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated, of " + ", ".join(RUNS))
    ap.add_argument("--capacity", type=int, default=DEFAULTS["capacity"], help="C, the backend's workers")
    ap.add_argument("--service-ms", type=float, default=DEFAULTS["service_ms"], help="S, per request")
    ap.add_argument("--phase-seconds", type=float, default=DEFAULTS["phase_s"], help="C, C/2, C: each this long")
    ap.add_argument("--load", type=float, default=DEFAULTS["load"], help="offered load / capacity C/S")
    ap.add_argument("--clients", type=int, default=DEFAULTS["clients"], help="client processes")
    ap.add_argument("--deadline-ms", type=float, default=DEFAULTS["deadline_ms"], help="the services' backend deadline")
    ap.add_argument("--client-timeout-ms", type=float, default=DEFAULTS["client_timeout_ms"])
    ap.add_argument("--start", type=int, default=DEFAULTS["start"], help="where a new adaptive key's limit starts")
    ap.add_argument("--max", type=int, default=DEFAULTS["max"], help="MAX of the adaptive limit (MIN is 1)")
    args = ap.parse_args()
    if args.role == "backend":
        asyncio.run(backend_main(args))
    elif args.role == "service":
        asyncio.run(service_main(args))
    elif args.role == "client":
        asyncio.run(client_main(args))
    else:
        cfg = {"capacity": args.capacity, "service_ms": args.service_ms, "phase_s": args.phase_seconds,
               "load": args.load, "clients": args.clients, "deadline_ms": args.deadline_ms,
               "client_timeout_ms": args.client_timeout_ms, "start": args.start, "min": 1, "max": args.max}
        runs = [x for x in args.runs.split(",") if x]
        for x in runs:
            if x not in RUNS:
                ap.error(f"unknown run {x}")
        result = run_demo(runs, cfg, log=lambda s: print(s, file=sys.stderr, flush=True))
        print(summary_table(result))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
