"""flashwatt under torch.compile, torch.library.opcheck, autocast, no_grad and CUDA graphs.

A transformer block that calls flashwatt.attention compiles with fullgraph=True (no graph break) and
gives eager SDPA's output and gradients; every custom op (torch.ops.flashwatt.*) passes opcheck;
autocast and no_grad behave as they do with SDPA; the ragged and KV-cache calls compile too, the
ragged one with its backward (a ragged block's output and gradients against SDPA per sequence). On a GPU
the same on CUDA, and each op captured into a torch.cuda.graph and replayed on changed inputs.
Skipped where torch is absent (CI); the CUDA cases where there is no GPU.
"""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the torch tests run where it is")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flashwatt as fw  # noqa: E402
import flashwatt._torch  # noqa: E402,F401  (registers the ops)
from cuda_devices import CUDA_SKIP, DEVICES, cuda_only  # noqa: E402

ops = torch.ops.flashwatt




class Block(nn.Module):
    """Pre-norm attention block: LayerNorm, one packed q/k/v projection viewed as (B, S, H, D) without
    copies, causal GQA attention, output projection, residual."""

    def __init__(self, dim=64, heads=4, kv_heads=2, use_flashwatt=True):
        super().__init__()
        self.h, self.hkv, self.dh = heads, kv_heads, dim // heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.dh)
        self.proj = nn.Linear(dim, dim)
        self.use_flashwatt = use_flashwatt

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = self.qkv(self.ln(x)).split([self.h * self.dh, self.hkv * self.dh, self.hkv * self.dh], -1)
        q, k, v = q.view(B, S, self.h, self.dh), k.view(B, S, self.hkv, self.dh), v.view(B, S, self.hkv, self.dh)
        if self.use_flashwatt:
            o = fw.attention(q, k, v, causal=True, layout="bshd")
        else:
            g = self.h // self.hkv
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(g, 1),
                                               v.transpose(1, 2).repeat_interleave(g, 1), is_causal=True).transpose(1, 2)
        return x + self.proj(o.reshape(B, S, -1))


def _graphs_of(fn, *args):
    """The FX graphs torch.compile(fullgraph=True) makes of fn (a graph break would raise)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, backend=backend)(*args)
    return graphs


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_block_matches_eager_sdpa(device):
    torch.manual_seed(0)
    mine = Block().to(device)
    ref = Block(use_flashwatt=False).to(device)
    ref.load_state_dict(mine.state_dict())
    x = torch.randn(2, 37, 64, device=device)
    graphs = _graphs_of(mine, x)
    assert len(graphs) == 1 and "flashwatt.attention_forward" in str(graphs[0].graph), "one graph, the op in it"

    torch._dynamo.reset()
    compiled = torch.compile(mine, fullgraph=True)  # inductor
    xm, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    ym, yr = compiled(xm), ref(xr)
    g = torch.randn_like(ym)
    (ym * g).sum().backward()
    (yr * g).sum().backward()
    torch.testing.assert_close(ym, yr, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(xm.grad, xr.grad, rtol=1e-4, atol=2e-5)
    for (name, a), b in zip(mine.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=5e-5, msg=lambda m: f"{name}: {m}")
    # another sequence length: the fake implementations serve dynamic shapes too
    x2 = torch.randn(2, 20, 64, device=device)
    torch.testing.assert_close(compiled(x2), ref(x2), rtol=1e-5, atol=2e-5)


class RaggedBlock(nn.Module):
    """The Block above over a ragged batch packed without padding: (total, dim) tokens, q, k, v row-strided
    (total, heads, head_dim) views of one projection, causal GQA attention per sequence."""

    def __init__(self, dim=64, heads=4, kv_heads=2, use_flashwatt=True):
        super().__init__()
        self.h, self.hkv, self.dh = heads, kv_heads, dim // heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.dh)
        self.proj = nn.Linear(dim, dim)
        self.use_flashwatt = use_flashwatt

    def forward(self, x, cu_seqlens, max_seqlen: int):
        T = x.shape[0]
        q, k, v = self.qkv(self.ln(x)).split([self.h * self.dh, self.hkv * self.dh, self.hkv * self.dh], -1)
        q, k, v = q.view(T, self.h, self.dh), k.view(T, self.hkv, self.dh), v.view(T, self.hkv, self.dh)
        if self.use_flashwatt:
            o = fw.attention_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True)
        else:  # SDPA on each sequence alone
            g, rows = self.h // self.hkv, []
            for a, b in zip(cu_seqlens.tolist(), cu_seqlens[1:].tolist()):
                qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
                rows.append(F.scaled_dot_product_attention(qs, ks.repeat_interleave(g, 0), vs.repeat_interleave(g, 0),
                                                           is_causal=True).transpose(0, 1))
            o = torch.cat(rows)
        return x + self.proj(o.reshape(T, -1))


def _cuda_ragged_backward_reason():
    """Why the CUDA case of the compiled ragged block cannot run here (None where it can)."""
    if CUDA_SKIP is not None:
        return CUDA_SKIP
    q = torch.randn(3, 2, 16, device="cuda", requires_grad=True)
    cu = torch.tensor([0, 3], dtype=torch.int32, device="cuda")
    try:
        fw.attention_varlen(q, q, q, cu, cu, 3, 3).sum().backward()
    except NotImplementedError as e:
        return f"the library has no CUDA ragged backward: {e}"
    return None


def _ragged_devices():
    reason = _cuda_ragged_backward_reason()
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(reason is not None, reason=str(reason)))]


def _fw_and_bw_graphs(fn, *args):
    """The forward and backward FX graphs AOTAutograd makes of fn under torch.compile(fullgraph=True)."""
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    out = torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))(*args)
    out.sum().backward()
    return graphs


@pytest.mark.parametrize("device", _ragged_devices())
def test_compiled_ragged_block_matches_eager_sdpa(device):
    """A block calling attention_varlen on inputs that require grad compiles with fullgraph=True, the
    backward op in the backward graph; output and gradients (input and every parameter) match eager SDPA
    run on each sequence, also at another batch geometry."""
    torch.manual_seed(0)
    mine = RaggedBlock().to(device)
    ref = RaggedBlock(use_flashwatt=False).to(device)
    ref.load_state_dict(mine.state_dict())
    lens = [7, 0, 1, 23, 13]  # an empty sequence and a single token among longer ones
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    x = torch.randn(sum(lens), 64, device=device, requires_grad=True)
    fwd, bwd = _fw_and_bw_graphs(lambda x: mine(x, cu, max(lens)), x)
    assert "flashwatt.attention_varlen.default" in fwd, fwd
    assert "flashwatt.attention_varlen_backward.default" in bwd, bwd
    mine.zero_grad()

    torch._dynamo.reset()
    compiled = torch.compile(mine, fullgraph=True)  # inductor
    for lens in ([7, 0, 1, 23, 13], [30, 2, 0, 9]):
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
        x = torch.randn(sum(lens), 64, device=device)
        xm, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        ym, yr = compiled(xm, cu, max(lens)), ref(xr, cu, max(lens))
        g = torch.randn_like(ym)
        (ym * g).sum().backward()
        (yr * g).sum().backward()
        torch.testing.assert_close(ym, yr, rtol=1e-5, atol=2e-5)
        torch.testing.assert_close(xm.grad, xr.grad, rtol=1e-4, atol=2e-5)
        for (name, a), b in zip(mine.named_parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=5e-5, msg=lambda m: f"{name}: {m}")
            assert a.grad.abs().sum() > 0, f"{name}: no gradient reached it"
        mine.zero_grad()
        ref.zero_grad()


def _forward_samples(device):
    gen = torch.Generator().manual_seed(3)

    def r(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    q, k, v = r(2, 4, 9, 16), r(2, 2, 11, 16), r(2, 2, 11, 16)
    x = r(2, 9, 3, 4, 16)  # a packed (B, S, 3, H, D) projection: strided bshd views
    qs, ks, vs = (t.transpose(1, 2) for t in x.unbind(2))
    wide = r(1, 2, 5, 32)[..., ::2]  # head_dim stride 2: copied inside the op
    return [
        ((q, k, v, None, True, -1, -1, True, "bhsd", "auto", 0), "gqa-causal-lse"),
        ((q, k, v, 0.3, False, 4, 0, False, "bhsd", "auto", 0), "window-no-lse"),
        ((qs, ks, vs, None, True, -1, -1, True, "bshd", "auto", 0), "bshd-views"),
        ((wide, wide, wide, None, False, -1, -1, True, "bhsd", "auto", 0), "head-dim-stride"),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_forward_and_backward(device):
    for args, name in _forward_samples(device):
        torch.library.opcheck(ops.attention_forward.default, args)
        if args[7]:  # with the LSE, the forward a gradient needs (without, its backward refuses: see below)
            grad_args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
            torch.library.opcheck(ops.attention_forward.default, grad_args)
        q, k, v = args[:3]
        o, lse = ops.attention_forward(q, k, v, *args[3:7], True, *args[8:])
        bwd = (torch.randn_like(o), q, k, v, o, lse, *args[3:7], args[9], args[10])
        torch.library.opcheck(ops.attention_backward.default, bwd)


def _serving_samples(device):
    gen = torch.Generator().manual_seed(5)

    def r(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    def i32(*x):
        return torch.tensor(x, dtype=torch.int32, device=device)

    q, k = r(20, 4, 16), r(25, 2, 16)
    varlen = [(q, k, r(25, 2, 16), i32(0, 5, 5, 20), i32(0, 9, 10, 25), 15, 15, None, True, -1, -1, lse, "auto", 0)
              for lse in (True, False)]
    kc, vc, seqlens = r(3, 32, 2, 16), r(3, 32, 2, 16), i32(5, 0, 20)
    pages, pv, table = r(12, 8, 2, 16), r(12, 8, 2, 16), i32(*range(11, -1, -1)).view(3, 4)
    q1, k1, v1 = r(3, 2, 4, 16), r(3, 2, 2, 16), r(3, 2, 2, 16)
    qp, kp, vp = r(6, 4, 16), r(6, 2, 16), r(6, 2, 16)
    kvcache = [
        (q1, kc, vc, seqlens, None, k1, v1, None, None, None, True, -1, -1, True, "auto", 0),
        (q1, kc, vc, seqlens, None, None, None, None, None, 0.5, False, 3, 0, False, "auto", 0),
        (q1, pages, pv, seqlens, table, k1, v1, None, None, None, True, -1, -1, True, "auto", 0),
        (qp, kc, vc, seqlens, None, kp, vp, i32(0, 1, 1, 6), 5, None, True, -1, -1, True, "auto", 0),
    ]
    return varlen, kvcache


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_serving(device):
    varlen, kvcache = _serving_samples(device)
    for args in varlen:
        torch.library.opcheck(ops.attention_varlen.default, args)
    for args in kvcache:
        torch.library.opcheck(ops.attention_with_kvcache.default, args)


def _varlen_backward_samples(device):
    """Ragged forward argument lists (with the LSE: the forward a gradient needs): GQA with empty
    sequences on either side, a window without causal, and row-strided views with head_dim stride 2
    (copied inside the ops, so the gradients' strides are the copies')."""
    gen = torch.Generator().manual_seed(7)

    def r(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    def i32(*x):
        return torch.tensor(x, dtype=torch.int32, device=device)

    varlen, _ = _serving_samples(device)
    qkv = r(12, 3, 2, 32)[..., ::2]  # (total, 3, heads, 16): each of q, k, v strided in rows and head_dim
    cu = i32(0, 4, 12)
    return [
        varlen[0],
        (r(9, 4, 8), r(14, 4, 8), r(14, 4, 8), i32(0, 6, 9), i32(0, 10, 14), 6, 10, 0.4, False, 3, 1, True,
         "auto", 0),
        (qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, 8, 8, None, True, -1, -1, True, "auto", 0),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_varlen_autograd_and_backward(device):
    """opcheck on attention_varlen with inputs that require grad (its registered autograd) and on
    attention_varlen_backward; the backward op equals the explicit flashwatt.attention_varlen_backward."""
    for args in _varlen_backward_samples(device):
        grad_args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                          for a in args)
        torch.library.opcheck(ops.attention_varlen.default, grad_args)
        q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right = args[:11]
        o, lse = ops.attention_varlen(*args)
        dout = torch.randn_like(o)
        bwd = (dout, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale, causal, left, right, "auto", 0)
        torch.library.opcheck(ops.attention_varlen_backward.default, bwd)
        window = (left if left >= 0 else None, right if right >= 0 else None)
        want = fw.attention_varlen_backward(q, k, v, o, lse, dout, cu_q, cu_k, max_q, max_k, causal=causal,
                                            window=window, scale=scale)
        for got, w, x in zip(ops.attention_varlen_backward(*bwd), want, (q, k, v)):
            assert got.shape == x.shape and got.abs().sum() > 0
            torch.testing.assert_close(got, w, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_serving_calls(device):
    varlen, kvcache = _serving_samples(device)
    q, k, v, cu_q, cu_k = varlen[0][:5]

    def ragged(q, k, v):
        return fw.attention_varlen(q, k, v, cu_q, cu_k, 15, 15, causal=True, return_lse=True)

    torch._dynamo.reset()
    (o, lse), (o_ref, lse_ref) = torch.compile(ragged, fullgraph=True)(q, k, v), ragged(q, k, v)
    torch.testing.assert_close(o, o_ref, rtol=0, atol=0)
    torch.testing.assert_close(lse, lse_ref, rtol=0, atol=0)

    q1, kc, vc, seqlens, _, k1, v1 = kvcache[0][:7]

    def decode(q, k_cache, v_cache, k, v):
        return fw.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v) * 2

    kc_ref, vc_ref = kc.clone(), vc.clone()
    torch._dynamo.reset()
    got = torch.compile(decode, fullgraph=True)(q1, kc, vc, k1, v1)
    want = decode(q1, kc_ref, vc_ref, k1, v1)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref), "the compiled call wrote the new tokens"
    assert torch.equal(kc[0, 5:7], k1[0]), "the new keys are in the cache at cache_seqlens"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_autocast_like_sdpa(device, compiled, dtype):
    q, k, v = (torch.randn(2, 4, 33, 32, device=device, requires_grad=True) for _ in range(3))

    def both(q, k, v):
        with torch.autocast(device, dtype=dtype):
            return fw.attention(q, k, v, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch._dynamo.reset()
    o, s = (torch.compile(both, fullgraph=True) if compiled else both)(q, k, v)
    assert o.dtype == s.dtype == dtype
    assert (o.float() - s.float()).abs().max().item() < 2e-2
    o.float().sum().backward()  # gradients reach the float32 inputs through the cast
    assert q.grad is not None and q.grad.dtype == torch.float32
    with torch.autocast(device, dtype=dtype, enabled=False):
        assert fw.attention(q, k, v).dtype == torch.float32


@pytest.mark.parametrize("device", _ragged_devices())
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ragged_autocast_like_the_dense_call(device, compiled):
    """Under torch.autocast the ragged call takes its inputs in the autocast dtype, as the dense call and SDPA
    do: the same output as on inputs cast by hand, and gradients reach the float32 inputs."""
    lens = [5, 0, 9, 3]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q = torch.randn(sum(lens), 4, 32, device=device, requires_grad=True)
    k, v = (torch.randn(sum(lens), 2, 32, device=device, requires_grad=True) for _ in range(2))

    def ragged(q, k, v):
        with torch.autocast(device, dtype=torch.bfloat16):
            return fw.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True)

    torch._dynamo.reset()
    o = (torch.compile(ragged, fullgraph=True) if compiled else ragged)(q, k, v)
    want = fw.attention_varlen(*(t.detach().to(torch.bfloat16) for t in (q, k, v)), cu, cu, max(lens), max(lens),
                               causal=True)
    assert o.dtype == torch.bfloat16
    torch.testing.assert_close(o, want, rtol=0, atol=0)
    o.float().sum().backward()
    assert q.grad is not None and q.grad.dtype == torch.float32 and k.grad.dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_no_grad_like_sdpa(device, compiled):
    q, k, v = (torch.randn(1, 2, 16, 32, device=device, requires_grad=True) for _ in range(3))

    def both(q, k, v):
        return fw.attention(q, k, v), F.scaled_dot_product_attention(q, k, v)

    run = torch.compile(both, fullgraph=True) if compiled else both
    torch._dynamo.reset()
    o, s = run(q, k, v)
    assert o.requires_grad and s.requires_grad
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            o, s = run(q, k, v)
        assert not o.requires_grad and not s.requires_grad
        torch.testing.assert_close(o, s, rtol=1e-5, atol=1e-5)


def test_context_and_backend_reach_the_compiled_op():
    ctx = fw.Context(backend="cpu-ref")
    q = torch.randn(1, 2, 8, 16)
    torch._dynamo.reset()
    o = torch.compile(lambda q: ctx.attention(q, q, q, causal=True), fullgraph=True)(q)
    assert ctx.last_backend == "cpu-ref"
    torch._dynamo.reset()
    torch.compile(lambda q: fw.attention(q, q, q, backend="cpu-naive", context=ctx), fullgraph=True)(q)
    assert ctx.last_backend == "cpu-naive" and ctx.backend == "cpu-ref"
    torch.testing.assert_close(o, fw.attention(q, q, q, causal=True), rtol=1e-5, atol=1e-6)


def test_op_errors_name_the_problem():
    q = torch.randn(1, 2, 8, 16)
    o, lse = ops.attention_forward(q, q, q, None, False, -1, -1, False, "bhsd", "auto", 0)
    with pytest.raises(ValueError, match="needs the forward's lse"):
        ops.attention_backward(o, q, q, q, o, lse, None, False, -1, -1, "auto", 0)
    with pytest.raises(ValueError, match="no longer exists"):
        ops.attention_forward(q, q, q, None, False, -1, -1, False, "bhsd", "auto", 10**9)
    qp = torch.randn(4, 2, 8, requires_grad=True)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    o, lse = ops.attention_varlen(qp, qp, qp, cu, cu, 4, 4, None, True, -1, -1, False, "auto", 0)
    assert lse.shape == (0,)
    with pytest.raises(ValueError, match="attention_varlen_backward needs the forward's lse"):
        o.sum().backward()


@cuda_only
def test_cuda_graph_captures_and_replays_each_op():
    """Each op (and flashwatt.attention itself) captured into one CUDA graph, replayed after the inputs
    changed in place: the replay's outputs equal fresh eager calls on the new inputs."""
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    q, k, v = (torch.randn(2, 8, 128, 64, device=dev, dtype=dt) for _ in range(3))
    dout = torch.randn_like(q)
    varlen, kvcache = _serving_samples(dev)
    vq, vk, vv, cu_q, cu_k = (t.to(dt) if t.is_floating_point() else t for t in varlen[0][:5])
    cq, kc, vc, seqlens, _, k1, v1 = (t.to(dt) if t is not None and t.is_floating_point() else t
                                      for t in kvcache[0][:7])
    ctx = fw.Context()
    ctx.set_workspace(torch.empty(ctx.workspace_size(3, 4, 2, 16, 2, 32, dtype=dt), dtype=torch.uint8, device=dev))

    def calls():
        o1 = fw.attention(q, k, v, causal=True, context=ctx)
        o2, lse = ops.attention_forward(q, k, v, None, True, -1, -1, True, "bhsd", "auto", ctx.op_id)
        grads = ops.attention_backward(dout, q, k, v, o2, lse, None, True, -1, -1, "auto", ctx.op_id)
        o3, _ = ops.attention_varlen(vq, vk, vv, cu_q, cu_k, 15, 15, None, True, -1, -1, False, "auto", ctx.op_id)
        o4, _ = ops.attention_with_kvcache(cq, kc, vc, seqlens, None, None, None, None, None, None, True, -1, -1,
                                           False, "auto", ctx.op_id)
        return (o1, o2, lse, *grads, o3, o4)

    calls()  # warm-up on a side stream is what torch.cuda.graph's docs ask; the first call sets up workspace
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = calls()
    for t in (q, k, v, dout, vq, vk, vv, cq):
        t.copy_(torch.randn_like(t))
    seqlens.copy_(torch.tensor([7, 1, 30], dtype=torch.int32, device=dev))
    g.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, calls()):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_compiles_when_flashwatt_is_imported_before_torch():
    """The torch adapter (and its ops) load at the first torch call, inside the first trace: that trace
    must still build its guards and give eager's result (a fresh interpreter, flashwatt imported first)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import flashwatt as fw
import torch
q = torch.randn(1, 2, 8, 16)
cu = torch.tensor([0, 3, 8], dtype=torch.int32)
f = torch.compile(lambda q: fw.attention(q, q, q, causal=True) * 2, fullgraph=True)
torch.testing.assert_close(f(q), fw.attention(q, q, q, causal=True) * 2)
torch._dynamo.reset()
qp = torch.randn(8, 2, 16)
g = torch.compile(lambda q: fw.attention_varlen(q, q, q, cu, cu, 5, 5, causal=True), fullgraph=True)
torch.testing.assert_close(g(qp), fw.attention_varlen(qp, qp, qp, cu, cu, 5, 5, causal=True))
print("compiled")
"""
    python_dir = str(Path(fw.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=python_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
