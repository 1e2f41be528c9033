/* The tensor-core dK/dV kernel with mma.sync (m16n8k16, ldmatrix, cp.async; sm_80 machine code),
 * FlashAttention-2's algorithm, and the shared memory it takes.
 *
 * Grid (⌈Lk/BN⌉, H_kv, B) (key_block), W warps, BN = 16·W keys per block, warp w owns keys 16w..16w+15. The block
 * keeps K_j, V_j in shared memory and dK_j, dV_j (f32) in registers, and walks (query head of the GQA group) ×
 * (query tile of BM rows that can see its keys); Q_i, dO_i, lse2_i, Δ_i stream through a 2-stage cp.async ring
 * (kv_stages.cuh). Everything is computed transposed, keys as rows, so that every product is register-resident:
 *     Sᵀ  = K_w Q_iᵀ            A = K (ldmatrix),        B = Q  (ldmatrix)
 *     dPᵀ = V_w dO_iᵀ           A = V (ldmatrix),        B = dO (ldmatrix)
 *     Pᵀ  = exp2(scale·log2e·Sᵀ − lse2),  dSᵀ = Pᵀ ∘ (dPᵀ − Δ)    (per column = per query; softmax.cuh)
 *     dV += Pᵀ dO_i             A = Pᵀ (registers),      B = dO (ldmatrix.trans)
 *     dK += dSᵀ Q_i             A = dSᵀ (registers),     B = Q  (ldmatrix.trans)
 * The query tile goes in sub-tiles of QS rows (QS < BM: fewer score registers live beside dK, dV).
 * Atomic dQ mode: dSᵀ also goes to shared memory, and after a barrier the warps compute dQ_i += scale · dS K_j
 * (A = dS via ldmatrix.trans of dSᵀ, B = K via ldmatrix.trans) and add it into the f32 accumulator (B, H, Lq, D)
 * with atomics (epilogue.cuh); a conversion kernel writes dQ (preprocess.cuh).
 *
 * Boundaries: rows past Lq and keys past Lk are zero-filled by cp.async (lse2 and Δ too), which makes their
 * contributions exactly zero (Q = dO = 0 there gives dS = 0); tiles that cross Lk or a causal/window edge are
 * masked per element (P = 0), which also keeps exp2 from overflowing on the zero-filled keys. Query tiles outside
 * the causal/window band are never visited. Every key row of dK/dV is written (zeros where no query sees it).
 *
 * C: a configuration (kernel_common.cuh: kv_kernel::mma) with D, BM, WARPS, QS. VARLEN: a ragged batch, one block
 * per key block of each sequence (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DKDV_MMA_CUH
#define FW_BWD_KERNEL_DKDV_MMA_CUH

#include "backends/cuda/bwd/kv_stages.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwbwd {

/* Shared memory of configuration C in mode DQ: K, V; two stages of Q, dO and of lse2, Δ; dSᵀ (atomic mode). */
template <class C, dq_mode DQ> struct dkdv_geom {
    static constexpr int D = C::D, BM = C::BM, BN = 16 * C::WARPS, SD = D + 8, SDS = BM + 8;
    static constexpr bool ATOMIC = DQ == dq_mode::atomic;
    static constexpr size_t KV_BYTES = (size_t)2 * BN * SD * 2;     /* K, V */
    static constexpr size_t STAGE_BYTES = qdo_stage<D, BM>::STAGE_BYTES; /* Q, dO of one stage */
    static constexpr size_t STAT_BYTES = qdo_stage<D, BM>::STAT_BYTES;   /* lse2, Δ of one stage */
    static constexpr size_t DS_BYTES = ATOMIC ? (size_t)BN * SDS * 2 : 0;
    static constexpr size_t SMEM = KV_BYTES + 2 * STAGE_BYTES + 2 * STAT_BYTES + DS_BYTES;
};

template <typename T, class C, dq_mode DQ, bool VARLEN = false>
__global__ void __launch_bounds__(C::WARPS * 32) dkdv_mma_kernel(const fw_bwd_tc_params args)
{
    using namespace fwparts;
    using G = dkdv_geom<C, DQ>;
    constexpr int D = C::D, BM = C::BM, W = C::WARPS, QS = C::QS;
    constexpr bool ATOMIC = G::ATOMIC;
    constexpr int NT = W * 32, BN = G::BN, SD = G::SD, SDS = G::SDS;
    constexpr int KD = D / 16;  /* k16 steps over the head dim */
    constexpr int NQ = QS / 8;  /* n8 tiles of Sᵀ over the queries of one sub-tile */
    constexpr int KQ = QS / 16; /* k16 steps over them */
    constexpr int ND = D / 8;   /* n8 tiles of dK, dV */
    static_assert(BM % QS == 0 && QS % 16 == 0 && D % 16 == 0, "tile sizes");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sK = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sV = sK + BN * SD * 2;
    const uint32_t sStage = sK + (uint32_t)G::KV_BYTES; /* stage s: Q at +s·STAGE, dO at +BM·SD·2 */
    const uint32_t sStat = sStage + (uint32_t)(2 * G::STAGE_BYTES); /* stage s: lse2 at +s·STAT, Δ at +BM·4 */
    const uint32_t sdS = sStat + (uint32_t)(2 * G::STAT_BYTES);
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES);
    T *dS_t = reinterpret_cast<T *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES + 2 * G::STAT_BYTES);

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

    float acc_dk[ND][4], acc_dv[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[j][e] = acc_dv[j][e] = 0.f;

    const int kw = warp * 16, key0 = n0 + kw + g; /* this thread's keys: key0 and key0 + 8 */
    const uint32_t a_lane = ldsm_a_lane<SD>(kw, lane); /* A: K, V rows of this warp, row-major */
    const uint32_t bn_lane = ldsm_b_lane<SD>(lane);    /* B non-trans: Q, dO rows = n */
    const uint32_t bt_lane = ldsm_a_lane<SD>(0, lane); /* B trans: Q, dO rows = k; K rows = k in the dQ product */

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

        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
        /* The BM queries in sub-tiles of QS (QS < BM: fewer score registers live next to dK, dV).
         * Not unrolled, so that the sub-tiles do not overlap in registers. */
#pragma unroll 1
        for (int qs = 0; qs < BM / QS; qs++) {
            const uint32_t sQs = sQ + (uint32_t)(qs * QS * SD * 2), sdOs = sdO + (uint32_t)(qs * QS * SD * 2);
            const int q0 = m0 + qs * QS;
            /* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (16 keys × QS queries per warp) */
            float s[NQ][4], dp[NQ][4];
#pragma unroll
            for (int j = 0; j < NQ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t ak[4], av[4];
                ldsm_x4(sK + a_lane + kk * 32, ak[0], ak[1], ak[2], ak[3]);
                ldsm_x4(sV + a_lane + kk * 32, av[0], av[1], av[2], av[3]);
#pragma unroll
                for (int np = 0; np < NQ / 2; np++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(sQs + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(s[2 * np], ak, b0, b1);
                    mma16816<T>(s[2 * np + 1], ak, b2, b3);
                    ldsm_x4(sdOs + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(dp[2 * np], av, b0, b1);
                    mma16816<T>(dp[2 * np + 1], av, b2, b3);
                }
            }

            /* Pᵀ and dSᵀ; masked only on tiles that cross Lk or a causal/window edge */
#pragma unroll
            for (int j = 0; j < NQ; j++) {
                const float2 l2 = *reinterpret_cast<const float2 *>(lse2_s + qs * QS + j * 8 + t4 * 2);
                const float2 dl = *reinterpret_cast<const float2 *>(delta_s + qs * QS + j * 8 + t4 * 2);
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float pv = softmax_recompute_p(s[j][r * 2 + e], p.scale_log2, e ? l2.y : l2.x);
                        if (need_mask && !key_visible(p, q0 + j * 8 + t4 * 2 + e, key0 + r * 8)) pv = 0.f;
                        s[j][r * 2 + e] = pv;
                        dp[j][r * 2 + e] = softmax_grad(pv, dp[j][r * 2 + e], e ? dl.y : dl.x);
                    }
            }

            /* dV += Pᵀ dO, dK += dSᵀ Q (A operands repacked from the accumulators) */
#pragma unroll
            for (int kk = 0; kk < KQ; kk++) {
                uint32_t ap[4], ad[4];
                acc_to_a<T>(s[2 * kk], s[2 * kk + 1], ap);
                acc_to_a<T>(dp[2 * kk], dp[2 * kk + 1], ad);
                if (ATOMIC) {
                    /* dSᵀ rows kw+g, kw+g+8; query columns qs·QS + 16kk + 2t4 (+8) */
                    const int c = qs * QS + kk * 16 + t4 * 2;
                    uint32_t *row0 = reinterpret_cast<uint32_t *>(dS_t + (kw + g) * SDS + c);
                    uint32_t *row8 = reinterpret_cast<uint32_t *>(dS_t + (kw + g + 8) * SDS + c);
                    row0[0] = ad[0];
                    row8[0] = ad[1];
                    row0[4] = ad[2];
                    row8[4] = ad[3];
                }
#pragma unroll
                for (int dq = 0; dq < ND / 2; dq++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4_t(sdOs + bt_lane + (uint32_t)((kk * 16 * SD + dq * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(acc_dv[2 * dq], ap, b0, b1);
                    mma16816<T>(acc_dv[2 * dq + 1], ap, b2, b3);
                    ldsm_x4_t(sQs + bt_lane + (uint32_t)((kk * 16 * SD + dq * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(acc_dk[2 * dq], ad, b0, b1);
                    mma16816<T>(acc_dk[2 * dq + 1], ad, b2, b3);
                }
            }
        }

        if (ATOMIC) {
            /* dQ_i += scale · dS K_j: warps tile (BM rows) × (D columns) as MW × DW; a warp's DS columns
             * in SPLIT passes, so that the dQ accumulator does not push dK, dV out of registers */
            constexpr int MW = BM / 16, DW = W / MW, DS = D / DW;
            constexpr int SPLIT = DS >= 64 ? 2 : 1, DH = DS / SPLIT;
            static_assert(MW * DW == W && DS * DW == D && DH % 16 == 0, "dQ warp tiling");
            __syncthreads();
            const int wm = warp % MW, wd = warp / MW;
            /* A = dS (rows = queries) from dSᵀ (rows = keys): ldmatrix.trans, matrices
             * (m0-7,k0-7), (m8-15,k0-7), (m0-7,k8-15), (m8-15,k8-15) */
            const uint32_t ds_lane =
                sdS + (uint32_t)((((lane & 7) + ((lane >> 4) & 1) * 8) * SDS + wm * 16 + ((lane >> 3) & 1) * 8) * 2);
            float *accg = p.dq_acc + (((long long)b * p.H + h) * p.Lq) * p.d;
#pragma unroll
            for (int half = 0; half < SPLIT; half++) {
                const int c0 = wd * DS + half * DH;
                float acc_dq[DH / 8][4];
#pragma unroll
                for (int j = 0; j < DH / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc_dq[j][e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    uint32_t a[4];
                    ldsm_x4_t(ds_lane + (uint32_t)(kk * 16 * SDS * 2), a[0], a[1], a[2], a[3]);
#pragma unroll
                    for (int dq = 0; dq < DH / 16; dq++) {
                        uint32_t b0, b1, b2, b3;
                        ldsm_x4_t(sK + bt_lane + (uint32_t)((kk * 16 * SD + c0 + dq * 16) * 2), b0, b1, b2, b3);
                        mma16816<T>(acc_dq[2 * dq], a, b0, b1);
                        mma16816<T>(acc_dq[2 * dq + 1], a, b2, b3);
                    }
                }
                atomic_add_dq_rows<DH / 8>(p, accg, acc_dq, m0 + wm * 16, c0, g, t4);
            }
        }
    }
    cp_async_wait<0>();

    /* dK (scaled) and dV of this warp's 16 keys */
    T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
    T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
    store_dkdv_rows<T, ND>(p, dkg, dvg, acc_dk, acc_dv, n0 + kw, 0, g, t4);
}

} /* namespace fwbwd */
#endif
