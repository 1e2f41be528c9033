"""ctypes binding of libflashwatt: finding the library, the C structs, prototypes, errors.

The structs mirror ``include/flashwatt.h`` field for field; ``tests/test_api.py`` checks them
against the library's own by-value constructors (``fw_tensor_bhsd``, ``fw_attn_params_default``,
``fw_policy_default``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import struct
import sys
from pathlib import Path
from typing import List, Optional

# ---- status codes and errors --------------------------------------------------------------


class Status(enum.IntEnum):
    """``fw_status`` from flashwatt.h."""

    OK = 0
    ERR_NULL_ARGUMENT = 1
    ERR_INVALID_SHAPE = 2
    ERR_INVALID_STRIDE = 3
    ERR_DTYPE_MISMATCH = 4
    ERR_DEVICE_MISMATCH = 5
    ERR_OVERLAP = 6
    ERR_INVALID_VALUE = 7
    ERR_UNSUPPORTED = 8
    ERR_NO_BACKEND = 9
    ERR_DEVICE = 10
    ERR_OUT_OF_MEMORY = 11
    ERR_NOT_IMPLEMENTED = 12
    ERR_INTERNAL = 13
    ERR_CONTEXT_BUSY = 14


class FlashwattError(RuntimeError):
    """A flashwatt C call failed.

    Attributes:
        status: the :class:`Status` the C call returned (an ``int`` if the code is unknown).
        message: the library's message (``fw_context_last_error``), naming the argument and limit.
    """

    def __init__(self, status: int, message: str):
        try:
            status = Status(status)
            name = status.name
        except ValueError:
            name = str(int(status))
        self.status = status
        self.message = message
        super().__init__(f"[{name}] {message}")


class FlashwattNotImplementedError(FlashwattError, NotImplementedError):
    """What was asked for is not available in this build (e.g. no backend has a backward pass yet,
    or the library was built without telemetry). Catchable as ``NotImplementedError`` too."""


# ---- the C structs ---------------------------------------------------------------------------

F32, F16, BF16 = 0, 1, 2  # fw_dtype
DEVICE_CPU, DEVICE_CUDA = 0, 1  # fw_device_kind
WINDOW_UNLIMITED = -1

OBJECTIVES = {"fastest": 0, "min-energy": 1, "power-cap": 2}
PRECISIONS = {"exact": 0, "tf32": 1, "3xtf32": 2, "bf16": 3}


class FwDevice(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int)]


I64x4 = ctypes.c_int64 * 4


class FwTensor(ctypes.Structure):
    """fw_tensor: logical (batch, heads, seq, head_dim); strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device", FwDevice),
        ("size", I64x4),
        ("stride", I64x4),
    ]


class FwAttnParams(ctypes.Structure):
    _fields_ = [
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
    ]


class FwPolicy(ctypes.Structure):
    _fields_ = [
        ("objective", ctypes.c_int),
        ("power_cap_w", ctypes.c_double),
        ("temperature_limit_c", ctypes.c_double),
        ("allow_reduced_precision", ctypes.c_int),
        ("error_budget", ctypes.c_double),
    ]


class FwVarlen(ctypes.Structure):
    """fw_varlen: sequence b owns rows cu_seqlens[b] .. cu_seqlens[b+1] - 1 of a packed tensor."""

    _fields_ = [
        ("batch", ctypes.c_int64),
        ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)),
        ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int32)),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
    ]


class FwKvCache(ctypes.Structure):
    """fw_kv_cache: k, v contiguous (B, H_kv, capacity, D) or paged (num_pages, H_kv, page_size, D)."""

    _fields_ = [
        ("k", FwTensor),
        ("v", FwTensor),
        ("seqlens", ctypes.POINTER(ctypes.c_int32)),
        ("block_table", ctypes.POINTER(ctypes.c_int32)),
        ("max_pages_per_seq", ctypes.c_int64),
        ("block_table_stride", ctypes.c_int64),
    ]


class FwWorkspaceQuery(ctypes.Structure):
    _fields_ = [
        ("device", FwDevice),
        ("dtype", ctypes.c_int),
        ("max_batch", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
    ]


class FwBackendInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("device", ctypes.c_int),
        ("usable", ctypes.c_int),
        ("why_not", ctypes.c_char * 256),
    ]


# Hot path: descriptors packed with struct (much cheaper than ctypes Structures) and passed as
# pointers to the bytes; checked against the ctypes layout above at import.
TENSOR_PACK = _TENSOR_PACK = struct.Struct("=Qiii4x4q4q")  # data, dtype, device.kind, device.index, size, stride
assert _TENSOR_PACK.size == ctypes.sizeof(FwTensor) and FwTensor.size.offset == 24 and FwTensor.stride.offset == 56
assert ctypes.sizeof(FwAttnParams) == 24 and FwAttnParams.window_left.offset == 8


def pack_tensor(data: int, dtype: int, kind: int, index: int, size, stride) -> bytes:
    """The bytes of one fw_tensor (see FwTensor): sizes and strides in elements."""
    return _TENSOR_PACK.pack(data, dtype, kind, index, *size, *stride)


_VARLEN_PACK = struct.Struct("=qQQqq")  # batch, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k
_KV_CACHE_TAIL = struct.Struct("=QQqq")  # seqlens, block_table, max_pages_per_seq, block_table_stride
assert _VARLEN_PACK.size == ctypes.sizeof(FwVarlen) and FwVarlen.max_seqlen_k.offset == 32
assert 2 * _TENSOR_PACK.size + _KV_CACHE_TAIL.size == ctypes.sizeof(FwKvCache)
assert FwKvCache.seqlens.offset == 2 * _TENSOR_PACK.size


def pack_varlen(batch: int, cu_seqlens_q: int, cu_seqlens_k: int, max_seqlen_q: int, max_seqlen_k: int) -> bytes:
    """The bytes of one fw_varlen (see FwVarlen); pointers as ints, 0 for NULL."""
    return _VARLEN_PACK.pack(batch, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def pack_kv_cache(k: bytes, v: bytes, seqlens: int, block_table: int, max_pages_per_seq: int,
                  block_table_stride: int) -> bytes:
    """The bytes of one fw_kv_cache (see FwKvCache) from the packed descriptors of k and v."""
    return k + v + _KV_CACHE_TAIL.pack(seqlens, block_table, max_pages_per_seq, block_table_stride)


INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)


def check_int(value, name: str, lo: int, hi: int, what: str = "") -> int:
    """value as a Python int within [lo, hi]: a TypeError for a non-integer (bool included) and a
    ValueError naming the argument for one out of range, where ctypes would silently wrap it."""
    import operator

    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if not lo <= n <= hi:
        raise ValueError(f"{name} = {n} is out of range: it must be in [{lo}, {hi}]{what}")
    return n


# ---- finding and loading the library -------------------------------------------------------

_LIBNAME = "libflashwatt.dylib" if sys.platform == "darwin" else "libflashwatt.so"


def candidate_paths() -> List[str]:
    """Where :func:`load` looks, in order: ``$FLASHWATT_LIBRARY`` (when set, the only place);
    a copy inside the package;
    ``../build/libflashwatt.so`` relative to the package source (``python/`` in a checkout); the
    system loader (``LD_LIBRARY_PATH``, ld.so cache); ``<sys.prefix>/lib``; ``/usr/local/lib``."""
    out: List[str] = []
    env = os.environ.get("FLASHWATT_LIBRARY")
    if env:
        out.append(env)
    pkg = Path(__file__).resolve().parent
    out.append(str(pkg / _LIBNAME))
    out.append(str(pkg.parent.parent / "build" / _LIBNAME))  # <repo>/python/flashwatt -> <repo>/build
    out.append(_LIBNAME)  # system loader
    found = ctypes.util.find_library("flashwatt")
    if found:
        out.append(found)
    out.append(os.path.join(sys.prefix, "lib", _LIBNAME))
    out.append(os.path.join("/usr/local/lib", _LIBNAME))
    return out


_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def set_prototype(lib: ctypes.CDLL, name: str, restype, *argtypes) -> None:
    """Declares the C signature of lib.name for ctypes."""
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


def _prototype(lib: ctypes.CDLL) -> None:
    c = ctypes
    P = c.POINTER
    vp = c.c_void_p

    def proto(name, restype, *argtypes):
        set_prototype(lib, name, restype, *argtypes)

    proto("fw_version", c.c_char_p)
    proto("fw_status_string", c.c_char_p, c.c_int)
    proto("fw_dtype_name", c.c_char_p, c.c_int)
    proto("fw_tensor_bhsd", FwTensor, vp, c.c_int, FwDevice, c.c_int64, c.c_int64, c.c_int64, c.c_int64)
    proto("fw_tensor_bshd", FwTensor, vp, c.c_int, FwDevice, c.c_int64, c.c_int64, c.c_int64, c.c_int64)
    proto("fw_attn_params_default", FwAttnParams)
    proto("fw_policy_default", FwPolicy)
    proto("fw_context_create", c.c_int, P(vp))
    proto("fw_context_destroy", None, vp)
    proto("fw_context_set_backend", c.c_int, vp, c.c_char_p)
    proto("fw_context_set_threads", c.c_int, vp, c.c_int)
    proto("fw_context_set_stream", c.c_int, vp, vp)
    proto("fw_context_set_precision", c.c_int, vp, c.c_int)
    proto("fw_context_set_policy", c.c_int, vp, P(FwPolicy))
    proto("fw_context_set_memory_budget", c.c_int, vp, c.c_size_t)
    proto("fw_context_set_deterministic", c.c_int, vp, c.c_int)
    proto("fw_context_last_error", c.c_char_p, vp)
    proto("fw_context_last_backend", c.c_char_p, vp)
    proto("fw_attention_forward", c.c_int, vp, P(FwTensor), P(FwTensor), P(FwTensor), P(FwTensor),
          vp, P(FwAttnParams))
    proto("fw_attention_backward", c.c_int, vp, P(FwTensor), P(FwTensor), P(FwTensor), P(FwTensor),
          vp, P(FwTensor), P(FwTensor), P(FwTensor), P(FwTensor), P(FwAttnParams))
    proto("fw_backend_count", c.c_int)
    proto("fw_backend_get_info", c.c_int, c.c_int, P(FwBackendInfo))
    proto("fw_backend_supports", c.c_int, c.c_char_p, P(FwTensor), P(FwTensor), P(FwTensor),
          P(FwTensor), P(FwAttnParams), c.c_char_p, c.c_size_t)
    # Variants of the two hot calls taking every pointer as void*: packed descriptors go in as bytes.
    fwd = c.CFUNCTYPE(c.c_int, *([vp] * 7))(("fw_attention_forward", lib))
    bwd = c.CFUNCTYPE(c.c_int, *([vp] * 11))(("fw_attention_backward", lib))
    lib.fw_forward_packed, lib.fw_backward_packed = fwd, bwd
    proto("fw_cpu_simd_level", c.c_char_p)
    proto("fw_cuda_device_count", c.c_int)
    if hasattr(lib, "fw_attention_varlen_forward"):  # serving API: optional, so older libraries still load
        proto("fw_attention_varlen_forward", c.c_int, vp, P(FwTensor), P(FwTensor), P(FwTensor), P(FwTensor),
              vp, P(FwVarlen), P(FwAttnParams))
        proto("fw_attention_kvcache_forward", c.c_int, vp, P(FwTensor), P(FwKvCache), P(FwTensor), P(FwTensor),
              P(FwTensor), vp, P(FwVarlen), P(FwAttnParams))
        proto("fw_context_set_workspace", c.c_int, vp, vp, c.c_size_t)
        proto("fw_attention_workspace_size", c.c_int, vp, P(FwWorkspaceQuery), P(c.c_size_t))
        proto("fw_context_set_check_device_values", c.c_int, vp, c.c_int)
        lib.fw_varlen_packed = c.CFUNCTYPE(c.c_int, *([vp] * 8))(("fw_attention_varlen_forward", lib))
        lib.fw_kvcache_packed = c.CFUNCTYPE(c.c_int, *([vp] * 9))(("fw_attention_kvcache_forward", lib))
    if hasattr(lib, "fw_attention_varlen_backward"):  # the ragged backward: optional, as the serving API
        proto("fw_attention_varlen_backward", c.c_int, vp, P(FwTensor), P(FwTensor), P(FwTensor), P(FwTensor), vp,
              P(FwTensor), P(FwTensor), P(FwTensor), P(FwTensor), P(FwVarlen), P(FwAttnParams))
        lib.fw_varlen_backward_packed = c.CFUNCTYPE(c.c_int, *([vp] * 12))(("fw_attention_varlen_backward", lib))


def load() -> ctypes.CDLL:
    """The loaded library (loaded on first use). Raises ``OSError`` listing every place tried."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    env = os.environ.get("FLASHWATT_LIBRARY")
    # An explicit FLASHWATT_LIBRARY is the only candidate: never fall back to another library.
    for path in ([env] if env else candidate_paths()):
        is_file_path = os.sep in path
        if is_file_path and not os.path.exists(path):
            tried.append(f"{path} (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        try:
            _prototype(lib)
        except AttributeError as e:
            tried.append(f"{path} (not a flashwatt library: {e})")
            continue
        _lib, _lib_path = lib, path
        return lib
    raise OSError(
        "flashwatt: libflashwatt could not be loaded. Install the package with `pip install ./python` "
        "(it builds the library into the package), build it with CMake (cmake -S . -B build && "
        "make -C build), or set FLASHWATT_LIBRARY=/path/to/libflashwatt.so. Tried:\n  "
        + "\n  ".join(tried)
    )


def library_path() -> str:
    """Path (or loader name) of the libflashwatt in use."""
    load()
    assert _lib_path is not None
    return _lib_path


def has_symbol(name: str) -> bool:
    """Whether the loaded library exports ``name`` (used for optional APIs such as telemetry)."""
    return hasattr(load(), name)


def require_varlen_backward(lib: ctypes.CDLL) -> None:
    """Raise FlashwattNotImplementedError where the loaded library predates the ragged backward."""
    if not hasattr(lib, "fw_varlen_backward_packed"):
        raise FlashwattNotImplementedError(
            Status.ERR_NOT_IMPLEMENTED, f"the loaded libflashwatt ({_lib_path}) has no ragged backward "
            "(fw_attention_varlen_backward); rebuild it from this checkout")


def require_serving(lib: ctypes.CDLL) -> None:
    """Raise FlashwattNotImplementedError where the loaded library predates the serving calls."""
    if not hasattr(lib, "fw_varlen_packed"):
        raise FlashwattNotImplementedError(
            Status.ERR_NOT_IMPLEMENTED, f"the loaded libflashwatt ({_lib_path}) has no serving API "
            "(fw_attention_varlen_forward, fw_attention_kvcache_forward); rebuild it from this checkout")


def status_string(status: int) -> str:
    return load().fw_status_string(int(status)).decode()


def error_for(status: int, message: str, not_implemented: bool = False) -> FlashwattError:
    """The exception for a failed call: :class:`FlashwattNotImplementedError` for
    FW_ERR_NOT_IMPLEMENTED (and, with ``not_implemented``, for FW_ERR_NO_BACKEND too)."""
    if not message:
        message = status_string(status)
    if status == Status.ERR_NOT_IMPLEMENTED or (not_implemented and status == Status.ERR_NO_BACKEND):
        return FlashwattNotImplementedError(status, message)
    return FlashwattError(status, message)
