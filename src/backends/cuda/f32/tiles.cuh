/* The f32 kernels' tile copies into shared memory: rows of a (seq, D) f32 matrix with cp.async (16-byte copies
 * with zero-fill where the tensors are 16-byte aligned, 4-byte copies otherwise), head_dim D padded with zeros
 * to the bucket's DB, rows past the tensor zero-filled; K and V of a key tile as one copy group; Q through
 * registers, pre-scaled. */
#ifndef FW_F32_TILES_CUH
#define FW_F32_TILES_CUH

#include "backends/cuda/f32/params.h"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/swizzle.cuh"

namespace fwf32 {

/* The layout of a copied tile: rows as they are, or the wgmma kernels' raw tiles in the quad-row swizzle
 * (swizzle.cuh), whose 4 x 4 transposes then read without bank conflicts. */
constexpr bool ROWS_PLAIN = false, QUAD_SWIZZLED = true;

/* Rows [0, ROWS) × cols [0, DB) of a tile into shared memory (row stride SST floats); rows >= nrows and
 * cols >= D are zero-filled. src points at the tile's row 0 (a valid row); rs = row stride. */
template <int ROWS, int DB, int SST, int NT, bool SWZ = ROWS_PLAIN>
__device__ __forceinline__ void load_tile(float *dst, const float *src, long long rs, int nrows, int D, int vec16, int tid)
{
    using namespace fwparts;
    auto chunk = [](int r, int c4) { return SWZ ? quad_swizzle_chunk(r, c4) : c4; }; /* 16-byte chunk c4 of row r */
    constexpr int CH = DB / 4, RP = NT / CH; /* 16-byte chunks per row; rows per pass of NT threads */
    if (NT % CH == 0 && vec16 && nrows >= ROWS && D == DB) {
        /* a whole tile (every key tile but the last, D = DB): one base address per thread, then a fixed step; the
         * checked loop below costs ~20 instructions a copy, 3-4% of the exact kernel's instructions, and ~45 in the
         * wgmma kernels' split warps, a quarter of their time (Nsight Compute's source view) */
        const int r0 = tid / CH, c4 = tid % CH;
        const float *g = src + r0 * rs + 4 * c4;
        constexpr bool XOR_STEP = SWZ && RP % 8 == 0 && (RP & (RP - 1)) == 0; /* see quad_swizzle_step */
        const int cx = XOR_STEP ? chunk(r0, c4) : c4;
#pragma unroll(NT < 128 ? 1 : (ROWS + RP - 1) / RP)
        for (int k = 0; k < (ROWS + RP - 1) / RP; k++) {
            const int r = r0 + k * RP;
            if (ROWS % RP && r >= ROWS) break;
            const int ch = XOR_STEP ? quad_swizzle_step<RP>(cx, k) : chunk(r, c4);
            cp_async16(dst + r * SST + 4 * ch, g + k * RP * rs, 16);
        }
    } else if (vec16) {
        /* fewer than 128 threads: the wgmma kernels' split warps, at 24 registers (unrolled, they spill) */
#pragma unroll(NT < 128 ? 1 : 4)
        for (int idx = tid; idx < ROWS * CH; idx += NT) {
            const int r = idx / CH, c = (idx % CH) * 4;
            const float *g = src;
            int bytes = 0;
            if (r < nrows && c < D) {
                g = src + r * rs + c;
                bytes = min(16, (D - c) * 4);
            }
            cp_async16(dst + r * SST + chunk(r, c >> 2) * 4, g, bytes);
        }
    } else {
        for (int idx = tid; idx < ROWS * DB; idx += NT) {
            const int r = idx / DB, c = idx % DB;
            const bool ok = r < nrows && c < D;
            cp_async4(dst + r * SST + (SWZ ? chunk(r, c >> 2) * 4 + (c & 3) : c), ok ? src + r * rs + c : src, ok ? 4 : 0);
        }
    }
}

/* K and V of key tile t (keys t·BN..) into Kd, Vd as one cp.async group (a double buffer's stage). */
template <int BN, int DB, int KST, int VST, int NT>
__device__ __forceinline__ void load_kv(float *Kd, float *Vd, const float *kp, const float *vp, const fw_f32_params &a,
                                        int t, int tid)
{
    const int n0 = t * BN;
    load_tile<BN, DB, KST, NT>(Kd, kp + (long long)n0 * a.ks[2], a.ks[2], a.Lk - n0, a.D, a.vec16, tid);
    load_tile<BN, DB, VST, NT>(Vd, vp + (long long)n0 * a.vs[2], a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
    fwparts::cp_async_commit();
}

/* The Q tile (rows valid < rows) through registers, pre-scaled by sc and zero-padded, to Qs. */
template <int BM, int DB, int QST, int NT>
__device__ __forceinline__ void load_q(float *Qs, const float *q, long long rs, int rows, int D, float sc, int vec16, int tid)
{
    if (vec16) {
        constexpr int CH = DB / 4;
        for (int idx = tid; idx < BM * CH; idx += NT) {
            const int r = idx / CH, c = (idx % CH) * 4;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < rows) {
                const float *g = q + r * rs + c;
                if (c + 4 <= D) x = *reinterpret_cast<const float4 *>(g);
                else {
                    if (c < D) x.x = g[0];
                    if (c + 1 < D) x.y = g[1];
                    if (c + 2 < D) x.z = g[2];
                }
            }
            x.x *= sc; x.y *= sc; x.z *= sc; x.w *= sc;
            *reinterpret_cast<float4 *>(Qs + r * QST + c) = x;
        }
    } else {
        for (int idx = tid; idx < BM * DB; idx += NT) {
            const int r = idx / DB, c = idx % DB;
            Qs[r * QST + c] = (r < rows && c < D) ? q[r * rs + c] * sc : 0.0f;
        }
    }
}

} /* namespace fwf32 */
#endif
