#!/usr/bin/env python3
"""PyTorch SDPA (every backend) with energy per call, measured like flashwatt bench --energy:
bounded cool-down to the idle baseline, 0.5 s warm-up, then a >= 1 s window of back-to-back calls
over which the NVML total-energy counter gives joules; J/call = window joules / calls. Power is
sampled every 20 ms in a thread (instant power, NVML field 186, else nvmlDeviceGetPowerUsage) for
the peak and the standard deviation. NVML through ctypes (no pynvml). Rows have the field names of
`flashwatt bench --json`, so bench/plot.py draws them beside flashwatt's.

usage: python3 bench/sdpa_energy.py --json OUT.json [--batch 16] [--heads 8] [--head-dim 64]
           [--seqlen 512,1024] [--dtype f32,f16] [--cooldown 2] [--window 1.0] [--budget-s 60]
Energy fields are null where NVML is absent: never 0.
"""
import argparse
import ctypes
import json
import math
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SDPA = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_double)]  # union; read as bytes below


class Nvml:
    def __init__(self):
        self.ok = False
        self.why = ""
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            if self.lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit_v2 failed")
            self.h = ctypes.c_void_p()
            bus = None
            try:
                p = torch.cuda.get_device_properties(torch.cuda.current_device())
                if hasattr(p, "pci_bus_id"):
                    bus = "%08x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, p.pci_device_id)
            except Exception:
                bus = None
            rc = 1
            if bus:
                rc = self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(self.h))
            if rc != 0:
                rc = self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.h))
            if rc != 0:
                raise OSError("no NVML device handle")
            self.ok = self.energy_mj() is not None
            if not self.ok:
                self.why = "no energy counter"
        except OSError as e:
            self.why = str(e)

    def energy_mj(self):
        e = ctypes.c_ulonglong()
        return e.value if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.h, ctypes.byref(e)) == 0 else None

    def power_w(self):
        fv = FieldValue()
        fv.fieldId = 186  # NVML_FI_DEV_POWER_INSTANT
        if self.lib.nvmlDeviceGetFieldValues(self.h, 1, ctypes.byref(fv)) == 0 and fv.nvmlReturn == 0:
            raw = ctypes.string_at(ctypes.addressof(fv) + 32, 8)
            vt = fv.valueType  # 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 sll, 5 sint
            if vt == 0:
                v = ctypes.c_double.from_buffer_copy(raw).value
            elif vt in (1, 5):
                v = ctypes.c_uint.from_buffer_copy(raw[:4]).value
            else:
                v = ctypes.c_ulonglong.from_buffer_copy(raw).value
            return v / 1000.0
        p = ctypes.c_uint()
        return p.value / 1000.0 if self.lib.nvmlDeviceGetPowerUsage(self.h, ctypes.byref(p)) == 0 else None


class Sampler(threading.Thread):
    def __init__(self, nv):
        super().__init__(daemon=True)
        self.nv, self.samples, self.stop_flag = nv, [], False

    def run(self):
        while not self.stop_flag:
            w = self.nv.power_w()
            if w is not None:
                self.samples.append((time.perf_counter(), w))
            time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--batch", default="16", help="batch sizes, comma-separated")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seqlen", default="512,1024")
    ap.add_argument("--dtype", default="f32,f16")
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--cooldown", type=float, default=2.0)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--budget-s", type=float, default=60.0)
    a = ap.parse_args()
    nv = Nvml()
    if not nv.ok:
        print("sdpa_energy: NVML n/a (%s): energy fields null" % nv.why)
    sampler = Sampler(nv) if nv.ok else None
    if sampler:
        sampler.start()
    idle = None
    if nv.ok:
        time.sleep(1.0)
        s = [w for t, w in sampler.samples[-50:]]
        idle = statistics.mean(s) if s else None
    start = time.perf_counter()
    rows = []
    dev = torch.cuda.get_device_name(0)
    print("sdpa_energy on %s, torch %s, idle %s W" % (dev, torch.__version__, "%.1f" % idle if idle else "n/a"))
    shapes = [(int(b), int(l)) for b in a.batch.split(",") for l in a.seqlen.split(",")]
    for dt in a.dtype.split(","):
        for B, L in shapes:
            H, D = a.heads, a.head_dim
            g = torch.Generator(device="cuda").manual_seed(5)
            q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=DT[dt], generator=g) for _ in range(3))
            flops = 4.0 * B * H * L * L * D * (0.5 if a.causal else 1.0)
            for name, be in SDPA.items():
                row = {"backend": "sdpa-" + name, "device": "cuda:0", "dtype": dt, "batch": B, "heads": H,
                       "kv_heads": H, "seqlen_q": L, "seqlen_k": L, "head_dim": D, "causal": bool(a.causal),
                       "status": "ok", "ms": None, "tflops": None, "watts_avg": None, "watts_peak": None,
                       "joules_per_call": None, "gflops_per_watt": None, "watts_std": None, "idle_w": idle,
                       "power_trace": None, "note": "", "gpu": dev, "torch": torch.__version__}
                if time.perf_counter() - start > a.budget_s:
                    row["status"] = "skipped"
                    row["note"] = "over --budget-s"
                    rows.append(row)
                    continue

                def call():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
                # the backend is forced once around the whole measurement (no per-call overhead)
                kctx = sdpa_kernel(be)
                kctx.__enter__()
                try:
                    call()
                    torch.cuda.synchronize()
                except Exception as e:  # this backend cannot run this dtype/shape
                    kctx.__exit__(None, None, None)
                    row["status"] = "skipped"
                    row["note"] = str(e).split("\n")[0][:200]
                    rows.append(row)
                    print("%-16s %-4s L=%-5d skipped: %s" % (row["backend"], dt, L, row["note"][:80]))
                    continue
                # time: CUDA events over windows of ~20 ms, median
                ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev0.record(); call(); ev1.record(); torch.cuda.synchronize()
                one = max(ev0.elapsed_time(ev1), 1e-3)
                n = max(1, int(20.0 / one))
                meds = []
                for _ in range(5):
                    ev0.record()
                    for _ in range(n):
                        call()
                    ev1.record(); torch.cuda.synchronize()
                    meds.append(ev0.elapsed_time(ev1) / n)
                ms = statistics.median(meds)
                row["ms"] = ms
                row["tflops"] = flops / (ms * 1e-3) / 1e12
                if nv.ok:
                    if idle:  # bounded cool-down
                        t_end = time.perf_counter() + a.cooldown
                        while time.perf_counter() < t_end:
                            w = nv.power_w()
                            if w is not None and abs(w - idle) <= max(10.0, 0.1 * idle):
                                break
                            time.sleep(0.05)
                    t_w = time.perf_counter()
                    while time.perf_counter() - t_w < 0.5:  # warm-up
                        for _ in range(n):
                            call()
                        torch.cuda.synchronize()
                    torch.cuda.synchronize()
                    e0, t0, calls = nv.energy_mj(), time.perf_counter(), 0
                    while time.perf_counter() - t0 < max(1.0, a.window):
                        for _ in range(n):
                            call()
                        calls += n
                        torch.cuda.synchronize()
                    e1, t1 = nv.energy_mj(), time.perf_counter()
                    if e0 is not None and e1 is not None and e1 > e0:
                        j = (e1 - e0) * 1e-3
                        row["joules_per_call"] = j / calls
                        row["watts_avg"] = j / (t1 - t0)
                        row["gflops_per_watt"] = flops / row["joules_per_call"] / 1e9
                        row["energy_source"] = "counter"
                    tr = [(t - t0, w) for t, w in list(sampler.samples) if t0 <= t <= t1]
                    if tr:
                        row["power_trace"] = [[round(t, 4), round(w, 2)] for t, w in tr]
                        row["watts_peak"] = max(w for _, w in tr)
                        if len(tr) >= 2:
                            row["watts_std"] = statistics.pstdev([w for _, w in tr])
                kctx.__exit__(None, None, None)
                rows.append(row)
                fmt = lambda x, f: (f % x) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"
                print("%-16s %-4s L=%-5d %9.4f ms %7.1f TFLOP/s  avg %s W  peak %s W  %s J/call" % (
                    row["backend"], dt, L, ms, row["tflops"], fmt(row["watts_avg"], "%.0f"),
                    fmt(row["watts_peak"], "%.0f"), fmt(row["joules_per_call"], "%.4g")))
            del q, k, v
    if sampler:
        sampler.stop_flag = True
    with open(a.json, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
