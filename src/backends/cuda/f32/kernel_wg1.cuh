/* The one-warpgroup Hopper f32 kernel (tf32 / 3xtf32 on wgmma, sm_90a) with split-KV, and its launch.
 *
 * The two-warpgroup kernel's blocks take a whole SM (224 KB, 255 registers x 256 threads), so at L = 256 the
 * second wave's copies all start when the first wave ends, and within a block the copies of Q and the first tiles
 * precede every product. Here a block is one warpgroup of 64 query rows with single-buffered stages (raw K/V,
 * split K, split Vᵀ: 97 KB in 3xtf32), two blocks an SM: one block's copies, splits and softmax run under the
 * other's products. Per tile: split K (while P(i-1)·V(i-1) runs), wait for it, S = Q Kᵀ issued, split Vᵀ under
 * it, copy the next raw tile, softmax, P·V issued. (S(i) cannot start before P(i-1)·V(i-1) retires: P's registers
 * are S's accumulator, and issuing it earlier made ptxas serialise the products, info C7514.) Where even 64-row
 * blocks would leave SMs idle (B = 1: 8 heads of L = 512 are 64 blocks on 132 SMs), the keys are split across
 * blocks (split_kv.cuh). The plan (heuristics.cu) sets the key ranges, the staging of the first tile and the
 * staggered start.
 *
 * C: a configuration (generated/): D 64, BM 64, BN 64. */
#ifndef FW_F32_KERNEL_WG1_CUH
#define FW_F32_KERNEL_WG1_CUH

#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/f32/split_kv.cuh"
#include "backends/cuda/f32/wg_rows.cuh"
#include "backends/cuda/parts/pipeline.cuh"

namespace fwf32 {

template <class P> struct wg1_geom {
    static constexpr int BM = 64, BN = 64, DB = 64, NT = 128;
    static constexpr uint32_t RAW = 2 * BN * DB * 4;        /* raw K and V */
    static constexpr uint32_t KST = (P::THREE ? 2 : 1) * BN * DB * 4, VST = KST;
    static constexpr int QST = DB + 4;                       /* Q staging row stride (floats), in the split-Vᵀ area */
    static constexpr uint32_t QB = BM * QST * 4, VAREA = VST > QB ? VST : QB;
    static constexpr uint32_t OFF_K = RAW, OFF_V = OFF_K + KST;
    static constexpr size_t SMEM = (size_t)OFF_V + VAREA + 1024; /* + alignment of the base to 1024 */
    static constexpr int PART_F4 = 9 * NT; /* a block's partial: O as 8 float4 a thread, then (m0, m1, l0, l1) */
};

template <class P, class C>
__global__ void __launch_bounds__(128, 2) wg1_kernel(const fw_f32_params a, const kv_split ks)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fwparts;
    typedef wg1_geom<P> G;
    static_assert(C::D == G::DB && C::BM == G::BM && C::BN == G::BN, "the one-warpgroup f32 tiles");
    constexpr int BM = G::BM, BN = G::BN, NT = G::NT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = smem_align_1024(smem_raw);
    float *raw = reinterpret_cast<float *>(base);
    unsigned char *sK = base + G::OFF_K, *sV = base + G::OFF_V;
    const uint64_t s_desc = sw128_desc(smem_u32(sK), 16, 1024);
    const uint64_t v_desc = sw128_desc(smem_u32(sV), 16, 1024);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int range;
    const tile_coord tile = static_tile_scheduler::get_tile_split(ks.n, &range);
    wg_query_block blk;
    blk.init(a, BM, BN, tile);
    take_range(blk, ks, range);
    const int n_tiles = blk.n_tiles;
    stagger(a);

    /* Tile 0's K, Q, tile 0's V: three copy groups. ks.stage0 (the blocks fill the SMs and all copy at once: at
     * L = 128 Q landed 3.5 us into a block and tile 0 1.2 us after it): K(0) is split while Q lands and S(0) runs
     * while V(0) lands (3xtf32 L = 128 -6%). Else (few blocks: the copies are quick) K(0) and Q are waited for
     * together, V(0) once Q is in registers: the staged form's extra waits and barriers cost 4% at B = 1, L = 128.
     * Later tiles: one group, K and V. */
    const bool stage0 = ks.stage0 != 0;
    float *Qs = reinterpret_cast<float *>(sV); /* Q through the split-Vᵀ area, before tile 0's split */
    if (n_tiles > 0) blk.load_raw_k<NT>(a, raw, 0, tid);
    cp_async_commit();
    load_tile<BM, 64, G::QST, NT>(Qs, blk.qp, a.qs[2], blk.rows, a.D, a.vec16, tid);
    cp_async_commit();
    if (n_tiles > 0) blk.load_raw_v<NT>(a, raw + 64 * 64, 0, tid);
    cp_async_commit();
    wg_rows<P> w;
    w.init(warp * 16, lane);
    for (int i = 0; i < n_tiles; i++) {
        if (i == 0 && stage0) {
            cp_async_wait<2>(); /* K(0) */
        } else if (i == 0) {
            cp_async_wait<1>(); /* K(0) and Q: Q into registers while V(0) lands */
            __syncthreads();
            w.load_q(Qs, G::QST, BM, 64, a.scale_log2);
            cp_async_wait<0>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* raw K(i) landed (and V(i), unless i = 0 and staged); S(i-1) retired in every warp */
        split_k<P, NT>(raw, sK, tid);
        fence_proxy_async();
        if (i == 0 && stage0) {
            cp_async_wait<1>();
            __syncthreads(); /* Q landed */
            w.load_q(Qs, G::QST, BM, 64, a.scale_log2);
        }
        wgmma_wait<0>(); /* P(i-1)·V(i-1) retired (P's registers are S's: S(i) may not start before) */
        __syncthreads(); /* split K(i) visible to the tensor cores; every warp's P(i-1)·V(i-1) retired: Vᵀ free (Q's
                          * staging read, at i = 0) */
        w.issue_s(s_desc); /* S(i) runs under Vᵀ(i)'s split */
        if (i == 0 && stage0) {
            cp_async_wait<0>();
            __syncthreads(); /* raw V(0) landed */
        }
        split_v<P, NT>(raw + 64 * 64, sV, tid);
        fence_proxy_async();
        __syncthreads(); /* split Vᵀ(i) visible to the tensor cores; the raw stage free */
        if (i + 1 < n_tiles) blk.load_raw<NT>(a, raw, i + 1, tid);
        cp_async_commit();
        wgmma_wait<0>();
        wgmma_reg_fence(w.o);
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(a, blk.m0, blk.n0(i, BN), blk.edge(i, BN), alpha);
        w.rescale_and_take_p(alpha);
        w.issue_pv(v_desc); /* runs under the next tile's copy wait and K split */
        if constexpr (!P::THREE) { /* a use of Q's fragments that ptxas sees: without it, ptxas 13.0 gave P the
                                    * registers of Q in tf32 (wrong from the second tile on); after the P·V issue, not
                                    * before it, where ptxas injected warpgroup.arrive into the products (C7519) */
            uint32_t x = 0;
#pragma unroll
            for (int kk = 0; kk < 8; kk++) x ^= w.qb[kk][0] ^ w.qb[kk][1] ^ w.qb[kk][2] ^ w.qb[kk][3];
            if (x == 0x7fffffffu && a.D < 0) a.o[0] = 0.0f; /* never: D > 0 */
        }
    }
    wgmma_wait<0>();
    wgmma_reg_fence(w.o);
    cp_async_wait<0>(); /* n_tiles = 0: Q's copy (never read: no keys) */
    if (ks.n > 1) { /* the ticket's flag in the raw stage, read by now */
        const long long qi = ((long long)blk.b * a.H + blk.h) * gridDim.x + tile.m_block;
        if (!merge_ranges<NT, G::PART_F4>(w, ks, qi, range, reinterpret_cast<int *>(raw), tid)) return;
    }
    w.store(a, blk.m0, blk.rows, blk.b, blk.h);
#else
    (void)a;
    (void)ks;
    __trap(); /* sm_90a only: the heuristics offer it on compute capability 9.0 only */
#endif
}

/* The plan's key ranges (kv_splits) and first-tile staging (stage0). */
template <class P, class C>
static cudaError_t wg1_launch(const fw_f32_params *a, const fw_f32_plan *plan, int batch, cudaStream_t s, const fw_knobs *k)
{
    typedef wg1_geom<P> G;
    cudaError_t e = fw_cuda_smem_limit<wg1_kernel<P, C>>(G::SMEM);
    if (e != cudaSuccess) return e;
    const long long nqb = (a->Lq + G::BM - 1) / G::BM, blocks = nqb * a->H * batch;
    kv_split ks{nullptr, nullptr, plan->kv_splits, plan->stage0};
    void *ws;
    bool cached;
    size_t bytes;
    e = alloc_ranges<G::PART_F4>(&ks, blocks, s, k, &ws, &cached, &bytes);
    if (e == cudaSuccess && blocks > 0) {
        const dim3 grid = fwparts::static_tile_scheduler::grid_split((int)nqb, a->H, batch, ks.n);
        wg1_kernel<P, C><<<grid, G::NT, G::SMEM, s>>>(*a, ks);
        e = fw_cuda_launch_error();
    }
    return release_ranges(e, ws, cached, bytes, s);
}

} /* namespace fwf32 */
#endif
