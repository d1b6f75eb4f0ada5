#!/usr/bin/env bash
# make test: the lints (rustfmt, clippy, rustdoc, mypy, the commit messages, as `make lint`),
# then the unit, property and doc tests of both crates (the algorithms and the module) once
# (the packages' suites with the first server run beside them from the start, launch below);
# then, against each of the six servers users run (Debian's Redis 7.0 on PATH; Redis 7.4, 8.2
# and 8.10, Valkey 8.1 and 9.1 as scripts/servers.sh brought them): every integration test, both
# packages' test suites (on Redis 7.0 and Valkey 8.1; on Redis 8.2 and Valkey 9.1 the parts
# that can differ by server, package_files below), and the gateway's (on Redis 7.0, 8.2 and Valkey 8.1),
# all with the release's x86_64 module, make dist's, as users install it (not the host build of
# `make build`, which `make run` loads); the aarch64 one in an aarch64 Redis 8.2 under qemu-user
# with the smoke tests. The tests start each server themselves ($RATELIMIT_SERVER names the
# binary, $RATELIMIT_MODULE the module) on free loopback ports and stop it by PID, so the runs
# against different servers share nothing but the machine: they run side by side,
# RATELIMIT_TEST_JOBS at a time (6 by default: a run alone uses about half of one core, waiting
# on its servers the rest; with 4 the two cores stood idle a sixth of the time), each into a log
# of its own under target/test-logs, printed whole when it ends. Every run goes on when one
# fails; the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

servers=(
  "$(command -v redis-server || echo redis-server)"
  "$PWD/target/servers/redis-7.4.1/redis-server"
  "$PWD/target/servers/redis-8.2.3/redis-server"
  "$PWD/target/servers/redis-8.10.2/redis-server"
  "$PWD/target/servers/valkey-8.1.8/valkey-server"
  "$PWD/target/servers/valkey-9.1.2/valkey-server"
)
aarch64="$PWD/target/servers/redis-8.2.3-aarch64/redis-server"
# The module every run loads: make dist's for x86_64 (dist.sh emptied dist/ and check_dist.py
# named its files for Cargo.toml's version: one match). Built by cargo-zigbuild against glibc
# 2.17 and unwinding through the system's libgcc_s (dist.sh), it is what users load; testing the
# host build instead left the release to the smoke tests alone, and made make test build the
# module twice (`cargo build` before make dist: 177 s of CPU, 60 more than the tests' build
# takes without it).
RATELIMIT_MODULE="$(echo "$PWD"/dist/ratelimit-*-linux-x86_64.so)"
[ -f "$RATELIMIT_MODULE" ] || { echo "make test: no x86_64 module in dist/ (make dist writes it)" >&2; exit 1; }
export RATELIMIT_MODULE

failed=()
summary=()
# One step in the foreground, its time in the summary.
step() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  if "$@"; then
    summary+=("$name: passed in $((SECONDS - start)) s")
  else
    summary+=("$name: FAILED")
    failed+=("$name")
  fi
}
started=$SECONDS
# Every cargo run below goes through make dist's cargo-zigbuild (scripts/zigbuild.sh) for the
# release's x86_64 target, with its settings, so that cargo reuses what make dist compiled: the
# build scripts' runs (ring's C, bindgen's bindings of redis-module), the build scripts and proc
# macros (syn, serde_derive, bindgen...) and for the tests every dependency. Plain cargo (as
# `make lint` runs, which needs no make dist) compiled all of them once more for the host.
cargo_x86=(bash scripts/zigbuild.sh)
x86=(--release --locked --target x86_64-unknown-linux-gnu.2.17)

# The examples in the docs of the workspace's libraries (the algorithms crate's; the module is a
# cdylib, whose docs have none to run), with the same dependencies as the tests. Among the runs
# side by side below: on a fresh machine Zig fills a cache of its own for rustdoc's links (25 s
# on one core the first time, a second after).
doc_tests() {
  "${cargo_x86[@]}" test "${x86[@]}" --workspace --doc
}

version_of() {
  "$1" --version | grep -o -E '^(Redis|Valkey) server v=[0-9.]+' | sed 's/ server v=/ /'
}
# A server that comes with other modules (Redis 7.4's, the Redis Stack's, in modules/ beside
# it): tests/integration/other_modules.rs loads ours beside them.
# Every part at once (the binary's two test threads go from one part's tests to the next
# without waiting for a part's last test): on Redis 8.2, alone on the machine, 155 and 158 s
# against 178 and 174 s part by part (main.rs's modules one after another, as when each was a
# binary of its own), the CPU the same (77 and 77 s against 77 and 75).
# damaged.rs RESTOREs 80,000 mutations and starts 500 damaged RDB files (16 s of CPU, a fifth of
# a run): all of them with the first server; every fourth with each of the others, each from
# an offset of its own (its place in the list, modulo 4), so that the other five together try
# each one again (16.2 s of CPU a run against 6.7 on Valkey 8.1: 47 s less over the five).
integration() {
  local others i
  others=$(find "$(dirname "$1")/modules" -name '*.so' 2>/dev/null | sort | paste -sd:)
  for i in "${!servers[@]}"; do [ "${servers[$i]}" = "$1" ] && break; done
  local -a share=()
  ((i == 0)) || share=(RATELIMIT_DAMAGED_STRIDE=4 "RATELIMIT_DAMAGED_OFFSET=$((i % 4))")
  env "${share[@]}" RATELIMIT_OTHER_MODULES="$others" RATELIMIT_SERVER="$1" "$integration_bin"
}
# The release's aarch64 module (make dist wrote it; scripts/check_dist.py checked its machine
# and glibc symbol versions) in Redis 8.2 for aarch64 under qemu-user: the smoke tests (the
# reported version, every algorithm's replies, GCRA's with a panic caught as an error, unwinding
# through the system's libgcc_s, persistence through RDB, AOF and DUMP/RESTORE), without
# damaged.rs, whose real-time expiries an emulated server is too slow for. The x86_64 module
# runs every integration test above, on every server.
smoke() {
  # The parts of tests/integration/ by their module paths (a test runs when its name holds one).
  RATELIMIT_MODULE="$(echo "$PWD"/dist/ratelimit-*-linux-aarch64.so)" RATELIMIT_SERVER="$1" \
    "$integration_bin" version:: algorithms:: gcra:: persistence::
}
# The packages' tests of the package itself rather than of a server (types under mypy and tsc,
# the package installed into a fresh folder, require and import of it, local budgets across
# worker processes started, stopped and killed) run with the first server's suite only: on the
# others RATELIMIT_SKIP_PACKAGE_TESTS=1 skips them (9 Python tests, 15 Node tests; about 35 s
# of CPU each time, and 43 s for the processes': 14 Python, 29 Node).
package_tests() {
  [ "$1" = "${servers[0]}" ] && echo 0 || echo 1
}
# The script backend's random differential tests (the Lua against the module, step by step)
# run a quarter of their full length with each server, drawn from a seed of its own (28, the
# tests' default, + its place in the list; a failure names it), so that the four servers the
# packages run on replay the sequences of one full run between them, each part on a server of
# its own. The Lua is held call by call to the algorithms crate by the script conformance
# above (every algorithm, option, policy, lease and range edge); these explore past it. At
# full length with the first server they were 86 of its Python suite's 200 s of CPU (Redis
# 7.0: test_script_equal.py 47, test_script_random.py 21, the leases' 10, the policies' 9),
# and Node's script-random.test.js about 30. Printed as environment assignments.
random_share() {
  local i
  for i in "${!servers[@]}"; do [ "${servers[$i]}" = "$1" ] && break; done
  local seed=$((28 + i))
  if [ "$2" = python ]; then
    echo "SCRIPT_EQUAL_SEED=$seed SCRIPT_EQUAL_SEQUENCES=50 LEASES_EQUAL_SEQUENCES=100" \
      "SCRIPT_EQUAL_POLICY_SEQUENCES=30 SCRIPT_RANDOM_SEED=$seed SCRIPT_RANDOM_SEQUENCES=8"
  else
    echo "SCRIPT_RANDOM_SEED=$seed SCRIPT_RANDOM_SEQUENCES=10"
  fi
}
# The packages' test files for a server: every one with Redis 7.0 and Valkey 8.1; with Redis
# 8.2 and Valkey 9.1 those of what can differ from one server to another for a package: its Lua
# (the script backend, its scripts' ACLs; on 9.1 a server without Lua) and its cluster (cluster
# clients, nodes catching up); with Redis 8.2 also Sentinel's and a cluster's failovers, the
# backend's choice and COMMAND DOCS (setup, parity), and the adapters of the libraries users
# run (express-rate-limit's store, rate-limiter-flexible's class, the limits storage under
# flask-limiter and slowapi: issue 41 names Redis 7.0, 8.2 and Valkey 8.1 for them). The rest
# (middlewares, fields, guards, local budgets, the HTTP frameworks) is the package's own code
# over the module's replies, which the integration tests hold equal on every server: the full
# suites on Redis 8.2 and Valkey 8.1 passed and skipped the same tests in every make test
# (Python 443 and 10, then 484 and 16; Node 277 and 20), and on 9.1 they differed from 8.1's by
# the tests of a server without Lua alone (Python 450 and 3 against 443 and 10). The full
# suites took 117 and 109 s of CPU on 9.1 (these parts 57 and 18), 136 and 88 on Redis 8.2.
# Printed one path a line, from the package's folder.
package_files() {
  local version
  version=$(version_of "$1")
  if [ "$version" != "Valkey 9.1.2" ] && [ "$version" != "Redis 8.2.3" ]; then
    [ "$2" = python ] && echo tests || echo test/
    return
  fi
  if [ "$2" = python ]; then
    (cd clients/python && ls tests/test_script_*.py tests/test_no_lua.py tests/test_cluster*.py)
    [ "$version" = "Redis 8.2.3" ] && (cd clients/python && ls tests/test_failover.py tests/test_setup.py \
      tests/test_parity.py tests/test_limits_storage.py tests/test_flask_limiter.py tests/test_slowapi.py)
  else
    (cd clients/node && ls test/script-*.test.js test/no-lua.test.js test/cluster-client.test.js test/catching-up.test.js)
    [ "$version" = "Redis 8.2.3" ] && (cd clients/node && ls test/failover.test.js test/setup.test.js \
      test/parity.test.js test/express-store*.test.js test/flexible*.test.js)
  fi
  return 0
}
# The Python package's tests (pytest, real servers and uvicorn); all but the adaptive demo's,
# which runs alone below.
python_package() {
  local files
  mapfile -t files < <(package_files "$1" python)
  # shellcheck disable=SC2046 # random_share's assignments, one word each
  (cd clients/python && env $(random_share "$1" python) RATELIMIT_SKIP_PACKAGE_TESTS=$(package_tests "$1") \
    RATELIMIT_SERVER="$1" .venv/bin/python -m pytest "${files[@]}" -q -p no:cacheprovider \
    --ignore=tests/test_adaptive_demo.py)
}
# The Node package's own tests (clients/node: node --test as `npm test` runs it), real servers
# and real HTTP.
node_package() {
  local files
  mapfile -t files < <(package_files "$1" node)
  # shellcheck disable=SC2046
  (cd clients/node && env $(random_share "$1" node) RATELIMIT_SKIP_PACKAGE_TESTS=$(package_tests "$1") \
    RATELIMIT_SERVER="$1" node --test --test-concurrency=1 "${files[@]}")
}

# The rate limit service (gateway-server/tests: grpcio playing Envoy, /json, a real NGINX with
# auth_request, a Redis Cluster resharded under load, a Sentinel failover, the script backend,
# TLS, local budgets) against a server: make dist's binary, the aarch64 one under qemu-user. Its requests are the module's commands like any client's; it runs
# with the three servers issue 39 names (Redis 7.0 and 8.2, Valkey 8.1).
gateway() {
  local server=$1 machine=$2 binary
  binary="$(echo "$PWD"/dist/ratelimit-gateway-*-linux-"$machine")"
  [ "$machine" = aarch64 ] && binary="qemu-aarch64 -L /usr/aarch64-linux-gnu $binary"
  RATELIMIT_GATEWAY="$binary" RATELIMIT_SERVER="$server" \
    clients/python/.venv/bin/python -m pytest gateway-server/tests -q
}

# The runs side by side: "name|function|argument...", the long ones first. The packages' suites
# run on Redis 7.0 and 8.2 and Valkey 8.1 and 9.1 (the one that can unload Lua), not on Redis
# 7.4, which is here for the module beside the Redis Stack's modules, nor on Redis 8.10: the
# packages talk to the module as on 8.2, and they passed on both the same (7.4: 443 and 219
# tests when it joined; 8.10: 439 passed and 10 skipped, 213 and 11, as on 8.2, in every make
# test until the gateway joined). Without 8.10's two, make test spends 180 s of CPU less (a
# minute and a half on two cores), about what the gateway's two builds in make dist take.
packages_on() {
  case $(version_of "$1") in
    "Redis 7.4.1" | "Redis 8.10.2") return 1 ;;
  esac
}
# A server's three runs next to each other: the packages' suites keep a core busy, the
# integration tests half of one (they wait on their servers), so that the first six runs
# (three of each) fill both cores where four integration runs among them left a quarter idle;
# the short runs of the release last, to fill the tail.
runs=()
for server in "${servers[@]}"; do
  version=$(version_of "$server")
  packages_on "$server" && runs+=("Python package on $version|python_package|$server")
  runs+=("integration tests on $version|integration|$server")
  packages_on "$server" && runs+=("Node package on $version|node_package|$server")
done
runs+=("dist/ aarch64 module in $(version_of "$aarch64") (aarch64, qemu-user)|smoke|$aarch64")
for server in "${servers[@]}"; do
  version=$(version_of "$server")
  case $version in
    "Redis 7.0."* | "Redis 8.2."* | "Valkey 8.1."*) runs+=("dist/ x86_64 gateway on $version|gateway|$server|x86_64") ;;
  esac
done
runs+=("dist/ aarch64 gateway (qemu-user) on $(version_of "${servers[0]}")|gateway|${servers[0]}|aarch64")

logs=target/test-logs
rm -rf "$logs"
mkdir -p "$logs"
declare -A run_name run_log run_start
running=0
finish() {
  local pid status
  wait -n -p pid
  status=$?
  running=$((running - 1))
  echo "== ${run_name[$pid]} (log: ${run_log[$pid]})"
  cat "${run_log[$pid]}"
  if [ "$status" -eq 0 ]; then
    summary+=("${run_name[$pid]}: passed in $((SECONDS - ${run_start[$pid]})) s, $(cpu_of "${run_log[$pid]}.cpu") s of CPU")
  else
    summary+=("${run_name[$pid]}: FAILED")
    failed+=("${run_name[$pid]}")
  fi
}
# The user and system CPU seconds of a run's processes, from its `times` (the second line:
# its children's, as "1m2.500s 0m3.250s").
cpu_of() {
  local line
  line=$(sed -n 2p "$1" 2>/dev/null) || return
  echo "$line" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%d", t }'
}
n=0
# Starts a run in the background, RATELIMIT_TEST_JOBS at a time: "name|function|argument...".
launch() {
  local -a fields
  IFS='|' read -r -a fields <<<"$1"
  while ((running >= ${RATELIMIT_TEST_JOBS:-6})); do finish; done
  n=$((n + 1))
  local log="$logs/$n.log"
  # In a subshell that writes its children's CPU time (bash's `times`) beside the log.
  (
    "${fields[@]:1}"
    status=$?
    times >"$log.cpu"
    exit $status
  ) >"$log" 2>&1 &
  run_name[$!]=${fields[0]}
  run_log[$!]=$log
  run_start[$!]=$SECONDS
  running=$((running + 1))
}
# The two longest runs, the packages' suites with the first server (Python's and Node's, about
# 7 minutes each), need make dist's module and the venvs, not the tests' build: they start
# before the lints and fill what the cargo runs leave idle (a crate compiled alone at the end
# of a build: the cores were 11-25% idle during the tests' build in a fresh make test).
early=("Python package on $(version_of "${servers[0]}")" "Node package on $(version_of "${servers[0]}")")
later=("doc tests|doc_tests")
for run in "${runs[@]}"; do
  case "${run%%|*}" in
    "${early[0]}" | "${early[1]}") launch "$run" ;;
    *) later+=("$run") ;;
  esac
done

# The compiler's and the linters' rules first (what `make lint` runs): formatting, clippy with
# every warning an error (the crates' own lint attributes: no undocumented unsafe block, no
# public item of the algorithms crate without docs...), and the docs without a broken link.
step "rustfmt" cargo fmt --all -- --check
step "clippy" "${cargo_x86[@]}" clippy "${x86[@]}" --workspace --all-targets -- -D warnings
step "docs (algorithms)" env RUSTDOCFLAGS="-D warnings" "${cargo_x86[@]}" doc "${x86[@]}" -p ratelimit-algorithms --no-deps
# In the release profile, as clippy above, whose checked dependencies it reads. The module's
# and the gateway's in one run, their private items too (they are for the people who work on
# them): two runs checked the dependencies they share twice, each with its own features (29 s
# on two cores; one run, 13 s).
step "docs (module, gateway)" env RUSTDOCFLAGS="-D warnings" "${cargo_x86[@]}" doc "${x86[@]}" -p ratelimit \
  -p ratelimit-gateway -p ratelimit-gateway-server --no-deps --document-private-items
# The Python package's sources under mypy --strict (what its `Typing :: Typed` promises).
step "mypy" clients/python/.venv/bin/python -m mypy --strict clients/python/src/ratelimit_redis_module
# Every commit message since CONTRIBUTING.md's rule: a subject of at most 72 characters, a body.
step "commit messages" python3 scripts/check_commits.py
# The test binaries in one cargo run: the unit and property tests of every crate and the
# integration tests' binary (tests/integration/; its path from cargo's messages, so that the runs
# below only run it, the smoke runs too). One run, one set of dependency features: the doc tests
# of one package and the integration tests of another, each in a cargo run of its own, built the
# dependencies their dev-dependencies share again with other features (serde, regex, libc and
# what depends on them): 31 s less on two cores, 50 s of CPU. Built as make dist built the
# release (cargo_x86 above), cargo compiles only the tests and what they alone use: a host build
# compiled the whole tree once more (157 s on two cores in a fresh make test; 107 s this way).
integration_bin=
build_tests() {
  integration_bin=$("${cargo_x86[@]}" test "${x86[@]}" --workspace --lib --test integration --no-run \
    --message-format=json-render-diagnostics |
    sed -n 's|.*"executable":"\([^"]*/deps/integration-[0-9a-f]*\)".*|\1|p' | tail -n 1)
  [ -x "$integration_bin" ]
}
step "tests built" build_tests
step "unit and property tests" "${cargo_x86[@]}" test "${x86[@]}" --workspace --lib
# The Lua scripts held to the algorithms crate: its vectors (replies.json and sequences.json, written
# by algorithms/src/vectors.rs, which the unit tests above check against the crate; errors.json, by
# src/commands/error_vectors.rs from the module's parsers) run through each script on every server,
# without the module (clients/lua/conformance/run.py; about a second a server).
conformance() {
  local server
  for server in "${servers[@]}"; do
    RATELIMIT_SERVER="$server" python3 clients/lua/conformance/run.py || return 1
  done
}
step "script conformance" conformance

for run in "${later[@]}"; do launch "$run"; done
while ((running > 0)); do finish; done

# The adaptive demo's test runs its clients and backend in real time and holds the latency
# they see to 10 times the service time: beside the runs above, with the machine's 2 cores
# busy, the clients' own scheduling delay made it fail (p99 501 and 603 ms for a bound of 500).
# It runs alone, once: what it checks is the adaptive commands' control loop, the same on
# every server. Its two runs (no limiter, VEGAS) go side by side, under a core of the two
# between them: 18 s where one after the other took 36 with the cores 79% idle, VEGAS's p99 at
# 150-250 ms in three runs, the bound 500.
step "Python adaptive demo on $(version_of "${servers[0]}"), alone" env RATELIMIT_SERVER="${servers[0]}" \
  clients/python/.venv/bin/python -m pytest clients/python/tests/test_adaptive_demo.py -q -p no:cacheprovider

summary+=("make test's tests: $((SECONDS - started)) s in all")
printf '== %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  printf '== failed: %s\n' "${failed[@]}"
  exit 1
fi
