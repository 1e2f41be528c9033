"""The PyTorch adapter: descriptors of torch tensors (CPU and CUDA, their own strides, torch's
current CUDA stream) and the autograd Function whose backward calls fw_attention_backward."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import _lib
from ._attention import call_with_backend, raise_for
from ._context import Context, default_context

_DTYPES = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}


def _logical(t: torch.Tensor, name: str, layout: str) -> torch.Tensor:
    if t.dim() != 4:
        order = "batch, heads, seq, head_dim" if layout == "bhsd" else "batch, seq, heads, head_dim"
        raise ValueError(f"{name} must be 4-D ({order}), got shape {tuple(t.shape)}")
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name} is {t.dtype}; flashwatt takes float32, float16 or bfloat16")
    if t.device.type not in ("cpu", "cuda"):
        raise TypeError(f"{name} is on {t.device}; flashwatt takes cpu and cuda tensors")
    return t.transpose(1, 2) if layout == "bshd" else t


def _describable(t: torch.Tensor) -> torch.Tensor:
    """t itself when the C API takes its strides (head_dim stride 1), else a contiguous copy."""
    if t.size(3) != 1 and t.stride(3) != 1:
        return t.contiguous()
    return t


def descriptor(t: torch.Tensor) -> bytes:
    """Packed fw_tensor of a 4-D logical (B, H, S, D) tensor: its own data pointer and strides."""
    if t.is_cuda:
        return _lib.pack_tensor(t.data_ptr(), _DTYPES[t.dtype], _lib.DEVICE_CUDA, t.get_device(), t.shape, t.stride())
    return _lib.pack_tensor(t.data_ptr(), _DTYPES[t.dtype], _lib.DEVICE_CPU, 0, t.shape, t.stride())


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


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
    index, cur = t.device.index, torch.cuda.current_device()
    if index is not None and index != cur:
        with torch.cuda.device(index):
            ctx.set_stream(_current_stream(index))
            return call_with_backend(ctx, backend, call)
    ctx.set_stream(_current_stream(cur))
    return call_with_backend(ctx, backend, call)


def _lse_ptr(lse: Optional[torch.Tensor]) -> Optional[int]:
    return lse.data_ptr() if lse is not None else None


def _empty_like_user(q: torch.Tensor, layout: str) -> torch.Tensor:
    """Output like the user's q: its strides where q is dense, else contiguous in the user's
    layout; returned as the logical (B, H, S, D) view."""
    if layout == "bshd":
        return torch.empty_like(q.transpose(1, 2)).transpose(1, 2)
    return torch.empty_like(q)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params: _lib.FwAttnParams,
            context: Optional[Context], backend: Optional[str], want_lse: bool, layout: str = "bhsd"
            ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One fw_attention_forward on logical (B, H, S, D) tensors; returns (o, lse or None)."""
    o, lse, _ = _forward_described(_describable(q), _describable(k), _describable(v), params, context, backend,
                                   want_lse, layout)
    return o, lse


def _forward_described(q, k, v, params, context, backend, want_lse, layout):
    """forward() on tensors _describable already passed; also returns the descriptors of q, k, v, o
    (the autograd Function hands them to the backward, which sees the same tensors)."""
    o = _empty_like_user(q, layout)
    B, H, Lq, _ = q.shape
    lse = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device) if want_lse else None
    descs = (descriptor(q), descriptor(k), descriptor(v), descriptor(o))
    ctx = context if context is not None else default_context()
    fn, h, lp, pb = ctx._lib.fw_forward_packed, ctx.handle, _lse_ptr(lse), bytes(params)
    raise_for(*_run(ctx, backend, q, lambda: fn(h, descs[0], descs[1], descs[2], descs[3], lp, pb)))
    return o, lse, descs


def backward(q, k, v, o, lse, dout, params, context, backend, descs=None):
    """One fw_attention_backward; returns (dq, dk, dv) shaped like q, k, v. Raises
    NotImplementedError (FlashwattNotImplementedError) where no backend has a backward. descs: the
    packed descriptors of q, k, v, o where the caller has them (the autograd Function's forward)."""
    dout = _describable(dout)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dqkv = descs if descs is not None else (descriptor(q), descriptor(k), descriptor(v), descriptor(o))
    d = dqkv + (descriptor(dout), descriptor(dq), descriptor(dk), descriptor(dv))
    ctx = context if context is not None else default_context()
    fn, h, lp, pb = ctx._lib.fw_backward_packed, ctx.handle, _lse_ptr(lse), bytes(params)
    st, msg = _run(ctx, backend, q, lambda: fn(h, d[0], d[1], d[2], d[3], lp, d[4], d[5], d[6], d[7], pb))
    raise_for(st, "flashwatt backward: " + msg, not_implemented=True)
    return dq, dk, dv


class AttentionFunction(torch.autograd.Function):
    """Autograd for flashwatt attention on logical (B, H, S, D) tensors.

    Forward saves q, k, v, o and the float32 LSE; backward calls ``fw_attention_backward``
    (dk, dv summed over each kv group for GQA). The LSE output is not differentiable.
    """

    @staticmethod
    def forward(fctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params: _lib.FwAttnParams,
                context: Optional[Context], backend: Optional[str], layout: str):
        q, k, v = _describable(q), _describable(k), _describable(v)
        o, lse, descs = _forward_described(q, k, v, params, context, backend, True, layout)
        fctx.save_for_backward(q, k, v, o, lse)
        fctx.params = params  # made for this call (make_params) and never changed
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


def attention(q, k, v, params: _lib.FwAttnParams, context, backend, return_lse: bool, layout: str):
    """Torch entry point of flashwatt.attention (arguments already checked)."""
    qv, kv, vv = (_logical(t, n, layout) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (qv, kv, vv))
    if needs_grad:
        o, lse = AttentionFunction.apply(qv, kv, vv, params, context, backend, layout)
    else:
        o, lse = forward(qv, kv, vv, params, context, backend, want_lse=return_lse, layout=layout)
    out = o.transpose(1, 2) if layout == "bshd" else o
    return (out, lse) if return_lse else out


def attention_backward(q, k, v, out, lse, dout, params: _lib.FwAttnParams, context, backend, layout: str):
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
