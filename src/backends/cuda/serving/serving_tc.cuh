/* cuda-flash's serving kernel: FlashAttention-2 on tensor cores (mma.sync m16n8k16, f16/bf16, f32
 * accumulation, sm_80+) for ragged batches, KV caches and decode.
 *
 * A block owns BM packed rows of one (sequence, KV head, key chunk): packed row m is query position
 * m / group of query head hk·group + m % group, so the query heads that share a KV head share every K/V
 * tile (decode reads each KV head once, not once per query head). Its four warps form WM = BM/16 row
 * groups × WN = 4/WM key groups: warp (wm, wn) owns rows wm·16 .. +15 and keys wn·BN/WN .. of every
 * tile, with its own online softmax; the WN partial states of a row group are merged through shared
 * memory at the end. This kernel orchestrates the loads; the math is serving_tc_rows.cuh (query rows as
 * the MMA's M dimension) or, for BM = 8 (decode with up to 8 query heads a KV head: the four warps split
 * the keys), serving_tc_keys.cuh (keys as M: no m16 tile half padding). K/V tiles come in 16-byte cp.async
 * chunks through an ST-stage ring of unpadded rows with XOR-swizzled chunks (serving_load.cuh: kv_chunk;
 * per-thread runs of rows, pages looked up once per run or per row from a shared slice of the block table). A tile with a key on a page outside the pool
 * is masked key by key from that slice; the others skip the mask. With split-KV the block writes a
 * normalised f32 partial and its LSE to the workspace, merged by fwsrv::merge_kernel. */
#ifndef FW_CUDA_SERVING_TC_CUH
#define FW_CUDA_SERVING_TC_CUH

#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "serving_common.cuh"
#include "serving_load.cuh"
#include "serving_tc_keys.cuh"
#include "serving_tc_rows.cuh"

/* Launch of one configuration at a dynamic shared-memory size (>= the configuration's, larger to cap
 * its blocks per SM); blocks per SM at that size (0 where the runtime cannot say). */
typedef cudaError_t (*fw_srv_launch_fn)(const fw_srv_params *p, size_t smem, cudaStream_t stream);
typedef int (*fw_srv_occupancy_fn)(size_t smem);

/* One compiled configuration of the kernel: head dim (padded), rows, keys a tile, stages. */
typedef struct fw_srv_tc_variant {
    int d, bm, bn, stages;
    size_t smem, smem_paged; /* dynamic shared memory of a contiguous (ragged, dense) call and of a paged one */
    fw_srv_launch_fn launch[2];          /* f16, bf16 */
    fw_srv_occupancy_fn occupancy[2];
} fw_srv_tc_variant;

extern "C" {
extern const fw_srv_tc_variant fw_srv_tc_variants_d64[], fw_srv_tc_variants_d128[], fw_srv_tc_variants_d256[];
extern const int fw_srv_tc_nvariants_d64, fw_srv_tc_nvariants_d128, fw_srv_tc_nvariants_d256;
}

namespace fwsrv {

template <int D, int BM, int BN, int ST> struct tc_shape {
    static constexpr int W = 4, NT = 128;
    static constexpr int WM = BM < 16 ? 1 : BM / 16, WN = W / WM;
    static constexpr int SBW = BN / WN;              /* keys of a tile a warp takes */
    static constexpr int SB = SBW < 64 ? SBW : 64;  /* keys of one softmax sub-tile */
    static constexpr int SD = D + 8;                 /* Q's shared row stride (elements): ldmatrix conflict-free */
    static constexpr int SDF = D + 8;                /* f32 merge rows (floats): float2 stores conflict-free */
    static constexpr size_t Q_BYTES = (size_t)BM * SD * 2;
    static constexpr size_t STAGE_BYTES = (size_t)BN * D * 2; /* K/V rows unpadded, chunks swizzled (kv_chunk) */
    /* paged only: the block-table slices of ST tiles, int32 [ST][BN] (warp w's at [w·BN/4, (w + 1)·BN/4):
     * the pages of the rows it loads). A contiguous call launches without them (SMEM), a paged one with
     * them (SMEM_PAGED). */
    static constexpr size_t IDS_OFFSET = Q_BYTES + 2 * (size_t)ST * STAGE_BYTES;
    static constexpr size_t MAIN_PAGED = IDS_OFFSET + (size_t)ST * BN * 4;
    static constexpr size_t ML_OFFSET = Q_BYTES;                                 /* merge: (m, l)[W][16] */
    static constexpr size_t O_OFFSET = Q_BYTES + (size_t)W * 16 * 2 * 4;         /* merge: O[W][16][SDF] */
    static constexpr size_t MERGE = O_OFFSET + (size_t)W * 16 * SDF * 4;
    static constexpr size_t SMEM = ((IDS_OFFSET > MERGE ? IDS_OFFSET : MERGE) + 15) / 16 * 16;
    static constexpr size_t SMEM_PAGED = ((MAIN_PAGED > MERGE ? MAIN_PAGED : MERGE) + 15) / 16 * 16;
};

/* The math a block height runs: keys as the MMA's M dimension for 8 rows, query rows otherwise. */
template <typename T, int D, int BM, int SB, int SD, int WN> struct tc_math {
    using type = rows_m_math<T, D, SB, SD, WN>;
};
template <typename T, int D, int SB, int SD, int WN> struct tc_math<T, D, 8, SB, SD, WN> {
    using type = keys_m_math<T, D, SB, SD, 4>;
};

template <typename T, int D, int BM, int BN, int ST>
__global__ void __launch_bounds__(128) tc_kernel(const fw_srv_params p)
{
    using S = tc_shape<D, BM, BN, ST>;
    constexpr int NT = S::NT, WN = S::WN, SBW = S::SBW, SB = S::SB, SD = S::SD;
    constexpr int CPR = D / 8, RS = NT / CPR; /* Q loads: 16-byte chunks a row; rows a pass */
    static_assert(S::W % S::WM == 0 && SBW % SB == 0 && SB % 16 == 0, "tile shape");
    static_assert(NT % CPR == 0 && BN <= NT, "chunks (and a tile's page ids) must divide among the threads");
    static_assert(S::W == 4 && BN / 4 <= 32, "a warp loads BN / 4 rows and copies their page ids, one a lane");
    static_assert(BM == 8 ? WN == 4 : BM % 16 == 0, "8 rows: the four warps split the keys");

    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t sQa = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t sKa = sQa + (uint32_t)S::Q_BYTES;
    const uint32_t sVa = sKa + (uint32_t)(ST * S::STAGE_BYTES);
    const uint32_t sIa = sQa + (uint32_t)S::IDS_OFFSET;
    const int32_t *ids = reinterpret_cast<const int32_t *>(smem + S::IDS_OFFSET); /* paged only */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wn = warp % WN;
    const int split = (int)(blockIdx.x % (unsigned)p.splits);
    int mb = (int)(blockIdx.x / (unsigned)p.splits);
    if (p.reverse_m) mb = p.m_blocks - 1 - mb;
    const int hk = blockIdx.y, b = blockIdx.z;
    const seq_t sq = seq_info(p, b);
    const int rows = sq.lq * p.group; /* this sequence's packed rows */
    const int m0 = mb * BM;
    if (m0 >= rows) return; /* the whole block: nothing of this sequence here */

    const int i_first = m0 / p.group, i_last = (min(m0 + BM, rows) - 1) / p.group;
    int n_begin, n_tiles;
    block_key_tiles<BN>(p, sq, i_first, i_last, split, n_begin, n_tiles);

    /* Q: packed rows m0 .. m0 + BM - 1, zero beyond the sequence's rows and past d. */
    {
        const T *qg = reinterpret_cast<const T *>(p.q) + q_base(p, p.q_s, b, sq);
        const int col = tid % CPR;
#pragma unroll
        for (int c = 0; c < (BM * CPR + NT - 1) / NT; c++) {
            const int r = tid / CPR + c * RS, pm = m0 + r;
            if (BM * CPR % NT != 0 && r >= BM) break;
            const bool ok = pm < rows && col * 8 < p.d;
            const T *src = qg;
            if (ok) {
                const int i = pm / p.group, h = hk * p.group + pm % p.group;
                src = qg + (int64_t)h * p.q_s[1] + (int64_t)i * p.q_s[2] + col * 8;
            }
            fwparts::cp_async16(sQa + (uint32_t)((r * SD + col * 8) * 2), src, ok ? 16 : 0);
        }
    }

    /* K/V tiles: tile m holds keys n_begin + m·BN .., in stage m % ST; warp w loads rows w·BN/4 .. of it
     * (serving_load.cuh) and, paged, first copies the page ids of those rows (the slice of tile m, in
     * ring slot m % ST, AHEAD tiles before the tile's loads are issued). With WN = 4 (BM = 16: decode)
     * a warp computes on exactly the rows it loads, so each warp runs its own pipeline: it issues tile
     * it + ST - 1 into the stage it finished with, then waits for tile it, with no block barrier (ST
     * tiles in flight while it waits). Otherwise the block waits for tile it, synchronises, and reuses
     * the stage every warp finished with (ST - 1 tiles in flight). */
    constexpr bool WARP_PIPE = WN == 4;
    constexpr int AHEAD = WARP_PIPE ? ST : ST - 1;
    kv_loader<T, D, BN, NT> ld;
    ld.init(p, sq, b, hk, tid);
    const int wrows = warp * (BN / 4); /* the first row of a tile this warp loads */
    const int32_t *bt = p.paged ? p.block_table + (int64_t)b * p.bt_stride : nullptr;
    auto fetch_ids = [&](int m) {
        if (m < n_tiles)
            fetch_page_ids<BN / 4>(p, bt, n_begin + m * BN + wrows, sq.lk,
                                   sIa + (uint32_t)(((m % ST) * BN + wrows) * 4), lane);
    };
    unsigned bad_stages = 0; /* bit s: the tile in stage s has a key on a page outside the pool (warp- or block-uniform) */
    int bad_pending = 0;     /* !WARP_PIPE: this thread issued such a key since the last barrier */
    auto issue = [&](int m) { /* tile m, and the page ids of tile m + AHEAD; the caller commits */
        const int n0 = n_begin + m * BN, stage = m % ST;
        const uint32_t sk = sKa + (uint32_t)(stage * S::STAGE_BYTES), sv = sVa + (uint32_t)(stage * S::STAGE_BYTES);
        const int32_t *wids = ids + stage * BN + wrows;
        const bool bad = n0 + BN <= sq.lk ? ld.template issue<true>(p, n0, wrows, sq.lk, sk, sv, wids)
                                          : ld.template issue<false>(p, n0, wrows, sq.lk, sk, sv, wids);
        if (p.paged) {
            if (WARP_PIPE) {
                const unsigned bit = 1u << stage;
                bad_stages = __any_sync(0xffffffffu, bad) ? bad_stages | bit : bad_stages & ~bit;
            } else {
                bad_pending |= bad;
            }
            __syncwarp(); /* every lane has read the slot's ids before they are replaced */
            fetch_ids(m + AHEAD);
        }
    };

    /* Paged: the slices of tiles 0 .. AHEAD - 1, before any K/V load that needs them; Q lands with them. */
    if (p.paged) {
#pragma unroll 1
        for (int m = 0; m < AHEAD; m++) fetch_ids(m);
        fwparts::cp_async_commit();
        fwparts::cp_async_wait<0>();
        __syncwarp();
    }
#pragma unroll 1
    for (int s = 0; s < ST - 1; s++) {
        if (s < n_tiles) issue(s);
        fwparts::cp_async_commit();
    }

    typename tc_math<T, D, BM, SB, SD, WN>::type math;
    math.init(p, sq, m0, warp, lane);

    for (int it = 0; it < n_tiles; it++) {
        if (WARP_PIPE) {
            __syncwarp(); /* every lane's reads of tile it - 1's stage are done before the copies into it */
            if (it + ST - 1 < n_tiles) issue(it + ST - 1); /* into the stage of tile it - 1, done with */
            fwparts::cp_async_commit();
            fwparts::cp_async_wait<ST - 1>();
            __syncwarp();
            if (it == 0) __syncthreads(); /* Q: every warp's loads */
        } else {
            fwparts::cp_async_wait<ST - 2>();
            if (p.paged) {
                /* the tiles issued since the last barrier: the prologue's (it = 0) or tile it + ST - 2 */
                const unsigned bits = it == 0 ? (1u << (ST - 1)) - 1u : 1u << ((it + ST - 2) % ST);
                bad_stages = __syncthreads_or(bad_pending) ? bad_stages | bits : bad_stages & ~bits;
                bad_pending = 0;
            } else {
                __syncthreads();
            }
            if (it + ST - 1 < n_tiles) issue(it + ST - 1);
            fwparts::cp_async_commit();
        }
        if (it == 0) math.load_q(sQa);
        const int slot = it % ST, n0 = n_begin + it * BN;
        const bool bad_tile = (bad_stages >> slot) & 1u;
        const bool need_mask = bad_tile || n0 + BN > sq.lk ||
                               (p.has_window && !(i_last + sq.off - p.wl <= n0 && i_first + sq.off + p.wr >= n0 + BN - 1));
#pragma unroll 1
        for (int sb = 0; sb < SBW / SB; sb++) {
            const int kt = wn * SBW + sb * SB; /* first key of the sub-tile within the tile */
            math.subtile(p, sQa, sKa + (uint32_t)(slot * S::STAGE_BYTES + kt * D * 2),
                         sVa + (uint32_t)(slot * S::STAGE_BYTES + kt * D * 2), kt, n0, need_mask, bad_tile, bt);
        }
    }

    fwparts::cp_async_wait<0>();
    __syncthreads(); /* the K/V ring is free: the merge reuses it */
    math.finish(p, sq, smem, S::ML_OFFSET, S::O_OFFSET, b, hk, split, m0, rows);
}

/* The kernel's shared-memory attributes, once per device: the device's whole opt-in size (a launch may pad its
 * dynamic size to cap the blocks per SM) and the largest carveout (K/V bypass L1). */
template <typename T, int D, int BM, int BN, int ST> static cudaError_t tc_prepare()
{
    return fw_cuda_smem_limit<tc_kernel<T, D, BM, BN, ST>>(0, true);
}

template <typename T, int D, int BM, int BN, int ST> static int tc_occupancy(size_t smem)
{
    if (tc_prepare<T, D, BM, BN, ST>() != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return blocks_per_sm<tc_kernel<T, D, BM, BN, ST>>(smem);
}

/* Grid: x = m_blocks · splits (split fastest), y = KV heads, z = batch. */
template <typename T, int D, int BM, int BN, int ST>
static cudaError_t tc_launch(const fw_srv_params *p, size_t smem, cudaStream_t stream)
{
    const cudaError_t e = tc_prepare<T, D, BM, BN, ST>();
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)p->m_blocks * (unsigned)p->splits, (unsigned)p->H_kv, (unsigned)p->B);
    tc_kernel<T, D, BM, BN, ST><<<grid, 128, smem, stream>>>(*p);
    return fw_cuda_launch_error();
}

} /* namespace fwsrv */

#define FW_SRV_TC_VARIANT(D, BM, BN, ST)                                                                   \
    {D, BM, BN, ST, fwsrv::tc_shape<D, BM, BN, ST>::SMEM, fwsrv::tc_shape<D, BM, BN, ST>::SMEM_PAGED,           \
     {fwsrv::tc_launch<__half, D, BM, BN, ST>, fwsrv::tc_launch<__nv_bfloat16, D, BM, BN, ST>},            \
     {fwsrv::tc_occupancy<__half, D, BM, BN, ST>, fwsrv::tc_occupancy<__nv_bfloat16, D, BM, BN, ST>}}

#endif
