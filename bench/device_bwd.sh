#!/usr/bin/env bash
# The CUDA backward on the device: its GPU test, compute-sanitizer memcheck + racecheck on a small run,
# and forward+backward timings against PyTorch SDPA's flash and cudnn backends. Builds nothing: it
# expects $FW_BUILD_DIR (default build/) built by bench/device.sh, with build/gpu_backward and
# build/libflashwatt.so in it.
#
#   bash bench/device_bwd.sh
#   env knobs: FW_BUILD_DIR (default build), FW_BWD_SKIP_TEST=1, FW_BWD_SKIP_SANITIZER=1,
#              FW_BWD_SKIP_BENCH=1, FW_BWD_SKIP_TORCH=1, FW_BWD_TORCH_ARGS (e.g. "--quick"), FW_BWD_SKIP_API=1 (the test's
#              API mode, for a build whose backend tables are not wired yet)
# Expected run time on one H100/H200: about 5 minutes (each step has its own timeout: test 300 s,
# each sanitizer 180 s, --bench 180 s, torch 300 s), so run it as its own device call.
# Logs: $OUT/bwd/bwd.log (everything, short table last), $OUT/bwd/bwd_torch.json,
#       $OUT/bwd/bwd_logs.tar.gz (each step's full log).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out-device}
BWD_OUT="$OUT/bwd"
mkdir -p "$BWD_OUT"
BUILD=${FW_BUILD_DIR:-build}
. bench/steps.sh "$BWD_OUT/bwd.log" "$BWD_OUT/bwd_logs.tar.gz"

step "device_bwd: device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1 | tee "$LOGS/nvidia-smi.txt"
if [ ! -x "$BUILD/gpu_backward" ] || [ ! -f "$BUILD/libflashwatt.so" ]; then
    echo "device_bwd: $BUILD/gpu_backward or $BUILD/libflashwatt.so missing (run bench/device.sh's build first)"
    status=1
    exit
fi

if [ "${FW_BWD_SKIP_TEST:-0}" != 1 ]; then
    step "gpu_backward (every case vs cpu-ref's float64 backward)"
    timeout 300 "$BUILD/gpu_backward" > "$LOGS/gpu_backward.log" 2>&1
    rc=$?
    grep -E "^FAIL" "$LOGS/gpu_backward.log" | head -40
    tail -1 "$LOGS/gpu_backward.log"
    echo "gpu_backward: exit $rc"
    [ $rc = 0 ] || status=1
fi

if [ "${FW_BWD_SKIP_SANITIZER:-0}" != 1 ]; then
    step "compute-sanitizer (gpu_backward --quick)"
    CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
        timeout 180 "$CS" --tool $tool --error-exitcode 9 "$BUILD/gpu_backward" --quick > "$LOGS/sanitizer_$tool.log" 2>&1
        rc=$?
        echo "$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, [0-9]+ failed' "$LOGS/sanitizer_$tool.log" | tr '\n' ' ')"
        [ $rc = 0 ] || { status=1; grep -E "^=========" "$LOGS/sanitizer_$tool.log" | head -30; }
    done
fi

if [ "${FW_BWD_SKIP_BENCH:-0}" != 1 ]; then
    step "gpu_backward --bench 3 (C-level: fwd via the API, fw_cuda_backward in both dQ modes)"
    timeout 180 "$BUILD/gpu_backward" --bench 3 > "$LOGS/gpu_backward_bench.log" 2>&1
    rc=$?
    cat "$LOGS/gpu_backward_bench.log"
    echo "gpu_backward --bench: exit $rc"
    [ $rc = 0 ] || status=1
fi

if [ "${FW_BWD_SKIP_TORCH:-0}" != 1 ]; then
    step "forward+backward timings vs PyTorch SDPA (bf16, causal, 16k tokens, hidden 2048)"
    cat > "$LOGS/bwd_torch.py" <<'PYEOF'
"""Forward+backward of bf16 causal attention: PyTorch SDPA (flash, cudnn) vs flashwatt's autograd
Function (python/flashwatt over libflashwatt.so). 16k tokens (batch = 16384 / L), hidden 2048
(heads = 2048 / D). Medians of CUDA-event timed single steps and of windows of back-to-back steps (out = f(q, k, v); out.backward(dout)).
FLOPs: forward 4·B·H·L²·D / 2 (causal); forward+backward = 3.5 × forward (FlashAttention's count)."""
import json, math, os, statistics, sys
sys.path.insert(0, os.path.join(os.environ["FW_ROOT"], "python"))
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

quick = "--quick" in sys.argv
json_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
try:
    import flashwatt
    fw_err = None
except Exception as e:  # noqa: BLE001
    flashwatt, fw_err = None, repr(e)
print(f"torch {torch.__version__}, device {torch.cuda.get_device_name()}, flashwatt: {'ok' if flashwatt else fw_err}")

def sdpa(backend):
    def f(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return f

fns = {"sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
if flashwatt:  # the library's default (atomic dQ) and a deterministic context
    fns["flashwatt"] = lambda q, k, v: flashwatt.attention(q, k, v, causal=True)
    det_ctx = flashwatt.Context(deterministic=True)
    fns["flashwatt-det"] = lambda q, k, v: det_ctx.attention(q, k, v, causal=True)

def time_it(fn, q, k, v, dout, bwd, budget_s=1.0, min_reps=3, max_reps=30):
    """(median of single steps, median of per-step times over windows of back-to-back steps), ms.
    A single step between two events also charges the host's time to its first launch (Python and
    ctypes for flashwatt, the dispatcher for SDPA) as GPU time; in a window the host runs ahead
    (asynchronous launches, as in a training loop), so the window's figure is the GPU's."""
    def once():
        q.grad = k.grad = v.grad = None
        if bwd:
            fn(q, k, v).backward(dout)
        else:
            with torch.no_grad():
                fn(q, k, v)
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
        s.record()
        for _ in range(per_window):
            once()
        e.record(); e.synchronize()
        ws.append(s.elapsed_time(e) / per_window)
    return statistics.median(ts), statistics.median(ws)

results = []
Ls = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
for D in (64, 128):
    for L in Ls:
        B, H = 16384 // L, 2048 // D
        torch.manual_seed(0)
        mk = lambda: torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
        q, k, v = mk(), mk(), mk()
        dout = torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16)
        fwd_flops = 4.0 * B * H * L * L * D / 2
        grads = {}
        for name, fn in fns.items():
            row = {"D": D, "L": L, "B": B, "H": H, "backend": name}
            try:
                q.grad = k.grad = v.grad = None
                fn(q, k, v).backward(dout)
                torch.cuda.synchronize()
                grads[name] = (q.grad.float().clone(), k.grad.float().clone(), v.grad.float().clone())
                row["fwd_ms"], row["fwd_win_ms"] = time_it(fn, q, k, v, dout, bwd=False)
                row["fwdbwd_ms"], row["fwdbwd_win_ms"] = time_it(fn, q, k, v, dout, bwd=True)
                row["bwd_ms"] = row["fwdbwd_ms"] - row["fwd_ms"]
                row["tflops"] = 3.5 * fwd_flops / (row["fwdbwd_ms"] * 1e-3) / 1e12
                row["tflops_win"] = 3.5 * fwd_flops / (row["fwdbwd_win_ms"] * 1e-3) / 1e12
            except Exception as e:  # noqa: BLE001
                row["error"] = repr(e)[:300]
                torch.cuda.synchronize()
            results.append(row)
            print(json.dumps(row), flush=True)
        if "flashwatt" in grads and "sdpa-flash" in grads:  # agreement of the gradients, relative to max|g|
            d = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(grads["flashwatt"], grads["sdpa-flash"])]
            print(f"  D{D} L{L}: flashwatt vs sdpa-flash grads, max|diff|/max|g|: dq {d[0]:.2e} dk {d[1]:.2e} dv {d[2]:.2e}", flush=True)
        del q, k, v, dout, grads
        torch.cuda.empty_cache()

if json_path:
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
for key, what in (("fwdbwd_ms", "single steps"), ("fwdbwd_win_ms", "windows of back-to-back steps")):
    print()
    print(f"bf16 causal fwd+bwd, 16k tokens, hidden 2048, {what}: ms (TFLOP/s at 3.5x the causal forward's FLOPs)")
    names = list(fns)
    print(f"{'D':>4} {'L':>6} " + " ".join(f"{n:>22}" for n in names) + "  vs_flash  vs_cudnn  det_vs_flash  (speed = t(anchor) / t(flashwatt))")
    for D in (64, 128):
        for L in Ls:
            rows = {r["backend"]: r for r in results if r["D"] == D and r["L"] == L}
            cells = []
            for n in names:
                r = rows.get(n, {})
                cells.append(f"{r[key]:9.3f} ({3.5 * 4.0 * r['B'] * r['H'] * L * L * D / 2 / (r[key] * 1e-3) / 1e12:6.1f})"
                             if key in r else f"{'error':>22}")
            def ratio(a, b):
                ra, rb = rows.get(a, {}), rows.get(b, {})
                return f"{rb[key] / ra[key]:8.2f}x" if key in ra and key in rb else "     n/a"
            print(f"{D:>4} {L:>6} " + " ".join(f"{c:>22}" for c in cells) +
                  f"  {ratio('flashwatt', 'sdpa-flash')} {ratio('flashwatt', 'sdpa-cudnn')}     {ratio('flashwatt-det', 'sdpa-flash')}")
PYEOF
    PYTHONUNBUFFERED=1 FW_ROOT="$ROOT" FLASHWATT_LIBRARY="$ROOT/$BUILD/libflashwatt.so" \
        timeout 300 python3 "$LOGS/bwd_torch.py" --json "$BWD_OUT/bwd_torch.json" ${FW_BWD_TORCH_ARGS:-} > "$LOGS/bwd_torch.log" 2>&1
    rc=$?
    echo "bwd_torch: exit $rc"
    [ $rc = 0 ] || { status=1; tail -20 "$LOGS/bwd_torch.log"; }
    grep -E "grads, max" "$LOGS/bwd_torch.log"
    sed -n '/^bf16 causal fwd+bwd/,$p' "$LOGS/bwd_torch.log"   # the short tables, last
fi
echo "device_bwd.sh: exit $status"
