/* Host side of the TMA loads (pipeline.cuh): tensor maps made with the driver's cuTensorMapEncodeTiled,
 * found once at run time so that the library needs no libcuda at link time. A map that the driver
 * refuses (a stride or alignment the copy engine cannot take) makes the maker return 0, and the caller
 * falls back to its cp.async kernel. */
#ifndef FW_PARTS_TENSOR_MAPS_CUH
#define FW_PARTS_TENSOR_MAPS_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>
#include "backends/cuda/common/cuda_common.h"

namespace fwparts {

/* cuTensorMapEncodeTiled from the driver, or NULL. */
static inline PFN_cuTensorMapEncodeTiled_v12000 tma_encode_fn()
{
    /* a function-local static: initialised once, thread-safe (calls may come from several host threads) */
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            return (PFN_cuTensorMapEncodeTiled_v12000)f;
        cudaGetLastError();
        return NULL;
    }();
    return fn;
}

/* One map of a 16-bit (d, seq, head, batch) tensor with box 64 x rows, 128-byte swizzle (the wgmma layout of
 * swizzle.cuh), or seq and head swapped when the head stride is the smaller (bshd), so that the strides
 * ascend; *swap says which. Strides of extent-1 dimensions are never used: they get a packed value. */
template <typename T>
static int tma_make(CUtensorMap *map, int *swap, const void *ptr, int d, int L, int H, int B, int64_t ss, int64_t sh,
                    int64_t sb, int rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = tma_encode_fn();
    if (!enc) return 0;
    const int64_t es = 2;
    if (L == 1) ss = (int64_t)d;
    if (H == 1) sh = (int64_t)d * L;
    if (B == 1) sb = (int64_t)d * L * H;
    *swap = sh < ss;
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)(*swap ? H : L), (cuuint64_t)(*swap ? L : H), (cuuint64_t)B};
    cuuint64_t strides[3] = {(cuuint64_t)((*swap ? sh : ss) * es), (cuuint64_t)((*swap ? ss : sh) * es), (cuuint64_t)(sb * es)};
    cuuint32_t box[4] = {64, (cuuint32_t)(*swap ? 1 : rows), (cuuint32_t)(*swap ? rows : 1), 1};
    cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUtensorMapDataType dt = sizeof(T) == 2 && std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return enc(map, dt, 4, const_cast<void *>(ptr), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* An f32 map over BH rows of Lq contiguous values (the backward's lse2 and Δ), boxes of `rows` elements
 * (zero past Lq: as the cp.async zero-fill). */
static inline int tma_make_rows_f32(CUtensorMap *map, const float *ptr, int Lq, long long BH, int rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = tma_encode_fn();
    if (!enc || !fw_cuda_aligned16(ptr) || (Lq * 4) % 16) return 0;
    cuuint64_t dims[2] = {(cuuint64_t)Lq, (cuuint64_t)BH};
    cuuint64_t strides[1] = {(cuuint64_t)Lq * 4};
    cuuint32_t box[2] = {(cuuint32_t)rows, 1}, estr[2] = {1, 1};
    return enc(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float *>(ptr), dims, strides, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} /* namespace fwparts */
#endif
