"""The torch path (CPU and CUDA) against F.scaled_dot_product_attention and the float64 reference.

Skipped where torch is absent (CI has no torch); the CUDA cases are skipped where torch has no CUDA
device or the library has no usable CUDA backend.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the torch tests run where it is")
import torch.nn.functional as F  # noqa: E402

import flashwatt as fw  # noqa: E402
from cuda_devices import CUDA_SKIP, DEVICES  # noqa: E402
from reference import attention_ref, visible_mask  # noqa: E402


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DT_IDS = ["f32", "f16", "bf16"]

# (B, H, Hkv, Lq, Lk, D, causal, window, layout)
CASES = [
    (2, 8, 8, 128, 128, 64, True, None, "bhsd"),
    (2, 8, 2, 100, 130, 64, False, None, "bshd"),
    (1, 4, 1, 64, 200, 128, True, None, "bhsd"),
    (2, 4, 4, 77, 77, 32, False, (16, 0), "bhsd"),
    (1, 2, 2, 1, 300, 64, True, None, "bshd"),
    (1, 4, 4, 160, 160, 256, True, None, "bhsd"),
    (3, 6, 3, 65, 33, 80, False, (8, 8), "bshd"),
]


def _sdpa(q, k, v, causal, window, scale=None):
    """SDPA on logical (B, H, S, D) tensors with flashwatt's bottom-right mask and GQA."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    mask = torch.from_numpy(visible_mask(q.shape[2], k.shape[2], causal, window)).to(q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _np64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def _make(case, dtype, device, seed=0):
    B, H, Hkv, Lq, Lk, D, causal, window, layout = case
    gen = torch.Generator().manual_seed(seed)
    shape = (lambda h, s: (B, h, s, D)) if layout == "bhsd" else (lambda h, s: (B, s, h, D))
    q = torch.randn(shape(H, Lq), generator=gen).to(device, dtype)
    k = torch.randn(shape(Hkv, Lk), generator=gen).to(device, dtype)
    v = torch.randn(shape(Hkv, Lk), generator=gen).to(device, dtype)
    return q, k, v


def _logical(t, layout):
    return t.transpose(1, 2) if layout == "bshd" else t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_forward_matches_sdpa(device, dtype, case):
    causal, window, layout = case[6], case[7], case[8]
    q, k, v = _make(case, dtype, device)
    o, lse = fw.attention(q, k, v, causal=causal, window=window, layout=layout, return_lse=True)
    assert o.shape == q.shape and o.dtype == dtype and o.device == q.device
    assert o.is_contiguous(), "output allocated like q (contiguous in q's layout)"
    assert lse.shape == (q.shape[0], case[1], case[3]) and lse.dtype == torch.float32

    ql, kl, vl = (_logical(t, layout) for t in (q, k, v))
    ref, ref_lse = attention_ref(_np64(ql), _np64(kl), _np64(vl), causal=causal, window=window)
    seen = visible_mask(case[3], case[4], causal, window).any(axis=1)  # rows SDPA can compute
    err_fw = np.abs(_np64(_logical(o, layout)) - ref).max()
    if dtype == torch.float32:
        bound = 1e-5 * np.abs(_np64(v)).max()
    else:  # FlashAttention's rule: at most 2x SDPA's own error in the same dtype, plus 1e-5
        s = _np64(_sdpa(ql, kl, vl, causal, window))
        err_sdpa = np.abs(s[:, :, seen] - ref[:, :, seen]).max()
        bound = 2 * err_sdpa + 1e-5
    assert err_fw <= bound, f"max |o - ref| {err_fw:.3g} > {bound:.3g} (backend {fw.default_context().last_backend})"
    fin = np.isfinite(ref_lse)
    l = _np64(lse)
    assert np.array_equal(np.isfinite(l), fin)
    if fin.any():
        lerr = np.abs(l[fin] - ref_lse[fin]).max()
        assert lerr <= 1e-4 * (1 + np.abs(ref_lse[fin]).max()), f"max |lse - ref| {lerr:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_packed_qkv_views_and_is_causal(device, dtype):
    """The GPT case: q, k, v are strided views of one (B, S, 3, H, D) projection, no copies."""
    B, S, H, D = 2, 96, 4, 64
    x = torch.randn(B, S, 3 * H * D).to(device, dtype)
    q, k, v = x.view(B, S, 3, H, D).unbind(2)
    assert not q.is_contiguous()
    o = fw.attention(q, k, v, causal=True, layout="bshd")
    s = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    ref, _ = attention_ref(*(_np64(t.transpose(1, 2)) for t in (q, k, v)), causal=True)
    err_fw = np.abs(_np64(o.transpose(1, 2)) - ref).max()
    err_sdpa = np.abs(_np64(s) - ref).max()
    bound = 1e-5 * np.abs(_np64(v)).max() if dtype == torch.float32 else 2 * err_sdpa + 1e-5
    assert err_fw <= bound
    # Broadcast kv heads (stride 0) and a bhsd view of a bshd buffer are also taken as they are.
    kb = k[:, :, :1].expand(B, S, H, D)
    o = fw.attention(q.transpose(1, 2), kb.transpose(1, 2), v.transpose(1, 2))
    s = F.scaled_dot_product_attention(q.transpose(1, 2), kb.transpose(1, 2), v.transpose(1, 2))
    assert (o.float() - s.float()).abs().max().item() <= (1e-4 if dtype == torch.float32 else 3e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_scale_and_no_grad(device):
    q, k, v = (torch.randn(1, 2, 40, 32, device=device) for _ in range(3))
    o = fw.attention(q, k, v, scale=0.3)
    s = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    assert (o - s).abs().max().item() <= 1e-5 * v.abs().max().item() + 1e-6
    assert not o.requires_grad


@pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))
def test_runs_on_torchs_current_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        q, k, v = (torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        o = fw.attention(q, k, v, causal=True)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        diff = (o.float() - ref.float()).abs().max()
    s.synchronize()
    assert diff.item() < 1e-2


@pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))
def test_device_mismatch_is_an_error():
    q = torch.randn(1, 2, 8, 16, device="cuda")
    k = torch.randn(1, 2, 8, 16)
    with pytest.raises(fw.FlashwattError, match="cuda:0") as e:
        fw.attention(q, k, k)
    assert e.value.status == fw.Status.ERR_DEVICE_MISMATCH


def test_torch_type_errors():
    q = torch.zeros(1, 1, 4, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        fw.attention(q, q, q)
    with pytest.raises(TypeError, match="all be torch tensors"):
        fw.attention(q.float(), q.float().numpy(), q.float())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("gqa", [False, True])
def test_backward(device, dtype, gqa):
    """loss.backward() gives SDPA's gradients where a backend has a backward; until then it raises
    NotImplementedError with the library's message."""
    B, H, L, D = 2, 4, 70, 64
    Hkv = 2 if gqa else H
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, L, D, generator=gen).to(device, dtype).requires_grad_()
    k = torch.randn(B, Hkv, L, D, generator=gen).to(device, dtype).requires_grad_()
    v = torch.randn(B, Hkv, L, D, generator=gen).to(device, dtype).requires_grad_()
    g = torch.randn(B, H, L, D, generator=gen).to(device, dtype)
    o = fw.attention(q, k, v, causal=True)
    assert o.requires_grad
    try:
        (o * g).sum().backward()
    except NotImplementedError as e:
        assert isinstance(e, fw.FlashwattError) and "backward" in str(e)
        pytest.skip(f"no backward in this build: {e}")
    # float64 reference gradients, and SDPA's own error in this dtype
    q64, k64, v64 = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    (_sdpa(q64, k64, v64, True, None) * g.double().cpu()).sum().backward()
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    (_sdpa(ql, kl, vl, True, None) * g).sum().backward()
    for name, mine, sd, ref in (("dq", q.grad, ql.grad, q64.grad), ("dk", k.grad, kl.grad, k64.grad),
                                ("dv", v.grad, vl.grad, v64.grad)):
        assert mine.shape == ref.shape and mine.dtype == dtype
        err = (mine.double().cpu() - ref).abs().max().item()
        err_sdpa = (sd.double().cpu() - ref).abs().max().item()
        bound = 2 * err_sdpa + 1e-4 if dtype != torch.float32 else 1e-4 * ref.abs().max().item() + 1e-6
        assert err <= bound, f"{name}: max err {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("device", DEVICES)
def test_explicit_backward_equals_autograd(device):
    """flashwatt.attention_backward on torch tensors (bshd, GQA) gives autograd's gradients."""
    B, S, H, Hkv, D = 1, 48, 4, 2, 32
    q = torch.randn(B, S, H, D, device=device, requires_grad=True)
    k = torch.randn(B, S, Hkv, D, device=device, requires_grad=True)
    v = torch.randn(B, S, Hkv, D, device=device, requires_grad=True)
    g = torch.randn(B, S, H, D, device=device)
    with torch.no_grad():
        o, lse = fw.attention(q, k, v, causal=True, layout="bshd", return_lse=True)
    try:
        dq, dk, dv = fw.attention_backward(q, k, v, o, lse, g, causal=True, layout="bshd")
    except NotImplementedError as e:
        pytest.skip(f"no backward in this build: {e}")
    assert dq.shape == q.shape and dk.shape == k.shape and dq.is_contiguous()
    (fw.attention(q, k, v, causal=True, layout="bshd") * g).sum().backward()
    for mine, ref in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("D", [64, 128])
def test_backward_training_shapes(device, dtype, D):
    """The GPU's tensor-core backward (f16/bf16, D 64 and 128, causal, GQA, L past one tile) against
    float64 gradients, within 2x SDPA's own error in the dtype; the deterministic context gives
    bit-identical gradients on a second run."""
    B, H, Hkv, L = 2, 4, 2, 300
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, h, L, D, generator=gen).to(device, dtype) for h in (H, Hkv, Hkv))
    g = torch.randn(B, H, L, D, generator=gen).to(device, dtype)
    q64, k64, v64 = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    (_sdpa(q64, k64, v64, True, None) * g.double().cpu()).sum().backward()
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    (_sdpa(ql, kl, vl, True, None) * g).sum().backward()
    grads = []
    for ctx in (fw.Context(), fw.Context(deterministic=True), fw.Context(deterministic=True)):
        qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
        (ctx.attention(qf, kf, vf, causal=True) * g).sum().backward()
        grads.append((qf.grad, kf.grad, vf.grad))
        for name, mine, sd, ref in (("dq", qf.grad, ql.grad, q64.grad), ("dk", kf.grad, kl.grad, k64.grad),
                                    ("dv", vf.grad, vl.grad, v64.grad)):
            err = (mine.double().cpu() - ref).abs().max().item()
            err_sdpa = (sd.double().cpu() - ref).abs().max().item()
            assert err <= 2 * err_sdpa + 1e-4, f"{name} (deterministic={ctx.deterministic}): {err:.3g} > 2 x {err_sdpa:.3g}"
    for a, b in zip(grads[1], grads[2]):
        assert torch.equal(a, b), "deterministic backward differs between two runs"
