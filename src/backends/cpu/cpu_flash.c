/* cpu-flash: tiled attention with an online softmax, never more than one tile of scores alive.
 *
 * Work is cut into items (cpu_flash_plan.c): block_m query rows of one sequence for a chunk of the
 * query heads that share one kv head. An item's rows are the query rows of every head in its chunk,
 * so each key/value tile is read once per item and reused by all of them (GQA decode: the query
 * heads of a kv head are one item of group rows; where a key's row holds every kv head, as in
 * FlashAttention's (B, L, H_kv, D) caches, one decode item takes all the kv heads and reads each
 * tile's rows whole, one kv head after another): small f32 tiles in place (any row stride), other
 * tiles (f16/bf16, large D, the last partial tile, tiles across cache pages) converted into a packed
 * float buffer. Items run on OpenMP threads (dynamic schedule, the largest first). An item larger
 * than a thread's share of the work has its key tiles split (split-KV): the parts write (O/l, lse)
 * to a workspace and a second pass merges them with a log-sum-exp. Dense, ragged and KV-cache
 * problems take the same path through the per-sequence accessors of core/problem.h. Query rows go
 * through the micro-kernels in panels of the ISA's register-tile height; the micro-kernels are per
 * ISA (flash_kernels.h, one source in flash_kernel_impl.h), this file is the one driver for all. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_common.h"
#include "cpu_features.h"
#include "cpu_flash_plan.h"

#define FLASH_DIRECT_MAX_BYTES (32 * 1024) /* K+V f32 tiles up to this size are read in place */
#define FLASH_HEADS_BN 8                   /* keys a tile of items over every kv head */

static const fw_flash_isa *flash_isa(void)
{
    switch (fw_cpu_simd()) {
    case FW_SIMD_AVX512: return &fw_flash_isa_avx512;
    case FW_SIMD_AVX2: return &fw_flash_isa_avx2;
    default: return &fw_flash_isa_scalar;
    }
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static int flash_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->device.kind != FW_DEVICE_CPU) return fw_why(why, why_len, "tensors are not on the cpu");
    if (p->head_dim < 1 || p->head_dim > FW_MAX_HEAD_DIM)
        return fw_why(why, why_len, "head_dim %lld is outside cpu-flash's 1..%d", (long long)p->head_dim,
                      FW_MAX_HEAD_DIM);
    if (p->precision != FW_PRECISION_EXACT)
        return fw_why(why, why_len, "cpu-flash computes exact float32 only; no reduced precision mode");
    return 1;
}

/* Search space: block_m (query rows per head per item; 0 = adaptive) x block_n (keys per tile),
 * then forced split counts at the default tiles. Entry 0 is the default. */
static int flash_configs(const fw_problem *p, fw_config *out, int max)
{
    static const int bms[] = {0, 256, 128, 64, 32};
    static const int bns[] = {64, 32, 128, 256};
    static const int splits[] = {2, 4, 8, 16};
    int n = 0;
    (void)p;
    for (size_t i = 0; i < sizeof bms / sizeof bms[0]; i++)
        for (size_t j = 0; j < sizeof bns / sizeof bns[0] && n < max; j++) {
            fw_config *c = &out[n++];
            memset(c, 0, sizeof *c);
            c->block_m = bms[i];
            c->block_n = bns[j];
            if (bms[i]) snprintf(c->name, sizeof c->name, "bm%d-bn%d", bms[i], bns[j]);
            else snprintf(c->name, sizeof c->name, "bmauto-bn%d", bns[j]);
        }
    for (size_t s = 0; s < sizeof splits / sizeof splits[0] && n < max; s++) {
        fw_config *c = &out[n++];
        memset(c, 0, sizeof *c);
        c->block_m = 0;
        c->block_n = FLASH_DEFAULT_BN;
        c->splits = splits[s];
        snprintf(c->name, sizeof c->name, "bmauto-bn%d-split%d", FLASH_DEFAULT_BN, splits[s]);
    }
    return n;
}

/* Per-thread buffers. */
typedef struct flash_scratch {
    float *q, *o, *m, *l, *alpha, *s, *k, *v, *row;
    int64_t *lo, *hi;                /* per row of the item, absolute key indices */
    int64_t *p_lo, *p_hi, *p_maxlo, *p_minhi; /* per panel: union range and the mask test */
    int32_t *rlo, *rhi;              /* per panel row, relative to the tile */
    const char **next_rows;          /* the next tile's K and V rows (fw_flash_panel.next_rows) */
    int64_t *koff, *voff, *nkoff, *nvoff; /* element offsets of this tile's and the next tile's keys */
} flash_scratch;

/* A thread's buffers: the bytes of its slice (cursor NULL), or carved from it. */
static size_t scratch_carve(flash_scratch *s, char **cursor, const flash_plan *pl)
{
    const int64_t rows = pl->max_panels * pl->PR, dp = pl->dp, BN = pl->BN;
    const struct { void **dst; int64_t n; size_t es; } part[] = {
        {(void **)&s->q, rows * pl->D, sizeof(float)}, {(void **)&s->o, rows * dp, sizeof(float)},
        {(void **)&s->m, rows, sizeof(float)},         {(void **)&s->l, rows, sizeof(float)},
        {(void **)&s->alpha, pl->PR, sizeof(float)},   {(void **)&s->s, BN * pl->PR, sizeof(float)},
        {(void **)&s->k, BN * dp, sizeof(float)},      {(void **)&s->v, BN * dp, sizeof(float)},
        {(void **)&s->row, dp, sizeof(float)},         {(void **)&s->lo, rows, sizeof(int64_t)},
        {(void **)&s->hi, rows, sizeof(int64_t)},      {(void **)&s->p_lo, pl->max_panels * 4, sizeof(int64_t)},
        {(void **)&s->rlo, pl->PR * 2, sizeof(int32_t)}, {(void **)&s->next_rows, 2 * BN, sizeof(char *)},
        {(void **)&s->koff, 4 * BN, sizeof(int64_t)},
    };
    size_t bytes = 0;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        if (cursor) *part[i].dst = fw_cpu_carve(cursor, part[i].n, part[i].es);
        bytes = fw_cpu_bytes_add(bytes, fw_cpu_bytes(part[i].n, part[i].es));
    }
    if (cursor) {
        s->p_hi = s->p_lo + pl->max_panels;
        s->p_maxlo = s->p_hi + pl->max_panels;
        s->p_minhi = s->p_maxlo + pl->max_panels;
        s->rhi = s->rlo + pl->PR;
        s->voff = s->koff + BN;
        s->nkoff = s->voff + BN;
        s->nvoff = s->nkoff + BN;
    }
    return bytes;
}

/* Keys j0 .. j0 + n - 1 lie at one row stride from the first (a paged cache's tile within a page). */
static int keys_contiguous(const fw_problem *p, int64_t j0, int64_t n)
{
    return !p->block_table || j0 / p->page_size == (j0 + n - 1) / p->page_size;
}

/* Element offsets of keys j0 .. j0 + n - 1 (sequence b, kv head hk) in k or v: one table lookup per
 * page of a paged cache rather than a division per key. */
static void tile_offsets(const fw_problem *p, const int64_t stride[4], int64_t b, int64_t hk, int64_t j0, int64_t n,
                         int64_t *off)
{
    for (int64_t j = 0; j < n;) {
        const int64_t first = fw_key_offset(p, stride, b, hk, j0 + j);
        int64_t run = n - j;
        if (p->block_table) {
            const int64_t left = p->page_size - (j0 + j) % p->page_size;
            if (left < run) run = left;
        }
        for (int64_t r = 0; r < run; r++) off[j + r] = first + r * stride[2];
        j += run;
    }
}

/* One work unit: key tiles of part `part` of item `item`. */
static void run_unit(const flash_plan *pl, flash_scratch *sc, int64_t item, int64_t part)
{
    const fw_problem *p = pl->p;
    const fw_flash_isa *isa = pl->isa;
    const flash_item *it = &pl->items[item];
    const int64_t D = pl->D, dp = pl->dp, PR = pl->PR, BN = pl->BN;
    const int64_t b = it->b, hk = it->hk, i0 = it->i0, nq = it->nq, g0 = it->g0, ng = it->ng, nh = pl->nh;
    /* a kv head's rows (hrows of them, rho = g * nq + (i - i0)) fill hpan panels; kv head hh of the item
     * (kv head hk + hh) has the panels from hh * hpan, its rows from hh * hpan * PR */
    const int64_t hrows = ng * nq, hpan = (hrows + PR - 1) / PR, npan = nh * hpan, hspan = hpan * PR;

    /* pack Qᵀ panels and the per-row key ranges */
    const int64_t klo = it->klo, khi = it->khi;
    for (int64_t r = 0; r < npan * PR; r++) {
        float *qp = sc->q + (r / PR) * D * PR + r % PR;
        const int64_t hh = r / hspan, rho = r % hspan;
        if (rho >= hrows) {
            for (int64_t d = 0; d < D; d++) qp[d * PR] = 0.0f;
            sc->lo[r] = INT64_MIN / 4;
            sc->hi[r] = INT64_MAX / 4;
            continue;
        }
        const int64_t h = (hk + hh) * p->group + g0 + rho / nq, i = i0 + rho % nq;
        isa->pack(sc->row, p->q, p->dtype, fw_row_offset(p, p->q_stride, b, h, i), D, D, 0);
        for (int64_t d = 0; d < D; d++) qp[d * PR] = sc->row[d];
        fw_seq_key_range(p, it->lq, it->lk, i, &sc->lo[r], &sc->hi[r]);
    }
    for (int64_t pi = 0; pi < npan; pi++) {
        int64_t plo = INT64_MAX, phi = INT64_MIN, maxlo = INT64_MIN, minhi = INT64_MAX;
        for (int64_t r = pi * PR; r < pi * PR + PR && r % hspan < hrows; r++) {
            if (sc->lo[r] > maxlo) maxlo = sc->lo[r];
            if (sc->hi[r] < minhi) minhi = sc->hi[r];
            if (sc->lo[r] >= sc->hi[r]) continue;
            if (sc->lo[r] < plo) plo = sc->lo[r];
            if (sc->hi[r] > phi) phi = sc->hi[r];
        }
        if (plo >= phi) plo = phi = 0; /* no row of the panel sees any key: skipped below */
        sc->p_lo[pi] = plo; sc->p_hi[pi] = phi; sc->p_maxlo[pi] = maxlo; sc->p_minhi[pi] = minhi;
    }
    for (int64_t r = 0; r < npan * PR; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->o, 0, (size_t)(npan * PR * dp) * sizeof(float));

    /* this part's key tiles */
    const int64_t ntiles = khi > klo ? (khi - klo + BN - 1) / BN : 0;
    const int64_t t0 = ntiles * part / it->nsplit, t1 = ntiles * (part + 1) / it->nsplit;
    fw_flash_panel a;
    memset(&a, 0, sizeof a);
    a.s = sc->s; a.alpha = sc->alpha;
    a.lo = sc->rlo; a.hi = sc->rhi;
    a.d = D; a.dp = dp; a.scale = (float)((double)p->scale * 1.4426950408889634);
    const int64_t ka = isa->key_align;
    /* An item of one panel a kv head (decode: the query heads of a kv head) reads each tile once: the
     * work is memory-bound. Its f32 tiles are read in place. Over one kv head, the next tile's rows
     * are fetched into L2 while this one is computed (B=4, 32/8 heads, D=128, 8192 keys, head-major
     * cache, 2 cores: 40-50% of the copy bandwidth with packed tiles, prefetched or not, or in place
     * without the fetch; 59-62% in place with it). Over every kv head the rows are read whole, which
     * the hardware prefetcher follows: fetching as well cost 5-30 points there. */
    const int streaming = hpan == 1;
    const int64_t es = (int64_t)fw_dtype_size(p->dtype);
    for (int64_t t = t0; t < t1; t++) {
        const int64_t j0 = klo + t * BN;
        const int64_t n = (j0 + BN <= khi ? BN : khi - j0), npad = round_up(n, ka);
        for (int64_t hh = 0; hh < nh; hh++) { /* the item's kv heads in turn over the tile */
            const int64_t hkh = hk + hh;
            tile_offsets(p, p->k_stride, b, hkh, j0, n, sc->koff);
            tile_offsets(p, p->v_stride, b, hkh, j0, n, sc->voff);
            a.next_rows = NULL;
            if (streaming && nh == 1 && t + 1 < t1) {
                const int64_t nn = j0 + n + BN <= khi ? BN : khi - j0 - n;
                tile_offsets(p, p->k_stride, b, hkh, j0 + n, nn, sc->nkoff);
                tile_offsets(p, p->v_stride, b, hkh, j0 + n, nn, sc->nvoff);
                for (int64_t j = 0; j < nn; j++) {
                    sc->next_rows[2 * j] = (const char *)p->k + sc->nkoff[j] * es;
                    sc->next_rows[2 * j + 1] = (const char *)p->v + sc->nvoff[j] * es;
                }
                a.next_rows = sc->next_rows;
                a.next_n = (int)nn;
                a.next_row_bytes = D * es;
            }
            /* Small f32 tiles wholly inside the tensor are read in place (no copy); others are packed.
             * Measured on Zen 3 (2 threads, L=2048): in place is ~5% faster at D=64 (K+V tile 32 KiB),
             * packing ~15-20% faster at D=128, where the copy's streaming read beats the kernels'
             * first touch of a 64 KiB tile from L3. */
            const int direct_k = p->dtype == FW_F32 && npad == n && (streaming || 2 * n * D * 4 <= FLASH_DIRECT_MAX_BYTES) &&
                                 keys_contiguous(p, j0, n);
            const int direct_v = direct_k && dp == D;
            int v_bad = -1; /* unknown until a masked panel needs it */
            if (direct_k) {
                a.k = (const float *)p->k + sc->koff[0];
                a.ldk = p->k_stride[2];
            } else {
                for (int64_t j = 0; j < npad; j++) {
                    if (j < n) isa->pack(sc->k + j * dp, p->k, p->dtype, sc->koff[j], D, dp, 0);
                    else memset(sc->k + j * dp, 0, (size_t)dp * sizeof(float));
                }
                a.k = sc->k;
                a.ldk = dp;
            }
            if (direct_v) {
                a.v = (const float *)p->v + sc->voff[0];
                a.ldv = p->v_stride[2];
            } else {
                v_bad = 0;
                for (int64_t j = 0; j < npad; j++) {
                    if (j < n) v_bad |= isa->pack(sc->v + j * dp, p->v, p->dtype, sc->voff[j], D, dp, 1);
                    else memset(sc->v + j * dp, 0, (size_t)dp * sizeof(float));
                }
                a.v = sc->v;
                a.ldv = dp;
            }
            for (int64_t pi = hh * hpan; pi < (hh + 1) * hpan; pi++) {
                const int64_t plo = sc->p_lo[pi], phi = sc->p_hi[pi];
                const int64_t a0 = (plo > j0 ? plo : j0) - j0, a1 = (phi < j0 + n ? phi : j0 + n) - j0;
                if (a1 <= a0) continue;
                const int64_t k0 = a0 / ka * ka, k1r = round_up(a1, ka), k1 = k1r < npad ? k1r : npad;
                a.k0 = (int)k0;
                a.k1 = (int)k1;
                a.mask = sc->p_maxlo[pi] > j0 + k0 || sc->p_minhi[pi] < j0 + k1;
                if (a.mask) {
                    for (int64_t r = 0; r < PR; r++) {
                        const int64_t lo = sc->lo[pi * PR + r] - j0, hi = sc->hi[pi * PR + r] - j0;
                        sc->rlo[r] = (int32_t)(lo < -1 ? -1 : (lo > BN + 1 ? BN + 1 : lo));
                        sc->rhi[r] = (int32_t)(hi < -1 ? -1 : (hi > BN + 1 ? BN + 1 : hi));
                    }
                    if (v_bad < 0) { /* in-place V: scan the tile once for inf/NaN */
                        v_bad = 0;
                        for (int64_t j = 0; j < n; j++) v_bad |= isa->pack(sc->row, p->v, p->dtype, sc->voff[j], D, dp, 1);
                    }
                    a.v_bad = v_bad;
                }
                const int64_t left = hrows - (pi - hh * hpan) * PR;
                a.rows = (int)(left < PR ? left : PR);
                a.q = sc->q + pi * D * PR;
                a.o = sc->o + pi * PR * dp;
                a.m = sc->m + pi * PR;
                a.l = sc->l + pi * PR;
                pl->panel(&a);
            }
        }
    }

    /* finish: O / l and lse, to the output or to this part's workspace */
    for (int64_t x = 0; x < nh * hrows; x++) { /* x: the item's rows without the padding */
        const int64_t hh = x / hrows, rho = x % hrows, r = hh * hspan + rho;
        const int64_t h = (hk + hh) * p->group + g0 + rho / nq, i = i0 + rho % nq;
        const float l = sc->l[r];
        const float inv = l == 0.0f ? 0.0f : 1.0f / l; /* l is 0 only when no key was visible */
        const float lse = l == 0.0f ? -INFINITY : (float)(((double)sc->m[r] + log2((double)l)) * 0.6931471805599453);
        float *orow = sc->o + r * dp;
        for (int64_t d = 0; d < D; d++) orow[d] *= inv;
        if (it->nsplit == 1) {
            fw_cpu_store_row(p->o, p->dtype, fw_row_offset(p, p->o_stride, b, h, i), orow, D);
            if (p->lse) p->lse[fw_lse_index(p, b, h, i)] = lse;
        } else {
            const int64_t w = it->ws_row + part * nh * hrows + x;
            memcpy(pl->ws_o + w * D, orow, (size_t)D * sizeof(float));
            pl->ws_lse[w] = lse;
        }
    }
}

/* Split-KV merge of a split item's rows: lse = log Σ e^lse_s, O = Σ e^(lse_s - lse) O_s. */
static void merge_item(const flash_plan *pl, int64_t item, float *orow)
{
    const fw_problem *p = pl->p;
    const flash_item *it = &pl->items[item];
    const int64_t D = pl->D, S = it->nsplit, hrows = it->ng * it->nq, rows = pl->nh * hrows;
    for (int64_t rho = 0; rho < rows; rho++) {
        const float *ws_lse = pl->ws_lse + it->ws_row + rho;
        const float *ws_o = pl->ws_o + (it->ws_row + rho) * D;
        float mx = -INFINITY;
        int nan = 0;
        for (int64_t s = 0; s < S; s++) {
            const float x = ws_lse[s * rows];
            if (x != x) nan = 1;
            else if (x > mx) mx = x;
        }
        float lse;
        for (int64_t d = 0; d < D; d++) orow[d] = 0.0f;
        if (nan) {
            lse = NAN;
            for (int64_t d = 0; d < D; d++) orow[d] = NAN;
        } else if (mx == -INFINITY) {
            lse = -INFINITY;
        } else {
            float wsum = 0.0f;
            for (int64_t s = 0; s < S; s++) {
                const float x = ws_lse[s * rows];
                if (x == -INFINITY) continue; /* a part that saw no key adds nothing (not even 0·NaN) */
                const float w = expf(x - mx);
                wsum += w;
                const float *os = ws_o + s * rows * D;
                for (int64_t d = 0; d < D; d++) orow[d] += w * os[d];
            }
            const float inv = 1.0f / wsum;
            for (int64_t d = 0; d < D; d++) orow[d] *= inv;
            lse = mx + logf(wsum);
        }
        const int64_t hr = rho % hrows, h = (it->hk + rho / hrows) * p->group + it->g0 + hr / it->nq, i = it->i0 + hr % it->nq;
        fw_cpu_store_row(p->o, p->dtype, fw_row_offset(p, p->o_stride, it->b, h, i), orow, D);
        if (p->lse) p->lse[fw_lse_index(p, it->b, h, i)] = lse;
    }
}

static fw_status flash_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    flash_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.p = p;
    pl.isa = flash_isa();
    pl.D = p->head_dim;
    pl.dp = round_up(pl.D, pl.isa->dim_align);
    pl.PR = pl.isa->panel_rows;
    pl.panel = pl.D == 64 && pl.dp == 64 ? pl.isa->panel_d64
             : pl.D == 128 && pl.dp == 128 ? pl.isa->panel_d128 : pl.isa->panel_any;
    const int threads = ex->threads > 0 ? ex->threads : 1;
    int64_t bn = cfg && cfg->block_n > 0 ? cfg->block_n : FLASH_DEFAULT_BN;
    if (bn > 4096) bn = 4096;
    pl.BN = round_up(bn, pl.isa->key_align);
    fw_status status = fw_flash_plan_make(&pl, cfg, threads, ex->err, ex->err_len);
    if (status != FW_OK) return status;
    /* Streaming items (one panel a kv head: decode). Those over every kv head read each tile's rows whole, head
     * after head, in tiles of 8 keys: the rows' other heads, which the hardware fetches with the first, are
     * still in L1 when their turn comes (B=4, 32/8 heads, 8192 keys, D=128, 2 cores, AVX-512 and AVX2 alike,
     * contiguous cache: 8 keys 76-78% of the copy bandwidth, 16 keys 79-80% but 60-66% in pages of 16 where
     * 8 keys keep 75-78%, 32 keys 55-65%, 64 keys 33-38%). Small pages: one page per tile,
     * read in place, rather than tiles across pages that must be copied (page size 16, one kv head an item:
     * 45-47% against 41-44%). */
    if (pl.nh > 1) pl.BN = round_up(FLASH_HEADS_BN, pl.isa->key_align); /* nh > 1: one panel a kv head */
    if (p->block_table && pl.head_panels == 1 && p->page_size % pl.isa->key_align == 0 && p->page_size < pl.BN)
        pl.BN = p->page_size;
    /* every buffer is taken before anything is written (the cache's new rows included) */
    const int nt = fw_cpu_threads(ex, pl.n_units > pl.n_split_items ? pl.n_units : pl.n_split_items);
    flash_scratch sc;
    fw_cpu_scratch scratch;
    status = fw_cpu_scratch_alloc(&scratch, nt, scratch_carve(&sc, NULL, &pl), ex, "cpu-flash");
    if (status != FW_OK) {
        fw_flash_plan_free(&pl);
        return status;
    }
    fw_cpu_kvcache_append(p);

#pragma omp parallel num_threads(nt) private(sc)
    {
        char *cur = fw_cpu_scratch_mine(&scratch);
        scratch_carve(&sc, &cur, &pl);
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < pl.n_units; u++) run_unit(&pl, &sc, pl.units[u].item, pl.units[u].part);
        if (pl.n_split_items) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t s = 0; s < pl.n_split_items; s++) merge_item(&pl, pl.split_items[s], sc.row);
        }
    }
    fw_cpu_scratch_free(&scratch);
    fw_flash_plan_free(&pl);
    return FW_OK;
}

fw_status fw_cpu_tiled_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex); /* cpu_bwd_tiled.c */

const fw_backend fw_backend_cpu_flash = {
    .name = "cpu-flash",
    .description = "tiled online-softmax attention, AVX-512/AVX2, threads and split-KV",
    .device = FW_DEVICE_CPU,
    .available = fw_cpu_available,
    .supports = flash_supports,
    .configs = flash_configs,
    .forward = flash_forward,
    .backward = fw_cpu_tiled_backward,
};
