#!/usr/bin/env python3
"""Durations of the disk system calls recorded by syscall_times.sh, per thread kind.

Pairs each sys_enter with the next sys_exit of the same thread, then prints, per (thread kind,
call): count, p50 / p99 / p99.9 / max in ms and the calls of 50 ms or more; and the load's
figures and the nodes' slow-append warnings (count, worst) from the same run.
usage: syscall_times.py OUT_DIR
"""
import collections
import json
import re
import sys

KINDS = {"chunked_wal_flu": "raft-log (WAL flush thread)", "state-flush": "memtable flush",
         "fjall:worker": "fjall compaction", "file-reaper": "file reaper"}
LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+)")


def main(out):
    entered, durations = {}, collections.defaultdict(list)
    with open(f"{out}/calls.txt") as calls:
        for line in calls:
            m = LINE.match(line)
            if not m:
                continue
            comm, tid, at, edge, call = m.groups()
            if edge == "enter":
                entered[tid] = float(at)
            elif tid in entered:
                kind = KINDS.get(comm, comm)
                durations[(kind, call)].append((float(at) - entered.pop(tid)) * 1000)
    run = json.load(open(f"{out}/scale.json"))
    lat = run["load_latency"]
    slow = [int(w) for w in re.findall(r"worst_ms=(\d+)", open(f"{out}/slow.log").read())]
    print(f"load {run['load_rate']:.0f} keys/s, p99 {lat['p99_ms']:.1f} p99.9 {lat['p999_ms']:.1f} "
          f"max {lat['max_ms']:.1f} ms; slow-append warnings {len(slow)}, worst {max(slow, default=0)} ms")
    for (kind, call), ms in sorted(durations.items(), key=lambda kv: -len(kv[1])):
        if len(ms) < 5:
            continue
        ms.sort()
        n = len(ms)
        print(f"  {kind + ' ' + call:40} n={n:6} p50 {ms[n // 2]:.2f} p99 {ms[int(n * .99)]:.2f} "
              f"p99.9 {ms[min(n - 1, int(n * .999))]:.2f} max {ms[-1]:.1f} ms; >= 50 ms: "
              f"{sum(1 for d in ms if d >= 50)}")


if __name__ == "__main__":
    main(sys.argv[1])
