/* The f32 forward's tf32 / 3xtf32 kernel on mma.sync (m16n8k8, sm_80+) and its launch.
 *
 * 128 threads = 4 warps; warp w owns MW m16 tiles of query rows, 16·MW·w .. 16·MW·(w+1)-1, so each B fragment
 * read from shared memory (and split) feeds MW products. K/V tiles double-buffered with cp.async (tiles.cuh);
 * Q staged pre-scaled by scale·log2 e. S = Q·Kᵀ and O += P·V on the tensor cores (tf32.cuh: the operands
 * split as the precision form P asks). Q·Kᵀ permutes d inside each 8-wide k-step (slot t ↔ d 2t, slot t+4 ↔
 * d 2t+1) so that the A and B fragments are 8-byte loads; P·V permutes the keys the same way, so that S's
 * accumulator layout is P's A fragment and P never leaves registers. The online softmax is softmax.cuh's, on
 * the accumulator layout, in log2 units.
 *
 * C: a configuration (generated/): D (the padded head dim), BM (64 per m16 tile a warp: MW = BM / 64), BN,
 * WARPS (4). */
#ifndef FW_F32_KERNEL_MMA_CUH
#define FW_F32_KERNEL_MMA_CUH

#include <math.h>
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/f32/block.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "backends/cuda/parts/tf32.cuh"

namespace fwf32 {

template <class C> struct mma_geom {
    static constexpr int DB = C::D, BN = C::BN, MW = C::BM / 64, BM = 64 * MW, NT = 128;
    static constexpr int QST = DB + 8, KST = DB + 8, VST = DB + 4; /* row strides (floats): conflict-free fragments */
    static constexpr int SMEM_FLOATS = BM * QST + 2 * BN * KST + 2 * BN * VST;
    static constexpr size_t SMEM = SMEM_FLOATS * sizeof(float);
    static_assert(BM == C::BM && C::WARPS == 4, "mma.sync f32 blocks: 4 warps of MW m16 tiles");
};

template <class P, class C>
__global__ void __launch_bounds__(128) mma_kernel(const fw_f32_params a)
{
    using namespace fwparts;
    typedef mma_geom<C> G;
    constexpr int DB = G::DB, BN = G::BN, MW = G::MW;
    constexpr int BM = G::BM, NT = G::NT, QST = G::QST, KST = G::KST, VST = G::VST;
    constexpr int NS = BN / 8; /* S n-tiles */
    constexpr int NO = DB / 8; /* O n-tiles */
    extern __shared__ float4 smem_f4[];
    float *Qs = reinterpret_cast<float *>(smem_f4);
    float *Ks = Qs + BM * QST;
    float *Vs = Ks + 2 * BN * KST;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    query_block blk;
    blk.init_static(a, BM, BN);
    const int h = blk.h, b = blk.b, m0 = blk.m0, rows = blk.rows, t_begin = blk.t_begin, t_end = blk.t_end;
    const float *qp = blk.qp, *kp = blk.kp, *vp = blk.vp;
    const band bd = blk.bd;
    const int wr0 = warp * 16 * MW; /* first row of this warp; thread rows wr0 + 16mt + g (+8) */
    int lo[MW][2], hi[MW][2];
    float o[MW][NO][4], m[MW][2], l[MW][2];
#pragma unroll
    for (int mt = 0; mt < MW; mt++) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            key_range(a, (long long)m0 + wr0 + 16 * mt + g + 8 * rr, &lo[mt][rr], &hi[mt][rr]);
            m[mt][rr] = -INFINITY;
            l[mt][rr] = 0.0f;
        }
#pragma unroll
        for (int n = 0; n < NO; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }

    if (t_begin < t_end) load_kv<BN, DB, KST, VST, NT>(Ks, Vs, kp, vp, a, t_begin, tid);
    load_q<BM, DB, QST, NT>(Qs, qp, a.qs[2], rows, a.D, a.scale_log2, a.vec16, tid);

    for (int t = t_begin; t < t_end; t++) {
        const int st = (t - t_begin) & 1;
        cp_async_wait<0>();
        __syncthreads(); /* tile t landed; everyone is done with stage st^1 */
        if (t + 1 < t_end) {
            load_kv<BN, DB, KST, VST, NT>(Ks + (st ^ 1) * BN * KST, Vs + (st ^ 1) * BN * VST, kp, vp, a, t + 1, tid);
        }
        const float *Kt = Ks + st * BN * KST, *Vt = Vs + st * BN * VST;

        float s[MW][NS][4];
#pragma unroll
        for (int mt = 0; mt < MW; mt++)
#pragma unroll
            for (int n = 0; n < NS; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll 2
        for (int k0 = 0; k0 < DB; k0 += 8) {
            uint32_t ab[MW][4], as[MW][4];
#pragma unroll
            for (int mt = 0; mt < MW; mt++) {
                const float2 x0 = *reinterpret_cast<const float2 *>(Qs + (wr0 + 16 * mt + g) * QST + k0 + 2 * tg);
                const float2 x1 = *reinterpret_cast<const float2 *>(Qs + (wr0 + 16 * mt + g + 8) * QST + k0 + 2 * tg);
                split_rounded<P>(x0.x, ab[mt][0], as[mt][0]);
                split_rounded<P>(x1.x, ab[mt][1], as[mt][1]);
                split_rounded<P>(x0.y, ab[mt][2], as[mt][2]);
                split_rounded<P>(x1.y, ab[mt][3], as[mt][3]);
            }
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float2 kb = *reinterpret_cast<const float2 *>(Kt + (n * 8 + g) * KST + k0 + 2 * tg);
                uint32_t b0b, b0s, b1b, b1s;
                split_rounded<P>(kb.x, b0b, b0s);
                split_rounded<P>(kb.y, b1b, b1s);
#pragma unroll
                for (int mt = 0; mt < MW; mt++) mma1688_split<P>(s[mt][n], ab[mt], as[mt], b0b, b0s, b1b, b1s);
            }
        }
        const int n0 = t * BN;
        const bool edge = n0 < bd.lo_max || n0 + BN > bd.hi_min;
#pragma unroll
        for (int mt = 0; mt < MW; mt++) {
            if (edge) {
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = n0 + n * 8 + 2 * tg + (e & 1), rr = e >> 1;
                        if (j < lo[mt][rr] || j >= hi[mt][rr]) s[mt][n][e] = -INFINITY;
                    }
            }
            softmax_m16<row_order_tile_max_pairs>(m[mt], l[mt], s[mt], log2_scores{}, rescale_rows<MW, NO>{o}, mt);
        }
        /* O += P·V: k-slot t ↔ key 2t, slot t+4 ↔ key 2t+1 within each 8-key step */
#pragma unroll
        for (int n = 0; n < NS; n++) {
            uint32_t pb[MW][4], ps[MW][4];
#pragma unroll
            for (int mt = 0; mt < MW; mt++) {
                split_rounded<P>(s[mt][n][0], pb[mt][0], ps[mt][0]); /* P[g][2tg]     -> a0 */
                split_rounded<P>(s[mt][n][2], pb[mt][1], ps[mt][1]); /* P[g+8][2tg]   -> a1 */
                split_rounded<P>(s[mt][n][1], pb[mt][2], ps[mt][2]); /* P[g][2tg+1]   -> a2 */
                split_rounded<P>(s[mt][n][3], pb[mt][3], ps[mt][3]); /* P[g+8][2tg+1] -> a3 */
            }
            const float *v0 = Vt + (n * 8 + 2 * tg) * VST + g, *v1 = v0 + VST;
#pragma unroll
            for (int c = 0; c < NO; c++) {
                uint32_t b0b, b0s, b1b, b1s;
                split_rounded<P>(v0[c * 8], b0b, b0s);
                split_rounded<P>(v1[c * 8], b1b, b1s);
#pragma unroll
                for (int mt = 0; mt < MW; mt++) mma1688_split<P>(o[mt][c], pb[mt], ps[mt], b0b, b0s, b1b, b1s);
            }
        }
    }

#pragma unroll
    for (int mt = 0; mt < MW; mt++) store_m16_f32<NO, false>(a, o[mt], m[mt], l[mt], frag_coord{wr0 + 16 * mt, g, tg}, m0, rows, b, h);
}

template <class P, class C>
static cudaError_t mma_launch(const fw_f32_params *a, const fw_f32_plan *, int batch, cudaStream_t s, const fw_knobs *)
{
    typedef mma_geom<C> G;
    cudaError_t e = fw_cuda_smem_limit<mma_kernel<P, C>>(G::SMEM);
    if (e != cudaSuccess) return e;
    const dim3 grid = fwparts::static_tile_scheduler::grid((a->Lq + G::BM - 1) / G::BM, a->H, batch);
    mma_kernel<P, C><<<grid, G::NT, G::SMEM, s>>>(*a);
    return fw_cuda_launch_error();
}

} /* namespace fwf32 */
#endif
