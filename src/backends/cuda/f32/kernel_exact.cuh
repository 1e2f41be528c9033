/* The f32 forward's exact kernel (FlashAttention-2 on CUDA cores, f32 FMAs throughout) and its launch.
 *
 * Register-blocked like an SGEMM: NT = (BM/TM)·8 threads; thread (ty, tx) owns query rows ty + RS·r (r < TM,
 * RS = BM/TM) and keys tx + 8c (c < TN = BN/8) of S, and O columns 32g + 4tx + e (g < DB/32, e < 4). 8 threads
 * (lanes 8k..8k+7 of a warp) share the rows of a block, so a row's reductions are three xor-shuffles. Q (copied as
 * it is; S is scaled) and P go through shared memory: every inner step reads 16-byte vectors of Q/K (resp. P/V)
 * and does TM·TN·4 FMAs. K/V tiles by cp.async (tiles.cuh); key tiles outside the causal/window band skipped, the
 * mask applied only on tiles that straddle its edge; the online softmax is softmax.cuh's row step over single
 * elements, in log2 units.
 *
 * C: a configuration (generated/): D (the padded head dim), BM, BN, TM (query rows a thread), UNROLL (of the
 * Q·Kᵀ loop), SINGLE_KV (one K and one V buffer in turn: see below). */
#ifndef FW_F32_KERNEL_EXACT_CUH
#define FW_F32_KERNEL_EXACT_CUH

#include <math.h>
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/f32/block.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwf32 {

template <class C> struct exact_geom {
    static constexpr int DB = C::D, BM = C::BM, BN = C::BN, TM = C::TM;
    static constexpr int NT = (BM / TM) * 8;
    static constexpr int RS = BM / TM;
    static constexpr int TN = BN / 8;
    static constexpr int G = DB / 32;
    static constexpr int QST = DB + 4, KST = DB + 4, VST = DB + 4, PST = BN + 8;
    static constexpr int KVB = C::SINGLE_KV ? 1 : 2; /* K and V buffers each */
    static constexpr int SMEM_FLOATS = BM * QST + KVB * BN * KST + KVB * BN * VST + BM * PST;
    static constexpr size_t SMEM = SMEM_FLOATS * sizeof(float);
};

/* SINGLE_KV = false: K and V tiles double-buffered together (tile t+1 copies during all of iteration t).
 * SINGLE_KV = true: one K and one V buffer, in turn: V(t) copies during S(t), K(t+1) during P(t)·V(t); half the
 * K/V shared memory, so larger tiles still fit two blocks per SM. */
template <class C>
__global__ void __launch_bounds__(exact_geom<C>::NT) exact_kernel(const fw_f32_params a)
{
    using namespace fwparts;
    typedef exact_geom<C> G_;
    constexpr int DB = G_::DB, BM = G_::BM, BN = G_::BN, TM = G_::TM, UNR = C::UNROLL;
    constexpr bool KV1 = C::SINGLE_KV;
    constexpr int NT = G_::NT, RS = G_::RS, TN = G_::TN, G = G_::G;
    constexpr int QST = G_::QST, KST = G_::KST, VST = G_::VST, PST = G_::PST;
    extern __shared__ float4 smem_f4[];
    float *Qs = reinterpret_cast<float *>(smem_f4);
    float *Ks = Qs + BM * QST;            /* KVB stages */
    float *Vs = Ks + G_::KVB * BN * KST; /* KVB stages */
    float *Ps = Vs + G_::KVB * BN * VST;

    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;
    stagger(a);
    query_block blk;
    blk.init_static(a, BM, BN, true);
    const int h = blk.h, b = blk.b, m0 = blk.m0, rows = blk.rows, t_begin = blk.t_begin, t_end = blk.t_end;
    const float *qp = blk.qp, *kp = blk.kp, *vp = blk.vp;
    const band bd = blk.bd;

    int lo[TM], hi[TM];
#pragma unroll
    for (int r = 0; r < TM; r++) key_range(a, (long long)m0 + ty + RS * r, &lo[r], &hi[r]);

    float o[TM][4 * G], m[TM], l[TM];
#pragma unroll
    for (int r = 0; r < TM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < 4 * G; c++) o[r][c] = 0.0f;
    }

    /* Q as it is (S is scaled instead), copied like K: loaded through registers to be pre-scaled, its wait was 16% of
     * the samples at L=128 (Nsight Compute's source view) */
    load_tile<BM, DB, QST, NT>(Qs, qp, a.qs[2], rows, a.D, a.vec16, tid);
    if (t_begin < t_end) {
        const int n0 = t_begin * BN;
        load_tile<BN, DB, KST, NT>(Ks, kp + (long long)n0 * a.ks[2], a.ks[2], a.Lk - n0, a.D, a.vec16, tid);
        if (!KV1) /* KV1: V(t_begin) in the loop, as every V; in the prologue 0.5-1% slower at every L */
            load_tile<BN, DB, VST, NT>(Vs, vp + (long long)n0 * a.vs[2], a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
    }
    cp_async_commit();
    if (t_begin >= t_end) cp_async_wait<0>(); /* no tile: nothing to wait on the copies later */
    const float sc = a.scale_log2;

    for (int t = t_begin; t < t_end; t++) {
        const int st = KV1 ? 0 : (t - t_begin) & 1;
        /* Tile t landed, and every thread is done with iteration t-1 (stage st^1 and Ps): one barrier
         * covers both, then the copy of tile t+1 into stage st^1 overlaps this whole iteration. */
        cp_async_wait<0>();
        __syncthreads();
        if (KV1) { /* V(t) into the V buffer, free since everyone finished P(t-1)·V(t-1) */
            const int n0 = t * BN;
            load_tile<BN, DB, VST, NT>(Vs, vp + (long long)n0 * a.vs[2], a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
            cp_async_commit();
        } else if (t + 1 < t_end) {
            load_kv<BN, DB, KST, VST, NT>(Ks + (st ^ 1) * BN * KST, Vs + (st ^ 1) * BN * VST, kp, vp, a, t + 1, tid);
        }
        const float *Kt = Ks + st * BN * KST, *Vt = Vs + st * BN * VST;

        /* S = Q·Kᵀ, then times scale·log2 e (log2 units) */
        float s[TM][TN];
#pragma unroll
        for (int r = 0; r < TM; r++)
#pragma unroll
            for (int c = 0; c < TN; c++) s[r][c] = 0.0f;
#pragma unroll UNR
        for (int d = 0; d < DB; d += 4) {
            float4 qv[TM], kv[TN];
#pragma unroll
            for (int r = 0; r < TM; r++) qv[r] = *reinterpret_cast<const float4 *>(Qs + (ty + RS * r) * QST + d);
#pragma unroll
            for (int c = 0; c < TN; c++) kv[c] = *reinterpret_cast<const float4 *>(Kt + (tx + 8 * c) * KST + d);
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int c = 0; c < TN; c++) {
                    float x = s[r][c];
                    x = fmaf(qv[r].x, kv[c].x, x);
                    x = fmaf(qv[r].y, kv[c].y, x);
                    x = fmaf(qv[r].z, kv[c].z, x);
                    x = fmaf(qv[r].w, kv[c].w, x);
                    s[r][c] = x;
                }
        }
#pragma unroll
        for (int r = 0; r < TM; r++)
#pragma unroll
            for (int c = 0; c < TN; c++) s[r][c] *= sc;
        const int n0 = t * BN;
        if (n0 < bd.lo_max || n0 + BN > bd.hi_min) { /* tile straddles the band's edge (or Lk) */
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int c = 0; c < TN; c++) {
                    const int j = n0 + tx + 8 * c;
                    if (j < lo[r] || j >= hi[r]) s[r][c] = -INFINITY;
                }
        }
        /* online softmax: a row over the 8 lanes of its thread group */
#pragma unroll
        for (int r = 0; r < TM; r++) {
            const float alpha =
                softmax_row<TN, 1, 8, row_order_tile_max>(m[r], l[r], log2_scores{}, [&](int c) -> float & { return s[r][c]; });
#pragma unroll
            for (int c = 0; c < 4 * G; c++) o[r][c] *= alpha;
        }
#pragma unroll
        for (int r = 0; r < TM; r++)
#pragma unroll
            for (int c = 0; c < TN; c++) Ps[(ty + RS * r) * PST + tx + 8 * c] = s[r][c];
        if (KV1) cp_async_wait<0>(); /* V(t) */
        __syncthreads();
        if (KV1 && t + 1 < t_end) { /* K(t+1) into the K buffer, which nobody reads any more */
            const int n1 = (t + 1) * BN;
            load_tile<BN, DB, KST, NT>(Ks, kp + (long long)n1 * a.ks[2], a.ks[2], a.Lk - n1, a.D, a.vec16, tid);
            cp_async_commit();
        }

        /* O += P·V */
#pragma unroll 2
        for (int j = 0; j < BN; j += 4) {
            float4 pv[TM];
#pragma unroll
            for (int r = 0; r < TM; r++) pv[r] = *reinterpret_cast<const float4 *>(Ps + (ty + RS * r) * PST + j);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                float4 vv[G];
#pragma unroll
                for (int g = 0; g < G; g++)
                    vv[g] = *reinterpret_cast<const float4 *>(Vt + (j + jj) * VST + 32 * g + 4 * tx);
#pragma unroll
                for (int r = 0; r < TM; r++) {
                    const float p = jj == 0 ? pv[r].x : (jj == 1 ? pv[r].y : (jj == 2 ? pv[r].z : pv[r].w));
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        o[r][4 * g + 0] = fmaf(p, vv[g].x, o[r][4 * g + 0]);
                        o[r][4 * g + 1] = fmaf(p, vv[g].y, o[r][4 * g + 1]);
                        o[r][4 * g + 2] = fmaf(p, vv[g].z, o[r][4 * g + 2]);
                        o[r][4 * g + 3] = fmaf(p, vv[g].w, o[r][4 * g + 3]);
                    }
                }
            }
        }
    }

    /* epilogue: O / l, the LSE (softmax.cuh's log2_scores) */
    float *op = a.o + b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int r = 0; r < TM; r++) {
        const float lr = row_allreduce_sum<8>(l[r]);
        const int row = ty + RS * r;
        if (row >= rows) continue;
        const bool live = log2_scores::live(lr);
        const float inv = log2_scores::inv_sum(lr, live);
        float *orow = op + (long long)(m0 + row) * a.os[2];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const int c0 = 32 * g + 4 * tx;
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (c0 + e < a.D) orow[c0 + e] = o[r][4 * g + e] * inv;
        }
        if (a.lse && tx == 0) a.lse[((long long)b * a.H + h) * a.Lq + m0 + row] = log2_scores::lse(m[r], lr, live);
    }
}

/* The grid: heads first where the plan says so (fw_f32_plan.heads_first, set in the parameters' uneven). */
template <class C>
static cudaError_t exact_launch(const fw_f32_params *a, const fw_f32_plan *, int batch, cudaStream_t s, const fw_knobs *)
{
    typedef exact_geom<C> G;
    cudaError_t e = fw_cuda_smem_limit<exact_kernel<C>>(G::SMEM);
    if (e != cudaSuccess) return e;
    const int nqb = (a->Lq + G::BM - 1) / G::BM;
    using fwparts::static_tile_scheduler;
    const dim3 grid = a->uneven ? static_tile_scheduler::grid_heads_first(nqb, a->H, batch)
                                : static_tile_scheduler::grid(nqb, a->H, batch);
    exact_kernel<C><<<grid, G::NT, G::SMEM, s>>>(*a);
    return fw_cuda_launch_error();
}

} /* namespace fwf32 */
#endif
