#!/usr/bin/env python3
"""PyTorch side of `bench/device.sh f32`: times torch SDPA forced to `efficient` and `math` on the very
inputs `test_attention perf --section seed --dump` wrote (raw float32, (B, H, L, D), H = 8), and measures their error against
the same float64 reference (cpu-ref) the C side used. Prints RESULT lines in the C side's format."""
import glob, os, re, sys
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def graph_ms(f_on, qkv, per_call_ms, nset=4, replays=11):
    """Device time per call, as test_attention perf times it: a CUDA graph of G calls on inputs rotating over nset
    copies (past the L2), replayed; median replay / G."""
    sets = [qkv] + [tuple(x.clone() for x in qkv) for _ in range(nset - 1)]
    G = max(nset, min(256, int(2.0 / max(per_call_ms, 0.001))))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(nset):
            f_on(*sets[i])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [f_on(*sets[i % nset]) for i in range(G)]
    ts = []
    for r in range(replays + 2):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        if r >= 2:
            ts.append(a.elapsed_time(b) / G)
    del outs, g
    return sorted(ts)[replays // 2]


d = sys.argv[1]
print("torch", torch.__version__, torch.cuda.get_device_name(0))
for qf in sorted(glob.glob(os.path.join(d, "*_q.bin"))):
    tag = os.path.basename(qf)[:-6]
    m = re.match(r"(.+)_L(\d+)_D(\d+)_c(\d)", tag)
    what, L, D, causal = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    H = 8
    load = lambda w: torch.from_numpy(np.fromfile(os.path.join(d, f"{tag}_{w}.bin"), dtype=np.float32))
    q, k, v, ref = (load(w) for w in ("q", "k", "v", "ref"))
    B = q.numel() // (H * L * D)
    q, k, v = (x.view(B, H, L, D).cuda() for x in (q, k, v))
    ref = ref.view(B, H, L, D).cuda().double()
    flops = 4.0 * B * H * L * L * D * (0.5 * (L + 1) / L if causal else 1.0)
    for name, be in (("torch-efficient", SDPBackend.EFFICIENT_ATTENTION), ("torch-math", SDPBackend.MATH)):
        try:
            with sdpa_kernel(be):
                f_on = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                f = lambda: f_on(q, k, v)
                out = f()
                torch.cuda.synchronize()
                err = (out.double() - ref).abs().max().item()
                rel = ((out.double() - ref).norm() / ref.norm()).item()
                for _ in range(3):
                    f()
                reps = 15 if L >= 1024 else 30
                ts = []
                for _ in range(reps):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record(); f(); b.record(); b.synchronize()
                    ts.append(a.elapsed_time(b))
                ms = sorted(ts)[reps // 2]
                gms = graph_ms(f_on, (q, k, v), ms) if name == "torch-efficient" else -1.0
            print(f"RESULT {what} {B} {H} {L} {D} {causal} {name} exact - {ms:.4f} {flops / ms / 1e9:.2f} {err:.2e} {rel:.2e}"
                  f" {gms:.4f}", flush=True)
        except Exception as e:  # noqa: BLE001 -- report and go on
            print(f"RESULT {what} {B} {H} {L} {D} {causal} {name} exact - failed: {e}", flush=True)
        torch.cuda.empty_cache()
