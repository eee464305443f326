#!/usr/bin/env python3
"""Splits an `strace -f -e trace=getppid,...` log at the getppid() markers that bracket each
durable commit, and counts the sync calls inside each commit and outside any commit."""
import re, sys
from collections import Counter

inside, commits, outside, cur = False, [], Counter(), None
for line in open(sys.argv[1]):
    m = re.match(r'^(\d+)\s+(?:<\.\.\. )?(\w+)(\(| resumed)', line)
    if not m or ' resumed' in line:
        continue
    call = m.group(2)
    if call == 'getppid':
        if inside:
            commits.append(cur)
        else:
            cur = Counter()
        inside = not inside
        continue
    (cur if inside else outside)[call] += 1
print(f"durable commits (marker pairs): {len(commits)}")
for i, c in enumerate(commits):
    print(f"commit {i + 1}: " + (', '.join(f'{k}={v}' for k, v in sorted(c.items())) or 'no sync call'))
print("outside commits (open, background threads, close, reopen, verify): "
      + (', '.join(f'{k}={v}' for k, v in sorted(outside.items())) or 'none'))
