/* The online softmax (base 2) of FlashAttention: per query row a running max m and sum l; each key tile's
 * scores are exponentiated against the new max, and what was accumulated before (l and the output row) is
 * rescaled by alpha = exp2((m_old - m_new) · scale · log2 e). At the end O / l is the output and
 * m · scale + log l the row's log-sum-exp.
 *
 * softmax_update runs it on the mma/wgmma accumulator layout (mma.cuh: MT m16 tiles, rows g and g + 8 of
 * each, a row over the 4 lanes of a quad), with the statistics in the caller's arrays (a kernel's registers,
 * or an online_softmax) and the output's rescale left to a policy (rescale at once, or keep the factors for
 * later). The row operations around it take plain floats and a lane count (row_allreduce_*, the final 1/l
 * and LSE), so that the f32 CUDA-core kernels, whose rows lie over 8 threads with their own element walk,
 * can take the same steps. */
#ifndef FW_PARTS_SOFTMAX_CUH
#define FW_PARTS_SOFTMAX_CUH

#include <math.h>

namespace fwparts {

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* x reduced over the LANES consecutive lanes (a power of 2) that hold one row. */
template <int LANES> __device__ __forceinline__ float row_allreduce_max(float x)
{
#pragma unroll
    for (int o = 1; o < LANES; o *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
template <int LANES> __device__ __forceinline__ float row_allreduce_sum(float x)
{
#pragma unroll
    for (int o = 1; o < LANES; o *= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* 1 / l for the output row: 0 for a row that saw no key (l = 0), NaN kept (a NaN input reached it). */
__device__ __forceinline__ float softmax_inv_sum(float l) { return l > 0.f ? 1.f / l : (l == l ? 0.f : l); }

/* The row's log-sum-exp in natural units (p.scale: the score scale): -inf for a row that saw no key. */
template <class P> __device__ __forceinline__ float softmax_lse(const P &p, float m, float l)
{
    float lse;
    if (l > 0.f)
        lse = m * p.scale + logf(l);
    else
        lse = l == l ? -INFINITY : l;
    return lse;
}

/* The online softmax on a warp's rows in the accumulator layout: MT m16 tiles, 2 rows each (g, g + 8), each
 * row over the 4 lanes of a quad. row_m is the row's running max; row_l this thread's partial sum (its
 * columns): the quad's sum is taken once, at the end (softmax_row_sum). The statistics are the caller's
 * arrays (an online_softmax below, or a kernel's own registers). */
template <int MT> __device__ __forceinline__ void softmax_init(float (&row_m)[MT][2], float (&row_l)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_m[mt][r] = -INFINITY;
            row_l[mt][r] = 0.f;
        }
}
/* One tile of scores s (MT x NN n8 tiles, masked: -inf where invisible) becomes P in place; the rows' rescale
 * factors go to rescale (rescale_rows or keep_alphas below). O is rescaled on every tile: skipping the rescale
 * when no row max moved (a warp vote) measured 3-8% slower on H200. P: kernel parameters with scale_log2. */
template <int MT, int NN, class P, class Rescale>
__device__ __forceinline__ void softmax_update(float (&row_m)[MT][2], float (&row_l)[MT][2], float (&s)[MT][NN][4],
                                               const P &p, const Rescale &rescale)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = row_m[mt][r];
#pragma unroll
            for (int j = 0; j < NN; j++) mx = fmaxf(mx, fmaxf(s[mt][j][r * 2], s[mt][j][r * 2 + 1]));
            mx = row_allreduce_max<4>(mx);
            const float msc = mx == -INFINITY ? 0.f : mx * p.scale_log2;
            const float alpha = fast_exp2(row_m[mt][r] * p.scale_log2 - msc);
            rescale.keep(mt, r, alpha);
            row_m[mt][r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float v = fast_exp2(fmaf(s[mt][j][r * 2 + e], p.scale_log2, -msc));
                    s[mt][j][r * 2 + e] = v;
                    sum += v;
                }
            row_l[mt][r] = row_l[mt][r] * rescale.kept(mt, r, alpha) + sum;
            rescale.apply(mt, r, alpha);
        }
}
/* The full sum of row (mt, r), over its quad. */
template <int MT> __device__ __forceinline__ float softmax_row_sum(const float (&row_l)[MT][2], int mt, int r)
{
    return row_allreduce_sum<4>(row_l[mt][r]);
}

/* The backward recomputes P from the forward's statistics instead of storing it: with lse2 = LSE · log2 e
 * (softmax_lse2; +inf for a row that saw no key, so that its P is 0), P = exp2(s · scale · log2 e − lse2), and
 * the softmax's gradient dS = P ∘ (dP − Δ), Δ = rowsum(dO ∘ O). */
__device__ __forceinline__ float softmax_lse2(float lse) { return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f; }
__device__ __forceinline__ float softmax_recompute_p(float s, float scale_log2, float lse2)
{
    return fast_exp2(fmaf(s, scale_log2, -lse2));
}
__device__ __forceinline__ float softmax_grad(float p, float dp, float delta) { return p * (dp - delta); }

/* The statistics in one place, for callers that keep a warpgroup's state in one struct. */
template <int MT> struct online_softmax {
    float row_m[MT][2], row_l[MT][2];
    __device__ __forceinline__ void init() { softmax_init(row_m, row_l); }
};

/* What softmax_update does with the rescale alpha of row (mt, r): keep(mt, r, alpha) as soon as it is known,
 * kept(mt, r, alpha) the value the row sum is then rescaled by, apply(mt, r, alpha) once the row's statistics
 * are updated. rescale_rows rescales an accumulator of ND n8 tiles per m16 tile at once (mma.sync: the
 * products are done); keep_alphas keeps the factors for the caller, who rescales once the wgmma products that
 * write the accumulator have retired. */
template <int MT, int ND> struct rescale_rows {
    float (&o)[MT][ND][4];
    __device__ __forceinline__ void keep(int, int, float) const {}
    __device__ __forceinline__ float kept(int, int, float alpha) const { return alpha; }
    __device__ __forceinline__ void apply(int mt, int r, float alpha) const
    {
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[mt][j][r * 2] *= alpha;
            o[mt][j][r * 2 + 1] *= alpha;
        }
    }
};
/* One m16 tile's two rows (wgmma consumers: one m16 tile a warp). */
struct keep_alphas {
    float (&alpha)[2];
    __device__ __forceinline__ void keep(int, int r, float a) const { alpha[r] = a; }
    __device__ __forceinline__ float kept(int, int r, float) const { return alpha[r]; }
    __device__ __forceinline__ void apply(int, int, float) const {}
};

} /* namespace fwparts */
#endif
