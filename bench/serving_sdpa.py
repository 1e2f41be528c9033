#!/usr/bin/env python3
"""Decode and ragged prefill (issue 24): flashwatt's serving calls against PyTorch in the same process,
on the same tensors.

Decode table (bf16, head dim 128, one new query a sequence): for each shape, flashwatt's dense call
(fw_attention_forward, q (B, 1, H, D) against the dense cache), its KV-cache call on the contiguous cache
(fw_attention_kvcache_forward, every sequence full), on a paged copy with page size 16 and with page
size 1 (pages in a shuffled order), and torch SDPA's cudnn, flash and efficient backends on the dense
cache (GQA through enable_gqa=True; a backend that refuses it gets K/V expanded to the query heads, and
the table says "expanded"). A device-to-device copy is timed in the same run: the copy bandwidth is
(read + written bytes) / time. Each row prints microseconds, GB/s (K+V bytes of the cache / time), the
percentage of the copy bandwidth and the ratio against the best SDPA backend (> 1: flashwatt faster).

Ragged prefill (causal, bf16, 32 / 8 heads, head dim 128, 16 sequences of lengths spread over
128..4096, about 33k tokens): fw_attention_varlen_forward against torch.nn.attention.varlen.varlen_attn
on the same packed tensors, and flashwatt's dense call at the mean length; TFLOP/s count
2·H·D·L² a causal sequence (FlashAttention's convention). The "fw varlen" row names the kernel its call
ran (the configuration whose forced call gives the same output bit for bit); "fw varlen srv" forces the
serving kernel's configuration for ragged prefill, for comparison in the same run.

Timing: windows of back-to-back calls (--window-us, default 20 ms: long enough that a call's host overhead
hides behind the GPU's queue, as in an engine's steady state; short windows understate a backend with a
heavy host path, cuDNN's among them) between CUDA events, the windows of all methods interleaved in a rotating order, the median per
call over --reps windows after warm-up; --graph captures each window as a CUDA graph instead (flashwatt
with its workspace reserved through fw_attention_workspace_size). Outputs are checked against SDPA's.

    FLASHWATT_LIBRARY=build/libflashwatt.so python3 bench/serving_sdpa.py [--quick] [--reps N] [--graph]
        [--configs] [--json PATH] [--shapes 0,2] [--ordered] [--no-prefill] [--page-sizes 16,1] [--energy]
        [--window-us US]
        --configs      also the KV-cache call under every cuda-flash serving configuration
        --page-sizes   the paged rows' page sizes (those that divide a shape's keys), default 16,1
        --energy       J/token and tokens per joule beside SDPA cudnn's (GPU energy counter; with --configs
                       every configuration too, the low-occupancy ones among them), and the SM clock and
                       throttle reasons read under load in each window
"""
from __future__ import annotations

import argparse
import ctypes
import inspect
import itertools
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

# ---- flashwatt through ctypes (the structs of include/flashwatt.h) ------------------------------
LIB = ctypes.CDLL(os.environ.get("FLASHWATT_LIBRARY", os.path.join(ROOT, "build", "libflashwatt.so")))
I64x4 = ctypes.c_int64 * 4
VP = ctypes.c_void_p


class Dev(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", VP), ("dtype", ctypes.c_int), ("device", Dev), ("size", I64x4), ("stride", I64x4)]


class Params(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("causal", ctypes.c_int), ("window_left", ctypes.c_int64),
                ("window_right", ctypes.c_int64)]


class Varlen(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("cu_seqlens_q", VP), ("cu_seqlens_k", VP), ("max_seqlen_q", ctypes.c_int64),
                ("max_seqlen_k", ctypes.c_int64)]


class KVCache(ctypes.Structure):
    _fields_ = [("k", Tensor), ("v", Tensor), ("seqlens", VP), ("block_table", VP), ("max_pages_per_seq", ctypes.c_int64),
                ("block_table_stride", ctypes.c_int64)]


class WorkspaceQuery(ctypes.Structure):
    _fields_ = [("device", Dev), ("dtype", ctypes.c_int), ("max_batch", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("kv_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64), ("max_seqlen_q", ctypes.c_int64),
                ("max_seqlen_k", ctypes.c_int64)]


P = ctypes.POINTER
for name, res, args in [
    ("fw_context_create", ctypes.c_int, [P(VP)]),
    ("fw_context_set_backend", ctypes.c_int, [VP, ctypes.c_char_p]),
    ("fw_context_set_stream", ctypes.c_int, [VP, VP]),
    ("fw_context_set_workspace", ctypes.c_int, [VP, VP, ctypes.c_size_t]),
    ("fw_context_last_error", ctypes.c_char_p, [VP]),
    ("fw_context_last_backend", ctypes.c_char_p, [VP]),
    ("fw_attention_workspace_size", ctypes.c_int, [VP, P(WorkspaceQuery), P(ctypes.c_size_t)]),
    ("fw_attention_forward", ctypes.c_int, [VP, P(Tensor), P(Tensor), P(Tensor), P(Tensor), VP, P(Params)]),
    ("fw_attention_varlen_forward", ctypes.c_int, [VP, P(Tensor), P(Tensor), P(Tensor), P(Tensor), VP, P(Varlen), P(Params)]),
    ("fw_attention_kvcache_forward", ctypes.c_int, [VP, P(Tensor), P(KVCache), P(Tensor), P(Tensor), P(Tensor), VP,
                                                    P(Varlen), P(Params)]),
]:
    f = getattr(LIB, name)
    f.restype, f.argtypes = res, args

DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def desc_bshd(t):
    """fw_tensor of a (B, S, H, D) torch tensor: logical (B, H, S, D) with its own strides."""
    return Tensor(t.data_ptr(), DT[t.dtype], Dev(1, t.device.index or 0), I64x4(t.shape[0], t.shape[2], t.shape[1], t.shape[3]),
                  I64x4(t.stride(0), t.stride(2), t.stride(1), t.stride(3)))


class Ctx:
    """One flashwatt context on cuda-flash (a configuration forced by FW_CUDA_FLASH_CONFIG, read at creation)."""

    def __init__(self, config=None, workspace_for=None):
        if config:
            os.environ["FW_CUDA_FLASH_CONFIG"] = config
        self.h = VP()
        assert LIB.fw_context_create(ctypes.byref(self.h)) == 0
        os.environ.pop("FW_CUDA_FLASH_CONFIG", None)
        assert LIB.fw_context_set_backend(self.h, b"cuda-flash") == 0
        self.ws = None
        if workspace_for is not None:  # (B, H, Hkv, D, max_q, max_k): reserve the workspace (CUDA graphs)
            B, H, Hkv, D, mq, mk = workspace_for
            q = WorkspaceQuery(Dev(1, torch.cuda.current_device()), 2, B, H, Hkv, D, mq, mk)
            n = ctypes.c_size_t(0)
            self.check(LIB.fw_attention_workspace_size(self.h, ctypes.byref(q), ctypes.byref(n)))
            if n.value:
                self.ws = torch.empty(n.value, dtype=torch.uint8, device="cuda")
                self.check(LIB.fw_context_set_workspace(self.h, VP(self.ws.data_ptr()), n.value))

    def check(self, st):
        if st != 0:
            raise RuntimeError(f"flashwatt status {st}: {LIB.fw_context_last_error(self.h).decode()}")

    def stream(self):
        LIB.fw_context_set_stream(self.h, VP(torch.cuda.current_stream().cuda_stream))


def fw_dense(ctx, q, k, v, o, causal):
    """fw_attention_forward on (B, S, H, D) tensors; returns a callable."""
    d = [desc_bshd(t) for t in (q, k, v, o)]
    prm = Params(0.0, int(causal), -1, -1)
    refs = [ctypes.byref(x) for x in d] + [None, ctypes.byref(prm)]

    def run():
        ctx.stream()
        ctx.check(LIB.fw_attention_forward(ctx.h, *refs))
    return run


def fw_cache(ctx, q, kc, vc, seqlens, o, table=None):
    """fw_attention_kvcache_forward: q (B, Lq, H, D); kc, vc the contiguous (B, L, Hkv, D) cache or the
    (pages, page_size, Hkv, D) pool with its table."""
    cache = KVCache(desc_bshd(kc), desc_bshd(vc), VP(seqlens.data_ptr()), VP(table.data_ptr() if table is not None else 0),
                    table.shape[1] if table is not None else 0, table.stride(0) if table is not None else 0)
    dq, do = desc_bshd(q), desc_bshd(o)
    prm = Params(0.0, 1, -1, -1)
    args = (ctypes.byref(dq), ctypes.byref(cache), None, None, ctypes.byref(do), None, None, ctypes.byref(prm))

    def run():
        ctx.stream()
        ctx.check(LIB.fw_attention_kvcache_forward(ctx.h, *args))
    return run


def fw_varlen(ctx, q, k, v, o, cu, max_len):
    """fw_attention_varlen_forward on packed (T, H, D) tensors, causal."""
    d = [desc_bshd(t.unsqueeze(0)) for t in (q, k, v, o)]
    seqs = Varlen(cu.numel() - 1, VP(cu.data_ptr()), VP(cu.data_ptr()), max_len, max_len)
    prm = Params(0.0, 1, -1, -1)
    refs = [ctypes.byref(x) for x in d] + [None, ctypes.byref(seqs), ctypes.byref(prm)]

    def run():
        ctx.stream()
        ctx.check(LIB.fw_attention_varlen_forward(ctx.h, *refs))
    return run


# ---- timing --------------------------------------------------------------------------------------
def window(fn, n):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / n  # µs a call


def as_graph(fn, n):
    """A callable replaying n calls of fn captured once as a CUDA graph, or None when capture fails."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        return g
    except Exception as e:  # noqa: BLE001
        print(f"# graph capture failed ({str(e)[:120]}); eager windows for this one")
        return None


def time_all(todo, reps, warmup, graph, window_us=20000.0):
    """{name: median µs a call}: each callable's windows of back-to-back calls, interleaved in rotating order."""
    for _, fn in todo:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    runs = []
    for name, fn in todo:
        est = window(fn, 3)
        n = max(1, min(2000, int(window_us / max(est, 1.0))))
        g = as_graph(fn, n) if graph else None
        runs.append((name, (lambda g=g: g.replay()) if g else fn, 1 if g else n, n))
    ts = {name: [] for name, _ in todo}
    for rep in range(reps):
        k = rep % len(runs)
        for name, fn, calls, n in runs[k:] + runs[:k]:
            ts[name].append(window(fn, calls) / (n if calls == 1 else 1))
    return {name: statistics.median(v) for name, v in ts.items()}


def energy_per_call(fn, seconds):
    """(joules a call, average watts, µs a call, median SM clock in MHz, throttle reasons seen) over a window of
    back-to-back calls of at least `seconds` on the GPU's energy counter (flashwatt's telemetry, NVML), after a short
    warm-up at load; joules and watts None where the counter is n/a. The host synchronises every hundred calls so
    that the queue stays bounded; the clock and the throttle reasons are read just before each synchronisation,
    while the GPU still runs queued calls (a memory-bound kernel near the power limit may run at a lower clock)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import flashwatt  # noqa: E402  (the package, for its energy windows)
    t_end = time.time() + 0.5
    while time.time() < t_end:
        fn()
    torch.cuda.synchronize()
    n, clocks, reasons = 0, [], set()
    with flashwatt.energy() as e:
        t0 = time.time()
        while time.time() - t0 < seconds:
            for _ in range(100):
                fn()
            n += 100
            g = flashwatt.telemetry().gpus
            if g and g[0].sm_clock_mhz is not None:
                clocks.append(g[0].sm_clock_mhz)
            if g and g[0].throttle_reasons:
                reasons.update(r for r in g[0].throttle_reasons if r != "none")
            torch.cuda.synchronize()
        t1 = time.time()
    mhz = statistics.median(clocks) if clocks else None
    jpc = e.joules / n if e.joules is not None else None
    return jpc, e.avg_w if jpc is not None else None, (t1 - t0) * 1e6 / n, mhz, sorted(reasons)


def copy_bandwidth(reps, warmup):
    """Device-to-device copy bandwidth, (read + written bytes) / time, of a 1 GiB buffer, GB/s."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = time_all([("copy", lambda: dst.copy_(src))], reps, warmup, graph=False)["copy"]
    del src, dst
    return 2 * (1 << 30) / (us * 1e-6) / 1e9


# ---- the decode table ------------------------------------------------------------------------------
DECODE = [(8, 64, 8, 8192), (64, 32, 8, 2048), (1, 32, 8, 131072), (16, 32, 32, 4096), (128, 32, 8, 1024)]
SDPA = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def sdpa_call(backend, q, k, v):
    """SDPA on one backend with GQA by enable_gqa; (callable, how) or (None, why). q (B, Lq, H, D), k, v (B, L, Hkv, D)."""
    H, Hkv = q.shape[2], k.shape[2]
    qt = q.transpose(1, 2)

    def make(kk, vv, gqa):
        def run():
            with sdpa_kernel(SDPA[backend]):
                return F.scaled_dot_product_attention(qt, kk, vv, is_causal=False, enable_gqa=gqa)
        return run
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)
    tries = [(make(kt, vt, H != Hkv), "enable_gqa" if H != Hkv else "")]
    if H != Hkv:
        ke, ve = kt.repeat_interleave(H // Hkv, dim=1), vt.repeat_interleave(H // Hkv, dim=1)
        tries.append((make(ke, ve, False), "expanded"))
    why = ""
    for fn, how in tries:
        try:
            out = fn()
            torch.cuda.synchronize()
            return fn, how, out.transpose(1, 2)
        except Exception as e:  # noqa: BLE001
            why = str(e).split("\n")[0][:80]
    return None, why, None


def paged_copy(kc, vc, ps, ordered=False):
    """The dense cache (B, L, Hkv, D) as a pool of pages of ps rows in a shuffled order (or in order), and its table."""
    B, L, Hkv, D = kc.shape
    n = B * L // ps
    perm = torch.arange(n, device=kc.device) if ordered else torch.randperm(n, device=kc.device)
    kp, vp = torch.empty((n, ps, Hkv, D), dtype=kc.dtype, device=kc.device), torch.empty((n, ps, Hkv, D), dtype=kc.dtype, device=kc.device)
    kp[perm] = kc.reshape(n, ps, Hkv, D)
    vp[perm] = vc.reshape(n, ps, Hkv, D)
    return kp, vp, perm.to(torch.int32).reshape(B, L // ps).contiguous()


def decode_rows(args, copy_gbs, configs):
    rows = []
    shapes = DECODE[:2] if args.quick else DECODE
    if args.shapes:
        shapes = [DECODE[int(i)] for i in args.shapes.split(",")]
    for (B, H, Hkv, L), D in [(sh, d) for d in (int(x) for x in args.head_dims.split(",")) for sh in shapes]:
        torch.manual_seed(B * 7 + L + D)
        q = torch.randn(B, 1, H, D, dtype=torch.bfloat16, device="cuda")
        kc = torch.randn(B, L, Hkv, D, dtype=torch.bfloat16, device="cuda")
        vc = torch.randn_like(kc)
        seqlens = torch.full((B,), L, dtype=torch.int32, device="cuda")
        kv_bytes = 2 * B * L * Hkv * D * 2
        ctx = Ctx(workspace_for=(B, H, Hkv, D, 1, L))
        outs, todo, how = {}, [], {}
        o_dense, o_cache = torch.empty_like(q), torch.empty_like(q)
        todo.append(("fw dense", fw_dense(ctx, q, kc, vc, o_dense, False)))
        todo.append(("fw cache", fw_cache(ctx, q, kc, vc, seqlens, o_cache)))
        outs["fw dense"], outs["fw cache"] = o_dense, o_cache
        keep = []
        sizes = [int(x) for x in args.page_sizes.split(",") if x]
        for ps, ordered in [(x, False) for x in sizes] + ([(x, True) for x in sizes] if args.ordered else []):
            if L % ps:
                continue
            kp, vp, table = paged_copy(kc, vc, ps, ordered)
            o = torch.empty_like(q)
            keep += [kp, vp, table]
            name = f"fw paged{ps}" + (" in order" if ordered else "")
            todo.append((name, fw_cache(Ctx(workspace_for=(B, H, Hkv, D, 1, L)), q, kp, vp, seqlens, o, table)))
            outs[name] = o
        for name, cfg in configs if D == 128 else []:  # the configurations compiled for the table's head dim
            o = torch.empty_like(q)
            todo.append((f"fw cache {name}", fw_cache(Ctx(cfg, workspace_for=(B, H, Hkv, D, 1, L)), q, kc, vc, seqlens, o)))
        ref = None
        for backend in SDPA:
            fn, why, out = sdpa_call(backend, q, kc, vc)
            if fn is None:
                how[f"sdpa {backend}"] = f"n/a: {why}"
                continue
            how[f"sdpa {backend}"] = why
            todo.append((f"sdpa {backend}", fn))
            ref = out if ref is None else ref
        for _, fn in todo:
            fn()
        torch.cuda.synchronize()
        us = time_all(todo, args.reps, args.warmup, args.graph, args.window_us)
        best = min((t for n, t in us.items() if n.startswith("sdpa")), default=None)
        shape = f"B={B} {H}/{Hkv} L={L}" + (f" D={D}" if D != 128 else "")
        print(f"\n## decode {shape}: K+V {kv_bytes / 1e6:.0f} MB, copy-bound {kv_bytes / (copy_gbs * 1e9) * 1e6:.1f} us")
        for name, t in us.items():
            gbs = kv_bytes / (t * 1e-6) / 1e9
            err = ""
            if ref is not None and name in outs:
                err = f"  max|o - sdpa| {(outs[name].float() - ref.float()).abs().max().item():.1e}"
            note = f"  ({how[name]})" if how.get(name) else ""
            ratio = f"{best / t:5.2f}x" if best else "  n/a"
            print(f"  {name:<34} {t:9.1f} us {gbs:8.0f} GB/s {100 * gbs / copy_gbs:5.1f}% copy  {ratio} best SDPA{err}{note}")
            rows.append({"shape": shape, "method": name, "us": t, "gbs": gbs, "pct_copy": 100 * gbs / copy_gbs,
                         "vs_best_sdpa": best / t if best else None, "note": how.get(name, "")})
        for name, why in how.items():
            if why.startswith("n/a"):
                print(f"  {name:<34} {why}")
        if args.energy:
            fns = dict(todo)
            ref_tpj = None
            print(f"  energy: >= {args.energy_s:g} s windows of back-to-back calls, GPU energy counter; tokens a call = B = {B}")
            ref_us = None
            for name in [n for n in fns if n in ("sdpa cudnn", "sdpa flash") or n.startswith("fw cache")]:
                jpc, watts, us_call, mhz, reasons = energy_per_call(fns[name], args.energy_s)
                clock = (f" SM {mhz:.0f} MHz" if mhz is not None else "") + (f" ({','.join(reasons)})" if reasons else "")
                if jpc is None:
                    print(f"  {name:<34} J/token n/a (no GPU energy counter); {us_call:.1f} us a call{clock}")
                    continue
                tpj = B / jpc
                if name == "sdpa cudnn":
                    ref_tpj, ref_us = tpj, us_call
                print(f"  {name:<34} {jpc / B * 1e3:9.3f} mJ/token {watts:6.0f} W avg {tpj:9.0f} tokens/J {us_call:8.1f} us a call{clock}")
                rows.append({"shape": shape, "method": name, "j_per_token": jpc / B, "avg_w": watts, "tokens_per_j": tpj,
                             "energy_us": us_call, "sm_clock_mhz": mhz, "throttle_reasons": reasons})
            if ref_tpj:
                for r in rows:
                    if r["shape"] == shape and "tokens_per_j" in r:
                        r["tokens_per_j_vs_cudnn"] = r["tokens_per_j"] / ref_tpj
                        r["speed_vs_cudnn"] = ref_us / r["energy_us"]
                        print(f"  {r['method']:<34} {r['tokens_per_j_vs_cudnn']:5.2f}x cuDNN's tokens per joule at "
                              f"{r['speed_vs_cudnn']:4.2f}x its speed (the energy windows' time)")
        del q, kc, vc, keep, outs, todo
        torch.cuda.empty_cache()
    return rows


def prefill_rows(args):
    H, Hkv, D, nseq = 32, 8, 128, 16
    lens = [int(round(128 + i * (4096 - 128) / (nseq - 1))) for i in range(nseq)]
    total, mean = sum(lens), sum(lens) // nseq
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
    torch.manual_seed(5)
    q = torch.randn(total, H, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(total, Hkv, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    o = torch.empty_like(q)
    flops = sum(2.0 * H * D * n * n for n in lens)
    ctx = Ctx()
    todo = [("fw varlen", fw_varlen(ctx, q, k, v, o, cu, max(lens)))]
    forced = {}  # configuration -> its output, to name the kernel the default call ran
    for cfg in ("ws-bm128-bn128-s3-varlen", "srv-m64-bn64-s2"):
        try:
            ox = torch.empty_like(q)
            run = fw_varlen(Ctx(cfg), q, k, v, ox, cu, max(lens))
            run()
            forced[cfg] = ox
            if cfg.startswith("srv-"):
                todo.append(("fw varlen srv", run))
        except RuntimeError as e:
            print(f"# {cfg}: {str(e)[:120]}")
    note = ""
    try:
        from torch.nn.attention.varlen import varlen_attn
        sig = inspect.signature(varlen_attn).parameters
        kw = {"is_causal": True} if "is_causal" in sig else {"window_size": (-1, 0)}
        kk, vv = k, v
        if "enable_gqa" in sig:
            kw["enable_gqa"] = True
        try:
            varlen_attn(q, kk, vv, cu, cu, max(lens), max(lens), **kw)
        except Exception:  # noqa: BLE001
            kk, vv = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            kw.pop("enable_gqa", None)
            note = "expanded K/V"
        out_t = varlen_attn(q, kk, vv, cu, cu, max(lens), max(lens), **kw)
        out_t = out_t[0] if isinstance(out_t, tuple) else out_t
        todo.append(("torch varlen_attn", lambda: varlen_attn(q, kk, vv, cu, cu, max(lens), max(lens), **kw)))
    except Exception as e:  # noqa: BLE001
        out_t = None
        note = f"varlen_attn n/a: {str(e)[:80]}"
    qd = torch.randn(nseq, mean, H, D, dtype=torch.bfloat16, device="cuda")
    kd = torch.randn(nseq, mean, Hkv, D, dtype=torch.bfloat16, device="cuda")
    vd, od = torch.randn_like(kd), torch.empty_like(qd)
    dense_flops = nseq * 2.0 * H * D * mean * mean
    todo.append((f"fw dense L={mean}", fw_dense(Ctx(), qd, kd, vd, od, True)))
    todo[0][1]()
    torch.cuda.synchronize()
    ran = next((cfg for cfg, ox in forced.items() if torch.equal(ox, o)), "unknown")
    err = f", max|o - varlen_attn| {(o.float() - out_t.float()).abs().max().item():.1e}" if out_t is not None else ""
    us = time_all(todo, args.reps, args.warmup, args.graph, args.window_us)
    print(f"\n## ragged prefill, causal, {nseq} sequences of {lens[0]}..{lens[-1]} ({total} tokens), {H}/{Hkv} heads, D={D}{err}"
          + (f" ({note})" if note else ""))
    rows = []
    for name, t in us.items():
        tf = (dense_flops if name.startswith("fw dense") else flops) / (t * 1e-6) / 1e12
        kernel = ran if name == "fw varlen" else "srv-m64-bn64-s2" if name == "fw varlen srv" else ""
        rows.append({"shape": "ragged prefill", "method": name, "us": t, "tflops": tf, "note": note, "kernel": kernel})
        print(f"  {name:<22} {t:10.1f} us {tf:7.1f} TFLOP/s" + (f"  ({kernel})" if kernel else ""))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the first two decode shapes")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--graph", action="store_true", help="time windows captured as CUDA graphs")
    ap.add_argument("--window-us", type=float, default=20000.0,
                    help="length of a timing window of back-to-back calls, microseconds (default 20000)")
    ap.add_argument("--configs", action="store_true", help="also every cuda-flash serving configuration (KV-cache call)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--shapes", default="", help="decode shapes by index into the table (e.g. 0,2)")
    ap.add_argument("--head-dims", default="128", help="head dims of the decode rows (e.g. 64,128,256; default 128)")
    ap.add_argument("--ordered", action="store_true", help="also paged caches whose pages are in order")
    ap.add_argument("--no-prefill", action="store_true", help="skip the ragged prefill rows")
    ap.add_argument("--energy", action="store_true",
                    help="decode rows: J/token and tokens per joule (fw cache, its configurations, SDPA cudnn and flash)")
    ap.add_argument("--energy-s", type=float, default=1.5, help="seconds of each energy window (default 1.5)")
    ap.add_argument("--page-sizes", default="16,1", help="page sizes of the paged rows (dividing the keys), e.g. 16,1,256,4")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, cudnn "
          f"{torch.backends.cudnn.version()}, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    copy_gbs = copy_bandwidth(args.reps, args.warmup)
    print(f"# device copy bandwidth (read + write) {copy_gbs:.0f} GB/s")
    configs = []
    if args.configs:  # the names cuda-flash lists for the decode shapes: 8 rows (keys as M) at 0-2 blocks an SM
        for occ in ("", "-occ1", "-occ2"):  # cap, then 16 rows (query rows as M) for comparison
            for t in ("bn64-s2", "bn64-s3", "bn64-s4", "bn128-s2"):
                configs.append((f"srv-m8-{t}{occ}", f"srv-m8-{t}{occ}"))
        configs += [(f"srv-m16-{t}", f"srv-m16-{t}") for t in ("bn64-s2", "bn64-s3", "bn64-s4", "bn128-s2")]
        configs += [("nosplit", "srv-m8-bn64-s2-occ2-nosplit"), ("split16", "srv-m8-bn64-s2-occ2-split16")]
    rows = decode_rows(args, copy_gbs, configs)
    if not args.no_prefill:
        rows += prefill_rows(args)
    print("\n## summary: decode, microseconds (percentage of the copy bandwidth), fw cache / best SDPA")
    print(f"  {'shape':<24} {'fw dense':>14} {'fw cache':>14} {'fw paged16':>14} {'fw paged1':>14} {'best SDPA':>20} {'ratio':>6}")
    for shape in dict.fromkeys(r["shape"] for r in rows if r["shape"] != "ragged prefill"):
        rs = {r["method"]: r for r in rows if r["shape"] == shape and "us" in r}
        cell = lambda m: f"{rs[m]['us']:7.1f} ({rs[m]['pct_copy']:3.0f}%)" if m in rs else "n/a"  # noqa: E731
        sd = [r for m, r in rs.items() if m.startswith("sdpa")]
        b = min(sd, key=lambda r: r["us"]) if sd else None
        bs = f"{b['us']:7.1f} {b['method'][5:]}" if b else "n/a"
        ratio = f"{b['us'] / rs['fw cache']['us']:5.2f}x" if b and "fw cache" in rs else "n/a"
        print(f"  {shape:<24} {cell('fw dense'):>14} {cell('fw cache'):>14} {cell('fw paged16'):>14} {cell('fw paged1'):>14} "
              f"{bs:>20} {ratio:>6}")
    pr = {r["method"]: r for r in rows if r["shape"] == "ragged prefill"}
    if "fw varlen" in pr:
        tv = pr.get("torch varlen_attn")
        dn = next((r for m, r in pr.items() if m.startswith("fw dense")), None)
        print(f"  ragged prefill: fw varlen ({pr['fw varlen']['kernel']}) {pr['fw varlen']['tflops']:.1f} TFLOP/s"
              + (f", {tv['us'] / pr['fw varlen']['us']:.2f}x varlen_attn" if tv else "")
              + (f", {pr['fw varlen']['tflops'] / dn['tflops']:.2f}x of fw dense at the mean length" if dn else ""))
    out = args.json or (os.path.join(os.environ["OUT"], "serving_sdpa.json") if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump({"device": props.name, "copy_gbs": copy_gbs, "rows": rows}, f, indent=1)
        print(f"# wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
