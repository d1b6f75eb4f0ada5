#!/bin/bash
# The concurrency limiter's cost as its key grows (docs/concurrency.md):
#   scripts/leases_bench.sh target/release/libratelimit.so PORT [load arguments...]
# starts redis-server on 127.0.0.1:PORT with the module, builds one key to 200, 30k and 300k
# leases (pipelined ACQUIREs, timed), and at each size reads usec_per_call from INFO
# commandstats for 2000 ACQUIREs renewing one token (the key keeps its size) and 2000
# DRYRUNs. Pass `concurrency-max-limit 1000000` to a module that has the setting.
set -eu
SO=$1; PORT=$2; shift 2
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --loadmodule "$SO" "$@" >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
C="redis-cli -p $PORT"
for _ in $(seq 50); do $C ping >/dev/null 2>&1 && break; sleep 0.1; done
usec() {
    $C info commandstats | grep "cmdstat_rl.concurrency.acquire:" |
        sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
}
held=0
for n in 200 30000 300000; do
    t0=$(date +%s.%N)
    redis-benchmark -p "$PORT" -c 1 -P 64 -n $((n - held)) -q \
        RL.CONCURRENCY.ACQUIRE big 1000000 1d >/dev/null
    t1=$(date +%s.%N)
    echo "built $held -> $n leases in $(echo "$t1 - $t0" | bc) s"
    $C RL.CONCURRENCY.ACQUIRE big 1000000 1d ID me >/dev/null
    held=$((n + 1))
    $C config resetstat >/dev/null
    redis-benchmark -p "$PORT" -c 1 -n 2000 -q RL.CONCURRENCY.ACQUIRE big 1000000 1d ID me >/dev/null
    echo "n=$n ACQUIRE (renewing) usec_per_call=$(usec)"
    $C config resetstat >/dev/null
    redis-benchmark -p "$PORT" -c 1 -n 2000 -q RL.CONCURRENCY.ACQUIRE big 1000000 1d DRYRUN >/dev/null
    echo "n=$n ACQUIRE DRYRUN usec_per_call=$(usec)"
    echo "n=$n MEMORY USAGE $($C memory usage big samples 0)"
done
