/* Tile scheduling: which (query block, head, batch) a thread block computes, and where its sequence lies.
 *
 * static_tile_scheduler: one block per tile on a (query blocks, heads, batch) grid. Under a causal-like mask
 * later query blocks see more keys, so those run first (longest_first): the long blocks start in the first
 * wave and the short ones fill the tail. Its other orders: heads first (a (heads, batch, query blocks) grid:
 * the heaviest query block of every head before the next heaviest, so the last blocks to start are light),
 * and split-KV (each tile's keys in `splits` ranges, one block each, the ranges in the grid's z with the batch).
 *
 * persistent_tile_scheduler: one block per SM (at most) loops over the tiles of a linear order, a head's query
 * blocks next to each other (longest first), then heads, then batch entries; single_tile_scheduler is the
 * static grid's one tile in the same interface, so that a kernel written for the loop runs either way.
 *
 * Where this is meant to grow (FlashAttention-3's SeqlenInfo): ragged batches get a seqlen_info that reads the
 * sequence's row offset and length from cu_seqlens on the device (the dense kernels read Lq, Lk and the
 * (batch, head) strides of their parameters). Kernels ask the scheduler for a tile_coord rather than reading
 * blockIdx, so another scheduler changes only the loop around their body. The backward's dK/dV kernels walk
 * the transpose: a key_block per block of keys, over the query tiles that can see them. */
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
    /* Heads first: the grid is (heads, batch, query blocks), the longest query blocks first. */
    static dim3 grid_heads_first(int num_m_blocks, int heads, int batch)
    {
        return dim3((unsigned)heads, (unsigned)batch, (unsigned)num_m_blocks);
    }
    static __device__ __forceinline__ tile_coord get_tile_heads_first()
    {
        tile_coord t;
        t.m_block = gridDim.z - 1 - blockIdx.z;
        t.h = blockIdx.x;
        t.b = blockIdx.y;
        return t;
    }
    /* Split-KV: the grid is (query blocks, heads, batch x splits), longest first; *split: this block's key range. */
    static dim3 grid_split(int num_m_blocks, int heads, int batch, int splits)
    {
        return dim3((unsigned)num_m_blocks, (unsigned)heads, (unsigned)(batch * splits));
    }
    static __device__ __forceinline__ tile_coord get_tile_split(int splits, int *split)
    {
        tile_coord t;
        *split = blockIdx.z % splits;
        t.m_block = gridDim.x - 1 - blockIdx.x;
        t.h = blockIdx.y;
        t.b = blockIdx.z / splits;
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

/* A persistent grid's loop: tiles first(), first() + stride(), ... below count (the host sizes the grid). The
 * head count is the kernel parameters' own, read where a tile is decoded (as the kernels were measured). */
struct persistent_tile_scheduler {
    int num_m_blocks;
    const int &heads;
    int count;
    __device__ __forceinline__ persistent_tile_scheduler(int num_m_blocks_, const int &heads_, int batch)
        : num_m_blocks(num_m_blocks_), heads(heads_), count(num_m_blocks_ * heads_ * batch)
    {
    }
    static dim3 grid(int blocks) { return dim3((unsigned)blocks, 1, 1); }
    __device__ __forceinline__ int first() const { return (int)blockIdx.x; }
    __device__ __forceinline__ int stride() const { return (int)gridDim.x; }
    __device__ __forceinline__ tile_coord tile(int it) const
    {
        tile_coord t;
        t.m_block = num_m_blocks - 1 - it % num_m_blocks;
        t.h = it / num_m_blocks % heads;
        t.b = it / (num_m_blocks * heads);
        return t;
    }
};
/* The static grid's tile (longest first) as a loop of one. */
struct single_tile_scheduler {
    static constexpr int count = 1;
    __device__ __forceinline__ single_tile_scheduler(int, const int &, int) {}
    __device__ __forceinline__ int first() const { return 0; }
    __device__ __forceinline__ int stride() const { return 1; }
    __device__ __forceinline__ tile_coord tile(int) const
    {
        return static_tile_scheduler::get_tile(true, (int)gridDim.x);
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
    /* The same with the order given (the backward's dQ blocks: longest first under any window). */
    template <int BM, int BN, typename P>
    static __device__ __forceinline__ query_block of(const P &p, bool longest_first, int num_m_blocks)
    {
        query_block k;
        const tile_coord t = static_tile_scheduler::get_tile(longest_first, num_m_blocks);
        k.h = t.h;
        k.b = t.b;
        k.hk = k.h / p.group;
        k.m0 = t.m_block * BM;
        key_tile_range<BM, BN>(p, k.m0, k.n_begin, k.n_tiles);
        return k;
    }
};

/* A key block's work (the backward's dK/dV blocks, grid (key blocks, kv heads, batch)): keys n0 .. n0 + BN - 1
 * of kv head hk and batch entry b, and the steps over the query tiles that can see them: m_tiles tiles of BM
 * rows from m_begin for each of the group's query heads, total steps (step it: query head head(it), rows from
 * row0(it)). Under a causal-like mask the first key blocks are seen by the most queries, so the grid's own
 * order is already the longest first. */
template <int BN, int BM> struct key_block {
    int n0, b, hk, m_begin, m_tiles, total;
    template <typename P> __device__ __forceinline__ void init(const P &p)
    {
        n0 = blockIdx.x * BN;
        hk = blockIdx.y;
        b = blockIdx.z;
        query_tile_range<BN, BM>(p, n0, m_begin, m_tiles);
        total = m_tiles * p.group;
    }
    template <typename P> __device__ __forceinline__ int head(const P &p, int it) const
    {
        return hk * p.group + it / m_tiles;
    }
    __device__ __forceinline__ int row0(int it) const { return m_begin + (it % m_tiles) * BM; }
};

} /* namespace fwparts */
#endif
