#!/usr/bin/env python3
"""`make bench`: the rate limit service (ratelimit-gateway) against Kuadrant's Limitador and the
floor of what a fixed window costs, in one run, on this machine.

Starts a redis-server with the module (scripts/bench.py's, on a free loopback port), the service
(target/release/ratelimit-gateway-server) and Limitador (bench/limitador-rls) in front of it,
then sends requests of 1, 2 and 4 descriptors, 64 at a time, with
gateway-server/examples/bench_client.rs:

  - to the service, its rules envoyproxy/ratelimit's fixed windows (the default);
  - to the service, the same rules as sliding windows (`algorithm: sliding_window`, exact where
    the fixed window lets twice the limit through across a window's edge);
  - to Limitador (the `limitador` crate, pinned in bench/limitador-rls/Cargo.toml; its server is
    not on crates.io), its counters in the same Redis through its async storage
    (`AsyncRedisStorage`, limitador-server's `redis` storage, no local cache), behind the same
    gRPC API on tonic as the service, the request read as limitador-server reads it: the domain
    its namespace, all the descriptors one context (`descriptors[i]`) that every limit is tested
    against. Its limits are the rules' fixed windows, one per key `d<i>` on descriptor i (where
    the client puts it), a counter per value: each descriptor counted once, as by the service.
    Its storage spends two round trips a request (a script reading every counter, then a
    pipeline of one script per counter that adds), and one key of a JSON name per counter;
  - straight to Redis, the commands envoyproxy/ratelimit sends for the same request (an INCRBY
    and an EXPIRE per descriptor, pipelined), from the same client code: the floor, with no
    service between (no gRPC, no rules), that any service on Redis pays at least;
  - straight to Redis, the service's own calls for the same request (an RL.FIXEDWINDOW per
    descriptor, its keys and arguments, pipelined), from the same client code: Redis's share of
    the service's request without the service's process on the same two cores, beside the
    floor's;
  - to the service, every request on one hot value (a limit for a whole API), without and then
    with a local budget (`local_budget: 100`: units taken 100 at a time with ATMOST and spent
    without a round trip each);
  - with BENCH_GATEWAY_BEFORE=<a binary of the service>, that build too, beside this one (a
    change's before and after in one run).

For each: requests/s, p50 and p99 latency (µs), and Redis's own time per request (INFO
commandstats' usec over the requests; for Limitador, its scripts' alone: the commands a script
calls count in INFO under their own names too, inside the script's time). Medians of BENCH_REPS
repetitions (default 3), the cases interleaved so that the machine's noise falls on all alike.
The client shares the machine's cores with Redis and the services: compare the rows with each
other, not with other machines. Writes target/bench/gateway.md. BENCH_GATEWAY_REQUESTS sets the
requests per case (default 20000). The first run builds Limitador into target/limitador-rls,
RocksDB with it (the crate does not compile without it): half an hour on a busy 2-core machine.
"""

import json
import os
import select
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
LIMITADOR = os.path.join(ROOT, "bench", "limitador-rls")
LIMITADOR_TARGET = os.path.join(ROOT, "target", "limitador-rls")
# What Limitador's Redis storage sends (bench/limitador-rls: EVALSHA, SCRIPT LOAD at start and
# after a NOSCRIPT): the commands its scripts call are in these commands' time already.
LIMITADOR_COMMANDS = {"evalsha", "eval", "script"}
# The hot-value cases' local budget (units taken at once).
BUDGET = 100
# Another build of the service (a path), measured beside this one in the same run: a change's
# before and after.
BEFORE = os.environ.get("BENCH_GATEWAY_BEFORE")


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
    # Its own crate, lock file and target directory: not the workspace's (see its Cargo.toml).
    subprocess.run(
        ["cargo", "build", "--release", "-q", "--manifest-path", os.path.join(LIMITADOR, "Cargo.toml"),
         "--target-dir", LIMITADOR_TARGET, "--locked"],
        cwd=ROOT, check=True)


def limitador_version():
    """The `limitador` crate's version, as its lock file pins it."""
    with open(os.path.join(LIMITADOR, "Cargo.lock")) as f:
        lock = f.read()
    return lock.split('name = "limitador"\nversion = "', 1)[1].split('"', 1)[0]


def start_limitador(redis_port, domain):
    """Limitador on a free loopback port: ready when it prints the port it bound (after Redis
    answered and its scripts were loaded)."""
    log = os.path.join(OUT, "limitador.log")
    proc = subprocess.Popen(
        [os.path.join(LIMITADOR_TARGET, "release", "limitador-rls"), f"redis://127.0.0.1:{redis_port}",
         domain],
        stdout=subprocess.PIPE, stderr=open(log, "wb"), text=True)
    # Its connection to Redis is retried without end: hence the deadline.
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("listening 127.0.0.1:"):
        proc.kill()
        proc.wait()
        sys.exit(f"Limitador did not start in 30 s; see {log}")
    return proc, line.split()[1]


def start_gateway(redis_port, binary=os.path.join(ROOT, "target/release/ratelimit-gateway-server"), name="gateway"):
    """A service on free loopback ports, its rules in a folder of its own (`BENCH_GATEWAY_BEFORE`'s
    without the local budget's: a build before them would refuse the whole set)."""
    runtime = os.path.join(OUT, f"runtime-{name}")
    config = os.path.join(runtime, "bench", "config")
    os.makedirs(config, exist_ok=True)
    files = {"bench.yaml": rules("fixed"), "bench_sliding.yaml": rules("sliding", ", algorithm: sliding_window")}
    if name == "gateway":
        files["bench_budget.yaml"] = rules("budget", f", local_budget: {BUDGET}")
    for file, text in files.items():
        with open(os.path.join(config, file), "w") as f:
            f.write(text)
    ports = {name: bench.free_port() for name in ("PORT", "GRPC_PORT", "DEBUG_PORT")}
    env = {
        "PATH": os.environ["PATH"], "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"127.0.0.1:{redis_port}",
        "RUNTIME_ROOT": runtime, "RUNTIME_SUBDIRECTORY": "bench",
        "RUNTIME_WATCH_ROOT": "false", "HOST": "127.0.0.1", "GRPC_HOST": "127.0.0.1",
        "DEBUG_HOST": "127.0.0.1", **{k: str(v) for k, v in ports.items()},
    }
    proc = subprocess.Popen([binary], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(OUT, f"{name}.log"), "wb"))
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
            sys.exit(f"the gateway did not start; see {OUT}/{name}.log")
        time.sleep(0.05)


def redis_usec(client, commands=None):
    """Redis's time spent in commands so far (INFO commandstats): in `commands`, or in all."""
    total = 0.0
    for name, value in client.info("commandstats").items():
        if not name.startswith("cmdstat_") or name in ("cmdstat_info", "cmdstat_config"):
            continue
        if commands is None or name[len("cmdstat_"):] in commands:
            total += float(dict(kv.split("=") for kv in value.split(","))["usec"])
    return total


def run(client, kind, address, domain, descriptors, commands=None, users=USERS):
    client.cmd("CONFIG", "RESETSTAT")
    out = subprocess.run(
        [os.path.join(ROOT, "target/release/examples/bench_client"), kind, address, domain,
         str(descriptors), str(STREAMS), str(REQUESTS), str(users)],
        check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    if result["failed"] or result["refused"]:
        sys.exit(f"{kind} {domain} {descriptors}: {result}")
    result["redis_us"] = redis_usec(client, commands) / result["requests"]
    return result


def main():
    build()
    os.makedirs(OUT, exist_ok=True)
    server = bench.Server()
    gateway, grpc_port = start_gateway(server.port)
    procs = [gateway]
    try:
        limitador, limitador_address = start_limitador(server.port, "fixed")
        procs.append(limitador)
        before = None
        if BEFORE:
            before, before_port = start_gateway(server.port, BEFORE, "gateway-before")
            procs.append(before)
    except SystemExit:
        for proc in procs:
            proc.terminate()
        server.stop()
        raise
    gw = f"127.0.0.1:{grpc_port}"
    cases = [
        ("ratelimit-gateway, fixed window", "grpc", gw, "fixed", None, USERS),
        ("ratelimit-gateway, sliding window", "grpc", gw, "sliding", None, USERS),
        (f"Limitador {limitador_version()} (AsyncRedisStorage), fixed window", "grpc", limitador_address,
         "fixed", LIMITADOR_COMMANDS, USERS),
        ("INCRBY+EXPIRE pipeline (envoyproxy/ratelimit's commands, no service)", "pipeline",
         f"127.0.0.1:{server.port}", "fixed", None, USERS),
        # The service's own module calls for the same request, from the same client code: what
        # Redis spends on them when no service shares its cores.
        ("RL.FIXEDWINDOW pipeline (the service's commands, no service)", "module",
         f"127.0.0.1:{server.port}", "fixed", None, USERS),
        # One hot value for every request (a limit for a whole API): without, then with a local
        # budget of BUDGET units.
        ("ratelimit-gateway, fixed window, one hot value", "grpc", gw, "fixed", None, 1),
        (f"ratelimit-gateway, fixed window, one hot value, local_budget: {BUDGET}", "grpc", gw, "budget",
         None, 1),
    ]
    if before:
        cases.insert(1, ("ratelimit-gateway before the change (BENCH_GATEWAY_BEFORE), fixed window", "grpc",
                         f"127.0.0.1:{before_port}", "fixed", None, USERS))
    samples = {}
    try:
        for rep in range(REPS):
            for d in DESCRIPTORS:
                # Each repetition starts at another case: the first after a switch of descriptor
                # count pays for it (Redis's time per request a tenth higher, measured).
                start = rep % len(cases)
                for label, kind, address, domain, commands, users in cases[start:] + cases[:start]:
                    samples.setdefault((label, d), []).append(
                        run(server.client, kind, address, domain, d, commands, users))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
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
    lines += [
        "",
        f"Limitador: the `limitador` crate {limitador_version()} with its AsyncRedisStorage behind the same",
        "tonic server and messages as the gateway (bench/limitador-rls); a request's descriptors are one",
        "context, as in limitador-server, with a limit per key on its descriptor (`descriptors[i].d<i>`).",
        "Its Redis µs are its scripts' (EVALSHA, 1 + descriptors a request): INFO counts the commands a",
        "script calls again under their own names.",
    ]
    report = "\n".join(lines) + "\n"
    with open(os.path.join(bench.OUT, "gateway.md"), "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
