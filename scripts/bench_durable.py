"""What the packages' `durable` option costs a request: an admission with `WAIT 1 100`
pipelined after it (one round trip, answered once the replica has the write) against the same
admission alone, on a primary with one replica, both on loopback.

Usage: clients/python/.venv/bin/python scripts/bench_durable.py   (make bench runs it)
Starts a primary and a replica (bench.py's Server, free loopback ports, stopped by PID); one
redis-py client sends BENCH_DURABLE_N requests per case (default 5000), cases alternating in
rounds of 500 so drift on the shared machine falls on both; p50 and p99 per case. Report also
in target/bench/durable.md."""

import os
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import OUT, Server  # noqa: E402

N = int(os.environ.get("BENCH_DURABLE_N", "5000"))
ROUND = 500


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def main():
    primary = Server(log="durable-primary.log")
    replica = Server(log="durable-replica.log")
    try:
        with redis.Redis(port=replica.port) as r:
            r.execute_command("REPLICAOF", "127.0.0.1", primary.port)
            deadline = time.time() + 20
            while r.info("replication")["master_link_status"] != "up":
                if time.time() > deadline:
                    sys.exit("the replica did not sync")
                time.sleep(0.05)
        client = redis.Redis(port=primary.port, protocol=2)
        times = {"alone": [], "with WAIT 1 100": []}
        i = 0
        while len(times["alone"]) < N:
            for case, samples in times.items():
                for _ in range(ROUND):
                    i += 1
                    key = f"d:{i % 1000}"
                    start = time.perf_counter()
                    if case == "alone":
                        reply = client.execute_command("RL.GCRA", key, "1000000000", "1000000000", "1s")
                    else:
                        pipe = client.pipeline(transaction=False)
                        pipe.execute_command("RL.GCRA", key, "1000000000", "1000000000", "1s")
                        pipe.execute_command("WAIT", 1, 100)
                        reply, acked = pipe.execute()
                        assert acked == 1, acked
                    samples.append(time.perf_counter() - start)
                    assert reply[0] == 1
        lines = [
            "# What `durable` costs a request",
            "",
            f"RL.GCRA on a primary with one replica, loopback, one redis-py client, {N} requests a case:",
            "",
            "| case | p50 | p99 |",
            "|---|---|---|",
        ]
        p50 = {}
        for case, samples in times.items():
            s = sorted(samples)
            p50[case] = percentile(s, 50)
            lines.append(f"| {case} | {percentile(s, 50) * 1e6:.0f} µs | {percentile(s, 99) * 1e6:.0f} µs |")
        lines += ["", f"WAIT adds {(p50['with WAIT 1 100'] - p50['alone']) * 1e6:.0f} µs at p50.", ""]
        report = "\n".join(lines)
        print(report)
        with open(os.path.join(OUT, "durable.md"), "w") as f:
            f.write(report)
    finally:
        replica.stop()
        primary.stop()
        # The replica's sync wrote dump.rdb into target/bench, where every bench server starts:
        # none may load it.
        try:
            os.remove(os.path.join(OUT, "dump.rdb"))
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main()
