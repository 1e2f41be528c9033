#!/usr/bin/env python3
"""PyTorch side of bench/device_f32.sh: times torch SDPA forced to `efficient` and `math` on the very
inputs gpu_cuda_f32 --bench wrote (raw float32, (B, H, L, D), H = 8), and measures their error against
the same float64 reference (cpu-ref) the C side used. Prints RESULT lines in the C side's format."""
import glob, os, re, sys
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
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
                f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
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
            print(f"RESULT {what} {B} {H} {L} {D} {causal} {name} exact - {ms:.4f} {flops / ms / 1e9:.2f} {err:.2e} {rel:.2e}",
                  flush=True)
        except Exception as e:  # noqa: BLE001 -- report and go on
            print(f"RESULT {what} {B} {H} {L} {D} {causal} {name} exact - failed: {e}", flush=True)
        torch.cuda.empty_cache()
