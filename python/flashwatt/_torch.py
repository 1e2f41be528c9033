"""The PyTorch adapter: descriptors of torch tensors (CPU and CUDA, their own strides, torch's
current CUDA stream), the calls themselves, and the two ways a call reaches them:

- eagerly, straight from :func:`attention` and :func:`attention_varlen` (an ``autograd.Function``
  where a gradient is needed): the fewest Python steps between the caller and the C call, because
  each one is host time that SDPA does not spend;
- under ``torch.compile`` (and for tensors that hold no data: fake, meta, subclasses), through the
  custom operators of ``_torch_ops.py`` (``torch.ops.flashwatt.*``, with fake implementations and a
  registered autograd), which run the same calls (below, and _serving.py's ragged and KV-cache ones).
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

import torch

from . import _lib, _torch_ext
from ._attention import LAYOUTS, call_with_backend, normalize_params, pack_params, raise_for
from ._context import Context, default_context
from ._serving import varlen_backward_call, varlen_call

_addressof = ctypes.addressof
_DTYPES = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}
_Tensor = torch.Tensor


def _logical(t: torch.Tensor, name: str, layout: str) -> torch.Tensor:
    if t.dim() != 4:
        order = "batch, heads, seq, head_dim" if layout == "bhsd" else "batch, seq, heads, head_dim"
        raise ValueError(f"{name} must be 4-D ({order}), got shape {tuple(t.shape)}")
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name} is {t.dtype}; flashwatt takes float32, float16 or bfloat16")
    if not (t.is_cuda or t.is_cpu):
        raise TypeError(f"{name} is on {t.device}; flashwatt takes cpu and cuda tensors")
    return t.transpose(1, 2) if layout == "bshd" else t


def _describable(t: torch.Tensor) -> torch.Tensor:
    """t itself when the C API takes its strides (head_dim stride 1), else a contiguous copy."""
    if t.stride(3) != 1 and t.size(3) != 1:
        return t.contiguous()
    return t


_pack = _lib.TENSOR_PACK.pack
_CUDA, _CPU = _lib.DEVICE_CUDA, _lib.DEVICE_CPU


def descriptor(t: torch.Tensor) -> bytes:
    """Packed fw_tensor of a 4-D logical (B, H, S, D) tensor: its own data pointer and strides."""
    if t.is_cuda:
        return _pack(t.data_ptr(), _DTYPES[t.dtype], _CUDA, t.get_device(), *t.shape, *t.stride())
    return _pack(t.data_ptr(), _DTYPES[t.dtype], _CPU, 0, *t.shape, *t.stride())


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _current_stream(index: int) -> int:
    """cudaStream_t of torch's current stream on device `index`, as an int."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def _run(ctx: Context, backend: Optional[str], t: torch.Tensor, call) -> Tuple[int, str]:
    """call() with t's CUDA device current and torch's current stream on it handed to the
    context (for CPU tensors just call())."""
    if not t.is_cuda:
        return call_with_backend(ctx, backend, call)
    index, cur = t.get_device(), _get_device()
    if index != cur:
        with torch.cuda.device(index):
            ctx.set_stream(_current_stream(index))
            return call_with_backend(ctx, backend, call)
    ctx.set_stream(_current_stream(cur))
    return call_with_backend(ctx, backend, call)


def _call(ctx: Context, backend: str, t: torch.Tensor, fn, *args) -> None:
    """fn(ctx's handle, *args), a C call, with backend set on ctx for it and on t's device and torch's
    current stream there; raises the library's error. The common case (the context's own backend, the
    current device) in the fewest steps: each is host time of every call."""
    if backend != "auto" and backend != ctx._backend or t.is_cuda and t.get_device() != _get_device():
        h = ctx.handle
        raise_for(*_run(ctx, backend, t, lambda: fn(h, *args)))
        return
    if t.is_cuda:
        ctx.set_stream(_current_stream(t.get_device()))
    st = fn(ctx.handle, *args)
    if st != 0:
        raise _lib.error_for(st, ctx.last_error)


def _empty_like_user(q: torch.Tensor, layout: str) -> torch.Tensor:
    """Output like the user's q: its strides where q is dense, else contiguous in the user's
    layout; returned as the logical (B, H, S, D) view."""
    if layout == "bshd":
        return torch.empty_like(q.transpose(1, 2)).transpose(1, 2)
    return torch.empty_like(q)


def _lse_ptr(lse: Optional[torch.Tensor]) -> Optional[int]:
    return lse.data_ptr() if lse is not None else None


# ---- the calls ---------------------------------------------------------------------------------


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params: bytes, context: Optional[Context],
            backend: Optional[str], want_lse: bool, layout: str = "bhsd"
            ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One fw_attention_forward on logical (B, H, S, D) tensors; returns (o, lse or None).
    params: packed fw_attn_params (_attention.make_params)."""
    o, lse, _ = _forward_described(_describable(q), _describable(k), _describable(v), params, context, backend,
                                   want_lse, layout)
    return o, lse


def _forward_described(q, k, v, params, context, backend, want_lse, layout):
    """forward() on tensors _describable already passed; also returns the descriptors of q, k, v, o
    (the autograd Function hands them to the backward, which sees the same tensors)."""
    o = torch.empty_like(q) if layout == "bhsd" else _empty_like_user(q, layout)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device) if want_lse else None
    descs = (descriptor(q), descriptor(k), descriptor(v), descriptor(o))
    ctx = context if context is not None else default_context()
    _call(ctx, backend, q, ctx._lib.fw_forward_packed, descs[0], descs[1], descs[2], descs[3],
          None if lse is None else lse.data_ptr(), params)
    return o, lse, descs


def backward(q, k, v, o, lse, dout, params: bytes, context, backend, descs=None):
    """One fw_attention_backward; returns (dq, dk, dv) shaped like q, k, v. Raises
    NotImplementedError (FlashwattNotImplementedError) where no backend has a backward. descs: the
    packed descriptors of q, k, v, o where the caller has them (the autograd Function's forward)."""
    dout = _describable(dout)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dqkv = descs if descs is not None else (descriptor(q), descriptor(k), descriptor(v), descriptor(o))
    d = dqkv + (descriptor(dout), descriptor(dq), descriptor(dk), descriptor(dv))
    ctx = context if context is not None else default_context()
    fn, h, lp = ctx._lib.fw_backward_packed, ctx.handle, _lse_ptr(lse)
    st, msg = _run(ctx, backend or "auto", q, lambda: fn(h, d[0], d[1], d[2], d[3], lp, d[4], d[5], d[6], d[7], params))
    raise_for(st, "flashwatt backward: " + msg, not_implemented=True)
    return dq, dk, dv


class AttentionFunction(torch.autograd.Function):
    """Eager autograd for flashwatt attention on logical (B, H, S, D) tensors.

    Forward saves q, k, v, o and the float32 LSE; backward calls ``fw_attention_backward``
    (dk, dv summed over each kv group for GQA). The LSE output is not differentiable. Under
    torch.compile the op ``flashwatt::attention_forward`` with its registered autograd does the same.
    """

    @staticmethod
    def forward(fctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params: bytes,
                context: Optional[Context], backend: Optional[str], layout: str):
        q, k, v = _describable(q), _describable(k), _describable(v)
        o, lse, descs = _forward_described(q, k, v, params, context, backend, True, layout)
        fctx.save_for_backward(q, k, v, o, lse)
        fctx.params = params
        fctx.descs = descs  # of q, k, v, o: the saved tensors themselves, so the backward reuses them
        fctx.context = context  # None: the default context of whichever thread runs backward
        fctx.backend = backend
        fctx.mark_non_differentiable(lse)
        fctx.set_materialize_grads(False)  # no zero tensor for the LSE's (unused) gradient
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(fctx: Any, dout: Optional[torch.Tensor], dlse: Optional[torch.Tensor]):
        q, k, v, o, lse = fctx.saved_tensors
        if dout is None:  # only the LSE was used: no gradient flows to q, k, v
            return None, None, None, None, None, None, None
        dq, dk, dv = backward(q, k, v, o, lse, dout, fctx.params, fctx.context, fctx.backend, fctx.descs)
        return dq, dk, dv, None, None, None, None


class VarlenFunction(torch.autograd.Function):
    """Eager autograd for flashwatt.attention_varlen on packed (total, heads, head_dim) tensors.

    Forward is the ragged call with the LSE, saving q, k, v, the output, the LSE and the offsets;
    backward calls ``fw_attention_varlen_backward``. The LSE output is not differentiable. Under
    torch.compile the op ``flashwatt::attention_varlen`` with its registered autograd does the same.
    """

    @staticmethod
    def forward(fctx: Any, q, k, v, cu_seqlens_q, cu_seqlens_k, max_q: int, max_k: int, params: bytes, backend: str,
                context: Optional[Context]):
        o, lse = varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, params, True, backend, context)
        fctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
        fctx.args = (max_q, max_k, params, backend, context)
        fctx.mark_non_differentiable(lse)
        fctx.set_materialize_grads(False)  # no zero tensor for the LSE's (unused) gradient
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(fctx: Any, dout: Optional[torch.Tensor], dlse: Optional[torch.Tensor]):
        if dout is None:  # only the LSE was used: no gradient flows to q, k, v
            return (None,) * 10
        q, k, v, o, lse, cu_q, cu_k = fctx.saved_tensors
        dq, dk, dv = varlen_backward_call(q, k, v, o, lse, dout, cu_q, cu_k, *fctx.args)
        return (dq, dk, dv) + (None,) * 7


# ---- the front ends ----------------------------------------------------------------------------


def _plain(*ts: torch.Tensor) -> bool:
    """Whether the tensors hold data the C library can read (not fake, meta or a subclass)."""
    for t in ts:
        if type(t) is not _Tensor or t.is_meta:
            return False
    return True


def use_ops(*ts: torch.Tensor) -> bool:
    """Whether a call goes through the custom ops: while torch.compile traces, or for tensors
    without data. Eager calls on real tensors skip the dispatcher (its cost is host time per call)."""
    return torch.compiler.is_compiling() or not _plain(*ts)


def autocast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v as SDPA sees them under torch.autocast: float32/float16/bfloat16 inputs cast to the
    autocast dtype of their device type when autocast is on there (SDPA is a lower-precision op)."""
    device_type = q.device.type
    if not torch.is_autocast_enabled(device_type):
        return q, k, v
    dt = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dt) if t.dtype in _DTYPES and t.dtype != dt else t for t in (q, k, v))  # type: ignore


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)


def check_call(backend: Any, context: Any) -> str:
    """The backend name ("auto" for None), after the types of backend and context are checked."""
    if context is not None and not isinstance(context, Context):
        raise TypeError(f"context must be a flashwatt.Context, got {type(context).__name__}")
    if backend is None:
        return "auto"
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {backend!r}")
    return backend


def ext_and_context(backend: str, context: Optional[Context]) -> Tuple[Any, Optional[Context]]:
    """(the C++ extension where it is built and the call needs no backend but its context's, else None; the
    context the call runs on, None where the extension is not built). The extension takes the context's
    fw_context* by the address of its ctypes pointer (`ctypes.addressof(ctx._ptr)`), which Context.close clears
    in place."""
    ext = _torch_ext.get()
    if ext is None:  # the Python path finds its context itself: nothing more to do here on every call
        return None, None
    ctx = context if context is not None else default_context()
    return (ext if backend == "auto" or backend == ctx._backend else None), ctx


def ext_done(status: int, message: str, o: Any, context: Optional[Context]) -> None:
    """After an extension call: its error raised as flashwatt's; a named context kept alive with the graph
    (the autograd node reads its fw_context* in backward)."""
    if status:
        raise _lib.error_for(status, message)
    if context is not None and o.grad_fn is not None:
        o.grad_fn.metadata["flashwatt.context"] = context


def _fast(t: Any) -> bool:
    """A real 4-D CPU or CUDA tensor of a dtype the library takes: the eager path needs no other check."""
    return type(t) is _Tensor and t.dim() == 4 and t.dtype in _DTYPES and (t.is_cuda or t.is_cpu)


def attention(q, k, v, causal: bool, scale: Optional[float], window: Any, backend: Optional[str],
              return_lse: bool, layout: str, context: Optional[Context]):
    """Torch entry point of flashwatt.attention (its arguments as given)."""
    if scale is None and window is None:
        masking = (None, bool(causal), _lib.WINDOW_UNLIMITED, _lib.WINDOW_UNLIMITED)
    else:
        masking = normalize_params(causal, scale, window)
    if backend != "auto" or context is not None:
        backend = check_call(backend, context)
    if layout != "bhsd" and layout != "bshd":
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not torch.compiler.is_compiling() and _fast(q) and _fast(k) and _fast(v):
        if layout == "bshd":
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if _any_autocast is None or _any_autocast():
            q, k, v = autocast(q, k, v)
        ext, ctx = ext_and_context(backend, context)
        if ext is not None:  # the C++ autograd node (_torch_ext.py)
            scale, causal, left, right = masking
            st, msg, o, lse = ext.attention(q, k, v, 0.0 if scale is None else scale, causal, left, right, return_lse,
                                            layout == "bshd", _addressof(ctx._ptr), context is None)
            ext_done(st, msg, o, context)
        elif (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled():
            o, lse = AttentionFunction.apply(q, k, v, pack_params(*masking), context, backend, layout)
        else:
            o, lse, _ = _forward_described(_describable(q), _describable(k), _describable(v), pack_params(*masking),
                                           context, backend, return_lse, layout)
    else:  # torch.compile traces this, and tensors without data go this way: the custom op
        q, k, v = _logical(q, "q", layout), _logical(k, "k", layout), _logical(v, "v", layout)
        q, k, v = autocast(q, k, v)
        needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        scale, causal, left, right = masking
        o, lse = torch.ops.flashwatt.attention_forward(
            q, k, v, scale, causal, left, right, return_lse or needs_grad, layout, backend,
            context.op_id if context is not None else 0)
    out = o.transpose(1, 2) if layout == "bshd" else o
    return (out, lse) if return_lse else out


def attention_backward(q, k, v, out, lse, dout, params: bytes, context, backend, layout: str):
    """Torch entry point of flashwatt.attention_backward (explicit, outside autograd)."""
    qv, kv, vv, ov, dov = (_logical(t, n, layout) for t, n in
                           ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (dout, "dout")))
    B, H, Lq, _ = qv.shape
    if lse.dtype != torch.float32 or tuple(lse.shape) != (B, H, Lq) or not lse.is_contiguous():
        raise ValueError(f"lse must be a contiguous float32 tensor of shape {(B, H, Lq)} (the forward's "
                         f"return_lse output), got {lse.dtype} {tuple(lse.shape)}")
    qv, kv, vv, ov = (_describable(t) for t in (qv, kv, vv, ov))
    with torch.no_grad():
        dq, dk, dv = backward(qv, kv, vv, ov, lse, dov, params, context, backend)
    if layout == "bshd":
        dq, dk, dv = (g.transpose(1, 2) for g in (dq, dk, dv))
    return dq, dk, dv


from . import _attention as _front  # noqa: E402
from . import _torch_ops  # noqa: E402,F401  (registers torch.ops.flashwatt.*)

_front._torch_attention, _front._torch_tensor = attention, _Tensor
