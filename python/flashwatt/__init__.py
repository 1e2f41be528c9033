"""flashwatt: exact, fast, memory-efficient attention with power-aware scheduling.

A ctypes binding of libflashwatt (no compiled extension). NumPy arrays on the CPU and PyTorch
tensors on the CPU and CUDA::

    import flashwatt
    o = flashwatt.attention(q, k, v, causal=True)            # (batch, heads, seq, head_dim)
    o, lse = flashwatt.attention(q, k, v, layout="bshd", return_lse=True)
    o = flashwatt.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal=True)
    o = flashwatt.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, k=k, v=v)
    ctx = flashwatt.Context(objective="min-energy", power_cap_w=450)
    o = ctx.attention(q, k, v)
    with flashwatt.energy() as e:
        ...
    print(e.joules, e.seconds)

The library is found through ``$FLASHWATT_LIBRARY``, then the package's own copy (``pip install
./python`` builds it), then ``../build/libflashwatt.so`` next to the package source, then the system
loader (see :func:`library_path`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from . import _lib
from ._attention import attention, attention_backward
from ._context import Context, default_context
from ._serving import attention_varlen, attention_varlen_backward, attention_with_kvcache
from ._lib import FlashwattError, FlashwattNotImplementedError, Status, library_path
from ._telemetry import CpuReading, EnergyWindow, GpuReading, Snapshot, energy, telemetry


def _package_version() -> str:
    """The version CMake's project(VERSION) defines: written into the package when pip built it, else
    read from the checkout's CMakeLists.txt (python/ used in place)."""
    try:
        from ._version import version  # type: ignore[import-not-found]

        return str(version)
    except ImportError:
        pass
    import re
    from pathlib import Path

    try:
        text = (Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"project\(flashwatt VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text)
    return m.group(1) if m else "unknown"


__version__ = _package_version()

# The torch custom ops (torch.ops.flashwatt.*) are registered when the torch adapter is imported: here
# where torch already is, else at the first call with a torch tensor.
import sys as _sys

if "torch" in _sys.modules:
    from . import _torch  # noqa: F401


@dataclass(frozen=True)
class BackendInfo:
    """One backend compiled into the library: ``device`` is "cpu" or "cuda"; ``usable`` says
    whether it can run on this machine now, ``why_not`` why not."""

    name: str
    device: str
    usable: bool
    why_not: str
    description: str


def backends() -> List[BackendInfo]:
    """Every backend compiled into the loaded libflashwatt, in the registry's preference order."""
    import ctypes

    lib = _lib.load()
    out = []
    for i in range(lib.fw_backend_count()):
        info = _lib.FwBackendInfo()
        st = lib.fw_backend_get_info(i, ctypes.byref(info))
        if st != 0:
            raise _lib.error_for(st, f"fw_backend_get_info({i}) failed")
        out.append(BackendInfo(
            name=info.name.decode(),
            device="cuda" if info.device == _lib.DEVICE_CUDA else "cpu",
            usable=bool(info.usable),
            why_not=info.why_not.decode(errors="replace"),
            description=(info.description or b"").decode(errors="replace"),
        ))
    return out


def version() -> str:
    """Version of the loaded C library ("major.minor.patch")."""
    return _lib.load().fw_version().decode()


def cpu_simd_level() -> str:
    """CPU SIMD level the library uses: "avx512", "avx2" or "scalar"."""
    return _lib.load().fw_cpu_simd_level().decode()


def cuda_device_count() -> int:
    """CUDA devices the library sees (0 without a driver, a GPU, or CUDA in the build)."""
    return int(_lib.load().fw_cuda_device_count())


__all__ = [
    "attention", "attention_backward", "attention_varlen", "attention_varlen_backward", "attention_with_kvcache", "Context", "default_context", "FlashwattError", "FlashwattNotImplementedError",
    "Status", "BackendInfo", "backends", "version", "library_path", "cpu_simd_level",
    "cuda_device_count", "telemetry", "energy", "EnergyWindow", "Snapshot", "GpuReading",
    "CpuReading", "__version__",
]
