/* cuda-flash backward on Hopper: the dK/dV kernel with wgmma (sm_90a; the QS < 0 variants of
 * bwd_tc_d<D>.cu). Included by bwd_tc.cuh, whose algorithm and notation it keeps (keys as rows).
 *
 * Block: 2 warpgroups, BN = 128 keys (warpgroup c owns keys 64c..64c+63), query tiles of BM = 64 or 128 rows
 * streamed through a 2-stage cp.async ring (Q, dO in the 128-byte-swizzled layout of flash_wg.cuh,
 * lse2 and Δ as in the mma.sync kernels). Per step and warpgroup:
 *     Sᵀ  = K_c Qᵀ,  dPᵀ = V_c dOᵀ          wgmma, A and B from shared memory (K-major)
 *     Pᵀ, dSᵀ in registers (per query column: lse2, Δ)
 *     dV += Pᵀ dO,   dK += dSᵀ Q             wgmma, A from registers, B N-major (transposed descriptor)
 *     atomic mode: dSᵀ to shared memory, dQ_i += scale · dS K_c (A = dS M-major, B = K N-major, both
 *     from shared memory), added into the f32 accumulator with float2 atomics: each warpgroup adds the
 *     part from its own 64 keys, so the warpgroups never wait for each other.
 * dK, dV stay in registers (f32) for the whole block and are written once. The OVL variants
 * (deterministic, 3 stages) issue step it's Sᵀ/dPᵀ with step it-1's dV/dK and do step it's element-wise
 * work while those finish.
 * dq_wg_kernel (below) is the deterministic mode's dQ pass on wgmma. */
#ifndef FW_BWD_WG_CUH
#define FW_BWD_WG_CUH

#include "flash_wg.cuh"

namespace fwbt {

/* Rows row0 + g and row0 + g + 8 of a warp's m16 × D accumulator (the mma/wgmma C layout), times
 * scale, into a row-major T matrix with row stride ss; rows >= nrows and columns >= d are skipped. */
template <typename T, int ND>
__device__ __forceinline__ void store_acc_rows(T *dst, long long ss, const float (&acc)[ND][4], int row0, int nrows,
                                               int d, float scale, int g, int t4)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        if (row < nrows) {
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = j * 8 + t4 * 2;
                if (col < d)
                    *reinterpret_cast<uint32_t *>(dst + (long long)row * ss + col) =
                        pack2<T>::make(acc[j][r * 2] * scale, acc[j][r * 2 + 1] * scale);
            }
        }
    }
}

template <int D, int BM_, bool ATOMIC, int ST_ = 2> struct dkdv_wg_geom {
    static constexpr int BN = 128, BM = BM_, ST = ST_;
    static constexpr uint32_t KV_BYTES = BN * D * 2;                /* K or V, swizzled */
    static constexpr uint32_t QD_BYTES = BM * D * 2;                /* Q or dO of one stage */
    static constexpr uint32_t STAT_BYTES = 2 * BM * 4;              /* lse2, Δ of one stage */
    static constexpr uint32_t DS_BYTES = ATOMIC ? 2 * 64 * BM * 2 : 0; /* dSᵀ of each warpgroup */
    static constexpr size_t SMEM =
        1024 + 2 * (size_t)KV_BYTES + 2 * ST * (size_t)QD_BYTES + ((ST * STAT_BYTES + 1023) & ~1023u) + DS_BYTES;
};

/* OVL (deterministic only, 3 stages): step it's Sᵀ/dPᵀ products are issued together with step it-1's
 * dV/dK products, and step it's element-wise work runs while the latter finish (the forward's overlap). */
template <typename T, int D, int BM_, bool ATOMIC, int ST_ = 2, bool OVL = false>
__global__ void __launch_bounds__(256, 1) dkdv_wg_kernel(const params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dkdv_wg_geom<D, BM_, ATOMIC, ST_>;
    static_assert(!OVL || (!ATOMIC && ST_ == 3), "the overlapped schedule is deterministic, 3 stages");
    constexpr int NT = 256, BN = G::BN, BM = G::BM;
    constexpr int KD = D / 16, ND = D / 8, NQ = BM / 8, KQ = BM / 16, KK = 64 / 16;
    using namespace fwwg;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base, sV = sK + G::KV_BYTES;
    const uint32_t sStage = sV + G::KV_BYTES; /* stage s: Q at +2s·QD, dO at +(2s+1)·QD */
    const uint32_t sStat = sStage + 2 * G::ST * G::QD_BYTES;
    /* warpgroup c's dSᵀ at +c·64·BM·2: BM/64 blocks of 64 keys x 64 queries (M-major for dQ's A) */
    const uint32_t sdS = sStat + ((G::ST * G::STAT_BYTES + 1023) & ~1023u);
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + (sStat - raw));

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wgc = warp >> 2, g = lane >> 2, t4 = lane & 3;
    const int krow0 = wgc * 64 + (warp & 3) * 16; /* this warp's first key row in the block */

    kv_block<T, D, NT, BN, BM> kb;
    kb.range(p);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;
    {
        const T *kg = head_base<T>(p.k, p.k_s, b, hk);
        const T *vg = head_base<T>(p.v, p.v_s, b, hk);
        sw_cursor<T, D, NT> c;
        c.init(kg, p.k_s[2], n0, p.Lk, p.d, tid);
        c.template load<BN>(sK);
        c.init(vg, p.v_s[2], n0, p.Lk, p.d, tid);
        c.template load<BN>(sV);
    }
    auto load_step = [&](int it, int slot) {
        const int h = kb.head(p, it), m0 = kb.row0(it);
        const T *qg = head_base<T>(p.q, p.q_s, b, h);
        const T *dog = head_base<T>(p.dout, p.do_s, b, h);
        sw_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM>(sStage + (uint32_t)(2 * slot) * G::QD_BYTES);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM>(sStage + (uint32_t)(2 * slot + 1) * G::QD_BYTES);
        const long long r0 = ((long long)b * p.H + h) * p.Lq;
        const uint32_t st = sStat + (uint32_t)slot * G::STAT_BYTES;
        load_stats<BM>(st, p.lse2 + r0, m0, p.Lq, tid);
        load_stats<BM>(st + BM * 4, p.delta + r0, m0, p.Lq, (tid + BM) % NT);
    };
    if (total > 0) load_step(0, 0);
    cp_async_commit();

    float dk[ND][4], dv[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.f;
    /* descriptors of this warpgroup's 64 key rows (K-major for Sᵀ and dPᵀ, N-major for dQ) */
    const uint32_t kw = sK + (uint32_t)(wgc * 64 * 128), vw = sV + (uint32_t)(wgc * 64 * 128);
    const uint64_t dK_km = sw128_desc(kw, 16, 1024), dV_km = sw128_desc(vw, 16, 1024);
    const uint64_t dK_nm = sw128_desc(kw, BN * 128, 1024);
    const uint32_t dsw = sdS + (uint32_t)(wgc * 64 * BM * 2);
    T *dS_t = reinterpret_cast<T *>(smem_raw + (dsw - raw));

    float s[NQ][4], dp[NQ][4];
    uint32_t pa[KQ][4], dsa[KQ][4];
    auto stage_q = [&](int it) { return sStage + (uint32_t)(2 * (it % G::ST)) * G::QD_BYTES; };
    /* Sᵀ = K_c Qᵀ, dPᵀ = V_c dOᵀ of step it, issued and committed */
    auto issue_sdp = [&](int it) {
        const uint32_t sQ = stage_q(it), sdO = sQ + G::QD_BYTES;
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
    };
    /* Pᵀ and dSᵀ of step it in place of Sᵀ, dPᵀ (rows = keys, columns = the step's queries); atomic
     * mode also stores dSᵀ to shared memory */
    auto elementwise = [&](int it) {
        const int m0 = kb.row0(it);
        const float *lse2_s = stat_f + (it % G::ST) * (G::STAT_BYTES / 4), *delta_s = lse2_s + BM;
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
                    float x = fast_exp2(fmaf(s[j][r * 2 + e], p.scale_log2, -(e ? l2.y : l2.x)));
                    if (need_mask && !visible(p, m0 + ql + e, n0 + kl)) x = 0.f;
                    s[j][r * 2 + e] = x;
                    dp[j][r * 2 + e] = x * (dp[j][r * 2 + e] - (e ? dl.y : dl.x));
                }
                if (ATOMIC) { /* dSᵀ row kl (within the warpgroup: kl - 64 wgc), 128-byte swizzle */
                    const int kr = kl - wgc * 64;
                    *reinterpret_cast<uint32_t *>(reinterpret_cast<unsigned char *>(dS_t) + (j / 8) * 64 * 128 +
                                                  kr * 128 + (((j % 8) ^ (kr & 7)) << 4) + t4 * 4) =
                        pack2<T>::make(dp[j][r * 2], dp[j][r * 2 + 1]);
                }
            }
        }
    };
    /* the A operands of dV and dK, only once the products that read the previous ones retired */
    auto to_a = [&]() {
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) {
            acc_to_a<T>(s[2 * kk], s[2 * kk + 1], pa[kk]);
            acc_to_a<T>(dp[2 * kk], dp[2 * kk + 1], dsa[kk]);
        }
    };
    /* dV += Pᵀ dO, dK += dSᵀ Q of step it (B N-major: column blocks BM x 128 bytes apart) */
    auto issue_dvdk = [&](int it) {
        const uint32_t sQ = stage_q(it), sdO = sQ + G::QD_BYTES;
        const uint64_t ddo_nm = sw128_desc(sdO, BM * 128, 1024), dq_nm = sw128_desc(sQ, BM * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) wgmma_rs<T, D>(dv, pa[kk], ddo_nm + (uint64_t)(kk * 16 * 128 / 16), 1);
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) wgmma_rs<T, D>(dk, dsa[kk], dq_nm + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    };
    /* wait for step it's data (and every thread's previous step), then start loading step it + 1 */
    auto next_stage = [&](int it) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (it + 1 < total) load_step(it + 1, (it + 1) % G::ST);
        cp_async_commit();
    };

    if constexpr (OVL) {
        if (total > 0) {
            next_stage(0);
            issue_sdp(0);
            wgmma_wait<0>();
            wgmma_reg_fence(s);
            wgmma_reg_fence(dp);
            elementwise(0);
            to_a();
        }
#pragma unroll 1
        for (int it = 1; it < total; it++) {
            next_stage(it);
            issue_sdp(it);
            issue_dvdk(it - 1);
            wgmma_wait<1>(); /* Sᵀ, dPᵀ of step it done; dV, dK of step it-1 may still run */
            wgmma_reg_fence(s);
            wgmma_reg_fence(dp);
            elementwise(it);
            wgmma_wait<0>();
            wgmma_reg_fence(dk);
            wgmma_reg_fence(dv);
            to_a();
        }
        if (total > 0) {
            issue_dvdk(total - 1);
            wgmma_wait<0>();
            wgmma_reg_fence(dk);
            wgmma_reg_fence(dv);
        }
    } else {
#pragma unroll 1
        for (int it = 0; it < total; it++) {
            next_stage(it);
            issue_sdp(it);
            wgmma_wait<0>();
            wgmma_reg_fence(s);
            wgmma_reg_fence(dp);
            elementwise(it);
            to_a();
            if (ATOMIC) {
                fence_proxy_async(); /* dSᵀ, written by this warpgroup's threads, is read by its wgmma */
                asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wgc) : "memory");
            }
            issue_dvdk(it);
            if (ATOMIC) {
                /* dQ_i (BM x D) += dS_c K_c: A = dS from dSᵀ (M-major), B = K_c (N-major). At D = 128 the
                 * P·dO and dS·Q products retire first: their A registers plus dQ's accumulators would spill. */
                const int h = kb.head(p, it), m0 = kb.row0(it);
                if constexpr (D > 64) {
                    wgmma_wait<0>();
                    wgmma_reg_fence(dk);
                    wgmma_reg_fence(dv);
                }
#pragma unroll 1
                for (int mb = 0; mb < BM / 64; mb++) { /* m64 blocks of this step's queries */
                    float acc[ND][4];
#pragma unroll
                    for (int j = 0; j < ND; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
                    const uint64_t dds = sw128_desc(dsw + (uint32_t)(mb * 64 * 128), 64 * 128, 1024);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < KK; kk++)
                        wgmma_ss_tt<T, D>(acc, dds + (uint64_t)(kk * 16 * 128 / 16), dK_nm + (uint64_t)(kk * 16 * 128 / 16), kk > 0);
                    wgmma_commit();
                    wgmma_wait<0>();
                    wgmma_reg_fence(acc);
                    wgmma_reg_fence(dk);
                    wgmma_reg_fence(dv);
                    float *accg = p.dq_acc + (((long long)b * p.H + h) * p.Lq) * p.d;
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int row = m0 + mb * 64 + (warp & 3) * 16 + g + r * 8;
                        if (row < p.Lq) {
                            float *dst = accg + (long long)row * p.d;
#pragma unroll
                            for (int j = 0; j < ND; j++) {
                                const int col = j * 8 + t4 * 2;
                                if (col < p.d) red_add2(dst + col, acc[j][r * 2] * p.scale, acc[j][r * 2 + 1] * p.scale);
                            }
                        }
                    }
                }
            } else {
                wgmma_wait<0>();
                wgmma_reg_fence(dk);
                wgmma_reg_fence(dv);
            }
        }
    }
    cp_async_wait<0>();

    T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
    T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
    store_acc_rows<T, ND>(dkg, p.dk_s[2], dk, n0 + krow0, p.Lk, p.d, p.scale, g, t4);
    store_acc_rows<T, ND>(dvg, p.dv_s[2], dv, n0 + krow0, p.Lk, p.d, 1.f, g, t4);
#else
    (void)p;
    __trap(); /* sm_90a only: bwd_launch.cu picks it on compute capability 9.0 only */
#endif
}


/* Deterministic dQ on Hopper (the WQ < 0 variants): grid (⌈Lq/128⌉, H, B), 2 warpgroups of 64 query rows;
 * Q and dO stay in shared memory, K and V tiles of BN = 64 keys cycle through 3 cp.async stages.
 * Per key tile t and warpgroup (the forward's overlap: dQ(t-1) runs under tile t's element-wise work):
 *     S = Q Kᵀ, dP = dO Vᵀ        wgmma, both operands K-major in shared memory
 *     P = exp2(scale·log2e·S − lse2), dS = P ∘ (dP − Δ)   (per row: 2 rows per thread)
 *     dQ += dS K                  wgmma, A = dS from registers, B = K N-major
 * No atomics: each dQ row is summed by one thread in a fixed order. */
template <int D, int BN_> struct dq_wg_geom {
    static constexpr int BM = 128, BN = BN_, ST = 3;
    static constexpr uint32_t QD_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr size_t SMEM = 1024 + 2 * (size_t)QD_BYTES + 2 * ST * (size_t)KV_BYTES;
};

template <typename T, int D, int BN_>
__global__ void __launch_bounds__(256, 1) dq_wg_kernel(const params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dq_wg_geom<D, BN_>;
    constexpr int NT = 256, BM = G::BM, BN = G::BN, ST = G::ST;
    constexpr int KD = D / 16, ND = D / 8, NS = BN / 8, KN = BN / 16;
    using namespace fwwg;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sdO = sQ + G::QD_BYTES, sK = sdO + G::QD_BYTES, sV = sK + ST * G::KV_BYTES;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wgc = warp >> 2, g = lane >> 2, t4 = lane & 3;
    const q_block blk = q_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;
    const int wrow0 = wgc * 64 + (warp & 3) * 16;

    const T *qg = head_base<T>(p.q, p.q_s, b, h);
    const T *dog = head_base<T>(p.dout, p.do_s, b, h);
    const T *kg = head_base<T>(p.k, p.k_s, b, hk);
    const T *vg = head_base<T>(p.v, p.v_s, b, hk);
    {
        sw_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM>(sQ);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM>(sdO);
    }
    sw_cursor<T, D, NT> kc, vc;
    kc.init(kg, p.k_s[2], n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_s[2], n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN>(sK);
        vc.template load<BN>(sV);
    }
    cp_async_commit();

    float l2[2], dl[2];
    const long long r0 = ((long long)b * p.H + h) * p.Lq;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = m0 + wrow0 + g + r * 8;
        l2[r] = i < p.Lq ? p.lse2[r0 + i] : 0.f;
        dl[r] = i < p.Lq ? p.delta[r0 + i] : 0.f;
    }
    float acc[ND][4], s[NS][4], dp[NS][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
    uint32_t dsa[KN][4];
    const uint64_t dq_km = sw128_desc(sQ + (uint32_t)(wgc * 64 * 128), 16, 1024);
    const uint64_t ddo_km = sw128_desc(sdO + (uint32_t)(wgc * 64 * 128), 16, 1024);

    auto issue_s_dp = [&](int slot) {
        const uint64_t dk = sw128_desc(sK + (uint32_t)slot * G::KV_BYTES, 16, 1024);
        const uint64_t dv = sw128_desc(sV + (uint32_t)slot * G::KV_BYTES, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbq = (uint64_t)((kk / 4) * 8 * BM), cbk = (uint64_t)((kk / 4) * 8 * BN), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(s, dq_km + cbq + ko, dk + cbk + ko, kk > 0);
        }
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbq = (uint64_t)((kk / 4) * 8 * BM), cbk = (uint64_t)((kk / 4) * 8 * BN), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(dp, ddo_km + cbq + ko, dv + cbk + ko, kk > 0);
        }
        wgmma_commit();
    };
    auto issue_dq = [&](int slot) {
        const uint64_t dk = sw128_desc(sK + (uint32_t)slot * G::KV_BYTES, BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KN; kk++) wgmma_rs<T, D>(acc, dsa[kk], dk + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    };
    /* dS of tile t (keys from n0) into s, in place */
    auto elementwise = [&](int n0) {
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = fast_exp2(fmaf(s[j][r * 2 + e], p.scale_log2, -l2[r]));
                    if (need_mask && !visible(p, m0 + wrow0 + g + r * 8, n0 + j * 8 + t4 * 2 + e)) x = 0.f;
                    s[j][r * 2 + e] = x * (dp[j][r * 2 + e] - dl[r]);
                }
    };
    auto ds_to_a = [&]() {
#pragma unroll
        for (int kk = 0; kk < KN; kk++) acc_to_a<T>(s[2 * kk], s[2 * kk + 1], dsa[kk]);
    };

    if (n_tiles > 0) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n_tiles > 1) {
            kc.template load<BN>(sK + G::KV_BYTES);
            vc.template load<BN>(sV + G::KV_BYTES);
        }
        cp_async_commit();
        issue_s_dp(0);
        wgmma_wait<0>();
        wgmma_reg_fence(s);
        wgmma_reg_fence(dp);
        elementwise(n_begin);
        ds_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (t + 1 < n_tiles) {
            const uint32_t slot = (uint32_t)((t + 1) % ST);
            kc.template load<BN>(sK + slot * G::KV_BYTES);
            vc.template load<BN>(sV + slot * G::KV_BYTES);
        }
        cp_async_commit();
        issue_s_dp(t % ST);
        issue_dq((t - 1) % ST);
        wgmma_wait<1>(); /* S, dP of tile t done; dQ of tile t-1 may still run */
        wgmma_reg_fence(s);
        wgmma_reg_fence(dp);
        elementwise(n_begin + t * BN);
        wgmma_wait<0>();
        wgmma_reg_fence(acc);
        ds_to_a();
    }
    if (n_tiles > 0) {
        issue_dq((n_tiles - 1) % ST);
        wgmma_wait<0>();
        wgmma_reg_fence(acc);
    }
    cp_async_wait<0>();

    T *dqg = head_base<T>(p.dq, p.dq_s, b, h);
    store_acc_rows<T, ND>(dqg, p.dq_s[2], acc, m0 + wrow0, p.Lq, p.d, p.scale, g, t4);
#else
    (void)p;
    __trap();
#endif
}

} /* namespace fwbt */
#endif
