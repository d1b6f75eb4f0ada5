#!/usr/bin/env python3
"""`make bench`: the module against INCR and against Lua twins, in one run, on this machine.

Starts its own redis-server with the module on a free loopback port (stopped by PID at the
end), then measures:
  1. throughput with redis-benchmark (50 clients, 100,000 random keys, -P 1 and -P 16) of
     INCR, every admission command and CL.THROTTLE, and a Lua script (EVALSHA) per algorithm
     written the usual way (bench/lua/); and each command's server-side usec_per_call from
     INFO commandstats. Medians of BENCH_REPS repetitions (default 3), interleaved so that
     noise spreads over all commands alike;
  2. memory: used_memory growth per key over 100,000 fresh keys, against a plain
     `SET key <integer> PX <ms>` key and the Lua twins' keys; and the sliding log's bytes per
     admitted request at 10, 1,000 and 100,000 entries per key, against a sorted set's;
  3. the sliding log's usec_per_call with a full log at limits 10 to 1,000,000;
  4. what a denied call costs with and without RL.TOP's bookkeeping (ratelimit.top-size 100
     or 0), over 100,000 keys (every denial a new key for the summary: the worst case) and
     over 10 (the usual few hot keys), against INCR in the same runs.
Prints one report (and writes it to target/bench/report.md). BENCH_ONLY=memory measures only
the memory tables (a size is exact, so this part is quick and needs no quiet machine);
BENCH_ONLY=throughput only the first part; BENCH_ONLY=increx only INCREX's tables (below).

BENCH_SERVER=/path/to/redis-server (or valkey-server) runs all of it on that binary instead of
the redis-server on PATH (Debian's Redis 7.0 here; the figures in docs/performance.md are from
it unless they say otherwise).

INCREX (Redis 8.8 and later: an increment with bounds and an expiry in one command) is measured
as a fixed-window limiter would use it, `INCREX key UBOUND <limit> PX <window ms> ENX`, beside
RL.FIXEDWINDOW: admitted; denied (a full window), for RL.FIXEDWINDOW against INCREX plus the PTTL
that a 429's Retry-After then takes; and its key's bytes. On a server that has it (COMMAND INFO
INCREX answers) those rows join the tables. On one that lacks it, a second server with the module
runs them, with INCR, RL.FIXEDWINDOW and its Lua twin in the same interleaved repetitions, in
tables of their own: BENCH_INCREX_SERVER names its binary, by default
target/servers/redis-8.10.2/redis-server when `make servers` has built it. Without such a server
(or with BENCH_INCREX_SERVER set empty) there are no INCREX rows.

BENCH_BASELINE=/path/to/another/libratelimit.so (the module built from another commit) adds a
second redis-server with that module, on its own free loopback port, and runs every throughput
case on both servers in turn (baseline, then current, for each case in each repetition), so
that whatever else the machine does falls on both alike. The report adds a table "Against the
baseline": each command's usec_per_call on both, current / baseline, and the range of that
ratio over the repetitions beside INCR's (the same code on both servers: its range is the
noise). A case the baseline answers with an error (a command or option it does not have) is
n/a for it.
"""

import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.environ.get("RATELIMIT_MODULE", os.path.join(ROOT, "target/release/libratelimit.so"))
OUT = os.path.join(ROOT, "target/bench")
REPS = int(os.environ.get("BENCH_REPS", "3"))
ONLY = os.environ.get("BENCH_ONLY", "")
ONLY_MEMORY = ONLY == "memory"
ONLY_THROUGHPUT = ONLY == "throughput"
ONLY_INCREX = ONLY == "increx"
BASELINE = os.environ.get("BENCH_BASELINE", "")
SERVER = os.environ.get("BENCH_SERVER", "redis-server")
INCREX_DEFAULT = os.path.join(ROOT, "target/servers/redis-8.10.2/redis-server")
INCREX_SERVER = os.environ.get("BENCH_INCREX_SERVER", INCREX_DEFAULT if os.path.exists(INCREX_DEFAULT) else "")
# Requests per redis-benchmark run, per pipeline depth: each run takes a few seconds.
REQUESTS = {1: int(os.environ.get("BENCH_N1", "300000")), 16: int(os.environ.get("BENCH_N16", "1000000"))}
KEYS = 100_000
CLIENTS = 50

# (label, command and parameters, Lua twin label); keys are key:__rand_int__. A limit of 100
# per minute keeps a key alive between its hits (about three a second here), as INCR's keys
# are: the comparison is of the work per request, not of creating and expiring keys.
RL_COMMANDS = [
    ("RL.GCRA", ["RL.GCRA", "100", "100", "1m"], "gcra"),
    ("CL.THROTTLE", ["CL.THROTTLE", "99", "100", "60"], "gcra"),
    ("RL.TOKENBUCKET", ["RL.TOKENBUCKET", "100", "100", "1m"], "tokenbucket"),
    ("RL.LEAKYBUCKET", ["RL.LEAKYBUCKET", "100", "100", "1m"], "leakybucket"),
    ("RL.FIXEDWINDOW", ["RL.FIXEDWINDOW", "100", "1m"], "fixedwindow"),
    ("RL.SLIDINGWINDOW", ["RL.SLIDINGWINDOW", "100", "1m"], "slidingwindow"),
    ("RL.SLIDINGLOG", ["RL.SLIDINGLOG", "100", "1m"], "slidinglog"),
    # Warm-up over a minute at 100 a minute (cold factor 3): spaced 1.8 s apart when cold.
    ("RL.WARMUP", ["RL.WARMUP", "100", "1m", "1m"], "warmup"),
    # A policy of three tiers (POLICY below), against a Lua script doing the same three checks.
    ("RL.LIMIT", ["RL.LIMIT", "api"], "policy"),
]
# RL.LIMIT's policy: 100 a minute (GCRA), 1,000 an hour and 10,000 a day.
POLICY = ["GCRA", "100", "100", "1m", "FIXEDWINDOW", "1000", "1h", "FIXEDWINDOW", "10000", "1d"]
# The Lua twins' arguments (times in ms, cost last).
LUA_ARGS = {
    "gcra": ["100", "100", "60000", "1"],
    "tokenbucket": ["100", "100", "60000", "1"],
    "leakybucket": ["100", "100", "60000", "1"],
    "fixedwindow": ["100", "60000", "1"],
    "slidingwindow": ["100", "60000", "1"],
    "slidinglog": ["100", "60000", "1"],
    "warmup": ["100", "60000", "60000", "3", "1"],
    "policy": ["100", "100", "60000", "1000", "3600000", "10000", "86400000", "1"],
}
# The paths that take units back or grant part of a request, each against a Lua script doing
# the same (throughput only: they make no keys of their own). RL.REFUND runs on keys that
# owe an hour of a GCRA schedule (`setup`), so that every call gives a unit back; the partial
# grant runs on keys that refill 100 a second, so that most calls grant something.
EXTRA_COMMANDS = [
    ("RL.REFUND", ["RL.REFUND", "1"], "refund"),
    ("RL.GCRA ATMOST", ["RL.GCRA", "100", "100", "1s", "ATMOST", "5"], "gcra_atmost"),
]
LUA_ARGS["refund"] = ["1000000", "3600000", "1"]
LUA_ARGS["gcra_atmost"] = ["100", "100", "1000", "5"]
# INCREX as a fixed-window limiter calls it (the cost 1 is its default BYINT): UBOUND refuses
# the increment that would pass the limit ([count, 0]: nothing written), PX with ENX sets the
# window's end once, when the key is made (without ENX every admission would push it out). Then
# the refusals: RL.FIXEDWINDOW and INCREX on keys whose window is full (a day long, so that a
# window ends during a run only across midnight UTC), and the PTTL that gives INCREX's caller the Retry-After that
# RL.FIXEDWINDOW's reply carries. Each only on a server that has INCREX.
INCREX_COMMANDS = [
    ("INCREX", ["INCREX", "UBOUND", "100", "PX", "60000", "ENX"], "increx"),
    ("RL.FIXEDWINDOW, denied", ["RL.FIXEDWINDOW", "100", "1d"], "rl.fixedwindow"),
    ("INCREX, denied", ["INCREX", "UBOUND", "100", "PX", "86400000", "ENX"], "increx"),
    ("PTTL", ["PTTL"], "pttl"),
]
INCREX_LABELS = [label for label, _, _ in INCREX_COMMANDS]
# The row made of two: a refused INCREX, then the PTTL of the same key (two commands, and two
# round trips where the client waits for the first reply before it sends the second).
INCREX_PTTL = "INCREX, denied + PTTL"
# What the second server runs when the first lacks INCREX.
INCREX_SIDE = ["INCR", "RL.FIXEDWINDOW", "lua:fixedwindow"] + INCREX_LABELS
FIXED_SIZE = {"RL.GCRA", "CL.THROTTLE", "RL.TOKENBUCKET", "RL.LEAKYBUCKET", "RL.FIXEDWINDOW", "RL.SLIDINGWINDOW",
              "RL.WARMUP", "RL.REFUND", "RL.GCRA ATMOST"}


class Client:
    """A minimal RESP2 client: enough for setup, INFO and pipelined fills."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)

    def cmd(self, *args):
        self.sock.sendall(self.encode(*args))
        return self.read()

    def pipeline(self, commands, batch=1000):
        for start in range(0, len(commands), batch):
            chunk = commands[start:start + batch]
            self.sock.sendall(b"".join(self.encode(*c) for c in chunk))
            for _ in chunk:
                self.read()

    def info(self, section):
        text = self.cmd("INFO", section).decode()
        fields = {}
        for line in text.split("\r\n"):
            if ":" in line and not line.startswith("#"):
                name, value = line.split(":", 1)
                fields[name] = value
        return fields

    def used_memory(self):
        return int(self.info("memory")["used_memory"])

    def usec_per_call(self, command):
        stats = self.info("commandstats").get("cmdstat_" + command.lower())
        if not stats:
            return float("nan")
        return float(dict(kv.split("=") for kv in stats.split(","))["usec_per_call"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """redis-server on a free loopback port with `module` loaded (and its load arguments),
    files in target/bench, its log in `log` there; stop() ends it by its PID. The other
    measuring scripts use it too."""

    def __init__(self, module=MODULE, module_args=(), log="redis.log", binary="redis-server"):
        os.makedirs(OUT, exist_ok=True)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", OUT,
             "--save", "", "--appendonly", "no", "--logfile", log,
             "--loadmodule", module, *module_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while True:
            if self.proc.poll() is not None:
                sys.exit("%s exited; see %s/%s" % (binary, OUT, log))
            try:
                self.client = Client(self.port)
                if self.client.cmd("PING") == "PONG":
                    break
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                sys.exit("%s did not answer" % binary)
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def benchmark(port, args, pipeline):
    """Requests per second of one redis-benchmark run."""
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
           "-n", str(REQUESTS[pipeline]), "-r", str(KEYS), "-P", str(pipeline), "--csv"] + args
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [line for line in out.splitlines() if line.strip()]
    return float(rows[-1].split(",")[1].strip('"'))


def setup(client, label, keys=None):
    """Fills the keys a case needs before it runs: for the refunds, every key redis-benchmark
    can pick (`key:` and 12 digits; or only `keys`) owes an hour, a million units of 3.6 ms; for
    the refusals, every key holds a full window of a day."""
    keys = keys or ["key:%012d" % i for i in range(KEYS)]
    if label == "RL.REFUND":
        client.pipeline([("RL.GCRA", k, 1_000_000, 1_000_000, "1h", "COST", 1_000_000) for k in keys])
    elif label == "RL.FIXEDWINDOW, denied":
        client.pipeline([("RL.FIXEDWINDOW", k, 100, "1d", "COST", 100) for k in keys])
    elif label in ("INCREX, denied", "PTTL"):
        client.pipeline([("INCREX", k, "BYINT", 100, "UBOUND", 100, "PX", 86_400_000, "ENX") for k in keys])
    elif label == "lua:refund":
        seconds, micros = client.cmd("TIME")
        tat = int(seconds) * 1000 + int(micros) // 1000 + 3_600_000
        client.pipeline([("SET", k, tat, "PX", 3_600_000) for k in keys])


def throughput_cases(shas):
    """[(label, redis-benchmark arguments, commandstats name)]: INCR, then the module's
    commands, INCREX's, then the Lua twins."""
    cases = [("INCR", ["INCR", "key:__rand_int__"], "incr")]
    for label, args, _ in RL_COMMANDS + EXTRA_COMMANDS:
        cases.append((label, [args[0], "key:__rand_int__"] + args[1:], args[0]))
    for label, args, stat in INCREX_COMMANDS:
        cases.append((label, [args[0], "key:__rand_int__"] + args[1:], stat))
    for twin, args in LUA_ARGS.items():
        cases.append(("lua:" + twin, ["EVALSHA", shas[twin], "1", "key:__rand_int__"] + args, "evalsha"))
    return cases


def probe(client, label, args):
    """None if the server answers one call of a case (after its setup) without an error, else
    the error: a baseline module may not have every command or option yet."""
    key = "%012d" % 1
    try:
        client.cmd("FLUSHALL")
        setup(client, label, ["key:" + key])
        client.cmd(*[a.replace("__rand_int__", key) for a in args])
        return None
    except RuntimeError as e:
        return str(e)
    finally:
        client.cmd("FLUSHALL")


def throughput(servers, shas):
    """{(server name, label, pipeline): [(rps, usec_per_call)], one a repetition} and
    {server name: {label: error}} for the cases a server lacks, over `servers`, a list of
    (name, Server, the labels of the cases it runs): each case runs on each server in turn, in
    every repetition. Only a "baseline" server is probed for the cases it lacks."""
    cases = throughput_cases(shas)
    runs = {name: set(labels) for name, _, labels in servers}
    lacking = {}
    for name, server, _ in servers:
        if name == "baseline":
            lacking[name] = {}
            for label, args, _ in cases:
                if label not in runs[name]:
                    continue
                error = probe(server.client, label, args)
                if error is not None:
                    lacking[name][label] = error
                    print("  %s lacks %s: %s" % (name, label, error), file=sys.stderr)
    tag = len(servers) > 1
    samples = {}
    for rep in range(REPS):
        for pipeline in (1, 16):
            for label, args, stat in cases:
                for name, server, _ in servers:
                    if label not in runs[name] or label in lacking.get(name, {}):
                        continue
                    server.client.cmd("FLUSHALL")
                    setup(server.client, label)
                    server.client.cmd("CONFIG", "RESETSTAT")
                    rps = benchmark(server.port, args, pipeline)
                    usec = server.client.usec_per_call(stat)
                    # Emptied at once, so that an idle server expires no keys while the other runs.
                    server.client.cmd("FLUSHALL")
                    samples.setdefault((name, label, pipeline), []).append((rps, usec))
                    print("  rep %d -P %-2d %s%-22s %10.0f ops/s %6.2f usec/call" % (
                        rep + 1, pipeline, "%-8s " % name if tag else "", label, rps, usec), file=sys.stderr)
    return samples, lacking


def medians(samples, name):
    """{(label, pipeline): (median rps, median usec_per_call)} of server `name`; with INCREX's
    refusal and PTTL, also the two in sequence (INCREX_PTTL): in each repetition, the calls a
    second of a client that sends one and then the other (1 / (1/rps + 1/rps)) and the sum of
    their usec_per_call."""
    out = {(label, pipeline): (statistics.median(r for r, _ in v), statistics.median(u for _, u in v))
           for (server, label, pipeline), v in samples.items() if server == name}
    for pipeline in (1, 16):
        denied, pttl = samples.get((name, "INCREX, denied", pipeline)), samples.get((name, "PTTL", pipeline))
        if denied and pttl:
            pairs = [(1 / (1 / r1 + 1 / r2), u1 + u2) for (r1, u1), (r2, u2) in zip(denied, pttl)]
            out[(INCREX_PTTL, pipeline)] = (statistics.median(r for r, _ in pairs),
                                            statistics.median(u for _, u in pairs))
    return out


def per_key_memory(client, make, n=KEYS, usage=True):
    """(used_memory growth per key, mean MEMORY USAGE of 100 of the keys named key:<i>, or None
    without `usage`) over `n` fresh keys."""
    client.cmd("FLUSHALL", "SYNC")
    before = client.used_memory()
    client.pipeline([make(i) for i in range(n)])
    growth = (client.used_memory() - before) / n
    if not usage:
        return growth, None
    sample = range(0, n, max(1, n // 100))
    usage = statistics.mean(client.cmd("MEMORY", "USAGE", "key:%d" % i, "SAMPLES", "0") for i in sample)
    return growth, usage


def memory(client, shas, labels=None, increx=False, log=True):
    """The memory tables' rows: a plain SET key's, then the module's commands' (those in
    `labels`, or all) against their Lua twins', then (with `increx`) an INCREX key's; and the
    sliding log's (with `log`)."""
    rows = []
    plain = per_key_memory(client, lambda i: ("SET", "key:%d" % i, 1_700_000_000_123 + i, "PX", 3_600_000))
    rows.append(("SET key <integer> PX <ms>", plain, None))
    plain = plain[0]
    long_args = {  # an hour, so that nothing expires while the keys are counted
        "RL.GCRA": ["10", "10", "1h"], "CL.THROTTLE": ["9", "10", "3600"],
        "RL.TOKENBUCKET": ["10", "10", "1h"], "RL.LEAKYBUCKET": ["10", "10", "1h"],
        "RL.FIXEDWINDOW": ["10", "1h"], "RL.SLIDINGWINDOW": ["10", "1h"], "RL.SLIDINGLOG": ["10", "1h"],
        "RL.WARMUP": ["10", "1h", "1h"],
        "RL.LIMIT": ["api"],
    }
    lua_long = {
        "gcra": ["10", "10", "3600000", "1"], "tokenbucket": ["10", "10", "3600000", "1"],
        "leakybucket": ["10", "10", "3600000", "1"], "fixedwindow": ["10", "3600000", "1"],
        "slidingwindow": ["10", "3600000", "1"], "slidinglog": ["10", "3600000", "1"],
        "warmup": ["10", "3600000", "3600000", "3", "1"],
        "policy": LUA_ARGS["policy"],
    }
    for label, args, twin in RL_COMMANDS:
        if labels is not None and label not in labels:
            continue
        ours = per_key_memory(client, lambda i: (args[0], "key:%d" % i, *long_args[label]))
        lua = per_key_memory(client, lambda i: ("EVALSHA", shas[twin], "1", "key:%d" % i, *lua_long[twin]), usage=False)[0]
        rows.append((label, ours, lua))
    if increx:
        # An integer string with a TTL, as a SET key is; its MEMORY USAGE is Redis's own count.
        ours = per_key_memory(client, lambda i: ("INCREX", "key:%d" % i, "UBOUND", 10, "PX", 3_600_000, "ENX"))
        rows.append(("INCREX UBOUND PX ENX", ours, None))
    log_rows = []
    if not log:
        return plain, rows, log_rows
    for entries, keys in ((10, 10_000), (1000, 100), (100_000, 2)):
        def fill(make):
            client.cmd("FLUSHALL", "SYNC")
            before = client.used_memory()
            client.pipeline([make(k, e) for k in range(keys) for e in range(entries)])
            growth = (client.used_memory() - before) / (keys * entries)
            usage = statistics.mean(client.cmd("MEMORY", "USAGE", "log:%d" % k, "SAMPLES", "0") for k in range(keys))
            return growth, usage / entries
        ours = fill(lambda k, e: ("RL.SLIDINGLOG", "log:%d" % k, entries, "1h"))
        zset = fill(lambda k, e: ("EVALSHA", shas["slidinglog"], "1", "log:%d" % k, entries, 3_600_000, 1))[0]
        log_rows.append((entries, ours, zset))
    return plain, rows, log_rows


def log_scale(server):
    rows = []
    for limit in (10, 1000, 100_000, 1_000_000):
        server.client.cmd("FLUSHALL")
        server.client.pipeline([("RL.SLIDINGLOG", "full", limit, "1h")] * limit, batch=10_000)
        entries = dict(zip(*[iter(server.client.cmd("RL.INSPECT", "full"))] * 2))[b"active"]
        usecs = []
        for _ in range(REPS):
            server.client.cmd("CONFIG", "RESETSTAT")
            run = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-c", str(CLIENTS),
                   "-n", "200000", "-P", "16", "--csv", "RL.SLIDINGLOG", "full", str(limit), "1h"]
            subprocess.run(run, check=True, capture_output=True)
            usecs.append(server.client.usec_per_call("RL.SLIDINGLOG"))
        rows.append((limit, entries, statistics.median(usecs)))
    return rows


def denial_cost(server):
    """{(label): (median usec_per_call, INCR's)}: RL.GCRA with a COST above its burst, so
    that every call is denied (counted, published, and recorded for RL.TOP)."""
    cases = [
        ("top-size 100, 100000 keys", "100", KEYS),
        ("top-size 0, 100000 keys", "0", KEYS),
        ("top-size 100, 10 keys", "100", 10),
        ("top-size 0, 10 keys", "0", 10),
    ]
    samples = {}
    for _ in range(REPS):
        for label, size, keys in cases:
            server.client.cmd("FLUSHALL")
            server.client.cmd("CONFIG", "SET", "ratelimit.top-size", size)
            server.client.cmd("CONFIG", "RESETSTAT")
            run = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-c", str(CLIENTS),
                   "-n", str(REQUESTS[16]), "-r", str(keys), "-P", "16", "--csv",
                   "RL.GCRA", "key:__rand_int__", "1", "1", "1h", "COST", "2"]
            subprocess.run(run, check=True, capture_output=True)
            usec = server.client.usec_per_call("RL.GCRA")
            server.client.cmd("CONFIG", "RESETSTAT")
            benchmark(server.port, ["INCR", "key:__rand_int__"], 16)
            incr = server.client.usec_per_call("incr")
            samples.setdefault(label, []).append((usec, incr))
            print("  denied %-28s %6.2f usec/call (INCR %.2f)" % (label, usec, incr), file=sys.stderr)
    server.client.cmd("CONFIG", "SET", "ratelimit.top-size", "100")
    return [(label, statistics.median(u for u, _ in samples[label]), statistics.median(i for _, i in samples[label]))
            for label, _, _ in cases]


def load(client, shas):
    """RL.LIMIT's policy and the Lua twins on one server; {twin: sha}. A baseline module that
    refuses the policy leaves RL.LIMIT n/a (its probe fails)."""
    try:
        client.cmd("RL.POLICY.SET", "api", *POLICY)
    except RuntimeError as e:
        print("  RL.POLICY.SET: %s" % e, file=sys.stderr)
    for twin in LUA_ARGS:
        with open(os.path.join(ROOT, "bench", "lua", twin + ".lua")) as f:
            shas[twin] = client.cmd("SCRIPT", "LOAD", f.read()).decode()
    return shas


def has_increx(client):
    """Whether the server has INCREX, from what it says (COMMAND INFO answers nil for a command
    it does not know)."""
    return client.cmd("COMMAND", "INFO", "INCREX")[0] is not None


def server_name(client):
    """`Redis 8.10.2` or `Valkey 9.1.2`, from INFO server."""
    info = client.info("server")
    if "valkey_version" in info:
        return "Valkey " + info["valkey_version"]
    return "Redis " + info["redis_version"]


def main():
    for tool in (SERVER, "redis-benchmark"):
        if subprocess.run(["sh", "-c", "command -v '%s'" % tool], capture_output=True).returncode:
            if tool == SERVER and "BENCH_SERVER" in os.environ:
                sys.exit("BENCH_SERVER: %s is missing" % SERVER)
            sys.exit(tool + " is missing: run make bench (it installs what is missing)")
    if INCREX_SERVER and not os.path.exists(INCREX_SERVER):
        sys.exit("BENCH_INCREX_SERVER: %s is missing" % INCREX_SERVER)
    if not os.path.exists(MODULE):
        sys.exit(MODULE + " is missing: run make bench")
    if ONLY not in ("", "memory", "throughput", "increx"):
        sys.exit("BENCH_ONLY is memory, throughput, increx or unset (everything), not %r" % ONLY)
    if BASELINE and not os.path.exists(BASELINE):
        sys.exit("BENCH_BASELINE: %s is missing" % BASELINE)
    if BASELINE and (ONLY_MEMORY or ONLY_INCREX):
        sys.exit("BENCH_BASELINE compares throughput only: leave BENCH_ONLY=%s out" % ONLY)
    server = Server(binary=SERVER)
    baseline = side = None
    try:
        shas = load(server.client, {})
        name = server_name(server.client)
        labels = [label for label, _, _ in throughput_cases(shas) if label not in INCREX_LABELS]
        increx_here = has_increx(server.client)
        servers = [("current", server, labels + (INCREX_LABELS if increx_here else []))]
        if BASELINE:
            baseline = Server(BASELINE, log="redis-baseline.log", binary=SERVER)
            load(baseline.client, {})
            servers.insert(0, ("baseline", baseline, labels))
        increx = None
        if not increx_here and INCREX_SERVER:
            side = Server(log="redis-increx.log", binary=INCREX_SERVER)
            if not has_increx(side.client):
                sys.exit("BENCH_INCREX_SERVER: %s has no INCREX" % INCREX_SERVER)
            load(side.client, {})
            servers.append(("increx", side, INCREX_SIDE))
            increx = {"name": server_name(side.client), "binary": INCREX_SERVER, "second": True,
                      "results": None, "memory": None}
        elif not increx_here:
            print("  no INCREX: %s lacks it, and there is no server that has it (BENCH_INCREX_SERVER)" % name,
                  file=sys.stderr)
        if ONLY_INCREX:
            # INCREX's cases alone, in INCREX's tables, on whichever server has it.
            if increx_here:
                servers = [("increx", server, INCREX_SIDE)]
                increx = {"name": name, "binary": SERVER, "second": False, "results": None, "memory": None}
            elif side:
                servers = [("increx", side, INCREX_SIDE)]
            else:
                sys.exit("BENCH_ONLY=increx: %s has no INCREX, and no BENCH_INCREX_SERVER has it" % name)
        results = scale = against = None
        plain = mem_rows = log_rows = None
        if not ONLY_MEMORY:
            print("throughput (%d repetitions%s%s)..." % (
                REPS, ", against the baseline" if BASELINE else "",
                ", INCREX on a second server" if side else ""), file=sys.stderr)
            samples, lacking = throughput(servers, shas)
            if not ONLY_INCREX:
                results = medians(samples, "current")
            if increx:
                increx["results"] = medians(samples, "increx")
            if BASELINE:
                against = (samples, lacking.get("baseline", {}))
        if not ONLY_THROUGHPUT:
            print("memory...", file=sys.stderr)
            if not ONLY_INCREX:
                plain, mem_rows, log_rows = memory(server.client, shas, increx=increx_here)
            if increx:
                where = side if increx["second"] else server
                increx["memory"] = memory(where.client, shas, labels={"RL.FIXEDWINDOW"}, increx=True, log=False)
        denials = None
        if not ONLY_MEMORY and not ONLY_THROUGHPUT and not ONLY_INCREX:
            print("sliding log scale...", file=sys.stderr)
            scale = log_scale(server)
            print("denials and RL.TOP...", file=sys.stderr)
            denials = denial_cost(server)
    finally:
        if side is not None:
            side.stop()
        if baseline is not None:
            baseline.stop()
        server.stop()
    if ONLY_INCREX:
        name = increx["name"]
    report = render(results, plain, mem_rows, log_rows, scale, denials, against, name, increx)
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(report)
    print(report)


def mark(ok):
    return "✓" if ok else "✗"


def target_mark(ratio, target):
    return "" if target is None else mark(ratio >= target)


def target_vs_incr(label, pipeline):
    """The issue's throughput target against INCR for `label` at `pipeline`."""
    if label == "RL.LIMIT":
        return None  # three rules a call: issue 4's targets are for one
    if label == "RL.SLIDINGLOG":
        return 0.8 if pipeline == 1 else 0.35
    return 0.85 if pipeline == 1 else 0.45


def render_memory(plain, mem_rows, log_rows):
    lines = ["", "Memory: used_memory growth per key over %d fresh keys (one request each)." % KEYS, "",
             "MEMORY USAGE: the mean over 100 of the keys, and its ratio to the growth (target: within 5%).", "",
             "| key | bytes/key | × SET | MEMORY USAGE | ÷ growth | Lua twin bytes/key |",
             "|---|---|---|---|---|---|"]
    for label, (ours, usage), lua in mem_rows:
        lua_text = "" if lua is None else "%.1f" % lua
        target = 1.15 if label in FIXED_SIZE else 220 / plain if label == "RL.LIMIT" else None
        ok = "" if target is None else " " + mark(ours / plain <= target)
        # The plain key's MEMORY USAGE is Redis's own count, which leaves out its expiry entry and
        # buckets: shown, not held to the target.
        usage_ok = "" if lua is None else mark(abs(usage / ours - 1) <= 0.05)
        lines.append("| %s | %.1f | %.2f%s | %.1f | %.3f %s | %s |" % (
            label, ours, ours / plain, ok, usage, usage / ours, usage_ok, lua_text))
    if not log_rows:
        return lines
    lines += ["", "Sliding log: bytes per admitted request (cost 1), against a sorted set (the Lua twin).", "",
              "| entries per key | RL.SLIDINGLOG | MEMORY USAGE | ÷ growth | sorted set |", "|---|---|---|---|---|"]
    for entries, (ours, usage), zset in log_rows:
        ok = " " + mark(ours <= 6) if entries == 100_000 else ""
        lines.append("| %d | %.1f%s | %.1f | %.3f %s | %.1f |" % (
            entries, ours, ok, usage, usage / ours, mark(abs(usage / ours - 1) <= 0.05), zset))
    return lines


def checkout(module):
    """`path (commit abc1234)` for a module built in a git checkout, `+ changes` when that
    checkout differs from its commit; the bare path elsewhere."""
    where = os.path.dirname(os.path.abspath(module))
    git = ["git", "-C", where]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        return "`%s`" % module
    changed = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True).stdout.strip()
    return "`%s` (commit %s%s)" % (module, head.stdout.strip(), " + changes" if changed else "")


def render_against(samples, lacking):
    """The table "Against the baseline": usec_per_call on both servers, in the same runs."""
    lines = ["", "Against the baseline: %s; current: %s. Every case above also ran on a second server with the "
             "baseline module, just before the same case on this one, in every repetition." % (
                 checkout(BASELINE), checkout(MODULE)), "",
             "How to read it: usec base and usec cur are the medians over the %d repetitions; `cur ÷ base` is "
             "the median, and `range` the lowest and highest, of the ratio of the two runs next to each other in "
             "each repetition (above 1: the current module is slower). INCR is the same code on both servers (but "
             "for the module's command filter), so its range is the noise of this run: a change is beyond noise "
             "only when its range lies wholly outside INCR's at the same -P (`slower` or `faster` in the last "
             "column; `noise` otherwise). The Lua twins too run the same code on both: their ranges show the "
             "noise on a longer call. n/a: the baseline answers the case with an error." % REPS, "",
             "| command | -P | usec base | usec cur | cur ÷ base | range | base × INCR | cur × INCR "
             "| beyond noise |",
             "|---|---|---|---|---|---|---|---|---|"]

    def median_usec(name, label, pipeline):
        return statistics.median(u for _, u in samples[(name, label, pipeline)])

    def ratios(label, pipeline):
        pairs = zip(samples[("baseline", label, pipeline)], samples[("current", label, pipeline)])
        return [cur / base for (_, base), (_, cur) in pairs]

    same_code = ["INCR"] + ["lua:" + t for t in LUA_ARGS]
    labels = same_code[:1] + [label for label, _, _ in RL_COMMANDS + EXTRA_COMMANDS] + same_code[1:]
    for pipeline in (1, 16):
        incr_base, incr_cur = median_usec("baseline", "INCR", pipeline), median_usec("current", "INCR", pipeline)
        noise = [round(r, 2) for r in ratios("INCR", pipeline)]
        for label in labels:
            name = "Lua %s (EVALSHA)" % label[4:] if label.startswith("lua:") else label
            cur = median_usec("current", label, pipeline)
            if label in lacking:
                lines.append("| %s | %d | n/a | %.2f | n/a | n/a | n/a | %.2f | |" % (
                    name, pipeline, cur, cur / incr_cur))
                continue
            base = median_usec("baseline", label, pipeline)
            paired = ratios(label, pipeline)
            # Compared as printed, so that the verdict can be checked against the table.
            low, high = round(min(paired), 2), round(max(paired), 2)
            verdict = ("" if label in same_code else "slower" if low > max(noise)
                       else "faster" if high < min(noise) else "noise")
            lines.append("| %s | %d | %.2f | %.2f | %.2f | %.2f–%.2f | %.2f | %.2f | %s |" % (
                name, pipeline, base, cur, statistics.median(paired), low, high,
                base / incr_base, cur / incr_cur, verdict))
    return lines


def throughput_rows(results, commands, twins):
    """The throughput table's rows of `commands` (RL_COMMANDS' form) and the Lua `twins`, after
    INCR's, and INCREX's where `results` has them, at each -P."""
    lines = ["| command | -P | ops/s | × INCR | × Lua twin | usec_per_call | usec × INCR |",
             "|---|---|---|---|---|---|---|"]
    for pipeline in (1, 16):
        incr_rps, incr_usec = results[("INCR", pipeline)]
        lines.append("| INCR | %d | %.0f | 1.00 | | %.2f | 1.00 |" % (pipeline, incr_rps, incr_usec))
        for label, _, twin in commands:
            rps, usec = results[(label, pipeline)]
            lua_rps, _ = results[("lua:" + twin, pipeline)]
            lines.append("| %s | %d | %.0f | %.2f %s | %.2f %s | %.2f | %.2f %s |" % (
                label, pipeline, rps,
                rps / incr_rps, target_mark(rps / incr_rps, target_vs_incr(label, pipeline)),
                rps / lua_rps, mark(pipeline == 1 or rps / lua_rps >= 4),
                usec, usec / incr_usec, mark(label not in FIXED_SIZE or usec / incr_usec <= 3)))
        for label in INCREX_LABELS + [INCREX_PTTL]:
            if (label, pipeline) not in results:
                continue
            rps, usec = results[(label, pipeline)]
            lines.append("| %s | %d | %.0f | %.2f | | %.2f | %.2f |" % (
                label, pipeline, rps, rps / incr_rps, usec, usec / incr_usec))
        for twin in twins:
            rps, usec = results[("lua:" + twin, pipeline)]
            lines.append("| Lua %s (EVALSHA) | %d | %.0f | %.2f | 1.00 | %.2f | %.2f |" % (
                twin, pipeline, rps, rps / incr_rps, usec, usec / incr_usec))
    return lines


INCREX_LEGEND = (
    "INCREX: `INCREX key UBOUND 100 PX 60000 ENX`, the fixed window of RL.FIXEDWINDOW's row (100 a minute; "
    "every call admitted, as there). `, denied`: every key's window (a day) already full, RL.FIXEDWINDOW's "
    "refusal carrying its retry_after (and RL.TOP's bookkeeping, at its default size), INCREX's `[100, 0]` "
    "carrying none; PTTL on those keys. `%s`: the two one after the other, as a client that answers a 429 "
    "with Retry-After sends them: usec_per_call added, ops/s 1 / (1/ops + 1/ops) of the two runs "
    "(at -P 1, two round trips)." % INCREX_PTTL)


def render_increx(increx):
    """INCREX's tables apart: from the second server, the one with INCREX, when the first lacks
    it; or from the only one, with BENCH_ONLY=increx."""
    lines = ["", "INCREX beside RL.FIXEDWINDOW, on %s: %s (`%s`) with the module." % (
        "a second server" if increx["second"] else "this server", increx["name"], increx["binary"])]
    if increx["results"] is not None:
        if increx["second"] and not ONLY_INCREX:
            lines[-1] += (" Its cases ran in the same repetitions as those above, each after the same case on "
                          "the first server; ratios against its own INCR.")
        lines += ["", "Medians of %d runs of `redis-benchmark -c %d -r %d -P {1,16} -n {%d,%d}`, interleaved; "
                  "usec_per_call from INFO commandstats." % (REPS, CLIENTS, KEYS, REQUESTS[1], REQUESTS[16]), ""]
        lines += throughput_rows(increx["results"], [c for c in RL_COMMANDS if c[0] == "RL.FIXEDWINDOW"],
                                 ["fixedwindow"])
        lines += ["", INCREX_LEGEND]
    if increx["memory"] is not None:
        plain, rows, _ = increx["memory"]
        lines += render_memory(plain, rows, [])
    return lines


def render(results, plain, mem_rows, log_rows, scale, denials, against=None, name="Redis", increx=None):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = ["Machine: %d cores (%s), %s." % (os.cpu_count(), cpu, name)]
    if results is not None:
        lines += [
            "Medians of %d runs of `redis-benchmark -c %d -r %d -P {1,16} -n {%d,%d}`, interleaved; "
            "usec_per_call from INFO commandstats." % (REPS, CLIENTS, KEYS, REQUESTS[1], REQUESTS[16]),
            "",
        ]
        lines += throughput_rows(results, RL_COMMANDS + EXTRA_COMMANDS, LUA_ARGS)
        if ("INCREX", 1) in results:
            lines += ["", INCREX_LEGEND]
    if against is not None:
        lines += render_against(*against)
    if mem_rows is not None:
        lines += render_memory(plain, mem_rows, log_rows)
    if scale is not None:
        lines += ["", "Sliding log with a full log (every request denied), -P 16, median usec_per_call.", "",
                  "| limit | entries | usec_per_call | × limit 10 |", "|---|---|---|---|"]
        base = scale[0][2]
        for limit, entries, usec in scale:
            lines.append("| %d | %d | %.2f | %.2f %s |" % (limit, entries, usec, usec / base, mark(usec / base <= 1.5)))
    if denials is not None:
        lines += ["", "A denied call (RL.GCRA ... COST 2 over a burst of 1), -P 16, median usec_per_call, with and "
                  "without RL.TOP's bookkeeping.", "",
                  "| case | usec_per_call | × INCR |", "|---|---|---|"]
        for label, usec, incr in denials:
            lines.append("| %s | %.2f | %.2f |" % (label, usec, usec / incr))
    if increx is not None:
        lines += render_increx(increx)
    lines += ["", "✓/✗: the targets of issue 4 (x INCR at -P 1: 0.85, sliding log 0.8; at -P 16: 0.45, "
              "sliding log 0.35; x Lua twin at -P 16: 4; usec x INCR: 3 for the fixed-size algorithms; "
              "sliding log at 10^6: 1.5 x limit 10); of issue 17 (memory: 1.15 x SET for a single-algorithm key, "
              "220 bytes for a three-rule RL.LIMIT key, 6 bytes per logged request at 100,000, MEMORY USAGE "
              "within 5% of the growth)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
