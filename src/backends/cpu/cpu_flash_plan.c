/* cpu-flash's work plan: items of one sequence's query rows x a chunk of one kv head's query heads,
 * ordered largest first, and split-KV parts for items larger than a thread's share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_flash_plan.h"

#define FLASH_WS_MAX_BYTES (1024.0 * 1024 * 1024) /* split-KV partials: fewer splits beyond this */

/* Items for query blocks of BM rows and n_gc chunks per nh kv heads (empty sequences have none). */
static int64_t count_items(const fw_problem *p, int64_t BM, int64_t n_gc, int64_t nh)
{
    int64_t blocks = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        blocks += (lq + BM - 1) / BM;
    }
    return blocks * (p->kv_heads / nh) * n_gc;
}

/* Largest first; ties in a fixed order (sequence, row, head) so the schedule is reproducible. */
static int item_cmp(const void *x, const void *y)
{
    const flash_item *a = (const flash_item *)x, *b = (const flash_item *)y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    if (a->b != b->b) return a->b < b->b ? -1 : 1;
    if (a->i0 != b->i0) return a->i0 < b->i0 ? -1 : 1;
    if (a->hk != b->hk) return a->hk < b->hk ? -1 : 1;
    return (a->g0 > b->g0) - (a->g0 < b->g0);
}

/* The keys rows i0 .. i0 + nq - 1 of a sequence see: their union [klo, khi) and the visible pairs. */
static void block_keys(const fw_problem *p, int64_t lq, int64_t lk, int64_t i0, int64_t nq, int64_t *klo,
                       int64_t *khi, double *pairs)
{
    *klo = INT64_MAX;
    *khi = INT64_MIN;
    *pairs = 0;
    for (int64_t i = i0; i < i0 + nq; i++) {
        int64_t lo, hi;
        fw_seq_key_range(p, lq, lk, i, &lo, &hi);
        if (lo >= hi) continue;
        if (lo < *klo) *klo = lo;
        if (hi > *khi) *khi = hi;
        *pairs += (double)(hi - lo);
    }
    if (*klo >= *khi) *klo = *khi = 0;
}

static int make_items(flash_plan *pl)
{
    const fw_problem *p = pl->p;
    const int64_t n_gc = (p->group + pl->gc - 1) / pl->gc;
    pl->n_items = count_items(p, pl->BM, n_gc, pl->nh);
    pl->items = (flash_item *)fw_malloc((size_t)(pl->n_items > 0 ? pl->n_items : 1) * sizeof(flash_item));
    if (!pl->items) return 0;
    int64_t n = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        const int64_t lk = fw_seq_k_len(p, b);
        for (int64_t i0 = 0; i0 < lq; i0 += pl->BM) {
            flash_item it;
            memset(&it, 0, sizeof it);
            it.b = b; it.i0 = i0; it.lq = lq; it.lk = lk;
            it.nq = i0 + pl->BM <= lq ? pl->BM : lq - i0;
            double pairs;
            block_keys(p, lq, lk, i0, it.nq, &it.klo, &it.khi, &pairs);
            for (int64_t hk = 0; hk < p->kv_heads; hk += pl->nh)
                for (int64_t g0 = 0; g0 < p->group; g0 += pl->gc) {
                    it.hk = hk;
                    it.g0 = g0;
                    it.ng = g0 + pl->gc <= p->group ? pl->gc : p->group - g0;
                    it.cost = pairs * (double)(it.ng * pl->nh);
                    pl->items[n++] = it;
                }
        }
    }
    qsort(pl->items, (size_t)n, sizeof(flash_item), item_cmp);
    return 1;
}

/* Split-KV: an item above a thread's share of the work gets about 2·threads·share parts (the dense
 * rule of equal items: 2·threads / items each when there are fewer items than threads); cfg->splits
 * forces a count. Parts never outnumber an item's key tiles. */
static void choose_splits(flash_plan *pl, const fw_config *cfg, int threads)
{
    double total = 0;
    for (int64_t i = 0; i < pl->n_items; i++) total += pl->items[i].cost;
    for (int64_t i = 0; i < pl->n_items; i++) {
        flash_item *it = &pl->items[i];
        const int64_t tiles = (it->khi - it->klo + pl->BN - 1) / pl->BN;
        int64_t ns = 1;
        if (cfg && cfg->splits > 0) ns = cfg->splits;
        else if (total > 0 && it->cost * threads > total) ns = (int64_t)(2.0 * threads * it->cost / total + 0.999999);
        if (ns > tiles) ns = tiles;
        it->nsplit = ns < 1 ? 1 : ns;
    }
    for (;;) {
        double bytes = 0;
        for (int64_t i = 0; i < pl->n_items; i++)
            if (pl->items[i].nsplit > 1)
                bytes += (double)pl->items[i].nsplit * (double)(pl->nh * pl->items[i].ng * pl->items[i].nq) *
                         (double)(pl->D + 1) * 4.0;
        if (bytes <= FLASH_WS_MAX_BYTES) break;
        for (int64_t i = 0; i < pl->n_items; i++) pl->items[i].nsplit /= pl->items[i].nsplit > 1 ? 2 : 1;
    }
}

fw_status fw_flash_plan_make(flash_plan *pl, const fw_config *cfg, int threads, char *err, size_t err_len)
{
    const fw_problem *p = pl->p;
    /* block_m = 0 (the default config) means: the largest of 256, 128, 64, 32 that still gives every
     * thread 4 items; below that, split-KV makes up the parallelism. */
    int64_t bm = cfg && cfg->block_m > 0 ? cfg->block_m : 256;
    if (bm > FLASH_MAX_ITEM_ROWS) bm = FLASH_MAX_ITEM_ROWS;
    const int64_t max_q = p->seqlen_q > 0 ? p->seqlen_q : 1;
    for (;;) {
        pl->BM = bm < max_q ? bm : max_q;
        /* GQA: as many heads of a group per item as fit FLASH_MAX_ITEM_ROWS rows */
        int64_t gc = FLASH_MAX_ITEM_ROWS / pl->BM;
        if (gc < 1) gc = 1;
        if (gc > p->group) gc = p->group;
        pl->gc = gc;
        const int64_t n = count_items(p, pl->BM, (p->group + gc - 1) / gc, 1);
        if ((cfg && cfg->block_m > 0) || bm <= 32 || n >= 4 * (int64_t)threads) break;
        bm /= 2;
    }
    pl->max_rows = pl->gc * pl->BM;
    pl->head_panels = (pl->max_rows + pl->PR - 1) / pl->PR;
    /* Decode (one panel a kv head) over keys whose rows hold every kv head, as FlashAttention's (B, L, H_kv, D)
     * caches do: an item takes all the kv heads and reads each key tile's rows whole, head after head. One
     * head's slice of every row alone (512 of 4096 bytes at 32/8 heads, D = 128, f32) gives the hardware
     * prefetcher nothing to follow: a bare read of that pattern ran at 0.5-0.6x whole rows on 2 cores. */
    const int interleaved = p->k_stride[1] < p->k_stride[2] && p->v_stride[1] < p->v_stride[2];
    pl->nh = pl->head_panels == 1 && p->kv_heads > 1 && interleaved ? p->kv_heads : 1;
    pl->max_panels = pl->nh * pl->head_panels;
    if (!make_items(pl)) goto oom;
    choose_splits(pl, cfg, threads);

    int64_t ws_rows = 0;
    pl->n_units = 0;
    pl->n_split_items = 0;
    for (int64_t i = 0; i < pl->n_items; i++) {
        flash_item *it = &pl->items[i];
        pl->n_units += it->nsplit;
        if (it->nsplit > 1) {
            it->ws_row = ws_rows;
            ws_rows += it->nsplit * pl->nh * it->ng * it->nq;
            pl->n_split_items++;
        }
    }
    pl->units = (flash_unit *)fw_malloc((size_t)(pl->n_units > 0 ? pl->n_units : 1) * sizeof(flash_unit));
    pl->split_items = (int64_t *)fw_malloc((size_t)(pl->n_split_items > 0 ? pl->n_split_items : 1) * sizeof(int64_t));
    if (!pl->units || !pl->split_items) goto oom;
    int64_t u = 0, s = 0;
    for (int64_t i = 0; i < pl->n_items; i++) {
        for (int64_t part = 0; part < pl->items[i].nsplit; part++) pl->units[u++] = (flash_unit){i, part};
        if (pl->items[i].nsplit > 1) pl->split_items[s++] = i;
    }
    if (ws_rows > 0) {
        pl->ws_o = (float *)fw_malloc((size_t)(ws_rows * pl->D) * sizeof(float));
        pl->ws_lse = (float *)fw_malloc((size_t)ws_rows * sizeof(float));
        if (!pl->ws_o || !pl->ws_lse) {
            fw_flash_plan_free(pl);
            fw_why(err, err_len, "cpu-flash: no memory for the split-KV workspace (%lld rows)", (long long)ws_rows);
            return FW_ERR_OUT_OF_MEMORY;
        }
    }
    return FW_OK;
oom:
    fw_flash_plan_free(pl);
    fw_why(err, err_len, "cpu-flash: no memory for the work list");
    return FW_ERR_OUT_OF_MEMORY;
}

void fw_flash_plan_free(flash_plan *pl)
{
    fw_free(pl->items); fw_free(pl->units); fw_free(pl->split_items); fw_free(pl->ws_o); fw_free(pl->ws_lse);
    pl->items = NULL; pl->units = NULL; pl->split_items = NULL; pl->ws_o = pl->ws_lse = NULL;
}
