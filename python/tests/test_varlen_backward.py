"""The ragged backward (issue 27): torch autograd through flashwatt.attention_varlen against torch
SDPA's autograd run on each sequence alone in float64, and flashwatt.attention_varlen_backward
called directly (NumPy and torch, every usable CPU backend); with a CUDA device, autograd on CUDA
tensors (cuda-flash, cuda-flash-f32) against the same float64 reference.
"""
import numpy as np
import pytest

from conftest import cpu_backend_names

import flashwatt as fw

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

# empty, 1, primes, one long among short; Lq != Lk per sequence; every query sees a key under each mask
# below except where a sequence has no keys (checked apart: dq 0 there)
SEQ_Q = [0, 1, 7, 13, 96, 3, 5]
SEQ_K = [4, 1, 9, 13, 110, 0, 5]
MASKS = {"none": (False, None), "causal": (True, None), "window": (False, (6, 2)), "causal-left": (True, (20, 0))}
TOL = {"f32": 5e-6, "f16": 2e-3, "bf16": 1.6e-2}  # max |g - g_ref| / max |g_ref| (~2.5x the worst seen)
# the GPU's tensor cores take P and dS rounded to the input dtype (as FlashAttention does): about twice the CPU's
# error in f16/bf16; its f32 kernels sum in another order
TOL_CUDA = {"f32": 2e-5, "f16": 6e-3, "bf16": 4e-2}


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def visible(lq, lk, causal, window):
    """(lq, lk) bool: query i sees key j (bottom-right aligned, FlashAttention's convention)."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    i = np.arange(lq)[:, None] + (lk - lq)
    j = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def sdpa_grads(q, k, v, dout, causal, window, scale):
    """dq, dk, dv in float64 from torch SDPA's autograd on each sequence alone (GQA by repeating k, v)."""
    group = q.shape[1] // k.shape[1]
    cu_q, cu_k = offsets(SEQ_Q), offsets(SEQ_K)
    grads = [torch.zeros(t.shape, dtype=torch.float64) for t in (q, k, v)]
    for b, (lq, lk) in enumerate(zip(SEQ_Q, SEQ_K)):
        if lq == 0 or lk == 0:
            continue  # no scores: every gradient of the sequence is 0
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qs, ks, vs = (t.detach().double()[r].transpose(0, 1).requires_grad_() for t, r in ((q, rq), (k, rk), (v, rk)))
        mask = torch.from_numpy(visible(lq, lk, causal, window))
        assert bool(mask.any(dim=1).all()), "a query that sees no key makes SDPA's row NaN"
        o = F.scaled_dot_product_attention(qs, ks.repeat_interleave(group, 0), vs.repeat_interleave(group, 0),
                                           attn_mask=mask, scale=scale)
        o.backward(dout.detach().double()[rq].transpose(0, 1))
        for g, t, r in zip(grads, (qs, ks, vs), (rq, rk, rk)):
            g[r] = t.grad.transpose(0, 1)
    return grads


TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"} if torch is None else {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@needs_torch
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa2", "gqa4"])
@pytest.mark.parametrize("mask", list(MASKS))
def test_autograd_matches_sdpa_per_sequence(dtype, kv_heads, mask):
    causal, window = MASKS[mask]
    gen = torch.Generator().manual_seed(27)
    H, D = 4, 32
    tq, tk = sum(SEQ_Q), sum(SEQ_K)
    dt = TORCH_DTYPES[dtype]
    q = torch.randn(tq, H, D, generator=gen).to(dt).requires_grad_()
    k = torch.randn(tk, kv_heads, D, generator=gen).to(dt).requires_grad_()
    v = torch.randn(tk, kv_heads, D, generator=gen).to(dt).requires_grad_()
    w = torch.randn(tq, H, D, generator=gen).to(dt)
    cu_q, cu_k = torch.from_numpy(offsets(SEQ_Q)), torch.from_numpy(offsets(SEQ_K))
    scale = 0.3
    o = fw.attention_varlen(q, k, v, cu_q, cu_k, max(SEQ_Q), max(SEQ_K), causal=causal, window=window, scale=scale)
    assert o.requires_grad and o.dtype == dt
    (o * w).sum().backward()
    want = sdpa_grads(q, k, v, w, causal, window, scale)
    for name, got, ref in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
        assert got.dtype == dt and got.shape == ref.shape
        err = (got.double() - ref).abs().max().item()
        top = ref.abs().max().item()
        assert err <= TOL[dtype] * top, f"{name}: max error {err:.3g} against max |g| {top:.3g}"
    # sequences without keys get dq 0; keys of sequences without queries get dk, dv 0
    cq, ck = offsets(SEQ_Q), offsets(SEQ_K)
    for b, (lq, lk) in enumerate(zip(SEQ_Q, SEQ_K)):
        if lk == 0:
            assert not q.grad[cq[b]:cq[b + 1]].any()
        if lq == 0:
            assert not k.grad[ck[b]:ck[b + 1]].any() and not v.grad[ck[b]:ck[b + 1]].any()


@needs_torch
def test_autograd_through_a_model():
    """Gradients reach parameters through views (q, k, v sliced from one projection, head_dim stride 1
    but rows strided) and accumulate over two calls."""
    gen = torch.Generator().manual_seed(3)
    H, D = 2, 16
    tq = sum(SEQ_Q)
    lens = SEQ_Q  # self-attention: keys are the queries
    x = torch.randn(tq, H * D, generator=gen)
    proj = torch.nn.Linear(H * D, 3 * H * D)
    qkv = proj(x).view(tq, 3, H, D)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    cu = torch.from_numpy(offsets(lens))
    o = fw.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    o.square().sum().backward()
    g1 = proj.weight.grad.clone()
    assert torch.isfinite(g1).all() and g1.abs().sum() > 0
    # the same through float64 SDPA per sequence
    proj.zero_grad()
    qkv = proj(x).double().view(tq, 3, H, D)
    total = 0
    for b, n in enumerate(lens):
        if n == 0:
            continue
        s = slice(int(cu[b]), int(cu[b + 1]))
        qs, ks, vs = (qkv[s, i].transpose(0, 1) for i in range(3))
        mask = torch.from_numpy(visible(n, n, True, None))
        total = total + F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask).square().sum()
    total.backward()
    g2 = proj.weight.grad
    assert (g1.double() - g2).abs().max().item() <= 1e-4 * g2.abs().max().item()


def _explicit_inputs(kind, dtype, seed=5):
    rng = np.random.default_rng(seed)
    H, Hkv, D = 4, 2, 16
    tq, tk = sum(SEQ_Q), sum(SEQ_K)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in ((tq, H, D), (tk, Hkv, D), (tk, Hkv, D), (tq, H, D))]
    cu = [offsets(SEQ_Q), offsets(SEQ_K)]
    if kind == "torch":
        arrs = [torch.from_numpy(a).to(TORCH_DTYPES[dtype]) for a in arrs]
        cu = [torch.from_numpy(c) for c in cu]
    elif dtype == "f16":
        arrs = [a.astype(np.float16) for a in arrs]
    return arrs, cu


KINDS = ["numpy", pytest.param("torch", marks=needs_torch)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", cpu_backend_names())
def test_explicit_backward(kind, backend):
    """attention_varlen_backward from the forward's output and LSE: cpu-flash and cpu-ref agree,
    gradients shaped and typed like their inputs; cpu-naive says where the ragged backward runs."""
    (q, k, v, dout), (cu_q, cu_k) = _explicit_inputs(kind, "f32")
    args = (cu_q, cu_k, max(SEQ_Q), max(SEQ_K))
    o, lse = fw.attention_varlen(q, k, v, *args, causal=True, return_lse=True, backend="cpu-ref")
    if backend == "cpu-naive":
        with pytest.raises(fw.FlashwattError, match="ragged backward runs on cpu-ref, cpu-flash"):
            fw.attention_varlen_backward(q, k, v, o, lse, dout, *args, causal=True, backend=backend)
        return
    got = fw.attention_varlen_backward(q, k, v, o, lse, dout, *args, causal=True, backend=backend)
    ref = fw.attention_varlen_backward(q, k, v, o, lse, dout, *args, causal=True, backend="cpu-ref")
    for g, r, x in zip(got, ref, (q, k, v)):
        assert g.shape == x.shape and g.dtype == x.dtype
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        assert np.abs(g - r).max() <= 1e-5 * np.abs(r).max()


@pytest.mark.parametrize("kind", KINDS)
def test_explicit_backward_refusals(kind):
    (q, k, v, dout), (cu_q, cu_k) = _explicit_inputs(kind, "f32")
    args = (cu_q, cu_k, max(SEQ_Q), max(SEQ_K))
    o, lse = fw.attention_varlen(q, k, v, *args, return_lse=True)
    with pytest.raises(ValueError, match=r"lse must be a contiguous float32 array of shape \(4, 125\)"):
        fw.attention_varlen_backward(q, k, v, o, lse[:, :-1], dout, *args)
    with pytest.raises(ValueError, match="lse must be a contiguous float32"):
        fw.attention_varlen_backward(q, k, v, o, lse.T, dout, *args)
    with pytest.raises(fw.FlashwattError, match=r"dout.size\[2\]"):
        fw.attention_varlen_backward(q, k, v, o, lse, dout[:-1], *args)
    with pytest.raises(fw.FlashwattError, match="max_seqlen_k"):
        fw.attention_varlen_backward(q, k, v, o, lse, dout, cu_q, cu_k, max(SEQ_Q), 50)
    with pytest.raises(ValueError, match="cu_seqlens_k has 3 entries"):
        fw.attention_varlen_backward(q, k, v, o, lse, dout, cu_q, cu_k[:3], max(SEQ_Q), max(SEQ_K))


@pytest.mark.skipif(torch is None or not torch.cuda.is_available()
                    or not any(b.device == "cuda" and b.usable for b in fw.backends()),
                    reason="needs torch with a CUDA device and a CUDA build")
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("mask", ["none", "causal", "window"])
def test_cuda_autograd_matches_sdpa_per_sequence(dtype, mask):
    """autograd on CUDA tensors (head dims 64 and 36: f16/bf16 on the tensor-core and the CUDA-core kernels) runs
    the ragged backward on the GPU, within the float64 reference's tolerance, on torch's current stream."""
    causal, window = MASKS[mask]
    gen = torch.Generator().manual_seed(41)
    tq, tk = sum(SEQ_Q), sum(SEQ_K)
    dt = TORCH_DTYPES[dtype]
    for H, Hkv, D in ((4, 2, 64), (4, 1, 36)):
        cpu = [torch.randn(n, h, D, generator=gen).to(dt) for n, h in ((tq, H), (tk, Hkv), (tk, Hkv), (tq, H))]
        q, k, v = (t.cuda().requires_grad_() for t in cpu[:3])
        w = cpu[3].cuda()
        cu_q, cu_k = torch.from_numpy(offsets(SEQ_Q)).cuda(), torch.from_numpy(offsets(SEQ_K)).cuda()
        scale = 0.3
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())  # the inputs' copies
        with torch.cuda.stream(stream):
            o = fw.attention_varlen(q, k, v, cu_q, cu_k, max(SEQ_Q), max(SEQ_K), causal=causal, window=window,
                                    scale=scale)
            (o * w).sum().backward()
        torch.cuda.synchronize()
        want = sdpa_grads(*cpu[:3], cpu[3], causal, window, scale)
        for name, got, ref in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
            assert got.is_cuda and got.dtype == dt and got.shape == ref.shape
            err = (got.cpu().double() - ref).abs().max().item()
            top = ref.abs().max().item()
            assert err <= TOL_CUDA[dtype] * top, f"D={D} {name}: max error {err:.3g} against max |g| {top:.3g}"
        cq, ck = offsets(SEQ_Q), offsets(SEQ_K)
        for b, (lq, lk) in enumerate(zip(SEQ_Q, SEQ_K)):
            if lk == 0:
                assert not q.grad[cq[b]:cq[b + 1]].any()
            if lq == 0:
                assert not k.grad[ck[b]:ck[b + 1]].any() and not v.grad[ck[b]:ck[b + 1]].any()
