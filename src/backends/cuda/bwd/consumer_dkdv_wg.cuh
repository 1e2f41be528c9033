/* The consumer side of the Hopper dK/dV kernels (kernel_dkdv_wg.cuh, kernel_dkdv_ws.cuh; sm_90a), keys as rows as
 * in the mma.sync kernels: one warpgroup's 64 keys of a block of BN = 128 (warpgroup c owns keys 64c..64c+63).
 * Per query step of BM rows (64 or 128):
 *     Sᵀ  = K_c Qᵀ,  dPᵀ = V_c dOᵀ          wgmma, A and B from shared memory (K-major, swizzle.cuh)
 *     Pᵀ, dSᵀ in registers (per query column: lse2, Δ; softmax.cuh's recompute)
 *     dV += Pᵀ dO,   dK += dSᵀ Q             wgmma, A from registers (mma.cuh's repack), B N-major
 * dK, dV stay in registers (f32) for the whole block and are written once (epilogue.cuh). dkdv_overlapped is
 * the deterministic mode's schedule: step it's Sᵀ/dPᵀ products issued with step it-1's dV/dK, and step it's
 * element-wise work done while those finish (the forward's overlap). */
#ifndef FW_BWD_CONSUMER_DKDV_WG_CUH
#define FW_BWD_CONSUMER_DKDV_WG_CUH

#include "backends/cuda/bwd/kernel_common.cuh"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "backends/cuda/parts/swizzle.cuh"
#include "backends/cuda/parts/wgmma.cuh"

namespace fwbwd {

/* One warpgroup's 64 keys of a dK/dV block (wgc = 0, 1: keys 64 wgc..) in both dK/dV kernels: the dK, dV
 * accumulators for the whole block, the step's Sᵀ, dPᵀ accumulators and Pᵀ, dSᵀ as A fragments. */
template <typename T, int D, int BM, dq_mode DQ> struct dkdv_rows {
    static constexpr bool ATOMIC = DQ == dq_mode::atomic;
    static constexpr int BN = 128, KD = D / 16, ND = D / 8, NQ = BM / 8, KQ = BM / 16;
    float dk[ND][4], dv[ND][4], s[NQ][4], dp[NQ][4];
    uint32_t pa[KQ][4], dsa[KQ][4];
    uint64_t dK_km, dV_km;
    int wgc, krow0, g, t4;

    __device__ __forceinline__ void init(uint32_t sK, uint32_t sV, int wgc_, int warp_in_wg, int lane)
    {
        wgc = wgc_;
        krow0 = wgc * 64 + warp_in_wg * 16; /* this warp's first key row in the block */
        g = lane >> 2;
        t4 = lane & 3;
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.f;
        dK_km = fwparts::sw128_desc(sK + (uint32_t)(wgc * 64 * 128), 16, 1024);
        dV_km = fwparts::sw128_desc(sV + (uint32_t)(wgc * 64 * 128), 16, 1024);
    }
    /* Sᵀ = K_c Qᵀ, dPᵀ = V_c dOᵀ of the step whose Q, dO are at sQ, sdO, issued and committed */
    __device__ __forceinline__ void issue_sdp(uint32_t sQ, uint32_t sdO)
    {
        using namespace fwparts;
        const uint64_t dq_km = sw128_desc(sQ, 16, 1024), ddo_km = sw128_desc(sdO, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbk = (uint64_t)((kk / 4) * 8 * BN), cbq = (uint64_t)((kk / 4) * 8 * BM),
                           ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BM>(s, dK_km + cbk + ko, dq_km + cbq + ko, kk > 0);
        }
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbk = (uint64_t)((kk / 4) * 8 * BN), cbq = (uint64_t)((kk / 4) * 8 * BM),
                           ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BM>(dp, dV_km + cbk + ko, ddo_km + cbq + ko, kk > 0);
        }
        wgmma_commit();
    }
    /* Pᵀ and dSᵀ in place of Sᵀ, dPᵀ (rows = keys from n0, columns = the step's queries from m0; lse2_s,
     * delta_s: the step's per-query values); atomic mode also stores dSᵀ to dS_t (128-byte swizzle) */
    __device__ __forceinline__ void elementwise(const fw_bwd_tc_params &p, int m0, int n0, const float *lse2_s,
                                                const float *delta_s, unsigned char *dS_t)
    {
        using namespace fwparts;
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
        for (int j = 0; j < NQ; j++) {
            const int ql = j * 8 + t4 * 2;
            const float2 l2 = *reinterpret_cast<const float2 *>(lse2_s + ql);
            const float2 dl = *reinterpret_cast<const float2 *>(delta_s + ql);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int kl = krow0 + g + r * 8;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = softmax_recompute_p(s[j][r * 2 + e], p.scale_log2, e ? l2.y : l2.x);
                    if (need_mask && !key_visible(p, m0 + ql + e, n0 + kl)) x = 0.f;
                    s[j][r * 2 + e] = x;
                    dp[j][r * 2 + e] = softmax_grad(x, dp[j][r * 2 + e], e ? dl.y : dl.x);
                }
                if (ATOMIC) { /* dSᵀ row kl (within the warpgroup: kl - 64 wgc) */
                    const int kr = kl - wgc * 64;
                    *reinterpret_cast<uint32_t *>(dS_t + (j / 8) * 64 * 128 + sw128_offset(kr, j % 8) + t4 * 4) =
                        pack2<T>::make(dp[j][r * 2], dp[j][r * 2 + 1]);
                }
            }
        }
    }
    /* the A operands of dV and dK, only once the products that read the previous ones retired */
    __device__ __forceinline__ void to_a()
    {
        fwparts::acc_tiles_to_a<T, KQ>(s, pa, dp, dsa);
    }
    /* dV += Pᵀ dO, dK += dSᵀ Q (B N-major: column blocks BM x 128 bytes apart): the products, not fenced or
     * committed */
    __device__ __forceinline__ void dv_products(uint32_t sdO)
    {
        const uint64_t ddo_nm = fwparts::sw128_desc(sdO, BM * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) fwparts::wgmma_rs<T, D>(dv, pa[kk], ddo_nm + (uint64_t)(kk * 16 * 128 / 16), 1);
    }
    __device__ __forceinline__ void dk_products(uint32_t sQ)
    {
        const uint64_t dq_nm = fwparts::sw128_desc(sQ, BM * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) fwparts::wgmma_rs<T, D>(dk, dsa[kk], dq_nm + (uint64_t)(kk * 16 * 128 / 16), 1);
    }
    /* both, issued and committed as one group */
    __device__ __forceinline__ void issue_dvdk(uint32_t sQ, uint32_t sdO)
    {
        fwparts::wgmma_fence();
        dv_products(sdO);
        dk_products(sQ);
        fwparts::wgmma_commit();
    }
    /* each alone, issued and committed (the fused dQ's step) */
    __device__ __forceinline__ void issue_dv(uint32_t sdO)
    {
        fwparts::wgmma_fence();
        dv_products(sdO);
        fwparts::wgmma_commit();
    }
    __device__ __forceinline__ void issue_dk(uint32_t sQ)
    {
        fwparts::wgmma_fence();
        dk_products(sQ);
        fwparts::wgmma_commit();
    }
    __device__ __forceinline__ void store(const fw_bwd_tc_params &p, int n0, int b, int hk)
    {
        T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
        T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
        fwparts::store_acc_rows<T, ND>(dkg, p.dk_s[2], dk, n0 + krow0, p.Lk, p.d, p.scale, g, t4);
        fwparts::store_acc_rows<T, ND>(dvg, p.dv_s[2], dv, n0 + krow0, p.Lk, p.d, 1.f, g, t4);
    }
};

/* A step's Sᵀ, dPᵀ products alone in flight, then Pᵀ, dSᵀ as the A operands of dV and dK: the first step of the
 * overlapped schedule and every step of the others (the plain wg kernel's, the fused dQ's). */
template <class Rows, class Sdp, class Elementwise>
__device__ __forceinline__ void step_to_a(Rows &w, int it, const Sdp &issue_sdp, const Elementwise &elementwise)
{
    issue_sdp(it);
    fwparts::wgmma_wait<0>();
    fwparts::wgmma_reg_fence(w.s);
    fwparts::wgmma_reg_fence(w.dp);
    elementwise(it);
    w.to_a();
}

/* The overlapped schedule of both dK/dV kernels over `total` query steps: step it's Sᵀ/dPᵀ products are
 * issued together with step it-1's dV/dK products, and step it's element-wise work runs while the latter
 * finish. wait_step(it): step it's data has landed; released(it): every product has read step it's stage.
 * issue_sdp, issue_dvdk, elementwise(it): the kernel's step-indexed views of w's members. */
template <class Rows, class Wait, class Released, class Sdp, class Dvdk, class Elementwise>
__device__ __forceinline__ void dkdv_overlapped(Rows &w, int total, const Wait &wait_step, const Released &released,
                                                const Sdp &issue_sdp, const Dvdk &issue_dvdk,
                                                const Elementwise &elementwise)
{
    using namespace fwparts;
    if (total > 0) {
        wait_step(0);
        step_to_a(w, 0, issue_sdp, elementwise);
    }
#pragma unroll 1
    for (int it = 1; it < total; it++) {
        wait_step(it);
        issue_sdp(it);
        issue_dvdk(it - 1);
        wgmma_wait<1>(); /* Sᵀ, dPᵀ of step it done; dV, dK of step it-1 may still run */
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        elementwise(it);
        wgmma_wait<0>();
        wgmma_reg_fence(w.dk);
        wgmma_reg_fence(w.dv);
        released(it - 1);
        w.to_a();
    }
    if (total > 0) {
        issue_dvdk(total - 1);
        wgmma_wait<0>();
        wgmma_reg_fence(w.dk);
        wgmma_reg_fence(w.dv);
    }
}

} /* namespace fwbwd */
#endif
