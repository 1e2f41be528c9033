"""The arrays of the serving calls (_serving.py): the two kinds they take, NumPy arrays and torch tensors, each
answering the same questions (data pointer, dtype code, device, strides in elements) and allocating outputs, and
the checks of what the C side cannot see (offsets, cache lengths and block tables reach it as bare pointers with
no size, dtype or device). Nothing here reads a value on a CUDA device."""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence, Tuple

from . import _lib
from ._attention import call_with_backend
from ._context import Context, default_context

Named = Sequence[Tuple[str, Any]]


# ---- the two array kinds -----------------------------------------------------------------------
# Each kind answers the same questions about its arrays (data pointer, dtype code, device, strides
# in elements) and allocates outputs; the calls below are written once against them.


class _NumpyArrays:
    kind = "NumPy array"

    def __init__(self) -> None:
        import numpy as np

        self.np = np

    def owns(self, x: Any) -> bool:
        return isinstance(x, self.np.ndarray)

    def device(self, a: Any) -> Any:
        return "cpu"

    def float_code(self, a: Any, name: str) -> int:
        np = self.np
        if a.dtype.type is np.float32:
            return _lib.F32
        if a.dtype.type is np.float16:
            return _lib.F16
        raise TypeError(f"{name} is {a.dtype}; NumPy arrays must be float32 or float16 (bfloat16 works "
                        "through torch)")

    def strides(self, a: Any) -> Optional[Tuple[int, ...]]:
        """Strides in elements, or None where the C API cannot take them (negative, not a multiple of
        the item size, foreign byte order)."""
        it = a.itemsize
        if not a.dtype.isnative or any(s < 0 or s % it for s in a.strides):
            return None
        return tuple(s // it for s in a.strides)

    def copy(self, a: Any) -> Any:
        return self.np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))

    def raw(self, a: Any) -> Tuple[int, int, int]:
        """(data pointer, fw_device_kind, device index)."""
        return a.ctypes.data, _lib.DEVICE_CPU, 0

    def is_int32(self, a: Any) -> bool:
        return a.dtype == self.np.int32  # native byte order only: '>i4' compares unequal

    def dtype_name(self, a: Any) -> str:
        return str(a.dtype)

    def writable(self, a: Any) -> bool:
        return bool(a.flags.writeable)

    def empty_like(self, q: Any) -> Any:
        o = self.np.empty_like(q)  # q's memory order (order="K"), positive strides
        return o if self.strides(o) is not None else self.np.empty(q.shape, dtype=q.dtype)

    def empty_f32(self, shape: Tuple[int, ...], like: Any) -> Any:
        return self.np.empty(shape, dtype=self.np.float32)

    def check_no_grad(self, call: str, named: Named) -> None:
        pass

    def needs_grad(self, named: Named) -> bool:
        return False

    def run(self, ctx: Context, backend: Optional[str], q: Any, call) -> Tuple[int, str]:
        return call_with_backend(ctx, backend, call)


class _TorchArrays:
    kind = "torch tensor"

    def __init__(self) -> None:
        import torch

        from . import _torch

        self.torch, self._torch = torch, _torch

    def owns(self, x: Any) -> bool:
        return isinstance(x, self.torch.Tensor)

    def device(self, a: Any) -> Any:
        return a.device  # compared as torch.device objects: cheaper than their names

    def float_code(self, a: Any, name: str) -> int:
        code = self._torch._DTYPES.get(a.dtype)
        if code is None:
            raise TypeError(f"{name} is {a.dtype}; flashwatt takes float32, float16 or bfloat16")
        return code

    def strides(self, a: Any) -> Optional[Tuple[int, ...]]:
        return tuple(a.stride())

    def copy(self, a: Any) -> Any:
        return a.contiguous()

    def raw(self, a: Any) -> Tuple[int, int, int]:
        if a.is_cuda:
            return a.data_ptr(), _lib.DEVICE_CUDA, a.get_device()
        return a.data_ptr(), _lib.DEVICE_CPU, 0

    def is_int32(self, a: Any) -> bool:
        return a.dtype == self.torch.int32

    def dtype_name(self, a: Any) -> str:
        return str(a.dtype)

    def writable(self, a: Any) -> bool:
        return True

    def empty_like(self, q: Any) -> Any:
        # The caching allocator serves this inside torch.cuda.graph capture too (the graph's pool).
        return self.torch.empty_like(q)

    def empty_f32(self, shape: Tuple[int, ...], like: Any) -> Any:
        return self.torch.empty(shape, dtype=self.torch.float32, device=like.device)

    def check_no_grad(self, call: str, named: Named) -> None:
        if not self.torch.is_grad_enabled():
            return
        for name, t in named:
            if t is not None and t.requires_grad:
                raise _lib.FlashwattNotImplementedError(
                    _lib.Status.ERR_NOT_IMPLEMENTED,
                    f"{call} has no backward pass, and {name} requires grad; call it under "
                    "torch.no_grad() or torch.inference_mode()")

    def needs_grad(self, named: Named) -> bool:
        return self.torch.is_grad_enabled() and any(t is not None and t.requires_grad for _, t in named)

    def run(self, ctx: Context, backend: Optional[str], q: Any, call) -> Tuple[int, str]:
        return self._torch._run(ctx, backend, q, call)


_kinds: dict = {}


def _arrays_of(named: Named):
    """The array kind of q (the first entry), after checking every other given argument is of it."""
    q_name, q = named[0]
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if torch is not None and isinstance(q, torch.Tensor):
        arrays = _kinds.get("torch") or _kinds.setdefault("torch", _TorchArrays())
    elif np is not None and isinstance(q, np.ndarray):
        arrays = _kinds.get("numpy") or _kinds.setdefault("numpy", _NumpyArrays())
    else:
        raise TypeError(f"{q_name} must be a NumPy array or a torch tensor, got {type(q).__name__}")
    for name, x in named[1:]:
        if x is not None and not arrays.owns(x):
            raise TypeError(f"{name} is a {type(x).__name__}; with {q_name} a {arrays.kind} it must be a "
                            f"{arrays.kind} too")
    return arrays


# ---- checks of what the C side cannot see ------------------------------------------------------------


def _same_device(arrays, ctx: Context, named: Named) -> None:
    """Every given array on q's device (offsets and tables included: the C call reads them through
    bare pointers on the tensors' device), and that device one the library and the context's
    workspace can serve."""
    q_name, q = named[0]
    dev = arrays.device(q)
    if str(dev).partition(":")[0] not in ("cpu", "cuda"):
        raise TypeError(f"{q_name} is on {dev}; flashwatt takes cpu and cuda tensors")
    for name, x in named[1:]:
        if x is not None and arrays.device(x) != dev:
            raise ValueError(f"{name} is on {arrays.device(x)} but {q_name} is on {dev}: every tensor of "
                             "the call, offsets, cache lengths and block table included, must be on one device")
    ctx._check_workspace_device(dev)


def _floats(arrays, a: Any, name: str, ndim: int, shape_doc: str, in_place: bool = False) -> Any:
    """a checked as a float tensor of ndim dimensions; copied when the C API cannot take its strides,
    unless the call writes into it (a cache), where a copy would lose the writes."""
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {shape_doc}, got shape {tuple(a.shape)}")
    arrays.float_code(a, name)
    st = arrays.strides(a)
    if st is None or (a.shape[-1] != 1 and st[-1] != 1):
        if in_place:
            raise ValueError(f"{name} must have head_dim stride 1 and non-negative strides: it is used in "
                             f"place (a copy would not see the new tokens); got strides {st}")
        a = arrays.copy(a)
    return a


def _packed_desc(arrays, a: Any) -> bytes:
    """fw_tensor of a packed (total, heads, head_dim) array: logical (1, heads, total, head_dim)."""
    ptr, kind, index = arrays.raw(a)
    T, H, D = a.shape
    sT, sH, sD = arrays.strides(a)
    return _lib.pack_tensor(ptr, arrays.float_code(a, ""), kind, index, (1, H, T, D), (T * sT, sH, sT, sD))


def _bshd_desc(arrays, a: Any) -> bytes:
    """fw_tensor of a (b, s, h, d) array: logical (b, h, s, d). Serves (B, Lq, H, D) queries,
    (B, capacity, H_kv, D) caches and (num_pages, page_size, H_kv, D) page pools alike."""
    ptr, kind, index = arrays.raw(a)
    s0, s1, s2, s3 = arrays.strides(a)
    b, s, h, d = a.shape
    return _lib.pack_tensor(ptr, arrays.float_code(a, ""), kind, index, (b, h, s, d), (s0, s2, s1, s3))


def _int32_vector(arrays, a: Any, name: str, length: Optional[int], what: str) -> int:
    """Data pointer of a contiguous 1-D int32 array of `length` entries (any >= 2 when None)."""
    if not arrays.is_int32(a):
        raise TypeError(f"{name} must be int32 ({what}), got {arrays.dtype_name(a)}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D ({what}), got shape {tuple(a.shape)}")
    n = a.shape[0]
    if length is None and n < 2:
        raise ValueError(f"{name} has {n} entries; it needs batch + 1 >= 2 ({what})")
    if length is not None and n != length:
        raise ValueError(f"{name} has {n} entries but must have {length} ({what})")
    if n > 1 and arrays.strides(a) != (1,):
        raise ValueError(f"{name} must be contiguous (the library reads it as a flat int32 array)")
    return arrays.raw(a)[0]


def _block_table(arrays, a: Any, batch: int) -> Tuple[int, int, int]:
    """(data pointer, max_pages_per_seq, row stride) of a (batch, max_pages_per_seq) int32 table."""
    name = "block_table"
    if not arrays.is_int32(a):
        raise TypeError(f"{name} must be int32 (page indices), got {arrays.dtype_name(a)}")
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D (batch, max_pages_per_seq), got shape {tuple(a.shape)}")
    rows, pages = a.shape
    if rows != batch:
        raise ValueError(f"{name} has {rows} rows but the batch has {batch} sequences")
    st = arrays.strides(a)
    if st is None or (pages > 1 and st[1] != 1):
        raise ValueError(f"{name} rows must be contiguous (column stride 1), got strides {st}")
    row_stride = st[0] if rows > 1 else pages
    if row_stride < pages:
        # The C API reads a row stride of 0 as "max_pages_per_seq": rows that share memory cannot be said.
        raise ValueError(f"{name} rows overlap (row stride {row_stride} < {pages} pages per row); pass a "
                         f"copy with one row per sequence")
    return arrays.raw(a)[0], pages, row_stride


def _max_seqlen(value: Any, name: str) -> int:
    """A host int for a max_seqlen_* argument (it sizes the launch, so it cannot live on the device)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and value.device.type != "cpu":
        raise TypeError(f"{name} must be a host int; a {value.device} tensor would need a synchronising copy")
    return _lib.check_int(value, name, *_lib.INT64_RANGE)


def _check_call(context: Optional[Context], backend: Optional[str]) -> str:
    if context is not None and not isinstance(context, Context):
        raise TypeError(f"context must be a flashwatt.Context, got {type(context).__name__}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {backend!r}")
    return "auto" if backend is None else backend


def _context(context: Optional[Context]) -> Context:
    ctx = context if context is not None else default_context()
    _lib.require_serving(ctx._lib)
    return ctx


def _through_ops(arrays, *ts: Any) -> bool:
    """Whether a torch call goes through its custom op (while torch.compile traces; tensors without data)."""
    if not isinstance(arrays, _TorchArrays):
        return False
    return arrays._torch.use_ops(*(t for t in ts if t is not None))
