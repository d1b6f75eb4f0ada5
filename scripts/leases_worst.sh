#!/bin/bash
# The concurrency limiter's worst case (docs/concurrency.md):
#   scripts/leases_worst.sh target/release/libratelimit.so PORT
# 300k leases; refusals under a lowered limit; then the debug clock moves past their end: 100 DRYRUNs (the first counts the
# ended leases once), the one ACQUIRE that drops them all, then 2000 DRYRUNs; usec_per_call
# from INFO commandstats, and the memory the 300k leases took (INFO used_memory, MEMORY USAGE).
set -eu
SO=$1; PORT=$2
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --loadmodule "$SO" debug-clock yes concurrency-max-limit 1000000 >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
C="redis-cli -p $PORT"
for _ in $(seq 50); do $C ping >/dev/null 2>&1 && break; sleep 0.1; done
usec() {
    $C info commandstats | grep "cmdstat_rl.concurrency.acquire:" |
        sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
}
used() { $C info memory | grep '^used_memory:' | cut -d: -f2 | tr -d '\r'; }
$C rl.debug.clock set 1700000000000 >/dev/null
m0=$(used)
redis-benchmark -p "$PORT" -c 1 -P 64 -n 300000 -q RL.CONCURRENCY.ACQUIRE big 1000000 1h >/dev/null
m1=$(used)
echo "$($C rl.inspect big | tr '\n' ' ')"
echo "used_memory +$((m1 - m0)) bytes, MEMORY USAGE $($C memory usage big samples 0)"
# The limit lowered under them: a refusal finds when enough leases have ended (the
# (held - limit + 1)-th to end), a walk of held - limit leases in order of their ends.
$C config resetstat >/dev/null
redis-benchmark -p "$PORT" -c 1 -n 100 -q RL.CONCURRENCY.ACQUIRE big 1 1h >/dev/null
echo "100 refusals under limit 1 with 300k leases held: usec_per_call=$(usec)"
$C config resetstat >/dev/null
redis-benchmark -p "$PORT" -c 1 -n 2000 -q RL.CONCURRENCY.ACQUIRE big 999999 1h >/dev/null
echo "2000 refusals under limit 999999 (the first lease to end): usec_per_call=$(usec)"
$C rl.debug.clock advance 2h >/dev/null
$C config resetstat >/dev/null
redis-benchmark -p "$PORT" -c 1 -n 100 -q RL.CONCURRENCY.ACQUIRE big 1000000 1h DRYRUN >/dev/null
echo "100 DRYRUNs over 300k ended leases: usec_per_call=$(usec)"
$C config resetstat >/dev/null
$C RL.CONCURRENCY.ACQUIRE big 1000000 1h >/dev/null
echo "the ACQUIRE that drops them: usec_per_call=$(usec)"
$C config resetstat >/dev/null
redis-benchmark -p "$PORT" -c 1 -n 2000 -q RL.CONCURRENCY.ACQUIRE big 1000000 1h DRYRUN >/dev/null
echo "2000 DRYRUNs after: usec_per_call=$(usec)"
