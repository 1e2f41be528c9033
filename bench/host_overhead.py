"""Host cost of one flashwatt.attention call from Python next to SDPA's, on a tiny problem where the
kernel is negligible: calls are launched back to back (a GPU runs them asynchronously) and timed on the
host. Rows: the forward without autograd, the forward with inputs that require grad, a whole
forward+backward step, the same three under torch.compile (--compiled), the custom op called through
torch's dispatcher (the path torch.compile traces), the bare C calls, and an autograd.Function with empty
bodies (the floor of the autograd rows for a binding written in Python). On CUDA also the forward and
the fwd+bwd step captured into a torch.cuda.graph and replayed (the host cost gone: what is left is the
GPU's). flashwatt and SDPA alternate in rounds and each row reports the median round, so that a machine
shared with other work biases neither. The last line says whether each eager row is within SDPA + 10%.

    python3 bench/host_overhead.py [--device cpu|cuda] [--rounds 15] [--n 500] [--compiled] [--json F]
    python3 bench/host_overhead.py --package /other/checkout/python   # "before" numbers: another package
        (with FLASHWATT_LIBRARY=/other/checkout/build/libflashwatt.so for its library)
"""
import argparse
import json
import os
import statistics
import sys
import time

REPO_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")


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


def graphed(torch, fn, calls):
    """A function replaying one torch.cuda.graph that holds `calls` calls of fn (captured after a warm-up
    on a side stream, as torch's documentation asks); its per-call time is the replay's over `calls`."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g.replay


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    ap.add_argument("--n", type=int, default=500, help="calls per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--package", default=REPO_PYTHON,
                    help="directory holding the flashwatt package to measure (default: this checkout's python/)")
    ap.add_argument("--shape", default="1,8,1,64", help="B,H,L,D (default 1,8,1,64: one decode step)")
    ap.add_argument("--compiled", action="store_true", help="also the three rows under torch.compile(fullgraph=True)")
    ap.add_argument("--graph-calls", type=int, default=20, help="CUDA: calls captured in one graph (0: no graph rows)")
    ap.add_argument("--json", help="write the rows (µs per call) to this file")
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
    where = os.path.dirname(fw.__file__)
    print(f"flashwatt {fw.__version__} from {where}, library {fw.library_path()}")
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

    def fw_attn(x, y, z):
        return ctx.attention(x, y, z, causal=True)

    def sd_attn(x, y, z):
        return F.scaled_dot_product_attention(x, y, z, is_causal=True)

    def three(f, s, tag=""):
        return [(f"forward, no autograd{tag}", lambda: f(q, q, q), lambda: s(q, q, q)),
                (f"forward, inputs require grad{tag}", lambda: f(qg, kg, vg), lambda: s(qg, kg, vg)),
                (f"forward+backward step{tag}", step(f), step(s))]

    results = {}
    rows = three(fw_attn, sd_attn)
    if a.compiled:
        rows += three(torch.compile(fw_attn, fullgraph=True), torch.compile(sd_attn, fullgraph=True), ", compiled")
    if device == "cuda" and a.graph_calls > 0:
        k = a.graph_calls
        for name, f, s in (("forward in a CUDA graph (replay)", lambda: fw_attn(q, q, q), lambda: sd_attn(q, q, q)),
                           ("fwd+bwd step in a CUDA graph (replay)", step(fw_attn), step(sd_attn))):
            try:
                rows.append((name, graphed(torch, f, k), graphed(torch, s, k), k))
            except Exception as e:  # a capture that fails is a result too; the other rows still run
                print(f"{name}: capture failed: {type(e).__name__}: {e}")
                results[name] = {"error": f"{type(e).__name__}: {e}"}
    print(f"{'':40} {'flashwatt':>10} {'sdpa':>8} {'ratio':>7}")
    eager = []
    for row in rows:
        name, f, s = row[:3]
        per = row[3] if len(row) > 3 else 1  # calls per function call (a graph replays several)
        got = rounds({"fw": f, "sdpa": s}, max(a.n // per, 10), a.rounds, sync)
        fw_us, sd_us = got["fw"] / per, got["sdpa"] / per
        results[name] = {"flashwatt_us": fw_us, "sdpa_us": sd_us}
        if len(row) == 3 and "compiled" not in name:
            eager.append((name, fw_us / sd_us))
        print(f"{name:40} {fw_us:10.1f} {sd_us:8.1f} {fw_us / sd_us:7.2f}")

    # What the pieces cost: the op through torch's dispatcher, and the C call alone.
    parts = {}
    ops = getattr(torch.ops, "flashwatt", None)
    if ops is not None and hasattr(ops, "attention_forward") and hasattr(ctx, "op_id"):
        op = ops.attention_forward.default
        parts["custom op via the dispatcher"] = lambda: op(q, q, q, None, True, -1, -1, False, "bhsd", "auto",
                                                            ctx.op_id)
    from flashwatt import _torch

    o = torch.empty_like(q)
    d = [_torch.descriptor(t) for t in (q, q, q, o)]
    p = fw._attention.make_params(True, None, None)
    fn, h, pb = fw._lib.load().fw_forward_packed, ctx.handle, bytes(p)
    parts["C call alone"] = lambda: fn(h, d[0], d[1], d[2], d[3], None, pb)

    # the C call with its output allocated per call, as every binding call does: on the CPU a fresh
    # output costs the kernel time too, so this is what "the binding's own cost" is measured against
    def c_call_fresh_output():
        out = torch.empty_like(q)  # held until the call returns
        return fn(h, d[0], d[1], d[2], _torch.descriptor(out), None, pb)

    parts["C call, output per call"] = c_call_fresh_output

    # the backward's C call with its three gradients allocated per call, on a forward's output and LSE
    ob, lse = torch.empty_like(q), torch.empty(shape[:3], device=device, dtype=torch.float32)
    db = [_torch.descriptor(t) for t in (q, q, q, ob, dout)]
    fn(h, db[0], db[1], db[2], db[3], lse.data_ptr(), pb)
    bfn, lp = fw._lib.load().fw_backward_packed, lse.data_ptr()

    def c_backward_fresh_grads():
        dq, dk, dv = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
        g = [_torch.descriptor(t) for t in (dq, dk, dv)]
        return bfn(h, db[0], db[1], db[2], db[3], lp, db[4], g[0], g[1], g[2], pb)

    parts["C backward, gradients per call"] = c_backward_fresh_grads

    # The floor of the autograd rows for any Python binding: a torch.autograd.Function whose bodies only
    # allocate the output (SDPA's autograd node is C++; a ctypes binding's cannot be).
    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(fctx, x, y, z):
            return torch.empty_like(x)

        @staticmethod
        def backward(fctx, g):
            return g, g, g

    def empty_step():
        qg.grad = kg.grad = vg.grad = None
        Empty.apply(qg, kg, vg).backward(dout)

    parts["autograd.Function, empty: forward"] = lambda: Empty.apply(qg, kg, vg)
    parts["autograd.Function, empty: step"] = empty_step
    got = rounds(parts, a.n, a.rounds, sync)
    for name, us in got.items():
        results[name] = {"flashwatt_us": us}
        print(f"{name:40} {us:10.1f}")
    # what the binding and autograd add to the C calls (on the CPU the C calls hold the kernels' time too)
    c_fwd, c_bwd = got["C call, output per call"], got["C backward, gradients per call"]
    binding = {"forward, no autograd": results["forward, no autograd"]["flashwatt_us"] - c_fwd,
               "forward+backward step": results["forward+backward step"]["flashwatt_us"] - c_fwd - c_bwd}
    for name, us in binding.items():
        results[f"binding: {name}"] = {"flashwatt_us": us}
        print(f"{'binding: ' + name + ' - C calls':40} {us:10.1f}")
    print(f"(backend {ctx.last_backend})")
    over = [f"{n} {r:.2f}x" for n, r in eager if r > 1.10]
    print("within SDPA + 10%: " + ("every eager row" if not over else "no: " + ", ".join(over)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"flashwatt": fw.__version__, "package": where, "torch": torch.__version__, "device": device,
                       "dtype": str(dtype)[6:], "shape": shape, "backend": ctx.last_backend, "rows": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
