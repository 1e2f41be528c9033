"""GPU/CPU telemetry and energy windows, through the C ``fw_telemetry_*`` / ``fw_energy_*`` API.

Readings that a source does not provide are ``None`` (never a made-up zero). Where the loaded
libflashwatt has no telemetry API at all, :func:`telemetry` returns a snapshot with
``available=False`` and :func:`energy` raises :class:`flashwatt.FlashwattNotImplementedError`.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import List, Optional

from . import _lib
from ._lib import FlashwattError, FlashwattNotImplementedError

# Validity bits of fw_gpu_reading.valid (flashwatt.h).
TEL_POWER_INSTANT = 1 << 0
TEL_POWER_AVERAGE = 1 << 1
TEL_ENERGY = 1 << 2
TEL_TEMPERATURE = 1 << 3
TEL_SM_CLOCK = 1 << 4
TEL_MEM_CLOCK = 1 << 5
TEL_UTILIZATION = 1 << 6
TEL_THROTTLE = 1 << 7
TEL_POWER_LIMIT = 1 << 8

THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}

_SPARE = 64  # bytes after each struct, so a field appended in C cannot overrun Python's buffer


class FwGpuReading(ctypes.Structure):
    _fields_ = [
        ("gpu", ctypes.c_int),
        ("t_s", ctypes.c_double),
        ("valid", ctypes.c_uint),
        ("power_instant_w", ctypes.c_double),
        ("power_average_w", ctypes.c_double),
        ("energy_mj", ctypes.c_uint64),
        ("temperature_c", ctypes.c_double),
        ("sm_clock_mhz", ctypes.c_uint),
        ("mem_clock_mhz", ctypes.c_uint),
        ("util_gpu_pct", ctypes.c_uint),
        ("util_mem_pct", ctypes.c_uint),
        ("throttle_reasons", ctypes.c_uint64),
        ("power_limit_w", ctypes.c_double),
        ("_spare", ctypes.c_char * _SPARE),
    ]


class FwCpuReading(ctypes.Structure):
    _fields_ = [
        ("t_s", ctypes.c_double),
        ("energy_valid", ctypes.c_int),
        ("energy_j", ctypes.c_double),
        ("packages", ctypes.c_int),
        ("source", ctypes.c_char * 64),
        ("_spare", ctypes.c_char * _SPARE),
    ]


class FwEnergyWindow(ctypes.Structure):
    _fields_ = [
        ("t", ctypes.c_void_p),
        ("gpu", ctypes.c_int),
        ("t0_s", ctypes.c_double),
        ("begin_energy_valid", ctypes.c_int),
        ("begin_energy_mj", ctypes.c_uint64),
        ("begin_cpu_valid", ctypes.c_int),
        ("begin_cpu_j", ctypes.c_double),
        ("valid", ctypes.c_int),
        ("source", ctypes.c_char_p),
        ("seconds", ctypes.c_double),
        ("joules", ctypes.c_double),
        ("avg_w", ctypes.c_double),
        ("peak_valid", ctypes.c_int),
        ("peak_w", ctypes.c_double),
        ("samples", ctypes.c_int),
        ("sampled_valid", ctypes.c_int),
        ("sampled_joules", ctypes.c_double),
        ("cpu_valid", ctypes.c_int),
        ("cpu_joules", ctypes.c_double),
        ("_spare", ctypes.c_char * _SPARE),
    ]


NOT_IN_BUILD = ("telemetry is not in this build of libflashwatt (it exports no fw_telemetry_* "
                "functions); rebuild from a tree that has src/telemetry")


def available() -> bool:
    """Whether the loaded libflashwatt has the telemetry API (says nothing about GPUs present)."""
    return _lib.has_symbol("fw_telemetry_open") and _lib.has_symbol("fw_energy_begin")


_handle: Optional[ctypes.c_void_p] = None
_handle_lock = threading.Lock()


def _prototype(lib: ctypes.CDLL) -> None:
    c = ctypes
    P = c.POINTER
    vp = c.c_void_p

    def proto(name, restype, *argtypes):
        _lib.set_prototype(lib, name, restype, *argtypes)

    proto("fw_telemetry_open", c.c_int, P(vp))
    proto("fw_telemetry_gpu_count", c.c_int, vp)
    proto("fw_telemetry_describe", c.c_char_p, vp)
    proto("fw_telemetry_gpu_name", c.c_int, vp, c.c_int, c.c_char_p, c.c_size_t)
    proto("fw_telemetry_read", c.c_int, vp, c.c_int, P(FwGpuReading))
    proto("fw_telemetry_read_cpu", c.c_int, vp, P(FwCpuReading))
    proto("fw_telemetry_start_sampler", c.c_int, vp, c.c_int, c.c_int)
    proto("fw_telemetry_stop_sampler", c.c_int, vp)
    proto("fw_energy_begin", c.c_int, vp, c.c_int, P(FwEnergyWindow))
    proto("fw_energy_end", c.c_int, P(FwEnergyWindow))


def _open() -> ctypes.c_void_p:
    """The process-wide fw_telemetry handle (opened on first use, kept open)."""
    global _handle
    if not available():
        raise FlashwattNotImplementedError(_lib.Status.ERR_NOT_IMPLEMENTED, NOT_IN_BUILD)
    with _handle_lock:
        if _handle is None:
            lib = _lib.load()
            _prototype(lib)
            h = ctypes.c_void_p()
            st = lib.fw_telemetry_open(ctypes.byref(h))
            if st != 0:
                raise _lib.error_for(st, "fw_telemetry_open failed")
            _handle = h
        return _handle


def throttle_reason_names(bits: int) -> List[str]:
    """Names of the set clock-event (throttle) reason bits; unknown bits as hex."""
    names = [n for b, n in THROTTLE_REASONS.items() if bits & b]
    rest = bits & ~sum(THROTTLE_REASONS)
    if rest:
        names.append(hex(rest))
    return names


@dataclass
class GpuReading:
    """One GPU reading; a field is None where its source gave no reading.

    Units: seconds (t_s, on the telemetry's monotonic clock), watts, millijoules (the driver's
    total-energy counter since it loaded), degrees Celsius, MHz, percent."""

    gpu: int
    name: Optional[str]
    t_s: Optional[float]
    power_instant_w: Optional[float] = None
    power_average_w: Optional[float] = None
    energy_mj: Optional[int] = None
    temperature_c: Optional[float] = None
    sm_clock_mhz: Optional[int] = None
    mem_clock_mhz: Optional[int] = None
    util_gpu_pct: Optional[int] = None
    util_mem_pct: Optional[int] = None
    throttle_reasons: Optional[List[str]] = None
    power_limit_w: Optional[float] = None


@dataclass
class CpuReading:
    """CPU package energy (joules since telemetry opened, summed over packages) or None."""

    t_s: Optional[float]
    energy_j: Optional[float]
    packages: int
    source: str


@dataclass
class Snapshot:
    """What :func:`telemetry` returns: every GPU's reading and the CPU's."""

    available: bool  # the library has telemetry at all
    description: str  # which sources are in use, or why each is n/a
    gpus: List[GpuReading] = field(default_factory=list)
    cpu: Optional[CpuReading] = None


def _gpu_reading(lib, h, gpu: int) -> GpuReading:
    r = FwGpuReading()
    name_buf = ctypes.create_string_buffer(128)
    name = None
    if lib.fw_telemetry_gpu_name(h, gpu, name_buf, len(name_buf)) == 0:
        name = name_buf.value.decode(errors="replace")
    st = lib.fw_telemetry_read(h, gpu, ctypes.byref(r))
    ok = r.valid if st == 0 else 0

    def val(bit, x):
        return x if ok & bit else None

    return GpuReading(
        gpu=gpu, name=name, t_s=r.t_s if st == 0 else None,
        power_instant_w=val(TEL_POWER_INSTANT, r.power_instant_w),
        power_average_w=val(TEL_POWER_AVERAGE, r.power_average_w),
        energy_mj=val(TEL_ENERGY, int(r.energy_mj)),
        temperature_c=val(TEL_TEMPERATURE, r.temperature_c),
        sm_clock_mhz=val(TEL_SM_CLOCK, int(r.sm_clock_mhz)),
        mem_clock_mhz=val(TEL_MEM_CLOCK, int(r.mem_clock_mhz)),
        util_gpu_pct=val(TEL_UTILIZATION, int(r.util_gpu_pct)),
        util_mem_pct=val(TEL_UTILIZATION, int(r.util_mem_pct)),
        throttle_reasons=val(TEL_THROTTLE, throttle_reason_names(int(r.throttle_reasons))),
        power_limit_w=val(TEL_POWER_LIMIT, r.power_limit_w),
    )


def telemetry() -> Snapshot:
    """A fresh reading of every GPU (NVML) and of CPU package energy (powercap).

    Without the telemetry API in the library: ``Snapshot(available=False, ...)`` with no readings.
    """
    if not available():
        return Snapshot(available=False, description=NOT_IN_BUILD)
    lib = _lib.load()
    h = _open()
    desc = (lib.fw_telemetry_describe(h) or b"").decode(errors="replace")
    gpus = [_gpu_reading(lib, h, i) for i in range(lib.fw_telemetry_gpu_count(h))]
    c = FwCpuReading()
    cpu = None
    if lib.fw_telemetry_read_cpu(h, ctypes.byref(c)) == 0:
        cpu = CpuReading(t_s=c.t_s, energy_j=c.energy_j if c.energy_valid else None,
                         packages=c.packages, source=c.source.decode(errors="replace"))
    return Snapshot(available=True, description=desc, gpus=gpus, cpu=cpu)


class EnergyWindow:
    """``with flashwatt.energy() as e: ...`` then ``e.joules``, ``e.seconds``.

    After the block: ``seconds`` (wall time of the window), ``joules`` (GPU energy over it),
    ``avg_w`` and ``peak_w`` (watts), ``source`` ("counter": the driver's energy counter;
    "sampled": the integral of sampled power; "n/a"), ``cpu_joules`` (CPU package energy over
    the same window), ``note`` (why the GPU was not measured, "" when it was). Values that were
    not measured are None. On a machine without GPU telemetry (no NVIDIA driver, no GPU, no NVML)
    the window still opens: ``joules`` is None, ``source`` "n/a" and ``note`` says why; an index
    beyond the GPUs that telemetry sees raises ``FlashwattError``. Synchronise the GPU inside the
    block (e.g. ``torch.cuda.synchronize()``) so the work is inside the window, and measure
    windows of >= 1 s: the counter and the power reading refresh about every 100 ms.

    Args:
        gpu: NVML index of the GPU; -1 for a CPU-only window (CPU package energy, if readable).
        sample_ms: if set, run the telemetry sampler at this period (ms) during the window; it
            gives ``peak_w``, the sampled cross-check and a fallback where the counter is absent.
    """

    def __init__(self, gpu: int = 0, sample_ms: Optional[int] = None):
        self.gpu = gpu
        self.sample_ms = sample_ms
        self.seconds: Optional[float] = None
        self.joules: Optional[float] = None
        self.avg_w: Optional[float] = None
        self.peak_w: Optional[float] = None
        self.source: str = "n/a"
        self.samples: int = 0
        self.sampled_joules: Optional[float] = None
        self.cpu_joules: Optional[float] = None
        self.note: str = ""
        self._w: Optional[FwEnergyWindow] = None
        self._sampling = False

    def __enter__(self) -> "EnergyWindow":
        h = _open()  # raises FlashwattNotImplementedError without telemetry in the build
        lib = _lib.load()
        gpu = self.gpu
        if gpu >= 0 and lib.fw_telemetry_gpu_count(h) == 0:
            # No GPU telemetry at all: a window of seconds (and CPU joules where readable), GPU values n/a.
            self.note = "no GPU telemetry: " + (lib.fw_telemetry_describe(h) or b"").decode(errors="replace")
            gpu = -1
        if self.sample_ms is not None and gpu >= 0:
            st = lib.fw_telemetry_start_sampler(h, int(self.sample_ms), 0)
            if st != 0:
                raise _lib.error_for(st, "cannot start the telemetry sampler: "
                                     + (lib.fw_telemetry_describe(h) or b"").decode(errors="replace"))
            self._sampling = True
        self._w = FwEnergyWindow()
        st = lib.fw_energy_begin(h, gpu, ctypes.byref(self._w))
        if st != 0:
            if self._sampling:
                lib.fw_telemetry_stop_sampler(h)
                self._sampling = False
            raise _lib.error_for(st, f"cannot open an energy window on gpu {self.gpu}: "
                                     + (lib.fw_telemetry_describe(h) or b"").decode(errors="replace"))
        return self

    def __exit__(self, *exc) -> None:
        lib = _lib.load()
        assert self._w is not None
        w = self._w
        st = lib.fw_energy_end(ctypes.byref(w))
        if self._sampling:
            lib.fw_telemetry_stop_sampler(_open())
            self._sampling = False
        # FW_ERR_UNSUPPORTED: the window closed but nothing measured it (joules stay None).
        if st not in (0, _lib.Status.ERR_UNSUPPORTED):
            if exc[0] is None:
                raise _lib.error_for(st, "fw_energy_end failed")
            return
        self.seconds = w.seconds
        self.source = (w.source or b"n/a").decode()
        if w.valid:
            self.joules, self.avg_w = w.joules, w.avg_w
        if w.peak_valid:
            self.peak_w = w.peak_w
        self.samples = w.samples
        if w.sampled_valid:
            self.sampled_joules = w.sampled_joules
        if w.cpu_valid:
            self.cpu_joules = w.cpu_joules

    def __repr__(self) -> str:
        return (f"EnergyWindow(gpu={self.gpu}, seconds={self.seconds}, joules={self.joules}, "
                f"avg_w={self.avg_w}, peak_w={self.peak_w}, source={self.source!r}, "
                f"cpu_joules={self.cpu_joules}{', note=' + repr(self.note) if self.note else ''})")


def energy(gpu: int = 0, sample_ms: Optional[int] = None) -> EnergyWindow:
    """An energy window over a ``with`` block; see :class:`EnergyWindow`."""
    return EnergyWindow(gpu, sample_ms)


__all__ = ["telemetry", "energy", "available", "Snapshot", "GpuReading", "CpuReading",
           "EnergyWindow", "throttle_reason_names", "FlashwattError"]
