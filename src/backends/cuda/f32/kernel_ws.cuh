/* The warp-specialised Hopper f32 kernel (tf32 / 3xtf32 on wgmma, sm_90a) and its launch: split K/V tiles from
 * the workspace (kv_workspace.cuh) bulk-copied by one producer thread through two barrier rings (parts/pipeline.cuh:
 * split K in 2 stages, split Vᵀ in 3, as V(t-1) is read while K(t+1) may land) to two consumer warpgroups of 64 query
 * rows each (wg_rows.cuh), which take turns issuing their products (the ping-pong: one's softmax runs under the
 * other's products, 3xtf32 7-16% faster at L = 512..2048, commit bb5e20b).
 *
 * Who splits the tiles (C, a configuration from generated/):
 *   - a pre-pass kernel, before this one (LOCAL_TILES = 0, not PERSISTENT: record ws);
 *   - this kernel's blocks (fused): each block splits its first LOCAL_TILES key tiles itself (all threads, into
 *     stages 0 and 1); the split of the others is shared through the workspace: warps 1-3 of the producer
 *     warpgroup take tickets (tiles LOCAL_TILES, LOCAL_TILES + 1, ... of their kv head, from a counter in global
 *     memory), split that tile from a raw copy into the workspace and raise its flag; the producer thread waits
 *     for a tile's flag before copying it. The tiles are split in the order every block needs them, each once, by
 *     the head's blocks together; a block waits only for tiles whose ticket a running block holds, so the blocks
 *     of a head need not run at the same time (record wsf: LOCAL_TILES 2).
 *   - PERSISTENT (LOCAL_TILES 0; record wsp): one block per SM loops over the query blocks (the persistent tile
 *     scheduler); the stage rings run on across them, so the producer copies (and the split warps split) the next
 *     query block's tiles while the consumers finish the current one, and each consumer warpgroup stages its rows of
 *     the next query block's Q in shared memory.
 *   - SHORT_KEYS (PERSISTENT, keys of at most FW_F32_SHORT_TILES tiles; record wsps): the split warps get 56
 *     registers and the consumers 224, without 3xtf32's separate P·V accumulator (params.h). At L = 512 each block
 *     splits 2 of the 8 tiles of every query block's head, and a tile's split is what the query blocks wait for.
 * C also holds D 64, BM 128, BN 64. */
#ifndef FW_F32_KERNEL_WS_CUH
#define FW_F32_KERNEL_WS_CUH

#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/common/workspace.h"
#include "backends/cuda/f32/kv_workspace.cuh"
#include "backends/cuda/f32/wg_rows.cuh"
#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/scheduler.cuh"

namespace fwf32 {

/* Shared memory: split K stages, split Vᵀ stages, (fused) raw K and V tiles for the split, the barriers and the
 * ticket, (persistent) the next query block's Q. */
template <class P, class C> struct ws_geom {
    typedef wg_geom<P> W;
    static constexpr bool FUSED = C::LOCAL_TILES > 0 || C::PERSISTENT;
    static constexpr uint32_t TILE = ws_tile_bytes<P>();
    static constexpr uint32_t OFF_V = 2 * W::KST, OFF_RAW = OFF_V + 3 * W::VST;
    /* fused: the second prologue tile's raw copy goes to Vᵀ stage 2 where that holds it (3xtf32), else to a second
     * raw tile */
    static constexpr uint32_t RAW2 = W::VST >= W::RAW ? OFF_V + 2 * W::VST : OFF_RAW + W::RAW;
    static constexpr uint32_t OFF_BAR = OFF_RAW + (FUSED ? (W::VST >= W::RAW ? 1 : 2) * W::RAW : 0);
    static constexpr uint32_t OFF_TICKET = OFF_BAR + 96; /* after the two rings' barriers */
    static constexpr uint32_t OFF_Q = OFF_BAR + 128;
    /* + barriers and the ticket, (persistent) + the staged Q, + the base's alignment */
    static constexpr size_t SMEM = C::PERSISTENT ? (size_t)OFF_Q + W::BM * 64 * 4 + 1024 : (size_t)OFF_BAR + 128 + 1024;
    static_assert(C::D == W::DB && C::BM == W::BM && C::BN == W::BN, "the wgmma f32 tiles");
    static_assert(!C::PERSISTENT || C::LOCAL_TILES == 0, "the persistent form splits every tile by ticket");
    static_assert(!C::SHORT_KEYS || C::PERSISTENT, "the short-key form is a persistent one");
};
/* The barrier rings: split K (2 stages), split Vᵀ (3), one "full" and one "empty" barrier a stage each. */
typedef fwparts::mbar_ring<2, 1, 0> ws_k_ring;
typedef fwparts::mbar_ring<3, 1, 0> ws_v_ring;
static_assert(ws_k_ring::BYTES + ws_v_ring::BYTES <= 96, "the barriers' room before the ticket");

template <bool PERSISTENT> struct ws_scheduler_of {
    typedef fwparts::single_tile_scheduler type;
};
template <> struct ws_scheduler_of<true> {
    typedef fwparts::persistent_tile_scheduler type;
};

template <class P, class C>
__global__ void __launch_bounds__(384, 1) ws_kernel(const fw_f32_params a, unsigned char *ws, const ws_sync sync, int batch)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fwparts;
    typedef ws_geom<P, C> G;
    typedef typename ws_scheduler_of<C::PERSISTENT>::type Scheduler;
    constexpr bool FUSED = G::FUSED, PERSIST = C::PERSISTENT, SHORT = C::SHORT_KEYS;
    constexpr int LOCAL = C::LOCAL_TILES, BN = G::W::BN, BM = G::W::BM;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = smem_align_1024(smem_raw);
    const uint32_t sK_addr = smem_u32(base), sV_addr = sK_addr + G::OFF_V;
    const ws_k_ring kring{sK_addr + G::OFF_BAR};
    const ws_v_ring vring{sK_addr + G::OFF_BAR + ws_k_ring::BYTES};
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    /* the query blocks: the persistent scheduler's loop, or the grid's one */
    const Scheduler sched((a.Lq + BM - 1) / BM, a.H, batch);
    const int n_items = sched.count, it0 = sched.first(), it_step = sched.stride();
    auto item = [&](int it) {
        wg_query_block blk;
        blk.init(a, BM, BN, sched.tile(it));
        return blk;
    };
    if (tid == 0) {
        kring.init<false>(256);
        vring.init(256);
    }
    float *raw = reinterpret_cast<float *>(base + G::OFF_RAW);
    int n_local = 0; /* LOCAL: the first tiles, split here into stages 0 and 1 */
    if (LOCAL > 0) {
        const wg_query_block blk = item(it0);
        n_local = min(blk.n_tiles, LOCAL);
        if (n_local > 0) {
            for (int i = 0; i < n_local; i++) blk.load_raw<384>(a, i ? reinterpret_cast<float *>(base + G::RAW2) : raw, i, tid);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
            for (int i = 0; i < n_local; i++) {
                const float *r = i ? reinterpret_cast<const float *>(base + G::RAW2) : raw;
                split_k<P, 384>(r, base + i * G::W::KST, tid);
                split_v<P, 384>(r + 64 * 64, base + G::OFF_V + i * G::W::VST, tid);
            }
            fence_proxy_async();
        }
    }
    __syncthreads();
    if (tid == 0) /* stages i of K and Vᵀ full: phase 0 of their barriers */
        for (int i = 0; i < n_local; i++) {
            mbar_arrive(kring.full(0, i));
            mbar_arrive(vring.full(0, i));
        }

    if (wg == 0) { /* producer: one thread copies; with FUSED, warps 1-3 split tiles by ticket */
        producer_registers<SHORT ? 56 : 24>();
        const int hkn = a.H / a.group, n_kt = (a.Lk + BN - 1) / BN;
        if (FUSED && warp > 0) {
            const int ts = tid - 32;
            volatile int *ticket = reinterpret_cast<volatile int *>(base + G::OFF_TICKET);
            for (int it = it0; it < n_items; it += it_step) {
                const wg_query_block blk = item(it);
                const long long head = (long long)blk.b * hkn + blk.h / a.group;
                unsigned char *ws_head = ws + head * n_kt * (long long)G::TILE;
                int *ctr = sync.ctr + (sync.epoch & 1) * sync.heads + head;
                int *flag = sync.flag + head * n_kt;
                for (;;) {
                    if (ts == 0) *ticket = atomicAdd(ctr, 1) + LOCAL;
                    named_sync(1, 96);
                    const int t = *ticket;
                    named_sync(1, 96); /* read by all before the next ticket (maybe the next item's) is written */
                    if (t >= n_kt) break;
                    const int n = t * 64;
                    load_tile<64, 64, 64, 96, QUAD_SWIZZLED>(raw, blk.kp + (long long)n * a.ks[2], a.ks[2], a.Lk - n, a.D,
                                                             a.vec16, ts);
                    load_tile<64, 64, 64, 96, QUAD_SWIZZLED>(raw + 64 * 64, blk.vp + (long long)n * a.vs[2], a.vs[2],
                                                             a.Lk - n, a.D, a.vec16, ts);
                    cp_async_commit();
                    cp_async_wait<0>();
                    named_sync(1, 96); /* the raw tile landed */
                    unsigned char *dst = ws_head + t * (long long)G::TILE;
                    /* SHORT: unrolled, V by rows (2% faster) */
                    split_k<P, 96, SHORT ? SPLIT_WIDE : SPLIT_NARROW>(raw, dst, ts);
                    split_v<P, 96, SHORT ? SPLIT_WIDE : SPLIT_NARROW>(raw + 64 * 64, dst + G::W::KST, ts);
                    fence_proxy_async_global();
                    named_sync(1, 96); /* the tile written (and the raw copy read) by all 96 */
                    if (ts == 0) st_release_gpu(flag + t, sync.epoch);
                }
            }
        }
        if (tid == 0) {
            int g = 0; /* tiles through the stages so far */
            for (int it = it0; it < n_items; it += it_step) {
                const wg_query_block blk = item(it);
                const long long head = (long long)blk.b * hkn + blk.h / a.group;
                const int *flag = FUSED ? sync.flag + head * n_kt + blk.t_begin : nullptr;
                const unsigned char *src = ws + (head * n_kt + blk.t_begin) * (long long)G::TILE;
                for (int t = 0; t < blk.n_tiles; t++, g++, src += G::TILE) {
                    if (FUSED) {
                        if (g < n_local) continue; /* split in the prologue */
                        while (ld_acquire_gpu(flag + t) != sync.epoch) __nanosleep(32);
                        fence_proxy_async_global();
                    }
                    kring.wait_empty(g);
                    mbar_expect_tx(kring.full(0, kring.stage_of(g)), G::W::KST);
                    bulk_copy(sK_addr + (uint32_t)kring.stage_of(g) * G::W::KST, src, G::W::KST, kring.full(0, kring.stage_of(g)));
                    vring.wait_empty(g);
                    mbar_expect_tx(vring.full(0, vring.stage_of(g)), G::W::VST);
                    bulk_copy(sV_addr + (uint32_t)vring.stage_of(g) * G::W::VST, src + G::W::KST, G::W::VST,
                              vring.full(0, vring.stage_of(g)));
                }
            }
        }
        return;
    }

    consumer_registers<SHORT ? 224 : 240>();
    const int wgc = wg - 1;
    auto s_desc = [&](int g) { return sw128_desc(sK_addr + (uint32_t)(ws_k_ring::stage_of(g) * G::W::KST), 16, 1024); };
    auto v_desc = [&](int g) { return sw128_desc(sV_addr + (uint32_t)(ws_v_ring::stage_of(g) * G::W::VST), 16, 1024); };
    int g = 0; /* tiles through the stages before this item */
    wg_rows<P, P::THREE && !SHORT> w;
    w.init(wgc * 64 + (warp & 3) * 16, lane);
    /* the ping-pong on named barriers 2 and 3 (barrier 1: the split warps') */
    const pingpong<true, 2> turns{wgc};
    turns.start();
    /* PERSIST: each consumer warpgroup copies its 64 query rows of the next item into shared memory while it works on
     * this one (loaded from global memory at the item's start, they took ~4-5 us behind the split warps' traffic) */
    const bool qstage = PERSIST && a.vec16;
    float *const sQ = reinterpret_cast<float *>(base + G::OFF_Q);
    auto stage_q = [&](const wg_query_block &qb) {
        const int ct = tid & 127;
#pragma unroll 2
        for (int i = 0; i < 8; i++) {
            const int idx = ct + 128 * i, r = wgc * 64 + (idx >> 4), c = idx & 15;
            const int bytes = r < qb.rows && 4 * c < a.D ? min(16, (a.D - 4 * c) * 4) : 0;
            cp_async16(sQ + r * 64 + ((c ^ (r & 7)) << 2), bytes ? qb.qp + (long long)r * a.qs[2] + 4 * c : qb.qp, bytes);
        }
        cp_async_commit();
    };
    if (qstage && it0 < n_items) stage_q(item(it0));
    for (int it = it0; it < n_items; it += it_step) {
        const wg_query_block blk = item(it);
        const int n_tiles = blk.n_tiles;
        if (qstage) {
            cp_async_wait<0>();
            named_sync(4 + wgc, 128); /* the warpgroup's rows landed */
            w.load_q_staged(sQ, a.scale_log2);
            named_sync(4 + wgc, 128); /* and read by all before the next item's overwrite them */
            if (it + it_step < n_items) stage_q(item(it + it_step));
        } else {
            w.load_q(blk.qp, a.qs[2], blk.rows, a.D, a.scale_log2);
        }
        if (n_tiles > 0) {
            kring.wait_full(0, g);
            turns.turn_begin();
            w.issue_s(s_desc(g));
            turns.turn_end();
            wgmma_wait<0>();
            wgmma_reg_fence(w.s);
            kring.release(g);
            float alpha[2];
            w.softmax(a, blk.m0, blk.n0(0, BN), blk.edge(0, BN), alpha);
            w.rescale_and_take_p(alpha);
        }
        for (int i = 1; i < n_tiles; i++) {
            const int gi = g + i;
            kring.wait_full(0, gi);
            vring.wait_full(0, gi - 1);
            turns.turn_begin();
            w.issue_s(s_desc(gi));
            w.issue_pv(v_desc(gi - 1));
            turns.turn_end();
            wgmma_wait<1>(); /* S(i) done; P(i-1)·V(i-1) may still run */
            wgmma_reg_fence(w.s);
            kring.release(gi);
            float alpha[2];
            w.softmax(a, blk.m0, blk.n0(i, BN), blk.edge(i, BN), alpha);
            wgmma_wait<0>();
            w.fence_pv();
            vring.release(gi - 1);
            w.rescale_and_take_p(alpha);
        }
        if (n_tiles > 0) {
            const int gl = g + n_tiles - 1;
            vring.wait_full(0, gl);
            turns.turn_begin();
            w.issue_pv(v_desc(gl));
            turns.turn_end();
            wgmma_wait<0>();
            w.fence_pv();
            if (PERSIST) vring.release(gl); /* the ring goes on */
            w.finish_pv();
        }
        w.store(a, blk.m0, blk.rows, blk.b, blk.h);
        if (PERSIST) w.reset();
        g += n_tiles;
    }
    turns.finish();
    if (FUSED) { /* the next call's ticket counters, by the consumers at the end (at the start: 160 bytes more spilled) */
        const long long nb = (long long)gridDim.x * gridDim.y * gridDim.z;
        const long long lin = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
        int *next = sync.ctr + ((sync.epoch + 1) & 1) * sync.heads;
        for (long long i = lin * 256 + tid - 128; i < sync.heads; i += nb * 256) next[i] = 0;
    }
#else
    (void)a;
    (void)ws;
    (void)sync;
    (void)batch;
    __trap(); /* sm_90a only */
#endif
}

/* A workspace of B·Hk·⌈Lk/64⌉ tiles (64 KB each in 3xtf32, 32 KB in tf32), filled by the pre-pass or, FUSED, by
 * the kernel itself (per kv head a ticket counter and a flag per tile, after the tiles); then the kernel
 * (PERSISTENT: the plan's grid_blocks, at most one an SM). The workspace is the stream's cached scratch where it
 * may be (no allocation, memset or free per call: 8 us less host time a call), else from the pool, its counters
 * and flags zeroed here, epoch 1. */
template <class P, class C>
static cudaError_t ws_launch(const fw_f32_params *a, const fw_f32_plan *plan, int batch, cudaStream_t s, const fw_knobs *k)
{
    typedef ws_geom<P, C> G;
    constexpr bool FUSED = G::FUSED;
    const int hkn = a->H / a->group, n_kt = (a->Lk + 63) / 64;
    const size_t tiles = (size_t)batch * hkn * n_kt, heads = (size_t)batch * hkn;
    const size_t sync_bytes = FUSED ? (2 * heads + tiles) * sizeof(int) : 0;
    const size_t bytes = tiles * G::TILE + sync_bytes;
    cudaError_t e = FUSED ? cudaSuccess : fw_cuda_smem_limit<presplit_kernel<P>>(presplit_smem_bytes<P>());
    if (e == cudaSuccess) e = fw_cuda_smem_limit<ws_kernel<P, C>>(G::SMEM);
    if (e != cudaSuccess) return e;
    const int nqb = (a->Lq + G::W::BM - 1) / G::W::BM;
    dim3 grid = fwparts::static_tile_scheduler::grid(nqb, a->H, batch);
    if (C::PERSISTENT) {
        if (plan->grid_blocks < 0) return cudaErrorInvalidDevice; /* one block per SM: the SM count is not known */
        grid = fwparts::persistent_tile_scheduler::grid(plan->grid_blocks);
    }
    void *ws = NULL;
    bool cached = false;
    ws_sync sync{nullptr, nullptr, 1, 0}; /* no counters: the kernel resets none */
    if (tiles && grid.x > 0) {
        unsigned epoch = 1;
        e = fw_cuda_ws_cached(&ws, bytes, FUSED ? tiles * G::TILE : bytes, (unsigned long long)heads << 32 | tiles, s, k, &epoch);
        cached = e == cudaSuccess;
        if (!cached) e = fw_cuda_ws_alloc(&ws, bytes, s);
        if (e != cudaSuccess) return e;
        if (FUSED) { /* the counters, then the flags */
            sync.ctr = reinterpret_cast<int *>(reinterpret_cast<unsigned char *>(ws) + tiles * G::TILE);
            sync.flag = sync.ctr + 2 * heads;
            sync.epoch = (int)epoch;
            sync.heads = (int)heads;
            if (!cached) e = cudaMemsetAsync(sync.ctr, 0, sync_bytes, s);
        } else {
            presplit_kernel<P><<<dim3((unsigned)n_kt, (unsigned)hkn, (unsigned)batch), 256, presplit_smem_bytes<P>(), s>>>(
                *a, reinterpret_cast<unsigned char *>(ws));
            e = fw_cuda_launch_error();
        }
    }
    if (e == cudaSuccess && grid.x > 0) {
        ws_kernel<P, C><<<grid, 384, G::SMEM, s>>>(*a, reinterpret_cast<unsigned char *>(ws), sync, batch);
        e = fw_cuda_launch_error();
    }
    cudaError_t f = cudaSuccess;
    if (cached) fw_cuda_ws_cached_end(bytes, e == cudaSuccess);
    else if (ws) f = fw_cuda_ws_free(ws, bytes, s);
    return e != cudaSuccess ? e : f;
}

} /* namespace fwf32 */
#endif
