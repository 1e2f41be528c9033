/* The tensor-core dK/dV kernel with 2-D warp tiling (FlashAttention-2's layout; mma.sync, sm_80 machine code):
 * 8 warps, BN = 128 keys per block (key_block), BM = 64 queries per step (kv_stages.cuh's ring). Each
 * shared-memory fragment feeds two MMAs:
 *   phase 1  Sᵀ, dPᵀ: warps 4 (keys, 32 each) × 2 (queries, 32 each); Pᵀ and dSᵀ (softmax.cuh's recompute) go
 *            to shared memory
 *   phase 2  dV += Pᵀ dO, dK += dSᵀ Q: warps 4 (keys, 32 each) × 2 (head dims, D/2 each); A operands
 *            from the shared Pᵀ, dSᵀ (ldmatrix), B from dO, Q (ldmatrix.trans)
 *   phase 3  atomic mode: dQ += scale·dS K: warps 2 (queries, 32 each) × 4 (head dims, D/4 each)
 * Two barriers per step (after the Pᵀ/dSᵀ stores; at the top, before the stage and Pᵀ/dSᵀ are reused).
 * Boundaries as kernel_dkdv_mma.cuh.
 *
 * C: a configuration (kernel_common.cuh: kv_kernel::mma2d) with D, BM (64), WARPS (8). VARLEN: a ragged batch
 * (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DKDV_MMA2D_CUH
#define FW_BWD_KERNEL_DKDV_MMA2D_CUH

#include "backends/cuda/bwd/kv_stages.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwbwd {

/* Shared memory (either mode): K, V; two stages of Q, dO and of lse2, Δ; Pᵀ and dSᵀ. */
template <class C> struct dkdv_mma2d_geom {
    static constexpr int D = C::D, BN = 128, BM = 64, W = 8, SD = D + 8, SP = BM + 8;
    static_assert(C::BM == BM && C::WARPS == W, "the 2-D tiled kernel is BM 64, 8 warps");
    static constexpr size_t KV_BYTES = (size_t)2 * BN * SD * 2;
    static constexpr size_t STAGE_BYTES = qdo_stage<D, BM>::STAGE_BYTES;
    static constexpr size_t STAT_BYTES = qdo_stage<D, BM>::STAT_BYTES;
    static constexpr size_t PS_BYTES = (size_t)2 * BN * SP * 2; /* Pᵀ, dSᵀ */
    static constexpr size_t SMEM = KV_BYTES + 2 * STAGE_BYTES + 2 * STAT_BYTES + PS_BYTES;
};

template <typename T, class C, dq_mode DQ, bool VARLEN = false>
__global__ void __launch_bounds__(256) dkdv_mma2d_kernel(const fw_bwd_tc_params args)
{
    using namespace fwparts;
    using G = dkdv_mma2d_geom<C>;
    constexpr int D = C::D;
    constexpr bool ATOMIC = DQ == dq_mode::atomic;
    constexpr int NT = 256, BN = G::BN, BM = G::BM, SD = G::SD, SP = G::SP;
    constexpr int KD = D / 16;      /* k16 steps over the head dim */
    constexpr int DH = D / 2;       /* phase 2: head dims per warp */
    constexpr int DC = D / 4;       /* phase 3: head dims per warp */
    static_assert(DH % 16 == 0 && DC % 16 == 0, "head dim tiling");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sK = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sV = sK + BN * SD * 2;
    const uint32_t sStage = sK + (uint32_t)G::KV_BYTES;
    const uint32_t sStat = sStage + (uint32_t)(2 * G::STAGE_BYTES);
    const uint32_t sP = sStat + (uint32_t)(2 * G::STAT_BYTES), sdS = sP + BN * SP * 2;
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES);
    T *P_t = reinterpret_cast<T *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES + 2 * G::STAT_BYTES);
    T *dS_t = P_t + BN * SP;

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    fwparts::tile_coord tile;
    if constexpr (VARLEN)
        if (!ragged_block<T, BN, true>(args, false, seq, tile)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    kv_block<T, D, NT, BN, BM> kb;
    kb.template start<VARLEN>(p, tile, sK, sV, sStage, sStat, tid);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;

    /* phase 1 / 2 roles: keys 32·wk; phase 1 queries 32·wq; phase 2 head dims DH·wd */
    const int wk = warp % 4, wq = warp / 4, wd = warp / 4;
    float acc_dk[2][DH / 8][4], acc_dv[2][DH / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < DH / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_dk[mt][j][e] = acc_dv[mt][j][e] = 0.f;

    const uint32_t a_lane_kv = ldsm_a_lane<SD>(wk * 32, lane); /* A (row-major, rows = M): K, V */
    const uint32_t a_lane_ps = ldsm_a_lane<SP>(wk * 32, lane); /* ... Pᵀ, dSᵀ */
    const uint32_t bn_lane = ldsm_b_lane<SD>(lane);            /* B non-trans (rows = n) */
    const uint32_t bt_lane = ldsm_a_lane<SD>(0, lane);         /* B trans (rows = k) */

#pragma unroll 1
    for (int it = 0; it < total; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < total) kb.load_stage(p, it + 1, (it + 1) & 1, sStage, sStat, tid);
        cp_async_commit();

        const int slot = it & 1;
        const int h = kb.head(p, it), m0 = kb.row0(it);
        const uint32_t sQ = sStage + (uint32_t)(slot * G::STAGE_BYTES), sdO = sQ + BM * SD * 2;
        const float *lse2_s = stat_f + slot * (G::STAT_BYTES / 4), *delta_s = lse2_s + BM;

        /* phase 1: Sᵀ, dPᵀ for keys 32·wk.. × queries 32·wq.. */
        {
            float s[2][4][4], dp[2][4][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][j][e] = dp[mt][j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t ak[2][4], av[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    ldsm_x4(sK + a_lane_kv + (uint32_t)((mt * 16 * SD + kk * 16) * 2), ak[mt][0], ak[mt][1], ak[mt][2], ak[mt][3]);
                    ldsm_x4(sV + a_lane_kv + (uint32_t)((mt * 16 * SD + kk * 16) * 2), av[mt][0], av[mt][1], av[mt][2], av[mt][3]);
                }
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(sQ + bn_lane + (uint32_t)(((wq * 32 + np * 16) * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma16816<T>(s[mt][2 * np], ak[mt], b0, b1);
                        mma16816<T>(s[mt][2 * np + 1], ak[mt], b2, b3);
                    }
                    ldsm_x4(sdO + bn_lane + (uint32_t)(((wq * 32 + np * 16) * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma16816<T>(dp[mt][2 * np], av[mt], b0, b1);
                        mma16816<T>(dp[mt][2 * np + 1], av[mt], b2, b3);
                    }
                }
            }
            const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int ql = wq * 32 + j * 8 + t4 * 2; /* this thread's query columns ql, ql + 1 */
                const float2 l2 = *reinterpret_cast<const float2 *>(lse2_s + ql);
                const float2 dl = *reinterpret_cast<const float2 *>(delta_s + ql);
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int kl = wk * 32 + mt * 16 + g + r * 8; /* key row in the block */
                        float pv[2], ds[2];
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float x = softmax_recompute_p(s[mt][j][r * 2 + e], p.scale_log2, e ? l2.y : l2.x);
                            if (need_mask && !key_visible(p, m0 + ql + e, n0 + kl)) x = 0.f;
                            pv[e] = x;
                            ds[e] = softmax_grad(x, dp[mt][j][r * 2 + e], e ? dl.y : dl.x);
                        }
                        *reinterpret_cast<uint32_t *>(P_t + kl * SP + ql) = pack2<T>::make(pv[0], pv[1]);
                        *reinterpret_cast<uint32_t *>(dS_t + kl * SP + ql) = pack2<T>::make(ds[0], ds[1]);
                    }
            }
        }
        __syncthreads();

        /* phase 2: dV += Pᵀ dO, dK += dSᵀ Q for keys 32·wk.. × head dims DH·wd.. */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            uint32_t ap[2][4], ad[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                ldsm_x4(sP + a_lane_ps + (uint32_t)((mt * 16 * SP + kk * 16) * 2), ap[mt][0], ap[mt][1], ap[mt][2], ap[mt][3]);
                ldsm_x4(sdS + a_lane_ps + (uint32_t)((mt * 16 * SP + kk * 16) * 2), ad[mt][0], ad[mt][1], ad[mt][2], ad[mt][3]);
            }
#pragma unroll
            for (int dq = 0; dq < DH / 16; dq++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(sdO + bt_lane + (uint32_t)((kk * 16 * SD + wd * DH + dq * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma16816<T>(acc_dv[mt][2 * dq], ap[mt], b0, b1);
                    mma16816<T>(acc_dv[mt][2 * dq + 1], ap[mt], b2, b3);
                }
                ldsm_x4_t(sQ + bt_lane + (uint32_t)((kk * 16 * SD + wd * DH + dq * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma16816<T>(acc_dk[mt][2 * dq], ad[mt], b0, b1);
                    mma16816<T>(acc_dk[mt][2 * dq + 1], ad[mt], b2, b3);
                }
            }
        }

        if (ATOMIC) {
            /* phase 3: dQ += scale·dS K for queries 32·wq3.. × head dims DC·wd3.. */
            const int wq3 = warp % 2, wd3 = warp / 2;
            float acc_dq[2][DC / 8][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int j = 0; j < DC / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc_dq[mt][j][e] = 0.f;
            /* A = dS (rows = queries) from dSᵀ (rows = keys) with ldmatrix.trans */
            const uint32_t ds_lane =
                sdS + (uint32_t)((((lane & 7) + ((lane >> 4) & 1) * 8) * SP + wq3 * 32 + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
                    ldsm_x4_t(ds_lane + (uint32_t)((kk * 16 * SP + mt * 16) * 2), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
                mma_ab<T, true, 2, DC / 16>(acc_dq, a, sK + bt_lane, kk * 16 * SD + wd3 * DC, 16);
            }
            float *accg = p.dq_acc + (((long long)b * p.H + h) * p.Lq) * p.d;
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                atomic_add_dq_rows<DC / 8>(p, accg, acc_dq[mt], m0 + wq3 * 32 + mt * 16, wd3 * DC, g, t4);
        }
    }
    cp_async_wait<0>();

    T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
    T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        store_dkdv_rows<T, DH / 8>(p, dkg, dvg, acc_dk[mt], acc_dv[mt], n0 + wk * 32 + mt * 16, wd * DH, g, t4);
}

} /* namespace fwbwd */
#endif
