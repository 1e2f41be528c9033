/* The online softmax (base 2) of FlashAttention: per query row a running max m and sum l; each key tile's
 * scores are exponentiated against the new max, and what was accumulated before (l and the output row) is
 * rescaled by alpha = exp2(m_old - m_new) (in log2 units). At the end O / l is the output and the row's
 * log-sum-exp follows from m and l.
 *
 * One row step, softmax_row, serves every kernel; what differs between them is a parameter:
 *   - the score domain: raw_scores (the 16-bit kernels: S as computed, scale·log2 e applied in the exponent
 *     with one fma, m in S's units) or log2_scores (the f32 kernels: Q or S pre-scaled, m in log2 units);
 *   - the layout: a row is pairs of an accumulator fragment (mma.sync / wgmma: rows g and g + 8 of an m16
 *     tile over the 4 lanes of a quad; softmax_m16, softmax_update) or single elements over 8 lanes (the f32
 *     CUDA-core kernel);
 *   - the order of the max and the sum (row_order below): each kernel keeps the one it was tuned with; they
 *     agree to rounding, and another order is other machine code.
 * What happens to the output's rescale is a policy (rescale_rows: at once; keep_alphas: later, once the
 * wgmma products that write the accumulator retired). softmax_combine merges two partial states of a row
 * (split-KV), and each domain has its final 1/l and LSE. */
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

/* x reduced over the LANES consecutive lanes (2, 4, 8 or 16) that hold one row. Written out rather than as a loop:
 * a loop to unroll inside the f32 kernels' epilogue changed how the compiler unrolled that epilogue (the same
 * instructions in another order). */
template <int LANES> __device__ __forceinline__ float row_allreduce_max(float x)
{
    static_assert(LANES == 2 || LANES == 4 || LANES == 8 || LANES == 16, "a row over 2 to 16 lanes");
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    if (LANES > 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    if (LANES > 4) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
    if (LANES > 8) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
    return x;
}
template <int LANES> __device__ __forceinline__ float row_allreduce_sum(float x)
{
    static_assert(LANES == 2 || LANES == 4 || LANES == 8 || LANES == 16, "a row over 2 to 16 lanes");
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    if (LANES > 2) x += __shfl_xor_sync(0xffffffffu, x, 2);
    if (LANES > 4) x += __shfl_xor_sync(0xffffffffu, x, 4);
    if (LANES > 8) x += __shfl_xor_sync(0xffffffffu, x, 8);
    return x;
}

/* Scores as computed (S = Q Kᵀ): the exponent is S·scale_log2 - m·scale_log2, one fma an element. A row that
 * saw no key keeps m = -inf and exponentiates against 0. */
struct raw_scores {
    float scale_log2;
    __device__ __forceinline__ float offset(float mx) const { return mx == -INFINITY ? 0.f : mx * scale_log2; }
    __device__ __forceinline__ float alpha(float m_old, float off) const { return fast_exp2(m_old * scale_log2 - off); }
    __device__ __forceinline__ float p(float s, float off) const { return fast_exp2(fmaf(s, scale_log2, -off)); }
};
/* Scores already in log2 units (Q or S multiplied by scale·log2 e before). */
struct log2_scores {
    __device__ __forceinline__ float offset(float mx) const { return mx == -INFINITY ? 0.0f : mx; }
    __device__ __forceinline__ float alpha(float m_old, float off) const { return fast_exp2(m_old - off); }
    __device__ __forceinline__ float p(float s, float off) const { return fast_exp2(s - off); }
    /* The f32 kernels' final step: 1/l (0 for a row that saw no key, NaN kept), the LSE in natural units. */
    static __device__ __forceinline__ bool live(float l) { return l > 0.0f || l != l; }
    static __device__ __forceinline__ float inv_sum(float l, bool live) { return live ? 1.0f / l : 0.0f; }
    static __device__ __forceinline__ float lse(float m, float l, bool live)
    {
        return live ? (m == -INFINITY ? 0.0f : m) * 0.69314718055994531f + logf(l) : -INFINITY;
    }
};

/* The order of a row step: MAX_FROM_RUNNING, the tile's max starts from the running max (else from the tile's
 * first element or pair, and the running max joins after the lanes' reduction); PAIRED_SUM, the row sum adds a
 * fragment's pair first (x0 + x1), else element by element. */
struct row_order_running_max {      /* the 16-bit forward */
    static constexpr bool MAX_FROM_RUNNING = true, PAIRED_SUM = false;
};
struct row_order_running_max_pairs { /* the f32 wgmma kernels */
    static constexpr bool MAX_FROM_RUNNING = true, PAIRED_SUM = true;
};
struct row_order_tile_max_pairs {    /* the f32 mma.sync kernel */
    static constexpr bool MAX_FROM_RUNNING = false, PAIRED_SUM = true;
};
struct row_order_tile_max {          /* the f32 CUDA-core kernel (single elements) */
    static constexpr bool MAX_FROM_RUNNING = false, PAIRED_SUM = false;
};

/* One row's step over the N scores this thread holds, x(0) .. x(N-1) (a functor giving a float&), in groups of
 * GROUP (2: a fragment's pair, 1: single elements), the row spread over LANES lanes: the running max m and
 * this thread's partial sum l are updated, the scores become P in place; returns the rescale alpha. */
template <int N, int GROUP, int LANES, class Order, class Dom, class X>
__device__ __forceinline__ float softmax_row(float &m, float &l, const Dom &dom, X &&x)
{
    static_assert(GROUP == 1 || GROUP == 2, "a row is single elements or a fragment's pairs");
    auto group_max = [&](int j) { return GROUP == 2 ? fmaxf(x(2 * j), x(2 * j + 1)) : x(j); };
    float mx = Order::MAX_FROM_RUNNING ? m : group_max(0);
#pragma unroll
    for (int j = Order::MAX_FROM_RUNNING ? 0 : 1; j < N / GROUP; j++) mx = fmaxf(mx, group_max(j));
    mx = row_allreduce_max<LANES>(mx);
    if (!Order::MAX_FROM_RUNNING) mx = fmaxf(m, mx);
    const float off = dom.offset(mx);
    const float alpha = dom.alpha(m, off);
    m = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < N / GROUP; j++) {
        if (GROUP == 2 && Order::PAIRED_SUM) {
            x(2 * j) = dom.p(x(2 * j), off);
            x(2 * j + 1) = dom.p(x(2 * j + 1), off);
            sum += x(2 * j) + x(2 * j + 1);
        } else {
#pragma unroll
            for (int e = 0; e < GROUP; e++) {
                const float v = dom.p(x(GROUP * j + e), off);
                x(GROUP * j + e) = v;
                sum += v;
            }
        }
    }
    l = l * alpha + sum;
    return alpha;
}

/* The two rows (g, g + 8) of one m16 tile of scores s (NN n8 tiles in the mma C layout, masked: -inf where
 * invisible), each over the 4 lanes of a quad; rescale.keep(mt, r, alpha) once the row's statistics are new,
 * then rescale.apply(mt, r, alpha). mt: the tile's index for the policy. */
template <class Order, int NN, class Dom, class Rescale>
__device__ __forceinline__ void softmax_m16(float (&m)[2], float (&l)[2], float (&s)[NN][4], const Dom &dom,
                                            const Rescale &rescale, int mt)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float alpha =
            softmax_row<2 * NN, 2, 4, Order>(m[r], l[r], dom, [&](int i) -> float & { return s[i >> 1][r * 2 + (i & 1)]; });
        rescale.keep(mt, r, alpha);
        rescale.apply(mt, r, alpha);
    }
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
/* The 16-bit forward's step: one tile of raw scores s (MT x NN n8 tiles, masked) becomes P in place; the rows'
 * rescale factors go to rescale (rescale_rows or keep_alphas below). O is rescaled on every tile: skipping the
 * rescale when no row max moved (a warp vote) measured 3-8% slower on H200. P: kernel parameters with
 * scale_log2. */
template <int MT, int NN, class P, class Rescale>
__device__ __forceinline__ void softmax_update(float (&row_m)[MT][2], float (&row_l)[MT][2], float (&s)[MT][NN][4],
                                               const P &p, const Rescale &rescale)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        softmax_m16<row_order_running_max>(row_m[mt], row_l[mt], s[mt], raw_scores{p.scale_log2}, rescale, mt);
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

/* What a row step does with the rescale alpha of row (mt, r): keep(mt, r, alpha) as soon as it is known,
 * apply(mt, r, alpha) then. rescale_rows rescales an accumulator of ND n8 tiles per m16 tile at once
 * (mma.sync: the products are done); keep_alphas keeps the factors of one m16 tile's two rows for the caller,
 * who rescales once the wgmma products that write the accumulator have retired. */
template <int MT, int ND> struct rescale_rows {
    float (&o)[MT][ND][4];
    __device__ __forceinline__ void keep(int, int, float) const {}
    __device__ __forceinline__ void apply(int mt, int r, float alpha) const
    {
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[mt][j][r * 2] *= alpha;
            o[mt][j][r * 2 + 1] *= alpha;
        }
    }
};
struct keep_alphas {
    float (&alpha)[2];
    __device__ __forceinline__ void keep(int, int r, float a) const { alpha[r] = a; }
    __device__ __forceinline__ void apply(int, int, float) const {}
};

/* Split-KV: row state (m, l) and another key range's (m2, l2) of the same row merged into (m, l), both rescaled
 * to the larger max; a1 and a2 rescale the two ranges' outputs (O = O a1 + O2 a2). */
template <class Dom>
__device__ __forceinline__ void softmax_combine(const Dom &dom, float &m, float &l, float m2, float l2, float &a1, float &a2)
{
    const float mx = fmaxf(m, m2);
    const float off = dom.offset(mx);
    a1 = dom.alpha(m, off);
    a2 = dom.alpha(m2, off);
    l = l * a1 + l2 * a2;
    m = mx;
}

} /* namespace fwparts */
#endif
