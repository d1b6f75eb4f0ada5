#!/usr/bin/env bash
# Replays the module's adaptive limits through Netflix concurrency-limits' own classes.
#
# Usage: scripts/netflix-oracle/compare.sh NETFLIX_CHECKOUT [SEQUENCES SAMPLES SEED]
#   NETFLIX_CHECKOUT: a checkout of github.com/Netflix/concurrency-limits (its code is not in
#   this repository). Needs Java 17 (javac, java) and cargo.
#
# Copies AIMDLimit, VegasLimit, Gradient2Limit and what they import from the checkout into
# target/netflix-oracle, with one change: VegasLimit's `ThreadLocalRandom.current()
# .nextDouble(0.5, 1)` becomes `Jitter.next()`, which hands out the draws the trace records (the
# module draws Vegas' jitter from a seed in the key). Every other file is checked byte for byte
# against the checkout. Logging is stubbed (slf4j/). Then the module's crate writes a trace
# (algorithms/examples/adaptive_trace.rs: sequences of samples, and its limit, estimate bits and
# no-load / long-term RTT after each) and Oracle.java replays it through Netflix's builders with
# the same initial limit and bounds, comparing after every sample. Exit 0 when nothing differs.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 3,6p "$0" >&2; exit 2; }
NETFLIX=$(realpath "$1")
SEQUENCES=${2:-300} SAMPLES=${3:-2000} SEED=${4:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$ROOT/target/netflix-oracle
NF=$NETFLIX/concurrency-limits-core/src/main/java
PKG=com/netflix/concurrency/limits
EXPR='ThreadLocalRandom.current().nextDouble(0.5, 1)'
FILES=(
  "$PKG/Limit.java" "$PKG/MetricRegistry.java" "$PKG/MetricIds.java"
  "$PKG/internal/EmptyMetricRegistry.java" "$PKG/internal/Preconditions.java"
  "$PKG/limit/AbstractLimit.java" "$PKG/limit/AIMDLimit.java" "$PKG/limit/VegasLimit.java"
  "$PKG/limit/Gradient2Limit.java" "$PKG/limit/functions/Log10RootIntFunction.java"
  "$PKG/limit/measurement/Measurement.java" "$PKG/limit/measurement/ExpAvgMeasurement.java"
  "$PKG/limit/measurement/MinimumMeasurement.java" "$PKG/limit/measurement/SingleMeasurement.java"
)
rm -rf "$OUT" && mkdir -p "$OUT/src" "$OUT/classes"
for f in "${FILES[@]}"; do
  [ -f "$NF/$f" ] || { echo "compare.sh: no $f in $NETFLIX" >&2; exit 1; }
  mkdir -p "$OUT/src/$(dirname "$f")" && cp "$NF/$f" "$OUT/src/$f"
done
VEGAS=$OUT/src/$PKG/limit/VegasLimit.java
[ "$(grep -cF "$EXPR" "$VEGAS")" -eq 1 ] || { echo "compare.sh: VegasLimit's jitter draw is not where it was" >&2; exit 1; }
sed -i 's/ThreadLocalRandom\.current()\.nextDouble(0\.5, 1)/com.netflix.concurrency.limits.limit.Jitter.next()/' "$VEGAS"
[ "$(diff "$NF/$PKG/limit/VegasLimit.java" "$VEGAS" | grep -c '^[<>]')" -eq 2 ] || { echo "compare.sh: more than the jitter line changed" >&2; exit 1; }
cp "$HERE/Jitter.java" "$OUT/src/$PKG/limit/" && mkdir -p "$OUT/src/org/slf4j" && cp "$HERE"/slf4j/*.java "$OUT/src/org/slf4j/"
cp "$HERE/Oracle.java" "$OUT/src/"
find "$OUT/src" -name '*.java' > "$OUT/sources.txt"
javac --release 17 -encoding UTF-8 -nowarn -d "$OUT/classes" @"$OUT/sources.txt"
(cd "$ROOT" && cargo run -q --release -p ratelimit-algorithms --example adaptive_trace -- "$SEQUENCES" "$SAMPLES" "$SEED") > "$OUT/trace"
java -cp "$OUT/classes" Oracle < "$OUT/trace"
