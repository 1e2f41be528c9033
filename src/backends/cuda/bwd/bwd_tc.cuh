/* cuda-flash backward on tensor cores (f16/bf16 operands, f32 accumulation; mma.sync m16n8k16 with
 * ldmatrix, cp.async double buffering), FlashAttention-2's algorithm. The CUDA-core kernels of
 * bwd_kernel.cuh remain the path for f32 and for shapes this one does not take (head_dim above 128
 * or not a multiple of 8, rows not 16-byte aligned).
 *
 * Preprocess (bwd_launch.cu): Δ_i = rowsum(dO_i ∘ O_i) and lse2_i = LSE_i · log2 e (+inf where the
 * row sees no key, so that P = exp2(· − lse2) is 0 there), both f32 (B, H, Lq).
 *
 * dK/dV kernel, grid (⌈Lk/BN⌉, H_kv, B), W warps, BN = 16·W keys per block, warp w owns keys
 * 16w..16w+15. The block keeps K_j, V_j in shared memory and dK_j, dV_j (f32) in registers, and walks
 * (query head of the GQA group) × (query tile of BM rows that can see its keys); Q_i, dO_i, lse2_i, Δ_i
 * stream through a 2-stage cp.async ring. Everything is computed transposed, keys as rows, so that
 * every product is register-resident:
 *     Sᵀ  = K_w Q_iᵀ            A = K (ldmatrix),        B = Q  (ldmatrix)
 *     dPᵀ = V_w dO_iᵀ           A = V (ldmatrix),        B = dO (ldmatrix)
 *     Pᵀ  = exp2(scale·log2e·Sᵀ − lse2),  dSᵀ = Pᵀ ∘ (dPᵀ − Δ)    (per column = per query)
 *     dV += Pᵀ dO_i             A = Pᵀ (registers),      B = dO (ldmatrix.trans)
 *     dK += dSᵀ Q_i             A = dSᵀ (registers),     B = Q  (ldmatrix.trans)
 * Atomic dQ mode: dSᵀ also goes to shared memory, and after a barrier the warps compute
 * dQ_i += scale · dS K_j (A = dS via ldmatrix.trans of dSᵀ, B = K via ldmatrix.trans) and add it into
 * the f32 accumulator (B, H, Lq, D) with atomicAdd; a conversion kernel writes dQ.
 *
 * Deterministic dQ mode: a second kernel, grid (⌈Lq/BMQ⌉, H, B), BMQ = 16·W query rows (warp w owns
 * 16), walks the key tiles its rows can see (2-stage cp.async ring of K, V) and recomputes
 *     S = Q Kᵀ, dP = dO Vᵀ, P = exp2(scale·log2e·S − lse2), dS = P ∘ (dP − Δ), dQ += dS K
 * in registers (the forward kernel's shape); no atomics anywhere, bit-identical run to run.
 *
 * Boundaries: rows past Lq and keys past Lk are zero-filled by cp.async (lse2 and Δ too), which
 * makes their contributions exactly zero (Q = dO = 0 there gives dS = 0); tiles that cross Lk or a
 * causal/window edge are masked per element (P = 0), which also keeps exp2 from overflowing on the
 * zero-filled keys. Key tiles and query tiles outside the causal/window band are never visited.
 * Every key row of dK/dV is written (zeros where no query sees the key). */
#ifndef FW_BWD_TC_CUH
#define FW_BWD_TC_CUH

#include "backends/cuda/bwd/bwd_kernel.cuh"
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"

/* One compiled configuration of the tensor-core backward (see fw_bwd_tc_variants_d<D>). */
typedef struct fw_bwd_tc_variant {
    int d;            /* padded head dim: 64 or 128 */
    int bm, w, qs;    /* dK/dV kernel: query rows per step, warps (keys per block = 16·w), query sub-tile;
                       * qs = 0: the 2-D tiled dK/dV kernel (dkdv2_kernel: bm 64, w 8); qs = -1: the
                       * wgmma kernel (bwd_wg.cuh, sm_90a, compute capability 9.0 only); qs = -2: the
                       * same with the overlapped schedule (deterministic mode; atomic mode runs -1's);
                       * qs = -4: -2's schedule with a TMA producer warpgroup (dkdv_ws_kernel) */
    int wq, mtq, bnq; /* dQ kernel (deterministic mode): warps, m16 tiles per warp (rows = 16·wq·mtq), keys per
                       * step; wq = -1: the wgmma dQ kernel (dq_wg_kernel, sm_90a); wq = -2: the same with
                       * a TMA producer warpgroup (dq_ws_kernel) */
} fw_bwd_tc_variant;

/* Host launchers, one per padded head dim (bwd_tc_d<D>.cu). `variant` indexes the file's variant
 * list (fw_bwd_tc_nvariants); smem reports the larger dynamic shared memory of the two kernels. */
#define FW_BWD_TC_DECLARE(D)                                                                               \
    cudaError_t fw_bwd_tc_launch_d##D(const fw_bwd_args *a, int dtype, int atomic_dq, int variant, cudaStream_t s); \
    size_t fw_bwd_tc_smem_d##D(int variant, int atomic_dq);                                                \
    extern const fw_bwd_tc_variant fw_bwd_tc_variants_d##D[];                                              \
    extern const int fw_bwd_tc_nvariants_d##D;
FW_BWD_TC_DECLARE(64)
FW_BWD_TC_DECLARE(128)
/* Default variants per dQ mode (gpu_backward --bench, docs/PERF-gpu-bwd.md): at head_dim 128 the
 * atomic mode runs the 2-D tiled dK/dV kernel (variant 4), 10-17% faster than variant 0 on the H100;
 * at 64 it lost to variant 0 below L = 16k. The deterministic mode runs the wgmma kernels with the
 * overlapped dK/dV schedule on compute capability 9.0 (the FALLBACK variants elsewhere): at head_dim 64
 * variant 10 (dK/dV and dQ both with a TMA producer warpgroup: 8-12% faster than variant 8), at 128
 * variant 8 (the dQ pass with the producer warpgroup: 3-5% faster than variant 7; its dK/dV kernel
 * would spill with the producer's register split). H100, docs/PERF-gpu-bwd.md. */
#define FW_BWD_TC_ATOM_DEFAULT_64 0
#define FW_BWD_TC_ATOM_DEFAULT_128 4
#define FW_BWD_TC_DET_DEFAULT_64 10
#define FW_BWD_TC_DET_DEFAULT_128 8
/* At head_dim 64 and seqlen_k <= 1024 the 128-row dK/dV steps of variant 7 (cp.async, dQ pass without the
 * producer warpgroup) were 5% faster than variant 10 in two runs on an H100, at 2048 even. */
#define FW_BWD_TC_DET_SHORT_64 7
#define FW_BWD_TC_DET_SHORT_LK_64 1024
/* Where a default is a wgmma variant and the device is not compute capability 9.0. */
#define FW_BWD_TC_ATOM_FALLBACK_64 0
#define FW_BWD_TC_ATOM_FALLBACK_128 4
#define FW_BWD_TC_DET_FALLBACK_64 0
#define FW_BWD_TC_DET_FALLBACK_128 1

#ifdef __CUDACC__

namespace fwbt {
using namespace fwparts;

/* Kernel arguments: fw_bwd_args with the window folded into ints that cannot overflow. */
struct params {
    const void *q, *k, *v, *dout;
    void *dq, *dk, *dv;
    const float *lse2, *delta;
    float *dq_acc;
    long long q_s[3], k_s[3], v_s[3], do_s[3], dq_s[3], dk_s[3], dv_s[3];
    int B, H, group, Lq, Lk, d;
    int off, wl, wr, has_window; /* visible: i + off − wl <= j <= i + off + wr (when has_window) */
    float scale, scale_log2;
};

/* The (batch b, head h) slice of one of the tensors in params: base + b·s[0] + h·s[1] elements. */
template <typename T>
__device__ __forceinline__ const T *head_base(const void *base, const long long (&s)[3], int b, int h)
{
    return reinterpret_cast<const T *>(base) + (long long)b * s[0] + (long long)h * s[1];
}
template <typename T> __device__ __forceinline__ T *head_base(void *base, const long long (&s)[3], int b, int h)
{
    return reinterpret_cast<T *>(base) + (long long)b * s[0] + (long long)h * s[1];
}

/* A dQ kernel's block (grid (⌈Lq/BM⌉, H, B)): its query rows m0.. (windowed/causal masks: the longest
 * blocks first), head, batch, kv head, and the key tiles of BN its rows may see. */
struct q_block {
    int m0, h, b, hk, n_begin, n_tiles;
    template <int BM, int BN> static __device__ __forceinline__ q_block of(const params &p)
    {
        q_block k;
        const int nmb = (p.Lq + BM - 1) / BM;
        const int mb = p.has_window ? nmb - 1 - (int)blockIdx.x : (int)blockIdx.x;
        k.h = blockIdx.y;
        k.b = blockIdx.z;
        k.hk = k.h / p.group;
        k.m0 = mb * BM;
        key_tile_range<BM, BN>(p, k.m0, k.n_begin, k.n_tiles);
        return k;
    }
};

/* ROWS f32 values of a (B, H, Lq) statistics array from row i0 into shared memory, zero past Lq. */
template <int ROWS>
__device__ __forceinline__ void load_stats(uint32_t s, const float *g, int i0, int Lq, int tid)
{
    if (tid < ROWS) {
        const bool ok = i0 + tid < Lq;
        cp_async4(s + (uint32_t)(tid * 4), ok ? g + i0 + tid : g, ok ? 4 : 0);
    }
}

/* dst[0], dst[1] += x, y in the f32 dQ accumulator: one vector reduction on sm_90 (dst is 8-byte
 * aligned: an even column of rows of even length). */
__device__ __forceinline__ void red_add2(float *dst, float x, float y)
{
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(x, y));
#else
    atomicAdd(dst, x);
    atomicAdd(dst + 1, y);
#endif
}

__device__ __forceinline__ bool visible(const params &p, int i, int j)
{
    return j < p.Lk && (!p.has_window || (j >= i + p.off - p.wl && j <= i + p.off + p.wr));
}

/* The 2-stage ring of (Q, dO, lse2, Δ) tiles of BM query rows that both dK/dV kernels stream:
 * stage s holds Q at s·STAGE_BYTES and dO right after it; lse2 at s·STAT_BYTES and Δ right after it. */
template <int D, int BM> struct qdo_stage {
    static constexpr int SD = D + 8;
    static constexpr size_t STAGE_BYTES = (size_t)2 * BM * SD * 2;
    static constexpr size_t STAT_BYTES = (size_t)2 * BM * 4;
};

/* What the two dK/dV kernels share: the block's BN keys from n0 and the query tiles that can see them
 * (m_tiles tiles from m_begin, times the group's query heads = total steps), K and V into shared
 * memory, and the load of step it's stage. */
template <typename T, int D, int NT, int BN, int BM> struct kv_block {
    using S = qdo_stage<D, BM>;
    static constexpr int SD = S::SD;
    int n0, b, hk, m_begin, m_tiles, total;

    __device__ __forceinline__ void init(const params &p, uint32_t sK, uint32_t sV, int tid)
    {
        range(p);
        const T *kg = head_base<T>(p.k, p.k_s, b, hk);
        const T *vg = head_base<T>(p.v, p.v_s, b, hk);
        tile_cursor<T, D, NT> c;
        c.init(kg, p.k_s[2], n0, p.Lk, p.d, tid);
        c.template load<BN, SD>(sK, tid);
        c.init(vg, p.v_s[2], n0, p.Lk, p.d, tid);
        c.template load<BN, SD>(sV, tid);
    }
    /* The block's keys and the query tiles that can see them, without loading anything. */
    __device__ __forceinline__ void range(const params &p)
    {
        n0 = blockIdx.x * BN;
        hk = blockIdx.y;
        b = blockIdx.z;
        const int n1 = min(n0 + BN, p.Lk);
        int qlo = 0, qhi = p.Lq; /* query rows that can see keys n0..n1-1 */
        if (p.has_window) {
            qlo = max(0, n0 - p.off - p.wr);
            qhi = min(p.Lq, n1 - 1 - p.off + p.wl + 1);
        }
        m_begin = (qlo / BM) * BM;
        m_tiles = qhi > m_begin ? (qhi - m_begin + BM - 1) / BM : 0;
        total = m_tiles * p.group;
    }
    __device__ __forceinline__ int head(const params &p, int it) const { return hk * p.group + it / m_tiles; }
    __device__ __forceinline__ int row0(int it) const { return m_begin + (it % m_tiles) * BM; }
    /* Step it's Q, dO, lse2, Δ into stage `slot` of the ring at sStage / sStat. */
    __device__ __forceinline__ void load_stage(const params &p, int it, int slot, uint32_t sStage, uint32_t sStat,
                                               int tid) const
    {
        const int h = head(p, it), m0 = row0(it);
        const T *qg = head_base<T>(p.q, p.q_s, b, h);
        const T *dog = head_base<T>(p.dout, p.do_s, b, h);
        const uint32_t st0 = sStage + (uint32_t)(slot * S::STAGE_BYTES);
        tile_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(st0, tid);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(st0 + BM * SD * 2, tid);
        const long long r0 = ((long long)b * p.H + h) * p.Lq;
        const uint32_t st = sStat + (uint32_t)(slot * S::STAT_BYTES);
        load_stats<BM>(st, p.lse2 + r0, m0, p.Lq, tid);
        load_stats<BM>(st + BM * 4, p.delta + r0, m0, p.Lq, (tid + BM) % NT);
    }
};

template <int D, int BM, int W, bool ATOMIC> struct dkdv_geom {
    static constexpr int BN = 16 * W, SD = D + 8, SDS = BM + 8;
    static constexpr size_t KV_BYTES = (size_t)2 * BN * SD * 2;     /* K, V */
    static constexpr size_t STAGE_BYTES = qdo_stage<D, BM>::STAGE_BYTES; /* Q, dO of one stage */
    static constexpr size_t STAT_BYTES = qdo_stage<D, BM>::STAT_BYTES;   /* lse2, Δ of one stage */
    static constexpr size_t DS_BYTES = ATOMIC ? (size_t)BN * SDS * 2 : 0;
    static constexpr size_t SMEM = KV_BYTES + 2 * STAGE_BYTES + 2 * STAT_BYTES + DS_BYTES;
};

template <typename T, int D, int BM, int W, bool ATOMIC, int QS>
__global__ void __launch_bounds__(W * 32) dkdv_kernel(const params p)
{
    using G = dkdv_geom<D, BM, W, ATOMIC>;
    constexpr int NT = W * 32, BN = G::BN, SD = G::SD, SDS = G::SDS;
    constexpr int KD = D / 16;  /* k16 steps over the head dim */
    constexpr int NQ = QS / 8;  /* n8 tiles of Sᵀ over the queries of one sub-tile */
    constexpr int KQ = QS / 16; /* k16 steps over them */
    constexpr int ND = D / 8;   /* n8 tiles of dK, dV */
    static_assert(BM % QS == 0 && QS % 16 == 0 && D % 16 == 0, "tile sizes");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sK = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sV = sK + BN * SD * 2;
    const uint32_t sStage = sK + (uint32_t)G::KV_BYTES; /* stage s: Q at +s·STAGE, dO at +BM·SD·2 */
    const uint32_t sStat = sStage + (uint32_t)(2 * G::STAGE_BYTES); /* stage s: lse2 at +s·STAT, Δ at +BM·4 */
    const uint32_t sdS = sStat + (uint32_t)(2 * G::STAT_BYTES);
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES);
    T *dS_t = reinterpret_cast<T *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES + 2 * G::STAT_BYTES);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    kv_block<T, D, NT, BN, BM> kb;
    kb.init(p, sK, sV, tid);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;
    if (total > 0) kb.load_stage(p, 0, 0, sStage, sStat, tid);
    cp_async_commit();

    float acc_dk[ND][4], acc_dv[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_dk[j][e] = acc_dv[j][e] = 0.f;

    const int kw = warp * 16, key0 = n0 + kw + g; /* this thread's keys: key0 and key0 + 8 */
    /* A (K, V rows of this warp), row-major */
    const uint32_t a_lane = (uint32_t)(((kw + (lane & 15)) * SD + (lane >> 4) * 8) * 2);
    /* B non-trans (Q, dO rows = n) */
    const uint32_t bn_lane = (uint32_t)((((lane & 7) + ((lane >> 4) << 3)) * SD + ((lane >> 3) & 1) * 8) * 2);
    /* B trans (Q, dO rows = k; K rows = k in the dQ product) */
    const uint32_t bt_lane = (uint32_t)(((lane & 15) * SD + (lane >> 4) * 8) * 2);

#pragma unroll 1
    for (int it = 0; it < total; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < total) kb.load_stage(p, it + 1, (it + 1) & 1, sStage, sStat, tid);
        cp_async_commit();

        const int slot = it & 1;
        const int h = kb.head(p, it), m0 = kb.row0(it);
        const uint32_t sQ = sStage + (uint32_t)(slot * G::STAGE_BYTES), sdO = sQ + BM * SD * 2;
        const float *lse2_s = stat_f + slot * (G::STAT_BYTES / 4), *delta_s = lse2_s + BM;

        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
        /* The BM queries in sub-tiles of QS (QS < BM: fewer score registers live next to dK, dV).
         * Not unrolled, so that the sub-tiles do not overlap in registers. */
#pragma unroll 1
        for (int qs = 0; qs < BM / QS; qs++) {
            const uint32_t sQs = sQ + (uint32_t)(qs * QS * SD * 2), sdOs = sdO + (uint32_t)(qs * QS * SD * 2);
            const int q0 = m0 + qs * QS;
            /* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (16 keys × QS queries per warp) */
            float s[NQ][4], dp[NQ][4];
#pragma unroll
            for (int j = 0; j < NQ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t ak[4], av[4];
                ldsm_x4(sK + a_lane + kk * 32, ak[0], ak[1], ak[2], ak[3]);
                ldsm_x4(sV + a_lane + kk * 32, av[0], av[1], av[2], av[3]);
#pragma unroll
                for (int np = 0; np < NQ / 2; np++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(sQs + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(s[2 * np], ak, b0, b1);
                    mma16816<T>(s[2 * np + 1], ak, b2, b3);
                    ldsm_x4(sdOs + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(dp[2 * np], av, b0, b1);
                    mma16816<T>(dp[2 * np + 1], av, b2, b3);
                }
            }

            /* Pᵀ and dSᵀ; masked only on tiles that cross Lk or a causal/window edge */
#pragma unroll
            for (int j = 0; j < NQ; j++) {
                const float2 l2 = *reinterpret_cast<const float2 *>(lse2_s + qs * QS + j * 8 + t4 * 2);
                const float2 dl = *reinterpret_cast<const float2 *>(delta_s + qs * QS + j * 8 + t4 * 2);
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float pv = fast_exp2(fmaf(s[j][r * 2 + e], p.scale_log2, -(e ? l2.y : l2.x)));
                        if (need_mask && !visible(p, q0 + j * 8 + t4 * 2 + e, key0 + r * 8)) pv = 0.f;
                        s[j][r * 2 + e] = pv;
                        dp[j][r * 2 + e] = pv * (dp[j][r * 2 + e] - (e ? dl.y : dl.x));
                    }
            }

            /* dV += Pᵀ dO, dK += dSᵀ Q (A operands repacked from the accumulators) */
#pragma unroll
            for (int kk = 0; kk < KQ; kk++) {
                uint32_t ap[4], ad[4];
                acc_to_a<T>(s[2 * kk], s[2 * kk + 1], ap);
                acc_to_a<T>(dp[2 * kk], dp[2 * kk + 1], ad);
                if (ATOMIC) {
                    /* dSᵀ rows kw+g, kw+g+8; query columns qs·QS + 16kk + 2t4 (+8) */
                    const int c = qs * QS + kk * 16 + t4 * 2;
                    uint32_t *row0 = reinterpret_cast<uint32_t *>(dS_t + (kw + g) * SDS + c);
                    uint32_t *row8 = reinterpret_cast<uint32_t *>(dS_t + (kw + g + 8) * SDS + c);
                    row0[0] = ad[0];
                    row8[0] = ad[1];
                    row0[4] = ad[2];
                    row8[4] = ad[3];
                }
#pragma unroll
                for (int dq = 0; dq < ND / 2; dq++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4_t(sdOs + bt_lane + (uint32_t)((kk * 16 * SD + dq * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(acc_dv[2 * dq], ap, b0, b1);
                    mma16816<T>(acc_dv[2 * dq + 1], ap, b2, b3);
                    ldsm_x4_t(sQs + bt_lane + (uint32_t)((kk * 16 * SD + dq * 16) * 2), b0, b1, b2, b3);
                    mma16816<T>(acc_dk[2 * dq], ad, b0, b1);
                    mma16816<T>(acc_dk[2 * dq + 1], ad, b2, b3);
                }
            }
        }

        if (ATOMIC) {
            /* dQ_i += scale · dS K_j: warps tile (BM rows) × (D columns) as MW × DW; a warp's DS columns
             * in SPLIT passes, so that the dQ accumulator does not push dK, dV out of registers */
            constexpr int MW = BM / 16, DW = W / MW, DS = D / DW;
            constexpr int SPLIT = DS >= 64 ? 2 : 1, DH = DS / SPLIT;
            static_assert(MW * DW == W && DS * DW == D && DH % 16 == 0, "dQ warp tiling");
            __syncthreads();
            const int wm = warp % MW, wd = warp / MW;
            /* A = dS (rows = queries) from dSᵀ (rows = keys): ldmatrix.trans, matrices
             * (m0-7,k0-7), (m8-15,k0-7), (m0-7,k8-15), (m8-15,k8-15) */
            const uint32_t ds_lane =
                sdS + (uint32_t)((((lane & 7) + ((lane >> 4) & 1) * 8) * SDS + wm * 16 + ((lane >> 3) & 1) * 8) * 2);
            float *accg = p.dq_acc + (((long long)b * p.H + h) * p.Lq) * p.d;
#pragma unroll
            for (int half = 0; half < SPLIT; half++) {
                const int c0 = wd * DS + half * DH;
                float acc_dq[DH / 8][4];
#pragma unroll
                for (int j = 0; j < DH / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc_dq[j][e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    uint32_t a[4];
                    ldsm_x4_t(ds_lane + (uint32_t)(kk * 16 * SDS * 2), a[0], a[1], a[2], a[3]);
#pragma unroll
                    for (int dq = 0; dq < DH / 16; dq++) {
                        uint32_t b0, b1, b2, b3;
                        ldsm_x4_t(sK + bt_lane + (uint32_t)((kk * 16 * SD + c0 + dq * 16) * 2), b0, b1, b2, b3);
                        mma16816<T>(acc_dq[2 * dq], a, b0, b1);
                        mma16816<T>(acc_dq[2 * dq + 1], a, b2, b3);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = m0 + wm * 16 + g + r * 8;
                    if (row < p.Lq) {
                        float *dst = accg + (long long)row * p.d;
#pragma unroll
                        for (int j = 0; j < DH / 8; j++) {
                            const int col = c0 + j * 8 + t4 * 2;
                            if (col < p.d) red_add2(dst + col, acc_dq[j][r * 2] * p.scale, acc_dq[j][r * 2 + 1] * p.scale);
                        }
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    /* dK (scaled) and dV of this warp's 16 keys */
    T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
    T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key0 + r * 8;
        if (key < p.Lk) {
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const int col = j * 8 + t4 * 2;
                if (col < p.d) {
                    *reinterpret_cast<uint32_t *>(dkg + (long long)key * p.dk_s[2] + col) =
                        pack2<T>::make(acc_dk[j][r * 2] * p.scale, acc_dk[j][r * 2 + 1] * p.scale);
                    *reinterpret_cast<uint32_t *>(dvg + (long long)key * p.dv_s[2] + col) =
                        pack2<T>::make(acc_dv[j][r * 2], acc_dv[j][r * 2 + 1]);
                }
            }
        }
    }
}

template <int D, int W, int MT, int BN> struct dq_geom {
    static constexpr int BM = 16 * W * MT, SD = D + 8;
    static constexpr size_t SMEM = (size_t)(2 * BM + 2 * 2 * BN) * SD * 2; /* Q, dO; 2 stages of K, V */
};

/* Deterministic dQ: W warps of MT m16 tiles each (BM = 16·W·MT query rows), BN keys per step. */
template <typename T, int D, int W, int MT, int BN>
__global__ void __launch_bounds__(W * 32) dq_kernel(const params p)
{
    using G = dq_geom<D, W, MT, BN>;
    constexpr int NT = W * 32, BM = G::BM, SD = G::SD;
    constexpr int KD = D / 16, NN = BN / 8, KN = BN / 16, ND = D / 8;
    constexpr uint32_t TILE = BN * SD * 2;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sdO = sQ + BM * SD * 2;
    const uint32_t sKV = sdO + BM * SD * 2; /* stage s: K at +2s·TILE, V at +(2s+1)·TILE */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const q_block blk = q_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    const T *qg = head_base<T>(p.q, p.q_s, b, h);
    const T *dog = head_base<T>(p.dout, p.do_s, b, h);
    const T *kg = head_base<T>(p.k, p.k_s, b, hk);
    const T *vg = head_base<T>(p.v, p.v_s, b, hk);
    {
        tile_cursor<T, D, NT> c;
        c.init(qg, p.q_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(sQ, tid);
        c.init(dog, p.do_s[2], m0, p.Lq, p.d, tid);
        c.template load<BM, SD>(sdO, tid);
    }
    tile_cursor<T, D, NT> kc, vc;
    kc.init(kg, p.k_s[2], n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_s[2], n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN, SD>(sKV, tid);
        vc.template load<BN, SD>(sKV + TILE, tid);
    }
    cp_async_commit();

    /* this thread's rows: wrow0 + 16·mt + g (+ 8) */
    const int wrow0 = warp * MT * 16;
    float l2[MT][2], dl[MT][2];
    const long long row0 = ((long long)b * p.H + h) * p.Lq;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = m0 + wrow0 + mt * 16 + g + r * 8;
            l2[mt][r] = i < p.Lq ? p.lse2[row0 + i] : 0.f;
            dl[mt][r] = i < p.Lq ? p.delta[row0 + i] : 0.f;
        }
    float acc[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;

    const uint32_t a_lane = (uint32_t)(((wrow0 + (lane & 15)) * SD + (lane >> 4) * 8) * 2);
    const uint32_t bn_lane = (uint32_t)((((lane & 7) + ((lane >> 4) << 3)) * SD + ((lane >> 3) & 1) * 8) * 2);
    const uint32_t bt_lane = (uint32_t)(((lane & 15) * SD + (lane >> 4) * 8) * 2);

#pragma unroll 1
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            const uint32_t nx = sKV + (uint32_t)(((it + 1) & 1) * 2 * TILE);
            kc.template load<BN, SD>(nx, tid);
            vc.template load<BN, SD>(nx + TILE, tid);
        }
        cp_async_commit();
        const uint32_t sK = sKV + (uint32_t)((it & 1) * 2 * TILE), sV = sK + TILE;
        const int n0 = n_begin + it * BN;

        float s[MT][NN][4], dp[MT][NN][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][j][e] = dp[mt][j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t aq[MT][4], ado[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ldsm_x4(sQ + a_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), aq[mt][0], aq[mt][1], aq[mt][2], aq[mt][3]);
                ldsm_x4(sdO + a_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), ado[mt][0], ado[mt][1], ado[mt][2],
                        ado[mt][3]);
            }
#pragma unroll
            for (int np = 0; np < NN / 2; np++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sK + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<T>(s[mt][2 * np], aq[mt], b0, b1);
                    mma16816<T>(s[mt][2 * np + 1], aq[mt], b2, b3);
                }
                ldsm_x4(sV + bn_lane + (uint32_t)((np * 16 * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<T>(dp[mt][2 * np], ado[mt], b0, b1);
                    mma16816<T>(dp[mt][2 * np + 1], ado[mt], b2, b3);
                }
            }
        }

        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float pv = fast_exp2(fmaf(s[mt][j][r * 2 + e], p.scale_log2, -l2[mt][r]));
                        if (need_mask && !visible(p, m0 + wrow0 + mt * 16 + g + r * 8, n0 + j * 8 + t4 * 2 + e))
                            pv = 0.f;
                        dp[mt][j][r * 2 + e] = pv * (dp[mt][j][r * 2 + e] - dl[mt][r]);
                    }

        /* dQ += dS K */
#pragma unroll
        for (int kk = 0; kk < KN; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) acc_to_a<T>(dp[mt][2 * kk], dp[mt][2 * kk + 1], a[mt]);
            mma_ab<T, true, MT, ND / 2>(acc, a, sK + bt_lane, kk * 16 * SD, 16);
        }
    }
    cp_async_wait<0>();

    T *dqg = head_base<T>(p.dq, p.dq_s, b, h);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = m0 + wrow0 + mt * 16 + g + r * 8;
            if (row < p.Lq) {
#pragma unroll
                for (int j = 0; j < ND; j++) {
                    const int col = j * 8 + t4 * 2;
                    if (col < p.d)
                        *reinterpret_cast<uint32_t *>(dqg + (long long)row * p.dq_s[2] + col) =
                            pack2<T>::make(acc[mt][j][r * 2] * p.scale, acc[mt][j][r * 2 + 1] * p.scale);
                }
            }
        }
}

/* The dK/dV kernel with 2-D warp tiling (FlashAttention-2's layout; the QS = 0 variants): 8 warps,
 * BN = 128 keys per block, BM = 64 queries per step. Each shared-memory fragment feeds two MMAs:
 *   phase 1  Sᵀ, dPᵀ: warps 4 (keys, 32 each) × 2 (queries, 32 each); Pᵀ and dSᵀ go to shared memory
 *   phase 2  dV += Pᵀ dO, dK += dSᵀ Q: warps 4 (keys, 32 each) × 2 (head dims, D/2 each); A operands
 *            from the shared Pᵀ, dSᵀ (ldmatrix), B from dO, Q (ldmatrix.trans)
 *   phase 3  atomic mode: dQ += scale·dS K: warps 2 (queries, 32 each) × 4 (head dims, D/4 each)
 * Two barriers per step (after the Pᵀ/dSᵀ stores; at the top, before the stage and Pᵀ/dSᵀ are reused). */
template <int D, bool ATOMIC> struct dkdv2_geom {
    static constexpr int BN = 128, BM = 64, W = 8, SD = D + 8, SP = BM + 8;
    static constexpr size_t KV_BYTES = (size_t)2 * BN * SD * 2;
    static constexpr size_t STAGE_BYTES = qdo_stage<D, BM>::STAGE_BYTES;
    static constexpr size_t STAT_BYTES = qdo_stage<D, BM>::STAT_BYTES;
    static constexpr size_t PS_BYTES = (size_t)2 * BN * SP * 2; /* Pᵀ, dSᵀ */
    static constexpr size_t SMEM = KV_BYTES + 2 * STAGE_BYTES + 2 * STAT_BYTES + PS_BYTES;
};

template <typename T, int D, bool ATOMIC>
__global__ void __launch_bounds__(256) dkdv2_kernel(const params p)
{
    using G = dkdv2_geom<D, ATOMIC>;
    constexpr int NT = 256, BN = G::BN, BM = G::BM, SD = G::SD, SP = G::SP;
    constexpr int KD = D / 16;      /* k16 steps over the head dim */
    constexpr int DH = D / 2;       /* phase 2: head dims per warp */
    constexpr int DC = D / 4;       /* phase 3: head dims per warp */
    static_assert(DH % 16 == 0 && DC % 16 == 0, "head dim tiling");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sK = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sV = sK + BN * SD * 2;
    const uint32_t sStage = sK + (uint32_t)G::KV_BYTES;
    const uint32_t sStat = sStage + (uint32_t)(2 * G::STAGE_BYTES);
    const uint32_t sP = sStat + (uint32_t)(2 * G::STAT_BYTES), sdS = sP + BN * SP * 2;
    const float *stat_f = reinterpret_cast<const float *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES);
    T *P_t = reinterpret_cast<T *>(smem_raw + G::KV_BYTES + 2 * G::STAGE_BYTES + 2 * G::STAT_BYTES);
    T *dS_t = P_t + BN * SP;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    kv_block<T, D, NT, BN, BM> kb;
    kb.init(p, sK, sV, tid);
    const int n0 = kb.n0, hk = kb.hk, b = kb.b, total = kb.total;
    if (total > 0) kb.load_stage(p, 0, 0, sStage, sStat, tid);
    cp_async_commit();

    /* phase 1 / 2 roles: keys 32·wk; phase 1 queries 32·wq; phase 2 head dims DH·wd */
    const int wk = warp % 4, wq = warp / 4, wd = warp / 4;
    float acc_dk[2][DH / 8][4], acc_dv[2][DH / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < DH / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_dk[mt][j][e] = acc_dv[mt][j][e] = 0.f;

    /* A (row-major, rows = M): matrices (r0-7,c0-7), (r8-15,c0-7), (r0-7,c8-15), (r8-15,c8-15) */
    const uint32_t a_lane_kv = (uint32_t)(((wk * 32 + (lane & 15)) * SD + (lane >> 4) * 8) * 2);
    const uint32_t a_lane_ps = (uint32_t)(((wk * 32 + (lane & 15)) * SP + (lane >> 4) * 8) * 2);
    /* B non-trans (rows = n) and B trans (rows = k) */
    const uint32_t bn_lane = (uint32_t)((((lane & 7) + ((lane >> 4) << 3)) * SD + ((lane >> 3) & 1) * 8) * 2);
    const uint32_t bt_lane = (uint32_t)(((lane & 15) * SD + (lane >> 4) * 8) * 2);

#pragma unroll 1
    for (int it = 0; it < total; it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < total) kb.load_stage(p, it + 1, (it + 1) & 1, sStage, sStat, tid);
        cp_async_commit();

        const int slot = it & 1;
        const int h = kb.head(p, it), m0 = kb.row0(it);
        const uint32_t sQ = sStage + (uint32_t)(slot * G::STAGE_BYTES), sdO = sQ + BM * SD * 2;
        const float *lse2_s = stat_f + slot * (G::STAT_BYTES / 4), *delta_s = lse2_s + BM;

        /* phase 1: Sᵀ, dPᵀ for keys 32·wk.. × queries 32·wq.. */
        {
            float s[2][4][4], dp[2][4][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][j][e] = dp[mt][j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t ak[2][4], av[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    ldsm_x4(sK + a_lane_kv + (uint32_t)((mt * 16 * SD + kk * 16) * 2), ak[mt][0], ak[mt][1], ak[mt][2], ak[mt][3]);
                    ldsm_x4(sV + a_lane_kv + (uint32_t)((mt * 16 * SD + kk * 16) * 2), av[mt][0], av[mt][1], av[mt][2], av[mt][3]);
                }
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(sQ + bn_lane + (uint32_t)(((wq * 32 + np * 16) * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma16816<T>(s[mt][2 * np], ak[mt], b0, b1);
                        mma16816<T>(s[mt][2 * np + 1], ak[mt], b2, b3);
                    }
                    ldsm_x4(sdO + bn_lane + (uint32_t)(((wq * 32 + np * 16) * SD + kk * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma16816<T>(dp[mt][2 * np], av[mt], b0, b1);
                        mma16816<T>(dp[mt][2 * np + 1], av[mt], b2, b3);
                    }
                }
            }
            const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int ql = wq * 32 + j * 8 + t4 * 2; /* this thread's query columns ql, ql + 1 */
                const float2 l2 = *reinterpret_cast<const float2 *>(lse2_s + ql);
                const float2 dl = *reinterpret_cast<const float2 *>(delta_s + ql);
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int kl = wk * 32 + mt * 16 + g + r * 8; /* key row in the block */
                        float pv[2], ds[2];
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float x = fast_exp2(fmaf(s[mt][j][r * 2 + e], p.scale_log2, -(e ? l2.y : l2.x)));
                            if (need_mask && !visible(p, m0 + ql + e, n0 + kl)) x = 0.f;
                            pv[e] = x;
                            ds[e] = x * (dp[mt][j][r * 2 + e] - (e ? dl.y : dl.x));
                        }
                        *reinterpret_cast<uint32_t *>(P_t + kl * SP + ql) = pack2<T>::make(pv[0], pv[1]);
                        *reinterpret_cast<uint32_t *>(dS_t + kl * SP + ql) = pack2<T>::make(ds[0], ds[1]);
                    }
            }
        }
        __syncthreads();

        /* phase 2: dV += Pᵀ dO, dK += dSᵀ Q for keys 32·wk.. × head dims DH·wd.. */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            uint32_t ap[2][4], ad[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                ldsm_x4(sP + a_lane_ps + (uint32_t)((mt * 16 * SP + kk * 16) * 2), ap[mt][0], ap[mt][1], ap[mt][2], ap[mt][3]);
                ldsm_x4(sdS + a_lane_ps + (uint32_t)((mt * 16 * SP + kk * 16) * 2), ad[mt][0], ad[mt][1], ad[mt][2], ad[mt][3]);
            }
#pragma unroll
            for (int dq = 0; dq < DH / 16; dq++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(sdO + bt_lane + (uint32_t)((kk * 16 * SD + wd * DH + dq * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma16816<T>(acc_dv[mt][2 * dq], ap[mt], b0, b1);
                    mma16816<T>(acc_dv[mt][2 * dq + 1], ap[mt], b2, b3);
                }
                ldsm_x4_t(sQ + bt_lane + (uint32_t)((kk * 16 * SD + wd * DH + dq * 16) * 2), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma16816<T>(acc_dk[mt][2 * dq], ad[mt], b0, b1);
                    mma16816<T>(acc_dk[mt][2 * dq + 1], ad[mt], b2, b3);
                }
            }
        }

        if (ATOMIC) {
            /* phase 3: dQ += scale·dS K for queries 32·wq3.. × head dims DC·wd3.. */
            const int wq3 = warp % 2, wd3 = warp / 2;
            float acc_dq[2][DC / 8][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int j = 0; j < DC / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc_dq[mt][j][e] = 0.f;
            /* A = dS (rows = queries) from dSᵀ (rows = keys) with ldmatrix.trans */
            const uint32_t ds_lane =
                sdS + (uint32_t)((((lane & 7) + ((lane >> 4) & 1) * 8) * SP + wq3 * 32 + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
                    ldsm_x4_t(ds_lane + (uint32_t)((kk * 16 * SP + mt * 16) * 2), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
                mma_ab<T, true, 2, DC / 16>(acc_dq, a, sK + bt_lane, kk * 16 * SD + wd3 * DC, 16);
            }
            float *accg = p.dq_acc + (((long long)b * p.H + h) * p.Lq) * p.d;
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = m0 + wq3 * 32 + mt * 16 + g + r * 8;
                    if (row < p.Lq) {
                        float *dst = accg + (long long)row * p.d;
#pragma unroll
                        for (int j = 0; j < DC / 8; j++) {
                            const int col = wd3 * DC + j * 8 + t4 * 2;
                            if (col < p.d)
                                red_add2(dst + col, acc_dq[mt][j][r * 2] * p.scale, acc_dq[mt][j][r * 2 + 1] * p.scale);
                        }
                    }
                }
        }
    }
    cp_async_wait<0>();

    T *dkg = head_base<T>(p.dk, p.dk_s, b, hk);
    T *dvg = head_base<T>(p.dv, p.dv_s, b, hk);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = n0 + wk * 32 + mt * 16 + g + r * 8;
            if (key < p.Lk) {
#pragma unroll
                for (int j = 0; j < DH / 8; j++) {
                    const int col = wd * DH + j * 8 + t4 * 2;
                    if (col < p.d) {
                        *reinterpret_cast<uint32_t *>(dkg + (long long)key * p.dk_s[2] + col) =
                            pack2<T>::make(acc_dk[mt][j][r * 2] * p.scale, acc_dk[mt][j][r * 2 + 1] * p.scale);
                        *reinterpret_cast<uint32_t *>(dvg + (long long)key * p.dv_s[2] + col) =
                            pack2<T>::make(acc_dv[mt][j][r * 2], acc_dv[mt][j][r * 2 + 1]);
                    }
                }
            }
        }
}

} /* namespace fwbt */
#include "backends/cuda/bwd/bwd_wg.cuh"
namespace fwbt {

template <typename T, int D, int BM, int W, int QS, int WQ, int MTQ, int BNQ>
static cudaError_t launch(const params &p, int atomic_dq, cudaStream_t s)
{
    const dim3 grid_kv((unsigned)((p.Lk + 16 * W - 1) / (16 * W)), (unsigned)(p.H / p.group), (unsigned)p.B);
    cudaError_t e;
    if constexpr (QS < 0) { /* the wgmma dK/dV kernel (sm_90a; BM 64, 2 warpgroups, 128 keys) */
        static_assert((BM == 64 || BM == 128) && W == 8, "the wgmma kernel is BM 64 or 128, 8 warps");
        if (atomic_dq) {
            const size_t smem = dkdv_wg_geom<D, BM, true>::SMEM;
            if ((e = fw_cuda_smem_limit<dkdv_wg_kernel<T, D, BM, true>>(smem)) != cudaSuccess) return e;
            dkdv_wg_kernel<T, D, BM, true><<<grid_kv, 256, smem, s>>>(p);
            return cudaGetLastError();
        }
        constexpr int ST = QS <= -2 ? 3 : 2;
        constexpr bool OVL = QS <= -2; /* -2, -4: the overlapped schedule */
        int ws = 0;
        if constexpr (QS == -4) /* with a TMA producer warpgroup; the cp.async kernel where a map is refused */
            if ((e = dkdv_ws_launch<T, D, BM, 3>(p, grid_kv, s, &ws)) != cudaSuccess) return e;
        if (!ws) {
            const size_t smem = dkdv_wg_geom<D, BM, false, ST>::SMEM;
            if ((e = fw_cuda_smem_limit<dkdv_wg_kernel<T, D, BM, false, ST, OVL>>(smem)) != cudaSuccess) return e;
            dkdv_wg_kernel<T, D, BM, false, ST, OVL><<<grid_kv, 256, smem, s>>>(p);
        }
    } else if constexpr (QS == 0) { /* the 2-D tiled dK/dV kernel (BM 64, 8 warps, 128 keys) */
        static_assert(BM == 64 && W == 8, "the 2-D tiled kernel is BM 64, 8 warps");
        if (atomic_dq) {
            const size_t smem = dkdv2_geom<D, true>::SMEM;
            if ((e = fw_cuda_smem_limit<dkdv2_kernel<T, D, true>>(smem)) != cudaSuccess) return e;
            dkdv2_kernel<T, D, true><<<grid_kv, 256, smem, s>>>(p);
            return cudaGetLastError();
        }
        const size_t smem = dkdv2_geom<D, false>::SMEM;
        if ((e = fw_cuda_smem_limit<dkdv2_kernel<T, D, false>>(smem)) != cudaSuccess) return e;
        dkdv2_kernel<T, D, false><<<grid_kv, 256, smem, s>>>(p);
    } else if (atomic_dq) {
        const size_t smem = dkdv_geom<D, BM, W, true>::SMEM;
        if ((e = fw_cuda_smem_limit<dkdv_kernel<T, D, BM, W, true, (QS > 0 ? QS : BM)>>(smem)) != cudaSuccess) return e;
        dkdv_kernel<T, D, BM, W, true, (QS > 0 ? QS : BM)><<<grid_kv, W * 32, smem, s>>>(p);
        return cudaGetLastError();
    } else {
        const size_t smem = dkdv_geom<D, BM, W, false>::SMEM;
        if ((e = fw_cuda_smem_limit<dkdv_kernel<T, D, BM, W, false, (QS > 0 ? QS : BM)>>(smem)) != cudaSuccess) return e;
        dkdv_kernel<T, D, BM, W, false, (QS > 0 ? QS : BM)><<<grid_kv, W * 32, smem, s>>>(p);
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if constexpr (WQ == -2) return dq_ws_launch<T, D, BNQ, 3>(p, s); /* wgmma, producer warpgroup with TMA */
    if constexpr (WQ < 0) { /* the wgmma dQ kernel (sm_90a) */
        const size_t smem = dq_wg_geom<D, BNQ>::SMEM;
        if ((e = fw_cuda_smem_limit<dq_wg_kernel<T, D, BNQ>>(smem)) != cudaSuccess) return e;
        const dim3 grid_q((unsigned)((p.Lq + dq_wg_geom<D, BNQ>::BM - 1) / dq_wg_geom<D, BNQ>::BM), (unsigned)p.H, (unsigned)p.B);
        dq_wg_kernel<T, D, BNQ><<<grid_q, 256, smem, s>>>(p);
        return cudaGetLastError();
    }
    using GQ = dq_geom<D, (WQ > 0 ? WQ : 4), MTQ, BNQ>;
    if ((e = fw_cuda_smem_limit<dq_kernel<T, D, (WQ > 0 ? WQ : 4), MTQ, BNQ>>(GQ::SMEM)) != cudaSuccess) return e;
    const dim3 grid_q((unsigned)((p.Lq + GQ::BM - 1) / GQ::BM), (unsigned)p.H, (unsigned)p.B);
    dq_kernel<T, D, (WQ > 0 ? WQ : 4), MTQ, BNQ><<<grid_q, (WQ > 0 ? WQ : 4) * 32, GQ::SMEM, s>>>(p);
    return cudaGetLastError();
}

template <int D, int BM, int W, int QS, int WQ, int MTQ, int BNQ> static size_t smem_of(int atomic_dq)
{
    if (atomic_dq)
        return QS < 0 ? dkdv_wg_geom<D, BM, true>::SMEM : QS == 0 ? dkdv2_geom<D, true>::SMEM : dkdv_geom<D, BM, W, true>::SMEM;
    size_t a = QS < 0 ? dkdv_wg_geom<D, BM, false, (QS <= -2 ? 3 : 2)>::SMEM : QS == 0 ? dkdv2_geom<D, false>::SMEM : dkdv_geom<D, BM, W, false>::SMEM;
    if (QS == -4 && dkdv_ws_geom<D, BM, 3>::SMEM > a) a = dkdv_ws_geom<D, BM, 3>::SMEM;
    const size_t b = WQ < 0 ? dq_wg_geom<D, BNQ>::SMEM + (WQ == -2 ? 256 : 0) : dq_geom<D, (WQ > 0 ? WQ : 4), MTQ, BNQ>::SMEM;
    return a > b ? a : b;
}

/* fw_bwd_args → params: the window as ints (an unbounded side becomes Lq + Lk, which is as good). */
static inline params make_params(const fw_bwd_args *a)
{
    params p;
    p.q = a->q; p.k = a->k; p.v = a->v; p.dout = a->dout;
    p.dq = a->dq; p.dk = a->dk; p.dv = a->dv;
    p.lse2 = a->lse2; p.delta = a->delta; p.dq_acc = a->dq_acc;
    for (int i = 0; i < 3; i++) {
        p.q_s[i] = a->q_s[i]; p.k_s[i] = a->k_s[i]; p.v_s[i] = a->v_s[i]; p.do_s[i] = a->do_s[i];
        p.dq_s[i] = a->dq_s[i]; p.dk_s[i] = a->dk_s[i]; p.dv_s[i] = a->dv_s[i];
    }
    p.B = a->B; p.H = a->H; p.group = a->group; p.Lq = a->Lq; p.Lk = a->Lk; p.d = a->D;
    const long long big = (long long)a->Lq + a->Lk + 1;
    const long long wl = a->wl < big ? a->wl : big, wr = a->wr < big ? a->wr : big;
    p.has_window = wl < big || wr < big;
    p.wl = (int)wl; p.wr = (int)wr; p.off = (int)a->off;
    p.scale = a->scale;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    return p;
}

} /* namespace fwbt */

/* One file's variants and dispatch. LIST(X, D) expands X(D, index, BM, W, QS, WQ, MTQ, BNQ) per variant. */
#define FW_BWD_TC_ROW(D, I, BM, W, QS, WQ, MTQ, BNQ) {D, BM, W, QS, WQ, MTQ, BNQ},
#define FW_BWD_TC_CASE(D, I, BM, W, QS, WQ, MTQ, BNQ)                                                      \
    case I:                                                                                                \
        return dtype == FW_BWD_F16 ? fwbt::launch<__half, D, BM, W, QS, WQ, MTQ, BNQ>(p, atomic_dq, s)     \
                                   : fwbt::launch<__nv_bfloat16, D, BM, W, QS, WQ, MTQ, BNQ>(p, atomic_dq, s);
#define FW_BWD_TC_SMEM(D, I, BM, W, QS, WQ, MTQ, BNQ)                                                      \
    case I: return fwbt::smem_of<D, BM, W, QS, WQ, MTQ, BNQ>(atomic_dq);
#define FW_BWD_TC_DEFINE(D, LIST)                                                                          \
    const fw_bwd_tc_variant fw_bwd_tc_variants_d##D[] = {LIST(FW_BWD_TC_ROW, D)};                          \
    const int fw_bwd_tc_nvariants_d##D = (int)(sizeof fw_bwd_tc_variants_d##D / sizeof fw_bwd_tc_variants_d##D[0]); \
    cudaError_t fw_bwd_tc_launch_d##D(const fw_bwd_args *a, int dtype, int atomic_dq, int variant, cudaStream_t s) \
    {                                                                                                      \
        if (dtype != FW_BWD_F16 && dtype != FW_BWD_BF16) return cudaErrorInvalidValue;                     \
        const fwbt::params p = fwbt::make_params(a);                                                       \
        switch (variant) { LIST(FW_BWD_TC_CASE, D) default: return cudaErrorInvalidValue; }                \
    }                                                                                                      \
    size_t fw_bwd_tc_smem_d##D(int variant, int atomic_dq)                                                 \
    {                                                                                                      \
        switch (variant) { LIST(FW_BWD_TC_SMEM, D) default: return 0; }                                    \
    }

#endif /* __CUDACC__ */
#endif
