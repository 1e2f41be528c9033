/* The warp-specialised Hopper forward (sm_90a): a producer warpgroup loads with the tensor memory
 * accelerator, two consumer warpgroups compute (consumer_wg.cuh), and its launch.
 *
 * Block = 3 warpgroups: warpgroup 0 produces (pipeline.cuh: one thread issues every load, a 128-byte-swizzled
 * box per column block, completing on the stage's mbarrier), warpgroups 1 and 2 consume 64 query rows each
 * and never load. K and V of a stage have their own "full" barriers (S can start before V lands); the
 * consumers' arrivals on the stage's "empty" barrier let the producer reuse it. The producer gives up
 * registers (24), the consumers take them (240). PINGPONG: the two consumers take turns issuing their
 * products, so that one's softmax runs under the other's wgmmas (FlashAttention-3's ping-pong).
 *
 * C: a configuration (generated/): D, BM (128), BN, STAGES, PINGPONG, and FALLBACK, the wgmma kernel's
 * configuration that runs where the driver refuses a tensor map. The consumers' mainloop is written out in
 * the kernel, as kernel_mma.cuh says why. */
#ifndef FW_FWD_KERNEL_WS_CUH
#define FW_FWD_KERNEL_WS_CUH

#include <string.h>
#include "backends/cuda/fwd/kernel_wg.cuh"
#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"

namespace fwfwd {

/* Tensor maps of Q, K, V (tensor_maps.cuh; swap_*: dimensions 1 and 2 are (head, seq)). */
struct tma_maps {
    CUtensorMap q, k, v;
    int swap_q, swap_k, swap_v;
};

/* The mbarriers: Q (resident), K and V per stage, "empty" per stage. */
template <class C> using ws_ring = fwparts::mbar_ring<C::STAGES, 2, 1>;

/* Shared memory: wg_smem_bytes's tiles plus the mbarriers (256 bytes). */
template <class C> constexpr size_t ws_smem_bytes()
{
    static_assert(ws_ring<C>::BYTES <= 256, "the mbarriers' room");
    return wg_smem_bytes<C>() + 256;
}

template <typename T, class C>
__global__ void __launch_bounds__(384, 1) ws_kernel(const fw_fwd_params p, const __grid_constant__ tma_maps m)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fwparts;
    constexpr int D = C::D, BM = 128, BN = C::BN, ST = C::STAGES, CB = D / 64;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(BM == C::BM && D % 64 == 0 && BN % 64 == 0 && ST >= 2, "wgmma tile shapes");

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sQ = base, sK = sQ + Q_BYTES, sV = sK + ST * KV_BYTES;
    const ws_ring<C> ring{sV + ST * KV_BYTES}; /* resident = Q; loads 0, 1 = K, V */

    /* ---- tile scheduler ---- */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const query_block blk = query_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    if (tid == 0) ring.init(256);
    __syncthreads();

    if (wg == 0) { /* ---- producer ---- */
        producer_registers<24>();
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(ring.resident(), Q_BYTES);
            tma_load_tile<CB, BM>(sQ, &m.q, m.swap_q, ring.resident(), m0, h, b);
            produce_ring(ring, n_tiles, [&](int t, int st) {
                const int n0 = n_begin + t * BN;
                const uint32_t dk = sK + (uint32_t)st * KV_BYTES, dv = sV + (uint32_t)st * KV_BYTES;
                mbar_expect_tx(ring.full(0, st), KV_BYTES);
                tma_load_tile<CB, BN>(dk, &m.k, m.swap_k, ring.full(0, st), n0, hk, b);
                mbar_expect_tx(ring.full(1, st), KV_BYTES);
                tma_load_tile<CB, BN>(dv, &m.v, m.swap_v, ring.full(1, st), n0, hk, b);
            });
        }
        return;
    }

    consumer_registers<240>();
    const int wgc = wg - 1; /* consumer 0 or 1 */
    wg_consumer<T, D, BN, BM> w;
    w.init(warp & 3, wgc, lane);
    const uint32_t sq = sQ + (uint32_t)(wgc * 64 * 128);
    const pingpong<C::PINGPONG> turns{wgc};
    turns.start();

    /* ---- mainloop (consumer_wg.cuh's overlap) ---- */
    mbar_wait(ring.resident(), 0);
    if (n_tiles > 0) {
        ring.wait_full(0, 0);
        turns.turn_begin();
        w.issue_s(sq, sK);
        turns.turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.s[0]);
        float alpha[2];
        w.softmax(p, m0, n_begin, alpha);
        w.p_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        const int st = t % ST, pst = (t - 1) % ST;
        ring.wait_full(0, t);     /* K(t) */
        ring.wait_full(1, t - 1); /* V(t-1) */
        turns.turn_begin();
        w.issue_s(sq, sK + (uint32_t)st * KV_BYTES);
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turns.turn_end();
        wgmma_wait<1>(); /* S(t) done; P(t-1)·V(t-1) may still run */
        wgmma_reg_fence(w.s[0]);
        float alpha[2];
        w.softmax(p, m0, n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
        ring.release(t - 1); /* K(t-1) and V(t-1) are read */
        w.rescale(alpha);
        w.p_to_a();
    }
    if (n_tiles > 0) {
        const int pst = (n_tiles - 1) % ST;
        ring.wait_full(1, n_tiles - 1);
        turns.turn_begin();
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turns.turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
    }

    /* ---- epilogue ---- */
    turns.finish();
    named_sync(3, 256); /* both consumers are done with every tile: the staging area is free */
    w.store(p, reinterpret_cast<T *>(smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw))), m0, b, h, lane);
#else
    (void)p;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

template <typename T, class C> static cudaError_t ws_launch(const fw_fwd_params *p, int batch, cudaStream_t stream)
{
    constexpr int BM = C::BM;
    tma_maps m;
    memset(&m, 0, sizeof m);
    if (!fwparts::tma_make<T>(&m.q, &m.swap_q, p->q, p->d, p->Lq, p->H, batch, p->q_ss, p->q_sh, p->q_sb, BM) ||
        !fwparts::tma_make<T>(&m.k, &m.swap_k, p->k, p->d, p->Lk, p->H / p->group, batch, p->k_ss, p->k_sh, p->k_sb, C::BN) ||
        !fwparts::tma_make<T>(&m.v, &m.swap_v, p->v, p->d, p->Lk, p->H / p->group, batch, p->v_ss, p->v_sh, p->v_sb, C::BN))
        return wg_launch<T, typename C::FALLBACK>(p, batch, stream); /* a layout the copy engine refuses */
    const size_t smem = ws_smem_bytes<C>();
    const cudaError_t e = fw_cuda_smem_limit<ws_kernel<T, C>>(smem);
    if (e != cudaSuccess) return e;
    fw_fwd_params q = *p;
    q.num_m_blocks = (p->Lq + BM - 1) / BM;
    ws_kernel<T, C><<<fwparts::static_tile_scheduler::grid(q.num_m_blocks, p->H, batch), 384, smem, stream>>>(q, m);
    return cudaGetLastError();
}

} /* namespace fwfwd */
#endif
