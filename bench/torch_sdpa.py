#!/usr/bin/env python3
"""PyTorch SDPA backends side by side with flashwatt's CUDA backends, same process, same tensors.

Times torch.nn.functional.scaled_dot_product_attention forced to one backend at a time
(flash = FlashAttention-2, cudnn, efficient, math) and flashwatt's CUDA backends through the
Python package (python/flashwatt, ctypes over build/libflashwatt.so, torch's current stream, no
copies) on the identical torch tensors. CUDA events around windows of back-to-back calls (about 2 ms each, after one
untimed call, so that host-side call overhead hides behind the GPU work for every backend alike); the backends' windows are
interleaved in rotating order (clock / power-limit drift hits all alike); median per-call time.

Default shapes: the FlashAttention grid — 16k tokens (batch = 16384 / L), hidden 2048
(heads = 2048 / D), D = 64 and 128, L = 512 .. 16384, bf16, causal and not; --shapes grid,seed adds the seed's
f16 shape (B=16 H=8 L=1024 D=64, causal and not).
TFLOP/s counts 4·B·H·L²·D (half of it when causal), as FlashAttention's benchmarks do.

Prints a table (shape, backend, ms, TFLOP/s, ratio vs flash and cudnn) and writes JSON to
$OUT/torch_sdpa.json (or --json PATH).

    python3 bench/torch_sdpa.py [--quick] [--configs] [--reps N] [--json PATH]
        --configs   also time every cuda-flash configuration (FW_CUDA_FLASH_CONFIG; --cfg-match REGEX
                    keeps the names it matches, e.g. '^w[gs]-' for the Hopper kernels)
        --check     compare outputs with a float64 reference on a few heads (L <= 2048)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
if "FLASHWATT_LIBRARY" not in os.environ and os.path.exists(os.path.join(ROOT, "build/libflashwatt.so")):
    os.environ["FLASHWATT_LIBRARY"] = os.path.join(ROOT, "build/libflashwatt.so")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

SDPA = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


# ---- flashwatt: the package, or a minimal ctypes call if the package is not usable ----------
def load_flashwatt():
    try:
        import flashwatt  # noqa: F401

        cfg_ctxs = {}

        def call(q, k, v, causal, backend, config=None):
            if config is None:
                return flashwatt.attention(q, k, v, causal=causal, backend=backend, layout="bhsd")
            if config not in cfg_ctxs:  # one context per configuration: knobs are read when a context is made
                cfg_ctxs[config] = flashwatt.Context(backend=backend)
            return cfg_ctxs[config].attention(q, k, v, causal=causal, layout="bhsd")

        names = []
        try:
            for b in flashwatt.backends():
                name = getattr(b, "name", None) or (b.get("name") if isinstance(b, dict) else str(b))
                dev = getattr(b, "device", None) or (b.get("device") if isinstance(b, dict) else "")
                usable = getattr(b, "usable", True) if not isinstance(b, dict) else b.get("usable", True)
                if "cuda" in str(dev) or str(name).startswith("cuda"):
                    if usable:
                        names.append(str(name))
        except Exception as e:  # noqa: BLE001
            print(f"# flashwatt.backends() failed ({e}); using the known CUDA backend names")
            names = ["cuda-flash", "cuda-flash-f32", "cuda-tiled", "cuda-naive"]
        return call, names, "package"
    except Exception as e:  # noqa: BLE001
        print(f"# python/flashwatt not usable ({e!r}); using a minimal ctypes call")
    import ctypes

    lib = ctypes.CDLL(os.environ.get("FLASHWATT_LIBRARY", os.path.join(ROOT, "build/libflashwatt.so")))

    class Dev(ctypes.Structure):
        _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int)]

    class Tensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", Dev),
                    ("size", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]

    class Params(ctypes.Structure):
        _fields_ = [("scale", ctypes.c_float), ("causal", ctypes.c_int),
                    ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64)]

    lib.fw_context_last_error.restype = ctypes.c_char_p
    ctxs = {}

    def desc(t):
        dt = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[t.dtype]
        return Tensor(t.data_ptr(), dt, Dev(1, t.device.index or 0), (ctypes.c_int64 * 4)(*t.shape),
                      (ctypes.c_int64 * 4)(*t.stride()))

    def call(q, k, v, causal, backend, config=None):
        if (backend, config) not in ctxs:  # one context per configuration: knobs are read when a context is made
            c = ctypes.c_void_p()
            lib.fw_context_create(ctypes.byref(c))
            lib.fw_context_set_backend(c, backend.encode())
            ctxs[(backend, config)] = c
        c = ctxs[(backend, config)]
        lib.fw_context_set_stream(c, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        o = torch.empty_like(q)
        prm = Params(0.0, 1 if causal else 0, -1, -1)
        tq, tk, tv, to = desc(q), desc(k), desc(v), desc(o)
        st = lib.fw_attention_forward(c, ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
                                      None, ctypes.byref(prm))
        if st != 0:
            raise RuntimeError(lib.fw_context_last_error(c).decode())
        return o

    return call, ["cuda-flash", "cuda-flash-f32", "cuda-tiled", "cuda-naive"], "ctypes"


def flops(B, H, L, D, causal):
    f = 4.0 * B * H * L * L * D
    return f / 2 if causal else f


def calls_per_window(fn, window_ms):
    """How many back-to-back calls fill about window_ms (from one timed call after warm-up)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    est = (time.perf_counter() - t0) * 1e3
    return max(1, min(50, int(math.ceil(window_ms / max(est, 1e-3)))))


def time_window(fn, n):
    """Per-call milliseconds of n back-to-back calls between two CUDA events. One untimed call goes first,
    so that the host runs ahead of the GPU when the first event is reached: otherwise the first call's host
    time (the binding, the dispatcher) counts as GPU time, which at one or two calls a window is most of the
    difference between two backends' host paths, not their kernels."""
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    fn()
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def time_interleaved(todo, warmup, reps, window_ms=2.0):
    """Times several callables fairly: each gets `reps` windows of back-to-back calls (about
    window_ms each, so host-side call overhead overlaps the previous kernel for every backend
    alike), and the windows of the backends are interleaved in a rotating order so that clock and
    power-limit drift (every backend runs at the card's power limit) hits all of them equally.
    Returns {name: (median ms, min ms, calls per window)}."""
    if not todo:
        return {}
    for _, fn in todo:
        for _ in range(warmup):
            fn()
    ns = {name: calls_per_window(fn, window_ms) for name, fn in todo}
    ts = {name: [] for name, _ in todo}
    for rep in range(reps):
        k = rep % len(todo)
        for name, fn in todo[k:] + todo[:k]:
            ts[name].append(time_window(fn, ns[name]))
    return {name: (statistics.median(v), min(v), ns[name]) for name, v in ts.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="L in {1024, 4096} only")
    ap.add_argument("--configs", action="store_true", help="also every cuda-flash configuration")
    ap.add_argument("--check", action="store_true", help="errors vs float64 on a few heads (L <= 2048)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--sdpa", default="flash,cudnn,efficient,math")
    ap.add_argument("--cfg-match", default="", help="--configs: only the configuration names this regex matches")
    ap.add_argument("--fw", default="", help="flashwatt backends to time (default: every usable CUDA one)")
    ap.add_argument("--shapes", default="grid",
                    help="grid (the FA grid, bf16), seed (B=16 H=8 L=1024 D=64 f16), or grid,seed")
    args = ap.parse_args()

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    info = {
        "device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    print(f"# {info['device']} ({info['sms']} SMs), torch {info['torch']}, cudnn {info['cudnn']}, {info['date']}")
    fw_call, fw_names, fw_how = load_flashwatt()
    if args.fw:
        fw_names = [n for n in args.fw.split(",") if n]
    print(f"# flashwatt via {fw_how}; CUDA backends: {', '.join(fw_names)}")

    Ls = [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    dims = [int(x) for x in args.dims.split(",")]
    kinds = [x for x in args.shapes.split(",") if x]
    if not kinds or set(kinds) - {"grid", "seed"}:
        ap.error(f"--shapes: grid, seed or grid,seed, not {args.shapes!r}")
    shapes = []  # (B, H, L, D, dtype)
    if "grid" in kinds:
        shapes += [(16384 // L, 2048 // D, L, D, torch.bfloat16) for D in dims for L in Ls]
    if "seed" in kinds:
        shapes.append((16, 8, 1024, 64, torch.float16))
    sdpa_names = [s for s in args.sdpa.split(",") if s]
    rows = []
    torch.manual_seed(0)
    for B, H, L, D, dtype in shapes:
        dtype_name = {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
        for causal in (False, True):
            q, k, v = (torch.randn(B, H, L, D, device=dev, dtype=dtype) for _ in range(3))
            fl = flops(B, H, L, D, causal)
            # the grid's bf16 goes unnamed in the label, as it always has
            label = "" if dtype == torch.bfloat16 else " " + dtype_name
            shape = f"B{B} H{H} L{L} D{D}{label} {'causal' if causal else 'full'}"
            res = {}
            ref = None
            if args.check and L <= 2048:
                hs = slice(0, 2)
                q64, k64, v64 = (x[:1, hs].double() for x in (q, k, v))
                with sdpa_kernel([SDPBackend.MATH]):
                    ref = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
            todo = []
            for name in sdpa_names:
                if name == "math" and L > 4096:
                    continue  # materialises B·H·L² scores: too slow and large to be useful here

                def run(name=name):
                    with sdpa_kernel([SDPA[name]]):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                todo.append((name, run))
            for name in fw_names:
                def run(name=name):
                    os.environ.pop("FW_CUDA_FLASH_CONFIG", None)  # the backend's default config
                    return fw_call(q, k, v, causal, name)
                todo.append((name, run))
            if args.configs:
                hopper = torch.cuda.get_device_capability(dev) == (9, 0)
                for cfgname in [c for c in CONFIGS.get(D, []) if re.search(args.cfg_match, c)
                                and (hopper or not c.startswith(("wg-", "ws-", "wsp-")))]:
                    def run(cfgname=cfgname):
                        os.environ["FW_CUDA_FLASH_CONFIG"] = cfgname
                        return fw_call(q, k, v, causal, "cuda-flash", cfgname)
                    todo.append(("cuda-flash:" + cfgname, run))
            ok = []
            for name, run in todo:
                try:
                    out = run()
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001
                    msg = str(e).splitlines()[0][:140] if str(e) else type(e).__name__
                    res[name] = {"error": msg}
                    continue
                finally:
                    os.environ.pop("FW_CUDA_FLASH_CONFIG", None)
                err = None
                if ref is not None:
                    err = (out[:1, 0:2].double() - ref).abs().max().item()
                del out
                res[name] = {"err": err}
                ok.append((name, run))
            timed = time_interleaved(ok, args.warmup, args.reps)
            os.environ.pop("FW_CUDA_FLASH_CONFIG", None)
            for name, (ms, mn, nb) in timed.items():
                res[name].update({"ms": ms, "min_ms": mn, "calls_per_window": nb,
                                  "tflops": fl / (ms * 1e-3) / 1e12})
            del q, k, v
            for name, r in res.items():
                row = {"shape": shape, "B": B, "H": H, "L": L, "D": D, "dtype": dtype_name,
                       "causal": causal, "backend": name, **r}
                if "ms" in r:
                    for base in ("flash", "cudnn"):
                        if base in res and "ms" in res[base]:
                            row["vs_" + base] = res[base]["ms"] / r["ms"]
                rows.append(row)
                print_row(row)
            sys.stdout.flush()
    out_path = args.json or os.path.join(os.environ.get("OUT", "."), "torch_sdpa.json")
    with open(out_path, "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    print(f"# wrote {out_path}")
    summary(rows)


def forward_configs():
    """cuda-flash's dense forward configurations by head dim, in kernels.tsv's order (the table the library is
    generated from): wg-*, ws-*, wsp-* are the wgmma kernels (compute capability 9.0 only; elsewhere the library
    would run its default under that name, so they are skipped there)."""
    out = {}
    with open(os.path.join(ROOT, "src/backends/cuda/kernels.tsv")) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 9 and fields[0].startswith("fwd.") and "varlen" not in fields[8].split(","):
                out.setdefault(int(fields[3]), []).append(fields[1])
    return out


CONFIGS = forward_configs()


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x)) else "-"


def print_row(r):
    if "error" in r:
        print(f"{r['shape']:<28} {r['backend']:<38} unsupported/failed: {r['error']}")
        return
    err = f" err {r['err']:.2e}" if r.get("err") is not None else ""
    print(f"{r['shape']:<28} {r['backend']:<38} {r['ms']:9.4f} ms {r['tflops']:7.1f} TFLOP/s"
          f"  x{fmt(r.get('vs_flash'), '5.2f')} flash  x{fmt(r.get('vs_cudnn'), '5.2f')} cudnn{err}")


def summary(rows):
    """Short table last: per shape, flash / cudnn / cuda-flash TFLOP/s and the ratios."""
    print("\n# summary (TFLOP/s; ratio = time(base) / time(cuda-flash))")
    print(f"{'shape':<28} {'flash':>7} {'cudnn':>7} {'cu-fl':>7} {'best-cfg':>7} {'vsFA2':>6} {'vsCuDNN':>7}")
    shapes = []
    for r in rows:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
    for s in shapes:
        by = {r["backend"]: r for r in rows if r["shape"] == s and "ms" in r}
        fl = by.get("flash", {}).get("tflops")
        cd = by.get("cudnn", {}).get("tflops")
        cf = by.get("cuda-flash", {}).get("tflops")
        best = max([r["tflops"] for n, r in by.items() if n.startswith("cuda-flash")] or [float("nan")])
        print(f"{s:<28} {fmt(fl, '7.1f'):>7} {fmt(cd, '7.1f'):>7} {fmt(cf, '7.1f'):>7} {fmt(best, '7.1f'):>7} "
              f"{fmt(cf / fl if cf and fl else None, '6.2f'):>6} {fmt(cf / cd if cf and cd else None, '7.2f'):>7}")


if __name__ == "__main__":
    main()
