#!/bin/sh
# Runs every fuzz target in build dir $1 for $2 seconds over its seed corpus.
set -e
dir="$1"; secs="${2:-10}"
[ -n "$CI" ] && [ -n "$FUZZ_CI_SECONDS" ] && secs="$FUZZ_CI_SECONDS"
src=$(cd "$(dirname "$0")/.." && pwd)
n=0
for bin in "$dir"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  seeds="$src/fuzz/corpus/${name#fuzz_}"
  work="$dir/corpus-${name#fuzz_}"
  mkdir -p "$work"
  echo "fuzz: $name for ${secs}s"
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
    "$work" "$seeds" 2>"$dir/$name.log" || { tail -n 40 "$dir/$name.log"; exit 1; }
  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$dir/$name.log" | tail -n 1)
  [ "${runs:-0}" -gt 0 ] || { echo "fuzz: $name ran no input" >&2; tail -n 20 "$dir/$name.log"; exit 1; }
  n=$((n + 1))
done
# No target at all is a broken build, not a clean run.
[ "$n" -gt 0 ] || { echo "fuzz: no fuzz target in $dir" >&2; exit 1; }
echo "fuzz: $n targets ran without a finding"
