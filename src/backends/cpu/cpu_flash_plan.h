/* cpu-flash's division of one call into work: items (query rows x a chunk of a kv head's query heads,
 * of one sequence), their split-KV parts, and the order the threads take them in. The driver that
 * runs the units is cpu_flash.c; this is what it runs. */
#ifndef FW_CPU_FLASH_PLAN_H
#define FW_CPU_FLASH_PLAN_H

#include <stdint.h>
#include "cpu_common.h"
#include "flash_kernels.h"

#define FLASH_MAX_ITEM_ROWS 512 /* rows of one item: block_m x group chunk, bounds per-thread memory */
#define FLASH_DEFAULT_BN 64

/* One item: nq query rows from row i0 of sequence b, for heads hk'·group + g0 .. + ng - 1 of each kv head hk'
 * from hk to hk + nh - 1 (flash_plan.nh). */
typedef struct flash_item {
    int64_t b, i0, nq;
    int64_t lq, lk;      /* the sequence's query and key counts */
    int64_t klo, khi;    /* keys any of its rows sees: [klo, khi), empty when klo >= khi */
    int64_t hk, g0, ng;
    int64_t nsplit;      /* parts its key tiles are cut into (1: no split-KV) */
    int64_t ws_row;      /* nsplit > 1: first row of its partials in the workspace */
    double cost;         /* visible (row, key) pairs */
} flash_item;

typedef struct flash_unit {
    int64_t item, part;
} flash_unit;

/* The shape of the work, fixed for one call. */
typedef struct flash_plan {
    const fw_problem *p;
    const fw_flash_isa *isa;
    fw_flash_panel_fn panel;
    int64_t D, dp, PR, BM, BN, gc;   /* gc: heads per group chunk */
    int64_t nh;                      /* kv heads an item covers (1, or all where heads share each key's row) */
    int64_t head_panels;             /* panels of one kv head's rows in an item */
    int64_t max_rows, max_panels;    /* per item: rows of one kv head, panels of all its kv heads */
    flash_item *items;               /* largest first */
    int64_t n_items;
    flash_unit *units;               /* (item, part) in the order threads take them */
    int64_t n_units;
    int64_t *split_items;            /* the items with nsplit > 1, merged after the units */
    int64_t n_split_items;
    float *ws_o, *ws_lse;            /* split-KV partials: [ws rows][D] and [ws rows] */
} flash_plan;

/* Fills pl's block sizes, items, splits and units for `threads` (pl->p, isa, D, dp, PR, BN set by the
 * caller), and allocates the split-KV workspace. cfg: block_m (0 = adaptive) and splits (0 = by the
 * work). FW_OK, or FW_ERR_OUT_OF_MEMORY with the message in err. */
fw_status fw_flash_plan_make(flash_plan *pl, const fw_config *cfg, int threads, char *err, size_t err_len);
void fw_flash_plan_free(flash_plan *pl);

#endif
