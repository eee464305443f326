#!/bin/bash
# Alternating `statestore-bench scale` runs of several node binaries (A/B), each run printing one
# line: load rate, p99 / p99.9 / max, apply stalls, space amplification after the load and after
# the stop (per node), and the slow raft-log fdatasync warnings the nodes logged (count, slow
# appends summed, worst wait). Each run keeps its files until that line is printed.
# usage: bench/scale-ab.sh BIN_A BIN_B [...]
#   env: ROUNDS (2), KEYS (1000000), VALUES (pattern or random; pattern), OUT (a new directory
#        under /tmp), BENCH (statestore-bench in $CARGO_TARGET_DIR/release or target/release)
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,8p "$0"; exit 2; }
bench=${BENCH:-${CARGO_TARGET_DIR:-target}/release/statestore-bench}
out=${OUT:-$(mktemp -d /tmp/scale-ab.XXXXXX)}
mkdir -p "$out"
echo "runs in $out"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for bin in "$@"; do
    label=$(basename "$bin")-$round
    "$bench" scale --keys "${KEYS:-1000000}" --values "${VALUES:-pattern}" --keep-temp --statestore-bin "$bin" \
      --json "$out/$label.json" >"$out/$label.log" 2>&1 || true
    kept=$(sed -n 's/^files kept in //p' "$out/$label.log")
    slow=$(cat "$kept"/node*.log 2>/dev/null | sed -n 's/.*slow raft log fdatasync.*worst_ms=\([0-9]*\) slow_appends=\([0-9]*\).*/\1 \2/p' |
      awk '{n++; s += $2; if ($1 > m) m = $1} END {printf "%d slow-fsync warnings, %d slow appends, worst %d ms", n, s, m}')
    python3 - "$out/$label.json" "$label" "$slow" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); l = d["load_latency"]
data = d["keys"] * (d["key_size"] + d["value_size"])
amp = lambda key: "/".join(f"{b / data:.2f}" for b in d[key])
print(f"{sys.argv[2]}: {d['load_rate']:.0f} keys/s, p99 {l['p99_ms']:.1f} p99.9 {l['p999_ms']:.1f} "
      f"max {l['max_ms']:.1f} ms, {l['errors']} errors / {l['timeouts']} timeouts, "
      f"apply stalls {d['load_stalls']['apply_over_50ms']}, disk {amp('disk_bytes_after_load')}x "
      f"after load, {amp('disk_bytes_after_stop')}x after stop; {sys.argv[3]}")
PY
    [ -n "$kept" ] && rm -rf "$kept"
  done
done
