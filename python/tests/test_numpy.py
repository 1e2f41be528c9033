"""The NumPy path against the float64 reference, on every usable CPU backend."""
import threading

import numpy as np
import pytest

from conftest import cpu_backend_names
from reference import attention_backward_ref, attention_ref

import flashwatt as fw

BACKENDS = cpu_backend_names()
DTYPES = [np.float32, np.float16]


def tol(dtype, v):
    """The numerics contract: f32 1e-5 * max|V|; f16 output rounding (2^-11 relative) plus slack."""
    vmax = float(np.abs(np.asarray(v, dtype=np.float64)).max()) or 1.0
    return (1e-5 if dtype == np.float32 else 1e-3) * vmax + 1e-6


def run(backend, q, k, v, **kw):
    """fw.attention with backend; skip where the backend says it cannot run the problem."""
    try:
        return fw.attention(q, k, v, backend=backend, **kw)
    except fw.FlashwattError as e:
        if e.status == fw.Status.ERR_UNSUPPORTED:
            pytest.skip(f"{backend}: {e.message}")
        raise


def check(out, q, k, v, layout="bhsd", lse=None, dtype=np.float32, **kw):
    """Compare out (and lse) with the float64 reference of the logical (bhsd) inputs."""
    if layout == "bshd":
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
        out = out.transpose(0, 2, 1, 3)
    ro, rl = attention_ref(q, k, v, **kw)
    err = np.abs(out.astype(np.float64) - ro).max()
    assert err <= tol(dtype, v), f"max |o - ref| = {err:.3g} > {tol(dtype, v):.3g}"
    if lse is not None:
        fin = np.isfinite(rl)
        assert np.array_equal(np.isfinite(lse), fin), "lse is -inf exactly where a row sees no key"
        assert np.all(lse[~fin] == -np.inf)
        if fin.any():
            lerr = np.abs(lse[fin] - rl[fin]).max()
            assert lerr <= 2e-5 * (1 + np.abs(rl[fin]).max()), f"max |lse - ref| = {lerr:.3g}"


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def random_case(seed):
    rng = np.random.default_rng(seed)
    B = int(rng.integers(1, 3))
    Hkv = int(rng.choice([1, 2, 3]))
    H = Hkv * int(rng.choice([1, 2, 4]))
    Lq = int(rng.integers(1, 70))
    Lk = int(rng.integers(1, 90))
    D = int(rng.choice([8, 16, 32, 40, 64, 128]))
    causal = bool(rng.integers(0, 2))
    window = None
    if rng.integers(0, 3) == 0:
        window = (int(rng.integers(0, 40)) if rng.integers(0, 4) else None,
                  int(rng.integers(0, 40)) if rng.integers(0, 4) else None)
    layout = "bshd" if rng.integers(0, 2) else "bhsd"
    scale = None if rng.integers(0, 2) else float(rng.uniform(0.05, 0.5))
    return rng, B, H, Hkv, Lq, Lk, D, causal, window, layout, scale


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("seed", range(16))
def test_random_shapes(backend, dtype, seed):
    rng, B, H, Hkv, Lq, Lk, D, causal, window, layout, scale = random_case(seed)
    if layout == "bhsd":
        q, k, v = rand(rng, (B, H, Lq, D), dtype), rand(rng, (B, Hkv, Lk, D), dtype), rand(rng, (B, Hkv, Lk, D), dtype)
    else:
        q, k, v = rand(rng, (B, Lq, H, D), dtype), rand(rng, (B, Lk, Hkv, D), dtype), rand(rng, (B, Lk, Hkv, D), dtype)
    o, lse = run(backend, q, k, v, causal=causal, window=window, scale=scale, layout=layout, return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert o.flags.c_contiguous, "output allocated like q: contiguous in q's layout"
    assert lse.shape == (B, H, Lq) and lse.dtype == np.float32
    check(o, q, k, v, layout=layout, lse=lse, dtype=dtype, causal=causal, window=window, scale=scale)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_and_mqa(backend, causal):
    rng = np.random.default_rng(7)
    for hkv in (1, 2, 8):
        q = rand(rng, (2, 8, 37, 32), np.float32)
        k, v = rand(rng, (2, hkv, 45, 32), np.float32), rand(rng, (2, hkv, 45, 32), np.float32)
        check(run(backend, q, k, v, causal=causal), q, k, v, causal=causal)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bshd_equals_bhsd(backend):
    rng = np.random.default_rng(3)
    q, k, v = (rand(rng, (2, 29, 4, 16), np.float32) for _ in range(3))
    o_bshd = run(backend, q, k, v, layout="bshd", causal=True)
    assert o_bshd.shape == (2, 29, 4, 16) and o_bshd.flags.c_contiguous
    t = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))  # noqa: E731
    o_bhsd = run(backend, t(q), t(k), t(v), causal=True)
    np.testing.assert_allclose(o_bshd.transpose(0, 2, 1, 3), o_bhsd, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_strides(backend):
    rng = np.random.default_rng(11)
    B, H, L, D = 2, 4, 33, 24
    # q: rows padded (row stride D + 8); k: a bshd buffer seen as bhsd; v: one kv head broadcast
    # over H with stride 0 (GQA by strides); all passed without copies.
    q = rand(rng, (B, H, L, D + 8), np.float32)[..., :D]
    k = rand(rng, (B, L, H, D), np.float32).transpose(0, 2, 1, 3)
    v = np.broadcast_to(rand(rng, (B, 1, L, D), np.float32), (B, H, L, D))
    assert not q.flags.c_contiguous and not k.flags.c_contiguous and v.strides[1] == 0
    o = run(backend, q, k, v, causal=True)
    check(o, q, k, v, causal=True)
    # Views the C API cannot describe (negative strides, head_dim stride 2) are copied first.
    qn = rand(rng, (B, H, L, D), np.float32)[:, :, ::-1]
    kn = rand(rng, (B, H, L, 2 * D), np.float32)[..., ::2]
    o = run(backend, qn, kn, v)
    check(o, qn, kn, v)
    # Big-endian input is converted.
    o = run(backend, q.astype(">f4"), k, v)
    check(o, q, k, v)


@pytest.mark.parametrize("backend", BACKENDS)
def test_windows_and_empty_rows(backend):
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, (1, 2, 20, 16), np.float32), rand(rng, (1, 2, 12, 16), np.float32), rand(rng, (1, 2, 12, 16), np.float32)
    # Lq > Lk with causal: the first Lq - Lk rows see no key -> 0 output and lse -inf.
    o, lse = run(backend, q, k, v, causal=True, return_lse=True)
    assert np.all(o[:, :, :8] == 0) and np.all(lse[:, :, :8] == -np.inf)
    check(o, q, k, v, lse=lse, causal=True)
    for window in [(0, 0), (3, 0), (0, 3), (2, None), (None, 1), (5, 5), (-1, -1)]:
        o, lse = run(backend, q, k, v, window=window, return_lse=True)
        check(o, q, k, v, lse=lse, window=window)


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_logits_and_nan(backend):
    rng = np.random.default_rng(9)
    q, k, v = (rand(rng, (1, 2, 16, 32), np.float32) for _ in range(3))
    o = run(backend, q * 300, k * 300, v)  # logits ~ 1e5: must not overflow
    assert np.all(np.isfinite(o))
    check(o, q * 300, k * 300, v)
    qn = q.copy()
    qn[0, 1, 4, 0] = np.nan
    o = run(backend, qn, k, v)
    assert np.all(np.isnan(o[0, 1, 4])), "a NaN in q shows in its output row"
    mask = np.ones(o.shape, dtype=bool)
    mask[0, 1, 4] = False
    assert np.all(np.isfinite(o[mask]))


def test_auto_backend_and_context(fw):
    rng = np.random.default_rng(1)
    q, k, v = (rand(rng, (1, 2, 10, 8), np.float32) for _ in range(3))
    check(fw.attention(q, k, v), q, k, v)
    assert fw.default_context().last_backend in BACKENDS
    ctx = fw.Context(objective="min-energy", power_cap_w=450, reduced_precision_budget=1e-3,
                     backend="auto", threads=1)
    check(ctx.attention(q, k, v, causal=True), q, k, v, causal=True)
    check(fw.attention(q, k, v, context=ctx), q, k, v)
    assert ctx.last_backend in BACKENDS and ctx.last_error == ""
    ctx.backend = BACKENDS[-1]
    check(ctx.attention(q, k, v), q, k, v)
    assert ctx.last_backend == BACKENDS[-1]
    # A per-call backend is restored afterwards, also when the call fails.
    ctx.backend = "auto"
    check(ctx.attention(q, k, v, backend="cpu-ref"), q, k, v)
    assert ctx.last_backend == "cpu-ref" and ctx.backend == "auto"
    with pytest.raises(fw.FlashwattError):
        ctx.attention(q, k[..., :4], v, backend="cpu-ref")
    assert ctx.backend == "auto"
    ctx.close()
    with pytest.raises(ValueError, match="closed"):
        ctx.attention(q, k, v)


def test_context_errors(fw):
    with pytest.raises(fw.FlashwattError, match="power_cap_w") as e:
        fw.Context(objective="power-cap")
    assert e.value.status == fw.Status.ERR_INVALID_VALUE
    assert fw.Context(objective="power-cap", power_cap_w=300).power_cap_w == 300
    with pytest.raises(fw.FlashwattError, match="not compiled into this build") as e:
        fw.Context(backend="no-such-backend")
    assert e.value.status == fw.Status.ERR_NO_BACKEND
    with pytest.raises(fw.FlashwattError, match="threads"):
        fw.Context(threads=-1)
    with pytest.raises(ValueError, match="objective"):
        fw.Context(objective="slowest")
    with pytest.raises(ValueError, match="precision"):
        fw.Context(precision="fp8")


def test_memory_budget(fw):
    """Context.memory_budget reaches fw_context_set_memory_budget; CPU calls run the same with any
    budget (it steers the CUDA backward's recompute-vs-store choice only)."""
    assert fw.Context().memory_budget == 0
    ctx = fw.Context(memory_budget=1 << 30, threads=1)
    assert ctx.memory_budget == 1 << 30 and "memory_budget=1073741824" in repr(ctx)
    ctx.memory_budget = (1 << 64) - 1
    assert ctx.memory_budget == (1 << 64) - 1
    ctx.memory_budget = 0
    with pytest.raises(ValueError, match="memory_budget"):
        ctx.memory_budget = -1
    with pytest.raises(ValueError, match="memory_budget"):
        fw.Context(memory_budget=1 << 64)
    with pytest.raises(TypeError, match="memory_budget"):
        ctx.memory_budget = 1.5
    assert ctx.memory_budget == 0, "a rejected value leaves the budget as it was"
    ctx.memory_budget = 64 << 20
    rng = np.random.default_rng(23)
    q, k, v, do = (rand(rng, (1, 2, 12, 16), np.float32) for _ in range(4))
    o, lse = fw.attention(q, k, v, return_lse=True, causal=True, context=ctx)
    check(o, q, k, v, causal=True)
    try:
        dq, dk, dv = fw.attention_backward(q, k, v, o, lse, do, causal=True, context=ctx)
    except NotImplementedError:
        return
    ref = attention_backward_ref(q, k, v, do, causal=True)
    for g, r in zip((dq, dk, dv), ref):
        assert np.abs(g.astype(np.float64) - r).max() <= 2e-5 * (1 + np.abs(r).max())


def test_errors_carry_the_library_message(fw):
    rng = np.random.default_rng(2)
    q, k, v = (rand(rng, (1, 4, 10, 16), np.float32) for _ in range(3))
    ctx = fw.Context()
    cases = [
        ((q, k[..., :8], v[..., :8]), {}, fw.Status.ERR_INVALID_SHAPE, "head_dim 8 differs"),
        ((q, k[:, :3], v[:, :3]), {}, fw.Status.ERR_INVALID_SHAPE, "divisible"),
        ((q, k.astype(np.float16), v.astype(np.float16)), {}, fw.Status.ERR_DTYPE_MISMATCH, "dtype"),
        ((q, k[:, :, :5], v), {}, fw.Status.ERR_INVALID_SHAPE, "must match"),
        ((q, k, v), {"window": (-2, 0)}, fw.Status.ERR_INVALID_VALUE, "window_left"),
        ((q, k, v), {"scale": float("nan")}, fw.Status.ERR_INVALID_VALUE, "scale"),
        ((q, k, v), {"backend": "no-such"}, fw.Status.ERR_NO_BACKEND, "not compiled"),
    ]
    big = rand(rng, (1, 1, 4, 320), np.float32)
    cases.append(((big, big.copy(), big.copy()), {}, fw.Status.ERR_INVALID_SHAPE, "above the supported 256"))
    for args, kw, status, text in cases:
        with pytest.raises(fw.FlashwattError) as e:
            ctx.attention(*args, **kw)
        assert e.value.status == status, (text, e.value)
        assert text in e.value.message and text in str(e.value)
        if kw.get("backend") is None:
            assert ctx.last_error == e.value.message


def test_errors_with_a_per_call_backend_keep_the_message(fw):
    q = np.zeros((1, 2, 4, 16), np.float32)
    with pytest.raises(fw.FlashwattError, match="head_dim 8 differs") as e:
        fw.attention(q, q[..., :8], q[..., :8], backend="cpu-ref")
    assert e.value.status == fw.Status.ERR_INVALID_SHAPE
    with pytest.raises(fw.FlashwattError, match="window_left is -5") as e:
        fw.attention(q, q, q, backend="cpu-naive", window=(-5, 0))
    assert e.value.status == fw.Status.ERR_INVALID_VALUE


def test_python_side_errors(fw):
    q = np.zeros((1, 1, 4, 8), np.float32)
    with pytest.raises(TypeError, match="float32 or float16"):
        fw.attention(q.astype(np.float64), q, q)
    with pytest.raises(ValueError, match="4-D"):
        fw.attention(q[0], q[0], q[0])
    with pytest.raises(TypeError):
        fw.attention(q, q.tolist(), q)
    with pytest.raises(ValueError, match="layout"):
        fw.attention(q, q, q, layout="sbhd")
    with pytest.raises(ValueError, match="scale"):
        fw.attention(q, q, q, scale=0.0)
    with pytest.raises(ValueError, match="window"):
        fw.attention(q, q, q, window=3)


def test_threads_use_their_own_default_context(fw):
    rng = np.random.default_rng(4)
    q, k, v = (rand(rng, (2, 4, 64, 32), np.float32) for _ in range(3))
    ref = fw.attention(q, k, v, causal=True)
    errors = []

    def work():
        try:
            for _ in range(5):
                np.testing.assert_array_equal(fw.attention(q, k, v, causal=True), ref)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


CPU_BACKWARD_CASES = [  # (B, H, Hkv, Lq, Lk, D, causal, window, layout, dtype)
    (2, 4, 4, 33, 33, 16, True, None, "bhsd", np.float32),
    (1, 4, 2, 20, 45, 32, False, None, "bshd", np.float32),
    (2, 6, 1, 40, 40, 64, True, None, "bhsd", np.float32),
    (1, 2, 2, 30, 18, 16, False, (4, 2), "bhsd", np.float32),
    (1, 4, 2, 37, 37, 32, True, None, "bshd", np.float16),
]


@pytest.mark.parametrize("case", CPU_BACKWARD_CASES, ids=[f"bwd{i}" for i in range(len(CPU_BACKWARD_CASES))])
def test_backward(fw, case):
    """attention_backward (the call autograd makes) against float64 gradients, on whichever CPU
    backend has a backward; a clear NotImplementedError where none has."""
    B, H, Hkv, Lq, Lk, D, causal, window, layout, dtype = case
    rng = np.random.default_rng(21)
    shp = (lambda h, s: (B, h, s, D)) if layout == "bhsd" else (lambda h, s: (B, s, h, D))
    q, k, v = rand(rng, shp(H, Lq), dtype), rand(rng, shp(Hkv, Lk), dtype), rand(rng, shp(Hkv, Lk), dtype)
    do = rand(rng, shp(H, Lq), dtype)
    kw = dict(causal=causal, window=window, layout=layout)
    o, lse = fw.attention(q, k, v, return_lse=True, **kw)
    try:
        dq, dk, dv = fw.attention_backward(q, k, v, o, lse, do, **kw)
    except NotImplementedError as e:
        assert isinstance(e, fw.FlashwattError) and "backward" in str(e)
        pytest.skip(f"no CPU backward in this build: {e}")
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dtype and dq.flags.c_contiguous and dk.flags.c_contiguous
    t = (lambda a: a.transpose(0, 2, 1, 3)) if layout == "bshd" else (lambda a: a)
    ref = attention_backward_ref(t(q), t(k), t(v), t(do), causal=causal, window=window)
    for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), ref):
        err = np.abs(t(g).astype(np.float64) - r).max()
        bound = (2e-5 if dtype == np.float32 else 4e-3) * (1 + np.abs(r).max())
        assert err <= bound, f"{name} ({fw.default_context().last_backend}): max err {err:.3g} > {bound:.3g}"


def test_backward_errors(fw):
    rng = np.random.default_rng(22)
    q, k, v = (rand(rng, (1, 2, 8, 16), np.float32) for _ in range(3))
    o, lse = fw.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="lse must be"):
        fw.attention_backward(q, k, v, o, lse.astype(np.float64), o)
    with pytest.raises(fw.FlashwattError, match="dout"):
        fw.attention_backward(q, k, v, o, lse, o[:, :, :4])
    # A backend without a backward says so, as NotImplementedError.
    with pytest.raises(NotImplementedError, match="no backward"):
        fw.attention_backward(q, k, v, o, lse, o, backend="cpu-naive")


def test_deterministic_setting(fw):
    """Context.deterministic reaches fw_context_set_deterministic; only booleans are taken."""
    assert fw.Context().deterministic is False
    ctx = fw.Context(deterministic=True, threads=1)
    assert ctx.deterministic is True and "deterministic=True" in repr(ctx)
    ctx.deterministic = False
    assert ctx.deterministic is False
    with pytest.raises(TypeError, match="deterministic"):
        ctx.deterministic = 1
