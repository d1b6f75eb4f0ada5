#!/usr/bin/env bash
# make test: the unit and property tests of both crates (the algorithms and the module) once,
# then every integration test (the module's; the algorithms crate has none) against each
# server users run, in turn: Debian's Redis 7.0 (redis-server on PATH), then Redis 8.2 and
# Valkey 8.1 as scripts/servers.sh unpacked them. The tests start each server themselves
# ($RATELIMIT_SERVER names the binary) on free loopback ports. Every server's tests run even
# when one fails; the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

servers=(
  "$(command -v redis-server || echo redis-server)"
  "$PWD/target/servers/redis-8.2.3/redis-server"
  "$PWD/target/servers/valkey-8.1.8/valkey-server"
)

failed=()
cargo test --release --workspace --lib || failed+=("unit and property tests")
summary=()
for server in "${servers[@]}"; do
  version=$("$server" --version | grep -o -E '^(Redis|Valkey) server v=[0-9.]+' | sed 's/ server v=/ /')
  echo "== integration tests against $version ($server)"
  start=$(date +%s)
  if RATELIMIT_SERVER="$server" cargo test --release --no-fail-fast --test '*'; then
    summary+=("$version: passed in $(($(date +%s) - start)) s")
  else
    summary+=("$version: FAILED")
    failed+=("$version")
  fi
done
# The Python package's tests (pytest, real servers and uvicorn), once, against Redis 7.0.
echo "== Python package tests against ${servers[0]}"
if RATELIMIT_SERVER="${servers[0]}" clients/python/.venv/bin/python -m pytest clients/python/tests -q; then
  summary+=("Python package: passed")
else
  summary+=("Python package: FAILED")
  failed+=("Python package")
fi
# The Node client package's own tests (clients/node: node --test), once, against Redis 7.0:
# real servers and real HTTP, as the integration tests.
echo "== the Node client package's tests (clients/node)"
if (cd clients/node && RATELIMIT_SERVER="${servers[0]}" npm test); then
  summary+=("clients/node: passed")
else
  summary+=("clients/node: FAILED")
  failed+=("clients/node")
fi
printf '== %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  printf '== failed: %s\n' "${failed[@]}"
  exit 1
fi
