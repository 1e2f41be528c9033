/* mma.sync (m16n8k16; m16n8k8 for tf32; sm_80+) building blocks: the tensor-core products, ldmatrix, and the
 * fragment conversions that let an accumulator feed the next product from registers.
 *
 * Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t4. A C/D accumulator
 * of an m16n8 tile is float[4]: (row g, cols 2 t4, 2 t4 + 1), (row g + 8, same cols). The A operand of
 * an m16k16 step is uint32_t[4] of packed 16-bit pairs in the same row order; the C layout of two n8
 * tiles is exactly the A layout of one k16 step, which acc_to_a uses. */
#ifndef FW_PARTS_MMA_CUH
#define FW_PARTS_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fwparts {

/* A thread's place in the accumulator layout of its warp's rows: the warp's first row within the block, g =
 * lane / 4 and t4 = lane % 4 (the parts that walk a fragment take any struct with these members). */
struct frag_coord {
    int wrow0, g, t4;
};

/* Two floats rounded to one packed pair of T (f16 or bf16), lower address first. */
template <typename T> struct pack2;
template <> struct pack2<__half> {
    static __device__ __forceinline__ uint32_t make(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};
template <> struct pack2<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t make(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};

/* c (m16 × n8, f32) += a (m16 × k16, T) · b (k16 × n8, T; b0, b1 its two k8 halves). */
template <typename T>
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c (m16 × n8, f32) += a (m16 × k8, tf32) · b (k8 × n8, tf32; b0, b1 its rows t4 and t4 + 4): the f32
 * kernels' product (tf32.cuh splits f32 operands for it). */
__device__ __forceinline__ void mma1688_tf32(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8 × 8 matrices of 16-bit elements from shared memory (each lane gives one row address). */
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* As ldsm_x4, each matrix transposed: B operands stored k-major. */
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* The transpose of an 8 × 8 matrix of 16-bit elements held one row fragment a lane (row lane / 4,
 * elements 2 (lane % 4) and + 1): an accumulator's C layout becomes the B layout of the transpose (sm_75+). */
__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* The A fragment (m16 × k16) of one k16 step from the accumulators of its two n8 tiles: the C layout
 * of an m16n8 product is the A layout of half a k16 step, so P (and dS) feed the next product
 * straight from registers. */
template <typename T>
__device__ __forceinline__ void acc_to_a(const float (&lo)[4], const float (&hi)[4], uint32_t (&a)[4])
{
    a[0] = pack2<T>::make(lo[0], lo[1]);
    a[1] = pack2<T>::make(lo[2], lo[3]);
    a[2] = pack2<T>::make(hi[0], hi[1]);
    a[3] = pack2<T>::make(hi[2], hi[3]);
}

/* A whole row of accumulator tiles (2 K n8 tiles) as the A operands of K k16 steps: P before P·V in
 * the forward, Pᵀ and dS(ᵀ) before their products in the backward. Only once the products that read
 * `a` have retired (a wgmma's registers may not change while it runs). */
template <typename T, int K>
__device__ __forceinline__ void acc_tiles_to_a(const float (&acc)[2 * K][4], uint32_t (&a)[K][4])
{
#pragma unroll
    for (int kk = 0; kk < K; kk++) acc_to_a<T>(acc[2 * kk], acc[2 * kk + 1], a[kk]);
}

/* The same for two rows of tiles, step by step (Pᵀ and dSᵀ of the backward's dK/dV products). */
template <typename T, int K>
__device__ __forceinline__ void acc_tiles_to_a(const float (&x)[2 * K][4], uint32_t (&xa)[K][4], const float (&y)[2 * K][4],
                                               uint32_t (&ya)[K][4])
{
#pragma unroll
    for (int kk = 0; kk < K; kk++) {
        acc_to_a<T>(x[2 * kk], x[2 * kk + 1], xa[kk]);
        acc_to_a<T>(y[2 * kk], y[2 * kk + 1], ya[kk]);
    }
}

/* acc[mt][2·np .. 2·np+1] += A[mt] · B_np for np < NP and every m16 tile mt: B_np is the k16 × n16 block
 * that ldmatrix (TRANS: .trans, for B stored k-major) reads at lane address addr(np) (mma_ab_at), or
 * b + 2·(np·step + off) with step and off in elements of the shared tile (mma_ab). */
template <typename T, bool TRANS, int MT, int NP, int N, class Addr>
__device__ __forceinline__ void mma_ab_at(float (&acc)[MT][N][4], const uint32_t (&a)[MT][4], Addr &&addr)
{
    static_assert(2 * NP <= N, "accumulator tiles");
#pragma unroll
    for (int np = 0; np < NP; np++) {
        uint32_t b0, b1, b2, b3;
        if (TRANS)
            ldsm_x4_t(addr(np), b0, b1, b2, b3);
        else
            ldsm_x4(addr(np), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma16816<T>(acc[mt][2 * np], a[mt], b0, b1);
            mma16816<T>(acc[mt][2 * np + 1], a[mt], b2, b3);
        }
    }
}

template <typename T, bool TRANS, int MT, int NP, int N>
__device__ __forceinline__ void mma_ab(float (&acc)[MT][N][4], const uint32_t (&a)[MT][4], uint32_t b, int off, int step)
{
    mma_ab_at<T, TRANS, MT, NP>(acc, a, [&](int np) { return b + (uint32_t)((np * step + off) * 2); });
}

/* Lane addresses (byte offsets within a tile of rows SD elements apart) of the ldmatrix.x4 loads of
 * mma.sync operands. A (row-major, m16 × k16): matrices (r0-7, c0-7), (r8-15, c0-7), (r0-7, c8-15),
 * (r8-15, c8-15) from row `row0`; the same pattern reads a k-major B with .trans. */
template <int SD> __device__ __forceinline__ uint32_t ldsm_a_lane(int row0, int lane)
{
    return (uint32_t)(((row0 + (lane & 15)) * SD + (lane >> 4) * 8) * 2);
}
/* B stored n-major (keys as rows, non-trans): (n0-7, k0-7), (n0-7, k8-15), (n8-15, k0-7), (n8-15, k8-15). */
template <int SD> __device__ __forceinline__ uint32_t ldsm_b_lane(int lane)
{
    return (uint32_t)((((lane & 7) + ((lane >> 4) << 3)) * SD + ((lane >> 3) & 1) * 8) * 2);
}

} /* namespace fwparts */
#endif
