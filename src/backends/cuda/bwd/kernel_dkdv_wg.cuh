/* The Hopper dK/dV kernel with wgmma, every thread loading with cp.async (sm_90a), and the shared memory it takes.
 *
 * Block: 2 warpgroups (consumer_dkdv_wg.cuh), BN = 128 keys (key_block), query tiles of BM = 64 or 128 rows
 * streamed through a ring of STAGES cp.async stages (Q, dO in the 128-byte-swizzled layout of swizzle.cuh, lse2
 * and Δ as in the mma.sync kernels). Atomic mode: dSᵀ to shared memory, dQ_i += scale · dS K_c (A = dS M-major,
 * B = K N-major, both from shared memory), added into the f32 accumulator with float2 atomics (epilogue.cuh):
 * each warpgroup adds the part from its own 64 keys, so the warpgroups never wait for each other. OVERLAP
 * (deterministic, 3 stages): dkdv_overlapped's schedule.
 *
 * C: a configuration (kernel_common.cuh: kv_kernel::wg) with D, BM, STAGES, OVERLAP. VARLEN: a ragged batch
 * (kernel_common.cuh: ragged_block). */
#ifndef FW_BWD_KERNEL_DKDV_WG_CUH
#define FW_BWD_KERNEL_DKDV_WG_CUH

#include "backends/cuda/bwd/consumer_dkdv_wg.cuh"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/scheduler.cuh"

namespace fwbwd {

/* Shared memory of configuration C in mode DQ (1 KB of alignment slack, K, V, ST stages of Q, dO and of lse2, Δ,
 * and in the atomic mode each warpgroup's dSᵀ). */
template <class C, dq_mode DQ> struct dkdv_wg_geom {
    static constexpr int D = C::D, BN = 128, BM = C::BM, ST = C::STAGES;
    static constexpr bool ATOMIC = DQ == dq_mode::atomic;
    static constexpr uint32_t KV_BYTES = BN * D * 2;                /* K or V, swizzled */
    static constexpr uint32_t QD_BYTES = BM * D * 2;                /* Q or dO of one stage */
    static constexpr uint32_t STAT_BYTES = 2 * BM * 4;              /* lse2, Δ of one stage */
    static constexpr uint32_t DS_BYTES = ATOMIC ? 2 * 64 * BM * 2 : 0; /* dSᵀ of each warpgroup */
    static constexpr size_t SMEM =
        1024 + 2 * (size_t)KV_BYTES + 2 * ST * (size_t)QD_BYTES + ((ST * STAT_BYTES + 1023) & ~1023u) + DS_BYTES;
};

template <typename T, class C, dq_mode DQ, bool VARLEN = false>
__global__ void __launch_bounds__(256, 1) dkdv_wg_kernel(const fw_bwd_tc_params args)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dkdv_wg_geom<C, DQ>;
    constexpr bool ATOMIC = G::ATOMIC, OVL = C::OVERLAP;
    static_assert(!OVL || (!ATOMIC && G::ST == 3), "the overlapped schedule is deterministic, 3 stages");
    constexpr int D = C::D, NT = 256, BN = G::BN, BM = G::BM;
    constexpr int ND = D / 8, KK = 64 / 16;
    using namespace fwparts;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sK = base, sV = sK + G::KV_BYTES;
    const uint32_t sStage = sV + G::KV_BYTES; /* stage s: Q at +2s·QD, dO at +(2s+1)·QD */
    const uint32_t sStat = sStage + 2 * G::ST * G::QD_BYTES;
    /* warpgroup c's dSᵀ at +c·64·BM·2: BM/64 blocks of 64 keys x 64 queries (M-major for dQ's A) */
    const uint32_t sdS = sStat + ((G::ST * G::STAT_BYTES + 1023) & ~1023u);
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + (sStat - raw));

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    fwparts::tile_coord tile;
    if constexpr (VARLEN)
        if (!ragged_block<T, BN, true>(args, false, seq, tile)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wgc = warp >> 2, g = lane >> 2, t4 = lane & 3;

    key_block<BN, BM> kb;
    if constexpr (VARLEN) kb.init_at(p, tile.m_block, tile.h, tile.b);
    else kb.init(p);
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
        copy_f32_row<BM>(st, p.lse2 + r0, m0, p.Lq, tid);
        copy_f32_row<BM>(st + BM * 4, p.delta + r0, m0, p.Lq, (tid + BM) % NT);
    };
    if (total > 0) load_step(0, 0);
    cp_async_commit();

    dkdv_rows<T, D, BM, DQ> w;
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
            step_to_a(w, it, issue_sdp, elementwise);
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
                    atomic_add_dq_rows<ND>(p, accg, acc, m0 + mb * 64 + (warp & 3) * 16, 0, g, t4);
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
    (void)args;
    __trap(); /* sm_90a only: heuristics.cu picks it on compute capability 9.0 only */
#endif
}

} /* namespace fwbwd */
#endif
