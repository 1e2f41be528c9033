/* Tile scheduling: which (query block, head, batch) a thread block computes, and where its sequence lies.
 *
 * static_tile_scheduler: one block per tile on a (query blocks, heads, batch) grid. Under a causal-like mask
 * later query blocks see more keys, so those run first (longest_first): the long blocks start in the first
 * wave and the short ones fill the tail.
 *
 * Where this is meant to grow (FlashAttention-3's TileScheduler and SeqlenInfo): a persistent scheduler
 * launches one block per SM and hands out tiles in a loop (get_tile / next_tile over a linear tile index,
 * longest first), and ragged batches get a seqlen_info that reads the sequence's row offset and length
 * from cu_seqlens on the device (the dense kernels read Lq, Lk and the (batch, head) strides of their
 * parameters). Kernels ask the scheduler for a tile_coord rather than reading blockIdx, so a persistent
 * scheduler changes only the loop around their body. */
#ifndef FW_PARTS_SCHEDULER_CUH
#define FW_PARTS_SCHEDULER_CUH

#include "backends/cuda/parts/mask.cuh"

namespace fwparts {

/* One tile of work: query block m_block (rows m_block·BM ..), head h, batch entry b. */
struct tile_coord {
    int m_block, h, b;
};

struct static_tile_scheduler {
    /* The grid of a problem with num_m_blocks query blocks per (head, batch). */
    static dim3 grid(int num_m_blocks, int heads, int batch)
    {
        return dim3((unsigned)num_m_blocks, (unsigned)heads, (unsigned)batch);
    }
    static __device__ __forceinline__ tile_coord get_tile(bool longest_first, int num_m_blocks)
    {
        tile_coord t;
        t.m_block = longest_first ? num_m_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
        t.h = blockIdx.y;
        t.b = blockIdx.z;
        return t;
    }
    /* The same, reading p.reverse_m (longest first) and p.num_m_blocks itself, the latter only when it
     * reverses: a branch where the form above selects (each kernel keeps the one it was measured with). */
    template <typename P> static __device__ __forceinline__ tile_coord get_tile(const P &p)
    {
        tile_coord t;
        t.m_block = p.reverse_m ? p.num_m_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
        t.h = blockIdx.y;
        t.b = blockIdx.z;
        return t;
    }
};

/* A query block's work (FlashAttention-3's BlockMN): its tile from the scheduler as rows m0 = m_block BM of
 * head h and batch entry b, the kv head hk its keys come from (GQA: group query heads a kv head), and the
 * n_tiles key tiles of BN from n_begin that its rows may see. P: kernel parameters with reverse_m (causal-
 * like masks: longest first), num_m_blocks, group and the band's fields (mask.cuh). */
struct query_block {
    int m0, h, b, hk, n_begin, n_tiles;
    template <int BM, int BN, typename P> static __device__ __forceinline__ query_block of(const P &p)
    {
        query_block k;
        const tile_coord t = static_tile_scheduler::get_tile(p);
        k.h = t.h;
        k.b = t.b;
        k.hk = k.h / p.group;
        k.m0 = t.m_block * BM;
        key_tile_range<BM, BN>(p, k.m0, k.n_begin, k.n_tiles);
        return k;
    }
};

} /* namespace fwparts */
#endif
