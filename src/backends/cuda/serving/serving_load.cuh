/* The K/V tile loads of cuda-flash's serving kernel (serving_tc.cuh).
 *
 * Thread tid copies the 16-byte chunk column lcol = tid % (D / 8) of RPT consecutive rows t0 .. t0 +
 * RPT - 1 of every tile (t0 = (tid / (D / 8)) · RPT, RPT = 4 .. 16) into the stage's swizzled rows
 * (kv_chunk): a warp copies whole rows per instruction, warp w copies rows w·BN/4 .. (w + 1)·BN/4 - 1 (with four warps side by side on the keys,
 * exactly the rows it computes on), and a thread's rows share a page wherever the page size is a
 * multiple of RPT. Addresses are a per-thread 64-bit base plus 32 x 32 -> 64-bit products of byte
 * strides below 2^32 (the host checks them): a few instructions a row instead of 64-bit products of
 * 64-bit strides.
 *
 * Paged caches read the page ids of a warp's rows from a slice of the block-table row that the warp's
 * lanes copy into shared memory (cp.async, tiles ahead of use; serving_tc.cuh keeps the ring). How a
 * row's page is found is fixed per call (uniform branches, per tile):
 *   KV_PAGE_RUN   page size a multiple of RPT (every multiple of 16, e.g. 16 .. 256, at every head dim
 *                 and key tile compiled): one id per thread and tile, its RPT rows consecutive rows of
 *                 one page;
 *   KV_PAGE_ROW1  page size 1: RPT ids per thread, read 4 at a time (16-byte shared loads);
 *   KV_PAGE_ROW   any other page size: an id per row, the slot from page_div (no divide instruction).
 * A page id outside [0, num_pages) is never dereferenced: its rows are zero-filled (cp.async with 0
 * source bytes, from page 0), the issuing thread reports it, and the kernel masks that tile's keys. Rows
 * at or past the sequence's keys are zero-filled from an address inside the tensors. */
#ifndef FW_CUDA_SERVING_LOAD_CUH
#define FW_CUDA_SERVING_LOAD_CUH

#include "backends/cuda/parts/copy.cuh"
#include "serving_common.cuh"

namespace fwsrv {

enum kv_mode { KV_CONTIG = 0, KV_PAGE_RUN = 1, KV_PAGE_ROW1 = 2, KV_PAGE_ROW = 3 };

/* Copies the page ids of the table row bt that keys r0 .. r0 + ROWS - 1 (those below lk) use into shared
 * memory at sids, one a lane: entry e is the page of slot page_div(r0) + e (at most ROWS entries). */
template <int ROWS>
__device__ __forceinline__ void fetch_page_ids(const fw_srv_params &p, const int32_t *bt, int r0, int lk,
                                               uint32_t sids, int lane)
{
    if (r0 >= lk) return;
    const uint32_t s_lo = page_div(p, (uint32_t)r0), s_hi = page_div(p, (uint32_t)(min(r0 + ROWS, lk) - 1));
    if (lane <= (int)(s_hi - s_lo)) fwparts::cp_async4(sids + (uint32_t)lane * 4u, bt + s_lo + lane, 4);
}

/* base + a·b, a 32 x 32 -> 64-bit multiply-add (a page or row index times a byte stride). */
__device__ __forceinline__ const char *mad_wide(uint32_t a, uint32_t b, const char *base)
{
    uint64_t r;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r) : "r"(a), "r"(b), "l"(reinterpret_cast<uint64_t>(base)));
    return reinterpret_cast<const char *>(r);
}

/* Byte offset of 16-byte chunk `chunk` of row `row` in a K or V stage: rows of D elements with no padding, the
 * chunk stored at chunk ^ (row % 8) of its row, so that the eight consecutive rows an ldmatrix matrix reads at one
 * chunk column fall in distinct banks, and every row starts on a 128-byte boundary (D >= 64). */
template <int D> __device__ __forceinline__ uint32_t kv_chunk(int row, int chunk)
{
    static_assert(D % 64 == 0, "at least eight 16-byte chunks a row");
    return (uint32_t)(row * D * 2 + ((chunk ^ (row & 7)) << 4));
}

/* A page id inside the pool. */
__device__ __forceinline__ bool page_ok(const fw_srv_params &p, int page)
{
    return (uint32_t)page < (uint32_t)p.num_pages;
}

template <typename T, int D, int BN, int NT> struct kv_loader {
    static constexpr int CPR = D / 8, RS = NT / CPR, RPT = BN / RS;
    static_assert(NT % CPR == 0 && BN % RS == 0 && RPT % 4 == 0, "rows must divide among the threads");

    const char *kb, *vb; /* contiguous: key 0 of this (sequence, KV head) + row t0 + chunk lcol; paged: head hk + chunk lcol */
    uint32_t csize;                    /* 16, or 0 for a chunk column at or past d (zero-filled) */
    int t0, lcol;
    int mode;

    __device__ __forceinline__ void init(const fw_srv_params &p, const seq_t &s, int b, int hk, int tid)
    {
        lcol = tid % CPR;
        t0 = (tid / CPR) * RPT;
        csize = lcol * 8 < p.d ? 16u : 0u;
        int64_t ko = (int64_t)hk * p.k_s[1], vo = (int64_t)hk * p.v_s[1];
        if (!p.paged) {
            ko = key_base(p, p.k_s, b, hk, s);
            vo = key_base(p, p.v_s, b, hk, s);
        }
        kb = reinterpret_cast<const char *>(p.k) + (ko + lcol * 8) * (int64_t)sizeof(T);
        vb = reinterpret_cast<const char *>(p.v) + (vo + lcol * 8) * (int64_t)sizeof(T);
        if (!p.paged) {
            kb = mad_wide((uint32_t)t0, p.k_row_bytes, kb);
            vb = mad_wide((uint32_t)t0, p.v_row_bytes, vb);
        }
        mode = !p.paged ? KV_CONTIG : p.page_size == 1 ? KV_PAGE_ROW1 : p.page_size % RPT == 0 ? KV_PAGE_RUN : KV_PAGE_ROW;
    }

    /* Row r (of this thread's RPT) of the tile at shared stage addresses sk, sv: ok, or zero-filled. */
    __device__ __forceinline__ void row(uint32_t sk, uint32_t sv, int r, const char *ka, const char *va, bool ok) const
    {
        const uint32_t so = kv_chunk<D>(t0 + r, lcol);
        fwparts::cp_async16(sk + so, ka, ok ? (int)csize : 0);
        fwparts::cp_async16(sv + so, va, ok ? (int)csize : 0);
    }

    /* Issues tile n0 .. n0 + BN - 1 (FULL: every key below lk) into the K and V stages at sk, sv; paged,
     * ids holds the pages of this warp's rows, from row wrows of the tile (fetch_page_ids). Returns
     * whether one of this thread's rows below lk is on a page outside the pool. */
    template <bool FULL>
    __device__ __forceinline__ bool issue(const fw_srv_params &p, int n0, int wrows, int lk, uint32_t sk, uint32_t sv,
                                          const int32_t *ids) const
    {
        const int left = lk - n0 - t0; /* rows of this thread's run below lk (FULL: >= RPT) */
        const uint32_t krow = p.k_row_bytes, vrow = p.v_row_bytes, kpage = p.k_page_bytes, vpage = p.v_page_bytes;
        if (mode == KV_CONTIG) {
            const char *ka = mad_wide((uint32_t)n0, krow, kb), *va = mad_wide((uint32_t)n0, vrow, vb);
#pragma unroll
            for (int r = 0; r < RPT; r++) {
                const bool ok = FULL || r < left;
                row(sk, sv, r, ok ? ka + (uint64_t)krow * (uint32_t)r : reinterpret_cast<const char *>(p.k),
                    ok ? va + (uint64_t)vrow * (uint32_t)r : reinterpret_cast<const char *>(p.v), ok);
            }
            return false;
        }
        if (mode == KV_PAGE_RUN) {
            /* rows t0 .. t0 + RPT - 1 are rows rem .. rem + RPT - 1 <= page_size - 1 of one page */
            const uint32_t j0 = (uint32_t)(n0 + t0), slot = page_div(p, j0), rem = j0 - slot * (uint32_t)p.page_size;
            const int page = ids[slot - page_div(p, (uint32_t)(n0 + wrows))];
            const bool pok = page_ok(p, page);
            const uint32_t pg = pok ? (uint32_t)page : 0u;
            const char *ka = mad_wide(rem, krow, mad_wide(pg, kpage, kb));
            const char *va = mad_wide(rem, vrow, mad_wide(pg, vpage, vb));
#pragma unroll
            for (int r = 0; r < RPT; r++)
                row(sk, sv, r, ka + (uint64_t)krow * (uint32_t)r, va + (uint64_t)vrow * (uint32_t)r, pok && (FULL || r < left));
            return !pok && (FULL || left > 0);
        }
        bool bad = false;
        if (mode == KV_PAGE_ROW1) {
            int pages[RPT];
#pragma unroll
            for (int q = 0; q < RPT / 4; q++) {
                const int4 x = reinterpret_cast<const int4 *>(ids + (t0 - wrows))[q];
                pages[4 * q] = x.x;
                pages[4 * q + 1] = x.y;
                pages[4 * q + 2] = x.z;
                pages[4 * q + 3] = x.w;
            }
#pragma unroll
            for (int r = 0; r < RPT; r++) {
                const bool in = FULL || r < left, pok = page_ok(p, pages[r]), ok = in && pok;
                bad |= in && !pok;
                const uint32_t pg = ok ? (uint32_t)pages[r] : 0u;
                row(sk, sv, r, mad_wide(pg, kpage, kb), mad_wide(pg, vpage, vb), ok);
            }
        } else {
            const uint32_t s_lo = page_div(p, (uint32_t)(n0 + wrows));
#pragma unroll
            for (int r = 0; r < RPT; r++) {
                const uint32_t j = (uint32_t)(n0 + t0 + r), slot = page_div(p, j);
                const int page = ids[slot - s_lo];
                const bool in = FULL || r < left, pok = page_ok(p, page), ok = in && pok;
                bad |= in && !pok;
                const uint32_t pg = ok ? (uint32_t)page : 0u, rem = ok ? j - slot * (uint32_t)p.page_size : 0u;
                row(sk, sv, r, mad_wide(rem, krow, mad_wide(pg, kpage, kb)), mad_wide(rem, vrow, mad_wide(pg, vpage, vb)), ok);
            }
        }
        return bad;
    }
};

} /* namespace fwsrv */

#endif
