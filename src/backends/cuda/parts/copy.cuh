/* cp.async copies from global into shared memory (sm_80+), and the tile loader of the mma.sync kernels:
 * rows of a (seq, D) matrix into a shared tile whose rows are padded (SD = D + 8 elements) so that
 * ldmatrix reads it without bank conflicts. The 128-byte-swizzled loader of the wgmma kernels is in
 * swizzle.cuh. Out-of-range rows and columns >= d are zero-filled (cp.async with 0 source bytes). */
#ifndef FW_PARTS_COPY_CUH
#define FW_PARTS_COPY_CUH

#include <stdint.h>

namespace fwparts {

/* The shared-memory address of a pointer into shared memory. */
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* 16 bytes from g into shared address saddr; bytes < 16 zero-fills the rest (0: all zeros). */
__device__ __forceinline__ void cp_async16(uint32_t saddr, const void *g, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(bytes));
}
/* 4 bytes, through L1 (the statistics rows of the backward; the f32 kernels' unaligned rows). */
__device__ __forceinline__ void cp_async4(uint32_t saddr, const void *g, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(saddr), "l"(g), "r"(bytes));
}
/* The same into shared memory at a generic pointer: converted here, after the caller's operands (the order that
 * the f32 kernels' tile loads were tuned with). */
__device__ __forceinline__ void cp_async16(void *dst, const void *g, int bytes) { cp_async16(smem_u32(dst), g, bytes); }
__device__ __forceinline__ void cp_async4(void *dst, const void *g, int bytes) { cp_async4(smem_u32(dst), g, bytes); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* N consecutive f32 values g[i0 ..] into shared memory at s, one per thread tid < N, zero past n (the backward's
 * per-row statistics of a query tile). */
template <int N> __device__ __forceinline__ void copy_f32_row(uint32_t s, const float *g, int i0, int n, int tid)
{
    if (tid < N) {
        const bool ok = i0 + tid < n;
        cp_async4(s + (uint32_t)(tid * 4), ok ? g + i0 + tid : g, ok ? 4 : 0);
    }
}

/* Per-thread cursor over a (seq, D) matrix for tile loads: thread tid copies the 16-byte chunks
 * (row_in + i * RS, col) of each tile, RS = NT / (D / E), E = 16 / sizeof(T) elements a chunk. Keeping one
 * running pointer and one row step (instead of an address per chunk) keeps the register count down. d must
 * be a multiple of E (a chunk is all in or all out). */
template <typename T, int D, int NT> struct tile_cursor {
    static constexpr int E = 16 / (int)sizeof(T), CPR = D / E;
    static constexpr bool EVEN = NT % CPR == 0; /* else (D = 96): chunk-by-chunk addressing */
    const T *ptr;  /* EVEN: &g[(row0 + row_in) * ss + col * 8]; else &g[row0 * ss] */
    int64_t step;  /* EVEN: RS * ss; else ss */
    int rows_left; /* nrows - (row0 + row_in) (EVEN) or nrows - row0 */
    int d;
    __device__ __forceinline__ void init(const T *g, int64_t ss, int row0, int nrows, int d_, int tid)
    {
        d = d_;
        if (EVEN) {
            const int row_in = tid / CPR, col = tid % CPR;
            ptr = g + (int64_t)(row0 + row_in) * ss + col * E;
            step = (int64_t)(NT / CPR) * ss;
            rows_left = nrows - row0 - row_in;
        } else {
            ptr = g + (int64_t)row0 * ss;
            step = ss;
            rows_left = nrows - row0;
        }
    }
    /* Copy ROWS rows into shared memory (row stride SD elements) and advance by ROWS rows.
     * Rows past the end and columns >= d are zero-filled. */
    template <int ROWS, int SD>
    __device__ __forceinline__ void load(uint32_t sbase, int tid)
    {
        if constexpr (EVEN) {
            constexpr int RS = NT / CPR;
            static_assert(ROWS % RS == 0, "tile chunks must divide among the threads");
            const uint32_t s0 = sbase + (uint32_t)(((tid / CPR) * SD + (tid % CPR) * E) * sizeof(T));
            const bool colok = (tid % CPR) * E < d;
            const T *p = ptr;
#pragma unroll
            for (int i = 0; i < ROWS / RS; i++) {
                const bool ok = colok && (i * RS < rows_left);
                cp_async16(s0 + (uint32_t)(i * RS * SD * sizeof(T)), p, ok ? 16 : 0);
                p += step;
            }
            ptr = p;
        } else {
            constexpr int TOTAL = ROWS * CPR;
#pragma unroll
            for (int i = 0; i < (TOTAL + NT - 1) / NT; i++) {
                const int c = tid + i * NT;
                if (TOTAL % NT == 0 || c < TOTAL) {
                    const int r = c / CPR, col = c % CPR;
                    const bool ok = r < rows_left && col * E < d;
                    const T *src = ok ? ptr + (int64_t)r * step + col * E : ptr;
                    cp_async16(sbase + (uint32_t)((r * SD + col * E) * sizeof(T)), src, ok ? 16 : 0);
                }
            }
            ptr += (int64_t)ROWS * step;
        }
        rows_left -= ROWS;
    }
};

} /* namespace fwparts */
#endif
