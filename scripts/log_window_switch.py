"""usec per RL.SLIDINGLOG call on a ~999k-entry log: windows alternating 1m/10m vs one window.

Usage: python3 scripts/log_window_switch.py [target/release/libratelimit.so]
Starts its own redis-server on a free loopback port (debug clock frozen), stops it by PID."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Server

module = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/libratelimit.so")
server = Server(module, ["debug-clock", "yes"])
c = server.client
try:
    c.cmd("RL.DEBUG.CLOCK", "SET", "1700000000000")
    LIMIT, FILL, N = 1_000_000, 996_000, 1000
    c.pipeline([("RL.SLIDINGLOG", "log", LIMIT, "1m")] * FILL, batch=10_000)
    def run(label, windows):
        c.cmd("CONFIG", "RESETSTAT")
        cmds = [("RL.SLIDINGLOG", "log", LIMIT, windows[i % len(windows)]) for i in range(N)]
        c.pipeline(cmds, batch=1)
        info = dict(zip(*[iter(c.cmd("RL.INSPECT", "log"))] * 2))
        print("%-28s usec_per_call %8.2f  (entries after: %d)" % (label, c.usec_per_call("RL.SLIDINGLOG"), info[b"entries"]))
    run("one window (1m)", ["1m"])
    run("alternating 1m / 10m", ["1m", "10m"])
    run("alternating again", ["1m", "10m"])
    run("one window again (1m)", ["1m"])
finally:
    server.stop()
