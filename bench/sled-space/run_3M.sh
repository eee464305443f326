#!/bin/sh
# N=3,000,000 runs for the default and the best-at-1M configurations.
set -e
cd "$(dirname "$0")"
N=3000000
B=./target/release/sled-space
./run_one.sh c2_default_random_3M run dir=data/c2_3m n=$N values=random
$B snapinfo dir=data/c2_3m > logs/snapinfo_c2_3m.txt
./run_one.sh c5_seg1M_random_3M run dir=data/c5s1m_3m n=$N values=random segment=1048576
$B snapinfo dir=data/c5s1m_3m segment=1048576 > logs/snapinfo_c5s1m_3m.txt
./run_one.sh c4_zstd5_pattern_3M run dir=data/c4z5_3m n=$N values=pattern compression=5
$B snapinfo dir=data/c4z5_3m compression=1 > logs/snapinfo_c4z5_3m.txt
