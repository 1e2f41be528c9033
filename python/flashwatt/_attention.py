"""flashwatt.attention(): argument handling and the NumPy path; torch tensors go to _torch.py."""
from __future__ import annotations

import ctypes
import struct
import sys
from typing import Any, Callable, Optional, Sequence, Tuple

from . import _lib
from ._context import Context, default_context

LAYOUTS = ("bhsd", "bshd")


def normalize_params(causal: bool, scale: Optional[float],
                     window: Optional[Sequence[Optional[int]]]) -> Tuple[Optional[float], bool, int, int]:
    """The masking arguments checked and normalised: (scale or None for the default, causal, window
    left, window right), -1 (WINDOW_UNLIMITED) for an unlimited side. Plain Python values, so that
    torch.compile traces through this and passes them to the custom ops as constants."""
    if scale is not None:
        scale = float(scale)
        if scale == 0.0:
            raise ValueError("scale=0 is not allowed (the C API reads 0 as 'default'); "
                             "pass None for 1/sqrt(head_dim)")
        if _PARAMS.unpack(_PARAMS.pack(scale, 0, 0, 0))[0] == 0.0:
            raise ValueError(f"scale={scale!r} rounds to 0 in float32, which the C API reads as 'default' "
                             "(1/sqrt(head_dim)); the smallest scale it can take is about 1.4e-45")
    left = right = _lib.WINDOW_UNLIMITED
    if window is not None:
        if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
            raise ValueError(f"window must be a pair (left, right) of ints or None, got {window!r}")
        # Checked here: the C struct's int64 fields would silently wrap a larger value.
        left = _lib.WINDOW_UNLIMITED if window[0] is None else _lib.check_int(window[0], "window[0]", *_lib.INT64_RANGE)
        right = _lib.WINDOW_UNLIMITED if window[1] is None else _lib.check_int(window[1], "window[1]", *_lib.INT64_RANGE)
    return scale, bool(causal), left, right


_PARAMS = struct.Struct("=fiqq")  # fw_attn_params: scale, causal, window_left, window_right
assert _PARAMS.size == ctypes.sizeof(_lib.FwAttnParams) and _lib.FwAttnParams.window_right.offset == 16


def pack_params(scale: Optional[float], causal: bool, left: int, right: int) -> bytes:
    """The bytes of one fw_attn_params from normalize_params' values (scale None -> 0, the default)."""
    return _PARAMS.pack(0.0 if scale is None else scale, 1 if causal else 0, left, right)


def make_params(causal: bool, scale: Optional[float], window: Optional[Sequence[Optional[int]]]) -> bytes:
    """The packed fw_attn_params of the Python arguments (None = unlimited / default), checked."""
    return pack_params(*normalize_params(causal, scale, window))


def call_with_backend(ctx: Context, backend: Optional[str], call: Callable[[], int]) -> Tuple[int, str]:
    """Run ``call()`` (a C call on ctx returning a status) with ``backend`` set on ``ctx``, then
    restore the context's own choice ("auto" or None leaves it alone). Returns the status and the
    context's error message, read before the restore (which clears it)."""
    if backend is None or backend == "auto" or backend == ctx._backend:
        st = call()
        return st, (ctx.last_error if st != 0 else "")
    saved = ctx._backend
    ctx.backend = backend
    try:
        st = call()
        return st, (ctx.last_error if st != 0 else "")
    finally:
        ctx.backend = saved


def raise_for(status: int, message: str, not_implemented: bool = False) -> None:
    """Raise the FlashwattError for a failed call (nothing for status 0)."""
    if status != 0:
        raise _lib.error_for(status, message, not_implemented)


class _TorchNotLoaded:
    """Stands for torch.Tensor until _torch.py is imported: no object is of this type."""


def _import_torch_adapter_and_call(*args: Any) -> Any:
    from . import _torch

    return _torch.attention(*args)


# Set by _torch.py when it is imported: torch calls then take the shortest way there (host time per call).
# Never None: torch.compile guards on these globals, and a trace that imports _torch.py (flashwatt imported
# before torch) changes them while it runs, which a guard on None cannot take (it fails to build).
_torch_attention: Callable[..., Any] = _import_torch_adapter_and_call
_torch_tensor: Any = _TorchNotLoaded


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_numpy(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    scale: Optional[float] = None,
    window: Optional[Tuple[Optional[int], Optional[int]]] = None,
    backend: Optional[str] = "auto",
    return_lse: bool = False,
    layout: str = "bhsd",
    context: Optional[Context] = None,
) -> Any:
    """Exact attention ``O = softmax(scale * Q K^T + mask) V``.

    Args:
        q: (batch, heads, seq_q, head_dim) with ``layout="bhsd"`` (the order of
            ``F.scaled_dot_product_attention``), or (batch, seq_q, heads, head_dim) with
            ``layout="bshd"``. A NumPy array (float32, float16; CPU) or a torch tensor (float32,
            float16, bfloat16; CPU or CUDA). Any non-negative strides; head_dim must be contiguous.
        k, v: (batch, kv_heads, seq_k, head_dim) (or bshd), same dtype and device as q. GQA/MQA
            when kv_heads < heads (heads % kv_heads == 0; query head h reads kv head
            h // (heads // kv_heads)).
        causal: mask keys after the query, aligned to the bottom-right corner when
            seq_q != seq_k (FlashAttention's convention; SDPA's ``is_causal`` is top-left aligned).
        scale: softmax scale; None = 1/sqrt(head_dim).
        window: (left, right) sliding window: query i sees key j when
            ``i + seq_k - seq_q - left <= j <= i + seq_k - seq_q + right``; None or -1 = unlimited.
            A query row that sees no key gets output 0 and LSE -inf.
        backend: "auto" (the context's choice) or a backend name from :func:`flashwatt.backends`
            for this call.
        return_lse: also return the row log-sum-exp (natural log), float32 (batch, heads, seq_q),
            contiguous, whatever the layout.
        layout: "bhsd" or "bshd" (applies to q, k, v and the output).
        context: a :class:`flashwatt.Context`; None = the calling thread's default context.

    Returns:
        The output, allocated like q (same type, dtype, device and layout), or ``(output, lse)``.
        Torch tensors that require grad get a differentiable output (backward via
        ``fw_attention_backward``).

    Raises:
        FlashwattError: the library refused the call; ``.status`` and ``.message`` say why.
        TypeError / ValueError: arguments the binding cannot describe to the library.
    """
    if type(q) is _torch_tensor and type(k) is _torch_tensor:
        return _torch_attention(q, k, v, causal, scale, window, backend, return_lse, layout, context)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {backend!r}")
    if context is not None and not isinstance(context, Context):
        raise TypeError(f"context must be a flashwatt.Context, got {type(context).__name__}")
    kinds = [_is_torch(x) for x in (q, k, v)]
    if any(kinds):
        if not all(kinds):
            raise TypeError("q, k and v must all be torch tensors or all NumPy arrays")
        from . import _torch

        return _torch.attention(q, k, v, causal, scale, window, backend, return_lse, layout, context)
    params = make_params(causal, scale, window)
    if all(_is_numpy(x) for x in (q, k, v)):
        return _numpy_attention(q, k, v, params, context, backend, return_lse, layout)
    raise TypeError("q, k and v must be NumPy arrays or torch tensors, got "
                    + ", ".join(type(x).__name__ for x in (q, k, v)))


# ---- NumPy -----------------------------------------------------------------------------------


def _np_logical(a: Any, name: str, layout: str) -> Any:
    import numpy as np

    if a.ndim != 4:
        raise ValueError(f"{name} must be 4-D ({'batch, heads, seq, head_dim' if layout == 'bhsd' else 'batch, seq, heads, head_dim'}), "
                         f"got shape {a.shape}")
    if a.dtype.type not in (np.float32, np.float16):
        raise TypeError(f"{name} is {a.dtype}; NumPy arrays must be float32 or float16 "
                        "(bfloat16 works through torch)")
    return a.transpose(0, 2, 1, 3) if layout == "bshd" else a


def _np_describable(a: Any) -> bool:
    it = a.itemsize
    if not a.dtype.isnative:
        return False
    if any(s < 0 or s % it for s in a.strides):
        return False
    return a.shape[3] == 1 or a.strides[3] == it


def np_descriptor(a: Any) -> bytes:
    """Packed fw_tensor of a 4-D logical (B, H, S, D) NumPy array (strides converted to elements)."""
    import numpy as np

    it = a.itemsize
    st = a.strides
    return _lib.pack_tensor(a.ctypes.data, _lib.F32 if a.dtype.type == np.float32 else _lib.F16,
                            _lib.DEVICE_CPU, 0, a.shape, (st[0] // it, st[1] // it, st[2] // it, st[3] // it))


def _numpy_attention(q, k, v, params, context, backend, return_lse, layout):
    import numpy as np

    qv, kv, vv = (_np_logical(a, n, layout) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    # Inputs the C API cannot describe (negative or misaligned strides, non-unit head_dim
    # stride, foreign byte order) are copied; everything else is passed as is.
    qv, kv, vv = (a if _np_describable(a) else np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
                  for a in (qv, kv, vv))
    # Output like the user's q: order "K" follows q's memory order (contiguous in q's layout).
    o = np.empty_like(q, dtype=qv.dtype)
    o = o.transpose(0, 2, 1, 3) if layout == "bshd" else o
    if not _np_describable(o):
        o = np.empty(qv.shape, dtype=qv.dtype)
    B, H, Lq, _ = qv.shape
    lse = np.empty((B, H, Lq), dtype=np.float32) if return_lse else None
    descs = [np_descriptor(a) for a in (qv, kv, vv, o)]
    ctx = context if context is not None else default_context()
    lse_p = lse.ctypes.data if lse is not None else None
    fn, h, pb = ctx._lib.fw_forward_packed, ctx.handle, params
    raise_for(*call_with_backend(ctx, backend, lambda: fn(h, descs[0], descs[1], descs[2], descs[3], lse_p, pb)))
    out = o.transpose(0, 2, 1, 3) if layout == "bshd" else o
    return (out, lse) if return_lse else out


# ---- backward ------------------------------------------------------------------------------


def attention_backward(
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    dout: Any,
    *,
    causal: bool = False,
    scale: Optional[float] = None,
    window: Optional[Tuple[Optional[int], Optional[int]]] = None,
    backend: Optional[str] = "auto",
    layout: str = "bhsd",
    context: Optional[Context] = None,
) -> Tuple[Any, Any, Any]:
    """Gradients of :func:`attention`: ``(dq, dk, dv)`` from the forward's inputs, its output
    ``out`` and float32 ``lse`` (``return_lse=True``), and ``dout`` = dL/d(out).

    Shapes and layouts as in :func:`attention` (``lse``: float32 (batch, heads, seq_q),
    contiguous); the masking arguments must be the forward's. ``dk``/``dv`` are summed over the
    query heads of each kv group (GQA). Each gradient is allocated like its input. Torch users
    normally get this through autograd (``loss.backward()``) instead.

    Raises:
        FlashwattNotImplementedError: no backend has a backward pass for this problem (the
            library's message says which backend lacks what); also a ``NotImplementedError``.
        FlashwattError: any other refusal, with the library's message.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    params = make_params(causal, scale, window)
    tensors = (q, k, v, out, lse, dout)
    if all(_is_torch(x) for x in tensors):
        from . import _torch

        return _torch.attention_backward(q, k, v, out, lse, dout, params, context, backend, layout)
    if not all(_is_numpy(x) for x in tensors):
        raise TypeError("q, k, v, out, lse and dout must all be NumPy arrays or all torch tensors")
    import numpy as np

    names = ("q", "k", "v", "out", "dout")
    qv, kv, vv, ov, dov = (_np_logical(a, n, layout) for a, n in zip((q, k, v, out, dout), names))
    qv, kv, vv, ov, dov = (a if _np_describable(a) else np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
                           for a in (qv, kv, vv, ov, dov))
    B, H, Lq, _ = qv.shape
    if lse.dtype != np.float32 or lse.shape != (B, H, Lq) or not lse.flags.c_contiguous:
        raise ValueError(f"lse must be a contiguous float32 array of shape {(B, H, Lq)} (the forward's "
                         f"return_lse output), got {lse.dtype} {lse.shape}")

    def like(a, logical):
        g = np.empty_like(a, dtype=logical.dtype)
        g = g.transpose(0, 2, 1, 3) if layout == "bshd" else g
        return g if _np_describable(g) else np.empty(logical.shape, dtype=logical.dtype)

    dq, dk, dv = like(q, qv), like(k, kv), like(v, vv)
    d = [np_descriptor(a) for a in (qv, kv, vv, ov, dov, dq, dk, dv)]
    ctx = context if context is not None else default_context()
    fn, h, lp, pb = ctx._lib.fw_backward_packed, ctx.handle, lse.ctypes.data, params
    st, msg = call_with_backend(ctx, backend, lambda: fn(h, d[0], d[1], d[2], d[3], lp, d[4], d[5], d[6], d[7], pb))
    raise_for(st, "flashwatt backward: " + msg, not_implemented=True)
    if layout == "bshd":
        dq, dk, dv = (g.transpose(0, 2, 1, 3) for g in (dq, dk, dv))
    return dq, dk, dv
