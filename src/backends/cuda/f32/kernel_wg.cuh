/* The two-warpgroup Hopper f32 kernel (tf32 / 3xtf32 on wgmma, sm_90a) and its launch: every thread copies,
 * splits and computes, with a block-wide barrier per key tile.
 *
 * Block: 2 warpgroups x 64 query rows (BM 128), key tiles of 64 (wg_tiles.cuh). Per tile, while the tensor cores
 * compute S(t) and P(t-1)·V(t-1) (wg_rows.cuh), all threads split tile t+1 and copy tile t+2. Shared memory
 * (3xtf32): raw K/V 2 x 32 KB, split K 2 x 32 KB, split Vᵀ 3 x 32 KB = 224 KB; tf32 keeps no small parts: 144 KB.
 * The one-warpgroup kernel (kernel_wg1.cuh) passed it at short keys: the heuristics choose it only where there
 * is no one-warpgroup record.
 *
 * C: a configuration (generated/): D 64, BM 128, BN 64. */
#ifndef FW_F32_KERNEL_WG_CUH
#define FW_F32_KERNEL_WG_CUH

#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/f32/wg_rows.cuh"
#include "backends/cuda/parts/pipeline.cuh"

namespace fwf32 {

template <class P, class C>
__global__ void __launch_bounds__(256, 1) wg_kernel(const fw_f32_params a)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fwparts;
    typedef wg_geom<P> G;
    static_assert(C::D == G::DB && C::BM == G::BM && C::BN == G::BN, "the wgmma f32 tiles");
    constexpr int BM = G::BM, BN = G::BN, NT = G::NT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = smem_align_1024(smem_raw);
    float *raw = reinterpret_cast<float *>(base);
    unsigned char *sK = base + G::OFF_K, *sV = base + G::OFF_V;
    const uint32_t sK_addr = smem_u32(sK), sV_addr = smem_u32(sV);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    wg_query_block blk;
    blk.init(a, BM, BN, static_tile_scheduler::get_tile(true, (int)gridDim.x));
    const int n_tiles = blk.n_tiles;

    auto split = [&](int i) { /* raw stage i % 2 into split K stage i % 2 and Vᵀ stage i % 3 */
        const float *r = raw + (i & 1) * (2 * 64 * 64);
        split_k<P, NT>(r, sK + (i & 1) * G::KST, tid);
        split_v<P, NT>(r + 64 * 64, sV + (i % 3) * G::VST, tid);
        fence_proxy_async();
    };
    auto s_desc = [&](int i) { return sw128_desc(sK_addr + (uint32_t)((i & 1) * G::KST), 16, 1024); };
    auto v_desc = [&](int i) { return sw128_desc(sV_addr + (uint32_t)((i % 3) * G::VST), 16, 1024); };

    /* Q through the (still unused) split-Vᵀ area, then into registers (straight from global memory, together
     * with the cvt form of the split, was 13% slower at L = 2048) */
    float *Qs = reinterpret_cast<float *>(sV);
    load_tile<BM, 64, G::QST, NT>(Qs, blk.qp, a.qs[2], blk.rows, a.D, a.vec16, tid);
    if (n_tiles > 0) blk.load_raw<NT>(a, raw, 0, tid);
    cp_async_commit();
    if (n_tiles > 1) blk.load_raw<NT>(a, raw + 2 * 64 * 64, 1, tid);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    wg_rows<P> w;
    w.init(warp * 16, lane);
    w.load_q(Qs, G::QST, BM, 64, a.scale_log2);
    __syncthreads(); /* Q staging read: the split-Vᵀ area is free */
    if (n_tiles > 0) split(0);

    if (n_tiles > 0) {
        cp_async_wait<0>();
        __syncthreads(); /* split tile 0 visible (with the proxy fence); raw tile 1 landed */
        w.issue_s(s_desc(0));
        if (2 < n_tiles) blk.load_raw<NT>(a, raw, 2, tid);
        cp_async_commit();
        if (1 < n_tiles) split(1);
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(a, blk.m0, blk.n0(0, BN), blk.edge(0, BN), alpha);
        w.rescale_and_take_p(alpha);
    }
    for (int i = 1; i < n_tiles; i++) {
        cp_async_wait<0>();
        __syncthreads(); /* split tile i visible; raw tile i + 1 landed */
        w.issue_s(s_desc(i));
        w.issue_pv(v_desc(i - 1));
        if (i + 2 < n_tiles) blk.load_raw<NT>(a, raw + (i & 1) * (2 * 64 * 64), i + 2, tid); /* tile i: split already */
        cp_async_commit();
        if (i + 1 < n_tiles) split(i + 1); /* K stage of tile i - 1 (S(i-1) retired), Vᵀ stage of tile i - 2 */
        wgmma_wait<1>(); /* S(i) done; P(i-1)·V(i-1) may still run */
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(a, blk.m0, blk.n0(i, BN), blk.edge(i, BN), alpha);
        wgmma_wait<0>(); /* P(i-1)·V(i-1) retired: O may be rescaled and P's fragments rewritten */
        wgmma_reg_fence(w.o);
        w.rescale_and_take_p(alpha);
    }
    if (n_tiles > 0) {
        w.issue_pv(v_desc(n_tiles - 1));
        wgmma_wait<0>();
        wgmma_reg_fence(w.o);
    }
    cp_async_wait<0>();
    w.store(a, blk.m0, blk.rows, blk.b, blk.h);
#else
    (void)a;
    __trap(); /* sm_90a only: the heuristics offer it on compute capability 9.0 only */
#endif
}

template <class P, class C>
static cudaError_t wg_launch(const fw_f32_params *a, const fw_f32_plan *, int batch, cudaStream_t s, const fw_knobs *)
{
    typedef wg_geom<P> G;
    cudaError_t e = fw_cuda_smem_limit<wg_kernel<P, C>>(G::SMEM);
    if (e != cudaSuccess) return e;
    const dim3 grid = fwparts::static_tile_scheduler::grid((a->Lq + G::BM - 1) / G::BM, a->H, batch);
    wg_kernel<P, C><<<grid, G::NT, G::SMEM, s>>>(*a);
    return fw_cuda_launch_error();
}

} /* namespace fwf32 */
#endif
