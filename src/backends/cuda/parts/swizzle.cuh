/* The 128-byte-swizzled shared-memory layout that wgmma reads through matrix descriptors and TMA writes
 * with CU_TENSOR_MAP_SWIZZLE_128B: a ROWS × D tile of 16-bit elements is stored as D/64 column blocks of
 * ROWS × 64 elements (128 bytes a row, every block 1024-byte aligned), and within a row the 16-byte chunk
 * c sits at chunk c ^ (row % 8). Every 8 consecutive rows then spread over all 32 banks whichever column
 * a warp reads. sw_cursor fills such tiles with cp.async (any stride, zero-filled padding). The f32 kernels' raw
 * tiles have a swizzle of their own (quad_swizzle_chunk). */
#ifndef FW_PARTS_SWIZZLE_CUH
#define FW_PARTS_SWIZZLE_CUH

#include <stdint.h>
#include "backends/cuda/parts/copy.cuh"

namespace fwparts {

/* Byte offset of 16-byte chunk `chunk` (0..7) of row `row` within one 128-byte-swizzled column block. */
__device__ __forceinline__ int sw128_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }
/* ... and of chunk `chunk` (0.., across column blocks) of row `row` in a tile of ROWS rows. */
template <int ROWS> __device__ __forceinline__ uint32_t sw128_tile_offset(int row, int chunk)
{
    return (uint32_t)((chunk >> 3) * ROWS * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

/* The quad-row swizzle of the f32 kernels' raw tiles (row-major f32 rows of 16 chunks, copied as they are before
 * their split into wgmma tiles): chunk c of row r sits at chunk c ^ ((r / 4) % 8), so that a 4 x 4 transpose,
 * which reads one chunk of 4 consecutive rows, and a quarter warp's 8 such reads hit 8 different chunks. */
__device__ __forceinline__ int quad_swizzle_chunk(int r, int c) { return c ^ ((r >> 2) & 7); }
/* ... of row r0 + k S, from row r0's chunk cx = quad_swizzle_chunk(r0, c), where r0 < S and S is a power of 2 and
 * a multiple of 8: (r0 + k S) / 4 = r0 / 4 + k S / 4 without carries into the swizzle's 3 bits, so a constant
 * XOR, and the compiler folds each row's address into a fixed offset. */
template <int S> __device__ __forceinline__ int quad_swizzle_step(int cx, int k) { return cx ^ ((k * (S / 4)) & 7); }

/* Per-thread cursor filling ROWS x D tiles in the swizzled layout: thread tid copies chunk c = tid % (D/8)
 * of rows tid / (D/8) + i RS (RS = NT / (D/8), a multiple of 8, so the swizzle term r % 8 is the same
 * for all of a thread's rows). Rows past nrows and columns >= d are zero-filled. */
template <typename T, int D, int NT> struct sw_cursor {
    static constexpr int CPR = D / 8, RS = NT / CPR;
    static_assert(NT % CPR == 0 && RS % 8 == 0, "thread layout of the tile loads");
    const T *ptr;
    int64_t step;
    int rows_left;
    bool colok;
    uint32_t soff; /* this thread's byte offset within a tile, without the column-block term */
    uint32_t cb;   /* its column block */
    __device__ __forceinline__ void init(const T *g, int64_t ss, int row0, int nrows, int d, int tid)
    {
        const int row_in = tid / CPR, c = tid % CPR;
        ptr = g + (int64_t)(row0 + row_in) * ss + c * 8;
        step = (int64_t)RS * ss;
        rows_left = nrows - row0 - row_in;
        colok = c * 8 < d;
        cb = (uint32_t)(c / 8);
        soff = (uint32_t)sw128_offset(row_in, c % 8);
    }
    template <int ROWS> __device__ __forceinline__ void load(uint32_t sbase)
    {
        const uint32_t s0 = sbase + cb * (uint32_t)(ROWS * 128) + soff;
        const T *p = ptr;
#pragma unroll
        for (int i = 0; i < (ROWS + RS - 1) / RS; i++) {
            if (ROWS % RS == 0 || (int)(soff / 128) + i * RS < ROWS) {
                const bool ok = colok && i * RS < rows_left;
                cp_async16(s0 + (uint32_t)(i * RS * 128), ok ? (const void *)p : (const void *)ptr, ok ? 16 : 0);
            }
            p += step;
        }
        ptr += (int64_t)ROWS * (step / RS);
        rows_left -= ROWS;
    }
};

/* The dynamic shared memory's base rounded up to 1024 bytes (the swizzle's alignment); kernels that use
 * it ask for 1 KB more than their tiles. */
__device__ __forceinline__ uint32_t smem_base_1024(const void *smem_raw)
{
    return ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
}
/* The same as a generic pointer. */
__device__ __forceinline__ unsigned char *smem_align_1024(unsigned char *smem_raw)
{
    return smem_raw + ((1024u - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023u)) & 1023u);
}

} /* namespace fwparts */
#endif
