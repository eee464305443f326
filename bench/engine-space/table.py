#!/usr/bin/env python3
"""Markdown summary of logs/*.log (or the logs given as arguments): amplification = du -sb / (N x 80),
with du -s --block-size=1 (allocated) / (N x 80) in parentheses where it differs by >= 0.05."""
import glob, re, sys

def kv(line):
    return dict(re.findall(r'(\w+)=(\S+)', line))

rows = []
for path in sys.argv[1:] or sorted(glob.glob('logs/*.log')):
    res, info, peak_dir, rss, verify, ow, wrote = {}, {}, 0.0, 0, '?', [], 0
    label = path.split('/')[-1][:-4]
    engine = n = '?'
    for line in open(path):
        if line.startswith('RESULT'):
            d = kv(line)
            engine, n = d['engine'], int(d['n'])
            res[d['phase']] = (float(d['amp_du']), float(d['amp_alloc']))
            if d['phase'] == 'pass4_open':
                wrote = int(d['proc_write_bytes'])
        elif line.startswith('INFO'):
            d = kv(line)
            m = re.search(r'peak_dir_apparent=\d+ \(([\d.]+)x\)', line)
            if m:
                peak_dir = max(peak_dir, float(m.group(1)))
            if d.get('phase') == 'load':
                info['load'] = float(d['keys_per_s'])
            if d.get('phase', '').startswith('pass') and 'keys_per_s' in d:
                ow.append(float(d['keys_per_s']))
            if 'verify' in d:
                verify = d['verify']
            m = re.search(r'Maximum resident set size \(kbytes\): (\d+)', line)
            if m:
                rss = int(m.group(1))
    def a(p):
        if p not in res:
            return '–'
        du_sb, alloc = res[p]
        # allocated bytes in parentheses where they differ (sparse or preallocated files)
        return f"{du_sb:.2f}×" + (f" ({alloc:.2f}×)" if abs(du_sb - alloc) >= 0.05 else '')
    comp = [p for p in res if p.startswith('d_compact') or p.startswith('d_major')]
    comp_s = ' / '.join(f"{p[2:-5]} {a(p)}" for p in comp) or 'none'
    rows.append(f"| {label} | {engine} | {n:,} | {a('a_open')} | {a('a_closed')} | {a('b')} | {a('c')} | "
                f"{' → '.join(a(f'pass{i}_open') for i in range(1, 5))} | {a('d')} | {a('d_idle_open')} | {comp_s} | "
                f"{a('d_after')} | {f'{peak_dir:.2f}×' if peak_dir else 'not sampled'} | {info.get('load', 0):,.0f} | "
                f"{min(ow) if ow else 0:,.0f}-{max(ow) if ow else 0:,.0f} | "
                f"{wrote / (5 * n * 80) if wrote and n != '?' else 0:.1f}× | {rss/1024:,.0f} MiB | {verify} |")

print("| run | engine | N | (a) open | (a) closed | (b) | (c) | open after pass 1→4 | (d) | (d) idle 30 s | compaction (open) | after compaction, closed+reopened | peak dir seen | load keys/s | overwrite keys/s | bytes written ÷ (5 × N × 80) | peak RSS | verify |")
print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
print('\n'.join(rows))
