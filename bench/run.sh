#!/bin/sh
# Runs every benchmark of build folder $1 (default: build), then times whole vramfit
# processes the way a user or script sees them.
set -e
dir="${1:-build}"
src=$(cd "$(dirname "$0")/.." && pwd)
for bin in "$dir"/bench/bench_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  echo "== $name"
  case "$name" in
  bench_accuracy) "$bin" "$dir/vramfit" "$src/../shared/calibration/published.tsv,$src/../shared/calibration/published-2.tsv" \
    "$src/bench/traced" "$src/bench/traced/multi-gpu" ;;
  # the table only: `make uncertainty` writes data/uncertainty.json
  bench_spread) "$bin" "$dir/vramfit" "$src/../shared/calibration/published.tsv" "$src/bench/traced" "$dir/uncertainty.json" ;;
  bench_speed) "$bin" "$dir/vramfit" ;;
  bench_inspect) "$bin" 21 "$dir/vramfit" ;;
  *) "$bin" ;;
  esac
done

# time_cmd N CMD...: mean wall time of N runs of CMD, in ms.
time_cmd() {
  n=$1
  shift
  start=$(date +%s%N)
  i=0
  while [ "$i" -lt "$n" ]; do
    "$@" >/dev/null
    i=$((i + 1))
  done
  end=$(date +%s%N)
  echo "$* : $(((end - start) / n / 1000)) us per run (mean of $n)"
}

echo "== whole process"
time_cmd 50 "$dir/vramfit" inspect llama-3.1-405b --json
