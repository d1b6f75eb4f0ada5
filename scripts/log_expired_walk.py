"""usec per non-writing RL.SLIDINGLOG / RL.INSPECT call on a 1,000,000-entry log after expiry.

Usage: python3 scripts/log_expired_walk.py [target/release/libratelimit.so]
Starts its own redis-server on a free loopback port (debug clock frozen), stops it by PID.

Two cases, each on its own key with limit 1000000 and window 1h:
- all expired: 1,000,000 entries at one instant, the clock then advanced 2h;
- partial: 999,999 entries at one instant, 1 more 30 minutes later, the clock then advanced
  to 1h 1ms after the first instant (999,999 expired, 1 live).
Then 100 DRYRUN calls, 100 RL.INSPECT calls, and one admitted write (which drops the expired
entries), each measured by INFO commandstats usec_per_call."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Server

module = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/libratelimit.so")
server = Server(module, ["debug-clock", "yes"])
c = server.client
T0 = 1700000000000
LIMIT, N = 1_000_000, 100
try:
    def measure(label, key, cmds, command="RL.SLIDINGLOG"):
        c.cmd("CONFIG", "RESETSTAT")
        c.pipeline(cmds[1:], batch=1)
        reply = c.cmd(*cmds[0])  # the last call's reply, shown
        print("%-40s %-13s usec_per_call %9.2f  %r"
              % (label, command, c.usec_per_call(command), reply))

    def case(label, key, fill, live, now):
        c.cmd("RL.DEBUG.CLOCK", "SET", str(T0))
        c.pipeline([("RL.SLIDINGLOG", key, LIMIT, "1h")] * fill, batch=10_000)
        if live:
            c.cmd("RL.DEBUG.CLOCK", "SET", str(T0 + 30 * 60 * 1000))
            c.cmd("RL.SLIDINGLOG", key, LIMIT, "1h")
        c.cmd("RL.DEBUG.CLOCK", "SET", str(now))
        measure(label + ": DRYRUN x%d" % N, key, [("RL.SLIDINGLOG", key, LIMIT, "1h", "DRYRUN")] * N)
        measure(label + ": INSPECT x%d" % N, key, [("RL.INSPECT", key)] * N, "RL.INSPECT")
        measure(label + ": the write after", key, [("RL.SLIDINGLOG", key, LIMIT, "1h")])

    case("all expired", "all", LIMIT, False, T0 + 2 * 3600 * 1000)
    case("partial (999,999 + 1 live)", "partial", LIMIT - 1, True, T0 + 3600 * 1000 + 1)
finally:
    server.stop()
