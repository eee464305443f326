#!/bin/sh
# Extra N=1,000,000 runs: repeatability, multi-pass steady state, write-rate and GC-tick sensitivity.
set -e
cd "$(dirname "$0")"
N=1000000
B=./target/release/sled-space
./run_one.sh c2r2_default_random_1M run dir=data/c2r2 n=$N values=random idle=10
$B snapinfo dir=data/c2r2 > logs/snapinfo_c2r2.txt
./run_one.sh c5r2_seg1M_random_1M run dir=data/c5s1m n=$N values=random segment=1048576 idle=10
$B snapinfo dir=data/c5s1m segment=1048576 > logs/snapinfo_c5s1m.txt
./run_one.sh x1_passes5_random_1M run dir=data/x1 n=$N values=random passes=5
$B snapinfo dir=data/x1 > logs/snapinfo_x1.txt
./run_one.sh x2_rate25k_random_1M run dir=data/x2 n=$N values=random rate=25000
$B snapinfo dir=data/x2 > logs/snapinfo_x2.txt
./run_one.sh x3_flush100ms_random_1M run dir=data/x3 n=$N values=random flush_ms=100
$B snapinfo dir=data/x3 > logs/snapinfo_x3.txt
