/* Host side of the tensor-core backward: a record's launch (its dK/dV kernel for the dQ mode, then in the
 * deterministic mode its dQ kernel) and the shared memory a record takes per mode. The generated instantiation files
 * (generated/bwd_tc_d*.cu) call tc_launch with a record's two configurations (kernel_common.cuh). */
#ifndef FW_BWD_LAUNCH_CUH
#define FW_BWD_LAUNCH_CUH

#include <type_traits>
#include "backends/cuda/bwd/kernel_dkdv_mma.cuh"
#include "backends/cuda/bwd/kernel_dkdv_mma2d.cuh"
#include "backends/cuda/bwd/kernel_dkdv_ws.cuh"
#include "backends/cuda/bwd/kernel_dq_mma.cuh"
#include "backends/cuda/bwd/kernel_dq_ws.cuh"

namespace fwbwd {

/* The wgmma dK/dV configuration that runs the deterministic mode where KV's own kernel does not: a ws record's
 * cp.async fallback (where the driver refuses a tensor map), else KV itself. */
template <class KV, kv_kernel K = KV::KIND> struct kv_wg_of { using type = KV; };
template <class KV> struct kv_wg_of<KV, kv_kernel::ws> { using type = typename KV::FALLBACK; };

/* A ws configuration whose atomic mode runs the producer-warpgroup kernel with dQ fused in (kernels.tsv's fuse, which
 * the host reads from its record: fw_bwd_fuses_dq). */
template <class KV> constexpr bool fused_dq()
{
    if constexpr (KV::KIND == kv_kernel::ws) return KV::FUSE_DQ;
    else return false;
}

/* Dynamic shared memory of the dK/dV kernel of KV in mode DQ (for ws, its cp.async fallback's; with the fused
 * dQ, the larger of the fused kernel's and its fallback's). */
template <class KV> constexpr size_t kv_smem(dq_mode dq)
{
    if constexpr (fused_dq<KV>())
        if (dq == dq_mode::atomic)
            return dkdv_ws_geom<KV, true>::SMEM > dkdv_wg_geom<typename KV::ATOMIC_KV, dq_mode::atomic>::SMEM
                       ? dkdv_ws_geom<KV, true>::SMEM
                       : dkdv_wg_geom<typename KV::ATOMIC_KV, dq_mode::atomic>::SMEM;
    if constexpr (KV::KIND == kv_kernel::wg || KV::KIND == kv_kernel::ws)
        return dq == dq_mode::atomic ? dkdv_wg_geom<typename KV::ATOMIC_KV, dq_mode::atomic>::SMEM
                                     : dkdv_wg_geom<typename kv_wg_of<KV>::type, dq_mode::deterministic>::SMEM;
    else if constexpr (KV::KIND == kv_kernel::mma2d)
        return dkdv_mma2d_geom<KV>::SMEM;
    else
        return dq == dq_mode::atomic ? dkdv_geom<KV, dq_mode::atomic>::SMEM : dkdv_geom<KV, dq_mode::deterministic>::SMEM;
}

template <class DQ> constexpr size_t dq_smem()
{
    if constexpr (DQ::KIND == dq_kernel::ws)
        return dq_ws_smem_bytes<DQ>();
    else if constexpr (DQ::KIND == dq_kernel::wg)
        return dq_wg_geom<DQ>::SMEM;
    else
        return dq_geom<DQ>::SMEM;
}

/* A record's shared memory in mode dq: the larger of the mode's kernels (the ws kernels' included). */
template <class KV, class DQ> constexpr size_t tc_smem(dq_mode dq)
{
    if (dq == dq_mode::atomic) return kv_smem<KV>(dq);
    size_t a = kv_smem<KV>(dq);
    if constexpr (KV::KIND == kv_kernel::ws)
        if (dkdv_ws_geom<KV>::SMEM > a) a = dkdv_ws_geom<KV>::SMEM;
    const size_t b = dq_smem<DQ>();
    return a > b ? a : b;
}

/* Keys per dK/dV block. */
template <class KV> constexpr int kv_block_keys()
{
    if constexpr (KV::KIND == kv_kernel::mma)
        return 16 * KV::WARPS;
    else
        return 128;
}

/* The dK/dV kernel of KV in mode DQM on grid_kv (VARLEN: on a ragged batch). */
template <typename T, class KV, dq_mode DQM, bool VARLEN = false>
static cudaError_t launch_dkdv(const fw_bwd_tc_params &p, const dim3 &grid_kv, cudaStream_t s)
{
    cudaError_t e;
    if constexpr (KV::KIND == kv_kernel::wg || KV::KIND == kv_kernel::ws) {
        using W = typename std::conditional<DQM == dq_mode::atomic, typename KV::ATOMIC_KV, typename kv_wg_of<KV>::type>::type;
        const size_t smem = dkdv_wg_geom<W, DQM>::SMEM;
        if ((e = fw_cuda_smem_limit<dkdv_wg_kernel<T, W, DQM, VARLEN>>(smem)) != cudaSuccess) return e;
        dkdv_wg_kernel<T, W, DQM, VARLEN><<<grid_kv, 256, smem, s>>>(p);
    } else if constexpr (KV::KIND == kv_kernel::mma2d) {
        const size_t smem = dkdv_mma2d_geom<KV>::SMEM;
        if ((e = fw_cuda_smem_limit<dkdv_mma2d_kernel<T, KV, DQM, VARLEN>>(smem)) != cudaSuccess) return e;
        dkdv_mma2d_kernel<T, KV, DQM, VARLEN><<<grid_kv, 256, smem, s>>>(p);
    } else {
        const size_t smem = dkdv_geom<KV, DQM>::SMEM;
        if ((e = fw_cuda_smem_limit<dkdv_mma_kernel<T, KV, DQM, VARLEN>>(smem)) != cudaSuccess) return e;
        dkdv_mma_kernel<T, KV, DQM, VARLEN><<<grid_kv, KV::WARPS * 32, smem, s>>>(p);
    }
    return fw_cuda_launch_error();
}

/* The deterministic mode's dQ kernel of DQ (VARLEN: on a ragged batch). */
template <typename T, class DQ, bool VARLEN = false> static cudaError_t launch_dq(const fw_bwd_tc_params &p, cudaStream_t s)
{
    cudaError_t e;
    if constexpr (DQ::KIND == dq_kernel::ws) {
        return dq_ws_launch<T, DQ, VARLEN>(p, s); /* its cp.async fallback where a tensor map is refused */
    } else if constexpr (DQ::KIND == dq_kernel::wg) {
        using G = dq_wg_geom<DQ>;
        if ((e = fw_cuda_smem_limit<dq_wg_kernel<T, DQ, VARLEN>>(G::SMEM)) != cudaSuccess) return e;
        const dim3 grid_q = VARLEN ? dim3(ragged_blocks<G::BM, false>(p.seqs, p.H))
                                   : dim3((unsigned)((p.Lq + G::BM - 1) / G::BM), (unsigned)p.H, (unsigned)p.B);
        dq_wg_kernel<T, DQ, VARLEN><<<grid_q, 256, G::SMEM, s>>>(p);
    } else {
        using G = dq_geom<DQ>;
        if ((e = fw_cuda_smem_limit<dq_mma_kernel<T, DQ, VARLEN>>(G::SMEM)) != cudaSuccess) return e;
        const dim3 grid_q = VARLEN ? dim3(ragged_blocks<G::BM, false>(p.seqs, p.H))
                                   : dim3((unsigned)((p.Lq + G::BM - 1) / G::BM), (unsigned)p.H, (unsigned)p.B);
        dq_mma_kernel<T, DQ, VARLEN><<<grid_q, DQ::WARPS * 32, G::SMEM, s>>>(p);
    }
    return fw_cuda_launch_error();
}

/* A tensor-core record (fw_bwd_launch_fn): dK/dV configuration KV, dQ configuration DQ. VARLEN: on a ragged batch
 * (a->seqs), one grid over every sequence (the cp.async kernels zero-fill past a sequence's rows; the producer
 * warpgroup's TMA kernels zero in shared memory the rows of the next sequence that would reach a product). */
template <typename T, class KV, class DQ, bool VARLEN = false>
static cudaError_t tc_launch(const fw_bwd_args *a, int atomic_dq, cudaStream_t s)
{
    const fw_bwd_tc_params p = make_tc_params(a);
    constexpr int BN = kv_block_keys<KV>();
    const dim3 grid_kv = VARLEN ? dim3(ragged_blocks<BN, true>(p.seqs, p.H / p.group))
                                : dim3((unsigned)((p.Lk + BN - 1) / BN), (unsigned)(p.H / p.group), (unsigned)p.B);
    cudaError_t e;
    int ws = 0;
    if (atomic_dq) {
        if constexpr (fused_dq<KV>()) /* the wg kernel's atomics where a map is refused */
            if ((e = dkdv_ws_launch<T, KV, VARLEN, true>(p, grid_kv, s, &ws)) != cudaSuccess || ws) {
                if (ws && a->dq_acc_tiled_used) *a->dq_acc_tiled_used = 1;
                return e;
            }
        return launch_dkdv<T, KV, dq_mode::atomic, VARLEN>(p, grid_kv, s);
    }
    if constexpr (fused_dq<KV>()) {
        /* A fuse record runs the atomic mode only (heuristics.cu never plans its deterministic one): its tile's
         * dK/dV kernel without dQ runs short of registers (ptxas serialises its wgmmas), so it is not built. */
        return cudaErrorNotSupported;
    } else {
        if constexpr (KV::KIND == kv_kernel::ws) /* with a TMA producer warpgroup; the cp.async kernel where a map is refused */
            if ((e = dkdv_ws_launch<T, KV, VARLEN>(p, grid_kv, s, &ws)) != cudaSuccess) return e;
        if (!ws && (e = launch_dkdv<T, KV, dq_mode::deterministic, VARLEN>(p, grid_kv, s)) != cudaSuccess) return e;
        return launch_dq<T, DQ, VARLEN>(p, s);
    }
}

} /* namespace fwbwd */
#endif
