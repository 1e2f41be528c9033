/* The f32 tensor-core dK/dV kernel: kernel_dkdv_mma.cuh's algorithm on mma.sync m16n8k8 with tf32 operands, in one
 * of tf32.cuh's precision forms P (tf32x3: f32 accuracy; tf32). Deterministic mode only (its dQ pass:
 * kernel_dq_tf32.cuh).
 *
 * Grid (⌈Lk/BN⌉, H_kv, B) (key_block), W warps, BN = 16·W keys a block, warp w owns keys 16w..16w+15. K_j, V_j stay
 * in shared memory (f32 rows of D + 8 floats) and dK_j, dV_j in registers; the block walks (query head of the GQA
 * group) × (query tile of BM rows that can see its keys) with Q_i, dO_i, lse2_i, Δ_i in a 2-stage cp.async ring
 * (kv_stages.cuh), in sub-tiles of QS queries:
 *     Sᵀ = K_w Q_iᵀ, dPᵀ = V_w dO_iᵀ    A = K, V rows (frag_a_rows), B = Q, dO rows (frag_b_rows)
 *     Pᵀ = exp2(scale·log2e·Sᵀ − lse2), dSᵀ = Pᵀ ∘ (dPᵀ − Δ)
 *     dV += Pᵀ dO_i, dK += dSᵀ Q_i      A = Pᵀ, dSᵀ (registers: frag_a_acc), B = dO, Q columns (frag_b_cols)
 * Boundaries as kernel_dkdv_mma.cuh: rows past Lq and keys past Lk zero-filled, crossing tiles masked per element.
 *
 * C: a configuration with D, BM, WARPS, QS. VARLEN: a ragged batch (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DKDV_TF32_CUH
#define FW_BWD_KERNEL_DKDV_TF32_CUH

#include "backends/cuda/bwd/kv_stages.cuh"
#include "backends/cuda/bwd/tf32_frags.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwbwd {

/* Shared memory of configuration C: K, V; two stages of Q, dO and of lse2, Δ. */
template <class C> struct dkdv_tf32_geom {
    static constexpr int D = C::D, BM = C::BM, BN = 16 * C::WARPS, SD = D + 8;
    static constexpr size_t KV_BYTES = (size_t)2 * BN * SD * 4;
    static constexpr size_t STAGE_BYTES = qdo_stage<D, BM, 4>::STAGE_BYTES;
    static constexpr size_t STAT_BYTES = qdo_stage<D, BM, 4>::STAT_BYTES;
    static constexpr size_t SMEM = KV_BYTES + 2 * STAGE_BYTES + 2 * STAT_BYTES;
};

template <class P, class C, bool VARLEN = false>
__global__ void __launch_bounds__(C::WARPS * 32) dkdv_tf32_kernel(const fw_bwd_tc_params args)
{
    using namespace fwparts;
    using G = dkdv_tf32_geom<C>;
    constexpr int D = C::D, BM = C::BM, W = C::WARPS, QS = C::QS;
    constexpr int NT = W * 32, BN = G::BN, SD = G::SD;
    constexpr int KD = D / 8;  /* k8 steps over the head dim */
    constexpr int NQ = QS / 8; /* n8 tiles of Sᵀ over a sub-tile's queries, and k8 steps over them */
    constexpr int ND = D / 8;  /* n8 tiles of dK, dV */
    constexpr int CG = 4;      /* of them summed at once */
    static_assert(BM % QS == 0 && QS % 8 == 0 && D % 32 == 0, "tile sizes");

    extern __shared__ float4 tf32_smem[];
    float *Ks = reinterpret_cast<float *>(tf32_smem), *Vs = Ks + BN * SD;
    unsigned char *stage_base = reinterpret_cast<unsigned char *>(tf32_smem) + G::KV_BYTES;
    const float *stat_f = reinterpret_cast<const float *>(stage_base + 2 * G::STAGE_BYTES);
    const uint32_t sK = smem_u32(Ks), sV = smem_u32(Vs), sStage = smem_u32(stage_base), sStat = smem_u32(stat_f);

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    fwparts::tile_coord tile;
    if constexpr (VARLEN)
        if (!ragged_block<float, BN, true>(args, false, seq, tile)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    kv_block<float, D, NT, BN, BM> kb;
    kb.template start<VARLEN>(p, tile, sK, sV, sStage, sStat, tid);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;

    float acc_dk[ND][4], acc_dv[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[j][e] = acc_dv[j][e] = 0.f;

    const int kw = warp * 16, key0 = n0 + kw + g; /* this thread's keys: key0 and key0 + 8 */

#pragma unroll 1
    for (int it = 0; it < total; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < total) kb.load_stage(p, it + 1, (it + 1) & 1, sStage, sStat, tid);
        cp_async_commit();

        const int slot = it & 1, m0 = kb.row0(it);
        const float *Qs = reinterpret_cast<const float *>(stage_base + slot * G::STAGE_BYTES), *dOs = Qs + BM * SD;
        const float *lse2_s = stat_f + slot * (G::STAT_BYTES / 4), *delta_s = lse2_s + BM;
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);

#pragma unroll 1
        for (int qs = 0; qs < BM / QS; qs++) {
            const int r0 = qs * QS; /* the sub-tile's first row in the stage */
            float s[NQ][4], dp[NQ][4];
#pragma unroll
            for (int j = 0; j < NQ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.f;
#pragma unroll 2
            for (int kk = 0; kk < KD; kk++) {
                uint32_t akb[4], aks[4], avb[4], avs[4];
                frag_a_rows<P, SD>(Ks, kw, kk * 8, g, t4, akb, aks);
                frag_a_rows<P, SD>(Vs, kw, kk * 8, g, t4, avb, avs);
#pragma unroll
                for (int j = 0; j < NQ; j++) {
                    uint32_t bq[4], bo[4];
                    frag_b_rows<P, SD>(Qs, r0 + j * 8, kk * 8, g, t4, bq);
                    mma_tf32<P>(s[j], akb, aks, bq);
                    frag_b_rows<P, SD>(dOs, r0 + j * 8, kk * 8, g, t4, bo);
                    mma_tf32<P>(dp[j], avb, avs, bo);
                }
            }

            /* Pᵀ and dSᵀ: element e of tile j is key key0 + 8(e >> 1), query row r0 + 8j + slot_row(2 t4 + (e & 1)) */
#pragma unroll
            for (int j = 0; j < NQ; j++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int row = r0 + j * 8 + slot_row(2 * t4 + c);
                    const float l2 = lse2_s[row], dl = delta_s[row];
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        float pv = softmax_recompute_p(s[j][r * 2 + c], p.scale_log2, l2);
                        if (need_mask && !key_visible(p, m0 + row, key0 + r * 8)) pv = 0.f;
                        s[j][r * 2 + c] = pv;
                        dp[j][r * 2 + c] = softmax_grad(pv, dp[j][r * 2 + c], dl);
                    }
                }

            /* dV += Pᵀ dO, dK += dSᵀ Q over the sub-tile's queries, summed from zero on the tensor cores and added
             * to dK, dV with f32 adds: the tensor cores' adds round toward zero, a bias that over every query of a
             * long sequence grew the error linearly with Lq (2.8e-5 of max|g| at 2048) */
            uint32_t apb[NQ][4], aps[NQ][4], adb[NQ][4], ads[NQ][4];
#pragma unroll
            for (int j = 0; j < NQ; j++) {
                frag_a_acc<P>(s[j], apb[j], aps[j]);
                frag_a_acc<P>(dp[j], adb[j], ads[j]);
            }
#pragma unroll
            for (int c0 = 0; c0 < ND; c0 += CG) { /* CG n8 tiles at once: independent accumulator chains */
                float tv[CG][4], tk[CG][4];
#pragma unroll
                for (int c = 0; c < CG; c++)
#pragma unroll
                    for (int e = 0; e < 4; e++) tv[c][e] = tk[c][e] = 0.f;
#pragma unroll
                for (int j = 0; j < NQ; j++)
#pragma unroll
                    for (int c = 0; c < CG; c++) {
                        uint32_t bo[4], bq[4];
                        frag_b_cols<P, SD>(dOs, r0 + j * 8, (c0 + c) * 8, g, t4, bo);
                        mma_tf32<P>(tv[c], apb[j], aps[j], bo);
                        frag_b_cols<P, SD>(Qs, r0 + j * 8, (c0 + c) * 8, g, t4, bq);
                        mma_tf32<P>(tk[c], adb[j], ads[j], bq);
                    }
#pragma unroll
                for (int c = 0; c < CG; c++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        acc_dv[c0 + c][e] += tv[c][e];
                        acc_dk[c0 + c][e] += tk[c][e];
                    }
            }
        }
    }
    cp_async_wait<0>();

    /* dK (scaled) and dV of this warp's 16 keys */
    float *dkg = head_base<float>(p.dk, p.dk_s, b, hk);
    float *dvg = head_base<float>(p.dv, p.dv_s, b, hk);
    store_dkdv_rows<float, ND>(p, dkg, dvg, acc_dk, acc_dv, n0 + kw, 0, g, t4);
}

} /* namespace fwbwd */
#endif
