"""flashwatt.attention_varlen and flashwatt.attention_with_kvcache (issue 24).

NumPy (every usable CPU backend) and torch on the CPU against a float64 reference built here per
sequence from reference.attention_ref; CUDA tensors (skipped without a GPU) through the same cases,
against the CPU result, and through a torch.cuda.graph capture replayed after cache_seqlens and the
block table changed in place. Unused cache slots hold NaN: a kernel that reads a key it must not
see turns the output NaN.
"""
import math

import numpy as np
import pytest

from conftest import cpu_backend_names
from cuda_devices import cuda_only
from reference import attention_ref

import flashwatt as fw

try:
    import torch
except ImportError:
    torch = None


needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
needs_cuda = cuda_only

# (array kind, backend): NumPy on each CPU backend by name, torch on the CPU and CUDA through "auto".
RUNS = ([pytest.param("numpy", b, id=f"numpy-{b}") for b in cpu_backend_names()]
        + [pytest.param("torch", "auto", id="torch-cpu", marks=needs_torch),
           pytest.param("cuda", "auto", id="torch-cuda", marks=needs_cuda)])


# ---- arrays of each kind -----------------------------------------------------------------------------


def to(kind, a, dtype=None):
    """The NumPy array a as the kind's array (a fresh copy); dtype: "f32", "f16" or "bf16"."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        a = a.astype(np.float16 if dtype == "f16" else np.float32)
    if kind == "numpy":
        if dtype == "bf16":
            pytest.skip("NumPy has no bfloat16")
        return a.copy()
    t = torch.from_numpy(a.copy())
    if dtype == "bf16":
        t = t.to(torch.bfloat16)
    return t.cuda() if kind == "cuda" else t


def host(x):
    """float64 (or int) NumPy copy of any array."""
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return (x.double() if x.is_floating_point() else x).numpy()
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def rounded(a, dtype):
    """a as the kernel sees it after the input cast, in float64."""
    if dtype == "bf16":
        return host(torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16))
    return np.asarray(a).astype(np.float16 if dtype == "f16" else np.float32).astype(np.float64)


def call(fn, backend, *args, **kw):
    """fn on the named backend; skip where that backend says it cannot run the problem."""
    try:
        return fn(*args, backend=backend, **kw)
    except fw.FlashwattError as e:
        if e.status == fw.Status.ERR_UNSUPPORTED and backend != "auto":
            pytest.skip(f"{backend}: {e.message}")
        raise


# ---- the float64 reference ------------------------------------------------------------------------


def ref_seq(q, k, v, causal=False, window=None, scale=None):
    """One sequence: q (lq, H, D), k, v (lk, H_kv, D) -> o (lq, H, D), lse (H, lq), float64."""
    lq, H, D = q.shape
    if lq == 0:
        return np.zeros((0, H, D)), np.zeros((H, 0))
    if k.shape[0] == 0:
        return np.zeros((lq, H, D)), np.full((H, lq), -np.inf)
    o, lse = attention_ref(q.transpose(1, 0, 2)[None], k.transpose(1, 0, 2)[None], v.transpose(1, 0, 2)[None],
                           causal=causal, window=window, scale=scale)
    return o[0].transpose(1, 0, 2), lse[0]


def ref_packed(q, k, v, cu_q, cu_k, **kw):
    """Packed (total, H, D) sequences -> o (total_q, H, D), lse (H, total_q)."""
    outs = [ref_seq(q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]], **kw)
            for b in range(len(cu_q) - 1)]
    return np.concatenate([o for o, _ in outs]), np.concatenate([lse for _, lse in outs], axis=1)


def tol(dtype, v):
    """f32: 1e-5 * max|V|; f16 / bf16: the output's rounding (2^-11 / 2^-8 relative) plus slack."""
    vmax = float(np.nanmax(np.abs(v))) if np.size(v) else 1.0
    return {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[dtype] * max(vmax, 1.0) + 1e-6


def check(out, lse, ref_o, ref_lse, dtype, v):
    out = host(out)
    assert out.shape == ref_o.shape
    assert np.isfinite(out).all(), "a NaN or inf in the output: a masked or unused cache slot was read"
    err = np.abs(out - ref_o).max() if out.size else 0.0
    assert err <= tol(dtype, v), f"max |o - ref| = {err:.3g} > {tol(dtype, v):.3g}"
    if lse is not None:
        assert str(lse.dtype).endswith("float32"), lse.dtype
        lse = host(lse)
        assert lse.shape == ref_lse.shape
        fin = np.isfinite(ref_lse)
        assert np.array_equal(np.isfinite(lse), fin) and np.all(lse[~fin] == -np.inf), \
            "lse is -inf exactly where a row sees no key"
        if fin.any():
            lerr = np.abs(lse[fin] - ref_lse[fin]).max()
            assert lerr <= 2e-5 * (1 + np.abs(ref_lse[fin]).max()) + (1e-2 if dtype != "f32" else 0), lerr


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def rand(rng, *shape):
    return rng.standard_normal(shape)


MASKS = [(False, None), (True, None), (True, (6, 0)), (False, (4, 3))]


# ---- varlen -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("kind,backend", RUNS)
def test_varlen_ragged_batch(kind, backend, dtype):
    if dtype == "bf16" and kind != "cuda":
        pytest.skip("bfloat16 runs on the CUDA backends")
    rng = np.random.default_rng(1)
    # 0, 1, primes and one long sequence among short ones; keys fewer than queries in two of them
    # (causal then leaves the first rows with no key), and one query row with no key at all.
    lens_q = [0, 1, 2, 3, 5, 7, 11, 13, 1, 97]
    lens_k = [0, 1, 2, 5, 5, 7, 13, 3, 0, 131]
    cu_q, cu_k = offsets(lens_q), offsets(lens_k)
    D = 32
    for (H, Hkv), (causal, window) in zip([(4, 4), (4, 1), (6, 2), (4, 2)], MASKS):
        q, k, v = rand(rng, cu_q[-1], H, D), rand(rng, cu_k[-1], Hkv, D), rand(rng, cu_k[-1], Hkv, D)
        scale = 0.3 if window else None
        o, lse = call(fw.attention_varlen, backend, to(kind, q, dtype), to(kind, k, dtype), to(kind, v, dtype),
                      to(kind, cu_q), to(kind, cu_k), max(lens_q), max(lens_k), causal=causal, window=window,
                      scale=scale, return_lse=True)
        assert tuple(o.shape) == (cu_q[-1], H, D) and tuple(lse.shape) == (H, cu_q[-1])
        ro, rl = ref_packed(*(rounded(a, dtype) for a in (q, k, v)), cu_q, cu_k, causal=causal, window=window,
                            scale=scale)
        check(o, lse, ro, rl, dtype, v)
        assert np.all(host(o)[cu_q[8]] == 0) and np.all(host(lse)[:, cu_q[8]] == -np.inf)


@pytest.mark.parametrize("kind,backend", RUNS)
def test_varlen_strided_views_and_no_lse(kind, backend):
    """q, k, v split out of one packed qkv projection are taken with their strides."""
    rng = np.random.default_rng(2)
    lens = [3, 17, 1, 8]
    cu = offsets(lens)
    H, Hkv, D = 4, 2, 16
    qkv = to(kind, rand(rng, cu[-1], H + 2 * Hkv, D))
    q, k, v = qkv[:, :H], qkv[:, H:H + Hkv], qkv[:, H + Hkv:]
    o = call(fw.attention_varlen, backend, q, k, v, to(kind, cu), to(kind, cu), 17, 17, causal=True)
    ro, _ = ref_packed(host(q), host(k), host(v), cu, cu, causal=True)
    check(o, None, ro, None, "f32", host(v))


# ---- KV caches ----------------------------------------------------------------------------------------


def build_cache(rng, keys, values, capacity, page_size):
    """A cache holding each sequence's keys/values, every unused slot NaN: contiguous
    (B, capacity, H_kv, D) when page_size is None, else a page pool with a shuffled table and spare
    pages. Returns (k_cache, v_cache, block_table or None)."""
    B = len(keys)
    Hkv, D = keys[0].shape[1:]
    if page_size is None:
        kc, vc = np.full((B, capacity, Hkv, D), np.nan), np.full((B, capacity, Hkv, D), np.nan)
        for b in range(B):
            kc[b, :len(keys[b])], vc[b, :len(keys[b])] = keys[b], values[b]
        return kc, vc, None
    pages = math.ceil(capacity / page_size)
    num_pages = B * pages + 3
    table = rng.permutation(num_pages)[:B * pages].reshape(B, pages).astype(np.int32)
    kc, vc = np.full((num_pages, page_size, Hkv, D), np.nan), np.full((num_pages, page_size, Hkv, D), np.nan)
    for b in range(B):
        j = np.arange(len(keys[b]))
        kc[table[b, j // page_size], j % page_size] = keys[b]
        vc[table[b, j // page_size], j % page_size] = values[b]
    return kc, vc, table


def read_cache(cache, table, b, n):
    """The first n keys (or values) of sequence b."""
    if table is None:
        return cache[b, :n]
    j = np.arange(n)
    return cache[table[b, j // cache.shape[1]], j % cache.shape[1]]


PAGES = [pytest.param(None, id="contiguous"), pytest.param(1, id="page1"), pytest.param(16, id="page16")]


@pytest.mark.parametrize("append", [False, True], ids=["attend", "append"])
@pytest.mark.parametrize("page_size", PAGES)
@pytest.mark.parametrize("kind,backend", RUNS)
def test_kvcache_decode_and_multi_token(kind, backend, page_size, append):
    rng = np.random.default_rng(3)
    B, H, Hkv, D, capacity = 5, 4, 2, 32, 48
    cached = np.array([0, 1, 7, 13, 40], np.int32)
    for Lq, (causal, window) in zip([1, 3, 4, 2], MASKS):
        keys = [rand(rng, n, Hkv, D) for n in cached]
        values = [rand(rng, n, Hkv, D) for n in cached]
        kc, vc, table = build_cache(rng, keys, values, capacity, page_size)
        q, kn, vn = rand(rng, B, Lq, H, D), rand(rng, B, Lq, Hkv, D), rand(rng, B, Lq, Hkv, D)
        k_cache, v_cache = to(kind, kc), to(kind, vc)
        new = dict(k=to(kind, kn), v=to(kind, vn)) if append else {}
        o, lse = call(fw.attention_with_kvcache, backend, to(kind, q), k_cache, v_cache, to(kind, cached),
                      None if table is None else to(kind, table), causal=causal, window=window, return_lse=True,
                      **new)
        assert tuple(o.shape) == (B, Lq, H, D) and tuple(lse.shape) == (B, H, Lq)
        ro, rl = np.zeros((B, Lq, H, D)), np.zeros((B, H, Lq))
        for b in range(B):
            kb, vb = keys[b], values[b]
            if append:
                kb, vb = np.concatenate([kb, kn[b]]), np.concatenate([vb, vn[b]])
            ro[b], rl[b] = ref_seq(q[b], kb, vb, causal=causal, window=window)
        check(o, lse, ro, rl, "f32", vc[~np.isnan(vc)])
        # The cache: the new tokens at cache_seqlens, every other slot (NaN ones too) untouched.
        want_k, want_v = kc.copy(), vc.copy()
        if append:
            for b in range(B):
                j = cached[b] + np.arange(Lq)
                rows = (b, j) if table is None else (table[b, j // page_size], j % page_size)
                want_k[rows], want_v[rows] = kn[b], vn[b]
        assert np.array_equal(host(k_cache), rounded(want_k, "f32"), equal_nan=True)
        assert np.array_equal(host(v_cache), rounded(want_v, "f32"), equal_nan=True)


@pytest.mark.parametrize("page_size", PAGES)
@pytest.mark.parametrize("kind,backend", RUNS)
def test_kvcache_ragged_new_tokens(kind, backend, page_size):
    """Chunked prefill / speculative verification: packed new queries with cu_seqlens_q, GQA 4:1,
    a row-strided slice of a larger block table."""
    rng = np.random.default_rng(4)
    H, Hkv, D, capacity = 8, 2, 16, 64
    cached = np.array([4, 3, 0, 11, 20, 0], np.int32)
    new = [2, 0, 1, 5, 3, 7]
    cu = offsets(new)
    keys = [rand(rng, n, Hkv, D) for n in cached]
    values = [rand(rng, n, Hkv, D) for n in cached]
    kc, vc, table = build_cache(rng, keys, values, capacity, page_size)
    if table is not None:  # the table as a slice of a wider one: row stride > max_pages_per_seq
        wide = np.full((table.shape[0], table.shape[1] + 5), -7, np.int32)
        wide[:, :table.shape[1]] = table
    q, kn, vn = rand(rng, cu[-1], H, D), rand(rng, cu[-1], Hkv, D), rand(rng, cu[-1], Hkv, D)
    for causal, window in MASKS[:3]:
        bt = None if table is None else to(kind, wide)[:, :table.shape[1]]
        o, lse = call(fw.attention_with_kvcache, backend, to(kind, q), to(kind, kc), to(kind, vc), to(kind, cached),
                      bt, to(kind, kn), to(kind, vn), causal=causal, window=window, return_lse=True,
                      cu_seqlens_q=to(kind, cu), max_seqlen_q=max(new))
        assert tuple(o.shape) == (cu[-1], H, D) and tuple(lse.shape) == (H, cu[-1])
        cu_k = offsets(cached + np.array(new))
        kfull = np.concatenate([np.concatenate([keys[b], kn[cu[b]:cu[b + 1]]]) for b in range(len(new))])
        vfull = np.concatenate([np.concatenate([values[b], vn[cu[b]:cu[b + 1]]]) for b in range(len(new))])
        ro, rl = ref_packed(q, kfull, vfull, cu, cu_k, causal=causal, window=window)
        check(o, lse, ro, rl, "f32", vn)


@pytest.mark.parametrize("page_size", [None, 1, 16, 5], ids=["contiguous", "page1", "page16", "page5"])
@pytest.mark.parametrize("kind,backend", RUNS)
def test_appending_chunks_equals_one_forward(kind, backend, page_size):
    """A cache grown over many append calls of ragged chunks (decode steps among prefill chunks)
    gives, chunk by chunk, the rows of one causal forward over the whole sequences, and ends
    holding every key and value."""
    rng = np.random.default_rng(5)
    H, Hkv, D = 4, 2, 16
    totals = [23, 9, 31, 1]
    capacity = 32
    B = len(totals)
    q, k, v = (rand(rng, sum(totals), h, D) for h in (H, Hkv, Hkv))
    cu_full = offsets(totals)
    kc, vc, table = build_cache(rng, [k[:0]] * B, [v[:0]] * B, capacity, page_size)
    k_cache, v_cache = to(kind, kc), to(kind, vc)
    bt = None if table is None else to(kind, table)
    lens = to(kind, np.zeros(B, np.int32))
    done = np.zeros(B, np.int64)
    rows = [[] for _ in range(B)]
    while (done < totals).any():
        chunk = np.minimum(rng.choice([0, 1, 1, 2, 5, 8], size=B), np.array(totals) - done)
        if chunk.sum() == 0:
            continue
        take = [np.arange(cu_full[b] + done[b], cu_full[b] + done[b] + chunk[b]) for b in range(B)]
        sel = np.concatenate(take)
        o = call(fw.attention_with_kvcache, backend, to(kind, q[sel]), k_cache, v_cache, lens, bt,
                 to(kind, k[sel]), to(kind, v[sel]), cu_seqlens_q=to(kind, offsets(chunk)),
                 max_seqlen_q=int(chunk.max()))
        o = host(o)
        cu = offsets(chunk)
        for b in range(B):
            rows[b].append(o[cu[b]:cu[b + 1]])
        done += chunk
        lens[:] = to(kind, done.astype(np.int32))  # the caller advances cache_seqlens, in place
    chunked = np.concatenate([np.concatenate(r) for r in rows])
    whole = call(fw.attention_varlen, backend, to(kind, q), to(kind, k), to(kind, v), to(kind, cu_full),
                 to(kind, cu_full), max(totals), max(totals), causal=True)
    ro, _ = ref_packed(q, k, v, cu_full, cu_full, causal=True)
    check(chunked, None, ro, None, "f32", v)
    err = np.abs(chunked - host(whole)).max()
    assert err <= tol("f32", v), f"chunked appends differ from one forward by {err:.3g}"
    for b in range(B):
        assert np.array_equal(read_cache(host(k_cache), table, b, totals[b]), rounded(k[cu_full[b]:cu_full[b + 1]], "f32"))
        assert np.array_equal(read_cache(host(v_cache), table, b, totals[b]), rounded(v[cu_full[b]:cu_full[b + 1]], "f32"))


@pytest.mark.parametrize("kind,backend", RUNS)
def test_kvcache_page_size_256_and_shuffled_long_sequence(kind, backend):
    rng = np.random.default_rng(6)
    H, Hkv, D = 2, 1, 64
    cached = np.array([300, 2, 511], np.int32)
    keys = [rand(rng, n, Hkv, D) for n in cached]
    values = [rand(rng, n, Hkv, D) for n in cached]
    kc, vc, table = build_cache(rng, keys, values, 512, 256)
    q = rand(rng, 3, 1, H, D)
    o, lse = call(fw.attention_with_kvcache, backend, to(kind, q), to(kind, kc), to(kind, vc), to(kind, cached),
                  to(kind, table), return_lse=True)
    ro = np.stack([ref_seq(q[b], keys[b], values[b], causal=True)[0] for b in range(3)])
    rl = np.stack([ref_seq(q[b], keys[b], values[b], causal=True)[1] for b in range(3)])
    check(o, lse, ro, rl, "f32", vc[~np.isnan(vc)])


# ---- errors ---------------------------------------------------------------------------------------------


def _varlen_args(kind):
    rng = np.random.default_rng(7)
    cu = offsets([3, 4])
    return [to(kind, rand(rng, 7, 2, 8)), to(kind, rand(rng, 7, 2, 8)), to(kind, rand(rng, 7, 2, 8)),
            to(kind, cu), to(kind, cu), 4, 4]


def _cache_args(kind, paged=True):
    rng = np.random.default_rng(8)
    B, Hkv, D = 2, 2, 8
    if paged:
        kc, vc, table = to(kind, rand(rng, 6, 4, Hkv, D)), to(kind, rand(rng, 6, 4, Hkv, D)), np.array([[5, 1], [0, 3]], np.int32)
    else:
        kc, vc, table = to(kind, rand(rng, B, 8, Hkv, D)), to(kind, rand(rng, B, 8, Hkv, D)), None
    return dict(q=to(kind, rand(rng, B, 1, 4, D)), k_cache=kc, v_cache=vc, cache_seqlens=to(kind, np.array([3, 5], np.int32)),
                block_table=None if table is None else to(kind, table), k=to(kind, rand(rng, B, 1, Hkv, D)),
                v=to(kind, rand(rng, B, 1, Hkv, D)))


KINDS = ["numpy", pytest.param("torch", marks=needs_torch)]


@pytest.mark.parametrize("kind", KINDS)
def test_python_side_errors_name_the_argument(kind):
    a = _varlen_args(kind)

    def varlen(i, value, exc, match, **kw):
        args = list(a)
        args[i] = value
        with pytest.raises(exc, match=match):
            fw.attention_varlen(*args, **kw)

    varlen(3, to(kind, np.array([0, 3, 7], np.int64)), TypeError, "cu_seqlens_q must be int32")
    varlen(4, to(kind, np.array([0, 7], np.int32)), ValueError, r"cu_seqlens_k has 2 entries but must have 3 \(batch \+ 1 offsets, as cu_seqlens_q has for 2")
    varlen(3, to(kind, np.array([[0, 3, 7]], np.int32)), ValueError, "cu_seqlens_q must be 1-D")
    varlen(3, to(kind, np.array([0], np.int32)), ValueError, "cu_seqlens_q has 1 entries")
    varlen(3, to(kind, np.array([0, 9, 3, 9, 7, 9], np.int32))[::2], ValueError, "cu_seqlens_q must be contiguous")
    varlen(3, [0, 3, 7], TypeError, "cu_seqlens_q is a list")
    varlen(5, 1 << 63, ValueError, "max_seqlen_q")
    varlen(6, 2.0, TypeError, "max_seqlen_k must be an int")
    varlen(0, a[0][0], ValueError, "q must be 3-D")
    varlen(1, a[1].astype(np.float64) if kind == "numpy" else a[1].double(), TypeError, "k is")
    varlen(0, a[0], ValueError, r"window\[1\]", window=(1, -(1 << 63) - 1))
    with pytest.raises(ValueError, match="scale=0"):
        fw.attention_varlen(*a, scale=0.0)
    other = "torch" if kind == "numpy" else "numpy"
    if torch is not None:
        varlen(4, to(other, np.array([0, 3, 7], np.int32)), TypeError, "cu_seqlens_k is a")

    c = _cache_args(kind)

    def cache(exc, match, **change):
        kw = dict(c, **change)
        with pytest.raises(exc, match=match):
            fw.attention_with_kvcache(**kw)

    cache(ValueError, r"cache_seqlens has 3 entries but must have 2 \(the tokens cached in each of the batch's 2", cache_seqlens=to(kind, np.array([1, 2, 3], np.int32)))
    cache(TypeError, "cache_seqlens must be int32", cache_seqlens=to(kind, np.array([1, 2], np.int64)))
    cache(TypeError, "block_table must be int32", block_table=to(kind, np.array([[5, 1], [0, 3]], np.int64)))
    cache(ValueError, "block_table has 1 rows but the batch has 2", block_table=to(kind, np.array([[5, 1]], np.int32)))
    cache(ValueError, "block_table must be 2-D", block_table=to(kind, np.array([5, 1], np.int32)))
    cache(ValueError, "block_table rows must be contiguous", block_table=to(kind, np.array([[5, 1], [0, 3]], np.int32)).T)
    cache(ValueError, "k and v", v=None)
    cache(ValueError, "cu_seqlens_q and max_seqlen_q go together", max_seqlen_q=3)
    cache(ValueError, "q must be 4-D", q=c["q"][:, 0])
    cache(ValueError, "k_cache must have head_dim stride 1", k_cache=to(kind, np.zeros((6, 4, 2, 16)))[..., ::2])
    if kind == "numpy":
        ro = c["k_cache"].copy()
        ro.flags.writeable = False
        cache(ValueError, "k_cache is read-only", k_cache=ro)


@pytest.mark.parametrize("kind", KINDS)
def test_library_errors_name_the_argument_and_write_nothing(kind):
    a = _varlen_args(kind)

    def varlen(i, value, match):
        args = list(a)
        args[i] = to(kind, np.array(value, np.int32))
        with pytest.raises(fw.FlashwattError, match=match) as e:
            fw.attention_varlen(*args)
        return e.value

    assert varlen(3, [0, 4, 3], "cu_seqlens_q").status == fw.Status.ERR_INVALID_VALUE  # decreasing
    varlen(4, [0, 3, 6], "cu_seqlens_k")  # last offset is not total_k
    varlen(3, [1, 3, 7], "cu_seqlens_q")  # not starting at 0
    with pytest.raises(fw.FlashwattError, match="max_seqlen_q"):
        fw.attention_varlen(*a[:5], 3, 4)  # a sequence of 4 queries above max_seqlen_q

    c = _cache_args(kind)
    before = host(c["k_cache"]).copy(), host(c["v_cache"]).copy()

    def cache(match, **change):
        with pytest.raises(fw.FlashwattError, match=match):
            fw.attention_with_kvcache(**dict(c, **change))
        assert np.array_equal(host(c["k_cache"]), before[0]) and np.array_equal(host(c["v_cache"]), before[1]), \
            "a refused call wrote into the cache"

    cache("capacity", cache_seqlens=to(kind, np.array([3, 8], np.int32)))  # 8 + 1 new > 2 pages x 4
    cache("block_table", block_table=to(kind, np.array([[5, 1], [6, 3]], np.int32)))  # page 6 of 6
    cache("block_table", block_table=to(kind, np.array([[-1, 1], [0, 3]], np.int32)))
    cache("seqlens", cache_seqlens=to(kind, np.array([-1, 2], np.int32)))
    cache("page_size", k_cache=c["k_cache"][:, :0], v_cache=c["v_cache"][:, :0])
    cache("page_size", k_cache=to(kind, np.zeros((2, 257, 2, 8))), v_cache=to(kind, np.zeros((2, 257, 2, 8))))
    flat = _cache_args(kind, paged=False)
    with pytest.raises(fw.FlashwattError, match="capacity"):
        fw.attention_with_kvcache(**dict(flat, cache_seqlens=to(kind, np.array([8, 0], np.int32))))


def test_context_serving_settings(fw):
    ctx = fw.Context(backend="cpu-ref")
    assert ctx.workspace is None and ctx.check_device_values is False
    ctx.check_device_values = True
    assert ctx.check_device_values is True
    with pytest.raises(TypeError, match="check_device_values"):
        ctx.check_device_values = 1
    n = ctx.workspace_size(8, 32, 8, 128, 1, 4096, dtype="bf16", device="cpu")
    assert isinstance(n, int) and n >= 0
    for dt in ("float16", np.float32, "torch.bfloat16"):
        ctx.workspace_size(1, 1, 1, 64, 1, 16, dtype=dt, device="cpu")
    with pytest.raises(ValueError, match="dtype"):
        ctx.workspace_size(1, 1, 1, 64, 1, 16, dtype="int8")
    with pytest.raises(ValueError, match="max_seqlen_k"):
        ctx.workspace_size(1, 1, 1, 64, 1, 1 << 64, dtype="f16")
    with pytest.raises(ValueError, match="device"):
        ctx.workspace_size(1, 1, 1, 64, 1, 16, dtype="f16", device="tpu")
    ctx.set_workspace(None)
    with pytest.raises(TypeError, match="workspace must be a CUDA torch tensor"):
        ctx.set_workspace(np.zeros(16, np.uint8))
    # The context's methods are the module functions on that context.
    args = _varlen_args("numpy")
    o = ctx.attention_varlen(*args, causal=True)
    assert ctx.last_backend == "cpu-ref"
    np.testing.assert_array_equal(o, fw.attention_varlen(*args, causal=True, backend="cpu-ref"))
    c = _cache_args("numpy", paged=False)
    ctx.attention_with_kvcache(c["q"], c["k_cache"], c["v_cache"], c["cache_seqlens"])
    assert ctx.last_backend == "cpu-ref"


@needs_torch
def test_torch_refuses_to_silently_drop_gradients():
    """The KV-cache call has no backward: inputs that require grad are refused, not silently cut off
    (the ragged call's backward is test_varlen_backward.py)."""
    c = _cache_args("torch", paged=False)
    c["q"].requires_grad_(True)
    with pytest.raises(NotImplementedError, match="no backward pass.*q requires grad"):
        fw.attention_with_kvcache(**c)
    with torch.no_grad():
        fw.attention_with_kvcache(**c)


# ---- CUDA: against the CPU result, and graph capture ------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("page_size", [None, 16, 1], ids=["contiguous", "page16", "page1"])
def test_cuda_decode_matches_the_cpu(dtype, page_size):
    """GPU decode shapes (GQA 8:1, head_dim 128, long and short sequences) against the CPU backends
    on the same (rounded) values."""
    rng = np.random.default_rng(9)
    B, H, Hkv, D, capacity = 6, 16, 2, 128, 1024
    cached = np.array([1000, 0, 1, 37, 512, 257], np.int32)
    keys = [rand(rng, n, Hkv, D) for n in cached]
    values = [rand(rng, n, Hkv, D) for n in cached]
    kc, vc, table = build_cache(rng, keys, values, capacity, page_size)
    q, kn, vn = rand(rng, B, 1, H, D), rand(rng, B, 1, Hkv, D), rand(rng, B, 1, Hkv, D)
    bt = None if table is None else to("cuda", table)
    kc_gpu, vc_gpu = to("cuda", kc, dtype), to("cuda", vc, dtype)
    o, lse = fw.attention_with_kvcache(to("cuda", q, dtype), kc_gpu, vc_gpu, to("cuda", cached), bt,
                                       to("cuda", kn, dtype), to("cuda", vn, dtype), return_lse=True)
    r = lambda a: to("torch", rounded(a, dtype))  # noqa: E731  the CPU gets the GPU's input values in f32
    kc_cpu, vc_cpu = r(kc), r(vc)
    o_cpu, lse_cpu = fw.attention_with_kvcache(r(q), kc_cpu, vc_cpu, to("torch", cached),
                                               None if table is None else to("torch", table), r(kn), r(vn),
                                               return_lse=True)
    check(o, lse, host(o_cpu), host(lse_cpu), dtype, vn)
    assert np.array_equal(host(kc_gpu), host(kc_cpu), equal_nan=True)
    assert np.array_equal(host(vc_gpu), host(vc_cpu), equal_nan=True)


@needs_cuda
def test_cuda_graph_capture_replays_with_new_lengths_and_table():
    """attention_with_kvcache captured once in a torch.cuda.graph, replayed after cache_seqlens, the
    block table, the queries and the new tokens changed in place: each replay equals an eager CPU call
    on the values of that moment. Host synchronisation inside the call fails the capture; torch's sync
    debug mode catches one made through torch."""
    rng = np.random.default_rng(10)
    dtype = "bf16"
    B, H, Hkv, D, ps, pages = 4, 8, 2, 64, 16, 8
    capacity, num_pages = ps * pages, B * pages + 4
    kc = to("cuda", rand(rng, num_pages, ps, Hkv, D), dtype)
    vc = to("cuda", rand(rng, num_pages, ps, Hkv, D), dtype)
    table = to("cuda", rng.permutation(num_pages)[:B * pages].reshape(B, pages).astype(np.int32))
    lens = to("cuda", np.array([5, 17, 0, 60], np.int32))
    q, kn, vn = (to("cuda", rand(rng, B, 1, h, D), dtype) for h in (H, Hkv, Hkv))
    ctx = fw.Context()
    nbytes = ctx.workspace_size(B, H, Hkv, D, 1, capacity, dtype=torch.bfloat16, device=q.device)
    ctx.set_workspace(torch.empty(nbytes, dtype=torch.uint8, device=q.device))

    def step():
        return fw.attention_with_kvcache(q, kc, vc, lens, table, kn, vn, context=ctx)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch's recipe does
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.set_sync_debug_mode("error")  # a synchronising torch op in the binding's path raises
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for new_lens in ([9, 0, 127, 33], [1, 64, 5, 100], [0, 0, 0, 0]):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        table.copy_(torch.from_numpy(rng.permutation(num_pages)[:B * pages].reshape(B, pages).astype(np.int32)))
        for t in (q, kn, vn):
            t.copy_(torch.randn(t.shape, dtype=torch.float32).to(t.dtype))
        cpu = [t.cpu().float() if t.is_floating_point() else t.cpu() for t in (q, kc, vc, lens, table, kn, vn)]
        graph.replay()
        want = fw.attention_with_kvcache(*cpu)  # appends into cpu[1], cpu[2] as the replay does on the GPU
        torch.cuda.synchronize()
        check(out, None, host(want), None, dtype, host(vn))
        assert torch.equal(kc.cpu().float(), cpu[1]) and torch.equal(vc.cpu().float(), cpu[2])
