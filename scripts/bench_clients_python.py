"""The Python package's cost per HTTP request, and the round trips its denial memory saves.

Usage: clients/python/.venv/bin/python scripts/bench_clients_python.py   (make bench runs it)
Starts its own redis-server (bench.py's Server, on a free loopback port) and, for each case,
uvicorn serving a FastAPI app in a child process on a free loopback port; all stopped by PID.

Latency: one keep-alive connection sends requests one at a time; each request's time from
send to last byte read, p50 and p99, for
  (a) bare:       an endpoint that returns a short text;
  (b) direct:     the same endpoint calling RL.GCRA itself (redis.asyncio, RESP2) and setting
                  two headers from the reply, no middleware;
  (c) middleware: the bare endpoint behind RateLimitMiddleware (GCRA, every request admitted).
The rounds alternate the cases, so drift on the shared machine falls on all of them alike.
Hammering: one client sends BENCH_HAMMER requests on one key limited to 5 a minute, with the
denial memory on and then off; RL.GCRA calls are counted with INFO commandstats.
BENCH_HTTP_N (requests per case per round, default 2000), BENCH_HTTP_ROUNDS (default 3) and
BENCH_HAMMER (default 2000) tune it. Report also in target/bench/clients_python.md."""


import http.client
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import OUT, Server  # noqa: E402

N = int(os.environ.get("BENCH_HTTP_N", "2000"))
ROUNDS = int(os.environ.get("BENCH_HTTP_ROUNDS", "3"))
HAMMER = int(os.environ.get("BENCH_HAMMER", "2000"))
BIG = "1000000000"  # a burst no run reaches: every request is admitted


def app(kind: str, redis_port: int, remembered: int):
    """The ASGI app of one case (built in the child process)."""
    import redis.asyncio
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import PlainTextResponse

    from ratelimit_redis_module import GCRA, RateLimitMiddleware, header

    api = FastAPI()
    db = redis.asyncio.Redis(host="127.0.0.1", port=redis_port, protocol=2)

    if kind == "direct":
        @api.get("/")
        async def direct(request: Request) -> Response:
            who = request.headers.get("x-client-id") or request.client.host
            allowed, limit, remaining, _, _ = await db.execute_command("RL.GCRA", "rl:direct:" + who, BIG, BIG, "1s")
            return PlainTextResponse("hello", headers={"x-ratelimit-limit": str(limit),
                                                       "x-ratelimit-remaining": str(remaining)})
        return api

    @api.get("/")
    async def bare() -> PlainTextResponse:
        return PlainTextResponse("hello")

    if kind == "middleware":
        # A timeout of 1 s: on a loaded machine, 50 ms would now and then fail open, and a
        # request let through unchecked is not what this measures.
        api.add_middleware(RateLimitMiddleware, redis=db, limit=GCRA(int(BIG), int(BIG), "1s"),
                           key=header("x-client-id"), timeout=1.0)
    elif kind == "hammer":
        api.add_middleware(RateLimitMiddleware, redis=db, limit=GCRA(5, 5, "1m"), key=header("x-client-id"),
                           max_remembered=remembered, timeout=1.0)
    return api


def serve_child(kind: str, redis_port: int, remembered: int) -> None:
    import uvicorn

    # IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say TCP (else ~40 ms
    # per keep-alive request, waiting for a delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    # Keep-alive long enough for the connection to outlast the other cases' rounds.
    uvicorn.Server(uvicorn.Config(app(kind, redis_port, remembered), log_level="warning",
                                  access_log=False, timeout_keep_alive=600)).run(sockets=[sock])


class Service:
    def __init__(self, kind: str, redis_port: int, remembered: int = 10_000) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(redis_port), str(remembered)],
                                     stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        deadline = time.time() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.02)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port)
        self.conn.connect()
        # Without it, a request waits for the delayed ACK of the previous one (about 40 ms).
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def timed(self, n: int, who: str) -> tuple[list[int], dict[int, int]]:
        """n requests: each one's latency in ns, and how many got each status."""
        out, statuses = [], {}
        headers = {"X-Client-Id": who}
        for _ in range(n):
            start = time.perf_counter_ns()
            self.conn.request("GET", "/", headers=headers)
            resp = self.conn.getresponse()
            resp.read()
            out.append(time.perf_counter_ns() - start)
            statuses[resp.status] = statuses.get(resp.status, 0) + 1
        return out, statuses

    def stop(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(10)


def pct(samples: list[int], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] / 1000


def main() -> None:
    server = Server()
    lines = []
    try:
        kinds = ["bare", "direct", "middleware"]
        services = {k: Service(k, server.port) for k in kinds}
        samples: dict[str, list[int]] = {k: [] for k in kinds}
        try:
            for k in kinds:  # warm-up: connections, imports, the first keys
                services[k].timed(200, "warm")
            for r in range(ROUNDS):
                for k in kinds:
                    got, statuses = services[k].timed(N, "u%d" % r)
                    assert statuses == {200: N}, statuses
                    samples[k] += got
        finally:
            for s in services.values():
                s.stop()
        p = {k: (pct(v, 50), pct(v, 99)) for k, v in samples.items()}
        lines += [
            "## Latency per request (µs, %d requests per case, one keep-alive connection)" % (N * ROUNDS),
            "",
            "| case | p50 | p99 | p50 added over bare | p99 added over bare |",
            "|---|---|---|---|---|",
        ]
        for k in kinds:
            lines.append("| %s | %.0f | %.0f | %+.0f | %+.0f |" % (k, p[k][0], p[k][1], p[k][0] - p["bare"][0],
                                                              p[k][1] - p["bare"][1]))
        lines += ["", "middleware over direct: p50 %+.0f µs, p99 %+.0f µs" % (
            p["middleware"][0] - p["direct"][0], p["middleware"][1] - p["direct"][1]), ""]

        lines += [
            "## A client hammering one key (GCRA 5 a minute, %d requests)" % HAMMER,
            "",
            "| denial memory | 200 | 429 | RL.GCRA round trips | p50 of a 429 (µs) |",
            "|---|---|---|---|---|",
        ]
        trips = {}
        for remembered in (10_000, 0):
            svc = Service("hammer", server.port, remembered)
            try:
                server.client.cmd("CONFIG", "RESETSTAT")
                got, statuses = svc.timed(HAMMER, "hammer-%d" % remembered)
                stats = server.client.info("commandstats").get("cmdstat_rl.gcra", "calls=0")
                trips[remembered] = int(dict(kv.split("=") for kv in stats.split(","))["calls"])
                lines.append("| %s | %d | %d | %d | %.0f |" % (
                    "on" if remembered else "off", statuses.get(200, 0), statuses.get(429, 0),
                    trips[remembered], pct(got[5:], 50)))
            finally:
                svc.stop()
        lines += ["", "round trips saved by the memory: %d of %d" % (trips[0] - trips[10_000], trips[0])]
    finally:
        server.stop()
    report = "\n".join(lines) + "\n"
    print(report)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "clients_python.md"), "w") as f:
        f.write(report)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
