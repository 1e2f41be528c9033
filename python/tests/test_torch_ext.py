"""The optional C++ autograd nodes (flashwatt/_torch_ext.py, _csrc/torch_autograd.cpp) against the Python path:
the dense call, and the ragged one (an empty sequence, one token, GQA, causal and window).

Built once for the session into a temporary cache (skipped where torch, a C++ compiler or ninja is absent).
Outputs and gradients equal the Python autograd.Function's bit for bit (the same C calls) on CPU and CUDA,
bhsd and bshd, causal, windows, GQA, a scale; errors are flashwatt's exceptions as on the Python path; a
named context is the backward's too and stays alive with the graph, a closed one is refused; no double
backward; the LSE is not differentiable; on CUDA the call runs on torch's current stream and inside a
torch.cuda.graph capture.
"""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the torch tests run where it is")

import flashwatt as fw  # noqa: E402
from cuda_devices import DEVICES, cuda_only  # noqa: E402
from flashwatt import _torch_ext  # noqa: E402




@pytest.fixture(scope="session")
def ext_module(tmp_path_factory):
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available() or not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("building the torch extension needs ninja and a C++ compiler")
    old = os.environ.get("FLASHWATT_CACHE")
    os.environ["FLASHWATT_CACHE"] = str(tmp_path_factory.mktemp("fwcache"))
    try:
        mod = _torch_ext.build()
    finally:
        if old is None:
            os.environ.pop("FLASHWATT_CACHE", None)
        else:
            os.environ["FLASHWATT_CACHE"] = old
    return mod


@pytest.fixture
def use_ext(ext_module, monkeypatch):
    """The extension in use for this test (the Python path otherwise)."""
    monkeypatch.setattr(_torch_ext, "_module", ext_module)
    monkeypatch.setattr(_torch_ext, "_tried", True)
    return ext_module


def _python_path(monkeypatch):
    monkeypatch.setattr(_torch_ext, "_module", None)


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _step(q, k, v, dout, **kw):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = fw.attention(q, k, v, **kw)
    o.backward(dout)
    return o.detach(), q.grad, k.grad, v.grad


CASES = [  # B, H, H_kv, Lq, Lk, D, kwargs
    (2, 4, 4, 33, 47, 64, dict(causal=True)),
    (1, 8, 2, 17, 17, 32, dict(layout="bshd")),
    (2, 4, 1, 5, 70, 64, dict(causal=True, scale=0.3)),
    (1, 4, 2, 40, 40, 64, dict(window=(7, 3))),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_python_path_bit_for_bit(use_ext, monkeypatch, device, case):
    B, H, Hk, Lq, Lk, D, kw = CASES[case]
    g = torch.Generator().manual_seed(case)
    bshd = kw.get("layout") == "bshd"

    def rand(h, n):
        shape = (B, n, h, D) if bshd else (B, h, n, D)
        return torch.randn(shape, generator=g).to(device=device, dtype=_dtype(device))

    q, k, v, dout = rand(H, Lq), rand(Hk, Lk), rand(Hk, Lk), rand(H, Lq)
    got = _step(q, k, v, dout, **kw)
    with torch.no_grad():
        o_nograd, lse = fw.attention(q, k, v, return_lse=True, **kw)
    _python_path(monkeypatch)
    want = _step(q, k, v, dout, **kw)
    with torch.no_grad():
        o_py, lse_py = fw.attention(q, k, v, return_lse=True, **kw)
    for a, b, name in zip(got, want, ("o", "dq", "dk", "dv")):
        assert torch.equal(a, b), name
        assert torch.isfinite(a.float()).all(), name
    assert torch.equal(o_nograd, o_py) and torch.equal(lse, lse_py)


def _varlen_step(q, k, v, cu_q, cu_k, max_q, max_k, dout, **kw):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, lse = fw.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, return_lse=True, **kw)
    o.backward(dout)
    return o.detach(), lse, q.grad, k.grad, v.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(5, 0), scale=0.2)])
def test_varlen_matches_the_python_path_bit_for_bit(use_ext, monkeypatch, device, kw):
    """Ragged batches (an empty sequence, a one-token one, one longer than its keys), GQA 4/2."""
    lens_q, lens_k = [0, 1, 13, 40, 7], [3, 1, 29, 40, 5]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device=device)
    g = torch.Generator().manual_seed(3)

    def rand(n, h):
        return torch.randn(n, h, 64, generator=g).to(device=device, dtype=_dtype(device))

    q, k, v, dout = rand(sum(lens_q), 4), rand(sum(lens_k), 2), rand(sum(lens_k), 2), rand(sum(lens_q), 4)
    args = (cu_q, cu_k, max(lens_q), max(lens_k))
    got = _varlen_step(q, k, v, *args, dout, **kw)
    with torch.no_grad():
        o_nograd = fw.attention_varlen(q, k, v, *args, **kw)
    _python_path(monkeypatch)
    want = _varlen_step(q, k, v, *args, dout, **kw)
    for a, b, name in zip(got, want, ("o", "lse", "dq", "dk", "dv")):
        assert torch.equal(a, b), name
    assert torch.equal(o_nograd, want[0])


def test_varlen_errors_and_named_context(use_ext):
    q = torch.randn(10, 2, 32, requires_grad=True)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(TypeError, match="cu_seqlens_k must be int32"):  # the binding's checks come first
        fw.attention_varlen(q, q, q, cu, cu.long(), 6, 6)
    with pytest.raises(fw.FlashwattError):  # the library's: a max_seqlen below a sequence's length
        fw.attention_varlen(q, q, q, cu, cu, 6, 2)
    c = fw.Context(threads=1)
    o = c.attention_varlen(q, q, q, cu, cu, 6, 6, causal=True)
    assert o.grad_fn.metadata["flashwatt.context"] is c
    o.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_with_a_strided_head_dim(use_ext, monkeypatch, device):
    """Inputs whose head_dim stride is not 1 go in as contiguous copies; gradients reach the originals."""
    g = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(1, 2, 32, 11, generator=g).to(device=device, dtype=_dtype(device)).transpose(2, 3)
                     for _ in range(4))
    assert q.stride(3) != 1
    got = _step(q, k, v, dout, causal=True)
    _python_path(monkeypatch)
    want = _step(q, k, v, dout, causal=True)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_errors_are_flashwatts(use_ext):
    for grad in (False, True):  # the plain call and the autograd node's forward
        q = torch.randn(1, 2, 9, 32, requires_grad=grad)
        with pytest.raises(fw.FlashwattError, match="head_dim"):
            fw.attention(q, torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 32))
    o = fw.attention(q, torch.randn(1, 2, 9, 32), torch.randn(1, 2, 9, 32))  # nothing left behind
    o.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_named_context_is_kept_and_a_closed_one_refused(use_ext):
    q, k, v = (torch.randn(1, 2, 9, 32) for _ in range(3))

    def forward_on_a_context_dropped_after():
        c = fw.Context(threads=1)
        qg = q.clone().requires_grad_()
        return qg, c.attention(qg, k, v, causal=True)

    qg, o = forward_on_a_context_dropped_after()
    o.sum().backward()  # the graph holds the context
    assert qg.grad is not None and torch.isfinite(qg.grad).all()

    c = fw.Context(threads=1)
    qg = q.clone().requires_grad_()
    o = c.attention(qg, k, v)
    c.close()
    with pytest.raises(ValueError, match="closed"):
        o.sum().backward()
    with pytest.raises(ValueError, match="closed"):
        c.attention(q, k, v)


def test_backward_on_another_thread(use_ext, monkeypatch):
    """The default context's backward run from another thread takes that thread's own context (the forward's
    serves one call at a time) and gives the same gradients; a named context is the backward's on any thread."""
    import threading

    g = torch.Generator().manual_seed(11)
    q, k, v, dout = (torch.randn(1, 2, 17, 32, generator=g) for _ in range(4))
    want = _step(q, k, v, dout, causal=True)
    for context in (None, fw.Context(threads=1)):
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        o = fw.attention(qg, kg, vg, causal=True, context=context)
        errors = []

        def run():
            try:
                o.backward(dout)
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        assert not errors, errors
        for a, b in zip((qg.grad, kg.grad, vg.grad), want[1:]):
            assert torch.equal(a, b)


def test_no_double_backward_and_lse_not_differentiable(use_ext):
    q, k, v = (torch.randn(1, 2, 9, 32, requires_grad=True) for _ in range(3))
    o, lse = fw.attention(q, k, v, return_lse=True)
    assert not lse.requires_grad
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.autograd.grad(o.sum(), q, create_graph=True)


def test_info_says_whether_it_is_in_use():
    python_dir = os.path.dirname(os.path.dirname(os.path.abspath(fw.__file__)))
    env = dict(os.environ, FLASHWATT_TORCH_EXT="0", PYTHONPATH=python_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "flashwatt", "info"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert "torch extension: off (FLASHWATT_TORCH_EXT=0)" in out


@cuda_only
def test_cuda_stream_and_graph_capture(use_ext):
    q, k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = fw.attention(q, k, v, causal=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(10_000_000)  # the call must queue behind this on s, not run on another stream
        o = fw.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(o, ref)

    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        fw.attention(q, k, v, causal=True)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        og = fw.attention(q, k, v, causal=True)
    q.copy_(torch.randn_like(q))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(og, fw.attention(q, k, v, causal=True))
