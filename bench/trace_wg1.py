"""Where the one-warpgroup 3xtf32/tf32 kernel's time goes (cuda-flash-f32 `wg1`): reads the clock64 trace that
docs/runs/f32_wg1_trace.patch adds to ff32_wg1_kernel (thread 0 of each block; the last call outside a graph capture,
FW_F32_TRACE_COLD=1: after 128 MB written, so the inputs come from DRAM). The patch is against the kernel of commit
46b068b (run fa of docs/PERF-gpu-f32.md, Run 10); bench/trace_wg1.sh runs it on the GPU machine. and prints the medians over the blocks.

  FW_F32_PATCH=docs/runs/f32_wg1_trace.patch FW_F32_TRACE_FILE=$OUT/tr FW_F32_BENCH_ONLY=seed:128 \\
      bash bench/device_f32.sh && python3 bench/trace_wg1.py $OUT/tr.3xtf32.B16.L128.n1

Layout (int64): a header of 4 int32 (blocks, Lq, batch, heads), then [1024 blocks][64 slots]: 0 globaltimer at entry,
1 clock at entry, 2 SM, 3 Q landed, 4 Q in registers, 8 + 8i + 0..5 tile i: raw in, K split (and P·V(i-1) retired),
Vᵀ split, S done, (4 unused), P·V issued; 48 loop done, 49 partials merged, 50 O stored, 51 globaltimer at the end."""
import sys
import numpy as np

path = sys.argv[1]
raw = open(path, 'rb').read()
nb, lq, batch, heads = [int(x) for x in np.frombuffer(raw[:16], dtype=np.int32)]
t = np.frombuffer(raw[16:], dtype=np.int64).reshape(1024, 64).astype(np.float64)[:min(nb, 1024)]
t = t[t[:, 0] > 0]
ended = t[:, 51] > 0  # split-KV: only the range that merges and stores reaches the end
g0 = t[:, 0] - t[:, 0].min()
ghz = np.median((t[ended, 50] - t[ended, 1]) / (t[ended, 51] - t[ended, 0]))
us = lambda c: c / ghz / 1000.0
print(f"{path}: {nb} blocks ({len(t)} traced), Lq {lq}, batch {batch}, heads {heads}; clock {ghz:.2f} GHz (clock64 / globaltimer)")
print(f"kernel span (first entry to last end, globaltimer): {(t[ended, 51].max() - t[:, 0].min()) / 1000:.2f} us; "
      f"{ended.sum()} blocks stored O")
q = lambda x: f"{np.median(x):6.2f} [{np.percentile(x, 10):5.2f} {np.percentile(x, 90):5.2f}]"
print(f"block entry after the first: {q(g0 / 1000)}; block end: {q((t[ended, 51] - t[:, 0].min()) / 1000)}")
sms = t[:, 2].astype(int)
per_sm = np.bincount(sms)
print(f"blocks an SM: {np.bincount(per_sm[per_sm > 0])[1:].tolist()} (SMs with 1, 2, ...)")
print("since the block's entry, us: median [p10 p90]")
rel = lambda s: us(t[t[:, s] > 0, s] - t[t[:, s] > 0, 1])
print(f"  Q landed        {q(rel(3))}")
print(f"  Q in registers  {q(rel(4))}")
names = ['raw in', 'K split', 'V split', 'S done', '', 'softmax + PV issued']
for i in range(5):
    have = t[:, 8 + 8 * i] > 0
    if not have.any():
        break
    tt = t[have]
    prev = tt[:, 4] if i == 0 else tt[:, 8 + 8 * (i - 1) + 5]
    d = [us(tt[:, 8 + 8 * i] - prev)] + [us(tt[:, 8 + 8 * i + k] - tt[:, 8 + 8 * i + k - 1]) for k in range(1, 4)]
    d += [None, us(tt[:, 8 + 8 * i + 5] - tt[:, 8 + 8 * i + 3])]
    print(f"  tile {i} ({have.sum()} blocks), phase durations: " + ", ".join(f"{names[k]} {np.median(d[k]):.2f}" for k in (0, 1, 2, 3, 5))
          + f"; at {np.median(us(tt[:, 8 + 8 * i + 5] - tt[:, 1])):.2f}")
print(f"  loop done       {q(rel(48))}")
print(f"  merged          {q(rel(49))}")
print(f"  O stored        {q(rel(50))}")
