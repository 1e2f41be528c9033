"""FlashAttention's dense-output test grid on cuda-flash by name, forward and backward.

The grid of FlashAttention's tests/test_flash_attn.py (test_flash_attn_output): its head dims, including 59 and
111 (not multiples of 8: cuda-flash runs them staged, zero-padded to a multiple of 8), a subset of its
(seqlen_q, seqlen_k) pairs with unequal ones both ways, causal and not, f16 and bf16, MHA/GQA/MQA rotating, in its
(batch, seq, heads, head_dim) layout; then inputs whose rows or base pointers break the 16-byte rule. Its rule:
the error against a float64 reference at most twice the error of the same computation done in the input dtype
(plus 1e-5), for the output and for each gradient. A refusal or another backend is a failure here (the context
names cuda-flash). Skipped without torch, a CUDA device, or a usable cuda-flash.
"""
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the torch tests run where it is")

import flashwatt as fw  # noqa: E402


def _skip_reason():
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if not any(b.name == "cuda-flash" and b.usable for b in fw.backends()):
        return "libflashwatt has no usable cuda-flash"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

DIMS = [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
PAIRS = [(113, 203), (128, 217), (108, 256), (512, 256), (1023, 1024)]
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
NHEADS = 6


@pytest.fixture(scope="module")
def ctx():
    return fw.Context(backend="cuda-flash")


def _reference(q, k, v, causal, upcast):
    """FlashAttention's attention_ref on (B, S, H, D) tensors: in float64 (upcast) or in the input dtype; GQA by
    repeating k and v; bottom-right causal mask; rows that see no key give 0."""
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    lq, lk = q.shape[1], k.shape[1]
    scores = torch.einsum("bthd,bshd->bhts", q * (1.0 / math.sqrt(q.shape[-1])), k)
    if causal:
        row = torch.arange(lq, device=q.device).view(-1, 1)
        hidden = torch.arange(lk, device=q.device).view(1, -1) > row + (lk - lq)
        scores = scores.masked_fill(hidden, float("-inf"))
        p = torch.softmax(scores, dim=-1).masked_fill(hidden.all(dim=-1, keepdim=True), 0.0)
    else:
        p = torch.softmax(scores, dim=-1)
    return torch.einsum("bhts,bshd->bthd", p.to(v.dtype), v)


def _check(ctx, q, k, v, dout, causal):
    """cuda-flash's output and gradients on (q, k, v) (any strides) against FlashAttention's rule."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o = ctx.attention(*leaves, causal=causal, layout="bshd")
    assert ctx.last_backend == "cuda-flash"
    o.backward(dout)
    assert ctx.last_backend == "cuda-flash"
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]  # float64 leaves: float64 gradients
    o_ref = _reference(*ref_in, causal, upcast=True)
    o_ref.backward(dout.double())
    pt_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o_pt = _reference(*pt_in, causal, upcast=False)
    o_pt.backward(dout)
    pairs = [("out", o, o_pt, o_ref)] + [(n, a.grad, b.grad, c.grad)
                                         for n, a, b, c in zip(("dq", "dk", "dv"), leaves, pt_in, ref_in)]
    for name, mine, pt, ref in pairs:
        assert mine.shape == ref.shape and mine.dtype == q.dtype
        err = (mine.double() - ref).abs().max().item()
        err_pt = (pt.double() - ref).abs().max().item()
        assert err <= 2 * err_pt + 1e-5, f"{name}: max |err| {err:.3g} > 2 x {err_pt:.3g} + 1e-5"


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("seqlen_q,seqlen_k", PAIRS)
def test_output_and_gradients(ctx, seqlen_q, seqlen_k, d, causal, dtype):
    nheads_k = (NHEADS, 3, 1)[(DIMS.index(d) + PAIRS.index((seqlen_q, seqlen_k))) % 3]  # MHA, GQA, MQA
    gen = torch.Generator(device="cuda").manual_seed(0)
    dt = DTYPES[dtype]
    q = torch.randn(2, seqlen_q, NHEADS, d, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(2, seqlen_k, nheads_k, d, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(2, seqlen_k, nheads_k, d, device="cuda", dtype=dt, generator=gen)
    dout = torch.randn(q.shape, device="cuda", dtype=dt, generator=gen)
    _check(ctx, q, k, v, dout, causal)


def _odd_rows(t, pad):
    """t's values in a view whose rows are pad elements apart beyond the head dim (strides off 16 bytes)."""
    b, s, h, d = t.shape
    buf = torch.zeros(b, s, h, d + pad, device=t.device, dtype=t.dtype)
    buf[..., :d] = t
    return buf[..., :d]


def _off_boundary(t):
    """t's values, contiguous, starting one element past a 16-byte boundary."""
    buf = torch.zeros(t.numel() + 1, device=t.device, dtype=t.dtype)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("d", [59, 64, 128])
@pytest.mark.parametrize("layout", ["odd-rows", "off-boundary"])
def test_unaligned_views(ctx, layout, d, dtype):
    """Rows and base pointers that break the 16-byte rule, at head dims cuda-flash reads in place otherwise."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    dt = DTYPES[dtype]
    q = torch.randn(2, 150, NHEADS, d, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(2, 170, 3, d, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(2, 170, 3, d, device="cuda", dtype=dt, generator=gen)
    dout = torch.randn(q.shape, device="cuda", dtype=dt, generator=gen)
    views = [_odd_rows(t, 3) if layout == "odd-rows" else _off_boundary(t) for t in (q, k, v, dout)]
    assert all(t.data_ptr() % 16 != 0 or t.stride(2) % 8 != 0 for t in views)
    _check(ctx, *views[:3], views[3], causal=True)
