#!/usr/bin/env bash
# make dist: the release, for the version in Cargo.toml, into dist/ (emptied first):
#   ratelimit-<version>-linux-x86_64.so    the module, for any x86_64 Linux with glibc 2.17 or
#   ratelimit-<version>-linux-aarch64.so   later (CentOS 7, Debian 8, Ubuntu 14.04 and newer)
#   ratelimit-gateway-<version>-linux-x86_64, ratelimit-gateway-<version>-linux-aarch64
#                                          the rate limit service (gateway-server/), the same
#                                          machines and glibc
#   ratelimit_redis_module-<version>-py3-none-any.whl, ratelimit_redis_module-<version>.tar.gz
#                                          the Python package (wheel and sdist)
#   ratelimit-redis-module-<version>.tgz   the Node package (npm pack)
#   SHA256SUMS                             a sha256 for each file (`sha256sum -c SHA256SUMS`)
# The modules are linked by cargo-zigbuild through Zig against glibc 2.17's symbols (both from
# PyPI, pinned in scripts/dist-tools.txt); the aarch64 one needs Rust's aarch64 standard library,
# which rustup adds. scripts/check_dist.py checks what this writes; make test runs both and then
# the integration smoke tests against the modules in dist/ (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "dist: no version in Cargo.toml" >&2; exit 1; }

# The tools, into a venv of their own, redone when their pins change. Outside the repository:
# Zig names its own headers relative to the working directory when they are under it, and
# bindgen, run from the redis-module crate's folder, would then not find <sys/types.h>.
tools=${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-dist-tools
if ! cmp -s scripts/dist-tools.txt "$tools/dist-tools.txt"; then
  echo "dist: installing scripts/dist-tools.txt into $tools" >&2
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: \
    -r scripts/dist-tools.txt
  cp scripts/dist-tools.txt "$tools/dist-tools.txt"
fi

targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
if command -v rustup >/dev/null 2>&1; then
  # Prints nothing when both are there already.
  rustup target add "${targets[@]}" 2>&1 | { grep -v 'is up to date' || true; } >&2
else
  for target in "${targets[@]}"; do
    rustc --print sysroot | xargs -I{} test -d "{}/lib/rustlib/$target" || {
      echo "dist: Rust's standard library for $target is missing; with rustup: rustup target add $target" >&2
      exit 1
    }
  done
fi

# The unwinder: the system's libgcc_s.so.1, as the host build, Rust's own builds for Linux and
# the servers themselves use it, never one carried inside the module. Rust asks for it with
# -lgcc_s; cargo-zigbuild turns that into Zig's -lunwind, LLVM's libunwind linked in, which
# takes the exception object Rust allocates (8-byte aligned, as Rust declares it) to be
# 16-byte aligned: in a server whose allocator gives the 56-byte block 8-aligned (Redis's own
# jemalloc), a caught panic crashed the server (tests/integration/gcra.rs). Naming the target's
# libgcc_s.so.1 to the linker first resolves every _Unwind_* there, so nothing of libunwind is
# linked in (scripts/check_dist.py checks it): the module needs libgcc_s.so.1's symbols of
# GCC 4.2 or older, as every glibc system has (glibc itself loads it to cancel threads).
# scripts/zigbuild.sh names each target's libgcc_s.so.1 to build.rs (the module's link alone:
# the gateway, an executable, keeps the unwinder Zig links in, LLVM's libunwind, which is right
# for a program on the system's malloc).
#
# `<target>.2.17` is cargo-zigbuild's way of naming the glibc version to link against; the
# build lands in target/<target>/release, beside (not over) make build's target/release. Both
# targets and both programs in one cargo run: the build scripts and proc macros (bindgen,
# clang-sys, syn...) are compiled once for the two, where a run a target compiled them twice
# (cargo-zigbuild gives the host's builds other settings when the target is the host's), and
# cargo keeps both cores busy from one target's last crates into the other's (376 s against
# 404 on two cores, 738 s of CPU against 782).
zig_targets=()
for target in "${targets[@]}"; do zig_targets+=(--target "$target.2.17"); done
bash scripts/zigbuild.sh zigbuild --release --locked -p ratelimit -p ratelimit-gateway-server "${zig_targets[@]}"

rm -rf dist
mkdir dist
cp target/x86_64-unknown-linux-gnu/release/libratelimit.so "dist/ratelimit-$version-linux-x86_64.so"
cp target/aarch64-unknown-linux-gnu/release/libratelimit.so "dist/ratelimit-$version-linux-aarch64.so"
cp target/x86_64-unknown-linux-gnu/release/ratelimit-gateway-server "dist/ratelimit-gateway-$version-linux-x86_64"
cp target/aarch64-unknown-linux-gnu/release/ratelimit-gateway-server "dist/ratelimit-gateway-$version-linux-aarch64"

# The Python package: hatchling as its build backend, without pip's isolated build (which
# would fetch hatchling again, unpinned).
log=$(cd clients/python && "$tools/bin/python" -m hatchling build -d ../../dist 2>&1) || { echo "$log" >&2; exit 1; }

# The Node package, as npm publishes it (its prepack copies the scripts in).
(cd clients/node && npm pack --silent --pack-destination ../../dist >/dev/null)

(cd dist && sha256sum -- * >SHA256SUMS)
python3 scripts/check_dist.py dist "$version"
