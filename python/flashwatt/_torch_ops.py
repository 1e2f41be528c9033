"""flashwatt's calls as PyTorch custom operators (``torch.ops.flashwatt.*``), for torch.compile.

Each op has a fake implementation (the outputs' shapes, dtypes and strides, exactly as the real call
allocates them), so that ``torch.compile(model, fullgraph=True)`` traces a model that calls
:func:`flashwatt.attention` without a graph break; ``attention_forward`` and ``attention_varlen`` have a
registered autograd whose backward is the op ``attention_backward`` / ``attention_varlen_backward``
(the forward's LSE is what the backward needs: the front ends ask for it where a gradient is wanted).
The KV-cache call has no backward (its op writes into its caches, and torch takes no autograd formula
for such an op). The ops take plain values only: the masking arguments normalised, a backend name, and
a context by number (``Context.op_id``; 0 is the calling thread's default context). Their
implementations are the eager calls of ``_torch.py`` and ``_serving.py``.

    torch.ops.flashwatt.attention_forward(q, k, v, scale, causal, window_left, window_right, want_lse,
                                          layout, backend, context) -> (out, lse)
    torch.ops.flashwatt.attention_backward(dout, q, k, v, out, lse, scale, causal, window_left,
                                           window_right, backend, context) -> (dq, dk, dv)
    torch.ops.flashwatt.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                         scale, causal, window_left, window_right, want_lse, backend,
                                         context) -> (out, lse)
    torch.ops.flashwatt.attention_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                  max_seqlen_k, scale, causal, window_left, window_right, backend,
                                                  context) -> (dq, dk, dv)
    torch.ops.flashwatt.attention_with_kvcache(q, k_cache!, v_cache!, cache_seqlens, block_table, k, v,
                                               cu_seqlens_q, max_seqlen_q, scale, causal, window_left,
                                               window_right, want_lse, backend, context) -> (out, lse)

q, k, v of the dense ops are logical (batch, heads, seq, head_dim) views; ``layout`` says how the
output is allocated (like the user's q). An lse that was not asked for is an empty (0,) tensor.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ._attention import pack_params
from ._context import context_of_op_id
from ._torch import _describable, _empty_like_user, backward, forward

_NO_LSE = (0,)


def _no_lse(like: Tensor) -> Tensor:
    return torch.empty(_NO_LSE, dtype=torch.float32, device=like.device)


# ---- dense forward and backward ------------------------------------------------------------------


@torch.library.custom_op("flashwatt::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, scale: Optional[float], causal: bool, window_left: int,
                      window_right: int, want_lse: bool, layout: str, backend: str, context: int
                      ) -> Tuple[Tensor, Tensor]:
    o, lse = forward(q, k, v, pack_params(scale, causal, window_left, window_right), context_of_op_id(context),
                     backend, want_lse, layout)
    return o, (lse if lse is not None else _no_lse(q))


@attention_forward.register_fake
def _(q, k, v, scale, causal, window_left, window_right, want_lse, layout, backend, context):
    o = _empty_like_user(_describable(q), layout)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32) if want_lse else _no_lse(q)
    return o, lse


@torch.library.custom_op("flashwatt::attention_backward", mutates_args=())
def attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       scale: Optional[float], causal: bool, window_left: int, window_right: int, backend: str,
                       context: int) -> Tuple[Tensor, Tensor, Tensor]:
    if lse.numel() == 0 and q.numel() != 0:
        raise ValueError("flashwatt.attention_backward needs the forward's lse: call attention_forward with "
                         "want_lse=True (flashwatt.attention does where a gradient is needed)")
    q, k, v, out = _describable(q), _describable(k), _describable(v), _describable(out)
    return backward(q, k, v, out, lse, dout, pack_params(scale, causal, window_left, window_right),
                    context_of_op_id(context), backend)


@attention_backward.register_fake
def _(dout, q, k, v, out, lse, scale, causal, window_left, window_right, backend, context):
    return (torch.empty_like(_describable(q)), torch.empty_like(_describable(k)), torch.empty_like(_describable(v)))


def _forward_setup(ctx, inputs, output):
    q, k, v, scale, causal, window_left, window_right, want_lse, layout, backend, context = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (scale, causal, window_left, window_right, backend, context)
    ctx.mark_non_differentiable(lse)


def _forward_backward(ctx, dout, dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashwatt.attention_backward(dout, q, k, v, o, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None, None, None


attention_forward.register_autograd(_forward_backward, setup_context=_forward_setup)


# ---- serving: ragged batches and KV caches ---------------------------------------------------------


def _as_called(q: Tensor) -> Tensor:
    """q as the serving calls take it: a contiguous copy where the head_dim stride is not 1."""
    return q if q.shape[-1] == 1 or q.stride(-1) == 1 else q.contiguous()


@torch.library.custom_op("flashwatt::attention_varlen", mutates_args=())
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                     max_seqlen_k: int, scale: Optional[float], causal: bool, window_left: int, window_right: int,
                     want_lse: bool, backend: str, context: int) -> Tuple[Tensor, Tensor]:
    from ._serving import varlen_call

    o, lse = varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         pack_params(scale, causal, window_left, window_right), want_lse, backend,
                         context_of_op_id(context))
    return o, (lse if lse is not None else _no_lse(q))


@attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window_left, window_right,
      want_lse, backend, context):
    q = _as_called(q)
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32) if want_lse else _no_lse(q)
    return torch.empty_like(q), lse


@torch.library.custom_op("flashwatt::attention_varlen_backward", mutates_args=())
def attention_varlen_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                              cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                              scale: Optional[float], causal: bool, window_left: int, window_right: int, backend: str,
                              context: int) -> Tuple[Tensor, Tensor, Tensor]:
    from ._serving import varlen_backward_call

    if lse.numel() == 0 and q.numel() != 0:
        raise ValueError("flashwatt.attention_varlen_backward needs the forward's lse: call attention_varlen with "
                         "want_lse=True (flashwatt.attention_varlen does where a gradient is needed)")
    return varlen_backward_call(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                pack_params(scale, causal, window_left, window_right), backend,
                                context_of_op_id(context))


@attention_varlen_backward.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window_left,
      window_right, backend, context):
    return torch.empty_like(_as_called(q)), torch.empty_like(_as_called(k)), torch.empty_like(_as_called(v))


def _varlen_setup(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window_left, window_right,
     want_lse, backend, context) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.args = (max_seqlen_q, max_seqlen_k, scale, causal, window_left, window_right, backend, context)
    ctx.mark_non_differentiable(lse)


def _varlen_backward(ctx, dout, dlse):
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashwatt.attention_varlen_backward(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                                               *ctx.args)
    return (dq, dk, dv) + (None,) * 11


attention_varlen.register_autograd(_varlen_backward, setup_context=_varlen_setup)


# attention_with_kvcache writes into its caches; torch registers no autograd for such ops, and
# flashwatt.attention_with_kvcache refuses inputs that require grad before it reaches the op.
@torch.library.custom_op("flashwatt::attention_with_kvcache", mutates_args=("k_cache", "v_cache"))
def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor,
                           block_table: Optional[Tensor], k: Optional[Tensor], v: Optional[Tensor],
                           cu_seqlens_q: Optional[Tensor], max_seqlen_q: Optional[int], scale: Optional[float],
                           causal: bool, window_left: int, window_right: int, want_lse: bool, backend: str,
                           context: int) -> Tuple[Tensor, Tensor]:
    from ._serving import kvcache_call

    o, lse = kvcache_call(q, k_cache, v_cache, cache_seqlens, block_table, k, v, cu_seqlens_q, max_seqlen_q,
                          pack_params(scale, causal, window_left, window_right), want_lse, backend,
                          context_of_op_id(context))
    return o, (lse if lse is not None else _no_lse(q))


@attention_with_kvcache.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, k, v, cu_seqlens_q, max_seqlen_q, scale, causal, window_left,
      window_right, want_lse, backend, context):
    q = _as_called(q)
    if not want_lse:
        lse = _no_lse(q)
    elif cu_seqlens_q is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return torch.empty_like(q), lse
