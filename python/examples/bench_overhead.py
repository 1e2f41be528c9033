"""Host-side cost of one flashwatt.attention call from Python, next to SDPA's, on tiny problems
where the kernel is negligible (calls are launched back to back; the GPU runs them asynchronously).

    python python/examples/bench_overhead.py [--device cuda] [--n 3000]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flashwatt as fw  # noqa: E402


def per_call_us(fn, device, n):
    for _ in range(50):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, default=3000)
    a = ap.parse_args()
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    ctx = fw.Context(threads=1)
    lib = fw._lib.load()
    print(f"ctypes call of fw_version: {per_call_us(lambda: lib.fw_version(), 'cpu', a.n):.2f} us")
    for shape in [(1, 8, 1, 64), (1, 8, 64, 64)]:
        q = torch.randn(*shape, device=a.device, dtype=dtype)
        f = per_call_us(lambda: ctx.attention(q, q, q), a.device, a.n)
        s = per_call_us(lambda: F.scaled_dot_product_attention(q, q, q), a.device, a.n)
        # The C call alone, descriptors built once: the rest of `flashwatt` is the binding's cost.
        from flashwatt import _torch
        o = torch.empty_like(q)
        d = [_torch.descriptor(t) for t in (q, q, q, o)]
        p = fw._attention.make_params(False, None, None)
        fn, h, pb = lib.fw_forward_packed, ctx.handle, bytes(p)
        c = per_call_us(lambda: fn(h, d[0], d[1], d[2], d[3], None, pb), a.device, a.n)
        print(f"{a.device} {str(dtype)[6:]} {shape}: flashwatt {f:.1f} us/call ({ctx.last_backend}; "
              f"C call alone {c:.1f}), sdpa {s:.1f} us/call")
        # A training step: the forward through the autograd Function, then its backward.
        qg, kg, vg = (torch.randn(*shape, device=a.device, dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(*shape, device=a.device, dtype=dtype)

        def step(fn):
            def run():
                qg.grad = kg.grad = vg.grad = None
                fn().backward(dout)
            return run
        fg = per_call_us(lambda: ctx.attention(qg, kg, vg, causal=True), a.device, a.n)
        sg = per_call_us(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=True), a.device, a.n)
        fb = per_call_us(step(lambda: ctx.attention(qg, kg, vg, causal=True)), a.device, a.n)
        sb = per_call_us(step(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)), a.device, a.n)
        print(f"    with autograd: forward flashwatt {fg:.1f} / sdpa {sg:.1f} us; forward+backward step "
              f"flashwatt {fb:.1f} / sdpa {sb:.1f} us")


if __name__ == "__main__":
    main()
