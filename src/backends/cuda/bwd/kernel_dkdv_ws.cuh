/* The warp-specialised Hopper dK/dV kernel (sm_90a) and its launch: a producer warpgroup loads with the tensor
 * memory accelerator (pipeline.cuh) K and V of the block once, then per step Q and dO (128-byte-swizzled boxes, rows
 * past Lq zero) and the step's lse2 and Δ (f32 boxes of BM, zero past Lq: as the cp.async zero-fill) into a ring of
 * stages, completing on the stage's "full" mbarrier; the two consumer warpgroups release a stage on its "empty"
 * mbarrier once the step's products that read it have retired.
 *
 * Deterministic mode: the consumers run dkdv_wg_kernel's overlapped schedule (consumer_dkdv_wg.cuh), never held in
 * step with each other (no block-wide barrier per step). FUSED (the atomic mode of kernels.tsv's fuse records):
 * FlashAttention-3's step with all five products, dQ's part of each step added into an f32 accumulator by a bulk
 * reduction, in two stages; the consumers meet once a step, when dQ reads both warpgroups' dSᵀ.
 *
 * VARLEN: a ragged batch (kernel_common.cuh: ragged_block). The maps cover the packed (total, H, D) tensors and the
 * boxes start at the block's sequence's rows. lse2 and Δ of a sequence start at any float, which a TMA box cannot,
 * so a second producer warp copies them (zero past the sequence) and arrives on a second "full" barrier (FUSED too,
 * so that it takes any Lq: a row map of lse2 needs Lq a multiple of 4). The last query tile of a head brings the
 * next sequence's Q and dO rows: the consumers zero them (zero_tile_rows) before any product reads them, so that
 * those rows add nothing, as the dense kernel's zero-filled rows past Lq. Key rows past the sequence only reach dK,
 * dV rows that are never stored, except in FUSED, whose dQ sums over the block's keys: there they are zeroed too. */
#ifndef FW_BWD_KERNEL_DKDV_WS_CUH
#define FW_BWD_KERNEL_DKDV_WS_CUH

#include <string.h>
#include "backends/cuda/bwd/kernel_dkdv_wg.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"

namespace fwbwd {

/* Tensor maps of the dK/dV pass's operands (tensor_maps.cuh: box 64 columns x BM or BN rows; lse2 and Δ rows). */
struct dkdv_tma_maps {
    CUtensorMap q, dout, k, v, lse2, delta;
    int swap_q, swap_do, swap_k, swap_v;
};

/* Shared memory of configuration C (D, BM, STAGES); FUSED: two stages, then two buffers of both warpgroups' dSᵀ
 * (64 keys x BM queries each, 128-byte swizzle) and each warpgroup's 64 x 64 f32 part of dQ in the accumulator's
 * tile order (params.h: dq_acc_tile), the source of its bulk reduction. */
template <class C, bool FUSED = false> struct dkdv_ws_geom {
    static constexpr int D = C::D, BN = 128, BM = C::BM, ST = FUSED ? 2 : C::STAGES;
    static constexpr uint32_t KV_BYTES = BN * D * 2, QD_BYTES = BM * D * 2, STAT_BYTES = 2 * BM * 4;
    static constexpr uint32_t STAT_AREA = FUSED ? ((ST * STAT_BYTES + 1023) & ~1023u) : ST * STAT_BYTES;
    static constexpr uint32_t DS_BYTES = FUSED ? 2 * (2 * 64 * BM * 2) : 0, DQ_BYTES = FUSED ? 2 * 64 * 64 * 4 : 0;
    /* K, V; per stage Q, dO; per stage lse2, Δ; FUSED: dSᵀ, dQ; the mbarriers */
    static constexpr size_t SMEM =
        1024 + 2 * (size_t)KV_BYTES + 2 * ST * (size_t)QD_BYTES + STAT_AREA + DS_BYTES + DQ_BYTES + 256;
};

template <typename T, class C, bool VARLEN = false, bool FUSED = false>
__global__ void __launch_bounds__(384, 1) dkdv_ws_kernel(const fw_bwd_tc_params args, const __grid_constant__ dkdv_tma_maps m)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dkdv_ws_geom<C, FUSED>;
    constexpr int D = C::D, BN = G::BN, BM = G::BM, ST = G::ST, CB = D / 64;
    static_assert(D % 64 == 0 && BM % 64 == 0 && ST >= 2, "wgmma tile shapes");
    using namespace fwparts;
    /* lse2 and Δ copied by the second producer warp (load 1; the header says why) */
    constexpr bool STATS_BY_WARP = VARLEN || FUSED;
    typedef mbar_ring<ST, STATS_BY_WARP ? 2 : 1, 1> Ring;
    static_assert(Ring::BYTES <= 256, "the mbarriers' room");

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sK = base, sV = sK + G::KV_BYTES;
    const uint32_t sStage = sV + G::KV_BYTES; /* stage s: Q at +2s·QD, dO at +(2s+1)·QD */
    const uint32_t sStat = sStage + 2 * ST * G::QD_BYTES; /* stage s: lse2 at +s·STAT, Δ at +s·STAT + BM·4 */
    const uint32_t sdS = sStat + G::STAT_AREA, sDQ = sdS + G::DS_BYTES; /* FUSED */
    const Ring ring{sDQ + G::DQ_BYTES}; /* resident: K and V; a load a stage: Q, dO, lse2, Δ */
    auto stage_q = [&](int it) { return sStage + (uint32_t)(2 * (it % ST)) * G::QD_BYTES; };
    float *stat_f = reinterpret_cast<float *>(smem_raw + (sStat - raw));

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    tile_coord tile;
    seq_span rows{}; /* VARLEN: its first rows in the packed tensors */
    if constexpr (VARLEN) {
        if (!ragged_block<T, BN, true>(args, false, seq, tile, &rows)) return;
        if constexpr (FUSED) /* its own tiles (params.h), not seq_problem's rows */
            seq.dq_acc = args.dq_acc + dq_acc_seq_tiles(rows.q_row0, rows.seq, args.H, (args.d + 63) / 64);
    }
    const fw_bwd_tc_params &p = VARLEN ? seq : args;
    const int q_row0 = (int)rows.q_row0, k_row0 = (int)rows.k_row0; /* < 2^31: the maps' extents */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    key_block<BN, BM> kb;
    if constexpr (VARLEN) kb.init_at(p, tile.m_block, tile.h, tile.b);
    else kb.init(p);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;

    if (tid == 0) {
        ring.template init<!STATS_BY_WARP>(256);
        if constexpr (STATS_BY_WARP) { /* the statistics' barriers complete on the copying warp's 32 arrivals */
            for (int st = 0; st < ST; st++) mbar_init(ring.full(1, st), 32);
            mbar_init_fence();
        }
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        producer_registers<24>();
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(ring.resident(), 2 * G::KV_BYTES);
#pragma unroll
            for (int cb = 0; cb < CB; cb++) {
                tma_load(sK + (uint32_t)(cb * BN * 128), &m.k, m.swap_k, ring.resident(), cb * 64, k_row0 + n0, hk, b);
                tma_load(sV + (uint32_t)(cb * BN * 128), &m.v, m.swap_v, ring.resident(), cb * 64, k_row0 + n0, hk, b);
            }
            produce_ring(ring, total, [&](int it, int st) {
                const int h = kb.head(p, it), m0 = kb.row0(it);
                const uint32_t sq = stage_q(it), sdo = sq + G::QD_BYTES, sst = sStat + (uint32_t)st * G::STAT_BYTES;
                mbar_expect_tx(ring.full(0, st), 2 * G::QD_BYTES + (STATS_BY_WARP ? 0 : G::STAT_BYTES));
#pragma unroll
                for (int cb = 0; cb < CB; cb++) {
                    tma_load(sq + (uint32_t)(cb * BM * 128), &m.q, m.swap_q, ring.full(0, st), cb * 64, q_row0 + m0, h, b);
                    tma_load(sdo + (uint32_t)(cb * BM * 128), &m.dout, m.swap_do, ring.full(0, st), cb * 64, q_row0 + m0, h, b);
                }
                if constexpr (!STATS_BY_WARP) {
                    const int bh = b * p.H + h;
                    tma_load_rows(sst, &m.lse2, ring.full(0, st), m0, bh);
                    tma_load_rows(sst + BM * 4, &m.delta, ring.full(0, st), m0, bh);
                }
            });
        } else if (STATS_BY_WARP && warp == 1) { /* lse2 and Δ of each step, zero past the sequence */
            produce_ring(ring, total, [&](int it, int st) {
                const int h = kb.head(p, it), m0 = kb.row0(it);
                const long long r0 = ((long long)b * p.H + h) * p.Lq;
                float *l2 = stat_f + st * (G::STAT_BYTES / 4);
#pragma unroll
                for (int i = lane; i < BM; i += 32) {
                    const bool in = m0 + i < p.Lq;
                    l2[i] = in ? p.lse2[r0 + m0 + i] : 0.f;
                    l2[BM + i] = in ? p.delta[r0 + m0 + i] : 0.f;
                }
                mbar_arrive(ring.full(1, st));
            });
        }
        return;
    }

    consumer_registers<240>();
    dkdv_rows<T, D, BM, FUSED ? dq_mode::atomic : dq_mode::deterministic> w;
    const int wgc = wg - 1;
    w.init(sK, sV, wgc, warp & 3, lane);
    auto issue_sdp = [&](int it) { w.issue_sdp(stage_q(it), stage_q(it) + G::QD_BYTES); };
    auto issue_dvdk = [&](int it) { w.issue_dvdk(stage_q(it), stage_q(it) + G::QD_BYTES); };
    auto elementwise = [&](int it) {
        const float *lse2_s = stat_f + (it % ST) * (G::STAT_BYTES / 4);
        unsigned char *dS_t = FUSED ? smem_raw + (sdS - raw) + ((it & 1) * 2 + wgc) * (64 * BM * 2) : nullptr;
        w.elementwise(p, kb.row0(it), n0, lse2_s, lse2_s + BM, dS_t);
    };
    auto wait_full = [&](int it) {
        ring.wait_full(0, it);
        if constexpr (STATS_BY_WARP) ring.wait_full(1, it);
        if constexpr (VARLEN) {
            const int r0 = p.Lq - kb.row0(it); /* the step's rows from r0 on are the next sequence's */
            if (r0 < BM) {
                zero_tile_rows<CB, BM, 256>(stage_q(it), r0, tid - 128);
                zero_tile_rows<CB, BM, 256>(stage_q(it) + G::QD_BYTES, r0, tid - 128);
                named_sync(1, 256); /* both consumers' zeros before either's products */
            }
        }
    };

    mbar_wait(ring.resident(), 0);
    if constexpr (VARLEN && FUSED) { /* dQ sums over the block's keys: the next sequence's K and V rows to zero */
        const int r0 = p.Lk - n0;
        if (r0 < BN) {
            zero_tile_rows<CB, BN, 256>(sK, r0, tid - 128);
            zero_tile_rows<CB, BN, 256>(sV, r0, tid - 128);
            named_sync(1, 256);
        }
    }
    if constexpr (FUSED) {
        static_assert((D == 128 && BM == 64) || (D == 64 && BM == 128), "the fused dQ's shapes");
        /* warpgroup c's dQ part, 64 x 64: at D = 128 every query of the step and columns 64c.., at D = 64 queries
         * 64c.. and every column */
        constexpr bool BY_COLUMNS = D == 128;
        const int qblk = BY_COLUMNS ? 0 : wgc, half = BY_COLUMNS ? wgc : 0;
        /* FlashAttention-3's step: Sᵀ, dPᵀ; Pᵀ, dSᵀ (dSᵀ also to shared memory); dV += Pᵀ dO; once both
         * warpgroups' dSᵀ are there, dQ = scale · dS K over all 128 keys (warpgroup c: its part, above),
         * dK += dSᵀ Q; dQ's part to shared memory once its product is done (dK's still running), added to the
         * f32 accumulator by a bulk reduction. No product of a step overlaps the next step's: the next step's
         * Sᵀ, dPᵀ issued behind dK spill (208 accumulator registers in flight). */
        float *dq_part = reinterpret_cast<float *>(smem_raw + (sDQ - raw)) + wgc * 64 * 64;
        const uint64_t db = sw128_desc(sK + (uint32_t)(half * BN * 128), BN * 128, 1024);
#pragma unroll 1
        for (int it = 0; it < total; it++) {
            wait_full(it);
            step_to_a(w, it, issue_sdp, elementwise);
            const uint32_t sq = stage_q(it), sdo = sq + G::QD_BYTES;
            w.issue_dv(sdo);
            fence_proxy_async(); /* this thread's dSᵀ stores, read by both warpgroups' wgmma */
            named_sync(2, 256);  /* both warpgroups' dSᵀ of step it are in shared memory */
            /* two dSᵀ buffers: a warpgroup writes step it + 1's while the other's dQ product may read step it's */
            float dq[8][4];
            /* A = dS of queries 64 qblk.. over the 128 keys: warpgroup w's dSᵀ holds keys 64w.., in blocks of 64
             * queries (8 KB each) */
            const uint64_t da =
                sw128_desc(sdS + (uint32_t)((it & 1) * 2 * 64 * BM * 2 + qblk * 64 * 128), 64 * 128, 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
                wgmma_ss_tt<T, 64>(dq, da + (uint64_t)(((kk / 4) * 64 * BM * 2 + (kk % 4) * 16 * 128) / 16),
                                   db + (uint64_t)(kk * 128), kk > 0);
            wgmma_commit();
            w.issue_dk(sq);
            wgmma_wait<1>(); /* dV's and dQ's products done, dK's may run */
            wgmma_reg_fence(dq);
            wgmma_reg_fence(w.dv);
            /* dQ's part in the accumulator's tiled layout (params.h: dq_acc_tile), so that the stores are
             * conflict-free and the warpgroup's whole 64 x 64 part is one 16-KB bulk reduction (a bulk reduction a
             * row cost 13% of the step) */
            const int h = kb.head(p, it), m0 = kb.row0(it), wt = tid & 127;
            if (wt == 0) bulk_wait_read(); /* the previous step's reduction has read the part */
            named_sync(3 + wgc, 128);
#pragma unroll
            for (int j = 0; j < 8; j++)
                *reinterpret_cast<float4 *>(dq_part + (j * 128 + wt) * 4) =
                    make_float4(dq[j][0] * p.scale, dq[j][1] * p.scale, dq[j][2] * p.scale, dq[j][3] * p.scale);
            fence_proxy_async(); /* the part, written by these threads, is read by the bulk reduction */
            named_sync(3 + wgc, 128);
            if (wt == 0 && m0 + 64 * qblk < p.Lq) { /* (a 128-row step's second half may lie past Lq: no tile) */
                const long long tile = dq_acc_tile((long long)b * p.H + h, m0 / 64 + qblk, half, p.Lq, (p.d + 63) / 64);
                bulk_reduce_add_f32(p.dq_acc + tile, sDQ + (uint32_t)(wgc * 64 * 64 * 4), 64 * 64 * 4);
            }
            wgmma_wait<0>();
            wgmma_reg_fence(w.dk);
            ring.release(it); /* step it's stage is read */
        }
        bulk_wait_all(); /* the last reduction has read its part before the block's shared memory goes */
    } else {
        dkdv_overlapped(w, total, wait_full, [&](int it) { ring.release(it); /* step it's stage is read */ },
                        issue_sdp, issue_dvdk, elementwise);
    }

    w.store(p, n0, b, hk);
#else
    (void)args;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

/* Host: the warp-specialised dK/dV kernel; 0 returned in *ok where the driver refuses a tensor map (the
 * caller then runs C::FALLBACK's dkdv_wg_kernel). VARLEN: p is the packed batch (its seqs), the maps the packed
 * tensors' (one batch entry of total rows). */
template <typename T, class C, bool VARLEN = false, bool FUSED = false>
static cudaError_t dkdv_ws_launch(const fw_bwd_tc_params &p, const dim3 &grid, cudaStream_t s, int *ok)
{
    using G = dkdv_ws_geom<C, FUSED>;
    constexpr int BM = G::BM;
    dkdv_tma_maps m;
    memset(&m, 0, sizeof m);
    *ok = make_operand_maps<T, VARLEN>(m, p, BM, G::BN) &&
          (VARLEN || FUSED || (fwparts::tma_make_rows_f32(&m.lse2, p.lse2, p.Lq, (long long)p.B * p.H, BM) &&
                      fwparts::tma_make_rows_f32(&m.delta, p.delta, p.Lq, (long long)p.B * p.H, BM)));
    if (!*ok) return cudaSuccess;
    cudaError_t e = fw_cuda_smem_limit<dkdv_ws_kernel<T, C, VARLEN, FUSED>>(G::SMEM);
    if (e != cudaSuccess) return e;
    dkdv_ws_kernel<T, C, VARLEN, FUSED><<<grid, 384, G::SMEM, s>>>(p, m);
    return fw_cuda_launch_error();
}

} /* namespace fwbwd */
#endif
