#!/usr/bin/env python3
"""`make bench`: the rate limit service (ratelimit-gateway) against the floor of what a fixed
window costs, in one run, on this machine.

Starts a redis-server with the module (scripts/bench.py's, on a free loopback port) and the
service (target/release/ratelimit-gateway-server) in front of it, then sends requests of 1, 2 and
4 descriptors, 64 at a time, with gateway-server/examples/bench_client.rs:

  - to the service, its rules envoyproxy/ratelimit's fixed windows (the default);
  - to the service, the same rules as sliding windows (`algorithm: sliding_window`, exact where
    the fixed window lets twice the limit through across a window's edge);
  - straight to Redis, the commands envoyproxy/ratelimit sends for the same request (an INCRBY
    and an EXPIRE per descriptor, pipelined), from the same client code: the floor, with no
    service between (no gRPC, no rules), that any service on Redis pays at least.

For each: requests/s, p50 and p99 latency (µs), and Redis's own time per request (INFO
commandstats' usec over the requests). Medians of BENCH_REPS repetitions (default 3), the cases
interleaved so that the machine's noise falls on all alike. The client shares the machine's cores
with Redis and the service: compare the rows with each other, not with other machines. Writes
target/bench/gateway.md. BENCH_GATEWAY_REQUESTS sets the requests per case (default 20000).
"""

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (scripts/bench.py: Server, Client, free_port)

ROOT = bench.ROOT
OUT = os.path.join(bench.OUT, "gateway")
REPS = bench.REPS
REQUESTS = int(os.environ.get("BENCH_GATEWAY_REQUESTS", "20000"))
STREAMS = 64
USERS = 10_000
DESCRIPTORS = (1, 2, 4)


def rules(domain, extra=""):
    """Limits no request reaches: every request is admitted, the cost measured is the decision's."""
    lines = [f"domain: {domain}", "descriptors:"]
    for i in range(4):
        lines += [f"  - key: d{i}", f"    rate_limit: {{unit: minute, requests_per_unit: 1000000000{extra}}}"]
    return "\n".join(lines) + "\n"


def build():
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "ratelimit-gateway-server", "--bins", "--examples"],
        cwd=ROOT, check=True)


def start_gateway(redis_port):
    config = os.path.join(OUT, "runtime", "bench", "config")
    os.makedirs(config, exist_ok=True)
    with open(os.path.join(config, "bench.yaml"), "w") as f:
        f.write(rules("fixed"))
    with open(os.path.join(config, "bench_sliding.yaml"), "w") as f:
        f.write(rules("sliding", ", algorithm: sliding_window"))
    ports = {name: bench.free_port() for name in ("PORT", "GRPC_PORT", "DEBUG_PORT")}
    env = {
        "PATH": os.environ["PATH"], "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"127.0.0.1:{redis_port}",
        "RUNTIME_ROOT": os.path.join(OUT, "runtime"), "RUNTIME_SUBDIRECTORY": "bench",
        "RUNTIME_WATCH_ROOT": "false", "HOST": "127.0.0.1", "GRPC_HOST": "127.0.0.1",
        "DEBUG_HOST": "127.0.0.1", **{k: str(v) for k, v in ports.items()},
    }
    proc = subprocess.Popen([os.path.join(ROOT, "target/release/ratelimit-gateway-server")], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(OUT, "gateway.log"), "wb"))
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['PORT']}/healthcheck", timeout=1) as r:
                if r.status == 200:
                    return proc, ports["GRPC_PORT"]
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            sys.exit(f"the gateway did not start; see {OUT}/gateway.log")
        time.sleep(0.05)


def redis_usec(client):
    """Redis's time spent in commands so far (INFO commandstats, all commands)."""
    total = 0.0
    for name, value in client.info("commandstats").items():
        if name.startswith("cmdstat_") and name != "cmdstat_info" and name != "cmdstat_config":
            total += float(dict(kv.split("=") for kv in value.split(","))["usec"])
    return total


def run(client, kind, address, domain, descriptors):
    client.cmd("CONFIG", "RESETSTAT")
    out = subprocess.run(
        [os.path.join(ROOT, "target/release/examples/bench_client"), kind, address, domain,
         str(descriptors), str(STREAMS), str(REQUESTS), str(USERS)],
        check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    if result["failed"] or result["refused"]:
        sys.exit(f"{kind} {domain} {descriptors}: {result}")
    result["redis_us"] = redis_usec(client) / result["requests"]
    return result


def main():
    build()
    os.makedirs(OUT, exist_ok=True)
    server = bench.Server()
    gateway, grpc_port = start_gateway(server.port)
    cases = [
        ("ratelimit-gateway, fixed window", "grpc", f"127.0.0.1:{grpc_port}", "fixed"),
        ("ratelimit-gateway, sliding window", "grpc", f"127.0.0.1:{grpc_port}", "sliding"),
        ("INCRBY+EXPIRE pipeline (envoyproxy/ratelimit's commands, no service)", "pipeline",
         f"127.0.0.1:{server.port}", "fixed"),
    ]
    samples = {}
    try:
        for _ in range(REPS):
            for d in DESCRIPTORS:
                for label, kind, address, domain in cases:
                    samples.setdefault((label, d), []).append(run(server.client, kind, address, domain, d))
    finally:
        gateway.terminate()
        gateway.wait(30)
        server.stop()
    lines = [
        f"# The gateway, {REQUESTS} requests a case, {STREAMS} at a time, medians of {REPS}",
        "",
        "| case | descriptors | requests/s | p50 µs | p99 µs | Redis µs per request |",
        "|---|---|---|---|---|---|",
    ]
    for d in DESCRIPTORS:
        for label, *_ in cases:
            s = samples[(label, d)]
            med = {k: statistics.median(r[k] for r in s) for k in ("per_second", "p50_us", "p99_us", "redis_us")}
            lines.append(f"| {label} | {d} | {med['per_second']:,.0f} | {med['p50_us']:,.0f} | "
                         f"{med['p99_us']:,.0f} | {med['redis_us']:.1f} |")
    report = "\n".join(lines) + "\n"
    with open(os.path.join(bench.OUT, "gateway.md"), "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
