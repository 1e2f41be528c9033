/* The warp-specialised Hopper forward (sm_90a): a producer warpgroup loads with the tensor memory
 * accelerator, two or three consumer warpgroups compute (consumer_wg.cuh), and its launch.
 *
 * Block = 1 + BM / 64 warpgroups: warpgroup 0 produces (pipeline.cuh: one thread issues every load, a
 * 128-byte-swizzled box per column block, completing on the stage's mbarrier), the others consume 64 query rows
 * each and never load. K and V of a stage have their own "full" barriers (S can start before V lands); the
 * consumers' arrivals on the stage's "empty" barrier let the producer reuse it. The producer gives up
 * registers (24), the consumers take them (ws_consumer_registers). PINGPONG (two consumers): they take turns
 * issuing their products, so that one's softmax runs under the other's wgmmas (FlashAttention-3's ping-pong).
 *
 * C: a configuration (generated/): D, BM (128 or 192), BN, STAGES, PINGPONG, VARLEN, PERSISTENT and (dense) FALLBACK,
 * the wgmma kernel's configuration that runs where the driver refuses a tensor map. The consumers' mainloop is
 * written out (consume_query_block), as kernel_mma.cuh says why.
 *
 * PERSISTENT (dense): one block an SM loops over the query blocks (scheduler.cuh's persistent order: a head's
 * query blocks side by side, or under causal-like masks the heaviest of every head first, dealt in a snake).
 * The stage ring runs on across them, and the producer loads the next query block's K(0), V(0) and Q while the
 * consumers finish this one: what a grid of one block a tile pays at every block's start and end, which
 * weighs most at short sequences. Q is released once read (q_free), or after the epilogue where O stages in
 * Q's rows (ws_stage_in_q).
 *
 * VARLEN: ragged batches (fw_cuda_seqs). The maps cover the packed (total, H, D) tensors; each block takes its
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
    fw_cuda_seqs seqs;
};

/* A block: the producer warpgroup and BM / 64 consumer warpgroups (two, or three at BM = 192, FlashAttention-3's
 * tile at head dim 64). The producer gives up registers so that the consumers can take them: 240 each for two,
 * 160 for three (65536 a block). */
template <class C> constexpr int ws_consumer_threads() { return C::BM / 64 * 128; }
template <class C> constexpr int ws_threads() { return ws_consumer_threads<C>() + 128; }
template <class C> constexpr int ws_consumer_registers() { return C::BM == 128 ? 240 : 160; }
static_assert(128 * 24 + 384 * 160 <= 65536, "three consumers' registers");

/* The mbarriers: Q (resident), K and V per stage, "empty" per stage. */
template <class C> using ws_ring = fwparts::mbar_ring<C::STAGES, 2, 1>;

/* PERSISTENT: where the epilogue stages O. Its own area after the mbarriers (store_output's BM x (D + 8)
 * elements) where that fits the 227 KB a block may have; else each warp's 16 rows of D elements in its
 * consumer's rows of the Q tile, once read (parts/epilogue.cuh: stage_swizzled; the next Q then loads after the
 * epilogue, as in FlashAttention-3). Measured on an H200 (D = 64), the padded area ran 2-8% faster than unpadded swizzled
 * rows in the same place. */
template <class C> constexpr size_t ws_own_stage_bytes() { return (size_t)C::BM * (C::D + 8) * 2; }
template <class C> constexpr bool ws_stage_in_q()
{
    return wg_smem_bytes<C>() + 256 + ws_own_stage_bytes<C>() > 232448;
}

/* Shared memory: wg_smem_bytes's tiles plus the mbarriers (256 bytes; PERSISTENT: one more, q_free), and
 * PERSISTENT's own staging area where it has one. */
template <class C> constexpr size_t ws_smem_bytes()
{
    static_assert(ws_ring<C>::BYTES + 8 <= 256, "the mbarriers' room");
    return wg_smem_bytes<C>() + 256 + (C::PERSISTENT && !ws_stage_in_q<C>() ? ws_own_stage_bytes<C>() : 0);
}

/* A ragged block's work: its query_block (b = 0, the packed tensors' one batch entry; rows and keys counted
 * within its sequence), its sequence's first rows in the packed Q and K/V, and sp: p as that sequence's own
 * dense problem (its lengths, its diagonal lk - lq; o and lse moved to its rows). False: a slot past its
 * sequence's query blocks, no work. */
template <typename T, int BM, int BN>
__device__ __forceinline__ bool varlen_block(const fw_fwd_params &p, const fw_cuda_seqs &s, fwparts::query_block &blk,
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

/* The producer's loads of one query block: Q into the resident buffer and its n_tiles K/V tiles, ring tiles
 * kt0 .. (the ring runs on across a persistent block's query blocks). item: the block's query blocks so far;
 * from the second on, Q waits until the consumers have freed it (q_free's phase item - 1), so K(0) and V(0),
 * whose stage the previous query block has long released, load first. */
template <class C>
__device__ __forceinline__ void produce_query_block(const ws_ring<C> &ring, const tma_maps &m, uint32_t sQ, uint32_t sK,
                                                    uint32_t sV, uint32_t q_free, const fwparts::query_block &blk,
                                                    int q_row0, int k_row0, int kt0, int item)
{
    using namespace fwparts;
    constexpr int CB = C::D / 64, BN = C::BN;
    constexpr uint32_t Q_BYTES = C::BM * C::D * 2, KV_BYTES = BN * C::D * 2;
    auto load_kv = [&](int t) {
        const int kt = kt0 + t, st = ws_ring<C>::stage_of(kt);
        const int n0 = k_row0 + blk.n_begin + t * BN;
        const uint32_t dk = sK + (uint32_t)st * KV_BYTES, dv = sV + (uint32_t)st * KV_BYTES;
        ring.wait_empty(kt);
        mbar_expect_tx(ring.full(0, st), KV_BYTES);
        tma_load_tile<CB, BN>(dk, &m.k, m.swap_k, ring.full(0, st), n0, blk.hk, blk.b);
        mbar_expect_tx(ring.full(1, st), KV_BYTES);
        tma_load_tile<CB, BN>(dv, &m.v, m.swap_v, ring.full(1, st), n0, blk.hk, blk.b);
    };
    const int early = item > 0 && blk.n_tiles > 0;
    if (early) load_kv(0);
    if (item > 0) mbar_wait(q_free, (uint32_t)((item - 1) & 1));
    mbar_expect_tx(ring.resident(), Q_BYTES);
    tma_load_tile<CB, C::BM>(sQ, &m.q, m.swap_q, ring.resident(), q_row0 + blk.m0, blk.h, blk.b);
    for (int t = early; t < blk.n_tiles; t++) load_kv(t);
}

/* A consumer warpgroup's mainloop (consumer_wg.cuh's overlap) and epilogue for one query block whose K/V tiles
 * are ring tiles kt0 ..; pp: the problem its mask, softmax and epilogue see; stage: the epilogue's staging area,
 * the block's (over the tiles, so both consumers finish reading them first; PERSISTENT, its own) or this
 * warp's rows of Q (ws_stage_in_q). PERSISTENT: the block's last stage and Q (after the epilogue where it
 * stages in Q) are released for the next query block. */
template <typename T, class C>
__device__ __forceinline__ void consume_query_block(wg_consumer<T, C::D, C::BN, C::BM> &w, const ws_ring<C> &ring,
                                                    const fw_fwd_params &pp, const fwparts::query_block &blk, uint32_t sq,
                                                    uint32_t sK, uint32_t sV, uint32_t q_free, T *stage, int kt0, int item,
                                                    int wgc, int tid, int lane)
{
    using namespace fwparts;
    constexpr int D = C::D, BN = C::BN, CB = D / 64;
    constexpr uint32_t KV_BYTES = BN * D * 2;
    typedef ws_ring<C> R;
    const int m0 = blk.m0, n_begin = blk.n_begin, n_tiles = blk.n_tiles;
    const pingpong<C::PINGPONG> turns{wgc};
    /* Where O's rescale by the last softmax's alpha runs: S_FIRST, between S(t)'s issue and P(t-1)·V(t-1)'s
     * (FlashAttention-3's order: the tensor cores start on S(t) before it), else once P(t-1)·V(t-1) retired.
     * Measured on an H200 in one process: S_FIRST 0.5-5% faster one block a tile (D = 64 from L = 2048, D = 128
     * everywhere), but 2-12% slower in the persistent form from L = 2048 (5-7% with three consumers), which keeps
     * the second order. */
    constexpr bool S_FIRST = !C::PERSISTENT;
    turns.start();
    mbar_wait(ring.resident(), (uint32_t)(item & 1));
    float alpha[2] = {1.f, 1.f}; /* the first rescale (S_FIRST) meets an O of zeros */
    if (n_tiles > 0) {
        ring.wait_full(0, kt0);
        turns.turn_begin();
        w.issue_s(sq, sK + (uint32_t)R::stage_of(kt0) * KV_BYTES);
        turns.turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.s[0]);
        w.softmax(pp, m0, n_begin, alpha);
        w.p_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        const int kt = kt0 + t, st = R::stage_of(kt), pst = R::stage_of(kt - 1);
        ring.wait_full(0, kt); /* K(t) */
        if constexpr (!S_FIRST) ring.wait_full(1, kt - 1); /* V(t-1) */
        turns.turn_begin();
        w.issue_s(sq, sK + (uint32_t)st * KV_BYTES);
        if constexpr (S_FIRST) { /* O's rescale under S(t), then P(t-1)·V(t-1) onto it */
            w.rescale(alpha);
            ring.wait_full(1, kt - 1);
        }
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turns.turn_end();
        wgmma_wait<1>(); /* S(t) done; P(t-1)·V(t-1) may still run */
        wgmma_reg_fence(w.s[0]);
        w.softmax(pp, m0, n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
        ring.release(kt - 1); /* K(t-1) and V(t-1) are read */
        if constexpr (!S_FIRST) w.rescale(alpha);
        w.p_to_a();
    }
    if (n_tiles > 0) {
        const int kt = kt0 + n_tiles - 1, pst = R::stage_of(kt);
        ring.wait_full(1, kt);
        if constexpr (C::VARLEN) { /* V rows past the sequence: only the last tile has them */
            const int r0 = pp.Lk - (n_begin + (n_tiles - 1) * BN);
            if (r0 < BN) {
                zero_tile_rows<CB, BN, ws_consumer_threads<C>()>(sV + (uint32_t)pst * KV_BYTES, r0, tid - 128);
                /* every consumer's zeros before any product (ids 1-3: ping-pong, epilogue) */
                named_sync(4, ws_consumer_threads<C>());
            }
        }
        turns.turn_begin();
        if constexpr (S_FIRST) w.rescale(alpha);
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turns.turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.o[0]);
        if constexpr (C::PERSISTENT) ring.release(kt);
    }
    constexpr bool IN_Q = ws_stage_in_q<C>();
    if constexpr (C::PERSISTENT && !IN_Q) mbar_arrive(q_free); /* every product that read Q has retired */

    /* ---- epilogue ---- */
    turns.finish();
    if constexpr (C::PERSISTENT) {
        __syncwarp(); /* this warp's lanes are done reading its rows' last use */
        if constexpr (IN_Q) w.store(pp, stage, m0, blk.b, blk.h, lane, stage_swizzled<D>());
        else w.store(pp, stage, m0, blk.b, blk.h, lane);
        if constexpr (IN_Q) { /* the staged rows are read: the next Q may load over them */
            fence_proxy_async();
            mbar_arrive(q_free);
        }
    } else {
        named_sync(3, ws_consumer_threads<C>()); /* every consumer is done with every tile: the staging area is free */
        w.store(pp, stage, m0, blk.b, blk.h, lane);
    }
}

/* batch: the dense problem's batch entries (PERSISTENT: the grid loops over them; VARLEN: unused). */
template <typename T, class C>
__global__ void __launch_bounds__(ws_threads<C>(), 1)
    ws_kernel(const fw_fwd_params p, const __grid_constant__ tma_maps m, int batch)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fwparts;
    constexpr int D = C::D, BM = C::BM, BN = C::BN, ST = C::STAGES, CT = ws_consumer_threads<C>();
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(D % 64 == 0 && BN % 32 == 0 && ST >= 2, "wgmma tile shapes");
    static_assert(!C::PINGPONG || CT == 256, "ping-pong takes turns between two consumers");
    static_assert(!(C::PERSISTENT && C::VARLEN), "a ragged block's tile is its grid slot's");

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sQ = base, sK = sQ + Q_BYTES, sV = sK + ST * KV_BYTES;
    const ws_ring<C> ring{sV + ST * KV_BYTES}; /* resident = Q; loads 0, 1 = K, V */
    const uint32_t q_free = ring.base + ws_ring<C>::BYTES; /* PERSISTENT: the consumers are done with Q */
    unsigned char *const gbase = smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw)); /* base, generic */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    if (tid == 0) {
        ring.template init<false>(CT);
        if (C::PERSISTENT) mbar_init(q_free, CT);
        mbar_init_fence();
    }
    __syncthreads();

    /* ---- tile scheduler: the query blocks this block computes ---- */
    const int num_m_blocks = (p.Lq + BM - 1) / BM;
    const persistent_tile_scheduler sched(num_m_blocks, p.H, C::PERSISTENT ? batch : 1);
    const int n_items = C::PERSISTENT ? sched.count : 1, it0 = C::PERSISTENT ? sched.first() : 0,
              it_step = C::PERSISTENT ? sched.stride() : 1;
    fw_fwd_params seq_p;        /* VARLEN: the block's sequence as a dense problem */
    int q_row0 = 0, k_row0 = 0; /* VARLEN: its first rows in the packed tensors */
    /* query block `it`'s work; false: a ragged slot past its sequence's blocks (every thread alike; a ragged
     * block's search takes whole warps) */
    auto block_of = [&](int it, query_block &blk) -> bool {
        if constexpr (C::VARLEN) return varlen_block<T, BM, BN>(p, m.seqs, blk, seq_p, q_row0, k_row0);
        else if constexpr (C::PERSISTENT)
            blk = query_block::at<BM, BN>(p, p.reverse_m ? sched.tile_heads_first(it) : sched.tile(it));
        else blk = query_block::of<BM, BN>(p);
        return true;
    };
    const fw_fwd_params &pp = C::VARLEN ? seq_p : p; /* the problem the mask, softmax and epilogue see */

    if (wg == 0) { /* ---- producer: one thread loads; its warp finds the tiles (the ragged search is warp-wide) ---- */
        producer_registers<24>();
        if (warp == 0) {
            int kt = 0;
            for (int it = it0, item = 0; it < n_items; it += it_step, item++) {
                query_block blk;
                if (!block_of(it, blk)) return;
                if (lane == 0) produce_query_block<C>(ring, m, sQ, sK, sV, q_free, blk, q_row0, k_row0, kt, item);
                kt += blk.n_tiles;
            }
        }
        return;
    }

    consumer_registers<ws_consumer_registers<C>()>();
    const int wgc = wg - 1; /* consumer 0, 1 (or 2) */
    wg_consumer<T, D, BN, BM> w;
    const uint32_t sq = sQ + (uint32_t)(wgc * 64 * 128);
    /* the epilogue's staging: the block's over the tiles or (PERSISTENT) in its own area, or this warp's 16 x D
     * elements in its consumer's rows of Q (column blocks of BM x 128 bytes; a warp's rows stay in one) */
    uint32_t stage_off = 0;
    if constexpr (C::PERSISTENT) {
        const uint32_t own = (uint32_t)(warp & 3) * 32u * D; /* bytes into this consumer's rows */
        stage_off = ws_stage_in_q<C>() ? own / 8192u * (BM * 128u) + (uint32_t)wgc * 8192u + own % 8192u
                                       : sV + ST * KV_BYTES + 256 - base;
    }
    T *const stage = reinterpret_cast<T *>(gbase + stage_off);
    int kt = 0;
    for (int it = it0, item = 0; it < n_items; it += it_step, item++) {
        query_block blk;
        if (!block_of(it, blk)) return;
        w.init(warp & 3, wgc, lane);
        consume_query_block<T, C>(w, ring, pp, blk, sq, sK, sV, q_free, stage, kt, item, wgc, tid, lane);
        kt += blk.n_tiles;
    }
#else
    (void)p;
    (void)m;
    (void)batch;
    __trap(); /* sm_90a only */
#endif
}

/* seqs: VARLEN's batch (fw_fwd_launch_fn); its maps are of the packed tensors (one batch entry of total rows). */
template <typename T, class C>
static cudaError_t ws_launch(const fw_fwd_params *p, int batch, const fw_cuda_seqs *seqs, cudaStream_t stream)
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
    } else if constexpr (C::PERSISTENT) { /* one block an SM (at most one fits), none idle from the start */
        const int64_t tiles = (int64_t)q.num_m_blocks * p->H * batch, cap = p->persist_blocks > 0 ? p->persist_blocks : 132;
        if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration; /* the kernel counts tiles in int */
        grid = fwparts::persistent_tile_scheduler::grid((int)(tiles < cap ? tiles : cap));
    } else {
        grid = fwparts::static_tile_scheduler::grid(q.num_m_blocks, p->H, batch);
    }
    ws_kernel<T, C><<<grid, ws_threads<C>(), smem, stream>>>(q, m, batch);
    return fw_cuda_launch_error();
}

} /* namespace fwfwd */
#endif
