#!/usr/bin/env bash
# Profiles statestore under load: starts `statestore-bench sustained` (a 3-node cluster,
# prefilled) or, with BENCH=devicebound, `statestore-bench devicebound` (its SEND throughput
# phase: SENDs to 1,000 online devices that complete every delivery), waits until the measured
# window runs, records every node with `perf record -e cpu-clock --call-graph dwarf` for a
# while, and prints each node's top frames (self time, and inclusive time of statestore's own
# functions).
#
#   bench/profile.sh [OUT_DIR] [-- extra statestore-bench flags]
#
# Environment: BIN_DIR (default target/release or $CARGO_TARGET_DIR/release), RECORD_SECONDS
# (default 10), BENCH (sustained or devicebound, default sustained); for sustained: PREFILL
# (default 100000), WORKLOAD (default set:64x8). Needs root for perf.
set -euo pipefail

out=${1:-/tmp/statestore-profile}
shift || true
[ "${1:-}" = "--" ] && shift
bin_dir=${BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
record_seconds=${RECORD_SECONDS:-10}
prefill=${PREFILL:-100000}
workload=${WORKLOAD:-set:64x8}

command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/node-*.data "$out"/node-*.txt

case "${BENCH:-sustained}" in
  sustained)
    "$bin_dir/statestore-bench" sustained --prefill "$prefill" --workload "$workload" \
      --duration "$((record_seconds + 20))s" --statestore-bin "$bin_dir/statestore" "$@" \
      >"$out/bench.txt" 2>&1 &
    window='^== measuring'
    ;;
  devicebound)
    "$bin_dir/statestore-bench" devicebound --duration "$((record_seconds + 15))s" \
      --statestore-bin "$bin_dir/statestore" "$@" >"$out/bench.txt" 2>&1 &
    window='^== 2\. SEND throughput'
    ;;
  *) echo "BENCH is sustained or devicebound" >&2; exit 2 ;;
esac
bench=$!
trap 'kill "$bench" 2>/dev/null || true' EXIT

# The measured window starts after the bench says so; give it a few seconds to settle.
until grep -q "$window" "$out/bench.txt" 2>/dev/null; do
  kill -0 "$bench" 2>/dev/null || { cat "$out/bench.txt"; exit 1; }
  sleep 1
done
sleep 5

pids=()
for pid in $(pgrep -x statestore); do
  id=$(tr '\0' '\n' <"/proc/$pid/cmdline" | grep -A1 -x -- '--id' | tail -n1)
  perf record -e cpu-clock -F 499 --call-graph dwarf,32768 -p "$pid" \
    -o "$out/node-$id.data" -- sleep "$record_seconds" >/dev/null 2>&1 &
  pids+=("$!")
done
wait "${pids[@]}"
wait "$bench" || true

for data in "$out"/node-*.data; do
  node=$(basename "$data" .data)
  {
    echo "== $node: self time"
    perf report -i "$data" --no-children --percent-limit 1.5 --stdio --sort symbol 2>/dev/null \
      | grep -E '^ +[0-9]' | head -25
    echo "== $node: inclusive time of statestore functions"
    perf report -i "$data" --children --percent-limit 3 --stdio --sort symbol 2>/dev/null \
      | grep -E '^ +[0-9].*(statestore|openraft|raft_log|sled|ntex|tokio::runtime::task::harness)' \
      | head -30
  } | tee "$out/$node.txt"
done
grep -E 'ops/s over the window|nodes total|SEND / SET' "$out/bench.txt" | head -5
