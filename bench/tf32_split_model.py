#!/usr/bin/env python3
"""The 3xtf32 split's own error, in a float64 model of the products (no tensor-core accumulation error):
attention on the GPU test's inputs (q, k in [-2, 2), v in [-1, 1)), S and P.V each as big.big + big.small +
small.big, the parts as the tensor cores see them (f32 truncated to its top 19 bits), split either by rounding
both parts to tf32 (the wgmma kernels before Run 12 of docs/PERF-gpu-f32.md) or by truncation (big = x & 0xffffe000,
small = x - big: Run 12). Prints max |O - O_fp64| / max |v| per head dim. Needs numpy."""
import numpy as np

MASK = np.uint32(0xFFFFE000)


def trunc(x):
    return (np.asarray(x, np.float32).view(np.uint32) & MASK).view(np.float32)


def rnd(x):  # to nearest, ties away, as ff32_round_tf32 (flash_f32_kernel.cuh)
    return ((np.asarray(x, np.float32).view(np.uint32) + np.uint32(0x1000)) & MASK).view(np.float32)


def split(x, mode):
    x = np.asarray(x, np.float32)
    big = rnd(x) if mode == "round" else trunc(x)
    small = (x - big).astype(np.float32)
    if mode == "round":
        small = rnd(small)
    return trunc(big).astype(np.float64), trunc(small).astype(np.float64)  # what the tensor cores read


def mm3(a, b, mode):
    ab, as_ = split(a, mode)
    bb, bs = split(b, mode)
    return ab @ bb + ab @ bs + as_ @ bb


def main():
    rng = np.random.default_rng(1)
    L = 512
    for D in (64, 128, 256):
        q = (4 * rng.random((L, D)) - 2).astype(np.float32)
        k = (4 * rng.random((L, D)) - 2).astype(np.float32)
        v = (2 * rng.random((L, D)) - 1).astype(np.float32)
        s = (q.astype(np.float64) @ k.T.astype(np.float64)) / np.sqrt(D)
        p = np.exp(s - s.max(1, keepdims=True))
        o = (p @ v) / p.sum(1, keepdims=True)
        qs = (q * np.float32(np.log2(np.e) / np.sqrt(D))).astype(np.float32)  # Q pre-scaled, as the kernels do
        for mode in ("round", "trunc"):
            s2 = mm3(qs, k.T, mode)
            p2 = np.exp2(s2 - s2.max(1, keepdims=True)).astype(np.float32)
            o2 = mm3(p2, v, mode) / p2.astype(np.float64).sum(1, keepdims=True)
            print(f"D={D:3d} L={L} split by {mode:5s}: max|O - O_fp64| / max|v| = {np.abs(o2 - o).max() / np.abs(v).max():.2e}")


if __name__ == "__main__":
    main()
