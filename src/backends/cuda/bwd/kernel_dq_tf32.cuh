/* The f32 tensor-core dQ kernel (the deterministic pass after kernel_dkdv_tf32.cuh): kernel_dq_mma.cuh's algorithm on
 * mma.sync m16n8k8 with tf32 operands in precision form P. Grid (⌈Lq/BM⌉, H, B) (dq_block), W warps of MT m16 tiles
 * (BM = 16·W·MT rows), BN keys a step. Q_i, dO_i stay in shared memory, lse2 and Δ of a thread's rows in registers;
 * K, V tiles go through a 2-stage cp.async ring. Per key tile
 *     S = Q Kᵀ, dP = dO Vᵀ    A = Q, dO rows (frag_a_rows), B = K, V rows (frag_b_rows)
 *     P = exp2(scale·log2e·S − lse2), dS = P ∘ (dP − Δ), dQ += dS K   A = dS (frag_a_acc), B = K columns (frag_b_cols)
 * No atomics: bit-identical run to run.
 *
 * C: a configuration with D, WARPS, MT, BN. VARLEN: a ragged batch (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DQ_TF32_CUH
#define FW_BWD_KERNEL_DQ_TF32_CUH

#include "backends/cuda/bwd/kernel_common.cuh"
#include "backends/cuda/bwd/tf32_frags.cuh"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwbwd {

/* Shared memory of configuration C: Q, dO; two stages of K, V (f32 rows of D + 8 floats). */
template <class C> struct dq_tf32_geom {
    static constexpr int D = C::D, BN = C::BN, BM = 16 * C::WARPS * C::MT, SD = D + 8;
    static constexpr size_t SMEM = (size_t)(2 * BM + 2 * 2 * BN) * SD * 4;
};

template <class P, class C, bool VARLEN = false>
__global__ void __launch_bounds__(C::WARPS * 32) dq_tf32_kernel(const fw_bwd_tc_params args)
{
    using namespace fwparts;
    using G = dq_tf32_geom<C>;
    constexpr int D = C::D, W = C::WARPS, MT = C::MT, BN = C::BN;
    constexpr int NT = W * 32, BM = G::BM, SD = G::SD;
    constexpr int KD = D / 8, NN = BN / 8, ND = D / 8;
    constexpr int CG = 4; /* n8 tiles of dQ summed at once */
    static_assert(D % 32 == 0, "head dims of whole groups");

    extern __shared__ float4 tf32_smem[];
    float *Qs = reinterpret_cast<float *>(tf32_smem), *dOs = Qs + BM * SD, *KVs = dOs + BM * SD;

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    fwparts::tile_coord tile;
    if constexpr (VARLEN)
        if (!ragged_block<float, BM, false>(args, args.has_window != 0, seq, tile)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const query_block blk = VARLEN ? query_block::at<BM, BN>(p, tile) : dq_block<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;
    {
        tile_cursor<float, D, NT> c;
        c.init(head_base<float>(p.q, p.q_s, b, h), p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(smem_u32(Qs), tid);
        c.init(head_base<float>(p.dout, p.do_s, b, h), p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(smem_u32(dOs), tid);
    }
    tile_cursor<float, D, NT> kc, vc;
    kc.init(head_base<float>(p.k, p.k_s, b, hk), p.k_s[2], n_begin, p.Lk, p.d, tid);
    vc.init(head_base<float>(p.v, p.v_s, b, hk), p.v_s[2], n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN, SD>(smem_u32(KVs), tid);
        vc.template load<BN, SD>(smem_u32(KVs + BN * SD), tid);
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

#pragma unroll 1
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            float *nx = KVs + ((it + 1) & 1) * 2 * BN * SD;
            kc.template load<BN, SD>(smem_u32(nx), tid);
            vc.template load<BN, SD>(smem_u32(nx + BN * SD), tid);
        }
        cp_async_commit();
        const float *Ks = KVs + (it & 1) * 2 * BN * SD, *Vs = Ks + BN * SD;
        const int n0 = n_begin + it * BN;

        float s[MT][NN][4], dp[MT][NN][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][j][e] = dp[mt][j][e] = 0.f;
#pragma unroll 2
        for (int kk = 0; kk < KD; kk++) {
            uint32_t aqb[MT][4], aqs[MT][4], aob[MT][4], aos[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                frag_a_rows<P, SD>(Qs, wrow0 + mt * 16, kk * 8, g, t4, aqb[mt], aqs[mt]);
                frag_a_rows<P, SD>(dOs, wrow0 + mt * 16, kk * 8, g, t4, aob[mt], aos[mt]);
            }
#pragma unroll
            for (int j = 0; j < NN; j++) {
                uint32_t bk[4], bv[4];
                frag_b_rows<P, SD>(Ks, j * 8, kk * 8, g, t4, bk);
                frag_b_rows<P, SD>(Vs, j * 8, kk * 8, g, t4, bv);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_tf32<P>(s[mt][j], aqb[mt], aqs[mt], bk);
                    mma_tf32<P>(dp[mt][j], aob[mt], aos[mt], bv);
                }
            }
        }

        /* dS: element e of tile j is row wrow0 + 16 mt + g + 8(e >> 1), key n0 + 8j + slot_row(2 t4 + (e & 1)) */
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1;
                    float pv = softmax_recompute_p(s[mt][j][e], p.scale_log2, l2[mt][r]);
                    if (need_mask && !key_visible(p, m0 + wrow0 + mt * 16 + g + r * 8, n0 + j * 8 + slot_row(2 * t4 + (e & 1))))
                        pv = 0.f;
                    dp[mt][j][e] = softmax_grad(pv, dp[mt][j][e], dl[mt][r]);
                }

        /* dQ += dS K, the tile's sum from zero on the tensor cores, added with f32 adds (their adds round toward
         * zero: kernel_dkdv_tf32.cuh) */
        uint32_t ab[MT][NN][4], as[MT][NN][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++) frag_a_acc<P>(dp[mt][j], ab[mt][j], as[mt][j]);
#pragma unroll
        for (int c0 = 0; c0 < ND; c0 += CG) { /* CG n8 tiles at once: independent accumulator chains */
            float t[MT][CG][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int c = 0; c < CG; c++) t[mt][c][0] = t[mt][c][1] = t[mt][c][2] = t[mt][c][3] = 0.f;
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int c = 0; c < CG; c++) {
                    uint32_t bk[4];
                    frag_b_cols<P, SD>(Ks, j * 8, (c0 + c) * 8, g, t4, bk);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma_tf32<P>(t[mt][c], ab[mt][j], as[mt][j], bk);
                }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int c = 0; c < CG; c++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][c0 + c][e] += t[mt][c][e];
        }
    }
    cp_async_wait<0>();

    float *dqg = head_base<float>(p.dq, p.dq_s, b, h);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) store_dq_rows<float, ND>(p, dqg, acc[mt], m0 + wrow0 + mt * 16, g, t4);
}

} /* namespace fwbwd */
#endif
