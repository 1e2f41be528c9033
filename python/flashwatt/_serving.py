"""flashwatt.attention_varlen() (with its backward) and flashwatt.attention_with_kvcache(): ragged
batches and KV caches under FlashAttention's names, for NumPy arrays and torch tensors through one
code path.

The C calls read int32 offsets, cache lengths and block tables through bare pointers that carry no
size, dtype or device, so this layer checks those here (what the C side cannot see); everything a
descriptor says (shapes, dtypes, devices of the float tensors) the library checks itself. Nothing
here reads a value on a CUDA device: no synchronisation, so calls can be captured in a CUDA graph.
"""
from __future__ import annotations

import ctypes

import sys
from typing import Any, List, Optional, Sequence, Tuple

from . import _lib
from ._attention import call_with_backend, normalize_params, pack_params, raise_for
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


# ---- the calls -----------------------------------------------------------------------------------


def attention_varlen(
    q: Any,
    k: Any,
    v: Any,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    window: Optional[Tuple[Optional[int], Optional[int]]] = None,
    scale: Optional[float] = None,
    return_lse: bool = False,
    backend: Optional[str] = "auto",
    context: Optional[Context] = None,
) -> Any:
    """Attention over a ragged batch packed without padding (``flash_attn_varlen_func``).

    Sequence b owns rows ``cu_seqlens_q[b] : cu_seqlens_q[b+1]`` of q and
    ``cu_seqlens_k[b] : cu_seqlens_k[b+1]`` of k and v; each attends only to its own keys.

    Args:
        q: (total_q, heads, head_dim). A NumPy array (float32, float16; CPU) or a torch tensor
            (float32, float16, bfloat16; CPU or CUDA). Any non-negative strides with head_dim
            contiguous are taken as they are; other views are copied.
        k, v: (total_k, kv_heads, head_dim), same dtype and device; GQA when kv_heads < heads.
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,) cumulative offsets, contiguous, on q's device
            (NumPy arrays for NumPy q): 0, then non-decreasing, ending at total_q / total_k. Equal
            neighbours make an empty sequence. Offsets on the CPU are checked by the library; on a
            CUDA device they are not read by the host (see the C header for what the kernels do with
            bad ones).
        max_seqlen_q, max_seqlen_k: host ints >= every sequence's query / key count.
        causal: per sequence, aligned to its bottom-right corner (FlashAttention's convention).
        window: (left, right) per sequence as in :func:`flashwatt.attention`; None or -1 = unlimited.
        scale: softmax scale; None = 1/sqrt(head_dim).
        return_lse: also return the float32 log-sum-exp, (heads, total_q), contiguous (FlashAttention's
            varlen layout); rows that see no key get -inf and output 0.
        backend: "auto" (the context's choice) or a backend name for this call.
        context: a :class:`flashwatt.Context`; None = the thread's default context.

    Returns:
        The output (total_q, heads, head_dim), allocated like q, or ``(output, lse)``. Torch CUDA
        tensors run on torch's current stream without host synchronisation. Differentiable: where
        torch tensors q, k or v require grad, autograd's backward computes dq, dk, dv with
        :func:`attention_varlen_backward`, eagerly and under ``torch.compile`` (the lse output is not
        differentiable); the ragged backward runs on cpu-flash and cpu-ref, and on CUDA tensors on cuda-flash
        (f16, bf16) and cuda-flash-f32.

    Raises:
        FlashwattError: the library refused the call (``.message`` names the argument).
        TypeError / ValueError: an argument the binding cannot hand to the library (wrong dtype of
            an offsets array, wrong length, another device, an int out of range...).
    """
    masking = normalize_params(causal, scale, window)
    backend = _check_call(context, backend)
    named = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k))
    arrays = _arrays_of(named)
    max_q, max_k = _max_seqlen(max_seqlen_q, "max_seqlen_q"), _max_seqlen(max_seqlen_k, "max_seqlen_k")
    if arrays.kind == "torch tensor":  # under torch.autocast as the dense call (and SDPA): inputs in the autocast dtype
        q, k, v = arrays._torch.autocast(q, k, v)
    if _through_ops(arrays, q, k, v, cu_seqlens_q, cu_seqlens_k):
        # the op's registered autograd needs the LSE where a gradient is wanted
        o, lse = arrays.torch.ops.flashwatt.attention_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, *masking, return_lse or arrays.needs_grad(named[:3]),
            backend, context.op_id if context is not None else 0)
        return (o, lse) if return_lse else o
    ext, ctx = arrays._torch.ext_and_context(backend, context) if arrays.kind == "torch tensor" else (None, None)
    if ext is not None:  # the C++ autograd node (_torch_ext.py), on inputs checked as varlen_call checks them
        q, k, v, _, _, _ = _varlen_inputs(arrays, ctx, q, k, v, cu_seqlens_q, cu_seqlens_k)
        scale, causal, left, right = masking
        st, msg, o, lse = ext.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
                                               0.0 if scale is None else scale, causal, left, right, return_lse,
                                               ctypes.addressof(ctx._ptr), context is None)
        arrays._torch.ext_done(st, msg, o, context)
    elif arrays.needs_grad(named[:3]):  # eager torch autograd: the backward is fw_attention_varlen_backward
        o, lse = arrays._torch.VarlenFunction.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
                                                    pack_params(*masking), backend, context)
    else:
        o, lse = varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, pack_params(*masking), return_lse,
                             backend, context, arrays)
    return (o, lse) if return_lse else o


def _varlen_inputs(arrays, ctx: Context, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any):
    """The ragged call's arrays checked: (q, k, v, copied where the C API cannot take their strides; the two
    offsets' data pointers; the batch)."""
    named = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k))
    _same_device(arrays, ctx, named)
    doc_q, doc_k = "(total_q, heads, head_dim)", "(total_k, kv_heads, head_dim)"
    q = _floats(arrays, q, "q", 3, doc_q)
    k, v = _floats(arrays, k, "k", 3, doc_k), _floats(arrays, v, "v", 3, doc_k)
    offsets = "B + 1 cumulative offsets"
    cu_q = _int32_vector(arrays, cu_seqlens_q, "cu_seqlens_q", None, offsets)
    batch = cu_seqlens_q.shape[0] - 1
    cu_k = _int32_vector(arrays, cu_seqlens_k, "cu_seqlens_k", batch + 1,
                         f"batch + 1 offsets, as cu_seqlens_q has for {batch} sequences")
    return q, k, v, cu_q, cu_k, batch


def varlen_call(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_q: int, max_k: int, params: bytes,
                want_lse: bool, backend: str, context: Optional[Context], arrays: Any = None) -> Tuple[Any, Any]:
    """The ragged call on checked scalar arguments (eagerly, and as the op flashwatt::attention_varlen):
    (output, lse or None)."""
    ctx = _context(context)
    if arrays is None:
        arrays = _arrays_of((("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)))
    q, k, v, cu_q, cu_k, batch = _varlen_inputs(arrays, ctx, q, k, v, cu_seqlens_q, cu_seqlens_k)
    o = arrays.empty_like(q)
    lse = arrays.empty_f32((q.shape[1], q.shape[0]), q) if want_lse else None
    d = [_packed_desc(arrays, t) for t in (q, k, v, o)]
    seqs = _lib.pack_varlen(batch, cu_q, cu_k, max_q, max_k)
    lse_p = arrays.raw(lse)[0] if lse is not None else None
    fn, h, pb = ctx._lib.fw_varlen_packed, ctx.handle, params
    raise_for(*arrays.run(ctx, backend, q, lambda: fn(h, d[0], d[1], d[2], d[3], lse_p, seqs, pb)))
    return o, lse


def _lse_of(arrays, lse: Any, heads: int, total_q: int) -> Any:
    """lse checked as the ragged forward's return_lse output: float32 (heads, total_q), contiguous."""
    shape = tuple(lse.shape)
    st = arrays.strides(lse) if len(shape) == 2 else None
    dense = st is not None and (shape[1] <= 1 or st[1] == 1) and (shape[0] <= 1 or st[0] == shape[1])
    if arrays.float_code(lse, "lse") != _lib.F32 or shape != (heads, total_q) or not dense:
        raise ValueError(f"lse must be a contiguous float32 array of shape {(heads, total_q)} (the forward's "
                         f"return_lse output), got {arrays.dtype_name(lse)} {shape}")
    return lse


def attention_varlen_backward(
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    dout: Any,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    window: Optional[Tuple[Optional[int], Optional[int]]] = None,
    scale: Optional[float] = None,
    backend: Optional[str] = "auto",
    context: Optional[Context] = None,
) -> Tuple[Any, Any, Any]:
    """Gradients of :func:`attention_varlen`: ``(dq, dk, dv)`` from the forward's inputs, its output
    ``out`` and float32 ``lse`` (``return_lse=True``, (heads, total_q)), and ``dout`` = dL/d(out).

    Shapes, offsets and masking arguments as the forward's (the same values). ``dk``/``dv`` are summed
    over the query heads of each kv group (GQA); the rows of keys no query sees, an empty sequence's
    among them, are 0. Each gradient is allocated like its input. Runs on cpu-flash and cpu-ref, and on
    CUDA tensors on cuda-flash (f16, bf16) and cuda-flash-f32 (f32), on torch's current stream. Torch users
    normally get this through autograd (``loss.backward()``) instead.

    Raises:
        FlashwattNotImplementedError: no backend can run it (a backend named that has no ragged
            backward, such as cpu-naive); also a ``NotImplementedError``.
        FlashwattError / TypeError / ValueError: as :func:`attention_varlen`.
    """
    masking = normalize_params(causal, scale, window)
    backend = _check_call(context, backend)
    return varlen_backward_call(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k,
                                _max_seqlen(max_seqlen_q, "max_seqlen_q"), _max_seqlen(max_seqlen_k, "max_seqlen_k"),
                                pack_params(*masking), backend, context)


def varlen_backward_call(q: Any, k: Any, v: Any, out: Any, lse: Any, dout: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
                         max_q: int, max_k: int, params: bytes, backend: str, context: Optional[Context]
                         ) -> Tuple[Any, Any, Any]:
    """The ragged backward on checked scalar arguments (the explicit call, the eager autograd Function's
    backward and the op flashwatt::attention_varlen_backward): (dq, dk, dv)."""
    ctx = _context(context)
    _lib.require_varlen_backward(ctx._lib)
    named = (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout), ("cu_seqlens_q", cu_seqlens_q),
             ("cu_seqlens_k", cu_seqlens_k))
    arrays = _arrays_of(named)
    _same_device(arrays, ctx, named)
    doc_q, doc_k = "(total_q, heads, head_dim)", "(total_k, kv_heads, head_dim)"
    q, out, dout = (_floats(arrays, a, n, 3, doc_q) for a, n in ((q, "q"), (out, "out"), (dout, "dout")))
    k, v = _floats(arrays, k, "k", 3, doc_k), _floats(arrays, v, "v", 3, doc_k)
    lse = _lse_of(arrays, lse, q.shape[1], q.shape[0])
    cu_q = _int32_vector(arrays, cu_seqlens_q, "cu_seqlens_q", None, "B + 1 cumulative offsets")
    batch = cu_seqlens_q.shape[0] - 1
    cu_k = _int32_vector(arrays, cu_seqlens_k, "cu_seqlens_k", batch + 1,
                         f"batch + 1 offsets, as cu_seqlens_q has for {batch} sequences")
    dq, dk, dv = arrays.empty_like(q), arrays.empty_like(k), arrays.empty_like(v)
    d = [_packed_desc(arrays, t) for t in (q, k, v, out, dout, dq, dk, dv)]
    seqs = _lib.pack_varlen(batch, cu_q, cu_k, max_q, max_k)
    fn, h, lp = ctx._lib.fw_varlen_backward_packed, ctx.handle, arrays.raw(lse)[0]
    st, msg = arrays.run(ctx, backend, q,
                         lambda: fn(h, d[0], d[1], d[2], d[3], lp, d[4], d[5], d[6], d[7], seqs, params))
    raise_for(st, "flashwatt backward: " + msg, not_implemented=True)
    return dq, dk, dv


def attention_with_kvcache(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    cache_seqlens: Any,
    block_table: Any = None,
    k: Any = None,
    v: Any = None,
    *,
    causal: bool = True,
    window: Optional[Tuple[Optional[int], Optional[int]]] = None,
    scale: Optional[float] = None,
    return_lse: bool = False,
    cu_seqlens_q: Any = None,
    max_seqlen_q: Optional[int] = None,
    backend: Optional[str] = "auto",
    context: Optional[Context] = None,
) -> Any:
    """New queries against a KV cache, contiguous or paged (``flash_attn_with_kvcache``): decode,
    chunked prefill, speculative verification.

    Args:
        q: (batch, seqlen_q, heads, head_dim); or packed (total_q, heads, head_dim) with
            ``cu_seqlens_q`` (int32 (batch + 1,)) and ``max_seqlen_q`` (host int) for ragged new
            queries. Types, dtypes and strides as in :func:`attention_varlen`.
        k_cache, v_cache: contiguous (batch, capacity, kv_heads, head_dim) when ``block_table`` is
            None; else a page pool (num_pages, page_size, kv_heads, head_dim), page_size 1..256.
            Used in place: head_dim stride 1, no copy is made.
        cache_seqlens: int32 (batch,), contiguous, on q's device: tokens already in each sequence's
            cache. Not updated (the caller advances it).
        block_table: None, or int32 (batch, max_pages_per_seq) on q's device, rows contiguous (a
            row-strided slice of a larger table is fine): sequence b's key j is on page
            ``block_table[b, j // page_size]``, row ``j % page_size``; pages in any order.
        k, v: None, or the new tokens' keys and values in q's geometry with kv_heads heads, written
            into the cache at rows ``cache_seqlens[b] ...`` and attended to in the same call.
        causal: True (default) aligns each query to the end of its sequence's keys, so the last
            query sees every key. window, scale: as in :func:`flashwatt.attention`.
        return_lse: also return the float32 LSE: (batch, heads, seqlen_q), or (heads, total_q) for
            packed q.
        backend, context: as in :func:`attention_varlen`.

    Returns:
        The output, shaped and allocated like q, or ``(output, lse)``. On CUDA the call runs on torch's
        current stream, reads no device value on the host and allocates only its outputs (with a
        workspace set on the context, :meth:`Context.set_workspace`), so it can be captured with
        ``torch.cuda.graph`` and replayed while ``cache_seqlens`` and ``block_table`` change in place.

    Raises:
        FlashwattError / TypeError / ValueError: as :func:`attention_varlen`; also a ValueError when
            the cache cannot be used in place or only one of k, v is given.
    """
    masking = normalize_params(causal, scale, window)
    backend = _check_call(context, backend)
    named = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens),
             ("block_table", block_table), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q))
    arrays = _arrays_of(named)
    if (k is None) != (v is None):
        raise ValueError("k and v (the new tokens' keys and values) must be given together or not at all")
    packed = cu_seqlens_q is not None
    if packed != (max_seqlen_q is not None):
        raise ValueError("cu_seqlens_q and max_seqlen_q go together: both for packed (total_q, heads, "
                         "head_dim) queries, neither for (batch, seqlen_q, heads, head_dim)")
    max_q = _max_seqlen(max_seqlen_q, "max_seqlen_q") if packed else None
    arrays.check_no_grad("attention_with_kvcache", (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                                                    ("k", k), ("v", v)))
    if _through_ops(arrays, q, k_cache, v_cache, cache_seqlens, block_table, k, v, cu_seqlens_q):
        o, lse = arrays.torch.ops.flashwatt.attention_with_kvcache(
            q, k_cache, v_cache, cache_seqlens, block_table, k, v, cu_seqlens_q, max_q, *masking, return_lse, backend,
            context.op_id if context is not None else 0)
    else:
        o, lse = kvcache_call(q, k_cache, v_cache, cache_seqlens, block_table, k, v, cu_seqlens_q, max_q,
                              pack_params(*masking), return_lse, backend, context, arrays)
    return (o, lse) if return_lse else o


def kvcache_call(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, block_table: Any, k: Any, v: Any,
                 cu_seqlens_q: Any, max_q: Optional[int], params: bytes, want_lse: bool, backend: str,
                 context: Optional[Context], arrays: Any = None) -> Tuple[Any, Any]:
    """The KV-cache call on checked scalar arguments (eagerly, and as the op
    flashwatt::attention_with_kvcache): (output, lse or None). Writes k, v into the caches when given."""
    ctx = _context(context)
    named = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens),
             ("block_table", block_table), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q))
    arrays = arrays if arrays is not None else _arrays_of(named)
    _same_device(arrays, ctx, named)
    packed = cu_seqlens_q is not None
    max_q = max_q if packed else 0
    ndim, q_doc = (3, "(total_q, heads, head_dim)") if packed else (4, "(batch, seqlen_q, heads, head_dim)")
    q = _floats(arrays, q, "q", ndim, q_doc)
    new_doc = q_doc.replace("heads", "kv_heads")
    if k is not None:
        k, v = _floats(arrays, k, "k", ndim, new_doc), _floats(arrays, v, "v", ndim, new_doc)
    cache_doc = ("(batch, capacity, kv_heads, head_dim)" if block_table is None
                 else "(num_pages, page_size, kv_heads, head_dim)")
    k_cache = _floats(arrays, k_cache, "k_cache", 4, cache_doc, in_place=True)
    v_cache = _floats(arrays, v_cache, "v_cache", 4, cache_doc, in_place=True)
    if k is not None:
        for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not arrays.writable(c):
                raise ValueError(f"{name} is read-only but k and v are to be written into it")
    if packed:
        cu_q = _int32_vector(arrays, cu_seqlens_q, "cu_seqlens_q", None, "B + 1 cumulative offsets")
        batch = cu_seqlens_q.shape[0] - 1
    else:
        cu_q, batch = 0, q.shape[0]
    seqlens = _int32_vector(arrays, cache_seqlens, "cache_seqlens", batch,
                            f"the tokens cached in each of the batch's {batch} sequences")
    table, pages, row_stride = _block_table(arrays, block_table, batch) if block_table is not None else (0, 0, 0)
    o = arrays.empty_like(q)
    lse = None
    if want_lse:
        lse_shape = (q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1])
        lse = arrays.empty_f32(lse_shape, q)
    desc = _packed_desc if packed else _bshd_desc
    qd, od = desc(arrays, q), desc(arrays, o)
    kd, vd = (desc(arrays, k), desc(arrays, v)) if k is not None else (None, None)
    cache = _lib.pack_kv_cache(_bshd_desc(arrays, k_cache), _bshd_desc(arrays, v_cache), seqlens, table, pages,
                               row_stride)
    q_seqs = _lib.pack_varlen(batch, cu_q, 0, max_q, 0) if packed else None
    lse_p = arrays.raw(lse)[0] if lse is not None else None
    fn, h, pb = ctx._lib.fw_kvcache_packed, ctx.handle, params
    raise_for(*arrays.run(ctx, backend, q, lambda: fn(h, qd, cache, kd, vd, od, lse_p, q_seqs, pb)))
    return o, lse


__all__: List[str] = ["attention_varlen", "attention_varlen_backward", "attention_with_kvcache"]
