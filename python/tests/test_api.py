"""The binding itself: struct layouts against the library and the header, backends(), version(),
library discovery, telemetry's behaviour with and without the C telemetry API."""
import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

import flashwatt as fw
from flashwatt import _lib, _telemetry

HEADER = Path(__file__).resolve().parents[2] / "include" / "flashwatt.h"


def test_structs_round_trip_through_the_library():
    lib = _lib.load()
    t = lib.fw_tensor_bshd(ctypes.c_void_p(0x1000), _lib.BF16, _lib.FwDevice(_lib.DEVICE_CUDA, 3), 2, 5, 7, 11)
    assert (t.data, t.dtype, t.device.kind, t.device.index) == (0x1000, _lib.BF16, _lib.DEVICE_CUDA, 3)
    assert list(t.size) == [2, 5, 7, 11]
    assert list(t.stride) == [7 * 5 * 11, 11, 5 * 11, 1]
    p = lib.fw_attn_params_default()
    assert (p.scale, p.causal, p.window_left, p.window_right) == (0.0, 0, -1, -1)
    pol = lib.fw_policy_default()
    assert (pol.objective, pol.power_cap_w, pol.temperature_limit_c, pol.allow_reduced_precision,
            pol.error_budget) == (0, 0.0, 0.0, 0, 0.0)


def test_packed_descriptors_equal_the_ctypes_structs():
    """The hot path packs fw_tensor with struct; it must be byte-identical to FwTensor."""
    t = _lib.FwTensor(0x7F0012345678, _lib.F16, _lib.FwDevice(_lib.DEVICE_CUDA, 2),
                      _lib.I64x4(2, 3, 5, 7), _lib.I64x4(105, 35, 7, 1))
    packed = _lib.pack_tensor(0x7F0012345678, _lib.F16, _lib.DEVICE_CUDA, 2, (2, 3, 5, 7), (105, 35, 7, 1))
    assert packed == bytes(t)
    lib = _lib.load()
    ref = lib.fw_tensor_bhsd(ctypes.c_void_p(0x1000), _lib.F32, _lib.FwDevice(_lib.DEVICE_CPU, 0), 2, 3, 5, 7)
    assert _lib.pack_tensor(0x1000, _lib.F32, _lib.DEVICE_CPU, 0, (2, 3, 5, 7), (105, 35, 7, 1)) == bytes(ref)


def test_packed_serving_structs_equal_the_ctypes_structs():
    """fw_varlen and fw_kv_cache are packed with struct on the hot path, like fw_tensor."""
    P32 = ctypes.POINTER(ctypes.c_int32)
    sv = _lib.FwVarlen(3, ctypes.cast(0x2000, P32), ctypes.cast(0x3000, P32), 17, 1 << 40)
    assert _lib.pack_varlen(3, 0x2000, 0x3000, 17, 1 << 40) == bytes(sv)
    kd = _lib.pack_tensor(0x4000, _lib.BF16, _lib.DEVICE_CUDA, 1, (9, 2, 16, 64), (2048, 64, 128, 1))
    vd = _lib.pack_tensor(0x8000, _lib.BF16, _lib.DEVICE_CUDA, 1, (9, 2, 16, 64), (2048, 64, 128, 1))
    kc = _lib.FwKvCache(_lib.FwTensor.from_buffer_copy(kd), _lib.FwTensor.from_buffer_copy(vd),
                        ctypes.cast(0x5000, P32), ctypes.cast(0x6000, P32), 7, 11)
    assert _lib.pack_kv_cache(kd, vd, 0x5000, 0x6000, 7, 11) == bytes(kc)
    assert _lib.pack_kv_cache(kd, vd, 0x5000, 0, 0, 0) == bytes(_lib.FwKvCache(
        _lib.FwTensor.from_buffer_copy(kd), _lib.FwTensor.from_buffer_copy(vd), ctypes.cast(0x5000, P32), None, 0, 0))


def test_ints_ctypes_would_wrap_are_refused():
    with pytest.raises(ValueError, match="threads"):
        fw.Context(threads=(1 << 32) + 1)
    with pytest.raises(ValueError, match=r"window\[0\]"):
        fw.attention(*(np.ones((1, 1, 2, 4), np.float32),) * 3, window=(1 << 64, 0))
    with pytest.raises(TypeError, match="threads"):
        fw.Context(threads=2.5)
    with pytest.raises(ValueError, match="rounds to 0 in float32"):
        fw.attention(*(np.ones((1, 1, 2, 4), np.float32),) * 3, scale=1e-50)


def _header_fields(text, struct):
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S)
    if not m:
        return None
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            names += [re.sub(r"\[.*?\]", "", n).split()[-1].lstrip("*") for n in decl.split(",")]
    return names


@pytest.mark.skipif(not HEADER.exists(), reason="include/flashwatt.h is not in this tree")
@pytest.mark.parametrize("struct,cls", [
    ("fw_device", _lib.FwDevice), ("fw_tensor", _lib.FwTensor), ("fw_attn_params", _lib.FwAttnParams),
    ("fw_policy", _lib.FwPolicy), ("fw_backend_info", _lib.FwBackendInfo),
    ("fw_varlen", _lib.FwVarlen), ("fw_kv_cache", _lib.FwKvCache), ("fw_workspace_query", _lib.FwWorkspaceQuery),
    ("fw_gpu_reading", _telemetry.FwGpuReading), ("fw_cpu_reading", _telemetry.FwCpuReading),
    ("fw_energy_window", _telemetry.FwEnergyWindow),
])
def test_struct_fields_match_the_header(struct, cls):
    """The ctypes mirrors list the header's fields in the header's order (catches drift)."""
    names = _header_fields(HEADER.read_text(), struct)
    if names is None:
        pytest.skip(f"{struct} is not declared in {HEADER}")
    assert [f[0] for f in cls._fields_ if f[0] != "_spare"] == names


def test_enums_match_the_header():
    text = HEADER.read_text() if HEADER.exists() else ""
    if not text:
        pytest.skip("no header")
    for s in fw.Status:
        assert re.search(r"FW_%s = %d\b" % (s.name, s.value), text), s
    for name, value in _lib.OBJECTIVES.items():
        assert re.search(r"FW_OBJECTIVE_%s = %d\b" % (name.replace("-", "_").upper(), value), text)


def test_backends_and_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", fw.version())
    bs = fw.backends()
    names = [b.name for b in bs]
    assert len(names) == len(set(names)) and "cpu-ref" in names
    for b in bs:
        assert b.device in ("cpu", "cuda")
        assert b.usable == (b.why_not == ""), b
    ref = next(b for b in bs if b.name == "cpu-ref")
    assert ref.usable and ref.device == "cpu"
    assert fw.cpu_simd_level() in ("avx512", "avx2", "scalar")
    assert fw.cuda_device_count() >= 0
    assert Path(fw.library_path()).name.startswith("libflashwatt")


def test_library_search_order(monkeypatch):
    monkeypatch.setenv("FLASHWATT_LIBRARY", "/nonexistent/libflashwatt.so")
    paths = _lib.candidate_paths()
    assert paths[0] == "/nonexistent/libflashwatt.so"
    assert any(p.endswith("build/libflashwatt.so") for p in paths)
    assert "libflashwatt.so" in paths  # the system loader


def test_error_types():
    e = _lib.error_for(_lib.Status.ERR_NOT_IMPLEMENTED, "x")
    assert isinstance(e, NotImplementedError) and isinstance(e, fw.FlashwattError)
    e = _lib.error_for(_lib.Status.ERR_NO_BACKEND, "y", not_implemented=True)
    assert isinstance(e, NotImplementedError) and e.status == fw.Status.ERR_NO_BACKEND
    e = _lib.error_for(_lib.Status.ERR_NO_BACKEND, "y")
    assert not isinstance(e, NotImplementedError) and e.message == "y"


def test_telemetry_never_fakes_numbers():
    snap = fw.telemetry()
    if not _telemetry.available():
        assert snap.available is False and snap.gpus == [] and snap.cpu is None
        assert "not in this build" in snap.description
        with pytest.raises(NotImplementedError, match="not in this build"):
            with fw.energy():
                pass
        return
    assert snap.available and snap.description
    for g in snap.gpus:  # every field is a real reading or None
        for name in ("power_instant_w", "temperature_c", "energy_mj"):
            val = getattr(g, name)
            assert val is None or val >= 0
    with fw.energy(gpu=-1) as e:  # CPU-only window: always opens
        np.zeros(10).sum()
    assert e.seconds is not None and e.seconds >= 0
    assert e.joules is None  # a CPU-only window measures no GPU joules
    assert e.cpu_joules is None or e.cpu_joules >= 0
    if not snap.gpus:
        # No GPU telemetry: the window opens and says n/a (as the docs promise) -- never a zero, never
        # an exception; sampling asked for changes nothing.
        for kwargs in ({}, {"sample_ms": 10}):
            with fw.energy(0, **kwargs) as e:
                np.zeros(10).sum()
            assert e.joules is None and e.avg_w is None and e.source == "n/a", e
            assert e.seconds is not None and e.seconds >= 0
            assert e.note.startswith("no GPU telemetry: ") and "n/a" in e.note, e.note
    else:
        with pytest.raises(fw.FlashwattError, match="cannot open an energy window on gpu"):
            with fw.energy(len(snap.gpus)):
                pass
