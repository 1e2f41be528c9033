/* The deterministic mode's dQ kernel on Hopper with cp.async (sm_90a): consumer_dq_wg.cuh's algorithm, the 2
 * warpgroups loading K and V one tile ahead into a ring of STAGES (the last tile's products overlap the next
 * tile's element-wise work, as in the forward).
 *
 * C: a configuration (kernel_common.cuh: dq_kernel::wg) with D, BN, STAGES. VARLEN: a ragged batch, one block per
 * query block of each sequence, the last first under a window (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DQ_WG_CUH
#define FW_BWD_KERNEL_DQ_WG_CUH

#include "backends/cuda/bwd/consumer_dq_wg.cuh"
#include "backends/cuda/parts/copy.cuh"

namespace fwbwd {

template <typename T, class C, bool VARLEN = false>
__global__ void __launch_bounds__(256, 1) dq_wg_kernel(const fw_bwd_tc_params args)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dq_wg_geom<C>;
    constexpr int D = C::D, NT = 256, BM = G::BM, BN = G::BN, ST = G::ST;
    using namespace fwparts;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sQ = base, sdO = sQ + G::QD_BYTES, sK = sdO + G::QD_BYTES, sV = sK + ST * G::KV_BYTES;

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    fwparts::tile_coord tile;
    if constexpr (VARLEN)
        if (!ragged_block<T, BM, false>(args, args.has_window != 0, seq, tile)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const query_block blk = VARLEN ? query_block::at<BM, BN>(p, tile) : dq_block<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    const T *qg = head_base<T>(p.q, p.q_s, b, h);
    const T *dog = head_base<T>(p.dout, p.do_s, b, h);
    const T *kg = head_base<T>(p.k, p.k_s, b, hk);
    const T *vg = head_base<T>(p.v, p.v_s, b, hk);
    {
        sw_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM>(sQ);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM>(sdO);
    }
    sw_cursor<T, D, NT> kc, vc;
    kc.init(kg, p.k_s[2], n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_s[2], n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN>(sK);
        vc.template load<BN>(sV);
    }
    cp_async_commit();

    dq_rows<T, D, BN, BM> w;
    w.init(p, sQ, sdO, warp >> 2, warp & 3, lane, m0, b, h);
    auto k_at = [&](int slot) { return sK + (uint32_t)slot * G::KV_BYTES; };
    auto v_at = [&](int slot) { return sV + (uint32_t)slot * G::KV_BYTES; };

    if (n_tiles > 0) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n_tiles > 1) {
            kc.template load<BN>(sK + G::KV_BYTES);
            vc.template load<BN>(sV + G::KV_BYTES);
        }
        cp_async_commit();
        w.issue_s_dp(k_at(0), v_at(0));
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin);
        w.ds_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (t + 1 < n_tiles) {
            const uint32_t slot = (uint32_t)((t + 1) % ST);
            kc.template load<BN>(sK + slot * G::KV_BYTES);
            vc.template load<BN>(sV + slot * G::KV_BYTES);
        }
        cp_async_commit();
        w.issue_s_dp(k_at(t % ST), v_at(t % ST));
        w.issue_dq(k_at((t - 1) % ST));
        wgmma_wait<1>(); /* S, dP of tile t done; dQ of tile t-1 may still run */
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin + t * BN);
        wgmma_wait<0>();
        wgmma_reg_fence(w.acc);
        w.ds_to_a();
    }
    if (n_tiles > 0) {
        w.issue_dq(k_at((n_tiles - 1) % ST));
        wgmma_wait<0>();
        wgmma_reg_fence(w.acc);
    }
    cp_async_wait<0>();
    w.store(p, m0, b, h);
#else
    (void)args;
    __trap();
#endif
}

} /* namespace fwbwd */
#endif
