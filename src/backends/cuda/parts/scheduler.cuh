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
 * varlen_tile_scheduler: ragged batches (FlashAttention-3's SeqlenInfo): a linear grid of (slot, head) in
 * which each sequence owns one slot per query block, and a seq_span per block read from the cumulative
 * offsets on the device (the dense kernels read Lq, Lk and the (batch, head) strides of their parameters).
 * Kernels ask the scheduler for a tile_coord rather than reading blockIdx, so another scheduler changes only
 * the loop around their body. The backward's dK/dV kernels walk the transpose: a key_block per block of keys,
 * over the query tiles that can see them. */
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
    /* The other order, for causal-like masks: heads and batch entries fastest, query blocks longest first (the
     * heaviest block of every head before the next heaviest), dealt out in a snake: every other round of the
     * grid's blocks runs backwards, so a block that drew a heavier tile in one round draws a lighter one in the
     * next (the last round, if partial, runs forwards). A stride over the query-block-fastest order would hand
     * each block the same few query blocks of every head (the stride modulo their count), some only heavy ones.
     * The forward's heuristics (fwd/heuristics.cu: persistent_busiest) follow both orders on the host to count a
     * block's work: a change here changes them there. */
    __device__ __forceinline__ tile_coord tile_heads_first(int it) const
    {
        const int g = (int)gridDim.x, round = it / g;
        if ((round & 1) && (round + 1) * g <= count) it = round * g + g - 1 - it % g;
        tile_coord t;
        const int hb = count / num_m_blocks;
        t.m_block = num_m_blocks - 1 - it / hb;
        t.h = it % heads;
        t.b = it % hb / heads;
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
        return at<BM, BN>(p, static_tile_scheduler::get_tile(p));
    }
    /* The same for a given tile (a ragged batch's: P then describes its sequence alone). */
    template <int BM, int BN, typename P> static __device__ __forceinline__ query_block at(const P &p, const tile_coord &t)
    {
        query_block k;
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
    template <typename P> __device__ __forceinline__ void init(const P &p) { init_at(p, blockIdx.x, blockIdx.y, blockIdx.z); }
    /* The same for key block n_block of kv head hk_, batch entry b_ (a ragged batch's: P then describes its
     * sequence alone). */
    template <typename P> __device__ __forceinline__ void init_at(const P &p, int n_block, int hk_, int b_)
    {
        n0 = n_block * BN;
        hk = hk_;
        b = b_;
        query_tile_range<BN, BM>(p, n0, m_begin, m_tiles);
        total = m_tiles * p.group;
    }
    template <typename P> __device__ __forceinline__ int head(const P &p, int it) const
    {
        return hk * p.group + it / m_tiles;
    }
    __device__ __forceinline__ int row0(int it) const { return m_begin + (it % m_tiles) * BM; }
};

/* One sequence of a ragged batch: its first query and key rows in the packed tensors and its lengths. */
struct seq_span {
    int64_t q_row0, k_row0;
    int lq, lk;
    int seq; /* its index in the batch */
};

/* Rows [row0, row0 + len) of a sequence from its two raw offsets a, e, clamped exactly as the serving
 * kernels' seq_info does (include/flashwatt.h's contract for offsets that live on the device): a into
 * [0, total], e into [a, total], the length cut to max_len (the host's max_seqlen; rows beyond are not
 * written). Every row formed from the result lies inside the packed tensor. */
__device__ __forceinline__ int64_t clamp_offset(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }
__device__ __forceinline__ void clamp_rows(int32_t a, int32_t e, int64_t total, int max_len, int64_t &row0, int &len)
{
    row0 = clamp_offset(a, 0, total);
    const int64_t end = clamp_offset(e, row0, total);
    len = (int)(end - row0 < (int64_t)max_len ? end - row0 : (int64_t)max_len);
}

/* Ragged batches on a linear grid of (slot, head), the head fastest (query heads that share a KV head run
 * side by side). Sequence b owns the slots from floor(a_b / BM) + b (a_b its first query row), one per
 * query block, longest first under causal-like masks; KEYS (the backward's dK/dV blocks): the slots of its
 * key blocks instead, from its first key row, one per block of BM keys. These ranges never overlap and all end before
 * floor(total_q / BM) + B, so the grid needs only host-known sizes (the lengths live on the device: no
 * synchronisation, CUDA graphs stay valid) and holds at most one empty slot per sequence, where a grid of
 * max_seqlen_q's blocks per sequence leaves most of a spread batch empty. A block finds its sequence with
 * a 32-way search of the offsets in each warp (one round of loads up to 32 sequences, two up to 1024);
 * a slot past its sequence's blocks has no work. S: batch, cu_q, cu_k, total_q, total_k (fw_cuda_seqs). */
struct varlen_tile_scheduler {
    /* Blocks of the grid (the caller checks that they fit 2^31 - 1). */
    static int64_t blocks(int64_t total_q, int64_t batch, int64_t heads, int bm) { return (total_q / bm + batch) * heads; }

    /* This block's tile (b = 0: the packed tensors' one batch entry; m_block: its query block, KEYS: its key
     * block) and its sequence; false: no work. Every lane of the calling warp takes part. */
    template <int BM, bool KEYS = false, class S>
    static __device__ __forceinline__ bool get_tile(const S &s, int heads, int max_q, int max_k, bool longest_first,
                                                    tile_coord &t, seq_span &q)
    {
        const unsigned all = 0xffffffffu;
        const int lane = (int)(threadIdx.x & 31);
        const int64_t slot = (int64_t)(blockIdx.x / (unsigned)heads);
        int lo = 0, n = s.batch; /* the sequence is among lo .. lo + n - 1 */
        while (n > 32) {         /* 32 evenly spaced candidates; keep the stretch after the last that starts by slot */
            const int stride = (n + 31) / 32, i = lane * stride;
            bool starts = false;
            if (i < n) { /* the offsets of the side that owns the slots */
                starts = clamp_offset(__ldg((KEYS ? s.cu_k : s.cu_q) + lo + i), 0, KEYS ? s.total_k : s.total_q) / BM +
                             lo + i <= slot;
            }
            const unsigned m = __ballot_sync(all, starts);
            if (!m) return false;
            const int j = 31 - __clz(m);
            lo += j * stride;
            n = min(stride, n - j * stride);
        }
        int32_t qa = 0, qe = 0, ka = 0, ke = 0;
        if (lane < n) {
            qa = __ldg(s.cu_q + lo + lane);
            qe = __ldg(s.cu_q + lo + lane + 1);
            ka = __ldg(s.cu_k + lo + lane);
            ke = __ldg(s.cu_k + lo + lane + 1);
        }
        int64_t row0;
        int len;
        if (KEYS) clamp_rows(ka, ke, s.total_k, max_k, row0, len);
        else clamp_rows(qa, qe, s.total_q, max_q, row0, len);
        const int64_t first = row0 / BM + lo + lane; /* the sequence's first slot */
        const unsigned m = __ballot_sync(all, lane < n && first <= slot);
        if (!m) return false;
        const int j = 31 - __clz(m);
        qa = __shfl_sync(all, qa, j);
        qe = __shfl_sync(all, qe, j);
        ka = __shfl_sync(all, ka, j);
        ke = __shfl_sync(all, ke, j);
        clamp_rows(qa, qe, s.total_q, max_q, q.q_row0, q.lq);
        clamp_rows(ka, ke, s.total_k, max_k, q.k_row0, q.lk);
        q.seq = lo + j;
        const int nb = ((KEYS ? q.lk : q.lq) + BM - 1) / BM;
        const int64_t r = slot - ((KEYS ? q.k_row0 : q.q_row0) / BM + lo + j);
        if (r >= nb) return false;
        t.m_block = longest_first ? nb - 1 - (int)r : (int)r;
        t.h = (int)(blockIdx.x % (unsigned)heads);
        t.b = 0;
        return true;
    }
};

} /* namespace fwparts */
#endif
