#!/usr/bin/env python3
"""Forward+backward of bf16 attention on the FlashAttention grid (16k tokens: batch = 16384 / L; hidden 2048:
heads = 2048 / D; D = 64 and 128, L = 1k..16k causal, L = 1k, 4k, 16k also without a mask) and at GQA 32/8 heads
D=128 L=8k causal: PyTorch SDPA's flash (FlashAttention-2) and cudnn backends against flashwatt's autograd Function
(python/flashwatt over libflashwatt.so), same process, same tensors.
Each step is out = f(q, k, v); out.backward(dout). Two medians: single steps between two CUDA events (the host's
path to the first launch counts as GPU time) and windows of back-to-back steps (the host runs ahead, as in a
training loop). FLOPs: forward 4·B·H·L²·D (halved when causal); forward+backward = 3.5 × forward (FlashAttention's
count).
Also prints how far flashwatt's gradients are from SDPA flash's, relative to max|g|.

--f32: the f32 seed suite instead (B=16 H=8 D=64, L 128..2048 non-causal and L=2048 causal, and B=8 H=8 L=1024
D=128): SDPA efficient and math (allow_tf32 off) against flashwatt in each precision (exact, 3xtf32, tf32: the
tf32 records run the last two), gradients against a float64 reference of the first batch entry.

    FLASHWATT_LIBRARY=build/libflashwatt.so python3 bench/sdpa_bwd.py [--quick] [--f32] [--json OUT.json]
"""
import json, math, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

quick = "--quick" in sys.argv
f32_suite = "--f32" in sys.argv
torch.backends.cuda.matmul.allow_tf32 = False
json_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
try:
    import flashwatt
    fw_err = None
except Exception as e:  # noqa: BLE001
    flashwatt, fw_err = None, repr(e)
print(f"torch {torch.__version__}, device {torch.cuda.get_device_name()}, flashwatt: {'ok' if flashwatt else fw_err}")

def sdpa(backend):
    def f(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return f

if f32_suite:  # (B, H, Hkv, L, D, causal); the anchor SDPA efficient, as the table
    dtype, shapes = torch.float32, [(16, 8, 8, L, 64, False) for L in (128, 256, 512, 1024, 2048)]
    shapes += [(16, 8, 8, 2048, 64, True), (8, 8, 8, 1024, 128, False)]
    if quick:
        shapes = [s for s in shapes if s[3] == 1024]
    fns = {"sdpa-efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION), "sdpa-math": sdpa(SDPBackend.MATH)}
    ctxs = {p: flashwatt.Context(precision=p) for p in ("exact", "3xtf32", "tf32")} if flashwatt else {}
    for p, ctx in ctxs.items():
        fns[f"flashwatt-{p}"] = (lambda c: lambda q, k, v, causal: c.attention(q, k, v, causal=causal))(ctx)
    anchor = "sdpa-efficient"
else:  # the FA grid: 16k tokens, hidden 2048, bf16; causal at every length, no mask at 1k, 4k, 16k; the GQA shape
    Ls = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    dtype, shapes = torch.bfloat16, [(16384 // L, 2048 // D, 2048 // D, L, D, True) for D in (64, 128) for L in Ls]
    if not quick:
        shapes += [(16384 // L, 2048 // D, 2048 // D, L, D, False) for D in (64, 128) for L in (1024, 4096, 16384)]
        shapes.append((2, 32, 8, 8192, 128, True))
    fns = {"sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    if flashwatt:  # the library's default and a deterministic context
        fns["flashwatt"] = lambda q, k, v, causal: flashwatt.attention(q, k, v, causal=causal)
        det_ctx = flashwatt.Context(deterministic=True)
        fns["flashwatt-det"] = lambda q, k, v, causal: det_ctx.attention(q, k, v, causal=causal)

def time_it(fn, q, k, v, dout, bwd, causal, budget_s=1.0, min_reps=3, max_reps=30):
    """(median of single steps, median of per-step times over windows of back-to-back steps), ms.
    A single step between two events also charges the host's time to its first launch (Python and
    ctypes for flashwatt, the dispatcher for SDPA) as GPU time; a window starts after an untimed step,
    so the host runs ahead (asynchronous launches, as in a training loop) and the window's figure is the GPU's."""
    def once():
        q.grad = k.grad = v.grad = None
        if bwd:
            fn(q, k, v, causal).backward(dout)
        else:
            with torch.no_grad():
                fn(q, k, v, causal)
    once(); torch.cuda.synchronize()  # warm-up (and first-call setup)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); once(); e.record(); e.synchronize()
    est = max(s.elapsed_time(e), 1e-3)
    reps = int(min(max_reps, max(min_reps, budget_s * 1e3 / est)))
    ts = []
    for _ in range(reps):
        s.record(); once(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    per_window = max(2, int(math.ceil(5.0 / est)))  # ~5 ms of steps per window
    ws = []
    for _ in range(max(3, reps // 3)):
        once()  # untimed: the host is ahead of the GPU when the window's first event is reached
        s.record()
        for _ in range(per_window):
            once()
        e.record(); e.synchronize()
        ws.append(s.elapsed_time(e) / per_window)
    return statistics.median(ts), statistics.median(ws)

def reference_grads(q, k, v, dout, causal):  # (no GQA: the f32 suite has none)
    """float64 gradients of the first batch entry (the f32 suite's reference)."""
    q64, k64, v64 = (x[:1].detach().double().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal).backward(dout[:1].double())
    return q64.grad, k64.grad, v64.grad


def flops_fwd(B, H, L, D, causal):
    return 4.0 * B * H * L * L * D / (2 if causal else 1)


results = []
for B, H, Hkv, L, D, causal in shapes:
    torch.manual_seed(0)
    mk = lambda h: torch.randn(B, h, L, D, device="cuda", dtype=dtype).requires_grad_(True)
    q, k, v = mk(H), mk(Hkv), mk(Hkv)
    dout = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
    ref = reference_grads(q, k, v, dout, causal) if f32_suite else None
    grads = {}
    for name, fn in fns.items():
        row = {"D": D, "L": L, "B": B, "H": H, "Hkv": Hkv, "causal": causal, "backend": name}
        try:
            q.grad = k.grad = v.grad = None
            fn(q, k, v, causal).backward(dout)
            torch.cuda.synchronize()
            grads[name] = (q.grad.float().clone(), k.grad.float().clone(), v.grad.float().clone())
            if ref is not None:  # max|g - g_ref| / max|g_ref| of the first batch entry, dq dk dv
                row["grad_err"] = [float((g[:1].double() - r).abs().max() / r.abs().max()) for g, r in zip(grads[name], ref)]
            row["fwd_ms"], row["fwd_win_ms"] = time_it(fn, q, k, v, dout, False, causal)
            row["fwdbwd_ms"], row["fwdbwd_win_ms"] = time_it(fn, q, k, v, dout, True, causal)
            row["bwd_ms"] = row["fwdbwd_ms"] - row["fwd_ms"]
            row["bwd_win_ms"] = row["fwdbwd_win_ms"] - row["fwd_win_ms"]
            row["tflops"] = 3.5 * flops_fwd(B, H, L, D, causal) / (row["fwdbwd_ms"] * 1e-3) / 1e12
            row["tflops_win"] = 3.5 * flops_fwd(B, H, L, D, causal) / (row["fwdbwd_win_ms"] * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            row["error"] = repr(e)[:300]
            torch.cuda.synchronize()
        results.append(row)
        print(json.dumps(row), flush=True)
    if "flashwatt" in grads and "sdpa-flash" in grads:  # agreement of the gradients, relative to max|g|
        d = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(grads["flashwatt"], grads["sdpa-flash"])]
        print(f"  D{D} L{L}{'' if causal else ' no mask'}{f' GQA {H}/{Hkv}' if Hkv != H else ''}: flashwatt vs sdpa-flash grads, max|diff|/max|g|: dq {d[0]:.2e} dk {d[1]:.2e} dv {d[2]:.2e}", flush=True)
    del q, k, v, dout, grads, ref
    torch.cuda.empty_cache()

if json_path:
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
if f32_suite:  # backward alone (window medians: fwd+bwd less fwd) and fwd+bwd, each against the anchor
    print()
    print("f32 seed suite, windows of back-to-back steps: backward ms (fwd+bwd ms); ratio = t(sdpa-efficient) / t(ours); "
          "grad err = max|g - g_fp64| / max|g_fp64| (dq dk dv, first batch entry)")
    for B, H, Hkv, L, D, causal in shapes:
        rows = {r["backend"]: r for r in results if (r["B"], r["L"], r["D"], r["causal"]) == (B, L, D, causal)}
        a = rows.get(anchor, {})
        print(f"B{B} H{H} L{L} D{D}{' causal' if causal else ''}:")
        for n in fns:
            r = rows.get(n, {})
            if "bwd_win_ms" not in r:
                print(f"  {n:18s} {r.get('error', 'n/a')}")
                continue
            ratio = (f"bwd {a['bwd_win_ms'] / r['bwd_win_ms']:5.2f}x  fwd+bwd {a['fwdbwd_win_ms'] / r['fwdbwd_win_ms']:5.2f}x"
                     if "bwd_win_ms" in a else "")
            err = " ".join(f"{x:.1e}" for x in r.get("grad_err", []))
            print(f"  {n:18s} bwd {r['bwd_win_ms']:8.3f} ({r['fwdbwd_win_ms']:8.3f}, {r['tflops_win']:6.1f} TF)  {ratio}  grad err {err}")
    sys.exit(0)
for key, what in (("fwdbwd_ms", "single steps"), ("fwdbwd_win_ms", "windows of back-to-back steps")):
    print()
    print(f"bf16 fwd+bwd, 16k tokens, hidden 2048, {what}: ms (TFLOP/s at 3.5x the forward's FLOPs)")
    names = list(fns)
    print(f"{'D':>4} {'L':>6} {'mask':>6} {'H/Hkv':>6} " + " ".join(f"{n:>22}" for n in names) +
          "  vs_flash  vs_cudnn  det_vs_cudnn  (speed = t(anchor) / t(flashwatt))")
    for B, H, Hkv, L, D, causal in shapes:
        rows = {r["backend"]: r for r in results if (r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["causal"]) == (B, H, Hkv, L, D, causal)}
        cells = []
        for n in names:
            r = rows.get(n, {})
            cells.append(f"{r[key]:9.3f} ({3.5 * flops_fwd(B, H, L, D, causal) / (r[key] * 1e-3) / 1e12:6.1f})"
                         if key in r else f"{'error':>22}")
        def ratio(a, b):
            ra, rb = rows.get(a, {}), rows.get(b, {})
            return f"{rb[key] / ra[key]:8.2f}x" if key in ra and key in rb else "     n/a"
        print(f"{D:>4} {L:>6} {'causal' if causal else 'none':>6} {f'{H}/{Hkv}':>6} " + " ".join(f"{c:>22}" for c in cells) +
              f"  {ratio('flashwatt', 'sdpa-flash')} {ratio('flashwatt', 'sdpa-cudnn')}     {ratio('flashwatt-det', 'sdpa-cudnn')}")
