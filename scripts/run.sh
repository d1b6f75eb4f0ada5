#!/usr/bin/env bash
# Starts redis-server on 127.0.0.1:6379 in the foreground with the module loaded.
# Data (dump.rdb) goes to target/run so the work tree stays clean. Extra arguments are
# passed to redis-server (e.g. `make run ARGS="--appendonly yes"`).
set -euo pipefail
cd "$(dirname "$0")/.."
module="$PWD/target/release/libratelimit.so"
mkdir -p target/run
echo "ratelimit: redis-server on 127.0.0.1:6379 with $module; try: redis-cli RL.GCRA user:42 10 5 1s" >&2
exec redis-server --port 6379 --bind 127.0.0.1 --dir "$PWD/target/run" \
  --loadmodule "$module" "$@"
