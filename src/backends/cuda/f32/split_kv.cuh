/* Split-KV of the one-warpgroup Hopper f32 kernel (kernel_wg1.cuh): a query block's key tiles cut into `n` ranges,
 * one block each (FlashAttention's split-KV; the tile scheduler's split order). Each block writes its O (not yet
 * divided by the sum), its rows' maxima and sums to `part`, takes a ticket from the query block's counter, and the
 * last to arrive merges the others' into its own (wg_rows::merge_partial, softmax.cuh's softmax_combine), sets the
 * counter back to 0 for the next call, and stores. The partials and counters are the stream's cached scratch where
 * it may be (fw_cuda_ws_cached), else pool memory with the counters zeroed at the launch. */
#ifndef FW_F32_SPLIT_KV_CUH
#define FW_F32_SPLIT_KV_CUH

#include "backends/cuda/common/workspace.h"
#include "backends/cuda/f32/block.cuh"

namespace fwf32 {

struct kv_split {
    float4 *part; /* [query block][range] PART_F4 float4 */
    int *ctr;     /* [query block]: ranges done; 0 between calls */
    int n;        /* key ranges a query block: 1, no split */
    int stage0;   /* (the kernel's) tile 0's K, Q and V waited for one by one */
};

/* Range `range`'s share of the query block's key tiles. */
__device__ __forceinline__ void take_range(wg_query_block &blk, const kv_split &ks, int range)
{
    if (ks.n > 1) {
        const int per = (blk.n_tiles + ks.n - 1) / ks.n, t0 = min(range * per, blk.n_tiles);
        blk.t_begin += t0;
        blk.n_tiles = min(per, blk.n_tiles - t0);
        blk.t_end = blk.t_begin + blk.n_tiles;
    }
}

/* After a range's last product: its partial (w.save_partial, PART_F4 float4 a block) to query block qi's slot, the
 * ticket (through *flag, a word of shared memory free once every thread's partial is written), and in the last
 * block the other ranges' partials merged into w. Returns whether this block stores the rows. */
template <int NT, int PART_F4, class Rows>
__device__ __forceinline__ bool merge_ranges(Rows &w, const kv_split &ks, long long qi, int range, int *flag, int tid)
{
    w.template save_partial<NT>(ks.part + (qi * ks.n + range) * PART_F4 + tid);
    __threadfence();
    __syncthreads(); /* every thread's partial written (and the flag's memory read) */
    if (tid == 0) {
        const int done = atomicAdd(&ks.ctr[qi], 1) + 1;
        *flag = done == ks.n;
        if (done == ks.n) ks.ctr[qi] = 0; /* every range has counted: the next call starts from 0 */
    }
    __syncthreads();
    if (!*flag) return false;
    __threadfence();
    for (int r = 0; r < ks.n; r++)
        if (r != range) w.template merge_partial<NT>(ks.part + (qi * ks.n + r) * PART_F4 + tid);
    return true;
}

/* The launch's partials and counters for `blocks` query blocks (nothing where ks->n is 1): *ws and *bytes to give
 * back with release_ranges after the kernel's launch. */
template <int PART_F4>
static cudaError_t alloc_ranges(kv_split *ks, long long blocks, cudaStream_t s, const fw_knobs *k, void **ws, bool *cached,
                                size_t *bytes)
{
    *ws = NULL;
    *cached = false;
    *bytes = 0;
    if (ks->n <= 1) return cudaSuccess;
    const size_t part = (size_t)blocks * ks->n * PART_F4 * sizeof(float4);
    *bytes = part + (size_t)blocks * sizeof(int);
    unsigned epoch = 1;
    cudaError_t e = fw_cuda_ws_cached(ws, *bytes, part, 1ULL << 63 | (unsigned long long)blocks << 8 | (unsigned)ks->n, s, k, &epoch);
    *cached = e == cudaSuccess;
    if (!*cached) {
        e = fw_cuda_ws_alloc(ws, *bytes, s);
        if (e != cudaSuccess) {
            *ws = NULL; /* nothing to give back */
            return e;
        }
        e = cudaMemsetAsync(reinterpret_cast<unsigned char *>(*ws) + part, 0, *bytes - part, s);
    }
    ks->part = reinterpret_cast<float4 *>(*ws);
    ks->ctr = reinterpret_cast<int *>(reinterpret_cast<unsigned char *>(*ws) + part);
    return e;
}
/* e: the launch's status so far; returns it, or the release's error. */
static inline cudaError_t release_ranges(cudaError_t e, void *ws, bool cached, size_t bytes, cudaStream_t s)
{
    cudaError_t f = cudaSuccess;
    if (cached) fw_cuda_ws_cached_end(bytes, e == cudaSuccess);
    else if (ws) f = fw_cuda_ws_free(ws, bytes, s);
    return e != cudaSuccess ? e : f;
}

} /* namespace fwf32 */
#endif
