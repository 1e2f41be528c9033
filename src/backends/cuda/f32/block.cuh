/* A query block of the f32 kernels: its tile (from the scheduler, parts/scheduler.cuh), the Q/K/V bases of its
 * head and kv head, the key tiles its rows may see under the causal/window band and which of those need the
 * per-element mask, and the staggered start of the first wave's blocks.
 *
 * The band is fw_problem's normalised window (64-bit diag, wl, wr): key j is visible to row i iff
 * i + diag - wl <= j <= i + diag + wr and j < Lk. */
#ifndef FW_F32_BLOCK_CUH
#define FW_F32_BLOCK_CUH

#include "backends/cuda/f32/params.h"
#include "backends/cuda/f32/tiles.cuh"
#include "backends/cuda/parts/scheduler.cuh"

namespace fwf32 {

/* Visible key range [lo, hi) of query row i, clipped to [0, Lk]. */
__device__ __forceinline__ void key_range(const fw_f32_params &a, long long i, int *lo, int *hi)
{
    long long x = i + a.diag - a.wl, y = i + a.diag + a.wr + 1;
    *lo = x < 0 ? 0 : (x > a.Lk ? a.Lk : (int)x);
    *hi = y > a.Lk ? a.Lk : (y < 0 ? 0 : (int)y);
}

/* The keys a query block [m0, m0+rows) must visit, and whether a tile needs the mask. */
struct band {
    int n_begin, n_end; /* keys [n_begin, n_end) cover every visible key of the block */
    int lo_max, hi_min; /* tiles inside [lo_max, hi_min) are fully visible to every row */
};
__device__ __forceinline__ band block_band(const fw_f32_params &a, int m0, int rows)
{
    band bd;
    int lo0, hi0, lo1, hi1;
    key_range(a, m0, &lo0, &hi0);
    key_range(a, m0 + rows - 1, &lo1, &hi1);
    bd.n_begin = lo0; /* lo, hi are non-decreasing in i */
    bd.n_end = hi1;
    bd.lo_max = lo1;
    bd.hi_min = hi0;
    return bd;
}

/* A block's query tile, head, batch, the Q/K/V bases of its head and kv head, and the key tiles [t_begin, t_end)
 * of size BN its rows may see. */
struct query_block {
    int m0, rows, h, b, t_begin, t_end;
    band bd;
    const float *qp, *kp, *vp;
    __device__ __forceinline__ void init(const fw_f32_params &a, int BM, int BN, fwparts::tile_coord t)
    {
        h = t.h;
        b = t.b;
        const int hk = h / a.group;
        m0 = t.m_block * BM;
        rows = min(BM, a.Lq - m0);
        qp = a.q + b * a.qs[0] + h * a.qs[1] + (long long)m0 * a.qs[2];
        kp = a.k + b * a.ks[0] + hk * a.ks[1];
        vp = a.v + b * a.vs[0] + hk * a.vs[1];
        bd = block_band(a, m0, rows);
        t_begin = bd.n_begin / BN;
        t_end = bd.n_end > bd.n_begin ? (bd.n_end + BN - 1) / BN : t_begin;
    }
    /* The static grid's tile, longest first. heads_first (with an uneven mask): the launcher's grid is then heads
     * first (scheduler.cuh), so that the last blocks to start are the lightest (the exact kernel, causal L=2048:
     * the last heads' heavy blocks had run alone at the end); else head by head, which keeps a head's K/V in L2
     * for its query blocks. */
    __device__ __forceinline__ void init_static(const fw_f32_params &a, int BM, int BN, bool heads_first = false)
    {
        using fwparts::static_tile_scheduler;
        if (heads_first && a.uneven) init(a, BM, BN, static_tile_scheduler::get_tile_heads_first());
        else init(a, BM, BN, static_tile_scheduler::get_tile(true, (int)gridDim.x));
    }
};

/* query_block with the wgmma kernels' view: key tile i counted from t_begin, tiles of 64 keys. */
struct wg_query_block : query_block {
    int n_tiles;
    __device__ __forceinline__ void init(const fw_f32_params &a, int BM, int BN, fwparts::tile_coord t)
    {
        query_block::init(a, BM, BN, t);
        n_tiles = t_end - t_begin;
    }
    __device__ __forceinline__ int n0(int i, int BN) const { return (t_begin + i) * BN; }
    __device__ __forceinline__ bool edge(int i, int BN) const
    {
        return n0(i, BN) < bd.lo_max || n0(i, BN) + BN > bd.hi_min;
    }
    /* raw K (V) of key tile i (by NT threads), in the quad-row swizzle */
    template <int NT> __device__ __forceinline__ void load_raw_k(const fw_f32_params &a, float *dst, int i, int tid) const
    {
        const int n = n0(i, 64);
        load_tile<64, 64, 64, NT, QUAD_SWIZZLED>(dst, kp + (long long)n * a.ks[2], a.ks[2], a.Lk - n, a.D, a.vec16, tid);
    }
    template <int NT> __device__ __forceinline__ void load_raw_v(const fw_f32_params &a, float *dst, int i, int tid) const
    {
        const int n = n0(i, 64);
        load_tile<64, 64, 64, NT, QUAD_SWIZZLED>(dst, vp + (long long)n * a.vs[2], a.vs[2], a.Lk - n, a.D, a.vec16, tid);
    }
    /* both, V at dst + 64 x 64 */
    template <int NT> __device__ __forceinline__ void load_raw(const fw_f32_params &a, float *dst, int i, int tid) const
    {
        load_raw_k<NT>(a, dst, i, tid);
        load_raw_v<NT>(a, dst + 64 * 64, i, tid);
    }
};

/* The staggered start that the heuristics plan (fw_f32_plan): blocks delay_from .. delay_to - 1 in launch order
 * sleep delay cycles before their first copy. Asleep, not spinning, so that the SM's other block keeps the issue
 * slots. */
__device__ __forceinline__ void stagger(const fw_f32_params &a)
{
    if (a.delay <= 0) return;
    const long long order = blockIdx.x + gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    if (order < a.delay_from || order >= a.delay_to) return;
    const long long t0 = clock64();
    while (clock64() - t0 < a.delay) __nanosleep(64);
}

} /* namespace fwf32 */
#endif
