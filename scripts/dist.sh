#!/usr/bin/env bash
# make dist: the release, for the version in Cargo.toml, into dist/ (emptied first):
#   ratelimit-<version>-linux-x86_64.so    the module, for any x86_64 Linux with glibc 2.17 or
#   ratelimit-<version>-linux-aarch64.so   later (CentOS 7, Debian 8, Ubuntu 14.04 and newer)
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

# `<target>.2.17` is cargo-zigbuild's way of naming the glibc version to link against; the
# build lands in target/<target>/release, beside (not over) make build's target/release.
# One target a run: cargo-zigbuild points bindgen (inside the redis-module crate) at Zig's
# headers for one target only, so with both at once the second finds no <sys/types.h>.
for target in "${targets[@]}"; do
  PATH="$tools/bin:$PATH" cargo zigbuild --release --locked -p ratelimit --target "$target.2.17"
done

rm -rf dist
mkdir dist
cp target/x86_64-unknown-linux-gnu/release/libratelimit.so "dist/ratelimit-$version-linux-x86_64.so"
cp target/aarch64-unknown-linux-gnu/release/libratelimit.so "dist/ratelimit-$version-linux-aarch64.so"

# The Python package: hatchling as its build backend, without pip's isolated build (which
# would fetch hatchling again, unpinned).
log=$(cd clients/python && "$tools/bin/python" -m hatchling build -d ../../dist 2>&1) || { echo "$log" >&2; exit 1; }

# The Node package, as npm publishes it (its prepack copies the scripts in).
(cd clients/node && npm pack --silent --pack-destination ../../dist >/dev/null)

(cd dist && sha256sum -- * >SHA256SUMS)
python3 scripts/check_dist.py dist "$version"
