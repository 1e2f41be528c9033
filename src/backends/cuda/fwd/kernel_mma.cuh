/* The mma.sync forward (FlashAttention-2 on sm_80+ tensor cores, f16/bf16 operands, f32 accumulation) and its
 * launch: the tile scheduler picks the block's query rows, the mainloop walks its key tiles, the epilogue
 * (epilogue.cuh) writes O and LSE.
 *
 * W warps own BM / W query rows each (MT = BM / (16 W) m16 tiles). K/V tiles of BN keys stream through a
 * ST-stage cp.async ring in shared memory (rows padded by 16 bytes so that ldmatrix is conflict-free);
 * S = Q Kᵀ stays in registers, the online softmax (softmax.cuh) runs on the accumulator fragment, and that
 * fragment is repacked in registers as the A operand of the P·V mma. Out-of-range rows and padded head-dim
 * columns are zero-filled by cp.async; masked tiles (causal, window, Lk boundary) are predicated, fully
 * masked tiles are never visited.
 *
 * The mainloop is written out in the kernel rather than called: the accumulators and the softmax statistics
 * are carried across its iterations, and a loop in a callee (optimised on its own before it is inlined)
 * gets them in other registers: the same instructions in another schedule, measured as different machine
 * code. The parts it calls are leaves, which compile to exactly what the code written out here did.
 *
 * C: a configuration (generated/): D (padded head dim), BM, BN, WARPS, STAGES, Q_IN_REGS (Q's A fragments
 * loaded once into registers), SUB_N (keys per softmax sub-tile: fewer S registers live). */
#ifndef FW_FWD_KERNEL_MMA_CUH
#define FW_FWD_KERNEL_MMA_CUH

#include <stdint.h>
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/fwd/params.h"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/scheduler.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwfwd {

/* Shared memory of the mma.sync kernel: the Q tile plus STAGES stages of K and V, rows padded by 8. */
template <class C> constexpr size_t mma_smem_bytes()
{
    return (size_t)(C::BM + 2 * C::STAGES * C::BN) * (C::D + 8) * 2;
}

template <typename T, class C>
__global__ void __launch_bounds__(C::WARPS * 32) mma_kernel(const fw_fwd_params p)
{
    using namespace fwparts;
    constexpr int D = C::D, BM = C::BM, BN = C::BN, W = C::WARPS, ST = C::STAGES, SB = C::SUB_N;
    constexpr bool QREG = C::Q_IN_REGS;
    constexpr int NT = W * 32;
    constexpr int MT = BM / (16 * W); /* m16 tiles per warp */
    constexpr int SD = D + 8;         /* padded smem row stride (elements) */
    constexpr int NN = SB / 8;        /* n8 tiles of S (one sub-tile of SB keys) */
    constexpr int ND = D / 8;         /* n8 tiles of O */
    constexpr int KD = D / 16;        /* k16 steps of Q Kᵀ */
    constexpr int KN = SB / 16;       /* k16 steps of P V */
    static_assert(MT >= 1 && MT * 16 * W == BM, "BM must be a multiple of 16 * warps");
    static_assert(D % 16 == 0 && BN % 16 == 0, "tile sizes");
    static_assert(SB % 16 == 0 && BN % SB == 0, "the sub-tile must divide the key tile");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw); /* Q, then ST stages of K and of V; at the end the output's staging */
    const uint32_t sQa = (uint32_t)__cvta_generic_to_shared(sQ);
    const uint32_t sKa = sQa + BM * SD * 2;
    const uint32_t sVa = sKa + ST * BN * SD * 2;
    constexpr uint32_t KV_STAGE_BYTES = BN * SD * 2;

    /* ---- tile scheduler ---- */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const tile_coord tile = static_tile_scheduler::get_tile(p.reverse_m, p.num_m_blocks);
    const int h = tile.h, b = tile.b, hk = h / p.group;
    const int m0 = tile.m_block * BM;

    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + (int64_t)hk * p.v_sh;

    int n_begin, n_tiles; /* the key tiles any row of this block may see */
    key_tile_range<BM, BN>(p, m0, n_begin, n_tiles);

    /* ---- mainloop: prologue (Q and the first ST-1 K/V tiles) ---- */
    {
        tile_cursor<T, D, NT> qc;
        qc.init(qg, p.q_ss, m0, p.Lq, p.d, tid);
        qc.template load<BM, SD>(sQa, tid);
    }
    tile_cursor<T, D, NT> kc, vc;
    kc.init(kg, p.k_ss, n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_ss, n_begin, p.Lk, p.d, tid);
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < n_tiles) {
            kc.template load<BN, SD>(sKa + s * KV_STAGE_BYTES, tid);
            vc.template load<BN, SD>(sVa + s * KV_STAGE_BYTES, tid);
        }
        cp_async_commit();
    }

    float acc_o[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_o[mt][j][e] = 0.f;
    float row_m[MT][2], row_l[MT][2];
    softmax_init(row_m, row_l);

    const int wrow0 = warp * MT * 16;
    const uint32_t q_lane = ldsm_a_lane<SD>(wrow0, lane); /* A (Q) */
    const uint32_t k_lane = ldsm_b_lane<SD>(lane);        /* B (K, non-trans) */
    const uint32_t v_lane = ldsm_a_lane<SD>(0, lane);     /* B (V, trans) */

    uint32_t qf[QREG ? MT : 1][QREG ? KD : 1][4];

    /* ---- mainloop: every key tile ---- */
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<ST - 2>();
        __syncthreads();
        {
            const int nx = it + ST - 1;
            if (nx < n_tiles) {
                const int slot = nx % ST;
                kc.template load<BN, SD>(sKa + slot * KV_STAGE_BYTES, tid);
                vc.template load<BN, SD>(sVa + slot * KV_STAGE_BYTES, tid);
            }
            cp_async_commit();
        }
        if (QREG && it == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < KD; kk++)
                    ldsm_x4(sQa + q_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), qf[mt][kk][0], qf[mt][kk][1],
                            qf[mt][kk][2], qf[mt][kk][3]);
        }
        const int slot = it % ST;
        const uint32_t sK = sKa + slot * KV_STAGE_BYTES, sV = sVa + slot * KV_STAGE_BYTES;
        const int n0 = n_begin + it * BN;

        /* Mask: only on tiles that cross the Lk boundary or the window's edges. */
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
        /* The tile is processed in BN / SB sub-tiles of SB keys (SB < BN: fewer S registers live, one
         * barrier and one load round per BN keys). Not unrolled, so that the sub-tiles do not overlap in
         * registers. */
#pragma unroll 1
        for (int sb = 0; sb < BN / SB; sb++) {
            const uint32_t sKs = sK + (uint32_t)(sb * SB * SD * 2), sVs = sV + (uint32_t)(sb * SB * SD * 2);
            const int ns = n0 + sb * SB;
            /* S = Q Kᵀ */
            float s[MT][NN][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < NN; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; e++) a[mt][e] = qf[QREG ? mt : 0][QREG ? kk : 0][e];
                    } else {
                        ldsm_x4(sQa + q_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), a[mt][0], a[mt][1], a[mt][2],
                                a[mt][3]);
                    }
                }
                mma_ab<T, false, MT, NN / 2>(s, a, sKs + k_lane, kk * 16, 16 * SD);
            }

            if (need_mask) mask_scores(s, p, m0, ns, frag_coord{wrow0, g, t4});
            softmax_update(row_m, row_l, s, p, rescale_rows<MT, ND>{acc_o});

            /* O += P V, P repacked from the S accumulators in registers. */
#pragma unroll
            for (int kk = 0; kk < KN; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) acc_to_a<T>(s[mt][2 * kk], s[mt][2 * kk + 1], a[mt]);
                mma_ab<T, true, MT, ND / 2>(acc_o, a, sVs + v_lane, kk * 16 * SD, 16);
            }
        }
    }

    /* ---- epilogue: every warp stages its rows through its own part of sQ once all are done with the tiles ---- */
    cp_async_wait<0>();
    __syncthreads();
    store_output<T, D>(p, sQ, acc_o, row_m, row_l, m0, b, h, lane, frag_coord{wrow0, g, t4});
}

template <typename T, class C> static cudaError_t mma_launch(const fw_fwd_params *p, int batch, cudaStream_t stream)
{
    const size_t smem = mma_smem_bytes<C>();
    const cudaError_t e = fw_cuda_smem_limit<mma_kernel<T, C>>(smem);
    if (e != cudaSuccess) return e;
    fw_fwd_params q = *p;
    q.num_m_blocks = (p->Lq + C::BM - 1) / C::BM;
    mma_kernel<T, C><<<fwparts::static_tile_scheduler::grid(q.num_m_blocks, p->H, batch), C::WARPS * 32, smem, stream>>>(q);
    return fw_cuda_launch_error();
}

} /* namespace fwfwd */
#endif
