/* The f32 forward family (backend cuda-flash-f32): its kernels' parameters, the launch plan the heuristics hand
 * a launch, and its kernel records.
 *
 * A record is one compiled configuration: a kernel (the exact CUDA-core kernel, mma.sync tf32/3xtf32, or one of
 * the Hopper wgmma kernels), its tile shape and options, and per precision form its launch function and shared
 * memory. The records are generated with their instantiation files (scripts/gen_kernels.py from
 * src/backends/cuda/kernels.tsv into generated/); heuristics.cu chooses among them and plans the launch,
 * cuda_flash_f32.cu launches what it chose. */
#ifndef FW_F32_PARAMS_H
#define FW_F32_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/knobs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel arguments (plain C struct, passed by value). */
typedef struct fw_f32_params {
    const float *q, *k, *v;
    float *o, *lse;
    long long qs[3], ks[3], vs[3], os[3]; /* batch, head, seq strides in elements */
    long long diag, wl, wr;               /* fw_problem's normalised window */
    int H, group, Lq, Lk, D;
    float scale_log2; /* scale · log2(e) */
    int vec16;        /* q/k/v 16-byte aligned with strides multiple of 4: 16-byte copies */
    int uneven;       /* the exact kernel's grid is heads first (fw_f32_plan.heads_first) */
    int sms;          /* the device's SM count (0: not known) */
    int delay;                      /* a staggered start (fw_f32_plan): blocks delay_from .. delay_to - 1, in launch */
    long long delay_from, delay_to; /* order, sleep delay SM cycles before their first copy; 0 = none */
} fw_f32_params;

/* What the heuristics decide for one launch of a record beyond the record itself (heuristics.cu). */
typedef struct fw_f32_plan {
    int heads_first;                /* exact: grid (heads, batch, query blocks), an uneven mask's heavy blocks first */
    int delay;                      /* exact, wg1: the staggered start (cycles, 0 = none) ... */
    long long delay_from, delay_to; /* ... of blocks delay_from .. delay_to - 1 in launch order */
    int kv_splits;                  /* wg1: key ranges a query block (1: no split) */
    int stage0;                     /* wg1: tile 0's K, Q and V waited for one by one */
    int grid_blocks;                /* ws persistent: blocks in the grid, at most one an SM (-1: the SM count is not known) */
} fw_f32_plan;

/* Host-side launch of one record in one precision form; returns a cudaError_t. k: the context's knobs (the
 * workspace cache's size). */
typedef cudaError_t (*fw_f32_launch_fn)(const fw_f32_params *a, const fw_f32_plan *plan, int batch, cudaStream_t stream,
                                        const fw_knobs *k);

typedef enum fw_f32_kernel {
    FW_F32_EXACT = 0, /* f32 on CUDA cores (kernel_exact.cuh): sm_80 machine code, runs on 8.0+ */
    FW_F32_MMA = 1,   /* mma.sync m16n8k8 tf32/3xtf32 (kernel_mma.cuh): sm_80 */
    FW_F32_WG = 2,    /* wgmma, two warpgroups that all copy and split (kernel_wg.cuh): sm_90a, 9.0 only */
    FW_F32_WG1 = 3,   /* wgmma, one warpgroup a block, split-KV (kernel_wg1.cuh): sm_90a */
    FW_F32_WS = 4     /* wgmma, split tiles bulk-copied to two ping-pong consumers (kernel_ws.cuh): sm_90a */
} fw_f32_kernel;

/* A record's launch in one precision form (NULL, 0 where the record has no such form). */
typedef struct fw_f32_form {
    fw_f32_launch_fn launch;
    size_t smem; /* dynamic shared memory, bytes */
} fw_f32_form;

typedef struct fw_f32_record {
    const char *name;     /* fw_config.name without the precision prefix (tuning tables store it) */
    fw_f32_kernel kernel;
    int arch;             /* 80: runs on compute capability 8.0 and later; 90: sm_90a, on 9.0 only */
    int d;                /* padded head dim: 32, 64, 128 or 256 */
    int bm, bn, warps, stages;
    int tm;               /* exact: query rows a thread */
    int few_blocks;       /* exact: k > 0, the default where the query blocks are at most k an SM (smallest bm wins) */
    int local_tiles;      /* ws: the first key tiles each block splits itself (0: a pre-pass or tickets) */
    int persistent;       /* ws: one block an SM loops over the query blocks */
    int short_keys;       /* ws: the persistent short-key form (FW_F32_SHORT_TILES) */
    const char *fallback; /* ws short form: the record that runs where the keys are longer (else NULL) */
    fw_f32_form exact, tf32, tf32x3;
} fw_f32_record;

/* The short-key form of the persistent wgmma kernel runs keys of at most this many 64-key tiles: its split warps
 * get 56 registers instead of 24 (a key tile split in ~9 us instead of ~11), which the consumers pay with
 * 3xtf32's separate P·V accumulator (kernel_ws.cuh): without it the tensor cores' accumulation into O erred 3.8e-6
 * at 8 key tiles, 7.6e-6 at 16 and 1.2e-5 at 32. */
#define FW_F32_SHORT_TILES 8

/* generated/f32_records.cu: every record, head dims ascending, in the table's order within one. */
extern const fw_f32_record fw_f32_records[];
extern const int fw_f32_nrecords;

#ifdef __cplusplus
}
#endif
#endif
