#!/bin/sh
# usage: ./run_one.sh LABEL engine=sled|fjall|redb [n=..] [passes=..] [idle=..] ...
# Runs one experiment process on data/LABEL, logs to logs/LABEL.{log,time}, deletes data/LABEL.
set -e
cd "$(dirname "$0")"
L=$1; shift
mkdir -p logs data
/usr/bin/time -v ./target/release/engine-space run dir="data/$L" label="$L" "$@" > "logs/$L.log" 2> "logs/$L.time"
grep -E "Maximum resident|Elapsed" "logs/$L.time" | sed "s/^/INFO $L /" >> "logs/$L.log"
rm -rf "data/$L"
