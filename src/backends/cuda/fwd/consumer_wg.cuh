/* The mainloop steps of one wgmma consumer warpgroup of the Hopper forward kernels (kernel_wg.cuh,
 * kernel_ws.cuh): its 64 query rows' S (64 x BN) and O (64 x D) accumulators, their online softmax, and P of
 * the previous key tile as the A operand of its P·V product.
 *
 * Per key tile (FlashAttention-3's intra-warpgroup overlap):
 *   S(t) = Q K(t)ᵀ      wgmma, A and B from shared memory (both K-major)
 *   O += P(t-1) V(t-1)  wgmma, A (P, bf16/f16) from registers, B = V N-major (transposed descriptor)
 *   wait for S(t); online softmax of S(t) while the P·V product runs; wait for it; rescale O (kernel_ws.cuh
 *   may rescale O instead between the next S's issue and its P·V product).
 * Q, K and V tiles are in the 128-byte-swizzled layout of swizzle.cuh, which wgmma reads through matrix
 * descriptors. */
#ifndef FW_FWD_CONSUMER_WG_CUH
#define FW_FWD_CONSUMER_WG_CUH

#include <stdint.h>
#include "backends/cuda/fwd/params.h"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "backends/cuda/parts/wgmma.cuh"

namespace fwfwd {

template <typename T, int D, int BN, int BM> struct wg_consumer {
    static constexpr int NS = BN / 8, ND = D / 8, KD = D / 16, KN = BN / 16;
    float o[1][ND][4], s[1][NS][4]; /* one m16 tile per warp */
    fwparts::online_softmax<1> sm;
    uint32_t pa[KN][4];
    int wrow0, g, t4; /* the warp's first row in the block, lane / 4, lane % 4 */

    __device__ __forceinline__ void init(int warp_in_wg, int wgc, int lane)
    {
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[0][j][e] = 0.f;
        sm.init();
        wrow0 = wgc * 64 + warp_in_wg * 16;
        g = lane >> 2;
        t4 = lane & 3;
    }
    /* S = Q Kᵀ, issued and committed (not waited for); sq: this warpgroup's 64 rows of the Q tile. The
     * descriptors are formed first: a register defined between wgmma.fence and the commit serialises the
     * wgmmas (ptxas C7513). +1 in the start-address field = 16 bytes: 2 per k16 step inside a 128-byte row,
     * a column block (rows x 128 bytes) per 4 steps. */
    __device__ __forceinline__ void issue_s(uint32_t sq, uint32_t sk)
    {
        using namespace fwparts;
        const uint64_t dq = sw128_desc(sq, 16, 1024), dk = sw128_desc(sk, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbo = (uint64_t)((kk / 4) * 8), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(s[0], dq + cbo * BM + ko, dk + cbo * BN + ko, kk > 0);
        }
        wgmma_commit();
    }
    /* O += P V: V N-major (keys are rows), column blocks BN x 128 bytes apart. */
    __device__ __forceinline__ void issue_pv(uint32_t sv)
    {
        using namespace fwparts;
        const uint64_t dv = sw128_desc(sv, BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KN; kk++) wgmma_rs<T, D>(o[0], pa[kk], dv + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    }
    /* Mask, online softmax of S for keys from n0, P left in s; alpha: the rescale of O (rescale, once the
     * P·V product in flight has retired). */
    __device__ __forceinline__ void softmax(const fw_fwd_params &p, int m0, int n0, float (&alpha)[2])
    {
        if (fwparts::tile_needs_mask<BM, BN>(p, m0, n0)) fwparts::mask_scores(s, p, m0, n0, *this);
        fwparts::softmax_update(sm.row_m, sm.row_l, s, p, fwparts::keep_alphas{alpha});
    }
    __device__ __forceinline__ void rescale(const float (&alpha)[2])
    {
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[0][j][0] *= alpha[0];
            o[0][j][1] *= alpha[0];
            o[0][j][2] *= alpha[1];
            o[0][j][3] *= alpha[1];
        }
    }
    /* P into the A fragments, only once the P·V product that read them has retired (writing an in-flight
     * wgmma's input registers is undefined; ptxas would serialise the wgmmas to avoid it). */
    __device__ __forceinline__ void p_to_a() { fwparts::acc_tiles_to_a<T, KN>(s[0], pa); }
    /* The epilogue of this warp's 16 rows; stage: the block's staging area (BM x (D + 8) elements), or with
     * fwparts::stage_swizzled this warp's own (16 x D, the persistent kernel's), free of any reader. */
    template <class Layout = fwparts::stage_padded<D>>
    __device__ __forceinline__ void store(const fw_fwd_params &p, T *stage, int m0, int b, int h, int lane, Layout = Layout())
    {
        fwparts::store_output<T, D, 1, const fw_fwd_params &>(p, stage, o, sm.row_m, sm.row_l, m0, b, h, lane, *this,
                                                              Layout());
    }
};

} /* namespace fwfwd */
#endif
