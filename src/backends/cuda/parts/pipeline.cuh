/* The producer/consumer pipeline of the warp-specialised (sm_90a) kernels: mbarriers, named barriers, the
 * ring of stage barriers, TMA and bulk loads, flags between blocks, the producer's prologue and loop, and the
 * consumers' ping-pong.
 *
 * A block is one producer warpgroup and consumer warpgroups. The producer gives up registers (setmaxnreg)
 * and one of its threads issues every load: tensor-memory-accelerator copies (or 1-D bulk copies of tiles
 * laid out in global memory as in shared memory) that complete on a stage's "full" mbarrier (expect_tx counts
 * the bytes). Consumers wait on "full", compute, and arrive on the stage's "empty" mbarrier once their
 * products have read it, which lets the producer refill it. Phases
 * alternate per round of the ring: tile t waits for parity (t / ST) & 1 on "full" and, to refill, for
 * parity (t / ST - 1) & 1 on "empty". */
#ifndef FW_PARTS_PIPELINE_CUH
#define FW_PARTS_PIPELINE_CUH

#include <cuda.h>
#include <stdint.h>
#include "backends/cuda/parts/wgmma.cuh"

namespace fwparts {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* Makes the mbarrier initialisations visible to the async proxy (TMA); once, before a block-wide barrier. */
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* Named barriers (1..15; 0 is __syncthreads): n threads, a multiple of 32. arrive does not wait. */
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* One box of rows x 64 columns from (col, row) of (head, batch) of a 4-D map (tensor_maps.cuh: swap says
 * whether the map's dimensions 1 and 2 are (head, seq) rather than (seq, head)); rows past the tensor read
 * as zeros. Completes on bar. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int swap, uint32_t bar, int col, int row,
                                         int head, int batch)
{
    const int c1 = swap ? head : row, c2 = swap ? row : head;
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(col), "r"(c1), "r"(c2), "r"(batch)
                 : "memory");
}
/* A ROWS x (64 CB) tile in the 128-byte-swizzled layout (swizzle.cuh): one box per column block. */
template <int CB, int ROWS>
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap *map, int swap, uint32_t bar, int row,
                                              int head, int batch)
{
#pragma unroll
    for (int cb = 0; cb < CB; cb++) tma_load(dst + (uint32_t)(cb * ROWS * 128), map, swap, bar, cb * 64, row, head, batch);
}
/* A box of a 2-D map (tensor_maps.cuh tma_make_rows_f32): elements i0.. of row `row`. */
__device__ __forceinline__ void tma_load_rows(uint32_t dst, const CUtensorMap *map, uint32_t bar, int i0, int row)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(i0), "r"(row)
                 : "memory");
}

/* A 1-D bulk copy (no tensor map) of `bytes` (a multiple of 16) from global memory, completing on bar. */
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* A 1-D bulk reduction: `bytes` (a multiple of 16) of f32 in shared memory at src added element-wise to dst in
 * global memory (16-byte aligned), committed as a bulk group of its own; bulk_wait_read: every group this thread
 * committed has read its source; bulk_wait_all: has finished. */
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

/* Flags in global memory between blocks (a producer waits for another block's work): acquire/release at GPU
 * scope, and the fence that orders generic-proxy global writes (or a flag's acquire) with later async-proxy
 * reads of that memory (bulk copies). */
__device__ __forceinline__ int ld_acquire_gpu(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/* The stage barriers of a ring of ST stages, 8 bytes each from `base`: RESIDENT "full" barrier for the tiles
 * loaded once (Q; Q and dO), then LOADS "full" barriers per stage (separate ones let a consumer start on
 * the first load before the second lands: K before V), then one "empty" barrier per stage. Tile t (never
 * negative) uses stage t % ST in round t / ST; for a power-of-two ST these are bit fields, without the
 * instructions of a signed remainder. */
template <int ST, int LOADS = 2, int RESIDENT = 1> struct mbar_ring {
    static constexpr int STAGES = ST;
    static constexpr bool POW2 = (ST & (ST - 1)) == 0;
    static constexpr int LOG2 = ST >= 8 ? 3 : ST >= 4 ? 2 : ST >= 2 ? 1 : 0;
    static_assert(!POW2 || ST <= 8, "a deeper power-of-two ring needs its shift");
    static constexpr uint32_t BYTES = 8u * (uint32_t)(RESIDENT + (LOADS + 1) * ST);
    uint32_t base;
    static __device__ __forceinline__ int stage_of(int t) { return POW2 ? t & (ST - 1) : t % ST; }
    static __device__ __forceinline__ int round_of(int t) { return POW2 ? t >> LOG2 : t / ST; }
    __device__ __forceinline__ uint32_t resident() const { return base; }
    __device__ __forceinline__ uint32_t full(int load, int st) const { return base + 8u * (uint32_t)(RESIDENT + load * ST + st); }
    __device__ __forceinline__ uint32_t empty(int st) const { return base + 8u * (uint32_t)(RESIDENT + LOADS * ST + st); }
    /* By one thread: every "full" barrier completes on one arrival (the producer's expect_tx) plus the
     * bytes; "empty" on `consumers` arrivals. FENCE: mbar_init_fence after (once per block). */
    template <bool FENCE = true> __device__ __forceinline__ void init(uint32_t consumers) const
    {
        if (RESIDENT) mbar_init(resident(), 1);
        for (int st = 0; st < ST; st++) {
#pragma unroll
            for (int l = 0; l < LOADS; l++) mbar_init(full(l, st), 1);
            mbar_init(empty(st), consumers);
        }
        if (FENCE) mbar_init_fence();
    }
    /* Consumer: load `load` of tile t has landed. */
    __device__ __forceinline__ void wait_full(int load, int t) const { mbar_wait(full(load, stage_of(t)), (uint32_t)(round_of(t) & 1)); }
    /* Consumer: done reading tile t's stage. */
    __device__ __forceinline__ void release(int t) const { mbar_arrive(empty(stage_of(t))); }
    /* Producer: tile t's stage is free (its previous round released). */
    __device__ __forceinline__ void wait_empty(int t) const
    {
        if (t >= ST) mbar_wait(empty(stage_of(t)), (uint32_t)((round_of(t) - 1) & 1));
    }
};

/* Register split of a warp-specialised block: the producer warpgroup keeps REGS registers a thread, each
 * consumer takes REGS (their sum times 128 threads must fit the SM's register file). */
template <int REGS> __device__ __forceinline__ void producer_registers()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void consumer_registers()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

/* The producer's loop: for each of n tiles, wait until its stage is free, then load_stage(t, stage). */
template <class Ring, class LoadStage>
__device__ __forceinline__ void produce_ring(const Ring &ring, int n, const LoadStage &load_stage)
{
    for (int t = 0; t < n; t++) {
        const int st = t % Ring::STAGES;
        ring.wait_empty(t);
        load_stage(t, st);
    }
}

/* Ping-pong of two consumer warpgroups (FlashAttention-3): they take turns issuing their products, so
 * that one's softmax runs under the other's wgmmas. Consumer c issues after named barrier ID0 + c and
 * then lets the other go; consumer 1 lets consumer 0 start, and consumer 0 takes that extra arrival at
 * the end. ON = false: no barriers. */
template <bool ON, int ID0 = 1> struct pingpong {
    int wgc; /* this consumer: 0 or 1 */
    __device__ __forceinline__ void start() const
    {
        if (ON && wgc == 1) named_arrive(ID0, 256);
    }
    __device__ __forceinline__ void turn_begin() const
    {
        if (ON) named_sync(ID0 + wgc, 256);
    }
    __device__ __forceinline__ void turn_end() const
    {
        if (ON) named_arrive(ID0 + 1 - wgc, 256);
    }
    __device__ __forceinline__ void finish() const
    {
        if (ON && wgc == 0) named_sync(ID0, 256);
    }
};

/* Zeroes rows r0 .. ROWS - 1 of a ROWS-row tile of CB column blocks (ROWS x 128 bytes each; the 128-byte
 * swizzle permutes chunks within a row, so whole rows stay whole) with NT threads (t: this one's index), and
 * orders the writes before the async proxy's (wgmma's) reads; the caller's barrier then publishes them. A ragged
 * batch's TMA boxes bring the next sequence's rows past a sequence's end: its kernels zero them so that a masked
 * product of 0 with a NaN or Inf there cannot reach a result. */
template <int CB, int ROWS, int NT> __device__ __forceinline__ void zero_tile_rows(uint32_t tile, int r0, int t)
{
    const int chunks = (ROWS - r0) * 8; /* 16 bytes each, per column block */
#pragma unroll
    for (int cb = 0; cb < CB; cb++)
        for (int i = t; i < chunks; i += NT)
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(tile + (uint32_t)(cb * ROWS * 128 + r0 * 128 + i * 16)),
                         "r"(0u)
                         : "memory");
    fence_proxy_async();
}

} /* namespace fwparts */
#endif
