"""bench/plot.py's roofline ceilings: a GPU's only under GPU rows, none under CPU rows unless given.
(Pure Python: runs without matplotlib.)"""
import importlib.util
from pathlib import Path

PLOT = Path(__file__).resolve().parents[2] / "bench" / "plot.py"
spec = importlib.util.spec_from_file_location("fw_bench_plot", PLOT)
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)

CPU = [{"device": "cpu", "backend": "cpu-flash", "status": "ok", "intensity": 30.0, "tflops": 0.1}]
GPU = [{"device": "cuda:0", "backend": "cuda-flash", "status": "ok", "intensity": 300.0, "tflops": 400.0}]


def test_cpu_rows_get_no_gpu_ceilings():
    tops, gbps, what = plot.ceilings(CPU, None, None)
    assert tops == {} and gbps is None and "CPU" in what


def test_gpu_rows_get_the_anchor_ceilings():
    tops, gbps, what = plot.ceilings(CPU + GPU, None, None)
    assert tops == plot.ANCHOR_TFLOPS and gbps == plot.ANCHOR_GBPS and "H200" in what


def test_given_ceilings_win():
    assert plot.ceilings(CPU, 0.27, 40.0)[:2] == ({"given": 0.27}, 40.0)
    assert plot.ceilings(CPU, None, 40.0)[:2] == ({}, 40.0)
    assert plot.ceilings(GPU, 100.0, None)[:2] == ({"given": 100.0}, plot.ANCHOR_GBPS)
