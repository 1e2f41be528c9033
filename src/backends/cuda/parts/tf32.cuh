/* tf32 operands of the f32 tensor-core kernels (tf32 keeps 10 of f32's 23 mantissa bits). Two precision forms,
 * the kernels' template argument:
 *   tf32    one product of the operands rounded to tf32;
 *   tf32x3  each operand split as x = big + small (big: x in tf32, small: the rest) and a·b summed as
 *           small·big + big·small + big·big in f32 (small·small is below f32's rounding): f32 accuracy.
 * Here: the rounding, the two splits (the mma.sync and the wgmma kernels measured best with different ones),
 * and the products over split operands. The tensor cores read an f32 operand truncated to its top 19 bits
 * (measured on every value tried: commit 61b7b0a), which is why small may stay an exact f32. */
#ifndef FW_PARTS_TF32_CUH
#define FW_PARTS_TF32_CUH

#include <stdint.h>
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/wgmma.cuh"

namespace fwparts {

struct tf32 {
    static constexpr bool THREE = false; /* one product, no small parts */
};
struct tf32x3 {
    static constexpr bool THREE = true; /* split operands, three products */
};

__device__ __forceinline__ uint32_t cvt_tf32(float x)
{
    uint32_t y;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
    return y;
}
/* x rounded to tf32 (to nearest, ties away) by integer ops: 2 instructions, where cvt.rna.tf32.f32 took more
 * time in the mma.sync split (commit 9fb74be) and made the wgmma kernels' tf32 mode 11% slower (85b9d27). */
__device__ __forceinline__ uint32_t round_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

/* The mma.sync kernels' split: big rounded, small = x - big exact (the tensor cores read it truncated): 3
 * instructions, against 5 with cvt.rna for both; truncating big (split_truncated) was slower there and erred
 * more (9fb74be). tf32: cvt.rna, small = 0. */
template <class P> __device__ __forceinline__ void split_rounded(float x, uint32_t &big, uint32_t &small)
{
    if (P::THREE) {
        big = round_tf32(x);
        small = __float_as_uint(x - __uint_as_float(big));
    } else {
        big = cvt_tf32(x);
        small = 0u;
    }
}

/* The wgmma kernels' split: big = x truncated to tf32, small = x - big (exact in f32): two instructions an element
 * against five for both parts rounded. The split's own error grows from ~4e-8 to ~3e-7 of max|V| (a float64
 * model of the products, commit 76f0ac9), under the ~2e-6 that the products' accumulation leaves. big = x itself
 * (the tensor cores truncate it alike) saves nothing, since small needs the truncated value, and in P's split
 * ptxas then serialised the one-warpgroup kernel's wgmmas (C7511). Big rounded (split_rounded's form) erred
 * less but was 1% slower at the short shapes. tf32: rounded by integer ops; small is not written. */
template <class P> __device__ __forceinline__ void split_truncated(float x, uint32_t &big, uint32_t &small)
{
    if (P::THREE) {
        big = __float_as_uint(x) & 0xffffe000u;
        small = __float_as_uint(x - __uint_as_float(big));
    } else {
        big = round_tf32(x);
    }
}

/* c += a·b on mma.sync m16n8k8: tf32x3 small·big + big·small + big·big from split operands (ab/as: A's big and
 * small fragments; b0b, b0s, b1b, b1s: B's), tf32 big·big. */
template <class P>
__device__ __forceinline__ void mma1688_split(float *c, const uint32_t *ab, const uint32_t *as, uint32_t b0b, uint32_t b0s,
                                              uint32_t b1b, uint32_t b1s)
{
    if (P::THREE) {
        mma1688_tf32(c, as, b0b, b1b);
        mma1688_tf32(c, ab, b0s, b1s);
    }
    mma1688_tf32(c, ab, b0b, b1b);
}

/* d (+)= A · B over K = 64 (8 k8 steps) on wgmma m64n64k8: A big/small in registers, B big at descriptor b and
 * small SMALL bytes after it, B a 64 x 64 tile of two 128-byte-swizzled column blocks. +1 in the descriptor = 16
 * bytes: 2 per k8 step inside a 128-byte row, a column block (64 rows x 128 bytes = 512 units) per 4 steps.
 * Issued and committed, not waited for. */
template <class P, uint32_t SMALL>
__device__ __forceinline__ void wgmma_split_k64(float (&d)[8][4], const uint32_t (&ab)[8][4], const uint32_t (&as)[8][4],
                                                uint64_t b, int acc)
{
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const uint64_t o = (uint64_t)((kk >> 2) * 512 + (kk & 3) * 2);
        if (P::THREE) {
            wgmma_rs_tf32<64>(d, as[kk], b + o, acc || kk > 0);
            wgmma_rs_tf32<64>(d, ab[kk], b + (SMALL >> 4) + o, 1);
            wgmma_rs_tf32<64>(d, ab[kk], b + o, 1);
        } else {
            wgmma_rs_tf32<64>(d, ab[kk], b + o, acc || kk > 0);
        }
    }
    wgmma_commit();
}

} /* namespace fwparts */
#endif
