#!/bin/sh
# The three engines at N=1e6, 4 overwrite passes, 30 s idle, then the engine's compaction.
# One process at a time (~6 min on 2 shared cores).
set -e
cd "$(dirname "$0")"
for e in sled fjall redb; do
    ./run_one.sh "$e-1M${SUFFIX:-}" engine=$e n=1000000 passes=4 idle=30
done
