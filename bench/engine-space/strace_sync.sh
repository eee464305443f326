#!/bin/bash
# Which sync calls a durable commit issues: n=100000 load only (batch=2500, a durable commit
# every 10 batches = 4 commits, then one more sync), under strace. Run one at a time.
#   logs/strace-ENGINE.summary  strace -c totals for the whole process (open, load, close, reopen, verify)
#   logs/strace-ENGINE.calls    per durable commit: the sync calls between its two getppid() markers
set -e
cd "$(dirname "$0")"
mkdir -p logs data
for e in ${ENGINES:-sled fjall redb}; do
    A=("engine=$e" n=100000 passes=0 idle=0 batch=2500 commit_every=10)
    strace -f -c -e trace=fsync,fdatasync,sync_file_range,msync,syncfs,sync \
        -o "logs/strace-$e.summary" ./target/release/engine-space run dir="data/strace-$e" "${A[@]}" > /dev/null
    rm -rf "data/strace-$e"
    strace -f -e trace=getppid,fsync,fdatasync,sync_file_range,msync,syncfs,sync \
        -o "data/strace-$e.raw" ./target/release/engine-space run dir="data/strace-$e" "${A[@]}" > /dev/null
    ./strace_commits.py "data/strace-$e.raw" > "logs/strace-$e.calls"
    rm -rf "data/strace-$e" "data/strace-$e.raw"
done
