/* The forward's output epilogues.
 *
 * store_output (16-bit): each warp normalises its rows of O (online_softmax's 1/l), rounds them to T,
 * stages them in shared memory (rows padded to D + 8 elements: no bank conflicts on the 4-byte writes of
 * the accumulator layout), and copies them out with 16-byte stores, whole rows per quarter warp; the row's
 * log-sum-exp goes to lse (B, H, Lq) when asked for. Rows past Lq and columns past the real head dim d are
 * not written. P: a kernel parameter struct with o, o_sb, o_sh, o_ss, lse, H, Lq, d, scale.
 *
 * store_m16_f32 (f32): the rows of one m16 tile in the accumulator layout, normalised (log2_scores' final
 * step) and stored straight to global memory, which holds f32 rows as they are. */
#ifndef FW_PARTS_EPILOGUE_CUH
#define FW_PARTS_EPILOGUE_CUH

#include <stdint.h>
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwparts {

/* A warp's MT m16 tiles of O (block rows w.wrow0 + 16 mt ..; this block's first row is m0; row_m, row_l: their
 * softmax statistics) to the output of (batch b, head h), staged in `stage` (the block's BM x (D + 8)
 * staging area, free of any reader: the caller's barrier). w: the thread's frag_coord (mma.cuh). The
 * parameters come by value: read through a reference, the code is simplified apart from the kernel first
 * and loads and branches differently. */
template <typename T, int D, int MT, typename P, typename W>
__device__ __forceinline__ void store_output(const P p, T *stage, const float (&o)[MT][D / 8][4],
                                             const float (&row_m)[MT][2], const float (&row_l)[MT][2], int m0, int b,
                                             int h, int lane, const W &w)
{
    constexpr int SD = D + 8, ND = D / 8;
    T *og = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)h * p.o_sh;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float l = softmax_row_sum(row_l, mt, r);
            const float inv = softmax_inv_sum(l);
            const int row = w.wrow0 + mt * 16 + w.g + r * 8;
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const uint32_t v = pack2<T>::make(o[mt][j][r * 2] * inv, o[mt][j][r * 2 + 1] * inv);
                *reinterpret_cast<uint32_t *>(stage + row * SD + j * 8 + w.t4 * 2) = v;
            }
            if (p.lse && w.t4 == 0 && m0 + row < p.Lq)
                p.lse[((int64_t)b * p.H + h) * p.Lq + m0 + row] = softmax_lse(p, row_m[mt][r], l);
        }
    __syncwarp();
    constexpr int CPR = D / 8;
    constexpr int TOTAL = MT * 16 * CPR;
#pragma unroll
    for (int i = 0; i < (TOTAL + 31) / 32; i++) {
        const int c = lane + i * 32;
        if (TOTAL % 32 == 0 || c < TOTAL) {
            const int r = c / CPR, col = c % CPR;
            const int grow = m0 + w.wrow0 + r;
            if (grow < p.Lq && col * 8 < p.d) {
                const uint4 v = *reinterpret_cast<const uint4 *>(stage + (w.wrow0 + r) * SD + col * 8);
                *reinterpret_cast<uint4 *>(og + (int64_t)grow * p.o_ss + col * 8) = v;
            }
        }
    }
}

/* One m16 tile of O (rows w.wrow0 + w.g and w.wrow0 + w.g + 8 of the block whose first row is m0; m, l: their
 * running max in log2 units and this lane's partial sum; w as in store_output) to the output of (batch b, head h): rows >= rows and columns >= a.D
 * not written; the LSE (natural units) to a.lse (B, H, Lq) when asked for. VEC2: where a.D is the tile's width
 * and the row 8-byte aligned, 8-byte stores (whole 32-byte sectors). P: the f32 kernels' parameters (o, os[3],
 * lse, D, H, Lq). */
template <int ND, bool VEC2, class P, class W>
__device__ __forceinline__ void store_m16_f32(const P &a, const float (&o)[ND][4], const float (&m)[2], const float (&l)[2],
                                              const W &w, int m0, int rows, int b, int h)
{
    float *op = a.o + b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const float lr = row_allreduce_sum<4>(l[rr]);
        const int row = w.wrow0 + w.g + 8 * rr;
        if (row >= rows) continue;
        const bool live = log2_scores::live(lr);
        const float inv = log2_scores::inv_sum(lr, live);
        float *orow = op + (long long)(m0 + row) * a.os[2];
        if (VEC2 && a.D == ND * 8 && (reinterpret_cast<uintptr_t>(orow) & 7) == 0) {
#pragma unroll
            for (int j = 0; j < ND; j++)
                *reinterpret_cast<float2 *>(orow + j * 8 + 2 * w.t4) = make_float2(o[j][2 * rr] * inv, o[j][2 * rr + 1] * inv);
        } else {
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = j * 8 + 2 * w.t4;
                if (col < a.D) orow[col] = o[j][2 * rr] * inv;
                if (col + 1 < a.D) orow[col + 1] = o[j][2 * rr + 1] * inv;
            }
        }
        if (a.lse && w.t4 == 0) a.lse[((long long)b * a.H + h) * a.Lq + m0 + row] = log2_scores::lse(m[rr], lr, live);
    }
}

} /* namespace fwparts */
#endif
