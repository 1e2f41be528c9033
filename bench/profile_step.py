"""Where the time of one forward+backward step goes: torch.profiler (CUPTI) around single steps of
flashwatt's autograd Function and of SDPA's flash backend, bf16 causal, 16k tokens, hidden 2048.
For each backend and shape it prints every kernel's device time (median over the profiled steps),
the step's GPU span (first kernel start to last kernel end), the GPU-idle time inside that span and
the lead time from the step's start on the host to its first kernel.

    FLASHWATT_LIBRARY=build/libflashwatt.so python3 bench/profile_step.py [--dims 64] [--lens 1024,2048]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashwatt  # noqa: E402


def sdpa(backend):
    def f(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return f


FNS = {
    "sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION),
    "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
    "flashwatt": lambda q, k, v: flashwatt.attention(q, k, v, causal=True),
}


def steps_of(trace, n):
    """Per profiled step: (host start, [(kernel name, start, duration)]) from a chrome trace."""
    ev = trace["traceEvents"]
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                   if e.get("cat") == "user_annotation" and e.get("name") == "step")
    kernels = sorted((e["ts"], e["dur"], e["name"]) for e in ev if e.get("cat") == "kernel")
    out = []
    for i, (t0, t1) in enumerate(marks[-n:]):
        nxt = marks[-n:][i + 1][0] if i + 1 < n else float("inf")
        ks = [(name, ts, dur) for ts, dur, name in kernels if t0 <= ts < nxt]
        out.append((t0, ks))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64")
    ap.add_argument("--lens", default="1024,2048,4096")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    for D in (int(x) for x in a.dims.split(",")):
        for L in (int(x) for x in a.lens.split(",")):
            B, H = 16384 // L, 2048 // D
            torch.manual_seed(0)
            q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16).requires_grad_(True) for _ in range(3))
            dout = torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16)
            for name, fn in FNS.items():
                def once():
                    q.grad = k.grad = v.grad = None
                    fn(q, k, v).backward(dout)
                for _ in range(3):
                    once()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    for _ in range(a.steps):
                        with record_function("step"):
                            once()
                        torch.cuda.synchronize()
                with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                    path = f.name
                prof.export_chrome_trace(path)
                with open(path) as f:
                    trace = json.load(f)
                os.unlink(path)
                per_kernel, spans, idles, leads = {}, [], [], []
                for t0, ks in steps_of(trace, a.steps):
                    if not ks:
                        continue
                    first, last = ks[0][1], max(ts + d for _, ts, d in ks)
                    busy = sum(d for _, _, d in ks)
                    spans.append((last - first) / 1e3)
                    idles.append((last - first - busy) / 1e3)
                    leads.append((first - t0) / 1e3)
                    for kname, _, d in ks:
                        per_kernel.setdefault(kname, []).append(d / 1e3)
                med = statistics.median
                row = {"D": D, "L": L, "backend": name, "span_ms": med(spans), "idle_ms": med(idles),
                       "lead_ms": med(leads),
                       "kernels": {kn: [med(v), len(v) // max(1, len(spans))] for kn, v in per_kernel.items()}}
                rows.append(row)
                print(f"D={D} L={L} {name}: GPU span {row['span_ms']:.3f} ms, idle inside {row['idle_ms']:.3f} ms,"
                      f" host start -> first kernel {row['lead_ms']:.3f} ms", flush=True)
                for kn, (ms, cnt) in sorted(row["kernels"].items(), key=lambda kv: -kv[1][0]):
                    print(f"    {ms:8.3f} ms x{cnt}  {kn[:150]}")
            del q, k, v, dout
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
