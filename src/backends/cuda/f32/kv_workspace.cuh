/* The split K/V workspace of the warp-specialised Hopper f32 kernel (kernel_ws.cuh): every key tile split once per
 * call into the tiles wgmma reads, instead of once per query block.
 *
 * Splitting every K/V tile in every query block repeats the work L/128 times, and a producer warpgroup doing it
 * per block was the bottleneck (0.55 of 1.76 ms at L = 2048; commit a992df6). So each tile's split K and Vᵀ
 * parts, in the swizzled shared-memory layout, go contiguously to a workspace: tile (b, hk, t) at
 * ((b Hk + hk) n_kt + t) TILE bytes, K big (+ small) then Vᵀ big (+ small), from where the kernel's producer
 * bulk-copies them. They are split by the pre-pass below (one block per key tile and kv head) or, in the fused
 * forms, by the kernel's own blocks, which hand tiles to each other through flags (ws_sync). */
#ifndef FW_F32_KV_WORKSPACE_CUH
#define FW_F32_KV_WORKSPACE_CUH

#include "backends/cuda/f32/tiles.cuh"
#include "backends/cuda/f32/wg_tiles.cuh"

namespace fwf32 {

/* One workspace tile: split K and Vᵀ (with their small parts in 3xtf32). */
template <class P> constexpr uint32_t ws_tile_bytes() { return wg_geom<P>::KST + wg_geom<P>::VST; }

/* The fused forms' tile states in global memory: acquire/release at GPU scope, and the fence that orders them with
 * the bulk copies (async proxy) reading the tiles (parts/pipeline.cuh). The memory is a stream's cached scratch
 * (fw_cuda_ws_cached) or zeroed pool memory; a call's `epoch` (>= 1) is new with the same memory, so that flags
 * need no reset: a tile is split in this call when its flag == epoch. The kv heads' ticket counters come in two
 * sets, the call's (epoch % 2) and the next call's, which this call zeroes (the last call's: done with it). A
 * counter of tagged epochs, taken by compare-and-swap, was 5% slower at L = 512. */
struct ws_sync {
    int *ctr;  /* 2 x per kv head */
    int *flag; /* per tile */
    int epoch, heads;
};

/* The pre-pass: block (t, hk, b) splits key tile t of kv head hk, batch entry b, into the workspace. */
template <class P>
__global__ void __launch_bounds__(256) presplit_kernel(const fw_f32_params a, unsigned char *ws)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *raw = reinterpret_cast<float *>(smem_raw);
    const int t = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int n0 = t * 64;
    const float *kp = a.k + b * a.ks[0] + hk * a.ks[1] + (long long)n0 * a.ks[2];
    const float *vp = a.v + b * a.vs[0] + hk * a.vs[1] + (long long)n0 * a.vs[2];
    load_tile<64, 64, 64, 256, QUAD_SWIZZLED>(raw, kp, a.ks[2], a.Lk - n0, a.D, a.vec16, tid);
    load_tile<64, 64, 64, 256, QUAD_SWIZZLED>(raw + 64 * 64, vp, a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
    fwparts::cp_async_commit();
    fwparts::cp_async_wait<0>();
    __syncthreads();
    /* straight to the workspace: a quarter warp's 16-byte stores fill one 128-byte row */
    unsigned char *dst = ws + (((long long)b * gridDim.y + hk) * gridDim.x + t) * (long long)ws_tile_bytes<P>();
    split_k<P, 256>(raw, dst, tid);
    split_v<P, 256>(raw + 64 * 64, dst + wg_geom<P>::KST, tid);
}

/* The pre-pass's shared memory: one raw K and V tile. */
template <class P> constexpr size_t presplit_smem_bytes() { return (size_t)wg_geom<P>::RAW; }

} /* namespace fwf32 */
#endif
