"""flashwatt.attention_varlen() (with its backward) and flashwatt.attention_with_kvcache(): ragged
batches and KV caches under FlashAttention's names, for NumPy arrays and torch tensors through one
code path.

The C calls read int32 offsets, cache lengths and block tables through bare pointers that carry no
size, dtype or device, so this layer checks those (_arrays.py: what the C side cannot see); everything a
descriptor says (shapes, dtypes, devices of the float tensors) the library checks itself. Nothing
here reads a value on a CUDA device: no synchronisation, so calls can be captured in a CUDA graph.
"""
from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Tuple

from . import _lib
from ._arrays import (_arrays_of, _block_table, _bshd_desc, _check_call, _context, _floats, _int32_vector, _max_seqlen,
                      _packed_desc, _same_device, _through_ops)
from ._attention import normalize_params, pack_params, raise_for
from ._context import Context

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
