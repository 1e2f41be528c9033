/* The causal / sliding-window band and the key-length boundary on tiles: which key tiles a block of query
 * rows visits, which of those need a per-element mask, and that mask on an accumulator fragment.
 *
 * Key j is visible to query row i iff j < Lk and, with a window, i + off - wl <= j <= i + off + wr (off =
 * Lk - Lq aligns the band bottom-right; causal is wr = 0). P: any kernel parameter struct with Lq, Lk,
 * has_window, off, wl, wr (ints clamped on the host so that these sums cannot overflow). */
#ifndef FW_PARTS_MASK_CUH
#define FW_PARTS_MASK_CUH

#include <math.h>

namespace fwparts {

/* Does the tile of BM query rows from m0 × BN keys from n0 need the per-element mask: it crosses Lk, or
 * (with a window or causal mask) a window edge. Tiles wholly inside the band do not. */
template <int BM, int BN, typename P>
__device__ __forceinline__ bool tile_needs_mask(const P &p, int m0, int n0)
{
    bool need = n0 + BN > p.Lk;
    if (p.has_window) {
        const bool full = (m0 + BM - 1 + p.off - p.wl <= n0) && (m0 + p.off + p.wr >= n0 + BN - 1);
        need = need || !full;
    }
    return need;
}

/* The key tiles that query rows m0 .. m0 + BM - 1 may see: n_tiles tiles of BN keys from n_begin (a
 * multiple of BN); tiles wholly outside the window/causal band are never listed. (Also on the host: the forward's
 * heuristics count a grid's work with it.) */
template <int BM, int BN, typename P>
__host__ __device__ __forceinline__ void key_tile_range(const P &p, int m0, int &n_begin, int &n_tiles)
{
    const int mlast = min(m0 + BM, p.Lq) - 1;
    int lo = 0, hi = p.Lk;
    if (p.has_window) {
        lo = max(0, m0 + p.off - p.wl);
        hi = min(p.Lk, mlast + p.off + p.wr + 1);
    }
    n_begin = (lo / BN) * BN;
    n_tiles = hi > n_begin ? (hi - n_begin + BN - 1) / BN : 0;
}

/* The query tiles that keys n0 .. n0 + BN - 1 may be seen from (the backward's dK/dV blocks): m_tiles tiles of
 * BM rows from m_begin (a multiple of BM); tiles wholly outside the band are never listed. */
template <int BN, int BM, typename P>
__device__ __forceinline__ void query_tile_range(const P &p, int n0, int &m_begin, int &m_tiles)
{
    const int n1 = min(n0 + BN, p.Lk);
    int qlo = 0, qhi = p.Lq; /* query rows that can see keys n0..n1-1 */
    if (p.has_window) {
        qlo = max(0, n0 - p.off - p.wr);
        qhi = min(p.Lq, n1 - 1 - p.off + p.wl + 1);
    }
    m_begin = (qlo / BM) * BM;
    m_tiles = qhi > m_begin ? (qhi - m_begin + BM - 1) / BM : 0;
}

/* Is key j visible to query row i (the per-element test of the backward's recomputed P). */
template <typename P> __device__ __forceinline__ bool key_visible(const P &p, int i, int j)
{
    return j < p.Lk && (!p.has_window || (j >= i + p.off - p.wl && j <= i + p.off + p.wr));
}

/* -inf into the invisible elements of a warp's score fragment: MT m16 tiles of rows m0 + w.wrow0 + 16 mt
 * (+ w.g, + w.g + 8; m0: the block's first row, w.wrow0: the warp's within the block) by NN n8 tiles of keys
 * from n0 (the mma C layout, mma.cuh; w.t4: the lane's column pair). */
template <int MT, int NN, typename P, typename W>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NN][4], const P &p, int m0, int n0, const W &w)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = m0 + w.wrow0 + mt * 16 + w.g + r * 8;
            int jlo = 0, jhi = p.Lk; /* visible: jlo <= j < jhi */
            if (p.has_window) {
                jlo = max(jlo, i + p.off - p.wl);
                jhi = min(jhi, i + p.off + p.wr + 1);
            }
#pragma unroll
            for (int j = 0; j < NN; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = n0 + j * 8 + w.t4 * 2 + e;
                    if (col < jlo || col >= jhi) s[mt][j][r * 2 + e] = -INFINITY;
                }
        }
}

} /* namespace fwparts */
#endif
