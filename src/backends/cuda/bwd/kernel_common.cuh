/* What the backward's kernels share: the dQ mode, the kinds of kernel a configuration names, and the (batch, head)
 * slice of a tensor.
 *
 * Configurations (generated/bwd_*.cu, from kernels.tsv) are structs of named constants, one per compiled kernel
 * shape, with KIND saying which kernel they configure:
 *   dK/dV   kv_kernel::mma    D, BM, WARPS, QS (query rows per sub-tile)          kernel_dkdv_mma.cuh
 *           kv_kernel::mma2d  D, BM (64), WARPS (8)                               kernel_dkdv_mma2d.cuh
 *           kv_kernel::wg     D, BM, STAGES, OVERLAP, ATOMIC_KV                   kernel_dkdv_wg.cuh
 *           kv_kernel::ws     D, BM, STAGES, FALLBACK, ATOMIC_KV                  kernel_dkdv_ws.cuh
 *           kv_kernel::cores  D, BM, BN (dQ included)                             kernel_cores.cuh
 *   dQ      dq_kernel::mma    D, WARPS, MT (m16 tiles per warp), BN               kernel_dq_mma.cuh
 *           dq_kernel::wg     D, BN, STAGES                                       kernel_dq_wg.cuh
 *           dq_kernel::ws     D, BN, STAGES, FALLBACK                             kernel_dq_ws.cuh
 * ATOMIC_KV: the configuration whose kernel runs the atomic dQ mode (the overlapped schedule and the producer
 * warpgroup are for the deterministic mode); FALLBACK: the cp.async kernel that runs where the driver refuses a
 * tensor map. */
#ifndef FW_BWD_KERNEL_COMMON_CUH
#define FW_BWD_KERNEL_COMMON_CUH

#include "backends/cuda/bwd/params.h"
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/parts/scheduler.cuh"

namespace fwbwd {

/* How dQ is reduced: atomically into an f32 accumulator by the dK/dV kernel (as FlashAttention-2), or by a
 * separate dQ pass with no atomics (bit-identical run to run). */
enum class dq_mode { atomic, deterministic };

enum class kv_kernel { cores, mma, mma2d, wg, ws };
enum class dq_kernel { mma, wg, ws };

/* The (batch b, head h) slice of a tensor: base + b·s[0] + h·s[1] elements. */
template <typename T>
__device__ __forceinline__ const T *head_base(const void *base, const long long (&s)[3], int b, int h)
{
    return reinterpret_cast<const T *>(base) + (long long)b * s[0] + (long long)h * s[1];
}
template <typename T> __device__ __forceinline__ T *head_base(void *base, const long long (&s)[3], int b, int h)
{
    return reinterpret_cast<T *>(base) + (long long)b * s[0] + (long long)h * s[1];
}

/* A dQ kernel's block (grid (⌈Lq/BM⌉, H, B)): its query rows, head, kv head and the key tiles of BN its rows may see;
 * under any window the last query blocks first (under a causal mask they see the most keys). */
template <int BM, int BN> __device__ __forceinline__ fwparts::query_block dq_block(const fw_bwd_tc_params &p)
{
    const int nmb = (p.Lq + BM - 1) / BM;
    return fwparts::query_block::of<BM, BN>(p, p.has_window, nmb);
}

} /* namespace fwbwd */
#endif
