#!/usr/bin/env python3
"""Summarise logs/*.log into a markdown table."""
import glob, re, sys
rows = []
for f in sorted(glob.glob('logs/*.log')):
    if 'smoke' in f: continue
    res, info = {}, {}
    for line in open(f):
        kv = dict(re.findall(r'(\w+)=(\S+)', line))
        if line.startswith('RESULT'):
            res[kv['phase']] = kv
        elif line.startswith('INFO') and 'secs' in kv and kv.get('phase') in ('load', 'overwrite', 'rebuild'):
            info[kv['phase']] = float(kv['secs'])
        m = re.search(r'Maximum resident set size \(kbytes\): (\d+)', line)
        if m: info['rss'] = int(m.group(1)) / 1024 / 1024
    if not res: continue
    label = next(iter(res.values()))['label']
    def amp(p):
        r = res.get(p)
        return f"{float(r['amp_du']):.3f}" if r else '-'
    def extra(p):
        r = res.get(p)
        return f"{float(r['per_key_extra_du']):.0f}" if r else '-'
    def mb(p, k):
        r = res.get(p)
        return f"{int(r[k])/1e6:.1f}" if r else '-'
    rows.append([label, amp('a'), amp('b'), amp('b_idle'), amp('c_before_reopen'), amp('c'), amp('c_idle'),
                 extra('a'), extra('b'), extra('c'), mb('c', 'db'), mb('c', 'snap'),
                 mb('b', 'du_sb'), mb('c', 'du_sb'),
                 f"{info.get('load', info.get('rebuild', 0)):.1f}", f"{info.get('overwrite', 0):.1f}", f"{info.get('rss', 0):.2f}"])
hdr = ['config', '(a) load', '(b) reopen', '(b) +10s idle', '(c) pre-reopen', '(c) reopen', '(c) +10s idle',
       'extra B/key (a)', 'extra B/key (b)', 'extra B/key (c)', 'db MB (c)', 'snap MB (c)', 'du MB (b)', 'du MB (c)',
       'load s', 'overwrite s', 'peak RSS GiB']
print('| ' + ' | '.join(hdr) + ' |')
print('|' + '---|' * len(hdr))
for r in rows:
    print('| ' + ' | '.join(r) + ' |')
