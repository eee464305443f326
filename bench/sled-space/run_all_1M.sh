#!/bin/sh
# Runs all N=1,000,000 configurations sequentially (one process at a time).
set -e
cd "$(dirname "$0")"
N=1000000
./run_one.sh c1_default_pattern_1M run dir=data/c1 n=$N values=pattern idle=10
./run_one.sh c2_default_random_1M  run dir=data/c2 n=$N values=random  idle=10
./run_one.sh c3_zstd1_random_1M    run dir=data/c3z1 n=$N values=random  compression=1 idle=10
./run_one.sh c3_zstd5_random_1M    run dir=data/c3z5 n=$N values=random  compression=5 idle=10
./run_one.sh c4_zstd1_pattern_1M   run dir=data/c4z1 n=$N values=pattern compression=1 idle=10
./run_one.sh c4_zstd5_pattern_1M   run dir=data/c4z5 n=$N values=pattern compression=5 idle=10
./run_one.sh c5_seg1M_random_1M    run dir=data/c5s1m n=$N values=random segment=1048576 idle=10
./run_one.sh c5_seg8M_random_1M    run dir=data/c5s8m n=$N values=random segment=8388608 idle=10
./run_one.sh c7_sorted_random_1M   run dir=data/c7 n=$N values=random order=sorted idle=10
./run_one.sh c6_import_random_1M   rebuild src=data/c2 dst=data/c6imp n=$N mode=import
./run_one.sh c6_batch_random_1M    rebuild src=data/c2 dst=data/c6bat n=$N mode=batch
