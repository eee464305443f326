#!/bin/bash
# Disk writes and reads caused by each thread of every running statestore node (matched by
# ` run --id` in the command line) over an interval: /proc/<pid>/task/<tid>/io, summed per
# thread name, in MiB/s. Threads that moved less than 0.01 MiB/s are left out.
# usage: bench/disk-latency/thread_io.sh [SECONDS]   (default 20; run it while a bench loads)
set -euo pipefail
seconds=${1:-20}
snapshot() {
  local pid task name
  for pid in $(pgrep -f ' run --id'); do
    for task in /proc/"$pid"/task/*; do
      name=$(cat "$task/comm" 2>/dev/null) || continue
      awk -v id="$pid/${task##*/}" -v name="$name" \
        '/^read_bytes/ {r = $2} /^write_bytes/ {w = $2} END {print id, name, w + 0, r + 0}' \
        "$task/io" 2>/dev/null || true
    done
  done | sort
}
before=$(snapshot)
sleep "$seconds"
after=$(snapshot)
join <(echo "$before") <(echo "$after") | awk -v s="$seconds" '
  { split($1, id, "/"); key = id[1] " " $2; w[key] += ($6 - $3) / 1048576 / s; r[key] += ($7 - $4) / 1048576 / s }
  END { for (k in w) if (w[k] > 0.01 || r[k] > 0.01) printf "%-32s write %7.2f MiB/s  read %7.2f MiB/s\n", k, w[k], r[k] }' | sort
