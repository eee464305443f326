#!/bin/sh
# usage: ./run_one.sh LABEL args...   (runs one experiment process, logs to logs/LABEL.{log,time})
set -e
cd "$(dirname "$0")"
L=$1; shift
mkdir -p logs data
/usr/bin/time -v ./target/release/sled-space "$@" label="$L" > "logs/$L.log" 2> "logs/$L.time"
grep -E "Maximum resident|Elapsed" "logs/$L.time" | sed "s/^/$L /" >> "logs/$L.log"
