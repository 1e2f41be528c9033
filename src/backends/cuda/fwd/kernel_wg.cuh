/* The Hopper forward with wgmma and cp.async (sm_90a), and its launch. WARPGROUPS consumer warpgroups of
 * 64 query rows each (BM = 64 WARPGROUPS); every thread also loads: all of them fill the swizzled tiles with
 * cp.async (so any stride, any Lq/Lk and zero-filled padding work as in the mma.sync kernel), then
 * fence.proxy.async makes the writes visible to the tensor cores' async proxy. K/V tiles cycle through
 * STAGES = 3 stages: while S(t) reads stage t and P·V reads stage t-1, tile t+1 loads into the third.
 *
 * C: a configuration (generated/): D, BM, BN, WARPGROUPS, STAGES. Compiled for sm_90a only (the body traps
 * elsewhere); the heuristics offer it on compute capability 9.0 devices. The mainloop is written out in the
 * kernel, as kernel_mma.cuh says why. */
#ifndef FW_FWD_KERNEL_WG_CUH
#define FW_FWD_KERNEL_WG_CUH

#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/fwd/consumer_wg.cuh"
#include "backends/cuda/parts/scheduler.cuh"
#include "backends/cuda/parts/swizzle.cuh"

namespace fwfwd {

/* Shared memory of a wgmma kernel: the Q tile, STAGES stages of K and V, plus 1 KB to align the base to
 * 1024 bytes (the warp-specialised kernel adds its mbarriers). */
template <class C> constexpr size_t wg_smem_bytes()
{
    return (size_t)(C::BM + 2 * C::STAGES * C::BN) * C::D * 2 + 1024;
}

template <typename T, class C>
__global__ void __launch_bounds__(C::WARPGROUPS * 128, 1) wg_kernel(const fw_fwd_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fwparts;
    constexpr int D = C::D, BN = C::BN, ST = C::STAGES, NT = C::WARPGROUPS * 128, BM = 64 * C::WARPGROUPS;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(BM == C::BM && D % 64 == 0 && BN % 64 == 0 && ST == 3, "wgmma tile shapes");

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sQ = base, sK = sQ + Q_BYTES, sV = sK + ST * KV_BYTES;

    /* ---- tile scheduler ---- */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const query_block blk = query_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    /* ---- mainloop: prologue (Q and the first K/V tile) ---- */
    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + (int64_t)hk * p.v_sh;
    sw_cursor<T, D, NT> kc, vc;
    {
        sw_cursor<T, D, NT> qc;
        qc.init(qg, p.q_ss, m0, p.Lq, p.d, tid);
        qc.template load<BM>(sQ);
    }
    kc.init(kg, p.k_ss, n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_ss, n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN>(sK);
        vc.template load<BN>(sV);
    }
    cp_async_commit();

    wg_consumer<T, D, BN, BM> w;
    w.init(warp & 3, wg, lane);
    const uint32_t sq = sQ + (uint32_t)(wg * 64 * 128);
    /* ---- mainloop (consumer_wg.cuh's overlap); every thread also copies tile t + 1 while tile t computes ---- */
    if (n_tiles > 0) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n_tiles > 1) {
            kc.template load<BN>(sK + KV_BYTES);
            vc.template load<BN>(sV + KV_BYTES);
        }
        cp_async_commit();
        w.issue_s(sq, sK);
        wgmma_wait<0>();
        wgmma_reg_fence(w.s[0]);
        float alpha[2];
        w.softmax(p, m0, n_begin, alpha);
        w.p_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (t + 1 < n_tiles) {
            const uint32_t slot = (uint32_t)((t + 1) % ST);
            kc.template load<BN>(sK + slot * KV_BYTES);
            vc.template load<BN>(sV + slot * KV_BYTES);
        }
        cp_async_commit();
        w.issue_s(sq, sK + (uint32_t)(t % ST) * KV_BYTES);
        w.issue_pv(sV + (uint32_t)((t - 1) % ST) * KV_BYTES);
        wgmma_wait<1>(); /* S(t) done; P(t-1)·V(t-1) may still run */
        wgmma_reg_fence(w.s[0]);
        float alpha[2];
        w.softmax(p, m0, n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
        w.rescale(alpha);
        w.p_to_a();
    }
    if (n_tiles > 0) {
        w.issue_pv(sV + (uint32_t)((n_tiles - 1) % ST) * KV_BYTES);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
    }
    /* ---- epilogue ---- */
    cp_async_wait<0>();
    __syncthreads();
    w.store(p, reinterpret_cast<T *>(smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw))), m0, b, h, lane);
#else
    (void)p;
    __trap(); /* sm_90a only: the heuristics never offer it elsewhere */
#endif
}

template <typename T, class C> static cudaError_t wg_launch(const fw_fwd_params *p, int batch, cudaStream_t stream)
{
    const size_t smem = wg_smem_bytes<C>();
    const cudaError_t e = fw_cuda_smem_limit<wg_kernel<T, C>>(smem);
    if (e != cudaSuccess) return e;
    fw_fwd_params q = *p;
    q.num_m_blocks = (p->Lq + C::BM - 1) / C::BM;
    wg_kernel<T, C><<<fwparts::static_tile_scheduler::grid(q.num_m_blocks, p->H, batch), C::WARPGROUPS * 128, smem,
                      stream>>>(q);
    return fw_cuda_launch_error();
}

} /* namespace fwfwd */
#endif
