"""Reads the CSV that bench/ncu_source.sh exports (Nsight Compute's source page, SASS) and prints the sampled warp
stalls: in total by reason, then per stretch of code (between the lines of --cut regexes, e.g. the split warps' loop),
then the instructions with the most samples, each with its top reasons.
  python3 bench/ncu_source.py src.csv [--top 40] [--from REGEX --to REGEX] [--regions]
--regions: the samples per stretch of code between synchronising instructions (barriers, fences, wgmma waits and
arrives, copy-group commits and waits), those with at least 0.4% of the samples, each with its top reasons."""
import csv
import re
import sys

path = sys.argv[1]
args = sys.argv[2:]
top = int(args[args.index('--top') + 1]) if '--top' in args else 40
rows = list(csv.reader(open(path)))
hdr_i = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
hdr = rows[hdr_i]
body = [r for r in rows[hdr_i + 1:] if len(r) == len(hdr)]
col = {h: i for i, h in enumerate(hdr)}
reasons = [h for h in hdr if h.startswith('stall_') and '(Not Issued)' not in h]
num = lambda r, h: float(r[col[h]] or 0) if r[col[h]] not in ('-', '') else 0.0
tot = sum(num(r, 'Warp Stall Sampling (All Samples)') for r in body)
print(f"{path}: {len(body)} instructions, {tot:.0f} samples")
agg = {h: sum(num(r, h) for r in body) for h in reasons}
print("  by reason: " + ", ".join(f"{h[6:]} {100 * v / tot:.1f}%" for h, v in sorted(agg.items(), key=lambda x: -x[1]) if v > 0.005 * tot))
if '--from' in args:
    a, b = re.compile(args[args.index('--from') + 1]), re.compile(args[args.index('--to') + 1])
    inside, seg = False, []
    for r in body:
        if not inside and a.search(r[1]): inside = True
        if inside: seg.append(r)
        if inside and b.search(r[1]) and len(seg) > 1: break
    s = sum(num(r, 'Warp Stall Sampling (All Samples)') for r in seg)
    sa = {h: sum(num(r, h) for r in seg) for h in reasons}
    print(f"  stretch {a.pattern} .. {b.pattern}: {len(seg)} instructions, {s:.0f} samples ({100 * s / tot:.1f}%): " +
          ", ".join(f"{h[6:]} {100 * v / max(s, 1):.0f}%" for h, v in sorted(sa.items(), key=lambda x: -x[1])[:6]))
    body_show = seg
else:
    body_show = body
if '--regions' in args:
    mark = re.compile(r'BAR\.SYNC|WARPGROUP\.(DEPBAR|ARRIVE)|MEMBAR|LDGDEPBAR|DEPBAR\.LE SB0|EXIT')
    start, cnt, acc, agg = body[0][0], 0, 0.0, dict.fromkeys(reasons, 0.0)
    for r in body:
        cnt += 1
        acc += num(r, 'Warp Stall Sampling (All Samples)')
        for h in reasons: agg[h] += num(r, h)
        if mark.search(r[1]):
            if acc >= 0.004 * tot:
                rs = sorted(((v, h[6:]) for h, v in agg.items()), reverse=True)[:3]
                print(f"  region {start[-5:]}-{r[0][-5:]} {cnt:5d} instructions {acc:6.0f} {100 * acc / tot:5.1f}%  ends "
                      f"{r[1].strip()[:36]:36s} " + " ".join(f"{k} {v:.0f}" for v, k in rs if v > 0))
            start, cnt, acc, agg = r[0], 0, 0.0, dict.fromkeys(reasons, 0.0)
best = sorted(body_show, key=lambda r: -num(r, 'Warp Stall Sampling (All Samples)'))[:top]
order = {id(r): i for i, r in enumerate(body)}
for r in sorted(best, key=lambda r: order[id(r)]):
    n = num(r, 'Warp Stall Sampling (All Samples)')
    rs = sorted(((num(r, h), h[6:]) for h in reasons), reverse=True)[:3]
    print(f"  {r[0][-5:]} {n:6.0f} {100 * n / tot:5.1f}%  x{num(r, 'Instructions Executed'):8.0f}  {r[1].strip()[:60]:60s} " +
          " ".join(f"{k} {v:.0f}" for v, k in rs if v > 0))
