#!/usr/bin/env bash
# make test: the lints (rustfmt, clippy, rustdoc, as `make lint`), then the unit, property and
# doc tests of both crates (the algorithms and the module) once,
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
# The compiler's and the linters' rules first (what `make lint` runs): formatting, clippy with
# every warning an error (the crates' own lint attributes: no undocumented unsafe block, no
# public item of the algorithms crate without docs...), and the docs without a broken link.
cargo fmt --all -- --check || failed+=("rustfmt")
cargo clippy --release --workspace --all-targets -- -D warnings || failed+=("clippy")
RUSTDOCFLAGS="-D warnings" cargo doc -p ratelimit-algorithms --no-deps || failed+=("docs (algorithms)")
RUSTDOCFLAGS="-D warnings" cargo doc -p ratelimit --no-deps --document-private-items || failed+=("docs (module)")
# The Python package's sources under mypy --strict (what its `Typing :: Typed` promises).
clients/python/.venv/bin/python -m mypy --strict clients/python/src/ratelimit_redis_module || failed+=("mypy")
cargo test --release --workspace --lib || failed+=("unit and property tests")
cargo test --release -p ratelimit-algorithms --doc || failed+=("doc tests")
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
# The release's modules (make dist wrote them; scripts/check_dist.py checked their machine and
# glibc symbol versions): loaded into the servers users run, the smoke tests (the reported
# version, every algorithm's replies, GCRA's with a panic caught as an error (unwinding through
# Zig's linking), persistence through RDB, AOF and DUMP/RESTORE, damaged payloads refused).
# The x86_64 module into each server; the aarch64 one into Redis 8.2 for aarch64 under
# qemu-user, without damaged.rs, whose real-time expiries an emulated server is too slow for.
smoke=(--test version --test algorithms --test gcra --test persistence)
for server in "${servers[@]}" "$PWD/target/servers/redis-8.2.3-aarch64/redis-server"; do
  case "$server" in
    *aarch64*) machine=aarch64 tests=("${smoke[@]}") ;;
    *) machine=x86_64 tests=("${smoke[@]}" --test damaged) ;;
  esac
  # dist.sh emptied dist/ and check_dist.py named its files for Cargo.toml's version: one match.
  module=$(echo "$PWD"/dist/ratelimit-*-linux-$machine.so)
  echo "== $module in $server"
  if RATELIMIT_MODULE="$module" RATELIMIT_SERVER="$server" cargo test --release --no-fail-fast "${tests[@]}"; then
    summary+=("dist/ $machine module in $server: passed")
  else
    summary+=("dist/ $machine module in $server: FAILED")
    failed+=("dist/ $machine module in $server")
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
