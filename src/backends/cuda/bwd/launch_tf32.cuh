/* Host side of the f32 tensor-core backward: a record's launch (fw_bwd_launch_fn) runs its dK/dV kernel, then its dQ
 * kernel, in the precision form the call asks for (fw_bwd_args.precision: tf32, else 3xtf32). The generated files
 * (generated/bwd_tf32_d*.cu) instantiate it with a record's two configurations. */
#ifndef FW_BWD_LAUNCH_TF32_CUH
#define FW_BWD_LAUNCH_TF32_CUH

#include "backends/cuda/bwd/kernel_dkdv_tf32.cuh"
#include "backends/cuda/bwd/kernel_dq_tf32.cuh"
#include "flashwatt.h"

namespace fwbwd {

/* The larger of the two kernels' shared memory. */
template <class KV, class DQ> constexpr size_t tf32_smem()
{
    return dkdv_tf32_geom<KV>::SMEM > dq_tf32_geom<DQ>::SMEM ? dkdv_tf32_geom<KV>::SMEM : dq_tf32_geom<DQ>::SMEM;
}

template <class P, class KV, class DQ, bool VARLEN> static cudaError_t tf32_run(const fw_bwd_tc_params &p, cudaStream_t s)
{
    using GK = dkdv_tf32_geom<KV>;
    using GQ = dq_tf32_geom<DQ>;
    cudaError_t e;
    const dim3 grid_kv = VARLEN ? dim3(ragged_blocks<GK::BN, true>(p.seqs, p.H / p.group))
                                : dim3((unsigned)((p.Lk + GK::BN - 1) / GK::BN), (unsigned)(p.H / p.group), (unsigned)p.B);
    if ((e = fw_cuda_smem_limit<dkdv_tf32_kernel<P, KV, VARLEN>>(GK::SMEM)) != cudaSuccess) return e;
    dkdv_tf32_kernel<P, KV, VARLEN><<<grid_kv, KV::WARPS * 32, GK::SMEM, s>>>(p);
    if ((e = fw_cuda_launch_error()) != cudaSuccess) return e;
    const dim3 grid_q = VARLEN ? dim3(ragged_blocks<GQ::BM, false>(p.seqs, p.H))
                               : dim3((unsigned)((p.Lq + GQ::BM - 1) / GQ::BM), (unsigned)p.H, (unsigned)p.B);
    if ((e = fw_cuda_smem_limit<dq_tf32_kernel<P, DQ, VARLEN>>(GQ::SMEM)) != cudaSuccess) return e;
    dq_tf32_kernel<P, DQ, VARLEN><<<grid_q, DQ::WARPS * 32, GQ::SMEM, s>>>(p);
    return fw_cuda_launch_error();
}

/* A tf32 record (fw_bwd_launch_fn): deterministic mode only (the heuristics never hand it the atomic one). */
template <class KV, class DQ, bool VARLEN = false>
static cudaError_t tf32_launch(const fw_bwd_args *a, int atomic_dq, cudaStream_t s)
{
    if (atomic_dq) return cudaErrorInvalidValue;
    const fw_bwd_tc_params p = make_tc_params(a);
    return a->precision == FW_PRECISION_TF32 ? tf32_run<fwparts::tf32, KV, DQ, VARLEN>(p, s)
                                             : tf32_run<fwparts::tf32x3, KV, DQ, VARLEN>(p, s);
}

} /* namespace fwbwd */
#endif
