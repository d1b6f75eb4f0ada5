#!/usr/bin/env bash
# cargo-zigbuild as make dist runs it: `scripts/zigbuild.sh <cargo-zigbuild command> [arguments]`
# (zigbuild, test...), from the venv scripts/dist.sh installs it into with Zig, with the link
# settings of the module's release builds: each target's libgcc_s.so.1 for build.rs (the
# unwinder the module resolves its _Unwind_* in; dist.sh says why). make dist builds the
# release through it, and make test the tests for the same x86_64 target (scripts/test.sh):
# with the same settings cargo reuses for the tests every dependency the release's build
# compiled, where a host build compiled them all once more (about 120 s of CPU).
set -euo pipefail
tools=${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-dist-tools
[ -x "$tools/bin/cargo-zigbuild" ] || { echo "zigbuild: no cargo-zigbuild in $tools (make dist installs it)" >&2; exit 1; }
export RATELIMIT_LINK_UNWINDER_x86_64_unknown_linux_gnu=/lib/x86_64-linux-gnu/libgcc_s.so.1
export RATELIMIT_LINK_UNWINDER_aarch64_unknown_linux_gnu=/usr/aarch64-linux-gnu/lib/libgcc_s.so.1
for lib in "$RATELIMIT_LINK_UNWINDER_x86_64_unknown_linux_gnu" "$RATELIMIT_LINK_UNWINDER_aarch64_unknown_linux_gnu"; do
  [ -e "$lib" ] || { echo "zigbuild: $lib is missing (scripts/deps.sh test installs it)" >&2; exit 1; }
done
PATH="$tools/bin:$PATH" exec cargo-zigbuild "$@"
