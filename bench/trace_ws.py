"""Where the persistent wgmma kernel's time goes (cuda-flash-f32 tf32/3xtf32, `wsp`): reads the clock64 trace that
docs/runs/f32_ws_trace.patch adds to ff32_ws_kernel and prints, per item (query block) of a block, the medians over
the blocks of each phase, then the split warps' phases per tile.

  FW_F32_PATCH=docs/runs/f32_ws_trace.patch FW_F32_TRACE_FILE=$OUT/tr FW_F32_BENCH_ONLY=seed:512 \\
      bash bench/device_f32.sh && python3 bench/trace_ws.py $OUT/tr.3xtf32-short.L512 [SM clock GHz, default 1.98]
(files: tr.<mode>[-short].L<Lq>, the last traced call of each persistent kernel; `-short` is config wsps)

Trace layout (int64): a header of 4 int32 (grid, Lq, batch, heads), then [132 blocks][4 roles][512 slots]; roles
0/1 the consumer warpgroups (slots 12j + 0..9 for item j: start, first K tile in, its turn, S(0) done, loop done,
last P·V done, O stored, the loop's waits (tile << 32 | turn), Q in registers), role 2 the producer thread (2g: the
tile's flag seen, 2g + 1: its copies issued), role 3 the split warps (4k + 0..3: ticket taken, raw tile in, split,
flag raised); slot 511 is each role's clock at entry."""
import sys
import numpy as np

path = sys.argv[1]
ghz = float(sys.argv[2]) if len(sys.argv) > 2 else 1.98
raw = open(path, 'rb').read()
grid, lq, batch, heads = [int(x) for x in np.frombuffer(raw[:16], dtype=np.int32)]
t = np.frombuffer(raw[16:], dtype=np.int64).reshape(132, 4, 512).astype(np.float64)
us = lambda cycles: cycles / ghz / 1000.0
print(f"{path}: {grid} blocks, Lq {lq}, batch {batch}, heads {heads}")
phases = ['Q + first tile', 'turn', 'S(0) + softmax', 'loop', 'last P·V', 'store', 'to next item']
for c in range(2):
    rows = []
    for b in range(grid):
        n = 0
        while n < 40 and t[b, c, 12 * n + 6] != 0:
            n += 1
        for j in range(n):
            s = t[b, c, 12 * j: 12 * j + 7]
            gap = t[b, c, 12 * (j + 1)] - s[6] if j + 1 < n else np.nan
            waits = int(t[b, c, 12 * j + 7])
            rows.append([j] + [us(s[k + 1] - s[k]) for k in range(6)] + [us(gap), us(waits >> 32),
                        us(waits & 0xffffffff), us(t[b, c, 12 * j + 8] - s[0])])
    r = np.array(rows)
    print(f"consumer warpgroup {c}, medians over the blocks, us:")
    for j in sorted(set(r[:, 0].astype(int))):
        q = r[r[:, 0] == j]
        cols = ", ".join(f"{phases[k]} {np.nanmedian(q[:, k + 1]):.2f}" for k in range(7) if k < 6 or j + 1 < r[:, 0].max() + 1)
        print(f"  item {j} ({len(q)} blocks): {cols} | sum {np.median(q[:, 1:7].sum(1)):.2f}; in the loop: tile waits "
              f"{np.median(q[:, 8]):.2f}, turn waits {np.median(q[:, 9]):.2f}; Q in registers after {np.median(q[:, 10]):.2f}")
ph, tiles = [], []
for b in range(grid):
    k = 0
    while k < 127 and t[b, 3, 4 * k + 3] != 0:
        q = t[b, 3, 4 * k: 4 * k + 4]
        prev = t[b, 3, 4 * (k - 1) + 3] if k > 0 else t[b, 3, 511]
        ph.append([us(q[0] - prev), us(q[1] - q[0]), us(q[2] - q[1]), us(q[3] - q[2])])
        k += 1
    tiles.append(k)
ph = np.array(ph)
if len(ph):
    print(f"split warps: {np.mean(tiles):.1f} tiles a block; per tile, median us: to the next ticket {np.median(ph[:, 0]):.2f}, "
          f"raw tile in {np.median(ph[:, 1]):.2f}, split {np.median(ph[:, 2]):.2f}, fence + flag {np.median(ph[:, 3]):.2f}; "
          f"cycle {np.median(ph.sum(1)):.2f}")
