"""What ADAPTIVE costs a lease: RL.CONCURRENCY.ACQUIRE then RL.CONCURRENCY.RELEASE (with
RTT) on keys that hold a few leases, with and without ADAPTIVE (each of the three
algorithms), against INCR and `SET ... PX` in the same run; server-side usec_per_call from
INFO commandstats, so the client's own time is left out.

Usage: python3 scripts/bench_adaptive.py   (make bench runs it); RATELIMIT_MODULE=old.so
BENCH_ADAPTIVE_PLAIN=1 measures the plain case of a module from before ADAPTIVE.
Starts its own server (bench.py's Server, a free loopback port, stopped by PID); per case
BENCH_ADAPTIVE_N acquire/release pairs (default 200000) over 1000 keys, pipelined; cases in
rounds so drift on the shared machine falls on all. Report also in target/bench/adaptive.md."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import OUT, Client, Server  # noqa: E402

N = int(os.environ.get("BENCH_ADAPTIVE_N", "200000"))
KEYS = 1000
ROUNDS = 4
CASES = [
    ("plain", []),
    ("ADAPTIVE AIMD", ["ADAPTIVE", "AIMD", "MIN", "1", "MAX", "1000"]),
    ("ADAPTIVE VEGAS", ["ADAPTIVE", "VEGAS", "MIN", "1", "MAX", "1000"]),
    ("ADAPTIVE GRADIENT2", ["ADAPTIVE", "GRADIENT2", "MIN", "1", "MAX", "1000"]),
]


# BENCH_ADAPTIVE_PLAIN=1: the plain case only (for a module from before ADAPTIVE, as a baseline).
# (RELEASE then sends no RTT, which such a module refuses.)
PLAIN = bool(os.environ.get("BENCH_ADAPTIVE_PLAIN"))
if PLAIN:
    CASES = CASES[:1]


def main():
    server = Server(log="adaptive.log")
    try:
        c = Client(server.port)
        # usec_per_call of each round (bench.py's Client reads it): every round makes the same
        # number of calls per case, so their mean is the whole run's.
        rounds = {(label, part): [] for label, _ in CASES for part in ("ACQUIRE", "RELEASE")}
        rounds.update({("INCR", ""): [], ("SET PX", ""): []})
        per_round = N // ROUNDS
        for r in range(ROUNDS):
            for label, options in CASES:
                c.cmd("CONFIG", "RESETSTAT")
                commands = []
                for i in range(per_round):
                    key = "a:%s:%d" % (label.replace(" ", "-"), i % KEYS)
                    token = "t%d" % i
                    commands.append(["RL.CONCURRENCY.ACQUIRE", key, "100", "1m", "ID", token] + options)
                    rtt = [] if PLAIN else ["RTT", "%dus" % (500 + i % 5000)]
                    commands.append(["RL.CONCURRENCY.RELEASE", key, token] + rtt)
                c.pipeline(commands)
                for part in ("ACQUIRE", "RELEASE"):
                    rounds[(label, part)].append(c.usec_per_call("RL.CONCURRENCY." + part))
            for label, name, make in (
                ("INCR", "INCR", lambda i: ["INCR", "i:%d" % (i % KEYS)]),
                ("SET PX", "SET", lambda i: ["SET", "s:%d" % (i % KEYS), "1", "PX", "60000"]),
            ):
                c.cmd("CONFIG", "RESETSTAT")
                c.pipeline([make(i) for i in range(per_round)])
                rounds[(label, "")].append(c.usec_per_call(name))
        mean = {case: sum(values) / len(values) for case, values in rounds.items()}
        incr = mean[("INCR", "")]
        lines = [
            "| case | µs per call (server) | × INCR |",
            "|---|---|---|",
            "| INCR | %.3f | 1.00 |" % incr,
        ]
        setpx = mean[("SET PX", "")]
        lines.append("| SET ... PX | %.3f | %.2f |" % (setpx, setpx / incr))
        for label, _ in CASES:
            for part in ("ACQUIRE", "RELEASE"):
                per = mean[(label, part)]
                lines.append("| %s %s | %.3f | %.2f |" % (part, label, per, per / incr))
        report = "\n".join(lines)
        print(report)
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "adaptive.md"), "w") as f:
            f.write(report + "\n")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
