/* cuda-flash backward on Hopper: the dK/dV kernel with wgmma (sm_90a; the QS < 0 variants of
 * bwd_tc_d<D>.cu). Included by bwd_tc.cuh, whose algorithm and notation it keeps (keys as rows).
 *
 * Block: 2 warpgroups, BN = 128 keys (warpgroup c owns keys 64c..64c+63), query tiles of BM = 64 or 128 rows
 * streamed through a 2-stage cp.async ring (Q, dO in the 128-byte-swizzled layout of parts/swizzle.cuh,
 * lse2 and Δ as in the mma.sync kernels). Per step and warpgroup:
 *     Sᵀ  = K_c Qᵀ,  dPᵀ = V_c dOᵀ          wgmma, A and B from shared memory (K-major)
 *     Pᵀ, dSᵀ in registers (per query column: lse2, Δ)
 *     dV += Pᵀ dO,   dK += dSᵀ Q             wgmma, A from registers, B N-major (transposed descriptor)
 *     atomic mode: dSᵀ to shared memory, dQ_i += scale · dS K_c (A = dS M-major, B = K N-major, both
 *     from shared memory), added into the f32 accumulator with float2 atomics: each warpgroup adds the
 *     part from its own 64 keys, so the warpgroups never wait for each other.
 * dK, dV stay in registers (f32) for the whole block and are written once. The OVL variants
 * (deterministic, 3 stages) issue step it's Sᵀ/dPᵀ with step it-1's dV/dK and do step it's element-wise
 * work while those finish. dkdv_ws_kernel runs that schedule with a TMA producer warpgroup instead of
 * cp.async by every thread (no block-wide barrier per step). dkdv_rows holds what both kernels compute.
 * dq_wg_kernel and dq_ws_kernel (below) are the deterministic mode's dQ pass on wgmma (dq_rows). */
#ifndef FW_BWD_WG_CUH
#define FW_BWD_WG_CUH

#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/swizzle.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"
#include "backends/cuda/parts/wgmma.cuh"

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

/* One warpgroup's 64 keys of a dK/dV block (wgc = 0, 1: keys 64 wgc..) in both dK/dV kernels: the dK, dV
 * accumulators for the whole block, the step's Sᵀ, dPᵀ accumulators and Pᵀ, dSᵀ as A fragments. */
template <typename T, int D, int BM, bool ATOMIC> struct dkdv_rows {
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
    __device__ __forceinline__ void elementwise(const params &p, int m0, int n0, const float *lse2_s,
                                                const float *delta_s, unsigned char *dS_t)
    {
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
                if (ATOMIC) { /* dSᵀ row kl (within the warpgroup: kl - 64 wgc) */
                    const int kr = kl - wgc * 64;
                    *reinterpret_cast<uint32_t *>(dS_t + (j / 8) * 64 * 128 + kr * 128 + (((j % 8) ^ (kr & 7)) << 4) + t4 * 4) =
                        pack2<T>::make(dp[j][r * 2], dp[j][r * 2 + 1]);
                }
            }
        }
    }
    /* the A operands of dV and dK, only once the products that read the previous ones retired */
    __device__ __forceinline__ void to_a()
    {
        acc_tiles_to_a<T, KQ>(s, pa, dp, dsa);
    }
    /* dV += Pᵀ dO, dK += dSᵀ Q (B N-major: column blocks BM x 128 bytes apart), issued and committed */
    __device__ __forceinline__ void issue_dvdk(uint32_t sQ, uint32_t sdO)
    {
        using namespace fwparts;
        const uint64_t ddo_nm = sw128_desc(sdO, BM * 128, 1024), dq_nm = sw128_desc(sQ, BM * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) wgmma_rs<T, D>(dv, pa[kk], ddo_nm + (uint64_t)(kk * 16 * 128 / 16), 1);
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) wgmma_rs<T, D>(dk, dsa[kk], dq_nm + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    }
    __device__ __forceinline__ void store(const params &p, int n0, int b, int hk)
    {
        T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
        T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
        store_acc_rows<T, ND>(dkg, p.dk_s[2], dk, n0 + krow0, p.Lk, p.d, p.scale, g, t4);
        store_acc_rows<T, ND>(dvg, p.dv_s[2], dv, n0 + krow0, p.Lk, p.d, 1.f, g, t4);
    }
};

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
        issue_sdp(0);
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        elementwise(0);
        w.to_a();
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

/* OVL (deterministic only, 3 stages): dkdv_overlapped's schedule (the forward's overlap). */
template <typename T, int D, int BM_, bool ATOMIC, int ST_ = 2, bool OVL = false>
__global__ void __launch_bounds__(256, 1) dkdv_wg_kernel(const params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dkdv_wg_geom<D, BM_, ATOMIC, ST_>;
    static_assert(!OVL || (!ATOMIC && ST_ == 3), "the overlapped schedule is deterministic, 3 stages");
    constexpr int NT = 256, BN = G::BN, BM = G::BM;
    constexpr int ND = D / 8, KK = 64 / 16;
    using namespace fwparts;

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

    dkdv_rows<T, D, BM, ATOMIC> w;
    w.init(sK, sV, wgc, warp & 3, lane);
    /* N-major descriptor of this warpgroup's 64 key rows for dQ; its dSᵀ */
    const uint32_t kw = sK + (uint32_t)(wgc * 64 * 128);
    const uint64_t dK_nm = sw128_desc(kw, BN * 128, 1024);
    const uint32_t dsw = sdS + (uint32_t)(wgc * 64 * BM * 2);
    unsigned char *dS_t = smem_raw + (dsw - raw);
    auto stage_q = [&](int it) { return sStage + (uint32_t)(2 * (it % G::ST)) * G::QD_BYTES; };
    auto issue_sdp = [&](int it) { w.issue_sdp(stage_q(it), stage_q(it) + G::QD_BYTES); };
    auto issue_dvdk = [&](int it) { w.issue_dvdk(stage_q(it), stage_q(it) + G::QD_BYTES); };
    auto elementwise = [&](int it) {
        const float *lse2_s = stat_f + (it % G::ST) * (G::STAT_BYTES / 4);
        w.elementwise(p, kb.row0(it), n0, lse2_s, lse2_s + BM, dS_t);
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
        dkdv_overlapped(w, total, next_stage, [](int) {}, issue_sdp, issue_dvdk, elementwise);
    } else {
#pragma unroll 1
        for (int it = 0; it < total; it++) {
            next_stage(it);
            issue_sdp(it);
            wgmma_wait<0>();
            wgmma_reg_fence(w.s);
            wgmma_reg_fence(w.dp);
            elementwise(it);
            w.to_a();
            if (ATOMIC) {
                fence_proxy_async(); /* dSᵀ, written by this warpgroup's threads, is read by its wgmma */
                named_sync(1 + wgc, 128);
            }
            issue_dvdk(it);
            if (ATOMIC) {
                /* dQ_i (BM x D) += dS_c K_c: A = dS from dSᵀ (M-major), B = K_c (N-major). At D = 128 the
                 * P·dO and dS·Q products retire first: their A registers plus dQ's accumulators would spill. */
                const int h = kb.head(p, it), m0 = kb.row0(it);
                if constexpr (D > 64) {
                    wgmma_wait<0>();
                    wgmma_reg_fence(w.dk);
                    wgmma_reg_fence(w.dv);
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
                    wgmma_reg_fence(w.dk);
                    wgmma_reg_fence(w.dv);
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
                wgmma_reg_fence(w.dk);
                wgmma_reg_fence(w.dv);
            }
        }
    }
    cp_async_wait<0>();

    w.store(p, n0, b, hk);
#else
    (void)p;
    __trap(); /* sm_90a only: bwd_launch.cu picks it on compute capability 9.0 only */
#endif
}


/* The warp-specialised dK/dV kernel (QS = -4; deterministic mode only): the overlapped schedule of
 * dkdv_wg_kernel, with a third, producer warpgroup that loads with the tensor memory accelerator:
 * K and V of the block once, then per step Q and dO (128-byte-swizzled boxes, rows past Lq zero) and the
 * step's lse2 and Δ (f32 boxes of BM, zero past Lq: as the cp.async zero-fill) into a ring of ST stages,
 * completing on the stage's "full" mbarrier. The consumers release a stage on its "empty" mbarrier once
 * the step's dV/dK products have retired, so the two consumer warpgroups are never held in step with
 * each other (no block-wide barrier per step). */
struct dkdv_tma_maps {
    CUtensorMap q, dout, k, v, lse2, delta;
    int swap_q, swap_do, swap_k, swap_v;
};

template <int D, int BM_, int ST_> struct dkdv_ws_geom {
    static constexpr int BN = 128, BM = BM_, ST = ST_;
    static constexpr uint32_t KV_BYTES = BN * D * 2, QD_BYTES = BM * D * 2, STAT_BYTES = 2 * BM * 4;
    /* K, V; per stage Q, dO; per stage lse2, Δ; the mbarriers */
    static constexpr size_t SMEM = 1024 + 2 * (size_t)KV_BYTES + 2 * ST * (size_t)QD_BYTES + ST * (size_t)STAT_BYTES + 256;
};

template <typename T, int D, int BM_, int ST_>
__global__ void __launch_bounds__(384, 1) dkdv_ws_kernel(const params p, const __grid_constant__ dkdv_tma_maps m)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dkdv_ws_geom<D, BM_, ST_>;
    constexpr int NT = 256, BN = G::BN, BM = G::BM, ST = G::ST, CB = D / 64;
    static_assert(D % 64 == 0 && BM % 64 == 0 && ST >= 2, "wgmma tile shapes");
    using namespace fwparts;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base, sV = sK + G::KV_BYTES;
    const uint32_t sStage = sV + G::KV_BYTES; /* stage s: Q at +2s·QD, dO at +(2s+1)·QD */
    const uint32_t sStat = sStage + 2 * ST * G::QD_BYTES; /* stage s: lse2 at +s·STAT, Δ at +s·STAT + BM·4 */
    const mbar_ring<ST, 1, 1> ring{sStat + ST * G::STAT_BYTES}; /* resident: K and V; a load a stage: Q, dO, lse2, Δ */
    auto stage_q = [&](int it) { return sStage + (uint32_t)(2 * (it % ST)) * G::QD_BYTES; };
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + (sStat - raw));

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    kv_block<T, D, NT, BN, BM> kb;
    kb.range(p);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;

    if (tid == 0) ring.init(256);
    __syncthreads();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(ring.resident(), 2 * G::KV_BYTES);
#pragma unroll
            for (int cb = 0; cb < CB; cb++) {
                tma_load(sK + (uint32_t)(cb * BN * 128), &m.k, m.swap_k, ring.resident(), cb * 64, n0, hk, b);
                tma_load(sV + (uint32_t)(cb * BN * 128), &m.v, m.swap_v, ring.resident(), cb * 64, n0, hk, b);
            }
            produce_ring(ring, total, [&](int it, int st) {
                const int h = kb.head(p, it), m0 = kb.row0(it);
                const uint32_t sq = stage_q(it), sdo = sq + G::QD_BYTES, sst = sStat + (uint32_t)st * G::STAT_BYTES;
                mbar_expect_tx(ring.full(0, st), 2 * G::QD_BYTES + G::STAT_BYTES);
#pragma unroll
                for (int cb = 0; cb < CB; cb++) {
                    tma_load(sq + (uint32_t)(cb * BM * 128), &m.q, m.swap_q, ring.full(0, st), cb * 64, m0, h, b);
                    tma_load(sdo + (uint32_t)(cb * BM * 128), &m.dout, m.swap_do, ring.full(0, st), cb * 64, m0, h, b);
                }
                const int bh = b * p.H + h;
                tma_load_rows(sst, &m.lse2, ring.full(0, st), m0, bh);
                tma_load_rows(sst + BM * 4, &m.delta, ring.full(0, st), m0, bh);
            });
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    dkdv_rows<T, D, BM, false> w;
    w.init(sK, sV, wg - 1, warp & 3, lane);
    auto issue_sdp = [&](int it) { w.issue_sdp(stage_q(it), stage_q(it) + G::QD_BYTES); };
    auto issue_dvdk = [&](int it) { w.issue_dvdk(stage_q(it), stage_q(it) + G::QD_BYTES); };
    auto elementwise = [&](int it) {
        const float *lse2_s = stat_f + (it % ST) * (G::STAT_BYTES / 4);
        w.elementwise(p, kb.row0(it), n0, lse2_s, lse2_s + BM, nullptr);
    };
    auto wait_full = [&](int it) { ring.wait_full(0, it); };

    mbar_wait(ring.resident(), 0);
    dkdv_overlapped(w, total, wait_full, [&](int it) { ring.release(it); /* step it's stage is read */ },
                    issue_sdp, issue_dvdk, elementwise);

    w.store(p, n0, b, hk);
#else
    (void)p;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

/* Host: the warp-specialised dK/dV kernel; 0 returned in *ok where the driver refuses a tensor map (the
 * caller then runs dkdv_wg_kernel). */
template <typename T, int D, int BM, int ST>
static cudaError_t dkdv_ws_launch(const params &p, const dim3 &grid, cudaStream_t s, int *ok)
{
    using G = dkdv_ws_geom<D, BM, ST>;
    const int Hk = p.H / p.group;
    dkdv_tma_maps m;
    memset(&m, 0, sizeof m);
    *ok = fwparts::tma_make<T>(&m.q, &m.swap_q, p.q, p.d, p.Lq, p.H, p.B, p.q_s[2], p.q_s[1], p.q_s[0], BM) &&
          fwparts::tma_make<T>(&m.dout, &m.swap_do, p.dout, p.d, p.Lq, p.H, p.B, p.do_s[2], p.do_s[1], p.do_s[0], BM) &&
          fwparts::tma_make<T>(&m.k, &m.swap_k, p.k, p.d, p.Lk, Hk, p.B, p.k_s[2], p.k_s[1], p.k_s[0], G::BN) &&
          fwparts::tma_make<T>(&m.v, &m.swap_v, p.v, p.d, p.Lk, Hk, p.B, p.v_s[2], p.v_s[1], p.v_s[0], G::BN) &&
          fwparts::tma_make_rows_f32(&m.lse2, p.lse2, p.Lq, (long long)p.B * p.H, BM) &&
          fwparts::tma_make_rows_f32(&m.delta, p.delta, p.Lq, (long long)p.B * p.H, BM);
    if (!*ok) return cudaSuccess;
    cudaError_t e = fw_cuda_smem_limit<dkdv_ws_kernel<T, D, BM, ST>>(G::SMEM);
    if (e != cudaSuccess) return e;
    dkdv_ws_kernel<T, D, BM, ST><<<grid, 384, G::SMEM, s>>>(p, m);
    return cudaGetLastError();
}

/* Deterministic dQ on Hopper (the WQ < 0 variants): grid (⌈Lq/128⌉, H, B), 2 consumer warpgroups of 64
 * query rows; Q and dO stay in shared memory, K and V tiles of BN keys cycle through ST stages.
 * Per key tile t and warpgroup (the forward's overlap: dQ(t-1) runs under tile t's element-wise work):
 *     S = Q Kᵀ, dP = dO Vᵀ        wgmma, both operands K-major in shared memory
 *     P = exp2(scale·log2e·S − lse2), dS = P ∘ (dP − Δ)   (per row: 2 rows per thread)
 *     dQ += dS K                  wgmma, A = dS from registers, B = K N-major
 * No atomics: each dQ row is summed by one thread in a fixed order.
 * dq_wg_kernel (WQ = -1): the 2 warpgroups also load, with cp.async, one tile ahead.
 * dq_ws_kernel (WQ = -2): a third, producer warpgroup loads with the tensor memory accelerator on
 * mbarriers (the forward's flash_ws_kernel): Q and dO once, then K and V of every tile as soon as their
 * stage is free; the consumers only compute. */
template <int D, int BN_, int ST_ = 3> struct dq_wg_geom {
    static constexpr int BM = 128, BN = BN_, ST = ST_;
    static constexpr uint32_t QD_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr size_t SMEM = 1024 + 2 * (size_t)QD_BYTES + 2 * ST * (size_t)KV_BYTES;
};

/* One consumer warpgroup's 64 query rows of a dQ block (wgc = 0, 1: rows 64 wgc..): its rows' lse2 and
 * Δ in registers, the S and dP accumulators, dS as A fragments, the dQ accumulator. */
template <typename T, int D, int BN, int BM> struct dq_rows {
    static constexpr int KD = D / 16, ND = D / 8, NS = BN / 8, KN = BN / 16;
    float acc[ND][4], s[NS][4], dp[NS][4], l2[2], dl[2];
    uint32_t dsa[KN][4];
    uint64_t dq_km, ddo_km;
    int wrow0, g, t4;

    __device__ __forceinline__ void init(const params &p, uint32_t sQ, uint32_t sdO, int wgc, int warp_in_wg, int lane,
                                         int m0, int b, int h)
    {
        g = lane >> 2;
        t4 = lane & 3;
        wrow0 = wgc * 64 + warp_in_wg * 16;
        const long long r0 = ((long long)b * p.H + h) * p.Lq;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = m0 + wrow0 + g + r * 8;
            l2[r] = i < p.Lq ? p.lse2[r0 + i] : 0.f;
            dl[r] = i < p.Lq ? p.delta[r0 + i] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
        dq_km = fwparts::sw128_desc(sQ + (uint32_t)(wgc * 64 * 128), 16, 1024);
        ddo_km = fwparts::sw128_desc(sdO + (uint32_t)(wgc * 64 * 128), 16, 1024);
    }
    /* S = Q Kᵀ, dP = dO Vᵀ of the tile at sk, sv, issued and committed */
    __device__ __forceinline__ void issue_s_dp(uint32_t sk, uint32_t sv)
    {
        using namespace fwparts;
        const uint64_t dk = sw128_desc(sk, 16, 1024), dv = sw128_desc(sv, 16, 1024);
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
    }
    /* dQ += dS K with the tile's K at sk (N-major), issued and committed */
    __device__ __forceinline__ void issue_dq(uint32_t sk)
    {
        using namespace fwparts;
        const uint64_t dk = sw128_desc(sk, BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KN; kk++) wgmma_rs<T, D>(acc, dsa[kk], dk + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    }
    /* dS of the tile with keys from n0 into s, in place */
    __device__ __forceinline__ void elementwise(const params &p, int m0, int n0)
    {
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
    }
    __device__ __forceinline__ void ds_to_a() { acc_tiles_to_a<T, KN>(s, dsa); }
    __device__ __forceinline__ void store(const params &p, int m0, int b, int h)
    {
        T *dqg = head_base<T>(p.dq, p.dq_s, b, h);
        store_acc_rows<T, ND>(dqg, p.dq_s[2], acc, m0 + wrow0, p.Lq, p.d, p.scale, g, t4);
    }
};

template <typename T, int D, int BN_>
__global__ void __launch_bounds__(256, 1) dq_wg_kernel(const params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dq_wg_geom<D, BN_>;
    constexpr int NT = 256, BM = G::BM, BN = G::BN, ST = G::ST;
    using namespace fwparts;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sdO = sQ + G::QD_BYTES, sK = sdO + G::QD_BYTES, sV = sK + ST * G::KV_BYTES;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const q_block blk = q_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

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

    dq_rows<T, D, BN, BM> w;
    w.init(p, sQ, sdO, warp >> 2, warp & 3, lane, m0, b, h);
    auto k_at = [&](int slot) { return sK + (uint32_t)slot * G::KV_BYTES; };
    auto v_at = [&](int slot) { return sV + (uint32_t)slot * G::KV_BYTES; };

    if (n_tiles > 0) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n_tiles > 1) {
            kc.template load<BN>(sK + G::KV_BYTES);
            vc.template load<BN>(sV + G::KV_BYTES);
        }
        cp_async_commit();
        w.issue_s_dp(k_at(0), v_at(0));
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin);
        w.ds_to_a();
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
        w.issue_s_dp(k_at(t % ST), v_at(t % ST));
        w.issue_dq(k_at((t - 1) % ST));
        wgmma_wait<1>(); /* S, dP of tile t done; dQ of tile t-1 may still run */
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin + t * BN);
        wgmma_wait<0>();
        wgmma_reg_fence(w.acc);
        w.ds_to_a();
    }
    if (n_tiles > 0) {
        w.issue_dq(k_at((n_tiles - 1) % ST));
        wgmma_wait<0>();
        wgmma_reg_fence(w.acc);
    }
    cp_async_wait<0>();
    w.store(p, m0, b, h);
#else
    (void)p;
    __trap();
#endif
}

/* Tensor maps of the dQ pass's operands (fwparts::tma_make: box 64 columns x BM or BN rows). */
struct dq_tma_maps {
    CUtensorMap q, dout, k, v;
    int swap_q, swap_do, swap_k, swap_v;
};

template <typename T, int D, int BN_, int ST_>
__global__ void __launch_bounds__(384, 1) dq_ws_kernel(const params p, const __grid_constant__ dq_tma_maps m)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dq_wg_geom<D, BN_, ST_>;
    constexpr int BM = G::BM, BN = G::BN, ST = G::ST, CB = D / 64;
    static_assert(D % 64 == 0 && BN % 64 == 0 && ST >= 2, "wgmma tile shapes");
    using namespace fwparts;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sdO = sQ + G::QD_BYTES, sK = sdO + G::QD_BYTES, sV = sK + ST * G::KV_BYTES;
    const mbar_ring<ST> ring{sV + ST * G::KV_BYTES}; /* resident: Q and dO; loads 0, 1: K, V */
    auto k_at = [&](int st) { return sK + (uint32_t)st * G::KV_BYTES; };
    auto v_at = [&](int st) { return sV + (uint32_t)st * G::KV_BYTES; };

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const q_block blk = q_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    if (tid == 0) ring.init(256);
    __syncthreads();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(ring.resident(), 2 * G::QD_BYTES);
#pragma unroll
            for (int cb = 0; cb < CB; cb++) {
                tma_load(sQ + (uint32_t)(cb * BM * 128), &m.q, m.swap_q, ring.resident(), cb * 64, m0, h, b);
                tma_load(sdO + (uint32_t)(cb * BM * 128), &m.dout, m.swap_do, ring.resident(), cb * 64, m0, h, b);
            }
            produce_ring(ring, n_tiles, [&](int t, int st) {
                const int n0 = n_begin + t * BN;
                mbar_expect_tx(ring.full(0, st), G::KV_BYTES);
                tma_load_tile<CB, BN>(k_at(st), &m.k, m.swap_k, ring.full(0, st), n0, hk, b);
                mbar_expect_tx(ring.full(1, st), G::KV_BYTES);
                tma_load_tile<CB, BN>(v_at(st), &m.v, m.swap_v, ring.full(1, st), n0, hk, b);
            });
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    dq_rows<T, D, BN, BM> w;
    w.init(p, sQ, sdO, wg - 1, warp & 3, lane, m0, b, h);
    mbar_wait(ring.resident(), 0);
    if (n_tiles > 0) {
        ring.wait_full(0, 0);
        ring.wait_full(1, 0);
        w.issue_s_dp(k_at(0), v_at(0));
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin);
        w.ds_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        const int st = t % ST, pst = (t - 1) % ST;
        ring.wait_full(0, t);
        ring.wait_full(1, t);
        w.issue_s_dp(k_at(st), v_at(st));
        w.issue_dq(k_at(pst));
        wgmma_wait<1>(); /* S, dP of tile t done; dQ of tile t-1 may still run */
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin + t * BN);
        wgmma_wait<0>();
        wgmma_reg_fence(w.acc);
        ring.release(t - 1); /* K(t-1) and V(t-1) are read */
        w.ds_to_a();
    }
    if (n_tiles > 0) {
        w.issue_dq(k_at((n_tiles - 1) % ST));
        wgmma_wait<0>();
        wgmma_reg_fence(w.acc);
    }
    w.store(p, m0, b, h);
#else
    (void)p;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

/* Host: the dQ pass with the producer warpgroup; falls back to dq_wg_kernel where the driver refuses a
 * tensor map. */
template <typename T, int D, int BN, int ST>
static cudaError_t dq_ws_launch(const params &p, cudaStream_t s)
{
    using G = dq_wg_geom<D, BN, ST>;
    const int Hk = p.H / p.group;
    dq_tma_maps m;
    memset(&m, 0, sizeof m);
    const dim3 grid((unsigned)((p.Lq + G::BM - 1) / G::BM), (unsigned)p.H, (unsigned)p.B);
    if (!fwparts::tma_make<T>(&m.q, &m.swap_q, p.q, p.d, p.Lq, p.H, p.B, p.q_s[2], p.q_s[1], p.q_s[0], G::BM) ||
        !fwparts::tma_make<T>(&m.dout, &m.swap_do, p.dout, p.d, p.Lq, p.H, p.B, p.do_s[2], p.do_s[1], p.do_s[0], G::BM) ||
        !fwparts::tma_make<T>(&m.k, &m.swap_k, p.k, p.d, p.Lk, Hk, p.B, p.k_s[2], p.k_s[1], p.k_s[0], BN) ||
        !fwparts::tma_make<T>(&m.v, &m.swap_v, p.v, p.d, p.Lk, Hk, p.B, p.v_s[2], p.v_s[1], p.v_s[0], BN)) {
        using GW = dq_wg_geom<D, BN>;
        cudaError_t e = fw_cuda_smem_limit<dq_wg_kernel<T, D, BN>>(GW::SMEM);
        if (e != cudaSuccess) return e;
        dq_wg_kernel<T, D, BN><<<grid, 256, GW::SMEM, s>>>(p);
        return cudaGetLastError();
    }
    const size_t smem = G::SMEM + 256; /* + the mbarriers */
    cudaError_t e = fw_cuda_smem_limit<dq_ws_kernel<T, D, BN, ST>>(smem);
    if (e != cudaSuccess) return e;
    dq_ws_kernel<T, D, BN, ST><<<grid, 384, smem, s>>>(p, m);
    return cudaGetLastError();
}

} /* namespace fwbt */
#endif
