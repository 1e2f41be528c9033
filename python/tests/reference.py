"""Float64 NumPy reference of flashwatt's attention (the contract of include/flashwatt.h)."""
import numpy as np


def visible_mask(lq, lk, causal=False, window=None):
    """(lq, lk) bool: query i sees key j, bottom-right aligned (FlashAttention's convention)."""
    left, right = (-1, -1) if window is None else tuple(-1 if w is None else w for w in window)
    if causal and (right < 0 or right > 0):
        right = 0
    i = np.arange(lq)[:, None] + (lk - lq)
    j = np.arange(lk)[None, :]
    m = np.ones((lq, lk), dtype=bool)
    if left >= 0:
        m &= j >= i - left
    if right >= 0:
        m &= j <= i + right
    return m


def attention_ref(q, k, v, causal=False, scale=None, window=None):
    """q: (B, H, Lq, D); k, v: (B, Hkv, Lk, D), any float dtype -> (o, lse) in float64.
    Rows that see no key: o = 0, lse = -inf."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    B, H, Lq, D = q.shape
    group = H // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    s = scale * np.einsum("bhid,bhjd->bhij", q, k)
    m = visible_mask(Lq, k.shape[2], causal, window)
    s = np.where(m, s, -np.inf)
    rowmax = s.max(axis=-1, keepdims=True)
    empty = ~m.any(axis=-1)  # (Lq,)
    rowmax = np.where(np.isfinite(rowmax), rowmax, 0.0)
    p = np.exp(s - rowmax)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.einsum("bhij,bhjd->bhid", p, v) / l
        lse = (rowmax + np.log(l))[..., 0]
    o[:, :, empty, :] = 0.0
    lse[:, :, empty] = -np.inf
    return o, lse


def attention_backward_ref(q, k, v, dout, causal=False, scale=None, window=None):
    """Float64 gradients (dq, dk, dv) of attention_ref for dL/dO = dout; dk, dv summed over each
    kv group (GQA)."""
    q, k, v, dout = (np.asarray(a, dtype=np.float64) for a in (q, k, v, dout))
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    group = H // Hkv
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    m = visible_mask(Lq, Lk, causal, window)
    s = np.where(m, scale * np.einsum("bhid,bhjd->bhij", q, kr), -np.inf)
    rowmax = s.max(axis=-1, keepdims=True)
    rowmax = np.where(np.isfinite(rowmax), rowmax, 0.0)
    p = np.exp(s - rowmax)
    l = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, l, out=np.zeros_like(p), where=l > 0)
    o = np.einsum("bhij,bhjd->bhid", p, vr)
    dv = np.einsum("bhij,bhid->bhjd", p, dout)
    dp = np.einsum("bhid,bhjd->bhij", dout, vr)
    ds = p * (dp - (dout * o).sum(axis=-1, keepdims=True))
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kr)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q)
    dk = dk.reshape(B, Hkv, group, Lk, D).sum(axis=2)
    dv = dv.reshape(B, Hkv, group, Lk, D).sum(axis=2)
    return dq, dk, dv
