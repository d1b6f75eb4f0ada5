#!/usr/bin/env bash
# Installs what the build and the tests need and the machine lacks: redis-server and
# redis-tools (the server the module loads into, redis-cli and redis-benchmark) and
# libclang-dev (bindgen, inside the redis-module crate, needs it). Debian packages, via
# apt-get; nothing is installed when everything is already there.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
    && ! ls /usr/lib/*/libclang*.so* >/dev/null 2>&1; then
  need+=(libclang-dev)
fi
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v cargo >/dev/null 2>&1 || need+=(cargo)

if ((${#need[@]})); then
  # Sort and de-duplicate (redis-tools may be named twice).
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The crate needs Rust 1.87 or later (C string literals, is_multiple_of).
version=$(cargo --version | awk '{print $2}')
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 87 ]; }; then
  echo "deps: cargo $version is too old: ratelimit needs Rust 1.87 or later (rustup.rs)" >&2
  exit 1
fi
