#!/bin/sh
# Variant: a durable commit after every batch (commit_every=1) instead of every 10 batches.
set -e
cd "$(dirname "$0")"
for e in ${ENGINES:-redb fjall sled}; do
    ./run_one.sh "$e-1M-commit1" engine="$e" n=1000000 passes=4 idle=30 commit_every=1
done
