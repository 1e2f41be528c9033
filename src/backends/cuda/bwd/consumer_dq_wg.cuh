/* The deterministic mode's dQ pass on Hopper (sm_90a): grid (⌈Lq/128⌉, H, B) (dq_block), 2 consumer warpgroups of
 * 64 query rows; Q and dO stay in shared memory, K and V tiles of BN keys cycle through ST stages.
 * Per key tile t and warpgroup (the forward's overlap: dQ(t-1) runs under tile t's element-wise work):
 *     S = Q Kᵀ, dP = dO Vᵀ        wgmma, both operands K-major in shared memory
 *     P = exp2(scale·log2e·S − lse2), dS = P ∘ (dP − Δ)   (per row: 2 rows per thread)
 *     dQ += dS K                  wgmma, A = dS from registers, B = K N-major
 * No atomics: each dQ row is summed by one thread in a fixed order.
 * dq_wg_kernel (kernel_dq_wg.cuh): the 2 warpgroups also load, with cp.async, one tile ahead.
 * dq_ws_kernel (kernel_dq_ws.cuh): a third, producer warpgroup loads with the tensor memory accelerator on
 * mbarriers (the forward's ws_kernel): Q and dO once, then K and V of every tile as soon as their stage is
 * free; the consumers only compute.
 * This file: their shared memory and dq_rows, what a consumer warpgroup computes. */
#ifndef FW_BWD_CONSUMER_DQ_WG_CUH
#define FW_BWD_CONSUMER_DQ_WG_CUH

#include "backends/cuda/bwd/kernel_common.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "backends/cuda/parts/swizzle.cuh"
#include "backends/cuda/parts/wgmma.cuh"

namespace fwbwd {

/* Shared memory of a configuration C (D, BN, STAGES): 1 KB of alignment slack, Q, dO, ST stages of K, V (the
 * producer's mbarriers not included). */
template <class C> struct dq_wg_geom {
    static constexpr int D = C::D, BM = 128, BN = C::BN, ST = C::STAGES;
    static constexpr uint32_t QD_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr size_t SMEM = 1024 + 2 * (size_t)QD_BYTES + 2 * ST * (size_t)KV_BYTES;
};

/* One consumer warpgroup's 64 query rows of a dQ block (wgc = 0, 1: rows 64 wgc..): its rows' lse2 and
 * Δ in registers, the S and dP accumulators, dS as A fragments, the dQ accumulator. */
template <typename T, int D, int BN, int BM> struct dq_rows {
    static constexpr int KD = D / 16, ND = D / 8, NS = BN / 8, KN = BN / 16;
    float acc[ND][4], s[NS][4], dp[NS][4], l2[2], dl[2];
    uint32_t dsa[KN][4];
    uint64_t dq_km, ddo_km;
    int wrow0, g, t4;

    __device__ __forceinline__ void init(const fw_bwd_tc_params &p, uint32_t sQ, uint32_t sdO, int wgc, int warp_in_wg, int lane,
                                         int m0, int b, int h)
    {
        g = lane >> 2;
        t4 = lane & 3;
        wrow0 = wgc * 64 + warp_in_wg * 16;
        const long long r0 = ((long long)b * p.H + h) * p.Lq;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = m0 + wrow0 + g + r * 8;
            l2[r] = i < p.Lq ? p.lse2[r0 + i] : 0.f;
            dl[r] = i < p.Lq ? p.delta[r0 + i] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
        dq_km = fwparts::sw128_desc(sQ + (uint32_t)(wgc * 64 * 128), 16, 1024);
        ddo_km = fwparts::sw128_desc(sdO + (uint32_t)(wgc * 64 * 128), 16, 1024);
    }
    /* S = Q Kᵀ, dP = dO Vᵀ of the tile at sk, sv, issued and committed */
    __device__ __forceinline__ void issue_s_dp(uint32_t sk, uint32_t sv)
    {
        using namespace fwparts;
        const uint64_t dk = sw128_desc(sk, 16, 1024), dv = sw128_desc(sv, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbq = (uint64_t)((kk / 4) * 8 * BM), cbk = (uint64_t)((kk / 4) * 8 * BN), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(s, dq_km + cbq + ko, dk + cbk + ko, kk > 0);
        }
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbq = (uint64_t)((kk / 4) * 8 * BM), cbk = (uint64_t)((kk / 4) * 8 * BN), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(dp, ddo_km + cbq + ko, dv + cbk + ko, kk > 0);
        }
        wgmma_commit();
    }
    /* dQ += dS K with the tile's K at sk (N-major), issued and committed */
    __device__ __forceinline__ void issue_dq(uint32_t sk)
    {
        using namespace fwparts;
        const uint64_t dk = sw128_desc(sk, BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KN; kk++) wgmma_rs<T, D>(acc, dsa[kk], dk + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    }
    /* dS of the tile with keys from n0 into s, in place */
    __device__ __forceinline__ void elementwise(const fw_bwd_tc_params &p, int m0, int n0)
    {
        using namespace fwparts;
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = softmax_recompute_p(s[j][r * 2 + e], p.scale_log2, l2[r]);
                    if (need_mask && !key_visible(p, m0 + wrow0 + g + r * 8, n0 + j * 8 + t4 * 2 + e)) x = 0.f;
                    s[j][r * 2 + e] = softmax_grad(x, dp[j][r * 2 + e], dl[r]);
                }
    }
    __device__ __forceinline__ void ds_to_a() { fwparts::acc_tiles_to_a<T, KN>(s, dsa); }
    __device__ __forceinline__ void store(const fw_bwd_tc_params &p, int m0, int b, int h)
    {
        T *dqg = head_base<T>(p.dq, p.dq_s, b, h);
        fwparts::store_acc_rows<T, ND>(dqg, p.dq_s[2], acc, m0 + wrow0, p.Lq, p.d, p.scale, g, t4);
    }
};


} /* namespace fwbwd */
#endif
