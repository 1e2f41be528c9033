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
 * C: a configuration (generated/): D, BM (128), BN, STAGES, PINGPONG, VARLEN, and (dense) FALLBACK, the wgmma
 * kernel's configuration that runs where the driver refuses a tensor map. The consumers' mainloop is written
 * out in the kernel, as kernel_mma.cuh says why.
 *
 * VARLEN: ragged batches (fw_fwd_seqs). The maps cover the packed (total, H, D) tensors; each block takes its
 * sequence from the ragged scheduler (scheduler.cuh) and loads at the sequence's rows. It then runs as the
 * dense kernel on that sequence's own problem (varlen_block), with two differences at the sequence's end:
 * query rows past it are computed but never stored (nor their LSE), and key rows past it, which belong to
 * the next sequence, are masked in S and zeroed in V's shared tile before the last P·V product, since a
 * masked P of 0 times a NaN or Inf there would still reach O (rows past the tensor's end read as zeros). */
#ifndef FW_FWD_KERNEL_WS_CUH
#define FW_FWD_KERNEL_WS_CUH

#include <string.h>
#include "backends/cuda/fwd/kernel_wg.cuh"
#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"

namespace fwfwd {

/* Tensor maps of Q, K, V (tensor_maps.cuh; swap_*: dimensions 1 and 2 are (head, seq)); VARLEN: the maps of
 * the packed tensors, and seqs, where each sequence lies in them (last, so that the dense kernels' fields
 * keep their places; they never read it). */
struct tma_maps {
    CUtensorMap q, k, v;
    int swap_q, swap_k, swap_v;
    fw_fwd_seqs seqs;
};

/* The mbarriers: Q (resident), K and V per stage, "empty" per stage. */
template <class C> using ws_ring = fwparts::mbar_ring<C::STAGES, 2, 1>;

/* Shared memory: wg_smem_bytes's tiles plus the mbarriers (256 bytes). */
template <class C> constexpr size_t ws_smem_bytes()
{
    static_assert(ws_ring<C>::BYTES <= 256, "the mbarriers' room");
    return wg_smem_bytes<C>() + 256;
}

/* A ragged block's work: its query_block (b = 0, the packed tensors' one batch entry; rows and keys counted
 * within its sequence), its sequence's first rows in the packed Q and K/V, and sp: p as that sequence's own
 * dense problem (its lengths, its diagonal lk - lq; o and lse moved to its rows). False: a slot past its
 * sequence's query blocks, no work. */
template <typename T, int BM, int BN>
__device__ __forceinline__ bool varlen_block(const fw_fwd_params &p, const fw_fwd_seqs &s, fwparts::query_block &blk,
                                             fw_fwd_params &sp, int &q_row0, int &k_row0)
{
    fwparts::tile_coord t;
    fwparts::seq_span q;
    if (!fwparts::varlen_tile_scheduler::get_tile<BM>(s, p.H, p.Lq, p.Lk, p.reverse_m != 0, t, q)) return false;
    sp = p;
    sp.Lq = q.lq;
    sp.Lk = q.lk;
    sp.off = q.lk - q.lq;
    sp.o = reinterpret_cast<T *>(p.o) + q.q_row0 * p.o_ss;
    /* The epilogue puts row i's LSE at (b H + h) Lq + i, here with b = 0 and Lq = lq: moved by q_row0 +
     * h (total_q - lq), that lands on h total_q + q_row0 + i, the (H, total_q) layout. */
    if (p.lse) sp.lse = p.lse + q.q_row0 + (int64_t)t.h * (s.total_q - q.lq);
    blk = fwparts::query_block::at<BM, BN>(sp, t);
    q_row0 = (int)q.q_row0;
    k_row0 = (int)q.k_row0;
    return true;
}

/* Zeroes rows r0 .. ROWS - 1 of a ROWS-row tile of CB column blocks (ROWS x 128 bytes each; the 128-byte
 * swizzle permutes chunks within a row, so whole rows stay whole) with NT threads (t: this one's index), and
 * orders the writes before the async proxy's (wgmma's) reads; the caller's barrier then publishes them. */
template <int CB, int ROWS, int NT> __device__ __forceinline__ void zero_tile_rows(uint32_t tile, int r0, int t)
{
    const int chunks = (ROWS - r0) * 8; /* 16 bytes each, per column block */
#pragma unroll
    for (int cb = 0; cb < CB; cb++)
        for (int i = t; i < chunks; i += NT)
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(tile + (uint32_t)(cb * ROWS * 128 + r0 * 128 + i * 16)),
                         "r"(0u)
                         : "memory");
    fwparts::fence_proxy_async();
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
    query_block blk;
    fw_fwd_params seq_p;        /* VARLEN: the block's sequence as a dense problem */
    int q_row0 = 0, k_row0 = 0; /* VARLEN: its first rows in the packed tensors */
    if constexpr (C::VARLEN) {
        if (!varlen_block<T, BM, BN>(p, m.seqs, blk, seq_p, q_row0, k_row0)) return; /* every thread alike */
    } else {
        blk = query_block::of<BM, BN>(p);
    }
    const fw_fwd_params &pp = C::VARLEN ? seq_p : p; /* the problem the mask, softmax and epilogue see */
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    if (tid == 0) ring.init(256);
    __syncthreads();

    if (wg == 0) { /* ---- producer ---- */
        producer_registers<24>();
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(ring.resident(), Q_BYTES);
            tma_load_tile<CB, BM>(sQ, &m.q, m.swap_q, ring.resident(), q_row0 + m0, h, b);
            produce_ring(ring, n_tiles, [&](int t, int st) {
                const int n0 = k_row0 + n_begin + t * BN;
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
        w.softmax(pp, m0, n_begin, alpha);
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
        w.softmax(pp, m0, n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
        ring.release(t - 1); /* K(t-1) and V(t-1) are read */
        w.rescale(alpha);
        w.p_to_a();
    }
    if (n_tiles > 0) {
        const int pst = (n_tiles - 1) % ST;
        ring.wait_full(1, n_tiles - 1);
        if constexpr (C::VARLEN) { /* V rows past the sequence: only the last tile has them */
            const int r0 = pp.Lk - (n_begin + (n_tiles - 1) * BN);
            if (r0 < BN) {
                zero_tile_rows<CB, BN, 256>(sV + (uint32_t)pst * KV_BYTES, r0, tid - 128);
                named_sync(4, 256); /* both consumers' zeros before either's product (ids 1-3: ping-pong, epilogue) */
            }
        }
        turns.turn_begin();
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turns.turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
    }

    /* ---- epilogue ---- */
    turns.finish();
    named_sync(3, 256); /* both consumers are done with every tile: the staging area is free */
    w.store(pp, reinterpret_cast<T *>(smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw))), m0, b, h, lane);
#else
    (void)p;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

/* seqs: VARLEN's batch (fw_fwd_launch_fn); its maps are of the packed tensors (one batch entry of total rows). */
template <typename T, class C>
static cudaError_t ws_launch(const fw_fwd_params *p, int batch, const fw_fwd_seqs *seqs, cudaStream_t stream)
{
    constexpr int BM = C::BM;
    tma_maps m;
    memset(&m, 0, sizeof m);
    const int Lq = C::VARLEN ? (int)seqs->total_q : p->Lq, Lk = C::VARLEN ? (int)seqs->total_k : p->Lk; /* < 2^31 */
    const int mb = C::VARLEN ? 1 : batch;
    if (!fwparts::tma_make<T>(&m.q, &m.swap_q, p->q, p->d, Lq, p->H, mb, p->q_ss, p->q_sh, p->q_sb, BM) ||
        !fwparts::tma_make<T>(&m.k, &m.swap_k, p->k, p->d, Lk, p->H / p->group, mb, p->k_ss, p->k_sh, p->k_sb, C::BN) ||
        !fwparts::tma_make<T>(&m.v, &m.swap_v, p->v, p->d, Lk, p->H / p->group, mb, p->v_ss, p->v_sh, p->v_sb, C::BN)) {
        if constexpr (C::VARLEN) return cudaErrorNotSupported; /* the caller runs the serving kernel instead */
        else return wg_launch<T, typename C::FALLBACK>(p, batch, stream); /* a layout the copy engine refuses */
    }
    const size_t smem = ws_smem_bytes<C>();
    const cudaError_t e = fw_cuda_smem_limit<ws_kernel<T, C>>(smem);
    if (e != cudaSuccess) return e;
    fw_fwd_params q = *p;
    q.num_m_blocks = (p->Lq + BM - 1) / BM;
    dim3 grid;
    if constexpr (C::VARLEN) {
        m.seqs = *seqs;
        grid = dim3((unsigned)fwparts::varlen_tile_scheduler::blocks(seqs->total_q, seqs->batch, p->H, BM));
    } else {
        grid = fwparts::static_tile_scheduler::grid(q.num_m_blocks, p->H, batch);
    }
    ws_kernel<T, C><<<grid, 384, smem, stream>>>(q, m);
    return fw_cuda_launch_error();
}

} /* namespace fwfwd */
#endif
