#!/usr/bin/env python3
"""The short table of `bench/device.sh energy`, from the files it wrote into DIR:
  (a) the seeds' table: every bench*.json (flashwatt bench --json) and sdpa*.json (bench/sdpa_energy.py) row:
      ms, average and peak W, J/call, GFLOP/s per W;
  (b) the power-cap streams (stream-*.json of bench/energy_stream): calls/s, J/call, the largest 1-s average
      after the first second and whether every one stayed within cap + 5 %, the scheduler against the others;
  (c) race-to-idle: per bucket of the tuning table (tuning.txt), whether the fastest configuration is also
      the least-energy one.
Prints the table and writes it to DIR/summary.txt.

    python3 bench/energy_summary.py DIR
"""
import glob
import json
import math
import os
import sys

E = sys.argv[1]


def load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        print("(%s: %s)" % (os.path.basename(path), e))
        return []


def f(x, fmt):
    return fmt % x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else "n/a"


def rows_of(pattern):
    out = []
    for p in sorted(glob.glob(os.path.join(E, pattern))):
        data = load(p)
        out += data if isinstance(data, list) else [data]
    return out


rows = [r for r in rows_of("bench*.json") + rows_of("sdpa*.json") if isinstance(r, dict) and r.get("status") == "ok"]
streams = rows_of("stream-*.json")
out = []
out.append("(a) seeds' table: H=8 D=64 (ms: median; W and J/call: >= 1 s energy windows, NVML counter)")
out.append("%-16s %-4s %3s %5s %10s %8s %8s %11s %8s  %s" % ("backend", "dt", "B", "L", "ms", "avg W", "max W", "J/call", "GF/W", "note"))
for r in sorted(rows, key=lambda r: (r.get("dtype"), r.get("batch"), r.get("seqlen_q"), r.get("backend"))):
    note = r.get("note", "") or ""
    out.append("%-16s %-4s %3s %5s %10s %8s %8s %11s %8s  %s" % (r["backend"], r.get("dtype"), r.get("batch"), r.get("seqlen_q"),
               f(r.get("ms"), "%.4f"), f(r.get("watts_avg"), "%.0f"), f(r.get("watts_peak"), "%.0f"),
               f(r.get("joules_per_call"), "%.4g"), f(r.get("gflops_per_watt"), "%.1f"), note[:70]))
out.append("")
out.append("(b) sustained streams, B=16 H=8 L=1024 D=64 f16: 1-s average power after the first second vs cap + 5%")
out.append("%-5s %-14s %9s %11s %8s %10s %7s  %s" % ("cap", "mode", "calls/s", "J/call", "avg W", "max 1-s W", "ok", "config"))
for s in sorted(streams, key=lambda s: (s.get("cap_w", 0), s.get("mode", ""))):
    out.append("%-5s %-14s %9s %11s %8s %10s %7s  %s" % (f(s.get("cap_w"), "%.0f"), s.get("mode"), f(s.get("calls_per_s"), "%.1f"),
               f(s.get("j_per_call"), "%.4g"), f(s.get("avg_w"), "%.0f"), f(s.get("max_1s_w_after_first"), "%.0f"),
               "yes" if s.get("within_cap_5pct") else "NO", (s.get("config") or "")[:60]))
for cap in sorted(set(s.get("cap_w") for s in streams)):
    by = {s["mode"]: s for s in streams if s.get("cap_w") == cap}
    sc = by.get("sched")
    for other in ("static-best", "pace-fastest"):
        o = by.get(other)
        if sc and o and sc.get("calls_per_s") and o.get("calls_per_s"):
            jr = (sc["j_per_call"] / o["j_per_call"]) if sc.get("j_per_call") and o.get("j_per_call") else float("nan")
            out.append("  cap %.0f W: scheduler vs %-12s throughput x%.3f, J/call x%s" % (cap, other,
                       sc["calls_per_s"] / o["calls_per_s"], f(jr, "%.3f")))
out.append("")
out.append("(c) race-to-idle: per bucket of the tuning table, is the fastest configuration also the least-energy one?")
try:
    ents = []
    with open(os.path.join(E, "tuning.txt")) as fh:
        for line in fh:
            if line.startswith("#"): continue
            p = line.rstrip("\n").split("\t")
            if len(p) >= 14 and p[10] != "n/a":
                ents.append(p)
    buckets = {}
    for p in ents:
        buckets.setdefault(tuple(p[:7]), []).append(p)
    for k, lst in sorted(buckets.items()):
        fast = min(lst, key=lambda p: float(p[9]))
        cheap = min(lst, key=lambda p: float(p[10]))
        same = fast is cheap
        out.append("  %s D=%s BH=%s L=%s: fastest %s %s (%.4f ms, %.4g J); least energy %s %s (%.4f ms, %.4g J): %s" % (
            k[1], k[2], k[4], k[5], fast[7], fast[8], float(fast[9]), float(fast[10]), cheap[7], cheap[8],
            float(cheap[9]), float(cheap[10]), "race-to-idle holds" if same else
            "NOT the same: the least-energy one saves %.1f%% energy for %.1f%% more time" % (
                100 * (1 - float(cheap[10]) / float(fast[10])), 100 * (float(cheap[9]) / float(fast[9]) - 1))))
    if not buckets:
        out.append("  no energy in the tuning table (telemetry n/a?)")
except Exception as e:
    out.append("  tuning table unreadable: %s" % e)
text = "\n".join(out)
print(text)
with open(os.path.join(E, "summary.txt"), "w") as fh:
    fh.write(text + "\n")
