/* One warpgroup's 64 query rows in the Hopper f32 kernels (a warp: rows wrow0 + g, wrow0 + g + 8): Q and P as split
 * A fragments, the S and O accumulators, the rows' running max and sum; their products, online softmax (softmax.cuh,
 * in log2 units), split-KV partials and epilogue (epilogue.cuh). Per key tile:
 *   S(t) = Q K(t)ᵀ          3 wgmma per k8 step (small·big, big·small, big·big), tf32: 1
 *   O += P(t-1) V(t-1)      the same, B = Vᵀ(t-1)
 *   wait S(t); online softmax; wait P·V; rescale O; P(t) to A fragments.
 * P's A fragment is S's accumulator as it is: split K's rows are permuted (wg_tiles.cuh). */
#ifndef FW_F32_WG_ROWS_CUH
#define FW_F32_WG_ROWS_CUH

#include <math.h>
#include "backends/cuda/f32/block.cuh"
#include "backends/cuda/f32/wg_tiles.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "backends/cuda/parts/tf32.cuh"

namespace fwf32 {

/* d (+)= A · B over a 64-key (or 64-column) tile: B big, its small part PART bytes on (wg_tiles.cuh). */
template <class P>
__device__ __forceinline__ void wg_gemm(float (&d)[8][4], const uint32_t (&ab)[8][4], const uint32_t (&as)[8][4], uint64_t b,
                                        int acc)
{
    fwparts::wgmma_split_k64<P, wg_geom<P>::PART>(d, ab, as, b, acc);
}

/* FRESH_PV: each key tile's P·V is summed in its own accumulator and added to O in f32. The tensor cores'
 * accumulation does not round to nearest; over 256 k8 steps x 3 products into O (L = 2048) 3xtf32 erred 1.2e-5
 * on some inputs. 32 more registers: the warp-specialised kernel has them, the two-warpgroup kernel not. */
template <class P, bool FRESH_PV = false> struct wg_rows {
    uint32_t qb[8][4], qs[8][4], pb[8][4], ps[8][4];
    float o[8][4], s[8][4], m[2], l[2];
    float pv[FRESH_PV ? 8 : 1][4];
    int wrow0, g, t4; /* the warp's first row in the block, lane / 4, lane % 4 (parts/mma.cuh's frag_coord) */

    __device__ __forceinline__ void init(int wrow, int lane)
    {
        wrow0 = wrow;
        g = lane >> 2;
        t4 = lane & 3;
#pragma unroll
        for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        reset();
    }
    /* O, the running maxima and sums (and the P·V accumulator): a new set of rows */
    __device__ __forceinline__ void reset()
    {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            m[rr] = -INFINITY;
            l[rr] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        if constexpr (FRESH_PV) {
#pragma unroll
            for (int j = 0; j < 8; j++) pv[j][0] = pv[j][1] = pv[j][2] = pv[j][3] = 0.0f;
        }
    }
    /* S = Q K(t)ᵀ: issued and committed, not waited for. */
    __device__ __forceinline__ void issue_s(uint64_t k) { wg_gemm<P>(s, qb, qs, k, 0); }
    /* O (+)= P·V of one key tile: issued and committed, not waited for. */
    __device__ __forceinline__ void issue_pv(uint64_t v)
    {
        if constexpr (FRESH_PV) wg_gemm<P>(pv, pb, ps, v, 0);
        else wg_gemm<P>(o, pb, ps, v, 1);
    }
    /* The last tile's P·V retired. */
    __device__ __forceinline__ void finish_pv()
    {
        if constexpr (FRESH_PV) {
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[j][e] += pv[j][e];
        }
    }
    __device__ __forceinline__ void fence_pv() /* after the wait for a P·V product */
    {
        if constexpr (FRESH_PV) fwparts::wgmma_reg_fence(pv);
        else fwparts::wgmma_reg_fence(o);
    }
    /* Q's A fragments, split; at(r, c): row r, column c of the warpgroup's tile, pre-scaled by scale·log2 e */
    template <typename At> __device__ __forceinline__ void take_q(At at)
    {
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = wrow0 + g + 8 * (e & 1), c = 8 * kk + t4 + 4 * (e >> 1);
                fwparts::split_truncated<P>(at(r, c), qb[kk][e], qs[kk][e]);
            }
    }
    /* from a row-major tile: row r, column c at q[r * rs + c]; rows >= rows and columns >= D read as 0 */
    __device__ __forceinline__ void load_q(const float *q, long long rs, int rows, int D, float sc)
    {
        take_q([&](int r, int c) { return r < rows && c < D ? q[r * rs + c] * sc : 0.0f; });
    }
    /* from a staged 128 x 64 tile (the persistent kernel's, zero-filled past the rows and D): 16-byte chunk c of
     * row r at chunk c ^ (r % 8), so that a warp's 8 rows x 4 columns hit 32 banks */
    __device__ __forceinline__ void load_q_staged(const float *q, float sc)
    {
        take_q([&](int r, int c) { return q[r * 64 + (((c >> 2) ^ (r & 7)) << 2) + (c & 3)] * sc; });
    }
    /* Mask (tiles on the band's edge: the rows' key ranges computed there, not kept in registers), online
     * softmax of S in place (keys from n0); alpha: the rescale of O. */
    __device__ __forceinline__ void softmax(const fw_f32_params &a, int m0, int n0, bool edge, float (&alpha)[2])
    {
        if (edge) {
            int lo[2], hi[2];
#pragma unroll
            for (int rr = 0; rr < 2; rr++) key_range(a, (long long)m0 + wrow0 + g + 8 * rr, &lo[rr], &hi[rr]);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = n0 + 8 * j + t4 + 4 * (e & 1), rr = e >> 1;
                    if (key < lo[rr] || key >= hi[rr]) s[j][e] = -INFINITY;
                }
        }
        fwparts::softmax_m16<fwparts::row_order_running_max_pairs>(m, l, s, fwparts::log2_scores{},
                                                                   fwparts::keep_alphas{alpha}, 0);
    }
    /* O *= alpha (its P·V product retired, added first with FRESH_PV), then P into the A fragments (which that product read):
     * k-slot t <-> S column 2t (key t), slot t + 4 <-> column 2t + 1 (key t + 4). */
    __device__ __forceinline__ void rescale_and_take_p(const float (&alpha)[2])
    {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if constexpr (FRESH_PV) {
#pragma unroll
                for (int e = 0; e < 4; e++) o[j][e] += pv[j][e];
            }
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
            fwparts::split_truncated<P>(s[j][0], pb[j][0], ps[j][0]);
            fwparts::split_truncated<P>(s[j][2], pb[j][1], ps[j][1]);
            fwparts::split_truncated<P>(s[j][1], pb[j][2], ps[j][2]);
            fwparts::split_truncated<P>(s[j][3], pb[j][3], ps[j][3]);
        }
    }
    /* Split-KV: this thread's O (not yet divided by the sums), row maxima and sums as 9 float4, at p[0], p[NT], ...
     * (the same thread of another key range holds the same rows and columns) */
    template <int NT> __device__ __forceinline__ void save_partial(float4 *p) const
    {
#pragma unroll
        for (int j = 0; j < 8; j++) p[j * NT] = make_float4(o[j][0], o[j][1], o[j][2], o[j][3]);
        p[8 * NT] = make_float4(m[0], m[1], l[0], l[1]);
    }
    /* ... and another range's, merged into this one's (softmax_combine) */
    template <int NT> __device__ __forceinline__ void merge_partial(const float4 *p)
    {
        const float4 ml = __ldcg(p + 8 * NT);
        float sa[2], sb[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++)
            fwparts::softmax_combine(fwparts::log2_scores{}, m[rr], l[rr], rr ? ml.y : ml.x, rr ? ml.w : ml.z, sa[rr], sb[rr]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 x = __ldcg(p + j * NT);
            o[j][0] = o[j][0] * sa[0] + x.x * sb[0];
            o[j][1] = o[j][1] * sa[0] + x.y * sb[0];
            o[j][2] = o[j][2] * sa[1] + x.z * sb[1];
            o[j][3] = o[j][3] * sa[1] + x.w * sb[1];
        }
    }
    /* Normalise and write O (rows < rows, columns < D) and the LSE. */
    __device__ __forceinline__ void store(const fw_f32_params &a, int m0, int rows, int b, int h)
    {
        fwparts::store_m16_f32<8, true>(a, o, m, l, *this, m0, rows, b, h);
    }
};

} /* namespace fwf32 */
#endif
