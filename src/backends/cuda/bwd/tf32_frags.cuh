/* The fragments of the f32 tensor-core backward (kernel_dkdv_tf32.cuh, kernel_dq_tf32.cuh): mma.sync m16n8k8 tf32
 * operands read from f32 tiles in shared memory (rows padded to D + 8 floats) or repacked from accumulators, each
 * split as the precision form P asks (parts/tf32.cuh).
 *
 * Two permutations make every read an unconflicted word or 8-byte load and keep scores in registers:
 *   - inside each k8 step over a tile's columns, slot t is column 2t and slot t + 4 column 2t + 1 (the f32
 *     forward's), so a lane's two operands of a row are one float2;
 *   - inside each n8 tile of a score product, slot j is row slot_row(j) = j ^ (j >> 2) of the other operand's tile
 *     (0 1 2 3 5 4 7 6). A lane's score columns 2t, 2t + 1 then become the k slots t, t + 4 of the next product,
 *     whose B rows slot_row(2t) and slot_row(2t + 1) fall in four distinct bank groups for t = 0..3 with rows of
 *     8 mod 32 floats; so do the score product's own B rows slot_row(g) within each half warp. */
#ifndef FW_BWD_TF32_FRAGS_CUH
#define FW_BWD_TF32_FRAGS_CUH

#include "backends/cuda/parts/tf32.cuh"

namespace fwbwd {

__device__ __forceinline__ constexpr int slot_row(int j) { return j ^ (j >> 2); }

/* A (m16 × k8): rows r0 + g, r0 + g + 8 of a tile (row stride ST floats), columns k0 + 2t, k0 + 2t + 1. */
template <class P, int ST>
__device__ __forceinline__ void frag_a_rows(const float *tile, int r0, int k0, int g, int t, uint32_t (&big)[4],
                                            uint32_t (&small)[4])
{
    const float2 x0 = *reinterpret_cast<const float2 *>(tile + (r0 + g) * ST + k0 + 2 * t);
    const float2 x1 = *reinterpret_cast<const float2 *>(tile + (r0 + g + 8) * ST + k0 + 2 * t);
    fwparts::split_rounded<P>(x0.x, big[0], small[0]);
    fwparts::split_rounded<P>(x1.x, big[1], small[1]);
    fwparts::split_rounded<P>(x0.y, big[2], small[2]);
    fwparts::split_rounded<P>(x1.y, big[3], small[3]);
}

/* A (m16 × k8) from an m16 × n8 accumulator: k slot t is its column 2t, t + 4 its column 2t + 1. */
template <class P> __device__ __forceinline__ void frag_a_acc(const float (&c)[4], uint32_t (&big)[4], uint32_t (&small)[4])
{
    fwparts::split_rounded<P>(c[0], big[0], small[0]);
    fwparts::split_rounded<P>(c[2], big[1], small[1]);
    fwparts::split_rounded<P>(c[1], big[2], small[2]);
    fwparts::split_rounded<P>(c[3], big[3], small[3]);
}

/* B (k8 × n8) of a score product: n slot g is row n0 + slot_row(g) of the tile, k its columns k0 + 2t (+ 1).
 * b: big, small of k slot t, then of t + 4. */
template <class P, int ST>
__device__ __forceinline__ void frag_b_rows(const float *tile, int n0, int k0, int g, int t, uint32_t (&b)[4])
{
    const float2 x = *reinterpret_cast<const float2 *>(tile + (n0 + slot_row(g)) * ST + k0 + 2 * t);
    fwparts::split_rounded<P>(x.x, b[0], b[1]);
    fwparts::split_rounded<P>(x.y, b[2], b[3]);
}

/* B (k8 × n8) of a product over a score tile's columns: k slot t is row k0 + slot_row(2t) of the tile, t + 4 row
 * k0 + slot_row(2t + 1); n slot g its column n0 + g. */
template <class P, int ST>
__device__ __forceinline__ void frag_b_cols(const float *tile, int k0, int n0, int g, int t, uint32_t (&b)[4])
{
    fwparts::split_rounded<P>(tile[(k0 + slot_row(2 * t)) * ST + n0 + g], b[0], b[1]);
    fwparts::split_rounded<P>(tile[(k0 + slot_row(2 * t + 1)) * ST + n0 + g], b[2], b[3]);
}

/* c += a · b over split operands (parts/tf32.cuh). */
template <class P>
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&ab)[4], const uint32_t (&as)[4], const uint32_t (&b)[4])
{
    fwparts::mma1688_split<P>(c, ab, as, b[0], b[1], b[2], b[3]);
}

} /* namespace fwbwd */
#endif
