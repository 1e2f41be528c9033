/* The deterministic mode's dQ kernel on Hopper with a TMA producer warpgroup (sm_90a) and its launch:
 * consumer_dq_wg.cuh's algorithm; warpgroup 0 produces (pipeline.cuh: Q and dO once, then K and V of every tile
 * into a ring of STAGES as soon as a stage is free), warpgroups 1 and 2 consume.
 *
 * C: a configuration (kernel_common.cuh: dq_kernel::ws) with D, BN, STAGES and FALLBACK, the dq_wg_kernel
 * configuration that runs where the driver refuses a tensor map.
 *
 * VARLEN: a ragged batch (kernel_common.cuh: ragged_block), the maps over the packed tensors, the boxes from the
 * block's sequence's rows. The last key tile brings the next sequence's K and V rows: the consumers zero them
 * (zero_tile_rows) before the tile's products, since dQ sums over keys and a masked dS of 0 times a NaN or Inf
 * there would reach it. Query rows past the sequence only reach dQ rows that are never stored. */
#ifndef FW_BWD_KERNEL_DQ_WS_CUH
#define FW_BWD_KERNEL_DQ_WS_CUH

#include <string.h>
#include "backends/cuda/bwd/kernel_dq_wg.cuh"
#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"

namespace fwbwd {

/* Tensor maps of the dQ pass's operands (make_operand_maps: box 64 columns x BM or BN rows). */
struct dq_tma_maps {
    CUtensorMap q, dout, k, v;
    int swap_q, swap_do, swap_k, swap_v;
};

/* Shared memory: dq_wg_geom's tiles plus the mbarriers (256 bytes). */
template <class C> constexpr size_t dq_ws_smem_bytes()
{
    static_assert(fwparts::mbar_ring<C::STAGES>::BYTES <= 256, "the mbarriers' room");
    return dq_wg_geom<C>::SMEM + 256;
}

template <typename T, class C, bool VARLEN = false>
__global__ void __launch_bounds__(384, 1) dq_ws_kernel(const fw_bwd_tc_params args, const __grid_constant__ dq_tma_maps m)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = dq_wg_geom<C>;
    constexpr int D = C::D, BM = G::BM, BN = G::BN, ST = G::ST, CB = D / 64;
    static_assert(D % 64 == 0 && BN % 64 == 0 && ST >= 2, "wgmma tile shapes");
    using namespace fwparts;

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t sQ = base, sdO = sQ + G::QD_BYTES, sK = sdO + G::QD_BYTES, sV = sK + ST * G::KV_BYTES;
    const mbar_ring<ST> ring{sV + ST * G::KV_BYTES}; /* resident: Q and dO; loads 0, 1: K, V */
    auto k_at = [&](int st) { return sK + (uint32_t)st * G::KV_BYTES; };
    auto v_at = [&](int st) { return sV + (uint32_t)st * G::KV_BYTES; };

    fw_bwd_tc_params seq; /* VARLEN: the block's sequence as a problem of its own (kernel_common.cuh) */
    tile_coord tile;
    seq_span rows{}; /* VARLEN: its first rows in the packed tensors */
    if constexpr (VARLEN)
        if (!ragged_block<T, BM, false>(args, args.has_window != 0, seq, tile, &rows)) return;
    const fw_bwd_tc_params &p = VARLEN ? seq : args;
    const int q_row0 = (int)rows.q_row0, k_row0 = (int)rows.k_row0; /* < 2^31: the maps' extents */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const query_block blk = VARLEN ? query_block::at<BM, BN>(p, tile) : dq_block<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    if (tid == 0) ring.init(256);
    __syncthreads();

    if (wg == 0) { /* producer */
        producer_registers<24>();
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(ring.resident(), 2 * G::QD_BYTES);
#pragma unroll
            for (int cb = 0; cb < CB; cb++) {
                tma_load(sQ + (uint32_t)(cb * BM * 128), &m.q, m.swap_q, ring.resident(), cb * 64, q_row0 + m0, h, b);
                tma_load(sdO + (uint32_t)(cb * BM * 128), &m.dout, m.swap_do, ring.resident(), cb * 64, q_row0 + m0, h, b);
            }
            produce_ring(ring, n_tiles, [&](int t, int st) {
                const int n0 = k_row0 + n_begin + t * BN;
                mbar_expect_tx(ring.full(0, st), G::KV_BYTES);
                tma_load_tile<CB, BN>(k_at(st), &m.k, m.swap_k, ring.full(0, st), n0, hk, b);
                mbar_expect_tx(ring.full(1, st), G::KV_BYTES);
                tma_load_tile<CB, BN>(v_at(st), &m.v, m.swap_v, ring.full(1, st), n0, hk, b);
            });
        }
        return;
    }

    consumer_registers<240>();
    dq_rows<T, D, BN, BM> w;
    w.init(p, sQ, sdO, wg - 1, warp & 3, lane, m0, b, h);
    /* tile t's K and V have landed (VARLEN: the next sequence's rows of the last zeroed) */
    auto wait_tile = [&](int t) {
        ring.wait_full(0, t);
        ring.wait_full(1, t);
        if constexpr (VARLEN) {
            const int r0 = p.Lk - (n_begin + t * BN);
            if (r0 < BN) {
                const int st = t % ST;
                zero_tile_rows<CB, BN, 256>(k_at(st), r0, tid - 128);
                zero_tile_rows<CB, BN, 256>(v_at(st), r0, tid - 128);
                named_sync(1, 256); /* both consumers' zeros before either's products */
            }
        }
    };
    mbar_wait(ring.resident(), 0);
    if (n_tiles > 0) {
        wait_tile(0);
        w.issue_s_dp(k_at(0), v_at(0));
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        wgmma_reg_fence(w.dp);
        w.elementwise(p, m0, n_begin);
        w.ds_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        const int st = t % ST, pst = (t - 1) % ST;
        wait_tile(t);
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
    (void)args;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

/* Host: the dQ pass with the producer warpgroup; falls back to C::FALLBACK's dq_wg_kernel where the driver refuses
 * a tensor map. VARLEN: p is the packed batch (its seqs), the maps the packed tensors' (one batch entry of total
 * rows), one block per query block of each sequence. */
template <typename T, class C, bool VARLEN = false> static cudaError_t dq_ws_launch(const fw_bwd_tc_params &p, cudaStream_t s)
{
    using G = dq_wg_geom<C>;
    dq_tma_maps m;
    memset(&m, 0, sizeof m);
    const dim3 grid = VARLEN ? dim3(ragged_blocks<G::BM, false>(p.seqs, p.H))
                             : dim3((unsigned)((p.Lq + G::BM - 1) / G::BM), (unsigned)p.H, (unsigned)p.B);
    if (!make_operand_maps<T, VARLEN>(m, p, G::BM, G::BN)) {
        using F = typename C::FALLBACK;
        cudaError_t e = fw_cuda_smem_limit<dq_wg_kernel<T, F, VARLEN>>(dq_wg_geom<F>::SMEM);
        if (e != cudaSuccess) return e;
        dq_wg_kernel<T, F, VARLEN><<<grid, 256, dq_wg_geom<F>::SMEM, s>>>(p);
        return fw_cuda_launch_error();
    }
    const size_t smem = dq_ws_smem_bytes<C>();
    cudaError_t e = fw_cuda_smem_limit<dq_ws_kernel<T, C, VARLEN>>(smem);
    if (e != cudaSuccess) return e;
    dq_ws_kernel<T, C, VARLEN><<<grid, 384, smem, s>>>(p, m);
    return fw_cuda_launch_error();
}

} /* namespace fwbwd */
#endif
