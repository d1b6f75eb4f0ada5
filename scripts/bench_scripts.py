#!/usr/bin/env python3
"""`make bench`, the script backend (issue 28): each algorithm's script (clients/lua/, as the
packages assemble and send it) against the module's command and against the Lua library users
run today for it, on one server, in one run:

  - fixed window: rate-limiter-flexible's RateLimiterRedis (npm; clients/node's devDependency).
    Its script is taken from its installed code at run time (its constructor hands it to an
    ioredis-style `defineCommand`, caught here), and sent with the arguments its `_upsert` sends
    for one point: `points secDuration limit duration`. ioredis sends it by EVALSHA; node-redis
    (clients/node's client) by EVAL, the whole text each call: both are measured.
  - sliding log: `limits` (PyPI) MovingWindowRateLimiter on its RedisStorage (a list of float
    timestamps): its acquire script, `timestamp limit expiry amount`;
  - sliding window: `limits`' SlidingWindowCounterRateLimiter (two string counters per subject,
    the current and the previous window): its acquire script, `limit expiry amount`.
    The `limits` scripts, their SHAs and key names come from the library's own objects (its
    RedisStorage registers them on the server, its RateLimitItem and storage name the keys),
    and the arguments are those its `acquire_entry` / `acquire_sliding_window_entry` send; a
    probe call through the library's own `hit()` checks that it writes the keys named here.
    Each is one EVALSHA per hit, no other round trip.

Measured, BENCH_REPS times (default 3), interleaved, the best taken:
  (a) the server's time per call, usec_per_call from INFO commandstats (CONFIG RESETSTAT
      before each case): BENCH_SCRIPTS_CALLS calls (20,000) over 200 keys, round-robin, fresh
      keys, limits of 1,000 a minute so that every call is admitted; a denied-heavy variant
      (limit 10: 90 of each key's 100 calls denied); and the sliding log at 10 entries a key
      (20,000 calls over 2,000 keys) beside 100;
  (b) calls a second with the server saturated: `redis-benchmark -c 50 -P 16 -r 100000`
      (BENCH_SCRIPTS_N requests, 200,000), the same words with a `__rand_int__` key;
  (c) bytes per subject: MEMORY USAGE (SAMPLES 0) of every key a subject has, after typical
      use: 10 calls; for the fixed and sliding windows 10 more a window later (1 s windows for
      this part), so that the sliding window has its previous window (the library's second
      key); the sliding log after 10 and 100 calls in its window. Key names are of equal length
      across the contenders (ours and the module's padded to the library's).
  And, for the three with a library, a floor: the Redis commands the script's admitted call
  makes (HMGET, TIME, HSET, PEXPIRE; the log: two HMGETs), alone in a script with no other
  logic. The script's time above its floor is its Lua; the floor above the library's time is
  what the layout and the server's clock cost.

BENCH_SERVERS: a comma-separated list of redis7 (/usr/bin/redis-server, the default), redis8
(target/servers/redis-8.2.3/redis-server), valkey8 (target/servers/valkey-8.1.8/valkey-server).
Each gets its own server with the module (target/release/libratelimit.so, or
$RATELIMIT_MODULE) on a free loopback port, stopped by its PID. Prints the tables and writes
them to target/bench/scripts.md. Needs clients/python/.venv (scripts/deps.sh test: redis-py
and `limits`) and clients/node/node_modules (rate-limiter-flexible).
"""

import csv
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402 (the same RESP client, port picking and server)
from bench import Client  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The scripts as the packages send them: the package's own assembly, of this tree's scripts.
os.environ.setdefault("RATELIMIT_SCRIPTS_DIR", os.path.join(ROOT, "clients/lua"))
from ratelimit_redis_module.scripts import script_source  # noqa: E402
MODULE = os.environ.get("RATELIMIT_MODULE", os.path.join(ROOT, "target/release/libratelimit.so"))
OUT = os.path.join(ROOT, "target/bench")
NODE = os.path.join(ROOT, "clients/node")
REPS = int(os.environ.get("BENCH_REPS", "3"))
CALLS = int(os.environ.get("BENCH_SCRIPTS_CALLS", "20000"))
REQUESTS = int(os.environ.get("BENCH_SCRIPTS_N", "200000"))
KEYS = 200
BENCH_KEYS = 100_000
CLIENTS = 50
PIPELINE = 16
SERVERS = {
    "redis7": "/usr/bin/redis-server",
    "redis8": os.path.join(ROOT, "target/servers/redis-8.2.3/redis-server"),
    "valkey8": os.path.join(ROOT, "target/servers/valkey-8.1.8/valkey-server"),
}
BENCHMARK = "/usr/bin/redis-benchmark"


def rlflx_script():
    """rate-limiter-flexible's RateLimiterRedis script, as its constructor hands it to the
    client (ioredis's defineCommand), from the installed package."""
    js = ("const R = require('rate-limiter-flexible/lib/RateLimiterRedis.js'); let lua;"
          "new R({storeClient: {defineCommand(name, o) { lua = o.lua; }}, points: 1, duration: 1});"
          "process.stdout.write(lua);")
    out = subprocess.run(["node", "-e", js], cwd=NODE, check=True, capture_output=True, text=True)
    version = subprocess.run(["node", "-p", "require('rate-limiter-flexible/package.json').version"],
                             cwd=NODE, check=True, capture_output=True, text=True).stdout.strip()
    return out.stdout, version


class Server(bench.Server):
    """bench.py's server, of the binary `binary`, named `name`, its version read."""

    def __init__(self, name, binary):
        super().__init__(MODULE, log="scripts-%s.log" % name, binary=binary)
        self.name = name
        self.version = self.client.info("server").get("redis_version", "?")
        self.valkey = self.client.info("server").get("valkey_version")


def padded(prefix, i, length):
    return prefix + str(i).zfill(length - len(prefix))


class Case:
    """One contender for one algorithm: `words(keys, limit, window_s)` gives the command's words
    for one call on one subject (keys: the subject's key names), `stat` its commandstats name.
    A floor is measured admitted only (the server's time per call, nothing else)."""

    def __init__(self, algo, who, stat, words, names, floor=False):
        self.algo, self.who, self.stat, self.words, self.names = algo, who, stat, words, names
        self.floor = floor


# The floors: the Redis commands a script's admitted plain call makes, in a script with no other
# logic (no parsing, no checks, no arithmetic), on a hash of the script's fields. What is left
# of the script's time above its floor is its Lua.
FLOORS = {
    "fixed window": """local key = KEYS[1]
local h = redis.pcall('HMGET', key, 'a', 'k', 'p', 's', 'c')
local t = redis.call('TIME')
local c = tonumber(h[5] or '0') + 1
redis.call('HSET', key, 'c', string.format('%d', c))
redis.call('PEXPIRE', key, 60000)
return { 1, 1000, 1000 - c, 0, 60000 }
""",
    "sliding window": """local key = KEYS[1]
local h = redis.pcall('HMGET', key, 'a', 'k', 'p', 's', 'c', 'v')
local t = redis.call('TIME')
local c = tonumber(h[5] or '0') + 1
redis.call('HSET', key, 'c', string.format('%d', c))
redis.call('PEXPIRE', key, 60000)
return { 1, 1000, 1000 - c, 0, 60000 }
""",
    "sliding log": """local key = KEYS[1]
local g = redis.pcall('HMGET', key, 'a', 'k', 'p', 'b', 'u', 'h', 'e', 'z')
local e = tonumber(g[7] or '1')
local got = redis.call('HMGET', key, 1, 2, 3, 4, e - 1)
local t = redis.call('TIME')
local f = string.format
redis.call('HSET', key, 'e', f('%d', e + 1), f('%d', e), f('%d %d', e * 97, e))
redis.call('PEXPIRE', key, 60000)
return { 1, 1000, 1000 - e, 0, 60000 }
""",
}


def build_cases(client, limits_lib):
    """The contenders, per algorithm: (algorithm, [Case]). `names(i, limit, window_s)` gives the
    key names of subject i."""
    import limits as L

    shas = {}
    for name in ("gcra", "tokenbucket", "fixedwindow", "leakybucket", "slidingwindow", "slidinglog", "warmup"):
        shas[name] = client.cmd("SCRIPT", "LOAD", script_source(name)).decode()
    rlflx, rlflx_version = rlflx_script()
    rlflx_sha = client.cmd("SCRIPT", "LOAD", rlflx).decode()
    storage = limits_lib["storage"]
    mw_sha = storage.lua_acquire_moving_window.sha
    sw_sha = storage.lua_acquire_sliding_window.sha
    client.cmd("SCRIPT", "LOAD", storage.SCRIPT_ACQUIRE_MOVING_WINDOW)
    client.cmd("SCRIPT", "LOAD", storage.SCRIPT_ACQUIRE_SLIDING_WINDOW)

    def item(limit, window_s):
        return L.RateLimitItemPerSecond(limit, window_s)

    def subject(i):
        return "user" + str(i).zfill(6)  # i may be redis-benchmark's __rand_int__

    # The libraries' key names (for subject i), and ours of the same length.
    def rlflx_names(i, limit, window_s):
        return ["rlflx:" + subject(i)]

    def mw_names(i, limit, window_s):
        return [storage.prefixed_key(item(limit, window_s).key_for(subject(i)))]

    def sw_names(i, limit, window_s):
        k = item(limit, window_s).key_for(subject(i))
        return [storage.prefixed_key(storage._previous_window_key(k)),
                storage.prefixed_key(storage._current_window_key(k))]

    def ours(prefix, length_of):
        return lambda i, limit, window_s: [padded(prefix, i, len(length_of(i, limit, window_s)[-1]))]

    def plain(prefix):
        return lambda i, limit, window_s: [padded(prefix, i, 16)]

    def dur(window_s):
        return "%ds" % window_s

    algos = []

    def module_and_script(algo, command, script, params, names_m, names_s):
        return [
            Case(algo, "module", command, lambda k, lim, w: [command, k[0], *params(lim, w)], names_m),
            Case(algo, "script", "evalsha",
                 lambda k, lim, w: ["EVALSHA", shas[script], "1", k[0], *params(lim, w)], names_s),
        ]

    algos.append(("GCRA", module_and_script(
        "GCRA", "RL.GCRA", "gcra", lambda lim, w: [str(lim), str(lim), dur(w)], plain("m:gcra:"), plain("s:gcra:"))))
    algos.append(("token bucket", module_and_script(
        "token bucket", "RL.TOKENBUCKET", "tokenbucket", lambda lim, w: [str(lim), str(lim), dur(w)],
        plain("m:tb:"), plain("s:tb:"))))
    algos.append(("fixed window", module_and_script(
        "fixed window", "RL.FIXEDWINDOW", "fixedwindow", lambda lim, w: [str(lim), dur(w)],
        ours("m:fw:", rlflx_names), ours("s:fw:", rlflx_names)) + [
        # RateLimiterRedis._upsert(key, 1, duration ms): [key, points, secDuration, this.points, this.duration]
        Case("fixed window", "rate-limiter-flexible %s (ioredis: EVALSHA)" % rlflx_version, "evalsha",
             lambda k, lim, w: ["EVALSHA", rlflx_sha, "1", k[0], "1", str(w), str(lim), str(w)], rlflx_names),
        Case("fixed window", "rate-limiter-flexible %s (node-redis: EVAL)" % rlflx_version, "eval",
             lambda k, lim, w: ["EVAL", rlflx, "1", k[0], "1", str(w), str(lim), str(w)], rlflx_names),
    ]))
    algos.append(("leaky bucket", module_and_script(
        "leaky bucket", "RL.LEAKYBUCKET", "leakybucket", lambda lim, w: [str(lim), str(lim), dur(w)],
        plain("m:lb:"), plain("s:lb:"))))
    algos.append(("sliding window", module_and_script(
        "sliding window", "RL.SLIDINGWINDOW", "slidingwindow", lambda lim, w: [str(lim), dur(w)],
        ours("m:sw:", sw_names), ours("s:sw:", sw_names)) + [
        # acquire_sliding_window_entry: [previous, current], [limit, expiry, amount]
        Case("sliding window", "limits %s SlidingWindowCounter" % L.__version__, "evalsha",
             lambda k, lim, w: ["EVALSHA", sw_sha, "2", k[0], k[1], str(lim), str(w), "1"], sw_names),
    ]))
    algos.append(("sliding log", module_and_script(
        "sliding log", "RL.SLIDINGLOG", "slidinglog", lambda lim, w: [str(lim), dur(w)],
        ours("m:sl:", mw_names), ours("s:sl:", mw_names)) + [
        # acquire_entry: [key], [time.time(), limit, expiry, amount]; redis-py sends a float's repr
        Case("sliding log", "limits %s MovingWindow" % L.__version__, "evalsha",
             lambda k, lim, w: ["EVALSHA", mw_sha, "1", k[0], repr(time.time()), str(lim), str(w), "1"], mw_names),
    ]))
    for algo, cases in algos:
        if algo in FLOORS:
            sha = client.cmd("SCRIPT", "LOAD", FLOORS[algo]).decode()
            script = [c for c in cases if c.who == "script"][0]
            cases.append(Case(algo, "floor: the script's commands alone", "evalsha",
                              (lambda sha: lambda k, lim, w: ["EVALSHA", sha, "1", k[0]])(sha), script.names,
                              floor=True))
    algos.append(("warm-up", module_and_script(
        "warm-up", "RL.WARMUP", "warmup", lambda lim, w: [str(lim * 1000), dur(w), dur(w)],
        plain("m:wu:"), plain("s:wu:"))))
    return algos


def check_library_keys(port, limits_lib, algos):
    """Through the libraries' own hit(): the keys they write are the ones named here."""
    import limits as L

    client = Client(port)
    client.cmd("FLUSHALL", "SYNC")
    item = L.RateLimitItemPerSecond(1000, 60)
    limits_lib["moving"].hit(item, "user%06d" % 0)
    limits_lib["counter"].hit(item, "user%06d" % 0)
    for algo, cases in algos:
        for case in cases:
            if case.who.startswith("limits"):
                name = case.names(0, 1000, 60)[-1]
                assert client.cmd("EXISTS", name) == 1, "limits wrote no key %s" % name
    client.cmd("FLUSHALL", "SYNC")


def usec_per_call(client, stat):
    fields = client.info("commandstats").get("cmdstat_" + stat.lower())
    if not fields:
        return float("nan"), 0
    d = dict(kv.split("=") for kv in fields.split(","))
    return float(d["usec_per_call"]), int(d["calls"])


def server_time(client, case, keys, calls, limit, window_s):
    """usec_per_call of `calls` calls over `keys` fresh keys, round-robin; and the share of
    calls admitted (for the report)."""
    client.cmd("FLUSHALL", "SYNC")
    names = [case.names(i, limit, window_s) for i in range(keys)]
    commands = [case.words(names[n % keys], limit, window_s) for n in range(calls)]
    # One call first, outside the stats: it must not be an error (a script is loaded).
    first = client.cmd(*commands[0])
    client.cmd("FLUSHALL", "SYNC")
    client.cmd("CONFIG", "RESETSTAT")
    admitted = 0
    batch = 500
    for start in range(0, len(commands), batch):
        chunk = commands[start:start + batch]
        client.sock.sendall(b"".join(client.encode(*c) for c in chunk))
        for _ in chunk:
            r = client.read()
            if (isinstance(r, list) and r and r[0] == 1) or r == 1:
                admitted += 1
            elif isinstance(r, list) and r and isinstance(r[0], int) and case.algo == "fixed window" \
                    and case.who.startswith("rate"):
                admitted += r[0] <= limit
    usec, n = usec_per_call(client, case.stat)
    assert n == calls, (case.who, case.algo, n, calls, first)
    return usec, admitted / calls


def saturated(server, case, limit, window_s):
    """Calls a second, redis-benchmark -c 50 -P 16 over 100,000 random keys."""
    client = server.client
    client.cmd("FLUSHALL", "SYNC")
    names = case.names("__rand_int__", limit, window_s)
    # The `limits` sliding window's two keys: redis-benchmark draws each __rand_int__ on its own,
    # so a call's previous-window key is another subject's. Within a run (shorter than a window)
    # no subject has a previous window either way: the same calls as with matching keys.
    words = case.words(names, limit, window_s)
    client.cmd("CONFIG", "RESETSTAT")
    cmd = [BENCHMARK, "-h", "127.0.0.1", "-p", str(server.port), "-c", str(CLIENTS), "-n", str(REQUESTS),
           "-r", str(BENCH_KEYS), "-P", str(PIPELINE), "--csv", *words]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [row for row in csv.reader(out.splitlines()) if row]
    rps = float(rows[-1][1])
    usec, n = usec_per_call(client, case.stat)
    assert n >= REQUESTS, (case.who, case.algo, n, out)
    return rps, usec


def memory(client, case, hits, limit, window_s, keys=100, again=False):
    """Mean bytes per subject (every key it has) after `hits` calls each; with `again`, `hits`
    more a window later."""
    client.cmd("FLUSHALL", "SYNC")
    names = [case.names(i, limit, window_s) for i in range(keys)]
    for _ in range(hits):
        client.pipeline([case.words(n, limit, window_s) for n in names])
    if again:
        time.sleep(window_s + 0.1)
        for _ in range(hits):
            client.pipeline([case.words(n, limit, window_s) for n in names])
    total, present = 0, 0
    for n in names:
        for k in n:
            u = client.cmd("MEMORY", "USAGE", k, "SAMPLES", "0")
            if u is not None:
                total += u
                present += 1
    return total / keys, present / keys


def run_server(name, binary):
    server = Server(name, binary)
    try:
        return measure(server)
    finally:
        server.stop()


def measure(server):
    import limits as L

    storage = L.storage.RedisStorage("redis://127.0.0.1:%d" % server.port)
    lib = {"storage": storage, "moving": L.strategies.MovingWindowRateLimiter(storage),
           "counter": L.strategies.SlidingWindowCounterRateLimiter(storage)}
    client = server.client
    algos = build_cases(client, lib)
    check_library_keys(server.port, lib, algos)

    # (variant label, keys, limit, applies to)
    variants = [
        ("admitted", KEYS, 1000, None),
        ("denied", KEYS, 10, None),
        ("admitted, 10 a key", CALLS // 10, 1000, "sliding log"),
    ]
    usec = {}   # (algo, who, variant) -> best
    share = {}
    rps = {}    # (algo, who) -> (best calls/s, usec at saturation)
    for rep in range(REPS):
        for algo, cases in algos:
            for case in cases:
                for variant, keys, limit, only in variants:
                    if (only and only != algo) or (case.floor and variant != "admitted"):
                        continue
                    u, a = server_time(client, case, keys, CALLS, limit, 60)
                    k = (algo, case.who, variant)
                    usec[k] = min(usec.get(k, u), u)
                    share[k] = a
        for algo, cases in algos:
            for case in cases:
                if case.floor:
                    continue
                r, u = saturated(server, case, 1000, 60)
                k = (algo, case.who)
                best = rps.get(k)
                rps[k] = (max(best[0], r), min(best[1], u)) if best else (r, u)
    mem = {}
    for algo, cases in algos:
        for case in cases:
            if case.who.endswith("EVAL)") or case.floor:
                continue
            if algo == "sliding log":
                mem[(algo, case.who, "10")] = memory(client, case, 10, 1000, 60)
                mem[(algo, case.who, "100")] = memory(client, case, 100, 1000, 60)
            elif algo in ("fixed window", "sliding window"):
                # A window later too: the library's second key (the previous window), our
                # previous count; a fixed window's next window.
                mem[(algo, case.who, "")] = memory(client, case, 10, 1000, 1, again=True)
            else:
                mem[(algo, case.who, "")] = memory(client, case, 10, 1000, 60)
    client.cmd("FLUSHALL", "SYNC")
    return render(server, algos, usec, share, rps, mem)


def fmt(x, digits=2):
    return "%.*f" % (digits, x)


def render(server, algos, usec, share, rps, mem):
    label = ("Valkey %s" % server.valkey) if server.valkey else ("Redis %s" % server.version)
    out = ["### %s" % label, ""]
    out.append("| algorithm | contender | µs/call admitted | µs/call denied-heavy | calls/s saturated | µs/call saturated | bytes/subject |")
    out.append("|---|---|---|---|---|---|---|")
    for algo, cases in algos:
        for case in cases:
            u = usec[(algo, case.who, "admitted")]
            if case.floor:
                out.append("| %s | %s | %s | | | | |" % (algo, case.who, fmt(u)))
                continue
            d = usec[(algo, case.who, "denied")]
            r, us = rps[(algo, case.who)]
            if algo == "sliding log":
                m10 = mem.get((algo, case.who, "10"))
                m100 = mem.get((algo, case.who, "100"))
                u10 = usec[(algo, case.who, "admitted, 10 a key")]
                ucell = "%s (10 a key: %s)" % (fmt(u), fmt(u10))
                mcell = "%.0f (100 entries), %.0f (10)" % (m100[0], m10[0]) if m10 else "n/a"
            else:
                ucell = fmt(u)
                m = mem.get((algo, case.who, ""))
                mcell = ("%.0f" % m[0] + (" (%.1f keys)" % m[1] if m[1] > 1.01 else "")) if m else "as above"
            out.append("| %s | %s | %s | %s (%.0f%% admitted) | %.0f | %s | %s |" % (
                algo, case.who, ucell, fmt(d), 100 * share[(algo, case.who, "denied")], r, fmt(us), mcell))
    out.append("")
    # The targets: the script against the library, and the module's lead.
    out.append("| algorithm | library | script ÷ library, µs/call (admitted; denied-heavy) | script ÷ library, bytes | "
               "module's lead over the script (µs) | over the library (µs) | calls/s: module, script, library |")
    out.append("|---|---|---|---|---|---|---|")
    for algo, cases in algos:
        libs = [c for c in cases if c.who not in ("module", "script") and not c.floor]
        for lib in libs:
            def u(who, v="admitted"):
                return usec[(algo, who, v)]
            mk = "10" if algo == "sliding log" else ""
            ms = mem.get((algo, "script", mk))
            ml = mem.get((algo, lib.who, mk))
            bratio = "%.2f" % (ms[0] / ml[0]) if ms and ml else "as above"
            out.append("| %s | %s | %.2f; %.2f | %s | %.1f× | %.1f× | %.0f, %.0f, %.0f |" % (
                algo, lib.who, u("script") / u(lib.who), u("script", "denied") / u(lib.who, "denied"), bratio,
                u("script") / u("module"), u(lib.who) / u("module"),
                rps[(algo, "module")][0], rps[(algo, "script")][0], rps[(algo, lib.who)][0]))
    out.append("")
    return "\n".join(out)


def main():
    if not os.path.exists(MODULE):
        sys.exit("no module at %s (cargo build --release)" % MODULE)
    wanted = [s.strip() for s in os.environ.get("BENCH_SERVERS", "redis7").split(",") if s.strip()]
    for w in wanted:
        if w not in SERVERS:
            sys.exit("BENCH_SERVERS: %r is none of %s" % (w, ", ".join(SERVERS)))
    try:
        import limits  # noqa: F401
    except ImportError:
        sys.exit("needs `limits` (scripts/deps.sh test installs it into clients/python/.venv)")
    started = time.time()
    sections = []
    for w in wanted:
        if not os.path.exists(SERVERS[w]):
            print("skipped %s: %s is missing" % (w, SERVERS[w]), file=sys.stderr)
            continue
        sections.append(run_server(w, SERVERS[w]))
    head = [
        "## The script backend against the module and the Lua libraries",
        "",
        "`%s`, %d cores, %.0f s. µs/call: INFO commandstats usec_per_call, %d calls over %d fresh keys "
        "round-robin (100 a key), limit 1,000 a minute (every call admitted) and 10 (denied-heavy), the sliding log "
        "also over %d keys (10 entries a key). calls/s: `redis-benchmark -c %d -P %d -r %d -n %d`, limit 1,000 a "
        "minute. bytes/subject: MEMORY USAGE of every key a subject has after 10 calls (limit 1,000 a minute); the "
        "fixed and sliding windows after 10 more a window later (1 s windows), the sliding log after 10 and 100 "
        "calls in its window; key names of equal length. "
        "Best of %d interleaved repetitions." % (
            "clients/python/.venv/bin/python scripts/bench_scripts.py", os.cpu_count(), time.time() - started,
            CALLS, KEYS, CALLS // 10, CLIENTS, PIPELINE, BENCH_KEYS, REQUESTS, REPS),
        "",
    ]
    text = "\n".join(head + sections)
    print(text)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "scripts.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
