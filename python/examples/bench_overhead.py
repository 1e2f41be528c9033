"""Host cost of one flashwatt.attention call from Python next to SDPA's, on tiny problems where the
kernel is negligible: calls are launched back to back (the GPU runs them asynchronously) and timed on
the host. Rows: the forward without autograd, the forward with inputs that require grad, a whole
forward+backward step, the custom op called through torch's dispatcher (the path torch.compile
traces), and the bare C call (descriptors built once). flashwatt and SDPA alternate in rounds and each
row reports the median round, so that a machine shared with other work biases neither.

    python python/examples/bench_overhead.py [--device cuda] [--rounds 15] [--n 500]
    python python/examples/bench_overhead.py --package /path/to/other/checkout/python   # "before" numbers
"""
import argparse
import os
import statistics
import sys
import time


def per_call_us(fn, n, sync):
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def rounds(fns, n, r, sync):
    """Median per-call µs of each function, the functions interleaved round by round."""
    for f in fns.values():  # warm-up (lazy initialisation, caches)
        per_call_us(f, max(n // 5, 20), sync)
    got = {k: [] for k in fns}
    for _ in range(r):
        for k, f in fns.items():
            got[k].append(per_call_us(f, n, sync))
    return {k: statistics.median(v) for k, v in got.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    ap.add_argument("--n", type=int, default=500, help="calls per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--package", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="directory holding the flashwatt package to measure (default: this checkout's python/)")
    ap.add_argument("--shape", default="1,8,1,64", help="B,H,L,D (default 1,8,1,64: one decode step)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.package))
    import torch
    import torch.nn.functional as F

    import flashwatt as fw

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shape = tuple(int(x) for x in a.shape.split(","))
    if device == "cpu":  # one thread each: the host's per-call cost, not a thread team's wake-up on a busy machine
        torch.set_num_threads(1)
    ctx = fw.Context(threads=1) if device == "cpu" else fw.Context()
    lib = fw._lib.load()
    print(f"flashwatt {fw.__version__} from {os.path.dirname(fw.__file__)}, library {fw.library_path()}")
    print(f"torch {torch.__version__}, {device} {str(dtype)[6:]} {shape}, {a.rounds} rounds of {a.n} calls, "
          f"median round (us per call)")

    q = torch.randn(*shape, device=device, dtype=dtype)
    qg, kg, vg = (torch.randn(*shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(*shape, device=device, dtype=dtype)

    def step(attn):
        def run():
            qg.grad = kg.grad = vg.grad = None
            attn(qg, kg, vg).backward(dout)
        return run

    fw_attn = lambda x, y, z: ctx.attention(x, y, z, causal=True)  # noqa: E731
    sd_attn = lambda x, y, z: F.scaled_dot_product_attention(x, y, z, is_causal=True)  # noqa: E731
    rows = [
        ("forward, no autograd", lambda: fw_attn(q, q, q), lambda: sd_attn(q, q, q)),
        ("forward, inputs require grad", lambda: fw_attn(qg, kg, vg), lambda: sd_attn(qg, kg, vg)),
        ("forward+backward step", step(fw_attn), step(sd_attn)),
    ]
    print(f"{'':32} {'flashwatt':>10} {'sdpa':>8} {'ratio':>7}")
    forward_us = None
    for name, f, s in rows:
        got = rounds({"fw": f, "sdpa": s}, a.n, a.rounds, sync)
        forward_us = forward_us or got["fw"]
        print(f"{name:32} {got['fw']:10.1f} {got['sdpa']:8.1f} {got['fw'] / got['sdpa']:7.2f}")

    # What the pieces cost: the op through torch's dispatcher, and the C call alone.
    parts = {}
    ops = getattr(torch.ops, "flashwatt", None)
    if ops is not None and hasattr(ops, "attention_forward"):
        op = ops.attention_forward.default
        parts["custom op via the dispatcher"] = lambda: op(q, q, q, None, True, -1, -1, False, "bhsd", "auto",
                                                            ctx.op_id)
    from flashwatt import _torch

    o = torch.empty_like(q)
    d = [_torch.descriptor(t) for t in (q, q, q, o)]
    p = fw._attention.make_params(True, None, None)
    fn, h, pb = lib.fw_forward_packed, ctx.handle, bytes(p)
    parts["C call alone"] = lambda: fn(h, d[0], d[1], d[2], d[3], None, pb)
    # the C call with its output allocated per call, as every binding call does: on the CPU a fresh
    # output costs the kernel time too, so this is what "the binding's own cost" is measured against
    def c_call_fresh_output():
        out = torch.empty_like(q)  # held until the call returns
        return fn(h, d[0], d[1], d[2], _torch.descriptor(out), None, pb)

    parts["C call, output per call"] = c_call_fresh_output
    got = rounds(parts, a.n, a.rounds, sync)
    for name, us in got.items():
        print(f"{name:32} {us:10.1f}")
    print(f"{'binding (forward - C call)':32} {forward_us - got['C call, output per call']:10.1f}")
    print(f"(backend {ctx.last_backend})")


if __name__ == "__main__":
    main()
