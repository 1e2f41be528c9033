"""A small GPT-style transformer block whose attention is either PyTorch SDPA or flashwatt.

Both run the same weights on the same input; the script checks that the outputs agree within the
dtype's tolerance, then prints median timings (attention alone, the block's forward and, where a
flashwatt backward exists, forward+backward) and, where the library has telemetry and a GPU,
energy per call measured over >= 1 s windows of back-to-back calls.

    python python/examples/gpt_block.py                       # cuda bf16 if present, else cpu f32
    python python/examples/gpt_block.py --device cpu --seq 256
    FLASHWATT_LIBRARY=build/libflashwatt.so python python/examples/gpt_block.py --dtype f16 --seq 4096

Exit status: 0 when the outputs agree, 1 when they do not, 2 on a setup problem.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("gpt_block: PyTorch is not installed", file=sys.stderr)
    sys.exit(2)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flashwatt as fw  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SDPA_HAS_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2] if x.isdigit()) >= (2, 5)


class Block(nn.Module):
    """Pre-norm GPT block: x + Attn(LN(x)), then x + MLP(LN(x)); causal self-attention with
    ``heads`` query heads and ``kv_heads`` key/value heads (GQA when fewer)."""

    def __init__(self, d_model: int, heads: int, kv_heads: int):
        super().__init__()
        assert d_model % heads == 0 and heads % kv_heads == 0
        self.h, self.hkv, self.d = heads, kv_heads, d_model // heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, (heads + 2 * kv_heads) * self.d)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.impl = "sdpa"
        self.fw_context: fw.Context | None = None

    def qkv_views(self, x: torch.Tensor):
        """(B, S, heads, D) and (B, S, kv_heads, D) strided views of one projection (no copies)."""
        B, S, _ = x.shape
        qkv = self.qkv(self.ln1(x))
        q, k, v = qkv.split([self.h * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        return q.view(B, S, self.h, self.d), k.view(B, S, self.hkv, self.d), v.view(B, S, self.hkv, self.d)

    def attention(self, q, k, v):
        """Causal attention of (B, S, H, D) views -> (B, S, H, D)."""
        if self.impl == "flashwatt":
            return fw.attention(q, k, v, causal=True, layout="bshd", context=self.fw_context)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.hkv != self.h:
            if SDPA_HAS_GQA:  # torch >= 2.5: SDPA reads the kv heads without copies
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)
            g = self.h // self.hkv
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, C = x.shape
        a = self.attention(*self.qkv_views(x))
        x = x + self.proj(a.reshape(B, S, C))
        return x + self.mlp(self.ln2(x))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device, warmup: int, iters: int) -> float:
    """Median wall time of fn() in ms (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def energy_per_call(fn, device, seconds: float):
    """(joules per call, average watts, calls, source) over a >= `seconds` window, or None."""
    if device.type != "cuda":
        return None
    n = 0
    with fw.energy(gpu=device.index or 0) as e:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                fn()
            n += 10
            sync(device)
    if e.joules is None:
        return None
    return e.joules / n, e.avg_w, n, e.source


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: bf16 on cuda, f32 on cpu")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=None, help="GQA: fewer key/value heads")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--backend", default="auto", help="flashwatt backend (default auto)")
    ap.add_argument("--energy-seconds", type=float, default=1.5, help="energy window length; 0 = skip")
    ap.add_argument("--no-backward", action="store_true", help="skip the forward+backward timing")
    args = ap.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpt_block: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    gpu = device.type == "cuda"
    dtype = DTYPES[args.dtype or ("bf16" if gpu else "f32")]
    B = args.batch or (8 if gpu else 2)
    S = args.seq or (2048 if gpu else 256)
    C = args.d_model or (1024 if gpu else 256)
    H = args.heads or (16 if gpu else 4)
    Hkv = args.kv_heads or H
    iters = args.iters or (50 if gpu else 5)
    warmup = max(3, iters // 5)

    print(f"flashwatt {fw.version()} ({fw.library_path()}); torch {torch.__version__}")
    if gpu:
        print(f"device: {torch.cuda.get_device_name(device)} ({device})")
    else:
        print(f"device: cpu, flashwatt simd {fw.cpu_simd_level()}, torch threads {torch.get_num_threads()}")
    usable = [b.name for b in fw.backends() if b.usable and b.device == device.type]
    if not usable:
        print(f"gpt_block: libflashwatt has no usable {device.type} backend: "
              + "; ".join(f"{b.name}: {b.why_not}" for b in fw.backends() if b.device == device.type),
              file=sys.stderr)
        return 2
    print(f"block: batch {B}, seq {S}, d_model {C}, heads {H}, kv_heads {Hkv}, head_dim {C // H}, "
          f"{str(dtype).replace('torch.', '')}, causal; flashwatt backends here: {', '.join(usable)}")

    torch.manual_seed(0)
    block = Block(C, H, Hkv).to(device, dtype)
    block.fw_context = fw.Context(backend=args.backend)
    x = torch.randn(B, S, C, device=device, dtype=dtype)

    # 1. Same outputs: attention alone and the whole block, flashwatt vs SDPA (and a float32 SDPA
    #    reference to show each one's own error in low precision).
    with torch.no_grad():
        q, k, v = block.qkv_views(x)
        outs = {}
        for impl in ("sdpa", "flashwatt"):
            block.impl = impl
            outs[impl] = (block.attention(q, k, v).float(), block(x).float())
        print(f"flashwatt ran on: {block.fw_context.last_backend}")
        block.impl = "sdpa"
        ref_attn = block.attention(*(t.float() for t in (q, k, v)))
    tol = 1e-4 if dtype == torch.float32 else (2e-2 if dtype == torch.bfloat16 else 4e-3)
    ok = True
    for i, what in enumerate(("attention", "block")):
        a, b = outs["sdpa"][i], outs["flashwatt"][i]
        scale = max(a.abs().max().item(), 1e-6)
        diff = (a - b).abs().max().item() / scale
        good = math.isfinite(diff) and diff <= tol
        ok &= good
        extra = ""
        if what == "attention":
            e_s = (outs["sdpa"][0] - ref_attn).abs().max().item()
            e_f = (outs["flashwatt"][0] - ref_attn).abs().max().item()
            extra = f"; vs float32 SDPA: sdpa {e_s:.3g}, flashwatt {e_f:.3g}"
        print(f"{what:>9}: max |flashwatt - sdpa| / max|sdpa| = {diff:.3g} (tol {tol:g}) "
              f"{'OK' if good else 'MISMATCH'}{extra}")

    # 2. Timings.
    def attn_call():
        return block.attention(q, k, v)

    def block_call():
        with torch.no_grad():
            return block(x)

    xg = x.detach().clone().requires_grad_()

    def train_call():
        block.zero_grad(set_to_none=True)
        block(xg).float().square().mean().backward()

    have_backward = not args.no_backward
    if have_backward:
        block.impl = "flashwatt"
        try:
            train_call()
            sync(device)
        except NotImplementedError as e:
            print(f"forward+backward: skipped, flashwatt has no backward here ({e})")
            have_backward = False

    rows = [("attention fwd", attn_call), ("block fwd", block_call)]
    if have_backward:
        rows.append(("block fwd+bwd", train_call))
    print(f"\n{'median ms':<16}{'sdpa':>10}{'flashwatt':>11}{'speedup':>9}")
    for name, fn in rows:
        t = {}
        for impl in ("sdpa", "flashwatt"):
            block.impl = impl
            with torch.no_grad() if name != "block fwd+bwd" else torch.enable_grad():
                t[impl] = median_ms(fn, device, warmup, iters)
        print(f"{name:<16}{t['sdpa']:>10.3f}{t['flashwatt']:>11.3f}{t['sdpa'] / t['flashwatt']:>8.2f}x")

    # 3. Energy per call (needs telemetry in the library and a GPU it can read).
    if args.energy_seconds > 0:
        snap = fw.telemetry()
        if not gpu:
            print("\nenergy: n/a (cpu run)")
        elif not snap.available or not snap.gpus:
            print(f"\nenergy: n/a ({snap.description})")
        else:
            print(f"\nenergy per call, {args.energy_seconds:g} s windows ({snap.description})")
            for name, fn in rows[:2]:
                for impl in ("sdpa", "flashwatt"):
                    block.impl = impl
                    try:
                        with torch.no_grad():
                            r = energy_per_call(fn, device, args.energy_seconds)
                    except fw.FlashwattError as e:
                        print(f"  {name} {impl}: n/a ({e.message})")
                        continue
                    if r is None:
                        print(f"  {name} {impl}: n/a (no energy reading)")
                    else:
                        j, w, n, src = r
                        print(f"  {name:<14} {impl:<10} {j * 1e3:9.3f} mJ/call  {w:7.1f} W avg  "
                              f"({n} calls, {src})")
    print("\nresult:", "outputs agree" if ok else "OUTPUTS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
