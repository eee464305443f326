#!/bin/bash
# One `statestore-bench scale` run of BIN with perf tracepoints of the disk system calls of every
# process for 70 s of its load, then the calls' durations per thread kind (syscall_times.py) and
# the slow-append warnings the nodes logged. Root (perf tracepoints).
# usage: bench/disk-latency/syscall_times.sh BIN OUT_DIR [KEYS]
#   env: BENCH (statestore-bench in $CARGO_TARGET_DIR/release or target/release)
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,6p "$0"; exit 2; }
bin=$1 out=$2 keys=${3:-1000000}
bench=${BENCH:-${CARGO_TARGET_DIR:-target}/release/statestore-bench}
here=$(dirname "$0")
mkdir -p "$out"
"$bench" scale --keys "$keys" --values random --keep-temp --statestore-bin "$bin" \
  --json "$out/scale.json" >"$out/scale.log" 2>&1 &
scale=$!
sleep 12 # the cluster starts and the load begins
events=""
for call in fdatasync fsync unlinkat unlink; do
  events="$events,syscalls:sys_enter_$call,syscalls:sys_exit_$call"
done
perf record -q -o "$out/perf.data" -a -e "${events#,}" -- sleep 70 >/dev/null 2>&1
wait "$scale" || true
kept=$(sed -n 's/^files kept in //p' "$out/scale.log")
grep -h 'slow raft log fdatasync' "$kept"/node*.log >"$out/slow.log" || true
grep -h 'snapshot built' "$kept"/node*.log >"$out/snapshots.log" || true
[ -n "$kept" ] && rm -rf "$kept"
perf script -i "$out/perf.data" -F comm,tid,time,event >"$out/calls.txt" 2>/dev/null
python3 "$here/syscall_times.py" "$out"
