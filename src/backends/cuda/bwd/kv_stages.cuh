/* The loads of the mma.sync dK/dV kernels (kernel_dkdv_mma.cuh, kernel_dkdv_mma2d.cuh, kernel_dkdv_tf32.cuh): a
 * block's K and V once, then per step the query tile's Q, dO (rows padded to D + 8 elements: copy.cuh) and its
 * rows' lse2 and Δ through a 2-stage cp.async ring. The block's keys and steps are a fwparts::key_block
 * (scheduler.cuh). */
#ifndef FW_BWD_KV_STAGES_CUH
#define FW_BWD_KV_STAGES_CUH

#include "backends/cuda/bwd/kernel_common.cuh"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/scheduler.cuh"

namespace fwbwd {

/* One stage of the ring of BM query rows of EB-byte elements: Q at s·STAGE_BYTES and dO right after it; lse2 at
 * s·STAT_BYTES and Δ right after it. */
template <int D, int BM, int EB = 2> struct qdo_stage {
    static constexpr int SD = D + 8;
    static constexpr size_t STAGE_BYTES = (size_t)2 * BM * SD * EB;
    static constexpr size_t STAT_BYTES = (size_t)2 * BM * 4;
};

/* The block's BN keys and its steps (key_block), K and V into shared memory, and the load of step it's stage
 * (NT threads). */
template <typename T, int D, int NT, int BN, int BM> struct kv_block : fwparts::key_block<BN, BM> {
    using S = qdo_stage<D, BM, (int)sizeof(T)>;
    static constexpr int SD = S::SD;

    __device__ __forceinline__ void init(const fw_bwd_tc_params &p, uint32_t sK, uint32_t sV, int tid)
    {
        fwparts::key_block<BN, BM>::init(p);
        load_kv(p, sK, sV, tid);
    }
    /* The same for a given tile (a ragged batch's: p then describes its sequence alone). */
    __device__ __forceinline__ void init_at(const fw_bwd_tc_params &p, const fwparts::tile_coord &t, uint32_t sK,
                                            uint32_t sV, int tid)
    {
        fwparts::key_block<BN, BM>::init_at(p, t.m_block, t.h, t.b);
        load_kv(p, sK, sV, tid);
    }
    /* The block's start: its keys (the grid's tile, or a ragged batch's tile t), K and V, and step 0's stage in
     * flight, committed. */
    template <bool VARLEN>
    __device__ __forceinline__ void start(const fw_bwd_tc_params &p, const fwparts::tile_coord &t, uint32_t sK,
                                          uint32_t sV, uint32_t sStage, uint32_t sStat, int tid)
    {
        if constexpr (VARLEN) init_at(p, t, sK, sV, tid);
        else init(p, sK, sV, tid);
        if (this->total > 0) load_stage(p, 0, 0, sStage, sStat, tid);
        fwparts::cp_async_commit();
    }
    __device__ __forceinline__ void load_kv(const fw_bwd_tc_params &p, uint32_t sK, uint32_t sV, int tid)
    {
        const T *kg = head_base<T>(p.k, p.k_s, this->b, this->hk);
        const T *vg = head_base<T>(p.v, p.v_s, this->b, this->hk);
        fwparts::tile_cursor<T, D, NT> c;
        c.init(kg, p.k_s[2], this->n0, p.Lk, p.d, tid);
        c.template load<BN, SD>(sK, tid);
        c.init(vg, p.v_s[2], this->n0, p.Lk, p.d, tid);
        c.template load<BN, SD>(sV, tid);
    }
    /* Step it's Q, dO, lse2, Δ into stage `slot` of the ring at sStage / sStat. */
    __device__ __forceinline__ void load_stage(const fw_bwd_tc_params &p, int it, int slot, uint32_t sStage,
                                               uint32_t sStat, int tid) const
    {
        const int h = this->head(p, it), m0 = this->row0(it);
        const T *qg = head_base<T>(p.q, p.q_s, this->b, h);
        const T *dog = head_base<T>(p.dout, p.do_s, this->b, h);
        const uint32_t st0 = sStage + (uint32_t)(slot * S::STAGE_BYTES);
        fwparts::tile_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(st0, tid);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(st0 + (uint32_t)(BM * SD * sizeof(T)), tid);
        const long long r0 = ((long long)this->b * p.H + h) * p.Lq;
        const uint32_t st = sStat + (uint32_t)(slot * S::STAT_BYTES);
        fwparts::copy_f32_row<BM>(st, p.lse2 + r0, m0, p.Lq, tid);
        fwparts::copy_f32_row<BM>(st + BM * 4, p.delta + r0, m0, p.Lq, (tid + BM) % NT);
    }
};

} /* namespace fwbwd */
#endif
