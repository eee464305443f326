#!/bin/sh
# N=3e6 for the three engines, same phases as run_all_1M.sh (~20 min on 2 shared cores).
set -e
cd "$(dirname "$0")"
for e in ${ENGINES:-fjall redb sled}; do
    ./run_one.sh "$e-3M${SUFFIX:-}" engine="$e" n=3000000 passes=4 idle=30
done
