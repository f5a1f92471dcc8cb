#!/usr/bin/env python3
"""Medians per engine and thread count of a subblock-ab.sh JSONL file, and the ratios."""
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d['engine'] == 'llama':
        r = d['result']
        pp = next(x['avg_ts'] for x in r if x['n_gen'] == 0)
        tg = next(x['avg_ts'] for x in r if x['n_prompt'] == 0)
    else:
        pp, tg = d['result']['pp_tps'], d['result']['tg_tps']
    rows.setdefault((d['threads'], d['engine']), []).append((pp, tg))
for t in sorted({k[0] for k in rows}):
    med = {e: [statistics.median(v[i] for v in rows[(t, e)]) for i in (0, 1)] for (tt, e) in rows if tt == t}
    n = len(rows[(t, 'after')])
    b, a, l = med['before'], med['after'], med['llama']
    print(f"threads {t} ({n} rounds): pp before {b[0]:.1f} after {a[0]:.1f} llama.cpp {l[0]:.1f} | "
          f"tg before {b[1]:.2f} after {a[1]:.2f} llama.cpp {l[1]:.2f} | "
          f"tg after/before {a[1]/b[1]:.3f}, after/llama.cpp {a[1]/l[1]:.3f}; pp after/before {a[0]/b[0]:.3f}, after/llama.cpp {a[0]/l[0]:.3f}")
