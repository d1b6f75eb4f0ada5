#!/usr/bin/env bash
# Instructions a command costs inside the server, counted by callgrind (deterministic, so it
# tells versions apart where wall-clock runs on a shared machine cannot).
#
#   scripts/callgrind_calls.sh MODULE.so TOP_SIZE SCOPE redis-benchmark-args...
#
# Starts redis-server (on PATH) under valgrind with the module on a free loopback port, sets
# ratelimit.top-size to TOP_SIZE ("-" leaves it: a module without the setting), sets the policy
# `api` (three tiers, never binding), runs `redis-benchmark -n 20000 -c 1 -P 16 ARGS...`, stops
# the server by PID and prints the instructions per call counted inside SCOPE: `dispatch` (the
# module's command dispatcher down) or `command` (Redis's processCommand down, which runs the
# command filters too). Used for docs/performance.md's Observability table.
set -euo pipefail
so=$(realpath "$1") top=$2 scope=$3
shift 3
case "$scope" in
  dispatch) toggle=RedisModuleCommandDispatcher ;;
  command) toggle=processCommand ;;
  *) echo "scope: dispatch or command" >&2; exit 2 ;;
esac
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
valgrind --tool=callgrind --toggle-collect="$toggle" --callgrind-out-file="$dir/cg.out" \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --dir "$dir" --loadmodule "$so" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 150); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.2; done
[ "$top" = - ] || redis-cli -p "$port" CONFIG SET ratelimit.top-size "$top" >/dev/null
redis-cli -p "$port" RL.POLICY.SET api GCRA 1000000 1000000 1s FIXEDWINDOW 1000000000 1h FIXEDWINDOW 1000000000 1d >/dev/null
redis-benchmark -p "$port" -n 20000 -c 1 -P 16 "$@" >/dev/null
kill "$pid"
wait "$pid" || true
total=$(grep -E '^(summary|totals):' "$dir/cg.out" | head -1 | awk '{print $2}')
echo "$((total / 20000)) instructions per call ($*)"
rm -rf "$dir"
