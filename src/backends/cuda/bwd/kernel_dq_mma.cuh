/* The deterministic mode's dQ kernel with mma.sync (sm_80 machine code): grid (⌈Lq/BM⌉, H, B) (dq_block: under a
 * window the longest blocks first), W warps of MT m16 tiles each (BM = 16·W·MT query rows, warp w owns 16·MT), BN
 * keys per step. The block keeps Q_i, dO_i in shared memory and its rows' lse2, Δ in registers, walks the key tiles
 * its rows can see (2-stage cp.async ring of K, V) and recomputes
 *     S = Q Kᵀ, dP = dO Vᵀ, P = exp2(scale·log2e·S − lse2), dS = P ∘ (dP − Δ), dQ += dS K
 * in registers (the forward kernel's shape); no atomics anywhere, bit-identical run to run.
 *
 * C: a configuration (kernel_common.cuh: dq_kernel::mma) with D, WARPS, MT, BN. VARLEN: a ragged batch, one block
 * per query block of each sequence, the last first under a window (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DQ_MMA_CUH
#define FW_BWD_KERNEL_DQ_MMA_CUH

#include "backends/cuda/bwd/kernel_common.cuh"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwbwd {

/* Shared memory of configuration C: Q, dO; two stages of K, V. */
template <class C> struct dq_geom {
    static constexpr int D = C::D, BN = C::BN, BM = 16 * C::WARPS * C::MT, SD = D + 8;
    static constexpr size_t SMEM = (size_t)(2 * BM + 2 * 2 * BN) * SD * 2; /* Q, dO; 2 stages of K, V */
};

template <typename T, class C, bool VARLEN = false>
__global__ void __launch_bounds__(C::WARPS * 32) dq_mma_kernel(const fw_bwd_tc_params args)
{
    using namespace fwparts;
    using G = dq_geom<C>;
    constexpr int D = C::D, W = C::WARPS, MT = C::MT, BN = C::BN;
    constexpr int NT = W * 32, BM = G::BM, SD = G::SD;
    constexpr int KD = D / 16, NN = BN / 8, KN = BN / 16, ND = D / 8;
    constexpr uint32_t TILE = BN * SD * 2;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sdO = sQ + BM * SD * 2;
    const uint32_t sKV = sdO + BM * SD * 2; /* stage s: K at +2s·TILE, V at +(2s+1)·TILE */

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    fwparts::tile_coord tile;
    if constexpr (VARLEN)
        if (!ragged_block<T, BM, false>(args, args.has_window != 0, seq, tile)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const query_block blk = VARLEN ? query_block::at<BM, BN>(p, tile) : dq_block<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    const T *qg = head_base<T>(p.q, p.q_s, b, h);
    const T *dog = head_base<T>(p.dout, p.do_s, b, h);
    const T *kg = head_base<T>(p.k, p.k_s, b, hk);
    const T *vg = head_base<T>(p.v, p.v_s, b, hk);
    {
        tile_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(sQ, tid);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(sdO, tid);
    }
    tile_cursor<T, D, NT> kc, vc;
    kc.init(kg, p.k_s[2], n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_s[2], n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN, SD>(sKV, tid);
        vc.template load<BN, SD>(sKV + TILE, tid);
    }
    cp_async_commit();

    /* this thread's rows: wrow0 + 16·mt + g (+ 8) */
    const int wrow0 = warp * MT * 16;
    float l2[MT][2], dl[MT][2];
    dq_row_stats<MT>(p, b, h, m0, wrow0, g, l2, dl);
    float acc[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;

    const uint32_t a_lane = ldsm_a_lane<SD>(wrow0, lane); /* A: Q, dO rows of this warp */
    const uint32_t bn_lane = ldsm_b_lane<SD>(lane);       /* B non-trans: K, V rows = n */
    const uint32_t bt_lane = ldsm_a_lane<SD>(0, lane);    /* B trans: K rows = k in dS K */

#pragma unroll 1
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            const uint32_t nx = sKV + (uint32_t)(((it + 1) & 1) * 2 * TILE);
            kc.template load<BN, SD>(nx, tid);
            vc.template load<BN, SD>(nx + TILE, tid);
        }
        cp_async_commit();
        const uint32_t sK = sKV + (uint32_t)((it & 1) * 2 * TILE), sV = sK + TILE;
        const int n0 = n_begin + it * BN;

        float s[MT][NN][4], dp[MT][NN][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][j][e] = dp[mt][j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t aq[MT][4], ado[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ldsm_x4(sQ + a_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), aq[mt][0], aq[mt][1], aq[mt][2], aq[mt][3]);
                ldsm_x4(sdO + a_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), ado[mt][0], ado[mt][1], ado[mt][2],
                        ado[mt][3]);
            }
#pragma unroll
            for (int np = 0; np < NN / 2; np++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sK + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<T>(s[mt][2 * np], aq[mt], b0, b1);
                    mma16816<T>(s[mt][2 * np + 1], aq[mt], b2, b3);
                }
                ldsm_x4(sV + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<T>(dp[mt][2 * np], ado[mt], b0, b1);
                    mma16816<T>(dp[mt][2 * np + 1], ado[mt], b2, b3);
                }
            }
        }

        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float pv = softmax_recompute_p(s[mt][j][r * 2 + e], p.scale_log2, l2[mt][r]);
                        if (need_mask && !key_visible(p, m0 + wrow0 + mt * 16 + g + r * 8, n0 + j * 8 + t4 * 2 + e))
                            pv = 0.f;
                        dp[mt][j][r * 2 + e] = softmax_grad(pv, dp[mt][j][r * 2 + e], dl[mt][r]);
                    }

        /* dQ += dS K */
#pragma unroll
        for (int kk = 0; kk < KN; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) acc_to_a<T>(dp[mt][2 * kk], dp[mt][2 * kk + 1], a[mt]);
            mma_ab<T, true, MT, ND / 2>(acc, a, sK + bt_lane, kk * 16 * SD, 16);
        }
    }
    cp_async_wait<0>();

    T *dqg = head_base<T>(p.dq, p.dq_s, b, h);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) store_dq_rows<T, ND>(p, dqg, acc[mt], m0 + wrow0 + mt * 16, g, t4);
}

} /* namespace fwbwd */
#endif
