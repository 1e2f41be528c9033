/* Epilogues: the stores of accumulators that end a kernel.
 *
 * store_output (the 16-bit forward): each warp normalises its rows of O (online_softmax's 1/l), rounds them to T,
 * stages them in shared memory (the block's rows padded to D + 8 elements, or a warp's own rows swizzled: no
 * bank conflicts on the 4-byte writes of the accumulator layout either way), and copies them out with 16-byte
 * stores, whole rows per quarter warp; the row's log-sum-exp goes to lse (B, H, Lq) when asked for. Rows past Lq
 * and columns past the real head dim d are not written. P: a kernel parameter struct with o, o_sb, o_sh, o_ss,
 * lse, H, Lq, d, scale.
 *
 * store_m16_f32 (the f32 forward): the rows of one m16 tile in the accumulator layout, normalised (log2_scores'
 * final step) and stored straight to global memory, which holds f32 rows as they are.
 *
 * The backward's: a warp's m16 rows of f32 accumulators (the mma/wgmma C layout, mma.cuh) straight to global
 * memory, times a scale, rounded to T (dK, dV, dQ), or added into an f32 accumulator with atomics (dQ in the
 * atomic mode). */
#ifndef FW_PARTS_EPILOGUE_CUH
#define FW_PARTS_EPILOGUE_CUH

#include <stdint.h>
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwparts {

/* store_output's staging layouts: where chunk `chunk` (16 bytes) of staged row `row` lies, in elements.
 * stage_padded: the block's BM x (D + 8) area, rows counted in the block (conflict-free 4-byte writes through the
 * padding). stage_swizzled: a warp's own 16 MT x D area, rows counted in the warp, chunk j of row r at j ^ (r % 8)
 * (conflict-free without padding, so that a persistent kernel can stage in memory laid out for other uses, its Q
 * tile; D >= 64). */
template <int D> struct stage_padded {
    static constexpr bool BLOCK_ROWS = true;
    static __device__ __forceinline__ int at(int row, int chunk) { return row * (D + 8) + chunk * 8; }
};
template <int D> struct stage_swizzled {
    static_assert(D >= 64, "the swizzle permutes 8 chunks of a row");
    static constexpr bool BLOCK_ROWS = false;
    static __device__ __forceinline__ int at(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) * 8); }
};

/* A warp's MT m16 tiles of O (block rows w.wrow0 + 16 mt ..; this block's first row is m0; row_m, row_l: their
 * softmax statistics) to the output of (batch b, head h), staged in `stage` (Layout: the block's padded area, or
 * this warp's swizzled one; free of any reader: the caller's barrier, or for a warp's own area its previous
 * use done). w: the thread's frag_coord (mma.cuh). The parameters come by value: read through a reference, the
 * code is simplified apart from the kernel first and loads and branches differently. */
template <typename T, int D, int MT, typename P, typename W, class Layout = stage_padded<D>>
__device__ __forceinline__ void store_output(const P p, T *stage, const float (&o)[MT][D / 8][4],
                                             const float (&row_m)[MT][2], const float (&row_l)[MT][2], int m0, int b,
                                             int h, int lane, const W &w, Layout = Layout())
{
    constexpr int ND = D / 8;
    const int srow0 = Layout::BLOCK_ROWS ? w.wrow0 : 0; /* the warp's first row in the staging area */
    T *og = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)h * p.o_sh;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float l = softmax_row_sum(row_l, mt, r);
            const float inv = softmax_inv_sum(l);
            const int row = srow0 + mt * 16 + w.g + r * 8; /* in the staging area */
            const int brow = Layout::BLOCK_ROWS ? row : w.wrow0 + row; /* in the block */
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const uint32_t v = pack2<T>::make(o[mt][j][r * 2] * inv, o[mt][j][r * 2 + 1] * inv);
                *reinterpret_cast<uint32_t *>(stage + Layout::at(row, j) + w.t4 * 2) = v;
            }
            if (p.lse && w.t4 == 0 && m0 + brow < p.Lq)
                p.lse[((int64_t)b * p.H + h) * p.Lq + m0 + brow] = softmax_lse(p, row_m[mt][r], l);
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
                const uint4 v = *reinterpret_cast<const uint4 *>(stage + Layout::at(srow0 + r, col));
                *reinterpret_cast<uint4 *>(og + (int64_t)grow * p.o_ss + col * 8) = v;
            }
        }
    }
}

/* Two adjacent elements of T from f32 (dst 4-byte aligned for f16/bf16, 8-byte for f32: an even column of rows of
 * even stride). */
template <typename T> __device__ __forceinline__ void store_pair(T *dst, float x, float y)
{
    if constexpr (sizeof(T) == 4)
        *reinterpret_cast<float2 *>(dst) = make_float2(x, y);
    else
        *reinterpret_cast<uint32_t *>(dst) = pack2<T>::make(x, y);
}

/* Rows row0 + g and row0 + g + 8 of a warp's m16 x (8 ND) accumulator, times scale, into a row-major T matrix with
 * row stride ss, from column col0; rows >= nrows and columns >= d are skipped. */
template <typename T, int ND>
__device__ __forceinline__ void store_acc_rows(T *dst, long long ss, const float (&acc)[ND][4], int row0, int nrows,
                                               int d, float scale, int g, int t4)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        if (row < nrows) {
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = j * 8 + t4 * 2;
                if (col < d)
                    *reinterpret_cast<uint32_t *>(dst + (long long)row * ss + col) =
                        pack2<T>::make(acc[j][r * 2] * scale, acc[j][r * 2 + 1] * scale);
            }
        }
    }
}

/* The mma.sync backward kernels' stores, reading the bounds, strides and scale from the kernel parameters p (Lq, Lk,
 * d, dq_s, dk_s, dv_s, scale) where they are used: taken as arguments, they were loaded elsewhere and the kernels
 * compiled differently. */

/* dQ: rows row0 + g (+ 8) of a warp's m16 x (8 ND) accumulator, times p.scale, into dq (rows < p.Lq, columns < p.d). */
template <typename T, int ND, typename P>
__device__ __forceinline__ void store_dq_rows(const P &p, T *dq, const float (&acc)[ND][4], int row0, int g, int t4)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        if (row < p.Lq) {
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = j * 8 + t4 * 2;
                if (col < p.d) store_pair(dq + (long long)row * p.dq_s[2] + col, acc[j][r * 2] * p.scale, acc[j][r * 2 + 1] * p.scale);
            }
        }
    }
}

/* dK (times p.scale) and dV of the same keys row0 + g (+ 8) and columns from col0, element by element (keys < p.Lk,
 * columns < p.d). */
template <typename T, int ND, typename P>
__device__ __forceinline__ void store_dkdv_rows(const P &p, T *dk, T *dv, const float (&acc_dk)[ND][4],
                                                const float (&acc_dv)[ND][4], int row0, int col0, int g, int t4)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = row0 + g + r * 8;
        if (key < p.Lk) {
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = col0 + j * 8 + t4 * 2;
                if (col < p.d) {
                    store_pair(dk + (long long)key * p.dk_s[2] + col, acc_dk[j][r * 2] * p.scale, acc_dk[j][r * 2 + 1] * p.scale);
                    store_pair(dv + (long long)key * p.dv_s[2] + col, acc_dv[j][r * 2], acc_dv[j][r * 2 + 1]);
                }
            }
        }
    }
}

/* dst[0], dst[1] += x, y: one vector atomic on sm_90 (dst 8-byte aligned: an even column of rows of even length). */
__device__ __forceinline__ void atomic_add2(float *dst, float x, float y)
{
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(x, y));
#else
    atomicAdd(dst, x);
    atomicAdd(dst + 1, y);
#endif
}

/* The atomic dQ mode: rows row0 + g (+ 8) of a warp's m16 x (8 ND) accumulator, times p.scale, added into the f32
 * accumulator acc_g (rows of p.d elements) from column col0 (rows < p.Lq, columns < p.d). */
template <int ND, typename P>
__device__ __forceinline__ void atomic_add_dq_rows(const P &p, float *acc_g, const float (&acc)[ND][4], int row0, int col0,
                                                   int g, int t4)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        if (row < p.Lq) {
            float *dst = acc_g + (long long)row * p.d;
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = col0 + j * 8 + t4 * 2;
                if (col < p.d) atomic_add2(dst + col, acc[j][r * 2] * p.scale, acc[j][r * 2 + 1] * p.scale);
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
