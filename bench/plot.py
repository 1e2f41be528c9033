#!/usr/bin/env python3
"""Plots of `flashwatt bench --json` rows (and of bench/energy_stream JSON, if given).

usage: python3 bench/plot.py BENCH.json [MORE.json ...] OUTDIR [--peak-tflops X] [--peak-gbps Y]

Writes PNGs into OUTDIR:
  latency.png       median ms against Lq, one line per backend (a panel per dtype / D / mask)
  tflops.png        TFLOP/s against Lq, same panels
  power_trace.png   sampled instant power over each row's energy window, per backend
  energy.png        J/call against Lq per backend (rows with a measured energy only)
  roofline.png      each row's (FLOP/byte, TFLOP/s) under the compute and bandwidth ceilings
  stream_*.png      1-s average power of the sustained streams of energy_stream (when given)
Rows without a number (null) are left out, never drawn as 0. Needs matplotlib.
"""
import json
import math
import os
import sys
from collections import defaultdict

plt = None  # matplotlib.pyplot, imported by main()

# An H200's ceilings (cuBLAS GEMM rates and copy bandwidth: docs/PERF.md "Ceilings"), so that a roofline of GPU
# rows has something measured to sit under; pass another machine's with --peak-tflops / --peak-gbps.
ANCHOR_TFLOPS = {"bf16": 753.0, "f16": 752.0, "f32": 50.0, "tf32": 399.0}
ANCHOR_GBPS = 4170.0


def ceilings(rows, peak_tflops, peak_gbps):
    """The roofline's ceilings: {name: TFLOP/s}, GB/s and what they are. The H200 anchors only under rows
    that ran on a GPU; rows of the CPU alone get none unless given (a GPU's ceilings would sit three orders
    of magnitude above them and say nothing about the CPU)."""
    gpu = any(str(r.get("device", "")).startswith("cuda") for r in rows)
    tops = {"given": peak_tflops} if peak_tflops else dict(ANCHOR_TFLOPS) if gpu else {}
    gbps = peak_gbps or (ANCHOR_GBPS if gpu else None)
    if peak_tflops or peak_gbps:
        return tops, gbps, "given" + (", else anchor H200 measurements" if gpu else "")
    if gpu:
        return tops, gbps, "anchor H200 measurements"
    return {}, None, "none under CPU rows; --peak-tflops/--peak-gbps give them"


def ok(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def load(paths):
    rows, streams = [], []
    for p in paths:
        try:
            with open(p) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write("plot.py: skipping %s: %s\n" % (p, e))
            continue
        if isinstance(data, dict):
            data = data.get("rows") or data.get("streams") or [data]
        for r in data:
            if not isinstance(r, dict):
                continue
            if r.get("kind") == "stream":
                streams.append(r)
            elif "backend" in r:
                rows.append(r)
    return rows, streams


def group_key(r):
    return "%s D=%s %s B=%s H=%s" % (r.get("dtype"), r.get("head_dim"), "causal" if r.get("causal") else "full",
                                     r.get("batch"), r.get("heads"))


def per_L_plot(rows, field, ylabel, fname, outdir, logy=True):
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get("status") == "ok" and ok(r.get(field)) and ok(r.get("seqlen_q")):
            groups[group_key(r)][r["backend"]].append((r["seqlen_q"], r[field]))
    if not groups:
        return None
    n = len(groups)
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4.2), squeeze=False)
    for ax, (g, by_backend) in zip(axes[0], sorted(groups.items())):
        for b, pts in sorted(by_backend.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=b)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(ylabel)
        ax.set_title(g, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(outdir, fname)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def power_trace_plot(rows, outdir):
    rs = [r for r in rows if isinstance(r.get("power_trace"), list) and r["power_trace"]]
    if not rs:
        return None
    by_backend = defaultdict(list)
    for r in rs:
        by_backend[r["backend"]].append(r)
    n = len(by_backend)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.6 * n), squeeze=False, sharex=True)
    for ax, (b, lst) in zip(axes[:, 0], sorted(by_backend.items())):
        for r in lst:
            t = [p[0] for p in r["power_trace"]]
            w = [p[1] for p in r["power_trace"]]
            ax.plot(t, w, label="%s L=%s" % (r.get("dtype"), r.get("seqlen_q")), lw=1)
        ax.set_ylabel("W")
        ax.set_title("%s: instant power during the energy window" % b, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=3)
    axes[-1, 0].set_xlabel("seconds from the start of the window")
    fig.tight_layout()
    path = os.path.join(outdir, "power_trace.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def roofline_plot(rows, outdir, peak_tflops, peak_gbps):
    pts = [r for r in rows if r.get("status") == "ok" and ok(r.get("intensity")) and ok(r.get("tflops"))]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    xs = [r["intensity"] for r in pts]
    lo, hi = min(xs) / 4, max(xs) * 4
    tops, gbps, what = ceilings(pts, peak_tflops, peak_gbps)
    for name, tf in sorted(tops.items()):
        if gbps:  # min(bandwidth x intensity, compute), its knee drawn only where it falls inside the plot
            knee = tf * 1e12 / (gbps * 1e9)
            xx = [lo] + ([knee] if lo < knee < hi else []) + [hi]
            ax.plot(xx, [min(x * gbps * 1e9 / 1e12, tf) for x in xx], "--", lw=1,
                    label="ceiling %s %.3g TFLOP/s, %.0f GB/s" % (name, tf, gbps))
        else:
            ax.plot([lo, hi], [tf, tf], "--", lw=1, label="ceiling %s %.3g TFLOP/s" % (name, tf))
    if gbps and not tops:
        ax.plot([lo, hi], [lo * gbps * 1e9 / 1e12, hi * gbps * 1e9 / 1e12], "--", lw=1, label="%.0f GB/s" % gbps)
    markers = "osD^v<>ph*"
    for i, b in enumerate(sorted(set(r["backend"] for r in pts))):
        sel = [r for r in pts if r["backend"] == b]
        ax.scatter([r["intensity"] for r in sel], [r["tflops"] for r in sel], marker=markers[i % len(markers)],
                   label=b, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("roofline (ceilings: %s)" % what, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    path = os.path.join(outdir, "roofline.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def stream_plots(streams, outdir):
    out = []
    by_cap = defaultdict(list)
    for s in streams:
        by_cap[s.get("cap_w")].append(s)
    for cap, lst in sorted(by_cap.items(), key=lambda kv: kv[0] or 0):
        fig, ax = plt.subplots(figsize=(9, 3.6))
        for s in lst:
            sec = s.get("power_1s") or []
            if sec:
                ax.plot(range(1, len(sec) + 1), sec, marker=".", label=s.get("mode", "?"))
        if ok(cap):
            ax.axhline(cap, color="k", lw=1, label="cap")
            ax.axhline(cap * 1.05, color="r", lw=1, ls="--", label="cap + 5%")
        ax.set_xlabel("second")
        ax.set_ylabel("1-s average W")
        ax.set_title("sustained stream under cap %s W" % cap, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(outdir, "stream_cap%s.png" % (int(cap) if ok(cap) else "none"))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out


def main(argv):
    global plt
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("plot.py: matplotlib is missing (python3 -m pip install matplotlib); no plots made\n")
        return 3
    peak_tflops = peak_gbps = None
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--peak-tflops":
            peak_tflops = float(argv[i + 1]); i += 2
        elif argv[i] == "--peak-gbps":
            peak_gbps = float(argv[i + 1]); i += 2
        else:
            args.append(argv[i]); i += 1
    if len(args) < 2:
        sys.stderr.write(__doc__)
        return 2
    outdir = args[-1]
    os.makedirs(outdir, exist_ok=True)
    rows, streams = load(args[:-1])
    made = [
        per_L_plot(rows, "ms", "ms per call (median)", "latency.png", outdir),
        per_L_plot(rows, "tflops", "TFLOP/s", "tflops.png", outdir),
        power_trace_plot(rows, outdir),
        per_L_plot(rows, "joules_per_call", "J per call", "energy.png", outdir),
        roofline_plot(rows, outdir, peak_tflops, peak_gbps),
    ] + stream_plots(streams, outdir)
    made = [m for m in made if m]
    for m in made:
        print("wrote", m)
    if not any(ok(r.get("joules_per_call")) for r in rows):
        print("no measured energy in these rows (telemetry n/a): energy.png and power_trace.png not made")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
