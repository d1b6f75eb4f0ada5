#!/usr/bin/env bash
# Installs what the machine lacks, for one purpose:
#   scripts/deps.sh run    building the module and running it (make run, make build):
#                          redis-server and redis-tools (the server the module loads into,
#                          redis-cli, redis-benchmark), libclang-dev (bindgen, inside the
#                          redis-module crate, needs it), gcc and cargo.
#   scripts/deps.sh test   that, and what the tests, benchmarks and make dist need besides:
#                          python3, its venv module, nodejs and npm, qemu-user with aarch64's
#                          glibc and libstdc++, make and libc6-dev (scripts/servers.sh
#                          builds Redis 8.10 from source), then the pinned dependencies of the examples
#                          and client packages (each into a folder of its own, redone only
#                          when its pin file changed).
# Debian packages come from apt-get; nothing is installed when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case "$mode" in
  run | test) ;;
  *)
    echo "usage: scripts/deps.sh run|test" >&2
    exit 2
    ;;
esac

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
# bindgen (inside the redis-module crate) loads libclang itself at build time: a file named
# libclang.so, libclang-<version>.so or either with a .<n> suffix, in LIBCLANG_PATH or the
# usual library folders. libclang-cpp.so.<n>, which some images ship alone, is another library
# and does not do: it must not count as libclang here.
has_libclang() {
  local dir file
  for dir in ${LIBCLANG_PATH:-} /usr/lib/llvm-*/lib /usr/lib/*-linux-gnu /usr/lib /usr/local/lib; do
    for file in "$dir"/libclang.so "$dir"/libclang.so.* "$dir"/libclang-[0-9]*.so "$dir"/libclang-[0-9]*.so.*; do
      [ -e "$file" ] && return 0
    done
  done
  return 1
}
has_libclang || need+=(libclang-dev)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v cargo >/dev/null 2>&1 || need+=(cargo)
if [ "$mode" = test ]; then
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  # Debian's python3 leaves out ensurepip, which `python3 -m venv` needs: python3-venv has it.
  python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
  command -v node >/dev/null 2>&1 || need+=(nodejs)
  command -v npm >/dev/null 2>&1 || need+=(npm)
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  command -v prometheus-redis-exporter >/dev/null 2>&1 || need+=(prometheus-redis-exporter)
  # The gateway's tests put a real NGINX in front of it (auth_request); the tests start it on
  # their own ports and configuration (Debian's service, if any, is not used).
  [ -x /usr/sbin/nginx ] || need+=(nginx)
  # make test loads make dist's aarch64 module into an aarch64 redis-server (scripts/servers.sh)
  # under qemu-user, with Debian's aarch64 glibc and libstdc++ built for cross use (packages of
  # this machine's architecture, no multiarch set-up).
  command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
  [ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || need+=(libc6-arm64-cross)
  [ -e /usr/aarch64-linux-gnu/lib/libstdc++.so.6 ] || need+=(libstdc++6-arm64-cross)
  # scripts/servers.sh builds Redis 8.10 from source: make and the C library's headers (gcc
  # is above; its compiler, without libc6-dev, cannot build a program).
  command -v make >/dev/null 2>&1 || need+=(make)
  [ -e /usr/include/stdio.h ] || need+=(libc6-dev)
  # make dist links each module against its machine's libgcc_s.so.1, the unwinder (dist.sh).
  [ -e /lib/x86_64-linux-gnu/libgcc_s.so.1 ] || need+=(libgcc-s1)
  [ -e /usr/aarch64-linux-gnu/lib/libgcc_s.so.1 ] || need+=(libgcc-s1-arm64-cross)
fi

if ((${#need[@]})); then
  # Sort and de-duplicate (redis-tools may be named twice).
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The module needs Rust 1.87 or later (C string literals, is_multiple_of); the gateway, which
# make test and make dist build, 1.88 (tonic and redis-rs's current releases).
version=$(cargo --version | awk '{print $2}')
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
need_rust() {
  if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt "$1" ]; }; then
    echo "deps: cargo $version is too old: $2 needs Rust 1.$1 or later (rustup.rs)" >&2
    exit 1
  fi
}
need_rust 87 ratelimit

[ "$mode" = test ] || exit 0
need_rust 88 "the gateway (make test, make lint and make dist build it)"

# The Python package (clients/python): its checksum (pins, metadata, build hook, sources and the
# scripts it ships from clients/lua) says when the venvs that hold it must be redone.
pkg=clients/python
stamp=$(cat "$pkg/requirements-test.txt" "$pkg/pyproject.toml" "$pkg/hatch_build.py" "$pkg/README.md" \
  $(find "$pkg/src" clients/lua -type f ! -path '*/__pycache__/*' | sort) | sha256sum | cut -d' ' -f1)

# The Python example: a venv of its own, so nothing goes into the system's site-packages, with
# the package installed from its folder. The copy of requirements.txt and the package's
# checksum inside the venv say what is installed there.
python_example() {
  local venv=examples/python/.venv
  cmp -s examples/python/requirements.txt "$venv/requirements.txt" \
    && [ "$stamp" = "$(cat "$venv/package.sha256" 2>/dev/null)" ] && return 0
  echo "deps: installing examples/python/requirements.txt and $pkg into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r examples/python/requirements.txt "./$pkg"
  cp examples/python/requirements.txt "$venv/requirements.txt"
  echo "$stamp" >"$venv/package.sha256"
}

# The Python package's tests: the package installed from its folder as a user would (not
# editable), with its pinned test requirements, into a venv of its own.
python_tests() {
  [ "$stamp" = "$(cat "$pkg/.venv/installed.sha256" 2>/dev/null)" ] && return 0
  echo "deps: installing $pkg and its requirements-test.txt into $pkg/.venv" >&2
  rm -rf "$pkg/.venv"
  python3 -m venv "$pkg/.venv"
  "$pkg/.venv/bin/python" -m pip install -q --disable-pip-version-check "./$pkg" -r "$pkg/requirements-test.txt"
  echo "$stamp" >"$pkg/.venv/installed.sha256"
}

# The Node example (examples/node) and the Node client package's development dependencies
# (clients/node: node-redis, Express, rate-limiter-flexible, TypeScript, for its tests): npm ci
# installs exactly package-lock.json (removing node_modules first); the copy of it left in
# node_modules says what is installed there.
npm_ci() {
  cmp -s "$1/package-lock.json" "$1/node_modules/.installed-lock.json" && return 0
  echo "deps: npm ci in $1" >&2
  (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$1/package-lock.json" "$1/node_modules/.installed-lock.json"
}

# The four at once, each into its own folder: an install waits on the network or the disk about
# half of its time (vmstat in a fresh make test: the cores 49% idle over the 66 s they took one
# after another; at once, 15 s). Each one's output goes to a log, printed when it ends, and a
# failure is named.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
jobs_started=()
start() {
  local name=$1
  shift
  "$@" >"$logs/$name" 2>&1 &
  jobs_started+=("$name:$!")
}
start python-example python_example
start python-tests python_tests
start node-example npm_ci examples/node
start node-package npm_ci clients/node
failed=0
for job in "${jobs_started[@]}"; do
  status=0
  wait "${job#*:}" || status=$?
  cat "$logs/${job%%:*}" >&2
  if ((status)); then
    echo "deps: ${job%%:*} failed (its output above)" >&2
    failed=1
  fi
done
exit "$failed"
